//! `skillgate runs list|show`: the runs record, read from the event store (no server needed),
//! as a table or as JSON (`--json`).

use std::process::ExitCode;
use std::sync::Arc;

use clap::{Args, Subcommand};
use serde_json::Value;

use crate::cli::FAILED;
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
    },
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
}

pub async fn run(store: Arc<dyn EventStore>, cmd: &RunsCommand) -> ExitCode {
    let outcome = match cmd {
        RunsCommand::List(args) => list(store, args).await,
        RunsCommand::Show { id, json } => show(store, id, *json).await,
    };
    match outcome {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("error: {err}");
            ExitCode::from(FAILED)
        }
    }
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
    let page = runs::page(&found, filter.limit);
    if args.json {
        println!("{page}");
        return Ok(());
    }
    for run in page["runs"].as_array().into_iter().flatten() {
        println!("{}", row(run));
    }
    if let Some(next) = page["next"].as_str() {
        println!("(more: --cursor {next})");
    }
    Ok(())
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
    let shown = runs::full(&run);
    if json {
        println!("{shown}");
    } else {
        println!(
            "{}",
            serde_json::to_string_pretty(&shown).unwrap_or_default()
        );
    }
    Ok(())
}
