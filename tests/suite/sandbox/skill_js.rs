//! `.skill.js` skills through the pipeline: the default export, the frontmatter export, the
//! ctx bridge, errors, a fresh sandbox per call, console.log.

use serde_json::json;
use skillgate::ErrorKind;

use super::{js_project, kernel, run};
use crate::support::common::Seen;

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

/// Sandboxes are made ahead of the calls that take them and freed after: none is handed out
/// twice, so however many calls run in a row, each starts from nothing.
#[tokio::test]
async fn a_sandbox_made_ahead_has_run_nothing_and_serves_one_call_only() {
    let p = js_project(&[(
        "count.skill.js",
        "export default async () => { globalThis.n = (globalThis.n ?? 0) + 1; return globalThis.n; }",
    )]);
    let k = kernel(&p, None, Seen::default());
    for _ in 0..20 {
        assert_eq!(run(&k, "count", json!({})).await.unwrap(), Some(json!(1)));
    }
    let many = futures::future::join_all((0..20).map(|_| run(&k, "count", json!({})))).await;
    for out in many {
        assert_eq!(out.unwrap(), Some(json!(1)));
    }
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
