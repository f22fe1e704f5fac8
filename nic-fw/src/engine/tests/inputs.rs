//! Bad input: the mailbox's checks, random and forged bytes, the tables' size, a command ring overrun, the error ring's wrap.

use super::*;

#[test]
fn mailbox_rejects_bad_configuration() {
    let mut net = Net::new(1, 11);
    let overlap = RegionConfig {
        ctx: 0,
        slot: 5,
        perms: RegionPerms::all(),
        va: VA_DATA + 8,
        len: 8,
        phys: 0,
    };
    assert_eq!(
        net.mailbox(0, MailboxOp::MapRegion, overlap.to_args()),
        Err(ErrorCode::BadConfig)
    );
    let no_ctx = RegionConfig { ctx: 3, ..overlap };
    assert_eq!(
        net.mailbox(0, MailboxOp::MapRegion, no_ctx.to_args()),
        Err(ErrorCode::NoContext)
    );
    assert_eq!(
        net.mailbox(0, MailboxOp::SetParam, [1, 1000, 0, 0]),
        Err(ErrorCode::BadConfig)
    );
    assert_eq!(net.mailbox(0, MailboxOp::SetParam, [1, 1024, 0, 0]), Ok(()));
    assert_eq!(
        net.mailbox(0, MailboxOp::SetParam, [9, 1, 0, 0]),
        Err(ErrorCode::BadConfig)
    );
    assert_eq!(
        net.mailbox(0, MailboxOp::UnmapRegion, [200, 0, 0, 0]),
        Err(ErrorCode::BadConfig)
    );
    assert_eq!(
        net.mailbox(0, MailboxOp::DetachContext, [0, 0, 0, 0]),
        Ok(())
    );
    assert_eq!(
        net.mailbox(0, MailboxOp::DetachContext, [0, 0, 0, 0]),
        Err(ErrorCode::NoContext)
    );
}

mod random_inputs {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]
        /// Any command bytes and any packet bytes: the engine neither panics
        /// nor stops serving; a valid put afterwards still works.
        #[test]
        fn engine_survives_arbitrary_commands_and_packets(
            cmds in proptest::collection::vec((0u8..10, proptest::collection::vec(any::<u8>(), 63)), 0..40),
            packets in proptest::collection::vec(proptest::collection::vec(any::<u8>(), 64), 0..40),
        ) {
            let mut net = Net::new(2, 12);
            for (op, body) in &cmds {
                let mut raw = [0u8; 64];
                raw[0] = *op;
                raw[1..].copy_from_slice(body);
                // Keep some blocks mostly valid so deeper paths are reached.
                if body[0] & 1 == 0 { raw[1..4].fill(0); raw[40..].fill(0); }
                net.post_raw(0, raw);
            }
            for p in &packets {
                let mut raw = [0u8; 64];
                raw.copy_from_slice(p);
                let mut h = PacketHeader::from_bytes(&raw);
                if p[0] & 1 == 0 {
                    // Valid checksum and version, so the parser's later checks run.
                    h.version = crate::abi::packet::WIRE_VERSION;
                    h.dst_node = zerocopy::little_endian::U16::new(1);
                    let b = h.to_bytes();
                    h.checksum = zerocopy::little_endian::U32::new(crate::abi::packet::checksum(&b));
                }
                net.nics[1]
                    .hardware_mut()
                    .inbox
                    .push_back((h, vec![0; (p[1] as usize) * 8], Path::Direct));
            }
            net.run(100_000);
            put_and_check(&mut net, 3000);
        }
    }
}

/// Forged packets: what an attacker on the wire can make a NIC write.
mod forged_packets {
    use super::*;
    use crate::abi::packet::{BcastPacket, DataPacket, GetRequestPacket, Packet, Route};
    use proptest::prelude::*;

    /// A read-only region of node 1 (no REMOTE_WRITE).
    const RO: u64 = 0x80000;
    const VA_RO: u64 = 0x5000_0000;
    const RO_LEN: u64 = 0x1000;
    /// The error ring: the NIC reports rejected packets there.
    const ERRS_LEN: u64 = 16 * 32;
    const KEY: u32 = 0x1234;

    /// Addresses at and across the edges of every region, and anywhere.
    fn address() -> impl Strategy<Value = u64> {
        prop_oneof![
            (0u64..0x200).prop_map(|o| VA_DATA + o),
            (0u64..0x200).prop_map(|o| VA_DATA + DATA_LEN - 0x100 + o),
            (0u64..0x200).prop_map(|o| VA_DATA - 0x100 + o),
            (0u64..0x1100).prop_map(|o| VA_RO + o),
            (0u64..0x1100).prop_map(|o| VA_WORDS + o),
            (0u64..0x100).prop_map(|o| u64::MAX - o),
            any::<u64>(),
        ]
    }

    #[derive(Clone, Debug)]
    struct Forged {
        /// 0: data, 1: broadcast, 2: get request.
        kind: u8,
        ctx: u8,
        key: u32,
        addr: u64,
        /// How far before `addr` the forged DMA starts.
        dma_back: u64,
        len: u32,
        /// How far the forged DMA runs past `addr + len` (wrapping).
        dma_past: u32,
        /// Flag bits of a data packet: last, get response, wake, queue.
        flags: u8,
        event: u32,
        /// The payload is not `len` bytes.
        short: bool,
    }

    fn forged() -> impl Strategy<Value = Forged> {
        (
            (
                0u8..3,
                prop_oneof![Just(0u8), 0u8..4],
                prop_oneof![Just(KEY), any::<u32>()],
            ),
            (address(), prop_oneof![0u64..0x100, any::<u64>()]),
            (0u32..300, prop_oneof![0u32..0x300, any::<u32>()]),
            (
                any::<u8>(),
                prop_oneof![Just(u32::MAX), 0u32..70],
                any::<u8>(),
            ),
        )
            .prop_map(
                |((kind, ctx, key), (addr, dma_back), (len, dma_past), (flags, event, short))| {
                    Forged {
                        kind,
                        ctx,
                        key,
                        addr,
                        dma_back,
                        len,
                        dma_past,
                        flags,
                        event,
                        short: short % 8 == 0,
                    }
                },
            )
    }

    impl Forged {
        fn dma_addr(&self) -> u64 {
            self.addr.wrapping_sub(self.dma_back)
        }

        fn dma_len(&self) -> u32 {
            (self.dma_back as u32)
                .wrapping_add(self.len)
                .wrapping_add(self.dma_past)
        }

        /// The packet, from node 0 to node 1, as flow packet `seq` or
        /// broadcast `id`.
        fn packet(&self, seq: u32, id: u32) -> Packet {
            let route = Route {
                src_node: 0,
                src_ctx: 0,
                dst_node: 1,
                dst_ctx: self.ctx,
                job_key: self.key,
            };
            match self.kind {
                0 => {
                    let queue = self.flags & 8 != 0;
                    Packet::Data(DataPacket {
                        route,
                        seq,
                        addr: if queue { 0 } else { self.addr },
                        len: self.len,
                        event: self.event,
                        cookie: 0,
                        last: self.flags & 1 != 0 || queue,
                        get_response: self.flags & 2 != 0 && !queue,
                        dma_addr: if queue { 0 } else { self.dma_addr() },
                        dma_len: self.dma_len(),
                        wake: self.flags & 4 != 0,
                        queue,
                        retry: false,
                        flow: 1,
                    })
                }
                1 => Packet::Bcast(BcastPacket {
                    route: Route {
                        dst_node: 0,
                        ..route
                    },
                    high_node: 1,
                    id,
                    index: 0,
                    addr: self.addr,
                    len: self.len,
                    event: self.event,
                    cookie: 0,
                    last: self.flags & 1 != 0,
                    dma_addr: self.dma_addr(),
                    dma_len: self.dma_len(),
                }),
                _ => Packet::GetRequest(GetRequestPacket {
                    route,
                    seq,
                    src_addr: self.addr,
                    dst_addr: self.dma_addr(),
                    len: self.len,
                    src_event: self.event,
                    dst_event: u32::MAX,
                    cookie: 0,
                    flow: 1,
                }),
            }
        }

        /// The bytes of node 1's memory this packet may write: its own
        /// target range, if it names context 0 with the job's key and its
        /// whole DMA lies in the remotely writable data region.
        fn may_write(&self) -> Option<core::ops::Range<u64>> {
            let writes = self.kind == 1 || (self.kind == 0 && self.flags & 8 == 0);
            let dma_end = self.dma_addr().checked_add(u64::from(self.dma_len()))?;
            let end = self.addr.checked_add(u64::from(self.len))?;
            (writes
                && self.ctx == 0
                && self.key == KEY
                && self.dma_addr() >= VA_DATA
                && dma_end <= VA_DATA + DATA_LEN
                && self.addr >= self.dma_addr()
                && end <= dma_end)
                .then(|| self.addr - VA_DATA + DATA..end - VA_DATA + DATA)
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(256))]
        /// Packets forged with valid headers and checksums, in sequence
        /// (the attacker knows the flow), naming any context, key, address,
        /// DMA range, length and flags: node 1 writes nothing outside the
        /// target ranges of packets that name its context with the job's
        /// key and a DMA wholly inside its remotely writable region. Every
        /// byte of its memory is checked, the read-only region and the
        /// completion words included (only its error ring, where it
        /// reports the rejections, may change).
        #[test]
        fn forged_packets_write_nothing_outside_a_permitted_target(
            packets in proptest::collection::vec(forged(), 1..24),
        ) {
            let mut net = Net::new(2, 40);
            let ro = RegionConfig {
                ctx: 0,
                slot: 2,
                perms: RegionPerms::LOCAL_READ | RegionPerms::REMOTE_READ,
                va: VA_RO,
                len: RO_LEN,
                phys: RO,
            };
            prop_assert_eq!(net.mailbox(1, MailboxOp::MapRegion, ro.to_args()), Ok(()));
            let before = net.mem(1, 0, MEM);
            let mut seq = 0;
            for (i, f) in packets.iter().enumerate() {
                let packet = f.packet(seq, i as u32 + 1);
                if f.kind != 1 {
                    seq += 1;
                }
                let len = if f.short { f.len / 2 + 1 } else { f.len } as usize;
                net.nics[1]
                    .hardware_mut()
                    .inbox
                    .push_back((packet.emit(), vec![0xa5; len], Path::Direct));
                // What node 1 sends (acks, get responses) goes nowhere.
                for _ in 0..4 {
                    net.nics[1].poll();
                    net.nics[1].hardware_mut().outbox.clear();
                }
            }
            let after = net.mem(1, 0, MEM);
            let allowed: Vec<_> = packets.iter().filter_map(Forged::may_write).collect();
            for (at, (b, a)) in before.iter().zip(&after).enumerate() {
                let at = at as u64;
                if b == a || (ERRS..ERRS + ERRS_LEN).contains(&at) {
                    continue;
                }
                prop_assert!(
                    allowed.iter().any(|r| r.contains(&at)),
                    "byte {at:#x} written ({b:#04x} -> {a:#04x}); permitted: {allowed:x?}"
                );
            }
            // The region that forbids remote writes is as it was.
            let ro_bytes = (RO as usize)..(RO + RO_LEN) as usize;
            prop_assert_eq!(&before[ro_bytes.clone()], &after[ro_bytes]);
        }
    }
}

/// The engine's tables must fit a soft core's RAM: the reference image
/// (64 peers, 64 events per context) has 512 KiB of RAM for everything.
#[test]
fn engine_tables_fit_the_reference_soft_core() {
    use crate::fuzzing::SimBoard;
    let image = core::mem::size_of::<Engine<SimBoard, 64, 64>>() - core::mem::size_of::<SimBoard>();
    std::println!("engine state, 64 peers x 64 events: {image} bytes");
    std::println!(
        "engine state, 256 peers x 512 events: {} bytes",
        core::mem::size_of::<Engine<SimBoard, 256, 512>>() - core::mem::size_of::<SimBoard>()
    );
    assert!(
        image < 128 * 1024,
        "{image} bytes leaves too little of 512 KiB for stack and code"
    );
}

/// Write `block` at command-ring index `tail` and publish `tail + 1`
/// (wrapping: `Net::post_raw` cannot cross 2^64).
fn post_at(net: &mut Net, node: usize, tail: u64, block: [u8; 64]) {
    let ring = crate::abi::Ring::from_log2(6).unwrap();
    let hw = net.nics[node].hardware_mut();
    hw.write(RING + ring.byte_offset(tail, 64), &block).unwrap();
    hw.store(
        regs::ctx_reg(0, regs::CQ_TAIL).unwrap(),
        tail.wrapping_add(1),
    );
    hw.doorbells |= 1;
}

/// A `CQ_TAIL` more than the ring ahead of `CQ_HEAD`, or behind it, is an
/// overrun: one `QueueOverrun` record, `CQ_HEAD := CQ_TAIL`, no block read.
/// After a resynchronisation just below 2^64 the queue runs on across the
/// wrap of the free-running counters.
#[test]
fn a_malformed_cq_tail_is_an_overrun_and_the_queue_runs_on_across_the_wrap() {
    let mut net = Net::new(2, 16);
    let tail_reg = regs::ctx_reg(0, regs::CQ_TAIL).unwrap();
    let head_reg = regs::ctx_reg(0, regs::CQ_HEAD).unwrap();
    let ring_tail = |net: &mut Net, tail: u64| {
        let hw = net.nics[0].hardware_mut();
        hw.store(tail_reg, tail);
        hw.doorbells |= 1;
        net.run(100);
        net.nics[0].hardware().load(head_reg)
    };
    // 65 blocks into a 64-block ring; then a tail behind the head; then
    // a tail 2^63 ahead; then two below the wrap.
    let tails = [65, 3, 3 + (1 << 63), u64::MAX - 1];
    for (i, tail) in tails.into_iter().enumerate() {
        assert_eq!(ring_tail(&mut net, tail), tail, "resynchronised");
        let errors = net.errors(0);
        assert_eq!(errors.len(), i + 1);
        assert_eq!(errors[i].code, ErrorCode::QueueOverrun);
    }
    // Four writes at indices 2^64 - 2 .. 2^64 + 2, across the wrap.
    for (i, tail) in (0..4u64).map(|i| (i, (u64::MAX - 1).wrapping_add(i))) {
        let cmd = Command::WriteWord {
            addr: VA_WORDS + 8 * (20 + i),
            value: 0x100 + i,
        };
        post_at(&mut net, 0, tail, cmd.emit(0).to_bytes());
        net.run(100);
    }
    assert_eq!(net.nics[0].hardware().load(head_reg), 2);
    for i in 0..4 {
        assert_eq!(net.word(0, 20 + i).value, 0x100 + i);
    }
    assert_eq!(net.errors(0).len(), tails.len(), "no further errors");
}

/// More errors than the error ring holds: each record sits at slot
/// `n mod entries` and carries its number `n`; the oldest are overwritten,
/// which a reader tells from `ERR_COUNT` (`Ring::unread`).
#[test]
fn the_error_ring_wraps_and_every_record_carries_its_number() {
    let mut net = Net::new(2, 17);
    let total = 21u64;
    for cookie in 0..total {
        let mut bad = Command::Nop.emit(cookie as u32).to_bytes();
        bad[0] = 0xee;
        net.post_raw(0, bad);
    }
    net.run(1000);
    let count = net.nics[0]
        .hardware()
        .load(regs::ctx_reg(0, regs::ERR_COUNT).unwrap());
    assert_eq!(count, total);
    let ring = crate::abi::Ring::from_log2(4).unwrap();
    let unread = ring.unread(0, count);
    assert_eq!((unread.start, unread.lost), (total - 16, total - 16));
    for n in unread.indices() {
        let raw = net.mem(0, ERRS + ring.byte_offset(n, 32), 32);
        let info = ErrorInfo::parse(&ErrorRecord::read_from_bytes(&raw).unwrap()).unwrap();
        assert_eq!((info.seq, u64::from(info.cookie)), (n, n));
        assert_eq!(info.code, ErrorCode::UnknownOpcode);
    }
}
