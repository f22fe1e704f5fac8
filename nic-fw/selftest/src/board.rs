//! The loopback board: the engine's hardware traits over a slice of
//! memory standing for the host's, a plain register array standing for
//! BAR0, and two small frame queues standing for the MAC.
//!
//! Contract (the engine's, `railcoll_fw::engine::hw`, kept by this board):
//! host memory is `mem`, addressed from 0, and an access outside it is a
//! [`BusError`]; a transmitted payload is copied out of `mem` when it is
//! sent (the frame owns its bytes from then on); a received payload stays
//! in the board until the next [`Link::recv`], and [`Link::deliver`]
//! refuses a payload of an older receive; the board has no sibling NICs.
//! The host side rings doorbells with [`LoopbackBoard::host_write`], as a
//! host's BAR0 write does on hardware.

use core::cell::Cell;

use railcoll_fw::abi::ContextIndex;
use railcoll_fw::abi::error::ErrorCode;
use railcoll_fw::abi::packet::{HEADER_LEN, PacketHeader};
use railcoll_fw::abi::regs;
use railcoll_fw::engine::hw::{
    BusError, Clock, DOORBELL_MAILBOX, HostMemory, HostWake, Link, Meter, Path, PayloadSource,
    PeerSet, RegisterFile, Siblings,
};

/// Largest payload a frame carries: the ABI's default packet size. A
/// larger payload is lost on this link (counted), as on a MAC whose MTU
/// it exceeds; the self-test never raises the packet size.
pub const FRAME_PAYLOAD: usize = railcoll_fw::abi::DEFAULT_PACKET_SIZE as usize;

/// Frames the transmit queue holds (a full queue refuses `send`: the
/// engine sends again later).
pub const TX_FRAMES: usize = 4;
/// Frames the receive queue holds (a frame arriving at a full queue is
/// lost, as at a full receive FIFO: go-back-N sends it again).
pub const RX_FRAMES: usize = 8;

const BAR0_WORDS: usize = regs::BAR0_SIZE as usize / 8;

/// One packet on the in-memory link: its header, path and payload bytes.
#[derive(Clone, Copy, Debug)]
pub struct Frame {
    header: [u8; HEADER_LEN],
    /// The path it was sent along (and arrives by).
    pub path: Path,
    len: usize,
    bytes: [u8; FRAME_PAYLOAD],
}

impl Frame {
    /// An empty frame.
    pub const EMPTY: Frame = Frame {
        header: [0; HEADER_LEN],
        path: Path::Direct,
        len: 0,
        bytes: [0; FRAME_PAYLOAD],
    };

    /// The wire header.
    pub fn header(&self) -> PacketHeader {
        PacketHeader::from_bytes(&self.header)
    }

    /// The frame with `header` in place of its own (what a switch
    /// rewrites when it releases a barrier).
    pub fn with_header(mut self, header: &PacketHeader) -> Frame {
        self.header = header.to_bytes();
        self
    }

    /// The payload bytes.
    pub fn payload(&self) -> &[u8] {
        self.bytes.get(..self.len).unwrap_or(&[])
    }
}

/// A bounded FIFO of frames, without an allocator.
#[derive(Debug)]
pub struct FrameQueue<const N: usize> {
    frames: [Frame; N],
    head: usize,
    len: usize,
}

impl<const N: usize> FrameQueue<N> {
    /// An empty queue.
    pub const fn new() -> Self {
        Self {
            frames: [Frame::EMPTY; N],
            head: 0,
            len: 0,
        }
    }

    /// Frames queued.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Nothing queued.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The slot the next push fills, if the queue has room.
    fn tail_slot(&mut self) -> Option<&mut Frame> {
        if self.len >= N {
            return None;
        }
        let at = self.head.wrapping_add(self.len).checked_rem(N)?;
        self.frames.get_mut(at)
    }

    /// Append a copy of `frame`; false (and nothing changes) when full.
    pub fn push(&mut self, frame: &Frame) -> bool {
        let Some(slot) = self.tail_slot() else {
            return false;
        };
        *slot = *frame;
        self.len = self.len.wrapping_add(1);
        true
    }

    /// Move the oldest frame into `out`; false when empty.
    pub fn pop_into(&mut self, out: &mut Frame) -> bool {
        if self.len == 0 {
            return false;
        }
        let Some(frame) = self.frames.get(self.head) else {
            return false;
        };
        *out = *frame;
        self.head = self.head.wrapping_add(1).checked_rem(N).unwrap_or(0);
        self.len = self.len.wrapping_sub(1);
        true
    }
}

impl<const N: usize> Default for FrameQueue<N> {
    fn default() -> Self {
        Self::new()
    }
}

/// A received payload as the board hands it to the engine: which receive
/// it came from, and its length.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Received {
    receive: u32,
    len: usize,
}

/// One NIC's board in the self-test.
#[derive(Debug)]
pub struct LoopbackBoard<'m> {
    mem: &'m mut [u8],
    regs: [u64; BAR0_WORDS],
    doorbells: u64,
    clock: &'m Cell<u64>,
    /// Frames the engine sent, for the fabric to carry.
    pub outbox: FrameQueue<TX_FRAMES>,
    /// Frames the fabric delivered, for the engine to receive.
    pub inbox: FrameQueue<RX_FRAMES>,
    current: Frame,
    receives: u32,
    /// Host wake-ups the engine raised.
    pub wakes: u32,
    /// Payloads lost because they exceed [`FRAME_PAYLOAD`].
    pub oversize: u32,
}

impl<'m> LoopbackBoard<'m> {
    /// A board whose host memory is `mem` and whose clock reads `clock`
    /// (nanoseconds; the fabric advances it).
    pub fn new(mem: &'m mut [u8], clock: &'m Cell<u64>) -> Self {
        Self {
            mem,
            regs: [0; BAR0_WORDS],
            doorbells: 0,
            clock,
            outbox: FrameQueue::new(),
            inbox: FrameQueue::new(),
            current: Frame::EMPTY,
            receives: 0,
            wakes: 0,
            oversize: 0,
        }
    }

    /// The host's BAR0 write: stores the register and rings its doorbell
    /// (`CQ_TAIL` of a context, `MBOX_CMD`), as the emulator's register
    /// file and an FPGA's do.
    pub fn host_write(&mut self, offset: u32, value: u64) {
        self.reg_write(offset, value);
        if offset == regs::MBOX_CMD.offset() {
            self.doorbells |= DOORBELL_MAILBOX;
        } else if let Some(ctx) = regs::CQ_TAIL.context_of(offset) {
            self.doorbells |= 1u64.checked_shl(u32::from(ctx)).unwrap_or(0);
        }
    }

    /// The host's BAR0 read.
    pub fn host_read(&self, offset: u32) -> u64 {
        self.reg_read(offset)
    }

    fn range(&self, phys: u64, len: usize) -> Result<core::ops::Range<usize>, BusError> {
        let start = usize::try_from(phys).map_err(|_| BusError)?;
        let end = start.checked_add(len).ok_or(BusError)?;
        if end > self.mem.len() {
            return Err(BusError);
        }
        Ok(start..end)
    }
}

impl HostMemory for LoopbackBoard<'_> {
    fn read(&mut self, phys: u64, buf: &mut [u8]) -> Result<(), BusError> {
        let range = self.range(phys, buf.len())?;
        buf.copy_from_slice(self.mem.get(range).ok_or(BusError)?);
        Ok(())
    }

    fn write(&mut self, phys: u64, data: &[u8]) -> Result<(), BusError> {
        let range = self.range(phys, data.len())?;
        self.mem
            .get_mut(range)
            .ok_or(BusError)?
            .copy_from_slice(data);
        Ok(())
    }

    fn write_word_release(&mut self, phys: u64, value: u64) -> Result<(), BusError> {
        // One hart, one memory: program order is the release order.
        self.write(phys, &value.to_le_bytes())
    }
}

impl Link for LoopbackBoard<'_> {
    type Payload = Received;

    fn send(&mut self, header: &PacketHeader, payload: Option<PayloadSource>, path: Path) -> bool {
        let len = payload.map_or(0, |p| p.len as usize);
        if len > FRAME_PAYLOAD {
            self.oversize = self.oversize.wrapping_add(1);
            return true;
        }
        let source = match payload {
            Some(p) => match self.range(p.phys, len) {
                Ok(range) => range,
                // The engine checked the range: a source outside memory
                // is lost like a packet the MAC could not read.
                Err(BusError) => return true,
            },
            None => 0..0,
        };
        let mut frame = Frame {
            header: header.to_bytes(),
            path,
            len,
            bytes: [0; FRAME_PAYLOAD],
        };
        // The destination is cut to the source's length, so the copy's
        // lengths agree by construction (no panic path survives).
        if let Some(src) = self.mem.get(source)
            && let Some(dst) = frame.bytes.get_mut(..src.len())
        {
            dst.copy_from_slice(src);
        }
        self.outbox.push(&frame)
    }

    fn recv(&mut self) -> Option<(PacketHeader, Received, Path)> {
        let mut frame = Frame::EMPTY;
        if !self.inbox.pop_into(&mut frame) {
            return None;
        }
        self.current = frame;
        self.receives = self.receives.wrapping_add(1);
        let received = Received {
            receive: self.receives,
            len: frame.len,
        };
        Some((frame.header(), received, frame.path))
    }

    fn payload_len(&self, payload: &Received) -> usize {
        payload.len
    }

    fn deliver(&mut self, payload: &Received, phys: u64) -> Result<(), BusError> {
        if payload.receive != self.receives {
            return Err(BusError);
        }
        let range = self.range(phys, payload.len)?;
        let src = self.current.bytes.get(..payload.len).ok_or(BusError)?;
        self.mem
            .get_mut(range)
            .ok_or(BusError)?
            .copy_from_slice(src);
        Ok(())
    }
}

impl RegisterFile for LoopbackBoard<'_> {
    fn reg_read(&self, offset: u32) -> u64 {
        if !offset.is_multiple_of(8) {
            return u64::MAX;
        }
        self.regs
            .get(offset as usize / 8)
            .copied()
            .unwrap_or(u64::MAX)
    }

    fn reg_write(&mut self, offset: u32, value: u64) {
        if offset.is_multiple_of(8)
            && let Some(word) = self.regs.get_mut(offset as usize / 8)
        {
            *word = value;
        }
    }

    fn take_doorbells(&mut self) -> u64 {
        core::mem::take(&mut self.doorbells)
    }
}

impl Clock for LoopbackBoard<'_> {
    fn now_ns(&self) -> u64 {
        self.clock.get()
    }
}

impl HostWake for LoopbackBoard<'_> {
    fn wake(&mut self, _ctx: ContextIndex) {
        self.wakes = self.wakes.wrapping_add(1);
    }
}

/// One NIC per node: no sibling paths.
impl Siblings for LoopbackBoard<'_> {
    fn peer_set(&mut self, _rail: u8, _set: PeerSet) -> Result<(), ErrorCode> {
        Err(ErrorCode::PeerUnreachable)
    }

    fn take_peer_set(&mut self) -> Option<PeerSet> {
        None
    }

    fn peer_fifo_depth(&self) -> u8 {
        0
    }
}

impl Meter for LoopbackBoard<'_> {}

#[cfg(test)]
mod tests {
    use super::*;

    fn frame(tag: u8, len: usize) -> Frame {
        let mut f = Frame::EMPTY;
        f.len = len;
        f.bytes[0] = tag;
        f
    }

    #[test]
    fn a_queue_is_first_in_first_out_and_refuses_when_full() {
        let mut q = FrameQueue::<2>::new();
        assert!(q.push(&frame(1, 1)));
        assert!(q.push(&frame(2, 1)));
        assert!(!q.push(&frame(3, 1)), "full");
        let mut out = Frame::EMPTY;
        assert!(q.pop_into(&mut out));
        assert_eq!(out.payload(), &[1]);
        assert!(q.push(&frame(4, 1)), "room again, across the wrap");
        for want in [2, 4] {
            assert!(q.pop_into(&mut out));
            assert_eq!(out.payload(), &[want]);
        }
        assert!(!q.pop_into(&mut out) && q.is_empty());
    }

    #[test]
    fn memory_outside_the_slice_is_a_bus_error_and_nothing_is_written() {
        let clock = Cell::new(0);
        let mut mem = [0u8; 64];
        let mut board = LoopbackBoard::new(&mut mem, &clock);
        assert_eq!(board.write(60, &[1; 8]), Err(BusError));
        assert_eq!(board.write(u64::MAX, &[1]), Err(BusError));
        let mut buf = [0u8; 4];
        assert_eq!(board.read(61, &mut buf), Err(BusError));
        assert_eq!(board.write(56, &[7; 8]), Ok(()));
        assert_eq!(&mem[..56], &[0; 56][..]);
        assert_eq!(&mem[56..], &[7; 8][..]);
    }

    #[test]
    fn a_payload_of_an_older_receive_is_refused() {
        let clock = Cell::new(0);
        let mut mem = [0u8; 64];
        let mut board = LoopbackBoard::new(&mut mem, &clock);
        assert!(board.inbox.push(&frame(9, 4)));
        assert!(board.inbox.push(&frame(8, 4)));
        let (_, first, _) = board.recv().expect("a frame");
        let (_, second, _) = board.recv().expect("a frame");
        assert_eq!(board.deliver(&first, 0), Err(BusError));
        assert_eq!(board.deliver(&second, 0), Ok(()));
        assert_eq!(mem[0], 8);
    }

    #[test]
    fn doorbells_ring_for_the_tail_and_mailbox_only() {
        let clock = Cell::new(0);
        let mut mem = [0u8; 8];
        let mut board = LoopbackBoard::new(&mut mem, &clock);
        let tail3 = regs::ctx_reg(3, regs::CQ_TAIL).expect("context 3");
        board.host_write(tail3.offset(), 5);
        board.host_write(regs::MBOX_ARG0.offset(), 1);
        assert_eq!(board.take_doorbells(), 1 << 3);
        board.host_write(regs::MBOX_CMD.offset(), 1);
        assert_eq!(board.take_doorbells(), DOORBELL_MAILBOX);
        assert_eq!(board.take_doorbells(), 0);
        assert_eq!(board.host_read(tail3.offset()), 5);
    }
}
