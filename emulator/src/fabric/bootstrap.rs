//! The bootstrap rendezvous across hosts: each host's `nicd` meets its
//! own ranks first (its bootstrap socket), then the other hosts', through
//! host 0 over TCP, and every rank of the job learns the same count.
//!
//! Protocol (little-endian `u64` words on one TCP connection per host):
//! a member host says its index once, then, for each epoch its ranks have
//! all reached, the epoch; host 0 answers with how many times that epoch
//! was met before, once every host has reached it (host 0's own ranks
//! included). A host whose connection breaks loses its arrivals; a meet
//! that does not complete within its timeout returns `None`, and the
//! `nicd` then fails its ranks' rendezvous (they see a typed error).

use std::collections::HashMap;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use super::Here;

/// One host's side of the bootstrap across hosts.
#[derive(Debug)]
pub struct Bootstrap {
    role: Role,
    stopping: Arc<AtomicBool>,
    threads: Vec<JoinHandle<()>>,
}

#[derive(Debug)]
enum Role {
    Coordinator(Arc<Meetings>),
    Member {
        host: usize,
        coordinator: SocketAddr,
        stream: Mutex<Option<TcpStream>>,
    },
}

/// What host 0 knows: which hosts reached which epoch (with the
/// connection to answer on), and how many times each epoch was met.
#[derive(Debug)]
struct Meetings {
    members: usize,
    state: Mutex<MeetState>,
    changed: Condvar,
}

#[derive(Debug, Default)]
struct MeetState {
    arrived: HashMap<u64, HashMap<usize, TcpStream>>,
    met: HashMap<u64, u64>,
}

fn word(bytes: [u8; 8]) -> u64 {
    u64::from_le_bytes(bytes)
}

impl Bootstrap {
    /// Start this host's side: host 0 listens at the fabric's bootstrap
    /// address; the others connect when they first meet.
    pub fn start(here: &Here) -> std::io::Result<Self> {
        let stopping = Arc::new(AtomicBool::new(false));
        let coordinator = here.fabric.bootstrap_addr();
        if !here.is_coordinator() {
            return Ok(Self {
                role: Role::Member {
                    host: here.host,
                    coordinator,
                    stream: Mutex::new(None),
                },
                stopping,
                threads: Vec::new(),
            });
        }
        let listener = TcpListener::bind(coordinator)?;
        listener.set_nonblocking(true)?;
        let meetings = Arc::new(Meetings {
            members: here.fabric.hosts.len() - 1,
            state: Mutex::new(MeetState::default()),
            changed: Condvar::new(),
        });
        let (m, stop) = (Arc::clone(&meetings), Arc::clone(&stopping));
        let accept = std::thread::Builder::new()
            .name("nicd-bootstrap".into())
            .spawn(move || accept_members(&listener, &m, &stop))?;
        Ok(Self {
            role: Role::Coordinator(meetings),
            stopping,
            threads: vec![accept],
        })
    }

    /// Meet every other host at `epoch`, this host's ranks having all
    /// arrived; the count every rank is told. `None` if the other hosts
    /// do not all arrive within `timeout`, host 0 cannot be reached, or
    /// `stopping` is set meanwhile (its `nicd` stops).
    pub fn meet(&self, epoch: u64, timeout: Duration, stopping: &AtomicBool) -> Option<u64> {
        match &self.role {
            Role::Coordinator(m) => m.meet(epoch, timeout, stopping),
            Role::Member {
                host,
                coordinator,
                stream,
            } => {
                let mut held = stream.lock().unwrap_or_else(|p| p.into_inner());
                let result = member_meet(&mut held, *host, *coordinator, epoch, timeout, stopping);
                if result.is_none() {
                    // Broken or out of step: the next meet reconnects.
                    *held = None;
                }
                result
            }
        }
    }
}

impl Drop for Bootstrap {
    fn drop(&mut self) {
        self.stopping.store(true, Ordering::Release);
        if let Role::Coordinator(m) = &self.role {
            m.changed.notify_all();
        }
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

fn member_meet(
    held: &mut Option<TcpStream>,
    host: usize,
    coordinator: SocketAddr,
    epoch: u64,
    timeout: Duration,
    stopping: &AtomicBool,
) -> Option<u64> {
    let deadline = Instant::now() + timeout;
    if held.is_none() {
        // Host 0's nicd may still be starting.
        let mut s = loop {
            match TcpStream::connect_timeout(&coordinator, Duration::from_secs(1)) {
                Ok(s) => break s,
                Err(_) if Instant::now() < deadline && !stopping.load(Ordering::Acquire) => {
                    std::thread::sleep(Duration::from_millis(50));
                }
                Err(_) => return None,
            }
        };
        s.set_nodelay(true).ok()?;
        s.write_all(&(host as u64).to_le_bytes()).ok()?;
        *held = Some(s);
    }
    let s = held.as_mut()?;
    s.write_all(&epoch.to_le_bytes()).ok()?;
    // The answer, read in slices so that a stopping nicd need not wait.
    let mut count = [0u8; 8];
    let mut got = 0;
    while got < count.len() {
        let left = deadline.checked_duration_since(Instant::now())?;
        if stopping.load(Ordering::Acquire) {
            return None;
        }
        s.set_read_timeout(Some(left.min(SLICE))).ok()?;
        match s.read(&mut count[got..]) {
            Ok(0) => return None,
            Ok(n) => got += n,
            Err(e) if is_timeout(&e) => {}
            Err(_) => return None,
        }
    }
    Some(word(count))
}

/// How long a wait goes before it looks whether its `nicd` stops.
const SLICE: Duration = Duration::from_millis(100);

fn is_timeout(e: &std::io::Error) -> bool {
    matches!(
        e.kind(),
        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
    )
}

impl Meetings {
    fn meet(&self, epoch: u64, timeout: Duration, stopping: &AtomicBool) -> Option<u64> {
        let deadline = Instant::now() + timeout;
        let mut state = self.state.lock().unwrap_or_else(|p| p.into_inner());
        loop {
            let arrived = state.arrived.get(&epoch).map_or(0, HashMap::len);
            if arrived == self.members {
                break;
            }
            let left = deadline.checked_duration_since(Instant::now())?;
            if stopping.load(Ordering::Acquire) {
                return None;
            }
            state = self
                .changed
                .wait_timeout(state, left.min(SLICE))
                .unwrap_or_else(|p| p.into_inner())
                .0;
        }
        let members = state.arrived.remove(&epoch).unwrap_or_default();
        let count = state.met.entry(epoch).or_default();
        let answer = *count;
        *count += 1;
        drop(state);
        for (_, mut s) in members {
            // A member gone since it arrived finds out at its next meet.
            let _ = s.write_all(&answer.to_le_bytes());
        }
        Some(answer)
    }

    /// A member's connection: its index, then each epoch it reaches.
    fn serve(&self, mut s: TcpStream, stopping: &AtomicBool) {
        let mut w = [0u8; 8];
        let _ = s.set_read_timeout(Some(Duration::from_millis(200)));
        let mut host = None;
        while !stopping.load(Ordering::Acquire) {
            // A word may arrive in pieces across the read timeouts.
            if read_word(&mut s, &mut w, stopping).is_none() {
                break;
            }
            let value = word(w);
            let Some(h) = host else {
                // Host 0 is the coordinator itself; no member claims it.
                if value == 0 || value > self.members as u64 {
                    break;
                }
                host = Some(value as usize);
                continue;
            };
            let Ok(answer_on) = s.try_clone() else { break };
            let mut state = self.state.lock().unwrap_or_else(|p| p.into_inner());
            state.arrived.entry(value).or_default().insert(h, answer_on);
            self.changed.notify_all();
        }
        if let Some(h) = host {
            let mut state = self.state.lock().unwrap_or_else(|p| p.into_inner());
            for arrived in state.arrived.values_mut() {
                arrived.remove(&h);
            }
        }
    }
}

/// Read one word from a member, waiting across read timeouts; `None` once
/// the connection ends or `stopping`.
fn read_word(s: &mut TcpStream, w: &mut [u8; 8], stopping: &AtomicBool) -> Option<()> {
    let mut got = 0;
    while got < w.len() {
        if stopping.load(Ordering::Acquire) {
            return None;
        }
        match s.read(&mut w[got..]) {
            Ok(0) => return None,
            Ok(n) => got += n,
            Err(e) if is_timeout(&e) => {}
            Err(_) => return None,
        }
    }
    Some(())
}

fn accept_members(listener: &TcpListener, meetings: &Arc<Meetings>, stopping: &Arc<AtomicBool>) {
    let mut served: Vec<JoinHandle<()>> = Vec::new();
    while !stopping.load(Ordering::Acquire) {
        match listener.accept() {
            Ok((s, _)) => {
                let _ = s.set_nonblocking(false);
                let _ = s.set_nodelay(true);
                let (m, stop) = (Arc::clone(meetings), Arc::clone(stopping));
                if let Ok(t) = std::thread::Builder::new()
                    .name("nicd-bootstrap-member".into())
                    .spawn(move || m.serve(s, &stop))
                {
                    served.push(t);
                }
            }
            Err(_) => std::thread::sleep(Duration::from_millis(20)),
        }
        served.retain(|t| !t.is_finished());
    }
    for t in served {
        let _ = t.join();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fabric::Fabric;

    fn here(host: usize, port: u16) -> Here {
        let f = Fabric::parse(&format!(
            "port = {port}\n[[host]]\naddress = \"127.0.0.1\"\nnodes = [0]\n\
             [[host]]\naddress = \"127.0.0.2\"\nnodes = [1]\n\
             [[host]]\naddress = \"127.0.0.3\"\nnodes = [2]\n"
        ))
        .expect("fabric");
        Here::new(f, host, 3, 1).expect("here")
    }

    #[test]
    fn three_hosts_meet_and_count_their_meetings() {
        let port = 47_000 + (std::process::id() % 500) as u16 * 2;
        let hosts: Vec<Bootstrap> = (0..3)
            .map(|h| Bootstrap::start(&here(h, port)).expect("start"))
            .collect();
        let t = Duration::from_secs(10);
        for round in 0..3u64 {
            let counts: Vec<Option<u64>> = std::thread::scope(|s| {
                let joins: Vec<_> = hosts
                    .iter()
                    .map(|b| s.spawn(move || b.meet(7, t, &AtomicBool::new(false))))
                    .collect();
                joins.into_iter().map(|j| j.join().expect("meet")).collect()
            });
            assert_eq!(counts, vec![Some(round); 3]);
        }
        // One host missing: the others time out instead of meeting.
        let counts: Vec<Option<u64>> = std::thread::scope(|s| {
            let short = Duration::from_millis(300);
            let joins: Vec<_> = hosts[..2]
                .iter()
                .map(|b| s.spawn(move || b.meet(8, short, &AtomicBool::new(false))))
                .collect();
            joins.into_iter().map(|j| j.join().expect("meet")).collect()
        });
        assert_eq!(counts, vec![None, None]);
    }
}
