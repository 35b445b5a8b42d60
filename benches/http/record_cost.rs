//! What the runs record costs a request, measured in one process: the record turned on and off
//! every second under the same load, and the CPU time of the server's threads (read from
//! `/proc/self/task/*/schedstat`, so the load generator's threads are left out) divided by the
//! requests answered in each window, in all and split between the doors' threads and the
//! store's. Alternating in short windows puts both states under the same noise of a shared
//! machine, which separate runs do not.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use skillgate::events::runs::{RecordConfig, Recorder};

/// How long each state lasts, and how much of its start is left out (the writer still writes
/// the runs of the window before).
const WINDOW: Duration = Duration::from_secs(1);
const SETTLE: Duration = Duration::from_millis(250);

/// The CPU time so far of the server's threads, in ns: the runtime's workers (the doors'
/// threads, where a run is recorded into its buffer), and the SQLite store's threads (where the
/// record's batches are written).
#[derive(Debug, Clone, Copy, Default)]
struct ServerCpu {
    doors: u64,
    store: u64,
}

impl ServerCpu {
    fn now() -> ServerCpu {
        let mut cpu = ServerCpu::default();
        let Ok(tasks) = std::fs::read_dir("/proc/self/task") else {
            return cpu;
        };
        for task in tasks.flatten() {
            let Ok(name) = std::fs::read_to_string(task.path().join("comm")) else {
                continue;
            };
            let name = name.trim();
            let group = if name.starts_with("tokio-rt-worker") {
                &mut cpu.doors
            } else if name.starts_with("skillgate-db") || name.starts_with("skillgate-store") {
                &mut cpu.store
            } else {
                continue;
            };
            *group += std::fs::read_to_string(task.path().join("schedstat"))
                .ok()
                .and_then(|stat| stat.split_whitespace().next()?.parse::<u64>().ok())
                .unwrap_or(0);
        }
        cpu
    }
}

/// One window's figures: the server's CPU time a request (µs) in all, on the doors' threads
/// and on the store's, and the requests answered a second.
#[derive(Debug, Clone, Copy)]
struct Window {
    all: f64,
    doors: f64,
    store: f64,
    rate: f64,
}

/// Turns the record on and off each [`WINDOW`] for `secs`, and prints the server's CPU time
/// per request in each state (the median of its windows) and what recording adds.
pub async fn alternate(runs: &Recorder, answered: &AtomicU64, secs: u64) {
    let mut on = Vec::new();
    let mut off = Vec::new();
    let end = Instant::now() + Duration::from_secs(secs) - WINDOW;
    let mut recording = false;
    while Instant::now() < end {
        recording = !recording;
        runs.configure(recording.then(RecordConfig::default));
        tokio::time::sleep(SETTLE).await;
        let (cpu, requests, at) = (
            ServerCpu::now(),
            answered.load(Ordering::Relaxed),
            Instant::now(),
        );
        tokio::time::sleep(WINDOW - SETTLE).await;
        let requests = answered.load(Ordering::Relaxed) - requests;
        if requests == 0 {
            continue;
        }
        let spent = ServerCpu::now();
        let per_request = |ns: u64| ns as f64 / 1000.0 / requests as f64;
        let (doors, store) = (
            per_request(spent.doors - cpu.doors),
            per_request(spent.store - cpu.store),
        );
        let window = Window {
            all: doors + store,
            doors,
            store,
            rate: requests as f64 / at.elapsed().as_secs_f64(),
        };
        if recording { &mut on } else { &mut off }.push(window);
    }
    runs.configure(Some(RecordConfig::default()));
    runs.settled().await;
    let median = |windows: &[Window], at: fn(&Window) -> f64| {
        let mut values: Vec<f64> = windows.iter().map(at).collect();
        values.sort_by(f64::total_cmp);
        values.get(values.len() / 2).copied().unwrap_or(f64::NAN)
    };
    let figures = |windows: &[Window]| {
        (
            median(windows, |w| w.all),
            median(windows, |w| w.rate),
            median(windows, |w| w.doors),
            median(windows, |w| w.store),
        )
    };
    let (on_us, on_rate, on_doors, on_store) = figures(&on);
    let (off_us, off_rate, off_doors, off_store) = figures(&off);
    println!(
        "runs record off: {off_us:.2} us/request, {off_rate:.0} req/s (median of {} windows)",
        off.len()
    );
    println!(
        "runs record on:  {on_us:.2} us/request, {on_rate:.0} req/s (median of {} windows)",
        on.len()
    );
    println!(
        "  of which the doors' threads {off_doors:.2} -> {on_doors:.2} us, the store's {off_store:.2} -> {on_store:.2} us"
    );
    println!(
        "recording costs {:+.1}% server CPU a request, {:+.1}% requests/s; {} runs written, {} dropped",
        100.0 * (on_us / off_us - 1.0),
        100.0 * (on_rate / off_rate - 1.0),
        runs.written_total(),
        runs.dropped_total()
    );
}
