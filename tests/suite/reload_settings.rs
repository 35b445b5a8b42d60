//! Settings reloaded without a restart: keys added, revoked and rotated, their scopes, and the
//! HTTP settings a request reads (CORS, allowed hosts, the body limit) are put in force on
//! SIGHUP and when the config file changes; a revoked key's open WebSocket and SSE streams
//! close and its stored work pauses while other keys' go on; a mistake keeps the running
//! settings and `/readyz` names it; a setting only a restart applies is named in the log.

use std::path::Path;
use std::time::{Duration, Instant};

use futures::StreamExt;
use serde_json::{Value, json};
use skillgate::gateway::keys::hash_key;

use crate::support::common::{Project, eventually, http_client, sighup};
use crate::support::process::{Served, serve};
use crate::support::ws_client::WsClient;

const OLD: &str = "sg_old_key";
const NEW: &str = "sg_new_key";
const OTHER: &str = "sg_other_key";
const ROOT: &str = "sg_root_key";

/// A key entry of the config file: `name` with `key`'s hash and extra fields (`skills`, `admin`).
fn key(name: &str, key: &str, extra: &str) -> String {
    format!(
        "    - {{ name: {name}, hash: \"{}\"{extra} }}\n",
        hash_key(key)
    )
}

/// Writes the project's `skillgate.yaml`: the `http:` section with `keys` and `more` lines.
fn write_config(project: &Path, keys: &[String], more: &str) {
    let text = format!("http:\n  api-keys:\n{}{more}", keys.concat());
    std::fs::write(project.join("skillgate.yaml"), text).unwrap();
}

fn project() -> Project {
    let project = Project::new();
    project.skill(
        "greet.skill.md",
        "---\nname: greet\ndescription: Greets.\n---\nHello.\n",
    );
    project.skill(
        "other.skill.md",
        "---\nname: other\ndescription: Another.\n---\nOther.\n",
    );
    project
}

async fn status_of(served: &Served, key: &str, skill: &str) -> u16 {
    served
        .post_as(Some(key), &format!("/invoke/{skill}"), &json!({}))
        .await
        .0
}

/// `/readyz`'s `reload` (public).
async fn reload_state(served: &Served) -> Value {
    served.get("/readyz").await["reload"].clone()
}

/// Waits until `/readyz` says the settings of `generation` are in force.
async fn reloaded_to(served: &Served, generation: u64) {
    eventually(
        &format!("settings generation {generation} is in force"),
        || async {
            let reload = reload_state(served).await;
            (reload["generation"] == generation, reload)
        },
    )
    .await;
}

fn no_watch() -> [&'static str; 4] {
    ["--bind", "127.0.0.1:0", "--watch", "false"]
}

#[tokio::test]
async fn a_key_rotated_in_the_config_file_is_taken_and_the_old_one_refused_after_sighup() {
    let project = project();
    write_config(project.path(), &[key("app", OLD, "")], "");
    let served = serve(project.path(), &no_watch(), &[]);
    assert_eq!(status_of(&served, OLD, "greet").await, 200);
    assert_eq!(status_of(&served, NEW, "greet").await, 401);
    assert_eq!(reload_state(&served).await["generation"], 1);
    // Rotated under the same name, and a second key added.
    write_config(
        project.path(),
        &[key("app", NEW, ""), key("second", OTHER, "")],
        "",
    );
    sighup(&served.child);
    eventually("the rotated key is taken", || async {
        let status = status_of(&served, NEW, "greet").await;
        (status == 200, json!(status))
    })
    .await;
    assert_eq!(status_of(&served, OLD, "greet").await, 401);
    assert_eq!(status_of(&served, OTHER, "greet").await, 200);
    let reload = reload_state(&served).await;
    assert_eq!(reload["generation"], 2, "{reload}");
    assert_eq!(reload["error"], Value::Null, "{reload}");
    assert_eq!(reload["trigger"], "SIGHUP", "{reload}");
    let (code, _) = served.stop();
    assert_eq!(code, Some(0));
}

#[tokio::test]
async fn scopes_cors_allowed_hosts_and_the_body_limit_follow_the_watched_config_file() {
    let project = project();
    write_config(project.path(), &[key("app", OLD, "")], "");
    let served = serve(project.path(), &["--bind", "127.0.0.1:0"], &[]);
    let client = http_client();
    let origin = "https://app.example";
    let preflight = || {
        client
            .get(served.url("/skills"))
            .bearer_auth(OLD)
            .header("origin", origin)
            .send()
    };
    let allowed = |r: &reqwest::Response| r.headers().get("access-control-allow-origin").cloned();
    let before = preflight().await.unwrap();
    assert_eq!(allowed(&before), None);
    let elsewhere = || {
        client
            .get(served.url("/skills"))
            .bearer_auth(OLD)
            .header("host", "gateway.example")
            .send()
    };
    assert_eq!(elsewhere().await.unwrap().status(), 421);
    let big = json!({ "pad": "x".repeat(4096) });
    assert_eq!(
        served.post_as(Some(OLD), "/invoke/greet", &big).await.0,
        200
    );
    // Narrowed to `other`, CORS for the app, a second host name, a small body limit.
    write_config(
        project.path(),
        &[key("app", OLD, ", skills: [other]")],
        &format!(
            "  cors-origins: [\"{origin}\"]\n  allowed-hosts: [gateway.example, 127.0.0.1]\n  body-limit: 1024\n"
        ),
    );
    // Out of the key's scope, a skill is not found for it.
    eventually("the narrowed scope is in force", || async {
        let status = status_of(&served, OLD, "greet").await;
        (status == 404, json!(status))
    })
    .await;
    assert_eq!(status_of(&served, OLD, "other").await, 200);
    let after = preflight().await.unwrap();
    assert_eq!(
        allowed(&after).as_ref().and_then(|v| v.to_str().ok()),
        Some(origin)
    );
    assert_eq!(elsewhere().await.unwrap().status(), 200);
    assert_eq!(
        served.post_as(Some(OLD), "/invoke/other", &big).await.0,
        413
    );
    let reload = reload_state(&served).await;
    assert_eq!(reload["trigger"], "watch", "{reload}");
    assert_eq!(reload["generation"], 2, "{reload}");
}

/// Opens `/events/{topic}` as SSE with `key`: the byte stream of the answer.
async fn follow_topic(
    served: &Served,
    key: &str,
    topic: &str,
) -> impl futures::Stream<Item = reqwest::Result<bytes::Bytes>> + Unpin {
    let response = http_client()
        .get(served.url(&format!("/events/{topic}")))
        .bearer_auth(key)
        .header("accept", "text/event-stream")
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    Box::pin(response.bytes_stream())
}

/// Reads `stream` until it ends (true) or 20 s pass (false).
async fn ends(
    stream: &mut (impl futures::Stream<Item = reqwest::Result<bytes::Bytes>> + Unpin),
) -> bool {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match tokio::time::timeout(left, stream.next()).await {
            Ok(Some(Ok(_))) => continue,
            Ok(Some(Err(_)) | None) => return true,
            Err(_) => return false,
        }
    }
}

#[tokio::test]
async fn a_revoked_keys_websocket_and_sse_streams_close_while_other_keys_streams_go_on() {
    let project = project();
    write_config(
        project.path(),
        &[key("app", OLD, ""), key("second", OTHER, "")],
        "",
    );
    let served = serve(project.path(), &no_watch(), &[]);
    let addr = served.addr.parse().unwrap();
    let (mut revoked_ws, _) = WsClient::connect(addr, Some(OLD)).await;
    // A socket that authenticates in its first frame instead of a header.
    let (mut framed_ws, _) = WsClient::connect(addr, None).await;
    framed_ws.send(json!({ "type": "auth", "key": OLD })).await;
    assert_eq!(framed_ws.recv().await["type"], "authenticated");
    let (mut kept_ws, _) = WsClient::connect(addr, Some(OTHER)).await;
    let mut revoked_sse = follow_topic(&served, OLD, "jobs").await;
    let mut runs_sse = {
        let response = http_client()
            .get(served.url("/runs/stream"))
            .bearer_auth(OLD)
            .send()
            .await
            .unwrap();
        Box::pin(response.bytes_stream())
    };
    write_config(project.path(), &[key("second", OTHER, "")], "");
    sighup(&served.child);
    let (code, reason) = revoked_ws.closed().await;
    assert_eq!((code, reason.as_str()), (1008, "the API key was revoked"));
    let (code, _) = framed_ws.closed().await;
    assert_eq!(code, 1008);
    assert!(
        ends(&mut revoked_sse).await,
        "the revoked key's topic stream ended"
    );
    assert!(
        ends(&mut runs_sse).await,
        "the revoked key's runs stream ended"
    );
    // The other key's socket still runs skills.
    kept_ws
        .send(json!({ "type": "invoke", "id": "1", "skill": "greet", "args": {} }))
        .await;
    let answer = kept_ws.answer("1").await;
    assert_eq!(answer.last().unwrap()["type"], "result", "{answer:?}");
    assert_eq!(status_of(&served, OLD, "greet").await, 401);
}

#[tokio::test]
async fn a_revoked_keys_schedule_pauses_at_its_next_firing() {
    let project = project();
    let admin = ", admin: true";
    write_config(
        project.path(),
        &[key("app", OLD, admin), key("root", ROOT, admin)],
        "",
    );
    let served = serve(project.path(), &no_watch(), &[]);
    let create = json!({ "name": "tick", "ref": "greet", "every": 200 });
    let (status, made) = served
        .post_as(Some(OLD), "/invoke/schedule-create", &create)
        .await;
    assert_eq!(status, 200, "{made}");
    // Runs of the schedule, newest first, as the root key sees them.
    let fired = || async {
        let runs = served.get_as(Some(ROOT), "/runs?door=schedule").await;
        runs["runs"].as_array().cloned().unwrap_or_default()
    };
    eventually("the schedule fires as its key", || async {
        let runs = fired().await;
        let ok = runs.iter().any(|r| r["status"] == "ok");
        (ok, json!(runs))
    })
    .await;
    write_config(project.path(), &[key("root", ROOT, admin)], "");
    sighup(&served.child);
    let runs = eventually("the schedule's firings are refused", || async {
        let runs = fired().await;
        let refused = runs
            .first()
            .is_some_and(|r| r["status"] != "ok" && r["principal"] == "key:app");
        (refused, json!(runs))
    })
    .await;
    assert_eq!(
        runs[0]["problem"], "/docs#problem-denied",
        "the firing is refused as paused: {runs}"
    );
}

#[tokio::test]
async fn a_mistaken_config_keeps_the_running_settings_and_readyz_names_the_mistake() {
    let project = project();
    write_config(project.path(), &[key("app", OLD, "")], "");
    let served = serve(project.path(), &no_watch(), &[]);
    std::fs::write(
        project.path().join("skillgate.yaml"),
        format!(
            "http:\n  api-keys:\n{}    - {{ name: broken, hash: \"md5:abc\" }}\n",
            key("app", NEW, "")
        ),
    )
    .unwrap();
    sighup(&served.child);
    let reload = eventually("readyz reports the mistake", || async {
        let reload = reload_state(&served).await;
        (reload["config"]["ok"] == false, reload)
    })
    .await;
    let error = reload["error"].as_str().unwrap_or_default();
    assert!(error.contains("http.api-keys[1]"), "{reload}");
    assert_eq!(reload["generation"], 1, "{reload}");
    // Nothing of the mistaken file was applied: the old key still works, the new one not yet.
    assert_eq!(status_of(&served, OLD, "greet").await, 200);
    assert_eq!(status_of(&served, NEW, "greet").await, 401);
    assert!(
        served
            .logged("http.api-keys[1]", Duration::from_secs(10))
            .is_ok(),
        "the log names the setting with its file and line"
    );
}

#[tokio::test]
async fn a_setting_only_a_restart_applies_is_named_in_the_log_and_kept() {
    let project = project();
    write_config(project.path(), &[key("app", OLD, "")], "");
    let served = serve(project.path(), &no_watch(), &[]);
    write_config(
        project.path(),
        &[key("app", NEW, "")],
        "  max-connections: 10\n",
    );
    sighup(&served.child);
    let line = served
        .logged("takes effect at the next start", Duration::from_secs(20))
        .expect("the log names the setting");
    assert!(line.contains("http.max-connections"), "{line}");
    // The rest of the file is in force.
    assert_eq!(status_of(&served, NEW, "greet").await, 200);
}

#[tokio::test]
async fn a_web_route_a_skill_edit_declares_is_served_after_the_reload() {
    let project = project();
    let ping =
        |metadata: &str| format!("---\nname: ping\ndescription: Pong.\n{metadata}---\npong\n");
    project.skill("ping.skill.md", &ping(""));
    let served = serve(project.path(), &no_watch(), &[]);
    let get = || http_client().get(served.url("/ping")).send();
    assert_eq!(get().await.unwrap().status(), 404);
    project.skill(
        "ping.skill.md",
        &ping("metadata:\n  web:\n    route: GET /ping\n"),
    );
    sighup(&served.child);
    eventually("the new route is served", || async {
        let status = get().await.unwrap().status().as_u16();
        (status == 200, json!(status))
    })
    .await;
    assert_eq!(get().await.unwrap().text().await.unwrap(), "pong\n");
}

/// A self-signed certificate for `localhost` written over `tls/cert.pem` and `tls/key.pem`:
/// its PEM, for a client to trust.
fn write_certificate(project: &Project) -> String {
    let made = rcgen::generate_simple_self_signed(vec!["localhost".to_string()]).unwrap();
    project
        .write("tls/cert.pem", &made.cert.pem())
        .write("tls/key.pem", &made.signing_key.serialize_pem());
    made.cert.pem()
}

/// Whether a client trusting only `cert` gets through STARTTLS at `smtp`.
async fn starttls_trusting(smtp: std::net::SocketAddr, cert: &str) -> bool {
    use lettre::transport::smtp::client::{Certificate, Tls, TlsParameters};
    use lettre::{AsyncSmtpTransport, Tokio1Executor};
    let parameters = TlsParameters::builder("localhost".into())
        .add_root_certificate(Certificate::from_pem(cert.as_bytes()).unwrap())
        .build_rustls()
        .unwrap();
    let transport: AsyncSmtpTransport<Tokio1Executor> =
        AsyncSmtpTransport::<Tokio1Executor>::builder_dangerous("127.0.0.1")
            .port(smtp.port())
            .tls(Tls::Required(parameters))
            .build();
    transport.test_connection().await.unwrap_or(false)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_smtp_certificate_renewed_in_place_is_offered_after_sighup() {
    let sink = crate::support::smtp_sink::Sink::start().await;
    let project = project();
    let first = write_certificate(&project);
    let at = |file: &str| project.path().join("tls").join(file).display().to_string();
    project.write(
        "skillgate.yaml",
        &format!(
            "email:\n  from: bot@skillgate.test\n  smtp: {{ bind: \"127.0.0.1:0\", tls: {{ cert: \"{}\", key: \"{}\" }} }}\n  relay: {}\n  default: greet\n",
            at("cert.pem"),
            at("key.pem"),
            sink.relay()
        ),
    );
    let served = serve(project.path(), &no_watch(), &[]);
    let smtp = served.smtp_addr();
    assert!(starttls_trusting(smtp, &first).await);
    let renewed = write_certificate(&project);
    assert!(
        !starttls_trusting(smtp, &renewed).await,
        "the new certificate is not offered before the reload"
    );
    sighup(&served.child);
    eventually("the renewed certificate is offered", || async {
        let through = starttls_trusting(smtp, &renewed).await;
        (through, json!(through))
    })
    .await;
    assert!(!starttls_trusting(smtp, &first).await);
    assert_eq!(reload_state(&served).await["generation"], 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn email_routes_follow_the_config_file_and_a_changed_listener_is_named_for_a_restart() {
    let sink = crate::support::smtp_sink::Sink::start().await;
    let project = project();
    let email = |default: &str, routes: &str| {
        format!(
            "email:\n  from: bot@skillgate.test\n  smtp: {{ bind: \"127.0.0.1:0\" }}\n  relay: {}\n  reply-window: 0\n  default: {default}\n{routes}",
            sink.relay()
        )
    };
    project.write("skillgate.yaml", &email("greet", ""));
    let served = serve(project.path(), &no_watch(), &[]);
    let smtp = served.smtp_addr();
    let send = crate::transport::email::send;
    let answer = |id: String| {
        let sink = &sink;
        async move {
            sink.answer_to(&id, Duration::from_secs(20))
                .await
                .expect("an answer")
                .text()
        }
    };
    assert_eq!(
        answer(send(smtp, "ada@example.org", "hi", "x").await).await,
        "Hello.\n"
    );
    // A route for "other" mail, and another default.
    project.write(
        "skillgate.yaml",
        &email(
            "other",
            "  routes:\n    - { subject: \"^greet\", ref: greet }\n",
        ),
    );
    sighup(&served.child);
    reloaded_to(&served, 2).await;
    assert_eq!(
        answer(send(smtp, "ada@example.org", "hi", "x").await).await,
        "Other.\n"
    );
    assert_eq!(
        answer(send(smtp, "ada@example.org", "greet me", "x").await).await,
        "Hello.\n"
    );
    // The listener's address is bound at start: named, and the routes still apply.
    project.write(
        "skillgate.yaml",
        &email("greet", "  smtp: { bind: \"127.0.0.1:1\" }\n").replacen(
            "  smtp: { bind: \"127.0.0.1:0\" }\n",
            "",
            1,
        ),
    );
    sighup(&served.child);
    let line = served
        .logged("takes effect at the next start", Duration::from_secs(20))
        .expect("the log names the setting");
    assert!(line.contains("email.smtp.bind"), "{line}");
    assert_eq!(
        answer(send(smtp, "ada@example.org", "hi", "x").await).await,
        "Hello.\n"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slack_routes_follow_the_config_file_and_a_mistaken_file_keeps_them() {
    use crate::support::slack_fake::{self, FakeSlack, mention, sign};
    let fake = FakeSlack::start().await;
    let project = project();
    let slack = |default: &str, more: &str| {
        format!("slack:\n  default: {default}\n  post-interval: 0.001\n{more}")
    };
    project.write("skillgate.yaml", &slack("greet", ""));
    let api_url = fake.api_url();
    let env = [
        ("SLACK_BOT_TOKEN", slack_fake::BOT_TOKEN),
        ("SLACK_SIGNING_SECRET", slack_fake::SIGNING_SECRET),
        ("SLACK_API_URL", api_url.as_str()),
    ];
    let served = serve(project.path(), &no_watch(), &env);
    // A mention, signed as Slack signs it; the text of the answer in its thread.
    let ask = |id: &'static str, ts: &'static str, text: &'static str| {
        let served = &served;
        let fake = &fake;
        async move {
            let body = mention(id, "C1", ts, text).to_string();
            let mut request = http_client()
                .post(served.url("/slack/events"))
                .header("content-type", "application/json")
                .body(body.clone());
            for (name, value) in sign(&body, slack_fake::now(), slack_fake::SIGNING_SECRET) {
                request = request.header(name, value);
            }
            assert_eq!(request.send().await.unwrap().status(), 200);
            let posts = fake.answer_in("C1", ts).await;
            posts.last().unwrap()["text"]
                .as_str()
                .unwrap_or_default()
                .to_string()
        }
    };
    assert!(
        ask("Ev1", "1700000001.000100", "hi")
            .await
            .contains("Hello.")
    );
    project.write(
        "skillgate.yaml",
        &slack(
            "other",
            "  routes:\n    - { ref: greet, match: '^greet' }\n",
        ),
    );
    sighup(&served.child);
    reloaded_to(&served, 2).await;
    assert!(
        ask("Ev2", "1700000002.000100", "hi")
            .await
            .contains("Other.")
    );
    assert!(
        ask("Ev3", "1700000003.000100", "greet me")
            .await
            .contains("Hello.")
    );
    project.write(
        "skillgate.yaml",
        &slack("other", "  bot-token: ${env.OTHER_TOKEN}\n"),
    );
    // A token in the file is read from the environment; this one is not set: a mistake.
    sighup(&served.child);
    let reload = eventually("the mistake is shown", || async {
        let reload = reload_state(&served).await;
        (reload["config"]["ok"] == false, reload)
    })
    .await;
    assert!(
        reload["error"]
            .as_str()
            .unwrap_or_default()
            .contains("slack.bot-token"),
        "{reload}"
    );
    assert!(
        ask("Ev4", "1700000004.000100", "hi")
            .await
            .contains("Other.")
    );
}

/// A Standard Webhooks delivery of `body` to `path`, signed with `secret`: the status.
async fn deliver(served: &Served, path: &str, id: &str, secret: &str) -> u16 {
    let body = r#"{"type":"ping"}"#;
    let ts = crate::webhook::routes::now();
    let signature = crate::webhook::routes::sign_standard_with(secret, id, ts, body);
    http_client()
        .post(served.url(path))
        .header("webhook-id", id)
        .header("webhook-timestamp", ts.to_string())
        .header("webhook-signature", signature)
        .header("content-type", "application/json")
        .body(body)
        .send()
        .await
        .unwrap()
        .status()
        .as_u16()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn webhook_routes_a_skill_edit_declares_are_served_and_run_after_the_reload() {
    const SECRET: &str = "a-webhook-secret";
    let project = project();
    let main = |routes: &str| {
        format!(
            "---\nname: main\ndescription: Hooks.\nmetadata:\n  role: main\n  webhook:\n    routes:\n{routes}---\nmain\n"
        )
    };
    let route = |path: &str, skill: &str| {
        format!("      - {{ path: {path}, secret: \"${{env.HOOK_SECRET}}\", ref: {skill} }}\n")
    };
    project.write("main.skill.md", &main(&route("/hooks/a", "greet")));
    write_config(project.path(), &[key("root", ROOT, ", admin: true")], "");
    let served = serve(project.path(), &no_watch(), &[("HOOK_SECRET", SECRET)]);
    // The skills the webhook runs ran, newest first.
    let ran = || async {
        let runs = served.get_as(Some(ROOT), "/runs?door=webhook").await;
        runs["runs"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|r| r["skill"].as_str().unwrap_or_default().to_string())
            .collect::<Vec<_>>()
    };
    assert_eq!(deliver(&served, "/hooks/a", "d1", SECRET).await, 202);
    // Not a webhook route: the path asks for an API key like any other.
    assert_eq!(deliver(&served, "/hooks/b", "d2", SECRET).await, 401);
    eventually("the delivery ran greet", || async {
        let ran = ran().await;
        (ran.first().is_some_and(|s| s == "greet"), json!(ran))
    })
    .await;
    // `/hooks/a` now runs `other`, and `/hooks/b` is new.
    project.write(
        "main.skill.md",
        &main(&(route("/hooks/a", "other") + &route("/hooks/b", "greet"))),
    );
    sighup(&served.child);
    eventually("the new route is served", || async {
        let status = deliver(&served, "/hooks/b", "d3", SECRET).await;
        (status == 202, json!(status))
    })
    .await;
    let runs = eventually("the new route's delivery ran", || async {
        let ran = ran().await;
        (ran.len() >= 2, json!(ran))
    })
    .await;
    assert_eq!(runs[0], "greet", "{runs}");
    assert_eq!(deliver(&served, "/hooks/a", "d4", SECRET).await, 202);
    eventually("the changed route runs its new skill", || async {
        let ran = ran().await;
        (ran.first().is_some_and(|s| s == "other"), json!(ran))
    })
    .await;
    // Dropped: no longer served (nor let through without a key).
    project.write("main.skill.md", &main(&route("/hooks/a", "other")));
    sighup(&served.child);
    eventually("the dropped route is gone", || async {
        let status = deliver(&served, "/hooks/b", "d5", SECRET).await;
        (status == 401, json!(status))
    })
    .await;
}
