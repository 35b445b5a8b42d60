//! `${...}` interpolation of cascade values.
//!
//! Each level is interpolated on its own before merging, so `${dir}` is the folder of the skill
//! that wrote the value. Level variables (`${dir}`, `${name}`, `${project}`, `${env.NAME}`) are
//! replaced when the cascade is resolved and cached; context variables (`${args.x}`,
//! `${nonlocals.x}`, `${locals.x}`, `${globals.x}`, `${run.x}`, `${envelope.id}`) are replaced
//! at each invocation. A string that is exactly one `${...}` takes the variable's JSON value; a
//! variable inside longer text is inserted as text. `$${` writes a literal `${`.

use serde_json::{Map, Value};

use crate::error::{Result, SkillError};

/// Variables known when a level is read.
pub struct LevelVars<'a> {
    pub dir: Option<&'a str>,
    pub name: &'a str,
    pub project: &'a str,
}

const CONTEXT_ROOTS: [&str; 6] = ["args", "locals", "nonlocals", "globals", "run", "envelope"];

/// Replaces level variables in every string below `value` (keys starting with `$` are left
/// alone). Returns whether any context variable remains for invocation time.
pub fn level_pass(value: &mut Value, vars: &LevelVars<'_>, what: &str) -> Result<bool> {
    let mut dynamic = false;
    walk(value, &mut |s| {
        if !s.contains("${") {
            return Ok(None);
        }
        render(s, &mut |var| {
            if is_context_var(var) {
                dynamic = true;
                return Ok(Lookup::Keep);
            }
            let found = match var {
                "dir" => vars.dir.map(|d| Value::String(d.to_string())),
                "name" => Some(Value::String(vars.name.to_string())),
                "project" => Some(Value::String(vars.project.to_string())),
                _ => match var.strip_prefix("env.") {
                    Some(key) => Some(Value::String(std::env::var(key).unwrap_or_default())),
                    None => {
                        return Err(SkillError::config(format!(
                            "{what}: unknown variable `${{{var}}}` (known: dir, name, project, env.NAME, args.*, locals.*, nonlocals.*, globals.*, run.*, envelope.*)"
                        )));
                    }
                },
            };
            Ok(Lookup::Found(found.unwrap_or(Value::Null)))
        })
        .map(Some)
    })?;
    Ok(dynamic)
}

/// Replaces context variables using `lookup` (a dotted-path read on the context).
pub fn context_pass(value: &mut Value, lookup: &dyn Fn(&str) -> Option<Value>) {
    let _ = walk(value, &mut |s| {
        if !s.contains("${") {
            return Ok(None);
        }
        render(s, &mut |var| {
            Ok(Lookup::Found(lookup(var).unwrap_or(Value::Null)))
        })
        .map(Some)
    });
}

fn is_context_var(var: &str) -> bool {
    let root = var.split('.').next().unwrap_or(var);
    CONTEXT_ROOTS.contains(&root)
}

enum Lookup {
    Found(Value),
    Keep,
}

type Replace<'a> = dyn FnMut(&str) -> Result<Option<Value>> + 'a;

fn walk(value: &mut Value, f: &mut Replace<'_>) -> Result<()> {
    match value {
        Value::String(s) => {
            if let Some(new) = f(s)? {
                *value = new;
            }
        }
        Value::Array(items) => {
            for item in items {
                walk(item, f)?;
            }
        }
        Value::Object(map) => walk_map(map, f)?,
        _ => {}
    }
    Ok(())
}

fn walk_map(map: &mut Map<String, Value>, f: &mut Replace<'_>) -> Result<()> {
    for (key, item) in map.iter_mut() {
        if !key.starts_with('$') {
            walk(item, f)?;
        }
    }
    Ok(())
}

/// Renders one string. A lone `${var}` yields the raw value.
fn render(s: &str, lookup: &mut dyn FnMut(&str) -> Result<Lookup>) -> Result<Value> {
    if let Some(var) = s.strip_prefix("${").and_then(|r| r.strip_suffix('}'))
        && !var.contains('}')
        && !var.contains("${")
    {
        return Ok(match lookup(var.trim())? {
            Lookup::Found(v) => v,
            Lookup::Keep => Value::String(s.to_string()),
        });
    }
    let mut out = String::with_capacity(s.len());
    let mut rest = s;
    while let Some(at) = rest.find("${") {
        if rest[..at].ends_with('$') {
            out.push_str(&rest[..at - 1]);
            out.push_str("${");
            rest = &rest[at + 2..];
            continue;
        }
        out.push_str(&rest[..at]);
        let Some(end) = rest[at..].find('}') else {
            out.push_str(&rest[at..]);
            rest = "";
            break;
        };
        let var = &rest[at + 2..at + end];
        match lookup(var.trim())? {
            Lookup::Found(Value::String(v)) => out.push_str(&v),
            Lookup::Found(Value::Null) => {}
            Lookup::Found(v) => out.push_str(&v.to_string()),
            Lookup::Keep => out.push_str(&rest[at..=at + end]),
        }
        rest = &rest[at + end + 1..];
    }
    out.push_str(rest);
    Ok(Value::String(out))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn vars() -> LevelVars<'static> {
        LevelVars {
            dir: Some("/p/skills"),
            name: "t",
            project: "/p",
        }
    }

    #[test]
    fn level_variables_are_replaced_inside_text() {
        let mut v = json!({"paths": ["${dir}/lib"], "who": "tool ${name}"});
        assert!(!level_pass(&mut v, &vars(), "t").unwrap());
        assert_eq!(v, json!({"paths": ["/p/skills/lib"], "who": "tool t"}));
    }

    #[test]
    fn a_whole_string_variable_keeps_its_json_type() {
        let mut v = json!({"n": "${args.count}"});
        assert!(level_pass(&mut v, &vars(), "t").unwrap());
        context_pass(&mut v, &|p| (p == "args.count").then(|| json!(3)));
        assert_eq!(v, json!({"n": 3}));
    }

    #[test]
    fn dollar_dollar_escapes_interpolation() {
        let mut v = json!("cost: $${price}");
        level_pass(&mut v, &vars(), "t").unwrap();
        assert_eq!(v, json!("cost: ${price}"));
    }

    #[test]
    fn unknown_variables_are_a_config_error() {
        let mut v = json!("${nope}");
        let err = level_pass(&mut v, &vars(), "skill t").unwrap_err();
        assert!(
            err.to_string().contains("unknown variable `${nope}`"),
            "{err}"
        );
    }

    #[test]
    fn annotation_keys_are_not_interpolated() {
        let mut v = json!({"$order": {"x": "${nope}"}});
        level_pass(&mut v, &vars(), "t").unwrap();
        assert_eq!(v, json!({"$order": {"x": "${nope}"}}));
    }
}
