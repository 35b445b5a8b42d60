//! The console's pages as HTML (maud templates): the layout, the login form, the runs list, a
//! run with its onion as a waterfall, and the dead letters. Every value shown is escaped by the
//! templates; pages read without JavaScript (the runs list's live updates are `live.js`).

use maud::{DOCTYPE, Markup, html};
use serde_json::Value;

/// What the layout needs to know of who is looking.
pub struct Viewer<'a> {
    /// `key:<name>` or `local`.
    pub principal: &'a str,
    pub admin: bool,
    pub csrf: &'a str,
    /// Logged in with a key (the local caller, keys off, has nothing to log out of).
    pub keyed: bool,
}

/// A whole page: `title`, the navigation and `body`.
pub fn layout(title: &str, viewer: Option<&Viewer>, body: Markup) -> Markup {
    html! {
        (DOCTYPE)
        html lang="en" {
            head {
                meta charset="utf-8";
                meta name="viewport" content="width=device-width, initial-scale=1";
                title { (title) " · skillgate console" }
                link rel="stylesheet" href="/console/console.css";
            }
            body {
                header {
                    a.brand href="/console" { "skillgate" }
                    @if let Some(viewer) = viewer {
                        nav {
                            a href="/console" { "Runs" }
                            a href="/console/skills" { "Skills" }
                            @if viewer.admin {
                                a href="/console/dead" { "Dead letters" }
                                a href="/console/status" { "Status" }
                            }
                        }
                        span.who { (viewer.principal) @if viewer.admin { " (admin)" } }
                        @if viewer.keyed {
                            form.logout method="post" action="/console/logout" {
                                input type="hidden" name="csrf" value=(viewer.csrf);
                                button type="submit" { "Log out" }
                            }
                        }
                    }
                }
                main { (body) }
            }
        }
    }
}

/// The login form, with what went wrong last time if anything.
pub fn login(problem: Option<&str>) -> Markup {
    layout(
        "Log in",
        None,
        html! {
            h1 { "Log in" }
            p { "The console reads the runs record with an API key's rights: an " code { "admin" }
                " key sees every run and may retry runs and replay dead letters; another key sees its own runs." }
            @if let Some(problem) = problem {
                p.problem role="alert" { (problem) }
            }
            form method="post" action="/console/login" {
                label for="key" { "API key" }
                input #key type="password" name="key" autocomplete="current-password" required;
                button type="submit" { "Log in" }
            }
        },
    )
}

/// The filters a runs list was asked with, echoed in its form.
#[derive(Default)]
pub struct Filters<'a> {
    pub door: &'a str,
    pub skill: &'a str,
    pub status: &'a str,
    pub q: &'a str,
}

impl Filters<'_> {
    fn none(&self) -> bool {
        self.door.is_empty() && self.skill.is_empty() && self.status.is_empty() && self.q.is_empty()
    }
}

/// The runs list: a filter form, the runs of a page (newest first), the next page's link; the
/// first unfiltered page is kept up to date by `live.js`.
pub fn runs(
    viewer: &Viewer,
    page: &Value,
    filters: &Filters,
    next: Option<String>,
    notice: Option<&str>,
    first: bool,
) -> Markup {
    let live = first && filters.none();
    layout(
        "Runs",
        Some(viewer),
        html! {
            h1 { "Runs" }
            @if let Some(notice) = notice {
                p.notice role="status" { (notice) }
            }
            form.filters method="get" action="/console" {
                input name="door" placeholder="door" value=(filters.door);
                input name="skill" placeholder="skill" value=(filters.skill);
                select name="status" {
                    option value="" { "any status" }
                    @for status in ["ok", "failed", "aborted", "timed-out", "refused"] {
                        option value=(status) selected[filters.status == status] { (status) }
                    }
                }
                input name="q" placeholder="text in args or result" value=(filters.q);
                button type="submit" { "Filter" }
            }
            table.runs {
                thead { tr { th { "started" } th { "status" } th { "door" } th { "skill" } th { "principal" } th.num { "ms" } } }
                tbody #runs data-live=(if live { "on" } else { "off" }) {
                    @for run in page["runs"].as_array().into_iter().flatten() {
                        (run_row(run))
                    }
                }
            }
            @if page["runs"].as_array().is_none_or(|r| r.is_empty()) {
                p.empty #no-runs { "No runs recorded yet." }
            }
            @if let Some(next) = next {
                p { a href=(next) { "Older runs →" } }
            }
            script src="/console/live.js" {}
        },
    )
}

/// One row of the runs list (the same shape `live.js` builds).
fn run_row(run: &Value) -> Markup {
    let text = |key: &str| run[key].as_str().unwrap_or("").to_string();
    let id = text("id");
    html! {
        tr class=(format!("status-{}", text("status"))) {
            td { a href=(format!("/console/runs/{id}")) { (text("started")) } }
            td { (text("status")) }
            td { (text("door")) }
            td { (text("skill")) }
            td { (text("principal")) }
            td.num { (format!("{:.1}", run["durationMs"].as_f64().unwrap_or(0.0))) }
        }
    }
}

/// A run: its summary, the onion as a waterfall, args, result, error; a retry button for an
/// admin.
pub fn run(viewer: &Viewer, run: &Value) -> Markup {
    let text = |key: &str| run[key].as_str().unwrap_or("-").to_string();
    let id = text("id");
    let pretty = |value: &Value| serde_json::to_string_pretty(value).unwrap_or_default();
    layout(
        &format!("Run {id}"),
        Some(viewer),
        html! {
            h1 { "Run " code { (id) } }
            dl.summary {
                dt { "skill" } dd { (text("skill")) }
                dt { "door" } dd { (text("door")) }
                dt { "principal" } dd { (text("principal")) }
                dt { "started" } dd { (text("started")) }
                dt { "duration" } dd { (format!("{:.1} ms", run["durationMs"].as_f64().unwrap_or(0.0))) }
                dt { "status" } dd.status #status { (text("status")) }
                @if let Some(problem) = run["problem"].as_str() {
                    dt { "problem" } dd { a href=(problem) { (problem) } }
                }
                @if let Some(parent) = run["parent"].as_str() {
                    dt { "retry of" } dd { a href=(format!("/console/runs/{parent}")) { (parent) } }
                }
                @if let Some(event) = run["event"].as_str() {
                    dt { "event" } dd { code { (event) } }
                }
                @if let Some(trace) = run["trace"].as_str() {
                    dt { "trace" } dd { code { (trace) } }
                }
                @if run["tokens"].is_object() {
                    dt { "tokens" } dd #tokens { (run["tokens"]["input"]) " in, " (run["tokens"]["output"]) " out" }
                }
            }
            @if viewer.admin {
                form method="post" action=(format!("/console/runs/{id}/retry")) {
                    input type="hidden" name="csrf" value=(viewer.csrf);
                    button type="submit" #retry { "Retry" }
                }
            }
            @if let Some(error) = run["error"].as_str() {
                h2 { "Error" }
                pre.error { (error) }
            }
            h2 { "Chain" }
            @match run["entries"].as_array() {
                Some(entries) if !entries.is_empty() => { (waterfall(entries, run["durationMs"].as_f64().unwrap_or(0.0))) }
                _ => { p.empty { "The chain's timings are kept for runs that failed or took a second or more, and a sampled share of the others (" code { "--runs-detail-sample" } ")." } }
            }
            @if let Some(turns) = run["turns"].as_array() {
                h2 { "Model calls" }
                table.turns #turns {
                    thead { tr { th { "provider" } th { "model" } th.num { "tokens in" } th.num { "tokens out" } th.num { "ms" } th { "ended" } } }
                    tbody {
                        @for turn in turns {
                            tr {
                                td { (turn["provider"].as_str().unwrap_or("")) }
                                td { (turn["model"].as_str().unwrap_or("")) }
                                td.num { (turn["inputTokens"]) }
                                td.num { (turn["outputTokens"]) }
                                td.num { (format!("{:.1}", turn["durationMs"].as_f64().unwrap_or(0.0))) }
                                td { (turn["stop"].as_str().or(turn["error"].as_str()).unwrap_or("")) }
                            }
                        }
                    }
                }
            }
            @if let Some(logs) = run["logs"].as_array() {
                h2 { "Logs" }
                ol.logs #logs {
                    @for log in logs {
                        li { span.level { (log["level"].as_str().unwrap_or("")) } " " (log["text"].as_str().map_or_else(|| log.to_string(), str::to_string)) }
                    }
                }
                @if let Some(more) = run["logsLeftOut"].as_u64() { p.note { (more) " more left out." } }
            }
            h2 { "Args" }
            @if run["redacted"] == true { p.note { "Fields marked secret were redacted." } }
            pre.json { (pretty(&run["args"])) }
            h2 { "Result" }
            pre.json { (pretty(&run["result"])) }
        },
    )
}

/// The chain entries as bars on one time axis, nested by depth: where each began and how long
/// it took, failed ones marked.
fn waterfall(entries: &[Value], duration_ms: f64) -> Markup {
    let end = entries
        .iter()
        .map(|e| e["startMs"].as_f64().unwrap_or(0.0) + e["durationMs"].as_f64().unwrap_or(0.0))
        .fold(duration_ms, f64::max)
        .max(0.001);
    html! {
        ol.waterfall #waterfall {
            @for entry in entries {
                @let start = entry["startMs"].as_f64().unwrap_or(0.0);
                @let took = entry["durationMs"].as_f64().unwrap_or(0.0);
                @let depth = entry["depth"].as_u64().unwrap_or(0).min(12);
                @let ok = entry["ok"].as_bool().unwrap_or(true);
                li class=(if ok { "entry ok" } else { "entry failed" }) {
                    // Bars are SVG shapes placed by their attributes: the page's policy allows
                    // no inline styles.
                    span.label class=(format!("depth-{depth}")) {
                        (entry["name"].as_str().unwrap_or("?"))
                        small { " " (entry["kind"].as_str().unwrap_or("")) " · " (entry["skill"].as_str().unwrap_or("")) }
                    }
                    svg.track xmlns="http://www.w3.org/2000/svg" width="100%" height="12" {
                        rect.bar
                            x=(format!("{:.2}%", 100.0 * start / end))
                            width=(format!("{:.2}%", (100.0 * took / end).max(0.4)))
                            y="0" height="12" {
                            title { (format!("{took:.3} ms from {start:.3} ms")) }
                        }
                    }
                    span.num { (format!("{took:.2} ms")) }
                }
            }
        }
    }
}

/// The dead letters, each with a replay button.
pub fn dead(viewer: &Viewer, letters: &[Value]) -> Markup {
    layout(
        "Dead letters",
        Some(viewer),
        html! {
            h1 { "Dead letters" }
            p { "Events that used up their deliveries. Replay puts one back into the queue it died in; its run appears in the runs list." }
            @if letters.is_empty() {
                p.empty #no-letters { "No dead letters." }
            } @else {
                table.letters {
                    thead { tr { th { "died" } th { "topic" } th { "queue" } th.num { "attempts" } th { "event" } th {} } }
                    tbody {
                        @for letter in letters {
                            @let id = letter["id"].as_str().unwrap_or("");
                            tr {
                                td { (letter["died"].as_str().unwrap_or("")) }
                                td { (letter["topic"].as_str().unwrap_or("")) }
                                td { (letter["queue"].as_str().unwrap_or("")) }
                                td.num { (letter["attempts"].as_u64().unwrap_or(0)) }
                                td { details { summary { code { (letter["event"]["id"].as_str().unwrap_or("")) } }
                                    pre.json { (serde_json::to_string_pretty(&letter["event"]).unwrap_or_default()) } } }
                                td {
                                    form method="post" action=(format!("/console/dead/{id}/replay")) {
                                        input type="hidden" name="csrf" value=(viewer.csrf);
                                        button type="submit" class="replay" { "Replay" }
                                    }
                                }
                            }
                        }
                    }
                }
            }
        },
    )
}

/// A page that says what went wrong (not found, refused).
pub fn problem(viewer: Option<&Viewer>, title: &str, detail: &str) -> Markup {
    layout(
        title,
        viewer,
        html! {
            h1 { (title) }
            p.problem role="alert" { (detail) }
            p { a href="/console" { "Back to the runs" } }
        },
    )
}

/// A run that is not in the record yet (it is running, or being written): the page looks
/// again in a moment.
pub fn pending(viewer: &Viewer, id: &str) -> Markup {
    layout(
        "Run",
        Some(viewer),
        html! {
            h1 { "Run " code { (id) } }
            p.notice { "This run is not in the record yet: it is still running or about to be written. "
                a href=(format!("/console/runs/{id}")) { "Look again" } "." }
        },
    )
}
