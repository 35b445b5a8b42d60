//! The contract over email: a mail to the bot whose subject names the skill and whose body is
//! its args (a `command: true` route), sent with lettre over SMTP to the listener; the answer
//! read off the relay (an SMTP sink): one threaded mail whose `X-Skillgate-Status` says how it
//! went, and whose text is the `gateway-send` messages, then the result, a blank line apart. A
//! sender not in `allowed-senders` is the missing or wrong credential: nothing comes back.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use lettre::{AsyncSmtpTransport, AsyncTransport, Message, Tokio1Executor};
use serde_json::Value;
use skillgate::Kernel;
use skillgate::config::email::{RouteSettings, SmtpSettings};
use skillgate::config::values::Seconds;
use skillgate::gateway::email::EmailSettings;

use super::{Credential, Harness, Outcome, Part, Refusal, Setup};
use crate::support::common::Project;
use crate::support::server::{TestServer, config};
use crate::support::smtp_sink::{Received, Sink};

static NEXT: AtomicU64 = AtomicU64::new(1);

pub struct Email {
    server: TestServer,
    sink: Sink,
    smtp: std::net::SocketAddr,
}

/// A bot at `bot@skillgate.test` answering through `sink`, whose one route runs the skill the
/// subject names.
pub fn settings(sink: &Sink) -> EmailSettings {
    EmailSettings {
        from: Some("bot@skillgate.test".into()),
        smtp: Some(SmtpSettings {
            bind: Some("127.0.0.1:0".into()),
            hostname: Some("skillgate.test".into()),
            ..SmtpSettings::default()
        }),
        relay: Some(sink.relay()),
        routes: Some(vec![RouteSettings {
            command: Some(true),
            skills: Some(vec!["*".into()]),
            ..RouteSettings::default()
        }]),
        reply_window: Some(Seconds(Duration::ZERO)),
        dns_resolver: Some(crate::support::dns_fake::dns().addr.to_string()),
        ..EmailSettings::default()
    }
}

/// Sends a mail from `from` with `subject` and `body` to the listener at `smtp`, DKIM-signed by
/// the sender's domain (published on the test DNS server); its Message-ID.
pub async fn send(smtp: std::net::SocketAddr, from: &str, subject: &str, body: &str) -> String {
    let n = NEXT.fetch_add(1, Ordering::SeqCst);
    let id = format!("m{n}.{}@example.org", std::process::id());
    let message = Message::builder()
        .from(from.parse().unwrap())
        .to("bot@skillgate.test".parse().unwrap())
        .subject(subject)
        .message_id(Some(format!("<{id}>")))
        .body(body.to_string())
        .unwrap();
    let domain = from.rsplit_once('@').unwrap().1;
    let signed = crate::support::dns_fake::dns().sign(domain, &message.formatted());
    send_raw(smtp, message.envelope(), &signed).await;
    id
}

/// Sends `raw` as it is to the listener at `smtp`.
pub async fn send_raw(
    smtp: std::net::SocketAddr,
    envelope: &lettre::address::Envelope,
    raw: &[u8],
) {
    let transport = AsyncSmtpTransport::<Tokio1Executor>::builder_dangerous(smtp.ip().to_string())
        .port(smtp.port())
        .build();
    transport
        .send_raw(envelope, raw)
        .await
        .expect("the listener takes the mail");
}

/// The outcome an answer says.
pub fn outcome(answer: &Received) -> (Vec<Value>, Outcome) {
    let text = answer.text();
    let status = answer.header("X-Skillgate-Status").unwrap_or_default();
    if status != "ok" {
        let kind = match status.as_str() {
            "not-found" => Refusal::NotFound,
            "invalid-args" => Refusal::InvalidArgs,
            "denied" => Refusal::Denied,
            _ => Refusal::Failed,
        };
        return (Vec::new(), Outcome::Refused(kind, text));
    }
    let mut parts: Vec<&str> = text.split("\n\n").collect();
    let last = parts.pop().unwrap_or_default();
    let value = |t: &str| -> Value {
        match t
            .strip_prefix("```json\n")
            .and_then(|t| t.trim_end().strip_suffix("```"))
        {
            Some(json) => serde_json::from_str(json).unwrap(),
            None => Value::String(t.to_string()),
        }
    };
    // A text result keeps its own line end; the parts before it are messages.
    let result = if parts.is_empty() {
        value(&text)
    } else {
        value(last)
    };
    (parts.into_iter().map(value).collect(), Outcome::Ok(result))
}

impl Email {
    fn sender(&self, credential: Credential) -> &'static str {
        match credential {
            Credential::Valid => "ada@example.org",
            Credential::Missing => "stranger@elsewhere.test",
            Credential::Wrong => "mallory@evil.test",
        }
    }
}

async fn ask(
    sink: &Sink,
    smtp: std::net::SocketAddr,
    from: &str,
    skill: &str,
    args: &Value,
) -> Option<Received> {
    let body = if args.as_object().is_some_and(|m| m.is_empty()) {
        String::new()
    } else {
        args.to_string()
    };
    let id = send(smtp, from, skill, &body).await;
    let wait = if from == "ada@example.org" { 20 } else { 1 };
    sink.answer_to(&id, Duration::from_secs(wait)).await
}

impl Harness for Email {
    const NAME: &'static str = "email";
    /// Spec 03 lists email among the transports that emit `gateway-message`.
    const ANNOUNCES: bool = true;

    async fn start(project: Project, setup: Setup) -> Self {
        let sink = Sink::start().await;
        let mut http = skillgate::server::DoorSettings::http(config());
        http.email = settings(&sink);
        if setup.credentials {
            http.email.allowed_senders = Some(vec!["*@example.org".into()]);
        }
        let server = super::start_server(project, http, &setup).await;
        let smtp = server.email_addr().expect("the SMTP listener");
        Email { server, sink, smtp }
    }

    fn kernel(&self) -> &Kernel {
        &self.server.kernel
    }

    async fn invoke(&self, skill: &str, args: Value, credential: Credential) -> Outcome {
        match ask(&self.sink, self.smtp, self.sender(credential), skill, &args).await {
            Some(answer) => outcome(&answer).1,
            None => Outcome::Refused(Refusal::Credential, "no answer".into()),
        }
    }

    async fn stream(&self, skill: &str, args: Value) -> Vec<Part> {
        let answer = ask(&self.sink, self.smtp, "ada@example.org", skill, &args)
            .await
            .expect("an answer");
        let (messages, outcome) = outcome(&answer);
        let mut parts: Vec<Part> = messages.into_iter().map(Part::Message).collect();
        parts.push(Part::Final(outcome));
        parts
    }

    fn start_invoke(&self, skill: &str, args: Value) -> tokio::task::JoinHandle<Outcome> {
        let (sink, smtp, skill) = (self.sink.clone(), self.smtp, skill.to_string());
        tokio::spawn(async move {
            let answer = ask(&sink, smtp, "ada@example.org", &skill, &args)
                .await
                .expect("an answer");
            outcome(&answer).1
        })
    }

    fn begin_shutdown(&mut self) {
        self.server.begin_shutdown("test");
    }

    async fn finish(mut self) -> bool {
        self.server.finish().await.drained
    }
}

skillgate::transport_contract!(Email);
