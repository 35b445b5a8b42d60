//! Security of the HTTP edge, over a real socket: sockets that send nothing and the connection
//! cap, stalled bodies, bounded metric labels, content types and hosts, `web-send` heads that
//! would end the connection, `public/` dotfiles and symlinks, and small leaks (readiness
//! details, a scoped key's view, store passwords, the bearer scheme, cut-off SSE streams).

use std::net::SocketAddr;
use std::time::Duration;

use serde_json::{Value, json};
use skillgate::Context;
use skillgate::config::ConfigFile;
use skillgate::gateway::http::{HttpConfig, HttpSettings};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::support::common::{Project, native};
use crate::support::server::{TestServer, config, problem};
use crate::support::server::{hello_and_admin as project, with_keys};

/// A bound on every wait, only so a broken server fails the test instead of hanging it.
const PATIENCE: Duration = Duration::from_secs(15);

/// Reads until the server closes the socket (a reset counts as closed); what it sent first.
async fn until_closed(socket: &mut TcpStream) -> String {
    let mut answer = Vec::new();
    let mut chunk = [0u8; 4096];
    let read = async {
        loop {
            match socket.read(&mut chunk).await {
                Ok(0) | Err(_) => break,
                Ok(n) => answer.extend_from_slice(&chunk[..n]),
            }
        }
    };
    tokio::time::timeout(PATIENCE, read)
        .await
        .expect("the server keeps the connection open");
    String::from_utf8_lossy(&answer).into_owned()
}

/// Sends `request` on a new connection and reads the answer until the server closes it.
async fn raw(addr: SocketAddr, request: &str) -> String {
    let mut socket = TcpStream::connect(addr).await.unwrap();
    socket.write_all(request.as_bytes()).await.unwrap();
    until_closed(&mut socket).await
}

// 1. Sockets that never send a byte, and the connection cap.

#[tokio::test]
async fn a_socket_that_sends_nothing_is_closed_after_the_header_timeout() {
    let mut settings = config();
    settings.header_timeout = Duration::from_millis(300);
    let mut server = TestServer::start(project(), settings).await;
    let mut silent = TcpStream::connect(server.addr).await.unwrap();
    assert_eq!(until_closed(&mut silent).await, "", "nothing is answered");
    assert_eq!(server.get("/healthz").await.status(), 200);
    server.finish().await;
}

#[tokio::test]
async fn idle_sockets_filling_the_connection_cap_are_closed_and_healthz_answers_again() {
    let mut settings = config();
    settings.header_timeout = Duration::from_millis(300);
    settings.max_connections = 2;
    let mut server = TestServer::start(project(), settings).await;
    let mut idle = Vec::new();
    for _ in 0..2 {
        idle.push(TcpStream::connect(server.addr).await.unwrap());
    }
    // Waits in the backlog until an idle socket is closed, then is served.
    let health = tokio::time::timeout(
        PATIENCE,
        crate::support::common::http_client()
            .get(server.url("/healthz"))
            .send(),
    )
    .await
    .expect("/healthz never answered")
    .unwrap();
    assert_eq!(health.status(), 200);
    for socket in &mut idle {
        assert_eq!(until_closed(socket).await, "");
    }
    server.finish().await;
}

#[tokio::test]
async fn over_the_connection_cap_a_connection_waits_until_one_closes() {
    let mut settings = config();
    settings.header_timeout = Duration::from_secs(10);
    settings.max_connections = 1;
    let mut server = TestServer::start(project(), settings).await;
    // The first connection is served and stays open (keep-alive), holding the only slot.
    let mut first = TcpStream::connect(server.addr).await.unwrap();
    first
        .write_all(b"GET /healthz HTTP/1.1\r\nhost: localhost\r\n\r\n")
        .await
        .unwrap();
    let mut head = [0u8; 12];
    tokio::time::timeout(PATIENCE, first.read_exact(&mut head))
        .await
        .expect("the first connection is served")
        .unwrap();
    assert_eq!(&head, b"HTTP/1.1 200");
    let mut second = TcpStream::connect(server.addr).await.unwrap();
    second
        .write_all(b"GET /healthz HTTP/1.1\r\nhost: localhost\r\nconnection: close\r\n\r\n")
        .await
        .unwrap();
    let mut byte = [0u8; 1];
    let early = tokio::time::timeout(Duration::from_millis(300), second.read(&mut byte)).await;
    assert!(early.is_err(), "a connection over the cap was served");
    drop(first);
    let answer = until_closed(&mut second).await;
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    server.finish().await;
}

#[test]
fn max_connections_body_timeout_and_allowed_hosts_are_settings() {
    let project = Project::new();
    project.write(
        "skillgate.yaml",
        "http:\n  max-connections: 64\n  body-timeout: 2.5\n  allowed-hosts: [api.example]\n",
    );
    let file = ConfigFile::read(project.path(), None).unwrap();
    let resolve = |flags: HttpSettings| {
        HttpConfig::resolve(project.path(), flags.or(file.http.clone()), &|p| {
            file.origin(p)
        })
    };
    let config = resolve(HttpSettings::default()).unwrap();
    assert_eq!(config.max_connections, 64);
    assert_eq!(config.body_timeout, Duration::from_millis(2500));
    assert_eq!(config.allowed_hosts, vec!["api.example".to_string()]);
    let flags = HttpSettings {
        max_connections: Some(8),
        allowed_hosts: Some("a.example, b.example".parse().unwrap()),
        ..HttpSettings::default()
    };
    let config = resolve(flags).unwrap();
    assert_eq!(config.max_connections, 8);
    assert_eq!(config.allowed_hosts, vec!["a.example", "b.example"]);
    let zero = HttpSettings {
        max_connections: Some(0),
        ..HttpSettings::default()
    };
    let err = resolve(zero).unwrap_err().to_string();
    assert!(
        err.contains("http.max-connections: must be at least 1"),
        "{err}"
    );
    let defaults = HttpConfig::default();
    assert_eq!(defaults.max_connections, 1024);
    assert_eq!(defaults.body_timeout, Duration::from_secs(30));
    assert!(defaults.allowed_hosts.is_empty());
}

// 2. Bodies that stall or trickle.

#[tokio::test]
async fn a_request_body_that_stalls_is_answered_408() {
    let mut settings = config();
    settings.body_timeout = Duration::from_millis(300);
    let mut server = TestServer::start(project(), settings).await;
    let answer = raw(
        server.addr,
        "POST /invoke/hello HTTP/1.1\r\nhost: localhost\r\ncontent-type: application/json\r\ncontent-length: 100\r\n\r\n",
    )
    .await;
    assert!(answer.starts_with("HTTP/1.1 408"), "{answer}");
    assert!(answer.contains("application/problem+json"), "{answer}");
    assert!(answer.contains("/docs#problem-body-timeout"), "{answer}");
    server.finish().await;
}

#[tokio::test]
async fn a_request_body_that_trickles_is_answered_408_when_the_whole_body_is_late() {
    let mut settings = config();
    settings.body_timeout = Duration::from_millis(500);
    let mut server = TestServer::start(project(), settings).await;
    let mut socket = TcpStream::connect(server.addr).await.unwrap();
    socket
        .write_all(b"POST /invoke/hello HTTP/1.1\r\nhost: localhost\r\ncontent-type: application/json\r\ncontent-length: 100\r\n\r\n")
        .await
        .unwrap();
    // One byte every 100 ms: each arrives well within the timeout, the whole body never does.
    let mut answer = Vec::new();
    for _ in 0..100 {
        let mut chunk = [0u8; 4096];
        if let Ok(Ok(n)) =
            tokio::time::timeout(Duration::from_millis(100), socket.read(&mut chunk)).await
        {
            answer.extend_from_slice(&chunk[..n]);
            break;
        }
        if socket.write_all(b" ").await.is_err() {
            break;
        }
    }
    let rest = until_closed(&mut socket).await;
    let answer = String::from_utf8_lossy(&answer).into_owned() + &rest;
    assert!(answer.starts_with("HTTP/1.1 408"), "{answer}");
    server.finish().await;
}

// 3. Metric labels.

#[tokio::test]
async fn made_up_methods_and_raw_paths_never_become_metric_labels() {
    let mut server = TestServer::start(project(), config()).await;
    for i in 0..40 {
        let method = reqwest::Method::from_bytes(format!("PROBE{i}").as_bytes()).unwrap();
        server
            .client
            .request(method, server.url(&format!("/random-{i}/x")))
            .send()
            .await
            .unwrap();
        server.get(&format!("/missing-{i}")).await;
    }
    let text = server.get("/metrics").await.text().await.unwrap();
    assert!(!text.contains("PROBE"), "{text}");
    assert!(!text.contains("/random-"), "{text}");
    assert!(!text.contains("/missing-"), "{text}");
    assert!(text.contains("method=\"other\""), "{text}");
    let series = text
        .lines()
        .filter(|l| l.starts_with("skillgate_http_requests_total{"))
        .count();
    assert!(series <= 3, "{series} series for 80 requests:\n{text}");
    server.finish().await;
}

// 4. Content types and hosts.

#[tokio::test]
async fn invoke_refuses_a_body_that_is_not_declared_json_with_415() {
    let mut server = TestServer::start(project(), config()).await;
    let post = |content_type: Option<&'static str>, body: &'static str| {
        let mut request = server.client.post(server.url("/invoke/hello")).body(body);
        if let Some(content_type) = content_type {
            request = request.header("content-type", content_type);
        }
        request.send()
    };
    // What a cross-site form can send without a preflight.
    for content_type in [
        "text/plain",
        "application/x-www-form-urlencoded",
        "multipart/form-data; boundary=x",
    ] {
        let body = problem(post(Some(content_type), "{}").await.unwrap(), 415).await;
        assert!(
            body["type"]
                .as_str()
                .unwrap()
                .ends_with("unsupported-media-type")
        );
    }
    problem(post(None, "{}").await.unwrap(), 415).await;
    // An empty form is no exception; an empty body without a type is no args.
    problem(post(Some("text/plain"), "").await.unwrap(), 415).await;
    assert_eq!(post(None, "").await.unwrap().status(), 200);
    for content_type in ["application/json", "Application/JSON; charset=utf-8"] {
        assert_eq!(post(Some(content_type), "{}").await.unwrap().status(), 200);
    }
    server.finish().await;
}

#[tokio::test]
async fn with_allowed_hosts_other_hosts_get_421_and_health_checks_answer_any_host() {
    let mut settings = config();
    settings.allowed_hosts = vec!["skillgate.test".into()];
    let mut server = TestServer::start(project(), settings).await;
    let get = |path: &str, host: &str| {
        format!("GET {path} HTTP/1.1\r\nhost: {host}\r\nconnection: close\r\n\r\n")
    };
    let port = server.addr.port();
    let refused = raw(server.addr, &get("/skills", &format!("127.0.0.1:{port}"))).await;
    assert!(refused.starts_with("HTTP/1.1 421"), "{refused}");
    assert!(refused.contains("/docs#problem-misdirected"), "{refused}");
    // Refused inside the request's bookkeeping: it has its id like any other answer.
    assert!(
        refused.to_ascii_lowercase().contains("\r\nx-request-id: "),
        "{refused}"
    );
    let rebound = raw(server.addr, &get("/skills", "evil.example")).await;
    assert!(rebound.starts_with("HTTP/1.1 421"), "{rebound}");
    let named = raw(
        server.addr,
        &get("/skills", &format!("SkillGate.test:{port}")),
    )
    .await;
    assert!(named.starts_with("HTTP/1.1 200"), "{named}");
    for path in ["/healthz", "/readyz"] {
        let probe = raw(server.addr, &get(path, "10.0.0.7:8080")).await;
        assert!(probe.starts_with("HTTP/1.1 200"), "{path}: {probe}");
    }
    server.finish().await;
}

// 5. `web-send` heads that would end the connection.

#[tokio::test]
async fn web_send_refuses_informational_statuses_and_contradicting_length_headers() {
    let mut server = TestServer::start_with(Project::new(), config(), |b| {
        b.native(native(
            "name: framer\ndescription: Tries heads hyper cannot send.\n",
            |ctx: Context, _args| async move {
                let mut kinds = Vec::new();
                for attempt in [
                    json!({ "status": 103 }),
                    json!({ "status": 101, "headers": { "upgrade": "websocket" } }),
                    json!({ "headers": { "content-length": "5", "transfer-encoding": "chunked" } }),
                    json!({ "headers": { "transfer-encoding": "chunked" }, "chunk": "x" }),
                    json!({ "headers": { "content-length": "100" }, "chunk": "short" }),
                    json!({ "headers": { "content-length": "five" }, "chunk": "hello" }),
                ] {
                    let refused = ctx
                        .invoke("web-send", attempt, Default::default())
                        .await
                        .expect_err("refused");
                    kinds.push(refused.kind().code().to_string());
                }
                Ok(Some(json!(kinds)))
            },
        ))
        .native(native(
            "name: sized\ndescription: A whole body with its length.\n",
            |ctx: Context, _args| async move {
                ctx.invoke(
                    "web-send",
                    json!({ "status": 201, "headers": { "content-length": "5" }, "chunk": "hello" }),
                    Default::default(),
                )
                .await?;
                let more = ctx
                    .invoke("web-send", json!({ "chunk": "!" }), Default::default())
                    .await;
                assert!(more.is_err(), "a chunk after the declared length");
                Ok(None)
            },
        ))
    })
    .await;
    // Nothing went out: the skill answers normally, the connection stays usable.
    let response = server.post_json("/invoke/framer", &json!({})).await;
    assert_eq!(response.status(), 200);
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["result"], json!(vec!["invalid-args"; 6]), "{body}");
    let sized = server.post_json("/invoke/sized", &json!({})).await;
    assert_eq!(sized.status(), 201);
    assert_eq!(sized.text().await.unwrap(), "hello");
    server.finish().await;
}

// 6. `public/`: dotfiles and symlinks out of the folder.

#[cfg(unix)]
#[tokio::test]
async fn public_serves_neither_dotfiles_nor_files_a_symlink_leads_out_to() {
    let project = project();
    project
        .write("public/index.html", "<p>home</p>")
        .write("public/.env", "SECRET=1")
        .write("public/.git/config", "[remote]")
        .write("public/docs/.hidden", "no")
        .write("public/.well-known/security.txt", "Contact: x")
        .write("private/secret.txt", "outside")
        .write("private/index.html", "outside index");
    let public = project.path().join("public");
    let private = project.path().join("private");
    std::os::unix::fs::symlink(private.join("secret.txt"), public.join("leak.txt")).unwrap();
    std::os::unix::fs::symlink(&private, public.join("out")).unwrap();
    std::os::unix::fs::symlink(public.join("index.html"), public.join("home.html")).unwrap();
    std::fs::create_dir(public.join("site")).unwrap();
    std::os::unix::fs::symlink(private.join("index.html"), public.join("site/index.html")).unwrap();
    let mut server = TestServer::start(project, config()).await;
    for path in [
        "/.env",
        "/%2eenv",
        "/.git/config",
        "/docs/.hidden",
        "/leak.txt",
        "/out/secret.txt",
        "/out/",
        "/site/",
    ] {
        let response = server.get(path).await;
        let body = problem(response, 404).await;
        assert!(!body.to_string().contains("outside"), "{path}: {body}");
    }
    // Symlinks that stay inside, and `/.well-known/`, are served.
    assert_eq!(
        server.get("/home.html").await.text().await.unwrap(),
        "<p>home</p>"
    );
    let known = server.get("/.well-known/security.txt").await;
    assert_eq!(known.status(), 200);
    server.finish().await;
}

// 7. Small leaks.

#[tokio::test]
async fn readyz_names_a_skill_that_failed_to_load_but_not_where_it_is() {
    let project = project();
    project.skill("broken.skill.md", "---\nname: [not, a, name]\n---\n");
    let root = std::fs::canonicalize(project.path()).unwrap();
    let mut server = TestServer::start(project, config()).await;
    let ready = server.get("/readyz").await;
    assert_eq!(ready.status(), 503);
    let text = ready.text().await.unwrap();
    let body: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(body["skills"]["failures"], json!(["broken"]), "{text}");
    assert!(!text.contains(root.to_str().unwrap()), "{text}");
    assert!(!text.contains("broken.skill.md"), "{text}");
    server.finish().await;
}

#[tokio::test]
async fn a_scoped_key_sees_only_the_skills_it_may_invoke() {
    let mut server = TestServer::start(project(), with_keys()).await;
    let get =
        |path: &str, key: &'static str| server.client.get(server.url(path)).bearer_auth(key).send();
    let list: Value = get("/skills", "sg_narrow_key")
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let names: Vec<&str> = list["skills"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["hello"]);
    problem(get("/skills/admin", "sg_narrow_key").await.unwrap(), 404).await;
    assert_eq!(
        get("/skills/hello", "sg_narrow_key")
            .await
            .unwrap()
            .status(),
        200
    );
    // Nor is it suggested.
    let typo = server
        .client
        .post(server.url("/invoke/admn"))
        .bearer_auth("sg_narrow_key")
        .send()
        .await
        .unwrap();
    let body = problem(typo, 404).await;
    assert!(!body.to_string().contains("admin"), "{body}");
    // An unscoped key still sees every skill.
    let all: Value = get("/skills", "sg_ci_key")
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert!(all.to_string().contains("\"admin\""));
    server.finish().await;
}

#[test]
fn store_urls_are_shown_without_their_password() {
    let project = Project::new();
    let run = |store: &str| {
        std::process::Command::new(env!("CARGO_BIN_EXE_skillgate"))
            .arg("--project")
            .arg(project.path())
            .args(["--store", store, "migrate"])
            .env_remove("SKILLGATE_STORE")
            .output()
            .expect("skillgate runs")
    };
    for store in [
        "mysql://app:pw-s3cret@db/events",
        "postgres://app:pw-s3cret@127.0.0.1:notaport/events",
        "postgres://db:notaport/events?user=app&password=pw-s3cret",
    ] {
        let out = run(store);
        assert!(!out.status.success());
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(stderr.contains("cannot open the event store"), "{stderr}");
        assert!(stderr.contains("***"), "{stderr}");
        assert!(!stderr.contains("pw-s3cret"), "{stderr}");
    }
    // Nor does help show the value of SKILLGATE_STORE.
    let help = std::process::Command::new(env!("CARGO_BIN_EXE_skillgate"))
        .arg("--help")
        .env("SKILLGATE_STORE", "postgres://app:pw-s3cret@db/events")
        .output()
        .unwrap();
    assert!(help.status.success());
    assert!(!String::from_utf8_lossy(&help.stdout).contains("pw-s3cret"));
}

#[tokio::test]
async fn the_bearer_scheme_is_case_insensitive() {
    let mut server = TestServer::start(project(), with_keys()).await;
    for scheme in ["BEARER", "bearer", "BeArEr"] {
        let response = server
            .client
            .post(server.url("/invoke/hello"))
            .header("authorization", format!("{scheme} sg_ci_key"))
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 200, "{scheme}");
    }
    let other = server
        .client
        .post(server.url("/invoke/hello"))
        .header("authorization", "Basic sg_ci_key")
        .send()
        .await
        .unwrap();
    problem(other, 401).await;
    server.finish().await;
}

#[tokio::test]
async fn open_sse_streams_count_as_cut_off_when_the_grace_runs_out() {
    let mut settings = config();
    settings.grace = Duration::from_millis(200);
    let mut server = TestServer::start_with(project(), settings, |b| {
        b.native(native(
            "name: endless\ndescription: Streams forever.\n",
            |ctx: Context, _args| async move {
                ctx.invoke(
                    "gateway-send",
                    json!({ "message": "started" }),
                    Default::default(),
                )
                .await?;
                std::future::pending::<()>().await;
                Ok(None)
            },
        ))
    })
    .await;
    let mut events = server.stream("/invoke/endless", &json!({})).await;
    assert_eq!(events.next().await.unwrap().data, json!("started"));
    let report = tokio::time::timeout(PATIENCE, server.finish())
        .await
        .expect("shutdown ends");
    assert!(!report.drained);
    assert_eq!(report.abandoned, 1, "{report:?}");
}

#[tokio::test]
async fn a_browser_on_another_site_cannot_invoke_skills_unless_its_origin_is_allowed() {
    let mut server = TestServer::start(project(), config()).await;
    let from = |origin: &'static str, site: &'static str| {
        server
            .client
            .post(server.url("/invoke/hello"))
            .header("origin", origin)
            .header("sec-fetch-site", site)
            .send()
    };
    let response = from("https://evil.example", "cross-site").await.unwrap();
    let body = problem(response, 403).await;
    assert!(
        body["type"].as_str().unwrap().ends_with("cross-site"),
        "{body}"
    );
    // The page served by skillgate itself may.
    let own = format!("http://{}", server.addr);
    let response = server
        .client
        .post(server.url("/invoke/hello"))
        .header("origin", own)
        .header("sec-fetch-site", "same-origin")
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    server.finish().await;
    let mut settings = config();
    settings.cors_origins = vec!["https://app.example".into()];
    let mut server = TestServer::start(project(), settings).await;
    let response = server
        .client
        .post(server.url("/invoke/hello"))
        .header("origin", "https://app.example")
        .header("sec-fetch-site", "cross-site")
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200, "a listed origin may");
    server.finish().await;
}
