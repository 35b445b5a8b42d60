//! Values and errors across the boundary: JSON to JavaScript and back, a `SkillError` thrown into
//! a script as an `Error` (message, `code`, `data`, `tool`), and whatever a script throws turned
//! back into a `SkillError` (message, code, data, stack).
//!
//! Depth and cycles. A value a script hands over (a result, a bridge argument, what it throws)
//! nests at most [`MAX_DEPTH`] levels of arrays, objects and errors, and holds no cycle; 100
//! leaves room for the envelopes around it (a reply's `result`, an error's `data`) under the 128
//! levels JSON readers such as serde_json accept, so whatever crosses can be stored and read back.
//! - A value (a result, a bridge argument) that breaks either rule is refused with a
//!   `RangeError` saying which (`value cannot cross the sandbox boundary: it refers back to
//!   itself (a cycle)` / `...: it nests deeper than 100 levels`), as `JSON.stringify` refuses a
//!   cycle: a result is data for its caller, so it is never silently changed.
//! - A thrown or rejected `Error` (and one given to `fail` or `console`) always crosses, so its
//!   message, code and stack reach the user; where its `data` (or the `data` of an error inside
//!   it) cannot, that part is replaced by a marker string: `"[Circular]"` for a reference back to an enclosing error or object,
//!   `"[Too deep]"` past the limit. An error chain (`data` holding the previous error) is thus
//!   kept down to the limit and cut there.
//!
//! Nothing recurses on a script-controlled depth past the limit: errors are walked one bounded
//! level at a time, other values go through QuickJS's own `JSON.stringify` (bounded by the
//! sandbox stack limit, which it reports as too deep here), and the text is measured before
//! serde_json parses it.

use rquickjs::{CaughtError, Ctx, Exception, Object, Value as JsValue};
use serde_json::{Map, Value};

use crate::error::SkillError;

/// How many levels of arrays, objects and errors a value crossing from a script may nest.
pub(crate) const MAX_DEPTH: usize = 100;

/// What stands in an error's `data` for a reference back to an enclosing error or object.
pub(crate) const CIRCULAR: &str = "[Circular]";

/// What stands in an error's `data` for the part past [`MAX_DEPTH`].
pub(crate) const TOO_DEEP: &str = "[Too deep]";

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

/// Why a value cannot cross.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Refusal {
    Cycle,
    TooDeep,
}

impl Refusal {
    fn reason(self) -> String {
        match self {
            Refusal::Cycle => "it refers back to itself (a cycle)".into(),
            Refusal::TooDeep => format!("it nests deeper than {MAX_DEPTH} levels"),
        }
    }

    fn marker(self) -> &'static str {
        match self {
            Refusal::Cycle => CIRCULAR,
            Refusal::TooDeep => TOO_DEEP,
        }
    }
}

/// How a conversion failed: refused by the rules above, or an exception from the script's own
/// code (a throwing `toJSON` or getter, a BigInt) or the engine (out of memory, interrupted),
/// which stays pending in the context.
enum Failed {
    Refused(Refusal),
    Js(rquickjs::Error),
}

impl From<rquickjs::Error> for Failed {
    fn from(e: rquickjs::Error) -> Self {
        Failed::Js(e)
    }
}

/// One conversion: the errors it is inside of (to find a `data` that leads back to one), and
/// whether an error's `data` that cannot cross is replaced by a marker (a thrown error) or
/// refuses the whole value (a result).
struct Walk<'js> {
    errors: Vec<Object<'js>>,
    markers: bool,
}

/// A JavaScript value as JSON, by `JSON.stringify`'s rules: `undefined`, functions and symbols
/// are absent (`None`), `toJSON` is honoured, a BigInt throws. An `Error` becomes
/// `{ message, code?, data?, stack? }` (its own fields are not enumerable). A cycle, or nesting
/// past [`MAX_DEPTH`], throws a `RangeError` that says so.
pub(crate) fn from_js<'js>(cx: &Ctx<'js>, value: JsValue<'js>) -> rquickjs::Result<Option<Value>> {
    Walk::new(false).json(cx, value)
}

/// [`from_js`] for a value that carries an error to report (`fail(error)`, `console.log`): an
/// `Error` in it crosses as a thrown one does, its `data` marked where it cannot.
pub(crate) fn from_js_marked<'js>(
    cx: &Ctx<'js>,
    value: JsValue<'js>,
) -> rquickjs::Result<Option<Value>> {
    Walk::new(true).json(cx, value)
}

/// Throws the `RangeError` for a value that cannot cross.
fn refuse(cx: &Ctx<'_>, why: Refusal) -> rquickjs::Error {
    Exception::throw_range(
        cx,
        &format!("value cannot cross the sandbox boundary: {}", why.reason()),
    )
}

impl<'js> Walk<'js> {
    fn new(markers: bool) -> Self {
        Walk {
            errors: Vec::new(),
            markers,
        }
    }

    /// A whole value; a refusal is thrown as a `RangeError`.
    fn json(&mut self, cx: &Ctx<'js>, value: JsValue<'js>) -> rquickjs::Result<Option<Value>> {
        match self.value(cx, value, 0) {
            Ok(json) => Ok(json),
            Err(Failed::Refused(why)) => Err(refuse(cx, why)),
            Err(Failed::Js(e)) => Err(e),
        }
    }

    /// `value`, found `depth` levels down.
    fn value(
        &mut self,
        cx: &Ctx<'js>,
        value: JsValue<'js>,
        depth: usize,
    ) -> Result<Option<Value>, Failed> {
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
            return self.error(cx, &error, depth).map(Some);
        }
        stringified(cx, value, depth)
    }

    /// An `Error` found `depth` levels down, as `{ message, code?, data?, stack? }`.
    fn error(
        &mut self,
        cx: &Ctx<'js>,
        error: &Exception<'js>,
        depth: usize,
    ) -> Result<Value, Failed> {
        let obj = error.as_object();
        if depth >= MAX_DEPTH {
            return Err(Failed::Refused(Refusal::TooDeep));
        }
        if self.errors.contains(obj) {
            return Err(Failed::Refused(Refusal::Cycle));
        }
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
        self.errors.push(obj.clone());
        let data = self.value(cx, data, depth + 1);
        self.errors.pop();
        match data {
            Ok(Some(data)) => {
                map.insert("data".into(), data);
            }
            Ok(None) => {}
            Err(Failed::Refused(why)) if self.markers => {
                map.insert("data".into(), Value::String(why.marker().into()));
            }
            Err(e) => return Err(e),
        }
        if let Some(stack) = error.stack().filter(|s| !s.trim().is_empty()) {
            map.insert("stack".into(), Value::String(stack));
        }
        Ok(Value::Object(map))
    }
}

/// Any other value, through `JSON.stringify`, found `depth` levels down.
fn stringified<'js>(
    cx: &Ctx<'js>,
    value: JsValue<'js>,
    depth: usize,
) -> Result<Option<Value>, Failed> {
    let text = match cx.json_stringify(value) {
        Ok(Some(text)) => text.to_string()?,
        Ok(None) => return Ok(None),
        Err(rquickjs::Error::Exception) => {
            let thrown = cx.catch();
            return Err(match stringify_refusal(&thrown) {
                Some(why) => Failed::Refused(why),
                None => Failed::Js(cx.throw(thrown)),
            });
        }
        Err(e) => return Err(e.into()),
    };
    if depth + nesting(&text) > MAX_DEPTH {
        return Err(Failed::Refused(Refusal::TooDeep));
    }
    match serde_json::from_str(&text) {
        Ok(v) => Ok(Some(v)),
        Err(e) => Err(Failed::Js(Exception::throw_range(
            cx,
            &format!("value cannot cross the sandbox boundary: {e}"),
        ))),
    }
}

/// What `JSON.stringify` threw, when it is one of the rules here: QuickJS's cycle error, or its
/// stack limit reached by nesting.
fn stringify_refusal(thrown: &JsValue<'_>) -> Option<Refusal> {
    let error = thrown
        .as_object()
        .cloned()
        .and_then(Exception::from_object)?;
    let message = error.message()?;
    if message == "circular reference" {
        Some(Refusal::Cycle)
    } else if message == "Maximum call stack size exceeded" || message == "stack overflow" {
        Some(Refusal::TooDeep)
    } else {
        None
    }
}

/// How deep JSON text nests (arrays and objects), read without recursion.
fn nesting(text: &str) -> usize {
    let (mut depth, mut deepest) = (0usize, 0usize);
    let (mut in_string, mut escaped) = (false, false);
    for byte in text.bytes() {
        if in_string {
            match byte {
                _ if escaped => escaped = false,
                b'\\' => escaped = true,
                b'"' => in_string = false,
                _ => {}
            }
            continue;
        }
        match byte {
            b'"' => in_string = true,
            b'[' | b'{' => {
                depth += 1;
                deepest = deepest.max(depth);
            }
            b']' | b'}' => depth = depth.saturating_sub(1),
            _ => {}
        }
    }
    deepest
}

/// How deep a JSON value nests (arrays and objects; a scalar is 0), read without recursion.
pub(crate) fn depth(value: &Value) -> usize {
    let mut deepest = 0;
    let mut stack = vec![(value, 0usize)];
    while let Some((value, above)) = stack.pop() {
        let level = above + 1;
        match value {
            Value::Array(items) => stack.extend(items.iter().map(|item| (item, level))),
            Value::Object(map) => stack.extend(map.values().map(|item| (item, level))),
            _ => continue,
        }
        deepest = deepest.max(level);
    }
    deepest
}

/// A thrown value (an `Error` or anything else) as a `SkillError`.
pub(crate) fn thrown<'js>(cx: &Ctx<'js>, value: JsValue<'js>) -> SkillError {
    match value.as_object().cloned().and_then(Exception::from_object) {
        Some(error) => caught(cx, CaughtError::Exception(error)),
        None => caught(cx, CaughtError::Value(value)),
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
/// what QuickJS throws when the heap is too full to build the error object. An `Error` always
/// crosses (its `data` as far as it can, see the module's notes); another thrown value crosses
/// as [`from_js`] converts it, or is named as one that cannot.
pub(crate) fn caught<'js>(cx: &Ctx<'js>, error: CaughtError<'js>) -> SkillError {
    match error {
        CaughtError::Exception(e) => {
            match Walk::new(true).error(cx, &e, 0) {
                Ok(json) => SkillError::from_json(&json),
                Err(_) => {
                    // A getter or `toJSON` of the error threw: keep what does not run its code.
                    let _ = cx.catch();
                    SkillError::failed(e.message().unwrap_or_else(|| "script failed".into()))
                }
            }
        }
        CaughtError::Value(v) => {
            match Walk::new(false).value(cx, v, 0) {
                Ok(Some(json @ Value::Object(_))) if json.get("message").is_some() => {
                    SkillError::from_json(&json)
                }
                Ok(Some(Value::String(s))) => SkillError::failed(s),
                // QuickJS throws null when it cannot even allocate the "out of memory" error.
                Ok(Some(Value::Null)) => SkillError::failed(OUT_OF_MEMORY),
                Ok(Some(other)) => SkillError::failed(format!("script threw {other}")),
                Ok(None) => SkillError::failed("script threw undefined"),
                Err(Failed::Refused(why)) => SkillError::failed(format!(
                    "script threw a value that cannot cross the sandbox boundary: {}",
                    why.reason()
                )),
                Err(Failed::Js(_)) => {
                    let _ = cx.catch();
                    SkillError::failed("script threw a value that cannot be shown")
                }
            }
        }
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
mod fuzz;

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

    #[test]
    fn nesting_counts_brackets_outside_strings_only() {
        assert_eq!(nesting(r#"{"a":[1,{"b":"[[{{\"]"}],"c":{}}"#), 3);
        assert_eq!(nesting(r#""[\\""#), 0);
        assert_eq!(nesting("3"), 0);
    }

    #[test]
    fn depth_counts_nested_arrays_and_objects() {
        assert_eq!(depth(&json!(1)), 0);
        assert_eq!(depth(&json!([])), 1);
        assert_eq!(depth(&json!({"a": [{"b": []}], "c": 2})), 4);
    }
}
