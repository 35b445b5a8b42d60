//! Bounded property tests (a fixed number of cases, so CI time stays flat) over what hostile
//! peers send: MIME messages, SMTP command sequences, Slack event bodies and WebSocket frames.
//! The properties: no panic; every SMTP line gets an answer and the listener goes on; no 5xx
//! for a peer's mistake over HTTP; a WebSocket stays usable after any frame.

use std::time::Duration;

use futures::SinkExt;
use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};
use serde_json::json;
use skillgate::gateway::email::parse::{Caps, read};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio_tungstenite::tungstenite::Message;

use crate::support::common::Project;
use crate::support::server::{TestServer, config, hello_and_admin};
use crate::support::slack_fake::{self, FakeSlack, sign};
use crate::support::smtp_sink::Sink;
use crate::support::ws_client::{Frame, WsClient};

/// Header lines of the kinds a MIME parser must survive, well-formed or not.
fn header() -> impl Strategy<Value = String> {
    prop_oneof![
        "From: [a-z]{0,6}@[a-z]{0,6}\\.test",
        Just("From: <>".to_string()),
        "Subject: .{0,40}",
        Just("Content-Type: multipart/mixed; boundary=b".to_string()),
        Just("Content-Type: multipart/alternative; boundary=\"b\"".to_string()),
        "Content-Type: text/[a-z]{1,6}; charset=[a-z0-9-]{0,10}",
        Just("Content-Transfer-Encoding: base64".to_string()),
        Just("Content-Transfer-Encoding: quoted-printable".to_string()),
        "Content-Disposition: attachment; filename=.{0,12}",
        "References: <.{0,20}>",
        "[A-Za-z-]{1,12}: .{0,30}",
        ".{0,40}",
    ]
}

/// Body lines: boundaries, encoded text, garbage.
fn body_line() -> impl Strategy<Value = String> {
    prop_oneof![
        Just("--b".to_string()),
        Just("--b--".to_string()),
        "[A-Za-z0-9+/=]{0,76}",
        "=[0-9A-F]{2}.{0,20}",
        ".{0,60}",
        Just(String::new()),
    ]
}

fn mime() -> impl Strategy<Value = Vec<u8>> {
    (
        prop::collection::vec(header(), 0..8),
        prop::collection::vec(body_line(), 0..30),
        any::<bool>(),
    )
        .prop_map(|(headers, body, nested)| {
            let mut text = headers.join("\r\n");
            text.push_str("\r\n\r\n");
            if nested {
                text.push_str("--b\r\nContent-Type: multipart/mixed; boundary=b\r\n\r\n");
            }
            text.push_str(&body.join("\r\n"));
            text.into_bytes()
        })
}

#[test]
fn any_mime_message_is_read_or_refused_with_a_reason_never_a_panic() {
    let mut runner = TestRunner::new(Config::with_cases(512));
    let ours = ["bot@skillgate.test".to_string()];
    runner
        .run(&mime(), |raw| {
            match read(&raw, "ada@example.org", &ours, &Caps::default()) {
                Ok(mail) => prop_assert!(!mail.from.is_empty()),
                Err(err) => prop_assert!(!err.to_string().is_empty()),
            }
            Ok(())
        })
        .unwrap();
}

/// SMTP commands in any order, with junk between.
fn smtp_line() -> impl Strategy<Value = String> {
    prop_oneof![
        Just("EHLO client.test".to_string()),
        Just("HELO client.test".to_string()),
        Just("MAIL FROM:<ada@example.org>".to_string()),
        "MAIL FROM:<.{0,20}> SIZE=[0-9]{0,12}",
        Just("RCPT TO:<bot@skillgate.test>".to_string()),
        "RCPT TO:.{0,30}",
        Just("RSET".to_string()),
        Just("NOOP".to_string()),
        "VRFY .{0,10}",
        Just("STARTTLS".to_string()),
        "[A-Z]{1,8}( .{0,20})?",
        ".{0,80}",
    ]
}

#[test]
fn any_smtp_command_sequence_gets_an_answer_per_line_and_the_listener_goes_on() {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let (sink, server) = runtime.block_on(async {
        let sink = Sink::start().await;
        let server = crate::email::smtp::start(&sink).await;
        (sink, server)
    });
    let smtp = server.email_addr().unwrap();
    let mut runner = TestRunner::new(Config::with_cases(48));
    runner
        .run(&prop::collection::vec(smtp_line(), 1..12), |lines| {
            runtime.block_on(async {
                let stream = tokio::net::TcpStream::connect(smtp).await.unwrap();
                let (read, mut write) = stream.into_split();
                let mut reader = BufReader::new(read);
                let mut line = String::new();
                reader.read_line(&mut line).await.unwrap();
                assert!(line.starts_with("220"), "{line}");
                for command in &lines {
                    // A line break inside a command would be two commands: keep one per line.
                    let command = command.replace(['\r', '\n'], " ");
                    if write
                        .write_all(format!("{command}\r\n").as_bytes())
                        .await
                        .is_err()
                    {
                        break;
                    }
                    // Every line gets an answer: a code, maybe over several lines.
                    let mut answered = String::new();
                    loop {
                        line.clear();
                        let n = tokio::time::timeout(
                            Duration::from_secs(20),
                            reader.read_line(&mut line),
                        )
                        .await
                        .expect("answered")
                        .unwrap_or(0);
                        if n == 0 {
                            break;
                        }
                        answered = line.clone();
                        if line.as_bytes().get(3) != Some(&b'-') {
                            break;
                        }
                    }
                    if answered.is_empty() {
                        // The server may close after a 221 or 421 only.
                        break;
                    }
                    let code = &answered[..3.min(answered.len())];
                    assert!(
                        code.chars().all(|c| c.is_ascii_digit()),
                        "{command:?} -> {answered:?}"
                    );
                    if answered.starts_with("354") {
                        // DATA began: end the message so the next commands are commands.
                        let _ = write.write_all(b"Subject: x\r\n\r\nbody\r\n.\r\n").await;
                        line.clear();
                        let _ = reader.read_line(&mut line).await;
                    }
                    if answered.starts_with("221") || answered.starts_with("421") {
                        break;
                    }
                }
            });
            Ok(())
        })
        .unwrap();
    // The listener and the server go on.
    runtime.block_on(async {
        let id = crate::transport::email::send(smtp, "ada@example.org", "still there", "hi").await;
        sink.answer_to(&id, Duration::from_secs(20))
            .await
            .expect("an answer");
        assert_eq!(server.get("/healthz").await.status(), 200);
    });
}

/// Slack Events API bodies: real shapes with fields missing, of the wrong type, or junk.
fn slack_body() -> impl Strategy<Value = String> {
    let text = ".{0,30}";
    prop_oneof![
        (text, "[A-Z0-9]{0,6}").prop_map(|(t, c)| json!({ "type": "event_callback", "event_id": format!("Ev{c}"), "team_id": "T1", "event": { "type": "app_mention", "text": t, "user": "U1", "channel": c, "ts": "1700000000.000100" } }).to_string()),
        (text).prop_map(|t| json!({ "type": "event_callback", "event": { "type": "message", "text": t } }).to_string()),
        Just(json!({ "type": "url_verification", "challenge": 42 }).to_string()),
        Just(json!({ "type": "event_callback", "event": null }).to_string()),
        Just(json!({ "type": "event_callback", "event_id": 7, "event": { "type": 3, "ts": [] } }).to_string()),
        Just(json!([1, 2, 3]).to_string()),
        ".{0,60}",
    ]
}

#[test]
fn any_signed_slack_event_body_is_answered_without_a_5xx() {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let (_fake, server) = runtime.block_on(async {
        let fake = FakeSlack::start().await;
        let project = Project::new();
        project.skill(
            "brief.skill.md",
            "---\nname: brief\ndescription: Answers.\n---\nok\n",
        );
        let mut http = skillgate::server::DoorSettings::http(config());
        http.slack = skillgate::gateway::slack::SlackSettings {
            routes: None,
            default: Some("brief".into()),
            ..crate::transport::slack::settings(&fake)
        };
        (fake, TestServer::start_doors(project, http, |b| b).await)
    });
    let mut runner = TestRunner::new(Config::with_cases(128));
    runner
        .run(&slack_body(), |body| {
            let status = runtime.block_on(async {
                let mut request = server
                    .client
                    .post(server.url("/slack/events"))
                    .header("content-type", "application/json")
                    .body(body.clone());
                for (name, value) in sign(&body, slack_fake::now(), slack_fake::SIGNING_SECRET) {
                    request = request.header(name, value);
                }
                request.send().await.unwrap().status().as_u16()
            });
            prop_assert!(status < 500, "{body} -> {status}");
            Ok(())
        })
        .unwrap();
}

/// WebSocket text frames: the protocol's shapes with odd fields, and junk.
fn ws_frame() -> impl Strategy<Value = String> {
    prop_oneof![
        (".{0,8}", ".{0,8}").prop_map(|(id, skill)| {
            json!({ "type": "invoke", "id": id, "skill": skill, "args": {} }).to_string()
        }),
        Just(json!({ "type": "invoke", "id": 1, "skill": ["hello"] }).to_string()),
        Just(json!({ "type": "invoke", "id": "x", "skill": "hello", "args": "nope" }).to_string()),
        (".{0,8}").prop_map(|id| json!({ "type": "cancel", "id": id }).to_string()),
        (".{0,8}").prop_map(|t| json!({ "type": "subscribe", "topic": t }).to_string()),
        Just(json!({ "type": "message", "id": "x", "message": { "$context": {} } }).to_string()),
        Just(json!({ "type": "auth", "key": 5 }).to_string()),
        ".{0,8}".prop_map(|t| json!({ "type": t }).to_string()),
        ".{0,80}",
    ]
}

#[test]
fn any_websocket_frame_leaves_the_socket_usable() {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let server = runtime.block_on(TestServer::start(hello_and_admin(), config()));
    let mut runner = TestRunner::new(Config::with_cases(48));
    runner
        .run(&prop::collection::vec(ws_frame(), 1..6), |frames| {
            runtime.block_on(async {
                let (mut client, _) = WsClient::connect(server.addr, None).await;
                for frame in &frames {
                    client
                        .socket
                        .send(Message::Text(frame.clone().into()))
                        .await
                        .unwrap();
                }
                // Still usable: a ping gets its pong, whatever came before it.
                client.send(json!({ "type": "ping" })).await;
                loop {
                    match client.next().await {
                        Frame::Json(f) if f["type"] == "pong" => break,
                        Frame::Json(f) => {
                            // An error frame is a problem document, never an internal error.
                            if f["type"] == "error" {
                                let status = f["problem"]["status"].as_u64().unwrap_or(0);
                                assert!(status < 500, "{frames:?} -> {f}");
                            }
                        }
                        Frame::Closed(code, reason) => {
                            panic!("{frames:?} closed the socket: {code} {reason}")
                        }
                    }
                }
            });
            Ok(())
        })
        .unwrap();
}
