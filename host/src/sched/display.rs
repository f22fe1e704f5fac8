//! How schedules print (`railcoll schedule show`, the verifier's
//! messages).

use super::*;

impl fmt::Display for Buf {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Buf::Send => "send",
            Buf::Recv => "recv",
            Buf::Scratch => "scratch",
        })
    }
}

impl fmt::Display for Region {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.count == 1 {
            write!(f, "{}[{}]", self.buf, self.block)
        } else {
            write!(f, "{}[{}..{}]", self.buf, self.block, self.end())
        }
    }
}

impl fmt::Display for Words {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Words::Flat => "flat",
            Words::Masters => "masters'",
        })
    }
}

impl fmt::Display for Lane {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Lane::Rail(r) => write!(f, "rail {r}"),
            Lane::Stripe => f.write_str("striped"),
        }
    }
}

pub(crate) fn fmt_signal(signal: Option<Counter>) -> String {
    signal.map_or(String::new(), |c| format!(", signal c{c}"))
}

impl fmt::Display for Op {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Op::Put {
                to,
                src,
                dst,
                lane,
                signal,
            } => write!(
                f,
                "put      {src} -> rank {to} {dst} ({lane}{})",
                fmt_signal(*signal)
            ),
            Op::ChainPut {
                trigger,
                count,
                rail,
                lane,
                to,
                src,
                dst,
                signal,
                feeds,
                done,
            } => {
                let striped = match lane {
                    Lane::Stripe => " (striped)",
                    Lane::Rail(_) => "",
                };
                write!(
                    f,
                    "chain    when c{trigger} x{count} on rail {rail}: NIC puts {src} -> rank {to} {dst}{striped}{}",
                    fmt_signal(*signal)
                )?;
                for feed in feeds {
                    write!(f, ", sets c{} on rail {}", feed.into, feed.rail)?;
                }
                for feed in done {
                    write!(f, ", when done sets c{} on rail {}", feed.into, feed.rail)?;
                }
                Ok(())
            }
            Op::Relay {
                counter,
                count,
                from,
                to,
                into,
            } => write!(
                f,
                "relay    when c{counter} x{count} on rail {from}: NIC sets c{into} on rail {to}"
            ),
            Op::Wait { counter, arrivals } => {
                let parts: Vec<String> = arrivals
                    .iter()
                    .enumerate()
                    .filter(|(_, n)| **n > 0)
                    .map(|(r, n)| format!("{n} on rail {r}"))
                    .collect();
                let parts = if parts.is_empty() {
                    "nothing".to_string()
                } else {
                    parts.join(", ")
                };
                write!(f, "wait     c{counter}: {parts}")
            }
            Op::Copy { src, dst } => write!(f, "copy     {src} -> {dst}"),
            Op::PeerCopy {
                peer,
                dir,
                local,
                remote,
            } => match dir {
                PeerDir::Push => write!(f, "shm copy {local} -> rank {peer} {remote}"),
                PeerDir::Pull => write!(f, "shm copy rank {peer} {remote} -> {local}"),
            },
            Op::Signal { to, flag } => write!(f, "signal   flag f{flag} of rank {to}"),
            Op::WaitFlag { flag, count, .. } => write!(f, "wait     flag f{flag} x{count}"),
            Op::BarrierNumber(Numbers::Words(w)) => write!(f, "number   next {w} barrier number"),
            Op::BarrierNumber(Numbers::Queue) => f.write_str("number   next queued barrier number"),
            Op::WordPut { to, words, slot } => {
                write!(f, "word put number -> rank {to} {words} word {slot}")
            }
            Op::WordWait { words, slot } => {
                write!(f, "wait     {words} word {slot} reaches the number")
            }
            Op::Ready { to } => write!(f, "ready    tell rank {to} this rank entered the call"),
            Op::AwaitReady { from } => write!(f, "wait     rank {from} entered the call"),
            Op::QueueSend { to } => write!(f, "qdma     number -> rank {to}'s barrier queue"),
            Op::QueueRecv { from } => {
                write!(f, "qrecv    rank {from}'s number from the barrier queue")
            }
            Op::NodeArrive => f.write_str("node     arrive (flat tree; the master waits for all)"),
            Op::NodeRelease => f.write_str("node     release (the master releases the rest)"),
            Op::HwBarrier => f.write_str("barrier  hardware, node masters (rail 0)"),
            Op::NodeBcast { root, region } => {
                write!(f, "shm bcast {region} from rank {root} to its node")
            }
            Op::HwBcast { src, dst, signal } => write!(
                f,
                "hw bcast {src} -> every node's {dst} (rail 0{})",
                fmt_signal(*signal)
            ),
        }
    }
}

impl fmt::Display for Schedule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "rank {}: {} steps", self.rank, self.steps.len())?;
        for (i, s) in self.steps.iter().enumerate() {
            write!(f, "  {i:>4}  {}", s.op)?;
            if !s.after.is_empty() {
                let after: Vec<String> = s.after.iter().map(|a| format!("#{a}")).collect();
                write!(f, "   [after {} complete]", after.join(", "))?;
            }
            writeln!(f)?;
        }
        Ok(())
    }
}
