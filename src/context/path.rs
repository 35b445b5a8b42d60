//! Dotted paths (`locals.config.cwd`, `args.items.0`) read and written on JSON values.

use serde_json::{Map, Value};

/// Splits a dotted path into its segments; empty segments are rejected.
pub fn split(path: &str) -> Result<Vec<&str>, String> {
    if path.is_empty() {
        return Err("empty path".into());
    }
    let segments: Vec<&str> = path.split('.').collect();
    if segments.iter().any(|s| s.is_empty()) {
        return Err(format!("path `{path}` has an empty segment"));
    }
    Ok(segments)
}

/// Reads the value at `segments` below `value`; a numeric segment indexes an array.
pub fn get<'a>(value: &'a Value, segments: &[&str]) -> Option<&'a Value> {
    let mut current = value;
    for segment in segments {
        current = match current {
            Value::Object(map) => map.get(*segment)?,
            Value::Array(items) => items.get(segment.parse::<usize>().ok()?)?,
            _ => return None,
        };
    }
    Some(current)
}

/// Reads below a JSON object held as a map (the whole map when `segments` is empty).
pub fn get_map(map: &Map<String, Value>, segments: &[&str]) -> Option<Value> {
    match segments.split_first() {
        None => Some(Value::Object(map.clone())),
        Some((first, rest)) => get(map.get(*first)?, rest).cloned(),
    }
}

/// Writes `new` at `segments` below `value`, creating objects on the way.
///
/// An index equal to an array's length appends. Writing through a scalar is an error that names
/// the segment, so `set("a.b.c")` on `{a: {b: 1}}` says `b` is a number.
pub fn set(value: &mut Value, segments: &[&str], new: Value) -> Result<(), String> {
    let Some((last, parents)) = segments.split_last() else {
        *value = new;
        return Ok(());
    };
    let mut current = value;
    for (depth, segment) in parents.iter().enumerate() {
        if current.is_null() {
            *current = Value::Object(Map::new());
        }
        current = match current {
            Value::Object(map) => map
                .entry((*segment).to_string())
                .or_insert_with(|| Value::Object(Map::new())),
            Value::Array(items) => {
                let index = array_index(segment, items.len())?;
                if index == items.len() {
                    items.push(Value::Object(Map::new()));
                }
                &mut items[index]
            }
            other => {
                return Err(format!(
                    "cannot write below `{}`: it is {}",
                    segments[..=depth].join("."),
                    kind(other)
                ));
            }
        };
    }
    if current.is_null() {
        *current = Value::Object(Map::new());
    }
    match current {
        Value::Object(map) => {
            map.insert((*last).to_string(), new);
            Ok(())
        }
        Value::Array(items) => {
            let index = array_index(last, items.len())?;
            if index == items.len() {
                items.push(new);
            } else {
                items[index] = new;
            }
            Ok(())
        }
        other => Err(format!(
            "cannot write `{}`: `{}` is {}",
            segments.join("."),
            parents.join("."),
            kind(other)
        )),
    }
}

fn array_index(segment: &str, len: usize) -> Result<usize, String> {
    match segment.parse::<usize>() {
        Ok(index) if index <= len => Ok(index),
        Ok(index) => Err(format!(
            "index {index} is past the end of an array of {len}"
        )),
        Err(_) => Err(format!("`{segment}` is not an array index")),
    }
}

/// A short English name for a JSON value's type, for error messages.
pub fn kind(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn set_creates_intermediate_objects() {
        let mut v = json!({});
        set(&mut v, &["a", "b", "c"], json!(1)).unwrap();
        assert_eq!(v, json!({"a": {"b": {"c": 1}}}));
    }

    #[test]
    fn numeric_segments_index_arrays_and_append_at_len() {
        let mut v = json!({"xs": [1, 2]});
        set(&mut v, &["xs", "2"], json!(3)).unwrap();
        assert_eq!(get(&v, &["xs", "2"]), Some(&json!(3)));
        assert!(set(&mut v, &["xs", "9"], json!(0)).is_err());
    }

    #[test]
    fn writing_through_a_scalar_names_the_segment() {
        let mut v = json!({"a": {"b": 1}});
        let err = set(&mut v, &["a", "b", "c"], json!(2)).unwrap_err();
        assert!(err.contains("`a.b`") && err.contains("a number"), "{err}");
    }

    #[test]
    fn empty_segments_are_rejected() {
        assert!(split("a..b").is_err());
        assert_eq!(split("a.b").unwrap(), vec!["a", "b"]);
    }
}
