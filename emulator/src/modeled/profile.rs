//! Calibration profiles: the hardware costs behind modeled mode.
//!
//! A profile is a TOML file (`emulator/profiles/*.toml` ship built in);
//! every number carries its source in a comment there and in
//! `docs/profiles.md`. Times are nanoseconds, bandwidths MB/s (10^6 bytes
//! per second). Unknown keys are refused, so a typo never silently leaves a
//! cost at zero. Internally times are integer picoseconds: a per-byte cost
//! of 1/900 us rounds to 1 ps per packet at most, which keeps the `hockney`
//! profile equal to the closed forms to well under a nanosecond.

use serde::Deserialize;

/// Built-in profiles: (name, file text).
pub const BUILTIN: &[(&str, &str)] = &[
    (
        "qsnet2-dual",
        include_str!("../../profiles/qsnet2-dual.toml"),
    ),
    ("clan-via", include_str!("../../profiles/clan-via.toml")),
    (
        "ib-multicore",
        include_str!("../../profiles/ib-multicore.toml"),
    ),
    ("hockney", include_str!("../../profiles/hockney.toml")),
];

/// The default profile of modeled mode.
pub const DEFAULT_PROFILE: &str = "qsnet2-dual";

/// A profile that could not be loaded.
#[derive(Debug, thiserror::Error)]
pub enum ProfileError {
    /// Neither a built-in name nor a readable file.
    #[error("unknown profile `{name}` (built in: {known}; or a path to a TOML file): {io}")]
    Unknown {
        /// What was asked.
        name: String,
        /// Built-in names.
        known: String,
        /// Why the file could not be read.
        io: String,
    },
    /// The file is not a valid profile.
    #[error("profile `{name}`: {msg}")]
    Invalid {
        /// Profile name or path.
        name: String,
        /// What is wrong.
        msg: String,
    },
}

/// The cluster a profile describes (presets and defaults use it).
#[derive(Clone, Copy, Debug, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Platform {
    /// Nodes.
    pub nodes: usize,
    /// Processes per node.
    pub ranks_per_node: usize,
    /// Sockets per node.
    pub sockets: usize,
    /// Rails (NICs per node).
    pub rails: usize,
}

/// One rail's link and switch.
#[derive(Clone, Copy, Debug, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct LinkCosts {
    /// First bit out of the sender's NIC to first bit into the receiver's,
    /// through the switch.
    pub latency_ns: f64,
    /// Link data rate, per direction.
    pub bandwidth_mb_s: f64,
    /// Bytes each packet adds on the wire (header, CRC).
    pub packet_header_bytes: u32,
    /// NIC time per transmitted packet beyond its serialisation.
    pub packet_overhead_ns: f64,
    /// Switch time to replicate a broadcast or combine a barrier.
    pub switch_collective_ns: f64,
}

/// NIC processing.
#[derive(Clone, Copy, Debug, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct NicCosts {
    /// Executing one command block.
    pub command_ns: f64,
    /// Firing one event (running its action).
    pub event_ns: f64,
    /// LogGP's g at the NIC: the transmit engine's time per DMA, charged
    /// one DMA after another (a DMA started behind others waits for their
    /// gaps, not their start-up latencies): the inverse of the message
    /// rate.
    pub dma_gap_ns: f64,
    /// The rest of a DMA's start-up (descriptor fetch, translation): a
    /// pipeline latency between the transmit engine and the wire, which
    /// DMAs started together overlap (part of LogGP's L).
    pub dma_latency_ns: f64,
}

/// The host bus the NICs sit on.
#[derive(Clone, Copy, Debug, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct PciCosts {
    /// One-way latency of a host write reaching the NIC, or a NIC write
    /// becoming visible to the host.
    pub latency_ns: f64,
    /// Usable bandwidth.
    pub bandwidth_mb_s: f64,
    /// All of a node's NICs share one bus (else each has its own).
    pub shared: bool,
}

/// Host CPU and memory.
#[derive(Clone, Copy, Debug, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct HostCosts {
    /// Ringing a doorbell (one uncached write to the NIC).
    pub post_ns: f64,
    /// Writing one command block into the command queue.
    pub command_ns: f64,
    /// Noticing a completion word or flag change that it polls.
    pub poll_ns: f64,
    /// memcpy bandwidth of one core.
    pub memcpy_mb_s: f64,
    /// memcpy bandwidth of one core between sockets.
    pub memcpy_xsocket_mb_s: f64,
    /// Memory bandwidth of the whole node available to copies (concurrent
    /// copies share it).
    pub memory_mb_s: f64,
    /// Cache-line hand-off between cores of one socket.
    pub cacheline_ns: f64,
    /// Cache-line hand-off between sockets.
    pub cacheline_xsocket_ns: f64,
}

/// The message-passing layer's software (send/receive over the NIC's
/// input queues, as an MPI library does it): LogGP's o on that path, on
/// top of the doorbell and poll every NIC operation pays ([`HostCosts`]).
#[derive(Clone, Copy, Debug, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct LibraryCosts {
    /// Per send: building the request and envelope (o_s).
    pub send_ns: f64,
    /// Per receive: matching the message against the posted and
    /// unexpected lists (o_r); a message that came before its receive is
    /// also copied out of the library's store at `host.memcpy_mb_s`.
    pub recv_ns: f64,
}

/// A calibration profile.
#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Profile {
    /// Short name.
    pub name: String,
    /// One line on what it models.
    pub description: String,
    /// NIC packet payload size, bytes.
    pub packet_size: u32,
    /// The platform it describes.
    pub platform: Platform,
    /// Per rail.
    pub link: LinkCosts,
    /// Per NIC.
    pub nic: NicCosts,
    /// Per node.
    pub pci: PciCosts,
    /// Per node.
    pub host: HostCosts,
    /// Per rank, on the message-passing path only.
    pub library: LibraryCosts,
}

impl Profile {
    /// Load a built-in profile by name, or a TOML file by path.
    pub fn load(name_or_path: &str) -> Result<(Profile, String), ProfileError> {
        if let Some((_, text)) = BUILTIN.iter().find(|(n, _)| *n == name_or_path) {
            return Ok((Self::parse(name_or_path, text)?, (*text).to_string()));
        }
        let text = std::fs::read_to_string(name_or_path).map_err(|e| ProfileError::Unknown {
            name: name_or_path.to_string(),
            known: BUILTIN
                .iter()
                .map(|(n, _)| *n)
                .collect::<Vec<_>>()
                .join(", "),
            io: e.to_string(),
        })?;
        Ok((Self::parse(name_or_path, &text)?, text))
    }

    /// A built-in profile (the name must be one of [`BUILTIN`]).
    pub fn builtin(name: &str) -> Result<Profile, ProfileError> {
        Self::load(name).map(|(p, _)| p)
    }

    /// Parse and validate profile text.
    pub fn parse(name: &str, text: &str) -> Result<Profile, ProfileError> {
        let invalid = |msg: String| ProfileError::Invalid {
            name: name.to_string(),
            msg,
        };
        let p: Profile = toml::from_str(text).map_err(|e| invalid(toml_problem(text, &e)))?;
        p.validate().map_err(invalid)?;
        Ok(p)
    }

    fn validate(&self) -> Result<(), String> {
        // Every numeric key: bandwidths (`_mb_s`) may be infinite ("inf":
        // that cost is then zero), times are finite.
        let mut values = self.clone();
        for key in Self::KEYS {
            let v = values.field(key).map_or(f64::NAN, |v| *v);
            if key.ends_with("_mb_s") {
                if v.is_nan() || v < 1.0 {
                    return Err(format!("{key} must be at least 1 MB/s (or inf), got {v}"));
                }
            } else if !(v.is_finite() && (0.0..=1e9).contains(&v)) {
                return Err(format!("{key} must be a time in 0..=1e9 ns, got {v}"));
            }
        }
        let ps = self.packet_size;
        if !ps.is_power_of_two()
            || !(railcoll_fw::abi::MIN_PACKET_SIZE..=railcoll_fw::abi::MAX_PACKET_SIZE)
                .contains(&ps)
        {
            return Err(format!(
                "packet_size must be a power of two in {}..={}, got {ps}",
                railcoll_fw::abi::MIN_PACKET_SIZE,
                railcoll_fw::abi::MAX_PACKET_SIZE
            ));
        }
        let pl = &self.platform;
        if pl.nodes == 0 || pl.ranks_per_node == 0 || pl.sockets == 0 || pl.rails == 0 {
            return Err("platform sizes must all be at least 1".into());
        }
        Ok(())
    }

    /// The profile reduced to Hockney's two numbers, for predictions: the
    /// start-up `t_s` is every fixed cost on one message's path (host post
    /// and command write, bus latency to the NIC, NIC command, DMA gap and
    /// start-up latency, per-packet overhead, link latency, bus latency of the
    /// delivery, the destination event, the host's poll), in microseconds;
    /// `tau` is the slower of link and bus per byte, in microseconds. Under
    /// the `hockney` profile this is exactly t_s = 1.6 us, 900 MB/s.
    pub fn hockney(&self) -> railcoll_host::sched::cost::Hockney {
        let n = &self.nic;
        let h = &self.host;
        let t_s_ns = h.post_ns
            + h.command_ns
            + self.pci.latency_ns
            + n.command_ns
            + n.dma_gap_ns
            + n.dma_latency_ns
            + self.link.packet_overhead_ns
            + self.link.latency_ns
            + self.pci.latency_ns
            + n.event_ns
            + h.poll_ns;
        let slowest = self.link.bandwidth_mb_s.min(self.pci.bandwidth_mb_s);
        railcoll_host::sched::cost::Hockney {
            t_s: t_s_ns / 1000.0,
            tau: if slowest.is_infinite() {
                0.0
            } else {
                1.0 / slowest
            },
        }
    }

    /// The numeric keys a profile has, as `section.key` (what
    /// [`Profile::get`], [`Profile::set`] and calibration name).
    pub const KEYS: &'static [&'static str] = &[
        "link.latency_ns",
        "link.bandwidth_mb_s",
        "link.packet_overhead_ns",
        "link.switch_collective_ns",
        "nic.command_ns",
        "nic.event_ns",
        "nic.dma_gap_ns",
        "nic.dma_latency_ns",
        "pci.latency_ns",
        "pci.bandwidth_mb_s",
        "host.post_ns",
        "host.command_ns",
        "host.poll_ns",
        "host.memcpy_mb_s",
        "host.memcpy_xsocket_mb_s",
        "host.memory_mb_s",
        "host.cacheline_ns",
        "host.cacheline_xsocket_ns",
        "library.send_ns",
        "library.recv_ns",
    ];

    fn field(&mut self, key: &str) -> Option<&mut f64> {
        Some(match key {
            "link.latency_ns" => &mut self.link.latency_ns,
            "link.bandwidth_mb_s" => &mut self.link.bandwidth_mb_s,
            "link.packet_overhead_ns" => &mut self.link.packet_overhead_ns,
            "link.switch_collective_ns" => &mut self.link.switch_collective_ns,
            "nic.command_ns" => &mut self.nic.command_ns,
            "nic.event_ns" => &mut self.nic.event_ns,
            "nic.dma_gap_ns" => &mut self.nic.dma_gap_ns,
            "nic.dma_latency_ns" => &mut self.nic.dma_latency_ns,
            "pci.latency_ns" => &mut self.pci.latency_ns,
            "pci.bandwidth_mb_s" => &mut self.pci.bandwidth_mb_s,
            "host.post_ns" => &mut self.host.post_ns,
            "host.command_ns" => &mut self.host.command_ns,
            "host.poll_ns" => &mut self.host.poll_ns,
            "host.memcpy_mb_s" => &mut self.host.memcpy_mb_s,
            "host.memcpy_xsocket_mb_s" => &mut self.host.memcpy_xsocket_mb_s,
            "host.memory_mb_s" => &mut self.host.memory_mb_s,
            "host.cacheline_ns" => &mut self.host.cacheline_ns,
            "host.cacheline_xsocket_ns" => &mut self.host.cacheline_xsocket_ns,
            "library.send_ns" => &mut self.library.send_ns,
            "library.recv_ns" => &mut self.library.recv_ns,
            _ => return None,
        })
    }

    /// The value of numeric key `key` (one of [`Profile::KEYS`]).
    pub fn get(&self, key: &str) -> Option<f64> {
        self.clone().field(key).map(|v| *v)
    }

    /// Set numeric key `key` to `value`; the profile must stay valid (a
    /// time in 0..=1e9 ns, a bandwidth of at least 1 MB/s).
    pub fn set(&mut self, key: &str, value: f64) -> Result<(), ProfileError> {
        let invalid = |msg: String| ProfileError::Invalid {
            name: self.name.clone(),
            msg,
        };
        let mut next = self.clone();
        let field = next.field(key).ok_or_else(|| {
            invalid(format!(
                "no numeric key `{key}` (accepted: {})",
                Self::KEYS.join(", ")
            ))
        })?;
        *field = value;
        next.validate().map_err(invalid)?;
        *self = next;
        Ok(())
    }

    /// `text` (a profile's TOML) with each `(key, value)` of `values`
    /// written in place: the line `key = ...` of its section gets the new
    /// value and keeps its comment, so a calibrated profile still says
    /// where every other number came from. The result must parse.
    pub fn edit_text(
        name: &str,
        text: &str,
        values: &[(&str, f64)],
    ) -> Result<String, ProfileError> {
        let invalid = |msg: String| ProfileError::Invalid {
            name: name.to_string(),
            msg,
        };
        let mut lines: Vec<String> = text.lines().map(str::to_string).collect();
        for &(key, value) in values {
            let (section, field) = key
                .split_once('.')
                .ok_or_else(|| invalid(format!("`{key}` is not `section.key`")))?;
            let header = format!("[{section}]");
            let start = lines
                .iter()
                .position(|l| l.split('#').next().is_some_and(|h| h.trim() == header))
                .ok_or_else(|| invalid(format!("no [{section}] section")))?;
            let line = lines
                .iter_mut()
                .skip(start + 1)
                .take_while(|l| !l.trim_start().starts_with('['))
                .find(|l| l.split('=').next().is_some_and(|k| k.trim() == field))
                .ok_or_else(|| invalid(format!("no `{field}` in [{section}]")))?;
            let comment = line.find('#').map(|i| line[i..].to_string());
            let shown = if value.is_infinite() {
                "inf".to_string()
            } else {
                format!("{}", (value * 1000.0).round() / 1000.0)
            };
            let assignment = format!("{field} = {shown}");
            *line = match comment {
                Some(c) => format!("{assignment:<27} {c}"),
                None => assignment,
            };
        }
        let out = lines.join("\n") + "\n";
        Self::parse(name, &out)?;
        Ok(out)
    }

    /// The costs in picoseconds, as the model uses them.
    pub fn costs(&self) -> Costs {
        Costs {
            link_latency: ns(self.link.latency_ns),
            link_ps_per_byte: per_byte(self.link.bandwidth_mb_s),
            packet_header_bytes: u64::from(self.link.packet_header_bytes),
            packet_overhead: ns(self.link.packet_overhead_ns),
            switch_collective: ns(self.link.switch_collective_ns),
            nic_command: ns(self.nic.command_ns),
            nic_event: ns(self.nic.event_ns),
            dma_gap: ns(self.nic.dma_gap_ns),
            dma_latency: ns(self.nic.dma_latency_ns),
            pci_latency: ns(self.pci.latency_ns),
            pci_ps_per_byte: per_byte(self.pci.bandwidth_mb_s),
            pci_shared: self.pci.shared,
            host_post: ns(self.host.post_ns),
            host_command: ns(self.host.command_ns),
            host_poll: ns(self.host.poll_ns),
            memcpy_ps_per_byte: per_byte(self.host.memcpy_mb_s),
            memcpy_xsocket_ps_per_byte: per_byte(self.host.memcpy_xsocket_mb_s),
            memory_ps_per_byte: per_byte(self.host.memory_mb_s),
            cacheline: ns(self.host.cacheline_ns),
            cacheline_xsocket: ns(self.host.cacheline_xsocket_ns),
            library_send: ns(self.library.send_ns),
            library_recv: ns(self.library.recv_ns),
        }
    }
}

/// Nanoseconds to picoseconds.
fn ns(v: f64) -> u64 {
    (v * 1000.0).round() as u64
}

/// MB/s to picoseconds per byte (fractional; 0 for an infinite rate).
fn per_byte(mb_s: f64) -> f64 {
    if mb_s.is_infinite() { 0.0 } else { 1e6 / mb_s }
}

/// A profile's costs in picoseconds (per-byte costs fractional).
#[derive(Clone, Copy, Debug, PartialEq)]
#[allow(missing_docs)]
pub struct Costs {
    pub link_latency: u64,
    pub link_ps_per_byte: f64,
    pub packet_header_bytes: u64,
    pub packet_overhead: u64,
    pub switch_collective: u64,
    pub nic_command: u64,
    pub nic_event: u64,
    pub dma_gap: u64,
    pub dma_latency: u64,
    pub pci_latency: u64,
    pub pci_ps_per_byte: f64,
    pub pci_shared: bool,
    pub host_post: u64,
    pub host_command: u64,
    pub host_poll: u64,
    pub memcpy_ps_per_byte: f64,
    pub memcpy_xsocket_ps_per_byte: f64,
    pub memory_ps_per_byte: f64,
    pub cacheline: u64,
    pub cacheline_xsocket: u64,
    pub library_send: u64,
    pub library_recv: u64,
}

/// `bytes` at `ps_per_byte`, rounded to the picosecond.
pub fn transfer(bytes: u64, ps_per_byte: f64) -> u64 {
    (bytes as f64 * ps_per_byte).round() as u64
}

/// A TOML error of profile `text` on one line: the key it is at (`link.latency_ns`,
/// from the error's position: the section header above it and the key on
/// its line) and the parser's message (what was found, what was
/// expected), instead of the parser's multi-line excerpt.
fn toml_problem(text: &str, e: &toml::de::Error) -> String {
    let message = e.message().trim().replace('\n', " ");
    let Some(at) = e.span().map(|s| s.start.min(text.len())) else {
        return message;
    };
    let before = text.get(..at).unwrap_or("");
    let line_start = before.rfind('\n').map_or(0, |i| i + 1);
    let line = text[line_start..].lines().next().unwrap_or("");
    let line_no = before.matches('\n').count() + 1;
    let section = before[..line_start]
        .lines()
        .rev()
        .map(str::trim)
        .find(|l| l.starts_with('[') && !l.starts_with("[["))
        .map(|l| l.trim_matches(|c| c == '[' || c == ']').trim().to_string());
    let key = line
        .split_once('=')
        .map(|(k, _)| k.trim().trim_matches('"').to_string())
        .filter(|k| !k.is_empty() && !k.starts_with('#') && !k.starts_with('['));
    match (section, key) {
        (Some(s), Some(k)) => format!("key `{s}.{k}` (line {line_no}): {message}"),
        (None, Some(k)) => format!("key `{k}` (line {line_no}): {message}"),
        _ => format!("line {line_no}: {message}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_builtin_profile_parses_and_is_named_after_its_file() {
        for (name, _) in BUILTIN {
            let p = Profile::builtin(name).expect("built-in profile");
            assert_eq!(p.name, *name);
        }
    }

    #[test]
    fn the_hockney_profile_reduces_to_its_own_numbers() {
        let h = Profile::builtin("hockney").expect("profile").hockney();
        assert!(
            (h.t_s - 1.6).abs() < 1e-12 && (h.tau - 1.0 / 900.0).abs() < 1e-15,
            "{h:?}"
        );
        let q = Profile::builtin("qsnet2-dual").expect("profile").hockney();
        assert!(q.t_s > 1.0 && q.tau > 0.0, "{q:?}");
    }

    #[test]
    fn keys_read_set_and_edit_the_text_in_place() {
        let (mut p, text) = Profile::load("qsnet2-dual").expect("profile");
        for key in Profile::KEYS {
            assert!(p.get(key).is_some(), "{key}");
        }
        assert_eq!(p.get("nic.dma_gap_ns"), Some(125.0));
        p.set("nic.dma_gap_ns", 200.0).expect("valid");
        assert_eq!(p.nic.dma_gap_ns, 200.0);
        assert!(p.set("nic.dma_gap_ns", -1.0).is_err());
        assert!(p.set("nic.bogus", 1.0).is_err());
        assert_eq!(p.nic.dma_gap_ns, 200.0, "a refused set changes nothing");
        let edited = Profile::edit_text(
            "qsnet2-dual",
            &text,
            &[("nic.dma_gap_ns", 200.0), ("pci.bandwidth_mb_s", 712.5)],
        )
        .expect("edited");
        let q = Profile::parse("x", &edited).expect("parses");
        assert_eq!((q.nic.dma_gap_ns, q.pci.bandwidth_mb_s), (200.0, 712.5));
        assert_eq!(q.link, p.link);
        // Comments stay; nothing else moves.
        assert!(edited.contains("dma_gap_ns = 200"));
        assert!(edited.contains("# estimate: a 250 ns DMA start-up"));
        assert_eq!(edited.lines().count(), text.lines().count());
        assert!(Profile::edit_text("x", &text, &[("nic.nope", 1.0)]).is_err());
    }

    #[test]
    fn bad_profiles_are_refused_by_key() {
        let (_, text) = Profile::load("hockney").expect("hockney");
        for (from, to, needle) in [
            ("latency_ns = 0", "latency_ns = -1", "link.latency_ns"),
            ("packet_size = 2048", "packet_size = 1000", "packet_size"),
            ("[nic]", "[nic]\nbogus = 1", "bogus"),
            ("nodes = 4", "nodes = 0", "platform"),
        ] {
            assert!(text.contains(from), "{from}");
            let bad = text.replacen(from, to, 1);
            let err = Profile::parse("x", &bad).expect_err(needle);
            assert!(err.to_string().contains(needle), "{err}");
        }
        let err = Profile::load("no-such-profile").expect_err("unknown");
        assert!(err.to_string().contains("qsnet2-dual"), "{err}");
    }
}
