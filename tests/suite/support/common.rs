//! Shared test helpers: a throwaway project folder with skill files, kernels over it, native
//! test tools, recorders of what ran ([`Trace`]) and of the contexts tools saw ([`Seen`]), a
//! greeting project, numbered events, and the `skillgate` binary run as a process.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output};
use std::sync::Arc;

use parking_lot::Mutex;
use serde_json::{Map, Value, json};
use skillgate::cascade::{self, EntryKind};
use skillgate::events::Event;
use skillgate::skills::tool::Tool;
use skillgate::{Context, Kernel};

/// A project folder that lives as long as the value (the contract suite's, with a kernel
/// builder over it).
pub use skillgate::contract::Project;

/// A list of strings that tools append to, to check what ran and in which order.
#[derive(Clone, Default)]
pub struct Trace(pub Arc<Mutex<Vec<String>>>);

impl Trace {
    pub fn push(&self, s: impl Into<String>) {
        self.0.lock().push(s.into());
    }

    pub fn take(&self) -> Vec<String> {
        std::mem::take(&mut *self.0.lock())
    }
}

/// A native tool from YAML frontmatter and an async closure (re-export for brevity).
pub use skillgate::middleware::native;

/// The result of an invocation as plain JSON (`undefined` as `None`).
pub fn plain(out: Option<Arc<Value>>) -> Option<Value> {
    out.map(|v| (*v).clone())
}

/// Contexts captured by tool bodies, by label, to inspect after the run.
#[derive(Clone, Default)]
pub struct Seen(Arc<Mutex<Vec<(String, Context)>>>);

impl Seen {
    pub fn put(&self, label: &str, ctx: &Context) {
        self.0.lock().push((label.to_string(), ctx.clone()));
    }

    /// The last context recorded under `label`.
    pub fn get(&self, label: &str) -> Context {
        self.all(label)
            .pop()
            .unwrap_or_else(|| panic!("no context recorded as `{label}`"))
    }

    pub fn all(&self, label: &str) -> Vec<Context> {
        self.0
            .lock()
            .iter()
            .filter(|(l, _)| l == label)
            .map(|(_, c)| c.clone())
            .collect()
    }
}

/// A project with one markdown skill, `hello`, that answers `Hello, <name>!`; `name` is an
/// optional string.
pub fn hello_project() -> Project {
    let project = Project::new();
    project.skill(
        "hello.skill.md",
        "---\nname: hello\ndescription: Greets.\nmetadata:\n  params:\n    type: object\n    properties:\n      name: { type: string }\n---\nHello, :arg[name]!\n",
    );
    project
}

/// An event on `topic` from source `tests` whose data is `{"n": n}`.
pub fn event(topic: &str, n: u64) -> Event {
    let mut e = Event::new(topic, "test");
    e.data = Some(json!({ "n": n }));
    e.source = Some("tests".into());
    e
}

// ---------------------------------------------------------------------------------------------
// Pipeline tools that record what ran into a [`Trace`], and the chain a skill resolves to
// (used by spec 02's tests in `orchestration/` and by `hooks`).
// ---------------------------------------------------------------------------------------------

/// A middleware `name` with extra metadata lines `meta` (indented two spaces) that records
/// `record(name, target tool, args)` and passes to the next entry.
pub fn middleware(
    name: &str,
    meta: &str,
    trace: &Trace,
    record: fn(&str, &str, &Value) -> String,
) -> Tool {
    let (t, label) = (trace.clone(), name.to_string());
    native(
        &format!("name: {name}\nmetadata:\n  role: middleware\n{meta}"),
        move |ctx, args| {
            let (t, label) = (t.clone(), label.clone());
            async move {
                let target = ctx.ctx_target()?;
                t.push(record(&label, target.tool_name(), &args));
                target.next().await?;
                Ok(None)
            }
        },
    )
}

/// A skill `probe` that runs `args.code` as untrusted code (an agent's, say) and answers
/// `{ ok: result }` or `{ err: message, code: kind }`.
pub fn untrusted_probe() -> Tool {
    native(
        "name: probe\ndescription: Runs untrusted code.\n",
        move |ctx: Context, args| async move {
            let code = args["code"].as_str().unwrap_or_default().to_string();
            let out = skillgate::sandbox::run_untrusted(&ctx, &code, None).await;
            Ok(Some(match out {
                Ok(v) => json!({ "ok": v }),
                Err(e) => json!({ "err": e.message(), "code": e.kind().code() }),
            }))
        },
    )
}

/// A middleware that records its name and passes.
pub fn passing(name: &str, trace: &Trace) -> Tool {
    middleware(name, "", trace, |name, _, _| name.to_string())
}

/// A middleware that records `name=<args as JSON>` and passes.
pub fn with_args(name: &str, trace: &Trace) -> Tool {
    middleware(name, "", trace, |name, _, args| format!("{name}={args}"))
}

/// A middleware that records `name@<served tool>` and passes.
pub fn with_target(name: &str, trace: &Trace) -> Tool {
    middleware(name, "", trace, |name, target, _| {
        format!("{name}@{target}")
    })
}

/// A native skill `name` with metadata lines `meta` whose body records `name` and returns
/// `"<name> done"`.
pub fn skill(name: &str, meta: &str, trace: &Trace) -> Tool {
    let (t, label) = (trace.clone(), name.to_string());
    native(
        &format!("name: {name}\nmetadata:\n{meta}"),
        move |_ctx, _args| {
            let (t, label) = (t.clone(), label.clone());
            async move {
                t.push(label.clone());
                Ok(Some(json!(format!("{label} done"))))
            }
        },
    )
}

/// The chain of `name` as resolved for invocation: tool entries by name, the skill's own body
/// as `<body>`, sentinels left out.
pub fn chain_of(kernel: &Kernel, name: &str) -> Vec<String> {
    let index = kernel.registry().current();
    let tool = index.find(name).expect("tool exists").clone();
    let resolved = cascade::resolved_for(&index, &tool).expect("pipeline resolves");
    resolved
        .entries
        .iter()
        .filter_map(|e| match e.kind {
            EntryKind::Tool => Some(e.name.to_string()),
            EntryKind::Body => Some("<body>".to_string()),
            _ => None,
        })
        .collect()
}

/// The merged cascade metadata of `name`.
pub fn merged_of(kernel: &Kernel, name: &str) -> Map<String, Value> {
    let index = kernel.registry().current();
    cascade::merged(&index, name)
        .expect("cascade resolves")
        .metadata
        .clone()
}

// ---------------------------------------------------------------------------------------------
// The `skillgate` binary.
// ---------------------------------------------------------------------------------------------

/// `tests/fixtures/<name>`, a skill tree kept in the repository.
pub fn fixture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(name)
}

/// The built binary as `skillgate --project <project>`, without the `RUST_LOG`,
/// `SKILLGATE_STORE`, `SKILLGATE_CONFIG` and `DATABASE_URL` of the shell that runs the tests
/// (they would change what a test sees).
pub fn skillgate_command(project: &Path) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_skillgate"));
    command
        .arg("--project")
        .arg(project)
        .env_remove("RUST_LOG")
        .env_remove("SKILLGATE_STORE")
        .env_remove("SKILLGATE_CONFIG")
        // `scripts/test` sets it for the store suites; a command under test picks its store.
        .env_remove("DATABASE_URL");
    command
}

/// Runs `skillgate --project <project> <args>` to its end (see [`skillgate_command`]).
pub fn skillgate(project: &Path, args: &[&str]) -> Output {
    skillgate_command(project)
        .args(args)
        .output()
        .expect("run skillgate")
}

pub fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

pub fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// Sends SIGTERM to a child process (it is not waited for).
pub fn sigterm(child: &Child) {
    signal(child, "-TERM");
}

/// Sends SIGHUP to a child process (a `serve` reloads).
pub fn sighup(child: &Child) {
    signal(child, "-HUP");
}

fn signal(child: &Child, which: &str) {
    let status = Command::new("kill")
        .args([which, &child.id().to_string()])
        .status()
        .expect("kill");
    assert!(status.success());
}

/// A runtime with two worker threads, for a test that is not `#[tokio::test]` (it makes and
/// drops a database or a process outside the runtime).
pub fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime")
}

/// A program from the machine that `scripts/test` provides in the variable `var`, or `None`
/// (the test is skipped, saying so) where it is not set and the run does not require it
/// (`require` set). `installs` says what `scripts/test` installs.
pub fn provided_tool(var: &str, require: &str, installs: &str) -> Option<PathBuf> {
    match std::env::var_os(var) {
        Some(path) => Some(PathBuf::from(path)),
        None if std::env::var_os(require).is_some() => {
            panic!("{var} is not set (scripts/test installs {installs})")
        }
        None => {
            eprintln!("skipped: {var} is not set; run scripts/test");
            None
        }
    }
}

/// Polls `check` until it holds, for up to 20 s: the last value it saw (the assertion names
/// `what` and that value when it never holds).
pub async fn eventually<F, Fut>(what: &str, mut check: F) -> Value
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = (bool, Value)>,
{
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    loop {
        let (ok, seen) = check().await;
        if ok {
            return seen;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "{what}; last seen: {seen}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
}

/// An HTTP client (with the process's TLS provider installed, as skillgate's own clients do).
pub fn http_client() -> reqwest::Client {
    skillgate::tls::install();
    reqwest::Client::new()
}

/// The test cluster's `pg_ctl`, which `scripts/test` gives in `SKILLGATE_PG_CTL` for the tests
/// that stop or restart Postgres.
pub struct PgCtl(String);

impl PgCtl {
    /// `None` (and a line saying the test is skipped) where the variable is not set.
    pub fn from_env() -> Option<PgCtl> {
        match std::env::var("SKILLGATE_PG_CTL") {
            Ok(command) => Some(PgCtl(command)),
            Err(_) => {
                eprintln!(
                    "skipped: SKILLGATE_PG_CTL is not set (scripts/test sets it for its own cluster)"
                );
                None
            }
        }
    }

    /// `pg_ctl -m fast <action>` (`stop`, `start`, `restart`), which must succeed.
    pub fn run(&self, action: &str) {
        let status = std::process::Command::new("sh")
            .arg("-c")
            .arg(format!("{} -m fast {action}", self.0))
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .status()
            .expect("pg_ctl runs");
        assert!(status.success(), "pg_ctl {action} failed");
    }
}
