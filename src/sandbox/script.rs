//! `.skill.js` files at load time, and the code a tool runs: a module whose default export is the
//! body (`export default async function (ctx, args) {...}`, with `export const frontmatter =
//! {...}` for the same keys as markdown frontmatter), or untrusted code given at run time as the
//! body of such a function.
//!
//! Loading compiles and evaluates the module once in a throwaway sandbox with the default limits
//! and a 1 s budget for top-level code: a syntax error names the file, line and column, and a
//! module without a default function or with bad frontmatter fails like bad YAML does.

use std::sync::Arc;
use std::time::{Duration, Instant};

use rquickjs::{
    CatchResultExt, CaughtError, Context as JsContext, Module, Runtime, Value as JsValue,
};
use serde_json::{Map, Value};

use crate::error::{Result, SkillError};
use crate::sandbox::Session;
use crate::sandbox::bytecode::Bytecode;
use crate::sandbox::convert::{caught, from_js, is_message};
use crate::sandbox::limits::Limits;
use crate::skills::frontmatter;
use crate::skills::tool::{Body, Source, Tool};

/// How long a module's top-level code may run when the file is loaded.
const LOAD_BUDGET: Duration = Duration::from_millis(1000);

/// The code of a scripted tool.
#[derive(Debug)]
pub enum Code {
    /// An ES module, compiled when its file was loaded; its default export is called.
    Module(Bytecode),
    /// The body of `async function (ctx, args)`.
    Body(Arc<str>),
}

/// A scripted tool body: what runs in the sandbox when the chain reaches the tool.
pub struct Script {
    /// Where the code came from, as stack traces show it (a path, or `inline://name`).
    pub origin: String,
    pub code: Code,
    /// Code from outside the project: only bare tool names may be invoked (see `refs`).
    pub untrusted: bool,
    /// Runs in this session's sandbox instead of a fresh one.
    pub session: Option<Session>,
}

impl std::fmt::Debug for Script {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Script")
            .field("origin", &self.origin)
            .field("untrusted", &self.untrusted)
            .field("session", &self.session.is_some())
            .finish()
    }
}

/// Parses a `.skill.js` file into a tool; `default_name` is used when the frontmatter has none.
pub fn load(source: Source, display: &str, text: &str, default_name: &str) -> Result<Tool> {
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    let (mut fm, compiled) = inspect(display, text)?;
    if !fm.contains_key("name") {
        fm.insert("name".into(), Value::String(default_name.to_string()));
    }
    frontmatter::check(display, &mut fm)?;
    Limits::from_metadata(fm.get("metadata").and_then(|m| m.get("sandbox")))
        .map_err(|e| SkillError::config(format!("{display}: {e}")))?;
    let script = Script {
        origin: display.to_string(),
        code: Code::Module(compiled),
        untrusted: false,
        session: None,
    };
    Ok(Tool::new(fm, source, None, Body::Script(Arc::new(script))))
}

/// Compiles and evaluates the module, checks its default export and returns its frontmatter,
/// with the module's bytecode as compiled (before its top-level code ran).
fn inspect(display: &str, text: &str) -> Result<(Map<String, Value>, Bytecode)> {
    let limits = Limits::default();
    let engine = |e: rquickjs::Error| SkillError::internal(format!("JavaScript engine: {e}"));
    let rt = Runtime::new().map_err(engine)?;
    rt.set_memory_limit(limits.memory);
    rt.set_max_stack_size(limits.stack);
    let deadline = Instant::now() + LOAD_BUDGET;
    rt.set_interrupt_handler(Some(Box::new(move || Instant::now() > deadline)));
    let cx = JsContext::full(&rt).map_err(engine)?;
    cx.with(|cx| {
        let fail = |e| load_error(display, caught(&cx, e));
        let module = Module::declare(cx.clone(), display, text.as_bytes())
            .catch(&cx)
            .map_err(|e| syntax_error(display, caught(&cx, e)))?;
        let compiled = Bytecode::of(&module).map_err(|e| {
            SkillError::internal(format!("{display}: JavaScript engine: cannot keep the compiled module: {e}"))
        })?;
        let (module, done) = module.eval().catch(&cx).map_err(fail)?;
        match done.finish::<()>() {
            Ok(()) => {}
            Err(rquickjs::Error::WouldBlock) => {
                return Err(SkillError::config(format!(
                    "{display}: top-level code is still waiting after loading (a top-level await that never settles)"
                )));
            }
            Err(e) => return Err(fail(CaughtError::from_error(&cx, e))),
        }
        let default: JsValue = module.get("default").catch(&cx).map_err(fail)?;
        if !default.is_function() {
            return Err(SkillError::config(format!(
                "{display}: must `export default` a function (async function (ctx, args) {{ ... }})"
            )));
        }
        let fm: JsValue = module.get("frontmatter").catch(&cx).map_err(fail)?;
        match from_js(&cx, fm).catch(&cx).map_err(fail)? {
            None | Some(Value::Null) => Ok((Map::new(), compiled)),
            Some(Value::Object(map)) => Ok((map, compiled)),
            Some(other) => Err(SkillError::config(format!(
                "{display}: `export const frontmatter` must be an object, found {}",
                crate::context::path::kind(&other)
            ))),
        }
    })
}

/// A compile error: `file:line:col: syntax error: message` (a parser that ran out of stack says
/// that the source is nested too deeply).
fn syntax_error(display: &str, err: SkillError) -> SkillError {
    if is_message(
        &err,
        &["Maximum call stack size exceeded", "stack overflow"],
    ) {
        return SkillError::config(format!(
            "{display}: source nested too deeply to parse ({})",
            Limits::default()
                .exceeded(crate::sandbox::limits::Limit::Stack)
                .message()
        ));
    }
    let message = err
        .message()
        .strip_prefix("SyntaxError: ")
        .unwrap_or(err.message());
    match err.stack().and_then(|s| position(s, display)) {
        Some((line, col)) => {
            SkillError::config(format!("{display}:{line}:{col}: syntax error: {message}"))
        }
        None => SkillError::config(format!("{display}: syntax error: {message}")),
    }
}

/// An error while evaluating top-level code at load time.
fn load_error(display: &str, err: SkillError) -> SkillError {
    let message = if err.message() == "InternalError: interrupted" || err.message() == "interrupted"
    {
        format!(
            "top-level code ran longer than {} ms at load",
            LOAD_BUDGET.as_millis()
        )
    } else {
        err.message().to_string()
    };
    let e = SkillError::config(format!("{display}: {message}"));
    match err.stack() {
        Some(stack) => e.with_stack(stack),
        None => e,
    }
}

/// `line:col` of the first stack frame in `file` (`at file:3:14`).
fn position(stack: &str, file: &str) -> Option<(u32, u32)> {
    let at = stack.find(file)? + file.len();
    let mut parts = stack[at..].strip_prefix(':')?.splitn(3, ':');
    let line = parts.next()?.parse().ok()?;
    let col: String = parts
        .next()?
        .chars()
        .take_while(char::is_ascii_digit)
        .collect();
    Some((line, col.parse().ok()?))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn load_text(text: &str) -> Result<Tool> {
        load(
            Source::File("/p/skills/t.skill.js".into()),
            "skills/t.skill.js",
            text,
            "t",
        )
    }

    #[test]
    fn frontmatter_export_gives_the_markdown_keys() {
        let tool = load_text(
            "export const frontmatter = { name: 'report', description: 'd', metadata: { tags: ['x'], params: { type: 'object' } } };\n\
             export default async function (ctx, args) { return 1; }\n",
        )
        .unwrap();
        assert_eq!(tool.name, "report");
        assert_eq!(tool.description, "d");
        assert_eq!(tool.tags, ["x"]);
        assert!(tool.params().is_some());
        assert!(matches!(tool.body, Body::Script(_)));
    }

    #[test]
    fn a_script_without_frontmatter_takes_the_file_name() {
        let tool = load_text("export default () => 1;").unwrap();
        assert_eq!(tool.name, "t");
    }

    #[test]
    fn a_syntax_error_names_file_line_and_column() {
        let err =
            load_text("export default async function (ctx) {\n  return 1 +;\n}\n").unwrap_err();
        let msg = err.message();
        assert!(msg.starts_with("skills/t.skill.js:2:"), "{msg}");
        assert!(msg.contains("syntax error"), "{msg}");
        let col: u32 = msg.split(':').nth(2).unwrap().parse().unwrap();
        assert!((3..=14).contains(&col), "{msg}");
    }

    #[test]
    fn a_module_without_a_default_function_is_refused() {
        let err = load_text("export const frontmatter = {};").unwrap_err();
        assert!(err.message().contains("export default"), "{err}");
    }

    #[test]
    fn bad_frontmatter_fields_fail_like_markdown_ones() {
        let err =
            load_text("export const frontmatter = { name: 'Bad Name' }; export default () => 1;")
                .unwrap_err();
        assert!(err.message().contains("field `name`"), "{err}");
        let err = load_text(
            "export const frontmatter = { metadata: { sandbox: { memory: 0 } } }; export default () => 1;",
        )
        .unwrap_err();
        assert!(err.message().contains("metadata.sandbox.memory"), "{err}");
    }

    #[test]
    fn top_level_code_that_never_ends_is_stopped_at_load() {
        let err = load_text("while (true) {} export default () => 1;").unwrap_err();
        assert!(err.message().contains("at load"), "{err}");
    }

    #[test]
    fn imports_do_not_load_anything() {
        let err = load_text("import fs from 'fs'; export default () => fs;").unwrap_err();
        assert!(err.message().contains("could not load module"), "{err}");
    }
}
