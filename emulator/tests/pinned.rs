//! The model's behaviour, pinned: every algorithm of every collective,
//! host-driven and compiled onto the NICs (`name@nic`, `name@nic-dma`), on two shapes
//! under `qsnet2-dual`, and on the `hockney-4x1` and `clan-8x1`
//! presets (the papers' analytic model; a single-rail cLAN cluster), at
//! three sizes, gives the trace hash and the modeled latency recorded in
//! `emulator/tests/pinned/modeled.tsv`.
//!
//! The runs go through the `railcoll` binary as a user runs it, so the pin
//! holds across any restructuring of the crates behind it. A change that
//! alters the model (a cost, an algorithm's schedule, the firmware's
//! packet traffic) must update the file on purpose and say why in its
//! commit:
//!
//! ```sh
//! RAILCOLL_PIN_UPDATE=1 cargo test -p railcoll-emu --test pinned
//! cargo build --release -p railcoll-emu && python3 docs/gen/fidelity.py
//! ```
//!
//! (the second line regenerates `docs/fidelity.md`, whose fingerprint of
//! this file and the profiles the last test below checks).
//!
//! Updates so far that left every latency as it was:
//! - Broadcast and barrier became schedules (issue 13). Every barrier run
//!   kept its hash. The 36 broadcast runs changed hash only: the binomial
//!   tree's readiness and data counters now come from the executor's
//!   counter pool, like every other collective's, instead of two events
//!   of their own, so the packets name other event numbers. Dropping
//!   those two events then renumbered every event allocated after them:
//!   279 more runs changed hash, none of them latency.
//! - ABI 1.1's `RESOURCES` register (issue 14): every NIC stores it at
//!   reset, and a NIC's register store is an effect the sequencer commits
//!   (it may end a host's wait), so all 331 runs changed hash; none
//!   changed latency.
//! - The `@nic` form of every algorithm joined the set (issue 14): rows
//!   added, the host-driven rows unchanged.
//! - ABI 1.9's wire format 3 (issue 30): every sequenced packet and ack
//!   carries its flow instance in header bytes 56..60, and the version
//!   byte is 3; the hash covers packet headers, so all 993 runs changed
//!   hash; none changed latency (no run is idle long enough for a flow to
//!   close).
//! - The trace hash itself became a word-at-a-time fold instead of
//!   byte-wise FNV-1a (issue 30, for speed): all 993 runs changed hash,
//!   none latency, and runs that shared a hash before share one after.
//!
//! The first update that changed latencies, on purpose:
//! - Cross-rail triggers in the offload compiler (issue 14, ABI 1.2): a
//!   put whose trigger's sets arrive on other rails is now chained, the
//!   other rails' NICs relaying their sets to it. The driver's chain slots
//!   grew to two command blocks (a relay's COPY injects the sibling set
//!   and its completion), which moves every later DMA allocation, so all
//!   662 runs changed hash; no host-driven latency changed. 31 `@nic` runs
//!   on the multi-rail shapes changed latency, both ways: relaying costs
//!   each hop a NIC event, two chained commands, a bus crossing and the
//!   receiving NIC's event where an idle host would have posted the put
//!   itself (ring@nic on 3 x 2, three rails, 8 B: 17.3 -> 23.0 us;
//!   exchange@nic on qsnet2-4x4, 8 B: 36.4 -> 44.3 us), and wins where
//!   the host was the bottleneck (binomial gather@nic on qsnet2-4x4, 8 B:
//!   10.4 -> 8.8 us; recursive doubling 30.7 -> 29.7 us). What relaying
//!   buys is the host's freedom: docs/offload.md measures it as overlap.
//! - A sibling `SET_EVENT` into a full FIFO now waits instead of failing,
//!   and its bus crossing starts with the command rather than after it:
//!   31 relaying runs changed hash, 26 of them latency, all by less than
//!   1 us except exchange@nic on qsnet2-4x4 at 64 KiB (7783.6 -> 7762.3
//!   us).
//! - Combined triggers in the offload compiler (issue 14): a put whose
//!   data came with counters that earlier chained puts consumed is now
//!   chained too, those puts' COPYs setting its trigger (feeds), so
//!   recursive doubling, exchange and Bruck run every round after the
//!   first on the NICs. The driver's chain slots grew to four command
//!   blocks (a put and up to three feeds), which moves every later DMA
//!   allocation: all 662 runs changed hash; no host-driven latency
//!   changed. 36 all-gather `@nic` runs changed latency, 30 faster
//!   (exchange@nic on hockney-4x1, 8 B: 6.86 -> 4.44 us; on 3 x 2, three
//!   rails, 64 KiB: 972.2 -> 721.7 us; recursive doubling on clan-8x1,
//!   8 B: 27.9 -> 26.0 us) and 6 slower, all on qsnet2-4x4, whose four
//!   ranks per node share each NIC's processor and chain queue: a round's
//!   feeds and firings queue behind the other ranks' (exchange@nic, 8 B:
//!   43.4 -> 52.9 us; bruck@nic, 64 KiB: 8149.7 -> 9273.1 us, most
//!   likely because the chain queue is one FIFO per NIC: a chained put
//!   waiting for a DMA slot holds every chained command behind it, where
//!   host posts wait in four rings).
//! - The `@nic-dma` form of every algorithm joined the set (issue 14):
//!   rows added, the other rows unchanged.
//! - Striped chained puts (issue 14): a put striped over several rails is
//!   chained whole, its part on the trigger's rail leading and starting
//!   the others by sibling sets. 122 multi-rail `@nic`/`@nic-dma` runs
//!   changed hash, 88 of them latency: 26 faster (binomial broadcast on
//!   hockney-4x1, 64 KiB: 113.7 -> 78.4 us), 62 slower by up to 1.30
//!   (ring on 3 x 2, three rails, 4 KiB: 60.3 -> 78.1 us; recursive
//!   doubling on qsnet2-4x4, 4 KiB: 311.5 -> 349.8 us): each hop crosses
//!   the node's bus twice (relay to the lead, the lead's set to the other
//!   parts) where the host posted every part itself.
//! - Puts started by another put's completion (issue 14): pairwise
//!   all-to-all (and the native one below 8 KB) chain each exchange on
//!   the previous one's completion, and `@nic-dma` copies that overwrite
//!   what a chained put reads wait for its completion on the NIC instead
//!   of the host waiting before arming them. 42 all-to-all runs changed
//!   hash, 36 latency, 34 of them slower (pairwise@nic on clan-8x1, 8 B:
//!   70.7 -> 97.1 us; native@nic on 3 x 2, three rails, 8 B: 19.9 ->
//!   36.2 us; bruck@nic-dma on hockney-4x1, 64 KiB: 612.0 -> 814.2 us):
//!   each step now costs the NIC the lent event, a COPY of two blocks
//!   over the bus, the next trigger's event and another COPY, where an
//!   idle host saw the completion word and posted; 2 faster
//!   (exchange@nic-dma on clan-8x1, 64 KiB: 23428.5 -> 23011.1 us).
//! - The RDMA barrier on the NICs (issue 14): `rdma@nic` and `smp@nic`
//!   count the exchange (each word put a zero-length put setting the
//!   partner's counter, each word wait a wait for it) and chain every
//!   round after the first; a put without data needs everything its rank
//!   waited for before it. And a chained put fed by earlier ones takes
//!   the earliest single source whose firing implies all it needs, where
//!   it took the earliest ones covering it together. 16 barrier runs
//!   changed: faster with one rank per NIC (clan-8x1: 26.2 -> 25.3 us;
//!   hockney-4x1: 3.22 -> 3.20 us; smp@nic on qsnet2-4x4: 5.80 -> 5.74
//!   us), slower where ranks share a NIC (rdma@nic on qsnet2-4x4: 21.6 ->
//!   33.2 us; on 3 x 2, three rails: 9.1 -> 10.9 us): each round costs
//!   the NIC an event, a COPY and a feed for each of its ranks, in one
//!   queue. 36 all-gather `@nic` runs changed (fewer feeds), 31 faster
//!   (recursive doubling on qsnet2-4x4, 8 B: 32.3 -> 30.1 us) and 5
//!   slower by at most 0.6 % (bruck@nic-dma on qsnet2-4x4, 4 KiB: 861.6
//!   -> 866.3 us).
//! - Node phases on the NICs (issue 14): with `@nic-dma`, node flags
//!   become destination counters, copies into node peers puts to them,
//!   and copies out of a peer that waits for its raise the peer's puts
//!   (`sched::counted`). The 42 `@nic-dma` runs of algorithms with node
//!   phases changed, all slower: a memcpy of a few hundred nanoseconds
//!   becomes a put over the link and back through the node's shared NIC
//!   (smp-gather-tree all-gather on qsnet2-4x4, 64 KiB: 6080.0 -> 6467.6
//!   us; smp-direct all-gather on qsnet2-4x4, 8 B: 4.68 -> 34.14 us).
//!   What they buy is overlap: docs/offload.md.
//! - A defect fixed in the offload compiler (issue 14): a put now waits
//!   for every notice its target sent before it ("I am ready", a put
//!   without data) that an earlier chained put folded, as the host's
//!   wait made it do. The binomial broadcast's root chained its first
//!   child's put on the children's readiness and posted the others at
//!   once, so a child could get its bytes before it entered the call
//!   (found by running `@nic` broadcasts back to back without a barrier,
//!   which the broadcast promises). 24 `@nic` broadcast runs slower
//!   (binomial@nic on qsnet2-4x4, 4 KiB: 41.4 -> 58.3 us; on
//!   hockney-4x1, 64 KiB: 78.4 -> 113.7 us). And with `@nic-dma` the
//!   node's flat-tree barrier (arrivals, release) and the node broadcast
//!   (readiness, bytes, receipt) are puts and counters too: 55 more
//!   `@nic-dma` runs changed, all but one slower (barrier smp@nic-dma on
//!   qsnet2-4x4: 5.74 -> 22.90 us).
//! - Receive ports and start-ups (issue 15): a receive port now takes
//!   packets in the order their first bits reach it, where it was reserved
//!   in the order senders emitted them (a sender queues a poll's packets
//!   ahead, so one sender's whole train could hold a port against earlier
//!   arrivals), and a DMA's start-up is split as LogGP's g and L:
//!   `nic.dma_gap_ns` charged one DMA after another, `nic.dma_latency_ns`
//!   overlapped by DMAs in flight together (the engine now names each
//!   packet's DMA channel to the board). 487 of 993 runs changed hash,
//!   294 latency: 225 faster, most where a node sends to several peers at
//!   once (direct all-gather on hockney-4x1, 8 B: 3.22 -> 1.62 us; 4 KiB:
//!   16.28 -> 10.70 us; bruck@nic-dma all-to-all on hockney-4x1, 8 B:
//!   16.09 -> 8.07 us), 69 slower, most likely where packets of two
//!   messages now share a port packet by packet instead of one message
//!   first, so a chained put waiting for the first starts later (exchange@nic
//!   all-gather on hockney-4x1, 64 KiB: 278.3 -> 355.9 us; native
//!   all-gather on clan-8x1, 4 KiB: 407.8 -> 435.7 us). Host-driven runs
//!   on qsnet2-4x4 moved by less than 4 % (direct gather, 8 B: 5.11 ->
//!   4.93 us). The one-message latency of every profile is unchanged.
//! - The message-passing layer's software (issue 15): profiles' new
//!   `library.send_ns` / `recv_ns` (LogGP's o on the send/receive path)
//!   are charged per queued send and per matched receive. The 9
//!   `sendrecv` barrier runs changed, and nothing else: clan-8x1, where
//!   MVICH's 4 us per message is sourced, 28.57 -> 38.63 us; 3 x 2,
//!   three rails: 10.65 -> 12.30 us; qsnet2-4x4: 24.95 -> 25.22 us (four
//!   ranks share each NIC, whose queueing hides most of the 250 ns).
//! - A DMA starting up no longer idles the wire for DMAs already sending
//!   (issue 15, found in review): its first packet holds a slot at its
//!   ready time and ready packets to other nodes fill the wire before it
//!   (a flow's packets keep their order). 37 runs changed hash, 17
//!   latency, by less than 5 % either way (binomial@nic broadcast on
//!   qsnet2-4x4, 8 B: 16.60 -> 16.48 us; rdma@nic barrier on 3 x 2,
//!   three rails: 10.90 -> 11.43 us, where packets now leave in another
//!   order).
//! - The native all-to-all's shared-memory form (issue 15, [QA08 §3.1]):
//!   up to 2 KB on nodes of several ranks the blocks travel through the
//!   node masters, one message per node pair. The 6 native all-to-all
//!   runs on nodes of two and four ranks changed, nothing else (the
//!   offload compiler's provenance fix, which the `@nic-dma` form needed,
//!   changed no other compiled set): qsnet2-4x4, 8 B: 89.70 -> 11.11 us
//!   host-driven, 135.03 -> 13.75 us `@nic`, 135.03 -> 122.49 us
//!   `@nic-dma` (the node phases as loopback puts, one per block run);
//!   3 x 2 cyclic, three rails: 19.69 -> 6.86 us.
//! - Canary pages around every node-memory allocation (issue 16): every
//!   buffer's physical address moved, so all 993 trace hashes changed
//!   (packets carry addresses); no latency changed.
//! - Wire format 2 (issue 16: the payload CRC trailer, ABI 1.4): every
//!   header's version byte is 2, so all 993 trace hashes changed; no
//!   latency changed (the probe, the backed-off timeout and the one nack
//!   per gap act only on losses, which fault-free runs do not have).
//! - A collective without a root ignores one (issue 16, found by fuzzing:
//!   the native all-gather's generator used it, and on some shapes wrote
//!   rank 0's block nowhere). This file's sweep passes `--root 1` to every
//!   collective, so the 12 native all-gather runs at 4 KiB (where the
//!   native form gathers to a root and broadcasts) now gather to rank 0:
//!   qsnet2-4x4 264.0 -> 372.2 us (`@nic-dma` 683.5 -> 869.5 us),
//!   3x2-cyclic 92.7 -> 129.4 us. The workbench's sweeps, the fidelity
//!   page and the tuning table used root 0 already and are unchanged.
//! - Flow migration (issue 16, ABI 1.5): bring-up sets every NIC's
//!   alternate rail on shapes with more than one rail (one more mailbox
//!   call per NIC), so the 738 runs on several rails changed their trace
//!   hashes; no latency changed (nothing migrates without a dead path).
//! - The switch barrier's fallback (issue 16, ABI 1.5): every communicator
//!   reserves two more 8-byte words of its arena (a master's entered
//!   barrier number, and where the fallback's gets land), so later
//!   buffers moved and 945 trace hashes changed; no latency changed.

use std::fmt::Write as _;
use std::path::PathBuf;
use std::process::Command;

/// The shapes: \[QA08\]'s platform (4 nodes x 4 ranks, 4 sockets, 2 rails,
/// block placement) and a small irregular one (3 nodes x 2 ranks, 2
/// sockets, 3 rails, cyclic placement), both under qsnet2-dual; the
/// hockney-4x1 preset (Hockney costs only, where modeled time is the
/// papers' closed forms) and clan-8x1 (\[GTNP02\]'s single-rail cLAN
/// cluster). Root 1, so rooted collectives do not start at rank 0.
const SHAPES: [(&str, &[&str]); 4] = [
    ("qsnet2-4x4", &["--preset", "qsnet2-4x4"]),
    (
        "3x2-cyclic-3rails",
        &[
            "--nodes",
            "3",
            "--ranks-per-node",
            "2",
            "--sockets",
            "2",
            "--rails",
            "3",
            "--placement",
            "cyclic",
            "--profile",
            "qsnet2-dual",
        ],
    ),
    ("hockney-4x1", &["--preset", "hockney-4x1"]),
    ("clan-8x1", &["--preset", "clan-8x1"]),
];

/// Every algorithm host-driven, and every one compiled onto the NICs
/// (copies on the host, and on the NICs' DMA).
const ALGOS: [&str; 3] = ["all", "all@nic", "all@nic-dma"];

/// Below the striping threshold, above it, and above the packet size.
const SIZES: &str = "8,4K,64K";

fn pinned_file() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/pinned/modeled.tsv")
}

/// One line per (shape, collective, algorithm, size): latency (us, as the
/// JSON prints it) and trace hash.
fn measure() -> String {
    let mut out = String::from("# shape\tcollective\talgorithm\tsize\tlatency_us\ttrace_hash\n");
    for ((label, args), algo) in SHAPES
        .iter()
        .flat_map(|shape| ALGOS.iter().map(move |algo| (shape, algo)))
    {
        let run = Command::new(env!("CARGO_BIN_EXE_railcoll"))
            .args([
                "sweep",
                "all",
                "--algo",
                algo,
                "--sizes",
                SIZES,
                "--root",
                "1",
                "--json",
                "-q",
                // The algorithms as published, as the pinned figures were
                // made: no readiness messages (docs/performance.md
                // measures what the MPI contract adds).
                "--contract",
                "shmem",
            ])
            .args(*args)
            .output()
            .expect("run railcoll");
        assert!(
            run.status.success(),
            "railcoll sweep on {label}: {}",
            String::from_utf8_lossy(&run.stderr)
        );
        let doc: serde_json::Value =
            serde_json::from_slice(&run.stdout).expect("sweep prints one JSON document");
        let sweeps = doc["sweeps"].as_array().expect("sweeps");
        assert_eq!(sweeps.len(), 5, "all five collectives swept on {label}");
        for sweep in sweeps {
            let collective = sweep["collective"].as_str().expect("collective");
            for point in sweep["points"].as_array().expect("points") {
                let size = point["size"].as_u64().expect("size");
                for r in point["results"].as_array().expect("results") {
                    let _ = writeln!(
                        out,
                        "{label}\t{collective}\t{}\t{size}\t{}\t{}",
                        r["algorithm"].as_str().expect("algorithm"),
                        r["latency_us"],
                        r["trace_hash"].as_str().expect("modeled runs have a hash"),
                    );
                }
            }
        }
    }
    out
}

#[test]
fn modeled_runs_keep_their_pinned_hashes_and_latencies() {
    let now = measure();
    let path = pinned_file();
    if std::env::var_os("RAILCOLL_PIN_UPDATE").is_some() {
        std::fs::create_dir_all(path.parent().expect("parent")).expect("mkdir");
        std::fs::write(&path, &now).expect("write the pinned file");
        return;
    }
    let pinned = std::fs::read_to_string(&path).expect("the pinned file exists");
    let (pinned_lines, now_lines): (Vec<&str>, Vec<&str>) =
        (pinned.lines().collect(), now.lines().collect());
    let changed: Vec<String> = pinned_lines
        .iter()
        .zip(&now_lines)
        .filter(|(a, b)| a != b)
        .map(|(a, b)| format!("  pinned: {a}\n  now:    {b}"))
        .collect();
    assert!(
        changed.is_empty() && pinned_lines.len() == now_lines.len(),
        "{} of {} modeled runs changed ({} lines pinned, {} now):\n{}\n\
         If the change is meant, update the pin (see this file's doc) and say why.",
        changed.len(),
        pinned_lines.len().saturating_sub(1),
        pinned_lines.len(),
        now_lines.len(),
        changed.join("\n")
    );
    // The pin covers every algorithm of every collective on both shapes.
    for collective in ["gather", "allgather", "alltoall", "bcast", "barrier"] {
        for (label, _) in SHAPES {
            assert!(
                now_lines
                    .iter()
                    .any(|l| l.starts_with(&format!("{label}\t{collective}\t"))),
                "{collective} on {label} is pinned"
            );
        }
    }
}

/// FNV-1a (64 bits) over the bytes of `files` (paths from the repository
/// root), in order: the fingerprint `docs/gen/fingerprint.py` writes into
/// generated files.
fn fingerprint(files: &[&str]) -> String {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..");
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for f in files {
        let bytes = std::fs::read(root.join(f)).unwrap_or_else(|e| panic!("{f}: {e}"));
        for b in bytes {
            h = (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3);
        }
    }
    format!("{h:016x}")
}

fn repo_file(path: &str) -> String {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..");
    std::fs::read_to_string(root.join(path)).unwrap_or_else(|e| panic!("{path}: {e}"))
}

/// `docs/fidelity.md` is generated from the model (`docs/gen/fidelity.py`)
/// and records a fingerprint of what its numbers depend on: the pinned
/// runs above, every built-in profile and the script. A change to any of
/// them without regenerating the page fails here, so the page never
/// describes a model the code no longer is.
#[test]
fn the_fidelity_page_was_regenerated_for_this_model() {
    let files = [
        "emulator/tests/pinned/modeled.tsv",
        "emulator/profiles/clan-via.toml",
        "emulator/profiles/hockney.toml",
        "emulator/profiles/ib-multicore.toml",
        "emulator/profiles/qsnet2-dual.toml",
        "docs/gen/fidelity.py",
    ];
    let want = format!("model fingerprint `{}`", fingerprint(&files));
    assert!(
        repo_file("docs/fidelity.md").contains(&want),
        "docs/fidelity.md is stale: the model, a profile or the script changed since it was \
         generated (want {want}). Regenerate it:\n  cargo build --release -p railcoll-emu && \
         python3 docs/gen/fidelity.py"
    );
    // Every built-in profile is in the fingerprint.
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..");
    for entry in std::fs::read_dir(root.join("emulator/profiles")).expect("profiles") {
        let name = entry
            .expect("entry")
            .file_name()
            .to_string_lossy()
            .into_owned();
        let path = format!("emulator/profiles/{name}");
        assert!(
            files.contains(&path.as_str()),
            "{path} is not fingerprinted"
        );
    }
}

/// The library's built-in tuning table is derived from the model
/// (`docs/gen/tuning.py`: `railcoll tune --scaling --builtin` on
/// [QA08]'s platform); it records the fingerprint of the model it was
/// made from (the pinned model, the profile, the fallback rules, the
/// generator and `tune`'s selection) and a hash of its rules. A change of
/// any of those without regenerating it, or a rule edited by hand, fails
/// here, so `tuned` and `best` do not drift apart in the main job's table
/// unnoticed. CI relies on this rather than regenerating the table (two
/// minutes of its fifteen).
#[test]
fn the_builtin_tuning_table_was_derived_from_this_model() {
    let files = [
        "emulator/tests/pinned/modeled.tsv",
        "emulator/profiles/qsnet2-dual.toml",
        "host/tuning/fallback.toml",
        "docs/gen/tuning.py",
        "emulator/src/workbench/tune.rs",
    ];
    let want = format!("Model fingerprint `{}`", fingerprint(&files));
    let table = repo_file("host/tuning/default.toml");
    assert!(
        table.contains(&want),
        "host/tuning/default.toml is stale: the model changed since it was derived (want \
         {want}). Regenerate it:\n  cargo build --release -p railcoll-emu && python3 \
         docs/gen/tuning.py"
    );
    let rules: String = table
        .split_inclusive('\n')
        .filter(|l| !l.starts_with('#'))
        .collect();
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in rules.bytes() {
        h = (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3);
    }
    let want = format!("Rules hash `{h:016x}`");
    assert!(
        table.contains(&want),
        "host/tuning/default.toml's rules are not the ones derived from the model (want \
         {want}): regenerate it with docs/gen/tuning.py instead of editing it"
    );
}
