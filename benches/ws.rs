//! WebSocket load against `skillgate serve` (this build, as a child process on the in-memory
//! store), with tokio-tungstenite clients in this process:
//! 1. fan-out saturation: `CLIENTS` sockets subscribed to one topic; a publisher socket emits
//!    events (`event-emit` invocations, 64 in flight) as fast as they go for `SECS` seconds:
//!    event messages delivered per second, in total over all clients;
//! 2. fan-out latency: events at 50,000 messages/s (half the 100,000 target), then at half the
//!    measured saturation rate; each event carries its send time, and every client times its
//!    copy on arrival: p50/p99 publish → client;
//! 3. idle memory: the server's RSS growth over `IDLE` authenticated idle sockets, per socket.
//!
//! Run: `cargo bench --bench ws` (release). `SKILLGATE_BENCH_SECS` (default 5),
//! `SKILLGATE_BENCH_CLIENTS` (default 1000) and `SKILLGATE_BENCH_IDLE` (default 10000) change
//! the phases. The clients share the machine's cores with the server.

mod common;

use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use futures::{SinkExt, StreamExt};
use parking_lot::Mutex;
use serde_json::{Value, json};
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;

use common::env_or;

const KEY: &str = "sg_bench_key_0123456789";

/// `skillgate serve` on a free port; returns the child and its address.
fn start_server(project: &std::path::Path) -> (Child, String) {
    let hash = skillgate::gateway::keys::hash_key(KEY);
    let mut child = Command::new(env!("CARGO_BIN_EXE_skillgate"))
        .args(["--project"])
        .arg(project)
        .args([
            "serve",
            "--bind",
            "127.0.0.1:0",
            "--store",
            "memory",
            "--rate-limit",
            "0",
            "--ws-max-connections",
            "20000",
            // Every client is on 127.0.0.1: the per-address caps would refuse most.
            "--ws-max-connections-per-peer",
            "20000",
            "--max-connections-per-peer",
            "20000",
            "--ws-send-queue",
            "65536",
            "--api-keys",
            &format!("bench={hash}"),
        ])
        .env_remove("RUST_LOG")
        .env_remove("DATABASE_URL")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start skillgate serve");
    let addr = common::listen_addr(&mut child);
    (child, addr)
}

type Socket =
    tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>>;

async fn connect(addr: &str) -> Socket {
    let mut request = format!("ws://{addr}/ws").into_client_request().unwrap();
    request
        .headers_mut()
        .insert("authorization", format!("Bearer {KEY}").parse().unwrap());
    // Without Nagle: a publisher's small frames must not wait for the previous ones' ACK.
    let (mut socket, _) = tokio_tungstenite::connect_async_with_config(request, None, true)
        .await
        .expect("upgrade");
    let welcome = next_json(&mut socket).await;
    assert_eq!(welcome["type"], "welcome");
    socket
}

async fn next_json(socket: &mut Socket) -> Value {
    loop {
        match socket.next().await {
            Some(Ok(Message::Text(t))) => return serde_json::from_str(t.as_str()).unwrap(),
            Some(Ok(_)) => continue,
            other => panic!("socket ended: {other:?}"),
        }
    }
}

fn now_ns() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_nanos() as u64
}

/// What the subscribers saw.
#[derive(Default)]
struct Seen {
    delivered: AtomicU64,
    timing: AtomicBool,
    latencies: Mutex<Vec<u64>>,
}

/// The `sent` stamp of an event frame, read without parsing the whole frame (the clients share
/// the cores with the server, and should cost it as little as they can).
fn sent_stamp(text: &str) -> Option<u64> {
    let at = text.find("\"sent\":")? + "\"sent\":".len();
    let digits: String = text[at..]
        .chars()
        .take_while(char::is_ascii_digit)
        .collect();
    digits.parse().ok()
}

/// Publishes events at `rate` per second (0: as fast as 64 in flight allow) for `secs`.
async fn publish(socket: &mut Socket, rate: u64, secs: u64) -> u64 {
    let start = Instant::now();
    let end = start + Duration::from_secs(secs);
    let mut sent = 0u64;
    let mut answered = 0u64;
    while Instant::now() < end {
        while sent - answered < 64 && Instant::now() < end {
            if let Some(offset) = (sent * 1_000_000_000).checked_div(rate) {
                let due = start + Duration::from_nanos(offset);
                if due > Instant::now() {
                    if sent > answered {
                        break;
                    }
                    tokio::time::sleep_until(due.into()).await;
                }
            }
            let frame = json!({
                "type": "invoke", "id": sent.to_string(), "skill": "event-emit",
                "args": { "topic": "fan", "data": { "sent": now_ns() } }
            });
            socket
                .send(Message::Text(frame.to_string().into()))
                .await
                .unwrap();
            sent += 1;
        }
        if sent > answered {
            let frame = next_json(socket).await;
            if frame["type"] == "result" || frame["type"] == "error" {
                answered += 1;
            }
        }
    }
    while answered < sent {
        let frame = next_json(socket).await;
        if frame["type"] == "result" || frame["type"] == "error" {
            answered += 1;
        }
    }
    sent
}

fn percentile(sorted: &[u64], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i] as f64 / 1e6
}

fn main() {
    let secs = env_or("SKILLGATE_BENCH_SECS", 5);
    let clients = env_or("SKILLGATE_BENCH_CLIENTS", 1000);
    let idle = env_or("SKILLGATE_BENCH_IDLE", 10_000);
    let project = tempfile::tempdir().unwrap();
    let (mut child, addr) = start_server(project.path());
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let seen = Arc::new(Seen::default());
        let mut readers = Vec::new();
        for _ in 0..clients {
            let mut socket = connect(&addr).await;
            socket
                .send(Message::Text(
                    json!({ "type": "subscribe", "topic": "fan" }).to_string().into(),
                ))
                .await
                .unwrap();
            assert_eq!(next_json(&mut socket).await["type"], "subscribed");
            let seen = seen.clone();
            readers.push(tokio::spawn(async move {
                let mut mine = Vec::new();
                while let Some(Ok(message)) = socket.next().await {
                    let Message::Text(text) = message else { continue };
                    seen.delivered.fetch_add(1, Ordering::Relaxed);
                    if seen.timing.load(Ordering::Relaxed) {
                        if let Some(sent) = sent_stamp(text.as_str()) {
                            mine.push(now_ns().saturating_sub(sent));
                        }
                    } else if !mine.is_empty() {
                        seen.latencies.lock().append(&mut mine);
                    }
                }
            }));
        }
        let mut publisher = connect(&addr).await;
        // Saturation.
        let before = seen.delivered.load(Ordering::Relaxed);
        let started = Instant::now();
        let events = publish(&mut publisher, 0, secs).await;
        let expected = before + events * clients;
        let drain = Instant::now() + Duration::from_secs(30);
        while seen.delivered.load(Ordering::Relaxed) < expected && Instant::now() < drain {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        let elapsed = started.elapsed().as_secs_f64();
        let delivered = seen.delivered.load(Ordering::Relaxed) - before;
        let rate = delivered as f64 / elapsed;
        println!(
            "fan-out, {clients} clients: {events} events, {delivered} messages delivered in {elapsed:.2} s: {:.0} messages/s",
            rate
        );
        common::report::record(
            "ws",
            "saturation",
            json!({ "subscribers": clients, "messages_per_s": rate }),
        );
        // Timed phases: half the target, then half the measured saturation.
        for (row, messages) in [("at 50k messages/s", 50_000.0), ("at half saturation", rate / 2.0)] {
            let per_second = (messages / clients as f64).max(1.0) as u64;
            tokio::time::sleep(Duration::from_millis(500)).await;
            seen.timing.store(true, Ordering::Relaxed);
            let events = publish(&mut publisher, per_second, secs).await;
            tokio::time::sleep(Duration::from_secs(1)).await;
            seen.timing.store(false, Ordering::Relaxed);
            // One more event makes every reader hand its timings over.
            publish(&mut publisher, 1, 1).await;
            tokio::time::sleep(Duration::from_millis(500)).await;
            let mut latencies = std::mem::take(&mut *seen.latencies.lock());
            latencies.sort_unstable();
            println!(
                "fan-out at {per_second} events/s ({} messages/s): {events} events, {} timed; publish -> client p50 {:.2} ms, p99 {:.2} ms",
                per_second * clients,
                latencies.len(),
                percentile(&latencies, 0.50),
                percentile(&latencies, 0.99)
            );
            common::report::record(
                "ws",
                row,
                json!({
                    "subscribers": clients,
                    "messages_per_s": per_second * clients,
                    "p50_ms": percentile(&latencies, 0.50),
                    "p99_ms": percentile(&latencies, 0.99),
                }),
            );
        }
        drop(publisher);
        for reader in readers {
            reader.abort();
        }
        tokio::time::sleep(Duration::from_secs(2)).await;
        // Idle memory.
        let before = common::rss_kib(child.id());
        let mut sockets = Vec::with_capacity(idle as usize);
        for _ in 0..idle {
            sockets.push(connect(&addr).await);
        }
        tokio::time::sleep(Duration::from_secs(2)).await;
        let after = common::rss_kib(child.id());
        println!(
            "idle: {idle} authenticated sockets: server RSS {before} KiB -> {after} KiB: {:.1} KiB per socket",
            (after.saturating_sub(before)) as f64 / idle as f64
        );
        common::report::record(
            "ws",
            "idle sockets",
            json!({
                "sockets": idle,
                "kib_per_socket": (after.saturating_sub(before)) as f64 / idle as f64,
            }),
        );
        drop(sockets);
    });
    let _ = child.kill();
    let _ = child.wait();
}
