//! The contract over Slack: a direct message `<skill> <args as JSON>` to a bot whose route
//! names the skill in the message (`command: true`), sent as a signed Events API request to
//! `/slack/events`; the answer read off the fake Slack's `chat.postMessage` calls in the
//! message's thread: each `gateway-send` message a reply, the last one carrying skillgate's
//! result metadata (status, result).

use std::sync::atomic::{AtomicU64, Ordering};

use serde_json::{Value, json};
use skillgate::Kernel;
use skillgate::config::slack::RouteSettings;
use skillgate::config::values::Seconds;
use skillgate::gateway::slack::SlackSettings;

use super::{Credential, Harness, Outcome, Part, Refusal, Setup};
use crate::support::common::Project;
use crate::support::server::{TestServer, config};
use crate::support::slack_fake::{self, FakeSlack};

static NEXT: AtomicU64 = AtomicU64::new(1);

pub struct Slack {
    server: TestServer,
    fake: FakeSlack,
}

/// Settings for a bot on `fake` whose one route runs the skill the message names.
pub fn settings(fake: &FakeSlack) -> SlackSettings {
    SlackSettings {
        bot_token: Some(slack_fake::BOT_TOKEN.into()),
        signing_secret: Some(slack_fake::SIGNING_SECRET.into()),
        api_url: Some(fake.api_url()),
        routes: Some(vec![RouteSettings {
            command: Some(true),
            skills: Some(vec!["*".into()]),
            ..RouteSettings::default()
        }]),
        post_interval: Some(Seconds(std::time::Duration::from_millis(1))),
        ..SlackSettings::default()
    }
}

/// Posts a DM saying `skill args` and returns its thread `ts` (or the refusal of the request).
async fn send(
    server_url: &str,
    skill: &str,
    args: &Value,
    credential: Credential,
) -> Result<String, Outcome> {
    let n = NEXT.fetch_add(1, Ordering::SeqCst);
    let ts = format!("1700000100.{n:06}");
    let payload = slack_fake::dm(
        &format!("Ev{n:08}"),
        "UHUMAN",
        &ts,
        &format!("{skill} {args}"),
    );
    let body = payload.to_string();
    let mut request = crate::support::common::http_client()
        .post(format!("{server_url}/slack/events"))
        .header("content-type", "application/json")
        .body(body.clone());
    let secret = match credential {
        Credential::Valid => Some(slack_fake::SIGNING_SECRET),
        Credential::Wrong => Some("not-the-secret"),
        Credential::Missing => None,
    };
    if let Some(secret) = secret {
        for (name, value) in slack_fake::sign(&body, slack_fake::now(), secret) {
            request = request.header(name, value);
        }
    }
    let response = request.send().await.unwrap();
    match response.status().as_u16() {
        200 => Ok(ts),
        401 => Err(Outcome::Refused(
            Refusal::Credential,
            response.text().await.unwrap_or_default(),
        )),
        other => panic!(
            "Slack got HTTP {other}: {}",
            response.text().await.unwrap_or_default()
        ),
    }
}

/// The outcome the last reply's metadata says.
fn outcome(last: &Value) -> Outcome {
    let payload = &last["metadata"]["event_payload"];
    let text = last["text"].as_str().unwrap_or_default().to_string();
    match payload["status"].as_str() {
        Some("ok") => Outcome::Ok(payload["result"].clone()),
        Some("not-found") => Outcome::Refused(Refusal::NotFound, text),
        Some("invalid-args") => Outcome::Refused(Refusal::InvalidArgs, text),
        Some("denied") => Outcome::Refused(Refusal::Denied, text),
        _ => Outcome::Refused(Refusal::Failed, text),
    }
}

async fn answered(fake: &FakeSlack, ts: &str) -> Vec<Value> {
    fake.answer_in("D1", ts).await
}

impl Harness for Slack {
    const NAME: &'static str = "slack";
    /// Spec 03 lists slack among the transports that emit `gateway-message`.
    const ANNOUNCES: bool = true;

    async fn start(project: Project, setup: Setup) -> Self {
        let fake = FakeSlack::start().await;
        let mut http = skillgate::server::DoorSettings::http(config());
        http.slack = settings(&fake);
        let server = super::start_server(project, http, &setup).await;
        // Signed in before the first event.
        fake.wait_calls("auth.test", 1).await;
        Slack { server, fake }
    }

    fn kernel(&self) -> &Kernel {
        &self.server.kernel
    }

    async fn invoke(&self, skill: &str, args: Value, credential: Credential) -> Outcome {
        match send(&self.server.url(""), skill, &args, credential).await {
            Ok(ts) => outcome(answered(&self.fake, &ts).await.last().unwrap()),
            Err(refused) => refused,
        }
    }

    async fn stream(&self, skill: &str, args: Value) -> Vec<Part> {
        let ts = send(&self.server.url(""), skill, &args, Credential::Valid)
            .await
            .expect("accepted");
        let posts = answered(&self.fake, &ts).await;
        let (last, messages) = posts.split_last().unwrap();
        let mut parts: Vec<Part> = messages
            .iter()
            .map(|p| Part::Message(json!(p["text"])))
            .collect();
        parts.push(Part::Final(outcome(last)));
        parts
    }

    fn start_invoke(&self, skill: &str, args: Value) -> tokio::task::JoinHandle<Outcome> {
        let url = self.server.url("");
        let fake = self.fake.clone();
        let skill = skill.to_string();
        tokio::spawn(async move {
            let ts = send(&url, &skill, &args, Credential::Valid)
                .await
                .expect("accepted");
            outcome(answered(&fake, &ts).await.last().unwrap())
        })
    }

    fn begin_shutdown(&mut self) {
        self.server.begin_shutdown("test");
    }

    async fn finish(mut self) -> bool {
        self.server.finish().await.drained
    }
}

skillgate::transport_contract!(Slack);
