//! The directive tools that run code: `:eval` and `:script`, both in the JavaScript sandbox as
//! untrusted code (never on the host), under the served skill's `sandbox` limits.
//!
//! `:eval[expr]` inserts the value of one expression; `:script[file.js]{k=v}` runs a file's
//! code as the body of `async function (ctx, args)` and inserts what it returns. Both see the
//! served skill's args as `args` (`:script` with its attributes laid over them).

use serde_json::{Map, Value};

use crate::context::Context;
use crate::error::Result;
use crate::middleware::directive_files::read;
use crate::middleware::directive_tools::{directive, frontmatter};
use crate::sandbox::{Untrusted, run_untrusted_with};
use crate::skills::native::native;
use crate::skills::tool::Tool;

pub fn tools() -> Vec<Tool> {
    vec![
        native(
            &frontmatter(
                "eval",
                "Inserts the value of a JavaScript expression run in the sandbox: :eval[args.n * 2]",
            ),
            |ctx, args| {
                directive(ctx, args, |target, label, _args| async move {
                    let code = format!("return ({label}\n);");
                    let args = (*target.args()).clone();
                    run(&target, "directive-eval", &code, args).await
                })
            },
        ),
        native(
            &frontmatter(
                "script",
                "Inserts what a JavaScript file returns, run in the sandbox: :script[lib/x.js]{k=v}",
            ),
            |ctx, args| {
                directive(ctx, args, |target, label, args| async move {
                    let code = read(&target, &label, &args).await?;
                    let mut call_args = match &*target.args() {
                        Value::Object(map) => map.clone(),
                        _ => Map::new(),
                    };
                    if let Some(Value::Object(attrs)) = args.get("attrs") {
                        call_args.extend(attrs.iter().map(|(k, v)| (k.clone(), v.clone())));
                    }
                    run(&target, "directive-script", &code, Value::Object(call_args)).await
                })
            },
        ),
    ]
}

/// Runs `code` as an anonymous untrusted skill invoked from the served context.
async fn run(target: &Context, name: &str, code: &str, args: Value) -> Result<Option<Value>> {
    let mut metadata = Map::new();
    if let Some(limits) = target.get("run.middleware.sandbox")? {
        metadata.insert("sandbox".into(), limits);
    }
    let options = Untrusted {
        args: Some(args),
        metadata,
        name: Some(name.to_string()),
        ..Untrusted::default()
    };
    run_untrusted_with(target, code, options).await
}
