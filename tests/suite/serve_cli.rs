//! `skillgate serve` as a process: the default SQLite store, config from file and environment
//! with clear errors, SIGTERM shutdown, JSON logs, spans exported to an OTLP collector, and
//! `--no-http` with the probes on the operations listener.

use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use serde_json::{Value, json};

use crate::support::common::{Project, hello_project, skillgate, stderr};
use crate::support::process::serve;

#[tokio::test]
async fn serve_runs_on_the_embedded_sqlite_store_and_stops_cleanly_on_sigterm() {
    let project = hello_project();
    let served = serve(project.path(), &["--bind", "127.0.0.1:0"], &[]);
    let (_, body) = served
        .post("/invoke/hello", &json!({ "name": "Ada" }))
        .await;
    assert_eq!(body["result"], "Hello, Ada!\n");
    let ready = served.get("/readyz").await;
    assert_eq!(ready["store"]["kind"], "sqlite");
    let (code, rest) = served.stop();
    assert_eq!(code, Some(0), "{rest:?}");
    assert!(
        rest.iter().any(|l| l.contains("SIGTERM: stopping")),
        "{rest:?}"
    );
    assert!(rest.iter().any(|l| l.contains("stopped")), "{rest:?}");
    assert!(project.path().join(".skillgate/events.db").is_file());
}

#[test]
fn a_config_file_with_an_unknown_key_is_refused_naming_file_line_and_key() {
    let project = hello_project();
    project.write(
        "skillgate.yaml",
        "http:\n  bind: 127.0.0.1:0\n  rate-limit: 5\n  brust: 10\n",
    );
    let out = skillgate(project.path(), &["--store", "memory", "serve"]);
    assert_eq!(out.status.code(), Some(2));
    let err = stderr(&out);
    assert!(err.contains("skillgate.yaml:4"), "{err}");
    assert!(err.contains("brust"), "{err}");
}

#[tokio::test]
async fn environment_settings_override_the_config_file() {
    let project = hello_project();
    let hash = skillgate::gateway::keys::hash_key("sg_file_key");
    project.write(
        "skillgate.yaml",
        &format!(
            "http:\n  bind: 127.0.0.1:1\n  api-keys:\n    - {{ name: file, hash: \"{hash}\" }}\n"
        ),
    );
    // The file's port 1 would fail; the environment's port 0 wins.
    let served = serve(
        project.path(),
        &[],
        &[
            ("SKILLGATE_BIND", "127.0.0.1:0"),
            ("SKILLGATE_STORE", "memory"),
        ],
    );
    let client = crate::support::common::http_client();
    let refused = client
        .post(served.url("/invoke/hello"))
        .send()
        .await
        .unwrap();
    assert_eq!(refused.status(), 401);
    let accepted = client
        .post(served.url("/invoke/hello"))
        .bearer_auth("sg_file_key")
        .send()
        .await
        .unwrap();
    assert_eq!(accepted.status(), 200);
    let (code, _) = served.stop();
    assert_eq!(code, Some(0));
}

#[tokio::test]
async fn json_logs_carry_the_cause_of_a_500_with_its_request_id() {
    let project = Project::new();
    project.skill(
        "broken.skill.md",
        "---\nname: broken\ndescription: Invokes what does not exist.\n---\n:skill[no-such-skill]\n",
    );
    let served = serve(
        project.path(),
        &["--bind", "127.0.0.1:0", "--log-format", "json"],
        &[("SKILLGATE_STORE", "memory")],
    );
    let response = crate::support::common::http_client()
        .post(served.url("/invoke/broken"))
        .header("x-request-id", "trace-me")
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 500);
    let body = response.text().await.unwrap();
    assert!(!body.contains("no-such-skill"), "{body}");
    let (_, rest) = served.stop();
    let logged = rest
        .iter()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .find(|l| l["request_id"] == "trace-me")
        .unwrap_or_else(|| panic!("no JSON log line for the request: {rest:?}"));
    assert_eq!(logged["level"], "ERROR");
    assert!(
        logged["error"].as_str().unwrap().contains("no-such-skill"),
        "{logged}"
    );
}

/// A collector that speaks OTLP/HTTP with JSON bodies and keeps what it receives.
async fn collector() -> (String, Arc<Mutex<Vec<Value>>>) {
    let received: Arc<Mutex<Vec<Value>>> = Arc::default();
    let store = received.clone();
    let app = axum::Router::new().route(
        "/v1/traces",
        axum::routing::post(move |body: axum::body::Bytes| {
            let store = store.clone();
            async move {
                if let Ok(v) = serde_json::from_slice::<Value>(&body) {
                    store.lock().push(v);
                }
                axum::Json(json!({}))
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await });
    (format!("http://{addr}"), received)
}

fn span_names(batches: &[Value]) -> Vec<(String, String)> {
    let mut out = Vec::new();
    for batch in batches {
        for rs in batch["resourceSpans"].as_array().into_iter().flatten() {
            for ss in rs["scopeSpans"].as_array().into_iter().flatten() {
                for span in ss["spans"].as_array().into_iter().flatten() {
                    out.push((
                        span["name"].as_str().unwrap_or_default().to_string(),
                        span["traceId"].as_str().unwrap_or_default().to_string(),
                    ));
                }
            }
        }
    }
    out
}

// Multi-threaded: the collector must answer while the test thread waits for the process.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn spans_for_the_request_the_invocation_and_each_chain_entry_reach_the_otlp_collector() {
    let (endpoint, received) = collector().await;
    let project = hello_project();
    let served = serve(
        project.path(),
        &["--bind", "127.0.0.1:0"],
        &[
            ("SKILLGATE_STORE", "memory"),
            ("OTEL_EXPORTER_OTLP_ENDPOINT", &endpoint),
            ("OTEL_EXPORTER_OTLP_PROTOCOL", "http/json"),
            ("OTEL_SERVICE_NAME", "skillgate-test"),
        ],
    );
    let response = crate::support::common::http_client()
        .post(served.url("/invoke/hello"))
        .json(&json!({ "name": "Ada" }))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    // The run's record names its trace.
    let recorded = tokio::time::timeout(Duration::from_secs(30), async {
        loop {
            let page: Value = crate::support::common::http_client()
                .get(served.url("/runs"))
                .send()
                .await
                .unwrap()
                .json()
                .await
                .unwrap();
            if let Some(run) = page["runs"].as_array().and_then(|r| r.first()) {
                let id = run["id"].as_str().unwrap().to_string();
                return crate::support::common::http_client()
                    .get(served.url(&format!("/runs/{id}")))
                    .send()
                    .await
                    .unwrap()
                    .json::<Value>()
                    .await
                    .unwrap();
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await
    .expect("the run is recorded");
    let (code, rest) = served.stop();
    assert_eq!(code, Some(0), "{rest:?}");
    // The exporter flushes at exit.
    let batches = received.lock().clone();
    let spans = span_names(&batches);
    let trace_of = |name: &str| {
        spans
            .iter()
            .find(|(n, _)| n == name)
            .unwrap_or_else(|| panic!("no span `{name}` in {spans:?}"))
            .1
            .clone()
    };
    let request = trace_of("POST /invoke/{skill}");
    assert_eq!(
        trace_of("hello"),
        request,
        "the invocation is in the request's trace"
    );
    assert_eq!(trace_of("execute"), request, "chain entries are too");
    assert_eq!(
        recorded["trace"],
        json!(request),
        "the runs record names the trace"
    );
    assert_eq!(trace_of("validate-args"), request);
    let service = batches[0]["resourceSpans"][0]["resource"]["attributes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|a| a["key"] == "service.name")
        .map(|a| a["value"]["stringValue"].clone());
    assert_eq!(service, Some(json!("skillgate-test")));
}

#[test]
fn with_database_url_serve_uses_postgres_and_names_it_without_the_password() {
    let Some(store) = crate::support::stores::Store::all()
        .into_iter()
        .find(|s| s.url.is_some())
    else {
        return;
    };
    let url = store.url.clone().unwrap();
    let with_password = url.replacen("://postgres@", "://postgres:pw-s3cret@", 1);
    let project = hello_project();
    let served = serve(
        project.path(),
        &["--bind", "127.0.0.1:0"],
        &[("DATABASE_URL", &with_password)],
    );
    assert!(
        served.started.contains("postgres event store postgres://"),
        "{}",
        served.started
    );
    assert!(!served.started.contains("pw-s3cret"), "{}", served.started);
    let (code, _) = served.stop();
    assert_eq!(code, Some(0));
    assert!(!project.path().join(".skillgate/events.db").exists());
}

#[test]
fn every_config_mistake_is_reported_at_once_with_its_path() {
    let project = hello_project();
    project
        .write(
            "main.skill.md",
            "---\nname: main\ndescription: The project.\nmetadata:\n  role: main\n  web:\n    routes:\n      - { method: POST, path: /triage, ref: triage }\n---\n",
        )
        .skill(
            "triage-bot.skill.md",
            "---\nname: triage-bot\ndescription: Triage.\n---\nok\n",
        )
        .write(
            "skillgate.yaml",
            "http:\n  bind: 127.0.0.1:0\n  bnd: 127.0.0.1:1\nstore:\n  url: ${env.SKILLGATE_TEST_UNSET_STORE}\n",
        );
    let out = crate::support::common::skillgate_command(project.path())
        .env_remove("SKILLGATE_TEST_UNSET_STORE")
        .arg("serve")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    let errors: Vec<&str> = err.lines().filter(|l| l.starts_with("error: ")).collect();
    assert_eq!(errors.len(), 3, "{err}");
    assert!(
        err.contains("skillgate.yaml:3:3: http.bnd: unknown field `bnd`"),
        "{err}"
    );
    assert!(
        err.contains(
            "skillgate.yaml:5:3: store.url: the environment variable `SKILLGATE_TEST_UNSET_STORE`"
        ),
        "{err}"
    );
    assert!(
        err.contains("no skill is named `triage` (did you mean `triage-bot`?)"),
        "{err}"
    );
    assert!(err.contains("metadata.web.routes[0]"), "{err}");
}

#[test]
fn every_doors_mistakes_are_reported_in_one_run_each_with_its_place_in_the_file() {
    let project = hello_project();
    project
        .skill(
            "triage-bot.skill.md",
            "---\nname: triage-bot\ndescription: Triage.\n---\nok\n",
        )
        .write(
            "skillgate.yaml",
            "http:\n  bind: 127.0.0.1:0\n  max-runs: 0\nslack:\n  routes:\n    - ref: triag\nemail:\n  smtp:\n    bind: 127.0.0.1:0\n  routes:\n    - ref: triage-bot\n      subject: '('\n",
        );
    let out = crate::support::common::skillgate_command(project.path())
        .env_remove("SLACK_BOT_TOKEN")
        .env_remove("SLACK_SIGNING_SECRET")
        .env_remove("SLACK_APP_TOKEN")
        .args(["--store", "memory", "serve"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    for expected in [
        "skillgate.yaml:3:3: http.max-runs: must be at least 1",
        "skillgate.yaml: slack.bot-token: missing",
        "skillgate.yaml:6:7: slack.routes[0].ref: no skill is named `triag` (did you mean `triage-bot`?)",
        "skillgate.yaml: email.from: the address answers come from is missing",
        "skillgate.yaml:12:7: email.routes[0].subject: not a regular expression",
    ] {
        assert!(err.contains(expected), "`{expected}` in:\n{err}");
    }
}

#[test]
fn a_transport_that_cannot_start_is_an_error_naming_it() {
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = taken.local_addr().unwrap().to_string();
    let project = hello_project();
    let out = crate::support::common::skillgate_command(project.path())
        .args(["--store", "memory", "serve", "--bind", &addr])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1), "a runtime failure");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains(&format!("error: http: cannot listen on {addr}")),
        "{err}"
    );
}

#[tokio::test]
async fn with_no_http_only_email_runs_and_the_probes_answer_where_http_would() {
    let project = hello_project();
    project.write(
        "skillgate.yaml",
        "email:\n  from: bot@skillgate.test\n  smtp:\n    bind: 127.0.0.1:0\n  default: hello\n  dns-resolver: 127.0.0.1:9\n",
    );
    let served = serve(project.path(), &["--no-http", "--bind", "127.0.0.1:0"], &[]);
    assert!(served.started.contains("smtp://"), "{}", served.started);
    assert!(served.started.contains("operations"), "{}", served.started);
    let ready = served.get("/readyz").await;
    assert_eq!(ready["status"], "ready", "{ready}");
    assert_eq!(ready["transports"]["email"], "ready", "{ready}");
    assert!(ready["transports"].get("http").is_none(), "{ready}");
    let (status, _) = served
        .post("/invoke/hello", &json!({ "name": "Ada" }))
        .await;
    assert_eq!(status, 404, "no skill is served without HTTP");
    let (code, rest) = served.stop();
    assert_eq!(code, Some(0), "{rest:?}");
}

#[tokio::test]
async fn a_server_told_to_stop_drains_first_failing_readyz_while_it_still_answers() {
    let project = hello_project();
    let mut served = serve(
        project.path(),
        &["--bind", "127.0.0.1:0", "--drain", "2"],
        &[],
    );
    assert_eq!(served.get("/readyz").await["status"], "ready");
    crate::support::common::sigterm(&served.child);
    served
        .logged("draining for 2.0 s", Duration::from_secs(10))
        .expect("the drain is announced");
    // Out of the balancer, still serving.
    let ready = crate::support::common::http_client()
        .get(served.url("/readyz"))
        .send()
        .await
        .unwrap();
    assert_eq!(ready.status(), 503);
    let ready: serde_json::Value = ready.json().await.unwrap();
    assert_eq!(
        (ready["status"].clone(), ready["draining"].clone()),
        (json!("not-ready"), json!(true))
    );
    let (status, body) = served
        .post("/invoke/hello", &json!({ "name": "Ada" }))
        .await;
    assert_eq!(
        (status, body["result"].clone()),
        (200, json!("Hello, Ada!\n"))
    );
    // Then the usual stop, and a clean exit.
    served
        .logged("SIGTERM: stopping", Duration::from_secs(10))
        .expect("the grace starts after the drain");
    let code = served.child.wait().expect("wait").code();
    assert_eq!(code, Some(0));
}

#[tokio::test]
async fn a_second_signal_cuts_the_drain_short() {
    let project = hello_project();
    // A drain far longer than the test waits.
    let mut served = serve(
        project.path(),
        &["--bind", "127.0.0.1:0", "--drain", "600"],
        &[],
    );
    crate::support::common::sigterm(&served.child);
    served
        .logged("draining for 600.0 s", Duration::from_secs(10))
        .expect("the drain is announced");
    crate::support::common::sigterm(&served.child);
    served
        .logged("the drain ends early", Duration::from_secs(30))
        .expect("the second signal ends the drain");
    served
        .logged("SIGTERM: stopping", Duration::from_secs(30))
        .expect("the grace starts");
    let code = served.child.wait().expect("wait").code();
    assert_eq!(code, Some(0));
}

#[test]
fn a_receive_share_smaller_than_one_body_or_message_is_refused_naming_its_setting() {
    let project = hello_project();
    project.write(
        "skillgate.yaml",
        "http:\n  bind: 127.0.0.1:0\n  body-limit: 2097152\n  peer-body-bytes: 1048576\nwebsocket:\n  peer-receive-bytes: 4096\n",
    );
    let out = skillgate(project.path(), &["--store", "memory", "serve"]);
    assert_eq!(out.status.code(), Some(2));
    let err = stderr(&out);
    for expected in [
        "http.peer-body-bytes: must be at least `body-limit` (2097152 bytes): one holds",
        "websocket.peer-receive-bytes: must be at least `max-message` (1048576 bytes): one holds",
    ] {
        assert!(err.contains(expected), "`{expected}` in:\n{err}");
    }
}
