//! Rails between machines: which host's `nicd` runs which nodes' NICs,
//! and how their rails' packets travel between hosts (UDP datagrams
//! carrying the ABI's wire format, docs/abi.md §8.5).
//!
//! A fabric file names every host of a job, its address and its nodes:
//!
//! ```toml
//! port = 47800          # optional: the bootstrap (TCP) at `port`,
//!                       # rail r's datagrams at `port + 1 + r`
//! packet_size = 8192    # optional: the NICs' packet size on such rails
//! [[host]]
//! address = "10.77.0.1" # runs every rail's switch and the bootstrap
//! nodes = [0, 1]
//! [[host]]
//! address = "10.77.0.2"
//! nodes = [2, 3]
//! ```
//!
//! Host 0 runs every rail's switch (broadcast replication and barrier
//! combining, the firmware crate's switch logic) and the job's bootstrap
//! rendezvous across hosts ([`bootstrap`]). Each host runs one `nicd`
//! (`railcoll nicd --fabric F --host H`, or `railcoll launch --fabric F
//! --host H`) serving its nodes' NICs to its own rank processes.
//!
//! Contract: [`Fabric::parse`] refuses, with a [`FabricError`], a file
//! that is not TOML of this form, a host without nodes or an address, a
//! node on two hosts, two hosts at one address, ports beyond 65535 and a
//! packet size a datagram cannot carry; [`Fabric::check`] refuses a fabric
//! whose nodes are not exactly the job's.

pub mod bootstrap;
pub mod datagram;

use std::net::{IpAddr, SocketAddr};

use serde::Deserialize;

/// The default base port.
pub const DEFAULT_PORT: u16 = 47800;
/// The default packet size on rails between machines: 8 KiB, six Ethernet
/// frames (a lost frame loses the whole datagram).
pub const DEFAULT_PACKET_SIZE: u32 = 8192;

/// A fabric file that cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum FabricError {
    /// Not readable, or not TOML of the fabric's form.
    #[error("fabric file: {0}")]
    Syntax(String),
    /// A host is wrong.
    #[error("fabric file: host {host}: {what}")]
    Host {
        /// Which.
        host: usize,
        /// What is wrong.
        what: String,
    },
    /// Something about the whole fabric is wrong.
    #[error("fabric file: {0}")]
    Invalid(String),
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct FabricFile {
    #[serde(default = "default_port")]
    port: u16,
    #[serde(default = "default_packet_size")]
    packet_size: u32,
    host: Vec<HostFile>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct HostFile {
    address: String,
    nodes: Vec<u16>,
}

fn default_port() -> u16 {
    DEFAULT_PORT
}

fn default_packet_size() -> u32 {
    DEFAULT_PACKET_SIZE
}

/// One host of a fabric.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Host {
    /// Its address.
    pub address: IpAddr,
    /// Its nodes, ascending.
    pub nodes: Vec<usize>,
}

/// Where every node of a job runs, and the ports its rails use. Made only
/// by [`Fabric::parse`], so it always has a host 0 and a node on one host
/// at most.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Fabric {
    hosts: Vec<Host>,
    port: u16,
    packet_size: u32,
    /// The file's text, for the hosts to check they read the same one.
    text: String,
}

impl Fabric {
    /// Read a fabric file's text.
    pub fn parse(text: &str) -> Result<Self, FabricError> {
        let file: FabricFile =
            toml::from_str(text).map_err(|e| FabricError::Syntax(e.message().to_string()))?;
        if file.host.is_empty() {
            return Err(FabricError::Invalid("no [[host]]".into()));
        }
        let size = file.packet_size;
        if !size.is_power_of_two()
            || !(railcoll_fw::abi::MIN_PACKET_SIZE as usize..=datagram::MAX_DATAGRAM_PAYLOAD)
                .contains(&(size as usize))
        {
            return Err(FabricError::Invalid(format!(
                "packet_size {size} is not a power of two from {} to {} (a datagram's)",
                railcoll_fw::abi::MIN_PACKET_SIZE,
                datagram::MAX_DATAGRAM_PAYLOAD
            )));
        }
        let mut hosts: Vec<Host> = Vec::new();
        let mut owner: std::collections::HashMap<usize, usize> = std::collections::HashMap::new();
        for (index, h) in file.host.into_iter().enumerate() {
            let bad = |what: String| FabricError::Host { host: index, what };
            let address: IpAddr = h
                .address
                .parse()
                .map_err(|_| bad(format!("address {:?} is not an IP address", h.address)))?;
            if address.is_unspecified() || address.is_multicast() {
                return Err(bad(format!("address {address} names no one host")));
            }
            if h.nodes.is_empty() {
                return Err(bad("no nodes".into()));
            }
            let mut nodes: Vec<usize> = h.nodes.iter().map(|&n| usize::from(n)).collect();
            nodes.sort_unstable();
            if nodes.windows(2).any(|w| w[0] == w[1]) {
                return Err(bad("a node listed twice".into()));
            }
            if let Some(other) = hosts.iter().position(|o| o.address == address) {
                return Err(bad(format!("address {address} is host {other}'s too")));
            }
            for &node in &nodes {
                if let Some(&other) = owner.get(&node) {
                    return Err(bad(format!("node {node} is on host {other} too")));
                }
                owner.insert(node, index);
            }
            hosts.push(Host { address, nodes });
        }
        Ok(Self {
            hosts,
            port: file.port,
            packet_size: size,
            text: text.to_string(),
        })
    }

    /// The hosts, host 0 first (it runs the switches and the bootstrap).
    pub fn hosts(&self) -> &[Host] {
        &self.hosts
    }

    /// The bootstrap's TCP port; rail `r`'s datagrams use `port + 1 + r`.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The NICs' packet size on these rails.
    pub fn packet_size(&self) -> u32 {
        self.packet_size
    }

    /// A digest of the file's text, the same on every host that read the
    /// same file (FNV-1a).
    pub fn digest(&self) -> u64 {
        self.text.bytes().fold(0xcbf2_9ce4_8422_2325, |h, b| {
            (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
        })
    }

    /// Read a fabric file.
    pub fn read(path: &std::path::Path) -> Result<Self, FabricError> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| FabricError::Syntax(format!("cannot read {}: {e}", path.display())))?;
        Self::parse(&text)
    }

    /// Is it the fabric of a job of `nodes` nodes and `rails` rails: every
    /// node on one host, and every rail's port a port?
    pub fn check(&self, nodes: usize, rails: usize) -> Result<(), FabricError> {
        let listed: usize = self.hosts.iter().map(|h| h.nodes.len()).sum();
        let beyond = self
            .hosts
            .iter()
            .flat_map(|h| &h.nodes)
            .find(|&&n| n >= nodes);
        if let Some(n) = beyond {
            return Err(FabricError::Invalid(format!(
                "node {n} is not a node of the job's {nodes}"
            )));
        }
        if listed != nodes {
            return Err(FabricError::Invalid(format!(
                "{listed} nodes listed, the job has {nodes}: every node must be on one host"
            )));
        }
        if usize::from(self.port) + rails >= usize::from(u16::MAX) || self.port == 0 {
            return Err(FabricError::Invalid(format!(
                "port {} leaves no port for each of {rails} rails",
                self.port
            )));
        }
        Ok(())
    }

    /// The host serving `node`.
    pub fn host_of(&self, node: usize) -> Option<usize> {
        self.hosts.iter().position(|h| h.nodes.contains(&node))
    }

    /// Where rail `rail`'s datagrams for host `host` go.
    pub fn rail_addr(&self, host: usize, rail: usize) -> Option<SocketAddr> {
        let port = u16::try_from(usize::from(self.port) + 1 + rail).ok()?;
        Some(SocketAddr::new(self.hosts.get(host)?.address, port))
    }

    /// Where the bootstrap of the job listens (host 0; a fabric has one).
    pub fn bootstrap_addr(&self) -> Option<SocketAddr> {
        Some(SocketAddr::new(self.hosts.first()?.address, self.port))
    }
}

/// One host's view of a fabric: the fabric, and which host it is (one of
/// the fabric's: [`Here::new`] checks).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Here {
    fabric: std::sync::Arc<Fabric>,
    host: usize,
}

impl Here {
    /// Host `host` of `fabric`, for a job of `nodes` x `rails`.
    pub fn new(
        fabric: Fabric,
        host: usize,
        nodes: usize,
        rails: usize,
    ) -> Result<Self, FabricError> {
        fabric.check(nodes, rails)?;
        if host >= fabric.hosts.len() {
            return Err(FabricError::Invalid(format!(
                "host {host}: the fabric has {} hosts",
                fabric.hosts.len()
            )));
        }
        Ok(Self {
            fabric: std::sync::Arc::new(fabric),
            host,
        })
    }

    /// The fabric.
    pub fn fabric(&self) -> &Fabric {
        &self.fabric
    }

    /// This host's index.
    pub fn host(&self) -> usize {
        self.host
    }

    /// Does this host serve `node`?
    pub fn serves(&self, node: usize) -> bool {
        self.nodes().contains(&node)
    }

    /// This host's nodes.
    pub fn nodes(&self) -> &[usize] {
        self.fabric
            .hosts
            .get(self.host)
            .map_or(&[], |h| h.nodes.as_slice())
    }

    /// Does this host run the switches and the bootstrap?
    pub fn is_coordinator(&self) -> bool {
        self.host == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TWO: &str = r#"
        [[host]]
        address = "127.0.0.1"
        nodes = [0, 2]
        [[host]]
        address = "127.0.0.2"
        nodes = [1]
    "#;

    #[test]
    fn a_fabric_places_every_node() {
        let f = Fabric::parse(TWO).expect("parses");
        f.check(3, 2).expect("fits 3 nodes");
        assert_eq!(f.host_of(2), Some(0));
        assert_eq!(f.host_of(1), Some(1));
        assert_eq!(f.host_of(3), None);
        assert_eq!(
            f.rail_addr(1, 1),
            Some("127.0.0.2:47802".parse().expect("address"))
        );
        assert_eq!(f.packet_size(), DEFAULT_PACKET_SIZE);
        let here = Here::new(f, 1, 3, 2).expect("host 1");
        assert!(here.serves(1) && !here.serves(0) && !here.is_coordinator());
    }

    #[test]
    fn bad_fabrics_get_typed_errors() {
        let host = |a: &str, n: &str| format!("[[host]]\naddress = \"{a}\"\nnodes = {n}\n");
        let cases = [
            (String::new(), "missing field"),
            ("port = 1\n".into(), "missing field"),
            (host("127.0.0.1", "[0]") + "speed = 3\n", "unknown field"),
            (host("localhost", "[0]"), "not an IP address"),
            (host("0.0.0.0", "[0]"), "names no one host"),
            (host("127.0.0.1", "[]"), "no nodes"),
            (host("127.0.0.1", "[0, 0]"), "listed twice"),
            (
                host("127.0.0.1", "[0]") + &host("127.0.0.1", "[1]"),
                "host 0's too",
            ),
            (
                host("127.0.0.1", "[0]") + &host("127.0.0.2", "[0]"),
                "on host 0 too",
            ),
            (
                format!("packet_size = 65536\n{}", host("127.0.0.1", "[0]")),
                "power of two",
            ),
            (host("127.0.0.1", "[70000]"), "70000"),
        ];
        for (text, want) in cases {
            let e = Fabric::parse(&text).expect_err(&text).to_string();
            assert!(e.contains(want), "{text:?}: {e}");
        }
        let f = Fabric::parse(TWO).expect("parses");
        for (nodes, want) in [(2, "not a node"), (4, "every node must be on one host")] {
            let e = f.check(nodes, 1).expect_err("refused").to_string();
            assert!(e.contains(want), "{e}");
        }
        let high = Fabric::parse(&format!("port = 65534\n{TWO}")).expect("parses");
        let e = high
            .check(3, 2)
            .expect_err("no room for two rails")
            .to_string();
        assert!(e.contains("leaves no port for each of 2 rails"), "{e}");
        assert!(Here::new(Fabric::parse(TWO).expect("parses"), 2, 3, 1).is_err());
    }
}
