//! The trust model (see SECURITY.md): a caller's request is data, never control. One test per
//! finding of the probe that ran a shell command with one request, over the doors not covered by
//! the transport contract (which runs the caller rules over HTTP, WebSocket, Slack and email):
//! untrusted code, stored schedules and subscriptions, keys and their scopes, reserved topics.

use std::sync::Arc;

use serde_json::{Value, json};
use skillgate::events::{Event, Handler, KernelBus, run_handler};
use skillgate::gateway::keys::{ApiKey, KeyRing, hash_key};
use skillgate::kernel::authority::{Authority, Grants, Keys, Principal};
use skillgate::schedule::runner::{Firing, run_firing};
use skillgate::schedule::spec::Spec;
use skillgate::{Context, ErrorKind, InvokeOptions, Kernel};

use crate::support::common::{Project, native, untrusted_probe};
use crate::support::server::{TestServer, problem, with_keys};

fn project() -> Project {
    let project = Project::new();
    project
        .skill(
            "hello.skill.md",
            "---\nname: hello\ndescription: Greets.\n---\nHello, :arg[name]!\n",
        )
        .skill(
            "vault.skill.md",
            "---\nname: vault\ndescription: Hidden.\nmetadata:\n  visibility: hidden\n---\nVAULT-CONTENTS\n",
        );
    project
}

/// The seed of the attack: an `mcp` server whose command creates `marker`.
fn spawn_seed(marker: &std::path::Path) -> Value {
    json!({ "middleware": { "mcp": { "args": { "p": {
        "command": "sh", "args": ["-c", format!("touch {}", marker.display())]
    } } } } })
}

/// A kernel over `project` with the untrusted-code probe and `seen`, which records the
/// authority it was invoked under.
fn kernel(project: &Project) -> Kernel {
    project
        .builder()
        .native(untrusted_probe())
        .native(native(
            "name: seen\ndescription: Reports who invoked it.\n",
            |ctx: Context, _| async move {
                let a = ctx.authority();
                Ok(Some(
                    json!({ "level": a.level.as_str(), "principal": a.principal.id() }),
                ))
            },
        ))
        .build()
}

/// Runs `code` as untrusted code (an agent's); `{ok}` or `{err, code}`.
async fn untrusted(kernel: &Kernel, code: &str) -> Value {
    let out = kernel
        .invoke("probe", json!({ "code": code }), InvokeOptions::default())
        .await
        .unwrap()
        .unwrap();
    (*out).clone()
}

#[tokio::test]
async fn untrusted_code_cannot_reach_the_control_plane_internal_tools_or_seed_what_it_invokes() {
    let project = project();
    let marker = project.path().join("pwned");
    let k = kernel(&project);
    let seed = spawn_seed(&marker);
    let cases = [
        (
            "schedule-create",
            json!({ "name": "x", "ref": "hello", "every": "1s", "args": { "name": "x" } }),
            "denied",
        ),
        (
            "event-subscribe",
            json!({ "topic": "t", "ref": "hello" }),
            "denied",
        ),
        ("event-unsubscribe", json!({ "topic": "t" }), "denied"),
        ("schedule-delete", json!({ "name": "x" }), "denied"),
        ("web-send", json!({ "status": 302 }), "denied"),
        ("agent", json!({ "prompt": "x" }), "not-found"),
        ("agent-model", json!({ "prompt": "x" }), "not-found"),
        ("mcp", json!({}), "not-found"),
        (
            "hello",
            json!({ "name": "x", "deep": [{ "$context": seed }] }),
            "invalid-args",
        ),
    ];
    for (tool, args, code) in cases {
        let out = untrusted(
            &k,
            &format!("return await ctx.manager.invoke('{tool}', {args});"),
        )
        .await;
        assert_eq!(out["code"], code, "{tool}: {out}");
    }
    let schedules = k.bus().store().schedules().await.unwrap();
    assert!(schedules.is_empty() && !marker.exists());
}

#[tokio::test]
async fn what_untrusted_code_invokes_runs_as_untrusted_code_for_the_same_principal() {
    let project = project();
    let k = kernel(&project);
    let out = untrusted(&k, "return await ctx.manager.invoke('seen', {});").await;
    assert_eq!(
        out["ok"],
        json!({ "level": "untrusted", "principal": "project" })
    );
    // A caller's run keeps the caller as principal all the way down.
    let caller = Authority::caller(Principal::local());
    let out = k
        .invoke(
            "probe",
            json!({ "code": "return await ctx.manager.invoke('seen', {});" }),
            InvokeOptions::as_authority(caller),
        )
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        out["ok"],
        json!({ "level": "untrusted", "principal": "local" })
    );
}

#[tokio::test]
async fn untrusted_code_writes_its_own_globals_never_the_processes() {
    let project = project();
    let k = kernel(&project);
    let out = untrusted(
        &k,
        "ctx.manager.set('globals.cache.token', 'forged'); return ctx.manager.get('globals.cache.token');",
    )
    .await;
    assert_eq!(out["ok"], "forged", "it reads back its own write");
    let reader = native(
        "name: reader\ndescription: Reads globals.\n",
        |ctx: Context, _| async move { ctx.get("globals.cache.token") },
    );
    let k2 = project
        .builder()
        .native(untrusted_probe())
        .native(reader)
        .build();
    // The same kernel: write in one run, read in the next.
    let wrote = k2
        .invoke(
            "probe",
            json!({ "code": "ctx.manager.set('globals.cache.token', 'forged'); return 1;" }),
            InvokeOptions::default(),
        )
        .await
        .unwrap();
    assert_eq!(wrote.unwrap()["ok"], 1);
    let read = k2
        .invoke("reader", json!({}), InvokeOptions::default())
        .await
        .unwrap();
    assert!(read.is_none(), "the next request sees nothing: {read:?}");
}

fn stored(reference: &str, args: Value, principal: Option<&Principal>) -> Spec {
    let mut spec = Spec::parse(&json!({ "every": "1h", "args": args }), reference, 0).unwrap();
    spec.principal = principal.map(Principal::to_json);
    spec
}

fn firing() -> Firing {
    Firing {
        name: "x".into(),
        due: 0,
        now: 0,
        missed: false,
    }
}

#[tokio::test]
async fn a_stored_schedule_is_its_principals_call_its_args_are_data_and_its_ref_is_checked() {
    let project = project();
    let marker = project.path().join("pwned");
    let k = kernel(&project);
    let local = Principal::local();
    // Directive keys kept in stored args (an old row, or one written around the tools).
    let spec = stored(
        "hello",
        json!({ "$context": spawn_seed(&marker) }),
        Some(&local),
    );
    let err = run_firing(&k, &spec, &firing()).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InvalidArgs, "{err}");
    // A row from before principals were kept runs as the local caller, never as the project.
    let spec = stored("hello", json!({ "x": { "$detached": true } }), None);
    let err = run_firing(&k, &spec, &firing()).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InvalidArgs, "{err}");
    for hidden in ["vault", "agent", "agent-model"] {
        let spec = stored(hidden, json!({}), Some(&local));
        let err = run_firing(&k, &spec, &firing()).await.unwrap_err();
        assert_eq!(err.kind(), ErrorKind::NotFound, "{hidden}: {err}");
    }
    let spec = stored("seen", json!({}), Some(&local));
    let out = run_firing(&k, &spec, &firing()).await.unwrap().unwrap();
    assert_eq!(*out, json!({ "level": "caller", "principal": "local" }));
    assert!(!marker.exists());
}

#[tokio::test]
async fn a_revoked_keys_schedules_pause_and_resume_when_a_key_of_that_name_returns() {
    let project = project();
    let k = kernel(&project);
    let keys = k.extension::<Keys>().unwrap();
    let ops = Principal::key("ops", Grants::default());
    let spec = stored("seen", json!({}), Some(&ops));
    keys.install(Arc::new(KeyRing::new(vec![]).unwrap()));
    let err = run_firing(&k, &spec, &firing()).await.unwrap_err();
    assert!(err.message().contains("key-revoked"), "{err}");
    // Rotated: a new hash under the same name keeps the key's objects.
    let ring = KeyRing::new(vec![
        ApiKey::new("ops", &hash_key("sg_rotated"), vec![]).unwrap(),
    ])
    .unwrap();
    keys.install(Arc::new(ring));
    let out = run_firing(&k, &spec, &firing()).await.unwrap().unwrap();
    assert_eq!(out["principal"], "key:ops");
}

#[tokio::test]
async fn a_subscription_handler_runs_as_its_principal_and_event_data_stays_data() {
    let project = project();
    let marker = project.path().join("pwned");
    let k = kernel(&project);
    let caller = Authority::caller(Principal::local());
    let mut event = Event::new("jobs", "job");
    event.data = Some(json!({ "nested": { "$context": spawn_seed(&marker) } }));
    let err = run_handler(&k, "seen", None, caller.clone(), &event)
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InvalidArgs, "{err}");
    let err = run_handler(
        &k,
        "vault",
        None,
        caller.clone(),
        &Event::new("jobs", "job"),
    )
    .await
    .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::NotFound, "{err}");
    let out = run_handler(&k, "seen", None, caller, &Event::new("jobs", "job"))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(*out, json!({ "level": "caller", "principal": "local" }));
    assert!(!marker.exists());
}

#[tokio::test]
async fn an_admin_key_schedules_as_itself_and_a_key_without_admin_cannot_list_schedules() {
    let mut server = TestServer::start(project(), with_keys()).await;
    let create = json!({ "name": "greet", "ref": "hello", "every": "1h", "args": { "name": "x" } });
    let made = server
        .post_json_as("sg_ops_key", "/invoke/schedule-create", &create)
        .await;
    assert_eq!(made.status(), 200);
    let made: Value = made.json().await.unwrap();
    assert_eq!(made["result"]["principal"], "key:ops", "{made}");
    // Without admin: the control plane is refused.
    let listed = server
        .post_json_as("sg_ci_key", "/invoke/schedule-list", &json!({}))
        .await;
    problem(listed, 403).await;
    // A hidden ref is not found for the admin key either (it is a caller).
    let hidden = json!({ "name": "peek", "ref": "vault", "every": "1h" });
    let refused = server
        .post_json_as("sg_ops_key", "/invoke/schedule-create", &hidden)
        .await;
    let missing = server
        .post_json_as(
            "sg_ops_key",
            "/invoke/schedule-create",
            &json!({ "name": "peek", "ref": "nope", "every": "1h" }),
        )
        .await;
    let (refused, missing) = (problem(refused, 404).await, problem(missing, 404).await);
    assert_eq!(refused["type"], missing["type"]);
    server.finish().await;
}

#[tokio::test]
async fn reserved_topics_and_metrics_need_more_than_an_unscoped_key() {
    let mut server = TestServer::start(project(), with_keys()).await;
    let get = |path: &str, key: &str| server.client.get(server.url(path)).bearer_auth(key).send();
    problem(
        get("/events/gateway-message", "sg_ci_key").await.unwrap(),
        403,
    )
    .await;
    problem(
        get("/events/gateway-stream.x", "sg_ci_key").await.unwrap(),
        403,
    )
    .await;
    problem(get("/metrics", "sg_narrow_key").await.unwrap(), 403).await;
    assert_eq!(get("/metrics", "sg_ci_key").await.unwrap().status(), 200);
    // The admin key may read a reserved topic (it never emits on one).
    let admin = get("/events/gateway-message", "sg_ops_key").await.unwrap();
    assert_eq!(admin.status(), 200);
    drop(admin);
    let emitted = server
        .post_json_as(
            "sg_ops_key",
            "/invoke/event-emit",
            &json!({ "topic": "gateway-message", "data": {} }),
        )
        .await;
    problem(emitted, 403).await;
    server.finish().await;
}

#[tokio::test]
async fn an_envelope_names_its_emitters_principal_whatever_the_emitter_says() {
    let mut server = TestServer::start(project(), with_keys()).await;
    let emitted = server
        .post_json_as(
            "sg_ci_key",
            "/invoke/event-emit",
            &json!({ "topic": "orders", "source": "project", "principal": "project" }),
        )
        .await;
    let emitted: Value = emitted.json().await.unwrap();
    assert_eq!(emitted["result"]["principal"], "key:ci", "{emitted}");
    assert_eq!(
        emitted["result"]["source"], "project",
        "source stays free text"
    );
    server.finish().await;
}

#[test]
fn keys_off_on_an_address_other_than_loopback_refuses_to_start_unless_told() {
    use skillgate::gateway::http::{HttpConfig, HttpSettings};
    let dir = tempfile::tempdir().unwrap();
    let settings = HttpSettings {
        bind: Some("0.0.0.0:0".parse().unwrap()),
        ..HttpSettings::default()
    };
    let errors = HttpConfig::resolve(dir.path(), settings.clone(), &|_| None).unwrap_err();
    let text = errors.to_string();
    assert!(
        text.contains("http.bind") && text.contains("--insecure-no-auth"),
        "{text}"
    );
    let insecure = HttpSettings {
        insecure_no_auth: Some(true),
        ..settings
    };
    assert!(HttpConfig::resolve(dir.path(), insecure, &|_| None).is_ok());
}

/// The table between `<!-- trust-table -->` and `<!-- /trust-table -->` in `file`.
fn documented_table(file: &str) -> String {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(file);
    let text = std::fs::read_to_string(&path).unwrap_or_default();
    let start = text.find("<!-- trust-table -->\n").map(|i| i + 21);
    let end = text.find("<!-- /trust-table -->");
    match (start, end) {
        (Some(start), Some(end)) if start <= end => text[start..end].to_string(),
        _ => String::new(),
    }
}

#[test]
fn the_documented_table_of_who_may_run_each_tool_is_the_codes() {
    let table = skillgate::trust_table::markdown();
    for file in ["SECURITY.md", "README.md"] {
        assert_eq!(
            documented_table(file),
            table,
            "{file}: put this between <!-- trust-table --> and <!-- /trust-table -->:\n{table}"
        );
    }
}

#[tokio::test]
async fn a_session_key_from_args_never_crosses_principals() {
    let project = project();
    project.skill(
        "notes.skill.md",
        "---\nname: notes\ndescription: Remembers.\nmetadata:\n  session: { key: \"${args.ticket}\" }\n  params: { type: object, properties: { ticket: { type: string }, say: { type: string } } }\n---\n:context[locals.session.history]\n",
    );
    let mut server = TestServer::start(project, with_keys()).await;
    let say = |key: &'static str, said: &'static str| {
        let server = &server;
        async move {
            let out: Value = server
                .post_json_as(key, "/invoke/notes", &json!({ "ticket": "7", "say": said }))
                .await
                .json()
                .await
                .unwrap();
            out["result"].as_str().unwrap_or_default().to_string()
        }
    };
    say("sg_ci_key", "the-secret").await;
    let other = say("sg_ops_key", "hello").await;
    assert!(
        !other.contains("the-secret"),
        "another key's history: {other}"
    );
    let own = say("sg_ci_key", "again").await;
    assert!(own.contains("the-secret"), "its own history: {own}");
    server.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_websocket_group_is_the_callers_own_queue_and_reserved_topics_are_refused() {
    use crate::support::ws_client::WsClient;
    let mut server = TestServer::start(project(), crate::support::server::config()).await;
    let bus = server.kernel.bus().clone();
    bus.subscribe_queue("jobs", "handler:worker", false)
        .await
        .unwrap();
    bus.emit(&Event::new("jobs", "job")).await.unwrap();
    let (mut client, _) = WsClient::connect(server.addr, None).await;
    client
        .send(json!({ "type": "subscribe", "topic": "gateway-message" }))
        .await;
    let refused = client.recv().await;
    assert_eq!(refused["type"], "error", "{refused}");
    client
        .send(json!({ "type": "subscribe", "topic": "jobs", "group": "handler:worker" }))
        .await;
    let subscribed = client.recv().await;
    assert_eq!(subscribed["group"], "handler:worker", "{subscribed}");
    // A second event reaches the caller's group; the worker's queue keeps both of its own.
    bus.emit(&Event::new("jobs", "job")).await.unwrap();
    let got = client.recv().await;
    assert_eq!(got["type"], "event", "{got}");
    let kept = bus
        .wait(
            "jobs",
            "handler:worker",
            std::time::Duration::ZERO,
            10,
            false,
        )
        .await
        .unwrap();
    assert_eq!(kept.len(), 2, "the worker's deliveries are all still there");
    server.finish().await;
}

#[tokio::test]
async fn caller_mistakes_with_stored_work_are_4xx_naming_what_was_wrong() {
    let mut server = TestServer::start(project(), with_keys()).await;
    for (skill, args) in [
        ("event-subscribe", json!({ "topic": "jobs", "ref": "nope" })),
        (
            "schedule-create",
            json!({ "name": "x", "ref": "nope", "every": "1h" }),
        ),
        ("skill-describe", json!({ "name": "vault" })),
    ] {
        let response = server
            .post_json_as("sg_ops_key", &format!("/invoke/{skill}"), &args)
            .await;
        problem(response, 404).await;
    }
    let cleared = server
        .post_json_as("sg_ci_key", "/invoke/session-clear", &json!({}))
        .await;
    let body = problem(cleared, 422).await;
    assert!(
        body["detail"].as_str().unwrap().contains("session-clear"),
        "{body}"
    );
    server.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_revoked_keys_handlers_pause_and_go_on_when_a_key_of_that_name_returns() {
    let project = project();
    let (tx, mut seen) = tokio::sync::mpsc::unbounded_channel::<Value>();
    let k = project
        .builder()
        .native(native(
            "name: who\ndescription: Records who ran it.\n",
            move |ctx: Context, _| {
                let tx = tx.clone();
                async move {
                    let _ = tx.send(json!(ctx.authority().principal.id()));
                    Ok(None)
                }
            },
        ))
        .build();
    let keys = k.extension::<Keys>().unwrap();
    keys.install(Arc::new(KeyRing::new(vec![]).unwrap()));
    let bus = k.bus().clone();
    let ops = Principal::key("ops", Grants::default());
    let handler = Handler {
        topic: "orders".into(),
        reference: "who".into(),
        args: None,
        principal: ops,
        replay: false,
    };
    bus.subscribe_handler_as(&k, handler).await.unwrap();
    bus.emit(&Event::new("orders", "placed")).await.unwrap();
    // Revoked: nothing runs (a bounded look; the handler would run within milliseconds).
    let early = tokio::time::timeout(std::time::Duration::from_millis(500), seen.recv()).await;
    assert!(early.is_err(), "a revoked key's handler ran: {early:?}");
    let ring = KeyRing::new(vec![
        ApiKey::new("ops", &hash_key("sg_new"), vec![]).unwrap(),
    ])
    .unwrap();
    keys.install(Arc::new(ring));
    let ran = tokio::time::timeout(std::time::Duration::from_secs(20), seen.recv())
        .await
        .expect("the handler went on once the key returned");
    assert_eq!(ran, Some(json!("key:ops")));
    bus.shutdown();
}

#[tokio::test]
async fn a_web_session_id_the_server_did_not_sign_is_replaced_not_adopted() {
    use crate::sessions::{cookie_of, turns_project};
    let mut server = TestServer::start(turns_project(), crate::support::server::config()).await;
    // Fixation: the attacker plants a well-formed id in the victim's browser.
    let planted = "0123456789abcdef0123456789abcdef";
    for cookie in [
        planted.to_string(),
        format!("{planted}.0.0123456789abcdef0123456789abcdef"),
    ] {
        let response = server
            .client
            .get(server.url("/turns"))
            .header("cookie", format!("skillgate_session={cookie}"))
            .send()
            .await
            .unwrap();
        assert!(cookie_of(&response).is_some(), "a new cookie is set");
        let body: Value = response.json().await.unwrap();
        assert_ne!(body["sessionId"], json!(planted), "{body}");
    }
    server.finish().await;
}

#[tokio::test]
async fn the_agent_provider_a_project_selects_is_internal_to_callers() {
    let project = project();
    project
        .skill(
            "mine.skill.md",
            "---\nname: mine\ndescription: A provider of the project's.\n---\nprovider\n",
        )
        .skill(
            "ask.skill.md",
            "---\nname: ask\ndescription: Asks.\nmetadata:\n  model: { agent: mine }\n---\nQ\n",
        );
    let k = kernel(&project);
    let as_caller = || InvokeOptions::as_authority(Authority::caller(Principal::local()));
    for name in ["mine", "agent-strands"] {
        let err = k.invoke(name, json!({}), as_caller()).await.unwrap_err();
        assert_eq!(err.kind(), ErrorKind::NotFound, "{name}: {err}");
    }
    // The project names it as it likes.
    assert!(
        k.invoke("mine", json!({}), InvokeOptions::default())
            .await
            .is_ok()
    );
}

#[tokio::test]
async fn not_even_an_admin_key_changes_who_consumes_a_reserved_topic() {
    let mut server = TestServer::start(project(), with_keys()).await;
    let bus = server.kernel.bus().clone();
    bus.subscribe_queue("gateway-webhook.hooks.x", "run", false)
        .await
        .unwrap();
    for (skill, args) in [
        (
            "event-unsubscribe",
            json!({ "topic": "gateway-webhook.hooks.x", "queue": "run" }),
        ),
        (
            "event-subscribe",
            json!({ "topic": "gateway-email", "ref": "hello" }),
        ),
    ] {
        let response = server
            .post_json_as("sg_ops_key", &format!("/invoke/{skill}"), &args)
            .await;
        problem(response, 403).await;
    }
    let queues = bus.store().queues("gateway-webhook.hooks.x").await.unwrap();
    assert_eq!(queues, ["run"]);
    server.finish().await;
}

/// A skill `served` whose body runs `args.code` as untrusted code serving this very context
/// (how the agent runs as middleware): the code holds the served context's handle.
fn serving_probe() -> skillgate::skills::Tool {
    native(
        "name: served\ndescription: Runs untrusted code that serves it.\n",
        |ctx: Context, args| async move {
            let code = args["code"].as_str().unwrap_or_default().to_string();
            let options = skillgate::sandbox::Untrusted {
                target: Some(ctx.clone()),
                ..Default::default()
            };
            let out = skillgate::sandbox::run_untrusted_with(&ctx, &code, options).await;
            Ok(Some(match out {
                Ok(v) => json!({ "ok": v }),
                Err(e) => json!({ "err": e.message(), "code": e.kind().code() }),
            }))
        },
    )
}

#[tokio::test]
async fn untrusted_code_stays_untrusted_through_the_served_contexts_handle() {
    let project = project();
    let peek = native(
        "name: peek\ndescription: Reads globals.\n",
        |ctx: Context, _| async move { ctx.get("globals.cache.forged") },
    );
    let k = project
        .builder()
        .native(serving_probe())
        .native(peek)
        .build();
    let run = |code: &'static str| {
        let k = k.clone();
        async move {
            let out = k
                .invoke("served", json!({ "code": code }), InvokeOptions::default())
                .await
                .unwrap()
                .unwrap();
            (*out).clone()
        }
    };
    for (code, expected) in [
        (
            "return await ctxTarget(ctx).manager.invoke('schedule-create', { name: 'x', ref: 'hello', every: '1h' });",
            "denied",
        ),
        (
            "return await ctx.envelope.target.manager.invoke('agent-model', { prompt: 'x' });",
            "not-found",
        ),
        (
            "ctxTarget(ctx).manager.inject([{ name: 'paths', args: ['/tmp'] }]); return 1;",
            "denied",
        ),
        (
            "return await ctx.manager.invoke('hello', { name: 'x' }, { detached: true });",
            "denied",
        ),
        (
            "ctx.manager.set('nonlocals.agent', { events: 'gateway-slack' }); return 1;",
            "denied",
        ),
        (
            "ctx.manager.configure({ global: true, level: 'error' }); return 1;",
            "denied",
        ),
    ] {
        let out = run(code).await;
        assert_eq!(out["code"], expected, "{code}: {out}");
    }
    // The process's globals are out of reach through the served handle too.
    let out = run("ctxTarget(ctx).manager.set('globals.cache.forged', 1); return 1;").await;
    assert_eq!(out["ok"], 1, "{out}");
    let leaked = k
        .invoke("peek", json!({}), InvokeOptions::default())
        .await
        .unwrap();
    assert!(
        leaked.is_none(),
        "the next request sees nothing: {leaked:?}"
    );
    let schedules = k.bus().store().schedules().await.unwrap();
    assert!(schedules.is_empty());
}

#[tokio::test]
async fn expose_hidden_never_exposes_skillgates_own_machinery_and_reserved_queues_are_not_consumed()
{
    let mut settings = with_keys();
    settings.expose_hidden = vec!["*".into()];
    let mut server = TestServer::start(project(), settings).await;
    for skill in ["agent", "agent-model", "execute", "mcp"] {
        let response = server
            .post_json_as(
                "sg_ci_key",
                &format!("/invoke/{skill}"),
                &json!({ "prompt": "x" }),
            )
            .await;
        problem(response, 404).await;
    }
    // The project's own hidden skill is exposed, as configured.
    let vault = server
        .post_json_as("sg_ci_key", "/invoke/vault", &json!({}))
        .await;
    assert_eq!(vault.status(), 200);
    // An admin follows reserved topics but does not consume a worker's deliveries.
    for (skill, args) in [
        (
            "event-wait",
            json!({ "topic": "gateway-slack", "queue": "run", "timeout": 0 }),
        ),
        (
            "event-ack",
            json!({ "topic": "gateway-slack", "queue": "run", "id": "x" }),
        ),
    ] {
        let response = server
            .post_json_as("sg_ops_key", &format!("/invoke/{skill}"), &args)
            .await;
        problem(response, 403).await;
    }
    server.finish().await;
}
