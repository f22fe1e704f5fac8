//! Study files: every command-line flag from one TOML file, so that a
//! study is reproducible from the file kept beside its results.
//!
//! ```toml
//! # allgather-study.toml
//! command = "sweep allgather"   # used when the command line names none
//! preset = "qsnet2-4x4"
//! sizes = "4..64K"              # or an array: [4, 64, "1K"]
//! predict = true                # a switch: true gives it, false leaves it out
//! csv = "allgather.csv"
//! plot = "allgather.svg"
//! ```
//!
//! `railcoll --config FILE` runs the file's `command`; `railcoll sweep
//! allgather --config FILE` takes only the flags from it. Keys are the
//! long flag names of the subcommand (`ranks-per-node` or
//! `ranks_per_node`); flags given on the command line override the file.
//! An unknown key, a value of the wrong kind or malformed TOML is refused
//! with one line naming the file, the key and what is accepted.

use clap::{ArgAction, Command};

/// A study file (or `--config` flag) that cannot be used; every message
/// is one line naming the file, the key and what is accepted.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// `--config` is the last argument.
    #[error("--config needs a file (accepted: --config FILE.toml)")]
    MissingPath,
    /// `--config` given twice.
    #[error("--config given twice (second: '{0}')")]
    Twice(String),
    /// The file cannot be read.
    #[error("config '{path}': {source}")]
    Read {
        /// The file.
        path: String,
        /// Why.
        source: std::io::Error,
    },
    /// The file is not TOML.
    #[error("config '{path}': malformed TOML: {message}")]
    Malformed {
        /// The file.
        path: String,
        /// The parser's message, on one line.
        message: String,
    },
    /// `command` is not a string.
    #[error("config '{path}': 'command' must be a string, e.g. \"sweep allgather\"")]
    CommandNotString {
        /// The file.
        path: String,
    },
    /// Neither the command line nor the file names a subcommand.
    #[error(
        "config '{path}': no subcommand on the command line or in the file's 'command' key (e.g. command = \"sweep allgather\")"
    )]
    NoCommand {
        /// The file.
        path: String,
    },
    /// A key that is no flag of the subcommand.
    #[error("config '{path}': unknown key '{key}' for `{command}` (accepted: {accepted})")]
    UnknownKey {
        /// The file.
        path: String,
        /// The key.
        key: String,
        /// The subcommand.
        command: String,
        /// Its flags, comma-separated.
        accepted: String,
    },
    /// A value of the wrong kind.
    #[error("config '{path}': key '{key}' {problem}")]
    BadValue {
        /// The file.
        path: String,
        /// The key.
        key: String,
        /// What is wrong and what is accepted.
        problem: &'static str,
    },
}

/// Where the flags a study file gave came from, so that a value the
/// command line's parser refuses is reported against the file and key.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Study {
    /// The file.
    pub path: String,
    /// Each flag spliced in: (long name, key as written, value given).
    pub flags: Vec<(String, String, String)>,
}

impl Study {
    /// The message for a parser error `e` caused by one of the file's
    /// values (the flag and the value it refused are the file's): one line
    /// naming the file and the key; `None` for any other error.
    pub fn blame(&self, e: &clap::Error) -> Option<String> {
        use clap::error::{ContextKind, ContextValue};
        let text = |kind| match e.get(kind) {
            Some(ContextValue::String(s)) => Some(s.as_str()),
            _ => None,
        };
        let arg = text(ContextKind::InvalidArg)?;
        let long = arg.split_whitespace().next()?.strip_prefix("--")?;
        let value = text(ContextKind::InvalidValue)?;
        let (_, key, _) = self
            .flags
            .iter()
            .find(|(l, _, v)| l == long && v == value)?;
        let rendered = e.render().to_string();
        let first = rendered.lines().next().unwrap_or("invalid value");
        Some(format!(
            "config '{}': key '{key}': {}",
            self.path,
            first.trim_start_matches("error: ")
        ))
    }
}

/// `args` with the flags of the study file named by `--config` spliced in
/// after the subcommand (the command line's own flags follow, and win).
/// Without `--config`, `args` unchanged.
pub fn expand(args: Vec<String>, cli: &Command) -> Result<Vec<String>, ConfigError> {
    expand_traced(args, cli).map(|(args, _)| args)
}

/// [`expand`], and what the study file gave, if there was one.
pub fn expand_traced(
    args: Vec<String>,
    cli: &Command,
) -> Result<(Vec<String>, Option<Study>), ConfigError> {
    let mut path = None;
    let mut rest = Vec::with_capacity(args.len());
    let mut it = args.into_iter();
    if let Some(program) = it.next() {
        rest.push(program);
    }
    while let Some(a) = it.next() {
        if a == "--" {
            rest.push(a);
            rest.extend(it.by_ref());
            break;
        }
        let value = if a == "--config" {
            Some(it.next().ok_or(ConfigError::MissingPath)?)
        } else {
            a.strip_prefix("--config=").map(str::to_string)
        };
        match value {
            Some(v) if path.is_some() => {
                return Err(ConfigError::Twice(v));
            }
            Some(v) => path = Some(v),
            None => rest.push(a),
        }
    }
    let Some(path) = path else {
        return Ok((rest, None));
    };
    let text = std::fs::read_to_string(&path).map_err(|source| ConfigError::Read {
        path: path.clone(),
        source,
    })?;
    let mut flags = Vec::new();
    let args = splice_traced(path.clone(), &text, rest, cli, &mut flags)?;
    Ok((args, Some(Study { path, flags })))
}

/// `rest` (the command line without `--config`) with the flags of the
/// study file `text` (read from `path`) spliced in after the subcommand.
pub fn splice(
    path: String,
    text: &str,
    rest: Vec<String>,
    cli: &Command,
) -> Result<Vec<String>, ConfigError> {
    splice_traced(path, text, rest, cli, &mut Vec::new())
}

/// [`splice`], noting in `given` each flag the file gave: (long name,
/// key, value).
fn splice_traced(
    path: String,
    text: &str,
    mut rest: Vec<String>,
    cli: &Command,
    given: &mut Vec<(String, String, String)>,
) -> Result<Vec<String>, ConfigError> {
    if rest.is_empty() {
        rest.push("railcoll".into());
    }
    let table: toml::Table = text
        .parse()
        .map_err(|e: toml::de::Error| ConfigError::Malformed {
            path: path.clone(),
            message: e.message().replace('\n', " "),
        })?;
    // The subcommand path: from the command line, else from the file.
    let (mut leaf, mut depth) = walk(cli, &rest[1..]);
    if depth == 0 {
        if let Some(command) = table.get("command") {
            let command = command
                .as_str()
                .ok_or_else(|| ConfigError::CommandNotString { path: path.clone() })?;
            let words: Vec<String> = command.split_whitespace().map(str::to_string).collect();
            rest.splice(1..1, words);
            (leaf, depth) = walk(cli, &rest[1..]);
        }
        if depth == 0 {
            return Err(ConfigError::NoCommand { path });
        }
    }
    let mut flags = Vec::new();
    for (key, value) in &table {
        if key == "command" {
            continue;
        }
        let long = key.replace('_', "-");
        let arg = leaf
            .get_arguments()
            .find(|a| a.get_long() == Some(long.as_str()) && long != "config")
            .ok_or_else(|| {
                let mut names: Vec<&str> = leaf
                    .get_arguments()
                    .filter_map(|a| a.get_long())
                    .filter(|l| !matches!(*l, "help" | "version"))
                    .collect();
                names.sort_unstable();
                ConfigError::UnknownKey {
                    path: path.clone(),
                    key: key.clone(),
                    command: leaf.get_name().to_string(),
                    accepted: names.join(", "),
                }
            })?;
        let switch = matches!(arg.get_action(), ArgAction::SetTrue);
        let bad = |problem: &'static str| ConfigError::BadValue {
            path: path.clone(),
            key: key.clone(),
            problem,
        };
        match value {
            toml::Value::Boolean(b) if switch => {
                if *b {
                    flags.push(format!("--{long}"));
                }
            }
            _ if switch => return Err(bad("is a switch: give true or false")),
            toml::Value::String(s) => flags.push(format!("--{long}={s}")),
            toml::Value::Integer(i) => flags.push(format!("--{long}={i}")),
            toml::Value::Float(f) => flags.push(format!("--{long}={f}")),
            toml::Value::Boolean(b) => flags.push(format!("--{long}={b}")),
            toml::Value::Array(items) => {
                let mut parts = Vec::new();
                for item in items {
                    match item {
                        toml::Value::String(s) => parts.push(s.clone()),
                        toml::Value::Integer(i) => parts.push(i.to_string()),
                        toml::Value::Float(f) => parts.push(f.to_string()),
                        _ => return Err(bad("must be a list of strings or numbers")),
                    }
                }
                flags.push(format!("--{long}={}", parts.join(",")));
            }
            _ => return Err(bad("must be a string, a number, true/false or a list")),
        }
    }
    for f in &flags {
        if let Some((long, value)) = f.trim_start_matches("--").split_once('=') {
            let key = table
                .keys()
                .find(|k| k.replace('_', "-") == long)
                .map_or_else(|| long.to_string(), Clone::clone);
            given.push((long.to_string(), key, value.to_string()));
        }
    }
    let at = 1 + depth;
    rest.splice(at..at, flags);
    Ok(rest)
}

/// The deepest subcommand `tokens` name from their start, and how many
/// tokens that took.
fn walk<'a>(cli: &'a Command, tokens: &[String]) -> (&'a Command, usize) {
    let mut cmd = cli;
    let mut depth = 0;
    for t in tokens {
        match cmd.find_subcommand(t) {
            Some(sub) => {
                cmd = sub;
                depth += 1;
            }
            None => break,
        }
    }
    (cmd, depth)
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::{Arg, ArgAction};

    fn cli() -> Command {
        Command::new("railcoll").subcommand(
            Command::new("sweep")
                .arg(Arg::new("collective"))
                .arg(Arg::new("nodes").long("nodes"))
                .arg(Arg::new("ranks-per-node").long("ranks-per-node"))
                .arg(Arg::new("sizes").long("sizes"))
                .arg(
                    Arg::new("predict")
                        .long("predict")
                        .action(ArgAction::SetTrue),
                ),
        )
    }

    fn file(name: &str, text: &str) -> String {
        let dir = std::env::temp_dir().join(format!("railcoll-config-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("dir");
        let p = dir.join(name);
        std::fs::write(&p, text).expect("write");
        p.display().to_string()
    }

    fn args(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn flags_come_from_the_file_and_the_command_line_wins() {
        let f = file(
            "a.toml",
            "nodes = 4\nranks_per_node = 2\nsizes = [4, \"1K\"]\npredict = true\n",
        );
        let out = expand(
            args(&[
                "railcoll",
                "sweep",
                "allgather",
                "--config",
                &f,
                "--nodes",
                "8",
            ]),
            &cli(),
        )
        .expect("expand");
        assert_eq!(
            out,
            args(&[
                "railcoll",
                "sweep",
                "--nodes=4",
                "--predict",
                "--ranks-per-node=2",
                "--sizes=4,1K",
                "allgather",
                "--nodes",
                "8"
            ])
        );
        let m = cli()
            .args_override_self(true)
            .try_get_matches_from(out)
            .expect("parses");
        let sweep = m.subcommand_matches("sweep").expect("sweep");
        assert_eq!(
            sweep.get_one::<String>("nodes").map(String::as_str),
            Some("8")
        );
    }

    #[test]
    fn the_file_can_name_the_command() {
        let f = file("b.toml", "command = \"sweep alltoall\"\nnodes = 2\n");
        let out = expand(args(&["railcoll", &format!("--config={f}")]), &cli()).expect("expand");
        assert_eq!(out, args(&["railcoll", "sweep", "--nodes=2", "alltoall"]));
    }

    #[test]
    fn bad_files_are_refused_in_one_line() {
        let run = |text: &str| {
            let f = file("c.toml", text);
            expand(args(&["railcoll", "sweep", "--config", &f]), &cli())
                .expect_err("refused")
                .to_string()
        };
        let e = run("nodez = 4\n");
        assert!(
            e.contains("unknown key 'nodez'") && e.contains("accepted: nodes"),
            "{e}"
        );
        assert!(run("nodes = [4").contains("malformed TOML"));
        assert!(run("predict = 3\n").contains("switch"));
        assert!(run("nodes = { a = 1 }\n").contains("must be"));
        for e in [run("nodez = 4\n"), run("nodes = [4")] {
            assert!(!e.contains('\n'), "{e}");
        }
        let e = expand(
            args(&["railcoll", "sweep", "--config", "/no/such.toml"]),
            &cli(),
        )
        .expect_err("io")
        .to_string();
        assert!(e.contains("/no/such.toml"), "{e}");
        let f = file("d.toml", "nodes = 1\n");
        assert!(expand(args(&["railcoll", "--config", &f]), &cli()).is_err());
    }
}
