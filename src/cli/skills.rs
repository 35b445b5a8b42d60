//! `skillgate skills list|describe`: what skills are visible, and what one of them takes.

use std::path::Path;
use std::process::ExitCode;

use clap::Subcommand;
use serde_json::Value;

use crate::cli::{Stage, exit_code};
use crate::skills::describe;
use crate::skills::tool::Tool;

#[derive(Debug, Subcommand)]
pub enum SkillsCommand {
    /// List visible skills (hidden ones with --all).
    List {
        /// Only skills with this tag.
        #[arg(long)]
        tag: Option<String>,
        /// Include hidden (internal) skills.
        #[arg(long)]
        all: bool,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Show a skill's description, origin, params and returns schemas and pipeline.
    Describe {
        name: String,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
}

pub fn run(project: &Path, cmd: &SkillsCommand) -> ExitCode {
    let kernel = crate::builtins::builder(project).build();
    let index = kernel.registry().current();
    match cmd {
        SkillsCommand::List { tag, all, json } => {
            let tools: Vec<&std::sync::Arc<Tool>> = index
                .tools()
                .filter(|t| *all || !t.hidden)
                .filter(|t| {
                    tag.as_ref()
                        .is_none_or(|tag| t.tags.iter().any(|x| x == tag))
                })
                .collect();
            if *json {
                let list: Vec<Value> = tools.iter().map(|t| describe::summary(t)).collect();
                println!(
                    "{}",
                    serde_json::to_string_pretty(&list).unwrap_or_default()
                );
            } else {
                let width = tools.iter().map(|t| t.name.len()).max().unwrap_or(0);
                for t in &tools {
                    println!("{:width$}  {}", t.name, t.description);
                }
            }
            for failure in index.failures() {
                eprintln!("warning: {}", failure.error);
            }
            ExitCode::SUCCESS
        }
        SkillsCommand::Describe { name, json } => {
            let tool = match index.find(name) {
                Ok(tool) => tool,
                Err(err) => {
                    eprintln!("error: {err}");
                    return ExitCode::from(exit_code(err.kind(), Stage::CommandLine));
                }
            };
            let out = describe::describe(&index, tool);
            if *json {
                println!("{}", serde_json::to_string_pretty(&out).unwrap_or_default());
            } else {
                print_description(&out);
            }
            ExitCode::SUCCESS
        }
    }
}

fn print_description(out: &Value) {
    let text = |k: &str| out.get(k).and_then(Value::as_str).unwrap_or("").to_string();
    println!("{}", text("name"));
    if !text("description").is_empty() {
        println!("  {}", text("description"));
    }
    println!("  origin:   {}", text("origin"));
    if let Some(tags) = out
        .get("tags")
        .and_then(Value::as_array)
        .filter(|t| !t.is_empty())
    {
        let tags: Vec<&str> = tags.iter().filter_map(Value::as_str).collect();
        println!("  tags:     {}", tags.join(", "));
    }
    if let Some(pipeline) = out.get("pipeline").and_then(Value::as_array) {
        let names: Vec<&str> = pipeline.iter().filter_map(Value::as_str).collect();
        println!("  pipeline: {}", names.join(" > "));
    }
    for key in ["params", "returns"] {
        if let Some(schema) = out.get(key).filter(|v| !v.is_null()) {
            println!("  {key}:");
            for line in serde_json::to_string_pretty(schema)
                .unwrap_or_default()
                .lines()
            {
                println!("    {line}");
            }
        }
    }
    if let Some(err) = out.get("error").and_then(Value::as_str) {
        println!("  error:    {err}");
    }
}
