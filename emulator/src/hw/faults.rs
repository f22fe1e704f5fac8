//! Fault injection on the rails, in both modes.
//!
//! Contract:
//! - A [`FaultSpec`] says what goes wrong: per-packet probabilities of
//!   loss, corruption, duplication and delay, extra loss for the switch's
//!   collective packets (barrier arrivals, releases and leaves, broadcast
//!   copies), rails that go down (and up again) at given times, and NICs
//!   that stall (are not polled) for a while. Its text form is the
//!   `--faults` flag's (`drop=0.01,corrupt=0.001,rail-down=1@250us`);
//!   `Display` prints the canonical form, which parses back to the same
//!   spec.
//! - Every packet is judged once where it leaves a NIC for the rail, and
//!   every copy the switch sends on is judged again, by [`RailFaults::judge`]:
//!   one seeded random stream per rail, drawn in the order the rail sees
//!   its packets. In modeled mode that order is the sequencer's, so the
//!   same seed injects the same faults at the same virtual times and the
//!   trace (which records each fault) hashes the same; in threads mode the
//!   order is the threads', and a run is only as reproducible as they are.
//! - A corrupted packet stays on the wire with one bit of its header or
//!   one byte of its payload changed. The firmware's header checksum
//!   catches the first, the receive port's payload CRC (the wire format's
//!   trailer, docs/abi.md §2) the second: either way the packet is
//!   dropped without effect and the sender's go-back-N recovers it.
//! - Nothing here writes memory: faults only lose, alter, repeat or hold
//!   packets, so every byte that lands is still checked by the receiving
//!   firmware and port.

use std::fmt;
use std::str::FromStr;

use rand_core::{Rng, SeedableRng};
use rand_xorshift::XorShiftRng;
use zerocopy::IntoBytes;

use crate::hw::wire::{Damage, PayloadLen, WirePacket, is_collective};

/// A rail that goes down at `down_ns` (and up again at `up_ns`): every
/// packet it would carry meanwhile is lost.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Outage {
    /// The rail.
    pub rail: u8,
    /// When it goes down, ns from the start of the cluster.
    pub down_ns: u64,
    /// When it comes back, if it does.
    pub up_ns: Option<u64>,
}

/// A NIC whose processor stops (is not polled) from `at_ns` for `for_ns`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Stall {
    /// Its node.
    pub node: u16,
    /// Its rail.
    pub rail: u8,
    /// When it stops, ns from the start of the cluster.
    pub at_ns: u64,
    /// For how long.
    pub for_ns: u64,
}

/// What goes wrong on the rails of one cluster (nothing, by default).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct FaultSpec {
    /// Probability that a packet is lost.
    pub drop: f64,
    /// Extra probability that a collective packet (barrier arrival,
    /// release or leave, broadcast copy) is lost.
    pub drop_collective: f64,
    /// Probability that a packet arrives with one bit of its header or one
    /// byte of its payload changed.
    pub corrupt: f64,
    /// Probability that a packet arrives twice.
    pub duplicate: f64,
    /// Probability that a packet is held back by [`FaultSpec::delay_ns`]
    /// (later packets overtake it).
    pub delay: f64,
    /// How long a delayed packet is held.
    pub delay_ns: u64,
    /// Rails that go down.
    pub outages: Vec<Outage>,
    /// NICs that stall.
    pub stalls: Vec<Stall>,
}

/// Default hold of a delayed packet: several packet times on any modeled
/// link, so that the packets behind it overtake it.
pub const DEFAULT_DELAY_NS: u64 = 20_000;

/// A `--faults` text that cannot be used.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum FaultSpecError {
    /// A term is not `key=value`.
    #[error("fault term '{0}' is not key=value (e.g. drop=0.01)")]
    NotKeyValue(String),
    /// An unknown key.
    #[error(
        "unknown fault '{0}' (accepted: drop, drop-collective, corrupt, dup, delay, rail-down, rail-up, stall)"
    )]
    UnknownKey(String),
    /// A probability outside `0..=1`, or not a number.
    #[error("fault '{key}': '{value}' is not a probability in 0..=1")]
    Probability {
        /// The key.
        key: String,
        /// The value given.
        value: String,
    },
    /// The probabilities of one packet's fates add up to more than 1.
    #[error("drop + corrupt + dup + delay add up to {0}, more than 1")]
    Sum(f64),
    /// A time that is not a number with a unit.
    #[error("fault '{key}': '{value}' is not a time (e.g. 250us, 1.5ms, 2s, 100ns)")]
    Time {
        /// The key.
        key: String,
        /// The value given.
        value: String,
    },
    /// A rail, node or NIC that is not `N`, `N@T` or `NODE.RAIL@T+D`.
    #[error("fault '{key}': '{value}' is not {expected}")]
    Shape {
        /// The key.
        key: String,
        /// The value given.
        value: String,
        /// The accepted form.
        expected: &'static str,
    },
    /// `rail-up` for a rail that is not down at that time.
    #[error("rail-up={rail}@{at_ns}ns: rail {rail} is not down before then (give rail-down first)")]
    UpWithoutDown {
        /// The rail.
        rail: u8,
        /// When.
        at_ns: u64,
    },
    /// A rail or NIC the cluster does not have.
    #[error("fault on {what}, but the cluster has {have}")]
    OutOfCluster {
        /// The rail or NIC named.
        what: String,
        /// What the cluster has.
        have: String,
    },
}

impl FaultSpec {
    /// Nothing goes wrong.
    pub fn is_none(&self) -> bool {
        *self == FaultSpec::default()
    }

    /// Check the rails and NICs named against a cluster of `nodes` nodes
    /// and `rails` rails.
    pub fn check_against(&self, nodes: usize, rails: usize) -> Result<(), FaultSpecError> {
        for o in &self.outages {
            if usize::from(o.rail) >= rails {
                return Err(FaultSpecError::OutOfCluster {
                    what: format!("rail {}", o.rail),
                    have: format!("{rails} rail(s), 0..={}", rails.saturating_sub(1)),
                });
            }
        }
        for s in &self.stalls {
            if usize::from(s.node) >= nodes || usize::from(s.rail) >= rails {
                return Err(FaultSpecError::OutOfCluster {
                    what: format!("NIC {}.{}", s.node, s.rail),
                    have: format!("{nodes} node(s) and {rails} rail(s)"),
                });
            }
        }
        Ok(())
    }

    /// Is `rail` down at `now_ns`?
    pub fn rail_down(&self, rail: u8, now_ns: u64) -> bool {
        self.outages
            .iter()
            .any(|o| o.rail == rail && o.down_ns <= now_ns && o.up_ns.is_none_or(|up| now_ns < up))
    }

    /// If the NIC (`node`, `rail`) is stalled at `now_ns`, when it resumes.
    pub fn stalled_until(&self, node: u16, rail: u8, now_ns: u64) -> Option<u64> {
        self.stalls
            .iter()
            .filter(|s| s.node == node && s.rail == rail)
            .filter(|s| s.at_ns <= now_ns && now_ns < s.at_ns.saturating_add(s.for_ns))
            .map(|s| s.at_ns.saturating_add(s.for_ns))
            .max()
    }

    fn packet_faults(&self) -> bool {
        self.drop + self.drop_collective + self.corrupt + self.duplicate + self.delay > 0.0
    }
}

fn probability(key: &str, value: &str) -> Result<f64, FaultSpecError> {
    match value.parse::<f64>() {
        Ok(p) if (0.0..=1.0).contains(&p) => Ok(p),
        _ => Err(FaultSpecError::Probability {
            key: key.into(),
            value: value.into(),
        }),
    }
}

/// A time with its unit (`ns`, `us`, `ms`, `s`), in nanoseconds.
fn time_ns(key: &str, value: &str) -> Result<u64, FaultSpecError> {
    let bad = || FaultSpecError::Time {
        key: key.into(),
        value: value.into(),
    };
    let split = value
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .ok_or_else(bad)?;
    let (number, unit) = value.split_at(split);
    let scale = match unit {
        "ns" => 1.0,
        "us" => 1e3,
        "ms" => 1e6,
        "s" => 1e9,
        _ => return Err(bad()),
    };
    let n: f64 = number.parse().map_err(|_| bad())?;
    let ns = (n * scale).round();
    // Up to ~115 days: far beyond any run, and exact in an f64.
    if !(0.0..=1e16).contains(&ns) {
        return Err(bad());
    }
    Ok(ns as u64)
}

/// A duration with its unit (`250us`, `1.5ms`): the `--faults` times,
/// and the CLI's `--retransmit-timeout`.
pub fn parse_time(text: &str) -> Result<std::time::Duration, String> {
    time_ns("time", text)
        .map(std::time::Duration::from_nanos)
        .map_err(|e| e.to_string())
}

fn shape_error(key: &str, value: &str, expected: &'static str) -> FaultSpecError {
    FaultSpecError::Shape {
        key: key.into(),
        value: value.into(),
        expected,
    }
}

/// `RAIL@TIME`.
fn rail_at(key: &str, value: &str) -> Result<(u8, u64), FaultSpecError> {
    let (rail, at) = value
        .split_once('@')
        .ok_or_else(|| shape_error(key, value, "RAIL@TIME (e.g. 1@250us)"))?;
    let rail = rail
        .parse::<u8>()
        .map_err(|_| shape_error(key, value, "RAIL@TIME with RAIL in 0..=255"))?;
    Ok((rail, time_ns(key, at)?))
}

/// `NODE.RAIL@TIME+DURATION`.
fn stall(key: &str, value: &str) -> Result<Stall, FaultSpecError> {
    const FORM: &str = "NODE.RAIL@TIME+DURATION (e.g. 3.1@100us+50us)";
    let (nic, when) = value
        .split_once('@')
        .ok_or_else(|| shape_error(key, value, FORM))?;
    let (node, rail) = nic
        .split_once('.')
        .ok_or_else(|| shape_error(key, value, FORM))?;
    let (at, dur) = when
        .split_once('+')
        .ok_or_else(|| shape_error(key, value, FORM))?;
    Ok(Stall {
        node: node.parse().map_err(|_| shape_error(key, value, FORM))?,
        rail: rail.parse().map_err(|_| shape_error(key, value, FORM))?,
        at_ns: time_ns(key, at)?,
        for_ns: time_ns(key, dur)?,
    })
}

impl FromStr for FaultSpec {
    type Err = FaultSpecError;

    /// Comma-separated terms; `none` or the empty string is no fault.
    fn from_str(s: &str) -> Result<Self, FaultSpecError> {
        let mut spec = FaultSpec {
            delay_ns: DEFAULT_DELAY_NS,
            ..FaultSpec::default()
        };
        for term in s.split(',').map(str::trim).filter(|t| !t.is_empty()) {
            if term == "none" {
                continue;
            }
            let (key, value) = term
                .split_once('=')
                .ok_or_else(|| FaultSpecError::NotKeyValue(term.into()))?;
            match key {
                "drop" => spec.drop = probability(key, value)?,
                "drop-collective" => spec.drop_collective = probability(key, value)?,
                "corrupt" => spec.corrupt = probability(key, value)?,
                "dup" => spec.duplicate = probability(key, value)?,
                "delay" => match value.split_once(':') {
                    Some((p, hold)) => {
                        spec.delay = probability(key, p)?;
                        spec.delay_ns = time_ns(key, hold)?;
                    }
                    None => spec.delay = probability(key, value)?,
                },
                "rail-down" => {
                    let (rail, down_ns) = rail_at(key, value)?;
                    spec.outages.push(Outage {
                        rail,
                        down_ns,
                        up_ns: None,
                    });
                }
                "rail-up" => {
                    let (rail, at_ns) = rail_at(key, value)?;
                    let open = spec
                        .outages
                        .iter_mut()
                        .rev()
                        .find(|o| o.rail == rail && o.up_ns.is_none() && o.down_ns < at_ns)
                        .ok_or(FaultSpecError::UpWithoutDown { rail, at_ns })?;
                    open.up_ns = Some(at_ns);
                }
                "stall" => spec.stalls.push(stall(key, value)?),
                _ => return Err(FaultSpecError::UnknownKey(key.into())),
            }
        }
        let sum = spec.drop + spec.corrupt + spec.duplicate + spec.delay;
        if sum > 1.0 {
            return Err(FaultSpecError::Sum(sum));
        }
        if spec.delay == 0.0 {
            spec.delay_ns = 0;
        }
        Ok(spec)
    }
}

/// Nanoseconds in the largest unit that keeps them whole.
fn fmt_time(ns: u64) -> String {
    match ns {
        0 => "0ns".into(),
        n if n.is_multiple_of(1_000_000_000) => format!("{}s", n / 1_000_000_000),
        n if n.is_multiple_of(1_000_000) => format!("{}ms", n / 1_000_000),
        n if n.is_multiple_of(1_000) => format!("{}us", n / 1_000),
        n => format!("{n}ns"),
    }
}

impl fmt::Display for FaultSpec {
    /// The canonical text form (`none` for no fault).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut terms = Vec::new();
        for (key, p) in [
            ("drop", self.drop),
            ("drop-collective", self.drop_collective),
            ("corrupt", self.corrupt),
            ("dup", self.duplicate),
        ] {
            if p > 0.0 {
                terms.push(format!("{key}={p}"));
            }
        }
        if self.delay > 0.0 {
            terms.push(format!("delay={}:{}", self.delay, fmt_time(self.delay_ns)));
        }
        for o in &self.outages {
            terms.push(format!("rail-down={}@{}", o.rail, fmt_time(o.down_ns)));
            if let Some(up) = o.up_ns {
                terms.push(format!("rail-up={}@{}", o.rail, fmt_time(up)));
            }
        }
        for s in &self.stalls {
            terms.push(format!(
                "stall={}.{}@{}+{}",
                s.node,
                s.rail,
                fmt_time(s.at_ns),
                fmt_time(s.for_ns)
            ));
        }
        if terms.is_empty() {
            f.write_str("none")
        } else {
            f.write_str(&terms.join(","))
        }
    }
}

/// What happens to one packet on the rail.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fate {
    /// It arrives as sent.
    Deliver,
    /// It is lost.
    Lost(Loss),
    /// It arrives altered (the packet was changed in place).
    Corrupted,
    /// It arrives twice.
    Duplicated,
    /// It arrives this many ns late.
    Delayed(u64),
}

/// Why a packet was lost.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Loss {
    /// At random (`drop`, `drop-collective`).
    Dropped,
    /// Its rail was down.
    RailDown,
}

impl Fate {
    /// When the copies of a packet that would arrive at `at` (virtual
    /// time, ps) arrive: none, one (maybe later) or two.
    pub fn arrivals(self, at: u64) -> impl Iterator<Item = u64> {
        let (copies, at) = match self {
            Fate::Lost(_) => (0, at),
            Fate::Deliver | Fate::Corrupted => (1, at),
            Fate::Duplicated => (2, at),
            Fate::Delayed(ns) => (1, at.saturating_add(ns.saturating_mul(1000))),
        };
        std::iter::repeat_n(at, copies)
    }

    /// A small code for the trace (0: delivered as sent).
    pub fn code(self) -> u64 {
        match self {
            Fate::Deliver => 0,
            Fate::Lost(Loss::Dropped) => 1,
            Fate::Lost(Loss::RailDown) => 2,
            Fate::Corrupted => 3,
            Fate::Duplicated => 4,
            Fate::Delayed(_) => 5,
        }
    }
}

/// How many packets met each fault.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FaultCounts {
    /// Packets judged (with faults configured).
    pub judged: u64,
    /// Lost at random.
    pub dropped: u64,
    /// Lost to a rail that was down.
    pub rail_down: u64,
    /// Delivered with a header bit changed.
    pub corrupt_header: u64,
    /// Delivered with a payload byte changed.
    pub corrupt_payload: u64,
    /// Delivered twice.
    pub duplicated: u64,
    /// Held back.
    pub delayed: u64,
}

impl FaultCounts {
    /// Faults injected, of every kind.
    pub fn injected(&self) -> u64 {
        self.dropped
            + self.rail_down
            + self.corrupt_header
            + self.corrupt_payload
            + self.duplicated
            + self.delayed
    }

    /// Add `other`'s counts.
    pub fn add(&mut self, other: &FaultCounts) {
        self.judged += other.judged;
        self.dropped += other.dropped;
        self.rail_down += other.rail_down;
        self.corrupt_header += other.corrupt_header;
        self.corrupt_payload += other.corrupt_payload;
        self.duplicated += other.duplicated;
        self.delayed += other.delayed;
    }
}

impl std::iter::Sum for FaultCounts {
    fn sum<I: Iterator<Item = FaultCounts>>(iter: I) -> Self {
        let mut total = FaultCounts::default();
        for c in iter {
            total.add(&c);
        }
        total
    }
}

/// The faults of one rail: its spec, random stream and counts.
#[derive(Debug)]
pub struct RailFaults {
    spec: std::sync::Arc<FaultSpec>,
    rail: u8,
    rng: XorShiftRng,
    counts: FaultCounts,
}

/// A uniform draw in `[0, 1)` (53 bits).
fn uniform(rng: &mut XorShiftRng) -> f64 {
    (rng.next_u64() >> 11) as f64 / (1u64 << 53) as f64
}

impl RailFaults {
    /// Rail `rail`'s faults under `spec`, its stream seeded from the run's
    /// `seed` and the rail (so rails draw independently).
    pub fn new(spec: std::sync::Arc<FaultSpec>, rail: u8, seed: u64) -> Self {
        let stream = seed ^ (u64::from(rail) + 1).wrapping_mul(0x9e37_79b9_7f4a_7c15);
        Self {
            spec,
            rail,
            rng: XorShiftRng::seed_from_u64(stream),
            counts: FaultCounts::default(),
        }
    }

    /// The spec.
    pub fn spec(&self) -> &FaultSpec {
        &self.spec
    }

    /// The counts so far.
    pub fn counts(&self) -> FaultCounts {
        self.counts
    }

    /// Decide `packet`'s fate as it takes the rail at `now_ns`; a
    /// corrupted packet is changed in place.
    pub fn judge<P: PayloadLen>(&mut self, packet: &mut WirePacket<P>, now_ns: u64) -> Fate {
        let spec = &*self.spec;
        self.counts.judged += 1;
        if spec.rail_down(self.rail, now_ns) {
            self.counts.rail_down += 1;
            return Fate::Lost(Loss::RailDown);
        }
        if !spec.packet_faults() {
            return Fate::Deliver;
        }
        if is_collective_hop(packet) && spec.drop_collective > 0.0 {
            let u = uniform(&mut self.rng);
            if u < spec.drop_collective {
                self.counts.dropped += 1;
                return Fate::Lost(Loss::Dropped);
            }
        }
        let u = uniform(&mut self.rng);
        let mut edge = spec.drop;
        if u < edge {
            self.counts.dropped += 1;
            return Fate::Lost(Loss::Dropped);
        }
        edge += spec.corrupt;
        if u < edge {
            self.corrupt(packet);
            return Fate::Corrupted;
        }
        edge += spec.duplicate;
        if u < edge {
            self.counts.duplicated += 1;
            return Fate::Duplicated;
        }
        edge += spec.delay;
        if u < edge {
            self.counts.delayed += 1;
            return Fate::Delayed(spec.delay_ns);
        }
        Fate::Deliver
    }

    /// Change one header bit, or one payload byte: a packet with a payload
    /// is hit in proportion to its bytes on the wire.
    fn corrupt<P: PayloadLen>(&mut self, packet: &mut WirePacket<P>) {
        let header_len = std::mem::size_of_val(&packet.header) as u64;
        let payload_len = u64::from(packet.payload_len());
        let r = self.rng.next_u64();
        let at = r % (header_len + payload_len);
        if at < header_len {
            let bit = (r >> 32) % 8;
            packet.header.as_mut_bytes()[at as usize] ^= 1 << bit;
            self.counts.corrupt_header += 1;
        } else {
            // A non-zero XOR: the byte really changes.
            let xor = ((r >> 32) % 255 + 1) as u8;
            packet.damage = Some(Damage {
                offset: (at - header_len) as u32,
                xor,
            });
            self.counts.corrupt_payload += 1;
        }
    }
}

/// Packets the switch handles, and the releases and held answers it
/// sends: the barrier and broadcast traffic `drop-collective` aims at.
fn is_collective_hop<P>(packet: &WirePacket<P>) -> bool {
    use railcoll_fw::abi::packet::PacketType;
    is_collective(packet)
        || matches!(
            PacketType::from_raw(packet.header.ptype),
            Some(PacketType::BarrierRelease | PacketType::BarrierHeld)
        )
}

/// What a stall report (either mode's watchdog) says of the rails: the
/// NICs (`node.rail`, from each NIC's `STATUS`) with a flow past its retry
/// limit and with a flow moved to its alternate rail, then the faults
/// injected; empty when there is nothing to say. A flow past its retry
/// limit explains most stalls under faults.
pub(crate) fn stall_note(
    statuses: impl IntoIterator<Item = (usize, usize, u64)>,
    spec: &FaultSpec,
    counts: FaultCounts,
) -> String {
    use railcoll_fw::abi::regs::Status;
    let (mut broken, mut migrated) = (Vec::new(), Vec::new());
    for (node, rail, status) in statuses {
        let status = Status::from_bits_truncate(status);
        if status.contains(Status::FLOW_BROKEN) {
            broken.push(format!("{node}.{rail}"));
        }
        if status.contains(Status::MIGRATED) {
            migrated.push(format!("{node}.{rail}"));
        }
    }
    let mut note = String::new();
    if !broken.is_empty() {
        note.push_str(&format!(
            "; NICs (node.rail) with a flow past its retry limit (peer unreachable): {}",
            broken.join(", ")
        ));
    }
    if !migrated.is_empty() {
        note.push_str(&format!(
            "; NICs (node.rail) with a flow moved to its alternate rail: {}",
            migrated.join(", ")
        ));
    }
    if !spec.is_none() {
        note.push_str(&format!("; faults injected ({spec}): {counts:?}"));
    }
    note
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn the_issue_example_parses() {
        let spec: FaultSpec = "drop=0.01,corrupt=0.001,rail-down=1@250us".parse().unwrap();
        assert_eq!(spec.drop, 0.01);
        assert_eq!(spec.corrupt, 0.001);
        assert_eq!(
            spec.outages,
            vec![Outage {
                rail: 1,
                down_ns: 250_000,
                up_ns: None
            }]
        );
        assert!(spec.rail_down(1, 250_000));
        assert!(!spec.rail_down(1, 249_999));
        assert!(!spec.rail_down(0, 1_000_000));
    }

    #[test]
    fn a_rail_comes_back_up_and_a_stall_ends() {
        let spec: FaultSpec = "rail-down=0@1ms,rail-up=0@2ms,stall=3.1@100us+50us"
            .parse()
            .unwrap();
        assert!(spec.rail_down(0, 1_500_000));
        assert!(!spec.rail_down(0, 2_000_000));
        assert_eq!(spec.stalled_until(3, 1, 120_000), Some(150_000));
        assert_eq!(spec.stalled_until(3, 1, 150_000), None);
        assert_eq!(spec.stalled_until(3, 0, 120_000), None);
    }

    #[test]
    fn bad_terms_are_refused_with_what_is_accepted() {
        for (text, needle) in [
            ("drop", "key=value"),
            ("lose=0.1", "accepted: drop"),
            ("drop=1.5", "probability"),
            ("drop=-0.1", "probability"),
            ("drop=nan", "probability"),
            ("drop=0.6,dup=0.6", "more than 1"),
            ("rail-down=1", "RAIL@TIME"),
            ("rail-down=1@3parsecs", "not a time"),
            ("rail-down=x@1us", "RAIL@TIME"),
            ("rail-up=1@1us", "not down"),
            ("rail-down=1@5us,rail-up=1@2us", "not down"),
            ("stall=3@1us+1us", "NODE.RAIL"),
            ("delay=0.1:forever", "not a time"),
        ] {
            let err = text.parse::<FaultSpec>().unwrap_err().to_string();
            assert!(err.contains(needle), "{text}: {err}");
        }
    }

    #[test]
    fn rails_and_nics_are_checked_against_the_cluster() {
        let spec: FaultSpec = "rail-down=2@1us".parse().unwrap();
        assert!(spec.check_against(4, 2).is_err());
        assert!(spec.check_against(4, 3).is_ok());
        let spec: FaultSpec = "stall=4.0@1us+1us".parse().unwrap();
        assert!(spec.check_against(4, 2).is_err());
    }

    fn arb_spec() -> impl Strategy<Value = FaultSpec> {
        let p = prop_oneof![Just(0.0), Just(0.25), Just(0.001), Just(1e-6)];
        let t = prop_oneof![
            Just(0u64),
            Just(1),
            Just(1_500),
            Just(250_000),
            Just(3_000_000_000)
        ];
        (
            (p.clone(), p.clone(), p.clone(), p.clone(), p),
            t.clone(),
            proptest::collection::vec((0u8..4, t.clone(), proptest::option::of(1u64..1000)), 0..3),
            proptest::collection::vec((0u16..300, 0u8..4, t.clone(), t), 0..3),
        )
            .prop_map(|((drop, dc, corrupt, dup, delay), hold, outages, stalls)| {
                let mut spec = FaultSpec {
                    drop,
                    drop_collective: dc,
                    corrupt,
                    duplicate: dup,
                    delay,
                    delay_ns: if delay > 0.0 { hold } else { 0 },
                    ..FaultSpec::default()
                };
                for (rail, down, up) in outages {
                    spec.outages.push(Outage {
                        rail,
                        down_ns: down,
                        up_ns: up.map(|u| down + u),
                    });
                }
                for (node, rail, at, dur) in stalls {
                    spec.stalls.push(Stall {
                        node,
                        rail,
                        at_ns: at,
                        for_ns: dur,
                    });
                }
                spec
            })
    }

    proptest! {
        #[test]
        fn the_canonical_form_parses_back(spec in arb_spec()) {
            let text = spec.to_string();
            let back: FaultSpec = text.parse().unwrap();
            prop_assert_eq!(back, spec, "{}", text);
        }

        #[test]
        fn any_text_parses_or_is_refused(text in "[a-z=,.@:+0-9-]{0,40}") {
            let _ = text.parse::<FaultSpec>();
        }
    }
}
