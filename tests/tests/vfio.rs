//! The VFIO backend (`railcoll_host::vfio::VfioNode`) end to end, with the
//! emulator's NICs behind its seam (`railcoll_emu::fake_vfio`): BAR0
//! reached through the region calls, DMA into the pool the backend
//! mapped, MSI-X vectors signalling its eventfds. Every check of the
//! conformance suite passes through it, ranks as threads on two nodes,
//! each node one `VfioNode` as a board's process would open it.

use std::sync::Arc;
use std::time::Duration;

use railcoll_emu::ClusterConfig;
use railcoll_emu::fake_vfio::{EmulatedBoards, run_ranks};
use railcoll_host::vfio::VfioNode;

#[test]
fn every_conformance_check_passes_through_the_vfio_backend() {
    let shape = railcoll_host::topology::Shape::new(2, 2, 1, 2, Default::default()).expect("shape");
    let cfg = ClusterConfig {
        shape,
        arena_size: 8 << 20,
        wait_timeout: Duration::from_secs(20),
        ..ClusterConfig::default()
    };
    let boards = EmulatedBoards::start(&cfg).expect("the NICs start");
    let nodes: Vec<Arc<VfioNode>> = (0..2)
        .map(|n| {
            Arc::new(
                VfioNode::open_with(Box::new(boards.vfio(n)), &boards.options(n))
                    .expect("the node opens through the seam"),
            )
        })
        .collect();
    let reports: Vec<_> = run_ranks(&nodes, shape, 8 << 20, Duration::from_secs(20), &|comm| {
        railcoll_conformance::run(comm, &|_| true)
    })
    .into_iter()
    .map(|r| r.expect("communicator").expect("the suite runs"))
    .collect();
    for (rank, report) in reports.iter().enumerate() {
        assert_eq!(report.len(), railcoll_conformance::CHECKS.len());
        for outcome in report {
            assert_eq!(
                outcome.verdict,
                railcoll_conformance::Verdict::Passed,
                "rank {rank}: {outcome}"
            );
        }
    }
}

#[test]
fn a_device_the_board_does_not_have_is_a_typed_error() {
    let shape = railcoll_host::topology::Shape::new(1, 1, 1, 1, Default::default()).expect("shape");
    let cfg = ClusterConfig {
        shape,
        ..ClusterConfig::default()
    };
    let boards = EmulatedBoards::start(&cfg).expect("the NICs start");
    let mut options = boards.options(0);
    options.devices.push("emu:n0r7".into());
    let e = VfioNode::open_with(Box::new(boards.vfio(0)), &options).expect_err("no rail 7");
    assert!(e.to_string().contains("emu:n0r7"), "{e}");
    options.devices.pop();
    options.iova = 1 << 32;
    let e = VfioNode::open_with(Box::new(boards.vfio(0)), &options).expect_err("IOVA 0 only");
    assert!(e.to_string().contains("IOVA 0"), "{e}");
}
