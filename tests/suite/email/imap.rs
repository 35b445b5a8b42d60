//! The email transport reading an IMAP folder on a real server (the Dovecot `scripts/test`
//! starts, at `SKILLGATE_TEST_IMAP`; any user, password `secret`): unread mail waiting at the
//! first look and mail arriving later (IDLE) run and are answered, read mail is left alone; a
//! restart, even after a SIGKILL, neither misses mail that came meanwhile (even read by then)
//! nor runs a mail again; a refused login shows in `/readyz`.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use serde_json::Value;
use tokio::net::TcpStream;

use skillgate::config::email::ImapSettings;
use skillgate::config::values::Seconds;
use skillgate::gateway::transport::State;

use crate::support::common::Project;
use crate::support::server::{TestServer, config};
use crate::support::smtp_sink::Sink;
use crate::transport::email::settings;

static NEXT: AtomicUsize = AtomicUsize::new(0);

/// The test IMAP server, or `None` (the test is skipped) where none runs.
fn imap_server() -> Option<(String, u16)> {
    match std::env::var("SKILLGATE_TEST_IMAP") {
        Ok(addr) => {
            let (host, port) = addr.rsplit_once(':').expect("host:port");
            Some((host.to_string(), port.parse().expect("a port")))
        }
        Err(_) if std::env::var_os("SKILLGATE_REQUIRE_IMAP").is_some() => {
            panic!("SKILLGATE_TEST_IMAP is not set (scripts/test starts a Dovecot)")
        }
        Err(_) => {
            eprintln!("skipped: no IMAP server (SKILLGATE_TEST_IMAP); run scripts/test");
            None
        }
    }
}

/// A mailbox of its own for each test.
fn new_user() -> String {
    let n = NEXT.fetch_add(1, Ordering::SeqCst);
    format!("bot{}x{n}", std::process::id())
}

/// Puts a mail in `user`'s INBOX over IMAP (`APPEND`), `\Seen` when `read`; its Message-ID.
async fn deliver(host: &str, port: u16, user: &str, subject: &str, read: bool) -> String {
    let n = NEXT.fetch_add(1, Ordering::SeqCst);
    let id = format!("i{n}.{}@example.org", std::process::id());
    let raw = format!(
        "Return-Path: <ada@example.org>\r\nFrom: Ada <ada@example.org>\r\nTo: {user}@skillgate.test\r\nSubject: {subject}\r\nMessage-ID: <{id}>\r\nDate: Mon, 23 Nov 2026 10:00:00 +0000\r\nContent-Type: text/plain; charset=utf-8\r\n\r\nPlease.\r\n"
    );
    let stream = TcpStream::connect((host, port)).await.unwrap();
    let mut client = async_imap::Client::new(stream);
    client.read_response().await.unwrap().expect("a greeting");
    let mut session = client.login(user, "secret").await.map_err(|e| e.0).unwrap();
    let flags = read.then_some("(\\Seen)");
    session.append("INBOX", flags, None, raw).await.unwrap();
    session.logout().await.unwrap();
    id
}

/// Settings for `user`'s INBOX; polled every two minutes only, so mail seen sooner came by IDLE.
fn imap_settings(host: &str, port: u16, user: &str, password: &str) -> ImapSettings {
    ImapSettings {
        host: Some(host.into()),
        port: Some(port),
        tls: Some(false),
        user: Some(user.into()),
        password: Some(password.into()),
        poll_interval: Some(Seconds(Duration::from_secs(120))),
        ..ImapSettings::default()
    }
}

fn brief(project: &Project) {
    project.skill(
        "brief.skill.md",
        "---\nname: brief\ndescription: Answers.\nmetadata:\n  params:\n    type: object\n    properties:\n      subject: { type: string }\n---\nseen :arg[subject]\n",
    );
}

/// A server with no SMTP listener that reads the mailbox of `imap` and answers with `brief`
/// through the sink.
async fn read_by_brief(sink: &Sink, imap: ImapSettings) -> TestServer {
    let project = Project::new();
    brief(&project);
    let mut http = skillgate::server::DoorSettings::http(config());
    let mut email = settings(sink);
    email.smtp = None;
    email.routes = None;
    email.default = Some("brief".into());
    email.imap = Some(imap);
    http.email = email;
    TestServer::start_doors(project, http, |b| b).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unread_mail_at_the_first_look_and_new_mail_run_and_read_mail_is_left_alone() {
    let Some((host, port)) = imap_server() else {
        return;
    };
    let user = new_user();
    let waiting = deliver(&host, port, &user, "waiting", false).await;
    let old = deliver(&host, port, &user, "already read", true).await;

    let sink = Sink::start().await;
    let server = read_by_brief(&sink, imap_settings(&host, port, &user, "secret")).await;
    assert_eq!(server.email_addr(), None, "no SMTP listener was asked for");

    let answer = sink
        .answer_to(&waiting, Duration::from_secs(20))
        .await
        .expect("the unread mail is answered");
    assert_eq!(answer.to, ["ada@example.org"]);
    assert_eq!(answer.text(), "seen waiting\n");

    // Mail that arrives while the server watches the folder wakes it through IDLE.
    let fresh = deliver(&host, port, &user, "fresh", false).await;
    let answer = sink
        .answer_to(&fresh, Duration::from_secs(20))
        .await
        .expect("new mail is answered");
    assert_eq!(answer.text(), "seen fresh\n");
    assert!(
        sink.answer_to(&old, Duration::from_millis(300))
            .await
            .is_none()
    );
    assert_eq!(sink.count(), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_imap_login_shows_as_unauthorized_in_readyz() {
    let Some((host, port)) = imap_server() else {
        return;
    };
    let sink = Sink::start().await;
    let server = read_by_brief(&sink, imap_settings(&host, port, &new_user(), "wrong")).await;
    server.door_reaches("email-imap", State::Unauthorized).await;
    let ready = server.get("/readyz").await;
    assert_eq!(ready.status(), 503);
    let body: Value = ready.json().await.unwrap();
    assert_eq!(body["transports"]["email-imap"], "unauthorized", "{body}");
}

#[test]
fn an_imap_restart_after_a_sigkill_neither_misses_nor_repeats_a_mail() {
    let Some((host, port)) = imap_server() else {
        return;
    };
    crate::support::common::runtime().block_on(async {
            let user = new_user();
            let sink = Sink::start().await;
            let project = Project::new();
            brief(&project);
            project.write(
                "skillgate.yaml",
                &format!(
                    "email:\n  from: bot@skillgate.test\n  imap:\n    host: {host}\n    port: {port}\n    tls: false\n    user: {user}\n    password: ${{env.TEST_IMAP_PASSWORD}}\n    poll-interval: 1\n  relay: {}\n  default: brief\n  reply-window: 0\n",
                    sink.relay()
                ),
            );
            // The project's embedded SQLite store keeps the folder's position across the kill.
            let args = ["--bind", "127.0.0.1:0"];
            let env = [("TEST_IMAP_PASSWORD", "secret")];
            let first = crate::support::process::serve(project.path(), &args, &env);
            let before = deliver(&host, port, &user, "before", false).await;
            sink.answer_to(&before, Duration::from_secs(20))
                .await
                .expect("answered by the first process");
            first.kill();

            // Read in a mail client while the service was down: only the remembered UID finds it.
            let meanwhile = deliver(&host, port, &user, "meanwhile", true).await;
            let second = crate::support::process::serve(project.path(), &args, &env);
            let answer = sink
                .answer_to(&meanwhile, Duration::from_secs(20))
                .await
                .expect("mail that came while down is answered after the restart");
            assert_eq!(answer.text(), "seen meanwhile\n");
            // A last one after the restart, then nothing ran twice.
            let after = deliver(&host, port, &user, "after", false).await;
            sink.answer_to(&after, Duration::from_secs(20))
                .await
                .expect("answered by the second process");
            tokio::time::sleep(Duration::from_millis(500)).await;
            assert_eq!(sink.count(), 3, "each mail is answered once");
            second.stop();
        });
}
