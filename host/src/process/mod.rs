//! Ranks as processes: a rank that is a process of its own, started by a
//! launcher ([`crate::launch`]), reaching its node's NICs through a device
//! in another process.
//!
//! - [`wait`]: the wait hook of such a rank (poll, yield, then sleep on
//!   the interrupt eventfd its NICs signal).
//! - `nicd` (feature `vfio-user`): the client backend for NICs that
//!   `railcoll nicd` serves over vfio-user, and [`Job`], whose `join` opens the
//!   job's communicator from the launcher's variables.

#[cfg(feature = "vfio-user")]
pub mod nicd;
pub mod wait;

#[cfg(feature = "vfio-user")]
pub use job::{Job, JoinOptions};

#[cfg(feature = "vfio-user")]
mod job {
    use std::path::{Path, PathBuf};
    use std::sync::Arc;
    use std::time::Duration;

    use crate::comm::Comm;
    use crate::config::CommConfig;
    use crate::error::Error;
    use crate::launch::{LaunchError, Launched};
    use crate::process::nicd;
    use crate::sched::tuning::TuningTable;

    /// What a process chooses when it joins its job.
    #[derive(Clone, Debug)]
    pub struct JoinOptions {
        /// How long a wait may make no progress before it fails with
        /// [`Error::Timeout`] (a rank that died, a `nicd` that went away).
        pub wait_timeout: Duration,
        /// Check each collective's arguments against the other ranks'
        /// ([`CommConfig::check`]).
        pub check: bool,
        /// The tuning table (every rank must use the same one).
        pub tuning: Arc<TuningTable>,
    }

    impl Default for JoinOptions {
        fn default() -> Self {
            Self {
                wait_timeout: Duration::from_secs(60),
                check: true,
                tuning: TuningTable::shared_builtin(),
            }
        }
    }

    /// This process's membership of its job: the job's communicator over
    /// the NICs a `nicd` serves.
    #[derive(Debug)]
    pub struct Job {
        comm: Option<Comm>,
        dir: PathBuf,
        rank: usize,
        timeout: Duration,
    }

    impl Job {
        /// Join the job: this process's identity from the launcher's
        /// variables ([`Launched::from_env`]), its NICs from the `nicd`
        /// serving `dir`; returns once every rank has attached its NICs
        /// (the bootstrap rendezvous, [`nicd::rendezvous`]). Collective:
        /// every process of the job calls it.
        ///
        /// Contract: a process no launcher started fails with
        /// [`Error::Launch`] ([`LaunchError::NotLaunched`]); a job that is
        /// not the one `nicd` serves, or no `nicd`, fails with
        /// [`Error::Device`]; nothing is attached then. A rank that never
        /// joins makes the others fail after `options.wait_timeout`.
        ///
        /// ```no_run
        /// use railcoll_host::process::{Job, JoinOptions};
        /// // Under `railcoll launch --nodes 2 --ranks-per-node 2 -- ./program`,
        /// // which sets RAILCOLL_NICD to the directory its nicd serves.
        /// let dir = std::env::var("RAILCOLL_NICD").expect("started by railcoll launch");
        /// let job = Job::join(dir.as_ref(), &JoinOptions::default())?;
        /// let comm = job.comm();
        /// let send = comm.alloc(64)?;
        /// let recv = comm.alloc(64 * comm.size())?;
        /// comm.write_local(&send, 0, &[comm.rank() as u8; 64])?;
        /// comm.allgather(&send, &recv)?;
        /// job.finish()?;
        /// # Ok::<(), railcoll_host::Error>(())
        /// ```
        pub fn join(dir: &Path, options: &JoinOptions) -> Result<Job, Error> {
            let launched = Launched::from_env()?.ok_or(LaunchError::NotLaunched)?;
            let connection = nicd::connect(dir, &launched, options.wait_timeout)?;
            let rank = connection.rank;
            let jobs_before = nicd::rendezvous(dir, 0, rank, options.wait_timeout)?;
            let cfg = CommConfig {
                arena_size: connection.job.arena_size,
                check: options.check,
                instance: jobs_before as u32,
                ..CommConfig::new(connection.shape, rank)
            };
            let comm = Comm::new(
                cfg,
                Arc::clone(&options.tuning),
                connection.device,
                connection.wait,
            )?;
            nicd::rendezvous(dir, 1, rank, options.wait_timeout)?;
            Ok(Job {
                comm: Some(comm),
                dir: dir.to_path_buf(),
                rank,
                timeout: options.wait_timeout,
            })
        }

        /// The job's communicator.
        pub fn comm(&self) -> &Comm {
            self.comm
                .as_ref()
                .expect("a Job holds its communicator until finish consumes it")
        }

        /// Leave the job: wait until every rank has finished (so that no
        /// rank's context is detached while a peer may still address it),
        /// then detach. Collective. A job dropped without `finish` (a
        /// program that failed) detaches at once.
        pub fn finish(mut self) -> Result<(), Error> {
            let met = nicd::rendezvous(&self.dir, 2, self.rank, self.timeout);
            drop(self.comm.take());
            met.map(|_| ()).map_err(Error::from)
        }
    }
}
