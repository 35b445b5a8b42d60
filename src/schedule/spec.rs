//! What a schedule says: when it fires (a cron expression in a time zone, or an interval),
//! which skill with which args, how many times, and what happens to firings missed while no
//! server ran. Read from `metadata.schedule` and from `schedule-create`'s args; kept in the
//! store as JSON.

use std::str::FromStr;

use chrono::{TimeZone, Utc};
use croner::parser::{CronParser, Seconds, Year};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// How late a firing may be and still count as on time.
pub const GRACE_MS: i64 = 5_000;

/// When a schedule fires.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum When {
    /// A cron expression (five fields, or six with seconds first; `@hourly` and the like).
    Cron(String),
    /// Every so many milliseconds from `start`.
    Every { ms: i64, start: i64 },
}

/// What to do with firings missed while no server ran (or the machine stalled past the grace).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Missed {
    /// Run once for all of them, then go on from now.
    #[default]
    Once,
    /// Drop them and go on from now.
    Skip,
}

/// A schedule.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Spec {
    /// The skill it invokes.
    #[serde(rename = "ref")]
    pub reference: String,
    pub when: When,
    /// The time zone of a cron expression (IANA name); UTC when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tz: Option<String>,
    #[serde(default, skip_serializing_if = "Value::is_null")]
    pub args: Value,
    /// Fires this many times, then stops.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub times: Option<i64>,
    #[serde(default)]
    pub missed: Missed,
    /// Declared in a skill's metadata (kept in step with the skills at each start).
    #[serde(default)]
    pub declared: bool,
    /// Who it runs for (see `kernel::authority::Principal::to_json`). Absent on a declared
    /// schedule (the project's) and on one stored before principals were kept, which runs for
    /// the local caller, never as the project.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub principal: Option<Value>,
    /// The release that declared it (see `runner::release`): a replica of an older release
    /// leaves the declared schedules of a newer one alone.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub release: Option<i64>,
}

impl Spec {
    /// The principal it runs for.
    pub fn principal(&self) -> crate::error::Result<crate::kernel::authority::Principal> {
        use crate::kernel::authority::Principal;
        match (&self.principal, self.declared) {
            (Some(stored), _) => Principal::from_json(stored),
            (None, true) => Ok(Principal::project()),
            (None, false) => Ok(Principal::local()),
        }
    }

    /// Reads a schedule for skill `reference`: a cron string, `@every <duration>`, or
    /// `{ cron | every, tz, args, times, missed }`. `now` anchors intervals. The error names the
    /// field.
    pub fn parse(value: &Value, reference: &str, now: i64) -> Result<Spec, String> {
        let empty = Map::new();
        let (when, fields) = match value {
            Value::String(text) => (text_when(text, now)?, &empty),
            Value::Object(map) => {
                let when = match (map.get("cron"), map.get("every")) {
                    (Some(_), Some(_)) => {
                        return Err("give `cron` or `every`, not both".into());
                    }
                    (Some(Value::String(cron)), None) => When::Cron(check_cron(cron)?),
                    (Some(other), None) => {
                        return Err(format!("`cron` must be a string, got {other}"));
                    }
                    (None, Some(every)) => When::Every {
                        ms: interval(every).map_err(|e| format!("`every`: {e}"))?,
                        start: now,
                    },
                    (None, None) => return Err("needs `cron` or `every`".into()),
                };
                (when, map)
            }
            other => {
                return Err(format!(
                    "must be a cron string, `@every <duration>` or {{ cron | every, tz, args, times, missed }}, got {other}"
                ));
            }
        };
        for key in fields.keys() {
            if ![
                "cron", "every", "tz", "args", "times", "missed", "ref", "name",
            ]
            .contains(&key.as_str())
            {
                return Err(format!(
                    "unknown field `{key}` (cron, every, tz, args, times, missed)"
                ));
            }
        }
        let tz = match fields.get("tz") {
            None | Some(Value::Null) => None,
            Some(Value::String(tz)) => {
                chrono_tz::Tz::from_str(tz).map_err(|_| {
                    format!("`tz`: unknown time zone `{tz}` (an IANA name such as Europe/Paris)")
                })?;
                Some(tz.clone())
            }
            Some(other) => return Err(format!("`tz` must be a time zone name, got {other}")),
        };
        let args = match fields.get("args") {
            None | Some(Value::Null) => Value::Null,
            Some(args @ Value::Object(_)) => args.clone(),
            Some(other) => return Err(format!("`args` must be an object, got {other}")),
        };
        let times = match fields.get("times") {
            None | Some(Value::Null) => None,
            Some(v) => match v.as_i64() {
                Some(n) if n >= 1 => Some(n),
                _ => return Err(format!("`times` must be a whole number from 1, got {v}")),
            },
        };
        let missed = match fields.get("missed") {
            None | Some(Value::Null) => Missed::Once,
            Some(Value::String(s)) if s == "once" => Missed::Once,
            Some(Value::String(s)) if s == "skip" => Missed::Skip,
            Some(other) => return Err(format!("`missed` must be `once` or `skip`, got {other}")),
        };
        Ok(Spec {
            reference: reference.to_string(),
            when,
            tz,
            args,
            times,
            missed,
            declared: false,
            principal: None,
            release: None,
        })
    }

    /// The first firing strictly after `after_ms`; `None` when the expression never fires again.
    pub fn next_after(&self, after_ms: i64) -> Option<i64> {
        match &self.when {
            When::Every { ms, start } => {
                let k = if after_ms < *start {
                    1
                } else {
                    (after_ms - start) / ms + 1
                };
                Some(start + k * ms)
            }
            When::Cron(expression) => {
                let cron = parser().parse(expression).ok()?;
                let tz = self
                    .tz
                    .as_deref()
                    .and_then(|t| chrono_tz::Tz::from_str(t).ok())
                    .unwrap_or(chrono_tz::UTC);
                let after = Utc
                    .timestamp_millis_opt(after_ms)
                    .single()?
                    .with_timezone(&tz);
                cron.find_next_occurrence(&after, false)
                    .ok()
                    .map(|t| t.timestamp_millis())
            }
        }
    }

    /// The schedule as `schedule-list` shows it.
    pub fn describe(&self) -> Value {
        let mut out = Map::new();
        out.insert("ref".into(), Value::from(self.reference.clone()));
        match &self.when {
            When::Cron(c) => out.insert("cron".into(), Value::from(c.clone())),
            When::Every { ms, .. } => out.insert("every".into(), Value::from(*ms)),
        };
        if let Some(tz) = &self.tz {
            out.insert("tz".into(), Value::from(tz.clone()));
        }
        if !self.args.is_null() {
            out.insert("args".into(), self.args.clone());
        }
        if let Some(times) = self.times {
            out.insert("times".into(), Value::from(times));
        }
        out.insert(
            "missed".into(),
            Value::from(match self.missed {
                Missed::Once => "once",
                Missed::Skip => "skip",
            }),
        );
        out.insert("declared".into(), Value::Bool(self.declared));
        if let Ok(principal) = self.principal() {
            out.insert("principal".into(), Value::from(principal.id()));
        }
        Value::Object(out)
    }

    /// The spec as the store keeps it.
    pub fn to_stored(&self) -> String {
        serde_json::to_string(self).expect("a schedule serializes")
    }

    /// A spec the store kept.
    pub fn from_stored(text: &str) -> Result<Spec, String> {
        serde_json::from_str(text).map_err(|e| e.to_string())
    }
}

/// Seconds optional: `*/5 * * * *` fires each five minutes, `*/1 * * * * *` each second.
fn parser() -> CronParser {
    CronParser::builder()
        .seconds(Seconds::Optional)
        .year(Year::Disallowed)
        .build()
}

fn check_cron(expression: &str) -> Result<String, String> {
    parser()
        .parse(expression)
        .map_err(|e| format!("`{expression}` is not a cron expression: {e}"))?;
    Ok(expression.to_string())
}

fn text_when(text: &str, now: i64) -> Result<When, String> {
    match text.trim().strip_prefix("@every") {
        Some(rest) => Ok(When::Every {
            ms: interval(&Value::from(rest.trim())).map_err(|e| format!("`{text}`: {e}"))?,
            start: now,
        }),
        None => Ok(When::Cron(check_cron(text.trim())?)),
    }
}

/// An interval: milliseconds, or `500ms`, `10s`, `5m`, `2h`, `1d`; at least 100 ms.
fn interval(value: &Value) -> Result<i64, String> {
    let ms = match value {
        Value::Number(n) => n
            .as_i64()
            .ok_or_else(|| format!("{n} is not whole milliseconds"))?,
        Value::String(s) => {
            let s = s.trim();
            let split = s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len());
            let (digits, unit) = s.split_at(split);
            let n: i64 = digits
                .parse()
                .map_err(|_| format!("`{s}` is not a duration such as 500ms, 10s, 5m, 2h or 1d"))?;
            let scale = match unit.trim() {
                "ms" => 1,
                "" | "s" => 1_000,
                "m" => 60_000,
                "h" => 3_600_000,
                "d" => 86_400_000,
                _ => {
                    return Err(format!(
                        "`{s}` is not a duration such as 500ms, 10s, 5m, 2h or 1d"
                    ));
                }
            };
            n.checked_mul(scale)
                .ok_or_else(|| format!("`{s}` is too long"))?
        }
        other => {
            return Err(format!(
                "must be milliseconds or a duration string, got {other}"
            ));
        }
    };
    if ms < 100 {
        return Err(format!("{ms} ms is shorter than the 100 ms minimum"));
    }
    Ok(ms)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const NOW: i64 = 1_700_000_000_000; // 2023-11-14T22:13:20Z

    #[test]
    fn an_interval_fires_on_its_grid_from_when_it_was_made() {
        let spec = Spec::parse(&json!({ "every": "10s" }), "s", NOW).unwrap();
        assert_eq!(spec.next_after(NOW), Some(NOW + 10_000));
        assert_eq!(spec.next_after(NOW + 10_000), Some(NOW + 20_000));
        assert_eq!(spec.next_after(NOW + 25_001), Some(NOW + 30_000));
        let text = Spec::parse(&json!("@every 500ms"), "s", NOW).unwrap();
        assert_eq!(
            text.when,
            When::Every {
                ms: 500,
                start: NOW
            }
        );
    }

    #[test]
    fn a_cron_expression_fires_in_its_time_zone() {
        // 09:00 on weekdays in Paris is 08:00 UTC in winter.
        let spec = Spec::parse(
            &json!({ "cron": "0 9 * * 1-5", "tz": "Europe/Paris" }),
            "s",
            NOW,
        )
        .unwrap();
        let next = spec.next_after(NOW).unwrap();
        let at = Utc.timestamp_millis_opt(next).unwrap();
        assert_eq!(at.to_rfc3339(), "2023-11-15T08:00:00+00:00");
        let utc = Spec::parse(&json!("0 9 * * 1-5"), "s", NOW).unwrap();
        let at = Utc
            .timestamp_millis_opt(utc.next_after(NOW).unwrap())
            .unwrap();
        assert_eq!(at.to_rfc3339(), "2023-11-15T09:00:00+00:00");
        let seconds = Spec::parse(&json!("*/1 * * * * *"), "s", NOW).unwrap();
        assert_eq!(seconds.next_after(NOW), Some(NOW + 1_000));
    }

    #[test]
    fn mistakes_name_the_field() {
        for (value, says) in [
            (json!({ "cron": "61 * * * *" }), "is not a cron expression"),
            (json!({ "every": "soon" }), "`every`"),
            (json!({ "every": 10 }), "100 ms minimum"),
            (json!({ "cron": "* * * * *", "every": "1s" }), "not both"),
            (json!({ "cron": "* * * * *", "tz": "Mars/Olympus" }), "`tz`"),
            (json!({ "every": "1s", "times": 0 }), "`times`"),
            (json!({ "every": "1s", "missed": "later" }), "`missed`"),
            (json!({ "every": "1s", "args": [1] }), "`args`"),
            (json!({ "every": "1s", "when": 1 }), "unknown field `when`"),
            (json!({}), "needs `cron` or `every`"),
            (json!(5), "must be a cron string"),
        ] {
            let err = Spec::parse(&value, "s", NOW).unwrap_err();
            assert!(err.contains(says), "{value}: {err}");
        }
    }

    #[test]
    fn a_spec_survives_the_store() {
        let spec = Spec::parse(
            &json!({ "every": "1s", "args": { "a": 1 }, "times": 3, "missed": "skip" }),
            "s",
            NOW,
        )
        .unwrap();
        assert_eq!(Spec::from_stored(&spec.to_stored()).unwrap(), spec);
    }
}
