//! How recorded runs are asked for and shown, the same for the runs API and `skillgate runs`:
//! the query (filters, cursor, page size) and the JSON of a run.

use serde::Deserialize;
use serde_json::{Value, json};

use crate::context::id::iso;
use crate::events::records::{NewRun, RunFilter, StoredRun};
use crate::events::runs::record::Status;

/// Runs a page holds unless asked otherwise, and at most.
pub const PAGE: usize = 50;
pub const MAX_PAGE: usize = 500;

/// A listing as asked for (`GET /runs?…`, `skillgate runs list --…`).
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RunsQuery {
    pub door: Option<String>,
    pub skill: Option<String>,
    pub status: Option<String>,
    pub principal: Option<String>,
    /// Started at or after (RFC 3339).
    pub since: Option<String>,
    /// Started before (RFC 3339).
    pub until: Option<String>,
    /// Text in the args or the result, in any case.
    pub q: Option<String>,
    /// The `next` of the page before.
    pub cursor: Option<String>,
    pub limit: Option<usize>,
}

impl RunsQuery {
    /// The store's filter, or what is wrong with the query. A name or text given empty
    /// (`?door=`, as a form sends one left blank) is no filter; a status, time or cursor given
    /// empty is a mistake.
    pub fn filter(&self) -> Result<RunFilter, String> {
        let given = |field: &Option<String>| field.clone().filter(|v| !v.is_empty());
        let query = RunsQuery {
            door: given(&self.door),
            skill: given(&self.skill),
            principal: given(&self.principal),
            q: given(&self.q),
            ..self.clone()
        };
        query.checked()
    }

    fn checked(&self) -> Result<RunFilter, String> {
        if let Some(status) = &self.status
            && Status::parse(status).is_none()
        {
            let known: Vec<_> = Status::ALL.iter().map(|s| s.as_str()).collect();
            return Err(format!(
                "`status`: `{status}` is not a run status (one of {})",
                known.join(", ")
            ));
        }
        let cursor = match &self.cursor {
            Some(c) => Some(
                c.parse::<i64>()
                    .map_err(|_| format!("`cursor`: `{c}` is not a cursor this listing gave"))?,
            ),
            None => None,
        };
        let limit = self.limit.unwrap_or(PAGE);
        if limit == 0 || limit > MAX_PAGE {
            return Err(format!("`limit`: {limit} is not between 1 and {MAX_PAGE}"));
        }
        Ok(RunFilter {
            door: self.door.clone(),
            skill: self.skill.clone(),
            status: self.status.clone(),
            principal: self.principal.clone(),
            since_ms: instant("since", self.since.as_deref())?,
            until_ms: instant("until", self.until.as_deref())?,
            text: self.q.clone(),
            before: cursor,
            limit,
        })
    }
}

/// `text` (RFC 3339) as ms since the epoch.
fn instant(field: &str, text: Option<&str>) -> Result<Option<i64>, String> {
    let Some(text) = text else { return Ok(None) };
    chrono::DateTime::parse_from_rfc3339(text)
        .map(|t| Some(t.timestamp_millis()))
        .map_err(|_| {
            format!("`{field}`: `{text}` is not an RFC 3339 time (such as 2026-11-26T09:00:00Z)")
        })
}

/// A page of runs as JSON: `runs`, and `next` (the cursor of the next page) when the page is
/// full.
pub fn page(runs: &[StoredRun], limit: usize) -> Value {
    let next = (runs.len() == limit)
        .then(|| runs.last().map(|r| r.seq.to_string()))
        .flatten();
    json!({
        "runs": runs.iter().map(|run| summary(&run.as_new())).collect::<Vec<_>>(),
        "next": next,
    })
}

/// A run as a listing shows it (and the feed, as soon as it is written).
pub fn summary(run: &NewRun<'_>) -> Value {
    json!({
        "id": run.id,
        "door": run.door,
        "principal": run.principal,
        "skill": run.skill,
        "started": iso(run.started_ms),
        "durationMs": run.duration_us as f64 / 1000.0,
        "status": run.status,
        "problem": run.problem.map(|slug| format!("/docs#problem-{slug}")),
        "parent": run.parent,
    })
}

/// A run with everything recorded of it: args, result, error and the rest of the detail.
pub fn full(run: &StoredRun) -> Value {
    let mut shown = summary(&run.as_new());
    shown["redacted"] = Value::Bool(false);
    shown["cut"] = json!({ "args": false, "result": false });
    let parse = |text: &str| serde_json::from_str(text).unwrap_or(Value::String(text.into()));
    shown["args"] = parse(&run.args);
    shown["result"] = run.result.as_deref().map_or(Value::Null, parse);
    if let Value::Object(detail) = parse(&run.detail) {
        for (key, value) in detail {
            shown[key] = value;
        }
    }
    shown
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_query_with_a_mistake_names_the_field() {
        let bad = |q: RunsQuery| q.filter().unwrap_err();
        assert!(
            bad(RunsQuery {
                status: Some("done".into()),
                ..Default::default()
            })
            .starts_with("`status`")
        );
        assert!(
            bad(RunsQuery {
                since: Some("yesterday".into()),
                ..Default::default()
            })
            .starts_with("`since`")
        );
        assert!(
            bad(RunsQuery {
                cursor: Some("x".into()),
                ..Default::default()
            })
            .starts_with("`cursor`")
        );
        assert!(
            bad(RunsQuery {
                limit: Some(0),
                ..Default::default()
            })
            .starts_with("`limit`")
        );
    }

    #[test]
    fn names_and_text_given_empty_filter_nothing() {
        let q = RunsQuery {
            door: Some(String::new()),
            skill: Some(String::new()),
            principal: Some(String::new()),
            q: Some(String::new()),
            ..Default::default()
        };
        assert_eq!(q.filter().unwrap(), RunsQuery::default().filter().unwrap());
        let empty_cursor = RunsQuery {
            cursor: Some(String::new()),
            ..Default::default()
        };
        assert!(empty_cursor.filter().is_err());
    }

    #[test]
    fn times_are_read_as_rfc_3339_in_any_offset() {
        let q = RunsQuery {
            since: Some("2026-01-02T03:04:05Z".into()),
            until: Some("2026-01-02T04:04:05+01:00".into()),
            ..Default::default()
        };
        let filter = q.filter().unwrap();
        assert_eq!(filter.since_ms, Some(1_767_323_045_000));
        assert_eq!(filter.until_ms, Some(1_767_323_045_000));
        assert_eq!(filter.limit, PAGE);
    }
}
