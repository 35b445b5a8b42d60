//! The `skillgate` command line: parse, set up logging, dispatch to one module per command.
//!
//! Exit codes: 0 ok, 1 the skill failed, 2 usage error (bad flags, unknown skill, args that do
//! not fit the skill's params); see [`exit`].

pub mod args;
pub mod events;
pub mod exit;
pub mod keys;
mod redact;
pub mod run;
pub mod serve;
pub mod skills;

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
    /// The event store: `sqlite://<file>` (relative to the project), `postgres://...` or
    /// `memory`. Without it, `DATABASE_URL` when set, else `sqlite://.skillgate/events.db`.
    // Help does not show the value from the environment: it may hold a password.
    #[arg(
        help_heading = "Event store",
        long,
        global = true,
        env = "SKILLGATE_STORE",
        hide_env_values = true
    )]
    pub store: Option<String>,
    /// Events each topic keeps for replay.
    #[arg(
        help_heading = "Event store",
        long,
        global = true,
        env = "SKILLGATE_BUFFER_EVENTS",
        default_value_t = 1000
    )]
    pub buffer_events: usize,
    /// Oldest event kept for replay, in seconds.
    #[arg(
        help_heading = "Event store",
        long,
        global = true,
        env = "SKILLGATE_BUFFER_AGE",
        default_value_t = 86_400
    )]
    pub buffer_age: u64,
    /// Deliveries after which an event moves to `<topic>.dead`.
    #[arg(help_heading = "Event store", long, global = true, env = "SKILLGATE_DELIVERY_LIMIT", default_value_t = 5,
          value_parser = clap::value_parser!(u32).range(1..))]
    pub delivery_limit: u32,
    /// How long a delivered event stays invisible before it is delivered again, in milliseconds.
    #[arg(
        help_heading = "Event store",
        long,
        global = true,
        env = "SKILLGATE_VISIBILITY",
        default_value_t = 30_000
    )]
    pub visibility: u64,
    /// How long one run of an event handler skill may take, in milliseconds (default: the
    /// visibility timeout). A run past it is stopped and its event delivered again.
    #[arg(help_heading = "Event store", long, global = true, env = "SKILLGATE_HANDLER_TIMEOUT",
          value_parser = clap::value_parser!(u64).range(1..))]
    pub handler_timeout: Option<u64>,
    /// How many skill invocations deep a run may go before it fails (a skill that invokes
    /// itself without end, or handlers that re-emit to their own topic).
    #[arg(help_heading = "Limits", long, global = true, env = "SKILLGATE_MAX_DEPTH",
          default_value_t = crate::kernel::DEFAULT_MAX_DEPTH,
          value_parser = clap::value_parser!(u32).range(1..))]
    pub max_depth: u32,
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
    /// Make API keys and their hashes.
    #[command(subcommand)]
    Keys(keys::KeysCommand),
    /// List and describe skills.
    #[command(subcommand)]
    Skills(skills::SkillsCommand),
    /// Look into the event store: tail, replay, dead letters.
    #[command(subcommand)]
    Events(events::EventsCommand),
    /// Create or update the event store's tables.
    Migrate,
}

impl Cli {
    pub fn log_config(&self) -> LogConfig {
        log_config(self.quiet, self.verbose)
    }

    /// The store in use: `--store` (or `SKILLGATE_STORE`), else `DATABASE_URL` (what sqlx,
    /// hosting platforms and Postgres tools set), else the embedded SQLite file.
    pub fn store_url(&self) -> String {
        self.store
            .clone()
            .or_else(|| std::env::var("DATABASE_URL").ok().filter(|u| !u.is_empty()))
            .unwrap_or_else(|| crate::events::open::DEFAULT_STORE.to_string())
    }

    /// The bus settings of `--visibility` and `--handler-timeout`.
    pub fn bus_config(&self) -> crate::events::BusConfig {
        let visibility = std::time::Duration::from_millis(self.visibility);
        let mut bus = crate::events::BusConfig::with_visibility(visibility);
        if let Some(ms) = self.handler_timeout {
            bus.handler_timeout = std::time::Duration::from_millis(ms);
        }
        bus
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
        Command::Run(args) => {
            let Some(store) = open_store(&cli).await else {
                return ExitCode::from(FAILED);
            };
            let bus = cli.bus_config();
            run::run(
                &cli.project,
                store,
                (bus, cli.max_depth),
                (cli.quiet, cli.verbose),
                log,
                args,
            )
            .await
        }
        Command::Serve(args) => {
            let Some(store) = open_store(&cli).await else {
                return ExitCode::from(FAILED);
            };
            let bus = cli.bus_config();
            let label = redact::url(&cli.store_url());
            serve::serve(
                &cli.project,
                (store, label),
                (bus, cli.max_depth),
                log,
                args,
            )
            .await
        }
        Command::Keys(cmd) => keys::run(cmd),
        Command::Skills(cmd) => skills::run(&cli.project, cmd),
        Command::Events(cmd) => match open_store(&cli).await {
            Some(store) => events::run(store, cmd).await,
            None => ExitCode::from(FAILED),
        },
        Command::Migrate => match open_store(&cli).await {
            Some(store) => {
                println!(
                    "{} event store {} is up to date",
                    store.kind(),
                    redact::url(&cli.store_url())
                );
                ExitCode::SUCCESS
            }
            None => ExitCode::from(FAILED),
        },
    }
}

/// Opens (and migrates) the configured event store, printing why not.
async fn open_store(cli: &Cli) -> Option<std::sync::Arc<dyn crate::events::EventStore>> {
    let url = cli.store_url();
    match crate::events::open::open_store(
        &url,
        &cli.project,
        crate::events::Limits {
            buffer_events: cli.buffer_events,
            buffer_age: std::time::Duration::from_secs(cli.buffer_age),
            delivery_limit: cli.delivery_limit,
        },
    )
    .await
    {
        Ok(store) => Some(store),
        Err(err) => {
            // Store URLs may carry a password: never print one.
            let said = format!("cannot open the event store `{url}`: {err}");
            eprintln!("error: {}", redact::message(&said, &url));
            None
        }
    }
}
