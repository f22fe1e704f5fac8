//! Closing idle flows (docs/abi.md §8.1, "Closing idle flows"): both ends
//! forget a flow idle for `FLOW_CLOSE_IDLE`, a NIC talks to more nodes over
//! time than it has slots, a DMA posted while its flow closes goes on a new
//! instance, stale packets and closes of an earlier instance do nothing,
//! and puts among idle gaps on a lossy, duplicating network land exactly
//! once with every slot given back.

use super::*;
use crate::abi::packet::Packet;

/// The idle time after which the tests' flows close.
const IDLE: u64 = 1_000_000;

fn closing(nodes: usize, seed: u64) -> Net {
    let mut net = Net::new(nodes, seed);
    for node in 0..nodes {
        set_param(&mut net, node, Param::FlowCloseIdleNs, IDLE);
    }
    net
}

/// The idle time passes (every clock moves on by `IDLE`) and node 0
/// polls: what it sends (its closes).
fn close_after_idle(net: &mut Net) -> Vec<WirePacket> {
    for n in &mut net.nics {
        n.hardware_mut().now += IDLE;
    }
    net.nics[0].poll();
    sent_data(net, 0)
}

/// Post a put of 64 bytes of `pattern(64, seed)` from node `from`'s
/// offset `0x8000 + dst` to node `to`'s offset `dst` (cleared first), with
/// event `word` armed at both ends to write `seed`.
fn post_put(net: &mut Net, (from, to): (usize, usize), dst: u64, seed: u8, word: u32) {
    net.fill(from, DATA + 0x8000 + dst, &pattern(64, seed));
    net.fill(to, DATA + dst, &[0; 64]);
    arm(net, from, word, u64::from(seed));
    arm(net, to, word, u64::from(seed));
    net.post(
        from,
        put(to as u32, 0x8000 + dst, dst, 64, Some(word), Some(word)),
    );
}

/// A get of 64 bytes by node `by` from node `from`'s offset `0x8000 +
/// dst` into its own offset `dst` (cleared first), event `word` armed
/// at the requester to write `seed`.
fn post_get(net: &mut Net, (by, from): (usize, usize), dst: u64, seed: u8, word: u32) {
    net.fill(from, DATA + 0x8000 + dst, &pattern(64, seed));
    net.fill(by, DATA + dst, &[0; 64]);
    arm(net, by, word, u64::from(seed));
    net.post(
        by,
        Command::Dma(DmaCommand {
            kind: DmaKind::Get,
            len: 64,
            vp: from as u32,
            src_addr: VA_DATA + 0x8000 + dst,
            dst_addr: VA_DATA + dst,
            src_event: None,
            dst_event: Some(EventId(word)),
            wake: false,
        }),
    );
}

/// The put of `post_put` landed, and both its events fired.
fn check_put(net: &Net, (from, to): (usize, usize), dst: u64, seed: u8, word: u32) {
    assert_eq!(net.mem(to, DATA + dst, 64), pattern(64, seed), "the bytes");
    let done = CompletionWord {
        value: u64::from(seed),
        status: Some(Ok(())),
    };
    assert_eq!(net.word(from, word.into()), done, "the source event");
    assert_eq!(net.word(to, word.into()), done, "the destination event");
}

fn open_slots(net: &Net, node: usize) -> (usize, usize) {
    let nic = &net.nics[node];
    (nic.flows.tx.values().count(), nic.flows.rx.values().count())
}

fn instance_of(packets: &[WirePacket]) -> u32 {
    match Packet::parse(&packets[0].0) {
        Ok(Packet::Data(d)) => d.flow,
        other => panic!("expected a data packet, got {other:?}"),
    }
}

/// `SET_PARAM` 6 takes 0 (never close) or at least 1 ms, and refuses
/// anything between with `BadConfig`, leaving the value set before: a NIC
/// told 0 keeps its flow past any idle time.
#[test]
fn the_close_idle_time_is_zero_or_at_least_a_millisecond() {
    let mut net = Net::new(2, 58);
    for bad in [1, 999, 999_999] {
        assert_eq!(
            net.mailbox(0, MailboxOp::SetParam, [6, bad, 0, 0]),
            Err(ErrorCode::BadConfig),
            "{bad} ns"
        );
    }
    assert_eq!(
        net.mailbox(0, MailboxOp::SetParam, [6, 1_000_000, 0, 0]),
        Ok(())
    );
    assert_eq!(net.mailbox(0, MailboxOp::SetParam, [6, 0, 0, 0]), Ok(()));
    assert_eq!(
        net.mailbox(0, MailboxOp::SetParam, [6, 999_999, 0, 0]),
        Err(ErrorCode::BadConfig)
    );
    post_put(&mut net, (0, 1), 0x100, 1, 1);
    net.run(100_000);
    check_put(&net, (0, 1), 0x100, 1, 1);
    for n in &mut net.nics {
        n.hardware_mut().now += 10_000_000_000;
    }
    net.run(100_000);
    assert_eq!(open_slots(&net, 0).0, 1, "never closed");
    assert_eq!(net.nics[0].stats().flows_closed, 0);
}

#[test]
fn an_idle_flow_closes_at_both_ends_and_a_later_put_opens_a_new_one() {
    let mut net = closing(2, 50);
    post_put(&mut net, (0, 1), 0x100, 1, 1);
    net.run(100_000);
    check_put(&net, (0, 1), 0x100, 1, 1);
    assert_eq!(net.nics[0].stats().flows_closed, 1);
    assert_eq!(open_slots(&net, 0), (0, 0), "node 0 kept nothing");
    assert_eq!(open_slots(&net, 1), (0, 0), "node 1 kept nothing");
    post_put(&mut net, (0, 1), 0x200, 2, 2);
    net.run(100_000);
    check_put(&net, (0, 1), 0x200, 2, 2);
    assert_eq!(net.mem(1, DATA + 0x100, 64), pattern(64, 1), "untouched");
    assert_eq!(net.nics[0].stats().flows_closed, 2);
    assert_eq!(net.nics[1].stats().packets_accepted, 2, "each put once");
}

/// Eight slots: node 0 cannot hold a ninth peer while eight flows are
/// open, but reaches it once they have been idle; and node 0 hears from
/// nine senders, one after another.
#[test]
fn a_nic_talks_to_more_nodes_over_time_than_it_has_slots() {
    let mut net = closing(10, 51);
    for to in 1..=8 {
        post_put(&mut net, (0, to), 0x100 * to as u64, to as u8, to as u32);
    }
    net.run_for_ns(IDLE / 2);
    assert_eq!(open_slots(&net, 0).0, 8);
    arm(&mut net, 0, 9, 9);
    net.post(0, put(9, 0, 0x900, 64, Some(9), None));
    net.nics[0].poll();
    assert_eq!(net.word(0, 9).status, Some(Err(ErrorCode::NoPeerSlot)));
    net.run(100_000);
    for to in 1..=8 {
        check_put(&net, (0, to), 0x100 * to as u64, to as u8, to as u32);
    }
    assert_eq!(open_slots(&net, 0), (0, 0));
    post_put(&mut net, (0, 9), 0x900, 9, 10);
    net.run(100_000);
    check_put(&net, (0, 9), 0x900, 9, 10);
    for from in 1..=9 {
        let word = 10 + from as u32;
        post_put(
            &mut net,
            (from, 0),
            0x1000 + 0x100 * from as u64,
            0x40 + from as u8,
            word,
        );
        net.run(100_000);
        check_put(
            &net,
            (from, 0),
            0x1000 + 0x100 * from as u64,
            0x40 + from as u8,
            word,
        );
    }
    assert_eq!(net.nics[0].stats().flows_closed, 9);
    assert_eq!(open_slots(&net, 0), (0, 0));
}

/// A DMA posted while its flow's close awaits an answer sends nothing
/// until the answer, then goes as a new instance from sequence 0.
/// A DMA posted while its flow's close awaits an answer sends nothing
/// until the answer, then goes as a new instance from sequence 0.
#[test]
fn a_put_posted_while_its_flow_closes_waits_and_goes_on_a_new_instance() {
    let mut net = closing(2, 52);
    post_put(&mut net, (0, 1), 0x100, 1, 1);
    net.nics[0].poll();
    let first = sent_data(&mut net, 0);
    let old = instance_of(&first);
    net.nics[1].hardware_mut().inbox.extend(first);
    net.run_for_ns(IDLE / 2);
    check_put(&net, (0, 1), 0x100, 1, 1);
    // The idle time passes: node 0 sends its close, and nothing else.
    let close = close_after_idle(&mut net);
    assert_eq!(close.len(), 1);
    assert!(matches!(Packet::parse(&close[0].0), Ok(Packet::FlowClose(c)) if c.flow == old));
    post_put(&mut net, (0, 1), 0x200, 2, 2);
    for _ in 0..4 {
        net.nics[0].poll();
    }
    assert!(
        sent_data(&mut net, 0).is_empty(),
        "nothing sent while closing"
    );
    net.nics[1].hardware_mut().inbox.extend(close);
    net.nics[1].poll();
    let answer = sent_data(&mut net, 1);
    assert!(matches!(Packet::parse(&answer[0].0), Ok(Packet::FlowCloseAck(c)) if c.flow == old));
    assert_eq!(open_slots(&net, 1).1, 0, "node 1 forgot the flow");
    net.nics[0].hardware_mut().inbox.extend(answer);
    net.nics[0].poll();
    let second = sent_data(&mut net, 0);
    let new = instance_of(&second);
    assert_ne!(new, old);
    assert_eq!(second[0].0.seq.get(), 0, "a new instance starts at 0");
    net.nics[1].hardware_mut().inbox.extend(second);
    net.run(100_000);
    check_put(&net, (0, 1), 0x200, 2, 2);
    assert_eq!(net.nics[1].stats().packets_accepted, 2);
}

/// Copies of a closed instance's packet, close and answer, arriving once
/// a later instance is open and closing: node 1 drops the packet (its
/// memory unchanged) and answers the close copy without touching the
/// slot of the later instance; node 0 ignores the stale answer and goes on
/// waiting for its own; everything lands once, and every slot comes back.
#[test]
fn copies_of_an_earlier_instance_do_nothing() {
    let mut net = closing(2, 53);
    post_put(&mut net, (0, 1), 0x100, 1, 1);
    net.nics[0].poll();
    let first = sent_data(&mut net, 0);
    net.nics[1].hardware_mut().inbox.extend(first.clone());
    net.run_for_ns(IDLE / 2);
    let close = close_after_idle(&mut net);
    net.nics[1].hardware_mut().inbox.extend(close.clone());
    net.nics[1].poll();
    let answer = sent_data(&mut net, 1);
    net.nics[0].hardware_mut().inbox.extend(answer.clone());
    net.run_for_ns(IDLE / 2);
    assert_eq!(open_slots(&net, 0), (0, 0));
    // A second instance lands, idles and starts closing.
    post_put(&mut net, (0, 1), 0x200, 2, 2);
    net.run_for_ns(IDLE / 2);
    check_put(&net, (0, 1), 0x200, 2, 2);
    let second_close = close_after_idle(&mut net);
    assert_eq!(second_close.len(), 1);
    net.fill(1, DATA + 0x100, &[0xee; 64]);
    let before = net.mem(1, 0, MEM);
    let bound = net.nics[1].flows.rx.get(0).map(|f| f.instance);
    net.nics[1].hardware_mut().inbox.extend(first);
    net.nics[1].hardware_mut().inbox.extend(close);
    net.nics[1].poll();
    assert_eq!(net.nics[1].stats().stale_packets, 1);
    assert_eq!(net.mem(1, 0, MEM), before, "node 1 wrote nothing");
    assert_eq!(
        net.nics[1].flows.rx.get(0).map(|f| f.instance),
        bound,
        "the later instance's slot is as it was"
    );
    sent_data(&mut net, 1);
    net.nics[0].hardware_mut().inbox.extend(answer);
    net.nics[0].poll();
    assert_eq!(
        net.nics[0].flows.closing, 1,
        "still waiting for its own answer"
    );
    assert_eq!(net.nics[0].stats().flows_closed, 1);
    net.nics[1].hardware_mut().inbox.extend(second_close);
    net.run(100_000);
    assert_eq!(net.nics[0].stats().flows_closed, 2);
    assert_eq!(net.nics[1].stats().packets_accepted, 2, "each put once");
    assert_eq!(open_slots(&net, 0), (0, 0));
    assert_eq!(open_slots(&net, 1), (0, 0));
}

/// A close that reaches a NIC owed a get's response on that flow's slot
/// (the request acknowledged, the response held back by the close) forgets
/// the flow but keeps the slot: a ninth sender is still refused by the
/// full table, and the response, sent on a new instance, lands in the
/// kept slot. Node 1's other seven senders keep their flows open.
#[test]
fn a_close_keeps_the_slot_a_gets_response_is_owed_on() {
    let mut net = closing(10, 54);
    for node in 2..=8 {
        set_param(&mut net, node, Param::FlowCloseIdleNs, 0);
        post_put(&mut net, (node, 1), 0x100 * node as u64, node as u8, 1);
    }
    post_put(&mut net, (0, 1), 0x100, 1, 1);
    net.run_for_ns(IDLE / 2);
    check_put(&net, (0, 1), 0x100, 1, 1);
    assert_eq!(open_slots(&net, 1).1, 8, "node 1's table is full");
    let close = close_after_idle(&mut net);
    assert!(matches!(
        Packet::parse(&close[0].0),
        Ok(Packet::FlowClose(_))
    ));
    // Node 1 gets 64 bytes from node 0 into its offset 0x400.
    post_get(&mut net, (1, 0), 0x400, 7, 4);
    net.nics[1].poll();
    let request = sent_data(&mut net, 1);
    net.nics[0].hardware_mut().inbox.extend(request);
    net.nics[0].poll();
    assert!(
        sent_data(&mut net, 0)
            .iter()
            .all(|p| Packet::parse(&p.0).is_ok_and(|q| matches!(q, Packet::Ack(_)))),
        "node 0 acks the request and holds the response"
    );
    // (That ack is never delivered, which leaves node 1's request DMA
    // active; had it been, the DMA would have retired: the slot is kept on
    // the count of responses owed either way.)
    net.nics[1].hardware_mut().inbox.extend(close);
    net.nics[1].poll();
    let kept = net.nics[1].flows.rx.get(0).copied();
    assert!(
        kept.is_some_and(|f| f.instance == 0 && f.gets == 1),
        "node 1 forgot the flow, kept the slot: {kept:?}"
    );
    // A ninth sender finds no slot free.
    post_put(&mut net, (9, 1), 0x900, 9, 9);
    net.nics[9].poll();
    let intruder = sent_data(&mut net, 9);
    net.nics[1].hardware_mut().inbox.extend(intruder);
    net.run(100_000);
    assert_eq!(net.word(9, 9).status, Some(Err(ErrorCode::NoPeerSlot)));
    assert_eq!(net.mem(1, DATA + 0x900, 64), vec![0; 64]);
    assert_eq!(net.mem(1, DATA + 0x400, 64), pattern(64, 7));
    assert_eq!(
        net.word(1, 4),
        CompletionWord {
            value: 7,
            status: Some(Ok(()))
        }
    );
    assert_eq!(open_slots(&net, 0), (0, 0));
    assert_eq!(open_slots(&net, 1), (0, 7), "the seven that keep theirs");
}

/// A copy of a refused packet that reaches the receiver after a slot
/// freed there (within the packet lifetime) is refused too, not applied:
/// the receiver opens no slot for the refused sender during its quiet time,
/// not even for a get of its own from that sender. Its sender was told
/// `NoPeerSlot`, and nothing of it is written. Another sender gets the
/// free slot meanwhile; once the quiet time is over, a new put lands.
#[test]
fn a_late_copy_of_a_refused_packet_is_not_applied_when_a_slot_frees() {
    let mut net = closing(10, 57);
    for node in 1..=8 {
        set_param(&mut net, node, Param::FlowCloseIdleNs, 0);
        post_put(&mut net, (node, 0), 0x100 * node as u64, node as u8, 1);
    }
    net.run_for_ns(IDLE / 4);
    assert_eq!(open_slots(&net, 0).1, 8);
    post_put(&mut net, (9, 0), 0x900, 9, 2);
    net.nics[9].poll();
    let refused = sent_data(&mut net, 9);
    net.nics[0].hardware_mut().inbox.extend(refused.clone());
    net.run_for_ns(IDLE / 4);
    assert_eq!(net.word(9, 2).status, Some(Err(ErrorCode::NoPeerSlot)));
    // A slot frees (a reset with node 1 at both ends), and the copy comes.
    assert_eq!(net.mailbox(0, MailboxOp::ResetFlow, [1, 0, 0, 0]), Ok(()));
    assert_eq!(net.mailbox(1, MailboxOp::ResetFlow, [0, 0, 0, 0]), Ok(()));
    post_get(&mut net, (0, 9), 0xa00, 0x0a, 10);
    net.nics[0].poll();
    assert_eq!(net.word(0, 10).status, Some(Err(ErrorCode::NoPeerSlot)));
    let before = net.mem(0, 0, MEM);
    net.nics[0].hardware_mut().inbox.extend(refused);
    net.run_for_ns(IDLE / 4);
    assert_eq!(net.mem(0, 0, MEM), before, "node 0 wrote nothing");
    assert!(net.nics[0].flows.rx.get(9).is_none());
    // Node 1 is not in node 9's quiet bucket: it takes the free slot.
    post_put(&mut net, (1, 0), 0xb00, 0x0b, 11);
    net.run_for_ns(IDLE / 4);
    check_put(&net, (1, 0), 0xb00, 0x0b, 11);
    assert_eq!(net.mailbox(0, MailboxOp::ResetFlow, [1, 0, 0, 0]), Ok(()));
    assert_eq!(net.mailbox(1, MailboxOp::ResetFlow, [0, 0, 0, 0]), Ok(()));
    for n in &mut net.nics {
        n.hardware_mut().now += IDLE;
    }
    post_put(&mut net, (9, 0), 0x900, 0x19, 3);
    net.run(100_000);
    check_put(&net, (9, 0), 0x900, 0x19, 3);
}

/// Every close lost past the retry limit: node 0 ends the instance anyway,
/// while node 1 still follows it; node 0's next put, a new instance, is
/// taken by node 1 as a fresh start, lands once, and its flow then closes.
#[test]
fn a_close_past_the_retry_limit_ends_the_instance_and_the_next_starts_afresh() {
    let mut net = closing(2, 55);
    post_put(&mut net, (0, 1), 0x100, 1, 1);
    net.run_for_ns(IDLE / 2);
    let close = close_after_idle(&mut net);
    assert_eq!(close.len(), 1);
    for _ in 0..64 {
        for n in &mut net.nics {
            n.hardware_mut().now += 200_000_000;
        }
        net.nics[0].poll();
        sent_data(&mut net, 0);
        if open_slots(&net, 0).0 == 0 {
            break;
        }
    }
    assert_eq!(open_slots(&net, 0), (0, 0), "node 0 ended the instance");
    assert_eq!(net.nics[0].flows.closing, 0);
    assert_eq!(open_slots(&net, 1).1, 1, "node 1 never heard of it");
    post_put(&mut net, (0, 1), 0x200, 2, 2);
    net.run(100_000);
    check_put(&net, (0, 1), 0x200, 2, 2);
    assert_eq!(net.nics[1].stats().stale_packets, 0);
    assert_eq!(net.nics[1].stats().packets_accepted, 2);
    assert_eq!(open_slots(&net, 0), (0, 0));
    assert_eq!(open_slots(&net, 1), (0, 0));
}

/// `RESET_FLOW` at the sender only: its next put opens a new instance,
/// which the receiver, still following the old one, takes from 0.
#[test]
fn a_reset_at_the_sender_alone_starts_a_flow_the_receiver_takes() {
    let mut net = closing(2, 56);
    post_put(&mut net, (0, 1), 0x100, 1, 1);
    net.run_for_ns(IDLE / 2);
    assert_eq!(net.mailbox(0, MailboxOp::ResetFlow, [1, 0, 0, 0]), Ok(()));
    assert_eq!(open_slots(&net, 1).1, 1);
    post_put(&mut net, (0, 1), 0x200, 2, 2);
    net.run(100_000);
    check_put(&net, (0, 1), 0x200, 2, 2);
    assert_eq!(net.nics[1].stats().packets_accepted, 2);
    assert_eq!(open_slots(&net, 1), (0, 0));
}

mod lossy {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]
        /// Puts and gets among four NICs, separated by random waits that
        /// let flows close and open again, on a network that drops,
        /// duplicates, corrupts and reorders packets (closes and their
        /// answers too), within the rail's packet lifetime (half the close
        /// idle time) but longer than the retransmission timeout, so that
        /// copies of a close overtake one another: every transfer's bytes
        /// land and its events fire, each packet is applied once, and once
        /// everything is idle no NIC holds a flow slot or a close.
        #[test]
        fn transfers_among_idle_gaps_land_exactly_once_and_every_slot_comes_back(
            seed in any::<u64>(),
            drop in 0u32..250,
            duplicate in 0u32..250,
            corrupt in 0u32..100,
            delay in 0u32..300,
            ops in proptest::collection::vec((0usize..4, 1usize..4, any::<bool>(), 0u64..3 * IDLE), 1..24),
        ) {
            let mut net = closing(4, seed);
            for node in 0..4 {
                set_param(&mut net, node, Param::RetryTimeoutNs, IDLE / 10);
            }
            net.faults = Faults { drop, duplicate, corrupt, delay, delay_ns: IDLE * 2 / 5 };
            for (i, &(a, hop, get, gap)) in ops.iter().enumerate() {
                let b = (a + hop) % 4;
                let (dst, seed, word) = (0x100 * i as u64, i as u8 + 1, i as u32 + 1);
                if get {
                    post_get(&mut net, (a, b), dst, seed, word);
                } else {
                    post_put(&mut net, (a, b), dst, seed, word);
                }
                net.run_for_ns(gap);
            }
            net.run(1_000_000);
            let done = |seed: u8| CompletionWord { value: u64::from(seed), status: Some(Ok(())) };
            for (i, &(a, hop, get, _)) in ops.iter().enumerate() {
                let b = (a + hop) % 4;
                let (dst, seed, word) = (0x100 * i as u64, i as u8 + 1, i as u32 + 1);
                if get {
                    prop_assert_eq!(net.mem(a, DATA + dst, 64), pattern(64, seed));
                    prop_assert_eq!(net.word(a, word.into()), done(seed));
                } else {
                    check_put(&net, (a, b), dst, seed, word);
                }
            }
            // A put is one packet, a get two (request, response).
            let packets: u64 = ops.iter().map(|op| if op.2 { 2 } else { 1 }).sum();
            let accepted: u64 = net.nics.iter().map(|n| n.stats().packets_accepted).sum();
            prop_assert_eq!(accepted, packets);
            for node in 0..4 {
                prop_assert_eq!(open_slots(&net, node), (0, 0));
                prop_assert_eq!(net.nics[node].flows.closing, 0);
            }
        }

        /// Ten NICs of eight slots each, puts between random pairs close
        /// together in time, on a lossy, reordering network: some meet a
        /// full table. Every put either lands whole with both its events
        /// `Ok`, or fails at its source (`NoPeerSlot`, or `PeerUnreachable`
        /// for a later packet of a refused flow) having written
        /// nothing at its target, not even its destination event (a late
        /// copy of a refused packet never lands); each packet is applied
        /// at most once, and in the end every slot comes back.
        #[test]
        fn under_slot_pressure_a_put_lands_whole_or_fails_having_written_nothing(
            seed in any::<u64>(),
            drop in 0u32..150,
            duplicate in 0u32..150,
            delay in 0u32..200,
            ops in proptest::collection::vec((1usize..10, 1usize..10, any::<bool>(), 0u64..IDLE / 8), 1..28),
        ) {
            let mut net = closing(10, seed);
            for node in 0..10 {
                set_param(&mut net, node, Param::RetryTimeoutNs, IDLE / 10);
            }
            net.faults = Faults { drop, duplicate, corrupt: 0, delay, delay_ns: IDLE * 2 / 5 };
            // Half the puts go to node 0, which nine senders can reach.
            let target = |(a, hop, hot): (usize, usize, bool)| if hot { 0 } else { (a + hop) % 10 };
            for (i, &(a, hop, hot, gap)) in ops.iter().enumerate() {
                let b = target((a, hop, hot));
                post_put(&mut net, (a, b), 0x100 * i as u64, i as u8 + 1, i as u32 + 1);
                net.run_for_ns(gap);
            }
            net.run(1_000_000);
            let mut landed = 0;
            for (i, &(a, hop, hot, _)) in ops.iter().enumerate() {
                let b = target((a, hop, hot));
                let (dst, seed, word) = (0x100 * i as u64, i as u8 + 1, i as u32 + 1);
                match net.word(a, word.into()).status {
                    Some(Ok(())) => {
                        check_put(&net, (a, b), dst, seed, word);
                        landed += 1;
                    }
                    // Refused, or (a later packet of a refused flow after
                    // the quiet time) ended at the retry limit.
                    Some(Err(ErrorCode::NoPeerSlot | ErrorCode::PeerUnreachable)) => {
                        prop_assert_eq!(net.mem(b, DATA + dst, 64), vec![0; 64], "put {} wrote", i);
                        // (The event writes `seed`, never 0.)
                        prop_assert_eq!(net.word(b, word.into()).value, 0, "put {} fired", i);
                    }
                    other => prop_assert!(false, "put {i}: {other:?}"),
                }
            }
            let accepted: u64 = net.nics.iter().map(|n| n.stats().packets_accepted).sum();
            prop_assert_eq!(accepted, landed);
            for node in 0..10 {
                prop_assert_eq!(open_slots(&net, node), (0, 0));
            }
        }
    }
}
