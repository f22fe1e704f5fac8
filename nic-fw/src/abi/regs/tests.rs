//! The register map's tests: capabilities, mailbox packing, register
//! offsets and access rules.

use super::*;

#[test]
fn capability_locates_block_and_cyclic() {
    let block = Capability {
        low_node: 2,
        node_count: 3,
        ranks_per_node: 4,
        ctx_base: 1,
        placement: Placement::Block,
    };
    assert_eq!(block.locate(0), Some((2, 1)));
    assert_eq!(block.locate(5), Some((3, 2)));
    assert_eq!(block.locate(11), Some((4, 4)));
    assert_eq!(block.locate(12), None);
    let cyclic = Capability {
        placement: Placement::Cyclic,
        ..block
    };
    assert_eq!(cyclic.locate(1), Some((3, 1)));
    assert_eq!(cyclic.locate(3), Some((2, 2)));
    assert_eq!(Capability::from_reg(block.to_reg()), Ok(block));
    assert_eq!(Capability::from_reg(cyclic.to_reg()), Ok(cyclic));
}

#[test]
fn location_packs_node_and_rail_as_the_abi_says() {
    let loc = Location {
        node: 0xbeef,
        rail: 3,
    };
    assert_eq!(loc.to_reg(), 0x03_beef);
    assert_eq!(Location::from_reg(loc.to_reg()), loc);
    // Bits above 23 are not part of it.
    assert_eq!(
        Location::from_reg(0xff00_0000 | 0x01_0002),
        Location { node: 2, rail: 1 }
    );
}

#[test]
fn capability_rejects_bad_geometry() {
    let bad = Capability {
        low_node: 0,
        node_count: 1,
        ranks_per_node: 16,
        ctx_base: 1,
        placement: Placement::Block,
    };
    assert_eq!(
        Capability::from_reg(bad.to_reg()),
        Err(ErrorCode::BadConfig)
    );
    assert_eq!(
        Capability::from_reg(1 << 60),
        Err(ErrorCode::ReservedNonZero)
    );
    assert_eq!(Capability::from_reg(0), Err(ErrorCode::BadConfig));
}

#[test]
fn context_and_region_configs_round_trip() {
    let ctx = ContextConfig {
        ctx: 3,
        cq_log2: 8,
        err_log2: 4,
        perms: QueuePerms::all(),
        job_key: 0xfeed,
        cq_base: 0x1000,
        err_base: 0x2020,
        cap: Capability {
            low_node: 0,
            node_count: 4,
            ranks_per_node: 4,
            ctx_base: 0,
            placement: Placement::Block,
        },
    };
    assert_eq!(ContextConfig::from_args(ctx.to_args()), Ok(ctx));
    let reg = RegionConfig {
        ctx: 3,
        slot: 63,
        perms: RegionPerms::LOCAL_READ | RegionPerms::REMOTE_WRITE,
        va: 1 << 40,
        len: 4096,
        phys: 0x10_0000,
    };
    assert_eq!(RegionConfig::from_args(reg.to_args()), Ok(reg));
    let wrap = RegionConfig {
        va: u64::MAX,
        ..reg
    };
    assert_eq!(
        RegionConfig::from_args(wrap.to_args()),
        Err(ErrorCode::BadConfig)
    );
}

#[test]
fn context_pages_do_not_overlap_globals() {
    assert_eq!(ctx_reg(0, CQ_TAIL).map(|r| r.offset()), Some(CTX_PAGE_BASE));
    assert_eq!(
        decode_ctx_reg(ctx_reg(15, ERR_COUNT).map_or(0, |r| r.offset())),
        Some((15, ERR_COUNT.page_offset()))
    );
    assert_eq!(ctx_reg(16, CQ_TAIL), None);
    assert_eq!(decode_ctx_reg(MBOX_CMD.offset()), None);
    assert_eq!(CQ_TAIL.context_of(0x100 + 3 * 0x40), Some(3));
    assert_eq!(CQ_TAIL.context_of(0x100 + 3 * 0x40 + 8), None);
    assert_eq!(CQ_HEAD.context_of(0x100 + 3 * 0x40 + 8), Some(3));
    assert_eq!(CQ_TAIL.context_of(MBOX_CMD.offset()), None);
    assert_eq!(CQ_TAIL.context_of(BAR0_SIZE), None);
}

fn row<A: Access>(name: &'static str, reg: Reg<u64, A>) -> (&'static str, u32, &'static str) {
    (name, reg.offset(), A::NAME)
}

fn page_row<A: Access>(
    name: &'static str,
    reg: CtxReg<u64, A>,
) -> (&'static str, u32, &'static str) {
    (name, reg.page_offset(), A::NAME)
}

#[test]
fn resources_round_trip_and_zero_fields_mean_abi_1_0() {
    let r = Resources {
        chain_depth: 1000,
        queues: 3,
        peer_fifo: 16,
        copy_blocks: 4,
    };
    assert_eq!(Resources::from_reg(r.to_reg()), r);
    assert_eq!(Resources::from_reg(0), Resources::ABI_1_0);
    assert_eq!(Resources::ABI_1_0.chain_depth, 64);
    assert_eq!(Resources::ABI_1_0.queues, 8);
    let half = Resources::from_reg(5);
    assert_eq!((half.chain_depth, half.queues), (5, 8));
}

/// The register table of `docs/abi.md` §2: offsets and host access.
#[test]
fn register_map_matches_the_spec() {
    assert_eq!(
        [
            row("ID", ID),
            row("VERSION", VERSION),
            row("GEOMETRY", GEOMETRY),
            row("LOCATION", LOCATION),
            row("CONTROL", CONTROL),
            row("STATUS", STATUS),
            row("PACKET_SIZE", PACKET_SIZE),
            row("STATS_ERRORS", STATS_ERRORS),
            row("MBOX_ARG0", MBOX_ARG0),
            row("MBOX_ARG1", MBOX_ARG1),
            row("MBOX_ARG2", MBOX_ARG2),
            row("MBOX_ARG3", MBOX_ARG3),
            row("MBOX_CMD", MBOX_CMD),
            row("MBOX_STATUS", MBOX_STATUS),
            row("MBOX_RESULT", MBOX_RESULT),
            row("RESOURCES", RESOURCES),
            row("PEER_SET", PEER_SET),
        ],
        [
            ("ID", 0x000, "RO"),
            ("VERSION", 0x008, "RO"),
            ("GEOMETRY", 0x010, "RO"),
            ("LOCATION", 0x018, "RO"),
            ("CONTROL", 0x020, "RW"),
            ("STATUS", 0x028, "RO"),
            ("PACKET_SIZE", 0x030, "RO"),
            ("STATS_ERRORS", 0x038, "RO"),
            ("MBOX_ARG0", 0x040, "RW"),
            ("MBOX_ARG1", 0x048, "RW"),
            ("MBOX_ARG2", 0x050, "RW"),
            ("MBOX_ARG3", 0x058, "RW"),
            ("MBOX_CMD", 0x060, "WO"),
            ("MBOX_STATUS", 0x068, "RO"),
            ("MBOX_RESULT", 0x070, "RO"),
            ("RESOURCES", 0x078, "RO"),
            ("PEER_SET", 0x080, "WO"),
        ]
    );
    assert_eq!(
        [
            page_row("CQ_TAIL", CQ_TAIL),
            page_row("CQ_HEAD", CQ_HEAD),
            page_row("ERR_COUNT", ERR_COUNT),
        ],
        [
            ("CQ_TAIL", 0x00, "WO"),
            ("CQ_HEAD", 0x08, "RO"),
            ("ERR_COUNT", 0x10, "RO"),
        ]
    );
    assert_eq!(BAR0_SIZE, 0x500);
    assert_eq!(MBOX_ARGS.map(|r| r.offset()), [0x40, 0x48, 0x50, 0x58]);
}

#[test]
fn mailbox_status_round_trips_and_reads_unknown_codes_as_bad_config() {
    for result in [Ok(()), Err(ErrorCode::Busy), Err(ErrorCode::Misaligned)] {
        let st = MailboxStatus {
            result,
            done: true,
            seq: 0xdead_beef,
        };
        assert_eq!(MailboxStatus::from_reg(st.to_reg()), st);
    }
    assert_eq!(
        MailboxStatus {
            result: Ok(()),
            done: true,
            seq: 1
        }
        .to_reg(),
        (1 << 32) | (1 << 16)
    );
    assert_eq!(
        MailboxStatus::from_reg(24).result,
        Err(ErrorCode::BadConfig)
    );
    assert_eq!(MailboxStatus::from_reg(0).result, Ok(()));
}

#[test]
fn params_decode_only_small_arguments() {
    assert_eq!(Param::from_arg(2), Some(Param::RetryTimeoutNs));
    assert_eq!(Param::from_arg(0), None);
    assert_eq!(Param::from_arg(4), Some(Param::QueueWaitNs));
    assert_eq!(Param::from_arg(5), Some(Param::AlternateRail));
    assert_eq!(Param::from_arg(6), Some(Param::FlowCloseIdleNs));
    assert_eq!(Param::from_arg(7), None);
    assert_eq!(Param::from_arg(0x101), None);
    assert_eq!(Param::from_arg(u64::MAX), None);
}
