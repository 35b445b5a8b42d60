//! Sandbox limits: what `metadata.sandbox` may set (`memory`, `stack`, `time`, `wall`), their
//! units, defaults and ceilings, the errors a limit hit produces, and the meter that measures
//! execution time for QuickJS's interrupt handler.
//!
//! | key | unit of a bare number | default | ceiling |
//! |---|---|---|---|
//! | `memory` | MiB (or `"512KiB"`, `"64MiB"`, `"1GiB"`) | 32 MiB | 4 GiB |
//! | `stack` | KiB (or `"512KiB"`, `"1MiB"`) | 256 KiB | 1 MiB |
//! | `time` | ms (or `"500ms"`, `"2s"`, `"1m"`) | 5000 ms | 1 h |
//! | `wall` | ms (or `"500ms"`, `"2s"`, `"1m"`) | 300000 ms | 24 h |
//!
//! `time` is the time the sandbox itself spends running (its JavaScript and the synchronous part
//! of the bridge calls it makes), measured per thread so a nested sandbox's time is not charged
//! to its caller (the invocations a script awaits run elsewhere, see `pool`). `wall` is the
//! elapsed time of the whole call, waiting included, so it also ends code parked on a promise
//! that never settles. The stack ceiling stays well under the 4 MiB of a sandbox thread: QuickJS's
//! own check is what keeps scripts off the native stack's end.

use std::cell::RefCell;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context as TaskContext, Poll};
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use crate::context::Context;
use crate::error::{ErrorKind, Result, SkillError};

const KIB: usize = 1024;
const MIB: usize = 1024 * 1024;

/// The limits one sandbox call runs under.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Heap ceiling of the QuickJS runtime, in bytes.
    pub memory: usize,
    /// Native stack QuickJS may use, in bytes.
    pub stack: usize,
    /// Running time of the call.
    pub time: Duration,
    /// Elapsed time of the call, waiting included.
    pub wall: Duration,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            memory: 32 * MIB,
            stack: 256 * KIB,
            time: Duration::from_millis(5_000),
            wall: Duration::from_millis(300_000),
        }
    }
}

/// Which limit stopped a call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Limit {
    Memory,
    Stack,
    Time,
    Wall,
}

impl Limits {
    /// Reads `metadata.sandbox` (absent or null: the defaults). Keys left out keep their default.
    pub fn from_metadata(value: Option<&Value>) -> Result<Limits> {
        let mut limits = Limits::default();
        let map = match value {
            None | Some(Value::Null) => return Ok(limits),
            Some(Value::Object(map)) => map,
            Some(other) => {
                return Err(SkillError::config(format!(
                    "metadata.sandbox must be a mapping of memory, stack, time, wall; found {other}"
                )));
            }
        };
        for (key, value) in map {
            let what = format!("metadata.sandbox.{key}");
            match key.as_str() {
                "memory" => limits.memory = bytes(&what, value, MIB, 4096 * MIB)?,
                "stack" => limits.stack = bytes(&what, value, KIB, MIB)?,
                "time" => limits.time = millis(&what, value, 3_600_000)?,
                "wall" => limits.wall = millis(&what, value, 86_400_000)?,
                other => {
                    return Err(SkillError::config(format!(
                        "metadata.sandbox has no key `{other}` (memory, stack, time, wall)"
                    )));
                }
            }
        }
        Ok(limits)
    }

    /// The error for a limit hit: which limit, and its value with its unit.
    pub fn exceeded(&self, limit: Limit) -> SkillError {
        let (name, text, value, unit) = match limit {
            Limit::Memory => ("memory", "memory limit", self.memory, "bytes"),
            Limit::Stack => ("stack", "stack limit", self.stack, "bytes"),
            Limit::Time => ("time", "time limit", millis_of(self.time), "ms"),
            Limit::Wall => ("wall", "wall-clock limit", millis_of(self.wall), "ms"),
        };
        let shown = match unit {
            "bytes" => show_bytes(value),
            _ => format!("{value} ms"),
        };
        let hint = match limit {
            Limit::Wall => " (the script was still running or waiting)",
            _ => "",
        };
        SkillError::new(
            ErrorKind::Failed,
            format!("sandbox {text} of {shown} exceeded{hint}"),
        )
        .with_data(json!({ "limit": name, "value": value, "unit": unit }))
    }
}

fn millis_of(d: Duration) -> usize {
    usize::try_from(d.as_millis()).unwrap_or(usize::MAX)
}

fn show_bytes(n: usize) -> String {
    if n.is_multiple_of(MIB) {
        format!("{} MiB", n / MIB)
    } else if n.is_multiple_of(KIB) {
        format!("{} KiB", n / KIB)
    } else {
        format!("{n} bytes")
    }
}

/// A size: a bare number counts in `unit`; a string carries its own (`KiB`, `MiB`, `GiB`).
fn bytes(what: &str, value: &Value, unit: usize, max: usize) -> Result<usize> {
    let n = match value {
        Value::Number(n) => n.as_f64().map(|f| f * unit as f64),
        Value::String(s) => {
            let s = s.trim();
            let (digits, scale) = [("KiB", KIB), ("MiB", MIB), ("GiB", 1024 * MIB), ("B", 1)]
                .iter()
                .find_map(|(suffix, scale)| s.strip_suffix(suffix).map(|d| (d.trim(), *scale)))
                .unwrap_or((s, unit));
            digits.parse::<f64>().ok().map(|f| f * scale as f64)
        }
        _ => None,
    };
    let unit_name = if unit == MIB { "MiB" } else { "KiB" };
    match n {
        Some(n) if n >= 1.0 && n <= max as f64 => Ok(n as usize),
        Some(_) => Err(SkillError::config(format!(
            "{what} must be more than 0 and at most {}",
            show_bytes(max)
        ))),
        None => Err(SkillError::config(format!(
            "{what} must be a number of {unit_name} or a size such as \"64MiB\", found {value}"
        ))),
    }
}

/// A duration: a bare number counts in milliseconds; a string carries `ms`, `s` or `m`.
pub(crate) fn millis(what: &str, value: &Value, max: u64) -> Result<Duration> {
    let n = match value {
        Value::Number(n) => n.as_f64(),
        Value::String(s) => {
            let s = s.trim();
            [("ms", 1.0), ("s", 1000.0), ("m", 60_000.0)]
                .iter()
                .find_map(|(suffix, scale)| {
                    let digits = s.strip_suffix(suffix)?.trim();
                    digits.parse::<f64>().ok().map(|f| f * scale)
                })
                .or_else(|| s.parse::<f64>().ok())
        }
        _ => None,
    };
    match n {
        Some(n) if n >= 1.0 && n <= max as f64 => Ok(Duration::from_millis(n as u64)),
        Some(_) => Err(SkillError::config(format!(
            "{what} must be more than 0 and at most {max} ms"
        ))),
        None => Err(SkillError::config(format!(
            "{what} must be a number of milliseconds or a duration such as \"2s\", found {value}"
        ))),
    }
}

/// Why a call was stopped from outside the script.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Stop {
    Time,
    Wall,
    Aborted,
    /// The caller stopped waiting (its future was dropped).
    Gone,
    /// The run the call belongs to went over its budget: it has failed, so its scripts stop
    /// rather than go on starting work that can only fail (and hold memory meanwhile).
    OverBudget,
}

/// Measures one call: running time (excluding nested sandboxes), the wall-clock deadline, the
/// served context's abort signal, its run's budget and whether the caller still waits. Once it
/// has decided to stop, it keeps saying so, so no more JavaScript runs in that call.
pub(crate) struct Meter {
    pub(crate) limits: Limits,
    pub(crate) deadline: Instant,
    served: Context,
    gone: CancellationToken,
    state: Mutex<MeterState>,
}

struct MeterState {
    spent: Duration,
    since: Option<Instant>,
    stop: Option<Stop>,
}

impl Meter {
    /// `gone` is cancelled when the caller stops waiting for the call.
    pub(crate) fn new(limits: Limits, served: Context, gone: CancellationToken) -> Meter {
        let now = Instant::now();
        Meter {
            deadline: now.checked_add(limits.wall).unwrap_or(now),
            limits,
            served,
            gone,
            state: Mutex::new(MeterState {
                spent: Duration::ZERO,
                since: None,
                stop: None,
            }),
        }
    }

    /// The interrupt handler's question: should the running JavaScript be stopped now?
    pub(crate) fn should_interrupt(&self) -> bool {
        let now = Instant::now();
        let mut state = self.state.lock();
        if state.stop.is_none() {
            let spent = state.spent + state.since.map_or(Duration::ZERO, |t| now - t);
            if spent > self.limits.time {
                state.stop = Some(Stop::Time);
            } else if now >= self.deadline {
                state.stop = Some(Stop::Wall);
            } else if self.served.aborted().is_some() {
                state.stop = Some(Stop::Aborted);
            } else if self.gone.is_cancelled() {
                state.stop = Some(Stop::Gone);
            } else if self.served.budget().over().is_some() {
                state.stop = Some(Stop::OverBudget);
            }
        }
        state.stop.is_some()
    }

    pub(crate) fn stop(&self, why: Stop) {
        self.state.lock().stop.get_or_insert(why);
    }

    pub(crate) fn stopped(&self) -> Option<Stop> {
        self.state.lock().stop
    }

    fn resume(&self, now: Instant) {
        self.state.lock().since = Some(now);
    }

    fn pause(&self, now: Instant) {
        let mut state = self.state.lock();
        if let Some(t) = state.since.take() {
            state.spent += now - t;
        }
    }

    /// The served context, for the abort signal.
    pub(crate) fn served(&self) -> &Context {
        &self.served
    }

    /// Cancelled when the caller stops waiting for the call.
    pub(crate) fn gone(&self) -> &CancellationToken {
        &self.gone
    }
}

thread_local! {
    /// Meters of the sandbox calls being polled on this thread, innermost last.
    static RUNNING: RefCell<Vec<Arc<Meter>>> = const { RefCell::new(Vec::new()) };
}

/// Polls `inner` with `meter` running; the meter of an enclosing sandbox call on the same thread
/// is paused meanwhile.
pub(crate) struct Metered<F> {
    inner: Pin<Box<F>>,
    meter: Arc<Meter>,
}

impl<F: Future> Metered<F> {
    pub(crate) fn new(inner: F, meter: Arc<Meter>) -> Self {
        Metered {
            inner: Box::pin(inner),
            meter,
        }
    }
}

/// Pops the meter when the poll ends, even by a panic.
struct Running;

impl Drop for Running {
    fn drop(&mut self) {
        let now = Instant::now();
        RUNNING.with(|r| {
            let mut r = r.borrow_mut();
            if let Some(m) = r.pop() {
                m.pause(now);
            }
            if let Some(outer) = r.last() {
                outer.resume(now);
            }
        });
    }
}

impl<F: Future> Future for Metered<F> {
    type Output = F::Output;

    fn poll(mut self: Pin<&mut Self>, cx: &mut TaskContext<'_>) -> Poll<F::Output> {
        let now = Instant::now();
        RUNNING.with(|r| {
            let mut r = r.borrow_mut();
            if let Some(outer) = r.last() {
                outer.pause(now);
            }
            r.push(self.meter.clone());
        });
        self.meter.resume(now);
        let _running = Running;
        self.inner.as_mut().poll(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sandbox_metadata_reads_numbers_in_their_documented_units() {
        let l = Limits::from_metadata(Some(
            &json!({"memory": 8, "stack": 128, "time": 250, "wall": 1000}),
        ))
        .unwrap();
        assert_eq!(l.memory, 8 * MIB);
        assert_eq!(l.stack, 128 * KIB);
        assert_eq!(l.time, Duration::from_millis(250));
        assert_eq!(l.wall, Duration::from_secs(1));
    }

    #[test]
    fn sandbox_metadata_reads_strings_with_units() {
        let l = Limits::from_metadata(Some(
            &json!({"memory": "512KiB", "stack": "1MiB", "time": "2s", "wall": "1m"}),
        ))
        .unwrap();
        assert_eq!(l.memory, 512 * KIB);
        assert_eq!(l.stack, MIB);
        assert_eq!(l.time, Duration::from_secs(2));
        assert_eq!(l.wall, Duration::from_secs(60));
    }

    #[test]
    fn missing_sandbox_metadata_gives_the_safe_defaults() {
        assert_eq!(Limits::from_metadata(None).unwrap(), Limits::default());
        let d = Limits::default();
        assert_eq!(
            (d.memory, d.stack, d.time, d.wall),
            (
                32 * MIB,
                256 * KIB,
                Duration::from_secs(5),
                Duration::from_secs(300)
            )
        );
    }

    #[test]
    fn sandbox_metadata_refuses_unknown_keys_zero_and_values_over_the_ceiling() {
        for bad in [
            json!({"heap": 3}),
            json!({"memory": 0}),
            json!({"stack": 4096}),
            json!({"time": "forever"}),
            json!({"wall": -5}),
            json!("big"),
        ] {
            let err = Limits::from_metadata(Some(&bad)).unwrap_err();
            assert_eq!(err.kind(), ErrorKind::Config, "{bad}: {err}");
            assert!(err.message().contains("sandbox"), "{err}");
        }
    }

    #[test]
    fn a_limit_error_names_the_limit_and_its_value() {
        let l = Limits::default();
        assert_eq!(
            l.exceeded(Limit::Memory).message(),
            "sandbox memory limit of 32 MiB exceeded"
        );
        assert_eq!(
            l.exceeded(Limit::Stack).message(),
            "sandbox stack limit of 256 KiB exceeded"
        );
        assert_eq!(
            l.exceeded(Limit::Time).message(),
            "sandbox time limit of 5000 ms exceeded"
        );
        assert!(
            l.exceeded(Limit::Wall)
                .message()
                .starts_with("sandbox wall-clock limit of 300000 ms exceeded")
        );
        assert_eq!(l.exceeded(Limit::Time).data().unwrap()["limit"], "time");
    }
}
