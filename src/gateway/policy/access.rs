//! Which skills a caller may reach. Hidden skills and middleware (`role: middleware`) are not
//! for callers: they are refused as if they did not exist unless `expose-hidden` names them. A
//! credential may be scoped to some skills by name globs (an API key's `skills`, later a
//! route's); outside its scope a skill is refused.

use std::sync::Arc;

use globset::{Glob, GlobSet, GlobSetBuilder};

use crate::kernel::authority::{Authority, Principal};
use crate::skills::index::SearchIndex;
use crate::skills::tool::Tool;

/// A glob of the access settings that does not compile. `what` names the setting
/// (`skill pattern`, `expose-hidden pattern`, `public path pattern`).
#[derive(Debug, thiserror::Error)]
pub enum PatternError {
    #[error("{what} `{pattern}`: {source}")]
    Pattern {
        what: &'static str,
        pattern: String,
        source: globset::Error,
    },
    /// The globs compile one by one but not together (a set too large).
    #[error("{what}s: {source}")]
    Set {
        what: &'static str,
        source: globset::Error,
    },
}

/// Compiles `patterns` (built by `glob`) into one set; errors name the setting as `what`.
pub fn glob_set(
    what: &'static str,
    patterns: impl IntoIterator<Item = (String, Result<Glob, globset::Error>)>,
) -> Result<GlobSet, PatternError> {
    let mut set = GlobSetBuilder::new();
    for (pattern, glob) in patterns {
        let glob = glob.map_err(|source| PatternError::Pattern {
            what,
            pattern,
            source,
        })?;
        set.add(glob);
    }
    set.build()
        .map_err(|source| PatternError::Set { what, source })
}

/// Plain name globs (`hel*`, `admin-?`).
fn name_globs(patterns: &[String]) -> impl Iterator<Item = (String, Result<Glob, globset::Error>)> {
    patterns.iter().map(|p| (p.clone(), Glob::new(p)))
}

/// The skills a credential may invoke: all of them, or those its globs match.
#[derive(Debug, Clone, Default)]
pub struct Scope(Option<GlobSet>);

impl Scope {
    /// Every skill: no credential (authentication off, a public path), or one with no list.
    pub fn all() -> &'static Scope {
        static ALL: Scope = Scope(None);
        &ALL
    }

    /// The skills matching `patterns`; an empty list is every skill.
    pub fn new(patterns: &[String]) -> Result<Scope, PatternError> {
        if patterns.is_empty() {
            return Ok(Scope(None));
        }
        glob_set("skill pattern", name_globs(patterns)).map(|set| Scope(Some(set)))
    }

    /// True when every skill is in scope (no list).
    pub fn is_all(&self) -> bool {
        self.0.is_none()
    }

    pub fn allows(&self, skill: &str) -> bool {
        self.0.as_ref().is_none_or(|set| set.is_match(skill))
    }
}

/// Why a caller may not reach a skill.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refusal {
    /// No skill has the name, or it is hidden from callers: answered as if it did not exist.
    /// `suggestions` are close names the caller may reach.
    Unknown {
        skill: String,
        suggestions: Vec<String>,
    },
    /// The skill is there, but not in the caller's scope.
    OutOfScope { skill: String },
}

/// The access rules of one server, from its settings.
#[derive(Debug, Clone, Default)]
pub struct Policy {
    /// `expose-hidden`: hidden skills (and middleware) callers may reach all the same.
    exposed: GlobSet,
}

impl Policy {
    pub fn new(expose_hidden: &[String]) -> Result<Policy, PatternError> {
        Ok(Policy {
            exposed: glob_set("expose-hidden pattern", name_globs(expose_hidden))?,
        })
    }

    /// True when callers may see `tool` at all: a public skill, or one `expose-hidden` names.
    /// Middleware only makes sense around a served skill, so it counts as hidden.
    pub fn visible(&self, tool: &Tool) -> bool {
        let middleware =
            tool.decl.get("role").and_then(serde_json::Value::as_str) == Some("middleware");
        // skillgate's own machinery (the agent, its providers, built-in middleware) is never
        // exposed: only the project's own skill files are.
        let machinery = tool.class == crate::kernel::authority::ToolClass::Internal
            && matches!(
                tool.source,
                crate::skills::tool::Source::Native | crate::skills::tool::Source::Bundled(_)
            );
        !(tool.hidden || middleware) || (self.exposed.is_match(&tool.name) && !machinery)
    }

    /// True when a caller with `scope` (an admin key's when `admin`) may invoke `tool` by name:
    /// what a listing shows it, and what suggestions offer it (those never name the control
    /// plane).
    pub fn lists(&self, tool: &Tool, scope: &Scope, admin: bool) -> bool {
        // The control plane (schedules, subscriptions) runs only for an admin: listing it to
        // anyone else would offer tools that always refuse.
        self.visible(tool)
            && scope.allows(&tool.name)
            && (admin || tool.class != crate::kernel::authority::ToolClass::ControlPlane)
    }

    /// What a caller with `scope` (an admin key's when `admin`) is shown of `index`: every skill
    /// it [lists](Policy::lists), sorted by name (`GET /skills`, `/mcp` `tools/list`,
    /// `GET /openapi.json`).
    pub fn listing<'a>(
        &self,
        index: &'a SearchIndex,
        scope: &Scope,
        admin: bool,
    ) -> Vec<&'a Arc<Tool>> {
        let mut tools: Vec<&Arc<Tool>> = index
            .tools()
            .filter(|t| self.lists(t, scope, admin))
            .collect();
        tools.sort_by(|a, b| a.name.cmp(&b.name));
        tools
    }

    /// The skill a caller with `scope` names, or why it may not have it. A skill the caller
    /// cannot see is unknown even when its scope would not allow it either: the refusal must
    /// not tell a hidden skill from a missing one.
    pub fn reach(
        &self,
        index: &SearchIndex,
        skill: &str,
        scope: &Scope,
    ) -> Result<Arc<Tool>, Refusal> {
        // A skill outside the caller's grants looks missing too: the answer must not tell the
        // caller what exists beyond its reach.
        match index.get(skill) {
            Some(tool)
                if self.visible(tool) && scope.allows(skill) && !index.is_provider(skill) =>
            {
                Ok(tool.clone())
            }
            _ => Err(Refusal::Unknown {
                skill: skill.to_string(),
                suggestions: self.suggest(index, skill, scope),
            }),
        }
    }

    /// The authority a door invokes `tool` under for `principal`, once [`Policy::reach`] let the
    /// caller have it: the caller's own for a skill callers see; the project's serving the
    /// caller for a hidden one the project exposed (`expose-hidden` is the project's word).
    pub fn authority(&self, tool: &Tool, principal: Principal) -> Authority {
        let middleware =
            tool.decl.get("role").and_then(serde_json::Value::as_str) == Some("middleware");
        if tool.hidden || middleware {
            Authority::serving(principal)
        } else {
            Authority::caller(principal)
        }
    }

    /// For a skill the project routes to itself (a custom route): declaring the route serves
    /// the skill, hidden or not, so only the caller's scope applies.
    pub fn reach_routed(&self, skill: &str, scope: &Scope) -> Result<(), Refusal> {
        if scope.allows(skill) {
            Ok(())
        } else {
            Err(Refusal::OutOfScope {
                skill: skill.to_string(),
            })
        }
    }

    /// For a skill a message's route chose (chat, mail): named by the project's route, it is
    /// served as routed, hidden or not; named in the message itself (`named`), only what
    /// callers may see.
    pub fn reach_message(
        &self,
        index: &SearchIndex,
        skill: &str,
        named: bool,
    ) -> Result<Arc<Tool>, Refusal> {
        if named {
            return self.reach(index, skill, Scope::all());
        }
        index.get(skill).cloned().ok_or_else(|| Refusal::Unknown {
            skill: skill.to_string(),
            suggestions: Vec::new(),
        })
    }

    /// Names close to `skill` that the caller may reach (never a hidden one).
    fn suggest(&self, index: &SearchIndex, skill: &str, scope: &Scope) -> Vec<String> {
        index
            .closest(skill)
            .into_iter()
            .filter(|name| index.get(name).is_some_and(|t| self.lists(t, scope, false)))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use serde_json::Map;

    use super::*;
    use crate::skills::loader::parse_skill;
    use crate::skills::tool::Source;

    fn skill(name: &str, metadata: &str) -> Arc<Tool> {
        let text =
            format!("---\nname: {name}\ndescription: A skill.\nmetadata:\n{metadata}---\nBody\n");
        let source = Source::Inline(format!("inline://{name}"));
        Arc::new(parse_skill(source, &format!("{name}.skill.md"), &text, name, None).unwrap())
    }

    fn index() -> SearchIndex {
        let tools = vec![
            skill("hello", "  tags: [greeting]\n"),
            skill("help", "  tags: [greeting]\n"),
            skill("vault", "  visibility: hidden\n"),
            skill("wrap", "  role: middleware\n"),
            skill("admin", "  tags: [ops]\n"),
        ];
        SearchIndex::build(
            0,
            Vec::new(),
            Arc::from([]),
            tools,
            Vec::new(),
            Arc::new(Map::new()),
        )
    }

    fn unknown(refusal: Result<Arc<Tool>, Refusal>) -> Vec<String> {
        match refusal {
            Err(Refusal::Unknown { suggestions, .. }) => suggestions,
            other => panic!("refused as unknown: {other:?}"),
        }
    }

    #[test]
    fn hidden_skills_and_middleware_are_refused_as_unknown_and_not_listed() {
        let index = index();
        let policy = Policy::default();
        // `vault` is hidden, `wrap` a middleware.
        for name in ["vault", "wrap"] {
            unknown(policy.reach(&index, name, Scope::all()));
            assert!(
                !policy.lists(index.get(name).unwrap(), Scope::all(), false),
                "{name}"
            );
        }
    }

    #[test]
    fn exposed_hidden_skills_and_middleware_are_reached() {
        let index = index();
        let policy = Policy::new(&["vau*".into(), "wrap".into()]).unwrap();
        assert_eq!(
            policy.reach(&index, "vault", Scope::all()).unwrap().name,
            "vault"
        );
        assert_eq!(
            policy.reach(&index, "wrap", Scope::all()).unwrap().name,
            "wrap"
        );
        assert!(policy.lists(index.get("vault").unwrap(), Scope::all(), false));
    }

    #[test]
    fn a_credentials_globs_limit_what_it_reaches_and_lists() {
        let index = index();
        let policy = Policy::default();
        let scope = Scope::new(&["hel*".into()]).unwrap();
        assert!(policy.reach(&index, "hello", &scope).is_ok());
        // Outside the globs looks like missing.
        unknown(policy.reach(&index, "admin", &scope));
        assert!(!policy.lists(index.get("admin").unwrap(), &scope, false));
        assert!(policy.reach(&index, "admin", Scope::all()).is_ok());
        // An empty list is every skill.
        assert!(Scope::new(&[]).unwrap().allows("admin"));
    }

    #[test]
    fn a_hidden_skill_outside_the_scope_is_unknown_not_out_of_scope() {
        let index = index();
        let scope = Scope::new(&["hel*".into()]).unwrap();
        unknown(Policy::default().reach(&index, "vault", &scope));
    }

    #[test]
    fn suggestions_offer_only_what_the_caller_may_reach() {
        let index = index();
        let policy = Policy::default();
        let all = unknown(policy.reach(&index, "hellp", Scope::all()));
        assert!(all.contains(&"hello".to_string()), "{all:?}");
        let scope = Scope::new(&["help".into()]).unwrap();
        assert_eq!(unknown(policy.reach(&index, "hellp", &scope)), ["help"]);
        assert!(unknown(policy.reach(&index, "vaul", Scope::all())).is_empty());
    }

    #[test]
    fn routed_skills_need_only_the_scope() {
        let policy = Policy::default();
        let scope = Scope::new(&["hel*".into()]).unwrap();
        assert!(policy.reach_routed("vault", Scope::all()).is_ok());
        assert!(policy.reach_routed("hello", &scope).is_ok());
        assert!(matches!(
            policy.reach_routed("admin", &scope),
            Err(Refusal::OutOfScope { .. })
        ));
    }

    #[test]
    fn bad_globs_name_the_setting_and_the_pattern() {
        let err = Policy::new(&["a[".into()]).unwrap_err().to_string();
        assert!(err.starts_with("expose-hidden pattern `a[`: "), "{err}");
        let err = Scope::new(&["{x".into()]).unwrap_err().to_string();
        assert!(err.starts_with("skill pattern `{x`: "), "{err}");
    }
}
