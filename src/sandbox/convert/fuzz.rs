//! Bounded property test of the JavaScript-to-JSON conversion: random values built by script
//! (nested objects, arrays and errors, cycles, chains and nestings up to 30,000 deep, odd numbers,
//! lone surrogates, `undefined`, functions, symbols, BigInts, `toJSON`, throwing and lazy
//! getters), returned and thrown. Whatever the value, the conversion ends without a crash, with
//! JSON that reads back as itself and nests within the limit, or with an error that says why.

use proptest::prelude::*;
use rquickjs::{Context, Ctx, Runtime, Value as JsValue};
use serde_json::Value;

use super::{MAX_DEPTH, depth, from_js, thrown};

/// A JavaScript value, as the source that builds it.
#[derive(Debug, Clone)]
enum Gen {
    /// A literal expression: numbers, strings, `undefined`, functions, symbols, BigInts...
    Leaf(&'static str),
    Str(String),
    Array(Vec<Gen>),
    Object(Vec<(String, Gen)>),
    Error(String, Option<Box<Gen>>),
    /// A reference to an enclosing array, object or error, `n` levels up (a cycle).
    Back(usize),
    /// `n` levels of `kind` around the value, built by a loop.
    Deep(Wrap, usize, Box<Gen>),
    /// An object whose `toJSON` returns the value.
    ToJson(Box<Gen>),
}

#[derive(Debug, Clone, Copy)]
enum Wrap {
    Object,
    Array,
    Error,
}

const LEAVES: &[&str] = &[
    "undefined",
    "null",
    "true",
    "0",
    "-0",
    "NaN",
    "Infinity",
    "-Infinity",
    "1e308",
    "5e-324",
    "2 ** 53 + 2",
    "-(2 ** 31)",
    "0.1",
    "'\\ud800'",
    "'a\\u0000b\"\\\\'",
    "(function () {})",
    "(() => 1)",
    "Symbol('s')",
    "10n",
    "new Date(0)",
    "new Map([[1, 2]])",
    "new Uint8Array([1, 2])",
    "new Number(3)",
    "new String('boxed')",
    "({ toJSON() { throw new Error('no JSON'); } })",
    "({ get x() { throw new Error('no x'); } })",
    "new Proxy({}, { ownKeys() { throw new Error('no keys'); } })",
    "lazy(0)",
];

/// An error whose `data` is a getter that makes a fresh error like it, without end.
const LAZY: &str = "function lazy(n) {\n  const e = new Error('lazy ' + n);\n  Object.defineProperty(e, 'data', { get() { return lazy(n + 1); } });\n  return e;\n}\n";

fn values() -> impl Strategy<Value = Gen> {
    let leaf = prop_oneof![
        proptest::sample::select(LEAVES).prop_map(Gen::Leaf),
        "\\PC{0,8}".prop_map(Gen::Str),
        (0usize..4).prop_map(Gen::Back),
    ];
    leaf.prop_recursive(4, 24, 4, |inner| {
        let wrap = prop_oneof![Just(Wrap::Object), Just(Wrap::Array), Just(Wrap::Error)];
        let deep =
            proptest::sample::select(&[1usize, 50, 98, 99, 100, 101, 150, 2_000, 30_000][..]);
        prop_oneof![
            proptest::collection::vec(inner.clone(), 0..4).prop_map(Gen::Array),
            proptest::collection::vec(("[a-z]{1,3}", inner.clone()), 0..4).prop_map(Gen::Object),
            ("\\PC{0,6}", proptest::option::of(inner.clone()))
                .prop_map(|(m, data)| Gen::Error(m, data.map(Box::new))),
            (wrap, deep, inner.clone()).prop_map(|(w, n, v)| Gen::Deep(w, n, Box::new(v))),
            inner.prop_map(|v| Gen::ToJson(Box::new(v))),
        ]
    })
}

/// A new variable name.
fn fresh(next: &mut usize) -> String {
    *next += 1;
    format!("v{next}")
}

/// Writes the statements that build `g` and returns the expression for it.
fn emit(g: &Gen, out: &mut String, next: &mut usize, enclosing: &mut Vec<String>) -> String {
    match g {
        Gen::Leaf(code) => (*code).to_string(),
        Gen::Str(s) => serde_json::to_string(s).expect("a string is JSON"),
        Gen::Back(n) => match enclosing.len() {
            0 => "null".into(),
            len => enclosing[len - 1 - n % len].clone(),
        },
        Gen::Array(items) => {
            let v = fresh(next);
            out.push_str(&format!("const {v} = [];\n"));
            enclosing.push(v.clone());
            for item in items {
                let e = emit(item, out, next, enclosing);
                out.push_str(&format!("{v}.push({e});\n"));
            }
            enclosing.pop();
            v
        }
        Gen::Object(entries) => {
            let v = fresh(next);
            out.push_str(&format!("const {v} = {{}};\n"));
            enclosing.push(v.clone());
            for (key, item) in entries {
                let e = emit(item, out, next, enclosing);
                out.push_str(&format!(
                    "{v}[{}] = {e};\n",
                    serde_json::to_string(key).unwrap()
                ));
            }
            enclosing.pop();
            v
        }
        Gen::Error(message, data) => {
            let v = fresh(next);
            let message = serde_json::to_string(message).unwrap();
            out.push_str(&format!("const {v} = new Error({message});\n"));
            if let Some(data) = data {
                enclosing.push(v.clone());
                let e = emit(data, out, next, enclosing);
                enclosing.pop();
                out.push_str(&format!("{v}.data = {e};\n"));
            }
            v
        }
        Gen::Deep(wrap, n, inner) => {
            let e = emit(inner, out, next, enclosing);
            let v = fresh(next);
            let step = match wrap {
                Wrap::Object => format!("{v} = {{ o: {v} }};"),
                Wrap::Array => format!("{v} = [{v}];"),
                Wrap::Error => {
                    format!("{{ const e = new Error('d' + i); e.data = {v}; {v} = e; }}")
                }
            };
            out.push_str(&format!(
                "let {v} = {e};\nfor (let i = 0; i < {n}; i++) {step}\n"
            ));
            v
        }
        Gen::ToJson(inner) => {
            let e = emit(inner, out, next, enclosing);
            let v = fresh(next);
            out.push_str(&format!("const {v} = {{ toJSON() {{ return {e}; }} }};\n"));
            v
        }
    }
}

/// The source of a function that builds `g` and returns it.
fn program(g: &Gen) -> String {
    let mut body = String::new();
    let result = emit(g, &mut body, &mut 0, &mut Vec::new());
    format!("{LAZY}(() => {{\n{body}return {result};\n}})()")
}

/// JSON that reads back as itself, within the depth limit (plus `extra` levels of envelope).
fn assert_sound(json: &Value, extra: usize) {
    assert!(
        depth(json) <= MAX_DEPTH + extra,
        "too deep: {}",
        depth(json)
    );
    let text = json.to_string();
    let back: Value = serde_json::from_str(&text).expect("the JSON reads back");
    assert_eq!(&back, json);
}

fn check(cx: &Ctx<'_>, source: &str) {
    let Ok(value) = cx.eval::<JsValue, _>(source.as_bytes()) else {
        // Building it ran out of heap: nothing to convert.
        let _ = cx.catch();
        return;
    };
    match from_js(cx, value.clone()) {
        Ok(Some(json)) => assert_sound(&json, 0),
        Ok(None) => {}
        Err(rquickjs::Error::Exception) => {
            let why = thrown(cx, cx.catch());
            assert!(!why.message().is_empty(), "a refusal says why");
        }
        Err(other) => assert!(!other.to_string().is_empty()),
    }
    // The same value thrown: it always becomes an error (its message is the script's own, so it
    // may be empty).
    assert_sound(&thrown(cx, value).to_json(), 1);
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn any_script_value_converts_to_sound_json_or_a_clear_error(g in values()) {
        let source = program(&g);
        let rt = Runtime::new().expect("runtime");
        // As in a sandbox call: its default stack limit (the heap is larger, for the deep chains).
        rt.set_max_stack_size(256 * 1024);
        rt.set_memory_limit(256 * 1024 * 1024);
        let cx = Context::full(&rt).expect("context");
        cx.with(|cx| check(&cx, &source));
    }
}
