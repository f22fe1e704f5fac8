//! What the collectives run on besides the endpoint: their per-communicator
//! state and the mechanisms schedule steps drive.
//!
//! Every collective (gather, all-gather, all-to-all, broadcast, barrier)
//! is a schedule ([`crate::sched`]): a generator per algorithm writes every
//! rank's steps, and the executor runs them. This module holds what the
//! executor needs beyond puts and waits:
//!
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
mod node;
pub(crate) mod notice;
pub(crate) mod revoke;
pub(crate) mod signature;
pub(crate) mod state;
mod sync;
