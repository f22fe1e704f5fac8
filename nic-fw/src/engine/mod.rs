//! The firmware engine: a poll-driven state machine.
//!
//! One [`Engine`] is one NIC on one rail. Each call to [`Engine::poll`] does a
//! bounded amount of work, in this order:
//!
//! 1. the admin mailbox, if its doorbell rang;
//! 2. received packets: data is checked (context, job key, region and
//!    permission) and written, events are set, get requests become DMAs,
//!    acks retire transmitted packets;
//! 3. acknowledgements owed to peers (coalesced: one per flow per poll);
//! 4. the chain queue (command blocks injected by event COPY actions);
//! 5. the command queues whose doorbells rang (or that were stalled waiting
//!    for a free DMA slot);
//! 6. transmission: retransmissions first, then one packet per active DMA,
//!    round-robin, within each flow's window;
//! 7. retransmission timers, and the closing of idle flows.
//!
//! Invariants the code keeps (and the tests check):
//! - nothing panics: every table access is checked, every arithmetic
//!   operation is explicit about overflow (the crate denies
//!   `indexing_slicing` and `arithmetic_side_effects`);
//! - a rejected packet writes nothing, and is reported to the initiator
//!   (ack error bit) and, unless the NIC had no flow slot for the sender,
//!   to the target context (error record);
//! - a DMA completes exactly once: its source event fires when its last
//!   packet is acknowledged, with the first error any packet met;
//! - a destination event is set only by the last packet of a DMA, and
//!   packets of a flow are applied strictly in order, so it fires only after
//!   every byte of that DMA is in memory.
//!
//! Tables are fixed-size: `PEERS` bounds how many nodes a NIC exchanges
//! packets with at once (a flow slot per peer and direction, taken on
//! first use, whatever the node's number: docs/abi.md §8.1), and the
//! nodes one broadcast spans; `EVENTS` the events per context; the other
//! sizes are the ABI's constants.

mod close;
mod collective;
mod command;
mod events;
pub mod hw;
mod mailbox;
mod rx;
mod tables;
mod tx;

use crate::abi::command::{CommandBlock, MAX_QUEUES};
use crate::abi::error::{ErrorCode, ErrorInfo, ErrorRecord};
use crate::abi::event::{EventAction, EventId};
use crate::abi::regs::{self, ContextConfig, Geometry, RegionPerms, Status};
use crate::abi::ring::Ring;
use crate::abi::{
    ABI_VERSION, CHAIN_DEPTH, ContextIndex, DEFAULT_PACKET_SIZE, MAX_CONTEXTS, MAX_DMAS,
    MAX_REGIONS, NodeId, TX_WINDOW,
};
use hw::{Hardware, Path};
use zerocopy::IntoBytes;

/// Where this engine sits: fixed by the board, reported in `LOCATION`.
pub use crate::abi::regs::Location;

/// Counters, for tests and diagnostics (not part of the ABI).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Stats {
    /// Commands executed (ring and chain), including failed ones.
    pub commands: u64,
    /// Commands that completed with an error.
    pub command_errors: u64,
    /// Data and get-request packets transmitted, including retransmissions.
    pub packets_sent: u64,
    /// Retransmitted packets.
    pub retransmits: u64,
    /// Packets received and accepted in order.
    pub packets_accepted: u64,
    /// Packets rejected by protection or addressing checks.
    pub packets_rejected: u64,
    /// Headers dropped as malformed (checksum, type, misrouted).
    pub bad_packets: u64,
    /// Duplicate packets (already applied) re-acknowledged.
    pub duplicates: u64,
    /// Packets refused for now: queued items (their queue full or not
    /// initialised), get requests that found no free DMA slot.
    pub packets_refused: u64,
    /// Flows that migrated to the sibling path past their retry limit.
    pub migrations: u64,
    /// Migrated flows whose direct path answered again.
    pub path_restores: u64,
    /// Events fired.
    pub events_fired: u64,
    /// Commands injected by COPY actions.
    pub chained: u64,
    /// DMAs completed (successfully or not).
    pub dmas_completed: u64,
    /// Errors with no context to report them to.
    pub unreported_errors: u64,
    /// Transmit flows closed by the close handshake (since ABI 1.9).
    pub flows_closed: u64,
    /// Sequenced packets dropped because they belong to another instance
    /// of the flow than the receive slot's.
    pub stale_packets: u64,
}

/// What one poll achieved; tells a scheduler whether it may sleep.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PollOutcome {
    /// Some state changed.
    pub progressed: bool,
    /// Work is outstanding that needs no external stimulus (unsent packets,
    /// chain entries, stalled queues): poll again soon.
    pub pending: bool,
    /// The engine needs a poll by this time (nanoseconds, on its clock)
    /// even if nothing else happens: a retransmission, a collective's or a
    /// refused item's timer, a close's retransmission, or the walk for idle
    /// flows (due while any transmit flow is open).
    pub timer_ns: Option<u64>,
}

/// Runtime parameters (mailbox `SetParam`).
#[derive(Clone, Copy, Debug)]
struct Params {
    packet_size: u32,
    retry_timeout_ns: u64,
    retry_limit: u32,
    queue_wait_ns: u64,
    /// The sibling rail a flow past its retry limit migrates to
    /// (`SET_PARAM` 5; `None`: the flow breaks instead).
    alternate: Option<u8>,
    /// A transmit flow idle this long is closed (`SET_PARAM` 6; 0: never).
    close_idle_ns: u64,
}

#[derive(Clone, Copy, Debug)]
struct Context {
    cfg: Option<ContextConfig>,
    /// Free-running count of consumed command blocks (`CQ_HEAD`), on the
    /// ring [`ContextConfig::cq_ring`].
    head: u64,
    /// Free-running count of error records written (`ERR_COUNT`), on the
    /// ring [`ContextConfig::err_ring`].
    err_count: u64,
}

impl Context {
    const DETACHED: Context = Context {
        cfg: None,
        head: 0,
        err_count: 0,
    };
}

#[derive(Clone, Copy, Debug)]
struct Region {
    ctx: ContextIndex,
    perms: RegionPerms,
    va: u64,
    len: u64,
    phys: u64,
}

/// An input queue of a context (QUEUE_INIT).
#[derive(Clone, Copy, Debug)]
struct InputQueue {
    base: u64,
    /// `slots` entries (any size in `1..=65536`, not only powers of two).
    ring: Ring,
    slot_size: u32,
    event: Option<EventId>,
    /// Items written so far (free-running); mirrored in header word 0. The
    /// host's consumer count (header word 1) is the ring's head.
    produced: u64,
}

#[derive(Clone, Copy, Debug)]
struct Event {
    count: i64,
    armed: bool,
    /// The first error met, if any.
    status: Option<ErrorCode>,
    action: EventAction,
}

impl Event {
    const RESET: Event = Event {
        count: 0,
        armed: false,
        status: None,
        action: EventAction::NONE,
    };
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum DmaRole {
    /// A put issued by a local context.
    Put,
    /// A get issued by a local context: one request packet to the owner.
    GetRequest,
    /// A put run on behalf of a remote requester.
    GetResponse,
}

#[derive(Clone, Copy, Debug)]
struct Dma {
    active: bool,
    role: DmaRole,
    /// Local context owning the DMA (issuer, or data owner for a response).
    ctx: ContextIndex,
    peer_node: NodeId,
    peer_ctx: ContextIndex,
    job_key: u32,
    /// Put / response: translated local source.
    src_phys: u64,
    /// Get request: source address at the owner.
    remote_src: u64,
    /// Target address (virtual, in the peer's context).
    dst_addr: u64,
    len: u32,
    /// Bytes already assigned to packets.
    next_offset: u32,
    packets_total: u32,
    packets_sent: u32,
    packets_acked: u32,
    /// Local event fired at completion (put: source event; response: the
    /// owner's event; request: the requester's destination event, only on
    /// failure).
    local_event: Option<EventId>,
    /// Raw event for the peer (put/response: destination event; request:
    /// the owner's source event).
    peer_event: u32,
    /// Request: the requester's destination event (raw), carried to the owner.
    request_dst_event: u32,
    cookie: u32,
    /// The first error met, if any.
    status: Option<ErrorCode>,
    /// Wake the target's host after the last packet.
    wake: bool,
    /// Queued DMA: the target queue.
    queue: Option<u8>,
    /// Queued DMA the target refused (queue full or not initialised): its
    /// packet goes again, flagged RETRY, at `retry_at`.
    refused: bool,
    retry_at: u64,
    /// Refusals so far (the resend back-off).
    refusals: u32,
    /// Issue order on this NIC: a queued DMA waits behind an older one of
    /// its context to the same queue that was refused.
    order: u32,
}

impl Dma {
    const IDLE: Dma = Dma {
        active: false,
        role: DmaRole::Put,
        ctx: 0,
        peer_node: 0,
        peer_ctx: 0,
        job_key: 0,
        src_phys: 0,
        remote_src: 0,
        dst_addr: 0,
        len: 0,
        next_offset: 0,
        packets_total: 0,
        packets_sent: 0,
        packets_acked: 0,
        local_event: None,
        peer_event: u32::MAX,
        request_dst_event: u32::MAX,
        cookie: 0,
        status: None,
        wake: false,
        queue: None,
        refused: false,
        retry_at: 0,
        refusals: 0,
        order: 0,
    };
}

/// The broadcast in flight (one per NIC).
#[derive(Clone, Copy, Debug)]
struct BcastTx {
    active: bool,
    ctx: ContextIndex,
    id: u32,
    low: NodeId,
    high: NodeId,
    src_phys: u64,
    dst_addr: u64,
    len: u32,
    total: u32,
    /// Packets handed to the link (rewound on a go-back).
    sent: u32,
    job_key: u32,
    src_event: Option<EventId>,
    dst_event: u32,
    cookie: u32,
    /// The first error met, if any.
    status: Option<ErrorCode>,
    progress_ns: u64,
    retries: u32,
}

impl BcastTx {
    const IDLE: BcastTx = BcastTx {
        active: false,
        ctx: 0,
        id: 0,
        low: 0,
        high: 0,
        src_phys: 0,
        dst_addr: 0,
        len: 0,
        total: 0,
        sent: 0,
        job_key: 0,
        src_event: None,
        dst_event: u32::MAX,
        cookie: 0,
        status: None,
        progress_ns: 0,
        retries: 0,
    };
}

/// What one broadcast destination has acknowledged.
#[derive(Clone, Copy, Debug)]
struct BcastDest {
    received: u32,
    /// The first error met, if any.
    status: Option<ErrorCode>,
    /// It acknowledged this broadcast on the direct path.
    direct: bool,
}

/// Receiver state of the broadcasts from one source node.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct BcastRx {
    id: u32,
    next: u32,
    started: bool,
    /// The first error met, if any.
    status: Option<ErrorCode>,
}

impl BcastRx {
    /// No broadcast received from the source yet.
    const NEW: BcastRx = BcastRx {
        id: 0,
        next: 0,
        started: false,
        status: None,
    };
}

/// A context's barrier waiting for the switch's release.
#[derive(Clone, Copy, Debug)]
struct PendingBarrier {
    seq: u32,
    /// The group's tag (ABI 1.6).
    tag: u32,
    event: Option<EventId>,
    low: NodeId,
    high: NodeId,
    job_key: u32,
    sent_ns: u64,
    /// Re-announcements since the switch last answered.
    retries: u32,
    /// Re-announcements in all (the held wait's bound).
    announces: u32,
}

impl PendingBarrier {
    /// Is `p` (a release or held packet) the switch's answer to this
    /// arrival: same barrier number, group and tag?
    fn is_answered_by(&self, p: &crate::abi::packet::BarrierPacket) -> bool {
        self.seq == p.seq
            && self.tag == p.tag
            && self.low == p.low_node
            && self.high == p.high_node
            && self.job_key == p.route.job_key
    }
}

/// A barrier the switch holds gives up after this many times the retry
/// limit of re-announcements: a switch that holds an arrival that long may
/// be waiting for members that went on without it (docs/abi.md §4.5).
const HELD_BOUND: u32 = 8;

#[derive(Clone, Copy, Debug)]
struct TxEntry {
    dma: u8,
    offset: u32,
    len: u32,
    last: bool,
}

/// Sender side of a go-back-N flow to one node.
#[derive(Clone, Copy, Debug)]
struct TxFlow {
    next_seq: u32,
    /// Oldest unacknowledged sequence number.
    base_seq: u32,
    in_flight: u32,
    window: [TxEntry; TX_WINDOW],
    /// Next sequence number to retransmit, while a go-back is in progress.
    resend: Option<u32>,
    /// End (exclusive) of the go-back in progress: packets sent after it
    /// started need no retransmission.
    resend_end: u32,
    /// Do not retransmit before this time (after a nack).
    resend_not_before: u64,
    /// Time of the last send of the oldest packet, or of the last ack.
    progress_ns: u64,
    retries: u32,
    /// A timeout resent only the oldest packet; its ack sends the rest.
    probing: bool,
    broken: bool,
    /// The flow migrated past its retry limit: its packets go through the
    /// sibling on this rail until an ack comes back on the direct path.
    via: Option<u8>,
    /// When a migrated flow next tries its direct path (a copy of its
    /// oldest unacknowledged packet sent directly).
    path_probe_ns: u64,
    /// This opening's instance, carried by every packet of the flow
    /// (nonzero once the slot is open).
    instance: u32,
    /// A packet of this instance was sent: the receiver may know it.
    sent: bool,
    /// A close was sent and its answer is awaited: nothing else is sent.
    closing: bool,
}

impl TxFlow {
    /// The path this flow's packets take.
    fn path(&self) -> Path {
        self.via.map_or(Path::Direct, Path::Sibling)
    }

    /// Go back: resend the window from its oldest packet, from
    /// `not_before` on (after a probe's ack, a nack, a change of path).
    fn go_back(&mut self, not_before: u64) {
        self.probing = false;
        self.resend = Some(self.base_seq);
        self.resend_end = self.next_seq;
        self.resend_not_before = not_before;
    }

    const NEW: TxFlow = TxFlow {
        next_seq: 0,
        base_seq: 0,
        in_flight: 0,
        window: [TxEntry {
            dma: 0,
            offset: 0,
            len: 0,
            last: false,
        }; TX_WINDOW],
        resend: None,
        resend_end: 0,
        resend_not_before: 0,
        progress_ns: 0,
        retries: 0,
        probing: false,
        broken: false,
        via: None,
        path_probe_ns: 0,
        instance: 0,
        sent: false,
        closing: false,
    };
}

/// Receiver side of a flow from one node.
#[derive(Clone, Copy, Debug)]
struct RxFlow {
    expected: u32,
    err_bits: u64,
    /// The most recent rejection, if any (the acks' error code).
    last_err: Option<ErrorCode>,
    ack_owed: bool,
    nack_owed: bool,
    listed: bool,
    /// A gap before `expected` was nacked already: the packets behind the
    /// lost one do not each send the sender back again (one go-back per
    /// loss; a lost nack is recovered by the sender's timer).
    gap_nacked: bool,
    /// Bit `i`: packet `expected - 1 - i` was refused for now.
    refused_bits: u32,
    /// Input queues holding back this sender's items: one refused, so its
    /// later items to that queue are refused too until the refused one,
    /// sent again, gets in (per-queue FIFO without blocking the flow).
    held: [Option<HeldQueue>; HELD_QUEUES],
    /// The path the sender's latest packet came by: acks go back that way.
    reply: Path,
    /// When a packet of this sender last came on the direct path (0:
    /// never): a path is not learned from a sibling within 8 timeouts of it.
    direct_ns: u64,
    /// This sender's broadcasts to this NIC, followed in its receive slot
    /// so that receiving broadcasts needs no table of its own (abi.md
    /// §8.1).
    bcast: BcastRx,
    /// The sender's flow instance this slot follows (0: none yet; the
    /// first sequenced packet binds it, a packet of a later instance
    /// binds that one instead).
    instance: u32,
    /// Gets of this NIC whose responses are to come from the sender on
    /// this slot (a close keeps the slot while any is owed).
    gets: u16,
}

/// An input queue holding back one sender's items.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct HeldQueue {
    src_ctx: ContextIndex,
    dst_ctx: ContextIndex,
    queue: u32,
    /// When it first refused the item now at the head.
    since_ns: u64,
}

impl RxFlow {
    const NEW: RxFlow = RxFlow {
        expected: 0,
        err_bits: 0,
        last_err: None,
        ack_owed: false,
        nack_owed: false,
        listed: false,
        gap_nacked: false,
        refused_bits: 0,
        held: [None; HELD_QUEUES],
        reply: Path::Direct,
        direct_ns: 0,
        bcast: BcastRx::NEW,
        instance: 0,
        gets: 0,
    };

    /// The slot with this sender's flow forgotten: what it keeps beyond
    /// the flow (the sender's broadcasts, responses owed to this NIC's
    /// gets), or `None` if nothing.
    fn without_flow(&self) -> Option<RxFlow> {
        (self.bcast != BcastRx::NEW || self.gets > 0).then_some(RxFlow {
            bcast: self.bcast,
            gets: self.gets,
            ..RxFlow::NEW
        })
    }
}

#[derive(Clone, Copy, Debug)]
struct ChainEntry {
    ctx: ContextIndex,
    block: CommandBlock,
}

/// Packets received per poll, at most.
const RX_BUDGET: usize = 64;
/// Commands executed per queue per poll, at most.
const CMD_BUDGET: usize = 32;
/// Packets transmitted per poll, at most.
const TX_BUDGET: usize = 64;
/// Default retransmission timeout: generous, because an emulated NIC may be
/// descheduled for milliseconds on a loaded host.
const DEFAULT_RETRY_TIMEOUT_NS: u64 = 50_000_000;
/// Default retransmissions of a window before a flow is declared broken.
const DEFAULT_RETRY_LIMIT: u32 = 16;
/// How long an input queue may refuse a sender's item before it fails: a
/// consumer that has not taken an item for a second is stuck or gone.
const DEFAULT_QUEUE_WAIT_NS: u64 = 1_000_000_000;
/// How long a transmit flow stays idle before it is closed: twice the
/// packet lifetime a rail guarantees (docs/abi.md §4.6: 1 s), so that no
/// packet of the flow, nor an ack of one, is still in the fabric when
/// the two ends forget it.
const DEFAULT_CLOSE_IDLE_NS: u64 = 2_000_000_000;
/// Queues one receiving flow remembers as holding back a sender's items
/// (refused, so later items to the same queue wait behind them).
const HELD_QUEUES: usize = 4;
/// Retransmission back-off: at most 2^3 = 8 times the configured timeout.
const MAX_BACKOFF_SHIFT: u32 = 3;

/// A flow's retransmission timeout after `retries` fruitless timeouts in
/// a row: the configured `timeout_ns`, doubled for each up to
/// [`MAX_BACKOFF_SHIFT`], so that a congested receiver is not buried
/// under whole-window resends (docs/abi.md §8.1).
fn backed_off(timeout_ns: u64, retries: u32) -> u64 {
    timeout_ns.saturating_mul(1 << retries.min(MAX_BACKOFF_SHIFT))
}
/// The chain queue's ring: [`CHAIN_DEPTH`] entries.
const CHAIN_RING: Ring = match Ring::power_of_two(CHAIN_DEPTH as u64) {
    Ok(ring) => ring,
    Err(_) => Ring::ONE,
};
const _: () = assert!(CHAIN_RING.entries() == CHAIN_DEPTH as u64);

/// The NIC firmware state machine. See the module documentation.
pub struct Engine<H: Hardware, const PEERS: usize, const EVENTS: usize> {
    hw: H,
    loc: Location,
    params: Params,
    contexts: [Context; MAX_CONTEXTS],
    regions: [Option<Region>; MAX_REGIONS],
    events: tables::EventTable<EVENTS>,
    queues: [[Option<InputQueue>; MAX_QUEUES as usize]; MAX_CONTEXTS],
    dmas: tables::DmaTable,
    flows: tables::Flows<PEERS>,
    bcasts: tables::Broadcasts<PEERS>,
    barriers: [Option<PendingBarrier>; MAX_CONTEXTS],
    chain: tables::ChainQueue,
    /// Contexts whose queues may hold unconsumed commands.
    queues_pending: u32,
    stats: Stats,
}

impl<H: Hardware, const PEERS: usize, const EVENTS: usize> core::fmt::Debug
    for Engine<H, PEERS, EVENTS>
{
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Engine")
            .field("loc", &self.loc)
            .field("stats", &self.stats)
            .finish()
    }
}

impl<H: Hardware, const PEERS: usize, const EVENTS: usize> Engine<H, PEERS, EVENTS> {
    /// Geometry this instantiation reports.
    pub const GEOMETRY: Geometry = Geometry {
        contexts: MAX_CONTEXTS as u8,
        events_per_ctx: if EVENTS > u16::MAX as usize {
            u16::MAX
        } else {
            EVENTS as u16
        },
        regions: MAX_REGIONS as u8,
        peers: if PEERS > u16::MAX as usize {
            u16::MAX
        } else {
            PEERS as u16
        },
        dmas: MAX_DMAS as u8,
        tx_window: TX_WINDOW as u8,
    };

    /// Bring up a NIC: reset all tables and publish identity registers.
    pub fn new(mut hw: H, loc: Location) -> Self {
        hw.store(regs::ID, regs::ID_VALUE);
        hw.store(regs::VERSION, ABI_VERSION as u64);
        hw.store(regs::GEOMETRY, Self::GEOMETRY.to_reg());
        let peer_fifo = hw.peer_fifo_depth();
        hw.store(
            regs::RESOURCES,
            regs::Resources::this_firmware(peer_fifo).to_reg(),
        );
        hw.store(regs::LOCATION, loc.to_reg());
        hw.store(regs::PACKET_SIZE, DEFAULT_PACKET_SIZE as u64);
        hw.store(regs::STATUS, Status::RUNNING.bits());
        Self {
            hw,
            loc,
            params: Params {
                packet_size: DEFAULT_PACKET_SIZE,
                retry_timeout_ns: DEFAULT_RETRY_TIMEOUT_NS,
                retry_limit: DEFAULT_RETRY_LIMIT,
                alternate: None,
                queue_wait_ns: DEFAULT_QUEUE_WAIT_NS,
                close_idle_ns: DEFAULT_CLOSE_IDLE_NS,
            },
            contexts: [Context::DETACHED; MAX_CONTEXTS],
            regions: [None; MAX_REGIONS],
            events: tables::EventTable::RESET,
            queues: [[None; MAX_QUEUES as usize]; MAX_CONTEXTS],
            dmas: tables::DmaTable::IDLE,
            flows: tables::Flows::NEW,
            bcasts: tables::Broadcasts::IDLE,
            barriers: [None; MAX_CONTEXTS],
            chain: tables::ChainQueue::EMPTY,
            queues_pending: 0,
            stats: Stats::default(),
        }
    }

    /// The board.
    pub fn hardware(&self) -> &H {
        &self.hw
    }

    /// The board, mutably (for boards that need servicing between polls).
    pub fn hardware_mut(&mut self) -> &mut H {
        &mut self.hw
    }

    /// Counters.
    pub fn stats(&self) -> Stats {
        self.stats
    }

    /// Flow slots in use: (transmit, receive). Idle flows close after the
    /// close idle time (docs/abi.md §8.1), so on a quiet NIC these fall
    /// to the receive slots kept for broadcast sources.
    pub fn flow_slots_in_use(&self) -> (usize, usize) {
        (
            self.flows.tx.values().count(),
            self.flows.rx.values().count(),
        )
    }

    /// Where this NIC sits.
    pub fn location(&self) -> Location {
        self.loc
    }

    /// Run one bounded round of work. See the module documentation.
    pub fn poll(&mut self) -> PollOutcome {
        let mut progressed = false;
        let doorbells = self.hw.take_doorbells();
        if doorbells & hw::DOORBELL_MAILBOX != 0 {
            self.run_mailbox();
            progressed = true;
        }
        self.queues_pending |= (doorbells & ((1u64 << MAX_CONTEXTS) - 1)) as u32;

        progressed |= self.receive_peer_sets();
        progressed |= self.receive();
        progressed |= self.send_acks();
        progressed |= self.run_chain();
        progressed |= self.run_queues();
        progressed |= self.transmit();
        progressed |= self.check_timers();

        // Work that can move without an external stimulus. A queue or chain
        // stalled on a full DMA table waits for an ack, which is a stimulus.
        let slots_free = !self.dmas.full();
        let chain_pending = !self.chain.is_empty();
        let pending = ((chain_pending || self.queues_pending != 0) && slots_free)
            || self.has_unsent()
            || self.bcast_sendable();
        PollOutcome {
            progressed,
            pending,
            timer_ns: self.next_timer(),
        }
    }

    /// Translate `len` bytes at `va` in `ctx` for an access needing `perm`.
    fn translate(
        &self,
        ctx: ContextIndex,
        va: u64,
        len: u64,
        perm: RegionPerms,
    ) -> Result<u64, ErrorCode> {
        let end = va.checked_add(len).ok_or(ErrorCode::AddressOverflow)?;
        // Regions of one context never overlap (MapRegion refuses it), so
        // the first region containing the range is the only one.
        for r in self.regions.iter().flatten() {
            // r.va + r.len cannot overflow: MapRegion rejects such regions.
            if r.ctx == ctx && va >= r.va && end <= r.va.saturating_add(r.len) {
                if !r.perms.contains(perm) {
                    break;
                }
                return r
                    .phys
                    .checked_add(va.wrapping_sub(r.va))
                    .ok_or(ErrorCode::AddressOverflow);
            }
        }
        Err(ErrorCode::Protection)
    }

    fn context(&self, ctx: ContextIndex) -> Option<&ContextConfig> {
        self.contexts.get(ctx as usize).and_then(|c| c.cfg.as_ref())
    }

    /// Write an error record into `ctx`'s error ring and wake its host.
    fn report(&mut self, ctx: ContextIndex, mut info: ErrorInfo) {
        let Some(c) = self.contexts.get_mut(ctx as usize) else {
            self.stats.unreported_errors = self.stats.unreported_errors.wrapping_add(1);
            return;
        };
        let Some(cfg) = c.cfg else {
            self.stats.unreported_errors = self.stats.unreported_errors.wrapping_add(1);
            self.hw
                .store(regs::STATS_ERRORS, self.stats.unreported_errors);
            return;
        };
        // The error ring overwrites: the NIC never waits for the host, which
        // tells lost records from `ERR_COUNT` (see `Ring::unread`).
        info.seq = c.err_count;
        let offset = cfg
            .err_ring()
            .byte_offset(c.err_count, size_of::<ErrorRecord>() as u32);
        c.err_count = c.err_count.wrapping_add(1);
        let count = c.err_count;
        let record: ErrorRecord = info.emit();
        let phys = cfg.err_base.wrapping_add(offset);
        if self.hw.write(phys, record.as_bytes()).is_err() {
            self.stats.unreported_errors = self.stats.unreported_errors.wrapping_add(1);
        }
        if let Some(reg) = regs::ctx_reg(ctx, regs::ERR_COUNT) {
            self.hw.store(reg, count);
        }
        self.hw.wake(ctx);
    }

    /// When the next refused queued item's back-off ends. (One whose
    /// back-off is over but waits behind an older refused item needs no
    /// timer: the ack of that item's retry frees it.)
    fn requeue_timer(&self) -> Option<u64> {
        if self.dmas.active() == 0 {
            return None;
        }
        let now = self.hw.now_ns();
        self.dmas
            .slots
            .iter()
            .filter(|d| d.active && d.refused && d.packets_sent == 0 && d.retry_at > now)
            .map(|d| d.retry_at)
            .min()
    }

    fn next_timer(&self) -> Option<u64> {
        let collective = self.collective_timer();
        let close = self.close_timer();
        if !self.flows.any_busy() {
            return [collective, self.requeue_timer(), close]
                .into_iter()
                .flatten()
                .min();
        }
        let unicast = self
            .flows
            .busy()
            .iter()
            .filter_map(|&n| self.flows.tx.get(n))
            .filter(|f| f.in_flight > 0 && !f.broken)
            .map(|f| {
                let due = match f.resend {
                    Some(_) => f.resend_not_before,
                    None => f
                        .progress_ns
                        .saturating_add(backed_off(self.params.retry_timeout_ns, f.retries)),
                };
                match f.via {
                    Some(_) => due.min(f.path_probe_ns),
                    None => due,
                }
            })
            .min();
        [unicast, collective, self.requeue_timer(), close]
            .into_iter()
            .flatten()
            .min()
    }
}

#[cfg(test)]
mod tests;
