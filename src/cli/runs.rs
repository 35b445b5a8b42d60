//! `skillgate runs list|show|retry`: the runs record, read from the event store (no server
//! needed) or asked of a running server (`--server`), as a table or as JSON (`--json`).

use std::process::ExitCode;
use std::sync::Arc;

use clap::{Args, Subcommand};
use serde_json::Value;

use crate::cli::done;
use crate::cli::remote::{Remote, param};
use crate::events::EventStore;
use crate::events::runs::{self, RunsQuery};

#[derive(Debug, Subcommand)]
pub enum RunsCommand {
    /// The newest runs, filtered: `skillgate runs list --status failed --since 2026-11-01T00:00:00Z`.
    List(ListArgs),
    /// One run with its args, result and error: `skillgate runs show <id>`.
    Show {
        id: String,
        /// Print the run as JSON.
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        remote: Remote,
    },
    /// Run a recorded run again with its args, as a new run linked to it: on the server that
    /// recorded it (`--server`, an admin key, for the run's principal), or here as the project.
    Retry {
        id: String,
        #[command(flatten)]
        remote: Remote,
    },
}

impl RunsCommand {
    /// The server to ask, when one is given.
    pub fn remote(&self) -> Option<&Remote> {
        let remote = match self {
            RunsCommand::List(args) => &args.remote,
            RunsCommand::Show { remote, .. } | RunsCommand::Retry { remote, .. } => remote,
        };
        remote.server.is_some().then_some(remote)
    }
}

#[derive(Debug, Args)]
pub struct ListArgs {
    /// Only runs from this door (`http`, `websocket`, `webhook`, `slack`, `email`, `mcp`, `schedule`, `event`).
    #[arg(long)]
    door: Option<String>,
    #[arg(long)]
    skill: Option<String>,
    /// `ok`, `failed`, `aborted`, `timed-out` or `refused`.
    #[arg(long)]
    status: Option<String>,
    /// A principal (`local`, `key:<name>`, `email:<address>`, …).
    #[arg(long)]
    principal: Option<String>,
    /// Started at or after (RFC 3339).
    #[arg(long)]
    since: Option<String>,
    /// Started before (RFC 3339).
    #[arg(long)]
    until: Option<String>,
    /// Text in the args or the result (any case).
    #[arg(long)]
    text: Option<String>,
    /// The `next` cursor a page printed.
    #[arg(long)]
    cursor: Option<String>,
    #[arg(long, default_value_t = runs::PAGE)]
    limit: usize,
    /// Print the page as JSON (`runs`, `next`).
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    remote: Remote,
}

pub async fn run(store: Arc<dyn EventStore>, cmd: &RunsCommand) -> ExitCode {
    let outcome = match cmd {
        RunsCommand::List(args) => list(store, args).await,
        RunsCommand::Show { id, json, .. } => show(store, id, *json).await,
        RunsCommand::Retry { .. } => Err("a retry here runs through `skillgate run`".into()),
    };
    done(outcome)
}

/// The command asked of the server `remote`.
pub async fn ask(remote: &Remote, cmd: &RunsCommand) -> ExitCode {
    let outcome = match cmd {
        RunsCommand::List(args) => ask_list(remote, args).await,
        RunsCommand::Show { id, json, .. } => remote
            .get(&format!("/runs/{}", segment(id)))
            .await
            .map(|run| print_run(&run, *json)),
        RunsCommand::Retry { id, .. } => remote
            .post(&format!("/runs/{}/retry", segment(id)))
            .await
            .map(|answer| {
                eprintln!(
                    "retried {id} as run {}",
                    answer["id"].as_str().unwrap_or("?")
                );
                print_run(&answer["result"], false);
            }),
    };
    done(outcome)
}

/// What a recorded run is run again with here: its skill and args whole, or why it cannot be.
pub async fn retry_here(
    store: &Arc<dyn EventStore>,
    id: &str,
    window: std::time::Duration,
) -> Result<runs::Retry, String> {
    let Some(run) = store.run(id).await.map_err(|e| e.to_string())? else {
        return Err(format!("no run `{id}` is recorded in this store"));
    };
    runs::retry_of(&run, window, crate::context::id::now_ms() as i64)
}

fn segment(id: &str) -> String {
    percent_encoding::utf8_percent_encode(id, percent_encoding::NON_ALPHANUMERIC).to_string()
}

async fn list(store: Arc<dyn EventStore>, args: &ListArgs) -> Result<(), String> {
    let query = RunsQuery {
        door: args.door.clone(),
        skill: args.skill.clone(),
        status: args.status.clone(),
        principal: args.principal.clone(),
        since: args.since.clone(),
        until: args.until.clone(),
        q: args.text.clone(),
        cursor: args.cursor.clone(),
        limit: Some(args.limit),
    };
    let filter = query.filter()?;
    let found = store.runs(&filter).await.map_err(|e| e.to_string())?;
    print_page(&runs::page(&found, filter.limit), args.json);
    Ok(())
}

async fn ask_list(remote: &Remote, args: &ListArgs) -> Result<(), String> {
    let given = [
        ("door", &args.door),
        ("skill", &args.skill),
        ("status", &args.status),
        ("principal", &args.principal),
        ("since", &args.since),
        ("until", &args.until),
        ("q", &args.text),
        ("cursor", &args.cursor),
    ];
    let mut query: Vec<String> = given
        .iter()
        .filter_map(|(name, value)| value.as_deref().map(|v| param(name, v)))
        .collect();
    query.push(format!("limit={}", args.limit));
    let page = remote.get(&format!("/runs?{}", query.join("&"))).await?;
    print_page(&page, args.json);
    Ok(())
}

fn print_page(page: &Value, json: bool) {
    if json {
        println!("{page}");
        return;
    }
    for run in page["runs"].as_array().into_iter().flatten() {
        println!("{}", row(run));
    }
    if let Some(next) = page["next"].as_str() {
        println!("(more: --cursor {next})");
    }
}

/// A run as one line of the table: started, status, door, skill, principal, duration, id.
fn row(run: &Value) -> String {
    let text = |key: &str| run[key].as_str().unwrap_or("-").to_string();
    let status = match run["problem"].as_str() {
        Some(problem) => format!(
            "{} ({})",
            text("status"),
            problem.trim_start_matches("/docs#problem-")
        ),
        None => text("status"),
    };
    format!(
        "{}  {:<24}  {:<9}  {:<20}  {:<20}  {:>9.1} ms  {}",
        text("started"),
        status,
        text("door"),
        text("skill"),
        text("principal"),
        run["durationMs"].as_f64().unwrap_or(0.0),
        text("id"),
    )
}

async fn show(store: Arc<dyn EventStore>, id: &str, json: bool) -> Result<(), String> {
    let found = store.run(id).await.map_err(|e| e.to_string())?;
    let Some(run) = found else {
        return Err(format!("no run `{id}` is recorded in this store"));
    };
    print_run(&runs::full(&run), json);
    Ok(())
}

fn print_run(shown: &Value, json: bool) {
    if json {
        println!("{shown}");
    } else {
        println!(
            "{}",
            serde_json::to_string_pretty(shown).unwrap_or_default()
        );
    }
}
