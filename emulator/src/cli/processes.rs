//! `railcoll nicd` and `railcoll launch`: ranks as processes.

use super::*;
use crate::launcher::{LaunchSpec, Nics, check_dir, launch};
use crate::nicd::Nicd;

/// Serve until the process is killed.
pub(super) fn run_nicd(args: &NicdArgs) -> Result<(), CliError> {
    let cfg = args.served.config()?;
    check_dir(&args.dir)?;
    let here = args.served.here(&cfg).map_err(crate::EmuError::from)?;
    let served = here.as_ref().map_or(cfg.shape.nodes(), |h| h.nodes().len());
    let nicd = Nicd::start_on(&cfg, &args.dir, here)?;
    eprintln!(
        "nicd: serving {} nodes x {} rails ({} ranks per node) in {}",
        served,
        cfg.shape.rails,
        cfg.shape.ranks_per_node(),
        nicd.dir().display()
    );
    // Serves from its threads; this one has nothing left to do.
    loop {
        std::thread::park();
    }
}

/// Run the job; the launcher's status is the first failed rank's.
pub(super) fn run_launch(args: &LaunchArgs) -> Result<(), CliError> {
    let cfg = args.served.config()?;
    let Some((program, rest)) = args.program.split_first() else {
        return Err(CliError::Usage("launch: no program after --".into()));
    };
    let spec = LaunchSpec {
        program: program.into(),
        args: rest.to_vec(),
        grace: std::time::Duration::from_secs(args.grace),
        nics: match &args.nicd {
            Some(dir) => Nics::Serving(dir.clone()),
            None => Nics::Own,
        },
        output: args.output.clone(),
        fabric: args.served.here(&cfg).map_err(crate::EmuError::from)?,
    };
    let outcome = launch(&cfg, &spec)?;
    for (rail, counts) in outcome.datagrams.iter().enumerate() {
        eprintln!("launch: rail {rail}: {counts}");
    }
    let Some(first) = outcome.first_failure else {
        return Ok(());
    };
    for (rank, end) in &outcome.ranks {
        if !end.ok() {
            eprintln!("launch: rank {rank} {end}");
        }
    }
    Err(CliError::Job {
        status: outcome.status(),
        what: format!(
            "rank {first} {}",
            outcome
                .end(first)
                .unwrap_or(&crate::launcher::RankEnd::Killed)
        ),
    })
}
