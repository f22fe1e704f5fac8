//! The one error of the command line, and the one place that turns it
//! into a message and an exit status ([`CliError::report`]).
//!
//! Exit statuses: 0 success (and `--help`, `--version`); 2 the request was
//! bad and nothing ran (flags, names, shapes, study files, output paths,
//! profiles, tuning tables, a cluster configuration the emulator refuses);
//! 1 a run that was asked for properly failed (the emulator or host
//! failed, a modeled run was not deterministic, results could not be
//! written).

use crate::cluster::EmuError;
use crate::modeled::ProfileError;
use crate::workbench::config::ConfigError;
use crate::workbench::sweep::SweepError;
use crate::workbench::{OutputError, SpecError};

/// Everything a `railcoll` command can fail with.
#[derive(Debug, thiserror::Error)]
pub enum CliError {
    /// clap refused the command line, or it asked for help or the version
    /// (exit 2; help and version 0).
    #[error("{0}")]
    Arguments(clap::Error),
    /// Bad input the command itself found: one line naming the problem
    /// and the accepted values (exit 2).
    #[error("{0}")]
    Usage(String),
    /// A study file that cannot be used (exit 2).
    #[error(transparent)]
    Study(#[from] ConfigError),
    /// A study refused before running: shape, root, sizes, algorithms
    /// (exit 2).
    #[error(transparent)]
    Spec(#[from] SpecError),
    /// A calibration profile that cannot be loaded (exit 2).
    #[error(transparent)]
    Profile(#[from] ProfileError),
    /// A built-in profile that does not load: a bug (exit 1).
    #[error(transparent)]
    BuiltinProfile(ProfileError),
    /// The host library refused the request: a tuning table, a schedule
    /// (exit 2).
    #[error(transparent)]
    Host(#[from] railcoll_host::Error),
    /// An output file: refused before the run (exit 2), or not written
    /// after it (exit 1).
    #[error(transparent)]
    Output(#[from] OutputError),
    /// The emulator refused the configuration (exit 2) or failed the run
    /// (exit 1).
    #[error(transparent)]
    Run(#[from] EmuError),
    /// A sweep or trace was refused (exit 2) or failed (as [`CliError::Run`]).
    #[error(transparent)]
    Sweep(#[from] SweepError),
    /// `railcoll conformance`: checks failed (exit 1).
    #[error("conformance: {failed} of {checks} checks failed")]
    Nonconformant {
        /// Checks that failed.
        failed: usize,
        /// Checks run.
        checks: usize,
    },
    /// `--check-determinism`: the two runs' trace hashes differ (exit 1).
    #[error("determinism check failed: trace hashes differ between {workers} and {other} workers")]
    Nondeterministic {
        /// Worker threads of the first run.
        workers: usize,
        /// Worker threads of the second run.
        other: usize,
    },
    /// A launched job failed: the status is its first failed rank's
    /// (a rank killed by signal `s`: 128 + `s`).
    #[error("the job failed: {what}")]
    Job {
        /// The exit status.
        status: i32,
        /// Which rank, and how.
        what: String,
    },
    /// Writing the results to stdout failed (exit 1; a closed pipe is not
    /// an error).
    #[error("writing output: {0}")]
    Stdout(std::io::Error),
}

fn run_status(e: &EmuError) -> i32 {
    match e {
        EmuError::Config(_) => 2,
        _ => 1,
    }
}

impl CliError {
    /// The process exit status.
    pub fn exit_code(&self) -> i32 {
        use clap::error::ErrorKind;
        match self {
            CliError::Arguments(e)
                if matches!(e.kind(), ErrorKind::DisplayHelp | ErrorKind::DisplayVersion) =>
            {
                0
            }
            CliError::Arguments(_)
            | CliError::Usage(_)
            | CliError::Study(_)
            | CliError::Spec(_)
            | CliError::Profile(_)
            | CliError::Host(_) => 2,
            CliError::Output(e) if e.before_run() => 2,
            CliError::Run(e) | CliError::Sweep(SweepError::Run(e)) => run_status(e),
            CliError::Sweep(SweepError::Invalid(_) | SweepError::Missing { .. }) => 2,
            CliError::Job { status, .. } => *status,
            CliError::BuiltinProfile(_)
            | CliError::Output(_)
            | CliError::Nondeterministic { .. }
            | CliError::Nonconformant { .. }
            | CliError::Stdout(_) => 1,
        }
    }

    /// Print the error (one line on stderr, `error: ...`; clap's help and
    /// version as clap prints them) and return the exit status.
    pub fn report(&self) -> i32 {
        use clap::error::ErrorKind;
        match self {
            CliError::Arguments(e)
                if matches!(
                    e.kind(),
                    ErrorKind::DisplayHelp
                        | ErrorKind::DisplayVersion
                        | ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand
                ) =>
            {
                let _ = e.print();
            }
            CliError::Arguments(e) => {
                // One line: clap's first line names the problem and, for
                // enumerations and ranges, the accepted values.
                let text = e.render().to_string();
                let first = text.lines().next().unwrap_or("error: invalid arguments");
                // Enumerations list their accepted values on a later line:
                // keep them on the one line we print.
                match text.lines().find(|l| l.contains("possible values")) {
                    Some(values) => eprintln!("{first} {}", values.trim()),
                    None => eprintln!("{first}"),
                }
            }
            e => eprintln!("error: {e}"),
        }
        self.exit_code()
    }
}

/// The result of writing output: a closed pipe is not an error.
pub(super) fn output(result: std::io::Result<()>) -> Result<(), CliError> {
    match result {
        Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => Err(CliError::Stdout(e)),
        _ => Ok(()),
    }
}
