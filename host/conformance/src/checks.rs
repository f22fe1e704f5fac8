//! The checks. Each is a collective step: every rank runs it, puts to the
//! next rank round the ring and checks what the previous one put to it
//! (every byte, and the bytes around the target). A check returns its
//! verdict; an `Err` is the device's (a wait that timed out, a NIC error)
//! and fails the check.

use railcoll_fw::abi::ABI_MAJOR;
use railcoll_fw::abi::command::Command;
use railcoll_fw::abi::regs::{ID_VALUE, Status};
use railcoll_fw::abi::{ErrorCode, ErrorKind, MAX_PACKET_SIZE, MIN_PACKET_SIZE};
use railcoll_host::arena::SymBuffer;
use railcoll_host::driver::{ARENA_VA, CONTROL_VA};
use railcoll_host::{
    Algorithm, Arrivals, ChainedPut, Comm, DestEvent, Error, RailPolicy, TransferOptions,
};

use crate::{Check, Verdict};

/// The checks, in the order they run.
pub const CHECKS: &[Check] = &[
    Check {
        name: "registers",
        what: "ID, version, location, status, packet size and geometry of every rail's NIC",
        spec: "abi.md §2",
        run: registers,
    },
    Check {
        name: "command-ring",
        what: "malformed command blocks fail alone, with typed error records; the ring goes on",
        spec: "abi.md §4, §6, §7",
        run: command_ring,
    },
    Check {
        name: "puts",
        what: "puts of 1 B to 1 MiB + 1 on every rail, every byte, the 64 bytes around untouched",
        spec: "abi.md §4.2, §8",
        run: puts,
    },
    Check {
        name: "gets",
        what: "gets of 1 B to 1 MiB + 7 from the next rank",
        spec: "abi.md §4.2",
        run: gets,
    },
    Check {
        name: "striped-puts",
        what: "a put striped over every rail lands whole, each rail's part counted at the target",
        spec: "abi.md §4.2, §5",
        run: striped_puts,
    },
    Check {
        name: "destination-events",
        what: "a destination event counts arrivals: not complete after one of two puts",
        spec: "abi.md §5",
        run: destination_events,
    },
    Check {
        name: "chained-puts",
        what: "a put forwarded round the ring by the NICs' event actions, no host involved",
        spec: "abi.md §5 (COPY), ELAN-SEM §13",
        run: chained_puts,
    },
    Check {
        name: "cross-rail-triggers",
        what: "a chained put striped over every rail: the leading rail's event starts the others",
        spec: "abi.md §5.1",
        run: cross_rail_triggers,
    },
    Check {
        name: "protection",
        what: "puts outside the target's arena fail on both sides and write nothing there",
        spec: "abi.md §3.2, §8.2",
        run: protection,
    },
    Check {
        name: "queued-messages",
        what: "items of several sizes into the next rank's input queue, in order, from whom",
        spec: "abi.md §4.3",
        run: queued_messages,
    },
    Check {
        name: "switch-barrier",
        what: "the library's `hardware` barrier (the switch's combining among node masters; finished without the switch if it fails, abi.md 4.5) releases no rank before every rank's earlier puts landed",
        spec: "abi.md §4.5, §4.6",
        run: switch_barrier,
    },
    Check {
        name: "switch-broadcast",
        what: "the switch's broadcast lands every byte on every other node",
        spec: "abi.md §4.4, §4.6",
        run: switch_broadcast,
    },
    Check {
        name: "go-back-n",
        what: "rounds of puts byte-exact; under a lossy link (--faults) go-back-N carries them",
        spec: "abi.md §8.1",
        run: go_back_n,
    },
];

/// Fail the check with a message unless `cond`.
macro_rules! ensure {
    ($cond:expr, $($what:tt)+) => {
        if !$cond {
            return Ok(Verdict::Failed(format!($($what)+)));
        }
    };
}

/// Bytes that tell who wrote them and where (xorshift from `seed`, eight
/// bytes a step): what every check writes, and compares with.
pub fn pattern(len: usize, seed: u64) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    let mut out = Vec::with_capacity(len + 8);
    while out.len() < len {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        out.extend_from_slice(&x.to_le_bytes());
    }
    out.truncate(len);
    out
}

/// The guard bytes around a target.
const GUARD: usize = 64;
const GUARD_BYTE: u8 = 0xa5;

fn next(comm: &Comm) -> usize {
    (comm.rank() + 1) % comm.size()
}

fn prev(comm: &Comm) -> usize {
    (comm.rank() + comm.size() - 1) % comm.size()
}

fn on_rail(rail: usize, n: u32) -> Arrivals {
    let mut a = Arrivals::new();
    a.add(rail, n);
    a
}

fn options(policy: RailPolicy, event: Option<DestEvent>) -> TransferOptions {
    TransferOptions {
        policy: Some(policy),
        dest_event: event,
        wake: false,
    }
}

fn read(comm: &Comm, buf: &SymBuffer) -> Result<Vec<u8>, Error> {
    let mut out = vec![0; buf.len()];
    comm.read_local(buf, 0, &mut out)?;
    Ok(out)
}

/// A target of `len` bytes between guards: the whole buffer, filled with
/// the guard byte, and the target's slice of it.
fn guarded(comm: &Comm, len: usize) -> Result<(SymBuffer, SymBuffer), Error> {
    let whole = comm.alloc(len + 2 * GUARD)?;
    comm.write_local(&whole, 0, &vec![GUARD_BYTE; whole.len()])?;
    let target = whole.slice(GUARD, len)?;
    Ok((whole, target))
}

/// What is wrong with a guarded target that should hold `want`; `None`
/// if nothing.
fn judge_guarded(comm: &Comm, whole: &SymBuffer, want: &[u8]) -> Result<Option<String>, Error> {
    let got = read(comm, whole)?;
    let (before, rest) = got.split_at(GUARD);
    let (body, after) = rest.split_at(want.len());
    if let Some(at) = body.iter().zip(want).position(|(a, b)| a != b) {
        let wrong = body.iter().zip(want).filter(|(a, b)| a != b).count();
        return Ok(Some(format!(
            "{wrong} of {} bytes wrong, the first at offset {at}",
            want.len()
        )));
    }
    if before.iter().chain(after).any(|&b| b != GUARD_BYTE) {
        return Ok(Some(format!(
            "a byte within {GUARD} of the {}-byte target changed",
            want.len()
        )));
    }
    Ok(None)
}

fn registers(comm: &Comm) -> Result<Verdict, Error> {
    let topology = comm.topology();
    let (node, _) = topology.locate(comm.rank())?;
    for rail in 0..comm.rails() {
        let id = comm.endpoint().nic_identity(rail)?;
        ensure!(
            id.id == ID_VALUE,
            "rail {rail}: ID {:#x}, not {ID_VALUE:#x}",
            id.id
        );
        ensure!(
            (id.version >> 16) as u16 == ABI_MAJOR,
            "rail {rail}: ABI {}.{}, this host speaks {ABI_MAJOR}.x",
            id.version >> 16,
            id.version & 0xffff
        );
        let (at_node, at_rail) = (id.location & 0xffff, (id.location >> 16) & 0xff);
        ensure!(
            at_node == node as u64 && at_rail == rail as u64,
            "the NIC of node {node} rail {rail} says it is node {at_node} rail {at_rail}"
        );
        ensure!(
            id.status.contains(Status::RUNNING),
            "rail {rail}: STATUS {:?} is not RUNNING",
            id.status
        );
        ensure!(
            id.packet_size.is_power_of_two()
                && (u64::from(MIN_PACKET_SIZE)..=u64::from(MAX_PACKET_SIZE))
                    .contains(&id.packet_size),
            "rail {rail}: packet size {}",
            id.packet_size
        );
        let g = id.geometry;
        ensure!(
            usize::from(g.contexts) >= topology.ranks_per_node()
                && g.events_per_ctx >= 4
                && g.peers >= 1
                && g.dmas >= 1
                && g.regions >= 1
                && g.tx_window >= 1,
            "rail {rail}: geometry {g:?} cannot serve {} ranks per node",
            topology.ranks_per_node()
        );
    }
    Ok(Verdict::Passed)
}

fn command_ring(comm: &Comm) -> Result<Verdict, Error> {
    let cookie = 0x5100 + comm.rank() as u32;
    let mut unknown = Command::Nop.emit(cookie);
    unknown.opcode = 0x7f;
    let mut reserved = Command::Nop.emit(cookie + 0x1000);
    reserved.reserved = [1, 0];
    for block in [unknown, reserved] {
        comm.endpoint().post_raw(0, &block)?;
    }
    // The ring goes on: a put after the garbage completes, and its bytes
    // land (the NIC takes the ring's blocks in order, so the garbage's
    // records are written by then).
    let verdict = put_ring(comm, 4096, 0, 1)?;
    if verdict != Verdict::Passed {
        return Ok(verdict);
    }
    let codes: Vec<(ErrorCode, u32)> = comm
        .endpoint()
        .take_nic_errors()?
        .iter()
        .map(|e| (e.info.code, e.info.cookie))
        .collect();
    ensure!(
        codes.contains(&(ErrorCode::UnknownOpcode, cookie))
            && codes.contains(&(ErrorCode::ReservedNonZero, cookie + 0x1000)),
        "error records {codes:?}: an unknown opcode and non-zero reserved bytes not both reported"
    );
    Ok(Verdict::Passed)
}

/// One put of `len` bytes from every rank to the next on `rail`, checked
/// at the target between guards (`seed` tells the rounds apart).
fn put_ring(comm: &Comm, len: usize, rail: usize, seed: u64) -> Result<Verdict, Error> {
    let src = comm.alloc(len)?;
    let (whole, target) = guarded(comm, len)?;
    let landed = comm.endpoint().alloc_dest_event()?;
    let data = pattern(len, seed << 16 | comm.rank() as u64);
    comm.write_local(&src, 0, &data)?;
    // Every target guarded before any put.
    comm.barrier()?;
    comm.endpoint()
        .put_with(
            &src,
            next(comm),
            &target,
            options(RailPolicy::Rail(rail), Some(landed)),
        )?
        .wait()?;
    comm.endpoint().wait_arrivals(&landed, &on_rail(rail, 1))?;
    let want = pattern(len, seed << 16 | prev(comm) as u64);
    Ok(match judge_guarded(comm, &whole, &want)? {
        None => Verdict::Passed,
        Some(wrong) => Verdict::Failed(format!(
            "rank {}: put of {len} B on rail {rail} from rank {}: {wrong}",
            comm.rank(),
            prev(comm)
        )),
    })
}

fn needs_two(comm: &Comm) -> Option<Verdict> {
    (comm.size() < 2).then(|| Verdict::NotApplicable("needs two ranks".into()))
}

fn puts(comm: &Comm) -> Result<Verdict, Error> {
    if let Some(v) = needs_two(comm) {
        return Ok(v);
    }
    // Every size on every rank, even after a wrong one (a rank that
    // stopped early would leave the others waiting): the first reported.
    let mut first = None;
    for (i, len) in [1, 7, 8, 63, 4096, 65_537, (1 << 20) + 1]
        .into_iter()
        .enumerate()
    {
        let verdict = put_ring(comm, len, i % comm.rails(), 2 + i as u64)?;
        keep_first(&mut first, verdict);
        comm.reset_arena()?;
    }
    Ok(first.unwrap_or(Verdict::Passed))
}

/// Remember `verdict` if it is the first that did not pass.
fn keep_first(first: &mut Option<Verdict>, verdict: Verdict) {
    if first.is_none() && verdict != Verdict::Passed {
        *first = Some(verdict);
    }
}

fn gets(comm: &Comm) -> Result<Verdict, Error> {
    if let Some(v) = needs_two(comm) {
        return Ok(v);
    }
    let mut first = None;
    for (i, len) in [1, 4097, (1 << 20) + 7].into_iter().enumerate() {
        let src = comm.alloc(len)?;
        let (whole, target) = guarded(comm, len)?;
        comm.write_local(&src, 0, &pattern(len, 0x6e7 + comm.rank() as u64))?;
        comm.barrier()?;
        let rail = i % comm.rails();
        comm.endpoint()
            .get_with(
                next(comm),
                &src,
                &target,
                options(RailPolicy::Rail(rail), None),
            )?
            .wait()?;
        let want = pattern(len, 0x6e7 + next(comm) as u64);
        if let Some(wrong) = judge_guarded(comm, &whole, &want)? {
            keep_first(
                &mut first,
                Verdict::Failed(format!(
                    "rank {}: get of {len} B on rail {rail} from rank {}: {wrong}",
                    comm.rank(),
                    next(comm)
                )),
            );
        }
        // Nobody rewrites a source another rank may still read.
        comm.barrier()?;
        comm.reset_arena()?;
    }
    Ok(first.unwrap_or(Verdict::Passed))
}

fn striped_puts(comm: &Comm) -> Result<Verdict, Error> {
    if let Some(v) = needs_two(comm) {
        return Ok(v);
    }
    if comm.rails() < 2 {
        return Ok(Verdict::NotApplicable("needs two rails".into()));
    }
    let len = (1 << 20) + 3;
    let policy = RailPolicy::Stripe { threshold: 0 };
    let src = comm.alloc(len)?;
    let (whole, target) = guarded(comm, len)?;
    let landed = comm.endpoint().alloc_dest_event()?;
    comm.write_local(&src, 0, &pattern(len, 0x5791 + comm.rank() as u64))?;
    comm.barrier()?;
    let handle =
        comm.endpoint()
            .put_with(&src, next(comm), &target, options(policy, Some(landed)))?;
    let rails_used = handle
        .parts()
        .iter()
        .map(|p| p.rail)
        .collect::<std::collections::BTreeSet<_>>()
        .len();
    handle.wait()?;
    ensure!(
        rails_used == comm.rails(),
        "rank {}: a striped put used {rails_used} of {} rails",
        comm.rank(),
        comm.rails()
    );
    let arrivals = comm
        .endpoint()
        .expected_arrivals(policy, prev(comm), comm.rank(), len, 1);
    comm.endpoint().wait_arrivals(&landed, &arrivals)?;
    let want = pattern(len, 0x5791 + prev(comm) as u64);
    Ok(match judge_guarded(comm, &whole, &want)? {
        None => Verdict::Passed,
        Some(wrong) => Verdict::Failed(format!("rank {}: striped put: {wrong}", comm.rank())),
    })
}

fn destination_events(comm: &Comm) -> Result<Verdict, Error> {
    if let Some(v) = needs_two(comm) {
        return Ok(v);
    }
    let half = 3000;
    let src = comm.alloc(2 * half)?;
    let (whole, target) = guarded(comm, 2 * half)?;
    let flag = comm.alloc(0)?;
    let counted = comm.endpoint().alloc_dest_event()?;
    let first_done = comm.endpoint().alloc_dest_event()?;
    let go = comm.endpoint().alloc_dest_event()?;
    let data = pattern(2 * half, 0xde7 + comm.rank() as u64);
    comm.write_local(&src, 0, &data)?;
    comm.barrier()?;
    let ep = comm.endpoint();
    let rail = comm.rails() - 1;
    let policy = RailPolicy::Rail(rail);
    // The first half, and word of it to the target.
    ep.put_with(
        &src.slice(0, half)?,
        next(comm),
        &target.slice(0, half)?,
        options(policy, Some(counted)),
    )?
    .wait()?;
    ep.notify(next(comm), &first_done, &flag)?;
    // As the target: one of two arrivals is not the event's completion.
    ep.wait_arrivals(&first_done, &on_rail(0, 1))?;
    let armed = ep.arm_arrivals(&counted, &on_rail(rail, 2))?;
    let early = ep.test_armed(&armed).is_some();
    ep.notify(prev(comm), &go, &flag)?;
    // The second half.
    ep.wait_arrivals(&go, &on_rail(0, 1))?;
    ep.put_with(
        &src.slice(half, half)?,
        next(comm),
        &target.slice(half, half)?,
        options(policy, Some(counted)),
    )?
    .wait()?;
    ep.wait_armed(&armed)?;
    ensure!(
        !early,
        "rank {}: an event waiting for two arrivals was complete after one",
        comm.rank()
    );
    let want = pattern(2 * half, 0xde7 + prev(comm) as u64);
    Ok(match judge_guarded(comm, &whole, &want)? {
        None => Verdict::Passed,
        Some(wrong) => Verdict::Failed(format!("rank {}: two puts: {wrong}", comm.rank())),
    })
}

fn chained_puts(comm: &Comm) -> Result<Verdict, Error> {
    if let Some(v) = needs_two(comm) {
        return Ok(v);
    }
    let len = 50_001;
    let src = comm.alloc(len)?;
    let buf = comm.alloc(len)?;
    let arrived = comm.endpoint().alloc_dest_event()?;
    let home = comm.endpoint().alloc_dest_event()?;
    let data = pattern(len, 0xc4a1);
    let sentinel = vec![GUARD_BYTE; len];
    comm.write_local(&buf, 0, &sentinel)?;
    let ep = comm.endpoint();
    // Every rank but 0 forwards what arrives to the next, by its NIC.
    let forward = if comm.rank() == 0 {
        None
    } else {
        let last = next(comm) == 0;
        Some(ep.chain_put(&ChainedPut {
            trigger: arrived,
            rail: 0,
            count: 1,
            src: buf,
            dst_rank: next(comm),
            dst: buf,
            dst_event: Some(if last { home } else { arrived }),
            feeds: Default::default(),
            policy: RailPolicy::Rail(0),
            done: Default::default(),
        })?)
    };
    comm.barrier()?;
    if let Some(handle) = forward {
        handle.wait()?;
        ensure!(
            read(comm, &buf)? == data,
            "rank {}: the data it forwarded is not what rank 0 sent",
            comm.rank()
        );
        return Ok(Verdict::Passed);
    }
    comm.write_local(&src, 0, &data)?;
    ep.put_with(&src, 1, &buf, options(RailPolicy::Rail(0), Some(arrived)))?
        .wait()?;
    ep.wait_arrivals(&home, &on_rail(0, 1))?;
    // Rank 0's `buf` held the sentinel: only the ring's last hop wrote
    // it. A chain that fired before its trigger forwarded the sentinel,
    // set `home` early, and was spent before the data came.
    ensure!(
        read(comm, &buf)? == data,
        "rank 0: the data back from round the ring differs"
    );
    Ok(Verdict::Passed)
}

fn cross_rail_triggers(comm: &Comm) -> Result<Verdict, Error> {
    if let Some(v) = needs_two(comm) {
        return Ok(v);
    }
    if comm.rails() < 2 {
        return Ok(Verdict::NotApplicable("needs two rails".into()));
    }
    let len = (256 << 10) + 5;
    let policy = RailPolicy::Stripe { threshold: 0 };
    let src = comm.alloc(len)?;
    let (whole, target) = guarded(comm, len)?;
    let flag = comm.alloc(0)?;
    let go = comm.endpoint().alloc_dest_event()?;
    let landed = comm.endpoint().alloc_dest_event()?;
    comm.write_local(&src, 0, &pattern(len, 0xc505 + comm.rank() as u64))?;
    let ep = comm.endpoint();
    let handle = ep.chain_put(&ChainedPut {
        trigger: go,
        rail: 0,
        count: 1,
        src,
        dst_rank: next(comm),
        dst: target,
        dst_event: Some(landed),
        feeds: Default::default(),
        policy,
        done: Default::default(),
    })?;
    comm.barrier()?;
    // Nothing has landed before this rank starts the chain that puts here
    // (a chain that ignored its trigger might have).
    let arrivals = ep.expected_arrivals(policy, prev(comm), comm.rank(), len, 1);
    let armed = ep.arm_arrivals(&landed, &arrivals)?;
    let early = ep.test_armed(&armed).is_some();
    // Start the previous rank's chain, whose put lands here.
    ep.notify(prev(comm), &go, &flag)?;
    ep.wait_armed(&armed)?;
    handle.wait()?;
    ensure!(
        !early,
        "rank {}: the chained put landed before its trigger was set",
        comm.rank()
    );
    let want = pattern(len, 0xc505 + prev(comm) as u64);
    Ok(match judge_guarded(comm, &whole, &want)? {
        None => Verdict::Passed,
        Some(wrong) => Verdict::Failed(format!(
            "rank {}: chained striped put: {wrong}",
            comm.rank()
        )),
    })
}

fn protection(comm: &Comm) -> Result<Verdict, Error> {
    if let Some(v) = needs_two(comm) {
        return Ok(v);
    }
    let buf = comm.alloc(4096)?;
    let flag = comm.alloc(0)?;
    let go = comm.endpoint().alloc_dest_event()?;
    // The rest of the arena, to its last byte, under a canary.
    let arena = comm.config().arena_size;
    let used = comm.alloc(0)?.offset();
    let rest = comm.alloc(arena - used)?;
    let canary = pattern(rest.len(), 0xc0ffee);
    comm.write_local(&rest, 0, &canary)?;
    comm.write_local(&buf, 0, &[0xee; 4096])?;
    comm.barrier()?;
    let ep = comm.endpoint();
    let rail = comm.rails() - 1;
    for (va, what) in [
        (CONTROL_VA, "its control region"),
        (ARENA_VA + arena as u64 - 2048, "straddling its arena's end"),
        (0xdead_0000_0000, "an unmapped address"),
    ] {
        let r = ep.put_unchecked(&buf, next(comm), va, rail)?.wait();
        ensure!(
            r == Err(Error::Nic {
                rail,
                code: ErrorCode::Protection
            }),
            "rank {}: a put to {what} of rank {} returned {r:?}, not a protection error",
            comm.rank(),
            next(comm)
        );
    }
    ep.notify(next(comm), &go, &flag)?;
    ep.wait_arrivals(&go, &on_rail(0, 1))?;
    let records = ep.take_nic_errors()?;
    let inbound: Vec<_> = records
        .iter()
        .filter(|e| e.info.kind == ErrorKind::Inbound)
        .collect();
    // Three refused puts, each at least one refused packet.
    ensure!(
        inbound.len() >= 3
            && inbound
                .iter()
                .all(|e| e.info.code == ErrorCode::Protection && e.rail == rail),
        "rank {}: refused packets reported as {records:?}",
        comm.rank()
    );
    let after = read(comm, &rest)?;
    let changed = after.iter().zip(&canary).filter(|(a, b)| a != b).count();
    ensure!(
        changed == 0,
        "rank {}: {changed} bytes of the arena's last {} changed",
        comm.rank(),
        rest.len()
    );
    Ok(Verdict::Passed)
}

fn queued_messages(comm: &Comm) -> Result<Verdict, Error> {
    if let Some(v) = needs_two(comm) {
        return Ok(v);
    }
    let sizes = [1usize, 100, 256];
    let queue = comm.endpoint().create_queue(8, 256)?;
    let items: Vec<SymBuffer> = sizes
        .iter()
        .map(|&n| comm.alloc(n))
        .collect::<Result<_, _>>()?;
    for (i, item) in items.iter().enumerate() {
        let seed = 0x9e0 + (comm.rank() * 8 + i) as u64;
        comm.write_local(item, 0, &pattern(item.len(), seed))?;
    }
    comm.barrier()?;
    for item in &items {
        comm.endpoint()
            .queue_send(&queue, next(comm), item)?
            .wait()?;
    }
    let mut out = vec![0u8; queue.max_payload()];
    for (i, &n) in sizes.iter().enumerate() {
        let got = comm.endpoint().queue_recv(&queue, &mut out)?;
        let want = pattern(n, 0x9e0 + (prev(comm) * 8 + i) as u64);
        ensure!(
            got.src == prev(comm) && got.len == n && out[..n] == want[..],
            "rank {}: item {i} came from rank {} with {} bytes (wanted {n} from rank {}){}",
            comm.rank(),
            got.src,
            got.len,
            prev(comm),
            if out[..got.len.min(n)] == want[..got.len.min(n)] {
                ""
            } else {
                ", and its bytes differ"
            }
        );
    }
    Ok(Verdict::Passed)
}

fn switch_barrier(comm: &Comm) -> Result<Verdict, Error> {
    if comm.topology().nodes() < 2 {
        return Ok(Verdict::NotApplicable(
            "needs two nodes (one node's barrier does not reach the switch)".into(),
        ));
    }
    // Through the library's `hardware` barrier: the switch's combining
    // among the node masters, with the sequence numbers and the tag of
    // the communicator's own switch barriers (a second numbering of the
    // same group would be held by the switch, §4.5).
    let n = comm.size();
    let seen = comm.alloc(n)?;
    let mark = comm.alloc(1)?;
    comm.write_local(&seen, 0, &vec![0; n])?;
    comm.barrier()?;
    // Every round runs on every rank (a rank that stopped early would
    // leave the others in the barrier); the first wrong one is reported.
    let mut wrong = None;
    for round in 1..=8u8 {
        comm.write_local(&mark, 0, &[round])?;
        for peer in 0..n {
            comm.endpoint()
                .put(&mark, peer, &seen.slice(comm.rank(), 1)?)?
                .wait()?;
        }
        comm.barrier_with(Algorithm::Hardware)?;
        // Each rank's mark for this round landed before it entered; a
        // rank released already may have put its next one.
        let got = read(comm, &seen)?;
        if wrong.is_none() && !got.iter().all(|&b| b == round || b == round + 1) {
            wrong = Some(format!(
                "rank {}: released from round {round} while the ranks' marks were {got:?}",
                comm.rank()
            ));
        }
    }
    Ok(wrong.map_or(Verdict::Passed, Verdict::Failed))
}

fn switch_broadcast(comm: &Comm) -> Result<Verdict, Error> {
    if comm.topology().nodes() < 2 {
        return Ok(Verdict::NotApplicable("needs two nodes".into()));
    }
    let len = 100_003;
    let topology = *comm.topology();
    let (node, local) = topology.locate(comm.rank())?;
    let src = comm.alloc(len)?;
    let (whole, target) = guarded(comm, len)?;
    let status = comm.alloc(1)?;
    let landed = comm.endpoint().alloc_dest_event()?;
    let over = comm.endpoint().alloc_dest_event()?;
    let seed = 0xbca5 + local as u64;
    comm.write_local(&status, 0, &[0])?;
    comm.barrier()?;
    let ep = comm.endpoint();
    if node == 0 {
        comm.write_local(&src, 0, &pattern(len, seed))?;
        let sent = ep.hw_bcast_post(&src, &target, Some(landed))?.wait();
        // Tell the targets how it went, so that they wait for a broadcast
        // that completed and not for ever for one that failed.
        comm.write_local(&status, 0, &[if sent.is_ok() { 1 } else { 2 }])?;
        for other in 1..topology.nodes() {
            ep.put_with(
                &status,
                topology.rank_of(other, local)?,
                &status,
                options(RailPolicy::Rail(0), Some(over)),
            )?
            .wait()?;
        }
        return Ok(match sent {
            Ok(()) => Verdict::Passed,
            Err(e) => Verdict::Failed(format!("rank {}: {e}", comm.rank())),
        });
    }
    ep.wait_arrivals(&over, &on_rail(0, 1))?;
    ensure!(
        read(comm, &status)? == [1],
        "rank {}: node 0's broadcast failed",
        comm.rank()
    );
    ep.wait_arrivals(&landed, &on_rail(0, 1))?;
    Ok(match judge_guarded(comm, &whole, &pattern(len, seed))? {
        None => Verdict::Passed,
        Some(wrong) => Verdict::Failed(format!("rank {}: broadcast: {wrong}", comm.rank())),
    })
}

fn go_back_n(comm: &Comm) -> Result<Verdict, Error> {
    if let Some(v) = needs_two(comm) {
        return Ok(v);
    }
    let mut first = None;
    for round in 0..6u64 {
        for (len, rail) in [(8, 0), (200_001, comm.rails() - 1)] {
            let verdict = put_ring(comm, len, rail, 0x60b0 + round)?;
            keep_first(&mut first, verdict);
        }
        comm.reset_arena()?;
    }
    Ok(first.unwrap_or(Verdict::Passed))
}
