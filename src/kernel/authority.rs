//! Whose authority an invocation runs under: a [`Level`] (project, caller, untrusted code) and a
//! [`Principal`] (on whose behalf, with the grants of its key or route). The kernel carries it on
//! every context, derives each child's from the code that names the child, stores it with work
//! kept for later (schedules, subscriptions), and decides four things by the level alone:
//!
//! 1. whether directive keys in args (`$context`, `$detached`) are honored: at project level
//!    only; below it they are refused at any depth, naming the path;
//! 2. whether control-plane tools may run: at project level, or for a caller whose key has the
//!    `admin` scope; never for untrusted code;
//! 3. whether internal tools (the agent and its providers, middleware) may be named: at project
//!    level only; below it they look missing;
//! 4. whether spawn and secret settings may be given: project files only (a seed is the only
//!    other way to give them, and seeds are project level).
//!
//! A principal never changes along a run; a level never rises above the code that names a tool:
//! untrusted code's invocations are untrusted, a caller's are the caller's, and project code
//! (skill files, native tools) invokes at project level while still recording the caller, so a
//! public skill keeps its helpers and its agent, and what it stores is owned by the caller and
//! checked against the caller's grants.

use std::fmt;
use std::sync::Arc;

use globset::{Glob, GlobSet, GlobSetBuilder};
use serde_json::{Value, json};

use crate::error::{ErrorKind, Result, SkillError};
use crate::skills::index::SearchIndex;
use crate::skills::tool::Tool;

/// Who wrote the code (or the request) that names a tool, from least to most powerful.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Level {
    /// Code a model wrote, or `:eval`/`:script` code: bare names, no control plane, its args
    /// are data.
    Untrusted,
    /// Anyone arriving through a door: its args are data at every depth, it names only what its
    /// grants allow.
    Caller,
    /// The skill files, declared metadata, the config file and the command line.
    Project,
}

impl Level {
    pub fn as_str(self) -> &'static str {
        match self {
            Level::Untrusted => "untrusted",
            Level::Caller => "caller",
            Level::Project => "project",
        }
    }
}

/// What kind of tool a tool is, as far as authority goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ToolClass {
    /// Anyone may name it (subject to visibility and grants).
    #[default]
    Plain,
    /// Administers the server (schedules, subscriptions, the HTTP response): project level, or
    /// a caller with the `admin` scope.
    ControlPlane,
    /// Part of the machinery (the agent, its providers, middleware): named by the project only.
    Internal,
}

impl ToolClass {
    pub fn as_str(self) -> &'static str {
        match self {
            ToolClass::Plain => "plain",
            ToolClass::ControlPlane => "control-plane",
            ToolClass::Internal => "internal",
        }
    }
}

/// Name globs compiled once, the patterns kept for storage and display.
#[derive(Clone)]
struct Globs {
    patterns: Vec<String>,
    set: GlobSet,
}

impl fmt::Debug for Globs {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.patterns.fmt(f)
    }
}

impl Globs {
    fn new(what: &str, patterns: &[String]) -> Result<Globs> {
        let mut set = GlobSetBuilder::new();
        for pattern in patterns {
            let glob = Glob::new(pattern).map_err(|e| {
                SkillError::new(
                    ErrorKind::Config,
                    format!("{what} pattern `{pattern}`: {e}"),
                )
            })?;
            set.add(glob);
        }
        let set = set
            .build()
            .map_err(|e| SkillError::new(ErrorKind::Config, format!("{what} patterns: {e}")))?;
        Ok(Globs {
            patterns: patterns.to_vec(),
            set,
        })
    }
}

/// What a principal may reach: skills by name globs, topics by name globs, and the control
/// plane with `admin`.
#[derive(Debug, Clone, Default)]
pub struct Grants {
    /// `None`: every skill callers may see.
    skills: Option<Globs>,
    /// `None`: every topic that is not reserved; `Some` with no pattern: none.
    topics: Option<Globs>,
    admin: bool,
}

impl Grants {
    /// `skills`: `None` for every skill; `topics`: `None` for every non-reserved topic.
    pub fn new(
        skills: Option<&[String]>,
        topics: Option<&[String]>,
        admin: bool,
    ) -> Result<Grants> {
        Ok(Grants {
            skills: skills.map(|p| Globs::new("skill", p)).transpose()?,
            topics: topics.map(|p| Globs::new("topic", p)).transpose()?,
            admin,
        })
    }

    fn to_json(&self) -> Value {
        json!({
            "skills": self.skills.as_ref().map(|g| g.patterns.clone()),
            "topics": self.topics.as_ref().map(|g| g.patterns.clone()),
            "admin": self.admin,
        })
    }

    fn from_json(value: &Value) -> Result<Grants> {
        let list = |key: &str| -> Option<Vec<String>> {
            value.get(key)?.as_array().map(|items| {
                items
                    .iter()
                    .filter_map(|v| v.as_str().map(str::to_string))
                    .collect()
            })
        };
        let skills = list("skills");
        let topics = list("topics");
        Grants::new(
            skills.as_deref(),
            topics.as_deref(),
            value.get("admin").and_then(Value::as_bool).unwrap_or(false),
        )
    }
}

/// What kind of principal: decides how a stored one is found again.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PrincipalKind {
    /// The project itself: the command line, declared metadata.
    Project,
    /// The one caller when keys are off (no authentication, no admin).
    Local,
    /// An API key, by name: its grants are read from the key ring when stored work runs, and
    /// its work pauses while no key has the name.
    Key,
    /// Anyone else a door identifies (a web visitor, a webhook route, a chat user, a sender):
    /// its grants are those it had when it stored work.
    Peer,
}

/// On whose behalf an invocation runs. Cheap to clone.
#[derive(Clone)]
pub struct Principal(Arc<PrincipalInner>);

struct PrincipalInner {
    id: String,
    kind: PrincipalKind,
    grants: Grants,
}

impl fmt::Debug for Principal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Principal")
            .field("id", &self.0.id)
            .field("grants", &self.0.grants)
            .finish()
    }
}

impl PartialEq for Principal {
    fn eq(&self, other: &Self) -> bool {
        self.0.id == other.0.id
    }
}

impl Principal {
    /// True when `other` is granted exactly what this principal is (skills, topics, admin).
    pub fn same_grants(&self, other: &Principal) -> bool {
        self.0.grants.to_json() == other.0.grants.to_json()
    }

    /// The project: every skill and topic, the control plane.
    pub fn project() -> Principal {
        static PROJECT: std::sync::OnceLock<Principal> = std::sync::OnceLock::new();
        PROJECT
            .get_or_init(|| Principal::with("project", PrincipalKind::Project, Grants::default()))
            .clone()
    }

    /// The one local caller when keys are off: every public skill and non-reserved topic, no
    /// admin.
    pub fn local() -> Principal {
        static LOCAL: std::sync::OnceLock<Principal> = std::sync::OnceLock::new();
        LOCAL
            .get_or_init(|| Principal::with("local", PrincipalKind::Local, Grants::default()))
            .clone()
    }

    /// An API key named `name`.
    pub fn key(name: &str, grants: Grants) -> Principal {
        Principal::with(&format!("key:{name}"), PrincipalKind::Key, grants)
    }

    /// Any other identified peer: `id` is `kind:rest` (`slack:T1:U1`, `webhook:github`,
    /// `email:ada@example.com`, `web:<session>`).
    pub fn peer(id: &str, grants: Grants) -> Principal {
        Principal::with(id, PrincipalKind::Peer, grants)
    }

    fn with(id: &str, kind: PrincipalKind, grants: Grants) -> Principal {
        Principal(Arc::new(PrincipalInner {
            id: id.to_string(),
            kind,
            grants,
        }))
    }

    pub fn id(&self) -> &str {
        &self.0.id
    }

    pub fn kind(&self) -> PrincipalKind {
        self.0.kind
    }

    pub fn is_project(&self) -> bool {
        self.0.kind == PrincipalKind::Project
    }

    /// The name of its key, for a key principal.
    pub fn key_name(&self) -> Option<&str> {
        match self.0.kind {
            PrincipalKind::Key => self.0.id.strip_prefix("key:"),
            _ => None,
        }
    }

    /// The `admin` scope (the project has it).
    pub fn admin(&self) -> bool {
        self.is_project() || self.0.grants.admin
    }

    /// Whether its skill grants name `skill` (visibility is decided apart).
    pub fn may_invoke(&self, skill: &str) -> bool {
        self.is_project()
            || self
                .0
                .grants
                .skills
                .as_ref()
                .is_none_or(|g| g.set.is_match(skill))
    }

    /// True when its skill grants are every skill.
    pub fn all_skills(&self) -> bool {
        self.is_project() || self.0.grants.skills.is_none()
    }

    /// Whether it may read or emit on `topic`: the project any topic; a principal its topic
    /// grants (every non-reserved one by default); reserved topics (`gateway-*`, `agent-*`,
    /// `shutdown`, `*.dead`) only with `admin`, to read.
    pub fn may_use_topic(&self, topic: &str) -> bool {
        if self.is_project() {
            return true;
        }
        if is_reserved_topic(topic) {
            return self.0.grants.admin;
        }
        self.0
            .grants
            .topics
            .as_ref()
            .is_none_or(|g| g.set.is_match(topic))
    }

    /// A name for queues it owns, unique to it and valid as a queue name: `p.` and a digest of
    /// its id. The project's queues are not namespaced.
    pub fn namespace(&self) -> Option<String> {
        if self.is_project() {
            return None;
        }
        let digest = crate::digest::sha256_hex(self.0.id.as_bytes());
        Some(format!("p.{}", &digest[..16]))
    }

    /// How it is stored with work kept for later.
    pub fn to_json(&self) -> Value {
        let kind = match self.0.kind {
            PrincipalKind::Project => "project",
            PrincipalKind::Local => "local",
            PrincipalKind::Key => "key",
            PrincipalKind::Peer => "peer",
        };
        json!({ "id": self.0.id, "kind": kind, "grants": self.0.grants.to_json() })
    }

    /// A stored principal read back. Unreadable ones are an error (the work does not run).
    pub fn from_json(value: &Value) -> Result<Principal> {
        let id = value
            .get("id")
            .and_then(Value::as_str)
            .ok_or_else(|| SkillError::failed("a stored principal has no `id`"))?;
        let kind = value.get("kind").and_then(Value::as_str).unwrap_or("peer");
        Ok(match kind {
            "project" => Principal::project(),
            "local" => Principal::local(),
            "key" => Principal::with(
                id,
                PrincipalKind::Key,
                Grants::from_json(value.get("grants").unwrap_or(&Value::Null))?,
            ),
            _ => Principal::peer(
                id,
                Grants::from_json(value.get("grants").unwrap_or(&Value::Null))?,
            ),
        })
    }
}

/// Topics only skillgate itself emits on: `shutdown`, the gateway's and the agent's
/// (`gateway-*`, `agent-*`), and dead letters (`*.dead`). Nobody emits on them by `event-emit`,
/// and only the project and `admin` keys read them.
pub fn is_reserved_topic(topic: &str) -> bool {
    topic == "shutdown"
        || topic.starts_with("gateway-")
        || topic.starts_with("agent-")
        || topic.ends_with(".dead")
}

/// Finds a key principal's current grants when its stored work runs: `None` when no key has
/// the name any more (its work pauses). Kept on the kernel by whoever holds the keys.
pub trait KeyDirectory: Send + Sync {
    fn lookup(&self, name: &str) -> Option<Principal>;
}

/// The directory the kernel holds (an extension; absent means no keys: `skillgate run`).
pub struct Keys(pub parking_lot::RwLock<Option<Arc<dyn KeyDirectory>>>);

impl Keys {
    pub fn new() -> Keys {
        Keys(parking_lot::RwLock::new(None))
    }

    pub fn install(&self, directory: Arc<dyn KeyDirectory>) {
        *self.0.write() = Some(directory);
    }

    /// The principal stored work of `stored` runs for now: a key's current grants, or why it
    /// may not run (`key-revoked`).
    pub fn current(&self, stored: &Principal) -> std::result::Result<Principal, &'static str> {
        match (stored.key_name(), &*self.0.read()) {
            (Some(name), Some(directory)) => directory.lookup(name).ok_or("key-revoked"),
            _ => Ok(stored.clone()),
        }
    }
}

impl Default for Keys {
    fn default() -> Self {
        Keys::new()
    }
}

/// The authority of an invocation: who named it, for whom.
#[derive(Debug, Clone)]
pub struct Authority {
    pub level: Level,
    pub principal: Principal,
}

impl Authority {
    /// The project acting for itself (the command line, declared work).
    pub fn project() -> Authority {
        Authority {
            level: Level::Project,
            principal: Principal::project(),
        }
    }

    /// A caller naming a tool.
    pub fn caller(principal: Principal) -> Authority {
        let level = if principal.is_project() {
            Level::Project
        } else {
            Level::Caller
        };
        Authority { level, principal }
    }

    /// Project code serving `principal` (a route the project declared, a skill's own code).
    pub fn serving(principal: Principal) -> Authority {
        Authority {
            level: Level::Project,
            principal,
        }
    }

    /// The same principal at `level`, never above this one's.
    pub fn at(&self, level: Level) -> Authority {
        Authority {
            level: level.min(self.level),
            principal: self.principal.clone(),
        }
    }

    /// The same level for `principal` (the current grants of the same key).
    pub fn with_principal(self, principal: Principal) -> Authority {
        Authority {
            level: self.level,
            principal,
        }
    }

    /// Whether it may run control-plane tools: project level, or a caller with `admin`.
    pub fn may_administer(&self) -> bool {
        match self.level {
            Level::Project => true,
            Level::Caller => self.principal.admin(),
            Level::Untrusted => false,
        }
    }

    /// The tool `name` as this authority may name it. Below project level, a missing, hidden,
    /// internal or out-of-grants tool gets the same not-found answer, whose suggestions list only
    /// names it may reach; untrusted code may name hidden helpers (an agent's tools), never
    /// internal ones.
    pub fn reach<'a>(&self, index: &'a SearchIndex, name: &str) -> Result<&'a Arc<Tool>> {
        if self.level == Level::Project {
            return index.find(name);
        }
        match index.get(name) {
            // The provider some metadata selects is the agent's machinery, like `agent-model`.
            Some(tool) if self.may_name(tool) && !index.is_provider(name) => Ok(tool),
            _ => {
                let suggestions: Vec<String> = index
                    .closest(name)
                    .into_iter()
                    .filter(|n| {
                        index
                            .get(n)
                            .is_some_and(|t| self.may_name(t) && !index.is_provider(n))
                    })
                    .collect();
                let mut message = format!("no skill named `{name}`");
                if !suggestions.is_empty() {
                    message.push_str(&format!(
                        "; did you mean {}?",
                        suggestions
                            .iter()
                            .map(|s| format!("`{s}`"))
                            .collect::<Vec<_>>()
                            .join(", ")
                    ));
                }
                Err(SkillError::new(ErrorKind::NotFound, message).with_data(
                    json!({ "rule": "unreachable", "skill": name, "suggestions": suggestions }),
                ))
            }
        }
    }

    /// Whether this authority may name `tool` at all (control plane aside).
    pub fn may_name(&self, tool: &Tool) -> bool {
        match self.level {
            Level::Project => true,
            Level::Caller => {
                tool.class != ToolClass::Internal
                    && !is_middleware(tool)
                    && !tool.hidden
                    && self.principal.may_invoke(&tool.name)
            }
            Level::Untrusted => {
                tool.class != ToolClass::Internal
                    && !is_middleware(tool)
                    && self.principal.may_invoke(&tool.name)
            }
        }
    }

    /// Refuses a control-plane tool to an authority that may not administer.
    pub fn check_class(&self, tool: &Tool) -> Result<()> {
        if tool.class != ToolClass::ControlPlane || self.may_administer() {
            return Ok(());
        }
        let who = match self.level {
            Level::Untrusted => "untrusted code".to_string(),
            _ => format!("`{}` (no `admin` scope)", self.principal.id()),
        };
        Err(SkillError::new(
            ErrorKind::Denied,
            format!(
                "`{}` administers the server: {who} may not run it; it needs a key with the `admin` scope",
                tool.name
            ),
        )
        .with_data(json!({ "rule": "control-plane", "skill": tool.name })))
    }
}

/// A middleware (`role: middleware`) is pipeline machinery: only the project names it.
fn is_middleware(tool: &Tool) -> bool {
    tool.decl.get("role").and_then(Value::as_str) == Some("middleware")
}

/// The names of the kernel's directive keys: what `$NAME` keys of args the kernel interprets.
pub const DIRECTIVE_KEYS: [&str; 2] = ["$context", "$detached"];

/// The path (`/a/0/$context`) of the first directive key anywhere in `value`.
pub fn find_directive_key(value: &Value) -> Option<String> {
    fn walk(value: &Value, path: &mut Vec<String>, depth: usize) -> Option<String> {
        // Deeper than any JSON a door accepts; past it the value is refused as a whole.
        if depth > 128 {
            return Some(format!("{}/…", path.join("/")));
        }
        match value {
            Value::Object(map) => {
                for (key, inner) in map {
                    path.push(key.replace('~', "~0").replace('/', "~1"));
                    if DIRECTIVE_KEYS.contains(&key.as_str()) {
                        return Some(format!("/{}", path.join("/")));
                    }
                    if let Some(found) = walk(inner, path, depth + 1) {
                        return Some(found);
                    }
                    path.pop();
                }
                None
            }
            Value::Array(items) => {
                for (i, inner) in items.iter().enumerate() {
                    path.push(i.to_string());
                    if let Some(found) = walk(inner, path, depth + 1) {
                        return Some(found);
                    }
                    path.pop();
                }
                None
            }
            _ => None,
        }
    }
    walk(value, &mut Vec::new(), 0)
}

/// Refuses args holding a directive key at any depth, naming its path: what every authority
/// below project level passes is data.
pub fn check_data(args: &Value, level: Level) -> Result<()> {
    let who = match level {
        Level::Untrusted => "args from untrusted code",
        _ => "args from a caller",
    };
    refuse_directives(args, who)
}

/// Refuses args kept for later (a schedule's, a subscription's) holding a directive key at any
/// depth, whoever keeps them: they run later as data.
pub fn check_stored(args: &Value) -> Result<()> {
    refuse_directives(args, "stored args")
}

fn refuse_directives(args: &Value, what: &str) -> Result<()> {
    let Some(path) = find_directive_key(args) else {
        return Ok(());
    };
    let key = path.rsplit('/').next().unwrap_or_default().to_string();
    Err(SkillError::new(
        ErrorKind::InvalidArgs,
        format!("{what} are data: `{key}` at `{path}` is an invoke directive and was refused"),
    )
    .with_data(json!({
        "rule": "directive-key",
        "key": key,
        "errors": [{ "path": path, "message": format!("`{key}` is an invoke directive, not data") }],
    })))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn directive_keys_are_found_at_any_depth_and_named_by_path() {
        let args = json!({ "a": [1, { "b": { "$context": {} } }] });
        assert_eq!(find_directive_key(&args).unwrap(), "/a/1/b/$context");
        assert_eq!(
            find_directive_key(&json!({"$detached": true})).unwrap(),
            "/$detached"
        );
    }

    #[test]
    fn other_dollar_keys_are_plain_data() {
        assert!(find_directive_key(&json!({ "$schema": "x", "q": { "$gt": 1 } })).is_none());
    }

    #[test]
    fn a_level_never_rises() {
        let a = Authority::caller(Principal::local());
        assert_eq!(a.at(Level::Project).level, Level::Caller);
        assert_eq!(a.at(Level::Untrusted).level, Level::Untrusted);
    }

    #[test]
    fn reserved_topics_need_admin_and_topic_grants_limit_the_rest() {
        let scoped = Principal::key(
            "k",
            Grants::new(None, Some(&["orders.*".into()]), false).unwrap(),
        );
        assert!(scoped.may_use_topic("orders.new"));
        assert!(!scoped.may_use_topic("billing"));
        assert!(!Principal::local().may_use_topic("gateway-message"));
        let admin = Principal::key("a", Grants::new(None, None, true).unwrap());
        assert!(admin.may_use_topic("gateway-message"));
    }

    #[test]
    fn a_stored_principal_reads_back_with_its_grants() {
        let p = Principal::key(
            "k",
            Grants::new(Some(&["hel*".into()]), Some(&[]), true).unwrap(),
        );
        let back = Principal::from_json(&p.to_json()).unwrap();
        assert_eq!(back.id(), "key:k");
        assert!(back.may_invoke("hello") && !back.may_invoke("vault"));
        assert!(!back.may_use_topic("orders") && back.admin());
    }
}
