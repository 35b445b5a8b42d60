//! A real HTTP server on port 0 over a test project, a client, and an SSE reader.
#![allow(dead_code)]

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use serde_json::Value;
use skillgate::Kernel;
use skillgate::gateway::Gateway;
use skillgate::gateway::http::HttpConfig;
use skillgate::gateway::keys::{ApiKey, KeyRing, hash_key};
use skillgate::gateway::metrics::Metrics;
use skillgate::gateway::transport::State;
use skillgate::kernel::KernelBuilder;
use skillgate::server::{DoorSettings, Doors, ShutdownReport};
use tokio::sync::oneshot;

use crate::support::common::Project;

pub struct TestServer {
    pub addr: SocketAddr,
    pub client: reqwest::Client,
    pub kernel: Kernel,
    /// The gateway the server runs on (its readiness, metrics).
    pub gateway: Gateway,
    stop: Option<oneshot::Sender<String>>,
    running: Option<tokio::task::JoinHandle<ShutdownReport>>,
    pub project: Project,
    email: Option<SocketAddr>,
}

/// Settings for tests: port 0, no rate limit unless a test sets one.
pub fn config() -> HttpConfig {
    HttpConfig {
        bind: "127.0.0.1:0".parse().unwrap(),
        rate_per_second: 0,
        ..HttpConfig::default()
    }
}

/// A project with `hello` and `admin`, for tests of keys and their scopes.
pub fn hello_and_admin() -> Project {
    let project = Project::new();
    project
        .skill(
            "hello.skill.md",
            "---\nname: hello\ndescription: Greets.\n---\nhi\n",
        )
        .skill(
            "admin.skill.md",
            "---\nname: admin\ndescription: Admin.\n---\nroot\n",
        );
    project
}

/// [`config`] with three keys: `ci` (`sg_ci_key`, every skill), `narrow` (`sg_narrow_key`,
/// skills matching `hel*`) and `ops` (`sg_ops_key`, every skill and the `admin` scope).
pub fn with_keys() -> HttpConfig {
    let mut settings = config();
    settings.keys = KeyRing::new(vec![
        ApiKey::new("ci", &hash_key("sg_ci_key"), vec![]).unwrap(),
        ApiKey::new("narrow", &hash_key("sg_narrow_key"), vec!["hel*".into()]).unwrap(),
        ApiKey::new("ops", &hash_key("sg_ops_key"), vec![])
            .and_then(|k| k.with_grants(None, true))
            .unwrap(),
    ])
    .unwrap();
    settings
}

impl TestServer {
    /// A gauge of `/metrics` (the server runs without keys or with metrics public).
    pub async fn gauge(&self, name: &str) -> i64 {
        let text = self.get("/metrics").await.text().await.unwrap();
        text.lines()
            .find_map(|l| l.strip_prefix(name)?.strip_prefix(' '))
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or_else(|| panic!("`{name}` is exported"))
    }

    /// Waits until the gauge `name` satisfies `ok` (fails after 20 s).
    pub async fn gauge_until(&self, name: &str, ok: impl Fn(i64) -> bool) -> i64 {
        let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(20);
        loop {
            let value = self.gauge(name).await;
            if ok(value) {
                return value;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "`{name}` stayed at {value}"
            );
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
    }

    /// Waits until door `door` is in `state`, woken at each change of the server's readiness
    /// (a hang guard of 30 s fails the test, with what `/readyz` shows).
    pub async fn door_reaches(&self, door: &str, state: State) {
        let readiness = &self.gateway.readiness;
        let reached = readiness.until(|r| r.state(door).as_ref() == Some(&state));
        if tokio::time::timeout(Duration::from_secs(30), reached)
            .await
            .is_err()
        {
            panic!("{door} never became {state:?}: {}", readiness.to_json());
        }
    }

    pub async fn start(project: Project, config: HttpConfig) -> TestServer {
        TestServer::start_with(project, config, |b| b).await
    }

    /// Starts with extra native tools or settings on the kernel builder.
    pub async fn start_with(
        project: Project,
        config: HttpConfig,
        build: impl FnOnce(KernelBuilder) -> KernelBuilder,
    ) -> TestServer {
        TestServer::start_doors(project, DoorSettings::http(config), build).await
    }

    /// Starts every door `settings` asks for (email, Slack), with extra native tools or settings
    /// on the kernel builder.
    pub async fn start_doors(
        project: Project,
        mut settings: DoorSettings,
        build: impl FnOnce(KernelBuilder) -> KernelBuilder,
    ) -> TestServer {
        let public = project.path().join("public");
        if public.is_dir() {
            settings.http.public_dir = Some(public);
        }
        let kernel = build(project.builder()).build();
        let gateway = Gateway::new(kernel.clone(), Arc::new(Metrics::new()))
            .with_run_bounds(settings.http.max_runs, settings.http.max_args_in_flight);
        let grace = settings.http.grace;
        let doors = Doors::bind(gateway.clone(), settings, project.path())
            .await
            .expect("server binds");
        // Without HTTP, requests go to the operations listener.
        let addr = doors
            .http_addr()
            .or(doors.ops_addr())
            .expect("HTTP or the operations listener is served");
        let email = doors.email_addr();
        let (stop, stopped) = oneshot::channel::<String>();
        let running = tokio::spawn(doors.run_until(
            async move { stopped.await.unwrap_or_else(|_| "test-ended".into()) },
            grace,
        ));
        TestServer {
            addr,
            client: crate::support::common::http_client(),
            kernel,
            gateway,
            stop: Some(stop),
            running: Some(running),
            project,
            email,
        }
    }

    /// Where the email transport's SMTP listener listens, when it is configured.
    pub fn email_addr(&self) -> Option<SocketAddr> {
        self.email
    }

    pub fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    pub async fn post_json(&self, path: &str, body: &Value) -> reqwest::Response {
        self.client
            .post(self.url(path))
            .json(body)
            .send()
            .await
            .expect("request sent")
    }

    /// [`TestServer::post_json`] with `key` as the bearer key.
    pub async fn post_json_as(&self, key: &str, path: &str, body: &Value) -> reqwest::Response {
        self.client
            .post(self.url(path))
            .bearer_auth(key)
            .json(body)
            .send()
            .await
            .expect("request sent")
    }

    /// POSTs `body` asking for server-sent events; the status must be 200.
    pub async fn stream(&self, path: &str, body: &Value) -> SseReader {
        let response = self
            .client
            .post(self.url(path))
            .header("accept", "text/event-stream")
            .json(body)
            .send()
            .await
            .expect("request sent");
        assert_eq!(response.status(), 200);
        SseReader::new(response)
    }

    /// GETs `path` with `key` as the bearer key.
    pub async fn get_as(&self, key: &str, path: &str) -> reqwest::Response {
        self.client
            .get(self.url(path))
            .bearer_auth(key)
            .send()
            .await
            .expect("request sent")
    }

    pub async fn get(&self, path: &str) -> reqwest::Response {
        self.client
            .get(self.url(path))
            .send()
            .await
            .expect("request sent")
    }

    /// The payloads of the events queued on `topic` so far (its replay buffer, in order): what
    /// a door's intake let through. Nothing refused or deduplicated at the door is among them,
    /// so a test sees at once what can ever run, without waiting for what does not come.
    pub async fn queued(&self, topic: &str) -> Vec<Value> {
        use skillgate::events::KernelBus;
        let store = self.kernel.bus().store();
        let events = store.buffered(topic, None, 1000).await.expect("the buffer");
        events.into_iter().filter_map(|e| e.data).collect()
    }

    /// Triggers shutdown; `finish` waits for the report.
    pub fn begin_shutdown(&mut self, reason: &str) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(reason.to_string());
        }
    }

    pub async fn finish(&mut self) -> ShutdownReport {
        self.begin_shutdown("test");
        self.running
            .take()
            .expect("still running")
            .await
            .expect("server task")
    }
}

/// The body as JSON, with the content type checked.
pub async fn problem(response: reqwest::Response, status: u16) -> Value {
    assert_eq!(response.status().as_u16(), status, "status");
    let content_type = response
        .headers()
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_string();
    assert_eq!(content_type, "application/problem+json");
    let body: Value = response.json().await.expect("problem body is JSON");
    assert_eq!(body["status"], status);
    assert!(body["type"].as_str().unwrap().starts_with("/docs#problem-"));
    body
}

/// One server-sent event.
#[derive(Debug, Clone)]
pub struct Sse {
    pub event: String,
    pub data: Value,
    /// The `id:` field, when the event has one.
    pub id: Option<String>,
}

/// Reads server-sent events off a streaming response, one at a time.
pub struct SseReader {
    stream: futures::stream::BoxStream<'static, reqwest::Result<axum::body::Bytes>>,
    buffer: String,
}

impl SseReader {
    pub fn new(response: reqwest::Response) -> SseReader {
        assert_eq!(
            response.headers().get("content-type").unwrap(),
            "text/event-stream"
        );
        SseReader {
            stream: response.bytes_stream().boxed(),
            buffer: String::new(),
        }
    }

    /// The next event, or `None` when the stream ended. Comments (keep-alives) are skipped.
    pub async fn next(&mut self) -> Option<Sse> {
        loop {
            if let Some(end) = self.buffer.find("\n\n") {
                let block: String = self.buffer.drain(..end + 2).collect();
                let mut event = String::from("message");
                let mut data = String::new();
                let mut id = None;
                for line in block.lines() {
                    if let Some(v) = line.strip_prefix("id:") {
                        id = Some(v.trim().to_string());
                    }
                    if let Some(v) = line.strip_prefix("event:") {
                        event = v.trim().to_string();
                    } else if let Some(v) = line.strip_prefix("data:") {
                        data.push_str(v.trim_start());
                    }
                }
                if data.is_empty() {
                    continue;
                }
                let data = serde_json::from_str(&data).expect("SSE data is JSON");
                return Some(Sse { event, data, id });
            }
            match self.stream.next().await {
                Some(Ok(bytes)) => self.buffer.push_str(&String::from_utf8_lossy(&bytes)),
                Some(Err(err)) => panic!("stream failed: {err}"),
                None => return None,
            }
        }
    }
}
