//! Spec 01, the context object and its manager: one test per normative rule.
//!
//! Tool bodies record what they see (contexts in a [`Seen`], strings in a
//! [`Trace`](crate::support::common::Trace)) and the assertions run on those records after the
//! invocation, so a rule that breaks shows up as a wrong value rather than as a panic inside a
//! pipeline.
//!
//! One file per part of the spec; this file keeps the helpers they share (test tools that
//! record their context, YAML frontmatter builders, small accessors).
//!
//! - `properties_envelope`: Properties, `envelope.*`: id, immutability, parent, target,
//!   hasOtherTarget.
//! - `properties_state`: Properties, `args`, `locals` (history, result, error, config, the
//!   scratchpad), `globals` and `nonlocals` (with `rootContextId`).
//! - `properties_run`: Properties, `run.*`: origin, middleware, tool, signal (with
//!   `manager.abort()` and its cascade), interactive; and `locals.prompt`.
//! - `manager_chain`: The Manager, moving through the chain: `next()`, `refresh()`,
//!   `inject()`, `finish()`, `fail()`.
//! - `manager_invoke`: The Manager, `invoke()`: isolated child contexts, refs and inline
//!   definitions, the context seed, extra middleware, `detached`.
//! - `manager_get_set`: The Manager, `get()` and `set()` by dotted path.
//! - `manager_logs`: The Manager, `log()`, `tail()` and `configure()`.
//! - `target_context`: The Target Context: `ctxTarget` and the middleware's private workspace.
//! - `serialization`: Serialization: data properties only, `[Circular]`, dropped values, depth.

mod manager_chain;
mod manager_get_set;
mod manager_invoke;
mod manager_logs;
mod properties_envelope;
mod properties_run;
mod properties_state;
mod serialization;
mod target_context;

use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use serde_json::{Value, json};
use skillgate::skills::tool::Tool;
use skillgate::{Context, ErrorKind, InvokeOptions};

use crate::support::common::{Seen, native};

/// A generous bound on waits that only end if a rule holds, so a broken rule fails the test
/// instead of hanging it. Never a timing assertion: passing runs finish long before it.
const HANG_GUARD: Duration = Duration::from_secs(60);

/// A one-shot channel end shared with a tool body (bodies are `Fn`, so they take it out).
type Shared<T> = Arc<Mutex<Option<T>>>;

fn shared<T>() -> Shared<T> {
    Arc::new(Mutex::new(None))
}

/// YAML frontmatter of a native middleware named `name`.
fn mw_yaml(name: &str) -> String {
    format!("name: {name}\nmetadata:\n  role: middleware\n")
}

/// YAML frontmatter of a native skill `name` whose metadata turns on middleware `keys`.
fn skill_yaml(name: &str, keys: &[&str]) -> String {
    let mut yaml = format!("name: {name}\nmetadata:\n  tags: [test]\n");
    for key in keys {
        yaml.push_str(&format!("  {key}: true\n"));
    }
    yaml
}

/// A middleware that records its own context as `name` and passes to the served chain.
fn spy(name: &str, seen: &Seen) -> Tool {
    let seen = seen.clone();
    let label = name.to_string();
    native(&mw_yaml(name), move |ctx, _args| {
        let seen = seen.clone();
        let label = label.clone();
        async move {
            seen.put(&label, &ctx);
            let target = ctx.ctx_target()?;
            target.next().await?;
            Ok(None)
        }
    })
}

/// A native skill that records its context as `name` and returns `"done"`.
fn recorder(name: &str, keys: &[&str], seen: &Seen) -> Tool {
    let seen = seen.clone();
    let label = name.to_string();
    native(&skill_yaml(name, keys), move |ctx, _args| {
        let seen = seen.clone();
        let label = label.clone();
        async move {
            seen.put(&label, &ctx);
            Ok(Some(json!("done")))
        }
    })
}

/// A native skill `name` that records its context and invokes `child` once.
fn caller(name: &str, keys: &[&str], child: &str, seen: &Seen) -> Tool {
    let seen = seen.clone();
    let label = name.to_string();
    let child = child.to_string();
    native(&skill_yaml(name, keys), move |ctx, _args| {
        let seen = seen.clone();
        let label = label.clone();
        let child = child.clone();
        async move {
            seen.put(&label, &ctx);
            ctx.invoke(child.as_str(), json!({}), InvokeOptions::default())
                .await?;
            Ok(Some(json!("done")))
        }
    })
}

fn get(ctx: &Context, path: &str) -> Option<Value> {
    ctx.get(path)
        .unwrap_or_else(|e| panic!("get({path}) failed: {e}"))
}

fn no_opts() -> InvokeOptions {
    InvokeOptions::default()
}

fn immutable(result: skillgate::Result<()>) -> bool {
    matches!(result, Err(e) if e.kind() == ErrorKind::Immutable)
}

/// `{"d": {"d": ... "leaf"}}` with `levels` objects.
fn nested(levels: usize) -> Value {
    (0..levels).fold(json!("leaf"), |inner, _| json!({ "d": inner }))
}
