//! The `railcoll` command line.
//!
//! Conventions shared by every subcommand: the cluster shape (`--nodes`,
//! `--ranks-per-node`, `--rails`, `--placement`), `--sizes` as a list
//! (`8,64,1K`) or a power-of-two range (`8..4M`), and `--json` for one JSON
//! object per result line. Bad arguments exit with status 2 and one line
//! naming the problem and the accepted values. Every flag can also come
//! from a study file (`--config FILE.toml`, see
//! [`crate::workbench::config`]).
//!
//! - this module: parsing, the `bench`, `schedule`, `profile` and `tuning`
//!   subcommands;
//! - `workbench`: `sweep`, `trace` and `tune`;
//! - `calibration`: `calibrate` and `validate`;
//! - [`error`]: [`CliError`], and the one place that prints it and picks
//!   the exit status.

mod args;
mod calibration;
mod conformance;
pub mod error;
mod measure;
mod processes;
mod schedules;
mod workbench;

use std::io::Write;

use clap::{Args, CommandFactory, Parser, Subcommand};
use railcoll_host::Placement;

use crate::bench::{self, CollBench, CollRecord, PutRecord};
use crate::cluster::{ClusterConfig, DataMode, Mode, THREADS_PACKET_SIZE};
use crate::hw::faults::{FaultSpec, parse_time};
use crate::modeled::{DEFAULT_PROFILE, Profile};
use railcoll_host::sched::catalogue;
use railcoll_host::sched::cost::{self, Hockney};
use railcoll_host::sched::tuning::TuningTable;
use railcoll_host::sched::verify::{Budget, verify};
use railcoll_host::sched::{Collective, Params, Shape, generate};

use crate::workbench::AlgoSet;
pub use args::*;
pub use calibration::{CalibrateArgs, ValidateArgs};
pub use error::CliError;
use error::output;
use measure::*;
use schedules::*;
pub(crate) use schedules::{user_tuning_path, users_tuning};
pub use workbench::{StudyArgs, SweepArgs, TraceArgs, TuneArgs};

/// Run the CLI on `args`; returns the process exit status. The one exit
/// path: every failure comes back here as a [`CliError`], which
/// [`CliError::report`] prints and turns into the status.
pub fn main_with(args: impl IntoIterator<Item = String>) -> i32 {
    match run(args) {
        Ok(()) => 0,
        Err(e) => e.report(),
    }
}

/// Parse `args` (with any study file spliced in) and run the command.
pub fn run(args: impl IntoIterator<Item = String>) -> Result<(), CliError> {
    let (args, study) =
        crate::workbench::config::expand_traced(args.into_iter().collect(), &Cli::command())?;
    // A value the parser refuses that came from a study file is reported
    // against the file and its key (the flag means little to its author).
    let cli =
        Cli::try_parse_from(args).map_err(|e| match study.as_ref().and_then(|s| s.blame(&e)) {
            Some(message) => CliError::Usage(message),
            None => CliError::Arguments(e),
        })?;
    match cli.command {
        Command::Sweep(args) => workbench::run_sweep(&args),
        Command::Trace(args) => workbench::run_trace(&args),
        Command::Tune(args) => workbench::run_tune(&args),
        Command::Calibrate(args) => calibration::run_calibrate(&args),
        Command::Validate(args) => calibration::run_validate(&args),
        Command::Bench { what } => match what {
            BenchCommand::Put(args) => run_put(&args),
            BenchCommand::Barrier(args) => run_barrier(&args),
            BenchCommand::Bcast(args) => run_bcast(&args),
            BenchCommand::Gather(args) => run_catalogue(Collective::Gather, &args),
            BenchCommand::Allgather(args) => run_catalogue(Collective::Allgather, &args),
            BenchCommand::Alltoall(args) => run_catalogue(Collective::Alltoall, &args),
            BenchCommand::Revoke(args) => run_revoke(&args),
        },
        Command::Schedule {
            what: ScheduleCommand::Show(args),
        } => run_schedule_show(&args),
        Command::Schedule {
            what: ScheduleCommand::List,
        } => print_text(catalogue::markdown()),
        Command::Tuning {
            what: TuningCommand::Show { tuning },
        } => run_tuning_show(tuning.as_deref()),
        Command::Profile { what } => run_profile(&what),
        Command::Soak(args) => run_soak(&args),
        Command::Nicd(args) => processes::run_nicd(&args),
        Command::Launch(args) => processes::run_launch(&args),
        Command::Conformance(args) => conformance::run(&args),
    }
}

/// Print a command's text on stdout: the one way plain output leaves (a
/// closed pipe, `railcoll tuning show | true`, ends the command quietly,
/// as a pipe's reader that has read enough expects; `print!` would panic).
fn print_text(text: impl std::fmt::Display) -> Result<(), CliError> {
    output(write!(std::io::stdout().lock(), "{text}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_parse_lists_and_ranges_and_refuse_garbage() {
        assert_eq!(parse_sizes("8,64,1K"), Ok(Sizes(vec![8, 64, 1024])));
        assert_eq!(parse_sizes("8..64"), Ok(Sizes(vec![8, 16, 32, 64])));
        assert_eq!(parse_sizes("1M..1M"), Ok(Sizes(vec![1 << 20])));
        assert_eq!(parse_sizes("64,4,64,4K,4"), Ok(Sizes(vec![64, 4, 4096])));
        let many = vec!["4"; 5000].join(",");
        assert_eq!(parse_sizes(&many), Ok(Sizes(vec![4])));
        assert!(parse_sizes("64..8").is_err());
        assert!(parse_sizes("0..8").is_err());
        assert!(parse_sizes("abc").is_err());
        assert!(parse_sizes("4T").is_err());
        assert!(parse_sizes("3G").is_err());
        assert!(parse_packet_size("1000").is_err());
        assert_eq!(parse_packet_size("2K"), Ok(2048));
    }

    #[test]
    fn a_relative_xdg_config_home_is_ignored() {
        let path = |xdg: Option<&str>, home: Option<&str>| {
            user_tuning_path_in(xdg.map(Into::into), home.map(Into::into))
        };
        let home = Some(std::path::PathBuf::from("/h/.config/railcoll/tuning.toml"));
        assert_eq!(path(Some("rel/cfg"), Some("/h")), home);
        assert_eq!(path(Some(""), Some("/h")), home);
        assert_eq!(
            path(Some("/x"), Some("/h")),
            Some("/x/railcoll/tuning.toml".into())
        );
        assert_eq!(path(Some("rel"), None), None);
    }

    #[test]
    fn the_command_line_definition_is_consistent() {
        Cli::command().debug_assert();
    }

    #[test]
    fn bad_arguments_exit_2() {
        let run = |a: &[&str]| {
            main_with(
                std::iter::once("railcoll")
                    .chain(a.iter().copied())
                    .map(String::from),
            )
        };
        assert_eq!(run(&["bench", "put", "--nodes", "0"]), 2);
        assert_eq!(run(&["bench", "put", "--rails", "5"]), 2);
        assert_eq!(run(&["bench", "put", "--sizes", "x"]), 2);
        assert_eq!(run(&["bench", "put", "--placement", "diagonal"]), 2);
        assert_eq!(run(&["bench", "teleport"]), 2);
        assert_eq!(
            run(&["bench", "put", "--nodes", "1"]),
            2,
            "a put benchmark needs two ranks"
        );
    }
}
