//! Issue 5: `.skill.js` programmatic skills (through the pipeline and the CLI), the ctx bridge,
//! and the sandbox for untrusted code: limits, escapes, the untrusted-ref rule and sessions.
//!
//! Every escape or limit test checks that its attempt is stopped with its own clear error, then
//! that the next sandbox (and the process) is healthy. Limits are set small so the tests are
//! quick; `HANG_GUARD` only turns a broken rule into a failure instead of a hang.
//!
//! One file per part, in this order; this file keeps the kernel with the native tools the
//! scripts call and the helpers that run code and check the sandbox is healthy after.
//! - `skill_js`: `.skill.js` skills through the pipeline, and the ctx bridge they see.
//! - `js_middleware`: `.skill.js` middleware around `next()`.
//! - `cli`: through the CLI, the binary over `tests/fixtures/scripts`.
//! - `limits`: memory, time, wall clock and stack limits, each stopped with its own error.
//! - `escapes`: nothing of the host is reachable except the bridge; the untrusted-ref rule.
//! - `sessions`: sandboxes kept across calls.
//! - `running_untrusted_code`: running untrusted code, and limits from metadata.

mod cli;
mod escapes;
mod js_middleware;
mod limits;
mod running_untrusted_code;
mod sessions;
mod skill_js;

use std::time::Duration;

use serde_json::{Map, Value, json};
use skillgate::sandbox::{self, Session, Untrusted};
use skillgate::{InvokeOptions, Kernel, SkillError};

use crate::support::common::{Project, Seen, native, plain};

const HANG_GUARD: Duration = Duration::from_secs(60);

/// A kernel over `p` with the native tools the scripts call:
/// - `noop` returns true;
/// - `echo` returns its args;
/// - `hang` never returns;
/// - `busy` holds the thread it runs on for `args.ms` milliseconds, then returns true;
/// - `probe` records its context (to check what its caller passed down) and returns true;
/// - `run-code` runs `args.code` as untrusted code (`args.metadata` for the anonymous skill),
///   in `session` when one is given.
fn kernel(p: &Project, session: Option<Session>, seen: Seen) -> Kernel {
    p.builder()
        .native(native("name: noop\n", |_ctx, _args| async {
            Ok(Some(Value::Bool(true)))
        }))
        .native(native("name: hang\n", |_ctx, _args| async {
            std::future::pending::<()>().await;
            Ok(None)
        }))
        .native(native("name: busy\n", |_ctx, args| async move {
            let ms = args["ms"].as_u64().unwrap_or_default();
            std::thread::sleep(Duration::from_millis(ms));
            Ok(Some(Value::Bool(true)))
        }))
        .native(native("name: echo\n", |_ctx, args| async move {
            Ok(Some((*args).clone()))
        }))
        .native(native("name: probe\n", move |ctx, _args| {
            let seen = seen.clone();
            async move {
                seen.put("probe", &ctx);
                Ok(Some(Value::Bool(true)))
            }
        }))
        .native(native("name: run-code\n", move |ctx, args| {
            let session = session.clone();
            async move {
                let code = args["code"].as_str().unwrap_or_default().to_string();
                let metadata = match args.get("metadata") {
                    Some(Value::Object(m)) => m.clone(),
                    _ => Map::new(),
                };
                let options = Untrusted {
                    metadata,
                    session,
                    ..Untrusted::default()
                };
                sandbox::run_untrusted_with(&ctx, &code, options).await
            }
        }))
        .build()
}

/// Runs `code` as untrusted code with `limits` as its `metadata.sandbox`.
async fn untrusted(
    kernel: &Kernel,
    code: &str,
    limits: Value,
) -> Result<Option<Value>, SkillError> {
    let args = json!({ "code": code, "metadata": { "sandbox": limits } });
    let run = kernel.invoke("run-code", args, InvokeOptions::default());
    tokio::time::timeout(HANG_GUARD, run)
        .await
        .expect("hang guard: the sandbox call never ended")
        .map(plain)
}

/// The next sandbox runs a normal script (with a bridge call) fine.
async fn assert_healthy(kernel: &Kernel) {
    let out = untrusted(
        kernel,
        "const ok = await ctx.manager.invoke('noop'); return ok && 1 + 1;",
        json!({}),
    )
    .await;
    assert_eq!(
        out.expect("a normal script runs after the failure"),
        Some(json!(2))
    );
}

/// Invokes `name` in `kernel` with `args`.
async fn run(kernel: &Kernel, name: &str, args: Value) -> Result<Option<Value>, SkillError> {
    let call = kernel.invoke(name, args, InvokeOptions::default());
    tokio::time::timeout(HANG_GUARD, call)
        .await
        .expect("hang guard")
        .map(plain)
}

fn js_project(files: &[(&str, &str)]) -> Project {
    let p = Project::new();
    for (name, text) in files {
        p.skill(name, text);
    }
    p
}
