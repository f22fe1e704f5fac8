//! Go-back-N: probes, back-off, one nack per gap; failover through the sibling.

use super::*;

/// A four-packet put from node 0 to node 1 whose first transmission is
/// lost entirely; the packets are returned as they left.
fn lost_four_packet_put(net: &mut Net) -> Vec<(PacketHeader, Vec<u8>, Path)> {
    set_param(net, 0, Param::PacketSize, 64);
    set_param(net, 0, Param::RetryTimeoutNs, 10_000);
    net.fill(0, DATA, &pattern(256, 3));
    net.post(0, put(1, 0, 0x200, 256, None, None));
    net.nics[0].poll();
    let first = sent_data(net, 0);
    assert_eq!(first.len(), 4, "four 64-byte packets");
    first
}

/// After a timeout the sender probes with the oldest packet alone (a
/// congested receiver is not buried under a window from every sender);
/// once the probe is acknowledged the rest follows, and the data lands.
#[test]
fn a_timeout_probes_with_the_oldest_packet_then_resends_the_rest() {
    let mut net = Net::new(2, 21);
    let first = lost_four_packet_put(&mut net);
    let timer = net.nics[0].next_timer().expect("a retransmission timer");
    net.nics[0].hardware_mut().now = timer;
    // The timer starts the go-back; the next round transmits.
    net.nics[0].poll();
    net.nics[0].poll();
    let probe = sent_data(&mut net, 0);
    assert_eq!(probe.len(), 1, "only the oldest packet goes again");
    assert_eq!(probe[0].0.seq, first[0].0.seq);
    // The probe gets through; its ack sends the other three.
    net.nics[1].hardware_mut().inbox.push_back(probe[0].clone());
    net.nics[1].poll();
    let ack = sent_data(&mut net, 1);
    assert_eq!(ack.len(), 1);
    net.nics[0].hardware_mut().inbox.push_back(ack[0].clone());
    net.nics[0].poll();
    let rest = sent_data(&mut net, 0);
    let seqs: Vec<u32> = rest.iter().map(|(h, _, _)| h.seq.get()).collect();
    let want: Vec<u32> = first[1..].iter().map(|(h, _, _)| h.seq.get()).collect();
    assert_eq!(seqs, want);
    for p in rest {
        net.nics[1].hardware_mut().inbox.push_back(p);
    }
    net.run(10_000);
    assert_eq!(net.mem(1, DATA + 0x200, 256), pattern(256, 3));
    assert_eq!(net.nics[0].stats().retransmits, 4);
}

/// A silent peer's flow waits twice as long after each fruitless
/// timeout, up to eight times the configured one.
#[test]
fn the_retransmission_timeout_backs_off_while_the_peer_is_silent() {
    let mut net = Net::new(2, 22);
    lost_four_packet_put(&mut net);
    let mut gaps = Vec::new();
    let mut last = net.nics[0].hardware().now;
    for _ in 0..6 {
        let t = net.nics[0].next_timer().expect("a retransmission timer");
        gaps.push(t - last);
        last = t;
        net.nics[0].hardware_mut().now = t;
        net.nics[0].poll();
        net.nics[0].poll();
        assert_eq!(sent_data(&mut net, 0).len(), 1, "a probe, lost again");
    }
    assert_eq!(gaps, [10_000, 20_000, 40_000, 80_000, 80_000, 80_000]);
}

/// Packets behind a lost one each reach the receiver out of order; it asks
/// for the lost one once, not once per packet (each nack sends the whole
/// window back).
#[test]
fn a_gap_is_nacked_once_per_loss() {
    let mut net = Net::new(2, 23);
    let first = lost_four_packet_put(&mut net);
    // Node 1 takes `p` and answers: the types of what it sends.
    let answer = |net: &mut Net, p: &(PacketHeader, Vec<u8>, Path)| -> Vec<u8> {
        net.nics[1].hardware_mut().inbox.push_back(p.clone());
        net.nics[1].poll();
        sent_data(net, 1).iter().map(|(h, _, _)| h.ptype).collect()
    };
    let answers: Vec<u8> = first[1..]
        .iter()
        .flat_map(|p| answer(&mut net, p))
        .collect();
    assert_eq!(answers, [PacketType::Nack.as_raw()]);
    // The lost packet arrives (and is acked); a new gap behind it is
    // nacked again.
    assert_eq!(answer(&mut net, &first[0]), [PacketType::Ack.as_raw()]);
    assert_eq!(answer(&mut net, &first[2]), [PacketType::Nack.as_raw()]);
}

fn status(net: &Net, node: usize) -> Status {
    Status::from_bits_retain(net.nics[node].hardware().reg_read(regs::STATUS.offset()))
}

/// Every node: small timeout, short retry limit, 64-byte packets, and the
/// sibling on rail 1 as the alternate path.
fn failover_ready(net: &mut Net) {
    for node in 0..net.nics.len() {
        set_param(net, node, Param::PacketSize, 64);
        set_param(net, node, Param::RetryTimeoutNs, 10_000);
        set_param(net, node, Param::RetryLimit, 2);
        set_param(net, node, Param::AlternateRail, 2);
    }
}

/// The rail dies after node 1 took a whole put but before its acks got
/// back. Past the retry limit node 0's flow goes on through the sibling
/// with the same sequence numbers: node 1 only acknowledges the packets
/// again (on the path they came by), so the data and the destination
/// event are applied exactly once, and the put completes without error.
#[test]
fn a_flow_past_its_retry_limit_goes_on_through_the_sibling_exactly_once() {
    let mut net = Net::new(2, 31);
    failover_ready(&mut net);
    let data = pattern(256, 5);
    net.fill(0, DATA, &data);
    for (node, event, value) in [(0, 1, 11), (1, 2, 12)] {
        net.post(
            node,
            Command::ArmEvent {
                event: EventId(event),
                count: 1,
                action: write_action(event.into(), value),
            },
        );
    }
    net.run(1000);
    net.post(0, put(1, 0, 0x400, 256, Some(1), Some(2)));
    net.nics[0].poll();
    for p in sent_data(&mut net, 0) {
        net.nics[1].hardware_mut().inbox.push_back(p);
    }
    net.nics[1].poll();
    assert_eq!(net.word(1, 2).value, 12, "the put landed");
    // Its acks are lost with the rail.
    let acks = sent_data(&mut net, 1);
    assert!(!acks.is_empty() && acks.iter().all(|p| p.2 == Path::Direct));
    net.direct_down = true;
    net.run(100_000);
    assert_eq!(
        net.word(0, 1),
        CompletionWord {
            value: 11,
            status: Some(Ok(()))
        }
    );
    assert_eq!(net.mem(1, DATA + 0x400, 256), data);
    assert_eq!(net.nics[0].stats().migrations, 1);
    assert!(net.nics[1].stats().duplicates >= 1);
    assert!(status(&net, 0).contains(Status::MIGRATED));
    // Exactly once: one more arm of the destination event does not fire
    // on a stray second set; a real set fires it.
    net.post(
        1,
        Command::ArmEvent {
            event: EventId(2),
            count: 1,
            action: write_action(2, 13),
        },
    );
    net.run(1000);
    assert_eq!(
        net.word(1, 2).value,
        12,
        "the destination event was set twice"
    );
    net.post(
        1,
        Command::SetEvent {
            event: EventId(2),
            count: 1,
            rail: None,
        },
    );
    net.run(1000);
    assert_eq!(net.word(1, 2).value, 13);

    // The rail comes back. Once the probe interval has passed, the next
    // put's flow tries its direct path, hears back on it, and leaves the
    // sibling; neither NIC is left MIGRATED (node 1 went round too if it
    // learned the path from node 0's packets, and came back with them).
    net.direct_down = false;
    for n in &mut net.nics {
        n.hardware_mut().now += 1_000_000;
    }
    let again = pattern(256, 6);
    net.fill(0, DATA, &again);
    net.post(0, put(1, 0, 0x800, 256, None, None));
    net.post(1, put(0, 0x400, 0x800, 256, None, None));
    net.run(100_000);
    assert_eq!(net.mem(1, DATA + 0x800, 256), again);
    assert_eq!(net.mem(0, DATA + 0x800, 256), data);
    assert_eq!(net.nics[0].stats().path_restores, 1);
    // Back for good: traffic both ways does not send either flow round
    // again (packets of the migrated days still in flight teach nothing
    // within 8 timeouts of a direct one).
    let migrations = [0, 1].map(|n| net.nics[n].stats().migrations);
    for round in 0..10 {
        net.post(0, put(1, 0, 0x800, 256, None, None));
        net.post(1, put(0, 0x400, 0x800, 256, None, None));
        net.run(100_000);
        for n in &mut net.nics {
            n.hardware_mut().now += 5_000 * round;
        }
    }
    assert_eq!([0, 1].map(|n| net.nics[n].stats().migrations), migrations);
    for node in 0..2 {
        assert!(
            !status(&net, node).contains(Status::MIGRATED),
            "node {node}"
        );
    }
}

/// Without an alternate, or with a dead alternate too, a flow breaks as
/// before (`PeerUnreachable`), after migrating once at most; an alternate
/// naming the NIC's own rail is refused.
#[test]
fn a_migrated_flow_that_goes_silent_again_breaks() {
    let mut net = Net::new(2, 32);
    failover_ready(&mut net);
    assert_eq!(
        net.mailbox(
            0,
            MailboxOp::SetParam,
            [Param::AlternateRail as u64, 1, 0, 0]
        ),
        Err(ErrorCode::BadConfig),
        "rail 0 is this NIC's own"
    );
    put_to_a_silent_peer(&mut net, 1000);
    assert_eq!(net.nics[0].stats().migrations, 1);
    assert!(status(&net, 0).contains(Status::FLOW_BROKEN));
}

/// A broadcast whose rail's switch is dead goes on through the sibling's
/// switch past the retry limit: every destination gets every byte and
/// its event once. Once the rail is back, the next broadcast's first
/// packet, also sent directly, is acknowledged directly and broadcasts
/// come back to the rail.
#[test]
fn a_broadcast_on_a_dead_switch_goes_on_through_the_sibling() {
    let mut net = Net::new(4, 33);
    failover_ready(&mut net);
    net.direct_down = true;
    let arm = |net: &mut Net, value: u64| {
        for node in [0, 2, 3] {
            net.post(
                node,
                Command::ArmEvent {
                    event: EventId(2),
                    count: 1,
                    action: write_action(2, value),
                },
            );
        }
        net.post(
            1,
            Command::ArmEvent {
                event: EventId(1),
                count: 1,
                action: write_action(1, value),
            },
        );
    };
    let bcast = Command::Bcast {
        len: 2000,
        low_node: 0,
        high_node: 3,
        src_addr: VA_DATA,
        dst_addr: VA_DATA + 0x8000,
        src_event: Some(EventId(1)),
        dst_event: Some(EventId(2)),
    };
    for (round, down) in [(1u64, true), (2, false)] {
        net.direct_down = down;
        if !down {
            // Leaving the sibling takes a direct answer: time for it.
            for n in &mut net.nics {
                n.hardware_mut().now += 1_000_000;
            }
        }
        let data = pattern(2000, round as u8);
        net.fill(1, DATA, &data);
        arm(&mut net, 10 + round);
        net.post(1, bcast);
        net.run(200_000);
        assert_eq!(
            net.word(1, 1),
            CompletionWord {
                value: 10 + round,
                status: Some(Ok(()))
            },
            "round {round}"
        );
        for node in [0, 2, 3] {
            assert_eq!(net.mem(node, DATA + 0x8000, 2000), data, "node {node}");
            assert_eq!(net.word(node, 2).value, 10 + round, "node {node}");
        }
    }
    assert_eq!(net.nics[1].stats().migrations, 1);
    assert_eq!(net.nics[1].stats().path_restores, 1);
    assert!(!status(&net, 1).contains(Status::MIGRATED));
    // Each destination's event was set once per broadcast: one more arm
    // does not fire.
    arm(&mut net, 99);
    net.run(1000);
    for node in [0, 2, 3] {
        assert_eq!(net.word(node, 2).value, 12, "node {node}: a second set");
    }
}

/// A hardware barrier waits for a slow member (the switch answers each
/// re-sent arrival with a held packet), but not past 8 retry limits of
/// re-announcements (the members it waits for may have gone on without
/// the switch), and gives up at once, with `PeerUnreachable`, when the
/// switch stops answering.
#[test]
fn a_barrier_waits_for_a_slow_member_but_not_for_a_dead_switch() {
    const TIMEOUT: u64 = 10_000;
    let mut net = Net::new(3, 34);
    failover_ready(&mut net);
    let now = |net: &Net| net.nics[0].hardware().now;
    let done = |net: &Net, event: u64, value: u64, status| {
        (0..2).all(|n| {
            net.word(n, event)
                == CompletionWord {
                    value,
                    status: Some(status),
                }
        })
    };
    // A slow member: twelve timeouts (six retry limits) later the others
    // still wait, then it comes and everyone is released.
    for node in 0..2 {
        net.enter_barrier(node, (0, 2), 1, 3, 30);
    }
    net.run_for_ns(12 * TIMEOUT);
    assert!((0..2).all(|n| net.word(n, 3).value == 0), "released early");
    net.enter_barrier(2, (0, 2), 1, 3, 30);
    net.run(100_000);
    assert!(done(&net, 3, 30, Ok(())), "released");
    // A member that never comes: past the bound the others give up.
    for node in 0..2 {
        net.enter_barrier(node, (0, 2), 2, 4, 40);
    }
    let start = now(&net);
    net.run(100_000);
    assert!(done(&net, 4, 40, Err(ErrorCode::PeerUnreachable)));
    assert!(
        now(&net) >= start + 16 * TIMEOUT,
        "gave up before the bound"
    );
    // A dead switch: they give up past the retry limit, well before it.
    net.direct_down = true;
    for node in 0..2 {
        net.enter_barrier(node, (0, 2), 3, 5, 50);
    }
    let start = now(&net);
    net.run(100_000);
    assert!(done(&net, 5, 50, Err(ErrorCode::PeerUnreachable)));
    assert!(now(&net) < start + 8 * TIMEOUT, "a dead switch held them");
}
