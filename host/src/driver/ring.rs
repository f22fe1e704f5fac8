//! The command rings: space, writing a block, the doorbell, fences
//! (Hubris' descriptor-ring discipline: write, release fence, doorbell; a
//! slot is reused once `CQ_HEAD` has passed it).

use super::*;

impl Driver {
    pub(super) fn regs(&self, rail: usize) -> Result<&dyn RegisterIo, Error> {
        Ok(self.device.registers(rail)?)
    }

    pub(super) fn port(&mut self, rail: usize) -> Result<&mut RailPort, Error> {
        let rails = self.ports.len();
        self.ports
            .get_mut(rail)
            .ok_or(Error::NoSuchRail { rail, rails })
    }

    /// Wait until rail `rail`'s ring has room for `n` more blocks (first
    /// making what is queued visible, so the NIC can consume it).
    pub(super) fn wait_space(&mut self, rail: usize, n: u64) -> Result<(), Error> {
        let port = self.port(rail)?;
        let (ring, head, tail, head_reg) = (port.ring, port.head, port.tail, port.head_reg);
        if n > ring.entries() {
            return Err(Error::Config(format!(
                "{n} command blocks do not fit a ring of {}",
                ring.entries()
            )));
        }
        if ring.space(head, tail).is_ok_and(|free| free >= n) {
            return Ok(());
        }
        self.ring(rail)?;
        let regs = self.device.registers(rail)?;
        let mut head = head;
        self.wait.wait_until(&mut || {
            head = read_reg(regs, head_reg);
            ring.space(head, tail).is_ok_and(|free| free >= n)
        })?;
        self.port(rail)?.head = head;
        Ok(())
    }

    /// Write `block` at ring index `index` of rail `rail` (not yet
    /// published: the caller advances the tail).
    pub(super) fn write_block(
        &mut self,
        rail: usize,
        index: u64,
        block: &CommandBlock,
    ) -> Result<(), Error> {
        let port = self.port(rail)?;
        let offset = port.ring.byte_offset(index, COMMAND_BLOCK_SIZE as u32) as usize;
        port.blocks
            .mem
            .write(offset, &block.to_bytes())
            .map_err(|e| out_of_range("the command ring", e))
    }

    /// Write a command block into rail `rail`'s ring (not yet visible to the
    /// NIC: call [`Driver::ring`]). Waits for ring space if needed.
    pub fn push_block(&mut self, rail: usize, block: &CommandBlock) -> Result<(), Error> {
        self.wait_space(rail, 1)?;
        let tail = self.port(rail)?.tail;
        self.write_block(rail, tail, block)?;
        self.port(rail)?.tail = tail.wrapping_add(1);
        Ok(())
    }

    /// Queue a command (see [`Driver::push_block`]).
    pub fn push(&mut self, rail: usize, cmd: &Command, cookie: u32) -> Result<(), Error> {
        self.push_block(rail, &cmd.emit(cookie))
    }

    /// Ring rail `rail`'s doorbell if commands were queued since last time.
    pub fn ring(&mut self, rail: usize) -> Result<(), Error> {
        let regs = self.device.registers(rail)?;
        let rails = self.ports.len();
        let port = self
            .ports
            .get_mut(rail)
            .ok_or(Error::NoSuchRail { rail, rails })?;
        if port.rung == port.tail {
            return Ok(());
        }
        let (tail, reg) = (port.tail, port.tail_reg);
        port.rung = tail;
        // Blocks must be visible before the NIC sees the new tail.
        fence(Ordering::Release);
        write_reg(regs, reg, tail);
        Ok(())
    }

    /// Ring every rail.
    pub fn ring_all(&mut self) -> Result<(), Error> {
        for rail in 0..self.ports.len() {
            self.ring(rail)?;
        }
        Ok(())
    }

    /// Wait until the NIC has executed every command queued on `rail` so far
    /// (commands run in order, so a completion armed last fires last).
    pub fn fence(&mut self, rail: usize) -> Result<(), Error> {
        let posted = self.post_tracked(
            &[Post {
                rail,
                what: Tracked::Marker,
            }],
            0,
        )?;
        // Settled: a marker whose wait gave up may still fire, so its
        // event is not handed out again.
        self.settle(&posted, true).unwrap_or(Ok(()))
    }
}
