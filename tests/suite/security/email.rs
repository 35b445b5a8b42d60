//! Hostile mail over real SMTP: a forged `From` (no DKIM of its domain, no DMARC pass) gets no
//! command route, no conversation history, and no answer anywhere but that `From`; naming
//! another sender's Message-ID does not walk into its thread; `require-verified-sender` leaves
//! such mail unanswered; a trusted relay's `Authentication-Results` is believed and nobody
//! else's; raw HTML never reaches the answer's HTML part as markup.

use std::time::Duration;

use lettre::Message;
use serde_json::{Value, json};

use crate::support::common::Project;
use crate::support::dns_fake::dns;
use crate::support::server::{TestServer, config};
use crate::support::smtp_sink::{Received, Sink};
use crate::transport::Outcome;
use crate::transport::email::{outcome, send_raw, settings};
use skillgate::config::email::RouteSettings;

/// `who`: the conversation it runs in and how much of it it sees; `echo`: the mail's text.
fn project() -> Project {
    let p = Project::new();
    p.skill(
        "who.skill.js",
        "export const frontmatter = { metadata: { session: true } };\n\
         export default async (ctx, args) => ({ sessionId: ctx.nonlocals.gateway.sessionId ?? null, seen: ctx.locals.session?.history?.length ?? 0 });\n",
    );
    p.skill(
        "echo.skill.md",
        "---\nname: echo\ndescription: Says the text back.\nmetadata:\n  params:\n    type: object\n    properties:\n      text: { type: string }\n---\n:arg[text]\n",
    );
    p
}

/// Mail routes: `command: true` naming `who`, then everything else to `default`.
async fn start(
    sink: &Sink,
    default: &str,
    tune: impl FnOnce(&mut skillgate::gateway::email::EmailSettings),
) -> (TestServer, std::net::SocketAddr) {
    let mut http = skillgate::server::DoorSettings::http(config());
    let mut email = settings(sink);
    email.routes = Some(vec![RouteSettings {
        command: Some(true),
        skills: Some(vec!["who".into()]),
        ..RouteSettings::default()
    }]);
    email.default = Some(default.into());
    tune(&mut email);
    http.email = email;
    let server = TestServer::start_doors(project(), http, |b| b).await;
    let smtp = server.email_addr().expect("the SMTP listener");
    (server, smtp)
}

struct Mail<'a> {
    from: &'a str,
    subject: &'a str,
    body: &'a str,
    reply_to: Option<&'a str>,
    in_reply_to: Option<&'a str>,
    references: Option<&'a str>,
    /// The domain that DKIM-signs it, if any.
    signed_by: Option<&'a str>,
    extra_header: Option<&'a str>,
}

impl Default for Mail<'_> {
    fn default() -> Self {
        Mail {
            from: "ada@example.org",
            subject: "who",
            body: "",
            reply_to: None,
            in_reply_to: None,
            references: None,
            signed_by: Some("example.org"),
            extra_header: None,
        }
    }
}

/// Sends `mail`; its Message-ID.
async fn send(smtp: std::net::SocketAddr, mail: Mail<'_>) -> String {
    let id = format!("{}@example.org", skillgate::context::id::random_hex128());
    let mut builder = Message::builder()
        .from(mail.from.parse().unwrap())
        .to("bot@skillgate.test".parse().unwrap())
        .subject(mail.subject)
        .message_id(Some(format!("<{id}>")));
    if let Some(r) = mail.reply_to {
        builder = builder.reply_to(r.parse().unwrap());
    }
    if let Some(r) = mail.in_reply_to {
        builder = builder.in_reply_to(format!("<{r}>"));
    }
    if let Some(r) = mail.references {
        builder = builder.references(format!("<{r}>"));
    }
    let message = builder.body(mail.body.to_string()).unwrap();
    let mut raw = message.formatted();
    if let Some(header) = mail.extra_header {
        raw = [header.as_bytes(), b"\r\n", &raw].concat();
    }
    if let Some(domain) = mail.signed_by {
        raw = dns().sign(domain, &raw);
    }
    send_raw(smtp, message.envelope(), &raw).await;
    id
}

/// The answer to `id`, its recipients and what `who` said in it.
async fn answer(sink: &Sink, id: &str) -> (Received, Value) {
    let answer = sink
        .answer_to(id, Duration::from_secs(20))
        .await
        .expect("an answer");
    let said = match outcome(&answer).1 {
        Outcome::Ok(v) => v,
        other => panic!("the run failed: {other:?}"),
    };
    (answer, said)
}

fn mailed_to(sink: &Sink, address: &str) -> usize {
    sink.received
        .lock()
        .iter()
        .filter(|r| r.to.iter().any(|t| t.eq_ignore_ascii_case(address)))
        .count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_forged_sender_gets_no_command_route_no_history_and_no_answer_at_its_reply_to() {
    let sink = Sink::start().await;
    let (_server, smtp) = start(&sink, "who", |_| {}).await;

    // Ada, signed by her domain: the command route runs `who` in a new conversation.
    let first = send(smtp, Mail::default()).await;
    let (to_ada, said) = answer(&sink, &first).await;
    assert_eq!(
        said,
        json!({ "sessionId": format!("email:{first}"), "seen": 0 })
    );
    assert_eq!(to_ada.to, vec!["ada@example.org".to_string()]);

    // Mallory writes as Ada (no signature of example.org), naming Ada's thread and asking for
    // the answer at her own address.
    let forged = send(
        smtp,
        Mail {
            subject: "who",
            reply_to: Some("mallory@evil.test"),
            references: Some(&first),
            in_reply_to: Some(&first),
            signed_by: Some("evil.test"),
            ..Mail::default()
        },
    )
    .await;
    let (answer_to_forged, said) = answer(&sink, &forged).await;
    // No command route (the default ran it) and no conversation: nothing of Ada's history.
    assert_eq!(said, json!({ "sessionId": null, "seen": 0 }));
    // Answered only at the From address, never at the Reply-To.
    assert_eq!(answer_to_forged.to, vec!["ada@example.org".to_string()]);
    assert_eq!(mailed_to(&sink, "mallory@evil.test"), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_thread_is_continued_only_through_message_ids_the_server_knows_for_that_sender() {
    let sink = Sink::start().await;
    let (_server, smtp) = start(&sink, "who", |_| {}).await;

    let first = send(smtp, Mail::default()).await;
    let (ours, _) = answer(&sink, &first).await;
    let our_id = ours
        .header("Message-ID")
        .expect("the answer has a Message-ID")
        .trim_matches(['<', '>'])
        .to_string();

    // Ada answers the bot's mail: her conversation goes on, and she sees its first turn.
    let reply = send(
        smtp,
        Mail {
            in_reply_to: Some(&our_id),
            references: Some(&first),
            ..Mail::default()
        },
    )
    .await;
    let (_, said) = answer(&sink, &reply).await;
    assert_eq!(said["sessionId"], json!(format!("email:{first}")));
    assert_eq!(said["seen"], json!(1));

    // Bob, verified too, names Ada's Message-IDs: a thread of his own, none of hers.
    let bob = send(
        smtp,
        Mail {
            from: "bob@example.org",
            in_reply_to: Some(&our_id),
            references: Some(&first),
            ..Mail::default()
        },
    )
    .await;
    let (_, said) = answer(&sink, &bob).await;
    assert_eq!(
        said,
        json!({ "sessionId": format!("email:{bob}"), "seen": 0 })
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn require_verified_sender_leaves_unverified_mail_unanswered() {
    let sink = Sink::start().await;
    let (_server, smtp) = start(&sink, "who", |e| e.require_verified_sender = Some(true)).await;
    let unsigned = send(
        smtp,
        Mail {
            signed_by: None,
            ..Mail::default()
        },
    )
    .await;
    let signed = send(smtp, Mail::default()).await;
    // The signed one, sent after, is answered; by then the unsigned one would have been.
    answer(&sink, &signed).await;
    assert!(
        sink.answer_to(&unsigned, Duration::from_millis(500))
            .await
            .is_none()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_trusted_relays_authentication_results_verify_and_nobody_elses() {
    let sink = Sink::start().await;
    let (_server, smtp) = start(&sink, "who", |e| {
        e.trusted_relay = Some("mx.skillgate.test".into());
    })
    .await;
    let relayed = send(
        smtp,
        Mail {
            signed_by: None,
            extra_header: Some(
                "Authentication-Results: mx.skillgate.test; dkim=pass header.d=example.org;\r\n dmarc=pass header.from=example.org",
            ),
            ..Mail::default()
        },
    )
    .await;
    let (_, said) = answer(&sink, &relayed).await;
    assert_eq!(said["sessionId"], json!(format!("email:{relayed}")));

    let claimed = send(
        smtp,
        Mail {
            signed_by: None,
            extra_header: Some(
                "Authentication-Results: mx.evil.test; dmarc=pass header.from=example.org",
            ),
            ..Mail::default()
        },
    )
    .await;
    let (_, said) = answer(&sink, &claimed).await;
    assert_eq!(said["sessionId"], json!(null));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn raw_html_in_a_mail_is_never_markup_in_the_answers_html_part() {
    let sink = Sink::start().await;
    let (_server, smtp) = start(&sink, "echo", |e| e.routes = None).await;
    let id = send(
        smtp,
        Mail {
            subject: "hello",
            body: "<img src=x onerror=alert(1)> <a href=\"javascript:alert(2)\">win</a> <form action=https://evil.test><input name=p></form>",
            ..Mail::default()
        },
    )
    .await;
    let answer = sink
        .answer_to(&id, Duration::from_secs(20))
        .await
        .expect("an answer");
    let parsed = answer.parsed();
    let html = parsed.body_html(0).expect("an HTML part").to_string();
    for markup in [
        "<img",
        "<form",
        "<input",
        "<a href=\"javascript",
        "onerror=alert(1)>",
    ] {
        assert!(!html.contains(markup), "`{markup}` in {html}");
    }
    assert!(html.contains("&lt;img"), "the text is shown: {html}");
}
