//! What the runs record costs a request, measured in one process: the record turned on and off
//! every second under the same load, and the CPU time of the server's threads (read from
//! `/proc/self/task/*/schedstat`, so the load generator's threads are left out) divided by the
//! requests answered in each window. Alternating in short windows puts both states under the
//! same noise of a shared machine, which separate runs do not.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use skillgate::events::runs::{RecordConfig, Recorder};

/// How long each state lasts, and how much of its start is left out (the writer still writes
/// the runs of the window before).
const WINDOW: Duration = Duration::from_secs(1);
const SETTLE: Duration = Duration::from_millis(250);

/// The CPU time so far of the server's threads, in ns: the runtime's workers and the SQLite
/// store's threads.
fn server_cpu_ns() -> u64 {
    let Ok(tasks) = std::fs::read_dir("/proc/self/task") else {
        return 0;
    };
    tasks
        .flatten()
        .filter(|task| {
            std::fs::read_to_string(task.path().join("comm")).is_ok_and(|name| {
                let name = name.trim();
                name.starts_with("tokio-rt-worker")
                    || name.starts_with("skillgate-db")
                    || name.starts_with("skillgate-store")
            })
        })
        .filter_map(|task| std::fs::read_to_string(task.path().join("schedstat")).ok())
        .filter_map(|stat| stat.split_whitespace().next()?.parse::<u64>().ok())
        .sum()
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
            server_cpu_ns(),
            answered.load(Ordering::Relaxed),
            Instant::now(),
        );
        tokio::time::sleep(WINDOW - SETTLE).await;
        let requests = answered.load(Ordering::Relaxed) - requests;
        if requests == 0 {
            continue;
        }
        let us = (server_cpu_ns() - cpu) as f64 / 1000.0 / requests as f64;
        let rate = requests as f64 / at.elapsed().as_secs_f64();
        if recording { &mut on } else { &mut off }.push((us, rate));
    }
    runs.configure(Some(RecordConfig::default()));
    runs.settled().await;
    let median = |windows: &mut Vec<(f64, f64)>, at: fn(&(f64, f64)) -> f64| {
        let mut values: Vec<f64> = windows.iter().map(at).collect();
        values.sort_by(f64::total_cmp);
        values.get(values.len() / 2).copied().unwrap_or(f64::NAN)
    };
    let (on_us, off_us) = (median(&mut on, |w| w.0), median(&mut off, |w| w.0));
    let (on_rate, off_rate) = (median(&mut on, |w| w.1), median(&mut off, |w| w.1));
    println!(
        "runs record off: {off_us:.2} us/request, {off_rate:.0} req/s (median of {} windows)",
        off.len()
    );
    println!(
        "runs record on:  {on_us:.2} us/request, {on_rate:.0} req/s (median of {} windows)",
        on.len()
    );
    println!(
        "recording costs {:+.1}% server CPU a request, {:+.1}% requests/s; {} runs written, {} dropped",
        100.0 * (on_us / off_us - 1.0),
        100.0 * (on_rate / off_rate - 1.0),
        runs.written_total(),
        runs.dropped_total()
    );
}
