//! The `skillgate` binary: parse the command line, start telemetry, hand over to the library.

use std::process::ExitCode;

use clap::Parser;

/// mimalloc: contexts are many small short-lived allocations, where it is markedly faster than
/// the system allocator.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> ExitCode {
    let cli = skillgate::cli::Cli::parse();
    // `serve` says what it does at info; other commands only warn.
    let default_filter = match cli.command {
        skillgate::cli::Command::Serve(_) => "warn,skillgate::cli=info",
        _ => "warn",
    };
    let telemetry = skillgate::telemetry::init(cli.log_format, default_filter);
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(err) => {
            eprintln!("error: cannot start the async runtime: {err}");
            return ExitCode::FAILURE;
        }
    };
    let code = runtime.block_on(skillgate::cli::main(cli));
    drop(runtime);
    telemetry.shutdown();
    code
}
