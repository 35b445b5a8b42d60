//! `skillgate run <skill|path> [--k v ...]`: runs one skill and prints its result.

use std::io::IsTerminal;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;

use clap::Args;
use serde_json::Value;

use crate::cascade;
use crate::cli::{Stage, args, exit_code};
use crate::context::log::LogConfig;
use crate::error::{ErrorKind, SkillError};
use crate::events::KernelBus;
use crate::events::runs::RunRecord;
use crate::events::{Bus, BusConfig, EventStore};
use crate::kernel::timings::{EntryTimes, timed};
use crate::kernel::{InvokeOptions, Kernel, ToolRef};
use crate::skills::loader;
use crate::skills::tool::Tool;

#[derive(Debug, Args)]
pub struct RunArgs {
    /// A skill name, or a path to a skill file. Without it, the project's main skill runs.
    pub skill: Option<String>,
    /// Args for the skill: `--key value`, `--arg key=value`, `--arg-json '{..}'`, `--set key=value`.
    #[arg(
        trailing_var_arg = true,
        allow_hyphen_values = true,
        value_name = "ARGS"
    )]
    pub rest: Vec<String>,
    /// Record this run in the runs record (`skillgate runs list`), as the server records
    /// every run of its doors.
    #[arg(long)]
    pub record: bool,
    /// The recorded run this one retries (`skillgate runs retry`).
    #[arg(skip)]
    pub parent: Option<String>,
}

pub async fn run(
    project: &Path,
    store: Arc<dyn EventStore>,
    (bus, limits): (BusConfig, super::RunLimits),
    (quiet, verbose): (bool, u8),
    log: LogConfig,
    cli: &RunArgs,
) -> ExitCode {
    let bus = Arc::new(Bus::new(store, bus));
    if !cli.record {
        bus.runs().configure(None);
    }
    let kernel = super::kernel_builder(project, log, bus, limits).build();
    let index = kernel.registry().current();
    // A name, a path to a skill file, or nothing (the project's main skill).
    let tool: Arc<Tool> = match resolve(&kernel, project, cli.skill.as_deref()) {
        Ok(tool) => tool,
        Err(err) => return fail(&err, Stage::CommandLine),
    };
    let schema = cascade::merged_for(&index, &tool)
        .ok()
        .and_then(|m| m.metadata.get("params").cloned())
        .filter(|p| !p.is_null());
    let parsed = match args::parse(&cli.rest, schema.as_ref()) {
        Ok(parsed) => parsed,
        Err(message) => {
            let err = SkillError::new(ErrorKind::InvalidArgs, message);
            return fail(&err, Stage::CommandLine);
        }
    };
    if parsed.quiet || parsed.verbose > 0 {
        let log = crate::cli::log_config(
            quiet || parsed.quiet,
            verbose.saturating_add(parsed.verbose),
        );
        kernel.logs().set_global(log);
    }
    let tool = if parsed.overrides.is_empty() {
        tool
    } else {
        // Overrides start a new generation; resolve again so the cascade sees them.
        kernel.registry().set_overrides(parsed.overrides);
        match resolve(&kernel, project, cli.skill.as_deref()) {
            Ok(tool) => tool,
            Err(err) => return fail(&err, Stage::CommandLine),
        }
    };
    let interactive = std::io::stdin().is_terminal() && std::io::stdout().is_terminal();
    // Shared by the run and its record.
    let args = Arc::new(Value::Object(parsed.args));
    let name = tool.name.clone();
    // Caught before the run starts: a signal during its first steps still stops it cleanly.
    let mut signals = crate::shutdown::listen();
    let (mut options, streaming) = terminal_stream();
    let id = crate::context::id::next_id();
    options.context.id = Some(id);
    let runs = kernel.bus().runs();
    let record = runs.on().then(|| {
        let mut record = RunRecord::begin(
            &crate::context::id::format(id),
            "cli",
            options
                .authority
                .as_ref()
                .map_or("project", |a| a.principal.id()),
            name.as_str(),
            args.clone(),
        );
        record.params = schema.clone();
        record.parent = cli.parent.clone();
        record.entries = Some(Arc::new(EntryTimes::default()));
        record
    });
    let times = record.as_ref().and_then(|r| r.entries.clone());
    if let Some(times) = &times {
        options
            .context
            .extensions
            .push((crate::kernel::timings::RECORD_PATH.into(), times.clone()));
    }
    let run = async {
        if interactive {
            kernel
                .invoke_interactive(ToolRef::Def(tool), args, options)
                .await
        } else {
            kernel.invoke(ToolRef::Def(tool), args, options).await
        }
    };
    let run = timed(times, run);
    let outcome = tokio::select! {
        outcome = run => outcome,
        signal = signals.recv() => {
            crate::shutdown::announce(&kernel, signal).await;
            return ExitCode::from(signal.exit_code());
        }
    };
    if let Some(record) = record {
        runs.record(record.end(outcome.as_ref().map(Option::as_ref)));
        runs.settled().await;
    }
    kernel.bus().shutdown();
    if let Some(mut streaming) = streaming {
        // The printer ends when the run's reply channel closes; do not wait on a straggler.
        if tokio::time::timeout(std::time::Duration::from_millis(500), &mut streaming)
            .await
            .is_err()
        {
            streaming.abort();
        }
    }
    match outcome {
        Ok(result) => {
            print_result(result.as_deref());
            ExitCode::SUCCESS
        }
        Err(err) => {
            let stage = if err.tool() == Some(name.as_str()) {
                Stage::Skill
            } else {
                Stage::Run
            };
            fail(&err, stage)
        }
    }
}

/// On a terminal, what the run streams back (a model's tokens, `gateway-send` messages) is
/// printed to stderr as it comes, so stdout keeps only the result.
fn terminal_stream() -> (InvokeOptions, Option<tokio::task::JoinHandle<()>>) {
    use crate::gateway::reply::{RESPONSE_PATH, Reply, ReplyPart};
    use std::io::Write;
    let mut options = InvokeOptions::default();
    if !std::io::stderr().is_terminal() {
        return (options, None);
    }
    let (reply, mut parts) = Reply::channel("cli");
    options
        .context
        .extensions
        .push((RESPONSE_PATH.into(), reply));
    let printer = tokio::spawn(async move {
        let mut open_line = false;
        while let Some(part) = parts.recv().await {
            let mut err = std::io::stderr().lock();
            match part {
                ReplyPart::Partial(text) => {
                    let _ = write!(err, "{text}");
                    open_line = !text.ends_with('\n');
                }
                ReplyPart::Message(message) => {
                    if open_line {
                        let _ = writeln!(err);
                    }
                    let _ = writeln!(err, "{}", crate::gateway::reply::as_markdown(&message));
                    open_line = false;
                }
                _ => continue,
            }
            let _ = err.flush();
        }
        if open_line {
            let _ = writeln!(std::io::stderr());
        }
    });
    (options, Some(printer))
}

fn is_path(s: &str) -> bool {
    s.contains('/') || s.ends_with(".md") || s.ends_with(".js")
}

fn resolve(kernel: &Kernel, project: &Path, skill: Option<&str>) -> Result<Arc<Tool>, SkillError> {
    let index = kernel.registry().current();
    match skill {
        Some(s) if is_path(s) => {
            let path = PathBuf::from(s);
            let tool = Arc::new(loader::load_file(&path, Some(crate::sandbox::load))?);
            // A file that is also on the search path is the same tool: use the indexed one so
            // its cascade is cached.
            match index.get(&tool.name) {
                Some(known) if known.origin == tool.origin => Ok(known.clone()),
                _ => Ok(tool),
            }
        }
        Some(name) => index.find(name).cloned(),
        None => index
            .tools()
            .find(|t| t.is_main && matches!(&t.source, crate::skills::Source::File(p) if p.parent() == std::path::absolute(project).ok().as_deref()))
            .cloned()
            .ok_or_else(|| {
                SkillError::new(
                    ErrorKind::NotFound,
                    "no skill given and the project has no main skill (main.skill.md with `role: main`)",
                )
            }),
    }
}

fn print_result(result: Option<&Value>) {
    match result {
        None => {}
        Some(Value::String(s)) => {
            if s.ends_with('\n') {
                print!("{s}");
            } else {
                println!("{s}");
            }
        }
        Some(other) => println!(
            "{}",
            serde_json::to_string_pretty(other).unwrap_or_else(|_| other.to_string())
        ),
    }
}

/// Prints `err` (and, for a usage error, how the command is written) and exits.
fn fail(err: &SkillError, stage: Stage) -> ExitCode {
    let code = exit_code(err.kind(), stage);
    eprintln!("error: {err}");
    if code == crate::cli::USAGE {
        eprintln!(
            "usage: skillgate run <skill|path> [--key value ...]   (see `skillgate run --help`)"
        );
    }
    ExitCode::from(code)
}
