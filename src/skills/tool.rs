//! The tool definition: what a skill file or a native registration declares, parsed once.

use std::fmt;
use std::path::PathBuf;
use std::sync::Arc;

use futures::future::BoxFuture;
use serde_json::{Map, Value, json};

use crate::context::Context;
use crate::error::Result;

/// A native tool body: `(ctx, args) -> value`; `Ok(None)` is JavaScript's `undefined`.
pub type NativeFn =
    Arc<dyn Fn(Context, Arc<Value>) -> BoxFuture<'static, Result<Option<Value>>> + Send + Sync>;

/// How a tool's own work is done once the chain reaches it.
#[derive(Clone)]
pub enum Body {
    /// Rust code registered by name.
    Native(NativeFn),
    /// A markdown skill: with no agent, the result is the expanded prompt.
    Template,
    /// Code run by a script engine (the JavaScript sandbox: a `.skill.js` file, or untrusted
    /// inline code), known here only through [`ScriptBody`].
    Script(Arc<dyn ScriptBody>),
}

/// A body the skills layer cannot run itself: the engine that parsed it runs it. Keeps the
/// kernel and the skills free of any engine (the sandbox implements this).
pub trait ScriptBody: Send + Sync {
    /// Where the code came from (`file://...`, `inline://...`), for messages.
    fn origin(&self) -> &str;
    /// Runs the body against the served context (the `execute` step).
    fn run(self: Arc<Self>, served: Context) -> BoxFuture<'static, Result<Option<Value>>>;
}

impl fmt::Debug for Body {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Body::Native(_) => f.write_str("Native"),
            Body::Template => f.write_str("Template"),
            Body::Script(s) => write!(f, "Script({})", s.origin()),
        }
    }
}

/// Where a tool came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Source {
    /// A file on disk (`file://` origin).
    File(PathBuf),
    /// A file bundled into the binary from the repository's `skills/`.
    Bundled(String),
    /// A native Rust tool (origin `null`).
    Native,
    /// Code given at run time; the string is its `inline://` origin.
    Inline(String),
    /// A tool of a mounted MCP server; the string is its `mcp://server/tool` origin.
    Mcp(String),
}

/// A parsed tool. Immutable; everything per-invocation lives on the context.
#[derive(Debug)]
pub struct Tool {
    pub name: String,
    pub description: String,
    pub source: Source,
    /// The whole parsed frontmatter (`run.origin.frontmatter`).
    pub frontmatter: Arc<Value>,
    /// `frontmatter.metadata`: the tool's own cascade level.
    pub metadata: Arc<Map<String, Value>>,
    /// `run.tool`: the closed declaration.
    pub decl: Arc<Value>,
    /// `run.origin`: `{ uri, frontmatter }`.
    pub origin: Arc<Value>,
    /// `locals.prompt` for markdown tools: `{ raw, expanded }` (expanded starts equal to raw).
    pub prompt: Option<Arc<Value>>,
    /// The file line (1-based) the prompt starts on, for messages that point into it.
    pub prompt_line: usize,
    pub body: Body,
    pub tags: Vec<String>,
    /// True when `role: main`: the tool is the authority for the folder it sits in.
    pub is_main: bool,
    pub hidden: bool,
    /// For a built-in middleware: true when it has nothing to do for a served tool with this
    /// resolved metadata (see [`IdleWhen`]).
    pub idle_when: Option<IdleWhen>,
    /// Control plane, internal machinery, or plain (see `kernel::authority`): set by the code
    /// that registers a native tool, never by a file.
    pub class: crate::kernel::authority::ToolClass,
}

/// Whether a middleware would only pass for a served tool, judged from the served tool's
/// resolved metadata (`run.middleware`) and declaration alone, when its pipeline is resolved.
/// The orchestrator then steps over its chain entry instead of invoking it (an invocation that
/// would only call `next()`); pipelines with `$next` hooks, or with metadata interpolated at
/// invocation, always invoke every entry, so what hooks and debugging observe is unchanged.
pub type IdleWhen = fn(&Map<String, Value>, &Tool) -> bool;

/// The keys of `run.tool`; the declaration is closed to any other.
pub const DECL_KEYS: [&str; 8] = [
    "name",
    "description",
    "params",
    "returns",
    "visibility",
    "allowedTools",
    "role",
    "tags",
];

impl Tool {
    /// Builds a tool from its parsed frontmatter object.
    ///
    /// `frontmatter` must already be validated (see `frontmatter::check`).
    pub fn new(
        frontmatter: Map<String, Value>,
        source: Source,
        prompt: Option<String>,
        body: Body,
    ) -> Tool {
        let name = frontmatter
            .get("name")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string();
        let description = frontmatter
            .get("description")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string();
        let metadata = match frontmatter.get("metadata") {
            Some(Value::Object(m)) => m.clone(),
            _ => Map::new(),
        };
        let tags: Vec<String> = match metadata.get("tags") {
            Some(Value::Array(items)) => items
                .iter()
                .filter_map(|t| t.as_str().map(str::to_string))
                .collect(),
            Some(Value::String(s)) => s.split_whitespace().map(str::to_string).collect(),
            _ => Vec::new(),
        };
        let role = metadata.get("role").cloned().unwrap_or(Value::Null);
        let visibility = metadata
            .get("visibility")
            .cloned()
            .unwrap_or_else(|| json!("public"));
        let decl = json!({
            "name": name,
            "description": description,
            "params": metadata.get("params").cloned().unwrap_or(Value::Null),
            "returns": metadata.get("returns").cloned().unwrap_or(Value::Null),
            "visibility": visibility,
            "allowedTools": metadata.get("allowed-tools").cloned().unwrap_or(Value::Null),
            "role": role,
            "tags": tags,
        });
        let uri = match &source {
            Source::File(path) => Value::String(format!("file://{}", path.display())),
            Source::Bundled(path) => Value::String(format!("file:///bundled/{path}")),
            Source::Native => Value::Null,
            Source::Inline(uri) | Source::Mcp(uri) => Value::String(uri.clone()),
        };
        let frontmatter = Value::Object(frontmatter);
        let origin = json!({ "uri": uri, "frontmatter": frontmatter });
        let prompt = prompt.map(|raw| Arc::new(json!({ "raw": raw, "expanded": raw })));
        // Pipeline machinery (the agent, its providers, middleware) is the project's to name.
        let class = if tags.iter().any(|t| t == "meta-internal")
            || name == "agent-strands"
            || role.as_str() == Some("middleware")
        {
            crate::kernel::authority::ToolClass::Internal
        } else {
            crate::kernel::authority::ToolClass::Plain
        };
        Tool {
            is_main: role.as_str() == Some("main"),
            hidden: visibility.as_str() == Some("hidden"),
            name,
            description,
            source,
            frontmatter: Arc::new(frontmatter),
            metadata: Arc::new(metadata),
            decl: Arc::new(decl),
            origin: Arc::new(origin),
            prompt,
            prompt_line: 1,
            body,
            tags,
            idle_when: None,
            class,
        }
    }

    /// Declares what kind of tool this is for authority (see `kernel::authority`).
    pub fn class(mut self, class: crate::kernel::authority::ToolClass) -> Tool {
        self.class = class;
        self
    }

    /// Declares when this middleware has nothing to do (see [`IdleWhen`]).
    pub fn idle_when(mut self, idle: IdleWhen) -> Tool {
        self.idle_when = Some(idle);
        self
    }

    /// Records the file line the prompt starts on (after the frontmatter).
    pub fn prompt_at(mut self, line: usize) -> Tool {
        self.prompt_line = line;
        self
    }

    /// The directory of the file that declared this tool (`${dir}` in its metadata).
    pub fn dir(&self) -> Option<PathBuf> {
        match &self.source {
            Source::File(path) => path.parent().map(PathBuf::from),
            _ => None,
        }
    }

    /// Where the tool came from, for messages: a file path, `bundled:...` or `native`.
    pub fn location(&self) -> String {
        match &self.source {
            Source::File(path) => path.display().to_string(),
            Source::Bundled(path) => format!("bundled:{path}"),
            Source::Native => "native".into(),
            Source::Inline(uri) | Source::Mcp(uri) => uri.clone(),
        }
    }

    pub fn params(&self) -> Option<&Value> {
        self.metadata.get("params").filter(|v| !v.is_null())
    }
}
