//! The untrusted-ref rule and what goes with it: code marked untrusted may only invoke bare tool
//! names (`[a-z0-9-]`), through any ctx handle it holds (its own, or the target it serves).
//!
//! `inline://` and `file://` URIs, filesystem paths and anything else are refused before any
//! lookup. More doors are closed for the same reason: untrusted code cannot clear its mark
//! (`locals.internals.untrustedRef`); cannot `refresh()`, which would re-resolve tools through
//! search paths it could have pointed anywhere with `locals.config.paths`; and cannot pass invoke
//! options (`$context` in args, `options.context`), which would steer what it invokes. The mark
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
    let seeded = options
        .and_then(serde_json::Value::as_object)
        .is_some_and(|o| o.get("context").is_some_and(|c| !c.is_null()));
    if untrusted && seeded {
        return Err(SkillError::new(
            ErrorKind::Denied,
            "untrusted code may not seed the context of what it invokes (`options.context`)",
        )
        .with_data(serde_json::json!({ "rule": "untrusted-args", "key": "context" })));
    }
    Ok(())
}

/// Refuses writes that would lift the untrusted mark.
pub(crate) fn check_set(untrusted: bool, path: &str) -> Result<()> {
    let lifts = path == "locals.internals.untrustedRef" || path == "locals.internals";
    if untrusted && lifts {
        return Err(SkillError::new(
            ErrorKind::Denied,
            format!("untrusted code cannot change `{path}`"),
        ));
    }
    Ok(())
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
        assert!(check_set(false, "locals.internals.untrustedRef").is_ok());
        assert!(check_refresh(false).is_ok());
    }

    #[test]
    fn untrusted_code_cannot_lift_its_mark_or_refresh() {
        assert!(check_set(true, "locals.internals.untrustedRef").is_err());
        assert!(check_set(true, "locals.internals").is_err());
        assert!(check_set(true, "locals.scratch").is_ok());
        assert!(check_refresh(true).is_err());
    }

    #[test]
    fn long_refused_refs_are_shortened_in_the_message() {
        let long = format!("inline://{}", "x".repeat(500));
        let err = check_ref(true, &long).unwrap_err();
        assert!(err.message().len() < 200, "{}", err.message());
    }
}
