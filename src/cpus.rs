//! Which CPUs the background threads run on (the sandbox threads, which also run the kernel work
//! scripts start, and the embedded SQLite store's writer), so that the threads serving the doors'
//! I/O keep a core the background work never takes.
//!
//! Why: a lower scheduling priority (`SKILLGATE_SANDBOX_NICE`) is not enough on its own. Linux
//! does not always preempt a running lower-priority thread when an I/O thread wakes, so an I/O
//! thread that shares a core with a busy script waits for that script's slice (1-3 ms each
//! time, measured with `perf sched`); a client's answer waits with it. Kept off one core, the
//! background threads leave that core to the I/O threads (which may still run on every core).
//!
//! `SKILLGATE_SANDBOX_CPUS`, read once:
//! - `auto` (the default): every CPU the process may run on but the first, when it may run on
//!   two or more; otherwise every CPU.
//! - `all`: every CPU the process may run on (no confinement).
//! - a CPU list as `taskset -c` takes it, such as `1-3,6`; CPUs the process may not run on are
//!   left out, and if none is left the threads are not confined.
//!
//! Linux only; elsewhere the setting is read and ignored. Confining is best effort: a refusal is
//! logged, and the thread runs where it may.

use std::sync::OnceLock;

/// The environment variable naming the CPUs the background threads run on.
pub const CPUS_VAR: &str = "SKILLGATE_SANDBOX_CPUS";

/// Where the background threads run: a set of CPU numbers, or anywhere.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Placement {
    /// Not confined.
    Anywhere,
    /// Confined to these CPUs (sorted, no duplicates).
    Only(Vec<usize>),
}

/// What the setting asks for, before it meets the CPUs the process may run on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Setting {
    /// Every allowed CPU but the first, when there are two or more.
    Auto,
    /// No confinement.
    All,
    /// These CPUs.
    List(Vec<usize>),
}

/// The largest CPU number a list may name.
const MAX_CPU: usize = 4095;

/// Reads the setting's text: `auto`, `all`, or a CPU list (`0`, `1-3,6`).
pub fn parse(text: &str) -> Result<Setting, String> {
    let text = text.trim();
    match text {
        "" | "auto" => return Ok(Setting::Auto),
        "all" => return Ok(Setting::All),
        _ => {}
    }
    let mut cpus = Vec::new();
    for part in text.split(',') {
        let part = part.trim();
        let number = |s: &str| {
            s.trim()
                .parse::<usize>()
                .ok()
                .filter(|n| *n <= MAX_CPU)
                .ok_or_else(|| format!("`{s}` in `{text}` is not a CPU number from 0 to {MAX_CPU}"))
        };
        match part.split_once('-') {
            Some((from, to)) => {
                let (from, to) = (number(from)?, number(to)?);
                if from > to {
                    return Err(format!("the range `{part}` in `{text}` runs backwards"));
                }
                cpus.extend(from..=to);
            }
            None => cpus.push(number(part)?),
        }
    }
    cpus.sort_unstable();
    cpus.dedup();
    Ok(Setting::List(cpus))
}

/// Where the background threads run, given the setting and the CPUs the process may run on.
pub fn placement(setting: &Setting, allowed: &[usize]) -> Placement {
    let chosen: Vec<usize> = match setting {
        Setting::All => return Placement::Anywhere,
        Setting::Auto if allowed.len() < 2 => return Placement::Anywhere,
        Setting::Auto => allowed[1..].to_vec(),
        Setting::List(list) => list
            .iter()
            .copied()
            .filter(|cpu| allowed.contains(cpu))
            .collect(),
    };
    if chosen.is_empty() || chosen.len() == allowed.len() {
        Placement::Anywhere
    } else {
        Placement::Only(chosen)
    }
}

/// Where this process's background threads run: the setting (read once) against the CPUs the
/// process's main thread may run on.
pub fn current() -> &'static Placement {
    static PLACEMENT: OnceLock<Placement> = OnceLock::new();
    PLACEMENT.get_or_init(|| {
        let setting = match std::env::var(CPUS_VAR) {
            Err(_) => Setting::Auto,
            Ok(text) => parse(&text).unwrap_or_else(|err| {
                tracing::warn!("{CPUS_VAR}: {err}; using `auto`");
                Setting::Auto
            }),
        };
        let Some(allowed) = os::allowed() else {
            return Placement::Anywhere;
        };
        placement(&setting, &allowed)
    })
}

/// Confines the calling thread to [`current`]'s CPUs (called as a background thread starts).
pub fn confine_this_thread() {
    if let Placement::Only(cpus) = current() {
        os::confine(None, cpus);
    }
}

/// Confines every thread of this process whose name starts with `prefix` (threads another
/// crate starts, such as the SQLite driver's worker, found by the name it was given).
pub fn confine_threads_named(prefix: &str) {
    if let Placement::Only(cpus) = current() {
        for tid in os::threads_named(prefix) {
            os::confine(Some(tid), cpus);
        }
    }
}

/// The ids of this process's threads whose name starts with `prefix` (none where that cannot
/// be read).
pub fn threads_named(prefix: &str) -> Vec<i32> {
    os::threads_named(prefix)
}

/// The CPUs thread `tid` (the calling thread when `None`) may run on; `None` where that cannot
/// be read.
pub fn cpus_of(tid: Option<i32>) -> Option<Vec<usize>> {
    os::cpus_of(tid)
}

/// The CPUs a background thread is expected on: [`current`]'s, or every CPU the process may
/// run on when not confined (for tests).
pub fn expected() -> Option<Vec<usize>> {
    match current() {
        Placement::Only(cpus) => Some(cpus.clone()),
        Placement::Anywhere => os::allowed(),
    }
}

#[cfg(target_os = "linux")]
mod os {
    use rustix::process::{Pid, getpid};
    use rustix::thread::{CpuSet, sched_getaffinity, sched_setaffinity};

    /// The CPUs the process's main thread may run on.
    pub(super) fn allowed() -> Option<Vec<usize>> {
        cpus_of(Some(getpid().as_raw_nonzero().get()))
    }

    pub(super) fn cpus_of(tid: Option<i32>) -> Option<Vec<usize>> {
        let set = sched_getaffinity(tid.and_then(Pid::from_raw)).ok()?;
        Some(
            (0..CpuSet::MAX_CPU)
                .filter(|cpu| set.is_set(*cpu))
                .collect(),
        )
    }

    /// Confines thread `tid` (the calling thread when `None`) to `cpus`.
    pub(super) fn confine(tid: Option<i32>, cpus: &[usize]) {
        let mut set = CpuSet::new();
        for cpu in cpus {
            set.set(*cpu);
        }
        let pid = tid.and_then(Pid::from_raw);
        if let Err(err) = sched_setaffinity(pid, &set) {
            tracing::debug!(%err, ?tid, "the thread runs on every CPU");
        }
    }

    /// The ids of this process's threads whose name starts with `prefix`.
    pub(super) fn threads_named(prefix: &str) -> Vec<i32> {
        let Ok(tasks) = std::fs::read_dir("/proc/self/task") else {
            return Vec::new();
        };
        tasks
            .flatten()
            .filter(|task| {
                std::fs::read_to_string(task.path().join("comm"))
                    .is_ok_and(|name| name.starts_with(prefix))
            })
            .filter_map(|task| task.file_name().to_str()?.parse().ok())
            .collect()
    }
}

#[cfg(not(target_os = "linux"))]
mod os {
    pub(super) fn allowed() -> Option<Vec<usize>> {
        None
    }

    pub(super) fn cpus_of(_tid: Option<i32>) -> Option<Vec<usize>> {
        None
    }

    pub(super) fn confine(_tid: Option<i32>, _cpus: &[usize]) {}

    pub(super) fn threads_named(_prefix: &str) -> Vec<i32> {
        Vec::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cpu_list_reads_as_taskset_writes_it() {
        assert_eq!(parse("1-3,6").unwrap(), Setting::List(vec![1, 2, 3, 6]));
        assert_eq!(parse(" 2 , 0 ,2").unwrap(), Setting::List(vec![0, 2]));
        assert_eq!(parse("auto").unwrap(), Setting::Auto);
        assert_eq!(parse("").unwrap(), Setting::Auto);
        assert_eq!(parse("all").unwrap(), Setting::All);
    }

    #[test]
    fn a_bad_cpu_list_names_the_part_at_fault() {
        let err = parse("1,x").unwrap_err();
        assert!(err.contains("`x`"), "{err}");
        let err = parse("3-1").unwrap_err();
        assert!(err.contains("`3-1`") && err.contains("backwards"), "{err}");
        assert!(parse("99999").is_err());
    }

    #[test]
    fn auto_leaves_the_first_allowed_cpu_to_the_io_threads() {
        assert_eq!(placement(&Setting::Auto, &[0, 1]), Placement::Only(vec![1]));
        assert_eq!(
            placement(&Setting::Auto, &[2, 5, 7]),
            Placement::Only(vec![5, 7])
        );
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn by_default_the_background_threads_leave_the_first_cpu_to_io() {
        if std::env::var(CPUS_VAR).is_ok() {
            return;
        }
        let allowed = os::allowed().unwrap();
        if allowed.len() >= 2 {
            assert_eq!(current(), &Placement::Only(allowed[1..].to_vec()));
        } else {
            assert_eq!(current(), &Placement::Anywhere);
        }
    }

    #[test]
    fn auto_on_one_cpu_confines_nothing() {
        assert_eq!(placement(&Setting::Auto, &[3]), Placement::Anywhere);
    }

    #[test]
    fn a_list_keeps_only_the_cpus_the_process_may_use() {
        assert_eq!(
            placement(&Setting::List(vec![1, 9]), &[0, 1, 2]),
            Placement::Only(vec![1])
        );
        // Nothing left, or everything: not confined.
        assert_eq!(
            placement(&Setting::List(vec![9]), &[0, 1]),
            Placement::Anywhere
        );
        assert_eq!(
            placement(&Setting::List(vec![0, 1]), &[0, 1]),
            Placement::Anywhere
        );
        assert_eq!(placement(&Setting::All, &[0, 1]), Placement::Anywhere);
    }
}
