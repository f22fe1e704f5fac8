//! The wire format between NICs on a rail.
//!
//! Every packet is a 64-byte [`PacketHeader`] followed, for packets with a
//! payload (data, broadcast), by `len` payload bytes and a CRC-32 trailer
//! over them. Fields are little-endian. The header ends with a checksum
//! over its first 60 bytes; a packet whose checksum, version, type, flags
//! or reserved fields are wrong is dropped without effect and counted (the
//! sender retransmits it). The trailer is the link hardware's: the
//! transmit DMA appends it, the receive port checks it and discards a
//! packet that fails before the engine sees it (docs/abi.md §8), so the
//! engine never handles payload bytes itself.
//!
//! Reliability is go-back-N per (rail, source node, destination node) flow:
//! data and get-request packets carry a per-flow sequence number; the
//! receiver applies them strictly in order, and answers with cumulative
//! [`PacketType::Ack`]s. An ack also carries a 64-bit *error bitmap*: bit `i`
//! set means packet `cum_seq - i` was rejected (protection, unknown context,
//! ...) and nothing of it was written, with `err_code` giving the most recent
//! reason; and a 32-bit *refusal bitmap*: bit `i` set means packet
//! `cum_seq - i` was refused for now (its input queue full or not yet
//! initialised) and the sender must send it again. A [`PacketType::Nack`] acknowledges up to `cum_seq` and asks the
//! sender to retransmit everything after it (a gap, or a resource the
//! receiver lacked for the moment).
//!
//! | bytes | field | data | get request | ack / nack |
//! |---|---|---|---|---|
//! | 0 | version | 3 | 3 | 3 |
//! | 1 | type | 1 | 2 | 3 / 4 |
//! | 2 | flags | LAST, GET_RESPONSE, WAKE, QUEUE, RETRY | 0 | 0 |
//! | 3 | src_ctx | sender context | requester context | 0 |
//! | 4..6 | src_node | | | |
//! | 6..8 | dst_node | | | |
//! | 8 | dst_ctx | target context | owner context | 0 |
//! | 9..12 | reserved | 0 | 0 | 0 |
//! | 12..16 | job_key | | | 0 |
//! | 16..20 | seq | flow sequence | flow sequence | cumulative seq |
//! | 20..24 | len | payload bytes | 0 | 0 |
//! | 24..32 | addr | target address | requester's destination | 0 |
//! | 32..36 | event | target event / NONE | requester's event / NONE | 0 |
//! | 36..40 | cookie | DMA cookie | DMA cookie | 0 |
//! | 40..48 | aux0 | DMA's first target address | owner's source address | error bitmap |
//! | 48..52 | aux1 | 0 | owner's event / NONE | error code (ack and nack) |
//! | 52..56 | aux2 | DMA's total length | total length | refusal bitmap |
//! | 56..60 | flow | sender's flow instance | sender's flow instance | the instance acknowledged |
//! | 60..64 | checksum | | | |
//!
//! A data packet carries its whole DMA's target range (`aux0`, `aux2`) so
//! the receiver checks the *entire* range on every packet: a DMA that is
//! partly outside the target's regions is rejected packet by packet and
//! writes nothing at all ([ELAN-SEM §13 rule 10]: never partially apply).
//!
//! Since wire format 3 (ABI 1.9) every sequenced packet, ack and nack
//! names the *flow instance* it belongs to: a number the sender draws when
//! it opens a transmit flow to a peer, so that the two ends can close an
//! idle flow and open a new one later without a stale packet of the old
//! one taking effect ([`PacketType::FlowClose`], docs/abi.md §8.1).

use bitflags::bitflags;
use zerocopy::little_endian::{U16, U32, U64};
use zerocopy::{FromBytes, FromZeros, Immutable, IntoBytes, KnownLayout};

use super::error::{ErrorCode, status_from_raw, status_to_raw};
use super::{ContextIndex, MAX_DMA_LEN, MAX_PACKET_SIZE, NodeId};

/// Header size in bytes.
pub const HEADER_LEN: usize = 64;

/// Wire format version (2: the payload CRC trailer; 3: flow instances and
/// the close handshake).
pub const WIRE_VERSION: u8 = 3;

bitflags! {
    /// The header's flag byte. Data packets may carry all four (within the
    /// rules of [`Packet::parse`]), broadcast packets only `LAST`, every
    /// other type none; a flag bit outside this set is always refused.
    #[derive(Clone, Copy, Debug, PartialEq, Eq)]
    pub struct PacketFlags: u8 {
        /// Last packet of its DMA; the target event is set after it.
        const LAST = 1 << 0;
        /// This is a get response; the target range needs `LOCAL_WRITE` (it
        /// is the requester's own memory) as well as `REMOTE_WRITE` (since
        /// ABI 1.5: a receiver cannot tell a response from a forgery).
        const GET_RESPONSE = 1 << 1;
        /// (LAST packets only) wake the target context's host once the DMA's
        /// data has landed.
        const WAKE = 1 << 2;
        /// A queued DMA's only packet; `event` names the target's input
        /// queue and `addr`, `aux0` are 0.
        const QUEUE = 1 << 3;
        /// (QUEUE packets only, since 1.4) an item the target refused
        /// before, sent again: the target tries it even while it holds
        /// back the sender's later items to that queue.
        const RETRY = 1 << 4;
    }
}

/// The header layout.
#[derive(Clone, Copy, Debug, FromBytes, IntoBytes, Immutable, KnownLayout, PartialEq, Eq)]
#[repr(C)]
pub struct PacketHeader {
    /// [`WIRE_VERSION`].
    pub version: u8,
    /// [`PacketType`].
    pub ptype: u8,
    /// Type-specific [`PacketFlags`].
    pub flags: u8,
    /// Sender's context.
    pub src_ctx: u8,
    /// Sender's node.
    pub src_node: U16,
    /// Receiver's node.
    pub dst_node: U16,
    /// Receiver's context.
    pub dst_ctx: u8,
    /// Reserved, zero.
    pub reserved0: [u8; 3],
    /// Job key.
    pub job_key: U32,
    /// Sequence number.
    pub seq: U32,
    /// Payload length.
    pub len: U32,
    /// Target address.
    pub addr: U64,
    /// Event.
    pub event: U32,
    /// Cookie.
    pub cookie: U32,
    /// Auxiliary 0.
    pub aux0: U64,
    /// Auxiliary 1.
    pub aux1: U32,
    /// Auxiliary 2.
    pub aux2: U32,
    /// The flow instance (data, get request, ack, nack, close, close ack;
    /// nonzero), zero for every other type.
    pub flow: U32,
    /// Checksum of bytes 0..60, see [`checksum`].
    pub checksum: U32,
}

const _: () = assert!(core::mem::size_of::<PacketHeader>() == HEADER_LEN);
const _: () = assert!(core::mem::align_of::<PacketHeader>() == 1);

wire_enum! {
    /// Packet types.
    #[derive(Clone, Copy, Debug, PartialEq, Eq)]
    pub enum PacketType: u8 {
        /// Payload for a target range.
        Data = 1,
        /// A get: the owner runs the described put back to the requester.
        GetRequest = 2,
        /// Cumulative acknowledgement.
        Ack = 3,
        /// Acknowledgement up to `seq`, retransmit the rest.
        Nack = 4,
        /// Broadcast data, replicated by the switch to a node range.
        Bcast = 5,
        /// A broadcast destination's cumulative acknowledgement.
        BcastAck = 6,
        /// A member's arrival at a hardware barrier (to the switch).
        BarrierArrive = 7,
        /// The switch's release of a hardware barrier (to each member).
        BarrierRelease = 8,
        /// A member's context left a hardware barrier it had entered (to
        /// the switch): its arrival no longer counts (sent when the
        /// context is detached with the barrier still pending).
        BarrierLeave = 9,
        /// The switch holds a member's re-announced arrival for a barrier
        /// still collecting (to that member; since ABI 1.5): the switch is
        /// alive, the barrier waits for other members.
        BarrierHeld = 10,
        /// The sender closes an idle transmit flow (since ABI 1.9): `flow`
        /// = the instance closed.
        FlowClose = 11,
        /// The receiver's answer to a close: it holds nothing of that
        /// instance any more; `flow` as the close carried it.
        FlowCloseAck = 12,
    }
}

/// The header checksum: a word-wise multiplicative hash over the first 60
/// bytes. Each step is a bijection of the running value, so any change
/// confined to one 32-bit word always changes the result (every single-bit
/// and single-byte error is detected).
pub fn checksum(bytes: &[u8; HEADER_LEN]) -> u32 {
    let mut h: u32 = 0x5241_494c;
    for chunk in bytes.chunks_exact(4).take(15) {
        let mut w = [0u8; 4];
        w.copy_from_slice(chunk);
        h = (h.rotate_left(5) ^ u32::from_le_bytes(w)).wrapping_mul(0x9e37_79b1);
    }
    h
}

/// Addressing fields shared by data and get-request packets.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Route {
    /// Sender node.
    pub src_node: NodeId,
    /// Sender context.
    pub src_ctx: ContextIndex,
    /// Receiver node.
    pub dst_node: NodeId,
    /// Receiver context.
    pub dst_ctx: ContextIndex,
    /// Job key.
    pub job_key: u32,
}

/// A data packet: payload for `route.dst_ctx`'s memory at `addr`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DataPacket {
    /// Addressing.
    pub route: Route,
    /// Flow sequence number.
    pub seq: u32,
    /// Target virtual address.
    pub addr: u64,
    /// Payload length (`<= MAX_PACKET_SIZE`).
    pub len: u32,
    /// Raw target event (`EventId::NONE` encoding for none), bounded by
    /// the receiver.
    pub event: u32,
    /// DMA cookie.
    pub cookie: u32,
    /// Last packet of its DMA.
    pub last: bool,
    /// Part of a get response.
    pub get_response: bool,
    /// First target address of the whole DMA.
    pub dma_addr: u64,
    /// Total length of the whole DMA.
    pub dma_len: u32,
    /// Wake the target's host after this (last) packet.
    pub wake: bool,
    /// Queued DMA: `event` is the target queue's index.
    pub queue: bool,
    /// Queued DMA sent again after the target refused it.
    pub retry: bool,
    /// The sender's flow instance (nonzero).
    pub flow: u32,
}

/// A get request to the owner `route.dst_ctx`, which runs the described
/// put back to the requester.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GetRequestPacket {
    /// Addressing.
    pub route: Route,
    /// Flow sequence number.
    pub seq: u32,
    /// Owner's source address.
    pub src_addr: u64,
    /// Requester's destination address.
    pub dst_addr: u64,
    /// Total bytes.
    pub len: u32,
    /// Owner's event (raw).
    pub src_event: u32,
    /// Requester's event (raw).
    pub dst_event: u32,
    /// DMA cookie.
    pub cookie: u32,
    /// The sender's flow instance (nonzero).
    pub flow: u32,
}

/// A broadcast data packet: replicated by the rail's switch to every node
/// of `route.dst_node..=high_node` except the sender's. Header mapping:
/// `seq` = broadcast id, `aux1` = high node (bits 15:0) and packet index
/// (bits 31:16), `aux0`/`aux2` = the DMA's first target address and total
/// length, flag bit 0 = last packet.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BcastPacket {
    /// Addressing: `dst_node` is the range's first node.
    pub route: Route,
    /// Last node of the range (inclusive).
    pub high_node: NodeId,
    /// Broadcast id (per sending NIC, wrapping).
    pub id: u32,
    /// Packet index within the broadcast.
    pub index: u16,
    /// Target address of this packet.
    pub addr: u64,
    /// Payload bytes.
    pub len: u32,
    /// Raw target event (set after the last packet).
    pub event: u32,
    /// Cookie.
    pub cookie: u32,
    /// Last packet.
    pub last: bool,
    /// First target address of the whole broadcast.
    pub dma_addr: u64,
    /// Total bytes of the broadcast.
    pub dma_len: u32,
}

/// A hardware-barrier message: a member's arrival (to the switch, with
/// `route.dst_node` = the group's first node) or the switch's release (to
/// one member, `route.dst_node` = that member). Group: context
/// `route.dst_ctx` on nodes `low_node..=high_node` of job `route.job_key`,
/// with tag `tag` (since ABI 1.6: one communicator instance's barriers,
/// so that a later communicator over the same contexts and nodes, which
/// numbers its barriers from the start again, is a new group). Header:
/// `seq` = barrier number, `aux1` = low node (15:0) and high node (31:16),
/// `aux2` = tag.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BarrierPacket {
    /// Addressing.
    pub route: Route,
    /// First node of the group.
    pub low_node: NodeId,
    /// Last node of the group.
    pub high_node: NodeId,
    /// Barrier number.
    pub seq: u32,
    /// The group's tag (the communicator instance).
    pub tag: u32,
}

/// `[addr, addr + len)` lies within `[dma_addr, dma_addr + dma_len)`.
fn within_dma(addr: u64, len: u64, dma_addr: u64, dma_len: u64) -> bool {
    addr >= dma_addr
        && addr
            .checked_add(len)
            .zip(dma_addr.checked_add(dma_len))
            .is_some_and(|(e, de)| e <= de)
}

/// Header fields an acknowledgement (plain or broadcast) leaves zero.
fn control_fields_clear(h: &PacketHeader) -> bool {
    h.flags == 0
        && h.src_ctx == 0
        && h.dst_ctx == 0
        && h.job_key.get() == 0
        && h.len.get() == 0
        && h.addr.get() == 0
        && h.event.get() == 0
        && h.cookie.get() == 0
}

/// Write the addressing fields.
fn set_route(h: &mut PacketHeader, r: &Route) {
    h.src_node = U16::new(r.src_node);
    h.src_ctx = r.src_ctx;
    h.dst_node = U16::new(r.dst_node);
    h.dst_ctx = r.dst_ctx;
    h.job_key = U32::new(r.job_key);
}

/// Whether an acknowledgement also asks for a resend: the wire's type 3
/// or 4; every other field means the same in both.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AckKind {
    /// Every sequence number up to and including `cum_seq` arrived.
    Ack,
    /// The same, and the sender resends everything after `cum_seq` (a gap,
    /// or a resource the receiver lacked for the moment).
    Nack,
}

impl AckKind {
    /// The packet type it travels as.
    pub const fn ptype(self) -> PacketType {
        match self {
            AckKind::Ack => PacketType::Ack,
            AckKind::Nack => PacketType::Nack,
        }
    }
}

/// A cumulative acknowledgement of a flow, or a negative one. Header:
/// `seq` = `cum_seq`, `aux0` = error bitmap, `aux1` = error code, `aux2`
/// = refusal bitmap.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AckPacket {
    /// Ack or nack.
    pub kind: AckKind,
    /// Sender of the ack.
    pub src_node: NodeId,
    /// Receiver of the ack.
    pub dst_node: NodeId,
    /// Every sequence number up to and including this one arrived.
    pub cum_seq: u32,
    /// Bit `i`: packet `cum_seq - i` was rejected.
    pub err_bits: u64,
    /// Reason for the most recent rejection, if any (0 on the wire for
    /// none).
    pub err_code: Option<ErrorCode>,
    /// Bit `i`: packet `cum_seq - i` was refused for now (its input queue
    /// full or not yet initialised): nothing of it was written, and the
    /// sender sends it again (since 1.4).
    pub refused: u32,
    /// The flow instance acknowledged (nonzero): the sender ignores an
    /// ack for any other.
    pub flow: u32,
}

/// The close handshake of an idle flow (since ABI 1.9): the sender's
/// [`PacketType::FlowClose`], or the receiver's answer. Header: `flow` =
/// the instance; every other field but the nodes zero.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ClosePacket {
    /// Sender of this packet.
    pub src_node: NodeId,
    /// Its receiver.
    pub dst_node: NodeId,
    /// The flow instance closed (nonzero).
    pub flow: u32,
}

/// A validated packet header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Packet {
    /// Payload for `route.dst_ctx`'s memory.
    Data(DataPacket),
    /// A get request to the owner `route.dst_ctx`.
    GetRequest(GetRequestPacket),
    /// Cumulative acknowledgement, or negative (type 3 or 4).
    Ack(AckPacket),
    /// Broadcast data.
    Bcast(BcastPacket),
    /// A broadcast destination's acknowledgement: it holds the first
    /// `received` packets of broadcast `id` (each checked; `err_code` is the
    /// first rejection, if any). Header: `seq` = id, `aux2` = received,
    /// `aux1` = error code.
    BcastAck {
        /// The destination.
        src_node: NodeId,
        /// The broadcast's sender.
        dst_node: NodeId,
        /// Broadcast id.
        id: u32,
        /// Packets received in order.
        received: u32,
        /// First rejection's reason, if any (0 on the wire for none).
        err_code: Option<ErrorCode>,
    },
    /// A member arrived at a hardware barrier.
    BarrierArrive(BarrierPacket),
    /// The switch released a hardware barrier.
    BarrierRelease(BarrierPacket),
    /// A member left a hardware barrier it had entered.
    BarrierLeave(BarrierPacket),
    /// The switch holds a member's arrival (an answer to a re-announced
    /// arrival of a barrier still collecting).
    BarrierHeld(BarrierPacket),
    /// The sender closes an idle flow.
    FlowClose(ClosePacket),
    /// The receiver's answer to a close.
    FlowCloseAck(ClosePacket),
}

/// The envelope every packet shares: checksum, version, reserved field; a
/// flow instance where the type has one and none elsewhere.
fn check_envelope(h: &PacketHeader) -> Result<(), ErrorCode> {
    let bytes: [u8; HEADER_LEN] = zerocopy::transmute!(*h);
    if checksum(&bytes) != h.checksum.get() || h.version != WIRE_VERSION || h.reserved0 != [0; 3] {
        return Err(ErrorCode::BadPacket);
    }
    Ok(())
}

/// The addressing fields, as they are (each type checks what it needs).
fn route_of(h: &PacketHeader) -> Route {
    Route {
        src_node: h.src_node.get(),
        src_ctx: h.src_ctx,
        dst_node: h.dst_node.get(),
        dst_ctx: h.dst_ctx,
        job_key: h.job_key.get(),
    }
}

/// Refuse unless `ok`: every packet check fails with `BadPacket`.
fn require(ok: bool) -> Result<(), ErrorCode> {
    if ok {
        Ok(())
    } else {
        Err(ErrorCode::BadPacket)
    }
}

/// The flag byte, refusing bits outside `allowed`.
fn flags_within(h: &PacketHeader, allowed: PacketFlags) -> Result<PacketFlags, ErrorCode> {
    match PacketFlags::from_bits(h.flags) {
        Some(flags) if allowed.contains(flags) => Ok(flags),
        _ => Err(ErrorCode::BadPacket),
    }
}

/// A data packet's flag rules: WAKE only with LAST; RETRY only with QUEUE;
/// QUEUE only with LAST, without GET_RESPONSE, and with `addr` and `aux0`
/// zero.
fn data_flags(h: &PacketHeader) -> Result<PacketFlags, ErrorCode> {
    let flags = flags_within(h, PacketFlags::all())?;
    require(!flags.contains(PacketFlags::WAKE) || flags.contains(PacketFlags::LAST))?;
    require(!flags.contains(PacketFlags::RETRY) || flags.contains(PacketFlags::QUEUE))?;
    if flags.contains(PacketFlags::QUEUE) {
        let last_only =
            flags & (PacketFlags::LAST | PacketFlags::GET_RESPONSE) == PacketFlags::LAST;
        require(last_only && h.addr.get() == 0 && h.aux0.get() == 0)?;
    }
    Ok(flags)
}

/// The payload fields of data and broadcast packets: `addr`, `len`, and the
/// whole DMA's range (`aux0`, `aux2`), which must contain the packet.
/// Returns `(addr, len, dma_addr, dma_len)`.
fn payload_range(h: &PacketHeader) -> Result<(u64, u32, u64, u32), ErrorCode> {
    let (addr, len) = (h.addr.get(), h.len.get());
    let (dma_addr, dma_len) = (h.aux0.get(), h.aux2.get());
    require(
        len <= MAX_PACKET_SIZE
            && dma_len <= MAX_DMA_LEN
            && within_dma(addr, u64::from(len), dma_addr, u64::from(dma_len)),
    )?;
    Ok((addr, len, dma_addr, dma_len))
}

/// An error code carried in `aux1` (acks): 0 for none, else a defined code.
fn err_code_of(h: &PacketHeader) -> Result<Option<ErrorCode>, ErrorCode> {
    let raw = u16::try_from(h.aux1.get()).map_err(|_| ErrorCode::BadPacket)?;
    match status_from_raw(raw) {
        Some(status) => Ok(status.err()),
        None => Err(ErrorCode::BadPacket),
    }
}

/// The `aux1` encoding of an optional error code.
fn err_code_raw(code: Option<ErrorCode>) -> U32 {
    let status = match code {
        Some(code) => Err(code),
        None => Ok(()),
    };
    U32::new(u32::from(status_to_raw(status)))
}

fn parse_data(h: &PacketHeader, route: Route) -> Result<DataPacket, ErrorCode> {
    let flags = data_flags(h)?;
    let (addr, len, dma_addr, dma_len) = payload_range(h)?;
    require(h.aux1.get() == 0)?;
    Ok(DataPacket {
        route,
        seq: h.seq.get(),
        addr,
        len,
        event: h.event.get(),
        cookie: h.cookie.get(),
        last: flags.contains(PacketFlags::LAST),
        get_response: flags.contains(PacketFlags::GET_RESPONSE),
        dma_addr,
        dma_len,
        wake: flags.contains(PacketFlags::WAKE),
        queue: flags.contains(PacketFlags::QUEUE),
        retry: flags.contains(PacketFlags::RETRY),
        flow: h.flow.get(),
    })
}

fn parse_get_request(h: &PacketHeader, route: Route) -> Result<GetRequestPacket, ErrorCode> {
    flags_within(h, PacketFlags::empty())?;
    require(h.len.get() == 0 && h.aux2.get() <= MAX_DMA_LEN)?;
    Ok(GetRequestPacket {
        route,
        seq: h.seq.get(),
        src_addr: h.aux0.get(),
        dst_addr: h.addr.get(),
        len: h.aux2.get(),
        src_event: h.aux1.get(),
        dst_event: h.event.get(),
        cookie: h.cookie.get(),
        flow: h.flow.get(),
    })
}

fn parse_bcast(h: &PacketHeader, route: Route) -> Result<BcastPacket, ErrorCode> {
    let flags = flags_within(h, PacketFlags::LAST)?;
    let aux1 = h.aux1.get();
    let (high_node, index) = (aux1 as u16, (aux1 >> 16) as u16);
    require(route.dst_node <= high_node)?;
    let (addr, len, dma_addr, dma_len) = payload_range(h)?;
    Ok(BcastPacket {
        route,
        high_node,
        id: h.seq.get(),
        index,
        addr,
        len,
        event: h.event.get(),
        cookie: h.cookie.get(),
        last: flags.contains(PacketFlags::LAST),
        dma_addr,
        dma_len,
    })
}

fn parse_bcast_ack(h: &PacketHeader, route: Route) -> Result<Packet, ErrorCode> {
    require(control_fields_clear(h) && h.aux0.get() == 0)?;
    Ok(Packet::BcastAck {
        src_node: route.src_node,
        dst_node: route.dst_node,
        id: h.seq.get(),
        received: h.aux2.get(),
        err_code: err_code_of(h)?,
    })
}

fn parse_barrier(h: &PacketHeader, route: Route) -> Result<BarrierPacket, ErrorCode> {
    flags_within(h, PacketFlags::empty())?;
    require(
        h.len.get() == 0
            && h.addr.get() == 0
            && h.event.get() == 0
            && h.cookie.get() == 0
            && h.aux0.get() == 0,
    )?;
    let aux1 = h.aux1.get();
    let (low_node, high_node) = (aux1 as u16, (aux1 >> 16) as u16);
    require(low_node <= high_node && low_node <= route.dst_node && route.dst_node <= high_node)?;
    Ok(BarrierPacket {
        route,
        low_node,
        high_node,
        seq: h.seq.get(),
        tag: h.aux2.get(),
    })
}

/// Ack and nack: the same fields, the refusal bitmap in `aux2`.
fn parse_ack(h: &PacketHeader, route: Route, kind: AckKind) -> Result<Packet, ErrorCode> {
    require(control_fields_clear(h))?;
    Ok(Packet::Ack(AckPacket {
        kind,
        src_node: route.src_node,
        dst_node: route.dst_node,
        cum_seq: h.seq.get(),
        err_bits: h.aux0.get(),
        err_code: err_code_of(h)?,
        refused: h.aux2.get(),
        flow: h.flow.get(),
    }))
}

/// A close or its answer: nodes and flow instance, nothing else.
fn parse_close(h: &PacketHeader, route: Route) -> Result<ClosePacket, ErrorCode> {
    require(
        control_fields_clear(h)
            && h.seq.get() == 0
            && h.aux0.get() == 0
            && h.aux1.get() == 0
            && h.aux2.get() == 0,
    )?;
    Ok(ClosePacket {
        src_node: route.src_node,
        dst_node: route.dst_node,
        flow: h.flow.get(),
    })
}

impl Packet {
    /// Validate a header. Any failure is [`ErrorCode::BadPacket`].
    pub fn parse(h: &PacketHeader) -> Result<Packet, ErrorCode> {
        check_envelope(h)?;
        let ptype = PacketType::from_raw(h.ptype).ok_or(ErrorCode::BadPacket)?;
        let flowed = matches!(
            ptype,
            PacketType::Data
                | PacketType::GetRequest
                | PacketType::Ack
                | PacketType::Nack
                | PacketType::FlowClose
                | PacketType::FlowCloseAck
        );
        require((h.flow.get() != 0) == flowed)?;
        let route = route_of(h);
        match ptype {
            PacketType::Data => parse_data(h, route).map(Packet::Data),
            PacketType::GetRequest => parse_get_request(h, route).map(Packet::GetRequest),
            PacketType::Bcast => parse_bcast(h, route).map(Packet::Bcast),
            PacketType::BcastAck => parse_bcast_ack(h, route),
            PacketType::BarrierArrive => parse_barrier(h, route).map(Packet::BarrierArrive),
            PacketType::BarrierRelease => parse_barrier(h, route).map(Packet::BarrierRelease),
            PacketType::BarrierLeave => parse_barrier(h, route).map(Packet::BarrierLeave),
            PacketType::BarrierHeld => parse_barrier(h, route).map(Packet::BarrierHeld),
            PacketType::Ack => parse_ack(h, route, AckKind::Ack),
            PacketType::Nack => parse_ack(h, route, AckKind::Nack),
            PacketType::FlowClose => parse_close(h, route).map(Packet::FlowClose),
            PacketType::FlowCloseAck => parse_close(h, route).map(Packet::FlowCloseAck),
        }
    }

    /// Encode, computing the checksum.
    pub fn emit(&self) -> PacketHeader {
        let mut h = PacketHeader::new_zeroed();
        h.version = WIRE_VERSION;
        match *self {
            Packet::Data(DataPacket {
                route,
                seq,
                addr,
                len,
                event,
                cookie,
                last,
                get_response,
                dma_addr,
                dma_len,
                wake,
                queue,
                retry,
                flow,
            }) => {
                h.ptype = PacketType::Data.as_raw();
                set_route(&mut h, &route);
                let mut flags = PacketFlags::empty();
                flags.set(PacketFlags::LAST, last);
                flags.set(PacketFlags::GET_RESPONSE, get_response);
                flags.set(PacketFlags::WAKE, wake);
                flags.set(PacketFlags::QUEUE, queue);
                flags.set(PacketFlags::RETRY, retry);
                h.flags = flags.bits();
                h.seq = U32::new(seq);
                h.addr = U64::new(addr);
                h.len = U32::new(len);
                h.event = U32::new(event);
                h.cookie = U32::new(cookie);
                h.aux0 = U64::new(dma_addr);
                h.aux2 = U32::new(dma_len);
                h.flow = U32::new(flow);
            }
            Packet::GetRequest(GetRequestPacket {
                route,
                seq,
                src_addr,
                dst_addr,
                len,
                src_event,
                dst_event,
                cookie,
                flow,
            }) => {
                h.ptype = PacketType::GetRequest.as_raw();
                set_route(&mut h, &route);
                h.seq = U32::new(seq);
                h.addr = U64::new(dst_addr);
                h.event = U32::new(dst_event);
                h.cookie = U32::new(cookie);
                h.aux0 = U64::new(src_addr);
                h.aux1 = U32::new(src_event);
                h.aux2 = U32::new(len);
                h.flow = U32::new(flow);
            }
            Packet::Ack(AckPacket {
                kind,
                src_node,
                dst_node,
                cum_seq,
                err_bits,
                err_code,
                refused,
                flow,
            }) => {
                h.ptype = kind.ptype().as_raw();
                h.src_node = U16::new(src_node);
                h.dst_node = U16::new(dst_node);
                h.seq = U32::new(cum_seq);
                h.aux0 = U64::new(err_bits);
                h.aux2 = U32::new(refused);
                h.aux1 = err_code_raw(err_code);
                h.flow = U32::new(flow);
            }
            Packet::FlowClose(c) | Packet::FlowCloseAck(c) => {
                h.ptype = if matches!(self, Packet::FlowCloseAck(_)) {
                    PacketType::FlowCloseAck
                } else {
                    PacketType::FlowClose
                }
                .as_raw();
                h.src_node = U16::new(c.src_node);
                h.dst_node = U16::new(c.dst_node);
                h.flow = U32::new(c.flow);
            }
            Packet::Bcast(_)
            | Packet::BcastAck { .. }
            | Packet::BarrierArrive(_)
            | Packet::BarrierRelease(_)
            | Packet::BarrierLeave(_)
            | Packet::BarrierHeld(_) => self.emit_extended(&mut h),
        }
        let bytes: [u8; HEADER_LEN] = zerocopy::transmute!(h);
        h.checksum = U32::new(checksum(&bytes));
        h
    }

    fn emit_extended(&self, h: &mut PacketHeader) {
        match *self {
            Packet::Bcast(b) => {
                h.ptype = PacketType::Bcast.as_raw();
                set_route(h, &b.route);
                let mut flags = PacketFlags::empty();
                flags.set(PacketFlags::LAST, b.last);
                h.flags = flags.bits();
                h.seq = U32::new(b.id);
                h.addr = U64::new(b.addr);
                h.len = U32::new(b.len);
                h.event = U32::new(b.event);
                h.cookie = U32::new(b.cookie);
                h.aux0 = U64::new(b.dma_addr);
                h.aux1 = U32::new(u32::from(b.high_node) | (u32::from(b.index) << 16));
                h.aux2 = U32::new(b.dma_len);
            }
            Packet::BcastAck {
                src_node,
                dst_node,
                id,
                received,
                err_code,
            } => {
                h.ptype = PacketType::BcastAck.as_raw();
                h.src_node = U16::new(src_node);
                h.dst_node = U16::new(dst_node);
                h.seq = U32::new(id);
                h.aux2 = U32::new(received);
                h.aux1 = err_code_raw(err_code);
            }
            Packet::BarrierArrive(b)
            | Packet::BarrierRelease(b)
            | Packet::BarrierLeave(b)
            | Packet::BarrierHeld(b) => {
                h.ptype = match self {
                    Packet::BarrierArrive(_) => PacketType::BarrierArrive,
                    Packet::BarrierRelease(_) => PacketType::BarrierRelease,
                    Packet::BarrierHeld(_) => PacketType::BarrierHeld,
                    _ => PacketType::BarrierLeave,
                }
                .as_raw();
                set_route(h, &b.route);
                h.seq = U32::new(b.seq);
                h.aux1 = U32::new(u32::from(b.low_node) | (u32::from(b.high_node) << 16));
                h.aux2 = U32::new(b.tag);
            }
            _ => {}
        }
    }

    /// Destination node.
    pub const fn dst_node(&self) -> NodeId {
        match self {
            Packet::Data(DataPacket { route, .. })
            | Packet::GetRequest(GetRequestPacket { route, .. }) => route.dst_node,
            Packet::Ack(AckPacket { dst_node, .. }) | Packet::BcastAck { dst_node, .. } => {
                *dst_node
            }
            Packet::Bcast(b) => b.route.dst_node,
            Packet::BarrierArrive(b)
            | Packet::BarrierRelease(b)
            | Packet::BarrierLeave(b)
            | Packet::BarrierHeld(b) => b.route.dst_node,
            Packet::FlowClose(c) | Packet::FlowCloseAck(c) => c.dst_node,
        }
    }

    /// Payload bytes that follow the header on the wire.
    pub const fn payload_len(&self) -> u32 {
        match self {
            Packet::Data(d) => d.len,
            Packet::Bcast(b) => b.len,
            _ => 0,
        }
    }
}

impl PacketHeader {
    /// View 64 raw bytes as a header layout.
    pub fn from_bytes(bytes: &[u8; HEADER_LEN]) -> PacketHeader {
        zerocopy::transmute!(*bytes)
    }

    /// The raw bytes.
    pub fn to_bytes(&self) -> [u8; HEADER_LEN] {
        zerocopy::transmute!(*self)
    }
}

#[cfg(test)]
mod tests;
