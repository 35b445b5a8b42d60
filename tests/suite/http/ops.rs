//! Skills listing, health, readiness, metrics, the OpenAPI document and docs page, custom
//! `web.routes`, `public/` files and graceful shutdown, over HTTP.

use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};
use skillgate::Context;
use skillgate::events::KernelBus;
use skillgate::gateway::transport::State;
use tokio::sync::Notify;

use crate::support::common::{Project, native};
use crate::support::record::Record;
use crate::support::server::{TestServer, config, problem};

fn project() -> Project {
    let project = Project::new();
    project.skill(
        "hello.skill.md",
        "---\nname: hello\ndescription: Greets.\nmetadata:\n  tags: [demo]\n  params:\n    type: object\n    properties:\n      name: { type: string }\n    required: [name]\n---\nHello, :arg[name]!\n",
    );
    project
}

#[tokio::test]
async fn skills_lists_visible_skills_and_describes_one_with_its_schemas() {
    let mut server = TestServer::start(project(), config()).await;
    let list: Value = server.get("/skills").await.json().await.unwrap();
    let hello = list["skills"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["name"] == "hello")
        .expect("hello listed");
    assert_eq!(hello["description"], "Greets.");
    assert_eq!(hello["tags"], json!(["demo"]));
    assert!(hello.get("origin").is_none(), "server paths are not shown");
    let one: Value = server.get("/skills/hello").await.json().await.unwrap();
    assert_eq!(one["params"]["required"], json!(["name"]));
    assert!(
        one["pipeline"]
            .as_array()
            .unwrap()
            .iter()
            .any(|m| m == "execute")
    );
    problem(server.get("/skills/nope").await, 404).await;
    server.finish().await;
}

#[tokio::test]
async fn healthz_is_ok_and_readyz_checks_the_store_and_the_skills() {
    let mut server = TestServer::start(project(), config()).await;
    let health: Value = server.get("/healthz").await.json().await.unwrap();
    assert_eq!(health["status"], "ok");
    let ready = server.get("/readyz").await;
    assert_eq!(ready.status(), 200);
    let ready: Value = ready.json().await.unwrap();
    assert_eq!(ready["store"]["ok"], true);
    assert_eq!(ready["skills"]["ok"], true);
    assert_eq!(ready["transports"], json!({ "http": "ready" }));
    server.finish().await;

    // A skill file that does not load makes the server not ready, and says which skill.
    let broken = project();
    broken.skill("broken.skill.md", "---\nname: [not, a, name]\n---\n");
    let mut server = TestServer::start(broken, config()).await;
    let ready = server.get("/readyz").await;
    assert_eq!(ready.status(), 503);
    let ready: Value = ready.json().await.unwrap();
    assert_eq!(ready["skills"]["ok"], false);
    assert_eq!(ready["skills"]["failures"], json!(["broken"]));
    server.finish().await;
}

#[tokio::test]
async fn readyz_is_503_while_a_transport_is_not_ready() {
    let mut server = TestServer::start(project(), config()).await;
    server.gateway.readiness.set("slack", State::Starting);
    let ready = server.get("/readyz").await;
    assert_eq!(ready.status(), 503);
    let ready: Value = ready.json().await.unwrap();
    assert_eq!(
        ready["transports"],
        json!({ "http": "ready", "slack": "starting" })
    );
    server.gateway.readiness.set("slack", State::Ready);
    assert_eq!(server.get("/readyz").await.status(), 200);
    server.finish().await;
}

#[tokio::test]
async fn metrics_count_requests_latency_and_invocations_and_errors_per_skill() {
    let mut server = TestServer::start(project(), config()).await;
    server
        .post_json("/invoke/hello", &json!({ "name": "Ada" }))
        .await;
    server
        .post_json("/invoke/hello", &json!({ "name": 1 }))
        .await;
    let text = server.get("/metrics").await.text().await.unwrap();
    assert!(
        text.contains("skillgate_invocations_total{skill=\"hello\",transport=\"http\"} 2"),
        "{text}"
    );
    assert!(text.contains(
        "skillgate_invocation_errors_total{skill=\"hello\",transport=\"http\",kind=\"invalid-args\"} 1"
    ), "{text}");
    assert!(text.contains(
        "skillgate_http_requests_total{method=\"POST\",route=\"/invoke/{skill}\",status=\"200\"} 1"
    ), "{text}");
    assert!(
        text.contains("skillgate_http_request_duration_seconds_bucket{"),
        "{text}"
    );
    server.finish().await;
}

#[tokio::test]
async fn the_served_openapi_document_equals_the_checked_in_file() {
    let mut server = TestServer::start(project(), config()).await;
    let served = server.get("/openapi.yaml").await.bytes().await.unwrap();
    let file = std::fs::read(concat!(env!("CARGO_MANIFEST_DIR"), "/openapi.yaml")).unwrap();
    assert_eq!(served.as_ref(), file.as_slice());
    server.finish().await;
}

/// What the document says of keys must hold for the server as it runs by default (no keys): a
/// schema-driven client must not be told a header is required that the server does not ask for.
#[tokio::test]
async fn the_document_declares_keys_optional_as_the_default_server_runs_without_them() {
    let text =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/openapi.yaml")).unwrap();
    let doc: Value = serde_saphyr::from_str(&text).unwrap();
    let top = doc["security"].as_array().expect("top-level security");
    assert!(
        top.iter()
            .any(|r| r.as_object().is_some_and(|o| o.is_empty())),
        "an empty requirement makes the key optional: {top:?}"
    );
    for (path, item) in doc["paths"].as_object().unwrap() {
        for (method, op) in item.as_object().unwrap() {
            if let Some(own) = op.get("security").and_then(Value::as_array) {
                assert!(
                    own.is_empty()
                        || own
                            .iter()
                            .any(|r| r.as_object().is_some_and(|o| o.is_empty())),
                    "{method} {path} requires a key outright"
                );
            }
        }
    }
    let mut server = TestServer::start(project(), config()).await;
    for path in ["/skills", "/metrics", "/readyz"] {
        assert_eq!(server.get(path).await.status(), 200, "{path} without a key");
    }
    server.finish().await;
}

#[test]
fn the_openapi_file_is_valid_openapi_3_1() {
    let root = env!("CARGO_MANIFEST_DIR");
    let text = std::fs::read_to_string(format!("{root}/openapi.yaml")).unwrap();
    let doc: Value = serde_saphyr::from_str(&text).expect("openapi.yaml parses");
    let schema: Value = serde_json::from_str(
        &std::fs::read_to_string(format!("{root}/tests/fixtures/openapi/oas-3.1-schema.json"))
            .unwrap(),
    )
    .unwrap();
    let validator = jsonschema::validator_for(&schema).expect("the OAS schema compiles");
    let errors: Vec<String> = validator
        .iter_errors(&doc)
        .map(|e| format!("{}: {e}", e.instance_path()))
        .collect();
    assert!(
        errors.is_empty(),
        "openapi.yaml is not valid OpenAPI 3.1:\n{}",
        errors.join("\n")
    );
    assert!(doc["openapi"].as_str().unwrap().starts_with("3.1."));
    // The schema check passes documents with dangling refs: resolve every local `$ref`.
    let mut refs = Vec::new();
    collect_refs(&doc, &mut refs);
    for reference in refs {
        let pointer = reference.strip_prefix('#').expect("local ref");
        assert!(doc.pointer(pointer).is_some(), "dangling $ref {reference}");
    }
    // And the validator does reject a broken document.
    let mut broken = doc.clone();
    broken["paths"]["/healthz"]["get"]["responses"] = json!("none");
    assert!(!validator.is_valid(&broken));
}

fn collect_refs(value: &Value, out: &mut Vec<String>) {
    match value {
        Value::Object(map) => {
            if let Some(Value::String(r)) = map.get("$ref") {
                out.push(r.clone());
            }
            map.values().for_each(|v| collect_refs(v, out));
        }
        Value::Array(items) => items.iter().for_each(|v| collect_refs(v, out)),
        _ => {}
    }
}

#[tokio::test]
async fn the_docs_page_renders_markdown_and_lists_the_skills_only_with_keys_off() {
    let server = TestServer::start(project(), config()).await;
    let page = server.get("/docs").await.text().await.unwrap();
    // Backticks in the descriptions are code, not raw text.
    assert!(
        page.contains("<code>Idempotency-Key</code>"),
        "markdown is rendered"
    );
    assert!(!page.contains("`Idempotency-Key`"), "no raw backticks");
    let skill = "hello";
    assert!(
        page.contains(&format!("id=\"skill-{skill}\"")),
        "the skill is listed"
    );
    assert!(
        page.contains(&format!("href=\"/console/skills/{skill}\"")),
        "with its try-it form"
    );
    let keyed = TestServer::start(project(), crate::support::server::with_keys()).await;
    let page = keyed.get("/docs").await.text().await.unwrap();
    assert!(page.contains("id=\"skills\""));
    assert!(
        !page.contains(&format!("id=\"skill-{skill}\"")),
        "which skills exist is for keys"
    );
}

#[tokio::test]
async fn the_docs_page_renders_every_operation_and_problem_type() {
    let mut server = TestServer::start(project(), config()).await;
    let page = server.get("/docs").await;
    assert!(
        page.headers()["content-type"]
            .to_str()
            .unwrap()
            .starts_with("text/html")
    );
    let page = page.text().await.unwrap();
    for id in [
        "invokeSkill",
        "listSkills",
        "describeSkill",
        "health",
        "ready",
        "metrics",
    ] {
        assert!(page.contains(&format!("id=\"{id}\"")), "missing {id}");
    }
    for slug in [
        "invalid-args",
        "rate-limited",
        "too-large",
        "unauthorized",
        "body-timeout",
        "unsupported-media-type",
        "misdirected",
    ] {
        assert!(
            page.contains(&format!("id=\"problem-{slug}\"")),
            "missing {slug}"
        );
    }
    server.finish().await;
}

#[tokio::test]
async fn unknown_paths_are_problem_404_and_wrong_methods_405() {
    let mut server = TestServer::start(project(), config()).await;
    problem(server.get("/nothing/here").await, 404).await;
    problem(server.get("/invoke/hello").await, 405).await;
    server.finish().await;
}

fn routed_project() -> Project {
    let project = Project::new();
    project
        .write(
            "main.skill.md",
            "---\nname: site\ndescription: The project.\nmetadata:\n  role: main\n  web:\n    routes:\n      - { method: GET, path: /hello/:who, ref: page }\n      - { method: POST, path: /api/echo, ref: echo }\n---\n",
        )
        .skill(
            "page.skill.md",
            "---\nname: page\ndescription: A page.\n---\n<h1>Hi :arg[params.who] from :arg[route] (:arg[query.lang])</h1>\n",
        )
        .skill(
            "ping.skill.md",
            "---\nname: ping\ndescription: Own route.\nmetadata:\n  web:\n    route: GET /ping\n---\npong\n",
        );
    project
}

#[tokio::test]
async fn web_routes_run_their_skill_with_route_query_body_headers_method_and_path() {
    let mut server = TestServer::start_with(routed_project(), config(), |b| {
        b.native(native(
            "name: echo\ndescription: Echoes the handler args.\n",
            |_ctx: Context, args| async move { Ok(Some((*args).clone())) },
        ))
    })
    .await;
    // A string result is HTML.
    let page = server.get("/hello/ada?lang=en").await;
    assert_eq!(page.status(), 200);
    assert!(
        page.headers()["content-type"]
            .to_str()
            .unwrap()
            .starts_with("text/html")
    );
    assert_eq!(
        page.text().await.unwrap().trim(),
        "<h1>Hi ada from /hello/:who (en)</h1>"
    );
    // An object is JSON; the handler args carry the request.
    let echoed = server
        .client
        .post(server.url("/api/echo?x=1"))
        .header("x-custom", "yes")
        .json(&json!({ "a": [1, 2] }))
        .send()
        .await
        .unwrap();
    assert!(
        echoed.headers()["content-type"]
            .to_str()
            .unwrap()
            .starts_with("application/json")
    );
    let args: Value = echoed.json().await.unwrap();
    assert_eq!(args["route"], "/api/echo");
    assert_eq!(args["method"], "POST");
    assert_eq!(args["path"], "/api/echo");
    assert_eq!(args["query"], json!({ "x": "1" }));
    assert_eq!(args["body"], json!({ "a": [1, 2] }));
    assert_eq!(args["headers"]["x-custom"], "yes");
    // `web.route` on a skill routes to that skill.
    assert_eq!(
        server.get("/ping").await.text().await.unwrap().trim(),
        "pong"
    );
    server.finish().await;
}

/// The error `Doors::bind` gives for a project whose main skill declares `routes` (YAML list).
async fn refused_routes(routes: &str) -> String {
    let project = Project::new();
    project.write(
        "main.skill.md",
        &format!("---\nname: site\ndescription: The project.\nmetadata:\n  role: main\n  web:\n    routes:\n{routes}---\n"),
    );
    let gateway = skillgate::gateway::Gateway::new(
        project.kernel(),
        Arc::new(skillgate::gateway::metrics::Metrics::new()),
    );
    skillgate::server::Doors::bind(
        gateway,
        skillgate::server::DoorSettings::http(config()),
        project.path(),
    )
    .await
    .err()
    .expect("refused")
    .to_string()
}

#[tokio::test]
async fn a_web_route_on_a_reserved_path_or_to_a_missing_skill_is_refused_at_start() {
    let err = refused_routes("      - { method: GET, path: /skills/mine, ref: site }\n").await;
    assert!(err.contains("main.skill.md"), "{err}");
    assert!(err.contains("a path skillgate serves itself"), "{err}");
    let err = refused_routes("      - { method: GET, path: /x, ref: ghost }\n").await;
    assert!(err.contains("no skill is named `ghost`"), "{err}");
    let err = refused_routes(
        "      - { method: GET, path: /x, ref: site }\n      - { method: get, path: /x, ref: site }\n",
    )
    .await;
    assert!(err.contains("GET /x is also declared"), "{err}");
}

#[tokio::test]
async fn files_in_public_are_served_statically() {
    let project = project();
    project.write("public/index.html", "<p>home</p>");
    project.write("public/css/site.css", "body{}");
    let mut server = TestServer::start(project, config()).await;
    assert_eq!(server.get("/").await.text().await.unwrap(), "<p>home</p>");
    let css = server.get("/css/site.css").await;
    assert_eq!(css.headers()["content-type"], "text/css");
    assert_eq!(css.text().await.unwrap(), "body{}");
    problem(server.get("/css/missing.css").await, 404).await;
    server.finish().await;
}

#[tokio::test]
async fn graceful_shutdown_completes_an_in_flight_stream_and_emits_shutdown() {
    let go = Arc::new(Notify::new());
    let tool = {
        let go = go.clone();
        native(
            "name: long\ndescription: Streams until released.\n",
            move |ctx: Context, _args| {
                let go = go.clone();
                async move {
                    ctx.invoke(
                        "gateway-send",
                        json!({ "message": "started" }),
                        Default::default(),
                    )
                    .await?;
                    go.notified().await;
                    ctx.invoke(
                        "gateway-send",
                        json!({ "message": "finishing" }),
                        Default::default(),
                    )
                    .await?;
                    Ok(Some(json!("complete")))
                }
            },
        )
    };
    let mut server = TestServer::start_with(project(), config(), |b| b.native(tool)).await;
    server
        .kernel
        .bus()
        .subscribe_queue("shutdown", "watcher", false)
        .await
        .unwrap();
    let mut events = server.stream("/invoke/long", &json!({})).await;
    assert_eq!(events.next().await.unwrap().data, json!("started"));
    server.begin_shutdown("SIGTERM");
    // New connections are refused once shutdown began.
    let addr = server.addr;
    let mut refused = false;
    for _ in 0..50 {
        if tokio::net::TcpStream::connect(addr).await.is_err() {
            refused = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(refused, "the listener still accepts after shutdown began");
    go.notify_one();
    assert_eq!(events.next().await.unwrap().data, json!("finishing"));
    let last = events.next().await.unwrap();
    assert_eq!(
        (last.event.as_str(), &last.data),
        ("result", &json!({ "result": "complete" }))
    );
    let report = server.finish().await;
    assert!(report.drained);
    let got = server
        .kernel
        .bus()
        .wait("shutdown", "watcher", Duration::from_secs(2), 1, true)
        .await
        .unwrap();
    assert_eq!(got[0].event.data.as_ref().unwrap()["signal"], "SIGTERM");
}

#[tokio::test]
async fn when_the_grace_period_runs_out_the_report_says_how_many_were_cut_off() {
    let mut settings = config();
    settings.grace = Duration::from_millis(200);
    let started = Record::default();
    let runs = started.clone();
    let mut server = TestServer::start_with(project(), settings, move |b| {
        b.native(native(
            "name: forever\ndescription: Never ends.\n",
            move |_ctx: Context, _args| {
                let runs = runs.clone();
                async move {
                    runs.push(json!("started"));
                    std::future::pending::<()>().await;
                    Ok(None)
                }
            },
        ))
    })
    .await;
    let client = server.client.clone();
    let url = server.url("/invoke/forever");
    let request = tokio::spawn(async move { client.post(url).send().await });
    // The request is in flight once its run started.
    started.at_least(1).await;
    let report = server.finish().await;
    assert!(!report.drained);
    assert_eq!(report.abandoned, 1);
    let cut = request
        .await
        .unwrap()
        .expect("the aborted run still answers");
    problem(cut, 503).await;
}

/// A schema-driven client sends only topics the document allows: the pattern it declares is the
/// one the server accepts (`NAME_PATTERN`, held to `check_name` by its own test).
#[test]
fn the_documented_topic_pattern_is_what_the_server_accepts() {
    let text =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/openapi.yaml")).unwrap();
    let doc: Value = serde_saphyr::from_str(&text).unwrap();
    let params = doc["paths"]["/events/{topic}"]["get"]["parameters"]
        .as_array()
        .unwrap();
    let topic = params.iter().find(|p| p["name"] == "topic").unwrap();
    assert_eq!(topic["schema"]["pattern"], skillgate::events::NAME_PATTERN);
}

#[tokio::test]
async fn the_project_document_has_one_operation_per_skill_the_key_may_invoke_and_is_valid_openapi()
{
    let mut server = TestServer::start(project(), crate::support::server::with_keys()).await;
    let document = |key: &'static str| {
        let server = &server;
        async move {
            let response = server.get_as(key, "/openapi.json").await;
            assert_eq!(response.status(), 200);
            response.json::<Value>().await.unwrap()
        }
    };
    let wide = document("sg_ci_key").await;
    let narrow = document("sg_narrow_key").await;
    let paths = |doc: &Value| -> Vec<String> {
        doc["paths"].as_object().unwrap().keys().cloned().collect()
    };
    assert_eq!(paths(&narrow), ["/invoke/hello"], "a key scoped to hel*");
    assert!(
        paths(&wide).contains(&"/invoke/hello".to_string()),
        "{:?}",
        paths(&wide)
    );
    assert!(
        !paths(&wide).iter().any(|p| p.contains("schedule-")),
        "the control plane is an admin's: {:?}",
        paths(&wide)
    );
    let hello = &wide["paths"]["/invoke/hello"]["post"];
    assert_eq!(hello["operationId"], "hello");
    let body = &hello["requestBody"]["content"]["application/json"]["schema"];
    let skill: Value = server
        .get_as("sg_ci_key", "/skills/hello")
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(body, &skill["params"], "the body is the skill's params");
    // Valid OpenAPI 3.1, every local $ref resolving.
    let schema: Value = serde_json::from_str(
        &std::fs::read_to_string(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/tests/fixtures/openapi/oas-3.1-schema.json"
        ))
        .unwrap(),
    )
    .unwrap();
    let validator = jsonschema::validator_for(&schema).unwrap();
    let errors: Vec<String> = validator
        .iter_errors(&wide)
        .map(|e| e.to_string())
        .collect();
    assert!(errors.is_empty(), "{errors:?}");
    let mut refs = Vec::new();
    collect_refs(&wide, &mut refs);
    for reference in refs {
        assert!(
            wide.pointer(reference.strip_prefix('#').unwrap()).is_some(),
            "dangling $ref {reference}"
        );
    }
    // Without a key it is refused like `/skills`.
    let anonymous = server
        .client
        .get(server.url("/openapi.json"))
        .send()
        .await
        .unwrap();
    assert_eq!(anonymous.status(), 401);
    server.finish().await;
}
