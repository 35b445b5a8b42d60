//! `skillgate keys new|hash`: make API keys and the hashes the server stores.

use std::process::ExitCode;

use clap::Subcommand;

use crate::cli::FAILED;
use crate::gateway::keys::{generate_key, hash_key};

#[derive(Debug, Subcommand)]
pub enum KeysCommand {
    /// Make a random key; prints the key (give it to the client) and the config line (keep it
    /// on the server).
    New {
        /// The key's name in logs, metrics and rate limits.
        #[arg(long, default_value = "default")]
        name: String,
    },
    /// Print the stored form (`sha256:<hex>`) of an existing key.
    Hash { key: String },
}

pub fn run(cmd: &KeysCommand) -> ExitCode {
    match cmd {
        KeysCommand::New { name } => match generate_key() {
            Ok(key) => {
                println!("key:  {key}");
                println!("hash: {name}={}", hash_key(&key));
                eprintln!(
                    "Give the key to the client (Authorization: Bearer <key>); put the hash in SKILLGATE_API_KEYS or the config file's auth.keys."
                );
                ExitCode::SUCCESS
            }
            Err(err) => {
                eprintln!("error: {err}");
                ExitCode::from(FAILED)
            }
        },
        KeysCommand::Hash { key } => {
            println!("{}", hash_key(key));
            ExitCode::SUCCESS
        }
    }
}
