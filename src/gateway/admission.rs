//! Run admission: how many runs, and how many bytes of their args, the gateway takes at once,
//! every door together, and the reserve it keeps for clients that are running next to nothing.
//!
//! Past either bound a new run is refused as busy at once (503 with `Retry-After` over HTTP),
//! before it takes any memory. The last eighth of each bound (at least one run, 1 KiB) is a
//! reserve: a client (its address, as [`client_of`] counts them) that already runs [`LIGHT`]
//! or more invocations is refused once its next run would reach into it, so clients that hold
//! long runs from many connections (streams nobody reads, fan-outs, large args) cannot take
//! every slot from a client that comes with one request. Runs no client address stands behind
//! (queued deliveries of webhooks, Slack and mail, bounded by their workers; retries, which
//! only an admin starts) meet only the bounds. Schedules and event handlers do not come through
//! a door and meet neither.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::Arc;

use parking_lot::Mutex;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use crate::gateway::peers::client_of;

/// Runs at once unless configured otherwise.
pub const DEFAULT_MAX_RUNS: usize = 1024;

/// Bytes of args in flight unless configured otherwise: eight invocations of the largest body
/// (1 MiB) at once, and any number of small ones. A run holds its args several times over (the
/// frame, the parsed value, the sandbox's copy, the result), so this is what bounds the memory
/// of a flood of large invocations (`benches/hostile.rs`, `ws-unread`).
pub const DEFAULT_MAX_ARG_BYTES: usize = 8 * 1024 * 1024;

/// A client running fewer invocations than this may take the reserve.
pub const LIGHT: usize = 2;

/// The semaphore counts KiB (its permits are `u32`).
const KIB: usize = 1024;

/// The bounds on runs at once, and what each client runs now.
#[derive(Debug)]
pub struct Admission {
    runs: Arc<Semaphore>,
    max_runs: usize,
    /// KiB of args.
    arg_kib: Arc<Semaphore>,
    max_arg_kib: usize,
    /// Runs going now per client address, for those a client stands behind.
    clients: Mutex<HashMap<IpAddr, usize>>,
}

/// A run let in: what it holds of the bounds, given back when dropped.
#[derive(Debug)]
pub struct Admitted {
    _run: OwnedSemaphorePermit,
    _args: OwnedSemaphorePermit,
    client: Option<(IpAddr, Arc<Admission>)>,
}

impl Admission {
    /// At most `max_runs` runs (at least 1) and `max_arg_bytes` bytes of args (at least 1 KiB)
    /// at once.
    pub fn new(max_runs: usize, max_arg_bytes: usize) -> Arc<Admission> {
        let max_runs = max_runs.max(1);
        let max_arg_kib = (max_arg_bytes / KIB).max(1);
        Arc::new(Admission {
            runs: Arc::new(Semaphore::new(max_runs)),
            max_runs,
            arg_kib: Arc::new(Semaphore::new(max_arg_kib)),
            max_arg_kib,
            clients: Mutex::default(),
        })
    }

    /// Runs going now.
    pub fn runs_now(&self) -> usize {
        self.max_runs - self.runs.available_permits()
    }

    /// Lets in a run whose args are `arg_bytes` (their JSON size) for `client`, or says why
    /// not. Args count in KiB, at least one, and never more than the whole bound (a run that
    /// big waits for an empty server rather than never running).
    pub fn admit(
        self: &Arc<Self>,
        client: Option<IpAddr>,
        arg_bytes: usize,
    ) -> Result<Admitted, String> {
        let kib = arg_bytes.div_ceil(KIB).clamp(1, self.max_arg_kib);
        // Taken first: past a bound itself, the bound says so; and what is left after is
        // exact, whoever else takes room meanwhile.
        let (run, args) = self.take(kib)?;
        let Some(client) = client.map(client_of) else {
            return Ok(Admitted {
                _run: run,
                _args: args,
                client: None,
            });
        };
        // Held while the client's count is read and raised, so two runs of one client cannot
        // both pass as light.
        let mut clients = self.clients.lock();
        let running = clients.get(&client).copied().unwrap_or(0);
        if running >= LIGHT
            && (self.runs.available_permits() < self.max_runs.div_ceil(8)
                || self.arg_kib.available_permits() < self.max_arg_kib.div_ceil(8))
        {
            drop((run, args));
            return Err(format!(
                "the server is nearly full ({} of {} invocations running, {} of {} of args) and this client already runs {running}: the rest is kept for clients that run fewer than {LIGHT}; try again shortly",
                self.runs_now(),
                self.max_runs,
                size(self.max_arg_kib - self.arg_kib.available_permits()),
                size(self.max_arg_kib),
            ));
        }
        *clients.entry(client).or_insert(0) += 1;
        Ok(Admitted {
            _run: run,
            _args: args,
            client: Some((client, self.clone())),
        })
    }

    /// One run and `kib` KiB of args from the bounds.
    fn take(&self, kib: usize) -> Result<(OwnedSemaphorePermit, OwnedSemaphorePermit), String> {
        let run = self.runs.clone().try_acquire_owned().map_err(|_| {
            format!(
                "the server is running {} invocations, as many as it takes at once; try again shortly (`--max-runs`)",
                self.max_runs
            )
        })?;
        let args = self
            .arg_kib
            .clone()
            .try_acquire_many_owned(kib as u32)
            .map_err(|_| {
                format!(
                    "the server holds {} of args of running invocations, as much as it takes at once; try again shortly (`--max-args-in-flight`)",
                    size(self.max_arg_kib)
                )
            })?;
        Ok((run, args))
    }
}

/// `kib` KiB for messages: in MiB from 1 MiB up, else in KiB.
fn size(kib: usize) -> String {
    if kib < KIB {
        format!("{kib} KiB")
    } else if kib.is_multiple_of(KIB) {
        format!("{} MiB", kib / KIB)
    } else {
        format!("{:.1} MiB", kib as f64 / KIB as f64)
    }
}

impl Drop for Admitted {
    fn drop(&mut self) {
        if let Some((client, admission)) = &self.client {
            let mut clients = admission.clients.lock();
            if let Some(n) = clients.get_mut(client) {
                *n -= 1;
                if *n == 0 {
                    clients.remove(client);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(text: &str) -> Option<IpAddr> {
        Some(text.parse().unwrap())
    }

    #[test]
    fn a_client_running_several_is_refused_the_last_eighth_which_a_client_running_none_gets() {
        let admission = Admission::new(16, 1024 * 1024);
        let hog: Vec<_> = (0..14)
            .map(|_| admission.admit(ip("192.0.2.1"), 10).unwrap())
            .collect();
        let refused = admission.admit(ip("192.0.2.1"), 10).unwrap_err();
        assert!(refused.contains("nearly full"), "{refused}");
        assert!(refused.contains("already runs 14"), "{refused}");
        // Another client gets the reserve, and its second run still counts as light.
        let first = admission.admit(ip("192.0.2.2"), 10).unwrap();
        let second = admission.admit(ip("192.0.2.2"), 10).unwrap();
        // The bound itself still holds for everyone.
        let full = admission.admit(ip("192.0.2.3"), 10).unwrap_err();
        assert!(full.contains("--max-runs"), "{full}");
        drop((first, second));
        assert_eq!(admission.runs_now(), 14);
        drop(hog);
        assert_eq!(admission.runs_now(), 0);
        assert!(admission.clients.lock().is_empty(), "counts are given back");
    }

    #[test]
    fn the_reserve_of_args_bytes_is_kept_from_a_client_running_several() {
        // 1 MiB of args: the reserve is its last 128 KiB.
        let admission = Admission::new(1024, 1024 * 1024);
        let _a = admission.admit(ip("192.0.2.1"), 400 * 1024).unwrap();
        let _b = admission.admit(ip("192.0.2.1"), 400 * 1024).unwrap();
        // 224 KiB left: 100 KiB more would leave less than the reserve.
        let refused = admission.admit(ip("192.0.2.1"), 100 * 1024).unwrap_err();
        assert!(refused.contains("nearly full"), "{refused}");
        assert!(admission.admit(ip("192.0.2.2"), 100 * 1024).is_ok());
    }

    #[test]
    fn a_small_bound_keeps_a_reserve_of_one_and_a_full_bound_says_so_itself() {
        let admission = Admission::new(4, 1024 * 1024);
        let _hog: Vec<_> = (0..3)
            .map(|_| admission.admit(ip("192.0.2.1"), 10).unwrap())
            .collect();
        let refused = admission.admit(ip("192.0.2.1"), 10).unwrap_err();
        assert!(refused.contains("nearly full"), "{refused}");
        let _other = admission.admit(ip("192.0.2.2"), 10).unwrap();
        let full = admission.admit(ip("192.0.2.1"), 10).unwrap_err();
        assert!(full.contains("--max-runs"), "{full}");
    }

    #[test]
    fn runs_no_client_stands_behind_meet_only_the_bounds() {
        let admission = Admission::new(8, 1024 * 1024);
        let held: Vec<_> = (0..8).map(|_| admission.admit(None, 10).unwrap()).collect();
        assert_eq!(held.len(), 8);
        assert!(
            admission
                .admit(None, 10)
                .unwrap_err()
                .contains("--max-runs")
        );
    }

    #[test]
    fn ipv6_clients_of_one_64_network_count_as_one() {
        let admission = Admission::new(16, 1024 * 1024);
        let _hog: Vec<_> = (0..14)
            .map(|i| {
                admission
                    .admit(ip(&format!("2001:db8:1:2::{i}")), 10)
                    .unwrap()
            })
            .collect();
        assert!(admission.admit(ip("2001:db8:1:2::ff"), 10).is_err());
        assert!(admission.admit(ip("2001:db8:1:3::1"), 10).is_ok());
    }
}
