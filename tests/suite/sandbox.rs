//! Issue 5: `.skill.js` programmatic skills (through the pipeline and the CLI), the ctx bridge,
//! and the sandbox for untrusted code: limits, escapes, the untrusted-ref rule and sessions.
//!
//! Every escape or limit test checks that its attempt is stopped with its own clear error, then
//! that the next sandbox (and the process) is healthy. Limits are set small so the tests are
//! quick; `HANG_GUARD` only turns a broken rule into a failure instead of a hang.

use std::sync::Arc;
use std::time::Duration;

use serde_json::{Map, Value, json};
use skillgate::sandbox::{self, Session, Untrusted};
use skillgate::{ErrorKind, InvokeOptions, Kernel, SkillError, ToolRef};

use crate::common::{Project, Seen, fixture, native, plain, skillgate, stderr, stdout};

const HANG_GUARD: Duration = Duration::from_secs(60);

/// A kernel over `p` with the native tools the scripts call:
/// - `noop` returns true;
/// - `echo` returns its args;
/// - `hang` never returns;
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

// ---------------------------------------------------------------------------------------------
// `.skill.js` skills through the pipeline

#[tokio::test]
async fn a_skill_js_default_export_returns_the_result() {
    let p = js_project(&[(
        "hi.skill.js",
        "export default async function (ctx, args) { return { hi: args.name, n: 1.5 }; }",
    )]);
    let k = kernel(&p, None, Seen::default());
    let out = run(&k, "hi", json!({"name": "Ada"})).await.unwrap();
    assert_eq!(out, Some(json!({"hi": "Ada", "n": 1.5})));
}

#[tokio::test]
async fn a_skill_js_returning_undefined_leaves_the_result_undefined() {
    let p = js_project(&[("quiet.skill.js", "export default async () => {};")]);
    let k = kernel(&p, None, Seen::default());
    assert_eq!(run(&k, "quiet", json!({})).await.unwrap(), None);
}

#[tokio::test]
async fn frontmatter_export_declares_the_skill_like_markdown_frontmatter() {
    let p = js_project(&[(
        "file-name.skill.js",
        r#"export const frontmatter = {
             name: 'declared',
             description: 'from the export',
             metadata: { tags: ['js'], params: { type: 'object', properties: { n: { type: 'integer' } }, required: ['n'] } },
           };
           export default async (ctx, args) => args.n * 2;"#,
    )]);
    let k = kernel(&p, None, Seen::default());
    let index = k.registry().current();
    let tool = index.find("declared").expect("named by its frontmatter");
    assert_eq!(tool.description, "from the export");
    assert_eq!(tool.tags, ["js"]);
    assert_eq!(
        run(&k, "declared", json!({"n": 21})).await.unwrap(),
        Some(json!(42))
    );
    let err = run(&k, "declared", json!({"n": "x"})).await.unwrap_err();
    assert_eq!(
        err.kind(),
        ErrorKind::InvalidArgs,
        "params are enforced: {err}"
    );
}

#[tokio::test]
async fn the_script_sees_the_spec_ctx_api() {
    let p = js_project(&[(
        "look.skill.js",
        r#"export default async function (ctx, args) {
             return {
               args: ctx.args,
               sameArgs: args.x === ctx.args.x,
               id: ctx.envelope.id === ctx.manager.get('envelope.id'),
               parent: typeof ctx.envelope.parent,
               hasOtherTarget: ctx.envelope.hasOtherTarget,
               targetIsSelf: ctx.envelope.target === ctx,
               root: typeof ctx.nonlocals.rootContextId,
               tool: ctx.run.tool.name,
               uri: ctx.run.origin.uri.startsWith('file://'),
               cwd: typeof ctx.locals.config.cwd,
               history: ctx.manager.get('locals.history').map((f) => f.tool).includes('look'),
               globals: typeof ctx.globals.config,
               manager: Object.keys(ctx.manager).sort(),
               keys: Object.keys(ctx).sort(),
             };
           }"#,
    )]);
    let k = kernel(&p, None, Seen::default());
    let out = run(&k, "look", json!({"x": 7})).await.unwrap().unwrap();
    assert_eq!(out["args"], json!({"x": 7}));
    for key in ["sameArgs", "id", "targetIsSelf", "uri", "history"] {
        assert_eq!(out[key], json!(true), "{key}: {out}");
    }
    assert_eq!(
        out["parent"], "object",
        "root context: parent is null: {out}"
    );
    assert_eq!(out["hasOtherTarget"], false);
    assert_eq!(out["root"], "string");
    assert_eq!(out["tool"], "look");
    assert_eq!(out["cwd"], "string");
    assert_eq!(out["globals"], "object");
    assert_eq!(
        out["manager"],
        json!([
            "abort",
            "configure",
            "fail",
            "finish",
            "get",
            "inject",
            "invoke",
            "log",
            "next",
            "refresh",
            "set",
            "tail"
        ])
    );
    assert_eq!(
        out["keys"],
        json!(["args", "envelope", "globals", "locals", "nonlocals", "run"])
    );
}

#[tokio::test]
async fn a_skill_js_invokes_skills_and_awaits_their_results() {
    let p = js_project(&[
        ("word.skill.md", "---\nname: word\n---\n:arg[w]"),
        (
            "caller.skill.js",
            r#"export default async function (ctx) {
                 const echoed = await ctx.manager.invoke('echo', { a: [1, 2] });
                 const word = await ctx.manager.invoke('word', { w: 'hey' });
                 const all = await Promise.all([1, 2, 3].map((n) => ctx.manager.invoke('echo', { n })));
                 return { echoed, word: word.trim(), all: all.map((o) => o.n) };
               }"#,
        ),
    ]);
    let k = kernel(&p, None, Seen::default());
    let out = run(&k, "caller", json!({})).await.unwrap().unwrap();
    assert_eq!(
        out,
        json!({"echoed": {"a": [1, 2]}, "word": "hey", "all": [1, 2, 3]})
    );
}

#[tokio::test]
async fn finish_sets_the_result_and_the_return_value_does_not_clobber_it() {
    let p = js_project(&[(
        "done.skill.js",
        "export default async (ctx) => { ctx.manager.finish({ done: true }); }",
    )]);
    let k = kernel(&p, None, Seen::default());
    assert_eq!(
        run(&k, "done", json!({})).await.unwrap(),
        Some(json!({"done": true}))
    );
}

#[tokio::test]
async fn a_thrown_error_fails_the_skill_with_its_message_and_stack() {
    let p = js_project(&[(
        "boom.skill.js",
        "function inner() {\n  throw new TypeError('bad thing');\n}\nexport default async () => inner();\n",
    )]);
    let k = kernel(&p, None, Seen::default());
    let err = run(&k, "boom", json!({})).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Failed);
    assert_eq!(err.message(), "TypeError: bad thing");
    let stack = err
        .stack()
        .expect("the JavaScript stack crosses the boundary");
    assert!(stack.contains("boom.skill.js:2"), "{stack}");
    assert_eq!(err.tool(), Some("boom"));
}

#[tokio::test]
async fn a_skill_error_from_the_bridge_is_a_catchable_js_error_with_its_code() {
    let p = js_project(&[(
        "catcher.skill.js",
        r#"export default async function (ctx) {
             try {
               await ctx.manager.invoke('no-such-skill');
               return 'not reached';
             } catch (err) {
               let immutable;
               try { ctx.manager.set('envelope.id', 'x'); } catch (e) { immutable = e.code; }
               return { isError: err instanceof Error, code: err.code, message: err.message, immutable };
             }
           }"#,
    )]);
    let k = kernel(&p, None, Seen::default());
    let out = run(&k, "catcher", json!({})).await.unwrap().unwrap();
    assert_eq!(out["isError"], true);
    assert_eq!(out["code"], "not-found");
    assert!(
        out["message"].as_str().unwrap().contains("no-such-skill"),
        "{out}"
    );
    assert_eq!(out["immutable"], "immutable");
}

#[tokio::test]
async fn an_uncaught_bridge_error_keeps_its_kind_through_the_script() {
    let p = js_project(&[(
        "rethrow.skill.js",
        "export default async (ctx) => { await ctx.manager.invoke('no-such-skill'); }",
    )]);
    let k = kernel(&p, None, Seen::default());
    let err = run(&k, "rethrow", json!({})).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::NotFound, "{err}");
}

#[tokio::test]
async fn fail_records_locals_error_and_throws() {
    let p = js_project(&[(
        "refuse.skill.js",
        r#"export default async (ctx) => {
             try { ctx.manager.fail({ message: 'nope', code: 'denied' }); }
             catch (e) { ctx.manager.set('locals.seen', e.message); throw e; }
           }"#,
    )]);
    let k = kernel(&p, None, Seen::default());
    let err = run(&k, "refuse", json!({})).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Denied);
    assert_eq!(err.message(), "nope");
}

#[tokio::test]
async fn locals_views_write_through_set_and_args_are_read_only() {
    let p = js_project(&[(
        "views.skill.js",
        r#"export default async function (ctx) {
             ctx.locals.scratch = { a: 1 };
             ctx.locals.scratch.b = 2;
             ctx.nonlocals.flag = 'on';
             let argsWrite = 'allowed';
             try { ctx.args.x = 2; } catch (e) { argsWrite = e.constructor.name; }
             let replace = 'allowed';
             try { ctx.locals = {}; } catch (e) { replace = e.constructor.name; }
             return {
               scratch: ctx.manager.get('locals.scratch'),
               flag: ctx.manager.get('nonlocals.flag'),
               spread: { ...ctx.locals.scratch },
               json: JSON.parse(JSON.stringify(ctx.locals.scratch)),
               has: 'scratch' in ctx.locals,
               argsWrite, replace, x: ctx.args.x,
             };
           }"#,
    )]);
    let k = kernel(&p, None, Seen::default());
    let out = run(&k, "views", json!({"x": 1})).await.unwrap().unwrap();
    assert_eq!(out["scratch"], json!({"a": 1, "b": 2}));
    assert_eq!(out["flag"], "on");
    assert_eq!(out["spread"], json!({"a": 1, "b": 2}));
    assert_eq!(out["json"], json!({"a": 1, "b": 2}));
    assert_eq!(out["has"], true);
    assert_eq!(out["argsWrite"], "TypeError");
    assert_eq!(out["replace"], "TypeError");
    assert_eq!(out["x"], 1);
}

#[tokio::test]
async fn each_skill_js_call_runs_in_a_fresh_sandbox() {
    let p = js_project(&[
        (
            "outer.skill.js",
            r#"export default async (ctx) => {
                 globalThis.leak = 'outer';
                 const inner = await ctx.manager.invoke('inner');
                 const again = await ctx.manager.invoke('inner');
                 return { inner, again, mine: globalThis.leak };
               }"#,
        ),
        (
            "inner.skill.js",
            "export default async () => { const seen = typeof globalThis.leak; globalThis.leak = 'inner'; return seen; }",
        ),
    ]);
    let k = kernel(&p, None, Seen::default());
    let out = run(&k, "outer", json!({})).await.unwrap().unwrap();
    assert_eq!(
        out,
        json!({"inner": "undefined", "again": "undefined", "mine": "outer"})
    );
}

#[tokio::test]
async fn console_log_is_a_log_event_of_the_run() {
    let p = js_project(&[(
        "talk.skill.js",
        r#"export default async (ctx) => {
             console.log('hello', { n: 1 });
             return ctx.manager.tail({ tag: 'console' }).map((e) => e.text);
           }"#,
    )]);
    let k = kernel(&p, None, Seen::default());
    let out = run(&k, "talk", json!({})).await.unwrap().unwrap();
    assert_eq!(out, json!(["hello {\"n\":1}"]));
}

#[tokio::test]
async fn a_syntax_error_in_a_skill_js_names_file_line_and_column() {
    let p = js_project(&[(
        "broken.skill.js",
        "export default async function (ctx) {\n  const x = ;\n}\n",
    )]);
    let k = kernel(&p, None, Seen::default());
    let err = run(&k, "broken", json!({})).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Config);
    let msg = err.message();
    assert!(msg.contains("broken.skill.js:2:"), "file and line: {msg}");
    assert!(msg.contains("syntax error"), "{msg}");
}

// ---------------------------------------------------------------------------------------------
// `.skill.js` middleware

#[tokio::test]
async fn js_middleware_wraps_the_served_skill_around_next() {
    let p = js_project(&[
        (
            "loud.skill.js",
            r#"export const frontmatter = { name: 'loud', metadata: { role: 'middleware' } };
               export default async function (ctx) {
                 const target = ctxTarget(ctx);
                 target.locals.before = 'yes';
                 const out = await target.manager.next();
                 return out.toUpperCase() + '!';
               }"#,
        ),
        (
            "served.skill.md",
            "---\nname: served\nmetadata:\n  loud: true\n---\nhi :arg[who]",
        ),
    ]);
    let k = kernel(&p, None, Seen::default());
    assert_eq!(
        run(&k, "served", json!({"who": "ada"})).await.unwrap(),
        Some(json!("HI ADA!"))
    );
}

#[tokio::test]
async fn js_middleware_catches_the_served_skills_error_and_recovers() {
    let p = js_project(&[
        (
            "rescue.skill.js",
            r#"export const frontmatter = { name: 'rescue', metadata: { role: 'middleware' } };
               export default async function (ctx) {
                 const target = ctxTarget(ctx);
                 try {
                   await target.manager.next();
                 } catch (err) {
                   target.locals.result = 'recovered from ' + err.message;
                 }
               }"#,
        ),
        (
            "fragile.skill.js",
            r#"export const frontmatter = {
                 name: 'fragile',
                 metadata: { rescue: true, $order: { rescue: { after: ['$pre-execute'], before: ['execute'] } } },
               };
               export default async () => { throw new Error('crash'); };"#,
        ),
    ]);
    let k = kernel(&p, None, Seen::default());
    assert_eq!(
        run(&k, "fragile", json!({})).await.unwrap(),
        Some(json!("recovered from crash"))
    );
}

#[tokio::test]
async fn ctx_target_throws_when_the_skill_is_not_middleware() {
    let p = js_project(&[(
        "alone.skill.js",
        "export default async (ctx) => { try { ctxTarget(ctx); return 'no throw'; } catch (e) { return e.message; } }",
    )]);
    let k = kernel(&p, None, Seen::default());
    let out = run(&k, "alone", json!({})).await.unwrap().unwrap();
    assert!(
        out.as_str().unwrap().contains("not invoked as middleware"),
        "{out}"
    );
}

// ---------------------------------------------------------------------------------------------
// Through the CLI (the binary over `tests/fixtures/scripts`)

#[test]
fn cli_runs_a_skill_js_with_flags_checked_against_its_params() {
    let out = skillgate(
        &fixture("scripts"),
        &["run", "greet-js", "--name", "Ada", "--times", "2"],
    );
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(stdout(&out), "Hello, Ada! Hello, Ada!\n");
    let out = skillgate(&fixture("scripts"), &["run", "greet-js"]);
    assert_eq!(out.status.code(), Some(2), "missing name is a usage error");
    assert!(stderr(&out).contains("\"name\" is a required property"));
}

#[test]
fn cli_runs_a_markdown_skill_served_by_js_middleware() {
    let out = skillgate(&fixture("scripts"), &["run", "shouted", "--who", "Bo"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(stdout(&out), "QUIET WORDS FOR BO\n");
}

#[test]
fn cli_runs_folder_js_skills_and_skill_js_paths() {
    let out = skillgate(&fixture("scripts"), &["run", "report"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let value: Value = serde_json::from_slice(&out.stdout).expect("json result");
    assert_eq!(value, json!({"tool": "report", "uri": true}));
    let path = fixture("scripts/skills/greet-js.skill.js");
    let path = path.to_str().expect("utf-8 path");
    let out = skillgate(&fixture("scripts"), &["run", path, "--name", "Cy"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(stdout(&out), "Hello, Cy!\n");
}

#[test]
fn cli_lists_js_skills_and_reports_their_failures() {
    let out = skillgate(&fixture("scripts"), &["skills", "list", "--tag", "fixture"]);
    let names: Vec<String> = stdout(&out)
        .lines()
        .filter_map(|l| l.split_whitespace().next().map(str::to_string))
        .collect();
    assert_eq!(names, ["greet-js", "shouted"]);
    let out = skillgate(&fixture("scripts"), &["run", "fails"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stderr(&out).contains("deliberate failure from fails.skill.js"),
        "{}",
        stderr(&out)
    );
}

#[test]
fn cli_names_file_line_and_column_of_a_js_syntax_error() {
    let p = js_project(&[(
        "bad.skill.js",
        "export const frontmatter = { name: 'bad' };\nexport default async function () {\n  return [1, 2;\n}\n",
    )]);
    let out = skillgate(p.path(), &["run", "bad"]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    let err = stderr(&out);
    assert!(err.contains("bad.skill.js:3:"), "file and line: {err}");
    assert!(err.contains("syntax error"), "{err}");
}

// ---------------------------------------------------------------------------------------------
// Limits: each stopped with its own error naming the limit and its value, then a healthy sandbox

#[tokio::test]
async fn heap_exhaustion_by_array_growth_hits_the_memory_limit() {
    let k = kernel(&Project::new(), None, Seen::default());
    let err = untrusted(
        &k,
        "const a = []; for (;;) a.push({ i: a.length, s: 'x' + a.length });",
        json!({"memory": 16}),
    )
    .await
    .unwrap_err();
    assert_eq!(err.message(), "sandbox memory limit of 16 MiB exceeded");
    assert_eq!(err.data().unwrap()["limit"], "memory");
    assert_healthy(&k).await;
}

#[tokio::test]
async fn heap_exhaustion_by_huge_strings_hits_the_memory_limit() {
    let k = kernel(&Project::new(), None, Seen::default());
    let err = untrusted(
        &k,
        "let s = 'x'.repeat(1024); const keep = []; for (;;) { s = s + s; keep.push(s.slice(1)); }",
        json!({"memory": 16}),
    )
    .await
    .unwrap_err();
    assert_eq!(err.message(), "sandbox memory limit of 16 MiB exceeded");
    assert_healthy(&k).await;
}

#[tokio::test]
async fn heap_exhaustion_by_json_nesting_is_stopped_by_a_limit() {
    let k = kernel(&Project::new(), None, Seen::default());
    // Parsing text nested a million deep.
    let err = untrusted(
        &k,
        "const n = 1000000; return JSON.parse('['.repeat(n) + ']'.repeat(n));",
        json!({"memory": 16}),
    )
    .await
    .unwrap_err();
    assert!(
        err.message() == "sandbox stack limit of 256 KiB exceeded"
            || err.message() == "sandbox memory limit of 16 MiB exceeded",
        "{err}"
    );
    assert_healthy(&k).await;
    // Building a nested value until the heap is full.
    let err = untrusted(
        &k,
        "let v = {}; for (;;) v = { v, pad: [v, v] };",
        json!({"memory": 16, "time": 20000}),
    )
    .await
    .unwrap_err();
    assert_eq!(err.message(), "sandbox memory limit of 16 MiB exceeded");
    assert_healthy(&k).await;
    // Returning a value nested too deeply to cross the boundary.
    let err = untrusted(
        &k,
        "let v = []; for (let i = 0; i < 100000; i++) v = [v]; return v;",
        json!({}),
    )
    .await
    .unwrap_err();
    assert!(
        err.message().starts_with("sandbox stack limit")
            || err.message().contains("cannot cross the sandbox boundary"),
        "{err}"
    );
    assert_healthy(&k).await;
}

#[tokio::test]
async fn an_infinite_loop_hits_the_time_limit() {
    let k = kernel(&Project::new(), None, Seen::default());
    let err = untrusted(&k, "for (;;) {}", json!({"time": 200}))
        .await
        .unwrap_err();
    assert_eq!(err.message(), "sandbox time limit of 200 ms exceeded");
    assert_eq!(err.data().unwrap()["limit"], "time");
    assert_healthy(&k).await;
    // Catching the interruption does not help: it cannot be caught.
    let err = untrusted(
        &k,
        "for (;;) { try { for (;;) {} } catch (e) { /* keep going */ } }",
        json!({"time": 200}),
    )
    .await
    .unwrap_err();
    assert_eq!(err.message(), "sandbox time limit of 200 ms exceeded");
    assert_healthy(&k).await;
}

#[tokio::test]
async fn an_endless_microtask_chain_hits_the_time_limit() {
    let k = kernel(&Project::new(), None, Seen::default());
    let err = untrusted(&k, "for (;;) await null;", json!({"time": 200}))
        .await
        .unwrap_err();
    assert_eq!(err.message(), "sandbox time limit of 200 ms exceeded");
    assert_healthy(&k).await;
    let err = untrusted(
        &k,
        "const spin = () => Promise.resolve().then(spin); spin(); await new Promise(() => {});",
        json!({"time": 200, "wall": 60000}),
    )
    .await
    .unwrap_err();
    assert_eq!(err.message(), "sandbox time limit of 200 ms exceeded");
    assert_healthy(&k).await;
}

#[tokio::test]
async fn a_promise_that_never_settles_hits_the_wall_clock_limit() {
    let k = kernel(&Project::new(), None, Seen::default());
    let err = untrusted(&k, "await new Promise(() => {});", json!({"wall": 300}))
        .await
        .unwrap_err();
    assert!(
        err.message()
            .starts_with("sandbox wall-clock limit of 300 ms exceeded"),
        "{err}"
    );
    assert_eq!(err.data().unwrap()["limit"], "wall");
    assert_healthy(&k).await;
}

#[tokio::test]
async fn deeply_nested_source_hits_the_stack_limit_while_parsing() {
    let k = kernel(&Project::new(), None, Seen::default());
    let depth = 200_000;
    let code = format!("return {}1{};", "(".repeat(depth), ")".repeat(depth));
    let err = untrusted(&k, &code, json!({})).await.unwrap_err();
    assert_eq!(err.message(), "sandbox stack limit of 256 KiB exceeded");
    assert_healthy(&k).await;
    // The same source nested in `eval` at run time.
    let err = untrusted(
        &k,
        "return eval('['.repeat(200000) + ']'.repeat(200000));",
        json!({}),
    )
    .await
    .unwrap_err();
    assert_eq!(err.message(), "sandbox stack limit of 256 KiB exceeded");
    assert_healthy(&k).await;
    // And in a `.skill.js` file: a load failure that says so.
    let p = js_project(&[(
        "deep.skill.js",
        &format!(
            "export default () => {}1{};",
            "[".repeat(depth),
            "]".repeat(depth)
        ),
    )]);
    let k2 = kernel(&p, None, Seen::default());
    let err = run(&k2, "deep", json!({})).await.unwrap_err();
    assert!(err.message().contains("nested too deeply"), "{err}");
    assert_healthy(&k2).await;
}

#[tokio::test]
async fn deep_recursion_hits_the_stack_limit() {
    let k = kernel(&Project::new(), None, Seen::default());
    let err = untrusted(
        &k,
        "const f = (n) => f(n + 1) + 1; return f(0);",
        json!({"stack": 128}),
    )
    .await
    .unwrap_err();
    assert_eq!(err.message(), "sandbox stack limit of 128 KiB exceeded");
    assert_eq!(err.data().unwrap()["limit"], "stack");
    assert_healthy(&k).await;
}

#[tokio::test]
async fn aborting_the_context_stops_a_parked_script() {
    let k = kernel(&Project::new(), None, Seen::default());
    let err = untrusted(
        &k,
        "ctx.manager.abort('enough'); await new Promise(() => {});",
        json!({"wall": 60000}),
    )
    .await
    .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Aborted, "{err}");
    assert!(err.message().contains("enough"), "{err}");
    assert_healthy(&k).await;
}

// ---------------------------------------------------------------------------------------------
// Escapes: nothing of the host is reachable except the bridge

#[tokio::test]
async fn host_objects_are_not_reachable() {
    let k = kernel(&Project::new(), None, Seen::default());
    let out = untrusted(
        &k,
        r#"const g = globalThis;
           const viaFunction = Function('return this')();
           const viaConstructor = (() => {}).constructor('return this')();
           const names = ['require', 'process', 'module', 'exports', 'std', 'os', 'Deno', 'Bun',
             'fetch', 'XMLHttpRequest', 'WebSocket', 'setTimeout', 'setInterval', 'setImmediate',
             'importScripts', 'print', 'scriptArgs', '__host', 'host', 'navigator'];
           const reachable = names.filter((n) => typeof g[n] !== 'undefined'
             || typeof viaFunction[n] !== 'undefined' || typeof viaConstructor[n] !== 'undefined');
           let dynamicImport;
           try { await import('fs'); dynamicImport = 'loaded'; } catch (e) { dynamicImport = String(e); }
           let fileImport;
           try { await import('file:///etc/passwd'); fileImport = 'loaded'; } catch (e) { fileImport = String(e); }
           let requireCall;
           try { require('fs'); requireCall = 'called'; } catch (e) { requireCall = e.constructor.name; }
           let blocking;
           try { Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, 10); blocking = 'blocked'; }
           catch (e) { blocking = e.constructor.name; }
           return { reachable, dynamicImport, fileImport, requireCall, blocking,
                    sameGlobal: viaFunction === g && viaConstructor === g };"#,
        json!({}),
    )
    .await
    .unwrap()
    .unwrap();
    assert_eq!(out["reachable"], json!([]), "{out}");
    assert!(
        out["dynamicImport"]
            .as_str()
            .unwrap()
            .contains("could not load module"),
        "{out}"
    );
    assert!(
        out["fileImport"]
            .as_str()
            .unwrap()
            .contains("could not load module"),
        "{out}"
    );
    assert_eq!(out["requireCall"], "ReferenceError");
    assert_eq!(
        out["blocking"], "TypeError",
        "Atomics.wait cannot block: {out}"
    );
    assert_eq!(out["sameGlobal"], true);
    assert_healthy(&k).await;
}

#[tokio::test]
async fn the_global_object_holds_only_the_language_and_the_bridge() {
    let k = kernel(&Project::new(), None, Seen::default());
    let out = untrusted(
        &k,
        "return Object.getOwnPropertyNames(globalThis).sort();",
        json!({}),
    )
    .await
    .unwrap()
    .unwrap();
    let allowed = [
        // ECMAScript
        "AggregateError",
        "Array",
        "ArrayBuffer",
        "Atomics",
        "BigInt",
        "BigInt64Array",
        "BigUint64Array",
        "Boolean",
        "DataView",
        "Date",
        "Error",
        "EvalError",
        "FinalizationRegistry",
        "Float16Array",
        "Float32Array",
        "Float64Array",
        "Function",
        "Infinity",
        "Int16Array",
        "Int32Array",
        "Int8Array",
        "Iterator",
        "JSON",
        "Map",
        "Math",
        "NaN",
        "Number",
        "Object",
        "Promise",
        "Proxy",
        "RangeError",
        "ReferenceError",
        "Reflect",
        "RegExp",
        "Set",
        "SharedArrayBuffer",
        "String",
        "Symbol",
        "SuppressedError",
        "DisposableStack",
        "AsyncDisposableStack",
        "SyntaxError",
        "TypeError",
        "URIError",
        "Uint16Array",
        "Uint32Array",
        "Uint8Array",
        "Uint8ClampedArray",
        "WeakMap",
        "WeakRef",
        "WeakSet",
        "decodeURI",
        "decodeURIComponent",
        "encodeURI",
        "encodeURIComponent",
        "escape",
        "eval",
        "globalThis",
        "isFinite",
        "isNaN",
        "parseFloat",
        "parseInt",
        "undefined",
        "unescape",
        // QuickJS additions without I/O
        "queueMicrotask",
        "CallSite",
        // QuickJS's own error class
        "InternalError",
        // the bridge
        "ctxTarget",
        "console",
        "memory",
    ];
    let unexpected: Vec<&str> = out
        .as_array()
        .unwrap()
        .iter()
        .filter_map(Value::as_str)
        .filter(|n| !allowed.contains(n))
        .collect();
    assert!(unexpected.is_empty(), "unexpected globals: {unexpected:?}");
}

#[tokio::test]
async fn untrusted_code_may_not_invoke_inline_or_file_refs() {
    let p = js_project(&[("target.skill.js", "export default () => 'ran';")]);
    let path = p.path().join("skills/target.skill.js");
    let k = kernel(&p, None, Seen::default());
    for reference in [
        "inline://code,export default () => 1".to_string(),
        format!("file://{}", path.display()),
        path.display().to_string(),
        "./skills/target.skill.js".to_string(),
        "Target".to_string(),
    ] {
        let code = format!(
            "try {{ await ctx.manager.invoke({}); return 'invoked'; }} catch (e) {{ return e.code + ': ' + e.message; }}",
            serde_json::to_string(&reference).unwrap()
        );
        let out = untrusted(&k, &code, json!({})).await.unwrap().unwrap();
        let out = out.as_str().unwrap();
        assert!(
            out.starts_with("denied: untrusted code may only invoke bare tool names"),
            "{reference}: {out}"
        );
    }
    // A bare name is fine.
    let out = untrusted(&k, "return await ctx.manager.invoke('target');", json!({}))
        .await
        .unwrap();
    assert_eq!(out, Some(json!("ran")));
    assert_healthy(&k).await;
}

#[tokio::test]
async fn untrusted_code_cannot_lift_its_mark_refresh_or_inject_refs() {
    let k = kernel(&Project::new(), None, Seen::default());
    let out = untrusted(
        &k,
        r#"const tries = {};
           const attempt = (name, f) => { try { f(); tries[name] = 'allowed'; } catch (e) { tries[name] = e.code; } };
           attempt('unmark', () => ctx.manager.set('locals.internals.untrustedRef', false));
           attempt('internals', () => { ctx.locals.internals = {}; });
           attempt('refresh', () => ctx.manager.refresh());
           attempt('inject', () => ctx.manager.inject([{ name: 'file:///x.skill.md' }]));
           let after;
           try { await ctx.manager.invoke('inline://x'); after = 'invoked'; } catch (e) { after = e.code; }
           return { ...tries, after };"#,
        json!({}),
    )
    .await
    .unwrap()
    .unwrap();
    assert_eq!(
        out,
        json!({"unmark": "denied", "internals": "denied", "refresh": "denied", "inject": "denied", "after": "denied"})
    );
}

#[tokio::test]
async fn untrusted_code_cannot_repoint_search_paths_through_injected_paths_middleware() {
    let k = kernel(&Project::new(), None, Seen::default());
    let out = untrusted(
        &k,
        r#"ctx.manager.inject([{ name: 'paths', args: ['/tmp'] }]);
           try { await ctx.manager.next(); return 'refreshed'; } catch (e) { return e.code; }"#,
        json!({}),
    )
    .await
    .unwrap()
    .unwrap();
    assert_eq!(out, json!("denied"));
}

#[tokio::test]
async fn the_untrusted_mark_does_not_pass_to_the_tools_it_invokes() {
    let seen = Seen::default();
    let k = kernel(&Project::new(), None, seen.clone());
    let out = untrusted(&k, "return await ctx.manager.invoke('probe');", json!({}))
        .await
        .unwrap();
    assert_eq!(out, Some(json!(true)));
    let child = seen.get("probe");
    assert_eq!(child.get("locals.internals.untrustedRef").unwrap(), None);
    // The child may invoke what its untrusted caller may not: a definition, not a bare name.
    let def = Arc::new(native("name: inner-def\n", |_c, _a| async {
        Ok(Some(json!("def ran")))
    }));
    let out = child
        .invoke(
            ToolRef::Def(def.clone()),
            json!({}),
            InvokeOptions::default(),
        )
        .await
        .unwrap();
    assert_eq!(plain(out), Some(json!("def ran")));
    // While the untrusted caller itself is refused the same.
    let caller = child
        .parent()
        .expect("the anonymous skill's context")
        .clone();
    assert_eq!(caller.tool_name(), "anonymous");
    let err = caller
        .invoke(ToolRef::Def(def), json!({}), InvokeOptions::default())
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Denied, "{err}");
}

#[tokio::test]
async fn untrusted_code_in_middleware_mode_serves_its_target_under_the_same_rule() {
    let p = js_project(&[("served.skill.md", "---\nname: served\n---\nbody text")]);
    let k = p
        .builder()
        .native(native(
            "name: agent-like\nmetadata:\n  role: middleware\n",
            |ctx, _args| async move {
                let target = ctx.ctx_target()?;
                let options = Untrusted {
                    target: Some(target),
                    ..Untrusted::default()
                };
                let code = r#"const target = ctxTarget(ctx);
                    let refused;
                    try { await target.manager.invoke('file:///etc/passwd'); } catch (e) { refused = e.code; }
                    const out = await target.manager.next();
                    target.manager.finish(out.trim() + ' / ' + refused);"#;
                sandbox::run_untrusted_with(&ctx, code, options).await?;
                Ok(None)
            },
        ))
        .build();
    let out = run(
        &k,
        "served",
        json!({"$context": {"middleware": {"agent-like": {}}}}),
    )
    .await
    .unwrap();
    assert_eq!(out, Some(json!("body text / denied")));
}

// ---------------------------------------------------------------------------------------------
// Sessions

#[tokio::test]
async fn a_session_keeps_its_memory_global_across_calls_seeded_from_json() {
    let session = Session::seeded(&json!({"count": 10, "name": "s"})).unwrap();
    let k = kernel(&Project::new(), Some(session.clone()), Seen::default());
    let code = "memory.count = (memory.count ?? 0) + 1; memory.fns ??= []; memory.fns.push(() => memory.count); return memory.count;";
    assert_eq!(
        untrusted(&k, code, json!({})).await.unwrap(),
        Some(json!(11))
    );
    assert_eq!(
        untrusted(&k, code, json!({})).await.unwrap(),
        Some(json!(12))
    );
    let out = untrusted(
        &k,
        "return { name: memory.name, closures: memory.fns.map((f) => f()) };",
        json!({}),
    )
    .await
    .unwrap();
    assert_eq!(out, Some(json!({"name": "s", "closures": [12, 12]})));
    // A fresh sandbox has an empty memory.
    let fresh = kernel(&Project::new(), None, Seen::default());
    assert_eq!(
        untrusted(&fresh, "return Object.keys(memory).length;", json!({}))
            .await
            .unwrap(),
        Some(json!(0))
    );
}

#[tokio::test]
async fn a_session_survives_a_limit_hit_and_a_ctx_kept_from_an_ended_call_is_dead() {
    let session = Session::default();
    let k = kernel(&Project::new(), Some(session), Seen::default());
    untrusted(&k, "memory.old = ctx; memory.kept = 'yes';", json!({}))
        .await
        .unwrap();
    let err = untrusted(&k, "for (;;) {}", json!({"time": 100}))
        .await
        .unwrap_err();
    assert_eq!(err.message(), "sandbox time limit of 100 ms exceeded");
    let out = untrusted(
        &k,
        "try { await memory.old.manager.invoke('noop'); return 'acted'; } catch (e) { return memory.kept + ': ' + e.message; }",
        json!({}),
    )
    .await
    .unwrap();
    assert_eq!(
        out,
        Some(json!(
            "yes: this ctx belongs to a sandbox call that has ended"
        ))
    );
}

#[tokio::test]
async fn a_session_refuses_a_second_call_while_one_runs() {
    let session = Session::default();
    let k = kernel(&Project::new(), Some(session), Seen::default());
    // The code reaches its own session again through `run-code`.
    let out = untrusted(
        &k,
        "try { await ctx.manager.invoke('run-code', { code: 'return 1;' }); return 'nested ran'; } catch (e) { return e.message; }",
        json!({}),
    )
    .await
    .unwrap()
    .unwrap();
    assert!(
        out.as_str().unwrap().contains("already running a call"),
        "{out}"
    );
    assert_healthy(&k).await;
}

#[test]
fn a_session_memory_seed_must_be_an_object() {
    assert!(Session::seeded(&json!([1])).is_err());
    assert!(Session::seeded(&json!(null)).is_ok());
}

#[tokio::test]
async fn a_session_is_reset_when_a_stopped_call_left_work_queued() {
    let session = Session::seeded(&json!({"turn": 0})).unwrap();
    let k = kernel(&Project::new(), Some(session), Seen::default());
    untrusted(&k, "memory.turn = 1;", json!({})).await.unwrap();
    let err = untrusted(
        &k,
        "ctx.manager.invoke('hang'); for (;;) {}",
        json!({"time": 100}),
    )
    .await
    .unwrap_err();
    assert!(
        err.message()
            .starts_with("sandbox time limit of 100 ms exceeded; the session's sandbox was reset"),
        "{err}"
    );
    assert_eq!(err.data().unwrap()["limit"], "time");
    let out = untrusted(&k, "return memory.turn;", json!({}))
        .await
        .unwrap();
    assert_eq!(out, Some(json!(0)), "memory starts again from its seed");
}

// ---------------------------------------------------------------------------------------------
// Running untrusted code, limits from metadata

#[tokio::test]
async fn run_untrusted_runs_code_as_an_anonymous_inline_skill_through_the_pipeline() {
    let k = Project::new()
        .builder()
        .native(native("name: noop\n", |_c, _a| async { Ok(Some(json!(true))) }))
        .native(native("name: echo\n", |_c, a| async move { Ok(Some((*a).clone())) }))
        .native(native("name: host\n", |ctx, _args| async move {
            let plain = sandbox::run_untrusted(
                &ctx,
                "return { uri: ctx.run.origin.uri, tool: ctx.run.tool.name, marked: ctx.locals.internals.untrustedRef };",
                None,
            )
            .await?;
            let mut metadata = Map::new();
            metadata.insert("allowed-tools".into(), json!("echo"));
            let restricted = sandbox::run_untrusted_with(
                &ctx,
                r#"const echoed = await ctx.manager.invoke('echo', { a: args.a });
                   let noop;
                   try { await ctx.manager.invoke('noop'); noop = 'allowed'; } catch (e) { noop = e.code; }
                   return { echoed, noop };"#,
                Untrusted {
                    args: Some(json!({"a": 5})),
                    metadata,
                    name: Some("agent-code".into()),
                    ..Untrusted::default()
                },
            )
            .await?;
            Ok(Some(json!({ "plain": plain, "restricted": restricted })))
        }))
        .build();
    let out = run(&k, "host", json!({})).await.unwrap().unwrap();
    assert_eq!(
        out["plain"],
        json!({"uri": "inline://anonymous", "tool": "anonymous", "marked": true})
    );
    assert_eq!(
        out["restricted"],
        json!({"echoed": {"a": 5}, "noop": "denied"}),
        "allowed-tools of the anonymous skill is enforced by the pipeline"
    );
}

#[tokio::test]
async fn the_memory_limit_defaults_to_32_mib() {
    let k = kernel(&Project::new(), None, Seen::default());
    let err = untrusted(
        &k,
        "const a = []; for (;;) a.push('x'.repeat(4096) + a.length);",
        json!(null),
    )
    .await
    .unwrap_err();
    assert_eq!(err.message(), "sandbox memory limit of 32 MiB exceeded");
    assert_healthy(&k).await;
}

#[tokio::test]
async fn a_skill_js_takes_its_limits_from_metadata_sandbox() {
    let p = js_project(&[
        (
            "spin.skill.js",
            "export const frontmatter = { metadata: { sandbox: { time: '150ms' } } };\nexport default () => { for (;;) {} };",
        ),
        ("busy.skill.js", "export default () => { for (;;) {} };"),
    ]);
    // The project's main skill sets the limits of everything below it, through the cascade.
    p.write(
        "main.skill.md",
        "---\nname: main\nmetadata:\n  role: main\n  sandbox: { time: 120 }\n---\nmain\n",
    );
    let k = kernel(&p, None, Seen::default());
    let err = run(&k, "spin", json!({})).await.unwrap_err();
    assert_eq!(err.message(), "sandbox time limit of 150 ms exceeded");
    let err = run(&k, "busy", json!({})).await.unwrap_err();
    assert_eq!(err.message(), "sandbox time limit of 120 ms exceeded");
}
