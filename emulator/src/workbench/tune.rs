//! Tuning tables from sweeps.
//!
//! For every sweep (every collective: a barrier's one point gives one rule
//! for its shape), the sizes are walked in order and each run
//! of consecutive sizes with the same best algorithm becomes one rule,
//! bounded to that sweep's exact shape (nodes, ranks per node, rails).
//! A run covers the sizes above the previous run's largest up to its own
//! largest (so an unmeasured size takes the choice of the next measured
//! size up); the last run of a shape has no upper bound. Other rules
//! follow as the fallback for shapes that were not swept: the built-in
//! table's for a user's table, the fallback rules
//! ([`TuningTable::fallback`]) when the built-in table itself is made.

use railcoll_host::sched::tuning::{Rule, TuningTable};

use super::sweep::Sweep;

/// The table `sweeps` call for, followed by `tail`; `origin` says how it
/// was made.
pub fn table_from(sweeps: &[Sweep], origin: String, tail: TuningTable) -> TuningTable {
    let mut rule = Vec::new();
    for sw in sweeps {
        let mut points: Vec<_> = sw.points.iter().collect();
        points.sort_by_key(|p| p.size);
        let mut lower: Option<usize> = None;
        let mut i = 0;
        while i < points.len() {
            let best = &points[i].best;
            let mut j = i;
            while j + 1 < points.len() && points[j + 1].best == *best {
                j += 1;
            }
            let last = j + 1 == points.len();
            rule.push(Rule {
                collective: sw.collective.clone(),
                algorithm: best.clone(),
                min_bytes: lower.map(|l| l + 1),
                max_bytes: (!last).then_some(points[j].size),
                min_nodes: Some(sw.nodes),
                max_nodes: Some(sw.nodes),
                min_ranks_per_node: Some(sw.ranks_per_node),
                max_ranks_per_node: Some(sw.ranks_per_node),
                min_rails: Some(sw.rails),
                max_rails: Some(sw.rails),
                min_ranks: None,
                max_ranks: None,
            });
            lower = Some(points[j].size);
            i = j + 1;
        }
    }
    rule.extend(tail.rule);
    TuningTable {
        rule,
        origin: Some(origin),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::workbench::sweep::{Measured, Point};
    use railcoll_host::sched::{Collective, Shape};

    fn point(size: usize, best: &str) -> Point {
        Point {
            size,
            results: vec![Measured {
                algorithm: best.into(),
                latency_us: 1.0,
                max_us: 1.0,
                predicted_us: None,
                speedup_over_baseline: None,
                trace_hash: None,
                pingpong_ratio: None,
            }],
            best: best.into(),
            speedup: None,
            tuned: None,
        }
    }

    fn sweep(collective: &str, points: Vec<Point>) -> Sweep {
        Sweep {
            collective: collective.into(),
            mode: "modeled".into(),
            profile: None,
            procs: 16,
            nodes: 4,
            ranks_per_node: 4,
            sockets: 4,
            rails: 2,
            placement: "block".into(),
            root: 0,
            baseline: "native".into(),
            algorithms: vec![],
            hockney: None,
            pingpong_rtt_ns: None,
            points,
            conditions: crate::bench::Conditions::of(&crate::ClusterConfig::default(), true),
        }
    }

    #[test]
    fn a_barrier_sweep_gives_one_rule_for_its_shape() {
        // The measured pick differs from every rule of the tail, so the
        // test sees whether the measured rule is there.
        let t = table_from(
            &[sweep("barrier", vec![point(0, "rdma")])],
            "test".into(),
            TuningTable::fallback(),
        );
        let shape = Shape::new(4, 4, 4, 2, railcoll_host::Placement::Block).expect("shape");
        let other = Shape::new(8, 4, 4, 2, railcoll_host::Placement::Block).expect("shape");
        let pick = |s: &Shape| t.select(Collective::Barrier, 0, s, &mut |_| true).name();
        assert_eq!(pick(&shape), "rdma");
        assert_eq!(pick(&other), "smp", "the fallback rule elsewhere");
    }

    #[test]
    fn runs_of_equal_best_become_rules_for_the_swept_shape_only() {
        let sweep = sweep(
            "allgather",
            vec![
                point(4, "smp-direct"),
                point(64, "smp-direct"),
                point(4096, "smp-bruck"),
                point(65536, "ring"),
            ],
        );
        let t = table_from(&[sweep], "test".into(), TuningTable::builtin());
        let shape = Shape::new(4, 4, 4, 2, railcoll_host::Placement::Block).expect("shape");
        let other = Shape::new(2, 4, 4, 2, railcoll_host::Placement::Block).expect("shape");
        let pick = |bytes, s: &Shape| {
            t.select(Collective::Allgather, bytes, s, &mut |_| true)
                .name()
        };
        assert_eq!(pick(1, &shape), "smp-direct");
        assert_eq!(pick(64, &shape), "smp-direct");
        assert_eq!(pick(65, &shape), "smp-bruck");
        assert_eq!(pick(4096, &shape), "smp-bruck");
        assert_eq!(pick(4097, &shape), "ring");
        assert_eq!(pick(1 << 30, &shape), "ring");
        let builtin = TuningTable::builtin();
        assert_eq!(
            pick(64, &other),
            builtin
                .select(Collective::Allgather, 64, &other, &mut |_| true)
                .name(),
            "other shapes fall back to the built-in rules"
        );
        assert_eq!(TuningTable::parse(&t.to_toml()).expect("round trip"), t);
    }
}
