//! Turns `skillgate run` tokens into skill args: `--key value`, `--key=value`, bare `--flag`,
//! `--no-flag`, repeats as arrays, `--arg k=v`, `--arg-json '{..}'`, coerced by the params schema.

use serde_json::{Map, Value};

/// Args, plus metadata overrides given with `--set key=value`.
#[derive(Debug, Default, PartialEq)]
pub struct Parsed {
    pub args: Map<String, Value>,
    pub overrides: Map<String, Value>,
    /// `-v`/`-vv`/`-q` given after the skill name (they mean the same as before it).
    pub verbose: u8,
    pub quiet: bool,
}

/// Parses the tokens after the skill name. `schema` is the skill's params schema, if any.
pub fn parse(tokens: &[String], schema: Option<&Value>) -> Result<Parsed, String> {
    let mut out = Parsed::default();
    let mut raw: Vec<(String, Option<String>)> = Vec::new();
    let mut i = 0;
    while i < tokens.len() {
        let token = &tokens[i];
        i += 1;
        if token == "-q" || token == "--quiet" {
            out.quiet = true;
            continue;
        }
        if let Some(vs) = token
            .strip_prefix('-')
            .filter(|v| !v.is_empty() && v.bytes().all(|b| b == b'v'))
        {
            out.verbose = out.verbose.saturating_add(vs.len() as u8);
            continue;
        }
        if token == "--verbose" {
            out.verbose = out.verbose.saturating_add(1);
            continue;
        }
        let Some(flag) = token.strip_prefix("--") else {
            return Err(format!(
                "unexpected argument `{token}`: skill args are given as `--name value`"
            ));
        };
        if flag.is_empty() {
            return Err("`--` is not followed by a name".into());
        }
        let (name, inline) = match flag.split_once('=') {
            Some((n, v)) => (n, Some(v.to_string())),
            None => (flag, None),
        };
        let takes_value = |i: usize| tokens.get(i).is_some_and(|t| !t.starts_with("--"));
        match name {
            "arg" | "arg-json" | "set" => {
                let value = match inline {
                    Some(v) => v,
                    None if takes_value(i) => {
                        i += 1;
                        tokens[i - 1].clone()
                    }
                    None => return Err(format!("`--{name}` needs a value")),
                };
                match name {
                    "arg" => {
                        let (k, v) = value
                            .split_once('=')
                            .ok_or_else(|| format!("`--arg {value}`: expected key=value"))?;
                        raw.push((k.to_string(), Some(v.to_string())));
                    }
                    "arg-json" => {
                        let parsed: Value = serde_json::from_str(&value)
                            .map_err(|e| format!("`--arg-json`: invalid JSON: {e}"))?;
                        let Value::Object(map) = parsed else {
                            return Err("`--arg-json` must be a JSON object".into());
                        };
                        out.args.extend(map);
                    }
                    _ => {
                        let (k, v) = value
                            .split_once('=')
                            .ok_or_else(|| format!("`--set {value}`: expected key=value"))?;
                        out.overrides.insert(k.to_string(), scalar(v));
                    }
                }
            }
            _ => {
                let value = match inline {
                    Some(v) => Some(v),
                    None if takes_value(i) => {
                        i += 1;
                        Some(tokens[i - 1].clone())
                    }
                    None => None,
                };
                raw.push((name.to_string(), value));
            }
        }
    }
    for (name, value) in raw {
        let (key, value) = resolve_name(&name, value, schema);
        let prop = property(schema, &key);
        let coerced = coerce(&key, value, prop)?;
        match out.args.get_mut(&key) {
            None => {
                let is_array = prop.is_some_and(|p| types(p).contains(&"array"));
                let coerced = match coerced {
                    Value::Array(_) => coerced,
                    other if is_array => Value::Array(vec![other]),
                    other => other,
                };
                out.args.insert(key, coerced);
            }
            Some(Value::Array(items)) => match coerced {
                Value::Array(more) => items.extend(more),
                other => items.push(other),
            },
            Some(existing) => {
                let first = existing.take();
                *existing = Value::Array(vec![first, coerced]);
            }
        }
    }
    Ok(out)
}

/// Maps `--no-flag` to `flag=false`, and kebab-case flags to a camelCase or snake_case property.
fn resolve_name(
    name: &str,
    value: Option<String>,
    schema: Option<&Value>,
) -> (String, Option<String>) {
    let known = |n: &str| property(schema, n).is_some();
    if let Some(rest) = name.strip_prefix("no-")
        && value.is_none()
        && !known(name)
    {
        return (resolve_case(rest, &known), Some("false".into()));
    }
    (resolve_case(name, &known), value)
}

fn resolve_case(name: &str, known: &dyn Fn(&str) -> bool) -> String {
    if known(name) {
        return name.to_string();
    }
    let snake = name.replace('-', "_");
    if known(&snake) {
        return snake;
    }
    let mut camel = String::with_capacity(name.len());
    let mut upper = false;
    for c in name.chars() {
        if c == '-' {
            upper = true;
        } else if upper {
            camel.extend(c.to_uppercase());
            upper = false;
        } else {
            camel.push(c);
        }
    }
    if known(&camel) {
        camel
    } else {
        name.to_string()
    }
}

fn property<'a>(schema: Option<&'a Value>, key: &str) -> Option<&'a Value> {
    schema?.get("properties")?.get(key)
}

fn types(prop: &Value) -> Vec<&str> {
    match prop.get("type") {
        Some(Value::String(t)) => vec![t.as_str()],
        Some(Value::Array(ts)) => ts.iter().filter_map(Value::as_str).collect(),
        _ => Vec::new(),
    }
}

/// Coerces one flag's text by its property schema.
fn coerce(key: &str, value: Option<String>, prop: Option<&Value>) -> Result<Value, String> {
    let types = prop.map(types).unwrap_or_default();
    let Some(text) = value else {
        if types.is_empty() || types.contains(&"boolean") {
            return Ok(Value::Bool(true));
        }
        return Err(format!("`--{key}` needs a value ({})", types.join(" or ")));
    };
    if types.is_empty() {
        // An untyped property takes JSON objects and arrays as such, anything else as text.
        if prop.is_some()
            && (text.starts_with('{') || text.starts_with('['))
            && let Ok(value) = serde_json::from_str(&text)
        {
            return Ok(value);
        }
        return Ok(Value::String(text));
    }
    let mut reasons = Vec::new();
    for ty in &types {
        match try_type(ty, &text, prop) {
            Ok(v) => return Ok(v),
            Err(reason) => reasons.push(reason),
        }
    }
    Err(format!("`--{key} {text}`: {}", reasons.join("; ")))
}

fn try_type(ty: &str, text: &str, prop: Option<&Value>) -> Result<Value, String> {
    match ty {
        "string" => Ok(Value::String(text.to_string())),
        "integer" => text
            .parse::<i64>()
            .map(Value::from)
            .map_err(|_| "expected an integer".to_string()),
        "number" => text
            .parse::<f64>()
            .ok()
            .and_then(serde_json::Number::from_f64)
            .map(Value::Number)
            .ok_or_else(|| "expected a number".to_string()),
        "boolean" => match text {
            "true" | "yes" | "1" | "on" => Ok(Value::Bool(true)),
            "false" | "no" | "0" | "off" => Ok(Value::Bool(false)),
            _ => Err("expected true or false".to_string()),
        },
        "null" if text == "null" => Ok(Value::Null),
        "array" => {
            if text.starts_with('[') {
                return serde_json::from_str(text).map_err(|e| format!("invalid JSON array: {e}"));
            }
            let items = prop.and_then(|p| p.get("items"));
            let item_types = items.map(types).unwrap_or_default();
            if item_types.is_empty() {
                return Ok(Value::String(text.to_string()));
            }
            item_types
                .iter()
                .find_map(|t| try_type(t, text, items).ok())
                .ok_or_else(|| format!("expected an item of type {}", item_types.join(" or ")))
        }
        "object" => serde_json::from_str::<Value>(text)
            .ok()
            .filter(Value::is_object)
            .ok_or_else(|| "expected a JSON object".to_string()),
        other => Err(format!(
            "cannot read a value of type `{other}` from the command line"
        )),
    }
}

/// A `--set` value: JSON if it parses (`true`, `3`, `{"a":1}`), else the text.
fn scalar(text: &str) -> Value {
    serde_json::from_str(text).unwrap_or_else(|_| Value::String(text.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn toks(s: &str) -> Vec<String> {
        s.split_whitespace().map(str::to_string).collect()
    }

    fn schema() -> Value {
        json!({"properties": {
            "name": {"type": "string"},
            "count": {"type": "integer"},
            "loud": {"type": "boolean"},
            "tags": {"type": "array", "items": {"type": "string"}},
            "dryRun": {"type": "boolean"},
            "opts": {"type": "object"}
        }})
    }

    #[test]
    fn unknown_flags_become_args_coerced_by_the_schema() {
        let p = parse(&toks("--name Ada --count 3 --loud"), Some(&schema())).unwrap();
        assert_eq!(
            Value::Object(p.args),
            json!({"name": "Ada", "count": 3, "loud": true})
        );
    }

    #[test]
    fn repeated_flags_become_arrays() {
        let p = parse(&toks("--tags a --tags b --x 1 --x 2"), Some(&schema())).unwrap();
        assert_eq!(p.args["tags"], json!(["a", "b"]));
        assert_eq!(p.args["x"], json!(["1", "2"]));
        let p = parse(&toks("--tags only"), Some(&schema())).unwrap();
        assert_eq!(p.args["tags"], json!(["only"]));
    }

    #[test]
    fn a_value_of_the_wrong_type_names_the_flag() {
        let err = parse(&toks("--count many"), Some(&schema())).unwrap_err();
        assert!(
            err.contains("--count many") && err.contains("integer"),
            "{err}"
        );
    }

    #[test]
    fn arg_and_arg_json_and_set_are_understood() {
        let p = parse(
            &[
                "--arg".into(),
                "count=4".into(),
                "--arg-json".into(),
                r#"{"opts":{"a":1}}"#.into(),
                "--set".into(),
                "debug=true".into(),
            ],
            Some(&schema()),
        )
        .unwrap();
        assert_eq!(p.args["count"], json!(4));
        assert_eq!(p.args["opts"], json!({"a": 1}));
        assert_eq!(p.overrides["debug"], json!(true));
    }

    #[test]
    fn kebab_flags_find_camel_case_properties_and_no_prefix_negates() {
        let p = parse(&toks("--dry-run --no-loud"), Some(&schema())).unwrap();
        assert_eq!(p.args["dryRun"], json!(true));
        assert_eq!(p.args["loud"], json!(false));
    }

    #[test]
    fn verbosity_flags_after_the_skill_are_not_args() {
        let p = parse(&toks("--name x -vv -q"), None).unwrap();
        assert_eq!((p.verbose, p.quiet), (2, true));
        assert_eq!(Value::Object(p.args), json!({"name": "x"}));
    }

    #[test]
    fn untyped_properties_take_json_objects_and_arrays() {
        let schema = json!({"properties": {"data": {}}});
        let p = parse(&toks(r#"--data {"x":1} --other [1,2]"#), Some(&schema)).unwrap();
        assert_eq!(p.args["data"], json!({"x": 1}));
        assert_eq!(p.args["other"], json!("[1,2]"), "no schema at all: text");
    }

    #[test]
    fn a_bare_word_is_a_usage_error() {
        assert!(
            parse(&toks("Ada"), None)
                .unwrap_err()
                .contains("unexpected argument")
        );
    }
}
