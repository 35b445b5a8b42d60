//! `skillgate slack check`: the Slack settings as the server would use them, the bot token
//! tried against Slack (`auth.test`), the bot's identity and the routes printed.

use std::path::Path;
use std::process::ExitCode;

use clap::Subcommand;

use crate::cli::exit::{FAILED, USAGE};
use crate::config::ConfigFile;
use crate::config::slack::Target;
use crate::gateway::slack::api::WebApi;

#[derive(Debug, Subcommand)]
pub enum SlackCommand {
    /// Check the Slack settings and the bot token, and print the bot's identity and routes.
    Check,
}

pub async fn run(project: &Path, file: &ConfigFile, cmd: &SlackCommand) -> ExitCode {
    let SlackCommand::Check = cmd;
    let kernel = crate::builtins::builder(project).build();
    let index = kernel.registry().current();
    let config = match crate::gateway::slack::setup::resolve(
        &index,
        project,
        file.slack.clone(),
        &crate::config::env::Vars::process(),
    ) {
        Ok(Some(config)) => config,
        Ok(None) => {
            eprintln!(
                "error: Slack is not configured: give `slack.routes` or `slack.default` (in skillgate.yaml or the main skill's metadata)"
            );
            return ExitCode::from(USAGE);
        }
        Err(errors) => {
            for error in errors.located(&|path| file.origin(path)).0 {
                eprintln!("error: {error}");
            }
            return ExitCode::from(USAGE);
        }
    };
    let api = WebApi::new(&config.api_url, &config.bot_token, config.post_interval);
    let identity = match api.auth_test().await {
        Ok(identity) => identity,
        Err(err) => {
            eprintln!("error: the bot token was refused or Slack could not be reached: {err}");
            return ExitCode::from(FAILED);
        }
    };
    println!(
        "bot: @{} ({}, bot {}) in {} ({})",
        identity.user, identity.user_id, identity.bot_id, identity.team, identity.team_id
    );
    println!("web api: {}", config.api_url);
    println!(
        "events api: {}",
        match &config.signing_secret {
            Some(_) => format!("POST {} (signed)", config.events_path),
            None => "off (no signing secret)".into(),
        }
    );
    println!(
        "socket mode: {}",
        if config.app_token.is_some() {
            "on"
        } else {
            "off"
        }
    );
    for (i, route) in config.routes.iter().enumerate() {
        let target = match &route.target {
            Target::Skill(skill) => format!("-> {skill}"),
            Target::Command { .. } => "-> the skill named by the first word".to_string(),
        };
        let mut when = Vec::new();
        if let Some(channel) = &route.channel {
            when.push(format!("in {channel}"));
        }
        if let Some(pattern) = &route.pattern {
            when.push(format!("matching /{pattern}/"));
        }
        if route.messages {
            when.push("plain messages too".into());
        }
        println!("route {i}: {} {target}", when.join(", "));
    }
    if let Some(default) = &config.default {
        println!("default: -> {default}");
    }
    ExitCode::SUCCESS
}
