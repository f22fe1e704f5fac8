//! Input queues: creating one (collective), sending an item, receiving
//! items (blocking or polling) from the layout of `railcoll_fw::abi::queue`.

use super::*;

/// An input queue for queued DMAs (QDMA, [ELAN-SEM §13 rule 7]): created
/// collectively (same index and layout on every rank), on rail 0.
#[derive(Debug)]
pub struct InputQueue {
    index: u8,
    buf: SymBuffer,
    /// Its slots (validated once, when the queue is created).
    ring: Ring,
    slot_size: u32,
    consumed: Cell<u64>,
}

/// One received queue item.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct QueueItem {
    /// Sending rank.
    pub src: usize,
    /// Payload bytes copied out.
    pub len: usize,
}

impl InputQueue {
    /// Largest payload one item carries.
    pub fn max_payload(&self) -> usize {
        self.slot_size as usize - QueueItemHeader::SIZE
    }
}

impl Endpoint {
    /// Create an input queue of `slots` items of up to `max_payload` bytes.
    /// Collective: every rank calls it in the same order. When it returns,
    /// this rank's NIC knows the queue; other ranks may send to it only
    /// after that (a barrier after creating is the usual way): an item for
    /// a queue its target NIC does not know yet fails with `BadEvent`.
    pub fn create_queue(&self, slots: u32, max_payload: usize) -> Result<InputQueue, Error> {
        let index = self.next_queue.get();
        if u32::from(index) >= MAX_QUEUES {
            return Err(Error::EventsExhausted("input queue"));
        }
        let slot_size = (max_payload + QueueItemHeader::SIZE).next_multiple_of(8);
        let ring = Ring::new(u64::from(slots))
            .ok()
            .filter(|_| slots <= 65_536 && slot_size <= 4096 && max_payload > 0)
            .ok_or_else(|| {
                Error::Config(format!(
                    "queues hold 1..=65536 slots of 1..=4088 bytes, asked {slots} x {max_payload}"
                ))
            })?;
        let buf = self.alloc_aligned(QueueHeader::SIZE + slots as usize * slot_size, 64)?;
        // The NIC starts producing at the consumer count it finds in the
        // header: clear what an earlier user of this arena range left.
        self.write_local(&buf, 0, &[0; QueueHeader::SIZE])?;
        self.next_queue.set(index + 1);
        let mut driver = self.driver.borrow_mut();
        let cmd = Command::QueueInit {
            queue: index,
            slots,
            slot_size: slot_size as u32,
            event: None,
            base: buf.va(0),
        };
        driver.push(0, &cmd, 0)?;
        driver.fence(0)?;
        Ok(InputQueue {
            index,
            buf,
            ring,
            slot_size: slot_size as u32,
            consumed: Cell::new(0),
        })
    }

    /// Send `src` (at most `queue.max_payload()` bytes) as one item into
    /// `dst_rank`'s queue. The handle completes when the item is in a slot
    /// there; a full queue, or one not created yet, delays it (the NIC
    /// sends it again, in order), never drops it, for up to the NIC's
    /// queue wait (1 s): then it fails with `QueueFull` or `NoQueue`.
    pub fn queue_send(
        &self,
        queue: &InputQueue,
        dst_rank: usize,
        src: &SymBuffer,
    ) -> Result<PutHandle<'_>, Error> {
        self.check_rank(dst_rank)?;
        if src.len() > queue.max_payload() {
            return Err(Error::TooLarge {
                len: src.len(),
                max: queue.max_payload(),
            });
        }
        let len = dma_len(src.len())?;
        self.check_in_arena(src)?;
        let (index, src_addr) = (queue.index, src.va(0));
        let command = Command::Dma(DmaCommand {
            kind: DmaKind::Queued(index),
            len,
            vp: dst_rank as u32,
            src_addr,
            dst_addr: 0,
            src_event: None,
            dst_event: None,
            wake: false,
        });
        self.post_one(0, Tracked::Now(command), src.len())
    }

    /// Take the next item, blocking until one arrives; its payload is
    /// copied into `out` (which must hold `queue.max_payload()` bytes, or at
    /// least the item).
    pub fn queue_recv(&self, queue: &InputQueue, out: &mut [u8]) -> Result<QueueItem, Error> {
        let mem = self.local_memory(&queue.buf)?;
        let consumed = queue.consumed.get();
        self.wait_until(&mut || queue_filled(&mem, consumed))?;
        self.take_item(queue, &mem, out)
    }

    /// [`Endpoint::queue_recv`] without blocking: `None` if no item has
    /// arrived (a modeled environment lets a poll's worth of time pass).
    pub fn try_queue_recv(
        &self,
        queue: &InputQueue,
        out: &mut [u8],
    ) -> Result<Option<QueueItem>, Error> {
        let mem = self.local_memory(&queue.buf)?;
        if !queue_filled(&mem, queue.consumed.get()) {
            self.driver.borrow().wait_hook().observer().idle_poll()?;
            return Ok(None);
        }
        self.take_item(queue, &mem, out).map(Some)
    }

    /// Copy out the item at the queue's consumer position and free its slot.
    pub(super) fn take_item(
        &self,
        queue: &InputQueue,
        mem: &DmaMemory,
        out: &mut [u8],
    ) -> Result<QueueItem, Error> {
        let consumed = queue.consumed.get();
        let slot = slot_offset(queue.ring, consumed, queue.slot_size) as usize;
        let mut header = QueueItemHeader::new_zeroed();
        mem.read(slot, header.as_mut_bytes())
            .map_err(|e| out_of_range("the queue", e))?;
        let len = header.len.get() as usize;
        let src = self.topology().rank_of(
            usize::from(header.src_node.get()),
            usize::from(header.src_ctx),
        )?;
        if len > out.len() {
            return Err(Error::OutOfBounds {
                what: "the receive buffer",
                offset: 0,
                len,
                limit: out.len(),
            });
        }
        mem.read(slot + QueueItemHeader::SIZE, &mut out[..len])
            .map_err(|e| out_of_range("the queue", e))?;
        // Free the slot: the NIC reads the consumer count when the queue
        // looks full.
        let next = consumed.wrapping_add(1);
        queue.consumed.set(next);
        mem.store_u64(QueueHeader::CONSUMED, next, Ordering::Release)
            .map_err(|e| out_of_range("the queue", e))?;
        Ok(QueueItem { src, len })
    }
}

/// Has the NIC produced past `consumed` in a queue's header?
fn queue_filled(mem: &DmaMemory, consumed: u64) -> bool {
    mem.load_u64(QueueHeader::PRODUCED, Ordering::Acquire)
        .is_ok_and(|p| p != consumed)
}
