//! The tuning table: which algorithm a plain `comm.gather()`,
//! `allgather()`, `alltoall()`, `broadcast()` or `barrier()` uses, by
//! collective, block size and cluster shape.
//!
//! The table is a TOML file of rules, tried in order; the first rule whose
//! bounds contain the call and whose algorithm can run on the
//! communicator wins (a rule may name `name@nic`, the algorithm compiled
//! onto the NICs); the collective's fallback otherwise
//! ([`Collective::fallback`]: Direct, or `smp` for broadcast and barrier). Every bound is optional and
//! inclusive:
//!
//! ```toml
//! [[rule]]
//! collective = "allgather"
//! algorithm = "smp-bruck"
//! max_bytes = 8192        # block size
//! min_ranks_per_node = 2
//! ```
//!
//! Other bounds: `min_bytes`, `min_nodes`, `max_nodes`, `max_ranks_per_node`,
//! `min_rails`, `max_rails`, `min_ranks`, `max_ranks`. The built-in table
//! ([`DEFAULT`]) is derived from the model: the best algorithm per size on
//! \[QA08\]'s platform at 4, 8 and 16 processes, then the cut-offs \[QA08\]
//! measured ([`FALLBACK`]) for every other shape; `railcoll tuning show`
//! prints the table in use.
//!
//! A communicator uses the table it is created with (the emulator's
//! `ClusterConfig::tuning`), read once before it runs anything: the
//! library never reads the environment or the user's files by itself, so
//! every rank of a job uses the same table and a program's behaviour does
//! not depend on the home directory it runs in. The `railcoll` CLI hands
//! its clusters the table the user chose ([`TuningTable::locate`]): the
//! file named by `RAILCOLL_TUNING` if set; else the user's table written by
//! `railcoll tune` (`$XDG_CONFIG_HOME/railcoll/tuning.toml`, or
//! `$HOME/.config/railcoll/tuning.toml`) if it exists; else the built-in one.

use serde::{Deserialize, Serialize};

use std::sync::{Arc, OnceLock};

use crate::error::TuningProblem;

use super::*;

/// The built-in table: rules derived from the model for the shapes of
/// \[QA08\]'s platform (`railcoll tune --scaling --builtin`, see
/// `docs/gen/tuning.py`), then [`FALLBACK`].
pub const DEFAULT: &str = include_str!("../../tuning/default.toml");

/// The rules for shapes the model did not tune: \[QA08\]'s cut-offs.
pub const FALLBACK: &str = include_str!("../../tuning/fallback.toml");

/// Environment variable naming a tuning file.
pub const ENV: &str = "RAILCOLL_TUNING";

/// Where the table in use came from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TuningSource {
    /// The file named by `RAILCOLL_TUNING`.
    Env(std::path::PathBuf),
    /// The user's table, written by `railcoll tune`.
    User(std::path::PathBuf),
    /// The built-in table.
    Builtin,
}

impl std::fmt::Display for TuningSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Env(p) => write!(f, "{} (from {ENV})", p.display()),
            Self::User(p) => write!(f, "{} (written by railcoll tune)", p.display()),
            Self::Builtin => f.write_str("built-in default"),
        }
    }
}

/// The user's tuning table: `$XDG_CONFIG_HOME/railcoll/tuning.toml`, else
/// `$HOME/.config/railcoll/tuning.toml` (None without either variable).
pub fn user_path() -> Option<std::path::PathBuf> {
    let base = std::env::var_os("XDG_CONFIG_HOME")
        .filter(|v| !v.is_empty())
        .map(std::path::PathBuf::from)
        .or_else(|| {
            std::env::var_os("HOME")
                .filter(|v| !v.is_empty())
                .map(|h| std::path::PathBuf::from(h).join(".config"))
        })?;
    Some(base.join("railcoll").join("tuning.toml"))
}

/// One rule.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Rule {
    /// `gather`, `allgather` or `alltoall`.
    pub collective: String,
    /// An algorithm name valid for the collective.
    pub algorithm: String,
    /// Smallest block size, bytes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_bytes: Option<usize>,
    /// Largest block size, bytes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_bytes: Option<usize>,
    /// Fewest nodes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_nodes: Option<usize>,
    /// Most nodes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_nodes: Option<usize>,
    /// Fewest ranks per node.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_ranks_per_node: Option<usize>,
    /// Most ranks per node.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_ranks_per_node: Option<usize>,
    /// Fewest rails.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_rails: Option<usize>,
    /// Most rails.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_rails: Option<usize>,
    /// Fewest ranks.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_ranks: Option<usize>,
    /// Most ranks.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_ranks: Option<usize>,
}

fn within(v: usize, lo: Option<usize>, hi: Option<usize>) -> bool {
    lo.is_none_or(|l| v >= l) && hi.is_none_or(|h| v <= h)
}

impl Rule {
    fn matches(&self, bytes: usize, s: &Shape) -> bool {
        within(bytes, self.min_bytes, self.max_bytes)
            && within(s.topology.nodes(), self.min_nodes, self.max_nodes)
            && within(
                s.topology.ranks_per_node(),
                self.min_ranks_per_node,
                self.max_ranks_per_node,
            )
            && within(s.rails, self.min_rails, self.max_rails)
            && within(s.size(), self.min_ranks, self.max_ranks)
    }
}

/// A parsed, validated table.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TuningTable {
    /// Rules, tried in order.
    #[serde(default)]
    pub rule: Vec<Rule>,
    /// How the table was made (free text, kept with the results).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub origin: Option<String>,
}

impl TuningTable {
    /// Parse and validate a table (every collective and algorithm name must
    /// exist; the error names the rule).
    pub fn parse(text: &str) -> Result<Self, Error> {
        Self::parse_from(text, "text")
    }

    /// [`TuningTable::parse`], naming `origin` (a path) in the error.
    fn parse_from(text: &str, origin: &str) -> Result<Self, Error> {
        let bad = |problem| Error::Tuning {
            origin: origin.to_string(),
            problem,
        };
        let table: TuningTable = toml::from_str(text)
            .map_err(|e| bad(TuningProblem::Syntax(e.message().to_string())))?;
        for (i, r) in table.rule.iter().enumerate() {
            let rule = |message: String| TuningProblem::Rule {
                rule: i + 1,
                message,
            };
            let c: Collective = r.collective.parse().map_err(|e: String| bad(rule(e)))?;
            c.parse_choice(&r.algorithm)
                .map_err(|e| bad(rule(e.to_string())))?;
        }
        Ok(table)
    }

    /// The built-in table.
    pub fn builtin() -> Self {
        // The default is validated by a test; an invalid edit fails CI.
        Self::parse(DEFAULT).unwrap_or(TuningTable {
            rule: Vec::new(),
            origin: None,
        })
    }

    /// The built-in table, parsed once per process and shared: what a
    /// communicator uses unless its configuration names another.
    pub fn shared_builtin() -> Arc<Self> {
        static BUILTIN: OnceLock<Arc<TuningTable>> = OnceLock::new();
        Arc::clone(BUILTIN.get_or_init(|| Arc::new(Self::builtin())))
    }

    /// The fallback rules ([`FALLBACK`]), the tail of the built-in table.
    pub fn fallback() -> Self {
        Self::parse(FALLBACK).unwrap_or(TuningTable {
            rule: Vec::new(),
            origin: None,
        })
    }

    /// The table a program's user chose and where it came from:
    /// `RAILCOLL_TUNING`, else the user's table ([`user_path`]) if the file
    /// exists, else the built-in. The library never calls it: a binary
    /// (the `railcoll` CLI) does, once, and puts the table in the
    /// configuration its communicators are created with.
    pub fn locate() -> Result<(Self, TuningSource), Error> {
        Self::locate_in(std::env::var_os(ENV), user_path())
    }

    /// [`TuningTable::locate`] with the environment spelled out.
    pub fn locate_in(
        env: Option<std::ffi::OsString>,
        user: Option<std::path::PathBuf>,
    ) -> Result<(Self, TuningSource), Error> {
        if let Some(path) = env {
            let path = std::path::PathBuf::from(path);
            return Ok((Self::load(&path)?, TuningSource::Env(path)));
        }
        if let Some(path) = user.filter(|p| p.exists()) {
            return Ok((Self::load(&path)?, TuningSource::User(path)));
        }
        Ok((Self::builtin(), TuningSource::Builtin))
    }

    /// Read and validate the table in `path` (errors name the file).
    pub fn load(path: &std::path::Path) -> Result<Self, Error> {
        let origin = path.display().to_string();
        let text = std::fs::read_to_string(path).map_err(|e| Error::Tuning {
            origin: origin.clone(),
            problem: TuningProblem::Unreadable(e.to_string()),
        })?;
        Self::parse_from(&text, &origin)
    }

    /// The table as TOML.
    pub fn to_toml(&self) -> String {
        toml::to_string(self).unwrap_or_default()
    }

    /// The algorithm for `collective` with `bytes`-byte blocks on `shape`:
    /// the first matching rule whose algorithm `runs` accepts, else the
    /// collective's fallback ([`Collective::fallback`]) where it runs, else
    /// the first of the catalogue that does (a scattered communicator runs
    /// no node-aware algorithm), else the fallback.
    pub fn select(
        &self,
        collective: Collective,
        bytes: usize,
        shape: &Shape,
        runs: &mut dyn FnMut(Choice) -> bool,
    ) -> Choice {
        self.select_with(collective, bytes, shape, |a| {
            if runs(a) { Ok(()) } else { Err(()) }
        })
        .map_or_else(|()| collective.fallback().into(), |(a, ())| a)
    }

    /// [`TuningTable::select`] that keeps what it built: `build` is tried
    /// on the candidates in the same order, and the first that succeeds is
    /// returned with its product (the executor builds each candidate's
    /// schedule set with the caller's root, and keeps the one it runs). If
    /// none does, the fallback's error.
    pub fn select_with<T, E>(
        &self,
        collective: Collective,
        bytes: usize,
        shape: &Shape,
        mut build: impl FnMut(Choice) -> Result<T, E>,
    ) -> Result<(Choice, T), E> {
        let mut tried = Vec::new();
        let ruled = self
            .rule
            .iter()
            .filter(|r| r.collective == collective.name() && r.matches(bytes, shape))
            .filter_map(|r| collective.parse_choice(&r.algorithm).ok());
        let fallback: Choice = collective.fallback().into();
        let mut refusal = None;
        for a in ruled {
            if tried.contains(&a) {
                continue;
            }
            tried.push(a);
            match build(a) {
                Ok(t) => return Ok((a, t)),
                Err(e) if a == fallback => refusal = Some(e),
                Err(_) => {}
            }
        }
        let refusal = match refusal {
            Some(e) => e,
            None => match build(fallback) {
                Ok(t) => return Ok((fallback, t)),
                Err(e) => e,
            },
        };
        tried.push(fallback);
        for a in collective.algorithms().into_iter().map(Choice::from) {
            if tried.contains(&a) {
                continue;
            }
            tried.push(a);
            if let Ok(t) = build(a) {
                return Ok((a, t));
            }
        }
        Err(refusal)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shape(nodes: usize, rpn: usize) -> Shape {
        Shape::new(nodes, rpn, 1, 2, crate::topology::Placement::Block).expect("shape")
    }

    /// A rule naming the fallback that does not build: the fallback is
    /// not built a second time, its refusal is what comes back if nothing
    /// builds, and otherwise the first of the catalogue that builds wins.
    #[test]
    fn select_with_builds_each_candidate_once_and_returns_the_fallbacks_refusal() {
        let c = Collective::Allgather;
        let fallback: Choice = c.fallback().into();
        let t = TuningTable::parse(&format!(
            "[[rule]]\ncollective = \"allgather\"\nalgorithm = \"{}\"\n",
            fallback.name()
        ))
        .expect("table");
        let mut built: Vec<Choice> = Vec::new();
        let none = t.select_with(c, 64, &shape(4, 1), |a| {
            built.push(a);
            Err::<(), _>(a)
        });
        assert_eq!(none, Err(fallback), "the fallback's refusal");
        assert_eq!(built.iter().filter(|&&a| a == fallback).count(), 1);
        for (i, a) in built.iter().enumerate() {
            assert!(!built[..i].contains(a), "{a:?} built twice: {built:?}");
        }
        let other = built.get(1).copied().expect("a second candidate");
        let picked = t.select_with(c, 64, &shape(4, 1), |a| {
            if a == other { Ok(()) } else { Err(()) }
        });
        assert_eq!(picked, Ok((other, ())));
    }

    #[test]
    fn the_fallback_rules_parse_and_end_the_builtin_table() {
        let fallback = TuningTable::parse(FALLBACK).expect("fallback table");
        assert!(!fallback.rule.is_empty());
        for c in Collective::ALL {
            assert!(
                fallback.rule.iter().any(|r| r.collective == c.name()),
                "{c}"
            );
        }
        let builtin = TuningTable::builtin();
        assert!(
            builtin.rule.len() > fallback.rule.len(),
            "measured rules come first"
        );
        assert!(builtin.rule.ends_with(&fallback.rule));
    }

    #[test]
    fn the_builtin_table_parses_and_covers_every_collective() {
        let t = TuningTable::parse(DEFAULT).expect("default table");
        for c in Collective::ALL {
            assert!(t.rule.iter().any(|r| r.collective == c.name()), "{c}");
        }
        assert_eq!(TuningTable::builtin(), t);
    }

    #[test]
    fn first_applicable_rule_wins_and_direct_is_the_fallback() {
        let t = TuningTable::parse(
            r#"
            [[rule]]
            collective = "allgather"
            algorithm = "smp-bruck"
            max_bytes = 1024
            min_ranks_per_node = 2
            [[rule]]
            collective = "allgather"
            algorithm = "ring"
            "#,
        )
        .expect("table");
        let all = &mut |_| true;
        let pick = |c, bytes, s: &Shape, runs: &mut dyn FnMut(Choice) -> bool| {
            t.select(c, bytes, s, runs).algorithm
        };
        assert_eq!(
            pick(Collective::Allgather, 64, &shape(4, 4), all),
            Algorithm::SmpBruck
        );
        assert_eq!(
            pick(Collective::Allgather, 64, &shape(4, 1), all),
            Algorithm::Ring
        );
        assert_eq!(
            pick(Collective::Allgather, 4096, &shape(4, 4), all),
            Algorithm::Ring
        );
        assert_eq!(
            pick(Collective::Gather, 64, &shape(4, 4), all),
            Algorithm::Direct
        );
        let none = &mut |a: Choice| a.algorithm != Algorithm::SmpBruck;
        assert_eq!(
            pick(Collective::Allgather, 64, &shape(4, 4), none),
            Algorithm::Ring
        );
    }

    #[test]
    fn a_rule_may_name_an_algorithm_compiled_onto_the_nics() {
        let t =
            TuningTable::parse("[[rule]]\ncollective = \"alltoall\"\nalgorithm = \"bruck@nic\"\n")
                .expect("table");
        let c = t.select(Collective::Alltoall, 64, &shape(4, 1), &mut |_| true);
        assert_eq!(c, Choice::nic(Algorithm::Bruck));
        assert_eq!(c.name(), "bruck@nic");
        let err =
            TuningTable::parse("[[rule]]\ncollective = \"alltoall\"\nalgorithm = \"bruck@gpu\"\n")
                .expect_err("unknown");
        assert!(err.to_string().contains("NAME@nic"), "{err}");
    }

    #[test]
    fn the_environment_beats_the_user_table_which_beats_the_builtin() {
        let dir = std::env::temp_dir().join(format!("railcoll-tuning-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("temp dir");
        let user = dir.join("user.toml");
        let env = dir.join("env.toml");
        let table =
            |algo: &str| format!("[[rule]]\ncollective = \"alltoall\"\nalgorithm = \"{algo}\"\n");
        std::fs::write(&user, table("pairwise")).expect("write");
        std::fs::write(&env, table("exchange")).expect("write");
        let first = |t: &TuningTable| t.rule[0].algorithm.clone();
        let (t, src) = TuningTable::locate_in(Some(env.clone().into()), Some(user.clone()))
            .expect("env table");
        assert_eq!(
            (first(&t).as_str(), src),
            ("exchange", TuningSource::Env(env.clone()))
        );
        let (t, src) = TuningTable::locate_in(None, Some(user.clone())).expect("user table");
        assert_eq!(
            (first(&t).as_str(), src),
            ("pairwise", TuningSource::User(user.clone()))
        );
        let (t, src) =
            TuningTable::locate_in(None, Some(dir.join("absent.toml"))).expect("builtin");
        assert_eq!((t, src), (TuningTable::builtin(), TuningSource::Builtin));
        std::fs::write(&user, "[[rule]]\ncollective = 3\n").expect("write");
        let e = TuningTable::locate_in(None, Some(user.clone())).expect_err("malformed");
        assert!(e.to_string().contains("user.toml"), "{e}");
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn bad_tables_are_refused_with_the_rule_named() {
        let e = TuningTable::parse("[[rule]]\ncollective = \"allgather\"\nalgorithm = \"nope\"\n")
            .expect_err("bad algorithm");
        assert!(
            e.to_string().contains("rule 1") && e.to_string().contains("accepted"),
            "{e}"
        );
        assert!(
            TuningTable::parse("[[rule]]\ncollective = \"scan\"\nalgorithm = \"direct\"\n")
                .is_err()
        );
        assert!(
            TuningTable::parse(
                "[[rule]]\ncollective = \"gather\"\nalgorithm = \"direct\"\nmax_byte = 3\n"
            )
            .is_err()
        );
        assert!(TuningTable::parse("not toml [").is_err());
    }
}
