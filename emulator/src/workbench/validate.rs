//! The model's error against a user's measured collective latencies.
//!
//! Each measured point names a collective, a shape, an algorithm and a
//! block size ([`super::measured`]). Points are grouped by collective and
//! shape; each group runs as one modeled sweep ([`super::sweep::run`]:
//! one fresh cluster per size and algorithm, one call after a barrier,
//! the same procedure `railcoll sweep` uses), so a file written by
//! `railcoll sweep --csv` under the same profile validates with zero
//! error.
//!
//! Contract: the error of a point is `modeled / measured - 1`; a group
//! whose shape or algorithm the model cannot run is refused before any
//! group runs.

use railcoll_host::sched::Shape;
use railcoll_host::{Collective, Placement};

use super::measured::CollPoint;
use super::sweep::{self, SweepError, SweepSpec};
use crate::cluster::{ClusterConfig, Mode};
use crate::modeled::Profile;

/// One measured point beside the model.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct Compared {
    /// The collective.
    pub collective: String,
    /// Nodes.
    pub nodes: usize,
    /// Ranks per node.
    pub ranks_per_node: usize,
    /// Rails.
    pub rails: usize,
    /// Sockets per node, as measured (None: the profile's default).
    pub sockets: Option<usize>,
    /// Rank placement, as measured (None: block).
    pub placement: Option<String>,
    /// Root rank (gather, broadcast).
    pub root: usize,
    /// The algorithm.
    pub algorithm: String,
    /// Block size, bytes.
    pub size: usize,
    /// Measured latency, us.
    pub measured_us: f64,
    /// Modeled latency, us.
    pub modeled_us: f64,
    /// modeled / measured - 1.
    pub error: f64,
}

/// Error statistics of one algorithm on one shape.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct Summary {
    /// "allgather native on 4 x 4, 2 rails".
    pub what: String,
    /// Points.
    pub points: usize,
    /// Mean of |error|.
    pub mean_abs_error: f64,
    /// Largest |error|.
    pub max_abs_error: f64,
}

/// A validation's results.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct Validation {
    /// The profile the model ran.
    pub profile: String,
    /// Every point, in the file's order.
    pub points: Vec<Compared>,
    /// Per algorithm and shape, in first-seen order.
    pub summaries: Vec<Summary>,
    /// Over every point.
    pub overall: Summary,
}

/// The collective and cluster a point ran on.
#[derive(Clone, Debug, PartialEq)]
struct Group {
    collective: Collective,
    nodes: usize,
    ranks_per_node: usize,
    sockets: Option<usize>,
    rails: usize,
    placement: Option<Placement>,
    root: usize,
}

impl Group {
    fn of(p: &CollPoint) -> Self {
        Self {
            collective: p.collective,
            nodes: p.nodes,
            ranks_per_node: p.ranks_per_node,
            sockets: p.sockets,
            rails: p.rails,
            placement: p.placement,
            root: p.root,
        }
    }

    fn spec(
        &self,
        profile: &Profile,
        points: &[&CollPoint],
        verify: bool,
    ) -> Result<SweepSpec, SweepError> {
        let placement = self.placement.unwrap_or(Placement::Block);
        let sockets = self
            .sockets
            .unwrap_or_else(|| super::gcd(profile.platform.sockets, self.ranks_per_node).max(1));
        let shape = Shape::new(
            self.nodes,
            self.ranks_per_node,
            sockets,
            self.rails,
            placement,
        )
        .map_err(|e| SweepError::Invalid(super::SpecError::Shape(e)))?;
        let mut algos: Vec<&str> = Vec::new();
        let mut sizes: Vec<usize> = Vec::new();
        for p in points {
            if !algos.contains(&p.algorithm.as_str()) {
                algos.push(&p.algorithm);
            }
            if !sizes.contains(&p.size) {
                sizes.push(p.size);
            }
        }
        sizes.sort_unstable();
        Ok(SweepSpec {
            subject: self.collective,
            algo: algos.join(","),
            sizes,
            root: self.root,
            cluster: ClusterConfig {
                shape,
                mode: Mode::Modeled,
                // The papers' figures have no argument check to pay for.
                check: false,
                ..ClusterConfig::default()
            },
            profile: profile.clone(),
            iters: sweep::default_iters(self.collective, Mode::Modeled),
            rounds: 1,
            workers: 2,
            predict: false,
            tuning: None,
            verify,
        })
    }
}

/// The summary a point belongs to: "allgather native on 4 x 4, 2 rails".
pub fn label(c: &Compared) -> String {
    let mut s = format!(
        "{} {} on {} x {}, {} rail{}",
        c.collective,
        c.algorithm,
        c.nodes,
        c.ranks_per_node,
        c.rails,
        if c.rails == 1 { "" } else { "s" }
    );
    if let Some(k) = c.sockets {
        s += &format!(", {k} socket{}", if k == 1 { "" } else { "s" });
    }
    if let Some(p) = &c.placement {
        s += &format!(", {p}");
    }
    if c.root != 0 {
        s += &format!(", root {}", c.root);
    }
    s
}

fn summary(what: String, errors: impl Iterator<Item = f64>) -> Summary {
    let errs: Vec<f64> = errors.map(f64::abs).collect();
    Summary {
        what,
        points: errs.len(),
        mean_abs_error: errs.iter().sum::<f64>() / errs.len().max(1) as f64,
        max_abs_error: errs.iter().copied().fold(0.0, f64::max),
    }
}

/// Run the model for every group of `points` under `profile` and compare
/// (each run's results checked if `verify`, as `sweep` does);
/// `progress` is called once per finished size.
pub fn validate(
    profile: &Profile,
    points: &[CollPoint],
    verify: bool,
    progress: &(dyn Fn(usize) + Sync),
) -> Result<Validation, SweepError> {
    let mut groups: Vec<(Group, Vec<&CollPoint>)> = Vec::new();
    for p in points {
        let g = Group::of(p);
        match groups.iter_mut().find(|(h, _)| *h == g) {
            Some((_, v)) => v.push(p),
            None => groups.push((g, vec![p])),
        }
    }
    // Refuse any group the model cannot run before running one.
    let specs = groups
        .iter()
        .map(|(g, pts)| {
            let spec = g.spec(profile, pts, verify)?;
            spec.validate()?;
            Ok(spec)
        })
        .collect::<Result<Vec<_>, SweepError>>()?;
    let mut modeled = Vec::new();
    for spec in &specs {
        modeled.push(sweep::run(spec, progress)?);
    }
    let mut compared = Vec::new();
    for p in points {
        let i = groups
            .iter()
            .position(|(g, _)| *g == Group::of(p))
            .unwrap_or_default();
        let Some(m) = modeled.get(i).and_then(|s| {
            s.points
                .iter()
                .find(|q| q.size == p.size)
                .and_then(|q| q.results.iter().find(|r| r.algorithm == p.algorithm))
        }) else {
            return Err(SweepError::Missing {
                algorithm: p.algorithm.clone(),
                size: p.size,
            });
        };
        compared.push(Compared {
            collective: p.collective.name().to_string(),
            nodes: p.nodes,
            ranks_per_node: p.ranks_per_node,
            rails: p.rails,
            sockets: p.sockets,
            placement: p.placement.map(|pl| pl.to_string()),
            root: p.root,
            algorithm: p.algorithm.clone(),
            size: p.size,
            measured_us: p.latency_us,
            modeled_us: m.latency_us,
            error: m.latency_us / p.latency_us - 1.0,
        });
    }
    let mut whats: Vec<String> = Vec::new();
    for c in &compared {
        let w = label(c);
        if !whats.contains(&w) {
            whats.push(w);
        }
    }
    let summaries = whats
        .into_iter()
        .map(|w| {
            let errs = compared.iter().filter(|c| label(c) == w).map(|c| c.error);
            summary(w.clone(), errs)
        })
        .collect();
    let overall = summary("all".into(), compared.iter().map(|c| c.error));
    Ok(Validation {
        profile: profile.name.clone(),
        points: compared,
        summaries,
        overall,
    })
}
