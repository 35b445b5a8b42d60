//! The `skillgate` command line: parse, set up logging, dispatch to one module per command.
//!
//! Exit codes: 0 ok, 1 the skill failed, 2 usage error (bad flags, unknown skill, args that do
//! not fit the skill's params).

pub mod args;
pub mod run;
pub mod skills;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

use crate::context::log::{Level, LogConfig};

#[derive(Debug, Parser)]
#[command(
    name = "skillgate",
    version,
    about = "Run skills through a middleware pipeline."
)]
pub struct Cli {
    /// More log output (-v info, -vv debug, -vvv trace).
    #[arg(short, long, action = clap::ArgAction::Count, global = true)]
    pub verbose: u8,
    /// Only errors.
    #[arg(short, long, global = true, conflicts_with = "verbose")]
    pub quiet: bool,
    /// The project folder (its `skills/` and `main.skill.md`).
    #[arg(long, global = true, env = "SKILLGATE_PROJECT", default_value = ".")]
    pub project: PathBuf,
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run a skill by name or path: `skillgate run hello --name Ada`.
    ///
    /// Unknown `--key value` flags become args, coerced by the skill's params schema; repeated
    /// flags become arrays. Also: `--arg key=value`, `--arg-json '{...}'`, and
    /// `--set key=value` to override metadata for this run (e.g. `--set debug=true`).
    Run(run::RunArgs),
    /// List and describe skills.
    #[command(subcommand)]
    Skills(skills::SkillsCommand),
}

/// Exit code for a usage error.
pub const USAGE: u8 = 2;
/// Exit code for a skill that failed.
pub const FAILED: u8 = 1;

impl Cli {
    pub fn log_config(&self) -> LogConfig {
        log_config(self.quiet, self.verbose)
    }
}

/// Log settings for `-q` / `-v` counts: errors only, warn (default), info, debug, trace.
pub fn log_config(quiet: bool, verbose: u8) -> LogConfig {
    let level = match (quiet, verbose) {
        (true, _) => Level::Error,
        (_, 0) => Level::Warn,
        (_, 1) => Level::Info,
        (_, 2) => Level::Debug,
        _ => Level::Trace,
    };
    LogConfig {
        level,
        scope: None,
        reporters: vec!["stderr".into()],
    }
}

/// Runs the parsed command line.
pub async fn main(cli: Cli) -> ExitCode {
    let log = cli.log_config();
    match &cli.command {
        Command::Run(args) => run::run(&cli.project, (cli.quiet, cli.verbose), log, args).await,
        Command::Skills(cmd) => skills::run(&cli.project, cmd),
    }
}
