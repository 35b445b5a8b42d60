//! What of a run's args and result the record keeps: fields a params schema marks `writeOnly`
//! or `x-secret`, and credentials under the names headers carry them (`authorization`,
//! cookies, API keys, signatures), are replaced by [`REDACTED`] at any depth.

use serde_json::{Map, Value};

/// What a redacted value is recorded as.
pub const REDACTED: &str = "[redacted]";

/// Keys that hold credentials wherever they appear (header names, compared without case).
const SECRET_KEYS: [&str; 9] = [
    "authorization",
    "proxy-authorization",
    "cookie",
    "set-cookie",
    "x-api-key",
    "x-slack-signature",
    "x-hub-signature",
    "x-hub-signature-256",
    "x-skillgate-signature",
];

/// Whether a schema marks its value as one never to show back.
fn secret(schema: &Value) -> bool {
    schema.get("writeOnly") == Some(&Value::Bool(true))
        || schema.get("x-secret") == Some(&Value::Bool(true))
}

/// `value` with what `schema` marks secret, and every credential-named key, redacted; whether
/// anything was.
pub fn redact(value: &Value, schema: Option<&Value>) -> (Value, bool) {
    let mut out = value.clone();
    let redacted = redact_in_place(&mut out, schema);
    (out, redacted)
}

/// [`redact`] on a value the caller owns; whether anything was redacted.
pub fn redact_in_place(value: &mut Value, schema: Option<&Value>) -> bool {
    walk(value, schema)
}

/// Whether [`redact_in_place`] would redact anything of `value`, found without a copy: most
/// runs have nothing to redact, and their args and result are then recorded as they are.
pub fn has_secrets(value: &Value, schema: Option<&Value>) -> bool {
    if schema.is_some_and(secret) {
        return true;
    }
    match value {
        Value::Object(fields) => {
            let properties = schema.and_then(|s| s.get("properties"));
            fields.iter().any(|(key, field)| {
                (secret_key(key) && !field.is_null())
                    || has_secrets(field, properties.and_then(|p| p.get(key)))
            })
        }
        Value::Array(items) => {
            let each = schema.and_then(|s| s.get("items"));
            items.iter().any(|item| has_secrets(item, each))
        }
        _ => false,
    }
}

/// Whether `key` names a credential ([`SECRET_KEYS`]).
fn secret_key(key: &str) -> bool {
    SECRET_KEYS.iter().any(|k| k.eq_ignore_ascii_case(key))
}

fn walk(value: &mut Value, schema: Option<&Value>) -> bool {
    if schema.is_some_and(secret) {
        *value = Value::String(REDACTED.into());
        return true;
    }
    match value {
        Value::Object(fields) => object(fields, schema),
        Value::Array(items) => {
            let each = schema.and_then(|s| s.get("items"));
            items
                .iter_mut()
                .fold(false, |any, item| walk(item, each) | any)
        }
        _ => false,
    }
}

fn object(fields: &mut Map<String, Value>, schema: Option<&Value>) -> bool {
    let properties = schema.and_then(|s| s.get("properties"));
    let mut any = false;
    for (key, field) in fields.iter_mut() {
        if secret_key(key) && !field.is_null() {
            *field = Value::String(REDACTED.into());
            any = true;
            continue;
        }
        any |= walk(field, properties.and_then(|p| p.get(key)));
    }
    any
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn fields_the_schema_marks_secret_are_redacted_at_any_depth() {
        let schema = json!({
            "type": "object",
            "properties": {
                "user": { "type": "string" },
                "password": { "type": "string", "writeOnly": true },
                "vault": { "type": "object", "properties": { "pin": { "x-secret": true } } },
                "tokens": { "type": "array", "items": { "type": "string", "writeOnly": true } }
            }
        });
        let args = json!({
            "user": "ada", "password": "hunter2",
            "vault": { "pin": 1234, "label": "home" },
            "tokens": ["a", "b"]
        });
        let (kept, redacted) = redact(&args, Some(&schema));
        assert!(redacted);
        assert!(has_secrets(&args, Some(&schema)));
        // Only fields the args carry are redacted: without the secret ones, nothing is.
        let plain = json!({ "user": "ada", "vault": { "label": "home" } });
        assert!(!has_secrets(&plain, Some(&schema)));
        assert!(!redact(&plain, Some(&schema)).1);
        assert_eq!(
            kept,
            json!({
                "user": "ada", "password": REDACTED,
                "vault": { "pin": REDACTED, "label": "home" },
                "tokens": [REDACTED, REDACTED]
            })
        );
    }

    #[test]
    fn credential_headers_are_redacted_without_a_schema_in_any_case() {
        let args = json!({ "headers": { "Authorization": "Bearer sk-1", "Accept": "*/*", "x-api-key": "k" } });
        let (kept, redacted) = redact(&args, None);
        assert!(redacted);
        assert!(has_secrets(&args, None));
        let nested = json!([{ "headers": { "Cookie": "a=1" } }]);
        assert!(has_secrets(&nested, None));
        assert!(redact(&nested, None).1);
        let absent = json!({ "authorization": null });
        assert!(!has_secrets(&absent, None));
        assert!(!redact(&absent, None).1);
        assert_eq!(
            kept,
            json!({ "headers": { "Authorization": REDACTED, "Accept": "*/*", "x-api-key": REDACTED } })
        );
    }

    #[test]
    fn args_with_nothing_secret_are_kept_whole() {
        let args = json!({ "name": "ada", "n": [1, 2] });
        assert!(!has_secrets(&args, None));
        assert_eq!(redact(&args, None), (args, false));
    }
}
