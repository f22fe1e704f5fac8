//! The collectives' runtime: the executor that runs schedule sets on the
//! endpoint, requests, and each communicator's state and mechanisms.
//!
//! Every collective (gather, all-gather, all-to-all, broadcast, barrier)
//! is a schedule ([`crate::sched`], the compiler, below this layer): a
//! generator per algorithm writes every rank's steps, and this module's
//! executor runs them. It holds the runtime:
//!
//! - `exec`: the executor, a rank's schedule run on the driver and the node
//!   segment as a resumable run; `Coll::select`, the one path from a call
//!   to its schedule set; `run_collective`, a blocking call;
//! - [`request`]: non-blocking and persistent collectives, and the
//!   communicator's table of collectives in flight that every call
//!   progresses; `run`: the data of a resumable run and of that table;
//! - `state`: what a communicator's collectives keep between calls
//!   (reserved buffers, sequence numbers, the executor's pools and cache)
//!   and the context they run in (`Coll`: the rank's endpoint and
//!   that state);
//! - `sync`: barrier numbers, the RDMA barrier's words, the message-passing
//!   barrier's queue, the switch's barrier;
//! - `node`: the node segment's phases (node barrier halves, broadcast,
//!   gather);
//! - `revoke` and `notice`: failing together, the revoke notice every
//!   rank's waits observe, and its format;
//! - `check` and `signature`: the argument check, ranks agreeing on each
//!   call before it runs, and the codes of a call's signature.

pub(crate) mod check;
pub(crate) mod exec;
mod node;
pub(crate) mod notice;
pub mod request;
pub(crate) mod revoke;
pub(crate) mod run;
pub(crate) mod signature;
pub(crate) mod state;
mod sync;
