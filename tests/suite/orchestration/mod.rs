//! Spec 02, the orchestration model: one test per normative rule of invocation, the cascade,
//! the middleware chain, return values and error handling.
//!
//! Native test tools record what ran in a [`Trace`](crate::support::common::Trace) (the recording
//! middleware and skills are in `common`, shared with `hooks`); chains are also checked
//! directly through `cascade::resolved_for` / `cascade::merged` where the rule is about the
//! resolved pipeline. This file keeps the helpers only these tests use.
//!
//! One file per part of the spec, in its order:
//! - `invocation_step1_dollar_names`: Invocation step 1, `$NAME` extraction from args.
//! - `invocation_step2_resolve_ref`: Invocation step 2, resolving the ref on the search paths.
//! - `invocation_steps3_to_5_child_context`: Invocation steps 3 to 5, the child context, the
//!   tool's data on it, the history frame.
//! - `invocation_step6_authority`: Invocation step 6, the authority.
//! - `invocation_step7_cascade`: Invocation step 7, the cascade: levels, visibility, inherit,
//!   `$merge`, `$remove`, `$static`/`$dynamic`, interpolation.
//! - `middleware_sources`: Middleware, Sources and Entry Normalization: metadata keys to
//!   entries, their args and their ordering.
//! - `middleware_chain`: The Middleware Chain: entries through the orchestrator, explicit `fn`,
//!   sorting and phase sentinels, extra middleware (override, remove, append), locals and
//!   nonlocals middleware.
//! - `dynamic_injection`: Dynamic Injection and Directive Ordering.
//! - `chain_cycles`: The Middleware Chain rules on cycles: in order constraints, in the
//!   invocation stack, and independent invocations that are not cycles.
//! - `automatic_static`: Leaf Middleware and Cycle Prevention (auto-static).
//! - `execution_flow_and_returns`: Execution Flow and Return Values, and the full pipeline on
//!   every invocation.
//! - `error_handling`: Error Handling, the onion of try/catch middleware.

mod automatic_static;
mod chain_cycles;
mod dynamic_injection;
mod error_handling;
mod execution_flow_and_returns;
mod invocation_step1_dollar_names;
mod invocation_step2_resolve_ref;
mod invocation_step6_authority;
mod invocation_step7_cascade;
mod invocation_steps3_to_5_child_context;
mod middleware_chain;
mod middleware_sources;

use std::sync::Arc;

use serde_json::{Value, json};
use skillgate::cascade::Entry;
use skillgate::skills::tool::Tool;
use skillgate::{Context, InvokeOptions, Kernel};

use crate::support::common::{Trace, native, plain};

/// An entry with ordering constraints.
fn entry(name: &str, after: &[&str], before: &[&str]) -> Entry {
    Entry {
        after: after.iter().map(|s| Arc::from(*s)).collect(),
        before: before.iter().map(|s| Arc::from(*s)).collect(),
        ..Entry::tool(name, Arc::new(Value::Null))
    }
}

/// A middleware `inj` that records `inj`, injects `make()` into the served chain and passes.
fn injector(trace: &Trace, make: fn() -> Vec<Entry>) -> Tool {
    let t = trace.clone();
    native(
        "name: inj\nmetadata:\n  role: middleware\n",
        move |ctx, _args| {
            let t = t.clone();
            async move {
                let target = ctx.ctx_target()?;
                t.push("inj");
                target.inject(make())?;
                target.next().await?;
                Ok(None)
            }
        },
    )
}

/// A native skill whose body returns the JSON that `f` computes from its context.
fn probe<F>(yaml: &str, f: F) -> Tool
where
    F: Fn(&Context) -> skillgate::Result<Value> + Send + Sync + 'static,
{
    let f = Arc::new(f);
    native(yaml, move |ctx, _args| {
        let f = f.clone();
        async move { f(&ctx).map(Some) }
    })
}

fn get(ctx: &Context, path: &str) -> skillgate::Result<Value> {
    Ok(ctx.get(path)?.unwrap_or(Value::Null))
}

fn out_of(result: skillgate::Result<Option<Arc<Value>>>) -> Value {
    plain(result.expect("invocation succeeds")).unwrap_or(Value::Null)
}

/// Invokes `s` with no args; it must succeed.
async fn run_s(kernel: &Kernel) {
    kernel
        .invoke("s", json!({}), InvokeOptions::default())
        .await
        .unwrap();
}

/// Invokes `name` with no args.
async fn run_named(kernel: &Kernel, name: &str) -> skillgate::Result<Option<Arc<Value>>> {
    kernel
        .invoke(name.to_string(), json!({}), InvokeOptions::default())
        .await
}
