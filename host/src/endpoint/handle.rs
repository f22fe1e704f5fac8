//! What a post hands back: a put's completion handle (`PutHandle`,
//! waited on or dropped), the tracked operation it owns (`Posted`), and the
//! endpoint's settling of one.

use super::*;

/// Completion handle of a put, get or other tracked operation. Dropping
/// it waits for completion, because the NIC may still read the source or
/// write the destination.
#[derive(Debug)]
#[must_use = "a transfer is only known complete once its handle is waited on"]
pub struct PutHandle<'e> {
    pub(super) ep: &'e Endpoint,
    pub(super) posted: Posted,
}

/// A tracked operation in flight, owned with no borrow of its endpoint:
/// what a run the communicator keeps (a request, even one leaked with
/// `mem::forget`) holds. Settled through the endpoint that posted it
/// ([`Endpoint::settle`]); whoever holds one settles it before the buffers
/// it names are reused (nothing does it on drop).
#[derive(Debug, Default)]
pub(crate) struct Posted {
    pub(super) parts: Vec<Completion>,
    pub(super) layout: Vec<Part>,
    pub(super) done: bool,
}

impl PutHandle<'_> {
    /// Block until complete; the first NIC error of any part is returned.
    pub fn wait(mut self) -> Result<(), Error> {
        self.ep.settle(&mut self.posted, true).unwrap_or(Ok(()))
    }

    /// Complete without blocking? `None` while in flight.
    pub fn test(&mut self) -> Option<Result<(), Error>> {
        self.ep.settle(&mut self.posted, false)
    }

    /// How the transfer was split over rails.
    pub fn parts(&self) -> &[Part] {
        &self.posted.layout
    }

    /// The operation, for a holder that keeps it beyond this borrow (its
    /// completion is then the holder's to settle).
    pub(crate) fn into_posted(mut self) -> Posted {
        // What the handle's drop then settles: nothing.
        let settled = Posted {
            done: true,
            ..Posted::default()
        };
        std::mem::replace(&mut self.posted, settled)
    }
}

impl Drop for PutHandle<'_> {
    fn drop(&mut self) {
        let _ = self.ep.settle(&mut self.posted, true);
    }
}

impl Endpoint {
    /// Settle `posted`: `Some` once complete (blocking until then if
    /// `block`), with the first NIC error of any part; `None` while in
    /// flight. Complete, what the parts took goes back to the pools; a part
    /// that never completed (a timeout) may still be armed on its NIC,
    /// with a COPY of its chain blocks, so its events and blocks are kept
    /// out of the pools rather than reused under it.
    pub(crate) fn settle(&self, posted: &mut Posted, block: bool) -> Option<Result<(), Error>> {
        if posted.done {
            return Some(Ok(()));
        }
        let settled = self.driver.borrow_mut().settle(&posted.parts, block)?;
        // A poll the environment gave up leaves the post to settle again.
        if block || !matches!(settled, Err(Error::Timeout(_))) {
            posted.done = true;
        }
        Some(settled)
    }

    /// Post `posts` (all or nothing) and return the handle of their
    /// completions; `layout` is how the caller split the data over rails.
    pub(super) fn post(&self, posts: &[Post], layout: Vec<Part>) -> Result<PutHandle<'_>, Error> {
        let parts = self
            .driver
            .borrow_mut()
            .post_tracked(posts, self.rank() as u32)?;
        Ok(PutHandle {
            ep: self,
            posted: Posted {
                parts,
                layout,
                done: false,
            },
        })
    }

    /// Post one operation on `rail` moving `len` bytes, tracked.
    pub(super) fn post_one(
        &self,
        rail: usize,
        what: Tracked,
        len: usize,
    ) -> Result<PutHandle<'_>, Error> {
        self.post(
            &[Post { rail, what }],
            vec![Part {
                rail,
                offset: 0,
                len,
            }],
        )
    }
}
