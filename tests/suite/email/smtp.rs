//! The email transport over real SMTP: a routed mail gets one threaded answer (Re:, In-Reply-To,
//! References, Auto-Submitted, text and HTML); automatic and list mail get none; the same
//! Message-ID twice runs once; mail over the size cap is 552 and unreadable mail 550 with the
//! reason, and the listener goes on; a mail the listener said 250 to survives a SIGKILL; while
//! the store is down a mail gets 451 and runs when sent again; STARTTLS and `require-tls`; swaks
//! (where installed) as a second real client.

use std::time::Duration;

use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};

use lettre::transport::smtp::client::{Certificate, Tls, TlsParameters};
use lettre::{AsyncSmtpTransport, AsyncTransport, Message, Tokio1Executor};
use skillgate::config::email::TlsSettings;
use skillgate::events::{KernelBus, WithBus};
use skillgate::gateway::email::intake::TOPIC;
use skillgate::gateway::email::tls::acceptor;

use crate::support::common::Project;
use crate::support::server::{TestServer, config};
use crate::support::smtp_sink::Sink;
use crate::transport::email::{send, settings};

/// A server whose default skill answers in markdown.
pub(crate) async fn start(sink: &Sink) -> TestServer {
    let project = Project::new();
    project.skill(
        "brief.skill.md",
        "---\nname: brief\ndescription: Answers.\nmetadata:\n  params:\n    type: object\n    properties:\n      subject: { type: string }\n---\n**Re** :arg[subject]\n",
    );
    let mut http = skillgate::server::DoorSettings::http(config());
    let mut email = settings(sink);
    email.routes = None;
    email.default = Some("brief".into());
    email.max_size = Some(64 * 1024);
    http.email = email;
    TestServer::start_doors(project, http, |b| b).await
}

/// A raw SMTP session up to DATA (each command, then its answer lines): the halves of the
/// connection, the server waiting for the message.
pub(crate) async fn at_data(
    addr: std::net::SocketAddr,
) -> (
    BufReader<tokio::net::tcp::OwnedReadHalf>,
    tokio::net::tcp::OwnedWriteHalf,
) {
    let stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    let (read, mut write) = stream.into_split();
    let mut reader = BufReader::new(read);
    let mut line = String::new();
    reader.read_line(&mut line).await.unwrap();
    assert!(line.starts_with("220"), "{line}");
    for command in [
        "EHLO client.test\r\n",
        "MAIL FROM:<ada@example.org>\r\n",
        "RCPT TO:<bot@skillgate.test>\r\n",
        "DATA\r\n",
    ] {
        write.write_all(command.as_bytes()).await.unwrap();
        loop {
            line.clear();
            reader.read_line(&mut line).await.unwrap();
            if line.as_bytes().get(3) != Some(&b'-') {
                break;
            }
        }
    }
    assert!(line.starts_with("354"), "{line}");
    (reader, write)
}

/// A raw SMTP exchange sending `data` as the message: the answer to it.
async fn smtp_session(addr: std::net::SocketAddr, data: &[u8]) -> String {
    let (mut reader, mut write) = at_data(addr).await;
    let mut line = String::new();
    // The server may answer (552) and close before it has read everything: writes after that
    // may fail, the answer is what counts.
    let _ = write.write_all(data).await;
    let _ = write.write_all(b"\r\n.\r\n").await;
    reader.read_line(&mut line).await.unwrap();
    let _ = write.write_all(b"QUIT\r\n").await;
    line
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_mail_gets_one_threaded_answer_marked_auto_replied() {
    let sink = Sink::start().await;
    let server = start(&sink).await;
    let smtp = server.email_addr().unwrap();
    let id = send(
        smtp,
        "ada@example.org",
        "Quarterly numbers",
        "Could you send them?",
    )
    .await;
    let answer = sink
        .answer_to(&id, Duration::from_secs(20))
        .await
        .expect("an answer");
    assert_eq!(answer.to, ["ada@example.org"]);
    assert_eq!(
        answer.header("Subject").as_deref(),
        Some("Re: Quarterly numbers")
    );
    assert_eq!(
        answer.header("References").as_deref(),
        Some(format!("<{id}>").as_str())
    );
    assert_eq!(
        answer.header("Auto-Submitted").as_deref(),
        Some("auto-replied")
    );
    assert_eq!(answer.header("X-Skillgate-Status").as_deref(), Some("ok"));
    assert_eq!(answer.text(), "**Re** Quarterly numbers\n");
    let parsed = answer.parsed();
    let html = parsed.body_html(0).expect("an HTML alternative");
    assert!(html.contains("<strong>Re</strong>"), "{html}");
    assert_eq!(server.queued(TOPIC).await.len(), 1, "one mail queued");
    assert_eq!(sink.count(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn automatic_and_list_mail_get_no_answer() {
    let sink = Sink::start().await;
    let server = start(&sink).await;
    let smtp = server.email_addr().unwrap();
    for (n, header) in [
        "Auto-Submitted: auto-replied",
        "List-Id: <news.example.org>",
        "Precedence: bulk",
    ]
    .iter()
    .enumerate()
    {
        let raw = format!(
            "From: ada@example.org\r\nTo: bot@skillgate.test\r\nSubject: out of office {n}\r\nMessage-ID: <auto{n}@example.org>\r\n{header}\r\n\r\nI am away."
        );
        assert!(smtp_session(smtp, raw.as_bytes()).await.starts_with("250"));
    }
    // A person's mail afterwards is answered, and it is the only answer.
    let id = send(smtp, "ada@example.org", "hello", "hi").await;
    sink.answer_to(&id, Duration::from_secs(20))
        .await
        .expect("an answer");
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(sink.count(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_same_message_id_delivered_twice_runs_once() {
    let sink = Sink::start().await;
    let server = start(&sink).await;
    let smtp = server.email_addr().unwrap();
    let raw = b"From: ada@example.org\r\nTo: bot@skillgate.test\r\nSubject: twice\r\nMessage-ID: <twice@example.org>\r\n\r\nagain";
    assert!(
        smtp_session(smtp, raw)
            .await
            .starts_with("250 2.0.0 OK queued")
    );
    let again = smtp_session(smtp, raw).await;
    assert!(
        again.starts_with("250") && again.contains("already"),
        "{again}"
    );
    sink.answer_to("twice@example.org", Duration::from_secs(20))
        .await
        .expect("an answer");
    assert_eq!(server.queued(TOPIC).await.len(), 1, "queued once");
    assert_eq!(sink.count(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn oversized_unreadable_and_odd_mail_get_clear_answers_and_the_listener_goes_on() {
    let sink = Sink::start().await;
    let server = start(&sink).await;
    let smtp = server.email_addr().unwrap();
    let big = format!(
        "From: ada@example.org\r\nSubject: big\r\n\r\n{}",
        "x".repeat(70 * 1024)
    );
    assert!(
        smtp_session(smtp, big.as_bytes())
            .await
            .starts_with("552 5.3.4")
    );
    let charset = b"From: ada@example.org\r\nSubject: odd\r\nMIME-Version: 1.0\r\nContent-Type: text/plain; charset=x-martian-7\r\n\r\nzzz";
    let answer = smtp_session(smtp, charset).await;
    assert!(
        answer.starts_with("550 5.6.0") && answer.contains("x-martian-7"),
        "{answer}"
    );
    let mut nested = String::from("leaf\r\n");
    let mut headers = String::new();
    for level in (0..14).rev() {
        nested = format!("--b{level}\r\n{headers}\r\n{nested}\r\n--b{level}--\r\n");
        headers = format!("Content-Type: multipart/mixed; boundary=b{level}\r\n");
    }
    let deep = format!(
        "From: ada@example.org\r\nSubject: deep\r\nMIME-Version: 1.0\r\n{headers}\r\n{nested}"
    );
    let answer = smtp_session(smtp, deep.as_bytes()).await;
    assert!(
        answer.starts_with("550") && answer.contains("nests"),
        "{answer}"
    );
    let no_sender = b"Subject: who\r\n\r\nnobody";
    assert!(smtp_session(smtp, no_sender).await.starts_with("550"));
    // Still up: a good mail is answered.
    let id = send(smtp, "ada@example.org", "still there?", "yes").await;
    sink.answer_to(&id, Duration::from_secs(20))
        .await
        .expect("an answer");
}

#[test]
fn a_mail_answered_250_survives_a_sigkill_and_runs_after_restart() {
    crate::support::common::runtime().block_on(async {
            let sink = Sink::start().await;
            let project = Project::new();
            // Slow enough that the kill comes before the answer.
            project
                .write(
                    "skillgate.yaml",
                    &format!(
                        "email:\n  from: bot@skillgate.test\n  smtp: {{ bind: \"127.0.0.1:0\" }}\n  relay: {}\n  default: slow\n  reply-window: 0\n",
                        sink.relay()
                    ),
                )
                .skill(
                    "slow.skill.js",
                    "export default async function (ctx, args) {\n  await ctx.manager.invoke('event-wait', { topic: 'never', timeout: 1500 }).catch(() => null);\n  return 'answered ' + args.subject;\n}\n",
                );
            // The embedded SQLite store in the project: the same one after the restart. A mail
            // the killed process had claimed comes back after the visibility timeout (3 s).
            let args = ["--bind", "127.0.0.1:0", "--visibility", "3000"];
            let first = crate::support::process::serve(project.path(), &args, &[]);
            let smtp = first.smtp_addr();
            let id = send(smtp, "ada@example.org", "kept", "please").await;
            first.kill();
            assert!(sink.answer_to(&id, Duration::from_millis(200)).await.is_none());
            let second = crate::support::process::serve(project.path(), &args, &[]);
            let _ = second.smtp_addr();
            let answer = sink.answer_to(&id, Duration::from_secs(30)).await.expect("answered after the restart");
            assert_eq!(answer.text(), "answered kept");
        });
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_mail_sent_while_the_store_is_down_gets_451_and_runs_when_sent_again() {
    let Some(backend) = crate::support::stores::Backend::postgres() else {
        return;
    };
    let Some(pg) = crate::support::common::PgCtl::from_env() else {
        return;
    };
    let store = backend.open(skillgate::events::Limits::default()).await;
    let bus = std::sync::Arc::new(skillgate::events::Bus::new(
        store,
        skillgate::events::BusConfig::with_visibility(Duration::from_secs(5)),
    ));
    let sink = Sink::start().await;
    let project = Project::new();
    project.skill(
        "brief.skill.md",
        "---\nname: brief\ndescription: Answers.\n---\nkept\n",
    );
    let mut http = skillgate::server::DoorSettings::http(config());
    let mut email = settings(&sink);
    email.routes = None;
    email.default = Some("brief".into());
    http.email = email;
    let server = TestServer::start_doors(project, http, |b| b.bus(bus)).await;
    let smtp = server.email_addr().unwrap();
    let mail = "From: ada@example.org\r\nTo: bot@skillgate.test\r\nSubject: kept\r\nMessage-ID: <down.1@example.org>\r\n\r\nPlease.";
    pg.run("stop");
    let answer = smtp_session(smtp, mail.as_bytes()).await;
    pg.run("start");
    assert!(answer.starts_with("451 4.3.0"), "{answer}");
    // The sender tries again once the store is back: taken, run and answered once.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        let answer = smtp_session(smtp, mail.as_bytes()).await;
        if answer.starts_with("250") {
            break;
        }
        assert!(tokio::time::Instant::now() < deadline, "{answer}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let answer = sink
        .answer_to("down.1@example.org", Duration::from_secs(30))
        .await
        .expect("answered once the store is back");
    assert_eq!(answer.text(), "kept\n");
    backend.cleanup().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn swaks_where_installed_gets_its_mail_taken_and_answered() {
    if std::process::Command::new("swaks")
        .arg("--version")
        .output()
        .is_err()
    {
        eprintln!("skipped: swaks is not installed");
        return;
    }
    let sink = Sink::start().await;
    let server = start(&sink).await;
    let smtp = server.email_addr().unwrap();
    let id = "swaks.1@example.org";
    let (host, port) = (smtp.ip().to_string(), smtp.port().to_string());
    let out = tokio::task::spawn_blocking(move || {
        std::process::Command::new("swaks")
            .args(["--server", &host, "--port", &port])
            .args(["--from", "ada@example.org", "--to", "bot@skillgate.test"])
            .args(["--header", "Subject: from swaks"])
            .args(["--header", &format!("Message-Id: <{id}>")])
            .args(["--body", "Hello from swaks."])
            .output()
            .expect("swaks runs")
    })
    .await
    .unwrap();
    let transcript = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{transcript}");
    assert!(
        transcript.contains("<-  250 2.0.0 OK queued as"),
        "{transcript}"
    );
    let answer = sink
        .answer_to(id, Duration::from_secs(20))
        .await
        .expect("an answer");
    assert_eq!(answer.text(), "**Re** from swaks\n");
}

/// A self-signed certificate for `localhost` written into `project`: its PEM and the settings.
fn certificate(project: &Project) -> (String, TlsSettings) {
    let made = rcgen::generate_simple_self_signed(vec!["localhost".to_string()]).unwrap();
    let cert = made.cert.pem();
    project
        .write("tls/cert.pem", &cert)
        .write("tls/key.pem", &made.signing_key.serialize_pem());
    let at = |file: &str| project.path().join("tls").join(file).display().to_string();
    let settings = TlsSettings {
        cert: at("cert.pem"),
        key: at("key.pem"),
    };
    (cert, settings)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn starttls_encrypts_the_session_and_require_tls_refuses_mail_in_the_clear() {
    let sink = Sink::start().await;
    let project = Project::new();
    project.skill(
        "brief.skill.md",
        "---\nname: brief\ndescription: Answers.\n---\nsecure\n",
    );
    let (cert, tls) = certificate(&project);
    let mut http = skillgate::server::DoorSettings::http(config());
    let mut email = settings(&sink);
    email.routes = None;
    email.default = Some("brief".into());
    let smtp = email.smtp.as_mut().unwrap();
    smtp.tls = Some(tls);
    smtp.require_tls = Some(true);
    http.email = email;
    let server = TestServer::start_doors(project, http, |b| b).await;
    let addr = server.email_addr().unwrap();

    // In the clear: STARTTLS is offered, and mail is refused until it is used.
    let stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    let (read, mut write) = stream.into_split();
    let mut reader = BufReader::new(read);
    let mut ehlo = String::new();
    reader.read_line(&mut ehlo).await.unwrap();
    write.write_all(b"EHLO client.test\r\n").await.unwrap();
    loop {
        let mut line = String::new();
        reader.read_line(&mut line).await.unwrap();
        ehlo.push_str(&line);
        if line.as_bytes().get(3) != Some(&b'-') {
            break;
        }
    }
    assert!(ehlo.contains("250-STARTTLS"), "{ehlo}");
    write
        .write_all(b"MAIL FROM:<ada@example.org>\r\n")
        .await
        .unwrap();
    let mut refused = String::new();
    reader.read_line(&mut refused).await.unwrap();
    assert!(refused.starts_with("530 5.7.0"), "{refused}");

    // A client that requires TLS and trusts the certificate gets its mail taken and answered.
    let id = "tls.1@example.org";
    let message = Message::builder()
        .from("ada@example.org".parse().unwrap())
        .to("bot@skillgate.test".parse().unwrap())
        .subject("over tls")
        .message_id(Some(format!("<{id}>")))
        .body("hello".to_string())
        .unwrap();
    let parameters = TlsParameters::builder("localhost".into())
        .add_root_certificate(Certificate::from_pem(cert.as_bytes()).unwrap())
        .build_rustls()
        .unwrap();
    let transport = AsyncSmtpTransport::<Tokio1Executor>::builder_dangerous("127.0.0.1")
        .port(addr.port())
        .tls(Tls::Required(parameters))
        .build();
    transport.send(message).await.expect("taken over STARTTLS");
    let answer = sink
        .answer_to(id, Duration::from_secs(20))
        .await
        .expect("an answer");
    assert_eq!(answer.text(), "secure\n");
}

#[test]
fn a_certificate_that_cannot_be_read_or_does_not_fit_its_key_is_named_at_start() {
    let project = Project::new();
    let missing = TlsSettings {
        cert: project.path().join("nope.pem").display().to_string(),
        key: project.path().join("nope.key").display().to_string(),
    };
    let err = acceptor(&missing).err().expect("refused").to_string();
    assert!(err.starts_with("email.smtp.tls.cert: `"), "{err}");
    assert!(err.contains("nope.pem"), "{err}");

    let (_, mut tls) = certificate(&project);
    let other = rcgen::generate_simple_self_signed(vec!["other".to_string()]).unwrap();
    project.write("tls/other.key", &other.signing_key.serialize_pem());
    tls.key = project.path().join("tls/other.key").display().to_string();
    let err = acceptor(&tls).err().expect("refused").to_string();
    assert!(
        err.starts_with("email.smtp.tls: the certificate and key do not go together"),
        "{err}"
    );
}

/// Connects to the SMTP listener and reads its first line; the connection stays open while the
/// stream is kept.
pub(crate) async fn greeting(smtp: std::net::SocketAddr) -> (String, tokio::net::TcpStream) {
    let mut stream = tokio::net::TcpStream::connect(smtp).await.unwrap();
    let mut line = String::new();
    {
        let mut reader = BufReader::new(&mut stream);
        tokio::time::timeout(Duration::from_secs(20), reader.read_line(&mut line))
            .await
            .expect("a first line")
            .unwrap();
    }
    (line, stream)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mail_queued_by_the_release_before_versioned_payloads_is_still_answered() {
    let sink = Sink::start().await;
    let server = start(&sink).await;
    // The shape the intake queued before payloads carried a version: no `v`.
    let mut event = skillgate::events::Event::new("gateway-email", "mail");
    event.source = Some("email".into());
    event.data = Some(serde_json::json!({
        "mail": {
            "from": "ada@example.org", "fromName": null, "replyTo": "ada@example.org",
            "to": ["bot@skillgate.test"], "cc": [], "subject": "Queued before",
            "text": "still there?", "html": null, "messageId": "old-1@example.org",
            "inReplyTo": [], "references": [], "attachments": [],
        },
        "noReply": null,
        "skill": "brief",
        "args": { "subject": "Queued before" },
        "named": false,
        "refused": false,
        "verified": false,
        "verification": "unverified: no DKIM signature",
        "envelopeFrom": "ada@example.org",
        "recipients": ["bot@skillgate.test"],
        "receivedAt": 1_700_000_000_000u64,
    }));
    server.kernel.bus().emit(&event).await.unwrap();
    let answer = sink
        .answer_to("old-1@example.org", Duration::from_secs(20))
        .await
        .expect("an answer to the mail queued before the upgrade");
    assert_eq!(answer.to, ["ada@example.org"]);
    assert_eq!(answer.text(), "**Re** Queued before\n");
}
