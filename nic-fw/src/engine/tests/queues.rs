//! Queued DMAs and input queues: a full queue, the counter wrap, refused items.

use super::*;

/// Queued DMAs from 3 senders into a 2-slot queue on node 0: the queue is
/// full most of the time, senders are nacked and retry; every item arrives
/// exactly once, each sender's items in order.
#[test]
fn queued_dmas_fill_a_small_queue_without_loss_or_reordering() {
    let mut net = Net::new(4, 14);
    // The consumer drains between rounds in which time may jump far ahead:
    // refusals may last as long as they like here.
    set_param(&mut net, 0, Param::QueueWaitNs, 3_600_000_000_000);
    let base = VA_DATA + 0x20000;
    let slot = 64u32;
    net.post(
        0,
        Command::QueueInit {
            queue: 2,
            slots: 2,
            slot_size: slot,
            event: None,
            base,
        },
    );
    net.run(100);
    let per_sender = 6u32;
    for sender in 1..4usize {
        for i in 0..per_sender {
            let payload = [sender as u8, i as u8, 0xab, 0xcd];
            net.fill(sender, DATA + 64 * i as u64, &payload);
            net.post(
                sender,
                Command::Dma(DmaCommand {
                    kind: DmaKind::Queued(2),
                    len: 4,
                    vp: 0,
                    src_addr: VA_DATA + 64 * i as u64,
                    dst_addr: 0,
                    src_event: None,
                    dst_event: None,
                    wake: false,
                }),
            );
        }
    }
    let header = DATA + 0x20000;
    let mut got: Vec<(usize, u8)> = Vec::new();
    let mut consumed = 0u64;
    for _ in 0..200 {
        // Senders of a full queue retry until it drains: no quiescence.
        net.run_for(2_000);
        let produced = u64::from_le_bytes(net.mem(0, header, 8).try_into().unwrap());
        assert!(produced - consumed <= 2, "never more items than slots");
        while consumed < produced {
            let at = header + 64 + (consumed % 2) * slot as u64;
            let item = net.mem(0, at, 12);
            assert_eq!(
                u32::from_le_bytes(item[0..4].try_into().unwrap()),
                4,
                "item length"
            );
            let src_node = u16::from_le_bytes(item[4..6].try_into().unwrap()) as usize;
            assert_eq!(item[8] as usize, src_node, "payload names its sender");
            got.push((src_node, item[9]));
            consumed += 1;
        }
        net.fill(0, header + 8, &consumed.to_le_bytes());
        if got.len() == 3 * per_sender as usize {
            break;
        }
    }
    assert_eq!(got.len(), 18, "no loss");
    for sender in 1..4 {
        let seq: Vec<u8> = got
            .iter()
            .filter(|(s, _)| *s == sender)
            .map(|(_, i)| *i)
            .collect();
        assert_eq!(
            seq,
            (0..per_sender as u8).collect::<Vec<_>>(),
            "sender {sender} in order"
        );
    }
}

/// A QDMA input queue whose slot count is not a power of two, initialised
/// over a header whose consumer count is all ones (e.g. memory filled with
/// 0xff): the producer count starts at `u64::MAX` and wraps to 0 after one
/// item. `index % slots` is not continuous across that wrap (`u64::MAX % 3`
/// and `0 % 3` are both slot 0), so the NIC must not write item 1 before
/// item 0 is consumed; every item arrives, in order, none overwritten.
#[test]
fn queued_dmas_across_the_counter_wrap_do_not_overwrite_unread_items() {
    let mut net = Net::new(2, 15);
    // A patient queue: the consumer drains between long runs.
    set_param(&mut net, 0, Param::QueueWaitNs, 3_600_000_000_000);
    let base = VA_DATA + 0x20000;
    let header = DATA + 0x20000;
    let slot = 64u32;
    let slots = 3u64;
    net.fill(0, header + 8, &u64::MAX.to_le_bytes());
    net.post(
        0,
        Command::QueueInit {
            queue: 1,
            slots: slots as u32,
            slot_size: slot,
            event: None,
            base,
        },
    );
    net.run(100);
    assert_eq!(
        u64::from_le_bytes(net.mem(0, header, 8).try_into().unwrap()),
        u64::MAX,
        "the producer count starts at the consumer count"
    );
    let items = 4u8;
    for i in 0..items {
        net.fill(1, DATA + 64 * u64::from(i), &[0x5a, i]);
        net.post(
            1,
            Command::Dma(DmaCommand {
                kind: DmaKind::Queued(1),
                len: 2,
                vp: 0,
                src_addr: VA_DATA + 64 * u64::from(i),
                dst_addr: 0,
                src_event: None,
                dst_event: None,
                wake: false,
            }),
        );
    }
    // Nothing is consumed yet: the first item must still be intact however
    // long the sender retries.
    net.run_for(2_000);
    let first = net.mem(0, header + 64 + (u64::MAX % slots) * u64::from(slot), 10);
    assert_eq!(&first[8..10], &[0x5a, 0], "item 0 not overwritten");
    let mut consumed = u64::MAX;
    let mut got = Vec::new();
    for _ in 0..100 {
        net.run_for(2_000);
        let produced = u64::from_le_bytes(net.mem(0, header, 8).try_into().unwrap());
        assert!(produced.wrapping_sub(consumed) <= slots);
        while consumed != produced {
            let at = header + 64 + (consumed % slots) * u64::from(slot);
            let item = net.mem(0, at, 10);
            assert_eq!(&item[0..4], &2u32.to_le_bytes(), "item length");
            assert_eq!(item[8], 0x5a);
            got.push(item[9]);
            consumed = consumed.wrapping_add(1);
        }
        net.fill(0, header + 8, &consumed.to_le_bytes());
        if got.len() == usize::from(items) {
            break;
        }
    }
    assert_eq!(got, (0..items).collect::<Vec<_>>(), "every item, in order");
    assert!(net.errors(0).is_empty() && net.errors(1).is_empty());
}

/// A queued DMA of `len` bytes from `src` (offset in the data region) to
/// input queue `queue`, with completion event `src_event`.
fn qdma(queue: u8, src: u64, len: u32, src_event: Option<u32>) -> Command {
    Command::Dma(DmaCommand {
        kind: DmaKind::Queued(queue),
        len,
        vp: 1,
        src_addr: VA_DATA + src,
        dst_addr: 0,
        src_event: src_event.map(EventId),
        dst_event: None,
        wake: false,
    })
}

/// Node 0 sends one queued item (its data offset 0, 2 bytes) to node 1's
/// queue 2, its completion word 1 written with 5.
fn send_one_item(net: &mut Net) {
    net.post(
        0,
        Command::ArmEvent {
            event: EventId(1),
            count: 1,
            action: write_action(1, 5),
        },
    );
    net.post(0, qdma(2, 0, 2, Some(1)));
}

/// Input queue 2 of `slots` 64-byte slots on `node`, at data offset
/// 0x20000; returns the physical address of its header.
fn small_queue(net: &mut Net, node: usize, slots: u32) -> u64 {
    net.post(
        node,
        Command::QueueInit {
            queue: 2,
            slots,
            slot_size: 64,
            event: None,
            base: VA_DATA + 0x20000,
        },
    );
    net.run(100);
    DATA + 0x20000
}

/// The items in queue 2 of `node` (its header at `header`), in slot order:
/// each item's first payload byte.
fn queue_items(net: &Net, node: usize, header: u64, slots: u64) -> Vec<u8> {
    let produced = u64::from_le_bytes(net.mem(node, header, 8).try_into().unwrap());
    (0..produced)
        .map(|i| net.mem(node, header + 64 + (i % slots) * 64 + 8, 1)[0])
        .collect()
}

/// Three items for a two-slot queue nobody drains, then a plain put in the
/// same flow: the third item is refused for now, and the put behind it
/// lands and completes anyway (no head-of-line blocking). Once the queue
/// drains, the refused item goes again and lands, in order.
#[test]
fn a_refused_item_does_not_block_the_flow_and_goes_again() {
    let mut net = Net::new(2, 31);
    let header = small_queue(&mut net, 1, 2);
    for i in 0..3u8 {
        net.fill(0, DATA + 64 * u64::from(i), &[i, 0xa5]);
        net.post(0, qdma(2, 64 * u64::from(i), 2, None));
    }
    net.post(
        0,
        Command::ArmEvent {
            event: EventId(1),
            count: 1,
            action: write_action(1, 7),
        },
    );
    net.fill(0, DATA + 0x1000, &pattern(300, 9));
    net.post(0, put(1, 0x1000, 0x3000, 300, Some(1), None));
    // Rounds without time passing: the put is through, the item waits.
    for _ in 0..50 {
        for i in 0..2 {
            net.nics[i].poll();
            let out = sent_data(&mut net, i);
            let to = 1 - i;
            for p in out {
                net.nics[to].hardware_mut().inbox.push_back(p);
            }
        }
    }
    assert_eq!(net.mem(1, DATA + 0x3000, 300), pattern(300, 9));
    assert_eq!(
        net.word(0, 1),
        CompletionWord {
            value: 7,
            status: Some(Ok(()))
        }
    );
    assert_eq!(queue_items(&net, 1, header, 2), [0, 1]);
    assert!(net.nics[1].stats().packets_refused >= 1);
    // The consumer takes both; the refused item lands after them, in the
    // slot the first one left.
    net.fill(1, header + 8, &2u64.to_le_bytes());
    net.run(100_000);
    assert_eq!(
        u64::from_le_bytes(net.mem(1, header, 8).try_into().unwrap()),
        3
    );
    assert_eq!(net.mem(1, header + 64 + 8, 2), [2, 0xa5]);
    assert!(net.errors(0).is_empty() && net.errors(1).is_empty());
}

/// An item refused for longer than the queue wait fails with `QueueFull`,
/// exactly once, and nothing of it is written; the flow stays whole.
#[test]
fn an_item_refused_past_the_queue_wait_fails_with_queue_full() {
    let mut net = Net::new(2, 32);
    set_param(&mut net, 1, Param::QueueWaitNs, 1_000_000);
    let header = small_queue(&mut net, 1, 2);
    for i in 0..3u8 {
        net.fill(0, DATA + 64 * u64::from(i), &[i, 0x5a]);
        net.post(
            0,
            Command::ArmEvent {
                event: EventId(u32::from(i) + 1),
                count: 1,
                action: write_action(u64::from(i) + 1, 40 + u64::from(i)),
            },
        );
        net.post(0, qdma(2, 64 * u64::from(i), 2, Some(u32::from(i) + 1)));
    }
    let slots_before = net.mem(1, header, 64 + 3 * 64);
    net.run(100_000);
    assert_eq!(net.word(0, 1).value, 40);
    assert_eq!(net.word(0, 2).value, 41);
    assert_eq!(net.word(0, 1).status, Some(Ok(())));
    assert_eq!(net.word(0, 2).status, Some(Ok(())));
    assert_eq!(
        net.word(0, 3),
        CompletionWord {
            value: 42,
            status: Some(Err(ErrorCode::QueueFull))
        }
    );
    // Two items, and not a byte of the third anywhere in the queue.
    assert_eq!(queue_items(&net, 1, header, 2), [0, 1]);
    let after = net.mem(1, header, 64 + 3 * 64);
    assert_eq!(
        after[64 + 2 * 64..],
        slots_before[64 + 2 * 64..],
        "past the slots"
    );
    assert_eq!(net.nics[0].stats().dmas_completed, 3);
    // The flow is whole: a put still goes through.
    put_and_check(&mut net, 100);
}

/// An item sent before its queue is initialised waits for it (the two are
/// unordered: the sender cannot know), and lands once it exists.
#[test]
fn an_item_sent_before_its_queue_exists_lands_once_it_does() {
    let mut net = Net::new(2, 33);
    set_param(&mut net, 1, Param::QueueWaitNs, 10_000_000_000);
    net.fill(0, DATA, &[77, 1]);
    send_one_item(&mut net);
    net.run_for(50);
    assert_eq!(net.word(0, 1).value, 0, "refused for now, not failed");
    assert!(net.nics[1].stats().packets_refused >= 1);
    let header = small_queue(&mut net, 1, 2);
    net.run(100_000);
    assert_eq!(
        net.word(0, 1),
        CompletionWord {
            value: 5,
            status: Some(Ok(()))
        }
    );
    assert_eq!(queue_items(&net, 1, header, 2), [77]);
}

/// ... and fails with `NoQueue` if the queue never comes.
#[test]
fn an_item_whose_queue_never_comes_fails_with_no_queue() {
    let mut net = Net::new(2, 34);
    set_param(&mut net, 1, Param::QueueWaitNs, 1_000_000);
    send_one_item(&mut net);
    net.run(100_000);
    assert_eq!(
        net.word(0, 1),
        CompletionWord {
            value: 5,
            status: Some(Err(ErrorCode::NoQueue))
        }
    );
    assert_eq!(net.nics[0].stats().dmas_completed, 1);
}
