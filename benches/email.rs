//! SMTP intake: `CONNS` clients each send mail after mail (one SMTP session per mail, a new
//! Message-ID each) for `SECS` seconds to the listener of an in-process server: parsed, claimed
//! once in the store, durably queued, answered 250 (the worker runs a no-op skill and sends no
//! answer: no relay). Two clients: lettre, and a lean one that pipelines MAIL, RCPT and DATA
//! (RFC 2920) with TCP_NODELAY, so the figure is the server's and not the client's. Messages/s,
//! the time from connect to 250, and the memory each message in flight adds (the process's peak
//! RSS with `8 × CONNS` lean clients less its peak with `CONNS`, over the difference; the
//! clients' own sockets and tasks included), on SQLite (a file in a temporary folder) and
//! Postgres (`DATABASE_URL`, a schema of its own).
//!
//! Each mail is DKIM-signed (ed25519) by its sender's domain, which publishes its key and a
//! DMARC record on a local DNS server over UDP (`email.dns-resolver`): the server verifies
//! every sender as it does on the Internet, with a resolver that answers at once.
//!
//! Run: `cargo bench --bench email` (release). `SKILLGATE_BENCH_SECS` (default 5) and
//! `SKILLGATE_BENCH_CONNS` (default 16) change the load.

mod common;
#[path = "../tests/suite/support/dns_fake.rs"]
mod dns_fake;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use lettre::address::Envelope;
use lettre::{AsyncSmtpTransport, AsyncTransport, Tokio1Executor};
use skillgate::config::email::SmtpSettings;
use skillgate::config::values::Seconds;
use skillgate::events::EventStore;
use skillgate::gateway::email::EmailSettings;
use skillgate::server::DoorSettings;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpStream;

use common::env_or;

#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// Which client sends.
#[derive(Clone, Copy)]
enum Client {
    Lettre,
    Pipelined,
}

async fn run(name: &str, store: Arc<dyn EventStore>, secs: u64, conns: u64) {
    let project = tempfile::tempdir().unwrap();
    let config = DoorSettings {
        email: EmailSettings {
            from: Some("bot@bench.test".into()),
            smtp: Some(SmtpSettings {
                bind: Some("127.0.0.1:0".into()),
                ..SmtpSettings::default()
            }),
            default: Some("noop".into()),
            reply_window: Some(Seconds(Duration::ZERO)),
            dns_resolver: Some(dns_fake::dns().addr.to_string()),
            ..EmailSettings::default()
        },
        ..common::config()
    };
    let server = common::server(project.path(), store, config).await;
    let smtp = server.email_addr().expect("smtp");
    common::serve_forever(server);
    let next = Arc::new(AtomicU64::new(0));
    phase(name, Client::Lettre, conns, secs, smtp, &next).await;
    let few = phase(name, Client::Pipelined, conns, secs, smtp, &next).await;
    let many = phase(name, Client::Pipelined, conns * 8, secs, smtp, &next).await;
    println!(
        "| {name} | memory per mail in flight: {:.1} KiB (peak RSS at {} clients less at {conns}, over the difference) |",
        many.saturating_sub(few) as f64 / (conns * 7) as f64,
        conns * 8
    );
}

/// `conns` clients of one kind for `secs`: prints a row; the peak RSS meanwhile, in KiB.
async fn phase(
    name: &str,
    client: Client,
    conns: u64,
    secs: u64,
    smtp: std::net::SocketAddr,
    next: &Arc<AtomicU64>,
) -> u64 {
    let peak = Arc::new(AtomicU64::new(common::rss_kib(std::process::id())));
    let sampler = {
        let peak = peak.clone();
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(Duration::from_millis(50)).await;
                peak.fetch_max(common::rss_kib(std::process::id()), Ordering::Relaxed);
            }
        })
    };
    let (rate, latencies, label) = match client {
        Client::Lettre => {
            let transport = move || {
                AsyncSmtpTransport::<Tokio1Executor>::builder_dangerous(smtp.ip().to_string())
                    .port(smtp.port())
                    .build()
            };
            let (rate, latencies) =
                common::saturate(conns, secs, next, transport, |transport, n| async move {
                    let sent = Instant::now();
                    transport
                        .send_raw(&envelope(), &message(n, "lettre"))
                        .await
                        .ok()
                        .map(|_| sent.elapsed().as_micros() as u64)
                })
                .await;
            (rate, latencies, "lettre")
        }
        Client::Pipelined => {
            let (rate, latencies) = common::saturate(
                conns,
                secs,
                next,
                || smtp,
                |smtp, n| async move {
                    let sent = Instant::now();
                    pipelined(smtp, n)
                        .await
                        .then(|| sent.elapsed().as_micros() as u64)
                },
            )
            .await;
            (rate, latencies, "pipelined")
        }
    };
    sampler.abort();
    let (p50, p99) = common::percentiles(latencies);
    println!("| {name} | {label} | {conns} | {rate:.0} | {p50:.2} ms | {p99:.2} ms |");
    common::report::record(
        "email",
        &format!("{name}: {label}, {conns} clients"),
        serde_json::json!({ "clients": conns, "mails_per_s": rate, "p50_ms": p50, "p99_ms": p99 }),
    );
    peak.load(Ordering::Relaxed)
}

/// Mail `n` from ada@example.org, DKIM-signed by example.org.
fn message(n: u64, client: &str) -> Vec<u8> {
    let raw = format!(
        "From: ada@example.org\r\nTo: bot@bench.test\r\nSubject: report {n}\r\n\
         Message-ID: <{client}{n}.{}@example.org>\r\n\r\nPlease send report {n}.\r\n",
        std::process::id()
    );
    dns_fake::dns().sign("example.org", raw.as_bytes())
}

fn envelope() -> Envelope {
    Envelope::new(
        Some("ada@example.org".parse().unwrap()),
        vec!["bot@bench.test".parse().unwrap()],
    )
    .unwrap()
}

/// One session with MAIL, RCPT and DATA in one write and the message in one more; whether the
/// message was taken (250).
async fn pipelined(smtp: std::net::SocketAddr, n: u64) -> bool {
    let Ok(stream) = TcpStream::connect(smtp).await else {
        return false;
    };
    let _ = stream.set_nodelay(true);
    let (read, mut write) = stream.into_split();
    let mut reader = BufReader::new(read);
    let mut line = String::new();
    let answer = async |reader: &mut BufReader<_>, line: &mut String| {
        loop {
            line.clear();
            if reader.read_line(line).await.unwrap_or(0) == 0 {
                return false;
            }
            if line.as_bytes().get(3) != Some(&b'-') {
                return true;
            }
        }
    };
    if !answer(&mut reader, &mut line).await {
        return false;
    }
    let _ = write.write_all(b"EHLO bench.test\r\n").await;
    answer(&mut reader, &mut line).await;
    let envelope = b"MAIL FROM:<ada@example.org>\r\nRCPT TO:<bot@bench.test>\r\nDATA\r\n";
    let _ = write.write_all(envelope).await;
    for _ in 0..3 {
        answer(&mut reader, &mut line).await;
    }
    if !line.starts_with("354") {
        return false;
    }
    let mut data = message(n, "raw");
    data.extend_from_slice(b".\r\nQUIT\r\n");
    let _ = write.write_all(&data).await;
    answer(&mut reader, &mut line).await;
    line.starts_with("250")
}

fn main() {
    let secs = env_or("SKILLGATE_BENCH_SECS", 5);
    let conns = env_or("SKILLGATE_BENCH_CONNS", 16);
    common::runtime().block_on(async {
        println!(
            "| store | client | clients | mails/s | session p50 | session p99 |\n|---|---|---|---|---|---|"
        );
        common::on_each_store("bench_email", |name, store| run(name, store, secs, conns)).await;
    });
}
