//! The per-peer flow table (docs/abi.md §8.1, "Flow slots"): node numbers
//! beyond the table's size, a sender and a receiver whose slots are all
//! taken, `RESET_FLOW` freeing a slot, a broadcast wider than the table.
//! The test engine has 8 slots per direction. Idle flows are never closed
//! here (`SET_PARAM` 6 = 0): these tests are about slots kept; `close.rs`
//! tests the closing.

use super::*;

/// `nodes` NICs that keep every flow they open.
fn keeping(nodes: usize, seed: u64) -> Net {
    let mut net = Net::new(nodes, seed);
    for node in 0..nodes {
        assert_eq!(net.mailbox(node, MailboxOp::SetParam, [6, 0, 0, 0]), Ok(()));
    }
    net
}

/// Node `from` puts 64 bytes of `pattern(64, seed)` from its offset 0
/// to offset `dst` of node `to`, completion word `word` written with 1.
fn put_from(net: &mut Net, from: usize, to: u32, dst: u64, word: u32, seed: u8) {
    let data = pattern(64, seed);
    net.fill(from, DATA, &data);
    arm(net, from, word, 1);
    net.post(from, put(to, 0, dst, 64, Some(word), None));
}

/// Node `node` gets 64 bytes from offset 0x800 of node 9 into `dst`,
/// completion word 4 armed to be written with 9.
fn get_from_9(net: &mut Net, node: usize, dst: u64) {
    arm(net, node, 4, 9);
    net.post(
        node,
        Command::Dma(DmaCommand {
            kind: DmaKind::Get,
            len: 64,
            vp: 9,
            src_addr: VA_DATA + 0x800,
            dst_addr: dst,
            src_event: None,
            dst_event: Some(EventId(4)),
            wake: false,
        }),
    );
}

/// Node `from` broadcasts `len` bytes from its offset 0 to offset 0x8000
/// of nodes `low..=high`, completion word 1 armed to be written with 5.
fn bcast(net: &mut Net, from: usize, (low, high): (u16, u16), len: u32) {
    arm(net, from, 1, 5);
    net.post(
        from,
        Command::Bcast {
            len,
            low_node: low,
            high_node: high,
            src_addr: VA_DATA,
            dst_addr: VA_DATA + 0x8000,
            src_event: Some(EventId(1)),
            dst_event: None,
        },
    );
}

fn ok() -> Option<Result<(), ErrorCode>> {
    Some(Ok(()))
}

/// Every node puts to the node `k` above it (mod `nodes`), for each `k` in
/// `hops`, to its own offset: `(k, from)` lands at `0x100 * k` of the
/// target, from a pattern seeded by the sender.
fn scatter(net: &mut Net, from: usize, hops: &[u32], word_base: u32) {
    let nodes = net.nics.len() as u32;
    for (i, &k) in hops.iter().enumerate() {
        let to = (from as u32 + k) % nodes;
        put_from(
            net,
            from,
            to,
            0x100 * u64::from(k),
            word_base + i as u32,
            from as u8,
        );
        net.run(100_000);
    }
}

/// Nodes numbered past the table's size are peers like any other: on a
/// 12-node fabric with 8 slots, nodes 9, 10 and 11 exchange puts with
/// node 0 and with each other, every byte lands, every put completes
/// cleanly.
#[test]
fn nodes_numbered_past_the_table_size_talk_freely() {
    let mut net = keeping(12, 3);
    for (from, hops) in [(0usize, [9u32, 10, 11]), (9, [3, 1, 2]), (11, [1, 10, 9])] {
        scatter(&mut net, from, &hops, 8);
        for (i, &k) in hops.iter().enumerate() {
            let to = (from + k as usize) % 12;
            assert_eq!(net.word(from, 8 + i as u64).status, ok(), "{from} -> {to}");
            assert_eq!(
                net.mem(to, DATA + 0x100 * u64::from(k), 64),
                pattern(64, from as u8),
                "{from} -> {to}"
            );
        }
    }
}

/// A sender with every slot taken refuses a ninth peer: the put completes
/// at once with `NoPeerSlot`, nothing reaches the ninth node (its memory
/// around the target unchanged), and the eight flows it has still work.
/// `RESET_FLOW` on both ends frees a slot; the ninth peer then gets in.
#[test]
fn a_sender_with_every_slot_taken_refuses_a_new_peer_until_a_reset() {
    let mut net = keeping(10, 4);
    let hops: Vec<u32> = (1..=8).collect();
    scatter(&mut net, 0, &hops, 0);
    for i in 0..8 {
        assert_eq!(net.word(0, i).status, ok());
    }
    let before = net.mem(9, DATA, 0x1000);
    put_from(&mut net, 0, 9, 0x900, 9, 0x55);
    net.run(100_000);
    assert_eq!(
        net.word(0, 9),
        CompletionWord {
            value: 1,
            status: Some(Err(ErrorCode::NoPeerSlot))
        }
    );
    assert_eq!(net.mem(9, DATA, 0x1000), before, "nothing reached node 9");
    assert!(
        net.errors(0)
            .iter()
            .any(|e| e.code == ErrorCode::NoPeerSlot && e.kind == ErrorKind::Command)
    );
    // The existing flows are untouched: another put to node 8 lands.
    put_from(&mut net, 0, 8, 0xa00, 10, 0x66);
    net.run(100_000);
    assert_eq!(net.word(0, 10).status, ok());
    assert_eq!(net.mem(8, DATA + 0xa00, 64), pattern(64, 0x66));

    // Reset the flows between 0 and 1 on both ends: a slot frees and
    // node 9 gets in (its flow starts at sequence number 0 on both
    // sides).
    assert_eq!(net.mailbox(0, MailboxOp::ResetFlow, [1, 0, 0, 0]), Ok(()));
    assert_eq!(net.mailbox(1, MailboxOp::ResetFlow, [0, 0, 0, 0]), Ok(()));
    put_from(&mut net, 0, 9, 0x900, 11, 0x77);
    net.run(100_000);
    assert_eq!(net.word(0, 11).status, ok());
    assert_eq!(net.mem(9, DATA + 0x900, 64), pattern(64, 0x77));
    assert_eq!(net.mem(9, DATA, 0x900), before[..0x900].to_vec());
    // Every slot is taken again (1 gave its slot to 9): 1 is refused.
    put_from(&mut net, 0, 1, 0xb00, 12, 0x88);
    net.run(100_000);
    assert_eq!(net.word(0, 12).status, Some(Err(ErrorCode::NoPeerSlot)));
}

/// A receiver with every slot taken refuses a ninth sender: the sender's
/// put completes with `NoPeerSlot` (acknowledged as rejected, not retried
/// until the flow breaks), the receiver's memory is unchanged, and its
/// eight senders still get through.
#[test]
fn a_receiver_with_every_slot_taken_refuses_a_new_sender() {
    let mut net = keeping(10, 5);
    for from in 1..=8 {
        put_from(&mut net, from, 0, 0x100 * from as u64, 1, from as u8);
        net.run(100_000);
        assert_eq!(net.word(from, 1).status, ok());
    }
    let before = net.mem(0, DATA, 0x2000);
    put_from(&mut net, 9, 0, 0x1000, 1, 0x99);
    net.run(100_000);
    assert_eq!(net.word(9, 1).status, Some(Err(ErrorCode::NoPeerSlot)));
    assert_eq!(net.nics[9].stats().retransmits, 0, "refused at once");
    assert_eq!(net.mem(0, DATA, 0x2000), before, "node 0 wrote nothing");
    put_from(&mut net, 3, 0, 0x1800, 2, 0x33);
    net.run(100_000);
    assert_eq!(net.word(3, 2).status, ok());
    assert_eq!(net.mem(0, DATA + 0x1800, 64), pattern(64, 0x33));
}

/// A broadcast spans at most as many nodes as the table has slots: a
/// wider one is refused with `NoPeerSlot` before anything is sent.
#[test]
fn a_broadcast_wider_than_the_table_is_refused() {
    let mut net = keeping(10, 6);
    net.fill(0, DATA, &pattern(32, 1));
    bcast(&mut net, 0, (0, 9), 32);
    net.run(100_000);
    assert_eq!(net.word(0, 1).status, Some(Err(ErrorCode::NoPeerSlot)));
    for node in 1..10 {
        assert_eq!(net.mem(node, DATA + 0x8000, 32), vec![0; 32]);
    }
}

/// A receiver's refusal leaves nothing behind on either side: once a slot
/// frees there (`RESET_FLOW` with another node on both ends), the refused
/// sender's next put is refused again while the receiver's quiet time
/// after a refusal lasts (2 s: a copy of the refused packet could still
/// come), and after it starts a fresh flow and lands.
#[test]
fn a_refused_sender_gets_in_once_a_slot_frees_and_the_quiet_time_passes() {
    let mut net = keeping(10, 7);
    for from in 1..=8 {
        put_from(&mut net, from, 0, 0x100 * from as u64, 1, from as u8);
        net.run(100_000);
    }
    put_from(&mut net, 9, 0, 0x1000, 2, 0x99);
    net.run(100_000);
    assert_eq!(net.word(9, 2).status, Some(Err(ErrorCode::NoPeerSlot)));
    assert_eq!(net.mailbox(0, MailboxOp::ResetFlow, [1, 0, 0, 0]), Ok(()));
    assert_eq!(net.mailbox(1, MailboxOp::ResetFlow, [0, 0, 0, 0]), Ok(()));
    put_from(&mut net, 9, 0, 0x1000, 3, 0x9a);
    net.run(100_000);
    assert_eq!(net.word(9, 3).status, Some(Err(ErrorCode::NoPeerSlot)));
    assert_eq!(net.mem(0, DATA + 0x1000, 64), vec![0; 64]);
    for n in &mut net.nics {
        n.hardware_mut().now += 2_000_000_000;
    }
    put_from(&mut net, 9, 0, 0x1000, 3, 0x9a);
    net.run(100_000);
    assert_eq!(net.word(9, 3).status, ok());
    assert_eq!(net.mem(0, DATA + 0x1000, 64), pattern(64, 0x9a));
    assert_eq!(net.nics[9].stats().retransmits, 0);
}

/// A get whose owner has no flow slot for the requester is rejected with
/// `NoPeerSlot` (not refused for a later try: no later try would find
/// one), and a requester with no receive slot for the owner refuses the
/// get at once: its response could not come back.
#[test]
fn a_get_without_a_slot_either_way_fails_with_no_peer_slot() {
    let mut net = keeping(10, 8);
    // Node 9 sends to 0..=7: its transmit table is full.
    let hops: Vec<u32> = (1..=8).collect();
    scatter(&mut net, 9, &hops, 0);
    net.fill(9, DATA + 0x800, &pattern(64, 0x42));
    let before = net.mem(8, DATA, 0x100);
    // Node 8 gets from 9: 9 has no transmit slot for the response.
    get_from_9(&mut net, 8, VA_DATA);
    net.run(100_000);
    assert_eq!(net.word(8, 4).status, Some(Err(ErrorCode::NoPeerSlot)));
    assert_eq!(net.mem(8, DATA, 0x100), before, "nothing came back");
    assert!(
        net.errors(9)
            .iter()
            .any(|e| e.code == ErrorCode::NoPeerSlot && e.kind == ErrorKind::Inbound)
    );
    // The rejection was the flow's own (9 has a receive slot for 8): the
    // flow from 8 goes on, every later put lands, and none is retried.
    for (i, seed) in [(0u32, 0x51u8), (1, 0x52), (2, 0x53)] {
        put_from(&mut net, 8, 9, 0x2000 + 0x100 * u64::from(i), 5 + i, seed);
        net.run(100_000);
        assert_eq!(net.word(8, 5 + u64::from(i)).status, ok());
        assert_eq!(
            net.mem(9, DATA + 0x2000 + 0x100 * u64::from(i), 64),
            pattern(64, seed)
        );
    }
    assert_eq!(net.nics[8].stats().retransmits, 0);

    // Node 0 hears from 1..=8: its receive table is full; its get from 9
    // is refused before it is sent.
    let mut net = keeping(10, 9);
    for from in 1..=8 {
        put_from(&mut net, from, 0, 0x100 * from as u64, 1, from as u8);
        net.run(100_000);
    }
    get_from_9(&mut net, 0, VA_DATA + 0x2000);
    net.run(100_000);
    assert_eq!(net.word(0, 4).status, Some(Err(ErrorCode::NoPeerSlot)));
    assert_eq!(
        net.nics[9].stats().packets_accepted,
        0,
        "no request went out"
    );
}

/// A broadcast destination with no receive slot for the source answers
/// with `NoPeerSlot` and writes nothing; the other destinations get every
/// byte, and the broadcast completes once, with the error.
#[test]
fn a_broadcast_destination_without_a_slot_refuses_it_alone() {
    let mut net = keeping(10, 10);
    // Node 9 hears from 0..=7: its receive table is full.
    for from in 0..=7 {
        put_from(&mut net, from, 9, 0x100 * from as u64, 1, from as u8);
        net.run(100_000);
    }
    let before = net.mem(9, DATA + 0x8000, 0x1000);
    net.fill(8, DATA, &pattern(3000, 0x21));
    bcast(&mut net, 8, (2, 9), 3000);
    net.run(100_000);
    assert_eq!(
        net.word(8, 1),
        CompletionWord {
            value: 5,
            status: Some(Err(ErrorCode::NoPeerSlot))
        }
    );
    assert_eq!(net.nics[8].stats().dmas_completed, 1);
    for node in 2..=7 {
        assert_eq!(
            net.mem(node, DATA + 0x8000, 3000),
            pattern(3000, 0x21),
            "node {node}"
        );
    }
    assert_eq!(
        net.mem(9, DATA + 0x8000, 0x1000),
        before,
        "node 9 wrote nothing"
    );
}
