//! Broadcast DMA and the hardware barrier: a lossy rail, bad ranges, detach and unmap while one is pending.

use super::*;

/// A broadcast from node 1 to nodes 0..=4 under loss, duplication and
/// corruption: every other node gets every byte and its event, the sender's
/// event fires once, and a hardware barrier of the 5 nodes releases all of
/// them only after the last arrival.
#[test]
fn broadcast_and_hardware_barrier_survive_a_lossy_rail() {
    for seed in 1..4 {
        let mut net = Net::new(5, 20 + seed);
        net.faults = Faults {
            drop: 80,
            duplicate: 40,
            corrupt: 40,
            delay: 50,
            delay_ns: 0,
        };
        let data = pattern(20_000, 5);
        net.fill(1, DATA, &data);
        for node in 0..5 {
            if node != 1 {
                net.post(
                    node,
                    Command::ArmEvent {
                        event: EventId(2),
                        count: 1,
                        action: write_action(2, 20),
                    },
                );
            }
        }
        net.post(
            1,
            Command::ArmEvent {
                event: EventId(1),
                count: 1,
                action: write_action(1, 10),
            },
        );
        net.post(
            1,
            Command::Bcast {
                len: 20_000,
                low_node: 0,
                high_node: 4,
                src_addr: VA_DATA,
                dst_addr: VA_DATA + 0x8000,
                src_event: Some(EventId(1)),
                dst_event: Some(EventId(2)),
            },
        );
        net.run(200_000);
        assert_eq!(
            net.word(1, 1),
            CompletionWord {
                value: 10,
                status: Some(Ok(()))
            }
        );
        for node in [0, 2, 3, 4] {
            assert_eq!(net.mem(node, DATA + 0x8000, 20_000), data, "node {node}");
            assert_eq!(net.word(node, 2).value, 20);
        }
        assert_eq!(
            net.mem(1, DATA + 0x8000, 16),
            vec![0; 16],
            "the sender is not its own target"
        );
        // Barrier 1: four nodes arrive; nobody is released until the fifth
        // (which comes within the held wait's bound: 20 timeouts).
        for node in 0..4 {
            net.enter_barrier(node, (0, 4), 1, 3, 30);
        }
        net.run_for_ns(20 * 50_000_000);
        let early: Vec<_> = (0..5).map(|n| (net.word(n, 3), net.errors(n))).collect();
        assert!(
            (0..4).all(|n| net.word(n, 3).value == 0),
            "released before the last arrival: {early:?}"
        );
        net.enter_barrier(4, (0, 4), 1, 3, 30);
        net.run(200_000);
        assert!((0..5).all(|n| net.word(n, 3)
            == CompletionWord {
                value: 30,
                status: Some(Ok(()))
            }));
    }
}

#[test]
fn collective_commands_refuse_bad_ranges() {
    let mut net = Net::new(3, 30);
    net.post(
        0,
        Command::Bcast {
            len: 8,
            low_node: 0,
            high_node: 7,
            src_addr: VA_DATA,
            dst_addr: VA_DATA,
            src_event: None,
            dst_event: None,
        },
    );
    net.post(
        0,
        Command::HwBarrier {
            low_node: 1,
            high_node: 2,
            seq: 1,
            tag: 0,
            event: None,
        },
    );
    let mut inverted = Command::HwBarrier {
        low_node: 0,
        high_node: 2,
        seq: 1,
        tag: 0,
        event: None,
    }
    .emit(0)
    .to_bytes();
    inverted[8..10].copy_from_slice(&2u16.to_le_bytes());
    inverted[10..12].copy_from_slice(&0u16.to_le_bytes());
    net.post_raw(0, inverted);
    net.run(1000);
    let codes: Vec<ErrorCode> = net.errors(0).iter().map(|e| e.code).collect();
    assert_eq!(
        codes,
        vec![ErrorCode::BadVp, ErrorCode::BadVp, ErrorCode::NotContiguous]
    );
}

/// A context detached with a hardware barrier pending leaves it: its NIC
/// stops re-announcing it, the switch no longer counts its arrival (the
/// others are not released by the last remaining member), and the
/// context's next owner runs its own barrier instead of stalling behind
/// the stale one.
#[test]
fn detach_leaves_a_pending_barrier_and_the_next_owner_runs() {
    let mut net = Net::new(3, 31);
    for node in 0..2 {
        net.enter_barrier(node, (0, 2), 1, 3, 30);
    }
    net.run_for_ns(20 * 50_000_000);
    assert_eq!(
        net.mailbox(1, MailboxOp::DetachContext, [0, 0, 0, 0]),
        Ok(())
    );
    // The last member arrives: node 1 left, so nobody is released.
    net.post(
        2,
        Command::HwBarrier {
            low_node: 0,
            high_node: 2,
            seq: 1,
            tag: 0,
            event: None,
        },
    );
    net.run_for_ns(20 * 50_000_000);
    assert_eq!(net.word(0, 3).value, 0, "released without node 1");
    // The context's next owner: a barrier of its own node alone.
    net.attach(1);
    net.enter_barrier(1, (1, 1), 1, 4, 40);
    net.run_for(20_000);
    assert_eq!(
        net.word(1, 4),
        CompletionWord {
            value: 40,
            status: Some(Ok(()))
        },
        "the new owner's barrier ran"
    );
}

/// A region may not be unmapped while a broadcast of its context is in
/// flight (the broadcast reads its source on every send and resend): the
/// unmap is refused with `Busy`, as for a DMA, and succeeds once the
/// broadcast has completed.
#[test]
fn unmap_waits_for_a_broadcast_in_flight() {
    let mut net = Net::new(3, 32);
    net.faults = Faults {
        drop: 1000,
        duplicate: 0,
        corrupt: 0,
        delay: 0,
        delay_ns: 0,
    };
    net.fill(1, DATA, &pattern(20_000, 6));
    net.post(
        1,
        Command::Bcast {
            len: 20_000,
            low_node: 0,
            high_node: 2,
            src_addr: VA_DATA,
            dst_addr: VA_DATA + 0x8000,
            src_event: None,
            dst_event: None,
        },
    );
    net.run_for(5);
    assert_eq!(
        net.mailbox(1, MailboxOp::UnmapRegion, [0, 0, 0, 0]),
        Err(ErrorCode::Busy),
        "the broadcast still reads slot 0"
    );
    net.faults = Faults::default();
    net.run(200_000);
    assert_eq!(net.mem(0, DATA + 0x8000, 20_000), pattern(20_000, 6));
    assert_eq!(net.mailbox(1, MailboxOp::UnmapRegion, [0, 0, 0, 0]), Ok(()));
}
