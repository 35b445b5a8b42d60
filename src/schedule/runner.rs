//! Firing schedules under `skillgate serve`: the schedules skills declare are written to the
//! store at start (and after a reload), and a loop takes each due firing with a compare-and-set
//! on the store, so on many replicas each firing runs on exactly one of them.

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use crate::context::id::now_ms;
use crate::events::runs::RunRecord;
use crate::events::{EventStore, KernelBus};
use crate::kernel::authority::{Authority, Keys};
use crate::kernel::{InvokeOptions, Kernel};
use crate::schedule::health::{Held, ScheduleHealth};
use crate::schedule::spec::{GRACE_MS, Missed, Spec};
use crate::skills::index::SearchIndex;

/// How often the store is read for due firings at most (a firing is at most this late, plus
/// the run's start).
const TICK: Duration = Duration::from_millis(200);

/// The schedules the skills of `index` declare (`metadata.schedule`: one, or a list), named
/// after their skill (`<skill>` or `<skill>#<i>`), and every mistake with its file.
pub fn declared(index: &SearchIndex, now: i64) -> (Vec<(String, Spec)>, Vec<String>) {
    let mut found = Vec::new();
    let mut errors = Vec::new();
    for tool in index.tools() {
        let Some(value) = tool.metadata.get("schedule").filter(|v| !v.is_null()) else {
            continue;
        };
        let at = format!("{}: metadata.schedule", tool.location());
        let items: Vec<(String, &Value)> = match value {
            Value::Array(list) => list
                .iter()
                .enumerate()
                .map(|(i, v)| (format!("{}#{i}", tool.name), v))
                .collect(),
            one => vec![(tool.name.clone(), one)],
        };
        for (name, item) in items {
            match Spec::parse(item, &tool.name, now) {
                Ok(mut spec) => {
                    spec.declared = true;
                    found.push((name, spec));
                }
                Err(e) => errors.push(format!("{at}: {e}")),
            }
        }
    }
    (found, errors)
}

/// The environment variable naming this release for declared schedules: a number that grows
/// with each release (a build time in milliseconds, a CI run number).
pub const RELEASE_VAR: &str = "SKILLGATE_RELEASE";

/// This process's release, which orders declared schedules across replicas: [`RELEASE_VAR`],
/// else the newest modification time (ms) of the skill files `index` was read from (a newer
/// image or checkout has newer files).
pub fn release(index: &SearchIndex) -> i64 {
    match stamp(std::env::var(RELEASE_VAR).ok().as_deref()) {
        Ok(Some(stamp)) => return stamp,
        Ok(None) => {}
        Err(why) => tracing::warn!("{why}; the skill files' newest time orders declared schedules"),
    }
    index
        .tools()
        .filter_map(|tool| match &tool.source {
            crate::skills::tool::Source::File(path) => std::fs::metadata(path).ok(),
            _ => None,
        })
        .filter_map(|meta| meta.modified().ok())
        .filter_map(|at| at.duration_since(std::time::UNIX_EPOCH).ok())
        .map(|d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
        .max()
        .unwrap_or(0)
}

/// The release [`RELEASE_VAR`] gives, if set: a whole number, or the mistake.
fn stamp(value: Option<&str>) -> Result<Option<i64>, String> {
    let Some(value) = value.map(str::trim).filter(|v| !v.is_empty()) else {
        return Ok(None);
    };
    value.parse::<i64>().map(Some).map_err(|_| {
        format!(
            "{RELEASE_VAR}=`{value}` is not a whole number (a build time in ms, a CI run number)"
        )
    })
}

/// Writes the declared schedules to the store and removes declared ones no skill declares any
/// more, unless the store holds declarations of a newer release (see [`release`]): then this
/// replica is the older one of a rolling deploy and leaves them as they are. A schedule whose
/// declaration did not change keeps its next firing (and interval grid).
pub async fn sync_declared(kernel: &Kernel) -> usize {
    let index = kernel.registry().current();
    sync_declared_as(kernel, release(&index)).await
}

/// [`sync_declared`] for release `ours`.
pub async fn sync_declared_as(kernel: &Kernel, ours: i64) -> usize {
    let store = kernel.bus().store().clone();
    let now = now_ms() as i64;
    let (mut found, errors) = declared(&kernel.registry().current(), now);
    for error in errors {
        tracing::error!("schedule not applied: {error}");
    }
    for (_, spec) in &mut found {
        spec.release = Some(ours);
    }
    let stored = match store.schedules().await {
        Ok(stored) => stored,
        Err(e) => {
            tracing::error!("cannot read the schedules: {e}");
            return 0;
        }
    };
    // What the store holds, each spec read once.
    let kept: HashMap<&str, Spec> = stored
        .iter()
        .filter_map(|s| Some((s.name.as_str(), Spec::from_stored(&s.spec).ok()?)))
        .collect();
    let newest = kept
        .values()
        .filter(|spec| spec.declared)
        .filter_map(|spec| spec.release)
        .max();
    if let Some(newer) = newest.filter(|newer| *newer > ours) {
        tracing::warn!(
            release = ours,
            stored = newer,
            "declared schedules left as a newer release declared them"
        );
        return found.len();
    }
    let names: BTreeSet<&str> = found.iter().map(|(n, _)| n.as_str()).collect();
    for (name, old) in &kept {
        if old.declared
            && !names.contains(name)
            && let Err(e) = store.delete_schedule(name).await
        {
            tracing::error!(schedule = %name, "undeclared schedule not removed: {e}");
        }
    }
    for (name, spec) in &found {
        let next = match kept.get(name.as_str()) {
            // An unchanged declaration keeps the interval anchor, next firing and runs it was
            // first stored with (only its release is brought up to date).
            Some(old) if same_declaration(old, spec) => {
                if old.release == spec.release {
                    continue;
                }
                let mut restamped = old.clone();
                restamped.release = spec.release;
                if let Err(e) = store.set_schedule_spec(name, &restamped.to_stored()).await {
                    tracing::error!(schedule = %name, "schedule not stored: {e}");
                }
                continue;
            }
            _ => spec.next_after(now),
        };
        if let Err(e) = store.put_schedule(name, &spec.to_stored(), next).await {
            tracing::error!(schedule = %name, "schedule not stored: {e}");
        }
    }
    found.len()
}

/// Equal but for the interval's anchor (which is when it was first read) and the release.
fn same_declaration(a: &Spec, b: &Spec) -> bool {
    use crate::schedule::spec::When;
    let mut b = b.clone();
    b.release = a.release;
    if let (When::Every { start: anchor, .. }, When::Every { start, .. }) = (&a.when, &mut b.when) {
        *start = *anchor;
    }
    *a == b
}

/// Fires due schedules until `stop`.
pub fn spawn(kernel: Kernel, stop: CancellationToken) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let store = kernel.bus().store().clone();
        loop {
            tokio::select! {
                () = stop.cancelled() => return,
                () = tokio::time::sleep(TICK) => {}
            }
            if let Err(e) = fire_due(&kernel, &store).await {
                tracing::warn!("schedules: {e}");
            }
        }
    })
}

/// Takes and starts every firing due now; returns how many this process took. A schedule
/// whose skill is not among the current skills is paused (not taken: a replica that has the
/// skill fires it, and it resumes here once the skill is back); it and an unreadable one are
/// logged once and shown in `/readyz` ([`ScheduleHealth`]).
pub async fn fire_due(
    kernel: &Kernel,
    store: &Arc<dyn EventStore>,
) -> Result<usize, crate::events::StoreError> {
    let now = now_ms() as i64;
    let mut taken = 0;
    let fallback = ScheduleHealth::default();
    let health = kernel
        .extension::<ScheduleHealth>()
        .map_or(&fallback, |h| h.as_ref());
    let index = kernel.registry().current();
    let schedules = store.schedules().await?;
    health.retain(&schedules.iter().map(|s| s.name.as_str()).collect());
    for stored in schedules {
        let Some(due) = stored.next_ms.filter(|due| *due <= now) else {
            continue;
        };
        let spec = match Spec::from_stored(&stored.spec) {
            Ok(spec) => spec,
            Err(e) => {
                if health.hold(&stored.name, Held::Unreadable) {
                    tracing::error!(schedule = %stored.name, "unreadable schedule, not fired: {e}");
                }
                continue;
            }
        };
        if !index.contains(&spec.reference) {
            if health.hold(&stored.name, Held::SkillMissing(spec.reference.clone())) {
                tracing::warn!(schedule = %stored.name, skill = %spec.reference, "schedule paused: its skill is not found");
            }
            continue;
        }
        if health.release(&stored.name) {
            tracing::info!(schedule = %stored.name, "schedule resumed");
        }
        let missed = now - due > GRACE_MS;
        let run = !(missed && spec.missed == Missed::Skip);
        let done = run && spec.times.is_some_and(|t| stored.runs + 1 >= t);
        // Missed slots collapse into this one: the next firing is the first after now.
        let next = if done { None } else { spec.next_after(now) };
        if !store.take_firing(&stored.name, due, next, run).await? {
            continue; // another replica took it
        }
        if !run {
            tracing::info!(schedule = %stored.name, late_ms = now - due, "missed firing skipped");
            continue;
        }
        taken += 1;
        let kernel = kernel.clone();
        let name = stored.name.clone();
        let firing = Firing {
            name,
            due,
            now,
            missed,
        };
        tokio::spawn(async move {
            if let Err(e) = run_firing(&kernel, &spec, &firing).await {
                tracing::warn!(schedule = %firing.name, skill = %spec.reference, "scheduled run failed: {e}");
            }
        });
    }
    Ok(taken)
}

/// One firing of a schedule: its name and when it was due, fired and whether it was late.
#[derive(Debug, Clone)]
pub struct Firing {
    pub name: String,
    pub due: i64,
    pub now: i64,
    pub missed: bool,
}

/// Runs one firing of `spec` as its principal's call (a key's with the key's grants of now):
/// the ref is named under those grants and the stored args are data. A key that no longer
/// exists pauses its schedules (`key-revoked`): the firing is refused.
pub async fn run_firing(
    kernel: &Kernel,
    spec: &Spec,
    firing: &Firing,
) -> crate::error::Result<crate::kernel::invoke::Output> {
    let id = crate::context::id::next_id();
    let args = if spec.args.is_null() {
        json!({})
    } else {
        spec.args.clone()
    };
    let runs = kernel.bus().runs();
    let record = runs.on().then(|| {
        let principal = spec.principal();
        let record = RunRecord::begin(
            &crate::context::id::format(id),
            "schedule",
            principal.as_ref().map_or("", |p| p.id()),
            spec.reference.as_str(),
            args.clone(),
        );
        runs.started(&record);
        record
    });
    let outcome = fire(kernel, spec, firing, id, args).await;
    if let Some(record) = record {
        runs.record(record.end(outcome.as_ref().map(Option::as_ref)));
    }
    outcome
}

/// [`run_firing`]'s run, as root context `id`.
async fn fire(
    kernel: &Kernel,
    spec: &Spec,
    firing: &Firing,
    id: u64,
    args: serde_json::Value,
) -> crate::error::Result<crate::kernel::invoke::Output> {
    let stored = spec.principal()?;
    let principal = match kernel.extension::<Keys>() {
        Some(keys) => keys.current(&stored).map_err(|why| {
            crate::error::SkillError::new(
                crate::error::ErrorKind::Denied,
                format!("schedule `{}` is paused: {why}", firing.name),
            )
        })?,
        None => stored,
    };
    let mut options = InvokeOptions::as_authority(Authority::caller(principal));
    options.context.nonlocals.insert(
        "schedule".into(),
        json!({ "name": firing.name, "scheduledAt": firing.due, "firedAt": firing.now, "missed": firing.missed }),
    );
    options.context.id = Some(id);
    kernel.invoke(spec.reference.as_str(), args, options).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_release_stamp_is_a_whole_number_and_anything_else_is_named() {
        assert_eq!(stamp(None), Ok(None));
        assert_eq!(stamp(Some("  ")), Ok(None));
        assert_eq!(stamp(Some(" 1795680000000 ")), Ok(Some(1_795_680_000_000)));
        let err = stamp(Some("v1.2")).unwrap_err();
        assert!(err.contains("SKILLGATE_RELEASE=`v1.2`"), "{err}");
    }
}
