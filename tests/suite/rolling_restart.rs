//! A rolling restart the way an operator does it with nginx's open-source edition: three
//! `skillgate serve` replicas on one Postgres behind Debian's nginx, under load. Each in turn is
//! taken out of the upstream (nginx reloaded), sent SIGTERM (it drains with `--drain`: `/readyz`
//! 503 while work is still taken, then finishes what it took and exits 0), started again and put
//! back. nginx never retries a POST it has sent: every request sent is answered 200 and ran
//! once, so N sent is N runs recorded, and none failed.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use parking_lot::Mutex;
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use crate::support::common::{Project, hello_project, http_client};
use crate::support::process::{Served, serve};
use crate::support::stores::Store;

/// Debian's nginx, from `SKILLGATE_TEST_NGINX` (`scripts/test` installs `nginx-light`).
fn nginx_binary() -> Option<PathBuf> {
    crate::support::common::provided_tool(
        "SKILLGATE_TEST_NGINX",
        "SKILLGATE_REQUIRE_NGINX",
        "nginx-light",
    )
}

/// nginx in a folder of its own, in front of the replicas it is given.
struct Nginx {
    binary: PathBuf,
    dir: tempfile::TempDir,
    port: u16,
    master: Child,
}

impl Nginx {
    fn start(binary: PathBuf, upstream: &[String]) -> Nginx {
        let dir = tempfile::tempdir().unwrap();
        // Its workers may run as another user: they write their temporary files here.
        std::fs::set_permissions(
            dir.path(),
            std::os::unix::fs::PermissionsExt::from_mode(0o777),
        )
        .unwrap();
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        write_nginx_config(dir.path(), port, upstream);
        let master = Command::new(&binary)
            .args(["-p"])
            .arg(dir.path())
            .args(["-c", "nginx.conf", "-e", "error.log", "-g", "daemon off;"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("nginx starts");
        let nginx = Nginx {
            binary,
            dir,
            port,
            master,
        };
        nginx.wait_until_listening();
        nginx
    }

    fn wait_until_listening(&self) {
        let deadline = std::time::Instant::now() + Duration::from_secs(20);
        while std::net::TcpStream::connect(("127.0.0.1", self.port)).is_err() {
            assert!(
                std::time::Instant::now() < deadline,
                "nginx did not listen: {}",
                std::fs::read_to_string(self.dir.path().join("error.log")).unwrap_or_default()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Points the upstream at `replicas` and reloads, as an operator does: new workers take the
    /// new list, old ones finish the requests they have.
    fn reload(&self, replicas: &[String]) {
        write_nginx_config(self.dir.path(), self.port, replicas);
        let status = Command::new(&self.binary)
            .arg("-p")
            .arg(self.dir.path())
            .args(["-c", "nginx.conf", "-e", "error.log", "-s", "reload"])
            .status()
            .unwrap();
        assert!(status.success(), "nginx -s reload");
    }

    fn url(&self, path: &str) -> String {
        format!("http://127.0.0.1:{}{path}", self.port)
    }
}

impl Drop for Nginx {
    fn drop(&mut self) {
        let _ = self.master.kill();
        let _ = self.master.wait();
    }
}

/// The operator's config: round robin over `replicas`, POSTs never retried once sent (nginx's
/// default: `non_idempotent` is not in `proxy_next_upstream`).
fn write_nginx_config(dir: &Path, port: u16, replicas: &[String]) {
    let servers: String = replicas
        .iter()
        .map(|addr| format!("        server {addr} max_fails=1 fail_timeout=5s;\n"))
        .collect();
    let d = dir.display();
    let text = format!(
        "worker_processes 1;\npid {d}/nginx.pid;\nevents {{ worker_connections 1024; }}\nhttp {{\n    access_log off;\n    client_body_temp_path {d}/body;\n    proxy_temp_path {d}/proxy;\n    upstream skillgate {{\n{servers}    }}\n    server {{\n        listen 127.0.0.1:{port};\n        location / {{\n            proxy_pass http://skillgate;\n            proxy_http_version 1.1;\n            proxy_set_header Host $host;\n            proxy_set_header Connection \"\";\n            proxy_connect_timeout 2s;\n            proxy_next_upstream error timeout http_502 http_503;\n        }}\n    }}\n}}\n"
    );
    std::fs::write(dir.join("nginx.conf"), text).unwrap();
}

fn start_replica(project: &Project, store: &Store) -> Served {
    let url = store.url.as_deref().expect("a Postgres store");
    serve(
        project.path(),
        &["--bind", "127.0.0.1:0", "--store", url, "--drain", "1"],
        // Every client here is 127.0.0.1: the per-address rate limit would refuse the load.
        &[("SKILLGATE_RATE_LIMIT", "0")],
    )
}

/// What the load saw.
#[derive(Default)]
struct Load {
    sent: AtomicU64,
    answered: AtomicU64,
    failed: Mutex<Vec<String>>,
}

/// `clients` tasks POST `/invoke/hello` through nginx until `stop`, each on a new connection
/// (a client's kept-alive connection to nginx is nginx's matter, not the replicas').
async fn load(url: String, clients: usize, stop: CancellationToken, seen: Arc<Load>) {
    let tasks: Vec<_> = (0..clients)
        .map(|client| {
            let (url, stop, seen) = (url.clone(), stop.clone(), seen.clone());
            tokio::spawn(async move {
                skillgate::tls::install();
                let http = reqwest::Client::builder()
                    .pool_max_idle_per_host(0)
                    .build()
                    .unwrap();
                let mut n = 0u64;
                while !stop.is_cancelled() {
                    let name = format!("c{client}n{n}");
                    seen.sent.fetch_add(1, Ordering::Relaxed);
                    let sent = http.post(&url).json(&json!({ "name": name })).send().await;
                    let outcome = match sent {
                        Ok(response) => {
                            let status = response.status();
                            let body: Value = response.json().await.unwrap_or(Value::Null);
                            if status == 200 && body["result"] == format!("Hello, {name}!\n") {
                                Ok(())
                            } else {
                                Err(format!("{name}: {status} {body}"))
                            }
                        }
                        Err(err) => Err(format!("{name}: {err}")),
                    };
                    match outcome {
                        Ok(()) => {
                            seen.answered.fetch_add(1, Ordering::Relaxed);
                        }
                        Err(why) => seen.failed.lock().push(why),
                    }
                    n += 1;
                }
            })
        })
        .collect();
    for task in tasks {
        task.await.unwrap();
    }
}

/// Waits until `load` has had `more` answers beyond `from`.
async fn answered_beyond(load: &Load, from: u64, more: u64) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    while load.answered.load(Ordering::Relaxed) < from + more {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the load stalled: {} answered, first failures {:?}",
            load.answered.load(Ordering::Relaxed),
            load.failed.lock().iter().take(5).collect::<Vec<_>>()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// The runs of `hello` recorded in the store, read through `served` page by page.
async fn recorded_runs(served: &Served) -> Vec<Value> {
    let http = http_client();
    let mut runs = Vec::new();
    let mut cursor: Option<String> = None;
    loop {
        let mut url = served.url("/runs?skill=hello&limit=500");
        if let Some(cursor) = &cursor {
            url.push_str(&format!("&cursor={cursor}"));
        }
        let page: Value = http.get(url).send().await.unwrap().json().await.unwrap();
        runs.extend(page["runs"].as_array().cloned().unwrap_or_default());
        match page["next"].as_str() {
            Some(next) => cursor = Some(next.to_string()),
            None => return runs,
        }
    }
}

#[test]
fn three_replicas_rolled_behind_nginx_under_load_answer_every_request_once() {
    let Some(binary) = nginx_binary() else {
        return;
    };
    let Some(store) = Store::all().into_iter().find(|s| s.url.is_some()) else {
        return;
    };
    crate::support::common::runtime().block_on(async {
            let project = hello_project();
            let mut replicas: Vec<Served> =
                (0..3).map(|_| start_replica(&project, &store)).collect();
            let addrs = |replicas: &[Served]| -> Vec<String> {
                replicas.iter().map(|r| r.addr.clone()).collect()
            };
            let nginx = Nginx::start(binary, &addrs(&replicas));
            let stop = CancellationToken::new();
            let seen = Arc::new(Load::default());
            let running = tokio::spawn(load(
                nginx.url("/invoke/hello"),
                4,
                stop.clone(),
                seen.clone(),
            ));
            answered_beyond(&seen, 0, 20).await;
            for i in 0..replicas.len() {
                // Out of the upstream first, then told to stop.
                let others: Vec<String> = addrs(&replicas)
                    .into_iter()
                    .enumerate()
                    .filter(|(j, _)| *j != i)
                    .map(|(_, a)| a)
                    .collect();
                nginx.reload(&others);
                let fresh = start_replica(&project, &store);
                let going = std::mem::replace(&mut replicas[i], fresh);
                let (code, _) = tokio::task::spawn_blocking(move || going.stop())
                    .await
                    .unwrap();
                assert_eq!(code, Some(0), "replica {i} drained and exited 0");
                // Back in, at its new address.
                nginx.reload(&addrs(&replicas));
                let now = seen.answered.load(Ordering::Relaxed);
                answered_beyond(&seen, now, 20).await;
            }
            stop.cancel();
            running.await.unwrap();
            let failed = seen.failed.lock().clone();
            let sent = seen.sent.load(Ordering::Relaxed);
            assert!(failed.is_empty(), "{} of {sent} failed: {:?}", failed.len(), &failed[..failed.len().min(5)]);
            assert_eq!(seen.answered.load(Ordering::Relaxed), sent);
            // Every request ran once: as many runs as requests (the record is written in
            // batches, so it may take a moment to hold the last ones).
            let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
            loop {
                let runs = recorded_runs(&replicas[0]).await;
                let ok = runs.iter().filter(|r| r["status"] == "ok").count() as u64;
                if runs.len() as u64 == sent && ok == sent {
                    eprintln!("rolled 3 replicas under load: {sent} requests sent, {sent} runs recorded, 0 failed");
                    break;
                }
                assert!(
                    runs.len() as u64 <= sent,
                    "{} runs recorded for {sent} requests: one ran twice",
                    runs.len()
                );
                assert!(
                    tokio::time::Instant::now() < deadline,
                    "{} runs recorded ({ok} ok) for {sent} requests",
                    runs.len()
                );
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            drop(nginx);
            for replica in replicas {
                replica.stop();
            }
        });
}
