//! Soak: two `skillgate serve` processes (the release binary) on one store, loaded at half
//! their measured maximum for ten minutes with a markdown skill and a `.skill.js` skill in turn;
//! every request must succeed and each replica's resident memory may grow at most 5% after the
//! warm-up.
//!
//! Run: `cargo bench --bench soak` (release). The store is Postgres when `DATABASE_URL` is set
//! (a schema of its own, dropped afterwards), else one SQLite file both replicas share.
//! `SKILLGATE_SOAK_SECS` (default 600), `SKILLGATE_SOAK_WARMUP` (default 60),
//! `SKILLGATE_BENCH_CONNS` (default 32) and `SKILLGATE_SOAK_SAMPLE` (seconds between memory
//! samples, default 10) change the run. It prints one line per sample and a verdict, and exits 1
//! when a request failed or memory grew past the limit.

mod common;

use std::net::SocketAddr;
use std::process::{Child, Command, ExitCode, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use common::conn::Conn;
use common::{env_or, rss_kib};

/// What each connection sends in turn: a markdown skill and a sandboxed `.skill.js`.
const REQUESTS: [(&str, &str); 2] = [
    ("/invoke/hello", r#"{"name":"soak"}"#),
    ("/invoke/count", r#"{"text":"one two three four"}"#),
];

/// Memory growth allowed after the warm-up.
const MAX_GROWTH: f64 = 0.05;

fn project() -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("temp dir");
    let skills = dir.path().join("skills");
    std::fs::create_dir_all(&skills).unwrap();
    std::fs::write(
        skills.join("hello.skill.md"),
        "---\nname: hello\nmetadata:\n  params:\n    type: object\n    properties:\n      name: { type: string }\n---\nHello, :arg[name]!\n",
    )
    .unwrap();
    std::fs::write(
        skills.join("count.skill.js"),
        "export const frontmatter = { name: 'count' };\n\
         export default async (ctx, args) => ({ words: args.text.split(/\\s+/).filter(Boolean).length });\n",
    )
    .unwrap();
    dir
}

/// A `serve` process and where it listens.
struct Replica {
    child: Child,
    addr: SocketAddr,
}

impl Replica {
    fn start(project: &std::path::Path, store: &str) -> Replica {
        let mut child = Command::new(env!("CARGO_BIN_EXE_skillgate"))
            .args(["--project"])
            .arg(project)
            .args(["--store", store, "serve", "--bind", "127.0.0.1:0"])
            .args(["--watch", "false"])
            // Every connection comes from 127.0.0.1: the per-address limit would refuse most.
            .env("SKILLGATE_RATE_LIMIT", "0")
            .env_remove("RUST_LOG")
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start skillgate serve");
        let addr = common::listen_addr(&mut child).parse().unwrap();
        Replica { child, addr }
    }
}

impl Drop for Replica {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The counts the load keeps while it runs.
#[derive(Default)]
struct Counts {
    ok: AtomicU64,
    failed: AtomicU64,
}

/// `conns` connections spread over `addrs`, each sending back to back for `secs`: requests/s.
async fn saturate(addrs: &[SocketAddr], conns: usize, secs: u64) -> f64 {
    let counts = Arc::new(Counts::default());
    let end = Instant::now() + Duration::from_secs(secs);
    let tasks: Vec<_> = (0..conns)
        .map(|i| {
            let (addr, counts) = (addrs[i % addrs.len()], counts.clone());
            tokio::spawn(async move {
                let mut conn = Conn::open(addr, &REQUESTS).await.expect("connect");
                while Instant::now() < end {
                    match conn.round_trip().await {
                        Ok(_) => counts.ok.fetch_add(1, Ordering::Relaxed),
                        Err(_) => counts.failed.fetch_add(1, Ordering::Relaxed),
                    };
                }
            })
        })
        .collect();
    let started = Instant::now();
    for task in tasks {
        task.await.unwrap();
    }
    counts.ok.load(Ordering::Relaxed) as f64 / started.elapsed().as_secs_f64()
}

/// A fixed total `rate` over `conns` connections until `end`; a failed request reconnects.
fn paced(
    addrs: &[SocketAddr],
    conns: usize,
    rate: f64,
    end: Instant,
    counts: &Arc<Counts>,
) -> Vec<tokio::task::JoinHandle<()>> {
    let per_conn = Duration::from_secs_f64(conns as f64 / rate);
    let start = Instant::now();
    (0..conns)
        .map(|i| {
            let (addr, counts) = (addrs[i % addrs.len()], counts.clone());
            tokio::spawn(async move {
                let mut conn = Conn::open(addr, &REQUESTS).await.expect("connect");
                let mut due = start + per_conn.mul_f64(i as f64 / conns as f64);
                while due < end {
                    tokio::time::sleep_until(due.into()).await;
                    match conn.round_trip().await {
                        Ok(_) => {
                            counts.ok.fetch_add(1, Ordering::Relaxed);
                        }
                        Err(error) => {
                            if counts.failed.fetch_add(1, Ordering::Relaxed) < 5 {
                                eprintln!("request failed: {error}");
                            }
                            if let Ok(again) = Conn::open(addr, &REQUESTS).await {
                                conn = again;
                            }
                        }
                    }
                    due += per_conn;
                }
            })
        })
        .collect()
}

fn main() -> ExitCode {
    // `cargo bench` passes `--bench`; a filter argument of another bench skips this one.
    if std::env::args()
        .skip(1)
        .any(|a| !a.starts_with('-') && !"soak".contains(&a))
    {
        return ExitCode::SUCCESS;
    }
    let secs = env_or("SKILLGATE_SOAK_SECS", 600);
    let warmup = env_or("SKILLGATE_SOAK_WARMUP", 60).min(secs);
    let every = env_or("SKILLGATE_SOAK_SAMPLE", 10).max(1);
    let conns = env_or("SKILLGATE_BENCH_CONNS", 32) as usize;
    let project = project();
    let runtime = common::runtime();
    // Postgres: a database of its own (what `--store` takes), dropped afterwards.
    let database = std::env::var("DATABASE_URL")
        .ok()
        .filter(|u| !u.is_empty())
        .map(|url| (url, format!("skillgate_soak_{}", std::process::id())));
    let (store, label) = match &database {
        Some((url, name)) => {
            runtime.block_on(admin(url, &format!("CREATE DATABASE {name}")));
            let (base, _) = url.rsplit_once('/').expect("DATABASE_URL names a database");
            (format!("{base}/{name}"), "Postgres".to_string())
        }
        None => (
            format!("sqlite://{}", project.path().join("events.db").display()),
            "SQLite (one file, two processes)".to_string(),
        ),
    };
    let replicas = [
        Replica::start(project.path(), &store),
        Replica::start(project.path(), &store),
    ];
    let addrs: Vec<SocketAddr> = replicas.iter().map(|r| r.addr).collect();
    let pids: Vec<u32> = replicas.iter().map(|r| r.child.id()).collect();
    let verdict = runtime.block_on(async {
        saturate(&addrs, conns, 2).await; // warm the caches and pools
        let max = saturate(&addrs, conns, 10).await;
        let rate = max / 2.0;
        println!(
            "soak: two replicas on {label}, max {max:.0} req/s over {conns} connections; \
             {rate:.0} req/s for {secs} s, warm-up {warmup} s, memory every {every} s"
        );
        println!(
            "{:>6} {:>9} {:>7} {:>12} {:>12}",
            "t s", "req/s", "failed", "rss a KiB", "rss b KiB"
        );
        let counts = Arc::new(Counts::default());
        let started = Instant::now();
        let end = started + Duration::from_secs(secs);
        let load = paced(&addrs, conns, rate, end, &counts);
        let mut samples: Vec<(u64, Vec<u64>)> = Vec::new();
        let mut last_ok = 0;
        let mut t = 0;
        while t < secs {
            t = (t + every).min(secs);
            tokio::time::sleep_until((started + Duration::from_secs(t)).into()).await;
            let ok = counts.ok.load(Ordering::Relaxed);
            let rss: Vec<u64> = pids.iter().map(|&p| rss_kib(p)).collect();
            println!(
                "{t:>6} {:>9.0} {:>7} {:>12} {:>12}",
                (ok - last_ok) as f64 / every as f64,
                counts.failed.load(Ordering::Relaxed),
                rss[0],
                rss[1]
            );
            last_ok = ok;
            samples.push((t, rss));
        }
        for task in load {
            task.await.unwrap();
        }
        let ok = counts.ok.load(Ordering::Relaxed);
        let failed = counts.failed.load(Ordering::Relaxed);
        // Growth from the first sample at or after the warm-up to the last.
        let base = samples
            .iter()
            .find(|(t, _)| *t >= warmup)
            .unwrap_or(&samples[0])
            .1
            .clone();
        let last = samples.last().unwrap().1.clone();
        let mut good = failed == 0;
        println!(
            "{ok} requests answered, {failed} failed, {:.0} req/s on average",
            ok as f64 / secs as f64
        );
        let growth = |b: u64, l: u64| (l as f64 - b as f64) / b.max(1) as f64;
        common::report::record(
            "soak",
            &label,
            serde_json::json!({
                "max_req_per_s": max,
                "req_per_s": rate,
                "secs": secs,
                "answered": ok,
                "failed": failed,
                "rss_after_warmup_mib": base.iter().map(|k| *k as f64 / 1024.0).collect::<Vec<_>>(),
                "rss_at_end_mib": last.iter().map(|k| *k as f64 / 1024.0).collect::<Vec<_>>(),
                "rss_growth_pct": base.iter().zip(&last).map(|(b, l)| 100.0 * growth(*b, *l)).collect::<Vec<_>>(),
            }),
        );
        for (i, (b, l)) in base.iter().zip(&last).enumerate() {
            let growth = growth(*b, *l);
            println!(
                "replica {}: {b} KiB after warm-up, {l} KiB at the end: {:+.1}% (limit +{:.0}%)",
                ["a", "b"][i],
                growth * 100.0,
                MAX_GROWTH * 100.0
            );
            good &= growth <= MAX_GROWTH;
        }
        good
    });
    drop(replicas);
    if let Some((url, name)) = &database {
        runtime.block_on(admin(
            url,
            &format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)"),
        ));
    }
    if verdict {
        println!("soak: passed");
        ExitCode::SUCCESS
    } else {
        println!("soak: FAILED");
        ExitCode::FAILURE
    }
}

/// Runs one statement on the database `url` names.
async fn admin(url: &str, statement: &str) {
    let pool = sqlx::PgPool::connect(url)
        .await
        .expect("connect to DATABASE_URL");
    sqlx::query(statement)
        .execute(&pool)
        .await
        .unwrap_or_else(|e| panic!("{statement}: {e}"));
    pool.close().await;
}
