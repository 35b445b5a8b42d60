//! MCP in: skills mount MCP servers with `metadata.mcp`. Over stdio, the fixture server of
//! `examples/mcp_fixture.rs` (a separate process speaking the published protocol through the
//! official SDK); over Streamable HTTP, another skillgate's `/mcp` behind its API keys.

use std::path::PathBuf;

use serde_json::{Value, json};
use skillgate::error::ErrorKind;
use skillgate::{InvokeOptions, Kernel};

use crate::support::common::{Project, plain};
use crate::support::server::{TestServer, config, with_keys};

/// The fixture server, built beside the test binaries (`cargo test` builds the examples).
fn fixture() -> String {
    let exe = std::env::current_exe().expect("the test binary's path");
    let dir = exe
        .parent()
        .and_then(|deps| deps.parent())
        .expect("target/<profile>");
    let path: PathBuf = dir.join("examples").join("mcp_fixture");
    assert!(
        path.exists(),
        "{} is missing: `cargo test` builds it",
        path.display()
    );
    path.display().to_string()
}

/// A skill `through` that mounts `mcp` and invokes `args.tool` with `args.args`, and a skill
/// `mounted` that answers with `locals.config.mcp`.
fn project(mcp: Value) -> Project {
    let p = Project::new();
    p.skill(
        "through.skill.js",
        &format!(
            "export const frontmatter = {{ metadata: {{ mcp: {mcp} }} }};\n\
             export default async (ctx, args) => ctx.manager.invoke(args.tool, args.args ?? {{}});\n"
        ),
    )
    .skill(
        "mounted.skill.js",
        &format!(
            "export const frontmatter = {{ metadata: {{ mcp: {mcp} }} }};\n\
             export default async (ctx) => ctx.locals.config.mcp;\n"
        ),
    );
    p
}

fn stdio() -> Value {
    json!({ "fx": { "command": fixture() } })
}

/// Invokes `tool` through the mounting skill `through` on `kernel` (one kernel: one pool of
/// connections, as in a running service).
async fn through(kernel: &Kernel, tool: &str, args: Value) -> skillgate::error::Result<Value> {
    kernel
        .invoke(
            "through",
            json!({ "tool": tool, "args": args }),
            InvokeOptions::default(),
        )
        .await
        .map(|out| plain(out).unwrap_or(Value::Null))
}

async fn call(p: &Project, tool: &str, args: Value) -> Result<Value, (ErrorKind, String)> {
    invoke(p, "through", json!({ "tool": tool, "args": args })).await
}

async fn invoke(p: &Project, skill: &str, args: Value) -> Result<Value, (ErrorKind, String)> {
    p.kernel()
        .invoke(skill, args, InvokeOptions::default())
        .await
        .map(|out| plain(out).unwrap_or(Value::Null))
        .map_err(|e| (e.kind(), e.message().to_string()))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stdio_servers_tools_are_invoked_as_server_dash_tool() {
    let p = project(stdio());
    let kernel = p.kernel();
    let sum = through(&kernel, "fx-add", json!({ "a": 2, "b": 3 }))
        .await
        .unwrap();
    assert_eq!(sum, json!({ "sum": 5 }), "structured content");
    let echo = through(&kernel, "fx-echo", json!({ "text": "hi" }))
        .await
        .unwrap();
    assert_eq!(echo, json!("hi"), "text content");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_mounted_tool_has_the_servers_schemas_and_an_mcp_origin() {
    let p = project(stdio());
    let described = call(&p, "skill-describe", json!({ "name": "fx-add" }))
        .await
        .unwrap();
    assert_eq!(described["origin"], "mcp://fx/add");
    assert_eq!(described["description"], "Adds two integers.");
    assert_eq!(described["params"]["required"], json!(["a", "b"]));
    assert_eq!(described["returns"]["required"], json!(["sum"]));
    assert_eq!(described["tags"], json!(["mcp"]));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn args_are_checked_against_the_servers_schema_before_they_are_sent() {
    let p = project(stdio());
    let (kind, message) = call(&p, "fx-add", json!({ "a": "two", "b": 3 }))
        .await
        .unwrap_err();
    assert_eq!(kind, ErrorKind::InvalidArgs, "{message}");
    // The fixture would say "`a` and `b` must be integers"; the schema check names the field.
    assert!(message.contains("/a"), "{message}");
    assert!(!message.contains("must be integers"), "{message}");
    let (kind, message) = call(&p, "fx-add", json!({ "a": 1 })).await.unwrap_err();
    assert_eq!(kind, ErrorKind::InvalidArgs, "{message}");
    assert!(message.contains("b"), "{message}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tool_error_fails_the_skill_with_the_servers_text() {
    let p = project(stdio());
    let (kind, message) = call(&p, "fx-fail", json!({})).await.unwrap_err();
    assert_eq!(kind, ErrorKind::Failed);
    assert!(
        message.contains("the fixture failed on purpose"),
        "{message}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn locals_config_mcp_says_what_is_mounted_and_tools_narrows_it() {
    let p = project(json!({ "fx": { "command": fixture(), "tools": ["add", "echo"] } }));
    let mounted = invoke(&p, "mounted", json!({})).await.unwrap();
    assert_eq!(mounted["fx"]["tools"], json!(["fx-add", "fx-echo"]));
    let server = mounted["fx"]["server"].as_str().unwrap();
    assert!(
        server.starts_with("stdio `") && server.contains("mcp_fixture"),
        "{server}"
    );
    let (kind, message) = call(&p, "fx-pid", json!({})).await.unwrap_err();
    assert_eq!(kind, ErrorKind::NotFound, "{message}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_tools_are_not_visible_to_skills_that_do_not_mount_them() {
    let p = project(stdio());
    p.skill(
        "plain.skill.js",
        "export default async (ctx) => ctx.manager.invoke('fx-echo', { text: 'x' });\n",
    );
    let kernel = p.kernel();
    // Mounted for `through` in this kernel, and still not found from `plain`.
    let echo = through(&kernel, "fx-echo", json!({ "text": "a" })).await;
    assert_eq!(echo.unwrap(), json!("a"));
    let err = kernel
        .invoke("plain", json!({}), InvokeOptions::default())
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::NotFound, "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_that_exits_is_started_again_on_the_next_call() {
    let p = project(stdio());
    let kernel = p.kernel();
    let first = through(&kernel, "fx-pid", json!({})).await.unwrap();
    let again = through(&kernel, "fx-pid", json!({})).await.unwrap();
    assert_eq!(first, again, "one process serves every call");
    let err = through(&kernel, "fx-exit", json!({})).await.unwrap_err();
    assert!(
        err.message()
            .contains("closed the connection during `exit`"),
        "{err}"
    );
    let second = through(&kernel, "fx-pid", json!({})).await.unwrap();
    assert_ne!(first, second, "a new process answers");
    assert!(second.as_str().unwrap().parse::<u32>().is_ok(), "{second}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tool_the_server_adds_is_mounted_once_it_says_its_tools_changed() {
    let p = project(stdio());
    let kernel = p.kernel();
    let err = through(&kernel, "fx-extra", json!({})).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::NotFound, "{err}");
    assert_eq!(
        through(&kernel, "fx-grow", json!({})).await.unwrap(),
        "grown"
    );
    // The notification is handled on its own task: wait for it (a hang guard of 10 s).
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(10);
    let extra = loop {
        match through(&kernel, "fx-extra", json!({})).await {
            Ok(v) => break v,
            Err(e) if e.kind() == ErrorKind::NotFound && tokio::time::Instant::now() < deadline => {
                tokio::time::sleep(std::time::Duration::from_millis(20)).await;
            }
            Err(e) => panic!("{e}"),
        }
    };
    assert_eq!(extra, "extra here");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stdio_server_gets_its_env_and_not_the_services() {
    // Some variable of this process that a server must not see (cargo and nextest set many).
    let (private, _) = std::env::vars()
        .find(|(k, _)| k.starts_with("CARGO") || k.starts_with("NEXTEST"))
        .expect("a CARGO_* variable in the test's environment");
    let p = project(json!({ "fx": { "command": fixture(), "env": { "GREETING": "hello" } } }));
    let env = |name: &str| call(&p, "fx-env", json!({ "name": name }));
    assert_eq!(env("GREETING").await.unwrap(), json!("hello"));
    assert_eq!(env(&private).await.unwrap(), json!("<unset>"), "{private}");
    assert_ne!(env("PATH").await.unwrap(), json!("<unset>"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_past_its_timeout_fails_and_the_server_stays_usable() {
    let p = project(json!({ "fx": { "command": fixture(), "timeout": 0.3 } }));
    let kernel = p.kernel();
    let err = through(&kernel, "fx-slow", json!({ "ms": 5000 }))
        .await
        .unwrap_err();
    assert!(
        err.message().contains("`slow` did not answer within 0.3 s"),
        "{err}"
    );
    let quick = through(&kernel, "fx-slow", json!({ "ms": 1 }))
        .await
        .unwrap();
    assert_eq!(quick, json!("slept 1 ms"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_http_server_is_mounted_with_its_headers() {
    let remote = Project::new();
    remote.skill(
        "hello.skill.md",
        "---\nname: hello\ndescription: Greets someone.\nmetadata:\n  params: { type: object, properties: { name: { type: string } }, required: [name] }\n---\nHello, :arg[name]!",
    );
    let server = TestServer::start(remote, with_keys()).await;
    let url = server.url("/mcp");
    let p = project(json!({
        "remote": { "url": url, "headers": { "Authorization": "Bearer sg_ci_key" } },
    }));
    let greeting = call(&p, "remote-hello", json!({ "name": "Ada" })).await;
    assert_eq!(greeting.unwrap(), json!("Hello, Ada!"));
    let described = call(&p, "skill-describe", json!({ "name": "remote-hello" }))
        .await
        .unwrap();
    assert_eq!(described["origin"], "mcp://remote/hello");
    assert_eq!(described["description"], "Greets someone.");
    // The remote's schema is checked here first.
    let (kind, _) = call(&p, "remote-hello", json!({})).await.unwrap_err();
    assert_eq!(kind, ErrorKind::InvalidArgs);

    // Without the key, the remote refuses the handshake, and the mount says so.
    let keyless = project(json!({ "remote": { "url": url } }));
    let (_, message) = call(&keyless, "remote-hello", json!({ "name": "Ada" }))
        .await
        .unwrap_err();
    assert!(
        message.contains(&format!("MCP server HTTP {url}")),
        "{message}"
    );
    assert!(message.contains("through"), "names the skill: {message}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_project_served_over_http_uses_a_mounted_server() {
    let p = Project::new();
    p.skill(
        "sum.skill.js",
        &format!(
            "export const frontmatter = {{ metadata: {{ mcp: {}, params: {{ type: 'object' }} }} }};\n\
             export default async (ctx, args) => (await ctx.manager.invoke('fx-add', {{ a: args.a, b: args.b }})).sum;\n",
            stdio()
        ),
    );
    let server = TestServer::start(p, config()).await;
    let response = server
        .post_json("/invoke/sum", &json!({ "a": 20, "b": 22 }))
        .await;
    assert_eq!(response.status(), 200);
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["result"], 42, "{body}");
}

#[tokio::test]
async fn a_mistake_in_mcp_names_the_skill_its_file_and_the_field() {
    let p = project(json!({ "fx": { "command": "x", "arg": [] } }));
    let (kind, message) = call(&p, "fx-add", json!({})).await.unwrap_err();
    assert_eq!(kind, ErrorKind::Config);
    let file = p
        .path()
        .join("skills/through.skill.js")
        .display()
        .to_string();
    assert!(
        message.starts_with(&format!(
            "`through` ({file}): `mcp.fx.arg` is not a setting"
        )),
        "{message}"
    );
}

#[tokio::test]
async fn a_server_that_cannot_start_is_named() {
    let p = project(json!({ "fx": { "command": "/nonexistent/mcp-server" } }));
    let (_, message) = call(&p, "fx-add", json!({})).await.unwrap_err();
    assert!(
        message.contains("MCP server stdio `/nonexistent/mcp-server`: cannot start it"),
        "{message}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agent_is_shown_a_mounted_tool_and_its_code_calls_it() {
    use crate::agent::{agent_skill, code_turn, text_turn, tool_result};
    use crate::support::model_fake::ModelFake;
    let fake = ModelFake::start(vec![
        code_turn(
            "c1",
            "return await ctx.manager.invoke('fx-add', { a: 40, b: 2 });",
        ),
        text_turn("It is 42."),
    ])
    .await;
    let p = Project::new();
    let skill = agent_skill("adder", &fake, &format!("  mcp: {}\n", stdio()), "")
        .replace("Do the task for :arg[who].", "Add with :tool[fx-add].");
    p.skill("adder.skill.md", &skill);
    let out = invoke(&p, "adder", json!({})).await.unwrap();
    assert_eq!(out, json!("It is 42."));
    let system = fake.requests()[0].body["messages"][0]["content"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(system.contains("fx-add"), "{system}");
    assert!(system.contains("Adds two integers."), "{system}");
    assert_eq!(tool_result(&fake, 1, "c1")["result"], json!({ "sum": 42 }));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mounted_tools_stay_when_paths_resolves_the_skill_again() {
    let p = Project::new();
    p.write(
        "lib/lib-echo.skill.md",
        "---\nname: lib-echo\n---\nfrom lib",
    );
    for (name, meta) in [
        (
            "mcp-first",
            format!("mcp: {}, paths: ['lib', 'skills']", stdio()),
        ),
        (
            "paths-first",
            format!("paths: ['lib', 'skills'], mcp: {}", stdio()),
        ),
    ] {
        p.skill(
            &format!("{name}.skill.js"),
            &format!(
                "export const frontmatter = {{ metadata: {{ {meta} }} }};\n\
                 export default async (ctx) => [await ctx.manager.invoke('fx-echo', {{ text: 'mcp' }}), await ctx.manager.invoke('lib-echo', {{}})];\n"
            ),
        );
    }
    for name in ["mcp-first", "paths-first"] {
        let out = invoke(&p, name, json!({})).await;
        assert_eq!(out.unwrap(), json!(["mcp", "from lib"]), "{name}");
    }
}

#[tokio::test]
async fn untrusted_code_cannot_mount_a_server_of_its_choosing() {
    let p = project(stdio());
    let marker = p.path().join("started");
    let kernel = p
        .builder()
        .native(crate::support::common::untrusted_probe())
        .build();
    let mount = json!({ "evil": { "command": "touch", "args": [marker.display().to_string()] } });
    let attempts = [
        format!("return await ctx.manager.invoke('mcp', {mount});"),
        format!(
            "ctx.set('locals.middleware', {{ mcp: {{ args: {mount} }} }}); return await ctx.manager.invoke('evil-x', {{}});"
        ),
        format!(
            "return await ctx.manager.invoke('through', {{ tool: 'evil-x' }}, {{ context: {{ locals: {{ middleware: {{ mcp: {{ args: {mount} }} }} }} }} }});"
        ),
        format!(
            "return await ctx.manager.invoke('through', {{ tool: 'evil-x', $context: {{ locals: {{ middleware: {{ mcp: {{ args: {mount} }} }} }} }} }});"
        ),
    ];
    for code in attempts {
        let out = kernel
            .invoke("probe", json!({ "code": code }), InvokeOptions::default())
            .await
            .unwrap();
        let out = plain(out).unwrap();
        assert!(out.get("err").is_some(), "{code}: {out}");
    }
    assert!(!marker.exists(), "no command of the code's choosing ran");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_server_is_closed_and_started_again_when_used_and_a_busy_one_is_not() {
    use std::sync::Arc;
    use std::time::Duration;
    let p = project(stdio());
    let kernel = p
        .builder()
        .extension(Arc::new(skillgate::mcp::client::Pool::with_idle(
            Duration::from_millis(300),
        )))
        .build();
    // A call that outlasts the idle time is not cut off.
    let slow = through(&kernel, "fx-slow", json!({ "ms": 900 })).await;
    assert_eq!(slow.unwrap(), "slept 900 ms");
    let first = through(&kernel, "fx-pid", json!({})).await.unwrap();
    let pid = first.as_str().unwrap().to_string();
    // Left alone, the process ends (a hang guard of 10 s).
    let proc = PathBuf::from(format!("/proc/{pid}"));
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while proc.exists() && tokio::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(!proc.exists(), "the idle server's process {pid} ended");
    let second = through(&kernel, "fx-pid", json!({})).await.unwrap();
    assert_ne!(first, second, "a new process answers");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn past_64_servers_the_least_recently_used_idle_one_makes_room() {
    // 65 skills, each mounting the fixture with an env of its own: 65 distinct servers, as
    // edits and reloads that change a mount leave behind.
    let p = Project::new();
    for n in 0..65 {
        let mcp = json!({ "fx": { "command": fixture(), "env": { "N": n.to_string() } } });
        p.skill(
            &format!("m{n}.skill.js"),
            &format!(
                "export const frontmatter = {{ metadata: {{ mcp: {mcp} }} }};\n\
                 export default async (ctx) => ctx.manager.invoke('fx-pid', {{}});\n"
            ),
        );
    }
    let kernel = p.kernel();
    let mut pids = Vec::new();
    for n in 0..65 {
        let out = kernel
            .invoke(
                format!("m{n}").as_str(),
                json!({}),
                InvokeOptions::default(),
            )
            .await
            .map(plain)
            .unwrap_or_else(|e| panic!("server {n}: {e}"));
        pids.push(out.unwrap());
    }
    // The first one was let go to make room for the 65th; used again, it starts again.
    let again = kernel
        .invoke("m0", json!({}), InvokeOptions::default())
        .await
        .map(plain)
        .unwrap()
        .unwrap();
    assert_ne!(again, pids[0], "a new process answers for the first server");
    let first = PathBuf::from(format!("/proc/{}", pids[0].as_str().unwrap()));
    assert!(!first.exists(), "the evicted server's process ended");
}

#[tokio::test]
async fn what_a_mount_starts_or_connects_to_cannot_come_from_the_invocation() {
    let p = project(json!({ "fx": { "command": "${args.cmd}" } }));
    let (kind, message) = call(&p, "fx-add", json!({})).await.unwrap_err();
    assert_eq!(kind, ErrorKind::Config, "{message}");
    assert!(
        message.contains("`mcp` cannot use per-invocation variables"),
        "{message}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_skill_invoked_by_a_mounting_skill_keeps_its_mounts_and_adds_its_own() {
    let p = Project::new();
    p.skill(
        "outer.skill.js",
        &format!(
            "export const frontmatter = {{ metadata: {{ mcp: {{ fx: {{ command: '{}', args: ['${{dir}}'] }} }} }} }};\n\
             export default async (ctx) => ctx.manager.invoke('inner', {{}});\n",
            fixture()
        ),
    )
    .skill(
        "inner.skill.js",
        &format!(
            "export const frontmatter = {{ metadata: {{ mcp: {{ more: {{ command: '{}', tools: ['echo'] }} }} }} }};\n\
             export default async (ctx) => [\n\
               (await ctx.manager.invoke('fx-add', {{ a: 1, b: 2 }})).sum,\n\
               await ctx.manager.invoke('more-echo', {{ text: 'both' }}),\n\
             ];\n",
            fixture()
        ),
    );
    assert_eq!(
        invoke(&p, "outer", json!({})).await.unwrap(),
        json!([3, "both"])
    );
    // Alone, `inner` has only its own mount.
    let (kind, message) = invoke(&p, "inner", json!({})).await.unwrap_err();
    assert_eq!(kind, ErrorKind::NotFound, "{message}");
    assert!(message.contains("fx-add"), "{message}");
}

/// A `serve` process with a skill `pid` answering the pid of a stdio server that does not end
/// when its client goes away, and that pid.
async fn serving_an_outliving_server() -> (crate::support::process::Served, Project, String) {
    let p = Project::new();
    let mcp = json!({ "fx": { "command": fixture(), "env": { "FIXTURE_OUTLIVE_CLIENT": "1" } } });
    p.skill(
        "pid.skill.js",
        &format!(
            "export const frontmatter = {{ metadata: {{ mcp: {mcp} }} }};\n\
             export default async (ctx) => ctx.manager.invoke('fx-pid', {{}});\n"
        ),
    );
    let served = crate::support::process::serve(
        p.path(),
        &["--bind", "127.0.0.1:0", "--watch", "false"],
        &[],
    );
    let (status, body) = served.post("/invoke/pid", &json!({})).await;
    assert_eq!(status, 200, "{body}");
    let pid = body["result"].as_str().expect("a pid").to_string();
    (served, p, pid)
}

/// Waits up to 10 s for process `pid` to be gone.
async fn gone(pid: &str) -> bool {
    let proc = PathBuf::from(format!("/proc/{pid}"));
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(10);
    while tokio::time::Instant::now() < deadline {
        // A zombie (reaped by no one yet) is gone too: it runs nothing.
        let state = std::fs::read_to_string(proc.join("stat")).unwrap_or_default();
        if state.is_empty() || state.split_whitespace().nth(2) == Some("Z") {
            return true;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    false
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stdio_server_ends_when_skillgate_stops() {
    let (served, _p, pid) = serving_an_outliving_server().await;
    let (code, _) = served.stop();
    assert_eq!(code, Some(0));
    assert!(
        gone(&pid).await,
        "the server process {pid} outlived skillgate"
    );
}

#[cfg(target_os = "linux")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stdio_server_ends_when_skillgate_is_killed() {
    let (served, _p, pid) = serving_an_outliving_server().await;
    served.kill();
    assert!(
        gone(&pid).await,
        "the server process {pid} outlived a killed skillgate"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_that_cannot_be_reached_is_upstream_unavailable_and_not_named_to_the_caller() {
    // A port nothing listens on.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let url = format!("http://127.0.0.1:{port}/mcp?token=s3cret");
    let p = project(json!({ "down": { "url": url } }));
    let err = p
        .kernel()
        .invoke(
            "through",
            json!({ "tool": "down-anything", "args": {} }),
            InvokeOptions::default(),
        )
        .await
        .unwrap_err();
    assert!(err.is_upstream(), "{err}: {:?}", err.data());
    assert!(err.message().contains("MCP server HTTP"), "{err}");

    let server = TestServer::start(p, config()).await;
    let response = server
        .post_json(
            "/invoke/through",
            &json!({ "tool": "down-anything", "args": {} }),
        )
        .await;
    assert_eq!(response.status(), 502);
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["type"], "/docs#problem-upstream-unavailable", "{body}");
    let detail = body["detail"].as_str().unwrap();
    assert!(
        !detail.contains(&port.to_string()) && !detail.contains("s3cret"),
        "the caller is not told where the server is: {detail}"
    );
    assert!(body["requestId"].is_string(), "{body}");
}
