//! A threads-mode rail whose nodes are on several hosts: its packets
//! travel between hosts as UDP datagrams ([`crate::fabric::datagram`]).
//!
//! Every packet goes through the rail's switch, which runs on host 0 (as
//! every packet of a real rail goes through its switch): a NIC on another
//! host sends its packet there; the switch sends each packet (and each
//! copy of a broadcast, each barrier release) to the host of the node it
//! is for, or into that node's inbox if it is on host 0. A receive
//! thread per rail and host takes the datagrams in. Nothing here
//! retransmits: a datagram lost, reordered, duplicated or damaged on the
//! way is the firmware's go-back-N's to recover, as on a real link.

use std::net::{SocketAddr, UdpSocket};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use railcoll_mem::dma_mem::DmaMemory;

use crate::fabric::Here;
use crate::fabric::datagram::{self, Hop};
use crate::hw::nic::range;
use crate::hw::wire::{Payload, RailPacket};

/// Where a rail's received datagrams go: the rail ([`crate::threads::rail::Rail`]).
pub trait PacketSink: Send + Sync {
    /// Into the rail's switch.
    fn switch(&self, packet: RailPacket) -> bool;
    /// Into `node`'s inbox.
    fn deliver(&self, node: usize, packet: RailPacket) -> bool;
    /// The rail's side of the network.
    fn net(&self) -> Option<&RailNet>;
}

/// The receive buffer a rail's socket asks for: 16 MiB, room for every
/// flow's window of 32 packets of 32 KiB from a dozen nodes at once.
const RECEIVE_BUFFER: usize = 16 << 20;

/// Counts of one rail's datagrams on this host.
#[derive(Debug, Default)]
pub struct NetCounts {
    /// Datagrams sent.
    pub sent: AtomicU64,
    /// Datagrams received and taken.
    pub received: AtomicU64,
    /// Datagrams received and dropped: not a rail packet, or for a node or
    /// switch not here.
    pub refused: AtomicU64,
    /// Sends the socket refused (a full buffer: a loss).
    pub send_errors: AtomicU64,
}

impl NetCounts {
    /// The counts now.
    pub fn snapshot(&self) -> DatagramCounts {
        let get = |c: &AtomicU64| c.load(Ordering::Relaxed);
        DatagramCounts {
            sent: get(&self.sent),
            received: get(&self.received),
            refused: get(&self.refused),
            send_errors: get(&self.send_errors),
        }
    }
}

/// What one rail's datagrams did on this host ([`NetCounts`] at a time).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DatagramCounts {
    /// Sent.
    pub sent: u64,
    /// Received and taken.
    pub received: u64,
    /// Received and dropped (not a rail packet, or not for this host).
    pub refused: u64,
    /// Sends the socket refused.
    pub send_errors: u64,
}

impl std::fmt::Display for DatagramCounts {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} datagrams sent, {} received, {} refused, {} sends failed",
            self.sent, self.received, self.refused, self.send_errors
        )
    }
}

/// One rail's side of the network on this host.
#[derive(Debug)]
pub struct RailNet {
    socket: UdpSocket,
    rail: u8,
    /// Where each node's datagrams go (`None`: the node is here).
    node_addrs: Vec<Option<SocketAddr>>,
    /// Where the switch is (`None`: here).
    switch_addr: Option<SocketAddr>,
    /// This host's nodes' memories, to read payloads from.
    memories: Arc<[DmaMemory]>,
    /// What went through.
    pub counts: NetCounts,
}

impl RailNet {
    /// Rail `rail`'s socket on host `here` (bound to its address and the
    /// rail's port).
    pub fn bind(here: &Here, rail: usize, memories: Arc<[DmaMemory]>) -> std::io::Result<Self> {
        let f = &here.fabric;
        let addr = |host: usize| {
            f.rail_addr(host, rail)
                .ok_or_else(|| std::io::Error::other(format!("rail {rail} has no port")))
        };
        let socket = UdpSocket::bind(addr(here.host)?)?;
        // A window of packets from every flow may arrive at once; what
        // the buffer cannot hold is lost (and resent after a timeout).
        railcoll_mem::socket_buffers::grow_receive_buffer(&socket, RECEIVE_BUFFER)?;
        // Wakes the receive thread to see whether it must stop.
        socket.set_read_timeout(Some(Duration::from_millis(100)))?;
        let nodes = f.hosts.iter().map(|h| h.nodes.len()).sum();
        let node_addrs = (0..nodes)
            .map(|n| match f.host_of(n) {
                Some(h) if h == here.host => Ok(None),
                Some(h) => addr(h).map(Some),
                None => Err(std::io::Error::other(format!("node {n} is on no host"))),
            })
            .collect::<std::io::Result<_>>()?;
        let switch_addr = if here.is_coordinator() {
            None
        } else {
            Some(addr(0)?)
        };
        Ok(Self {
            socket,
            rail: u8::try_from(rail).map_err(std::io::Error::other)?,
            node_addrs,
            switch_addr,
            memories,
            counts: NetCounts::default(),
        })
    }

    /// Is `node` on this host?
    pub fn is_local(&self, node: usize) -> bool {
        matches!(self.node_addrs.get(node), Some(None))
    }

    /// Is the rail's switch on this host?
    pub fn switch_is_here(&self) -> bool {
        self.switch_addr.is_none()
    }

    /// Send `packet` to the switch (its host is not this one).
    pub fn to_switch(&self, packet: &RailPacket) -> bool {
        match self.switch_addr {
            Some(to) => self.send(packet, Hop::ToSwitch, to),
            None => false,
        }
    }

    /// Send `packet` to `node` on another host. False if there is no such
    /// node, or it is here.
    pub fn to_node(&self, node: usize, packet: &RailPacket) -> bool {
        match (self.node_addrs.get(node), u16::try_from(node)) {
            (Some(Some(to)), Ok(n)) => self.send(packet, Hop::ToNode(n), *to),
            _ => false,
        }
    }

    fn send(&self, packet: &RailPacket, hop: Hop, to: SocketAddr) -> bool {
        let mut local = Vec::new();
        let bytes = match &packet.payload {
            Some(Payload::Memory(r)) => {
                local.resize(r.len as usize, 0);
                let read = self
                    .memories
                    .get(usize::from(r.node))
                    .zip(range(r.phys).ok())
                    .is_some_and(|(m, at)| m.read(at, &mut local).is_ok());
                read.then_some(&local[..])
            }
            _ => None,
        };
        let datagram = datagram::encode(packet, hop, self.rail, bytes);
        match self.socket.send_to(&datagram, to) {
            Ok(_) => {
                self.counts.sent.fetch_add(1, Ordering::Relaxed);
            }
            Err(_) => {
                // A loss like any other: go-back-N resends it.
                self.counts.send_errors.fetch_add(1, Ordering::Relaxed);
            }
        }
        // The sender cannot tell a datagram lost from one delivered.
        true
    }

    /// Take datagrams in until `stopping`: a packet for the switch into
    /// `rail`'s switch, one for a node here into its inbox.
    pub fn receive(&self, rail: &dyn PacketSink, stopping: &AtomicBool) {
        let mut buf = vec![0u8; 65_536];
        while !stopping.load(Ordering::Acquire) {
            let Ok((n, _)) = self.socket.recv_from(&mut buf) else {
                continue;
            };
            let taken = match datagram::decode(&buf[..n]) {
                Ok(d) if d.rail == self.rail => match d.hop {
                    Hop::ToSwitch if self.switch_is_here() => rail.switch(d.packet),
                    Hop::ToNode(node) if self.is_local(usize::from(node)) => {
                        rail.deliver(usize::from(node), d.packet)
                    }
                    _ => false,
                },
                _ => false,
            };
            let count = if taken {
                &self.counts.received
            } else {
                &self.counts.refused
            };
            count.fetch_add(1, Ordering::Relaxed);
        }
    }
}

/// The receive threads of a host's rails; dropping it stops them.
#[derive(Debug)]
pub struct Receivers {
    stopping: Arc<AtomicBool>,
    threads: Vec<std::thread::JoinHandle<()>>,
}

impl Receivers {
    /// One receive thread for each rail of `rails` that has a network side.
    pub fn start<R: PacketSink + 'static>(rails: &[Arc<R>]) -> std::io::Result<Self> {
        let stopping = Arc::new(AtomicBool::new(false));
        let mut threads = Vec::new();
        for (index, rail) in rails.iter().enumerate() {
            if rail.net().is_none() {
                continue;
            }
            let (rail, stop) = (Arc::clone(rail), Arc::clone(&stopping));
            threads.push(
                std::thread::Builder::new()
                    .name(format!("rail{index}-udp"))
                    .spawn(move || {
                        if let Some(net) = rail.net() {
                            net.receive(&*rail, &stop);
                        }
                    })?,
            );
        }
        Ok(Self { stopping, threads })
    }
}

impl Drop for Receivers {
    fn drop(&mut self) {
        self.stopping.store(true, Ordering::Release);
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}
