//! The Slack transport against the fake Slack: a signed mention gets one threaded reply in
//! mrkdwn; a bad or stale signature is 401 and nothing runs; `url_verification` is answered;
//! a retried event runs once; the bot's own messages and other bots' are ignored; a 429 waits
//! its `Retry-After`; Socket Mode acks after queueing and reconnects on `disconnect` with no
//! event lost or doubled; a refused token shows in `/readyz`.

use std::sync::atomic::Ordering::SeqCst;
use std::time::Duration;

use serde_json::{Value, json};
use skillgate::config::slack::RouteSettings;
use skillgate::gateway::slack::SlackSettings;
use skillgate::gateway::transport::State;

use crate::support::common::Project;
use crate::support::server::{TestServer, config};
use crate::support::slack_fake::{self, FakeSlack, mention, sign};
use crate::transport::slack::settings;

/// The Slack event ids the door queued so far, in order (what can ever be answered).
async fn queued_ids(server: &TestServer) -> Vec<String> {
    let queued = server
        .queued(skillgate::gateway::slack::intake::TOPIC)
        .await;
    queued
        .iter()
        .map(|data| data["eventId"].as_str().unwrap().to_string())
        .collect()
}

/// A project whose `brief` answers in markdown, and a server whose Slack default is `brief`.
async fn start(fake: &FakeSlack, tune: impl FnOnce(&mut SlackSettings)) -> TestServer {
    let project = Project::new();
    project.skill(
        "brief.skill.md",
        "---\nname: brief\ndescription: Answers in markdown.\nmetadata:\n  params:\n    type: object\n    properties:\n      text: { type: string }\n---\n**Asked**: :arg[text]\n",
    );
    let mut http = skillgate::server::DoorSettings::http(config());
    let mut slack = SlackSettings {
        routes: None,
        default: Some("brief".into()),
        ..settings(fake)
    };
    tune(&mut slack);
    http.slack = slack;
    TestServer::start_doors(project, http, |b| b).await
}

async fn post_event(server: &TestServer, payload: &Value, headers: Vec<(&str, String)>) -> u16 {
    let mut request = server
        .client
        .post(server.url("/slack/events"))
        .header("content-type", "application/json")
        .body(payload.to_string());
    for (name, value) in headers {
        request = request.header(name, value);
    }
    request.send().await.unwrap().status().as_u16()
}

fn signed(payload: &Value) -> Vec<(&'static str, String)> {
    sign(
        &payload.to_string(),
        slack_fake::now(),
        slack_fake::SIGNING_SECRET,
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_signed_mention_gets_one_threaded_reply_in_mrkdwn() {
    let fake = FakeSlack::start().await;
    let server = start(&fake, |_| {}).await;
    let event = mention("Ev1", "C1", "1700000001.000100", "what is due today?");
    assert_eq!(post_event(&server, &event, signed(&event)).await, 200);
    let posts = fake.answer_in("C1", "1700000001.000100").await;
    assert_eq!(posts.len(), 1, "{posts:?}");
    // The mention is gone from the text, and markdown bold is Slack's bold.
    assert_eq!(posts[0]["text"], "*Asked*: what is due today?\n");
    assert_eq!(posts[0]["metadata"]["event_payload"]["status"], "ok");
    assert_eq!(posts[0]["metadata"]["event_payload"]["requestId"], "Ev1");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bad_or_stale_signature_is_401_and_nothing_runs() {
    let fake = FakeSlack::start().await;
    let server = start(&fake, |_| {}).await;
    let event = mention("Ev2", "C1", "1700000002.000100", "hi");
    let body = event.to_string();
    let wrong = sign(&body, slack_fake::now(), "another-secret");
    let stale = sign(&body, slack_fake::now() - 301, slack_fake::SIGNING_SECRET);
    for headers in [wrong, stale, Vec::new()] {
        assert_eq!(post_event(&server, &event, headers).await, 401);
    }
    // A good one afterwards is the only one answered.
    let good = mention("Ev3", "C1", "1700000002.000200", "ok");
    assert_eq!(post_event(&server, &good, signed(&good)).await, 200);
    fake.answer_in("C1", "1700000002.000200").await;
    assert_eq!(
        queued_ids(&server).await,
        ["Ev3"],
        "only the signed event is queued"
    );
    assert_eq!(fake.calls("chat.postMessage").len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn url_verification_is_answered_with_its_challenge() {
    let fake = FakeSlack::start().await;
    let server = start(&fake, |_| {}).await;
    let payload = json!({ "token": "t", "challenge": "3eZbrw1aBm2rZgRNFdxV2595E9CY3gmdALWMmHkvFXO7tYXAYM8P", "type": "url_verification" });
    let response = server
        .client
        .post(server.url("/slack/events"))
        .header("content-type", "application/json")
        .headers(
            signed(&payload)
                .into_iter()
                .map(|(k, v)| (k.parse().unwrap(), v.parse().unwrap()))
                .collect(),
        )
        .body(payload.to_string())
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["challenge"], payload["challenge"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_same_event_retried_three_times_is_answered_once() {
    let fake = FakeSlack::start().await;
    let server = start(&fake, |_| {}).await;
    let event = mention("Ev4", "C1", "1700000004.000100", "once");
    for retry in 0..4 {
        let mut headers = signed(&event);
        if retry > 0 {
            headers.push(("x-slack-retry-num", retry.to_string()));
            headers.push(("x-slack-retry-reason", "http_timeout".into()));
        }
        assert_eq!(post_event(&server, &event, headers).await, 200);
    }
    fake.answer_in("C1", "1700000004.000100").await;
    assert_eq!(
        queued_ids(&server).await.len(),
        1,
        "the retries are not queued"
    );
    assert_eq!(fake.calls("chat.postMessage").len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_bots_own_messages_other_bots_and_edits_are_ignored() {
    let fake = FakeSlack::start().await;
    let server = start(&fake, |_| {}).await;
    fake.wait_calls("auth.test", 1).await;
    let own = slack_fake::dm("Ev5", slack_fake::BOT_USER, "1700000005.000100", "my own");
    let mut bot = slack_fake::dm("Ev6", "UOTHER", "1700000005.000200", "a bot");
    bot["event"]["bot_id"] = json!("B999");
    let mut edit = slack_fake::dm("Ev7", "UHUMAN", "1700000005.000300", "edited");
    edit["event"]["subtype"] = json!("message_changed");
    for event in [&own, &bot, &edit] {
        assert_eq!(post_event(&server, event, signed(event)).await, 200);
    }
    let person = slack_fake::dm("Ev8", "UHUMAN", "1700000005.000400", "a person");
    assert_eq!(post_event(&server, &person, signed(&person)).await, 200);
    fake.answer_in("D1", "1700000005.000400").await;
    assert_eq!(
        queued_ids(&server).await,
        ["Ev8"],
        "only the person's message is queued"
    );
    let posts = fake.calls("chat.postMessage");
    assert_eq!(posts.len(), 1, "only the person is answered: {posts:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_429_waits_its_retry_after_then_posts() {
    let fake = FakeSlack::start().await;
    fake.inner
        .rate_limit
        .store(1, std::sync::atomic::Ordering::SeqCst);
    let server = start(&fake, |_| {}).await;
    let event = mention("Ev9", "C1", "1700000009.000100", "slow down");
    assert_eq!(post_event(&server, &event, signed(&event)).await, 200);
    fake.answer_in("C1", "1700000009.000100").await;
    let limited = fake.calls("429");
    let posted = fake.calls("chat.postMessage");
    assert_eq!((limited.len(), posted.len()), (1, 1));
    // `Retry-After: 1`: the retry came no sooner.
    let waited = posted[0].at.duration_since(limited[0].at);
    assert!(
        waited >= Duration::from_millis(950),
        "retried after {waited:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn messages_to_one_channel_are_spaced_by_the_post_interval() {
    let fake = FakeSlack::start().await;
    let project = Project::new();
    project.skill(
        "chatty.skill.js",
        "export default async function (ctx) {\n  for (const n of [1, 2]) await ctx.manager.invoke('gateway-send', { message: 'part ' + n });\n  return 'done';\n}\n",
    );
    let mut http = skillgate::server::DoorSettings::http(config());
    http.slack = SlackSettings {
        routes: None,
        default: Some("chatty".into()),
        post_interval: Some(skillgate::config::values::Seconds(Duration::from_millis(
            400,
        ))),
        ..settings(&fake)
    };
    let server = TestServer::start_doors(project, http, |b| b).await;
    let event = mention("Ev10", "C2", "1700000010.000100", "go");
    assert_eq!(post_event(&server, &event, signed(&event)).await, 200);
    let posts = fake.answer_in("C2", "1700000010.000100").await;
    let texts: Vec<&str> = posts.iter().map(|p| p["text"].as_str().unwrap()).collect();
    assert_eq!(texts, ["part 1", "part 2", "done"]);
    let at: Vec<_> = fake
        .calls("chat.postMessage")
        .iter()
        .map(|c| c.at)
        .collect();
    for pair in at.windows(2) {
        let gap = pair[1].duration_since(pair[0]);
        // Spaced by about the interval (less only by how late the first request arrived).
        assert!(gap >= Duration::from_millis(300), "posted {gap:?} apart");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_route_with_a_pattern_passes_its_named_groups_as_args() {
    let fake = FakeSlack::start().await;
    let server = start(&fake, |s| {
        s.routes = Some(vec![RouteSettings {
            skill: Some("brief".into()),
            pattern: Some("^ask (?P<text>.+)$".into()),
            ..RouteSettings::default()
        }]);
        s.default = None;
    })
    .await;
    let event = mention("Ev11", "C1", "1700000011.000100", "ask about the weather");
    assert_eq!(post_event(&server, &event, signed(&event)).await, 200);
    let posts = fake.answer_in("C1", "1700000011.000100").await;
    assert_eq!(posts[0]["text"], "*Asked*: about the weather\n");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_bot_token_shows_in_readyz() {
    let fake = FakeSlack::start().await;
    let server = start(&fake, |s| s.bot_token = Some("xoxb-revoked".into())).await;
    server.door_reaches("slack", State::Unauthorized).await;
    let ready = server.get("/readyz").await;
    assert_eq!(ready.status(), 503);
    let ready: Value = ready.json().await.unwrap();
    assert_eq!(ready["transports"]["slack"], "unauthorized", "{ready}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn socket_mode_acks_after_queueing_and_reconnects_losing_and_doubling_nothing() {
    let fake = FakeSlack::start().await;
    let server = start(&fake, |s| {
        s.signing_secret = None;
        s.app_token = Some(slack_fake::APP_TOKEN.into());
    })
    .await;
    let connected = |n: u32| {
        let fake = fake.clone();
        async move {
            let what = format!("connection {n}");
            fake.until(&what, |inner| inner.connections.load(SeqCst) >= n)
                .await;
        }
    };
    // The ack goes out once the event is queued; the answer may be posted before the fake
    // has read the ack from its socket.
    let acked = |envelope: &'static str| {
        let fake = fake.clone();
        async move {
            let what = format!("the ack of {envelope}");
            fake.until(&what, |inner| {
                inner.acks.lock().iter().any(|a| a == envelope)
            })
            .await;
        }
    };
    connected(1).await;
    fake.push_envelope("env-1", mention("Ev20", "C3", "1700000020.000100", "first"));
    fake.answer_in("C3", "1700000020.000100").await;
    acked("env-1").await;
    // Slack asks for a new connection; an event pushed meanwhile arrives on the new one.
    fake.disconnect();
    fake.push_envelope(
        "env-2",
        mention("Ev21", "C3", "1700000021.000100", "second"),
    );
    connected(2).await;
    fake.answer_in("C3", "1700000021.000100").await;
    // The same event again (Slack's retry of an envelope it thinks was lost): not doubled.
    fake.push_envelope(
        "env-3",
        mention("Ev21", "C3", "1700000021.000100", "second"),
    );
    acked("env-3").await;
    assert_eq!(
        queued_ids(&server).await.len(),
        2,
        "the repeated event is not queued"
    );
    assert_eq!(fake.calls("chat.postMessage").len(), 2);
    drop(server);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_streamed_answer_is_one_message_updated_at_a_bounded_rate() {
    use crate::support::common::native;
    let fake = FakeSlack::start().await;
    let pieces: Vec<String> = (0..12).map(|n| format!("w{n} ")).collect();
    let whole: String = pieces.concat();
    let writer = native(
        "name: writer\ndescription: Writes its answer piece by piece.\n",
        move |ctx: skillgate::Context, _| {
            let pieces = pieces.clone();
            async move {
                for piece in &pieces {
                    ctx.invoke(
                        "gateway-send",
                        json!({ "message": piece, "partial": true }),
                        Default::default(),
                    )
                    .await?;
                    tokio::time::sleep(Duration::from_millis(40)).await;
                }
                Ok(Some(json!(pieces.concat())))
            }
        },
    );
    let mut http = skillgate::server::DoorSettings::http(config());
    http.slack = SlackSettings {
        routes: None,
        default: Some("writer".into()),
        update_interval: Some(skillgate::config::values::Seconds(Duration::from_millis(
            150,
        ))),
        ..settings(&fake)
    };
    let server = TestServer::start_doors(Project::new(), http, |b| b.native(writer)).await;
    let event = mention("Ev30", "C4", "1700000030.000900", "write");
    assert_eq!(post_event(&server, &event, signed(&event)).await, 200);
    let last_is_the_result = |inner: &slack_fake::Inner| {
        let calls = inner.calls.lock();
        let mut updates = calls.iter().filter(|c| c.method == "chat.update");
        updates
            .next_back()
            .is_some_and(|u| u.body["metadata"]["event_type"] == "skillgate_result")
    };
    fake.until("the result's update", last_is_the_result).await;
    let updates = fake.calls("chat.update");
    // One message: the placeholder, then updates of it, the last with the whole answer.
    let posts = fake.calls("chat.postMessage");
    assert_eq!(posts.len(), 1, "{posts:?}");
    assert_eq!(posts[0].body["text"], "w0 …");
    let ts = posts[0].body["thread_ts"].clone();
    assert_eq!(ts, "1700000030.000900");
    let last = updates.last().unwrap();
    assert_eq!(last.body["text"], whole.trim_end());
    assert_eq!(last.body["metadata"]["event_payload"]["result"], whole);
    // Bounded: fewer updates than pieces, and never two within the interval (but the last).
    assert!(updates.len() < 12, "{} updates", updates.len());
    let during = &updates[..updates.len() - 1];
    for pair in during.windows(2) {
        let gap = pair[1].at.duration_since(pair[0].at);
        assert!(gap >= Duration::from_millis(100), "updated {gap:?} apart");
    }
}

fn check(project: &Project, env: &[(&str, String)]) -> std::process::Output {
    let mut command = crate::support::common::skillgate_command(project.path());
    command.args(["slack", "check"]);
    for (k, v) in env {
        command.env(k, v);
    }
    command.output().expect("skillgate runs")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slack_check_signs_in_and_prints_the_bot_and_its_routes() {
    let fake = FakeSlack::start().await;
    let project = Project::new();
    project
        .write(
            "skillgate.yaml",
            "slack:\n  routes:\n    - { ref: brief, channel: C1 }\n  default: brief\n",
        )
        .skill(
            "brief.skill.md",
            "---\nname: brief\ndescription: Briefs.\n---\nok\n",
        );
    let env = [
        ("SLACK_BOT_TOKEN", slack_fake::BOT_TOKEN.to_string()),
        ("SLACK_SIGNING_SECRET", "s".to_string()),
        ("SLACK_API_URL", fake.api_url()),
    ];
    // Blocking is fine: the fake Slack answers on the runtime's other thread.
    let out = check(&project, &env);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        stdout.contains("bot: @skillbot (UBOT, bot BBOT) in Test Team (T1)"),
        "{stdout}"
    );
    assert!(stdout.contains("route 0: in C1 -> brief"), "{stdout}");
    assert!(stdout.contains("default: -> brief"), "{stdout}");
    // A token written in the file is refused, naming the key.
    project.write(
        "skillgate.yaml",
        "slack:\n  bot-token: xoxb-written-out\n  default: brief\n",
    );
    let out = check(&project, &env);
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("slack.bot-token"), "{stderr}");
    assert!(
        !stderr.contains("xoxb-written-out"),
        "the secret is not echoed: {stderr}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_events_path_a_web_route_already_serves_is_refused_at_start() {
    let fake = FakeSlack::start().await;
    let project = Project::new();
    project.write(
        "main.skill.md",
        "---\nname: site\ndescription: The project.\nmetadata:\n  role: main\n  web:\n    routes:\n      - { method: POST, path: /slack/events, ref: site }\n---\nsite\n",
    );
    let mut http = skillgate::server::DoorSettings::http(config());
    http.slack = settings(&fake);
    let gateway = skillgate::gateway::Gateway::new(
        project.kernel(),
        std::sync::Arc::new(skillgate::gateway::metrics::Metrics::new()),
    );
    let err = skillgate::server::Doors::bind(gateway, http, project.path())
        .await
        .err()
        .expect("refused")
        .to_string();
    assert_eq!(
        err,
        "http: slack.events-path: `/slack/events` is already served"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_event_queued_by_the_release_before_versioned_payloads_is_still_answered() {
    let fake = FakeSlack::start().await;
    let server = start(&fake, |_| {}).await;
    // The shape the intake queued before payloads carried a version: no `v`.
    let mut event = skillgate::events::Event::new("gateway-slack", "event");
    event.source = Some("slack".into());
    event.data = Some(json!({
        "eventId": "EvOld",
        "teamId": "T1",
        "skill": "brief",
        "args": { "text": "queued before the upgrade" },
        "named": false,
        "refused": false,
        "message": {
            "channel": "C9", "channelType": "channel", "user": "U1",
            "text": "queued before the upgrade", "ts": "1700000009.000100",
            "threadTs": null, "files": [],
        },
        "receivedAt": 1_700_000_000_000u64,
    }));
    use skillgate::events::KernelBus;
    server.kernel.bus().emit(&event).await.unwrap();
    let posts = fake.answer_in("C9", "1700000009.000100").await;
    assert_eq!(posts.len(), 1, "{posts:?}");
    assert_eq!(posts[0]["text"], "*Asked*: queued before the upgrade\n");
    assert_eq!(posts[0]["metadata"]["event_payload"]["requestId"], "EvOld");
}
