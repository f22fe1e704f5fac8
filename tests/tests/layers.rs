//! The house's layers, checked from the source: no module of the host
//! library or the emulator imports, directly or through others, a module
//! that imports it back, and the host's modules point only downwards
//! through its layers (docs/architecture.md draws them).
//!
//! An arrow is a path a file names (`crate::a::b`, `super::x`, and the
//! `use super::*` of a child): from the file's module to the deepest module
//! of that path that exists. A parent naming its own children (declaring
//! and re-exporting them) is containment, not an arrow. Comments are not
//! read.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// Module path of every `.rs` file under `src`, e.g. `sched::exec`; the
/// crate root is the empty path.
fn modules(src: &Path) -> BTreeMap<String, PathBuf> {
    let mut out = BTreeMap::new();
    let mut stack = vec![src.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).expect("read src") {
            let path = entry.expect("entry").path();
            if path.is_dir() {
                stack.push(path);
                continue;
            }
            if path.extension().is_none_or(|e| e != "rs") {
                continue;
            }
            let rel = path.strip_prefix(src).expect("under src");
            let mut parts: Vec<String> = rel
                .with_extension("")
                .iter()
                .map(|p| p.to_string_lossy().into_owned())
                .collect();
            if parts.first().is_some_and(|p| p == "bin") {
                continue;
            }
            if parts.last().is_some_and(|p| p == "mod" || p == "lib") {
                parts.pop();
            }
            out.insert(parts.join("::"), path);
        }
    }
    out
}

/// The module paths a line of code names, resolved against `me`.
fn named_paths(line: &str, me: &str) -> Vec<String> {
    let code = line.split("//").next().unwrap_or("");
    let mut out = Vec::new();
    for (anchor, base) in [("crate::", String::new()), ("super::", parent(me))] {
        let mut rest = code;
        while let Some(at) = rest.find(anchor) {
            let before = rest[..at].chars().last();
            rest = &rest[at + anchor.len()..];
            // `super::` inside `crate::a::super::` does not occur; skip
            // matches that are the tail of a longer path.
            if before.is_some_and(|c| c.is_alphanumeric() || c == '_' || c == ':') {
                continue;
            }
            let mut segments: Vec<String> = if base.is_empty() {
                Vec::new()
            } else {
                base.split("::").map(str::to_string).collect()
            };
            for seg in rest.split("::") {
                let ident: String = seg
                    .chars()
                    .take_while(|c| c.is_alphanumeric() || *c == '_')
                    .collect();
                if ident.is_empty() || !ident.starts_with(|c: char| c.is_ascii_lowercase()) {
                    break;
                }
                segments.push(ident.clone());
                if ident.len() != seg.len() {
                    break;
                }
            }
            // `use super::*` / `super::{..}`: the parent itself.
            out.push(segments.join("::"));
        }
    }
    out
}

fn parent(module: &str) -> String {
    module
        .rsplit_once("::")
        .map_or(String::new(), |(p, _)| p.to_string())
}

/// Arrows between the modules of the crate at `src`.
fn arrows(src: &Path) -> BTreeMap<String, BTreeSet<String>> {
    let mods = modules(src);
    let mut graph: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for (me, path) in &mods {
        let text = std::fs::read_to_string(path).expect("read module");
        // Unit tests live inside the file but are not part of its layer.
        let text = text.split("#[cfg(test)]").next().unwrap_or("");
        let targets = graph.entry(me.clone()).or_default();
        for line in text.lines() {
            for named in named_paths(line, me) {
                // The deepest existing module of the path.
                let mut target = named.as_str();
                while !mods.contains_key(target) {
                    match target.rsplit_once("::") {
                        Some((p, _)) => target = p,
                        None => {
                            target = "";
                            break;
                        }
                    }
                }
                let contains = target != me.as_str()
                    && (me.is_empty() || target.starts_with(&format!("{me}::")));
                if target != me.as_str() && !contains && mods.contains_key(target) {
                    targets.insert(target.to_string());
                }
            }
        }
    }
    graph
}

/// Every cycle found by depth-first search, as module lists.
fn cycles(graph: &BTreeMap<String, BTreeSet<String>>) -> Vec<Vec<String>> {
    fn visit(
        node: &str,
        graph: &BTreeMap<String, BTreeSet<String>>,
        stack: &mut Vec<String>,
        done: &mut BTreeSet<String>,
        found: &mut Vec<Vec<String>>,
    ) {
        if let Some(at) = stack.iter().position(|s| s == node) {
            found.push(stack[at..].to_vec());
            return;
        }
        if done.contains(node) {
            return;
        }
        stack.push(node.to_string());
        for next in graph.get(node).into_iter().flatten() {
            visit(next, graph, stack, done, found);
        }
        stack.pop();
        done.insert(node.to_string());
    }
    let mut found = Vec::new();
    let mut done = BTreeSet::new();
    for node in graph.keys() {
        visit(node, graph, &mut Vec::new(), &mut done, &mut found);
    }
    found
}

fn crate_src(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("..")
        .join(name)
        .join("src")
}

#[test]
fn no_crate_has_an_import_circle() {
    for krate in ["host", "emulator", "nic-fw", "mem"] {
        let graph = arrows(&crate_src(krate));
        assert!(graph.len() > 3, "{krate}: modules found");
        let found = cycles(&graph);
        assert!(
            found.is_empty(),
            "{krate} has import circles: {}",
            found
                .iter()
                .map(|c| c.join(" -> "))
                .collect::<Vec<_>>()
                .join("; ")
        );
    }
}

/// The host library's layers, bottom-up; a module may name modules of its
/// own layer or below, never above.
const HOST_LAYERS: &[&[&str]] = &[
    // Memory and device access, and plain vocabulary.
    &[
        "error", "env", "device", "topology", "arena", "stripe", "config", "group", "launch",
    ],
    // Ranks as processes: a device and a wait hook over another process's
    // NICs (they implement the traits above, and know nothing above).
    &["process::wait", "process::nicd", "vfio"],
    // The node segment and the driver (rings, mailbox, completion words).
    &[
        "shm",
        "driver",
        "driver::mailbox",
        "driver::ring",
        "driver::posting",
        "driver::completion",
    ],
    // The RDMA endpoint: no collective state.
    &[
        "endpoint",
        "endpoint::handle",
        "endpoint::transfer",
        "endpoint::chain",
        "endpoint::switch",
        "endpoint::queue",
        "slots",
    ],
    // The compiler: schedules as data, generated, verified, compiled onto
    // the NICs, costed. It knows the NICs' limits, not the runtime.
    &[
        "sched",
        "sched::ir",
        "sched::seal",
        "sched::display",
        "sched::algo",
        "sched::budget",
        "sched::catalogue",
        "sched::generate",
        "sched::generate::blocks",
        "sched::generate::gather",
        "sched::generate::allgather",
        "sched::generate::alltoall",
        "sched::generate::bcast",
        "sched::generate::barrier",
        "sched::counted",
        "sched::offload",
        "sched::offload::analysis",
        "sched::offload::compile",
        "sched::offload::plan",
        "sched::offload::program",
        "sched::persist",
        "sched::sim",
        "sched::sim::steps",
        "sched::sim::transfers",
        "sched::verify",
        "sched::cost",
        "sched::tuning",
    ],
    // The runtime: per-communicator state, the executor, requests.
    &[
        "coll",
        "coll::state",
        "coll::sync",
        "coll::node",
        "coll::check",
        "coll::notice",
        "coll::revoke",
        "coll::signature",
        "coll::exec",
        "coll::request",
        "coll::run",
    ],
    // The public API.
    &["comm", "comm::split"],
    // A process joining its job: the communicator over those NICs.
    &["process"],
    &[""],
];

fn host_layer(module: &str) -> usize {
    HOST_LAYERS
        .iter()
        .position(|layer| layer.contains(&module))
        .unwrap_or_else(|| panic!("host module `{module}` has no layer in HOST_LAYERS"))
}

#[test]
fn host_arrows_point_down_through_its_layers() {
    let graph = arrows(&crate_src("host"));
    let mut up = Vec::new();
    for (from, targets) in &graph {
        for to in targets {
            if host_layer(to) > host_layer(from) {
                up.push(format!("{from} -> {to}"));
            }
        }
    }
    assert!(up.is_empty(), "arrows that run up: {}", up.join(", "));
    // The endpoint holds no collective state and knows nothing above it.
    for (from, targets) in graph.iter().filter(|(m, _)| m.starts_with("endpoint")) {
        for above in ["coll", "sched", "comm"] {
            assert!(
                !targets.iter().any(|m| m.starts_with(above)),
                "{from} names {above}"
            );
        }
    }
    // The compiler imports nothing of the runtime that runs its output
    // (issue 28: `coll` and `sched` once imported each other).
    for (from, targets) in graph.iter().filter(|(m, _)| m.starts_with("sched")) {
        for to in targets {
            assert!(
                !["coll", "comm", "endpoint", "slots"]
                    .iter()
                    .any(|runtime| to == runtime || to.starts_with(&format!("{runtime}::"))),
                "the compiler's {from} names the runtime's {to}"
            );
        }
    }
}

#[test]
fn the_checker_sees_a_planted_circle() {
    let dir = std::env::temp_dir().join(format!("railcoll-layers-{}", std::process::id()));
    let src = dir.join("src");
    std::fs::create_dir_all(src.join("b")).expect("mkdir");
    std::fs::write(src.join("lib.rs"), "pub mod a;\npub mod b;\n").expect("write");
    std::fs::write(src.join("a.rs"), "use crate::b::c::Thing; // crate::z\n").expect("write");
    std::fs::write(src.join("b/mod.rs"), "pub mod c;\n").expect("write");
    std::fs::write(src.join("b/c.rs"), "fn f() { crate::a::g(); }\n").expect("write");
    let graph = arrows(&src);
    let found = cycles(&graph);
    std::fs::remove_dir_all(&dir).expect("clean up");
    assert_eq!(found.len(), 1, "{graph:?}");
    assert!(found[0].contains(&"a".to_string()) && found[0].contains(&"b::c".to_string()));
}
