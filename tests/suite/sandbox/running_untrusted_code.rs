//! Running untrusted code as an anonymous inline skill, and limits from metadata.

use serde_json::{Map, json};
use skillgate::sandbox::{self, Untrusted};

use super::{assert_healthy, js_project, kernel, run, untrusted};
use crate::support::common::{Project, Seen, native};

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
