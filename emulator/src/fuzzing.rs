//! Entry points of the fuzz targets on the emulator's and the host
//! library's parsers of untrusted input, shared by the fuzz runner
//! (`tests/tests/fuzz.rs`, `.ci/fuzz`) and cargo-fuzz targets. None may
//! panic, on any bytes: a panic is the finding. Each returns how many of
//! its parsers accepted the input (coverage for the runner's report).

use clap::{CommandFactory, Parser};
use railcoll_host::Placement;
use railcoll_host::sched::budget;
use railcoll_host::sched::tuning::TuningTable;
use railcoll_host::sched::verify::{Budget, verify};
use railcoll_host::sched::{Choice, Collective, Params, Shape, generate};

use crate::cli::{Cli, parse_sizes};
use crate::hw::faults::FaultSpec;
use crate::modeled::Profile;
use crate::workbench::config;

/// Feed `data`, as text, to every parser of files and flags a user
/// writes: calibration profiles, tuning tables, fault specs, study files
/// (spliced into a command line, which the CLI then parses), size lists
/// and fabric files. A fault spec that parses must print a canonical form that
/// parses back to it.
pub fn parse_texts(data: &[u8]) -> usize {
    let text = String::from_utf8_lossy(data);
    let mut accepted = 0;
    accepted += usize::from(Profile::parse("fuzz", &text).is_ok());
    accepted += usize::from(TuningTable::parse(&text).is_ok());
    if let Ok(spec) = text.parse::<FaultSpec>() {
        accepted += 1;
        let again = spec.to_string().parse::<FaultSpec>();
        assert_eq!(again.as_ref(), Ok(&spec), "fault spec round trip: {text:?}");
    }
    let line = vec!["railcoll".to_string()];
    if let Ok(args) = config::splice("fuzz.toml".into(), &text, line, &Cli::command()) {
        accepted += 1;
        accepted += usize::from(Cli::try_parse_from(args).is_ok());
    }
    accepted += usize::from(parse_sizes(&text).is_ok());
    accepted += usize::from(crate::fabric::Fabric::parse(&text).is_ok());
    accepted
}

/// Little-endian reader over fuzz bytes (zeros once they run out).
struct Bytes<'a>(&'a [u8]);

impl Bytes<'_> {
    fn byte(&mut self) -> u8 {
        let (first, rest) = self.0.split_first().map_or((0, &[][..]), |(f, r)| (*f, r));
        self.0 = rest;
        first
    }

    fn below(&mut self, n: usize) -> usize {
        usize::from(self.byte()) % n.max(1)
    }
}

/// Block sizes the schedule target draws from: empty, odd, packet and
/// page boundaries and past them, large.
const BLOCKS: [usize; 12] = [0, 1, 3, 7, 64, 255, 1000, 2048, 4096, 4097, 65537, 1 << 20];

/// Derive schedule parameters from `data` (collective, algorithm, drive,
/// shape up to 16 nodes x 8 ranks x 4 rails, placement, root, block size,
/// striping threshold) and generate the set. A set the generator accepts
/// and that fits the default budget (a communicator refuses one that does
/// not, with a typed error, before posting anything) must pass the
/// verifier (its proof of delivery and ordering).
/// Returns 1 if a set was generated.
pub fn schedules(data: &[u8]) -> usize {
    let mut b = Bytes(data);
    let c = Collective::ALL[b.below(Collective::ALL.len())];
    let algorithms = c.algorithms();
    let a = algorithms[b.below(algorithms.len())];
    let choice = match b.below(3) {
        0 => Choice::host(a),
        1 => Choice::nic(a),
        _ => Choice::nic_dma(a),
    };
    let nodes = 1 + b.below(16);
    let rpn = 1 + b.below(8);
    let sockets = 1 + b.below(rpn);
    let rails = 1 + b.below(4);
    let placement = if b.byte() & 1 == 0 {
        Placement::Block
    } else {
        Placement::Cyclic
    };
    let Ok(shape) = Shape::new(nodes, rpn, sockets, rails, placement) else {
        return 0;
    };
    let root = usize::from(b.byte()) % shape.size();
    let block = BLOCKS[b.below(BLOCKS.len())];
    let mut params = Params::new(c, a, shape, root, block).with_choice(choice);
    params.stripe_threshold = [0, 4096, usize::MAX][b.below(3)];
    let Ok(set) = generate(&params) else {
        return 0;
    };
    // A set beyond the NICs' resources is refused before anything is
    // posted (`Error::OverBudget`), one beyond the node's memory when its
    // scratch is allocated (`Error::OutOfBounds`): resources, not a
    // defect of the schedule. The verifier checks both first.
    let budget = Budget::default();
    if budget::fits(&set, &budget).is_err()
        || budget::scratch_per_node(&set) > budget.scratch_bytes_per_node
    {
        return 0;
    }
    if let Err(v) = verify(&set, &budget) {
        panic!("{params:?}: a generated set fails the verifier: {v}");
    }
    1
}

/// Feed `data` to the decoder of a rail's UDP datagrams
/// ([`crate::fabric::datagram::decode`]): a datagram it takes must encode
/// back to the same bytes (nothing in it is dropped or invented). 1 if
/// it took it.
pub fn decode_datagram(data: &[u8]) -> usize {
    use crate::fabric::datagram::{decode, encode};
    let Ok(d) = decode(data) else {
        return 0;
    };
    assert_eq!(
        encode(&d.packet, d.hop, d.rail),
        data,
        "a decoded datagram does not encode back to itself"
    );
    1
}
