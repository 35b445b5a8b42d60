//! Escapes: nothing of the host is reachable except the bridge, and untrusted code may not
//! reach refs it is not given.

use std::sync::Arc;

use serde_json::{Value, json};
use skillgate::sandbox::{self, Untrusted};
use skillgate::{ErrorKind, InvokeOptions, ToolRef};

use super::{assert_healthy, js_project, kernel, run, untrusted};
use crate::support::common::{Project, Seen, native, plain};

#[tokio::test]
async fn the_prelude_a_script_can_import_wires_a_ctx_only_to_a_host_the_script_gives_it() {
    let seen = Seen::default();
    let k = kernel(&Project::new(), None, seen.clone());
    let out = untrusted(
        &k,
        r#"let prelude;
           try { prelude = await import('skillgate:prelude'); } catch (e) { return 'unreachable'; }
           const { default: make, ...rest } = prelude;
           const asked = [];
           const fake = new Proxy({}, { get: (_, op) => (...a) => { asked.push(op); return op === 'invoke' ? 'fake' : {}; } });
           const made = make(fake);
           const answer = await made.manager.invoke('probe');
           return { exports: Object.keys(rest), answer, asked: asked.includes('invoke'),
                    same: made === ctx };"#,
        json!({}),
    )
    .await
    .unwrap();
    // Not importable at all would do too; importable, it gives only the factory.
    if out != Some(json!("unreachable")) {
        assert_eq!(
            out,
            Some(json!({"exports": [], "answer": "fake", "asked": true, "same": false}))
        );
    }
    // The real host was never asked: `probe` did not run.
    assert!(seen.all("probe").is_empty());
}

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
    // `paths` is internal machinery: untrusted code cannot name it, not even as middleware.
    assert_eq!(out, json!("not-found"));
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

#[tokio::test]
async fn untrusted_code_cannot_seed_paths_middleware_into_what_it_invokes() {
    let p = js_project(&[("target.skill.js", "export default () => 'project';")]);
    // A folder with a `target` of its own, which a `paths` seed would have the child load.
    let elsewhere = tempfile::tempdir().unwrap();
    std::fs::write(
        elsewhere.path().join("target.skill.js"),
        "export default () => 'elsewhere';",
    )
    .unwrap();
    let folder = serde_json::to_string(&elsewhere.path().display().to_string()).unwrap();
    let seed = format!("[{{ name: 'paths', args: [{folder}] }}]");
    // Trusted code may: the seed is real, and this is what it does.
    p.skill(
        "trusted-seeder.skill.js",
        &format!(
            "export default async (ctx) => {{ ctx.manager.set('nonlocals.middleware', {seed}); return await ctx.manager.invoke('target'); }};"
        ),
    );
    let k = kernel(&p, None, Seen::default());
    assert_eq!(
        run(&k, "trusted-seeder", json!({})).await.unwrap(),
        Some(json!("elsewhere"))
    );
    let code = format!(
        r#"const tries = {{}};
           const attempt = async (name, f) => {{ try {{ tries[name] = await f(); }} catch (e) {{ tries[name] = e.code; }} }};
           await attempt('options', () => ctx.manager.invoke('target', {{}}, {{ context: {{ locals: {{ middleware: {seed} }} }} }}));
           await attempt('$context', () => ctx.manager.invoke('target', {{ $context: {{ middleware: {seed} }} }}));
           await attempt('nonlocals', () => {{ ctx.manager.set('nonlocals.middleware', {seed}); return 'set'; }});
           await attempt('nonlocals-object', () => {{ ctx.manager.set('nonlocals', {{ middleware: {seed} }}); return 'set'; }});
           await attempt('proxy', () => {{ ctx.nonlocals.middleware = {seed}; return 'set'; }});
           tries.after = await ctx.manager.invoke('target');
           return tries;"#
    );
    let out = untrusted(&k, &code, json!({})).await.unwrap().unwrap();
    assert_eq!(
        out,
        json!({
            "options": "denied",
            "$context": "denied",
            "nonlocals": "denied",
            "nonlocals-object": "denied",
            "proxy": "denied",
            "after": "project",
        })
    );
}
