//! The bootstrap rendezvous across hosts: each host's `nicd` meets its
//! own ranks first (its bootstrap socket), then the other hosts', through
//! host 0 over TCP, and every rank of the job learns the same count.
//!
//! Protocol (little-endian `u64` words on one TCP connection per host): a
//! member host says its index and the digest of its job (the fabric file
//! and the shape it serves); host 0 answers 0 if that is its own job, 1 if
//! not (and closes). Then, for each epoch the member's ranks have all
//! reached, the member says the epoch, and host 0 answers with how many
//! times that epoch was met before, once every host has reached it (host
//! 0's own ranks included). A member that says nothing within
//! [`HELLO_WAIT`] of connecting is dropped; a member's later connection
//! takes over from its earlier one, whose arrivals are then void. A
//! meeting that does not complete within its timeout returns `None`, and
//! host 0 then drops the arrivals it held for it (their connections
//! close): the `nicd` fails its ranks' rendezvous (they see a typed
//! error), and no later job meets an arrival of this one.

use std::collections::HashMap;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use super::Here;

/// How long host 0 waits for a new connection's hello.
pub const HELLO_WAIT: Duration = Duration::from_secs(10);

/// How long a wait goes before it looks whether its `nicd` stops.
const SLICE: Duration = Duration::from_millis(100);

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
        job: u64,
        coordinator: SocketAddr,
        stream: Mutex<Option<TcpStream>>,
    },
}

/// What host 0 knows: which hosts reached which epoch (by the connection
/// that said so, and to answer on), and how many times each epoch was met.
#[derive(Debug)]
struct Meetings {
    members: usize,
    job: u64,
    state: Mutex<MeetState>,
    changed: Condvar,
    connections: AtomicU64,
}

#[derive(Debug, Default)]
struct MeetState {
    /// Epoch -> host -> (connection, stream to answer on).
    arrived: HashMap<u64, HashMap<usize, (u64, TcpStream)>>,
    /// Each member host's current connection.
    current: HashMap<usize, u64>,
    met: HashMap<u64, u64>,
}

fn is_timeout(e: &std::io::Error) -> bool {
    matches!(
        e.kind(),
        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
    )
}

/// Read one word, waiting across read timeouts until `deadline` (none:
/// for ever); `None` once the connection ends, the deadline passes or
/// `stopping`.
fn read_word(s: &mut TcpStream, deadline: Option<Instant>, stopping: &AtomicBool) -> Option<u64> {
    let mut w = [0u8; 8];
    let mut got = 0;
    while got < w.len() {
        if stopping.load(Ordering::Acquire) {
            return None;
        }
        let slice = match deadline {
            Some(d) => d.checked_duration_since(Instant::now())?.min(SLICE),
            None => SLICE,
        };
        s.set_read_timeout(Some(slice.max(Duration::from_millis(1))))
            .ok()?;
        match s.read(&mut w[got..]) {
            Ok(0) => return None,
            Ok(n) => got += n,
            Err(e) if is_timeout(&e) => {}
            Err(_) => return None,
        }
    }
    Some(u64::from_le_bytes(w))
}

fn write_words(s: &mut TcpStream, words: &[u64]) -> Option<()> {
    let bytes: Vec<u8> = words.iter().flat_map(|w| w.to_le_bytes()).collect();
    s.write_all(&bytes).ok()
}

impl Bootstrap {
    /// Start this host's side, for a job whose digest is `job` (the same
    /// on every host of the same job): host 0 listens at the fabric's
    /// bootstrap address; the others connect when they first meet.
    pub fn start(here: &Here, job: u64) -> std::io::Result<Self> {
        let stopping = Arc::new(AtomicBool::new(false));
        let coordinator = here
            .fabric()
            .bootstrap_addr()
            .ok_or_else(|| std::io::Error::other("a fabric without hosts"))?;
        if !here.is_coordinator() {
            return Ok(Self {
                role: Role::Member {
                    host: here.host(),
                    job,
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
            members: here.fabric().hosts().len().saturating_sub(1),
            job,
            state: Mutex::new(MeetState::default()),
            changed: Condvar::new(),
            connections: AtomicU64::new(0),
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
    /// do not all arrive within `timeout`, host 0 cannot be reached or
    /// serves another job, or `stopping` is set meanwhile (its `nicd`
    /// stops).
    pub fn meet(&self, epoch: u64, timeout: Duration, stopping: &AtomicBool) -> Option<u64> {
        let deadline = Instant::now() + timeout;
        match &self.role {
            Role::Coordinator(m) => m.meet(epoch, deadline, stopping),
            Role::Member {
                host,
                job,
                coordinator,
                stream,
            } => {
                let mut held = stream.lock().unwrap_or_else(|p| p.into_inner());
                // A connection held from an earlier meeting may have
                // broken since (host 0's nicd restarted): one fresh try.
                for _ in 0..2 {
                    let was_held = held.is_some();
                    let hello = Hello {
                        host: *host,
                        job: *job,
                        coordinator: *coordinator,
                    };
                    match member_meet(&mut held, hello, epoch, deadline, stopping) {
                        Some(count) => return Some(count),
                        None => {
                            *held = None;
                            if !was_held || Instant::now() >= deadline {
                                return None;
                            }
                        }
                    }
                }
                None
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

/// Who a member is, and where host 0 listens.
#[derive(Clone, Copy)]
struct Hello {
    host: usize,
    job: u64,
    coordinator: SocketAddr,
}

fn member_meet(
    held: &mut Option<TcpStream>,
    hello: Hello,
    epoch: u64,
    deadline: Instant,
    stopping: &AtomicBool,
) -> Option<u64> {
    if held.is_none() {
        // Host 0's nicd may still be starting.
        let mut s = loop {
            match TcpStream::connect_timeout(&hello.coordinator, Duration::from_secs(1)) {
                Ok(s) => break s,
                Err(_) if Instant::now() < deadline && !stopping.load(Ordering::Acquire) => {
                    std::thread::sleep(Duration::from_millis(50));
                }
                Err(_) => return None,
            }
        };
        s.set_nodelay(true).ok()?;
        write_words(&mut s, &[hello.host as u64, hello.job])?;
        if read_word(&mut s, Some(deadline), stopping)? != 0 {
            eprintln!(
                "nicd: host 0 ({}) serves another job than this host's: check that every \
                 host runs the same fabric file and shape",
                hello.coordinator
            );
            return None;
        }
        *held = Some(s);
    }
    let s = held.as_mut()?;
    write_words(s, &[epoch])?;
    read_word(s, Some(deadline), stopping)
}

impl Meetings {
    fn meet(&self, epoch: u64, deadline: Instant, stopping: &AtomicBool) -> Option<u64> {
        let mut state = self.state.lock().unwrap_or_else(|p| p.into_inner());
        loop {
            let arrived = state.arrived.get(&epoch).map_or(0, HashMap::len);
            if arrived == self.members {
                break;
            }
            let left = deadline.checked_duration_since(Instant::now());
            if left.is_none() || stopping.load(Ordering::Acquire) {
                // The members held for this meeting go (their connections
                // close): they must not meet a later job.
                state.arrived.remove(&epoch);
                return None;
            }
            state = self
                .changed
                .wait_timeout(state, left.unwrap_or_default().min(SLICE))
                .unwrap_or_else(|p| p.into_inner())
                .0;
        }
        let members = state.arrived.remove(&epoch).unwrap_or_default();
        let count = state.met.entry(epoch).or_default();
        let answer = *count;
        *count += 1;
        drop(state);
        for (_, (_, mut s)) in members {
            // A member gone since it arrived finds out at its next meet.
            let _ = write_words(&mut s, &[answer]);
        }
        Some(answer)
    }

    /// A member's connection: its hello, then each epoch it reaches.
    fn serve(&self, mut s: TcpStream, stopping: &AtomicBool) {
        let id = self.connections.fetch_add(1, Ordering::Relaxed);
        let hello_by = Some(Instant::now() + HELLO_WAIT);
        let Some(host) = read_word(&mut s, hello_by, stopping) else {
            return;
        };
        let Some(job) = read_word(&mut s, hello_by, stopping) else {
            return;
        };
        // Host 0 is the coordinator itself; no member claims it.
        let known = host != 0 && host <= self.members as u64;
        if !known || job != self.job {
            let _ = write_words(&mut s, &[1]);
            eprintln!(
                "nicd: refused a bootstrap connection claiming host {host}: {}",
                if known {
                    "its job differs from this one (fabric file or shape)"
                } else {
                    "no such member host"
                }
            );
            return;
        }
        let host = host as usize;
        if write_words(&mut s, &[0]).is_none() {
            return;
        }
        {
            let mut state = self.state.lock().unwrap_or_else(|p| p.into_inner());
            state.current.insert(host, id);
            // Whatever its earlier connection said is void.
            for arrived in state.arrived.values_mut() {
                arrived.remove(&host);
            }
        }
        while let Some(epoch) = read_word(&mut s, None, stopping) {
            let Ok(answer_on) = s.try_clone() else { break };
            let mut state = self.state.lock().unwrap_or_else(|p| p.into_inner());
            if state.current.get(&host) != Some(&id) {
                break;
            }
            state
                .arrived
                .entry(epoch)
                .or_default()
                .insert(host, (id, answer_on));
            self.changed.notify_all();
        }
        let mut state = self.state.lock().unwrap_or_else(|p| p.into_inner());
        for arrived in state.arrived.values_mut() {
            if arrived.get(&host).is_some_and(|(c, _)| *c == id) {
                arrived.remove(&host);
            }
        }
    }
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

    fn meet_all(hosts: &[&Bootstrap], epoch: u64, t: Duration) -> Vec<Option<u64>> {
        std::thread::scope(|s| {
            let joins: Vec<_> = hosts
                .iter()
                .map(|b| s.spawn(move || b.meet(epoch, t, &AtomicBool::new(false))))
                .collect();
            joins.into_iter().map(|j| j.join().expect("meet")).collect()
        })
    }

    #[test]
    fn three_hosts_meet_count_their_meetings_and_refuse_another_job() {
        // Below the ephemeral range (32768 up), one port per process.
        let port = 10_000 + (std::process::id() % 9_000) as u16 * 2;
        let hosts: Vec<Bootstrap> = (0..3)
            .map(|h| Bootstrap::start(&here(h, port), 42).expect("start"))
            .collect();
        let all: Vec<&Bootstrap> = hosts.iter().collect();
        let t = Duration::from_secs(10);
        for round in 0..3u64 {
            assert_eq!(meet_all(&all, 7, t), vec![Some(round); 3]);
        }
        // One host missing: the others time out instead of meeting, and
        // the arrival host 0 held is dropped (no later meeting counts it).
        let short = Duration::from_millis(300);
        assert_eq!(meet_all(&all[..2], 8, short), vec![None, None]);
        assert_eq!(meet_all(&all, 8, t), vec![Some(0); 3]);
        // A host of another job is refused; the job's own hosts still meet.
        let stranger = Bootstrap::start(&here(2, port), 43).expect("start");
        assert_eq!(meet_all(&[&stranger], 9, short), vec![None]);
        assert_eq!(meet_all(&all, 9, t), vec![Some(0); 3]);
    }
}
