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
use crate::hw::nic::carry;
use crate::hw::wire::{Payload, RailPacket};

/// Where a rail's received datagrams go: the rail
/// ([`crate::threads::rail::Rail`]), by calls that never send a packet
/// back onto the network (a datagram for a switch or node that is not
/// here is refused by [`RailNet::receive`] before either is called).
pub trait PacketSink: Send + Sync {
    /// Into the rail's switch, which is here.
    fn switch_here(&self, packet: RailPacket) -> bool;
    /// Into the inbox of `node`, which is here.
    fn deliver_here(&self, node: usize, packet: RailPacket) -> bool;
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
        let f = here.fabric();
        let addr = |host: usize| {
            f.rail_addr(host, rail)
                .ok_or_else(|| std::io::Error::other(format!("rail {rail} has no port")))
        };
        let socket = UdpSocket::bind(addr(here.host())?)?;
        // A window of packets from every flow may arrive at once; what
        // the buffer cannot hold is lost (and resent after a timeout).
        railcoll_mem::socket_buffers::grow_receive_buffer(&socket, RECEIVE_BUFFER)?;
        // Wakes the receive thread to see whether it must stop.
        socket.set_read_timeout(Some(Duration::from_millis(100)))?;
        let nodes = f.hosts().iter().map(|h| h.nodes.len()).sum();
        let node_addrs = (0..nodes)
            .map(|n| match f.host_of(n) {
                Some(h) if h == here.host() => Ok(None),
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
        let datagram = match &packet.payload {
            Some(Payload::Memory(r)) => {
                let carried = RailPacket {
                    payload: carry(&self.memories, r),
                    ..packet.clone()
                };
                datagram::encode(&carried, hop, self.rail)
            }
            _ => datagram::encode(packet, hop, self.rail),
        };
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
            let n = match self.socket.recv_from(&mut buf) {
                Ok((n, _)) => n,
                Err(e)
                    if matches!(
                        e.kind(),
                        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                    ) =>
                {
                    continue;
                }
                Err(_) => {
                    // Not a quiet socket: do not spin on it.
                    std::thread::sleep(std::time::Duration::from_millis(1));
                    continue;
                }
            };
            let taken = match datagram::decode(&buf[..n]) {
                Ok(d) if d.rail == self.rail => match d.hop {
                    Hop::ToSwitch if self.switch_is_here() => rail.switch_here(d.packet),
                    Hop::ToNode(node) if self.is_local(usize::from(node)) => {
                        rail.deliver_here(usize::from(node), d.packet)
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
    /// If one cannot start, those started already stop.
    pub fn start<R: PacketSink + 'static>(rails: &[Arc<R>]) -> std::io::Result<Self> {
        let mut receivers = Self {
            stopping: Arc::new(AtomicBool::new(false)),
            threads: Vec::new(),
        };
        for (index, rail) in rails.iter().enumerate() {
            if rail.net().is_none() {
                continue;
            }
            let (rail, stop) = (Arc::clone(rail), Arc::clone(&receivers.stopping));
            receivers.threads.push(
                std::thread::Builder::new()
                    .name(format!("rail{index}-udp"))
                    .spawn(move || {
                        if let Some(net) = rail.net() {
                            net.receive(&*rail, &stop);
                        }
                    })?,
            );
        }
        Ok(receivers)
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fabric::{Fabric, Here};
    use std::sync::Mutex;
    use zerocopy::FromZeros;

    /// Records what reaches it.
    #[derive(Default)]
    struct Sink {
        switched: Mutex<usize>,
        delivered: Mutex<Vec<usize>>,
    }

    impl PacketSink for Sink {
        fn switch_here(&self, _: RailPacket) -> bool {
            *self.switched.lock().expect("lock") += 1;
            true
        }
        fn deliver_here(&self, node: usize, _: RailPacket) -> bool {
            self.delivered.lock().expect("lock").push(node);
            true
        }
        fn net(&self) -> Option<&RailNet> {
            None
        }
    }

    #[test]
    fn a_member_host_takes_only_datagrams_for_its_own_nodes_and_rail() {
        let port = 12_000 + (std::process::id() % 9_000) as u16 * 2;
        let f = Fabric::parse(&format!(
            "port = {port}\n[[host]]\naddress = \"127.0.0.1\"\nnodes = [0]\n\
             [[host]]\naddress = \"127.0.0.2\"\nnodes = [1]\n"
        ))
        .expect("fabric");
        let here = Here::new(f, 1, 2, 2).expect("host 1");
        let net = RailNet::bind(&here, 0, Arc::from([])).expect("bind");
        assert!(net.is_local(1) && !net.is_local(0) && !net.switch_is_here());
        let to: SocketAddr = format!("127.0.0.2:{}", port + 1).parse().expect("address");
        let packet = RailPacket::new(railcoll_fw::abi::packet::PacketHeader::new_zeroed(), None);
        let datagrams = [
            b"not a rail packet".to_vec(),
            datagram::encode(&packet, Hop::ToSwitch, 0),
            datagram::encode(&packet, Hop::ToNode(0), 0),
            datagram::encode(&packet, Hop::ToNode(1), 1),
            datagram::encode(&packet, Hop::ToNode(7), 0),
            datagram::encode(&packet, Hop::ToNode(1), 0),
        ];
        let sink = Sink::default();
        let stopping = AtomicBool::new(false);
        std::thread::scope(|s| {
            s.spawn(|| net.receive(&sink, &stopping));
            let out = UdpSocket::bind("127.0.0.1:0").expect("socket");
            for d in &datagrams {
                out.send_to(d, to).expect("send");
            }
            let deadline = std::time::Instant::now() + Duration::from_secs(10);
            while net.counts.snapshot().received + net.counts.snapshot().refused < 6 {
                assert!(std::time::Instant::now() < deadline, "{:?}", net.counts);
                std::thread::sleep(Duration::from_millis(5));
            }
            stopping.store(true, Ordering::Release);
        });
        let c = net.counts.snapshot();
        assert_eq!((c.received, c.refused), (1, 5), "{c}");
        assert_eq!(*sink.switched.lock().expect("lock"), 0);
        assert_eq!(*sink.delivered.lock().expect("lock"), vec![1]);
    }
}
