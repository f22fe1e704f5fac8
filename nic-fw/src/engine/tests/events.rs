//! Events and chained commands: re-arming, chained and combined triggers, the chain queue's room, sibling sets, a detached context's leftovers, malformed commands.

use super::*;

#[test]
fn rearm_after_early_sets_fires_immediately_and_only_once() {
    let mut net = Net::new(1, 6);
    net.post(
        0,
        Command::SetEvent {
            event: EventId(3),
            count: 2,
            rail: None,
        },
    );
    net.post(
        0,
        Command::ArmEvent {
            event: EventId(3),
            count: 3,
            action: write_action(3, 1),
        },
    );
    net.run(100);
    assert_eq!(net.word(0, 3).value, 0, "only 2 of 3 sets arrived");
    net.post(
        0,
        Command::SetEvent {
            event: EventId(3),
            count: 1,
            rail: None,
        },
    );
    net.run(100);
    assert_eq!(net.word(0, 3).value, 1);
    // Sets before the next arm are kept; the arm fires at once.
    net.post(
        0,
        Command::SetEvent {
            event: EventId(3),
            count: 1,
            rail: None,
        },
    );
    net.post(
        0,
        Command::ArmEvent {
            event: EventId(3),
            count: 1,
            action: write_action(3, 2),
        },
    );
    net.run(100);
    assert_eq!(net.word(0, 3).value, 2);
    assert_eq!(net.nics[0].stats().events_fired, 2);
}

#[test]
fn chained_put_runs_without_the_host() {
    let mut net = Net::new(3, 7);
    let data = pattern(3000, 9);
    net.fill(0, DATA, &data);
    // Node 1 prepares "when event 5 fires, put the bytes on to node 2".
    let forward = put(2, 0x1000, 0x2000, 3000, None, Some(6));
    net.fill(1, WORDS + 0x100, &forward.emit(1).to_bytes());
    net.post(
        1,
        Command::ArmEvent {
            event: EventId(5),
            count: 1,
            action: EventAction {
                kind: ActionKind::Copy {
                    src: VA_WORDS + 0x100,
                    blocks: 1,
                },
                wake: false,
            },
        },
    );
    net.post(
        2,
        Command::ArmEvent {
            event: EventId(6),
            count: 1,
            action: write_action(6, 77),
        },
    );
    net.post(0, put(1, 0, 0x1000, 3000, None, Some(5)));
    net.run(100_000);
    assert_eq!(net.mem(2, DATA + 0x2000, 3000), data);
    assert_eq!(net.word(2, 6).value, 77);
    assert_eq!(net.nics[1].stats().chained, 1);
}

/// A combined trigger: the put leaves only once *both* events 5 and 6
/// have fired. Each one's COPY injects a `SET_EVENT` of join event 7; 7,
/// armed for two sets, injects the put and a second block (a local
/// completion word write) with one COPY.
#[test]
fn a_combined_trigger_starts_a_put_after_both_arrivals() {
    let mut net = Net::new(3, 11);
    let data = pattern(512, 3);
    net.fill(1, DATA + 0x1000, &data);
    let set_join = Command::SetEvent {
        event: EventId(7),
        count: 1,
        rail: None,
    };
    net.fill(1, WORDS + 0x100, &set_join.emit(0).to_bytes());
    let forward = put(2, 0x1000, 0x2000, 512, None, Some(6));
    let mark = Command::WriteWord {
        addr: VA_WORDS + 8 * 12,
        value: 0x5eed,
    };
    net.fill(1, WORDS + 0x140, &forward.emit(1).to_bytes());
    net.fill(1, WORDS + 0x180, &mark.emit(2).to_bytes());
    let copy = |src: u64, blocks: u8| EventAction {
        kind: ActionKind::Copy {
            src: VA_WORDS + src,
            blocks,
        },
        wake: false,
    };
    for ev in [5, 6] {
        net.post(
            1,
            Command::ArmEvent {
                event: EventId(ev),
                count: 1,
                action: copy(0x100, 1),
            },
        );
    }
    net.post(
        1,
        Command::ArmEvent {
            event: EventId(7),
            count: 2,
            action: copy(0x140, 2),
        },
    );
    net.post(
        2,
        Command::ArmEvent {
            event: EventId(6),
            count: 1,
            action: write_action(6, 99),
        },
    );
    // The first arrival alone starts nothing.
    net.post(0, put(1, 0, 0x3000, 8, None, Some(5)));
    net.run(100_000);
    assert_eq!(net.mem(2, DATA + 0x2000, 512), vec![0; 512]);
    assert_eq!(net.mem(1, WORDS + 8 * 12, 8), vec![0; 8]);
    // The second does: the put and the word, from one COPY.
    net.post(0, put(1, 0, 0x3008, 8, None, Some(6)));
    net.run(100_000);
    assert_eq!(net.mem(2, DATA + 0x2000, 512), data);
    assert_eq!(net.word(2, 6).value, 99);
    assert_eq!(net.mem(1, WORDS + 8 * 12, 8), 0x5eedu64.to_le_bytes());
    assert_eq!(
        net.nics[1].stats().chained,
        4,
        "two sets, then put and word"
    );
}

/// A COPY of more blocks than the chain queue has room for injects none
/// of them (`ChainOverflow`); one that fits injects them all.
#[test]
fn a_copy_that_does_not_fit_injects_nothing() {
    let mut net = Net::new(1, 12);
    let nop = Command::Nop.emit(0).to_bytes();
    for i in 0..4u64 {
        net.fill(0, WORDS + 0x100 + 64 * i, &nop);
    }
    let e = &mut net.nics[0];
    // Three entries left (the queued ones stand for commands not run yet).
    let (head, _) = e.chain.counts();
    e.chain
        .set_counts(head, head + crate::abi::CHAIN_DEPTH as u64 - 3);
    let (tail, chained) = (e.chain.counts().1, e.stats().chained);
    assert_eq!(
        e.inject_chain(0, VA_WORDS + 0x100, 4),
        Err(ErrorCode::ChainOverflow)
    );
    assert_eq!(
        (e.chain.counts().1, e.stats().chained),
        (tail, chained),
        "nothing injected"
    );
    assert_eq!(e.inject_chain(0, VA_WORDS + 0x100, 3), Ok(()));
    assert_eq!(
        (e.chain.counts().1, e.stats().chained),
        (tail + 3, chained + 3)
    );
    // A range that is not readable in full injects nothing either.
    let (_, tail) = e.chain.counts();
    e.chain.set_counts(tail, tail);
    let tail = e.chain.counts().1;
    assert_eq!(
        e.inject_chain(0, VA_DATA + DATA_LEN - 64, 2),
        Err(ErrorCode::Protection)
    );
    assert_eq!(e.chain.counts().1, tail);
}

/// `SET_EVENT` naming a sibling rail goes out on the node's NIC-to-NIC
/// path and counts at the sibling; one naming this NIC's own rail is
/// local; a sibling set of an event outside the table is reported there.
#[test]
fn a_sibling_set_event_counts_on_the_other_nic() {
    let mut net = Net::new(2, 13);
    net.post(
        1,
        Command::ArmEvent {
            event: EventId(4),
            count: 2,
            action: write_action(4, 44),
        },
    );
    net.post(
        0,
        Command::SetEvent {
            event: EventId(4),
            count: 2,
            rail: Some(1),
        },
    );
    net.post(
        0,
        Command::ArmEvent {
            event: EventId(3),
            count: 1,
            action: write_action(3, 33),
        },
    );
    net.post(
        0,
        Command::SetEvent {
            event: EventId(3),
            count: 1,
            rail: Some(0),
        },
    );
    net.run(100_000);
    assert_eq!(net.word(1, 4).value, 44, "counted on the sibling");
    // A full sibling FIFO holds the set (and the ring behind it) until
    // there is room: nothing is lost, no error is reported.
    net.post(
        1,
        Command::ArmEvent {
            event: EventId(5),
            count: 1,
            action: write_action(5, 55),
        },
    );
    net.nics[0].hardware_mut().peer_full = true;
    net.post(
        0,
        Command::SetEvent {
            event: EventId(5),
            count: 1,
            rail: Some(1),
        },
    );
    net.run_for(1000);
    assert_eq!(net.word(1, 5).value, 0, "held while the FIFO is full");
    net.nics[0].hardware_mut().peer_full = false;
    net.run(100_000);
    assert_eq!(net.word(1, 5).value, 55, "sent once there is room");
    assert!(net.errors(0).is_empty(), "{:?}", net.errors(0));
    assert_eq!(net.word(0, 3).value, 33, "own rail: a local set");
    assert_eq!(net.word(0, 4).value, 0, "not counted here");
    // A set the sibling cannot count: an event beyond its table.
    net.nics[1].hardware_mut().peer_in.push_back(PeerSet {
        ctx: 0,
        event: EventId(10_000),
        count: 1,
    });
    net.run(100_000);
    let errors = net.errors(1);
    assert_eq!(
        errors.last().map(|e| (e.code, e.cookie)),
        Some((ErrorCode::BadEvent, 10_000))
    );
}

/// Chained commands a context left behind do not run for the next owner
/// of its index. Context 1's chained sibling set stalls at the head of
/// the node's chain queue on a full sibling FIFO. Behind it, a COPY of
/// context 0 injects a put to node 1 and a word write. Context 0 is
/// detached and attached again by a new owner with the same regions; once
/// the FIFO drains, context 1's set goes on and neither of context 0's old
/// commands runs (without the clearing at detach, the put lands in node
/// 1's arena and the word in the new owner's words), while the new
/// owner's own command does.
#[test]
fn chained_commands_of_a_detached_context_do_not_run_for_the_next_owner() {
    let mut net = Net::new(2, 14);
    net.attach_second(0);
    // The sibling set counts here (the harness's NIC `rail` stands for
    // the sibling on that rail; context 1 exists there too).
    net.attach_second(1);
    net.post_second(
        1,
        &[Command::ArmEvent {
            event: EventId(5),
            count: 1,
            action: write_action(5, 55),
        }],
    );
    let sibling_set = Command::SetEvent {
        event: EventId(5),
        count: 1,
        rail: Some(1),
    };
    net.fill(0, WORDS_1 + 0x100, &sibling_set.emit(1).to_bytes());
    let data = pattern(64, 5);
    net.fill(0, DATA, &data);
    let old = [
        put(1, 0, 0x2000, 64, None, None),
        Command::WriteWord {
            addr: VA_WORDS + 8 * 12,
            value: 0xdead,
        },
    ];
    for (i, b) in old.iter().enumerate() {
        net.fill(0, WORDS + 0x100 + 64 * i as u64, &b.emit(2).to_bytes());
    }
    let copy = |blocks: u8| EventAction {
        kind: ActionKind::Copy {
            src: VA_WORDS + 0x100,
            blocks,
        },
        wake: false,
    };
    net.nics[0].hardware_mut().peer_full = true;
    net.post_second(
        0,
        &[
            Command::ArmEvent {
                event: EventId(9),
                count: 1,
                action: copy(1),
            },
            Command::SetEvent {
                event: EventId(9),
                count: 1,
                rail: None,
            },
        ],
    );
    net.run_for(1000);
    net.post(
        0,
        Command::ArmEvent {
            event: EventId(9),
            count: 1,
            action: copy(2),
        },
    );
    net.post(
        0,
        Command::SetEvent {
            event: EventId(9),
            count: 1,
            rail: None,
        },
    );
    net.run_for(1000);
    let e = &net.nics[0];
    assert_eq!(
        (e.stats().chained, e.chain.counts().1 - e.chain.counts().0),
        (3, 3),
        "all three injected, none run"
    );
    assert_eq!(
        net.mailbox(0, MailboxOp::DetachContext, [0, 0, 0, 0]),
        Ok(())
    );
    net.attach(0);
    net.post(
        0,
        Command::WriteWord {
            addr: VA_WORDS + 8 * 13,
            value: 0x600d,
        },
    );
    net.nics[0].hardware_mut().peer_full = false;
    net.run(100_000);
    assert_eq!(
        net.mem(1, WORDS_1 + 8 * 5, 8),
        55u64.to_le_bytes(),
        "context 1's set went on"
    );
    assert_eq!(
        net.mem(1, DATA + 0x1f00, 0x300),
        vec![0; 0x300],
        "node 1's arena around the old put's target"
    );
    assert_eq!(net.word(0, 12).value, 0, "the old word write");
    assert_eq!(net.word(0, 13).value, 0x600d, "the new owner's command ran");
    assert_eq!(
        net.nics[0].chain.counts().0,
        net.nics[0].chain.counts().1,
        "chain drained"
    );
}

#[test]
fn malformed_commands_fail_alone_and_the_queue_keeps_going() {
    let mut net = Net::new(2, 8);
    let mut bad = Command::Nop.emit(99).to_bytes();
    bad[0] = 0xee;
    net.post_raw(0, bad);
    net.post(
        0,
        Command::WriteWord {
            addr: 0xdead_0000,
            value: 1,
        },
    );
    net.post(0, put(7, 0, 0, 8, Some(1), None));
    net.post(
        0,
        Command::SetEvent {
            event: EventId(1000),
            count: 1,
            rail: None,
        },
    );
    net.post(
        0,
        Command::WriteWord {
            addr: VA_WORDS + 8 * 9,
            value: 0xabc,
        },
    );
    net.run(1000);
    let errs: Vec<ErrorCode> = net.errors(0).iter().map(|e| e.code).collect();
    assert_eq!(
        errs,
        vec![
            ErrorCode::UnknownOpcode,
            ErrorCode::Protection,
            ErrorCode::BadVp,
            ErrorCode::BadEvent
        ]
    );
    assert_eq!(net.errors(0)[0].cookie, 99);
    assert_eq!(net.word(0, 9).value, 0xabc);
}

#[test]
fn a_malformed_dma_still_fires_its_completion_event_with_the_error() {
    let mut net = Net::new(2, 13);
    net.post(
        0,
        Command::ArmEvent {
            event: EventId(7),
            count: 1,
            action: write_action(7, 70),
        },
    );
    let mut block = put(1, 0, 0, 64, Some(7), None).emit(3);
    block.flags = 0x80; // undefined flag bit
    net.post_raw(0, block.to_bytes());
    net.run(1000);
    assert_eq!(
        net.word(0, 7),
        CompletionWord {
            value: 70,
            status: Some(Err(ErrorCode::ReservedNonZero))
        }
    );
}
