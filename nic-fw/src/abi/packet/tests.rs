//! The wire format's round trips, its rejections and its checksum.

use super::*;
use proptest::prelude::*;

fn route() -> Route {
    Route {
        src_node: 1,
        src_ctx: 2,
        dst_node: 3,
        dst_ctx: 4,
        job_key: 0xabcd,
    }
}

fn samples() -> [Packet; 12] {
    [
        Packet::Data(DataPacket {
            route: route(),
            seq: u32::MAX,
            addr: 1 << 44,
            len: 2048,
            event: u32::MAX,
            cookie: 9,
            last: true,
            get_response: false,
            dma_addr: (1 << 44) - 2048,
            dma_len: 4096,
            wake: true,
            queue: false,
            retry: false,
            flow: 1,
        }),
        Packet::GetRequest(GetRequestPacket {
            route: route(),
            seq: 0,
            src_addr: 0x100,
            dst_addr: 0x200,
            len: MAX_DMA_LEN,
            src_event: 7,
            dst_event: u32::MAX,
            cookie: 1,
            flow: 1,
        }),
        Packet::Ack(AckPacket {
            kind: AckKind::Ack,
            src_node: 3,
            dst_node: 1,
            cum_seq: 17,
            err_bits: 0b101,
            err_code: Some(ErrorCode::Protection),
            refused: 0b10,
            flow: 1,
        }),
        Packet::Ack(AckPacket {
            kind: AckKind::Nack,
            src_node: 3,
            dst_node: 1,
            cum_seq: 16,
            err_bits: 1,
            err_code: Some(ErrorCode::Busy),
            refused: 0,
            flow: 1,
        }),
        Packet::Bcast(BcastPacket {
            route: route(),
            high_node: 9,
            id: 77,
            index: 3,
            addr: 0x1800,
            len: 2048,
            event: 4,
            cookie: 2,
            last: false,
            dma_addr: 0x0,
            dma_len: 1 << 20,
        }),
        Packet::BcastAck {
            src_node: 4,
            dst_node: 1,
            id: 77,
            received: 5,
            err_code: Some(ErrorCode::Protection),
        },
        Packet::BarrierArrive(BarrierPacket {
            route: route(),
            low_node: 2,
            high_node: 7,
            seq: u32::MAX,
            tag: 0,
        }),
        Packet::BarrierRelease(BarrierPacket {
            route: route(),
            low_node: 3,
            high_node: 3,
            seq: 0,
            tag: u32::MAX,
        }),
        Packet::BarrierLeave(BarrierPacket {
            route: route(),
            low_node: 0,
            high_node: 9,
            seq: 41,
            tag: 0x5eed,
        }),
        Packet::BarrierHeld(BarrierPacket {
            route: route(),
            low_node: 1,
            high_node: 4,
            seq: 8,
            tag: 7,
        }),
        Packet::FlowClose(ClosePacket {
            src_node: 1,
            dst_node: 3,
            flow: u32::MAX,
        }),
        Packet::FlowCloseAck(ClosePacket {
            src_node: 3,
            dst_node: 1,
            flow: 1,
        }),
    ]
}

/// The flow field (since wire format 3): nonzero on data, get requests,
/// acks and the close handshake, zero on every other type; a close and
/// its answer carry nothing else (`seq`, `aux1` zero).
#[test]
fn the_flow_field_is_present_exactly_where_the_type_has_one() {
    for p in samples() {
        let flowed = matches!(
            p,
            Packet::Data(_)
                | Packet::GetRequest(_)
                | Packet::Ack(_)
                | Packet::FlowClose(_)
                | Packet::FlowCloseAck(_)
        );
        for flow in [0, 1, 0x8000_0000] {
            let mut h = p.emit();
            h.flow = U32::new(flow);
            h.checksum = U32::new(checksum(&h.to_bytes()));
            assert_eq!(
                Packet::parse(&h).is_ok(),
                (flow != 0) == flowed,
                "flow {flow} on {p:?}"
            );
        }
    }
    for sample in [10, 11] {
        for value in [1u32, 2] {
            let mut h = samples()[sample].emit();
            h.aux1 = U32::new(value);
            h.checksum = U32::new(checksum(&h.to_bytes()));
            assert!(
                Packet::parse(&h).is_err(),
                "aux1 {value} on sample {sample}"
            );
            let mut h = samples()[sample].emit();
            h.seq = U32::new(value);
            h.checksum = U32::new(checksum(&h.to_bytes()));
            assert!(Packet::parse(&h).is_err(), "seq {value} on sample {sample}");
        }
    }
}

#[test]
fn packets_round_trip() {
    for p in samples() {
        let h = p.emit();
        assert_eq!(Packet::parse(&h), Ok(p));
        assert_eq!(PacketHeader::from_bytes(&h.to_bytes()), h);
    }
}

#[test]
fn every_single_bit_flip_is_detected() {
    for p in samples() {
        let bytes = p.emit().to_bytes();
        for bit in 0..HEADER_LEN * 8 {
            let mut b = bytes;
            b[bit / 8] ^= 1 << (bit % 8);
            assert_eq!(
                Packet::parse(&PacketHeader::from_bytes(&b)),
                Err(ErrorCode::BadPacket),
                "bit {bit} of {p:?}"
            );
        }
    }
}

/// The flag rules of `docs/abi.md` §8, written on the raw byte: parse
/// accepts a flag byte exactly when they allow it.
#[test]
fn every_flag_byte_is_judged_by_the_abi_rules() {
    let queued = Packet::Data(DataPacket {
        route: route(),
        seq: 1,
        addr: 0,
        len: 64,
        event: 2,
        cookie: 0,
        last: true,
        get_response: false,
        dma_addr: 0,
        dma_len: 64,
        wake: false,
        queue: true,
        retry: false,
        flow: 1,
    });
    let mut accepted = 0;
    for p in samples().into_iter().chain([queued]) {
        let base = p.emit();
        for flags in 0..=u8::MAX {
            let mut h = base;
            h.flags = flags;
            h.checksum = U32::new(checksum(&h.to_bytes()));
            let zero_addrs = h.addr.get() == 0 && h.aux0.get() == 0;
            let allowed = match PacketType::from_raw(h.ptype) {
                Some(PacketType::Data) => {
                    flags & 0xe0 == 0
                        && (flags & 0x4 == 0 || flags & 0x1 != 0)
                        && (flags & 0x8 == 0 || (flags & 0x3 == 0x1 && zero_addrs))
                        && (flags & 0x10 == 0 || flags & 0x8 != 0)
                }
                Some(PacketType::Bcast) => flags & !0x1 == 0,
                _ => flags == 0,
            };
            let parsed = Packet::parse(&h);
            assert_eq!(parsed.is_ok(), allowed, "{flags:#04x} on {p:?}");
            if let Ok(q) = parsed {
                assert_eq!(q.emit(), h);
                accepted += 1;
            }
        }
    }
    // Data: 6 legal bytes at a non-zero address, 10 at zero (QUEUE
    // with and without RETRY); broadcast: 2; every other sample: 1.
    assert_eq!(accepted, 6 + 10 + 2 + 10);
}

proptest! {
    #[test]
    fn parse_never_panics_and_accepted_headers_round_trip(lo in proptest::array::uniform32(any::<u8>()), hi in proptest::array::uniform32(any::<u8>())) {
        let mut raw = [0u8; HEADER_LEN];
        raw[..32].copy_from_slice(&lo);
        raw[32..].copy_from_slice(&hi);
        let h = PacketHeader::from_bytes(&raw);
        if let Ok(p) = Packet::parse(&h) {
            prop_assert_eq!(p.emit(), h);
        }
    }
}
