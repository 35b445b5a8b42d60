//! `skillgate dead list|replay`: the dead letters of every queue, read from the event store or
//! asked of a running server (`--server`, an admin key), and one put back into its queue.

use std::process::ExitCode;
use std::sync::Arc;

use clap::Subcommand;
use serde_json::{Value, json};

use crate::cli::done;
use crate::cli::remote::Remote;
use crate::events::EventStore;
use crate::events::dead;

#[derive(Debug, Subcommand)]
pub enum DeadCommand {
    /// Events that used up their deliveries, in every queue.
    List {
        #[arg(long, default_value_t = 100)]
        limit: usize,
        /// Print the letters as JSON.
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        remote: Remote,
    },
    /// Put a dead letter's event back into the queue it died in: `skillgate dead replay <id>`.
    Replay {
        id: String,
        #[command(flatten)]
        remote: Remote,
    },
}

impl DeadCommand {
    /// The server to ask, when one is given.
    pub fn remote(&self) -> Option<&Remote> {
        let (DeadCommand::List { remote, .. } | DeadCommand::Replay { remote, .. }) = self;
        remote.server.is_some().then_some(remote)
    }
}

pub async fn run(store: Arc<dyn EventStore>, cmd: &DeadCommand) -> ExitCode {
    let outcome = match cmd {
        DeadCommand::List { limit, json, .. } => dead::list(&store, *limit)
            .await
            .map_err(|e| e.to_string())
            .map(|letters| {
                let letters: Vec<Value> = letters.iter().map(dead::DeadLetter::to_json).collect();
                print_letters(&json!({ "letters": letters }), *json);
            }),
        DeadCommand::Replay { id, .. } => dead::replay(&store, id)
            .await
            .map_err(|e| e.to_string())
            .map(|letter| replayed(&letter.to_json())),
    };
    done(outcome)
}

/// The command asked of the server `remote`.
pub async fn ask(remote: &Remote, cmd: &DeadCommand) -> ExitCode {
    let outcome = match cmd {
        DeadCommand::List { limit, json, .. } => remote
            .get(&format!("/dead?limit={limit}"))
            .await
            .map(|body| print_letters(&body, *json)),
        DeadCommand::Replay { id, .. } => {
            let id = percent_encoding::utf8_percent_encode(id, percent_encoding::NON_ALPHANUMERIC);
            remote
                .post(&format!("/dead/{id}/replay"))
                .await
                .map(|body| replayed(&body["replayed"]))
        }
    };
    done(outcome)
}

fn print_letters(body: &Value, json: bool) {
    if json {
        println!("{body}");
        return;
    }
    for letter in body["letters"].as_array().into_iter().flatten() {
        let text = |key: &str| letter[key].as_str().unwrap_or("-").to_string();
        println!(
            "{}  {:<24}  {:<16}  {:>3} attempts  {}  (event {})",
            text("died"),
            text("topic"),
            text("queue"),
            letter["attempts"].as_u64().unwrap_or(0),
            text("id"),
            letter["event"]["id"].as_str().unwrap_or("-"),
        );
    }
}

fn replayed(letter: &Value) {
    println!(
        "replayed {} into {} / {}",
        letter["id"].as_str().unwrap_or("?"),
        letter["topic"].as_str().unwrap_or("?"),
        letter["queue"].as_str().unwrap_or("?"),
    );
}
