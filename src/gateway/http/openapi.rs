//! The OpenAPI document (the checked-in `openapi.yaml`, served as is) and the docs page
//! rendered from it on the server, so it works with no network and no script.

use std::fmt::Write;
use std::sync::OnceLock;

use serde_json::Value;

use crate::gateway::problem::PROBLEMS;

/// `openapi.yaml` from the repository root, byte for byte.
pub const DOCUMENT: &str = include_str!("../../../openapi.yaml");

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

/// One line of markdown as inline HTML (its paragraph's tags left off).
fn inline(markdown: &str) -> String {
    let html = crate::markdown::to_html(markdown);
    let html = html.trim();
    html.strip_prefix("<p>")
        .and_then(|h| h.strip_suffix("</p>"))
        .unwrap_or(html)
        .to_string()
}

/// The docs page with the project's skills listed (`skills`, `None` when they are not shown to
/// this visitor), each linking to its "try it" form in the console.
pub fn docs_with_skills(skills: Option<&[std::sync::Arc<crate::skills::tool::Tool>]>) -> String {
    let page = docs_page();
    let base = page.trim_end().trim_end_matches("</body></html>");
    let mut html = String::with_capacity(page.len() + 4096);
    html.push_str(base);
    html.push_str("<h2 id=\"skills\">Skills</h2>");
    match skills {
        None => html.push_str(
            "<p>The skills a key may invoke are listed for that key at <a href=\"/openapi.json\">/openapi.json</a> and in the <a href=\"/console/skills\">console</a>.</p>",
        ),
        Some([]) => html.push_str("<p>The project has no skill a caller may invoke.</p>"),
        Some(tools) => {
            for tool in tools {
                skill_section(&mut html, tool);
            }
        }
    }
    html.push_str("</body></html>\n");
    html
}

fn skill_section(html: &mut String, tool: &crate::skills::tool::Tool) {
    let name = esc(&tool.name);
    let _ = write!(
        html,
        "<div class=\"op\" id=\"skill-{name}\"><h3><code>{name}</code></h3>{description}",
        description = crate::markdown::to_html(&tool.description),
    );
    let params = tool.params();
    let properties = params
        .and_then(|p| p.get("properties"))
        .and_then(Value::as_object);
    let required: Vec<&str> = params
        .and_then(|p| p.get("required"))
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .collect();
    match properties {
        Some(properties) if !properties.is_empty() => {
            html.push_str(
                "<table><tr><th>param</th><th>type</th><th>required</th><th>description</th></tr>",
            );
            for (param, field) in properties {
                let _ = write!(
                    html,
                    "<tr><td><code>{}</code></td><td>{}</td><td>{}</td><td>{}</td></tr>",
                    esc(param),
                    esc(&field.get("type").map_or_else(String::new, |t| t
                        .as_str()
                        .map_or_else(|| t.to_string(), str::to_string))),
                    if required.contains(&param.as_str()) {
                        "yes"
                    } else {
                        ""
                    },
                    inline(text(field, "description")),
                );
            }
            html.push_str("</table>");
        }
        _ => html.push_str("<p>No params.</p>"),
    }
    if let Some(returns) = tool.metadata.get("returns").filter(|r| !r.is_null()) {
        let _ = write!(
            html,
            "<p>Returns:</p><pre>{}</pre>",
            esc(&serde_json::to_string_pretty(returns).unwrap_or_default())
        );
    }
    let _ = write!(
        html,
        "<p><a href=\"/console/skills/{name}\">Try it in the console</a> · <code>POST /invoke/{name}</code></p></div>"
    );
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
         <h1>{title} <small>{version}</small></h1>{description}\
         <p>The machine-readable document: <a href=\"/openapi.yaml\">/openapi.yaml</a> (OpenAPI {openapi}).</p>",
        title = esc(text(&info, "title")),
        version = esc(text(&info, "version")),
        description = crate::markdown::to_html(text(&info, "description")),
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
            inline(meaning)
        );
    }
    html.push_str("</table></body></html>\n");
    html
}

fn render_operation(html: &mut String, doc: &Value, path: &str, method: &str, op: &Value) {
    let _ = write!(
        html,
        "<div class=\"op\" id=\"{id}\"><h3><span class=\"m\">{method}</span><code>{path}</code></h3><p><b>{summary}</b></p>{description}",
        id = esc(text(op, "operationId")),
        method = esc(method),
        path = esc(path),
        summary = inline(text(op, "summary")),
        description = crate::markdown::to_html(text(op, "description")),
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
                inline(text(p, "description"))
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
                inline(text(response, "description"))
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
