//! Puts and gets: every shape, loss, protection, busy targets, unreachable peers.

use super::*;

/// A NIC publishes its identity, version, geometry and resources from
/// reset (what a driver probes before it opens anything).
#[test]
fn a_nic_publishes_what_a_driver_probes() {
    let net = Net::new(2, 1);
    for nic in &net.nics {
        let hw = nic.hardware();
        assert_eq!(hw.load(regs::ID), regs::ID_VALUE);
        assert_eq!(hw.load(regs::VERSION), u64::from(crate::abi::ABI_VERSION));
        assert_eq!(hw.load(regs::GEOMETRY), TestEngine::GEOMETRY.to_reg());
        let raw = hw.load(regs::RESOURCES);
        assert_ne!(raw, 0, "a 1.1 NIC reports its resources");
        assert_eq!(
            regs::Resources::from_reg(raw),
            regs::Resources::this_firmware(64)
        );
    }
}

#[test]
fn put_of_every_shape_lands_and_completes_both_events() {
    for len in [0u32, 1, 7, 2047, 2048, 2049, 65_536 + 3] {
        let mut net = Net::new(2, 1);
        put_and_check(&mut net, len);
    }
}

#[test]
fn put_survives_loss_duplication_and_corruption() {
    for seed in 1..6 {
        let mut net = Net::new(2, seed);
        net.faults = Faults {
            drop: 100,
            duplicate: 50,
            corrupt: 50,
            delay: 50,
            delay_ns: 0,
        };
        put_and_check(&mut net, 100_000);
        assert!(net.nics[0].stats().retransmits > 0);
        // Exactly once: each side's event fired once, one DMA completed.
        assert_eq!(net.nics[0].stats().events_fired, 1);
        assert_eq!(net.nics[1].stats().events_fired, 1);
        assert_eq!(net.nics[0].stats().dmas_completed, 1);
        assert!(net.nics[1].stats().duplicates > 0 || net.nics[1].stats().bad_packets > 0);
    }
}

/// Node 0 gets `len` bytes from offset 0x800 of node `vp`'s data into its
/// own offset 0, completion word 4 written with 9.
fn get_into_word_4(net: &mut Net, vp: u32, len: u32) {
    net.post(
        0,
        Command::ArmEvent {
            event: EventId(4),
            count: 1,
            action: write_action(4, 9),
        },
    );
    net.post(
        0,
        Command::Dma(DmaCommand {
            kind: DmaKind::Get,
            len,
            vp,
            src_addr: VA_DATA + 0x800,
            dst_addr: VA_DATA,
            src_event: None,
            dst_event: Some(EventId(4)),
            wake: false,
        }),
    );
}

#[test]
fn get_is_a_put_run_by_the_owner() {
    let mut net = Net::new(3, 3);
    let data = pattern(5000, 3);
    net.fill(2, DATA + 0x800, &data);
    get_into_word_4(&mut net, 2, 5000);
    net.run(100_000);
    assert_eq!(net.mem(0, DATA, 5000), data);
    assert_eq!(
        net.word(0, 4),
        CompletionWord {
            value: 9,
            status: Some(Ok(()))
        }
    );
}

/// A get request that finds every DMA slot of its target busy is refused
/// for now (ABI 1.7), not nacked: a put sent after it on the same flow
/// lands while the get waits (a nack would have held the put back as a
/// gap and sent the whole window again), and the get is sent again after
/// its back-off and completes once a slot is free.
#[test]
fn a_get_that_finds_no_dma_slot_is_refused_and_the_flow_goes_on() {
    let mut net = Net::new(2, 5);
    let data = pattern(256, 7);
    net.fill(1, DATA + 0x800, &data);
    let later = pattern(64, 9);
    net.fill(0, DATA + 0x2000, &later);
    // Every DMA slot of node 1 taken (as by 64 transfers in flight).
    net.nics[1].dmas.set_active_for_test(crate::abi::MAX_DMAS);
    get_into_word_4(&mut net, 1, 256);
    net.post(0, put(1, 0x2000, 0x3000, 64, None, None));
    net.run_for(200);
    assert_eq!(
        net.mem(1, DATA + 0x3000, 64),
        later,
        "the later put waited for the get"
    );
    assert!(
        net.nics[1].stats().packets_refused >= 1,
        "refused, not nacked"
    );
    assert_ne!(
        net.mem(0, DATA, 256),
        data,
        "no slot yet: the get is not served"
    );
    assert_ne!(net.word(0, 4).value, 9, "nor completed");
    assert_eq!(net.nics[0].stats().retransmits, 0, "nothing went back");
    net.nics[1].dmas.set_active_for_test(0);
    net.run(100_000);
    assert_eq!(net.mem(0, DATA, 256), data);
    assert_eq!(
        net.word(0, 4),
        CompletionWord {
            value: 9,
            status: Some(Ok(()))
        }
    );
}

#[test]
fn put_outside_target_region_writes_nothing_and_both_sides_see_it() {
    let mut net = Net::new(2, 4);
    net.fill(0, DATA, &pattern(4096, 1));
    net.post(
        0,
        Command::ArmEvent {
            event: EventId(1),
            count: 1,
            action: write_action(1, 5),
        },
    );
    net.post(
        1,
        Command::ArmEvent {
            event: EventId(2),
            count: 1,
            action: write_action(2, 6),
        },
    );
    // Straddles the end of the target region: the first packet's own range
    // is inside, the second's is not. Nothing at all may be written.
    net.post(0, put(1, 0, DATA_LEN - 2048, 4096, Some(1), Some(2)));
    net.run(10_000);
    assert_eq!(
        net.mem(1, DATA + DATA_LEN - 2048, 2048),
        vec![0; 2048],
        "no partial write"
    );
    assert_eq!(net.word(0, 1).status, Some(Err(ErrorCode::Protection)));
    assert_eq!(net.word(1, 2).status, Some(Err(ErrorCode::Protection)));
    let target_errors = net.errors(1);
    assert_eq!(target_errors.len(), 2, "one record per rejected packet");
    assert_eq!(target_errors[0].kind, ErrorKind::Inbound);
    assert_eq!(target_errors[0].code, ErrorCode::Protection);
    let initiator = net.errors(0);
    assert_eq!(initiator.len(), 1);
    assert_eq!(initiator[0].kind, ErrorKind::Remote);
    // Completely outside: nothing written at all.
    let mut net = Net::new(2, 5);
    net.fill(0, DATA, &pattern(64, 1));
    net.post(
        0,
        Command::ArmEvent {
            event: EventId(1),
            count: 1,
            action: write_action(1, 5),
        },
    );
    net.post(
        0,
        Command::Dma(DmaCommand {
            kind: DmaKind::Put,
            len: 64,
            vp: 1,
            src_addr: VA_DATA,
            dst_addr: VA_WORDS,
            src_event: Some(EventId(1)),
            dst_event: None,
            wake: false,
        }),
    );
    net.run(10_000);
    assert_eq!(net.mem(1, WORDS, 64), vec![0; 64]);
    assert_eq!(net.word(0, 1).status, Some(Err(ErrorCode::Protection)));
}

#[test]
fn many_outstanding_puts_in_both_directions() {
    let mut net = Net::new(2, 9);
    net.fill(0, DATA, &pattern(0x8000, 1));
    net.fill(1, DATA, &pattern(0x8000, 2));
    net.post(
        0,
        Command::ArmEvent {
            event: EventId(0),
            count: 100,
            action: write_action(0, 1),
        },
    );
    net.post(
        1,
        Command::ArmEvent {
            event: EventId(0),
            count: 100,
            action: write_action(0, 1),
        },
    );
    for i in 0..50u64 {
        net.post(0, put(1, i * 256, 0x10000 + i * 256, 256, Some(0), Some(0)));
        net.post(1, put(0, i * 256, 0x10000 + i * 256, 256, Some(0), Some(0)));
    }
    net.run(100_000);
    assert_eq!(
        net.mem(1, DATA + 0x10000, 50 * 256),
        pattern(0x8000, 1)[..50 * 256].to_vec()
    );
    assert_eq!(
        net.mem(0, DATA + 0x10000, 50 * 256),
        pattern(0x8000, 2)[..50 * 256].to_vec()
    );
    assert_eq!(net.word(0, 0).value, 1);
    assert_eq!(net.word(1, 0).value, 1);
}

#[test]
fn unreachable_peer_fails_the_dma_once() {
    let mut net = Net::new(2, 10);
    put_to_a_silent_peer(&mut net, 10_000);
}
