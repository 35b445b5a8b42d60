//! Splits a markdown skill into YAML frontmatter and body, and checks the frontmatter's fields.
//!
//! Every error names the file, and the line and column when the YAML parser gives them, counted
//! in the whole file (the frontmatter starts on line 2).

use serde_json::{Map, Value};

use crate::error::SkillError;
use crate::skills::patterns::AllowedTools;

/// A skill file split in two.
#[derive(Debug)]
pub struct Parsed {
    pub frontmatter: Map<String, Value>,
    pub body: String,
    /// The file line (1-based) the body starts on.
    pub body_line: usize,
}

/// Parses `text` (the content of `file`); `default_name` is used when the frontmatter has none.
pub fn parse_markdown(file: &str, text: &str, default_name: &str) -> Result<Parsed, SkillError> {
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    // A shebang line lets skill files be run directly.
    let (text, line_offset) = match text.strip_prefix("#!") {
        Some(rest) => (rest.split_once('\n').map_or("", |(_, r)| r), 1),
        None => (text, 0),
    };
    let (yaml, body) = match split_frontmatter(text) {
        Some(parts) => parts,
        None => ("", text),
    };
    let mut frontmatter = parse_yaml(file, yaml, line_offset + 2)?;
    if !frontmatter.contains_key("name") {
        frontmatter.insert("name".into(), Value::String(default_name.to_string()));
    }
    check(file, &mut frontmatter)?;
    let body_start = text.len() - body.len();
    Ok(Parsed {
        frontmatter,
        body: body.to_string(),
        body_line: line_offset as usize + text[..body_start].matches('\n').count() + 1,
    })
}

/// Returns the YAML between the `---` fences and the body after them.
fn split_frontmatter(text: &str) -> Option<(&str, &str)> {
    let rest = text
        .strip_prefix("---\n")
        .or_else(|| text.strip_prefix("---\r\n"))?;
    let mut offset = 0;
    for line in rest.split_inclusive('\n') {
        let trimmed = line.trim_end();
        if trimmed == "---" || trimmed == "..." {
            let yaml = &rest[..offset];
            let body = &rest[offset + line.len()..];
            return Some((yaml, body.strip_prefix('\n').unwrap_or(body)));
        }
        offset += line.len();
    }
    None
}

/// Parses YAML text into a JSON object; `first_line` is the file line the YAML starts on.
pub fn parse_yaml(
    file: &str,
    yaml: &str,
    first_line: u64,
) -> Result<Map<String, Value>, SkillError> {
    if yaml.trim().is_empty() {
        return Ok(Map::new());
    }
    // YAML 1.2's core schema, as skill authors' other tools read frontmatter (gray-matter,
    // js-yaml): only `true` and `false` are booleans; `y`, `n`, `yes`, `no`, `on`, `off` are
    // strings.
    let options = serde_saphyr::options! { strict_booleans: true };
    match serde_saphyr::from_str_with_options::<Value>(yaml, options) {
        Ok(Value::Object(map)) => Ok(map),
        Ok(Value::Null) => Ok(Map::new()),
        Ok(other) => Err(SkillError::config(format!(
            "{file}:{first_line}: frontmatter must be a mapping of keys, found {}",
            crate::context::path::kind(&other)
        ))),
        Err(err) => {
            let message = first_line_of(&err.to_string());
            Err(match err.location() {
                Some(loc) => SkillError::config(format!(
                    "{file}:{}:{}: invalid YAML: {message}",
                    loc.line() + first_line - 1,
                    loc.column()
                )),
                None => SkillError::config(format!("{file}: invalid YAML: {message}")),
            })
        }
    }
}

/// The parser's message without its own position prefix (ours counts in the whole file).
fn first_line_of(message: &str) -> String {
    let line = message.lines().next().unwrap_or(message);
    let line = line.strip_prefix("error: ").unwrap_or(line);
    match line
        .strip_prefix("line ")
        .and_then(|rest| rest.split_once(": "))
    {
        Some((position, rest)) if position.contains("column") => rest.to_string(),
        _ => line.to_string(),
    }
}

/// True for a valid tool name: lowercase letters, digits and `-`, starting with a letter or digit.
/// [`is_tool_name`] as a JSON Schema pattern, for params that take a skill name.
pub const TOOL_NAME_PATTERN: &str = "^[a-z0-9][a-z0-9-]*$";

pub fn is_tool_name(name: &str) -> bool {
    !name.is_empty()
        && !name.starts_with('-')
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
}

/// Checks the well-known fields and normalises `allowed-tools` into `metadata`.
pub fn check(file: &str, fm: &mut Map<String, Value>) -> Result<(), SkillError> {
    let field =
        |name: &str, why: String| SkillError::config(format!("{file}: field `{name}`: {why}"));
    match fm.get("name") {
        Some(Value::String(name)) if is_tool_name(name) => {}
        Some(Value::String(name)) => {
            return Err(field(
                "name",
                format!("`{name}` is not a tool name (use lowercase letters, digits and `-`)"),
            ));
        }
        Some(other) => {
            return Err(field(
                "name",
                format!("must be a string, found {}", kind(other)),
            ));
        }
        None => {}
    }
    if let Some(desc) = fm.get("description")
        && !desc.is_string()
        && !desc.is_null()
    {
        return Err(field(
            "description",
            format!("must be a string, found {}", kind(desc)),
        ));
    }
    // `allowed-tools` at the top level (as in SKILL.md files) means the same as in metadata.
    let top_allowed = fm.remove("allowed-tools");
    let metadata = fm
        .entry("metadata")
        .or_insert_with(|| Value::Object(Map::new()));
    if metadata.is_null() {
        *metadata = Value::Object(Map::new());
    }
    let Value::Object(meta) = metadata else {
        return Err(field(
            "metadata",
            format!("must be a mapping, found {}", kind(metadata)),
        ));
    };
    if let Some(allowed) = top_allowed {
        meta.entry("allowed-tools").or_insert(allowed);
    }
    for key in ["params", "returns"] {
        match meta.get(key) {
            None | Some(Value::Null) => {}
            Some(schema @ (Value::Object(_) | Value::Bool(_))) => {
                if let Err(err) = jsonschema::validator_for(schema) {
                    return Err(field(
                        &format!("metadata.{key}"),
                        format!("not a valid JSON Schema: {err}"),
                    ));
                }
            }
            Some(other) => {
                return Err(field(
                    &format!("metadata.{key}"),
                    format!("must be a JSON Schema object, found {}", kind(other)),
                ));
            }
        }
    }
    match meta.get("tags") {
        None | Some(Value::Null) | Some(Value::String(_)) => {}
        Some(Value::Array(items)) if items.iter().all(Value::is_string) => {}
        Some(_) => return Err(field("metadata.tags", "must be a list of strings".into())),
    }
    if let Some(vis) = meta.get("visibility")
        && !matches!(vis.as_str(), Some("public" | "hidden"))
    {
        return Err(field(
            "metadata.visibility",
            format!("must be `public` or `hidden`, found {vis}"),
        ));
    }
    if let Some(spec) = meta.get("allowed-tools")
        && let Err(err) = AllowedTools::parse(spec)
    {
        return Err(field("metadata.allowed-tools", err.to_string()));
    }
    if let Some(inherit) = meta.get("$inherit") {
        let ok = match inherit {
            Value::Bool(false) | Value::Null => true,
            Value::String(s) => is_tool_name(s),
            Value::Array(items) => items.iter().all(|i| i.as_str().is_some_and(is_tool_name)),
            _ => false,
        };
        if !ok {
            return Err(field(
                "metadata.$inherit",
                "must be a tool name, a list of tool names, or false".into(),
            ));
        }
    }
    Ok(())
}

fn kind(value: &Value) -> &'static str {
    crate::context::path::kind(value)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_tool_name_pattern_takes_exactly_the_names_is_tool_name_takes() {
        let pattern = jsonschema::validator_for(
            &serde_json::json!({ "type": "string", "pattern": TOOL_NAME_PATTERN }),
        )
        .unwrap();
        for name in [
            "", "a", "hello", "my-skill", "a1", "1a", "-a", "a-", "A", "a_b", "a b", "a.b", "é",
        ] {
            assert_eq!(
                pattern.is_valid(&serde_json::json!(name)),
                is_tool_name(name),
                "{name:?}"
            );
        }
    }

    #[test]
    fn frontmatter_and_body_are_split_at_the_fences() {
        let p = parse_markdown("x.skill.md", "---\nname: x\n---\nHello\n", "x").unwrap();
        assert_eq!(p.frontmatter["name"], "x");
        assert_eq!(p.body, "Hello\n");
        assert_eq!(p.body_line, 4, "the body's first line in the file");
    }

    #[test]
    fn bad_yaml_names_file_line_and_column() {
        let text = "---\nname: x\nmetadata:\n  params: [unclosed\n---\nbody";
        let err = parse_markdown("skills/x.skill.md", text, "x").unwrap_err();
        let msg = err.to_string();
        assert!(msg.starts_with("skills/x.skill.md:"), "{msg}");
        let line: u64 = msg.split(':').nth(1).unwrap().parse().unwrap();
        assert!(
            (4..=6).contains(&line),
            "line should point into the frontmatter: {msg}"
        );
    }

    #[test]
    fn frontmatter_reads_yaml_1_2_where_only_true_and_false_are_booleans() {
        let text = "---\nflags: [n, y, yes, no, on, off, true, false, True]\nmetadata:\n  params:\n    type: object\n    required: [n]\n---\n";
        let p = parse_markdown("f.skill.md", text, "f").unwrap();
        assert_eq!(
            p.frontmatter["flags"],
            serde_json::json!(["n", "y", "yes", "no", "on", "off", true, false, true])
        );
        assert_eq!(
            p.frontmatter["metadata"]["params"]["required"],
            serde_json::json!(["n"])
        );
    }

    #[test]
    fn a_missing_name_defaults_to_the_file_stem() {
        let p = parse_markdown("a.skill.md", "just a prompt", "greet").unwrap();
        assert_eq!(p.frontmatter["name"], "greet");
        assert_eq!(p.body, "just a prompt");
    }

    #[test]
    fn invalid_field_types_name_the_field() {
        let err = parse_markdown("f.md", "---\nname: Bad Name\n---\n", "f").unwrap_err();
        assert!(err.to_string().contains("field `name`"), "{err}");
        let err = parse_markdown("f.md", "---\nmetadata:\n  params: 3\n---\n", "f").unwrap_err();
        assert!(err.to_string().contains("metadata.params"), "{err}");
    }

    #[test]
    fn top_level_allowed_tools_moves_into_metadata() {
        let p = parse_markdown("f.md", "---\nallowed-tools: a b\n---\n", "f").unwrap();
        assert_eq!(p.frontmatter["metadata"]["allowed-tools"], "a b");
    }
}
