//! Values and errors across the boundary: JSON to JavaScript and back, a `SkillError` thrown into
//! a script as an `Error` (message, `code`, `data`, `tool`), and whatever a script throws turned
//! back into a `SkillError` (message, code, data, stack).

use rquickjs::{CaughtError, Ctx, Exception, Object, Value as JsValue};
use serde_json::{Map, Value};

use crate::error::SkillError;

/// A JSON value as a fresh JavaScript value.
pub(crate) fn to_js<'js>(cx: &Ctx<'js>, value: &Value) -> rquickjs::Result<JsValue<'js>> {
    Ok(match value {
        Value::Null => JsValue::new_null(cx.clone()),
        Value::Bool(b) => JsValue::new_bool(cx.clone(), *b),
        Value::Number(n) => match n.as_i64().and_then(|i| i32::try_from(i).ok()) {
            Some(i) => JsValue::new_int(cx.clone(), i),
            None => JsValue::new_float(cx.clone(), n.as_f64().unwrap_or(f64::NAN)),
        },
        Value::String(s) => rquickjs::String::from_str(cx.clone(), s)?.into_value(),
        Value::Array(_) | Value::Object(_) => cx.json_parse(value.to_string())?,
    })
}

/// `undefined` (and `None`) as `undefined`, anything else as [`to_js`].
pub(crate) fn to_js_opt<'js>(
    cx: &Ctx<'js>,
    value: Option<&Value>,
) -> rquickjs::Result<JsValue<'js>> {
    match value {
        None => Ok(JsValue::new_undefined(cx.clone())),
        Some(v) => to_js(cx, v),
    }
}

/// A JavaScript value as JSON, by `JSON.stringify`'s rules: `undefined`, functions and symbols
/// are absent (`None`), `toJSON` is honoured, a cycle or a BigInt throws. An `Error` becomes
/// `{ message, code?, data?, stack? }` (its own fields are not enumerable).
pub(crate) fn from_js<'js>(cx: &Ctx<'js>, value: JsValue<'js>) -> rquickjs::Result<Option<Value>> {
    if value.is_undefined() || value.is_function() || value.is_symbol() {
        return Ok(None);
    }
    if value.is_null() {
        return Ok(Some(Value::Null));
    }
    if let Some(b) = value.as_bool() {
        return Ok(Some(Value::Bool(b)));
    }
    if let Some(i) = value.as_int() {
        return Ok(Some(Value::from(i)));
    }
    if let Some(f) = value.as_float() {
        return Ok(Some(number(f)));
    }
    if let Some(s) = value.as_string() {
        return Ok(Some(Value::String(s.to_string()?)));
    }
    if let Some(error) = value.as_object().cloned().and_then(Exception::from_object) {
        return error_json(cx, &error).map(Some);
    }
    let Some(text) = cx.json_stringify(value)? else {
        return Ok(None);
    };
    let text = text.to_string()?;
    match serde_json::from_str(&text) {
        Ok(v) => Ok(Some(v)),
        Err(e) => Err(rquickjs::Exception::throw_range(
            cx,
            &format!("value cannot cross the sandbox boundary: {e}"),
        )),
    }
}

/// JSON has no NaN or infinities (they become null, as in `JSON.stringify`); integral values are
/// kept as integers.
fn number(f: f64) -> Value {
    if f.fract() == 0.0 && f.abs() < 9.007_199_254_740_992e15 {
        Value::from(f as i64)
    } else {
        serde_json::Number::from_f64(f).map_or(Value::Null, Value::Number)
    }
}

fn error_json<'js>(cx: &Ctx<'js>, error: &Exception<'js>) -> rquickjs::Result<Value> {
    let obj = error.as_object();
    let mut map = Map::new();
    let name: Option<String> = obj
        .get::<_, Option<rquickjs::Coerced<String>>>("name")
        .ok()
        .flatten()
        .map(|c| c.0);
    let message = error.message().unwrap_or_default();
    // A built-in error class says what went wrong ("TypeError: x is not a function").
    let message = match name.as_deref() {
        Some(n) if n != "Error" && !n.is_empty() && !message.starts_with(n) => {
            format!("{n}: {message}")
        }
        _ => message,
    };
    map.insert("message".into(), Value::String(message));
    if let Ok(Some(code)) = obj.get::<_, Option<String>>("code") {
        map.insert("code".into(), Value::String(code));
    }
    let data: JsValue = obj.get("data")?;
    if let Some(data) = from_js(cx, data)? {
        map.insert("data".into(), data);
    }
    if let Some(stack) = error.stack().filter(|s| !s.trim().is_empty()) {
        map.insert("stack".into(), Value::String(stack));
    }
    Ok(Value::Object(map))
}

/// Throws `err` into the script as an `Error` with `code` (and `data`, `tool`, the stack of the
/// script it came from, when it has them). Returns the marker error to hand back to QuickJS.
pub(crate) fn throw(cx: &Ctx<'_>, err: &SkillError) -> rquickjs::Error {
    match error_object(cx, err) {
        Ok(obj) => cx.throw(obj.into_value()),
        Err(e) => e,
    }
}

fn error_object<'js>(cx: &Ctx<'js>, err: &SkillError) -> rquickjs::Result<Object<'js>> {
    let obj = Exception::from_message(cx.clone(), err.message())?.into_object();
    obj.set("code", err.kind().code())?;
    if let Some(tool) = err.tool() {
        obj.set("tool", tool)?;
    }
    if let Some(data) = err.data() {
        obj.set("data", to_js(cx, data)?)?;
    }
    if let Some(stack) = err.stack() {
        obj.set("stack", stack)?;
    }
    Ok(obj)
}

/// The message QuickJS gives a failed allocation (an `InternalError`).
pub(crate) const OUT_OF_MEMORY: &str = "out of memory";

/// What a script threw, as a `SkillError`. A thrown `null` is read as a failed allocation: it is
/// what QuickJS throws when the heap is too full to build the error object.
pub(crate) fn caught<'js>(cx: &Ctx<'js>, error: CaughtError<'js>) -> SkillError {
    match error {
        CaughtError::Exception(e) => match error_json(cx, &e) {
            Ok(json) => SkillError::from_json(&json),
            Err(_) => SkillError::failed(e.message().unwrap_or_else(|| "script failed".into())),
        },
        CaughtError::Value(v) => match from_js(cx, v) {
            Ok(Some(json @ Value::Object(_))) if json.get("message").is_some() => {
                SkillError::from_json(&json)
            }
            Ok(Some(Value::String(s))) => SkillError::failed(s),
            // QuickJS throws null when it cannot even allocate the "out of memory" error.
            Ok(Some(Value::Null)) => SkillError::failed(OUT_OF_MEMORY),
            Ok(Some(other)) => SkillError::failed(format!("script threw {other}")),
            Ok(None) => SkillError::failed("script threw undefined"),
            Err(_) => SkillError::failed("script threw a value that cannot be shown"),
        },
        CaughtError::Error(e) => SkillError::failed(e.to_string()),
    }
}

/// The message a caught error carries, without building a `SkillError` (to recognise limits).
pub(crate) fn is_message(err: &SkillError, exact: &[&str]) -> bool {
    let m = err.message();
    exact
        .iter()
        .any(|e| m == *e || m.ends_with(&format!(": {e}")))
}

#[cfg(test)]
mod tests {
    use rquickjs::{CatchResultExt, Context, Runtime};
    use serde_json::json;

    use super::*;
    use crate::error::ErrorKind;

    fn with_js<R>(f: impl FnOnce(Ctx<'_>) -> R) -> R {
        let rt = Runtime::new().expect("runtime");
        let cx = Context::full(&rt).expect("context");
        cx.with(f)
    }

    #[test]
    fn json_round_trips_through_javascript() {
        let value = json!({"s": "é", "n": 3, "f": 1.5, "big": 1e300, "b": true, "z": null, "a": [1, {"x": []}]});
        with_js(|cx| {
            let js = to_js(&cx, &value).unwrap();
            assert_eq!(from_js(&cx, js).unwrap(), Some(value.clone()));
        });
    }

    #[test]
    fn values_json_cannot_hold_follow_json_stringify() {
        with_js(|cx| {
            let eval = |code: &str| -> Option<Value> {
                let v: JsValue = cx.eval(code).unwrap();
                from_js(&cx, v).unwrap()
            };
            assert_eq!(eval("undefined"), None);
            assert_eq!(eval("(() => 1)"), None);
            assert_eq!(
                eval("({ a: undefined, f() {}, n: NaN })"),
                Some(json!({"n": null}))
            );
            assert_eq!(
                eval("({ toJSON() { return 'custom'; } })"),
                Some(json!("custom"))
            );
            assert_eq!(eval("2 ** 31"), Some(json!(2_147_483_648_i64)));
            let cyclic: JsValue = cx.eval("const o = {}; o.o = o; o").unwrap();
            assert!(from_js(&cx, cyclic).is_err(), "a cycle cannot cross");
        });
    }

    #[test]
    fn a_thrown_error_keeps_its_class_message_code_and_stack() {
        with_js(|cx| {
            let thrown = cx
                .eval::<(), _>("function f() { const e = new TypeError('bad'); e.code = 'denied'; throw e; } f()")
                .catch(&cx)
                .unwrap_err();
            let err = caught(&cx, thrown);
            assert_eq!(err.message(), "TypeError: bad");
            assert_eq!(err.kind(), ErrorKind::Denied);
            assert!(
                err.stack().is_some_and(|s| s.contains("at f")),
                "{:?}",
                err.stack()
            );
        });
    }

    #[test]
    fn thrown_non_errors_become_failures_and_null_reads_as_out_of_memory() {
        with_js(|cx| {
            let throw = |code: &str| {
                let e = cx.eval::<(), _>(code).catch(&cx).unwrap_err();
                caught(&cx, e)
            };
            assert_eq!(throw("throw 'plain'").message(), "plain");
            assert_eq!(
                throw("throw { message: 'obj', code: 'not-found' }").kind(),
                ErrorKind::NotFound
            );
            assert_eq!(throw("throw 42").message(), "script threw 42");
            assert_eq!(throw("throw null").message(), OUT_OF_MEMORY);
        });
    }

    #[test]
    fn a_skill_error_thrown_into_a_script_carries_code_data_and_tool() {
        with_js(|cx| {
            let err = SkillError::new(ErrorKind::NotFound, "no skill named `x`")
                .with_data(json!({"name": "x"}))
                .with_tool("caller");
            let _ = throw(&cx, &err);
            let value = cx.catch();
            let obj = value.as_object().expect("an Error object");
            assert!(obj.is_error());
            assert_eq!(
                obj.get::<_, String>("message").unwrap(),
                "no skill named `x`"
            );
            assert_eq!(obj.get::<_, String>("code").unwrap(), "not-found");
            assert_eq!(obj.get::<_, String>("tool").unwrap(), "caller");
            let data: JsValue = obj.get("data").unwrap();
            assert_eq!(from_js(&cx, data).unwrap(), Some(json!({"name": "x"})));
        });
    }
}
