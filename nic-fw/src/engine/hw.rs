//! The hardware the engine runs on, as six small traits.
//!
//! The engine never touches memory, links or registers directly; it asks the
//! board through these traits (the `nicbm` boundary of
//! [EMU-ANCH lesson 2]). The emulator implements them over real memory
//! and channels; an FPGA soft core implements them over its DMA engine, MAC
//! and register block.
//!
//! Contracts:
//! - Host memory is addressed by *host physical* addresses (what the region
//!   table and the context configuration hold). An access the board cannot
//!   perform returns [`BusError`]; it must never panic.
//! - [`HostMemory::write_word_release`] is ordered after every earlier write
//!   of this engine: a host that observes the word also observes the data
//!   (the completion-word guarantee of [ELAN-SEM §13 rule 4]).
//! - [`Link::send`] takes a header and an optional payload *source* in this
//!   node's host memory. The board reads the payload when it transmits (the
//!   emulator reads it when the receiver delivers it, so that a put costs
//!   exactly one copy) and appends its CRC trailer. The engine keeps the
//!   source range untouched until the packet is acknowledged.
//! - [`Link::recv`] returns only packets whose payload passed its CRC
//!   trailer: the receive port discards the others (docs/abi.md §8).
//! - [`Link::deliver`] writes a received payload into this node's host memory
//!   and returns only once the bytes are visible to the host.
//! - [`RegisterFile::take_doorbells`] returns, and clears, the doorbells rung
//!   since the last call: bit `c` for a write to context `c`'s `CQ_TAIL`,
//!   [`DOORBELL_MAILBOX`] for a write to `MBOX_CMD`.
//! - [`Siblings`] is the node-level path between the NICs of one host (a
//!   PCIe peer-to-peer write into the target NIC's `PEER_SET` FIFO): a set
//!   posted there is taken by the target, once, in posting order among the
//!   sets of one sender. A board with one NIC per node has no siblings.
//! - [`Path::Sibling`] (ABI 1.5) is a packet's way round a dead link: the
//!   board hands it to this node's NIC on that rail, which sends it on its
//!   own link to the destination node's NIC on that rail, which hands it to
//!   the destination's NIC on *this* NIC's rail. The packet is unchanged;
//!   [`Link::recv`] tells the receiver which path it came by. A board
//!   without that sibling drops the packet (`send` returns false).

use crate::abi::ContextIndex;
use crate::abi::error::ErrorCode;
pub use crate::abi::event::PeerSet;
use crate::abi::packet::PacketHeader;
use crate::abi::regs::{Access, Reg};

/// A host-memory access the board could not carry out.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BusError;

/// Doorbell bit for the admin mailbox.
pub const DOORBELL_MAILBOX: u64 = 1 << 63;

/// The NIC's DMA access to host memory.
pub trait HostMemory {
    /// Read `buf.len()` bytes at host physical `phys`.
    fn read(&mut self, phys: u64, buf: &mut [u8]) -> Result<(), BusError>;
    /// Write `data` at host physical `phys`.
    fn write(&mut self, phys: u64, data: &[u8]) -> Result<(), BusError>;
    /// Store an aligned 64-bit word with release ordering (completion words).
    fn write_word_release(&mut self, phys: u64, value: u64) -> Result<(), BusError>;
}

/// Payload of an outgoing packet: `len` bytes of this node's host memory.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PayloadSource {
    /// Host physical address.
    pub phys: u64,
    /// Length in bytes.
    pub len: u32,
}

/// Which way a unicast packet travels between this NIC and its peer on
/// the same rail of another node.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Path {
    /// This NIC's own link and its rail's switch.
    #[default]
    Direct,
    /// Through this node's NIC on the given rail, that rail's switch, and
    /// the destination node's NIC on that rail (docs/abi.md §8.4).
    Sibling(u8),
}

/// The link to this rail's switch.
pub trait Link {
    /// A received payload, as the board holds it until delivered.
    type Payload;
    /// Transmit a packet along `path`. A packet the link cannot take is
    /// simply not sent (`false`): reliability is the engine's job, it will
    /// retransmit. Switch-bound packets (broadcast, barrier) always go
    /// [`Path::Direct`].
    fn send(&mut self, header: &PacketHeader, payload: Option<PayloadSource>, path: Path) -> bool;
    /// Take the next received packet, if any, and the path it came by.
    fn recv(&mut self) -> Option<(PacketHeader, Self::Payload, Path)>;
    /// Length of a received payload.
    fn payload_len(&self, payload: &Self::Payload) -> usize;
    /// Write a received payload into host memory at `phys`.
    fn deliver(&mut self, payload: &Self::Payload, phys: u64) -> Result<(), BusError>;
}

/// The BAR0 register file as the NIC sees it. Boards implement the raw
/// offset accessors; the engine uses the typed [`RegisterFile::load`] and
/// [`RegisterFile::store`].
pub trait RegisterFile {
    /// Read a register.
    fn reg_read(&self, offset: u32) -> u64;
    /// Write a register (NIC-owned registers: `CQ_HEAD`, `MBOX_STATUS`, ...).
    fn reg_write(&mut self, offset: u32, value: u64);
    /// Take and clear the pending doorbells.
    fn take_doorbells(&mut self) -> u64;

    /// Read a register. The NIC owns the file: any host access will do.
    fn load<A: Access>(&self, reg: Reg<u64, A>) -> u64
    where
        Self: Sized,
    {
        self.reg_read(reg.offset())
    }

    /// Write a register. The NIC owns the file: it publishes the host's
    /// read-only registers and resets the doorbells at attach.
    fn store<A: Access>(&mut self, reg: Reg<u64, A>, value: u64)
    where
        Self: Sized,
    {
        self.reg_write(reg.offset(), value);
    }
}

/// The only clock the firmware reads (virtual time in modeled mode).
pub trait Clock {
    /// Nanoseconds since an arbitrary origin, monotonic.
    fn now_ns(&self) -> u64;
}

/// Interrupt/wakeup line to the host.
pub trait HostWake {
    /// Wake the host threads waiting on context `ctx`.
    fn wake(&mut self, ctx: ContextIndex);
}

/// The NIC-to-NIC path within a node.
pub trait Siblings {
    /// Post `set` to this node's NIC on `rail`: `PeerUnreachable` if there
    /// is none (or it is this NIC: the engine reports it), `Busy` if its
    /// `PEER_SET` FIFO is full (the engine holds the command and tries
    /// again on a later poll, once the sibling has taken a word).
    fn peer_set(&mut self, rail: u8, set: PeerSet) -> Result<(), ErrorCode>;
    /// Take the next set a sibling posted to this NIC.
    fn take_peer_set(&mut self) -> Option<PeerSet>;
    /// Entries of this NIC's `PEER_SET` FIFO (0: a board without siblings),
    /// reported in `RESOURCES`.
    fn peer_fifo_depth(&self) -> u8;
}

/// What the engine just did, reported to boards that account for it: a
/// modeled board turns each into virtual time, hardware may count them in
/// performance counters or ignore them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Activity {
    /// A command block was executed (from a ring or the chain queue).
    Command,
    /// An event fired (its action ran).
    EventFired,
    /// A DMA (put, get or broadcast) was set up on transmit channel
    /// `channel` (a DMA slot, or [`BCAST_CHANNEL`]).
    DmaStart {
        /// The channel.
        channel: u8,
    },
    /// The next packet handed to [`Link::send`] belongs to the DMA on
    /// `channel`, so a board can hold it until that DMA's start-up is over
    /// without holding other DMAs' packets.
    DmaPacket {
        /// The channel.
        channel: u8,
    },
}

/// The transmit channel of the broadcast engine in [`Activity`] (DMA
/// slots number `0..MAX_DMAS`).
pub const BCAST_CHANNEL: u8 = crate::abi::MAX_DMAS as u8;

// DMA slots and the broadcast engine must all fit a `u8` channel.
const _: () = assert!(crate::abi::MAX_DMAS < u8::MAX as usize);

/// Activity accounting (optional: the default ignores it).
pub trait Meter {
    /// The engine did `activity`.
    fn note(&mut self, activity: Activity) {
        let _ = activity;
    }
}

/// Everything the engine needs from its board.
pub trait Hardware: HostMemory + Link + RegisterFile + Clock + HostWake + Meter + Siblings {}

impl<T: HostMemory + Link + RegisterFile + Clock + HostWake + Meter + Siblings> Hardware for T {}
