//! The OpenAPI document (the checked-in `openapi.yaml`, served as is) and the docs page
//! rendered from it on the server, so it works with no network and no script.

use std::fmt::Write;
use std::sync::OnceLock;

use serde_json::Value;

/// `openapi.yaml` from the repository root, byte for byte.
pub const DOCUMENT: &str = include_str!("../../../openapi.yaml");

/// Problem types the gateway answers with: slug, status, meaning. Each is a variant of
/// `GatewayError`; a test in `problem` keeps the two the same.
pub const PROBLEMS: [(&str, u16, &str); 23] = [
    ("bad-request", 400, "The request could not be read."),
    (
        "malformed-json",
        400,
        "The body is not a JSON object (the detail says where parsing stopped).",
    ),
    (
        "unauthorized",
        401,
        "The path needs an API key: `Authorization: Bearer <key>`, and the key presented is missing or not valid.",
    ),
    (
        "cross-site",
        403,
        "A browser on another site sent the request (`Origin`, `Sec-Fetch-Site`) and its origin is not in `cors-origins`.",
    ),
    (
        "denied",
        403,
        "A policy refused the call: the API key may not invoke this skill, or a policy (allowed-tools, untrusted refs, reserved topics) refused a call the skill made.",
    ),
    ("not-found", 404, "No visible skill or route has this name."),
    (
        "method-not-allowed",
        405,
        "The path exists but not for this method.",
    ),
    (
        "body-timeout",
        408,
        "The request body did not arrive within the body timeout of its headers.",
    ),
    (
        "too-large",
        413,
        "The body is larger than the configured limit.",
    ),
    (
        "unsupported-media-type",
        415,
        "A body was sent without `Content-Type: application/json`.",
    ),
    (
        "misdirected",
        421,
        "The request is addressed to a host the server does not answer for (`allowed-hosts`).",
    ),
    (
        "invalid-args",
        422,
        "The args fail the skill's params schema, or use `$`-prefixed keys (invoke options are not for callers); `errors` lists each failing field path or refused key.",
    ),
    (
        "over-budget",
        422,
        "The run went over its budget (skill invocations, bytes of args and results, or time: `--max-run-invocations`, `--max-run-bytes`, `--max-run-time`); what was asked needs more than one run may spend.",
    ),
    (
        "bad-signature",
        401,
        "A webhook delivery without a valid signature for its route (missing or malformed headers, a timestamp more than the tolerance away, or a signature that does not match). Nothing was queued.",
    ),
    (
        "in-progress",
        409,
        "A request with this `Idempotency-Key` has not answered yet (here or on another replica), or its answer was a response the skill wrote itself with `web-send`, which is not replayed.",
    ),
    (
        "stream-expired",
        410,
        "The streamed run this `Idempotency-Key` started is over and its frames have left the event buffer; it cannot be resumed or replayed.",
    ),
    (
        "idempotency-key-reused",
        422,
        "This `Idempotency-Key` was used for a request with another skill or body.",
    ),
    (
        "rate-limited",
        429,
        "Too many requests for this key or client; `Retry-After` says when to try again.",
    ),
    (
        "internal",
        500,
        "The skill could not run. The cause is in the server log under the request id.",
    ),
    (
        "upstream-unavailable",
        502,
        "A service the skill depends on (an MCP server it mounts, its model vendor) could not be reached, was overloaded or did not answer in time. Which one is in the server log under the request id; try again later.",
    ),
    (
        "aborted",
        503,
        "The run was aborted (the server is shutting down).",
    ),
    (
        "unavailable",
        503,
        "The server cannot take this now: all WebSocket connections are in use, or it is shutting down. Try again later.",
    ),
    (
        "timeout",
        504,
        "The skill did not finish within the configured timeout and was aborted.",
    ),
];

pub(crate) fn parsed() -> &'static Value {
    static PARSED: OnceLock<Value> = OnceLock::new();
    PARSED.get_or_init(|| serde_saphyr::from_str::<Value>(DOCUMENT).unwrap_or(Value::Null))
}

fn esc(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

fn text<'a>(v: &'a Value, key: &str) -> &'a str {
    v.get(key).and_then(Value::as_str).unwrap_or("")
}

/// The HTML docs page.
pub fn docs_page() -> &'static str {
    static PAGE: OnceLock<String> = OnceLock::new();
    PAGE.get_or_init(|| render(parsed()))
}

fn render(doc: &Value) -> String {
    let info = doc.get("info").cloned().unwrap_or(Value::Null);
    let mut html = String::with_capacity(32 * 1024);
    let _ = write!(
        html,
        "<!doctype html><html lang=\"en\"><head><meta charset=\"utf-8\"><title>{title} API</title>\
         <style>body{{font-family:system-ui,sans-serif;max-width:60rem;margin:2rem auto;padding:0 1rem;line-height:1.5}}\
         code,pre{{background:#f4f4f4;border-radius:4px}}pre{{padding:.6rem;overflow:auto}}\
         .op{{border:1px solid #ddd;border-radius:6px;padding:.5rem 1rem;margin:1rem 0}}\
         .m{{font-weight:bold;text-transform:uppercase;margin-right:.5rem}}table{{border-collapse:collapse}}\
         td,th{{border:1px solid #ddd;padding:.2rem .5rem;text-align:left}}</style></head><body>\
         <h1>{title} <small>{version}</small></h1><p>{description}</p>\
         <p>The machine-readable document: <a href=\"/openapi.yaml\">/openapi.yaml</a> (OpenAPI {openapi}).</p>",
        title = esc(text(&info, "title")),
        version = esc(text(&info, "version")),
        description = esc(text(&info, "description")),
        openapi = esc(text(doc, "openapi")),
    );
    html.push_str("<h2>Operations</h2>");
    if let Some(Value::Object(paths)) = doc.get("paths") {
        for (path, item) in paths {
            let Value::Object(methods) = item else {
                continue;
            };
            for (method, op) in methods {
                if !["get", "post", "put", "patch", "delete"].contains(&method.as_str()) {
                    continue;
                }
                render_operation(&mut html, doc, path, method, op);
            }
        }
    }
    html.push_str("<h2>Problem types</h2><p>Every error is an <code>application/problem+json</code> body: <code>type</code>, <code>title</code>, <code>status</code>, <code>detail</code>, <code>requestId</code>.</p><table><tr><th>type</th><th>status</th><th>meaning</th></tr>");
    for (slug, status, meaning) in PROBLEMS {
        let _ = write!(
            html,
            "<tr id=\"problem-{slug}\"><td><code>/docs#problem-{slug}</code></td><td>{status}</td><td>{}</td></tr>",
            esc(meaning)
        );
    }
    html.push_str("</table></body></html>\n");
    html
}

fn render_operation(html: &mut String, doc: &Value, path: &str, method: &str, op: &Value) {
    let _ = write!(
        html,
        "<div class=\"op\" id=\"{id}\"><h3><span class=\"m\">{method}</span><code>{path}</code></h3><p><b>{summary}</b></p><p>{description}</p>",
        id = esc(text(op, "operationId")),
        method = esc(method),
        path = esc(path),
        summary = esc(text(op, "summary")),
        description = esc(text(op, "description")),
    );
    if let Some(Value::Array(params)) = op.get("parameters") {
        html.push_str("<table><tr><th>parameter</th><th>in</th><th>description</th></tr>");
        for p in params {
            let p = resolve(doc, p);
            let _ = write!(
                html,
                "<tr><td><code>{}</code></td><td>{}</td><td>{}</td></tr>",
                esc(text(p, "name")),
                esc(text(p, "in")),
                esc(text(p, "description"))
            );
        }
        html.push_str("</table>");
    }
    if let Some(Value::Object(responses)) = op.get("responses") {
        html.push_str("<table><tr><th>status</th><th>response</th></tr>");
        for (status, response) in responses {
            let response = resolve(doc, response);
            let _ = write!(
                html,
                "<tr><td>{}</td><td>{}</td></tr>",
                esc(status),
                esc(text(response, "description"))
            );
        }
        html.push_str("</table>");
    }
    html.push_str("</div>");
}

/// Follows a local `$ref` (`#/components/...`) once.
fn resolve<'a>(doc: &'a Value, value: &'a Value) -> &'a Value {
    match value.get("$ref").and_then(Value::as_str) {
        Some(reference) => reference
            .strip_prefix('#')
            .and_then(|pointer| doc.pointer(pointer))
            .unwrap_or(value),
        None => value,
    }
}
