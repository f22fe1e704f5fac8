//! Who this process is in a job a launcher started: its rank, the job's
//! size, its rank among the processes on its node and how many those are,
//! read from the variables the launcher sets, and the job's topology
//! derived from them. This is the identity half of ranks as processes
//! (issue 29); the processes' shared memory and NICs are not built yet.
//!
//! Sources, innermost launcher first (a program run by `mpirun` inside a
//! Slurm allocation sees both, and `mpirun`'s are its own):
//!
//! | launcher | rank | size | local rank | local size | node |
//! |---|---|---|---|---|---|
//! | railcoll | `RAILCOLL_RANK` | `RAILCOLL_SIZE` | `RAILCOLL_LOCAL_RANK` | `RAILCOLL_LOCAL_SIZE` | `RAILCOLL_NODE` |
//! | Open MPI (and PMIx's `prterun`) | `OMPI_COMM_WORLD_RANK` | `OMPI_COMM_WORLD_SIZE` | `OMPI_COMM_WORLD_LOCAL_RANK` | `OMPI_COMM_WORLD_LOCAL_SIZE` | - |
//! | MPICH Hydra (PMI) | `PMI_RANK` | `PMI_SIZE` | `MPI_LOCALRANKID` | `MPI_LOCALNRANKS` | - |
//! | Slurm `srun` | `SLURM_PROCID` | `SLURM_NTASKS` | `SLURM_LOCALID` | from `SLURM_TASKS_PER_NODE` | `SLURM_NODEID` |
//!
//! Contract: one source is read whole, never mixed with another; a source
//! is chosen when its rank variable is set, and then every one of its
//! variables in the table must be set and well formed ([`LaunchError`]
//! names the variable and its value); the values must agree (rank below
//! size, local rank below local size). A PMIx-only environment (`PMIX_RANK`
//! without a size) is not read: the size needs the PMIx client library.

use crate::topology::{Placement, Topology};

pub use crate::error::{LaunchError, Launcher};

/// This process in its job, as its launcher describes it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Launched {
    /// Whose variables these are.
    pub launcher: Launcher,
    /// This process's rank in the job.
    pub rank: usize,
    /// Processes in the job.
    pub size: usize,
    /// This process's rank among those on its node.
    pub local_rank: usize,
    /// Processes on this node.
    pub local_size: usize,
    /// This node's index, where the launcher says.
    pub node: Option<usize>,
}

impl Launched {
    /// Read the process's environment (see the module documentation);
    /// `None` when no launcher set a rank.
    pub fn from_env() -> Result<Option<Launched>, LaunchError> {
        Self::from_vars(|name| std::env::var(name).ok())
    }

    /// [`Launched::from_env`] over any source of variables.
    ///
    /// ```
    /// use railcoll_host::launch::{Launched, Launcher};
    /// let vars = [
    ///     ("OMPI_COMM_WORLD_RANK", "5"),
    ///     ("OMPI_COMM_WORLD_SIZE", "8"),
    ///     ("OMPI_COMM_WORLD_LOCAL_RANK", "1"),
    ///     ("OMPI_COMM_WORLD_LOCAL_SIZE", "4"),
    /// ];
    /// let get = |name: &str| vars.iter().find(|v| v.0 == name).map(|v| v.1.to_string());
    /// let me = Launched::from_vars(get)?.expect("a launcher");
    /// assert_eq!((me.launcher, me.rank, me.size, me.local_rank), (Launcher::OpenMpi, 5, 8, 1));
    /// let (topology, rank) = me.topology()?;
    /// assert_eq!((topology.nodes(), topology.ranks_per_node(), rank), (2, 4, 5));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn from_vars(
        get: impl Fn(&str) -> Option<String>,
    ) -> Result<Option<Launched>, LaunchError> {
        let number = |var: &'static str, launcher: Launcher| -> Result<usize, LaunchError> {
            let value = get(var).ok_or(LaunchError::Missing { launcher, var })?;
            value.trim().parse().map_err(|_| LaunchError::Malformed {
                var,
                value,
                expected: "a non-negative integer",
            })
        };
        let simple = [
            (
                Launcher::Railcoll,
                [
                    "RAILCOLL_RANK",
                    "RAILCOLL_SIZE",
                    "RAILCOLL_LOCAL_RANK",
                    "RAILCOLL_LOCAL_SIZE",
                ],
                Some("RAILCOLL_NODE"),
            ),
            (
                Launcher::OpenMpi,
                [
                    "OMPI_COMM_WORLD_RANK",
                    "OMPI_COMM_WORLD_SIZE",
                    "OMPI_COMM_WORLD_LOCAL_RANK",
                    "OMPI_COMM_WORLD_LOCAL_SIZE",
                ],
                None,
            ),
            (
                Launcher::Hydra,
                ["PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID", "MPI_LOCALNRANKS"],
                None,
            ),
        ];
        for (launcher, [rank, size, local_rank, local_size], node) in simple {
            if get(rank).is_none() {
                continue;
            }
            let launched = Launched {
                launcher,
                rank: number(rank, launcher)?,
                size: number(size, launcher)?,
                local_rank: number(local_rank, launcher)?,
                local_size: number(local_size, launcher)?,
                node: node.map(|n| number(n, launcher)).transpose()?,
            };
            return launched.checked().map(Some);
        }
        if get("SLURM_PROCID").is_none() {
            return Ok(None);
        }
        let launcher = Launcher::Slurm;
        let node = number("SLURM_NODEID", launcher)?;
        let var = "SLURM_TASKS_PER_NODE";
        let per_node = get(var).ok_or(LaunchError::Missing { launcher, var })?;
        let local_size =
            slurm_tasks_on(&per_node, node)?.ok_or_else(|| LaunchError::Inconsistent {
                launcher,
                what: format!("SLURM_NODEID {node} is past the nodes of {var}={per_node:?}"),
            })?;
        Launched {
            launcher,
            rank: number("SLURM_PROCID", launcher)?,
            size: number("SLURM_NTASKS", launcher)?,
            local_rank: number("SLURM_LOCALID", launcher)?,
            local_size,
            node: Some(node),
        }
        .checked()
        .map(Some)
    }

    fn checked(self) -> Result<Self, LaunchError> {
        let bad = |what: String| LaunchError::Inconsistent {
            launcher: self.launcher,
            what,
        };
        if self.rank >= self.size {
            return Err(bad(format!(
                "rank {} of {} processes",
                self.rank, self.size
            )));
        }
        if self.local_rank >= self.local_size || self.local_size > self.size {
            return Err(bad(format!(
                "local rank {} of {} on a node, {} in the job",
                self.local_rank, self.local_size, self.size
            )));
        }
        Ok(self)
    }

    /// The job's topology and this process's rank in it: nodes of
    /// `local_size` processes each, numbered by node (block placement) or
    /// across them (cyclic), whichever the launcher's node index shows;
    /// block where it gives none (the default mapping of `mpirun` and
    /// Hydra). The local rank must be the one the placement gives. A job
    /// whose nodes hold different numbers of processes, or whose node
    /// index and local rank fit neither placement, is refused: railcoll's
    /// job shapes are regular.
    pub fn topology(&self) -> Result<(Topology, usize), LaunchError> {
        let bad = |what: String| LaunchError::Inconsistent {
            launcher: self.launcher,
            what,
        };
        if !self.size.is_multiple_of(self.local_size) {
            return Err(bad(format!(
                "{} processes do not make nodes of {} each",
                self.size, self.local_size
            )));
        }
        let nodes = self.size / self.local_size;
        let (rank, local) = (self.rank, self.local_rank);
        let block = local == rank % self.local_size;
        let placement = match self.node {
            None if block => Placement::Block,
            Some(n) if block && n == rank / self.local_size => Placement::Block,
            Some(n) if n == rank % nodes && local == rank / nodes => Placement::Cyclic,
            _ => {
                return Err(bad(format!(
                    "rank {rank} as local rank {local} of {} (node {:?} of {nodes}) fits \
                     neither block nor cyclic placement",
                    self.local_size, self.node
                )));
            }
        };
        let topology = Topology::new(nodes, self.local_size, placement)
            .map_err(|e| bad(format!("{nodes} nodes of {}: {e}", self.local_size)))?;
        Ok((topology, self.rank))
    }
}

/// Processes on node `node` by Slurm's `SLURM_TASKS_PER_NODE`, a list of
/// counts, each either `n` (one node) or `n(xk)` (k nodes): `Some` count,
/// or `None` past the list's nodes. The whole list is checked, not only
/// up to `node`.
fn slurm_tasks_on(list: &str, node: usize) -> Result<Option<usize>, LaunchError> {
    let malformed = || LaunchError::Malformed {
        var: "SLURM_TASKS_PER_NODE",
        value: list.to_string(),
        expected: "counts such as 4 or 4(x2), separated by commas",
    };
    let mut first = 0usize;
    let mut found = None;
    for item in list.trim().split(',') {
        let (count, repeat) = match item.split_once("(x") {
            Some((count, rest)) => {
                let repeat = rest.strip_suffix(')').ok_or_else(malformed)?;
                (count, repeat.parse::<usize>().map_err(|_| malformed())?)
            }
            None => (item, 1),
        };
        let count = count.parse::<usize>().map_err(|_| malformed())?;
        if repeat == 0 {
            return Err(malformed());
        }
        let next = first.checked_add(repeat).ok_or_else(malformed)?;
        if (first..next).contains(&node) {
            found = Some(count);
        }
        first = next;
    }
    Ok(found)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn with(vars: &[(&str, &str)]) -> Result<Option<Launched>, LaunchError> {
        Launched::from_vars(|name| {
            vars.iter()
                .find(|(k, _)| *k == name)
                .map(|(_, v)| v.to_string())
        })
    }

    proptest::proptest! {
        /// Whatever a launcher (or a user) puts in the variables, reading
        /// them is a value or a typed error, never a panic; and a value
        /// always describes one process of one job.
        #[test]
        fn any_variables_read_to_a_value_or_an_error(
            values in proptest::collection::vec("[0-9x(),]{0,12}|[0-9]{1,3}", 10),
            slurm in proptest::bool::ANY,
        ) {
            let names: [&str; 5] = if slurm {
                ["SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID", "SLURM_NODEID", "SLURM_TASKS_PER_NODE"]
            } else {
                ["RAILCOLL_RANK", "RAILCOLL_SIZE", "RAILCOLL_LOCAL_RANK", "RAILCOLL_LOCAL_SIZE", "RAILCOLL_NODE"]
            };
            let vars: Vec<(&str, &str)> =
                names.iter().copied().zip(values.iter().map(String::as_str)).collect();
            if let Ok(Some(me)) = with(&vars) {
                proptest::prop_assert!(me.rank < me.size);
                proptest::prop_assert!(me.local_rank < me.local_size && me.local_size <= me.size);
                if let Ok((t, rank)) = me.topology() {
                    proptest::prop_assert_eq!(t.size(), me.size);
                    let (node, local) = t.locate(rank).expect("a rank of the topology");
                    proptest::prop_assert_eq!(local, me.local_rank);
                    proptest::prop_assert!(me.node.is_none_or(|n| n == node));
                }
            }
        }
    }

    #[test]
    fn no_launcher_is_none() {
        assert_eq!(with(&[("PATH", "/bin")]), Ok(None));
    }

    #[test]
    fn the_innermost_launcher_wins_and_is_read_whole() {
        let both = [
            ("SLURM_PROCID", "0"),
            ("SLURM_NTASKS", "1"),
            ("OMPI_COMM_WORLD_RANK", "3"),
            ("OMPI_COMM_WORLD_SIZE", "4"),
            ("OMPI_COMM_WORLD_LOCAL_RANK", "1"),
            ("OMPI_COMM_WORLD_LOCAL_SIZE", "2"),
        ];
        let me = with(&both).expect("valid").expect("some");
        assert_eq!(me.launcher, Launcher::OpenMpi);
        let (t, rank) = me.topology().expect("regular");
        assert_eq!((t.nodes(), t.ranks_per_node(), rank), (2, 2, 3));
        assert_eq!(t.locate(3).expect("rank"), (1, 1));
        // Half of Open MPI's variables: named, not mixed with Slurm's.
        assert_eq!(
            with(&both[..4]),
            Err(LaunchError::Missing {
                launcher: Launcher::OpenMpi,
                var: "OMPI_COMM_WORLD_LOCAL_RANK"
            })
        );
    }

    #[test]
    fn slurm_counts_tasks_per_node_and_tells_the_placement() {
        assert_eq!(slurm_tasks_on("2(x3),1", 0), Ok(Some(2)));
        assert_eq!(slurm_tasks_on("2(x3),1", 2), Ok(Some(2)));
        assert_eq!(slurm_tasks_on("2(x3),1", 3), Ok(Some(1)));
        assert_eq!(slurm_tasks_on("2(x3),1", 4), Ok(None));
        for bad in ["", "2(x", "2(x0)", "x", "2,,1", "2(x3"] {
            assert!(slurm_tasks_on(bad, 0).is_err(), "{bad:?}");
        }
        // Cyclic: 6 tasks on 3 nodes, rank 4 on node 1 as its second.
        let cyclic = [
            ("SLURM_PROCID", "4"),
            ("SLURM_NTASKS", "6"),
            ("SLURM_LOCALID", "1"),
            ("SLURM_NODEID", "1"),
            ("SLURM_TASKS_PER_NODE", "2(x3)"),
        ];
        let me = with(&cyclic).expect("valid").expect("some");
        let (t, _) = me.topology().expect("cyclic");
        assert_eq!(t.placement(), Placement::Cyclic);
        assert_eq!(t.locate(4).expect("rank"), (1, 1));
        // Block: rank 3 on node 1 as its second.
        let block = [
            ("SLURM_PROCID", "3"),
            ("SLURM_NTASKS", "6"),
            ("SLURM_LOCALID", "1"),
            ("SLURM_NODEID", "1"),
            ("SLURM_TASKS_PER_NODE", "2(x3)"),
        ];
        let (t, _) = with(&block)
            .expect("valid")
            .expect("some")
            .topology()
            .expect("block");
        assert_eq!(t.placement(), Placement::Block);
        assert_eq!(t.locate(3).expect("rank"), (1, 1));
    }

    #[test]
    fn values_that_disagree_or_are_not_numbers_are_refused_by_name() {
        let base = [
            ("PMI_RANK", "7"),
            ("PMI_SIZE", "8"),
            ("MPI_LOCALRANKID", "3"),
            ("MPI_LOCALNRANKS", "4"),
        ];
        assert!(with(&base).expect("valid").is_some());
        let mut rank_past = base;
        rank_past[0] = ("PMI_RANK", "8");
        assert!(matches!(
            with(&rank_past),
            Err(LaunchError::Inconsistent { .. })
        ));
        let mut local_past = base;
        local_past[2] = ("MPI_LOCALRANKID", "4");
        assert!(matches!(
            with(&local_past),
            Err(LaunchError::Inconsistent { .. })
        ));
        let mut not_a_number = base;
        not_a_number[1] = ("PMI_SIZE", "eight");
        assert_eq!(
            with(&not_a_number),
            Err(LaunchError::Malformed {
                var: "PMI_SIZE",
                value: "eight".into(),
                expected: "a non-negative integer"
            })
        );
        // 8 processes in nodes of 3: not a regular job.
        let mut irregular = base;
        irregular[3] = ("MPI_LOCALNRANKS", "5");
        irregular[2] = ("MPI_LOCALRANKID", "4");
        let me = with(&irregular).expect("valid").expect("some");
        assert!(matches!(
            me.topology(),
            Err(LaunchError::Inconsistent { .. })
        ));
        // A node index that fits neither placement.
        let odd = [
            ("SLURM_PROCID", "0"),
            ("SLURM_NTASKS", "4"),
            ("SLURM_LOCALID", "0"),
            ("SLURM_NODEID", "1"),
            ("SLURM_TASKS_PER_NODE", "2(x2)"),
        ];
        let me = with(&odd).expect("valid").expect("some");
        assert!(matches!(
            me.topology(),
            Err(LaunchError::Inconsistent { .. })
        ));
    }
}
