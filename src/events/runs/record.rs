//! One root run as a door saw it ([`RunRecord`]): begun when the door takes the request, ended
//! with its outcome, and turned into the row the store keeps, redacted and capped.

use std::cell::RefCell;
use std::sync::Arc;
use std::time::Duration;

use quanta::Instant;
use serde_json::{Map, Value, json};

use crate::context::id::now_ms;
use crate::error::SkillError;
use crate::events::records::StoredRun;
use crate::events::runs::pending::{Head, Pending};
use crate::events::runs::redact::{has_secrets, redact_in_place};
use crate::failure::Failure;
use crate::json_text::push_value;
use crate::kernel::timings::EntryTimes;
use crate::skills::tool::Tool;

/// A run this long or longer keeps its entries' timings in the record.
pub const SLOW: Duration = Duration::from_secs(1);

/// How a run ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Status {
    Ok,
    /// The run failed (its skill, a service it needed, its budget).
    Failed,
    /// Aborted: the server shut down or the client went away.
    Aborted,
    /// Aborted because it took longer than its door allows.
    TimedOut,
    /// Never ran: its args were invalid, the caller may not reach the skill, or the server was
    /// full.
    Refused,
}

impl Status {
    pub const ALL: [Status; 5] = [
        Status::Ok,
        Status::Failed,
        Status::Aborted,
        Status::TimedOut,
        Status::Refused,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Status::Ok => "ok",
            Status::Failed => "failed",
            Status::Aborted => "aborted",
            Status::TimedOut => "timed-out",
            Status::Refused => "refused",
        }
    }

    pub fn parse(text: &str) -> Option<Status> {
        Status::ALL.into_iter().find(|s| s.as_str() == text)
    }

    /// The status of a run that failed with `failure`.
    fn of(failure: Failure) -> Status {
        match failure {
            Failure::InvalidArgs | Failure::Denied | Failure::NotFound | Failure::Busy => {
                Status::Refused
            }
            Failure::Timeout => Status::TimedOut,
            Failure::Aborted => Status::Aborted,
            Failure::OverBudget | Failure::Upstream | Failure::Internal => Status::Failed,
        }
    }
}

/// A root run from its door's point of view.
#[derive(Debug, Clone)]
pub struct RunRecord {
    /// The root context id.
    pub id: String,
    pub door: &'static str,
    pub principal: String,
    pub skill: String,
    /// Shared with the running invocation, not copied: a run holds its args once however
    /// large they are. `None` only in a record kept to be used again ([`RunRecord::begin`]).
    args: Option<Arc<Value>>,
    /// The skill's params schema, whose `writeOnly` and `x-secret` fields are redacted: this
    /// one, else the `tool`'s own (kept whole rather than copied on the request's path).
    pub params: Option<Value>,
    pub tool: Option<Arc<Tool>>,
    /// The timings of the run's chain entries, when it gathered them; kept in the record for a
    /// run that did not end well or took [`SLOW`] or longer, and for a sampled share of the
    /// others ([`RunRecord::keep_entries`]).
    pub entries: Option<Arc<EntryTimes>>,
    keep_entries: bool,
    /// The event that started the run (an event handler's, or a queued delivery's).
    pub event: Option<String>,
    /// The run this one repeats (a retry).
    pub parent: Option<String>,
    /// The W3C trace id of the request that started it, while spans are exported.
    pub trace: Option<String>,
    /// The run was named by project code serving its principal (a route the project declared,
    /// a schedule), not by the principal itself: a retry repeats it at that level.
    pub project_level: bool,
    started_ms: i64,
    started: Instant,
    ended: Option<Ended>,
}

#[derive(Debug, Clone)]
struct Ended {
    duration: Duration,
    status: Status,
    problem: Option<&'static str>,
    /// Shared with the reply that carries it to the client.
    result: Option<Arc<Value>>,
    error: Option<String>,
}

/// Written records a thread keeps to use again, at most.
const SPARE: usize = 32;
/// A record whose names grew past this many bytes is not kept to be used again.
const SPARE_TEXT: usize = 256;

thread_local! {
    /// Records of runs this thread wrote, emptied, for its next runs: a recorded run then
    /// allocates no record and no names of its own (four allocations and their frees a run
    /// fewer). Runs begin and end on one thread but for the few a task moves between them.
    #[allow(clippy::vec_box, reason = "the boxes are what is used again")]
    static SPARES: RefCell<Vec<Box<RunRecord>>> = const { RefCell::new(Vec::new()) };
}

impl RunRecord {
    /// A run of `skill` begun now. Boxed: a run's future holds it from its start to its end,
    /// and is moved whole (spawned, polled through its wrappers), as the record is to be
    /// written; boxed, each move is a pointer's rather than the record's few hundred bytes.
    /// The box is one a written run left on this thread when there is one
    /// ([`RunRecord::write_to`]), its names copied into the memory they had.
    pub fn begin(
        id: &str,
        door: &'static str,
        principal: &str,
        skill: &str,
        args: impl Into<Arc<Value>>,
    ) -> Box<RunRecord> {
        let spare = SPARES
            .try_with(|spares| spares.borrow_mut().pop())
            .ok()
            .flatten();
        let (started_ms, started) = (now_ms() as i64, Instant::now());
        let Some(mut run) = spare else {
            return Box::new(RunRecord {
                id: id.to_owned(),
                door,
                principal: principal.to_owned(),
                skill: skill.to_owned(),
                args: Some(args.into()),
                params: None,
                tool: None,
                entries: None,
                keep_entries: false,
                event: None,
                parent: None,
                trace: None,
                project_level: false,
                started_ms,
                started,
                ended: None,
            });
        };
        run.id.push_str(id);
        run.door = door;
        run.principal.push_str(principal);
        run.skill.push_str(skill);
        run.args = Some(args.into());
        run.started_ms = started_ms;
        run.started = started;
        run
    }

    /// Keeps this written record, emptied, for the next run this thread begins; let go
    /// instead when the thread keeps enough or its names grew large.
    fn give_back(mut self: Box<Self>) {
        if self.id.capacity() + self.principal.capacity() + self.skill.capacity() > SPARE_TEXT {
            return;
        }
        self.id.clear();
        self.principal.clear();
        self.skill.clear();
        self.args = None;
        self.params = None;
        self.tool = None;
        self.entries = None;
        self.keep_entries = false;
        self.event = None;
        self.parent = None;
        self.trace = None;
        self.project_level = false;
        self.ended = None;
        let _ = SPARES.try_with(|spares| {
            let mut spares = spares.borrow_mut();
            if spares.len() < SPARE {
                spares.push(self);
            }
        });
    }

    /// The args it was invoked with.
    pub fn args(&self) -> &Arc<Value> {
        self.args.as_ref().expect("a record in use has its args")
    }

    /// This run, ended now with `outcome`.
    pub fn end(
        mut self: Box<Self>,
        outcome: Result<Option<&Arc<Value>>, &SkillError>,
    ) -> Box<RunRecord> {
        let duration = self.started.elapsed();
        self.ended = Some(match outcome {
            Ok(result) => Ended {
                duration,
                status: Status::Ok,
                problem: None,
                result: result.cloned(),
                error: None,
            },
            Err(err) => {
                let failure = Failure::of(err, &self.skill);
                Ended {
                    duration,
                    status: Status::of(failure),
                    problem: Some(failure.slug()),
                    result: None,
                    error: Some(err.to_string()),
                }
            }
        });
        self
    }

    /// When it started (ms since the epoch).
    pub fn started_ms(&self) -> i64 {
        self.started_ms
    }

    /// When it started, on the monotonic clock its duration is measured by.
    pub fn started_at(&self) -> Instant {
        self.started
    }

    /// Keeps the entries' timings of this run whatever its outcome (it was sampled).
    pub fn keep_entries(&mut self) {
        self.keep_entries = true;
    }

    pub fn status(&self) -> Option<Status> {
        self.ended.as_ref().map(|e| e.status)
    }

    /// The row the store keeps: args and result redacted, each cut to `max_bytes` of JSON
    /// text (the detail says which were, so a retry knows it cannot repeat the run).
    pub fn stored(self: Box<Self>, max_bytes: usize) -> StoredRun {
        let mut pending = Pending::default();
        self.write_to(&mut pending, max_bytes);
        Pending::take(std::slice::from_ref(&pending))[0].to_stored(0)
    }

    /// Adds the row the store keeps of this run ([`RunRecord::stored`]) to `pending`. The args
    /// and result are written into `pending` as JSON straight from the values the run shares
    /// with its invocation and reply (copied only when something in them is redacted); what
    /// the run held is let go here, on the thread that ends it.
    pub(super) fn write_to(mut self: Box<Self>, pending: &mut Pending, max_bytes: usize) {
        let mut ended = self.ended.take().unwrap_or(Ended {
            duration: self.started.elapsed(),
            status: Status::Aborted,
            problem: Some(Failure::Aborted.slug()),
            result: None,
            error: None,
        });
        let schema = self
            .params
            .as_ref()
            .or_else(|| self.tool.as_ref().and_then(|t| t.params()));
        let (args, args_kept) =
            pending.write(|text| append_kept(text, self.args(), schema, max_bytes));
        let result = ended
            .result
            .take()
            .map(|value| pending.write(|text| append_kept(text, &value, None, max_bytes)));
        let result_cut = result.is_some_and(|(_, kept)| kept.cut);
        let detail = self.detail(&mut ended, args_kept.redacted, args_kept.cut, result_cut);
        pending.push(
            Head {
                id: &self.id,
                door: self.door,
                principal: &self.principal,
                skill: &self.skill,
                started_ms: self.started_ms,
                duration_us: i64::try_from(ended.duration.as_micros()).unwrap_or(i64::MAX),
                ended: self
                    .started
                    .checked_add(ended.duration)
                    .unwrap_or(self.started),
                status: ended.status.as_str(),
                problem: ended.problem,
                parent: self.parent.as_deref(),
                detail: detail.as_deref(),
            },
            args,
            result.map(|(span, _)| span),
        );
        if let Some(times) = self.entries.take() {
            EntryTimes::give_back(times);
        }
        self.give_back();
    }

    /// The run's detail as JSON text, with only what is so (its error, event and trace are
    /// taken into it); `None` for the most runs, which have nothing redacted, cut or failed, and
    /// no entries kept (`{}`).
    fn detail(
        &mut self,
        ended: &mut Ended,
        args_redacted: bool,
        args_cut: bool,
        result_cut: bool,
    ) -> Option<String> {
        let cut = args_cut || result_cut;
        let keeps_entries =
            ended.status != Status::Ok || ended.duration >= SLOW || self.keep_entries;
        // Made at its first key: most runs have nothing to say, and make no map to find that out.
        let mut detail: Option<Map<String, Value>> = None;
        let mut put = |key: &str, value: Value| {
            detail
                .get_or_insert_with(Map::new)
                .insert(key.to_owned(), value);
        };
        if args_redacted {
            put("redacted", Value::Bool(true));
        }
        if cut {
            put("cut", json!({ "args": args_cut, "result": result_cut }));
        }
        if let Some(error) = ended.error.take() {
            put("error", Value::String(error));
        }
        if let Some(event) = self.event.take() {
            put("event", Value::String(event));
        }
        if self.project_level {
            put("level", Value::String("project".into()));
        }
        if let Some(trace) = self.trace.take() {
            put("trace", Value::String(trace));
        }
        // The entries, the bulk of a sampled run's detail, are written as text.
        let mut entries: Option<String> = None;
        if let Some(gathered) = &self.entries {
            // What the run cost in tokens is always kept; its onion and logs for the runs
            // worth reading.
            if let Some((turns, tokens)) = gathered.turns_json() {
                put("turns", turns);
                put("tokens", tokens);
            }
            if keeps_entries {
                let mut text = String::with_capacity(1024);
                text.push_str("{\"entries\":");
                gathered.write_json(&mut text);
                entries = Some(text);
                if let Some((logs, left_out)) = gathered.logs_json() {
                    put("logs", logs);
                    if left_out > 0 {
                        put("logsLeftOut", json!(left_out));
                    }
                }
            }
        }
        let rest = detail.map(|detail| Value::Object(detail).to_string());
        match (entries, rest) {
            (None, rest) => rest,
            (Some(mut text), None) => {
                text.push('}');
                Some(text)
            }
            // `{"entries":[...]` and `{"error":...}` make `{"entries":[...],"error":...}`.
            (Some(mut text), Some(rest)) => {
                text.push(',');
                text.push_str(&rest[1..]);
                Some(text)
            }
        }
    }
}

/// What became of a value as the record keeps it.
#[derive(Debug, Clone, Copy)]
struct Kept {
    redacted: bool,
    cut: bool,
}

/// Appends `value` to `text` as the record keeps it: what `schema` marks secret and every
/// credential-named key redacted, as JSON text of at most `max` bytes, whole or as a JSON
/// string of its first bytes (`{"$cut": <bytes>, "head": "..."}`).
fn append_kept(text: &mut String, value: &Value, schema: Option<&Value>, max: usize) -> Kept {
    let start = text.len();
    let redacted = has_secrets(value, schema);
    if redacted {
        let mut copy = value.clone();
        redact_in_place(&mut copy, schema);
        push_value(text, &copy);
    } else {
        push_value(text, value);
    }
    let len = text.len() - start;
    if len <= max {
        return Kept {
            redacted,
            cut: false,
        };
    }
    let mut end = start + max;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    let cut = json!({ "$cut": len, "head": &text[start..end] }).to_string();
    text.truncate(start);
    text.push_str(&cut);
    Kept {
        redacted,
        cut: true,
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::error::ErrorKind;

    #[test]
    fn each_failure_is_recorded_with_its_status_and_the_problem_its_caller_was_told() {
        let run = |err: SkillError| {
            RunRecord::begin("r", "http", "local", "hello", json!({}))
                .end(Err(&err))
                .stored(1024)
        };
        let timed_out =
            run(SkillError::new(ErrorKind::Aborted, "late").with_data(json!({ "timeout": true })));
        assert_eq!(
            (timed_out.status.as_str(), timed_out.problem.as_deref()),
            ("timed-out", Some("timeout"))
        );
        let aborted = run(SkillError::new(ErrorKind::Aborted, "gone"));
        assert_eq!(
            (aborted.status.as_str(), aborted.problem.as_deref()),
            ("aborted", Some("aborted"))
        );
        let denied = run(SkillError::new(ErrorKind::Denied, "no"));
        assert_eq!(
            (denied.status.as_str(), denied.problem.as_deref()),
            ("refused", Some("denied"))
        );
        let failed = run(SkillError::new(ErrorKind::Failed, "boom"));
        assert_eq!(
            (failed.status.as_str(), failed.problem.as_deref()),
            ("failed", Some("internal"))
        );
        let detail: Value = serde_json::from_str(&failed.detail).unwrap();
        assert!(detail["error"].as_str().unwrap().contains("boom"));
    }

    #[test]
    fn args_and_results_are_kept_as_the_json_text_of_their_values() {
        let tricky = json!({
            "quote": "a \"b\" \\ c\n\u{1}",
            "unicode": "é — 🦀",
            "nested": [1, -2.5, null, true, { "k": [] }],
            "big": 12_345_678_901_234_i64,
        });
        let large = json!({ "text": "x".repeat(100_000) });
        for value in [tricky, large, json!("short")] {
            let stored = RunRecord::begin("r", "http", "local", "echo", value.clone())
                .end(Ok(Some(&Arc::new(value.clone()))))
                .stored(usize::MAX);
            assert_eq!(stored.args, value.to_string());
            assert_eq!(stored.result, Some(value.to_string()));
        }
    }

    #[test]
    fn args_and_results_past_the_cap_are_cut_and_say_so() {
        let big = json!({ "text": "é".repeat(600) });
        let stored = RunRecord::begin("r", "http", "local", "echo", big.clone())
            .end(Ok(Some(&Arc::new(json!("short")))))
            .stored(100);
        let args: Value = serde_json::from_str(&stored.args).unwrap();
        assert_eq!(args["$cut"], json!(big.to_string().len()));
        assert!(args["head"].as_str().unwrap().len() <= 100);
        assert_eq!(stored.result.as_deref(), Some("\"short\""));
        let detail: Value = serde_json::from_str(&stored.detail).unwrap();
        assert_eq!(detail["cut"], json!({ "args": true, "result": false }));
        assert_eq!(stored.status, "ok");
        assert_eq!(stored.problem, None);
    }

    #[test]
    fn a_written_record_serves_the_threads_next_run_with_nothing_of_the_last_one_left() {
        SPARES.with(|spares| spares.borrow_mut().clear());
        let mut first = RunRecord::begin("first", "http", "alice", "hello", json!({ "a": 1 }));
        first.parent = Some("p".into());
        first.event = Some("e".into());
        first.trace = Some("t".into());
        first.project_level = true;
        first.params = Some(json!({
            "properties": { "a": { "x-secret": true }, "b": { "x-secret": true } }
        }));
        first.keep_entries();
        first.entries = Some(Arc::new(EntryTimes::default()));
        let first_at: *const RunRecord = &*first;
        let stored = first.end(Ok(None)).stored(1024);
        assert_eq!(stored.parent.as_deref(), Some("p"));
        assert_ne!(stored.detail, "{}");
        let mut second = RunRecord::begin("second", "ws", "bob", "echo", json!({ "b": 2 }));
        assert!(
            std::ptr::eq(&*second, first_at),
            "the first run's box, used again"
        );
        // Gathered, but not sampled: a quick good run keeps no entries.
        second.entries = Some(Arc::new(EntryTimes::default()));
        let stored = second.end(Ok(None)).stored(1024);
        assert_eq!(
            (
                stored.id.as_str(),
                stored.door.as_str(),
                stored.principal.as_str(),
                stored.skill.as_str(),
                stored.args.as_str(),
                stored.parent,
                stored.detail.as_str(),
            ),
            ("second", "ws", "bob", "echo", r#"{"b":2}"#, None, "{}"),
            "nothing of the first run: its names, args, parent, event, trace, level, schema, entries"
        );
    }

    #[test]
    fn a_running_invocation_and_its_record_hold_one_copy_of_its_args_and_result() {
        let args = Arc::new(json!({ "text": "x".repeat(100_000) }));
        let result = Arc::new(json!({ "echo": "y".repeat(100_000) }));
        let record = RunRecord::begin("r", "ws", "local", "echo", args.clone());
        assert!(Arc::ptr_eq(record.args(), &args), "args shared, not copied");
        let ended = record.end(Ok(Some(&result)));
        let kept = ended
            .ended
            .as_ref()
            .and_then(|e| e.result.as_ref())
            .unwrap();
        assert!(Arc::ptr_eq(kept, &result), "result shared, not copied");
        // Written while the invocation and the reply still hold them: serialized and cut
        // straight from the shared values, which stay as they were.
        let stored = ended.stored(1024);
        let cut: Value = serde_json::from_str(&stored.args).unwrap();
        assert_eq!(cut["$cut"], json!(100_000 + r#"{"text":""}"#.len()));
        let cut: Value = serde_json::from_str(stored.result.as_deref().unwrap()).unwrap();
        assert_eq!(cut["$cut"], json!(100_000 + r#"{"echo":""}"#.len()));
        assert_eq!(args["text"].as_str().map(str::len), Some(100_000));
        assert_eq!(result["echo"].as_str().map(str::len), Some(100_000));
    }
}
