//! JSON text written straight into a `String`, as `serde_json` writes it compactly: what the
//! runs record keeps of every run (its args and result, its entries' timings), without a
//! scratch buffer checked for UTF-8 and copied in, or a `Value` built and dropped to be written.

use serde_json::Value;

/// Appends `value` as JSON text, the same text `serde_json::to_string` gives.
pub fn push_value(out: &mut String, value: &Value) {
    match value {
        Value::Null => out.push_str("null"),
        Value::Bool(true) => out.push_str("true"),
        Value::Bool(false) => out.push_str("false"),
        Value::Number(n) => {
            if let Some(n) = n.as_u64() {
                push_int(out, n);
            } else if let Some(n) = n.as_i64() {
                push_int(out, n);
            } else {
                // A float: its `Display` is the text `serde_json` writes.
                use std::fmt::Write;
                let _ = write!(out, "{n}");
            }
        }
        Value::String(text) => push_str(out, text),
        Value::Array(items) => {
            out.push('[');
            for (n, item) in items.iter().enumerate() {
                if n > 0 {
                    out.push(',');
                }
                push_value(out, item);
            }
            out.push(']');
        }
        Value::Object(fields) => {
            out.push('{');
            for (n, (key, item)) in fields.iter().enumerate() {
                if n > 0 {
                    out.push(',');
                }
                push_str(out, key);
                out.push(':');
                push_value(out, item);
            }
            out.push('}');
        }
    }
}

/// Appends `text` as a JSON string.
pub fn push_str(out: &mut String, text: &str) {
    // Names are nearly always plain: nothing in them to escape.
    if text.bytes().all(|b| b >= 0x20 && b != b'"' && b != b'\\') {
        out.push('"');
        out.push_str(text);
        out.push('"');
    } else if let Ok(quoted) = serde_json::to_string(text) {
        out.push_str(&quoted);
    }
}

/// Appends `n` as a JSON number.
pub fn push_int(out: &mut String, n: impl itoa::Integer) {
    out.push_str(itoa::Buffer::new().format(n));
}

/// Appends `us` microseconds as a JSON number of milliseconds, exactly (`1230` is `1.23`).
pub fn push_ms(out: &mut String, us: u64) {
    push_int(out, us / 1000);
    let mut frac = us % 1000;
    if frac == 0 {
        return;
    }
    let mut digits = 3;
    while frac.is_multiple_of(10) {
        frac /= 10;
        digits -= 1;
    }
    out.push('.');
    let mut buffer = itoa::Buffer::new();
    let frac = buffer.format(frac);
    for _ in frac.len()..digits {
        out.push('0');
    }
    out.push_str(frac);
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use serde_json::json;

    /// Any JSON value: nested arrays and objects of strings with every kind of character,
    /// integers of either sign and floats.
    fn any_value() -> impl Strategy<Value = Value> {
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::Bool),
            any::<u64>().prop_map(Value::from),
            any::<i64>().prop_map(Value::from),
            any::<f64>().prop_map(|f| json!(f)),
            ".*".prop_map(Value::String),
        ];
        leaf.prop_recursive(4, 64, 8, |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..8).prop_map(Value::Array),
                prop::collection::vec((".*", inner), 0..8)
                    .prop_map(|fields| Value::Object(fields.into_iter().collect())),
            ]
        })
    }

    proptest! {
        #[test]
        fn a_value_is_written_as_the_text_serde_json_writes(value in any_value()) {
            let mut out = String::from("kept before ");
            push_value(&mut out, &value);
            prop_assert_eq!(&out["kept before ".len()..], serde_json::to_string(&value).unwrap());
        }
    }

    #[test]
    fn strings_are_written_as_json_text_that_reads_back_as_themselves() {
        for text in [
            "execute",
            "",
            "a \"b\" \\ c",
            "line\nbreak\u{1}",
            "é — 🦀",
            "tab\t/",
        ] {
            let mut out = String::new();
            push_str(&mut out, text);
            assert_eq!(
                serde_json::from_str::<Value>(&out).unwrap(),
                Value::from(text),
                "{out}"
            );
        }
    }

    #[test]
    fn microseconds_are_written_as_the_exact_milliseconds_they_are() {
        for (us, text) in [
            (0, "0"),
            (1, "0.001"),
            (10, "0.01"),
            (100, "0.1"),
            (1000, "1"),
            (1234, "1.234"),
            (1230, "1.23"),
            (5007, "5.007"),
            (86_400_000_001, "86400000.001"),
        ] {
            let mut out = String::new();
            push_ms(&mut out, us);
            assert_eq!(out, text);
            let read: f64 = serde_json::from_str(&out).unwrap();
            assert_eq!(read, us as f64 / 1000.0);
        }
    }
}
