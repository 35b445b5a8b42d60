//! What the routes of the message doors (Slack, email) share: a route runs the skill it names
//! (`ref`), or lets the message name it (`command: true`, one of its `skills` globs), and may
//! match a regular expression whose named groups become args.

use globset::{Glob, GlobSet, GlobSetBuilder};
use regex::Regex;

use crate::config::ConfigErrors;
use crate::skills::index::SearchIndex;

/// What a route does with a message it takes.
#[derive(Debug, Clone)]
pub enum Target {
    /// Runs this skill.
    Skill(String),
    /// The message names the skill (its first word); one matching `skills` runs, any other is
    /// refused.
    Command { skills: GlobSet },
}

/// The target of the route at `at` from its `ref`, `command` and `skills` keys; a mistake is
/// recorded and the target then matches nothing.
pub fn target(
    skill: Option<String>,
    command: Option<bool>,
    skills: Option<&[String]>,
    at: &str,
    errors: &mut ConfigErrors,
) -> Target {
    let command = command.unwrap_or(false);
    if skills.is_some() && !command {
        errors.at(format!("{at}.skills"), "only for `command: true` routes");
    }
    match (skill, command) {
        (Some(skill), false) => Target::Skill(skill),
        (None, true) => Target::Command {
            skills: command_skills(skills, at, errors),
        },
        (Some(_), true) => {
            errors.at(at, "a route has either `ref` or `command: true`, not both");
            Target::Command {
                skills: GlobSet::empty(),
            }
        }
        (None, false) => {
            errors.at(
                format!("{at}.ref"),
                "missing (or `command: true` to name the skill in the message)",
            );
            Target::Command {
                skills: GlobSet::empty(),
            }
        }
    }
}

/// The `skills` of a command route: required (a message names the skill, so the route says
/// which it may name).
fn command_skills(skills: Option<&[String]>, at: &str, errors: &mut ConfigErrors) -> GlobSet {
    let Some(globs) = skills else {
        errors.at(
            format!("{at}.skills"),
            "a `command: true` route needs `skills`, the globs of the skills a message may name (`['*']` for every public one)",
        );
        return GlobSet::empty();
    };
    let mut set = GlobSetBuilder::new();
    for glob in globs {
        match Glob::new(glob) {
            Ok(g) => {
                set.add(g);
            }
            Err(e) => errors.at(format!("{at}.skills"), format!("`{glob}`: {e}")),
        }
    }
    set.build().unwrap_or_else(|e| {
        errors.at(format!("{at}.skills"), e.to_string());
        GlobSet::empty()
    })
}

/// The regular expression at `path`, if one is written.
pub fn pattern(written: Option<&str>, path: String, errors: &mut ConfigErrors) -> Option<Regex> {
    match Regex::new(written?) {
        Ok(re) => Some(re),
        Err(e) => {
            errors.at(path, format!("not a regular expression: {e}"));
            None
        }
    }
}

/// Every skill the routes of `section` name (their `ref`s, then its `default`), with where,
/// to check they exist.
pub fn named_skills<'a>(
    section: &str,
    refs: impl Iterator<Item = Option<&'a String>>,
    default: Option<&'a String>,
) -> Vec<(String, String)> {
    let mut named: Vec<(String, String)> = refs
        .enumerate()
        .filter_map(|(i, skill)| Some((format!("{section}.routes[{i}].ref"), skill?.clone())))
        .collect();
    if let Some(default) = default {
        named.push((format!("{section}.default"), default.clone()));
    }
    named
}

/// Records each of `named` (where, skill) that is no skill of `index`, with the closest name.
pub fn check_skills(named: Vec<(String, String)>, index: &SearchIndex, errors: &mut ConfigErrors) {
    for (at, skill) in named {
        if index.get(&skill).is_none() {
            let hint = index
                .closest(&skill)
                .into_iter()
                .next()
                .map(|near| format!(" (did you mean `{near}`?)"))
                .unwrap_or_default();
            errors.at(at, format!("no skill is named `{skill}`{hint}"));
        }
    }
}
