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
#[test]
fn a_put_posted_while_its_flow_closes_waits_and_goes_on_a_new_instance() {
    let mut net = closing(2, 52);
    post_put(&mut net, (0, 1), 0x100, 1, 1);
    net.nics[0].poll();
    let first = sent_data(&mut net, 0);
    let old = instance_of(&first);
    for p in first {
        net.nics[1].hardware_mut().inbox.push_back(p);
    }
    net.run_for_ns(IDLE / 2);
    check_put(&net, (0, 1), 0x100, 1, 1);
    // The idle time passes: node 0 sends its close, and nothing else.
    let close = close_after_idle(&mut net);
    assert_eq!(close.len(), 1);
    assert!(
        matches!(Packet::parse(&close[0].0), Ok(Packet::FlowClose(c)) if c.flow == old && c.next_seq == 1)
    );
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
    assert!(
        matches!(Packet::parse(&answer[0].0), Ok(Packet::FlowCloseAck(c)) if c.closed && c.flow == old)
    );
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

/// A copy of a packet of a closed instance, and a copy of its close,
/// reaching node 1 once a later instance is open there: the packet is
/// dropped (node 1's memory unchanged), the close answered "kept", and
/// that answer changes nothing at node 0, whose next put still lands.
#[test]
fn stale_packets_and_closes_of_an_earlier_instance_do_nothing() {
    let mut net = closing(2, 53);
    post_put(&mut net, (0, 1), 0x100, 1, 1);
    net.nics[0].poll();
    let first = sent_data(&mut net, 0);
    net.nics[1].hardware_mut().inbox.extend(first.clone());
    net.run_for_ns(IDLE / 2);
    let close = close_after_idle(&mut net);
    net.nics[1].hardware_mut().inbox.extend(close.clone());
    net.run_for_ns(IDLE / 2);
    assert_eq!(open_slots(&net, 0), (0, 0));
    // A second instance: its put is under way when the copies arrive.
    post_put(&mut net, (0, 1), 0x200, 2, 2);
    net.run_for_ns(IDLE / 2);
    check_put(&net, (0, 1), 0x200, 2, 2);
    net.fill(1, DATA + 0x100, &[0xee; 64]);
    let before = net.mem(1, 0, MEM);
    net.nics[1].hardware_mut().inbox.extend(first);
    net.nics[1].hardware_mut().inbox.extend(close);
    net.nics[1].poll();
    assert_eq!(net.nics[1].stats().stale_packets, 1);
    assert_eq!(net.mem(1, 0, MEM), before, "node 1 wrote nothing");
    let answers = sent_data(&mut net, 1);
    assert!(
        answers
            .iter()
            .any(|p| matches!(Packet::parse(&p.0), Ok(Packet::FlowCloseAck(c)) if !c.closed))
    );
    net.nics[0].hardware_mut().inbox.extend(answers);
    net.nics[0].poll();
    assert_eq!(open_slots(&net, 0).0, 1, "node 0's flow stays open");
    post_put(&mut net, (0, 1), 0x300, 3, 3);
    net.run(100_000);
    check_put(&net, (0, 1), 0x300, 3, 3);
    assert_eq!(net.nics[1].stats().packets_accepted, 3, "each put once");
    assert_eq!(open_slots(&net, 1), (0, 0));
}

/// A close that reaches a NIC whose get to the closing node awaits its
/// response is answered "kept": the receive slot the get took stays, and
/// the response lands.
#[test]
fn a_close_is_kept_while_a_get_awaits_its_response_on_the_flow() {
    let mut net = closing(2, 54);
    post_put(&mut net, (0, 1), 0x100, 1, 1);
    net.run_for_ns(IDLE / 2);
    check_put(&net, (0, 1), 0x100, 1, 1);
    let close = close_after_idle(&mut net);
    assert!(matches!(
        Packet::parse(&close[0].0),
        Ok(Packet::FlowClose(_))
    ));
    // Node 1 gets 64 bytes from node 0's offset 0x800 into its 0x400.
    net.fill(0, DATA + 0x800, &pattern(64, 7));
    arm(&mut net, 1, 4, 44);
    net.post(
        1,
        Command::Dma(DmaCommand {
            kind: DmaKind::Get,
            len: 64,
            vp: 0,
            src_addr: VA_DATA + 0x800,
            dst_addr: VA_DATA + 0x400,
            src_event: None,
            dst_event: Some(EventId(4)),
            wake: false,
        }),
    );
    net.nics[1].poll();
    let request = sent_data(&mut net, 1);
    net.nics[1].hardware_mut().inbox.extend(close);
    net.nics[1].poll();
    let answer = sent_data(&mut net, 1);
    assert!(
        answer
            .iter()
            .any(|p| matches!(Packet::parse(&p.0), Ok(Packet::FlowCloseAck(c)) if !c.closed)),
        "kept"
    );
    assert_eq!(open_slots(&net, 1).1, 1, "node 1 keeps its receive slot");
    net.nics[0].hardware_mut().inbox.extend(answer);
    net.nics[0].hardware_mut().inbox.extend(request);
    net.run(100_000);
    assert_eq!(net.mem(1, DATA + 0x400, 64), pattern(64, 7));
    assert_eq!(
        net.word(1, 4),
        CompletionWord {
            value: 44,
            status: Some(Ok(()))
        }
    );
    assert_eq!(open_slots(&net, 0), (0, 0));
    assert_eq!(open_slots(&net, 1), (0, 0));
}

mod lossy {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(48))]
        /// Puts among four NICs, separated by random waits that let flows
        /// close and open again, on a network that drops, duplicates,
        /// corrupts and reorders packets (closes and their answers too),
        /// within the rail's packet lifetime: every put's
        /// bytes land, its events fire, each packet is applied once, and
        /// once everything is idle no NIC holds a flow slot.
        #[test]
        fn puts_among_idle_gaps_land_exactly_once_and_every_slot_comes_back(
            seed in any::<u64>(),
            drop in 0u32..250,
            duplicate in 0u32..250,
            corrupt in 0u32..100,
            delay in 0u32..300,
            puts in proptest::collection::vec((0usize..4, 1usize..4, 0u64..3 * IDLE), 1..24),
        ) {
            let mut net = closing(4, seed);
            net.faults = Faults { drop, duplicate, corrupt, delay };
            for (i, (from, hop, gap)) in puts.iter().enumerate() {
                let to = (from + hop) % 4;
                post_put(&mut net, (*from, to), 0x100 * i as u64, i as u8 + 1, i as u32 + 1);
                net.run_for_ns(*gap);
            }
            net.run(1_000_000);
            for (i, (from, hop, _)) in puts.iter().enumerate() {
                check_put(&net, (*from, (from + hop) % 4), 0x100 * i as u64, i as u8 + 1, i as u32 + 1);
            }
            let accepted: u64 = net.nics.iter().map(|n| n.stats().packets_accepted).sum();
            prop_assert_eq!(accepted, puts.len() as u64);
            for node in 0..4 {
                prop_assert_eq!(open_slots(&net, node), (0, 0));
            }
        }
    }
}
