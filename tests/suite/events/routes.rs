//! Event routes at start: `serve` subscribes every `event.routes` / `event.route` the project
//! declares before anything invokes the handlers, a handler queue left from before a restart gets
//! its worker back, routes an edit adds are served after the reload (and those it removes are
//! no longer), and a route to a missing
//! skill keeps `serve` from starting with the file that declares it.

use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::support::common::{Project, skillgate_command, stderr, stdout};
use crate::support::process::{Served, serve};
use crate::support::stores::Store;

/// A project whose main skill routes `orders` to `on-order`, and whose `on-refund` routes
/// `refunds` to itself; both handlers emit `handled` with what they saw.
fn routed_project() -> Project {
    let project = Project::new();
    project.write(
        "main.skill.md",
        "---\nname: main\nmetadata:\n  role: main\n  $private: [role]\n  event:\n    routes:\n      - { topic: orders, ref: on-order, args: { via: main } }\n---\nmain\n",
    );
    project.skill("on-order.skill.js", &handler("order"));
    project.skill(
        "on-refund.skill.js",
        &format!(
            "export const frontmatter = {{ name: 'on-refund', metadata: {{ event: {{ route: 'refunds' }} }} }};\n{}",
            handler("refund").lines().skip(1).collect::<Vec<_>>().join("\n")
        ),
    );
    project
}

/// A `.skill.js` handler that emits `{kind, n, via}` on `handled`.
fn handler(kind: &str) -> String {
    format!(
        "export const frontmatter = {{ name: 'on-{kind}' }};\n\
         export default async (ctx, args) => {{\n\
           await ctx.manager.invoke('event-emit', {{ topic: 'handled', data: {{ kind: '{kind}', n: args.data.n, via: args.via ?? null }} }});\n\
           return 'ok';\n\
         }};\n"
    )
}

fn start(project: &Project, store: &Store) -> Served {
    let mut args = vec!["--bind", "127.0.0.1:0", "--watch", "false"];
    if let Some(url) = &store.url {
        args.extend(["--store", url.as_str()]);
    }
    serve(project.path(), &args, &[])
}

/// `skillgate <args>` on `project` and `store`.
fn skillgate(project: &Project, store: &Store, args: &[&str]) -> std::process::Output {
    let mut command = skillgate_command(project.path());
    if let Some(url) = &store.url {
        command.arg("--store").arg(url);
    }
    command.args(args).output().expect("run skillgate")
}

/// Emits `{n}` on `topic` from the command line: no handler runs in that process.
fn emit_offline(project: &Project, store: &Store, topic: &str, n: u64) {
    let data = json!({ "topic": topic, "data": { "n": n } }).to_string();
    let out = skillgate(project, store, &["run", "event-emit", "--arg-json", &data]);
    assert!(out.status.success(), "{}", stderr(&out));
}

/// The `handled` events so far, as `(kind, n, via)`.
fn handled(project: &Project, store: &Store) -> Vec<(String, u64, Value)> {
    let out = skillgate(project, store, &["events", "replay", "handled"]);
    assert!(out.status.success(), "{}", stderr(&out));
    stdout(&out)
        .lines()
        .map(|line| {
            let e: Value = serde_json::from_str(line).expect("one envelope per line");
            let d = &e["data"];
            (
                d["kind"].as_str().unwrap().to_string(),
                d["n"].as_u64().unwrap(),
                d["via"].clone(),
            )
        })
        .collect()
}

/// Waits until `handled` holds `want` events (at most 20 s), and returns them.
fn wait_handled(project: &Project, store: &Store, want: usize) -> Vec<(String, u64, Value)> {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let seen = handled(project, store);
        if seen.len() >= want || Instant::now() > deadline {
            return seen;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

async fn invoke(served: &Served, skill: &str, args: Value) -> Value {
    let (status, body) = served.post(&format!("/invoke/{skill}"), &args).await;
    assert_eq!(status, 200, "{body}");
    body
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime")
}

fn routes_are_served_from_start_and_after_a_restart(store: &Store) {
    let project = routed_project();
    let served = start(&project, store);
    assert!(
        served.started.contains("2 event route(s)"),
        "{}",
        served.started
    );
    // Nothing has invoked the handlers: the routes work anyway.
    runtime().block_on(async {
        invoke(
            &served,
            "event-emit",
            json!({ "topic": "orders", "data": { "n": 1 } }),
        )
        .await;
        invoke(
            &served,
            "event-emit",
            json!({ "topic": "refunds", "data": { "n": 2 } }),
        )
        .await;
    });
    let mut seen = wait_handled(&project, store, 2);
    seen.sort_by_key(|s| s.1);
    assert_eq!(
        seen,
        vec![
            ("order".into(), 1, json!("main")),
            ("refund".into(), 2, Value::Null)
        ]
    );
    let (code, _) = served.stop();
    assert_eq!(code, Some(0));
    // Emitted while no server runs: the durable handler queues keep them.
    emit_offline(&project, store, "orders", 3);
    emit_offline(&project, store, "refunds", 4);
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(handled(&project, store).len(), 2, "no handler ran offline");
    let again = start(&project, store);
    let mut seen = wait_handled(&project, store, 4);
    seen.sort_by_key(|s| s.1);
    assert_eq!(
        seen.iter().map(|s| (s.0.as_str(), s.1)).collect::<Vec<_>>(),
        vec![("order", 1), ("refund", 2), ("order", 3), ("refund", 4)],
        "the restarted server's workers took what was queued while it was down"
    );
    drop(again);
}

#[test]
fn event_routes_are_served_from_start_and_their_queues_get_workers_back_after_a_restart_on_sqlite()
{
    routes_are_served_from_start_and_after_a_restart(&Store::sqlite());
}

#[test]
fn event_routes_are_served_from_start_and_their_queues_get_workers_back_after_a_restart_on_postgres()
 {
    if let Some(store) = Store::all().into_iter().find(|s| s.url.is_some()) {
        routes_are_served_from_start_and_after_a_restart(&store);
    }
}

/// Waits (20 s at most) until `/readyz` reports a reload that was applied.
fn reloaded(rt: &tokio::runtime::Runtime, served: &Served) {
    let deadline = Instant::now() + Duration::from_secs(20);
    let body = rt.block_on(async {
        loop {
            let ready = served.get("/readyz").await;
            if ready["reload"]["ok"] == true || Instant::now() > deadline {
                break ready;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    });
    assert_eq!(body["reload"]["ok"], true, "{body}");
}

#[test]
fn a_route_an_edit_adds_is_served_after_the_reload() {
    let project = routed_project();
    let store = Store::sqlite();
    let served = serve(project.path(), &["--bind", "127.0.0.1:0"], &[]);
    // Watching starts before the start line; an edit now is seen.
    project.skill(
        "on-audit.skill.js",
        &format!(
            "export const frontmatter = {{ name: 'on-audit', metadata: {{ event: {{ route: 'audits' }} }} }};\n{}",
            handler("audit").lines().skip(1).collect::<Vec<_>>().join("\n")
        ),
    );
    // Reloaded once the files are quiet; emitting before the worker exists would queue nothing.
    reloaded(&runtime(), &served);
    // The worker is subscribed right after the new skills are installed: an event emitted
    // before that is not routed, so emit until one is handled.
    let rt = runtime();
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut n = 0;
    let seen = loop {
        n += 1;
        rt.block_on(invoke(
            &served,
            "event-emit",
            json!({ "topic": "audits", "data": { "n": n } }),
        ));
        std::thread::sleep(Duration::from_millis(200));
        let seen = handled(&project, &store);
        if !seen.is_empty() || Instant::now() > deadline {
            break seen;
        }
    };
    assert!(!seen.is_empty(), "the added route never handled an event");
    assert!(seen.iter().all(|s| s.0 == "audit"), "{seen:?}");
}

#[test]
fn a_route_an_edit_removes_is_no_longer_handled_after_the_reload() {
    let project = routed_project();
    let store = Store::sqlite();
    let served = serve(project.path(), &["--bind", "127.0.0.1:0"], &[]);
    let rt = runtime();
    let emit = |topic: &str, n: u64| {
        rt.block_on(invoke(
            &served,
            "event-emit",
            json!({ "topic": topic, "data": { "n": n } }),
        ));
    };
    emit("refunds", 1);
    assert_eq!(wait_handled(&project, &store, 1)[0].0, "refund");
    // `on-refund` no longer routes `refunds` to itself.
    project.skill("on-refund.skill.js", &handler("refund"));
    reloaded(&rt, &served);
    let deadline = Instant::now() + Duration::from_secs(20);
    // The route's handler goes right after the new skills are installed: emit refunds until
    // one is not handled, each followed by an order (still routed) to know the workers caught up.
    let mut n = 1;
    let mut unhandled = false;
    while !unhandled && Instant::now() < deadline {
        n += 2;
        let before = handled(&project, &store).len();
        emit("refunds", n);
        emit("orders", n + 1);
        let seen = wait_handled(&project, &store, before + 1);
        let order_seen = seen.iter().any(|s| s.0 == "order" && s.1 == n + 1);
        if order_seen {
            // Give the refund worker, were it still there, the time the order took.
            std::thread::sleep(Duration::from_millis(500));
            unhandled = !handled(&project, &store)
                .iter()
                .any(|s| s.0 == "refund" && s.1 == n);
        }
    }
    assert!(unhandled, "the removed route still handles refunds");
    // And stays gone: later refunds are not handled either.
    emit("refunds", 1000);
    emit("orders", 1001);
    let deadline = Instant::now() + Duration::from_secs(20);
    while !handled(&project, &store)
        .iter()
        .any(|s| s.0 == "order" && s.1 == 1001)
    {
        assert!(Instant::now() < deadline, "the order route stopped too");
        std::thread::sleep(Duration::from_millis(100));
    }
    std::thread::sleep(Duration::from_millis(500));
    assert!(
        !handled(&project, &store)
            .iter()
            .any(|s| s.0 == "refund" && s.1 == 1000),
        "a refund was handled after its route was removed"
    );
}

#[test]
fn a_route_to_a_missing_skill_keeps_serve_from_starting_and_names_the_file() {
    let project = Project::new();
    project.write(
        "main.skill.md",
        "---\nname: main\nmetadata:\n  role: main\n  event:\n    routes:\n      - { topic: orders, ref: on-ordr }\n---\nmain\n",
    );
    project.skill("on-order.skill.md", "---\nname: on-order\n---\nok\n");
    let out = skillgate(
        &project,
        &Store::sqlite(),
        &["serve", "--bind", "127.0.0.1:0"],
    );
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    let err = stderr(&out);
    assert!(err.contains("main.skill.md: metadata.event"), "{err}");
    assert!(
        err.contains("`on-ordr`, which is not a skill (did you mean `on-order`?)"),
        "{err}"
    );
}
