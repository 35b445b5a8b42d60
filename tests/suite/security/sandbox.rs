//! Security: sandbox (see mod.rs). JavaScript values that cannot become JSON (an error whose
//! `data` is itself, chains and nestings tens of thousands deep) are answered with an error
//! instead of overflowing the server's stack, and CPU-bound scripts run off the I/O workers, so
//! health checks answer while they spin and a timed-out or abandoned call stops its script.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use skillgate::gateway::http::HttpConfig;
use skillgate::kernel::KernelBuilder;
use skillgate::{InvokeOptions, Kernel, SkillError, ToolRef};
use tokio::sync::Semaphore;

use crate::support::common::{Project, native, plain};
use crate::support::server::{TestServer, config, problem};

/// Only turns a broken rule into a failure instead of a hang; never a timing assertion.
const HANG_GUARD: Duration = Duration::from_secs(60);

/// Builds an error chain `n` deep: each error's `data` is the one before it.
const CHAIN: &str = "function chain(n) {\n  let e = new Error('0');\n  for (let i = 1; i < n; i++) { const next = new Error(String(i)); next.data = e; e = next; }\n  return e;\n}\n";

/// Builds a plain object `n` deep: `{ o: { o: ... } }`.
const NEST: &str =
    "function nest(n) {\n  let o = {};\n  for (let i = 0; i < n; i++) o = { o };\n  return o;\n}\n";

/// A project whose skills each do one hostile thing, plus `ok`.
fn hostile_project() -> Project {
    let p = Project::new();
    p.skill(
        "self-thrown.skill.js",
        "export default async () => { const e = new Error('x'); e.data = e; throw e; };",
    );
    p.skill(
        "self-returned.skill.js",
        "export default async () => { const e = new Error('x'); e.data = e; return e; };",
    );
    p.skill(
        "chain-thrown.skill.js",
        &format!("{CHAIN}export default async () => {{ throw chain(30000); }};"),
    );
    p.skill(
        "chain-returned.skill.js",
        &format!("{CHAIN}export default async () => chain(30000);"),
    );
    p.skill(
        "nest-thrown.skill.js",
        &format!("{NEST}export default async () => {{ throw nest(30000); }};"),
    );
    p.skill(
        "nest-returned.skill.js",
        &format!("{NEST}export default async () => nest(30000);"),
    );
    p.skill(
        "deep-path.skill.js",
        "export default async (ctx) => { ctx.manager.set('locals.deep.' + Array(30000).fill('a').join('.'), 1); return 'set'; };",
    );
    p.skill("ok.skill.js", "export default async () => 'ok';");
    p
}

/// `POST /invoke/<skill>` is answered with a problem document (not a dropped connection), and
/// the server then still serves a normal call.
async fn assert_answered_then_serving(server: &TestServer, skill: &str) {
    let response = server
        .post_json(&format!("/invoke/{skill}"), &json!({}))
        .await;
    problem(response, 500).await;
    let response = server.post_json("/invoke/ok", &json!({})).await;
    assert_eq!(response.status(), 200, "the next request after `{skill}`");
    let body: Value = response.json().await.unwrap();
    assert_eq!(body, json!({ "result": "ok" }));
}

#[tokio::test]
async fn a_thrown_error_whose_data_is_itself_is_answered_not_a_crash() {
    let mut server = TestServer::start(hostile_project(), config()).await;
    assert_answered_then_serving(&server, "self-thrown").await;
    server.finish().await;
}

#[tokio::test]
async fn a_returned_error_whose_data_is_itself_is_answered_not_a_crash() {
    let mut server = TestServer::start(hostile_project(), config()).await;
    assert_answered_then_serving(&server, "self-returned").await;
    server.finish().await;
}

#[tokio::test]
async fn a_thrown_error_chain_30000_deep_is_answered_not_a_crash() {
    let mut server = TestServer::start(hostile_project(), config()).await;
    assert_answered_then_serving(&server, "chain-thrown").await;
    server.finish().await;
}

#[tokio::test]
async fn a_returned_error_chain_30000_deep_is_answered_not_a_crash() {
    let mut server = TestServer::start(hostile_project(), config()).await;
    assert_answered_then_serving(&server, "chain-returned").await;
    server.finish().await;
}

#[tokio::test]
async fn a_plain_value_nested_30000_deep_is_answered_not_a_crash() {
    let mut server = TestServer::start(hostile_project(), config()).await;
    assert_answered_then_serving(&server, "nest-thrown").await;
    assert_answered_then_serving(&server, "nest-returned").await;
    server.finish().await;
}

#[tokio::test]
async fn a_script_cannot_nest_context_values_30000_deep_through_set_paths() {
    let mut server = TestServer::start(hostile_project(), config()).await;
    assert_answered_then_serving(&server, "deep-path").await;
    server.finish().await;
}

/// Invokes `skill` in `kernel` and returns its error.
async fn error_of(kernel: &Kernel, skill: &str) -> SkillError {
    let call = kernel.invoke(skill, json!({}), InvokeOptions::default());
    tokio::time::timeout(HANG_GUARD, call)
        .await
        .expect("hang guard")
        .map(plain)
        .expect_err("the skill fails")
}

#[tokio::test]
async fn a_thrown_errors_data_that_refers_back_to_it_becomes_the_circular_marker() {
    let kernel = hostile_project().kernel();
    let err = error_of(&kernel, "self-thrown").await;
    assert_eq!(err.message(), "x");
    assert_eq!(err.data(), Some(&json!("[Circular]")));
    assert!(err.stack().is_some(), "the stack still crosses");
}

#[tokio::test]
async fn a_thrown_error_chain_is_cut_at_the_depth_limit_with_a_marker() {
    let kernel = hostile_project().kernel();
    let err = error_of(&kernel, "chain-thrown").await;
    assert_eq!(err.message(), "29999");
    // The error itself is the first of 100 levels; each `data` one level further down.
    let mut data = err.data().expect("data");
    let mut levels = 1;
    while let Some(inner) = data.get("data") {
        assert_eq!(
            data["message"],
            json!((29999 - levels).to_string()),
            "level {levels}"
        );
        data = inner;
        levels += 1;
    }
    assert_eq!(data, &json!("[Too deep]"));
    assert_eq!(levels, 100);
}

#[tokio::test]
async fn an_error_given_to_console_or_fail_crosses_with_its_data_marked() {
    let p = Project::new();
    p.skill(
        "report.skill.js",
        "export default async (ctx) => {\n  const e = new Error('x'); e.data = e;\n  console.log('about to fail:', e);\n  ctx.manager.fail(e);\n};",
    );
    let err = error_of(&p.kernel(), "report").await;
    // Neither `console.log` nor `fail` refused the error: it is the one that fails the skill.
    assert_eq!(err.message(), "x");
    assert_eq!(err.data(), Some(&json!("[Circular]")));
}

#[tokio::test]
async fn a_returned_cycle_or_value_past_the_depth_limit_is_a_clear_error() {
    let kernel = hostile_project().kernel();
    let err = error_of(&kernel, "self-returned").await;
    assert_eq!(
        err.message(),
        "RangeError: value cannot cross the sandbox boundary: it refers back to itself (a cycle)"
    );
    for skill in ["chain-returned", "nest-returned"] {
        let err = error_of(&kernel, skill).await;
        assert_eq!(
            err.message(),
            "RangeError: value cannot cross the sandbox boundary: it nests deeper than 100 levels",
            "{skill}"
        );
    }
    let err = error_of(&kernel, "nest-thrown").await;
    assert_eq!(
        err.message(),
        "script threw a value that cannot cross the sandbox boundary: it nests deeper than 100 levels"
    );
}

#[tokio::test]
async fn a_bridge_argument_with_a_cycle_or_past_the_depth_limit_throws_a_catchable_range_error() {
    let p = Project::new();
    p.skill(
        "args.skill.js",
        &format!(
            "{NEST}export default async (ctx) => {{\n  const seen = [];\n  const o = {{}}; o.o = o;\n  for (const bad of [o, nest(200)]) {{\n    try {{ ctx.manager.set('locals.x', bad); seen.push('set'); }} catch (e) {{ seen.push(e.message); }}\n    try {{ await ctx.manager.invoke('ok', {{ bad }}); seen.push('invoked'); }} catch (e) {{ seen.push(e.message); }}\n  }}\n  try {{ ctx.manager.set('locals.y' + '.a'.repeat(98), {{ b: 1 }}); seen.push('set'); }} catch (e) {{ seen.push(e.message); }}\n  return seen;\n}};"
        ),
    );
    p.skill("ok.skill.js", "export default async () => 'ok';");
    let kernel = p.kernel();
    let out = kernel
        .invoke("args", json!({}), InvokeOptions::default())
        .await
        .map(plain)
        .unwrap();
    let cycle = "value cannot cross the sandbox boundary: it refers back to itself (a cycle)";
    let deep = "value cannot cross the sandbox boundary: it nests deeper than 100 levels";
    let path = "ctx.manager.set(path, value) would nest the value deeper than 100 levels below the context";
    assert_eq!(
        out,
        Some(json!([
            cycle,
            format!("ctx.manager.invoke: RangeError: {cycle}"),
            deep,
            format!("ctx.manager.invoke: RangeError: {deep}"),
            path
        ]))
    );
}

// ---------------------------------------------------------------------------------------------
// CPU-bound scripts run off the I/O workers

/// A script that says it started (through the native `started` tool), then spins until its
/// time limit (`time` ms of running).
fn spin_skill(time: u64) -> String {
    format!(
        "export const frontmatter = {{ metadata: {{ sandbox: {{ time: {time} }} }} }};\nexport default async (ctx) => {{ await ctx.manager.invoke('started'); for (;;) {{}} }};"
    )
}

/// Counts started spinners (`started` adds a permit) and finished ones (`spin-watch` invokes
/// `spin` and counts its end, whatever it was, before answering).
#[derive(Clone)]
struct Spinners {
    started: Arc<Semaphore>,
    finished: Arc<AtomicUsize>,
}

impl Spinners {
    fn new() -> Spinners {
        Spinners {
            started: Arc::new(Semaphore::new(0)),
            finished: Arc::default(),
        }
    }

    fn tools(&self, builder: KernelBuilder) -> KernelBuilder {
        let started = self.started.clone();
        let finished = self.finished.clone();
        builder
            .native(native("name: started\n", move |_ctx, _args| {
                let started = started.clone();
                async move {
                    started.add_permits(1);
                    Ok(None)
                }
            }))
            .native(native("name: spin-watch\n", move |ctx, _args| {
                let finished = finished.clone();
                async move {
                    let spin = ToolRef::Name("spin".into());
                    let out = ctx.invoke(spin, json!({}), InvokeOptions::default()).await;
                    finished.fetch_add(1, Ordering::SeqCst);
                    out.map(plain)
                }
            }))
    }

    /// Waits until `n` spinners have started.
    async fn wait_started(&self, n: usize) {
        let all = self.started.acquire_many(u32::try_from(n).unwrap());
        let permits = tokio::time::timeout(HANG_GUARD, all)
            .await
            .expect("hang guard: the spinners never started")
            .expect("semaphore open");
        permits.forget();
    }
}

/// The server's own runtime, two workers as `skillgate serve` has on a 2-core machine. The
/// test's client and its guards run on the test's runtime, so a server whose workers are stalled
/// cannot stall them too (the failure is then seen, not waited out).
struct ServerRuntime(Option<tokio::runtime::Runtime>);

impl ServerRuntime {
    fn new() -> ServerRuntime {
        ServerRuntime(Some(crate::support::common::runtime()))
    }

    /// Starts a server over `project` with the spinners' tools, on this runtime.
    async fn start(
        &self,
        project: Project,
        settings: HttpConfig,
        spinners: &Spinners,
    ) -> TestServer {
        let spinners = spinners.clone();
        let runtime = self.0.as_ref().expect("running");
        let start = TestServer::start_with(project, settings, move |b| spinners.tools(b));
        runtime.spawn(start).await.expect("server started")
    }
}

impl Drop for ServerRuntime {
    fn drop(&mut self) {
        // Without waiting: after a failure, scripts may still spin on its workers.
        if let Some(runtime) = self.0.take() {
            runtime.shutdown_background();
        }
    }
}

/// Starts `POST /invoke/spin-watch` on a task of its own; resolves to the status.
fn spin_call(server: &TestServer) -> tokio::task::JoinHandle<u16> {
    let request = server
        .client
        .post(server.url("/invoke/spin-watch"))
        .json(&json!({}));
    tokio::spawn(async move { request.send().await.expect("answered").status().as_u16() })
}

#[tokio::test]
async fn health_checks_answer_while_two_scripts_spin() {
    let project = Project::new();
    project.skill("spin.skill.js", &spin_skill(4000));
    let spinners = Spinners::new();
    let runtime = ServerRuntime::new();
    let mut server = runtime.start(project, config(), &spinners).await;
    let first = spin_call(&server);
    let second = spin_call(&server);
    spinners.wait_started(2).await;
    let asked = Instant::now();
    let health = server.get("/healthz").await;
    let took = asked.elapsed();
    eprintln!("/healthz answered in {took:?} while two scripts spun");
    assert_eq!(health.status(), 200);
    assert_eq!(
        spinners.finished.load(Ordering::SeqCst),
        0,
        "/healthz answered before either script ended"
    );
    assert!(!first.is_finished() && !second.is_finished());
    // Both are then stopped by their own time limit.
    for call in [first, second] {
        let status = tokio::time::timeout(HANG_GUARD, call)
            .await
            .expect("hang guard")
            .unwrap();
        assert_eq!(status, 500);
    }
    server.finish().await;
}

/// The kernel work a script starts (awaited or detached) runs on the sandbox threads, at their
/// lower priority, never on the threads that serve requests: a script fanning out invocations
/// queues them behind its own work, not ahead of other clients'.
#[tokio::test]
async fn kernel_work_a_script_starts_runs_on_the_sandbox_threads_not_the_request_threads() {
    let project = Project::new();
    project.skill(
        "starts.skill.js",
        "export default async (ctx) => {\n  await ctx.manager.invoke('where');\n  ctx.manager.invoke('where', {}, { detached: true });\n};",
    );
    let (tx, mut threads) = tokio::sync::mpsc::unbounded_channel();
    let kernel = project
        .builder()
        .native(native("name: where\n", move |_ctx, _args| {
            let tx = tx.clone();
            async move {
                let _ = tx.send(std::thread::current().name().map(String::from));
                Ok(None)
            }
        }))
        .build();
    let run = kernel.invoke("starts", json!({}), InvokeOptions::default());
    tokio::time::timeout(HANG_GUARD, run)
        .await
        .expect("hang guard")
        .unwrap();
    // The awaited invocation, then the detached one.
    for _ in 0..2 {
        let name = tokio::time::timeout(HANG_GUARD, threads.recv())
            .await
            .expect("hang guard")
            .expect("`where` ran")
            .unwrap_or_default();
        assert!(name.starts_with("skillgate-sandbox-"), "ran on {name}");
    }
}

/// A project with a spinner whose own time limit (10 minutes) is far past the hang guard.
fn long_spin_project() -> Project {
    let project = Project::new();
    project.skill("spin.skill.js", &spin_skill(600_000));
    project.skill("ok.skill.js", "export default async () => 'ok';");
    project
}

/// Occupies every sandbox thread with a long spinner, lets each call end from outside
/// (`stopped` is one such call, resolving when its client has its answer or gave up), then
/// checks a quick script is served: the stopped scripts let go of their threads.
async fn assert_stopped_spinners_free_their_threads(
    server: &TestServer,
    spinners: &Spinners,
    stopped: impl Fn(&TestServer) -> tokio::task::JoinHandle<()>,
) {
    let threads = skillgate::sandbox::threads();
    let calls: Vec<_> = (0..threads).map(|_| stopped(server)).collect();
    spinners.wait_started(threads).await;
    for call in calls {
        tokio::time::timeout(HANG_GUARD, call)
            .await
            .expect("hang guard: the call was not stopped")
            .unwrap();
    }
    let args = json!({});
    let quick = server.post_json("/invoke/ok", &args);
    let response = tokio::time::timeout(HANG_GUARD, quick)
        .await
        .expect("hang guard: the stopped scripts still hold the sandbox threads");
    assert_eq!(response.status(), 200);
}

#[tokio::test]
async fn a_script_past_the_http_timeout_is_stopped_and_frees_its_thread() {
    let mut settings = config();
    settings.timeout = Duration::from_millis(500);
    let spinners = Spinners::new();
    let runtime = ServerRuntime::new();
    let mut server = runtime
        .start(long_spin_project(), settings, &spinners)
        .await;
    assert_stopped_spinners_free_their_threads(&server, &spinners, |server| {
        let call = spin_call(server);
        tokio::spawn(async move { assert_eq!(call.await.unwrap(), 504) })
    })
    .await;
    server.finish().await;
}

#[tokio::test]
async fn a_script_whose_client_went_away_is_stopped_and_frees_its_thread() {
    let spinners = Spinners::new();
    let runtime = ServerRuntime::new();
    let mut server = runtime
        .start(long_spin_project(), config(), &spinners)
        .await;
    assert_stopped_spinners_free_their_threads(&server, &spinners, |server| {
        // The client gives up after half a second and closes its connection.
        let request = server
            .client
            .post(server.url("/invoke/spin-watch"))
            .timeout(Duration::from_millis(500))
            .json(&json!({}));
        tokio::spawn(async move {
            let err = request.send().await.expect_err("the client gives up");
            assert!(err.is_timeout(), "{err}");
        })
    })
    .await;
    server.finish().await;
}
