//! HTTP switched off: email and Slack in Socket Mode still take work and answer, and the probes
//! (`/healthz`, `/readyz`, `/metrics`) are on the operations listener, which serves nothing
//! else (its `/metrics` asks for a key off loopback); Slack with only its Events API cannot run
//! without HTTP and is refused at start.

use std::time::Duration;

use skillgate::config::env::Vars;
use skillgate::gateway::Gateway;
use skillgate::gateway::slack::SlackSettings;
use skillgate::server::{DoorSettings, Doors};

use crate::support::common::Project;
use crate::support::server::{TestServer, config};
use crate::support::slack_fake::{self, FakeSlack, mention};
use crate::support::smtp_sink::Sink;
use crate::transport::email::send;

fn project() -> Project {
    let project = Project::new();
    project.skill(
        "brief.skill.md",
        "---\nname: brief\ndescription: Answers.\nmetadata:\n  params:\n    type: object\n    properties:\n      subject: { type: string }\n      text: { type: string }\n---\nok\n",
    );
    project
}

/// No HTTP; email (SMTP) and Slack (Socket Mode) to `brief`; the operations listener on a port
/// of its own.
fn without_http(sink: &Sink, fake: &FakeSlack) -> DoorSettings {
    let mut email = crate::transport::email::settings(sink);
    email.routes = None;
    email.default = Some("brief".into());
    DoorSettings {
        serve_http: false,
        slack: SlackSettings {
            routes: None,
            default: Some("brief".into()),
            signing_secret: None,
            app_token: Some(slack_fake::APP_TOKEN.into()),
            ..crate::transport::slack::settings(fake)
        },
        email,
        ops: Some("127.0.0.1:0".parse().unwrap()),
        ..DoorSettings::http(config())
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_http_email_and_slack_socket_mode_answer_and_probes_are_on_the_operations_listener()
{
    let (sink, fake) = (Sink::start().await, FakeSlack::start().await);
    let mut server = TestServer::start_doors(project(), without_http(&sink, &fake), |b| b).await;
    // Mail in, answer out.
    let smtp = server.email_addr().expect("the SMTP listener");
    let id = send(smtp, "ada@example.org", "Numbers", "Could you send them?").await;
    let answer = sink.answer_to(&id, Duration::from_secs(20)).await;
    assert_eq!(answer.expect("an answer").to, ["ada@example.org"]);
    // A Slack mention over Socket Mode, answered in its thread.
    fake.push_envelope("env-1", mention("Ev1", "C1", "1700000001.000100", "hi"));
    fake.answer_in("C1", "1700000001.000100").await;
    // The ack goes out once the event is queued; the worker may answer before it arrives.
    fake.until("the envelope's ack", |inner| {
        inner.acks.lock().contains(&"env-1".to_string())
    })
    .await;
    // The probes, on the operations listener: every door listed and ready.
    let every_door = server.gateway.readiness.until(|r| r.ready());
    tokio::time::timeout(Duration::from_secs(30), every_door)
        .await
        .expect("every door ready");
    let ready: serde_json::Value = server.get("/readyz").await.json().await.unwrap();
    assert_eq!(ready["status"], "ready", "{ready}");
    let doors = ready["transports"].as_object().unwrap();
    assert!(
        doors.contains_key("email") && doors.contains_key("slack-socket"),
        "{ready}"
    );
    assert!(!doors.contains_key("http"), "no HTTP door runs: {ready}");
    assert_eq!(server.get("/healthz").await.status(), 200);
    let metrics = server.get("/metrics").await;
    assert_eq!(metrics.status(), 200, "the operator's listener asks no key");
    assert!(metrics.text().await.unwrap().contains("brief"));
    // It serves nothing else: no skill is reachable through it.
    let invoke = server
        .post_json("/invoke/brief", &serde_json::json!({}))
        .await;
    assert_eq!(invoke.status(), 404);
    let report = server.finish().await;
    assert!(report.drained, "{report:?}");
    let names: Vec<&str> = report.doors.iter().map(|r| r.transport).collect();
    assert_eq!(names, ["slack", "email"]);
}

#[tokio::test]
async fn without_http_slack_with_only_its_events_api_is_refused_at_start() {
    let (sink, fake) = (Sink::start().await, FakeSlack::start().await);
    let project = project();
    let mut settings = without_http(&sink, &fake);
    settings.slack.app_token = None;
    settings.slack.signing_secret = Some(slack_fake::SIGNING_SECRET.into());
    let gateway = Gateway::new(
        project.kernel(),
        std::sync::Arc::new(skillgate::gateway::metrics::Metrics::new()),
    );
    let err = Doors::bind(gateway, settings, project.path())
        .await
        .err()
        .expect("refused");
    assert!(err.config, "a mistake in the settings: {err}");
    assert_eq!(err.transport, "slack");
    assert!(err.message.contains("Socket Mode"), "{err}");
}

/// Off loopback the operations listener's `/metrics` (which names every skill) asks for a key
/// with every skill or `admin`, as HTTP's does; the probes stay open.
#[tokio::test]
async fn off_loopback_the_operations_metrics_ask_for_a_key_with_every_skill() {
    let settings = DoorSettings {
        ops: Some("0.0.0.0:0".parse().unwrap()),
        ..DoorSettings::http(crate::support::server::with_keys())
    };
    let project = crate::support::server::hello_and_admin();
    let gateway = Gateway::new(
        project.kernel(),
        std::sync::Arc::new(skillgate::gateway::metrics::Metrics::new()),
    );
    let doors = Doors::bind(gateway, settings, project.path())
        .await
        .unwrap();
    let port = doors.ops_addr().expect("the operations listener").port();
    tokio::spawn(doors.run_until(std::future::pending(), Duration::from_secs(1)));
    let client = crate::support::common::http_client();
    let url = |path: &str| format!("http://127.0.0.1:{port}{path}");
    let metrics = |key: Option<&'static str>| {
        let mut request = client.get(url("/metrics"));
        if let Some(key) = key {
            request = request.bearer_auth(key);
        }
        async move { request.send().await.unwrap().status().as_u16() }
    };
    assert_eq!(metrics(None).await, 401);
    assert_eq!(
        metrics(Some("sg_narrow_key")).await,
        401,
        "a key limited to some skills"
    );
    assert_eq!(metrics(Some("sg_ci_key")).await, 200);
    let health = client.get(url("/healthz")).send().await.unwrap();
    assert_eq!(health.status(), 200, "the probes ask no key");
}

/// Slack's and email's variables are read from the settings' `vars` (an embedder's or a test's
/// set), not from the process: Slack resolves with the tokens given there, and without them it
/// is refused naming the setting the token would go in.
#[test]
fn door_variables_come_from_the_settings_not_the_process() {
    let project = project();
    let index = project.kernel().registry().current();
    let given = DoorSettings {
        slack: SlackSettings {
            default: Some("brief".into()),
            ..SlackSettings::default()
        },
        vars: Vars::of(&[
            ("SLACK_BOT_TOKEN", "xoxb-given"),
            ("SLACK_APP_TOKEN", "xapp-given"),
        ]),
        ..DoorSettings::http(config())
    };
    assert!(given.resolve(&index, project.path()).is_ok());
    let none = DoorSettings {
        vars: Vars::of(&[]),
        ..given.clone()
    };
    let errors = none
        .resolve(&index, project.path())
        .err()
        .expect("no bot token");
    assert!(errors.to_string().contains("slack.bot-token"), "{errors}");
}
