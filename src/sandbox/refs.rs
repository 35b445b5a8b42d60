//! The untrusted-ref rule and what goes with it: code marked untrusted may only invoke bare tool
//! names (`[a-z0-9-]`), through any ctx handle it holds (its own, or the target it serves).
//!
//! `inline://` and `file://` URIs, filesystem paths and anything else are refused before any
//! lookup. More doors are closed for the same reason: untrusted code cannot clear its mark
//! (`locals.internals.untrustedRef`); cannot `refresh()`, which would re-resolve tools through
//! search paths it could have pointed anywhere with `locals.config.paths`; cannot pass invoke
//! options (`$context` in args, `options.context`) nor write `nonlocals.middleware` (which
//! cascades into every child), which would steer what it invokes. The mark
//! is a property of the code's own calls only: the tools it invokes get contexts of their own
//! without it.

use crate::error::{ErrorKind, Result, SkillError};
use crate::skills::frontmatter::is_tool_name;

/// Refuses a ref that untrusted code may not invoke.
pub(crate) fn check_ref(untrusted: bool, reference: &str) -> Result<()> {
    if !untrusted || is_tool_name(reference) {
        return Ok(());
    }
    Err(SkillError::new(
        ErrorKind::Denied,
        format!(
            "untrusted code may only invoke bare tool names ([a-z0-9-]); `{}` was refused",
            shorten(reference)
        ),
    )
    .with_data(serde_json::json!({ "rule": "untrusted-ref", "ref": shorten(reference) })))
}

/// Refuses `$`-prefixed keys (invoke options such as `$context`) at the top of args from
/// untrusted code, through any handle it holds.
pub(crate) fn check_args(untrusted: bool, args: &serde_json::Value) -> Result<()> {
    let key = args
        .as_object()
        .and_then(|m| m.keys().find(|k| k.starts_with('$')));
    match key {
        Some(key) if untrusted => Err(SkillError::new(
            ErrorKind::Denied,
            format!("untrusted code may not pass invoke options in args; `{key}` was refused"),
        )
        .with_data(serde_json::json!({ "rule": "untrusted-args", "key": key }))),
        _ => Ok(()),
    }
}

/// Refuses a context seed in invoke options (`{ context: ... }`) from untrusted code: it would
/// set the prompt, the middleware or `nonlocals` of what the code invokes.
pub(crate) fn check_options(untrusted: bool, options: Option<&serde_json::Value>) -> Result<()> {
    let object = options.and_then(serde_json::Value::as_object);
    if untrusted
        && object.is_some_and(|o| o.get("detached") == Some(&serde_json::Value::Bool(true)))
    {
        // A detached run would outlive the code's own limits and timeout.
        return Err(SkillError::new(
            ErrorKind::Denied,
            "untrusted code may not start detached runs (`options.detached`)",
        )
        .with_data(serde_json::json!({ "rule": "untrusted-args", "key": "detached" })));
    }
    let seeded = object.is_some_and(|o| o.get("context").is_some_and(|c| !c.is_null()));
    if untrusted && seeded {
        return Err(SkillError::new(
            ErrorKind::Denied,
            "untrusted code may not seed the context of what it invokes (`options.context`)",
        )
        .with_data(serde_json::json!({ "rule": "untrusted-args", "key": "context" })));
    }
    Ok(())
}

/// Context paths untrusted code may not write: its mark, and the middleware seeds and search
/// settings that would steer what the tools it invokes run (`nonlocals.middleware` cascades into
/// every child's chain, where a `paths` or `cwd` entry would have a bare name resolved from a
/// folder the code chose; `workspace` is where a skill writes).
const GUARDED: [&str; 7] = [
    "locals.internals",
    "nonlocals.middleware",
    // The agent settings a nested agent inherits (its event topic among them).
    "nonlocals.agent",
    "locals.middleware",
    "locals.config.paths",
    "locals.config.cwd",
    "locals.config.workspace",
];

/// Refuses writes that would lift the untrusted mark or seed middleware and search paths:
/// a guarded path, anything below one, or an object written above one that holds it.
pub(crate) fn check_set(untrusted: bool, path: &str, value: &serde_json::Value) -> Result<()> {
    if !untrusted {
        return Ok(());
    }
    let hit = GUARDED.iter().find(|guarded| {
        let below_or_at = path == **guarded
            || path
                .strip_prefix(**guarded)
                .is_some_and(|rest| rest.starts_with('.'));
        // `set('nonlocals', { middleware })`: the guarded key arrives inside the value.
        let above = guarded
            .strip_prefix(path)
            .and_then(|rest| rest.strip_prefix('.'))
            .is_some_and(|rest| lookup(value, rest).is_some());
        below_or_at || above
    });
    match hit {
        Some(guarded) => Err(SkillError::new(
            ErrorKind::Denied,
            format!("untrusted code cannot change `{guarded}`"),
        )
        .with_data(serde_json::json!({ "rule": "untrusted-set", "path": guarded }))),
        None => Ok(()),
    }
}

fn lookup<'a>(value: &'a serde_json::Value, dotted: &str) -> Option<&'a serde_json::Value> {
    dotted.split('.').try_fold(value, |v, key| v.get(key))
}

/// Refuses `refresh()` to untrusted code.
pub(crate) fn check_refresh(untrusted: bool) -> Result<()> {
    if untrusted {
        return Err(SkillError::new(
            ErrorKind::Denied,
            "untrusted code cannot refresh(): it would resolve tools through search paths it chose",
        ));
    }
    Ok(())
}

/// A ref as shown in an error: long inline code is cut.
fn shorten(reference: &str) -> String {
    const MAX: usize = 80;
    match reference.char_indices().nth(MAX) {
        Some((at, _)) => format!("{}...", &reference[..at]),
        None => reference.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn untrusted_code_may_invoke_bare_tool_names() {
        assert!(check_ref(true, "file-read").is_ok());
        assert!(check_ref(true, "noop2").is_ok());
    }

    #[test]
    fn untrusted_code_may_not_invoke_uris_paths_or_anything_else() {
        for bad in [
            "inline://code,export default () => 1",
            "file:///etc/passwd",
            "./skills/x.skill.js",
            "/abs/x.skill.md",
            "Upper",
            "name with space",
            "",
            "a.b",
        ] {
            let err = check_ref(true, bad).unwrap_err();
            assert_eq!(err.kind(), ErrorKind::Denied, "{bad}");
            assert!(err.message().contains("bare tool names"), "{err}");
        }
    }

    #[test]
    fn trusted_code_is_not_restricted_by_the_ref_rule() {
        assert!(check_ref(false, "file:///x.skill.md").is_ok());
        assert!(
            check_set(
                false,
                "locals.internals.untrustedRef",
                &serde_json::json!(false)
            )
            .is_ok()
        );
        assert!(check_set(false, "nonlocals.middleware", &serde_json::json!([])).is_ok());
        assert!(check_refresh(false).is_ok());
    }

    #[test]
    fn untrusted_code_cannot_lift_its_mark_or_refresh() {
        let v = serde_json::json!(1);
        assert!(check_set(true, "locals.internals.untrustedRef", &v).is_err());
        assert!(check_set(true, "locals.internals", &v).is_err());
        assert!(check_set(true, "locals.scratch", &v).is_ok());
        assert!(check_refresh(true).is_err());
    }

    #[test]
    fn untrusted_code_cannot_seed_middleware_or_search_paths_at_or_below_or_above_them() {
        use serde_json::json;
        for (path, value) in [
            (
                "nonlocals.middleware",
                json!([{ "name": "paths", "args": ["/tmp"] }]),
            ),
            ("nonlocals.middleware.0", json!({ "name": "cwd" })),
            ("nonlocals", json!({ "middleware": [] })),
            ("locals.middleware", json!([])),
            ("locals.config.paths", json!(["/tmp"])),
            ("locals.config.cwd", json!("/")),
            ("locals.config.workspace", json!("/")),
            ("locals.config", json!({ "cwd": "/" })),
            ("locals", json!({ "config": { "paths": [] } })),
        ] {
            let err = check_set(true, path, &value).unwrap_err();
            assert_eq!(err.kind(), ErrorKind::Denied, "{path}");
        }
        for (path, value) in [
            ("nonlocals.topic", json!("x")),
            ("nonlocals", json!({ "topic": "x" })),
            ("locals.config.model", json!("m")),
            ("locals.middlewares", json!(1)),
        ] {
            assert!(check_set(true, path, &value).is_ok(), "{path}");
        }
    }

    #[test]
    fn long_refused_refs_are_shortened_in_the_message() {
        let long = format!("inline://{}", "x".repeat(500));
        let err = check_ref(true, &long).unwrap_err();
        assert!(err.message().len() < 200, "{}", err.message());
    }
}
