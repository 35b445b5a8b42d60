//! The `skillgate` command line: parse, set up logging, dispatch to one module per command.
//!
//! Exit codes: 0 ok, 1 the skill failed, 2 usage error (bad flags, unknown skill, args that do
//! not fit the skill's params); see [`exit`].

pub mod args;
pub mod dead;
pub mod events;
pub mod exit;
pub mod init;
pub mod keys;
pub mod mcp;
mod reconfigure;
mod redact;
pub mod remote;
pub mod run;
pub mod runs;
pub mod serve;
pub mod skills;
pub mod slack;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

use crate::context::log::{Level, LogConfig};

pub use exit::{FAILED, Stage, USAGE, exit_code};

#[derive(Debug, Parser)]
#[command(
    name = "skillgate",
    version,
    about = "Run skills through a middleware pipeline."
)]
pub struct Cli {
    /// More log output (-v info, -vv debug, -vvv trace).
    #[arg(help_heading = "Logging", short, long, action = clap::ArgAction::Count, global = true)]
    pub verbose: u8,
    /// Only errors.
    #[arg(
        help_heading = "Logging",
        short,
        long,
        global = true,
        conflicts_with = "verbose"
    )]
    pub quiet: bool,
    /// The project folder (its `skills/` and `main.skill.md`).
    #[arg(long, global = true, env = "SKILLGATE_PROJECT", default_value = ".")]
    pub project: PathBuf,
    /// The config file [default: skillgate.yaml in the project, if present].
    #[arg(long, global = true, env = "SKILLGATE_CONFIG")]
    pub config: Option<PathBuf>,
    #[command(flatten)]
    pub store: crate::config::StoreSettings,
    /// How many skill invocations deep a run may go before it fails (a skill that invokes
    /// itself without end, or handlers that re-emit to their own topic).
    #[arg(help_heading = "Limits", long, global = true, env = "SKILLGATE_MAX_DEPTH",
          default_value_t = crate::kernel::DEFAULT_MAX_DEPTH,
          value_parser = clap::value_parser!(u32).range(1..))]
    pub max_depth: u32,
    /// Skill invocations one run may make in all (its whole tree, and the handlers of the events
    /// it emits while it runs) before it fails.
    #[arg(help_heading = "Limits", long, global = true, env = "SKILLGATE_MAX_RUN_INVOCATIONS",
          default_value_t = crate::kernel::budget::BudgetLimits::default().invocations,
          value_parser = clap::value_parser!(u64).range(1..))]
    pub max_run_invocations: u64,
    /// Bytes of args and results one run may produce in all before it fails.
    #[arg(help_heading = "Limits", long, global = true, env = "SKILLGATE_MAX_RUN_BYTES",
          default_value_t = crate::kernel::budget::BudgetLimits::default().bytes,
          value_parser = clap::value_parser!(u64).range(1..))]
    pub max_run_bytes: u64,
    /// Seconds one run may take, from its start, before what it does next fails.
    #[arg(help_heading = "Limits", long, global = true, env = "SKILLGATE_MAX_RUN_TIME",
          default_value_t = crate::kernel::budget::BudgetLimits::default().wall.as_secs(),
          value_parser = clap::value_parser!(u64).range(1..))]
    pub max_run_time: u64,
    /// Log line format on stderr (filter with RUST_LOG).
    #[arg(
        help_heading = "Logging",
        long,
        global = true,
        env = "SKILLGATE_LOG_FORMAT",
        value_enum,
        default_value = "text"
    )]
    pub log_format: crate::telemetry::LogFormat,
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
    /// Serve the project's skills over HTTP: `POST /invoke/{skill}`, `GET /skills`, custom
    /// `web.routes`, `public/`, health, metrics and the OpenAPI document.
    Serve(Box<serve::ServeArgs>),
    /// Serve the project's public skills as an MCP server on stdin/stdout (for desktop MCP
    /// clients); `serve` offers the same over HTTP at `/mcp`.
    Mcp,
    /// Make API keys and their hashes.
    #[command(subcommand)]
    Keys(keys::KeysCommand),
    /// List and describe skills.
    #[command(subcommand)]
    Skills(skills::SkillsCommand),
    /// Look into the event store: tail, replay, dead letters.
    #[command(subcommand)]
    Events(events::EventsCommand),
    /// The runs record: every root run from every door (`list` with filters, `show <id>`,
    /// `retry <id>`), from the store or a server (`--server`).
    #[command(subcommand)]
    Runs(runs::RunsCommand),
    /// Dead letters of every queue (`list`, `replay <id>`), from the store or a server.
    #[command(subcommand)]
    Dead(dead::DeadCommand),
    /// Check the Slack settings and bot token: `skillgate slack check`.
    #[command(subcommand)]
    Slack(slack::SlackCommand),
    /// Start a new project in a folder: a main skill, examples, `skillgate.yaml`.
    Init(init::InitArgs),
    /// Create or update the event store's tables (safe with many replicas at once);
    /// `--check` only reports what is pending and exits 1 if anything is.
    Migrate(MigrateArgs),
}

#[derive(Debug, clap::Args)]
pub struct MigrateArgs {
    /// Change nothing: list the migrations the store has not applied, exit 1 if there are any.
    #[arg(long)]
    pub check: bool,
}

impl Cli {
    pub fn log_config(&self) -> LogConfig {
        log_config(self.quiet, self.verbose)
    }
}

/// The exit of a command that printed its answer, or says what went wrong.
pub(crate) fn done(outcome: Result<(), String>) -> ExitCode {
    match outcome {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("error: {err}");
            ExitCode::from(FAILED)
        }
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
    // The commands that run skills or touch the store read the config file first.
    let file = match &cli.command {
        Command::Keys(_) | Command::Skills(_) | Command::Init(_) => {
            crate::config::ConfigFile::default()
        }
        _ => match crate::config::ConfigFile::read(&cli.project, cli.config.as_deref()) {
            Ok(file) => file,
            Err(mut errors) => {
                // `serve` also checks its routes, so one run shows every mistake.
                if matches!(cli.command, Command::Serve(_)) {
                    errors.extend(serve::route_errors(&cli.project));
                }
                for error in &errors.0 {
                    eprintln!("error: {error}");
                }
                return ExitCode::from(USAGE);
            }
        },
    };
    let store = cli.store.clone().or(file.store.clone());
    match &cli.command {
        Command::Run(args) => {
            let Some(opened) = open_store(&cli, &store).await else {
                return ExitCode::from(FAILED);
            };
            run::run(
                &cli.project,
                opened,
                (store.bus(), cli.limits()),
                (cli.quiet, cli.verbose),
                log,
                args,
            )
            .await
        }
        Command::Serve(args) => {
            let Some(opened) = open_store(&cli, &store).await else {
                return ExitCode::from(FAILED);
            };
            let label = redact::url(&store.url());
            serve::serve(
                &cli.project,
                &file,
                (opened, label),
                (store.bus(), cli.limits()),
                log,
                args,
            )
            .await
        }
        Command::Mcp => {
            let Some(opened) = open_store(&cli, &store).await else {
                return ExitCode::from(FAILED);
            };
            mcp::mcp(
                &cli.project,
                &file,
                opened,
                (store.bus(), cli.limits()),
                log,
            )
            .await
        }
        Command::Keys(cmd) => keys::run(cmd),
        Command::Init(args) => init::run(args, &cli.project),
        Command::Slack(cmd) => slack::run(&cli.project, &file, cmd).await,
        Command::Skills(cmd) => skills::run(&cli.project, cmd),
        Command::Events(cmd) => match open_store(&cli, &store).await {
            Some(opened) => events::run(opened, cmd).await,
            None => ExitCode::from(FAILED),
        },
        Command::Runs(cmd) if cmd.remote().is_some() => match cmd.remote() {
            Some(remote) => runs::ask(remote, cmd).await,
            None => ExitCode::from(FAILED),
        },
        Command::Runs(runs::RunsCommand::Retry { id, .. }) => {
            let Some(opened) = open_store(&cli, &store).await else {
                return ExitCode::from(FAILED);
            };
            let window = store.runs().unwrap_or_default().retry_window;
            let retry = match runs::retry_here(&opened, id, window).await {
                Ok(retry) => retry,
                Err(err) => {
                    eprintln!("error: {err}");
                    return ExitCode::from(FAILED);
                }
            };
            // The command line is the project: the run goes again here with the project's
            // authority, recorded (door `cli`) and linked to the one it repeats.
            let args = run::RunArgs {
                skill: Some(retry.skill),
                rest: vec!["--arg-json".into(), retry.args.to_string()],
                record: true,
                parent: Some(id.clone()),
            };
            run::run(
                &cli.project,
                opened,
                (store.bus(), cli.limits()),
                (cli.quiet, cli.verbose),
                log,
                &args,
            )
            .await
        }
        Command::Runs(cmd) => match open_store(&cli, &store).await {
            Some(opened) => runs::run(opened, cmd).await,
            None => ExitCode::from(FAILED),
        },
        Command::Dead(cmd) if cmd.remote().is_some() => match cmd.remote() {
            Some(remote) => dead::ask(remote, cmd).await,
            None => ExitCode::from(FAILED),
        },
        Command::Dead(cmd) => match open_store(&cli, &store).await {
            Some(opened) => dead::run(opened, cmd).await,
            None => ExitCode::from(FAILED),
        },
        Command::Migrate(args) if args.check => check_migrations(&cli, &store).await,
        Command::Migrate(_) => match open_store(&cli, &store).await {
            Some(opened) => {
                println!(
                    "{} event store {} is up to date",
                    opened.kind(),
                    redact::url(&store.url())
                );
                ExitCode::SUCCESS
            }
            None => ExitCode::from(FAILED),
        },
    }
}

/// `migrate --check`: lists the pending migrations without applying them; 0 when there are
/// none, 1 when there are (a deploy step can refuse to roll out), 2 when the store cannot be
/// read.
async fn check_migrations(cli: &Cli, store: &crate::config::StoreSettings) -> ExitCode {
    let url = store.url();
    match crate::events::migrations::pending(&url, &cli.project).await {
        Ok(pending) if pending.is_empty() => {
            println!("event store {} is up to date", redact::url(&url));
            ExitCode::SUCCESS
        }
        Ok(pending) => {
            println!(
                "event store {} has {} pending migration(s):",
                redact::url(&url),
                pending.len()
            );
            for migration in &pending {
                println!("  {migration}");
            }
            ExitCode::from(FAILED)
        }
        Err(err) => {
            let said = format!("cannot read the event store `{url}`: {err}");
            eprintln!("error: {}", redact::message(&said, &url));
            ExitCode::from(USAGE)
        }
    }
}

/// Opens (and migrates) the configured event store, printing why not.
async fn open_store(
    cli: &Cli,
    store: &crate::config::StoreSettings,
) -> Option<std::sync::Arc<dyn crate::events::EventStore>> {
    let url = store.url();
    match crate::events::open::open_store(&url, &cli.project, store.limits()).await {
        Ok(opened) => Some(opened),
        Err(err) => {
            // Store URLs may carry a password: never print one.
            let said = format!("cannot open the event store `{url}`: {err}");
            eprintln!("error: {}", redact::message(&said, &url));
            None
        }
    }
}

/// What each run may do: how deep it goes and what it spends.
#[derive(Debug, Clone, Copy)]
pub struct RunLimits {
    pub max_depth: u32,
    pub budget: crate::kernel::budget::BudgetLimits,
}

/// The kernel builder every command that runs skills starts from: the project's skills and
/// built-ins, its log settings, the bus, and the run limits.
pub fn kernel_builder(
    project: &std::path::Path,
    log: crate::context::log::LogConfig,
    bus: std::sync::Arc<crate::events::Bus>,
    limits: RunLimits,
) -> crate::kernel::KernelBuilder {
    use crate::events::WithBus;
    crate::builtins::builder(project)
        .log_config(log)
        .bus(bus)
        .max_depth(limits.max_depth)
        .budget(limits.budget)
}

impl Cli {
    /// The run limits the command line and the environment set.
    pub fn limits(&self) -> RunLimits {
        RunLimits {
            max_depth: self.max_depth,
            budget: crate::kernel::budget::BudgetLimits {
                invocations: self.max_run_invocations,
                bytes: self.max_run_bytes,
                wall: std::time::Duration::from_secs(self.max_run_time),
            },
        }
    }
}
