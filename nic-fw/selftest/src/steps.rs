//! The self-test's steps, in order, and the checks each makes.
//!
//! Every step checks the bytes and words its claim is about: a put's
//! bytes at the target *and* that the bytes after the target are
//! untouched, both completion words (value and status), event counts, an
//! error record's code. The steps share one [`Fabric`] and run in
//! [`Step::ALL`]'s order; the first failure ends the run.

use railcoll_fw::abi::command::{Command, DmaCommand, DmaKind};
use railcoll_fw::abi::error::ErrorCode;
use railcoll_fw::abi::event::{ActionKind, CompletionWord, EventAction, EventId};
use railcoll_fw::abi::regs;

use crate::fabric::{DATA, Fabric, HostError, Node, VA_DATA, VA_WORDS, WORDS};
use crate::report::Failure;

/// One step of the self-test.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Step {
    /// The NIC publishes its identity and ABI version from reset.
    Probe,
    /// Each NIC attaches a context and maps its regions.
    Attach,
    /// Puts of 1 B to 12,000 B (one to six packets): bytes land, nothing
    /// after them changes, both completion events fire once.
    Put,
    /// A get: the owner runs it and the requester's event fires.
    Get,
    /// An event armed for two arrivals fires only after the second.
    EventCount,
    /// A put whose arrival event injects a put back to its sender: the
    /// second put runs with no host involvement on the middle node.
    ChainedPut,
    /// The switch-combined hardware barrier releases both nodes.
    Barrier,
    /// A put over a link that drops every third frame completes exactly
    /// once, by go-back-N retransmission.
    Loss,
    /// A malformed command block is reported as an error record and the
    /// queue goes on with the next command.
    Malformed,
}

impl Step {
    /// Every step, in the order they run.
    pub const ALL: [Step; 9] = [
        Step::Probe,
        Step::Attach,
        Step::Put,
        Step::Get,
        Step::EventCount,
        Step::ChainedPut,
        Step::Barrier,
        Step::Loss,
        Step::Malformed,
    ];

    /// The step's name, as reports print it.
    pub fn name(self) -> &'static str {
        match self {
            Step::Probe => "probe",
            Step::Attach => "attach",
            Step::Put => "put",
            Step::Get => "get",
            Step::EventCount => "event count",
            Step::ChainedPut => "chained put",
            Step::Barrier => "hardware barrier",
            Step::Loss => "put under loss",
            Step::Malformed => "malformed command",
        }
    }

    /// Run this step on `fabric`.
    pub fn run(self, fabric: &mut Fabric<'_>) -> Result<(), Failure> {
        let mut s = Stepper { step: self, fabric };
        match self {
            Step::Probe => s.probe(),
            Step::Attach => s.attach(),
            Step::Put => s.puts(),
            Step::Get => s.get(),
            Step::EventCount => s.event_count(),
            Step::ChainedPut => s.chained_put(),
            Step::Barrier => s.barrier(),
            Step::Loss => s.loss(),
            Step::Malformed => s.malformed(),
        }
    }
}

/// The byte at offset `i` of the test pattern seeded `seed`.
fn pattern(i: u64, seed: u8) -> u8 {
    (i as u8).wrapping_mul(31).wrapping_add(seed) ^ ((i >> 8) as u8)
}

/// Bytes the host checks are untouched after a put's target.
const GUARD: u64 = 64;

/// A completion word written with `value` when its event fires.
fn write_word(index: u64, value: u64) -> EventAction {
    EventAction {
        kind: ActionKind::Write {
            addr: VA_WORDS.wrapping_add(index.wrapping_mul(8)),
            value,
        },
        wake: true,
    }
}

/// A put of `len` bytes from data offset `src` to data offset `dst` of
/// virtual process `vp`.
fn put(vp: u32, src: u64, dst: u64, len: u32, events: (Option<u32>, Option<u32>)) -> Command {
    Command::Dma(DmaCommand {
        kind: DmaKind::Put,
        len,
        vp,
        src_addr: VA_DATA.wrapping_add(src),
        dst_addr: VA_DATA.wrapping_add(dst),
        src_event: events.0.map(EventId),
        dst_event: events.1.map(EventId),
        wake: false,
    })
}

fn arm(event: u32, count: u32, action: EventAction) -> Command {
    Command::ArmEvent {
        event: EventId(event),
        count,
        action,
    }
}

/// A step's view of the fabric, turning host errors and wrong values into
/// failures of that step.
struct Stepper<'f, 'm> {
    step: Step,
    fabric: &'f mut Fabric<'m>,
}

impl Stepper<'_, '_> {
    fn fail(&self, check: &'static str, expected: u64, found: u64) -> Failure {
        Failure {
            step: self.step,
            check,
            expected,
            found,
        }
    }

    fn expect(&self, check: &'static str, expected: u64, found: u64) -> Result<(), Failure> {
        if expected == found {
            Ok(())
        } else {
            Err(self.fail(check, expected, found))
        }
    }

    fn host(&self, result: Result<(), HostError>) -> Result<(), Failure> {
        result.map_err(|e| match e {
            HostError::Memory => self.fail("host memory access", 0, 1),
            HostError::MailboxSilent => self.fail("mailbox call completed", 1, 0),
            HostError::Mailbox(code) => self.fail("mailbox call succeeded", 0, code as u64),
            HostError::NotQuiet => self.fail("network quiet within the round limit", 1, 0),
        })
    }

    fn post(&mut self, node: Node, command: Command) -> Result<(), Failure> {
        let r = self.fabric.post(node, command);
        self.host(r)
    }

    fn run(&mut self) -> Result<(), Failure> {
        let r = self.fabric.run();
        self.host(r)
    }

    /// Fill `len` bytes of `node`'s data region at `offset` with
    /// `pattern(seed)`, or with zeros for `seed` `None`.
    fn fill(&mut self, node: Node, offset: u64, len: u64, seed: Option<u8>) -> Result<(), Failure> {
        let mut chunk = [0u8; 256];
        let mut done = 0u64;
        while done < len {
            let n = (len - done).min(chunk.len() as u64);
            let part = chunk.get_mut(..n as usize).unwrap_or(&mut []);
            for (i, b) in part.iter_mut().enumerate() {
                *b = seed.map_or(0, |s| pattern(done.wrapping_add(i as u64), s));
            }
            let r = self
                .fabric
                .write(node, DATA.wrapping_add(offset).wrapping_add(done), part);
            self.host(r)?;
            done = done.wrapping_add(n);
        }
        Ok(())
    }

    /// Check `len` bytes of `node`'s data region at `offset` against
    /// `pattern(seed)` (zeros for `None`); the failure reports the first
    /// offset that differs.
    fn check_bytes(
        &mut self,
        check: &'static str,
        node: Node,
        offset: u64,
        len: u64,
        seed: Option<u8>,
    ) -> Result<(), Failure> {
        let mut chunk = [0u8; 256];
        let mut done = 0u64;
        while done < len {
            let n = (len - done).min(chunk.len() as u64);
            let part = chunk.get_mut(..n as usize).unwrap_or(&mut []);
            let r = self
                .fabric
                .read(node, DATA.wrapping_add(offset).wrapping_add(done), part);
            self.host(r)?;
            for (i, b) in part.iter().enumerate() {
                let at = done.wrapping_add(i as u64);
                if *b != seed.map_or(0, |s| pattern(at, s)) {
                    return Err(self.fail(check, len, at));
                }
            }
            done = done.wrapping_add(n);
        }
        Ok(())
    }

    /// Completion word `index` of `node` says its event fired with
    /// `value` and no error.
    fn check_word(&mut self, node: Node, index: u64, value: u64) -> Result<(), Failure> {
        let word = self.fabric.word(node, index);
        let want = CompletionWord {
            value,
            status: Some(Ok(())),
        };
        if word == want {
            Ok(())
        } else {
            let raw = self.fabric.raw_word(node, index);
            Err(self.fail("completion word written, without error", value, raw))
        }
    }

    fn clear_words(&mut self, node: Node, indices: &[u64]) -> Result<(), Failure> {
        for &i in indices {
            let r = self.fabric.clear_word(node, i);
            self.host(r)?;
        }
        Ok(())
    }

    fn probe(&mut self) -> Result<(), Failure> {
        for node in [Node::A, Node::B] {
            let board = self.fabric.board(node);
            let id = board.host_read(regs::ID.offset());
            self.expect("ID register", regs::ID_VALUE, id)?;
            let version = board.host_read(regs::VERSION.offset());
            self.expect(
                "ABI version",
                u64::from(railcoll_fw::abi::ABI_VERSION),
                version,
            )?;
        }
        Ok(())
    }

    fn attach(&mut self) -> Result<(), Failure> {
        for node in [Node::A, Node::B] {
            let r = self.fabric.attach(node);
            self.host(r)?;
        }
        Ok(())
    }

    /// A puts `len` bytes to B with both events; check bytes, guard, words.
    fn put_and_check(&mut self, len: u32, seed: u8) -> Result<(), Failure> {
        let (src, dst) = (0x0, 0x4000);
        self.fill(Node::A, src, u64::from(len), Some(seed))?;
        self.fill(Node::B, dst, u64::from(len).wrapping_add(GUARD), None)?;
        self.clear_words(Node::A, &[1])?;
        self.clear_words(Node::B, &[2])?;
        let value = u64::from(len).wrapping_add(1000);
        self.post(Node::A, arm(1, 1, write_word(1, value)))?;
        self.post(Node::B, arm(2, 1, write_word(2, value)))?;
        self.post(Node::A, put(1, src, dst, len, (Some(1), Some(2))))?;
        self.run()?;
        self.check_bytes("put bytes landed", Node::B, dst, u64::from(len), Some(seed))?;
        self.check_bytes(
            "bytes after the target untouched",
            Node::B,
            dst.wrapping_add(u64::from(len)),
            GUARD,
            None,
        )?;
        self.check_word(Node::A, 1, value)?;
        self.check_word(Node::B, 2, value)
    }

    fn puts(&mut self) -> Result<(), Failure> {
        for (i, len) in [1u32, 8, 2047, 2049, 12_000].into_iter().enumerate() {
            self.put_and_check(len, i as u8)?;
        }
        let done = self.fabric.stats(Node::A).dmas_completed;
        self.expect("DMAs completed on the sender", 5, done)
    }

    fn get(&mut self) -> Result<(), Failure> {
        let (src, dst, len) = (0x800u64, 0x6000u64, 3000u32);
        self.fill(Node::B, src, u64::from(len), Some(40))?;
        self.fill(Node::A, dst, u64::from(len).wrapping_add(GUARD), None)?;
        self.clear_words(Node::A, &[4])?;
        self.post(Node::A, arm(4, 1, write_word(4, 9)))?;
        self.post(
            Node::A,
            Command::Dma(DmaCommand {
                kind: DmaKind::Get,
                len,
                vp: 1,
                src_addr: VA_DATA.wrapping_add(src),
                dst_addr: VA_DATA.wrapping_add(dst),
                src_event: None,
                dst_event: Some(EventId(4)),
                wake: false,
            }),
        )?;
        self.run()?;
        self.check_bytes("got bytes landed", Node::A, dst, u64::from(len), Some(40))?;
        self.check_bytes(
            "bytes after the target untouched",
            Node::A,
            dst.wrapping_add(u64::from(len)),
            GUARD,
            None,
        )?;
        self.check_word(Node::A, 4, 9)
    }

    fn event_count(&mut self) -> Result<(), Failure> {
        self.fill(Node::A, 0, 64, Some(3))?;
        self.clear_words(Node::B, &[3])?;
        self.post(Node::B, arm(3, 2, write_word(3, 55)))?;
        self.post(Node::A, put(1, 0, 0x100, 64, (None, Some(3))))?;
        self.run()?;
        let early = self.fabric.raw_word(Node::B, 3);
        self.expect("word unwritten after one of two arrivals", 0, early)?;
        self.post(Node::A, put(1, 0, 0x200, 64, (None, Some(3))))?;
        self.run()?;
        self.check_word(Node::B, 3, 55)
    }

    fn chained_put(&mut self) -> Result<(), Failure> {
        let len = 3000u32;
        self.fill(Node::A, 0x1000, u64::from(len), Some(77))?;
        self.fill(Node::A, 0x9000, u64::from(len).wrapping_add(GUARD), None)?;
        self.clear_words(Node::A, &[6])?;
        // B prepares: when event 5 fires, put the bytes back to A.
        let back = put(0, 0x3000, 0x9000, len, (None, Some(6)));
        let r = self
            .fabric
            .write(Node::B, WORDS.wrapping_add(0x100), &back.emit(5).to_bytes());
        self.host(r)?;
        let copy = EventAction {
            kind: ActionKind::Copy {
                src: VA_WORDS.wrapping_add(0x100),
                blocks: 1,
            },
            wake: false,
        };
        self.post(Node::B, arm(5, 1, copy))?;
        self.post(Node::A, arm(6, 1, write_word(6, 77)))?;
        self.run()?;
        let before = self.fabric.stats(Node::B).commands;
        self.post(Node::A, put(1, 0x1000, 0x3000, len, (None, Some(5))))?;
        self.run()?;
        self.check_bytes("bytes came back", Node::A, 0x9000, u64::from(len), Some(77))?;
        self.check_bytes(
            "bytes after the target untouched",
            Node::A,
            0x9000u64.wrapping_add(u64::from(len)),
            GUARD,
            None,
        )?;
        self.check_word(Node::A, 6, 77)?;
        let chained = self.fabric.stats(Node::B).chained;
        self.expect("chained commands run on the middle node", 1, chained)?;
        let host_commands = self.fabric.stats(Node::B).commands.wrapping_sub(before);
        self.expect(
            "commands the middle node ran (the chained one)",
            1,
            host_commands,
        )
    }

    fn barrier(&mut self) -> Result<(), Failure> {
        for node in [Node::A, Node::B] {
            self.clear_words(node, &[7])?;
            let value = 2000u64.wrapping_add(u64::from(node.index()));
            self.post(node, arm(7, 1, write_word(7, value)))?;
        }
        self.post(Node::A, hw_barrier())?;
        let r = self.fabric.settle();
        self.host(r)?;
        let early = self.fabric.raw_word(Node::A, 7);
        self.expect("barrier not released before every node entered", 0, early)?;
        self.post(Node::B, hw_barrier())?;
        self.run()?;
        for node in [Node::A, Node::B] {
            self.check_word(node, 7, 2000u64.wrapping_add(u64::from(node.index())))?;
        }
        Ok(())
    }

    fn loss(&mut self) -> Result<(), Failure> {
        let before = (
            self.fabric.stats(Node::A).events_fired,
            self.fabric.stats(Node::B).events_fired,
            self.fabric.stats(Node::A).retransmits,
            self.fabric.dropped,
        );
        self.fabric.loss = Some(3);
        let outcome = self.put_and_check(12_000, 90);
        self.fabric.loss = None;
        outcome?;
        let dropped = self.fabric.dropped.wrapping_sub(before.3);
        if dropped == 0 {
            return Err(self.fail("frames dropped by the loss pattern", 1, 0));
        }
        let retransmits = self
            .fabric
            .stats(Node::A)
            .retransmits
            .wrapping_sub(before.2);
        if retransmits == 0 {
            return Err(self.fail("retransmissions by the sender", 1, 0));
        }
        let fired_a = self
            .fabric
            .stats(Node::A)
            .events_fired
            .wrapping_sub(before.0);
        self.expect("sender's events fired exactly once", 1, fired_a)?;
        let fired_b = self
            .fabric
            .stats(Node::B)
            .events_fired
            .wrapping_sub(before.1);
        self.expect("receiver's events fired exactly once", 1, fired_b)
    }

    fn malformed(&mut self) -> Result<(), Failure> {
        let errors = self.fabric.error_count(Node::A);
        let mut garbage = [0xa5u8; 64];
        if let Some(op) = garbage.first_mut() {
            *op = 0xff;
        }
        let r = self.fabric.post_raw(Node::A, &garbage);
        self.host(r)?;
        self.run()?;
        let now = self.fabric.error_count(Node::A);
        self.expect(
            "error records after a bad block",
            errors.wrapping_add(1),
            now,
        )?;
        let Some(info) = self.fabric.error(Node::A, errors) else {
            return Err(self.fail("error record parses", 1, 0));
        };
        self.expect(
            "error code of the bad block",
            ErrorCode::UnknownOpcode as u64,
            info.code as u64,
        )?;
        // The queue goes on: a put after it still lands.
        self.put_and_check(100, 123)?;
        Ok(())
    }
}

fn hw_barrier() -> Command {
    Command::HwBarrier {
        low_node: 0,
        high_node: 1,
        seq: 1,
        tag: 0,
        event: Some(EventId(7)),
    }
}
