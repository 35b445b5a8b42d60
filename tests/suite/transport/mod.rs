//! The transport contract: what every transport (HTTP, WebSocket, Slack, email, and the example
//! door of `examples/jsonl_door` added from outside) must do, written once against the
//! [`Harness`] trait and run against each transport by the `contract!` macro, like the event
//! store suite in `events.rs`.
//!
//! A harness starts a real server for its transport over a test project and talks to it with a
//! real client of that transport. The rules only see what a client sees: results, streamed
//! parts, refusals, and (through the kernel) the events a run leaves behind.

pub mod email;
mod http;
mod jsonl;
pub mod slack;
mod websocket;

use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};
use skillgate::events::KernelBus;
use skillgate::{Context, Kernel, SkillError};
use tokio::sync::Notify;

use crate::common::{Project, native};

/// How a transport answered an invocation.
#[derive(Debug, Clone, PartialEq)]
pub enum Outcome {
    /// The skill's result.
    Ok(Value),
    /// Refused or failed, in the transport's own error form: the kind and the whole text the
    /// client received (to check nothing internal leaked).
    Refused(Refusal, String),
}

/// Why a transport refused or failed an invocation, as its client can tell.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// No credential, or a wrong one.
    Credential,
    /// No such skill, or one the caller may not reach (hidden, middleware).
    NotFound,
    /// The args were refused (schema, directive keys).
    InvalidArgs,
    /// A policy refused the call (the control plane without `admin`, a topic out of grants).
    Denied,
    /// The skill failed.
    Failed,
}

/// One part of a streamed answer.
#[derive(Debug, Clone, PartialEq)]
pub enum Part {
    /// A message the run sent (`gateway-send`) or a chunk it streamed.
    Message(Value),
    /// The final part: the outcome.
    Final(Outcome),
}

/// A test server for a harness: `project` with the natives the rules use, on `http`.
pub async fn start_server(
    project: Project,
    doors: skillgate::server::DoorSettings,
    setup: &Setup,
) -> crate::server::TestServer {
    let tools = natives(&setup.held);
    crate::server::TestServer::start_doors(project, doors, move |mut b| {
        for tool in tools {
            b = b.native(tool);
        }
        b
    })
    .await
}

/// What a harness starts: credentials required or not, and the signals of the `held` skill.
#[derive(Debug, Clone, Default)]
pub struct Setup {
    pub credentials: bool,
    pub held: Held,
}

/// `held` notifies `started` when it runs, then answers once `release` is notified.
#[derive(Debug, Clone, Default)]
pub struct Held {
    pub started: Arc<Notify>,
    pub release: Arc<Notify>,
}

/// Which credential a request carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Credential {
    Valid,
    Missing,
    Wrong,
}

/// A transport under test: a real server and a real client.
pub trait Harness: Sized {
    /// The transport's name in `nonlocals.gateway.transport`.
    const NAME: &'static str;
    /// True when spec 03 lists the transport among those that emit `gateway-message`.
    const ANNOUNCES: bool;

    async fn start(project: Project, setup: Setup) -> Self;
    fn kernel(&self) -> &Kernel;
    async fn invoke(&self, skill: &str, args: Value, credential: Credential) -> Outcome;
    /// Invokes with streaming and collects every part until the final one.
    async fn stream(&self, skill: &str, args: Value) -> Vec<Part>;
    /// Starts an invocation that finishes later; `finish` waits for its outcome.
    fn start_invoke(&self, skill: &str, args: Value) -> tokio::task::JoinHandle<Outcome>;
    /// Tells the transport to stop: no new work is taken, in-flight work may finish.
    fn begin_shutdown(&mut self);
    /// Waits for the stop; true when everything in flight drained within the grace period.
    async fn finish(self) -> bool;

    async fn shutdown(mut self) -> bool {
        self.begin_shutdown();
        self.finish().await
    }
}

/// Long enough for anything that should happen; only reached when something is broken.
const GUARD: Duration = Duration::from_secs(20);

/// The skills every rule uses. Native tools report what they saw.
pub fn project() -> Project {
    let project = Project::new();
    project
        .skill(
            "hello.skill.md",
            "---\nname: hello\ndescription: Greets.\nmetadata:\n  params:\n    type: object\n    properties:\n      name: { type: string }\n    required: [name]\n---\nHello, :arg[name]!\n",
        )
        .skill(
            "vault.skill.md",
            "---\nname: vault\ndescription: Hidden.\nmetadata:\n  visibility: hidden\n---\nVAULT\n",
        )
        .skill(
            "wrap.skill.md",
            "---\nname: wrap\ndescription: A middleware.\nmetadata:\n  role: middleware\n---\nWRAP\n",
        )
        .skill(
            "tick.skill.md",
            "---\nname: tick\ndescription: Something to schedule.\n---\ntick\n",
        );
    project
}

/// Natives the rules need: `where` (what the gateway filled in), `broken` (fails with an
/// internal detail), `talk` (sends messages, then answers), `held` (waits for a release).
pub fn natives(held: &Held) -> Vec<skillgate::skills::Tool> {
    let Held { started, release } = held.clone();
    vec![
        native(
            "name: where\ndescription: Reports the gateway's view.\n",
            |ctx: Context, _| async move {
                Ok(Some(json!({
                    "transport": ctx.get("nonlocals.gateway.transport")?,
                    "requestId": ctx.get("nonlocals.request.id")?,
                    "gatewayRequestId": ctx.get("nonlocals.gateway.requestId")?,
                    "root": ctx.root_id(),
                })))
            },
        ),
        native(
            "name: broken\ndescription: Fails.\n",
            |_ctx: Context, _| async move {
                Err(SkillError::failed(
                    "connection to db-internal-7.corp:5432 refused (password=hunter2)",
                ))
            },
        ),
        native(
            "name: talk\ndescription: Sends two messages, then answers.\n",
            |ctx: Context, _| async move {
                for n in 1..=2 {
                    ctx.invoke(
                        "gateway-send",
                        json!({ "message": format!("part {n}") }),
                        Default::default(),
                    )
                    .await?;
                }
                Ok(Some(json!("done")))
            },
        ),
        // Project code that passes the caller's data on to the control plane, as a public skill
        // "remind me" might: what it stores is the caller's, checked against the caller.
        native(
            "name: relay\ndescription: Schedules what the caller asks.\n",
            |ctx: Context, args| async move {
                let mut asked = json!({ "name": "relayed", "ref": args["ref"], "every": "1h" });
                if let Some(stored) = args.get("args") {
                    asked["args"] = stored.clone();
                }
                let out = ctx
                    .invoke("schedule-create", asked, Default::default())
                    .await?;
                Ok(out.map(|v| (*v).clone()))
            },
        ),
        native(
            "name: held\ndescription: Answers once released.\n",
            move |_ctx: Context, _| {
                let (started, release) = (started.clone(), release.clone());
                async move {
                    started.notify_one();
                    release.notified().await;
                    Ok(Some(json!("released")))
                }
            },
        ),
    ]
}

pub async fn invoke_returns_the_result<H: Harness>() {
    let h = H::start(project(), Setup::default()).await;
    let out = h
        .invoke("hello", json!({ "name": "Ada" }), Credential::Valid)
        .await;
    assert_eq!(out, Outcome::Ok(json!("Hello, Ada!\n")));
    h.shutdown().await;
}

pub async fn streaming_delivers_parts_in_order_then_one_final_part<H: Harness>() {
    let h = H::start(project(), Setup::default()).await;
    let parts = h.stream("talk", json!({})).await;
    assert_eq!(
        parts,
        vec![
            Part::Message(json!("part 1")),
            Part::Message(json!("part 2")),
            Part::Final(Outcome::Ok(json!("done"))),
        ]
    );
    h.shutdown().await;
}

pub async fn a_skill_error_is_the_transports_error_form_with_no_internals<H: Harness>() {
    let h = H::start(project(), Setup::default()).await;
    let out = h.invoke("broken", json!({}), Credential::Valid).await;
    let Outcome::Refused(Refusal::Failed, text) = out else {
        panic!("a failure: {out:?}");
    };
    for secret in ["db-internal-7", "hunter2", "5432"] {
        assert!(!text.contains(secret), "`{secret}` leaked: {text}");
    }
    h.shutdown().await;
}

pub async fn invalid_args_are_refused_as_the_callers_mistake<H: Harness>() {
    let h = H::start(project(), Setup::default()).await;
    let out = h.invoke("hello", json!({}), Credential::Valid).await;
    assert!(
        matches!(out, Outcome::Refused(Refusal::InvalidArgs, _)),
        "{out:?}"
    );
    let out = h
        .invoke(
            "hello",
            json!({ "name": "x", "$context": { "run": { "middleware": {} } } }),
            Credential::Valid,
        )
        .await;
    let Outcome::Refused(Refusal::InvalidArgs, text) = out else {
        panic!("`$context` refused: {out:?}");
    };
    assert!(text.contains("$context"), "{text}");
    h.shutdown().await;
}

pub async fn a_missing_or_wrong_credential_is_refused<H: Harness>() {
    let h = H::start(
        project(),
        Setup {
            credentials: true,
            ..Setup::default()
        },
    )
    .await;
    for credential in [Credential::Missing, Credential::Wrong] {
        let out = h.invoke("hello", json!({ "name": "x" }), credential).await;
        assert!(
            matches!(out, Outcome::Refused(Refusal::Credential, _)),
            "{credential:?}: {out:?}"
        );
    }
    let out = h
        .invoke("hello", json!({ "name": "x" }), Credential::Valid)
        .await;
    assert_eq!(out, Outcome::Ok(json!("Hello, x!\n")));
    h.shutdown().await;
}

pub async fn hidden_and_middleware_skills_are_refused<H: Harness>() {
    let h = H::start(project(), Setup::default()).await;
    for skill in ["vault", "wrap", "execute"] {
        let out = h.invoke(skill, json!({}), Credential::Valid).await;
        let Outcome::Refused(Refusal::NotFound, text) = out else {
            panic!("{skill} refused: {out:?}");
        };
        assert!(!text.contains("VAULT") && !text.contains("WRAP"), "{text}");
    }
    h.shutdown().await;
}

pub async fn nonlocals_request_and_gateway_are_filled<H: Harness>() {
    let h = H::start(project(), Setup::default()).await;
    let Outcome::Ok(seen) = h.invoke("where", json!({}), Credential::Valid).await else {
        panic!("where answers");
    };
    assert_eq!(seen["transport"], H::NAME);
    let id = seen["requestId"].as_str().expect("nonlocals.request.id");
    assert!(!id.is_empty());
    assert_eq!(seen["gatewayRequestId"], seen["requestId"]);
    h.shutdown().await;
}

pub async fn gateway_message_is_emitted_where_spec_03_says<H: Harness>() {
    let h = H::start(project(), Setup::default()).await;
    let bus = h.kernel().bus().clone();
    bus.subscribe_queue("gateway-message", "watch", false)
        .await
        .unwrap();
    let Outcome::Ok(seen) = h.invoke("where", json!({}), Credential::Valid).await else {
        panic!("where answers");
    };
    let wait = if H::ANNOUNCES {
        GUARD
    } else {
        Duration::from_millis(200)
    };
    let got = bus
        .wait("gateway-message", "watch", wait, 10, true)
        .await
        .unwrap();
    if H::ANNOUNCES {
        assert_eq!(got.len(), 1, "one gateway-message");
        assert_eq!(got[0].event.source.as_deref(), Some(H::NAME));
        assert_eq!(
            got[0].event.root_context_id.as_deref(),
            seen["root"].as_str()
        );
    } else {
        assert!(got.is_empty(), "{} does not announce: {got:?}", H::NAME);
    }
    h.shutdown().await;
}

pub async fn shutdown_drains_in_flight_work<H: Harness>() {
    let setup = Setup::default();
    let held = setup.held.clone();
    let mut h = H::start(project(), setup).await;
    let pending = h.start_invoke("held", json!({}));
    // Once the run is in flight, stop the transport, then let the run finish.
    tokio::time::timeout(GUARD, held.started.notified())
        .await
        .expect("the run started");
    h.begin_shutdown();
    held.release.notify_one();
    let (outcome, drained) = tokio::join!(
        tokio::time::timeout(GUARD, pending),
        tokio::time::timeout(GUARD, h.finish())
    );
    let outcome = outcome.expect("the in-flight run answered").unwrap();
    assert_eq!(outcome, Outcome::Ok(json!("released")));
    assert!(drained.expect("the shutdown ended"), "the shutdown drained");
}

// The trust rules every door passes live with the other security tests.
pub use crate::security::doors::{
    callers_do_not_administer_the_event_system,
    directive_keys_anywhere_in_args_are_refused_and_nothing_is_spawned,
    hidden_internal_and_missing_refs_look_alike,
};

/// Every rule of the contract, as tests against `$harness`.
macro_rules! contract {
    ($harness:ty) => {
        $crate::transport::contract!($harness:
            invoke_returns_the_result,
            streaming_delivers_parts_in_order_then_one_final_part,
            a_skill_error_is_the_transports_error_form_with_no_internals,
            invalid_args_are_refused_as_the_callers_mistake,
            a_missing_or_wrong_credential_is_refused,
            hidden_and_middleware_skills_are_refused,
            nonlocals_request_and_gateway_are_filled,
            gateway_message_is_emitted_where_spec_03_says,
            shutdown_drains_in_flight_work,
            directive_keys_anywhere_in_args_are_refused_and_nothing_is_spawned,
            hidden_internal_and_missing_refs_look_alike,
            callers_do_not_administer_the_event_system,
        );
    };
    ($harness:ty: $($rule:ident),* $(,)?) => {
        $(#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn $rule() {
            super::$rule::<$harness>().await;
        })*
    };
}
pub(crate) use contract;
