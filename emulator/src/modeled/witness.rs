//! What a modeled run leaves behind: the trace hash (the determinism
//! witness) and its recording, the watchdog and its report, and the spans
//! sent to a timeline.
//!
//! Contract:
//! - [`Trace`] hashes every committed action (a word-at-a-time
//!   multiplicative fold over its fields, seeded with the run's seed)
//!   and, when recording, keeps it; it only observes: nothing here feeds
//!   back into the run's order.
//! - [`Watchdog`] decides when a run is stalled (virtual time past the
//!   horizon, a livelock at one instant; the kernel adds the deadlock of
//!   an empty queue), writes the report naming the seed, the virtual time,
//!   the last progress and the blocked ranks' steps, and keeps the last
//!   failure. Failing the blocked waits is the kernel's part.
//! - [`ProgressMeter`] reports the event rate of a long run on stderr
//!   (`--progress`).
//! - The timeline helpers turn packets, NIC spans and switch operations
//!   into timeline entries (nanoseconds); they are called only when a
//!   timeline is attached.
//! - This module knows nothing of the kernel, the queue or rank states.

use std::fmt::Display;

use railcoll_fw::abi::packet::PacketType;

use super::board::Ps;
use crate::hw::wire::{WirePacket, is_collective, is_control};
use crate::timeline::{Timeline, Track};

/// A modeled run stopped by the watchdog.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct Stalled(pub String);

/// The determinism witness of a run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TraceDigest {
    /// The fold of every committed action (`fold` in this module).
    pub hash: u64,
    /// Actions hashed.
    pub events: u64,
    /// Virtual time at the end, picoseconds.
    pub end_ps: Ps,
}

/// One committed action, for timelines (kept only when recording).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TraceRecord {
    /// Virtual time, picoseconds.
    pub time: Ps,
    /// Entity: rank `r` is `r`; NIC `node * rails + rail` follows the
    /// ranks; switches follow the NICs.
    pub entity: u32,
    /// 0 rank resumes, 1 register write, 2 NIC poll, 3 packet arrival,
    /// 4 switch, 5 sibling set, 6 injected fault (detail: the
    /// [`crate::hw::faults::Fate`] code), 7 stalled NIC poll.
    pub kind: u8,
    /// Kind-specific detail (register offset, packet type, ...).
    pub detail: u64,
}

/// The hash's start (FNV-1a 64's offset basis, kept from the byte-wise
/// hash this replaced).
const HASH_START: u64 = 0xcbf2_9ce4_8422_2325;
/// The multiplier of the word fold (FxHash's, rustc's own hasher).
const FOLD_K: u64 = 0x517c_c1b7_2722_0a95;

/// Fold one word into `h`: a bijection of `h` for each `v`, so two runs'
/// actions that differ in a single word always hash apart. A word at a
/// time: the byte-wise FNV-1a this replaced took 40 dependent multiplies
/// per action, 5 % of a modeled run.
fn fold(h: u64, v: u64) -> u64 {
    (h.rotate_left(5) ^ v).wrapping_mul(FOLD_K)
}

/// The hash of `bytes` alone (a packet header, say): their length, then
/// their 8-byte little-endian words, the last one zero-padded.
pub(super) fn hash_of(bytes: &[u8]) -> u64 {
    let mut h = fold(HASH_START, bytes.len() as u64);
    for chunk in bytes.chunks(8) {
        let mut word = [0u8; 8];
        word[..chunk.len()].copy_from_slice(chunk);
        h = fold(h, u64::from_le_bytes(word));
    }
    h
}

/// The trace hash and, when recording, the committed actions.
#[derive(Debug)]
pub(super) struct Trace {
    hash: u64,
    hashed: u64,
    records: Option<Vec<TraceRecord>>,
}

impl Trace {
    /// An empty trace of a run started with `seed`.
    pub(super) fn new(seed: u64) -> Self {
        Self {
            hash: fold(HASH_START, seed),
            hashed: 0,
            records: None,
        }
    }

    /// A committed action: hashed, and recorded when recording.
    pub(super) fn note(&mut self, time: Ps, entity: u32, kind: u8, a: u64, b: u64) {
        let mut h = self.hash;
        for v in [time, u64::from(entity), u64::from(kind), a, b] {
            h = fold(h, v);
        }
        self.hash = h;
        self.hashed += 1;
        if let Some(r) = self.records.as_mut() {
            r.push(TraceRecord {
                time,
                entity,
                kind,
                detail: a,
            });
        }
    }

    /// Fold `values` into the hash without counting an action.
    pub(super) fn mix(&mut self, values: &[u64]) {
        for v in values {
            self.hash = fold(self.hash, *v);
        }
    }

    /// The digest so far, at virtual time `now`.
    pub(super) fn digest(&self, now: Ps) -> TraceDigest {
        TraceDigest {
            hash: self.hash,
            events: self.hashed,
            end_ps: now,
        }
    }

    /// Start (or stop, with `false`) keeping every committed action.
    pub(super) fn record(&mut self, on: bool) {
        self.records = on.then(Vec::new);
    }

    /// Take the actions recorded so far.
    pub(super) fn take_records(&mut self) -> Vec<TraceRecord> {
        self.records
            .as_mut()
            .map(std::mem::take)
            .unwrap_or_default()
    }
}

/// Most actions committed at one virtual instant before the watchdog calls
/// it a livelock.
const LIVELOCK_EVENTS: u64 = 200_000_000;
/// Virtual time a run may take (from its start) before the watchdog stops it.
const HORIZON_PS: Ps = 600 * 1_000_000_000_000;

/// Polls a rank may make in a row that find nothing while nothing else is
/// queued before the watchdog calls it a deadlock (about a millisecond of
/// virtual polling): only that rank can still change anything, and it
/// keeps asking for what others would have to do.
const LONE_POLLS: u64 = 100_000;

/// Reports shown per blocked rank before the rest are only counted.
const SHOWN_RANKS: usize = 16;

/// `--progress`: the rate a long run commits actions at, reported on
/// stderr about once a second of wall time (it only observes).
#[derive(Debug)]
pub(super) struct ProgressMeter {
    start: std::time::Instant,
    last: std::time::Instant,
    last_events: u64,
}

impl ProgressMeter {
    pub(super) fn new() -> Self {
        let now = std::time::Instant::now();
        Self {
            start: now,
            last: now,
            last_events: 0,
        }
    }

    /// `events` actions committed so far, virtual time `now`: a line if a
    /// second has passed since the last.
    pub(super) fn tick(&mut self, events: u64, now: Ps) {
        let wall = std::time::Instant::now();
        let since = wall.duration_since(self.last).as_secs_f64();
        if since < 1.0 {
            return;
        }
        let rate = (events - self.last_events) as f64 / since;
        eprintln!(
            "# modeled: {events} events, {:.2} M events/s, virtual {:.3} us, wall {:.1} s",
            rate / 1e6,
            ns(now) / 1e3,
            wall.duration_since(self.start).as_secs_f64()
        );
        (self.last, self.last_events) = (wall, events);
    }
}

/// The watchdog's state across a run.
#[derive(Debug)]
pub(super) struct Watchdog {
    failure: Option<String>,
    stalls: u64,
    horizon: Ps,
    same_time: (Ps, u64),
    /// Time of the last action that moved something (for stall reports).
    last_progress: Ps,
    /// Idle polls in a row with nothing queued, and the count of committed
    /// actions when the streak began.
    lone_polls: (u64, u64),
}

impl Watchdog {
    pub(super) fn new() -> Self {
        Self {
            failure: None,
            stalls: 0,
            horizon: HORIZON_PS,
            same_time: (0, 0),
            last_progress: 0,
            lone_polls: (0, 0),
        }
    }

    /// A run starts at `now`: no failure yet, a fresh horizon.
    pub(super) fn start(&mut self, now: Ps) {
        self.failure = None;
        self.stalls = 0;
        self.horizon = now.saturating_add(HORIZON_PS);
    }

    /// An action is committed at `time`: is it past the horizon? (If so,
    /// the horizon moves on, so it fires once per horizon.)
    pub(super) fn past_horizon(&mut self, time: Ps) -> bool {
        if time <= self.horizon {
            return false;
        }
        self.horizon = time.saturating_add(HORIZON_PS);
        true
    }

    /// An action is committed at `time`: have too many been committed at
    /// this instant? (If so, the count starts over.)
    pub(super) fn livelock(&mut self, time: Ps) -> bool {
        if time != self.same_time.0 {
            self.same_time = (time, 0);
            return false;
        }
        self.same_time.1 += 1;
        if self.same_time.1 > LIVELOCK_EVENTS {
            self.same_time.1 = 0;
            return true;
        }
        false
    }

    /// A rank's poll found nothing while no action was queued, `events`
    /// actions having been committed so far: has it done so too many times
    /// with nothing committed since? (If so, the count starts over.)
    pub(super) fn lone_poll(&mut self, events: u64) -> bool {
        if self.lone_polls.0 != events {
            self.lone_polls = (events, 0);
        }
        self.lone_polls.1 += 1;
        if self.lone_polls.1 > LONE_POLLS {
            self.lone_polls.1 = 0;
            return true;
        }
        false
    }

    /// Something moved at `time`.
    pub(super) fn progress(&mut self, time: Ps) {
        self.last_progress = time;
    }

    /// The report of a stall: why, the seed, the virtual time `now`, the
    /// last progress and the `blocked` ranks (rank, schedule step, what it
    /// waits for).
    pub(super) fn report<W: Display>(
        &self,
        why: &str,
        seed: u64,
        now: Ps,
        blocked: impl Iterator<Item = (usize, Option<(u32, &'static str)>, W)>,
    ) -> String {
        let mut s = format!(
            "modeled run stalled: {why} (seed {seed}, virtual time {:.3} us, last progress at {:.3} us)",
            now as f64 / 1e6,
            self.last_progress as f64 / 1e6
        );
        let mut shown = 0;
        for (r, step, watch) in blocked {
            if shown < SHOWN_RANKS {
                let step =
                    step.map_or_else(String::new, |(i, what)| format!(" at step {i} ({what})"));
                s.push_str(&format!("; rank {r}{step} waits for {watch}"));
            }
            shown += 1;
        }
        if shown > SHOWN_RANKS {
            s.push_str(&format!("; and {} more blocked ranks", shown - SHOWN_RANKS));
        }
        s
    }

    /// The run stalled: keep `report` (the kernel fails the blocked waits).
    pub(super) fn fail(&mut self, report: String) {
        // Not printed here: the run's error carries it to the user once
        // (`Cluster::check_stalled`, which every caller asks before a
        // rank's timeout); printing too showed it twice.
        self.failure = Some(report);
        self.stalls += 1;
    }

    /// The last stall's report, if any.
    pub(super) fn failure(&self) -> Option<&String> {
        self.failure.as_ref()
    }

    /// Has the run stalled more than twice per rank (`ranks`)? Ranks that
    /// keep waiting after every stall are given up on.
    pub(super) fn given_up(&self, ranks: usize) -> bool {
        self.stalls > 2 * ranks as u64
    }
}

/// Picoseconds as the timeline's nanoseconds.
pub(super) fn ns(ps: Ps) -> f64 {
    ps as f64 / 1000.0
}

fn packet_name(t: PacketType) -> &'static str {
    match t {
        PacketType::Data => "data",
        PacketType::GetRequest => "get request",
        PacketType::Ack => "ack",
        PacketType::Nack => "nack",
        PacketType::Bcast => "broadcast",
        PacketType::BcastAck => "broadcast ack",
        PacketType::BarrierArrive => "barrier arrive",
        PacketType::BarrierLeave => "barrier leave",
        PacketType::BarrierRelease => "barrier release",
        PacketType::BarrierHeld => "barrier held",
        PacketType::FlowClose => "flow close",
        PacketType::FlowCloseAck => "flow close answer",
    }
}

/// A packet leaving `node`'s port on `rail`: data occupies the port
/// (a span); link-level acknowledgements travel beside it (an instant).
pub(super) fn trace_packet(
    tl: &Timeline,
    node: usize,
    rail: usize,
    packet: &WirePacket,
    depart: Ps,
    ser: Ps,
) {
    let track = Track::Port { rail, node };
    let what = PacketType::from_raw(packet.header.ptype).map_or("packet", packet_name);
    let len = packet.payload.map_or(0, |p| p.len);
    if is_control(packet) {
        tl.push(track, "ack", what.into(), ns(depart), None);
        return;
    }
    let name = if is_collective(packet) {
        format!("{what} {len} B to the switch")
    } else {
        format!("{what} {len} B to node {}", packet.header.dst_node.get())
    };
    tl.push(track, "packet", name, ns(depart), Some(ns(depart + ser)));
}

/// A collective packet handled by the switch of `rail` at `t`.
pub(super) fn trace_switch(tl: &Timeline, rail: usize, packet: &WirePacket, t: Ps) {
    let what = PacketType::from_raw(packet.header.ptype).map_or("packet", packet_name);
    tl.push(Track::Switch { rail }, "switch", what.into(), ns(t), None);
}

/// The spans a NIC's board kept during a poll.
pub(super) fn trace_nic(
    tl: &Timeline,
    node: usize,
    rail: usize,
    spans: impl Iterator<Item = (Ps, Option<Ps>, &'static str)>,
) {
    let track = Track::Nic { node, rail };
    for (start, end, what) in spans {
        let cat = if what == "event fired" {
            "event"
        } else {
            "nic"
        };
        tl.push(track, cat, what.into(), ns(start), end.map(ns));
    }
}
