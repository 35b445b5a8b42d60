//! `metadata.mcp`: which MCP servers a skill mounts, under which names, and how each is
//! reached (a command spoken to over stdio, or a Streamable HTTP URL), read and checked.
//!
//! ```yaml
//! mcp:
//!   files:                                   # tools become `files-<tool>`
//!     command: node
//!     args: ["${dir}/files-server.js"]
//!     env: { ROOT: "${project}" }
//!   issues:
//!     url: https://mcp.example.com/mcp
//!     headers: { Authorization: "Bearer ${env.ISSUES_TOKEN}" }
//!     tools: [search_issues]                 # only these (by the server's names)
//!     timeout: 30                            # seconds per call
//!   old: false                               # a mount inherited from above, turned off
//! ```

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::{Map, Value};

use crate::skills::frontmatter::is_tool_name;

/// How a server is reached. Equal specs share one connection.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum ServerSpec {
    /// A process started with `command` and `args` in `cwd`, spoken to on its stdin and stdout.
    Stdio {
        command: String,
        args: Vec<String>,
        env: BTreeMap<String, String>,
        cwd: PathBuf,
    },
    /// A Streamable HTTP endpoint, each request sent with `headers`.
    Http {
        url: String,
        headers: BTreeMap<String, String>,
    },
}

impl ServerSpec {
    /// What the server is, for messages and `locals.config.mcp`: never the env, the headers,
    /// or a URL's user, password and query (they hold secrets).
    pub fn describe(&self) -> String {
        match self {
            ServerSpec::Stdio { command, .. } => format!("stdio `{command}`"),
            ServerSpec::Http { url, .. } => match reqwest::Url::parse(url) {
                Ok(mut u) => {
                    u.set_query(None);
                    u.set_fragment(None);
                    let _ = u.set_password(None);
                    let _ = u.set_username("");
                    format!("HTTP {u}")
                }
                Err(_) => "HTTP (a URL that does not parse)".into(),
            },
        }
    }
}

/// One mounted server.
#[derive(Debug, Clone, PartialEq)]
pub struct Mount {
    /// The prefix of its tools' names (`<name>-<tool>`).
    pub name: String,
    pub spec: ServerSpec,
    /// Only these tools (the server's names), when given.
    pub only: Option<Vec<String>>,
    /// How long one call may take.
    pub timeout: Option<Duration>,
}

const KEYS: [&str; 8] = [
    "command", "args", "env", "cwd", "url", "headers", "tools", "timeout",
];

/// Headers the transport sets itself.
const RESERVED_HEADERS: [&str; 4] = [
    "accept",
    "mcp-session-id",
    "mcp-protocol-version",
    "last-event-id",
];

/// Reads `metadata.mcp`; relative `cwd`s are taken from `cwd`. The error names the field
/// (`` `mcp.files.args` ... ``).
pub fn parse(value: &Value, cwd: &Path) -> Result<Vec<Mount>, String> {
    let Value::Object(servers) = value else {
        return Err(format!(
            "`mcp` must map server names to how each is reached, got {value}"
        ));
    };
    let mut mounts = Vec::new();
    for (name, entry) in servers {
        let field = format!("mcp.{name}");
        if !is_tool_name(name) {
            return Err(format!(
                "`{field}`: `{name}` is not a server name (use lowercase letters, digits and `-`: it prefixes the tool names)"
            ));
        }
        match entry {
            Value::Null | Value::Bool(false) => continue,
            Value::Object(map) => mounts.push(mount(name, map, cwd, &field)?),
            other => {
                return Err(format!(
                    "`{field}` must be an object with `command` or `url`, or false, got {other}"
                ));
            }
        }
    }
    Ok(mounts)
}

fn mount(name: &str, map: &Map<String, Value>, cwd: &Path, field: &str) -> Result<Mount, String> {
    if let Some(key) = map.keys().find(|k| !KEYS.contains(&k.as_str())) {
        return Err(format!(
            "`{field}.{key}` is not a setting (known: {})",
            KEYS.join(", ")
        ));
    }
    let spec = match (map.get("command"), map.get("url")) {
        (Some(_), Some(_)) => {
            return Err(format!(
                "`{field}` has both `command` and `url`; a server is reached one way"
            ));
        }
        (Some(command), None) => {
            for key in ["headers"] {
                if map.contains_key(key) {
                    return Err(format!("`{field}.{key}` belongs to a `url` server"));
                }
            }
            let command = text(command, &format!("{field}.command"))?;
            let dir = match map.get("cwd") {
                Some(v) => cwd.join(text(v, &format!("{field}.cwd"))?),
                None => cwd.to_path_buf(),
            };
            ServerSpec::Stdio {
                command,
                args: strings(map.get("args"), &format!("{field}.args"))?,
                env: string_map(map.get("env"), &format!("{field}.env"))?,
                cwd: dir,
            }
        }
        (None, Some(url)) => {
            for key in ["args", "env", "cwd"] {
                if map.contains_key(key) {
                    return Err(format!("`{field}.{key}` belongs to a `command` server"));
                }
            }
            let url = text(url, &format!("{field}.url"))?;
            match reqwest::Url::parse(&url) {
                Ok(u) if matches!(u.scheme(), "http" | "https") => {}
                _ => {
                    return Err(format!(
                        "`{field}.url`: `{url}` is not an http:// or https:// URL"
                    ));
                }
            }
            let headers = string_map(map.get("headers"), &format!("{field}.headers"))?;
            for header in headers.keys() {
                if reqwest::header::HeaderName::from_bytes(header.as_bytes()).is_err() {
                    return Err(format!(
                        "`{field}.headers`: `{header}` is not a header name"
                    ));
                }
                if RESERVED_HEADERS.contains(&header.to_ascii_lowercase().as_str()) {
                    return Err(format!(
                        "`{field}.headers`: `{header}` is set by the MCP transport itself"
                    ));
                }
            }
            ServerSpec::Http { url, headers }
        }
        (None, None) => {
            return Err(format!(
                "`{field}` needs `command` (a server over stdio) or `url` (over Streamable HTTP)"
            ));
        }
    };
    let only = match map.get("tools") {
        None | Some(Value::Null) => None,
        Some(v) => Some(strings(Some(v), &format!("{field}.tools"))?),
    };
    let timeout = match map.get("timeout") {
        None | Some(Value::Null) => None,
        Some(v) => match v.as_f64().and_then(|s| Duration::try_from_secs_f64(s).ok()) {
            Some(limit) if !limit.is_zero() => Some(limit),
            _ => {
                return Err(format!(
                    "`{field}.timeout` must be a positive number of seconds, got {v}"
                ));
            }
        },
    };
    Ok(Mount {
        name: name.to_string(),
        spec,
        only,
        timeout,
    })
}

fn text(value: &Value, field: &str) -> Result<String, String> {
    match value {
        Value::String(s) if !s.trim().is_empty() => Ok(s.clone()),
        other => Err(format!("`{field}` must be a non-empty string, got {other}")),
    }
}

fn strings(value: Option<&Value>, field: &str) -> Result<Vec<String>, String> {
    match value {
        None | Some(Value::Null) => Ok(Vec::new()),
        Some(Value::Array(items)) => items
            .iter()
            .map(|item| match item {
                Value::String(s) => Ok(s.clone()),
                Value::Number(n) => Ok(n.to_string()),
                other => Err(format!("`{field}` must be a list of strings, got {other}")),
            })
            .collect(),
        Some(other) => Err(format!("`{field}` must be a list of strings, got {other}")),
    }
}

fn string_map(value: Option<&Value>, field: &str) -> Result<BTreeMap<String, String>, String> {
    match value {
        None | Some(Value::Null) => Ok(BTreeMap::new()),
        Some(Value::Object(map)) => map
            .iter()
            .map(|(k, v)| match v {
                Value::String(s) => Ok((k.clone(), s.clone())),
                Value::Number(_) | Value::Bool(_) => Ok((k.clone(), v.to_string())),
                other => Err(format!("`{field}.{k}` must be a string, got {other}")),
            })
            .collect(),
        Some(other) => Err(format!("`{field}` must map names to strings, got {other}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn parsed(value: Value) -> Result<Vec<Mount>, String> {
        parse(&value, Path::new("/p"))
    }

    #[test]
    fn a_command_server_runs_in_the_working_folder_unless_told() {
        let mounts = parsed(json!({
            "files": { "command": "node", "args": ["s.js", 3], "env": { "A": "1" } },
            "other": { "command": "x", "cwd": "sub" },
        }))
        .unwrap();
        assert_eq!(
            mounts[0].spec,
            ServerSpec::Stdio {
                command: "node".into(),
                args: vec!["s.js".into(), "3".into()],
                env: BTreeMap::from([("A".into(), "1".into())]),
                cwd: "/p".into(),
            }
        );
        assert!(
            matches!(&mounts[1].spec, ServerSpec::Stdio { cwd, .. } if cwd == Path::new("/p/sub"))
        );
    }

    #[test]
    fn a_url_server_takes_headers_a_tool_list_and_a_timeout() {
        let mounts = parsed(json!({
            "issues": { "url": "https://h/mcp", "headers": { "Authorization": "Bearer t" }, "tools": ["a"], "timeout": 2.5 },
        }))
        .unwrap();
        assert_eq!(mounts[0].only, Some(vec!["a".to_string()]));
        assert_eq!(mounts[0].timeout, Some(Duration::from_millis(2500)));
        assert!(
            matches!(&mounts[0].spec, ServerSpec::Http { headers, .. } if headers["Authorization"] == "Bearer t")
        );
    }

    #[test]
    fn a_url_is_described_without_its_credentials_or_query() {
        let mounts = parsed(json!({ "a": { "url": "https://u:p@h/mcp?token=s#f" } })).unwrap();
        assert_eq!(mounts[0].spec.describe(), "HTTP https://h/mcp");
    }

    #[test]
    fn false_turns_an_inherited_mount_off() {
        let mounts = parsed(json!({ "a": false, "b": null, "c": { "command": "x" } })).unwrap();
        let names: Vec<&str> = mounts.iter().map(|m| m.name.as_str()).collect();
        assert_eq!(names, ["c"]);
    }

    #[test]
    fn each_mistake_names_its_field() {
        let cases = [
            (json!(["x"]), "`mcp` must map server names"),
            (
                json!({ "Files": { "command": "x" } }),
                "`mcp.Files`: `Files` is not a server name",
            ),
            (json!({ "f": {} }), "`mcp.f` needs `command`"),
            (
                json!({ "f": { "command": "x", "url": "http://h" } }),
                "has both",
            ),
            (
                json!({ "f": { "command": "x", "arg": [] } }),
                "`mcp.f.arg` is not a setting",
            ),
            (
                json!({ "f": { "command": "x", "args": "a b" } }),
                "`mcp.f.args` must be a list",
            ),
            (
                json!({ "f": { "command": "x", "headers": {} } }),
                "`mcp.f.headers` belongs to a `url` server",
            ),
            (
                json!({ "f": { "url": "ftp://h" } }),
                "`mcp.f.url`: `ftp://h` is not",
            ),
            (
                json!({ "f": { "url": "http://h", "env": {} } }),
                "`mcp.f.env` belongs to a `command` server",
            ),
            (
                json!({ "f": { "url": "http://h", "headers": { "Mcp-Session-Id": "x" } } }),
                "set by the MCP transport",
            ),
            (
                json!({ "f": { "command": "x", "timeout": 0 } }),
                "`mcp.f.timeout` must be a positive",
            ),
            (
                json!({ "f": { "command": "x", "env": { "A": [] } } }),
                "`mcp.f.env.A` must be a string",
            ),
        ];
        for (value, expected) in cases {
            let err = parsed(value.clone()).unwrap_err();
            assert!(err.contains(expected), "{value}: {err}");
        }
    }
}
