//! Hostile SMTP clients over raw sockets: DATA is counted against the size cap as it arrives
//! (a line without end holds no more than the cap), the sessions at once are capped (idle
//! clients cannot take the file descriptors HTTP needs), and the bytes of DATA in flight across
//! all sessions are capped (a message past the cap waits for room, then 452, try again later).

use std::time::Duration;

use tokio::io::{AsyncBufReadExt, AsyncWriteExt};

use crate::email::smtp::{at_data, greeting, start};
use crate::support::common::Project;
use crate::support::server::{TestServer, config};
use crate::support::smtp_sink::Sink;
use crate::transport::email::{send, settings};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn data_past_the_size_cap_is_refused_as_it_arrives_even_without_a_newline() {
    let sink = Sink::start().await;
    let mut server = start(&sink).await;
    let smtp = server.email_addr().unwrap();
    let (mut reader, mut write) = at_data(smtp).await;
    let mut line = String::new();
    // Four times the cap (64 KiB) in one line that never ends, and no terminator: the server
    // must not wait for a newline that never comes, holding it all.
    let flood = vec![b'x'; 256 * 1024];
    let _ = write.write_all(&flood).await;
    line.clear();
    tokio::time::timeout(Duration::from_secs(20), reader.read_line(&mut line))
        .await
        .expect("answered before any newline")
        .unwrap();
    assert!(line.starts_with("552 5.3.4"), "{line}");
    // And the listener goes on.
    let id = send(smtp, "ada@example.org", "after the flood", "hi").await;
    sink.answer_to(&id, Duration::from_secs(20))
        .await
        .expect("an answer");
    server.finish().await;
}

/// A server whose mail all goes to `brief`, answered through `sink`, with `tune` applied.
async fn brief(
    sink: &Sink,
    tune: impl FnOnce(&mut skillgate::gateway::email::EmailSettings),
) -> TestServer {
    let project = Project::new();
    project.skill(
        "brief.skill.md",
        "---\nname: brief\ndescription: Answers.\n---\nok\n",
    );
    let mut http = skillgate::server::DoorSettings::http(config());
    let mut email = settings(sink);
    email.routes = None;
    email.default = Some("brief".into());
    tune(&mut email);
    http.email = email;
    TestServer::start_doors(project, http, |b| b).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn smtp_clients_past_the_connection_cap_are_told_421_and_http_goes_on() {
    let sink = Sink::start().await;
    let mut server = brief(&sink, |email| {
        email.smtp.as_mut().unwrap().max_connections = Some(2);
    })
    .await;
    let smtp = server.email_addr().unwrap();
    let (first, _a) = greeting(smtp).await;
    let (second, b) = greeting(smtp).await;
    assert!(first.starts_with("220") && second.starts_with("220"));
    let (third, _c) = greeting(smtp).await;
    assert!(third.starts_with("421 4.7.0"), "{third}");
    assert_eq!(server.get("/healthz").await.status(), 200);
    // A session that ends makes room.
    drop(b);
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    loop {
        let (line, _r) = greeting(smtp).await;
        if line.starts_with("220") {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "room again: {line}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    server.finish().await;
}

/// The next line the server answers on `reader`, or `""` when none comes within `within`.
async fn answer_within(
    reader: &mut tokio::io::BufReader<tokio::net::tcp::OwnedReadHalf>,
    within: Duration,
) -> String {
    let mut line = String::new();
    match tokio::time::timeout(within, reader.read_line(&mut line)).await {
        Ok(_) => line,
        Err(_) => String::new(),
    }
}

/// A message of 100 KiB in lines of at most 1 KiB, not finished. Its first line is 1 KiB, so
/// the memory it holds once received grows 1, 2, 4 ... to 128 KiB.
fn unfinished_message() -> String {
    let subject = format!("Subject: {}\r\n", "x".repeat(1024 - 11));
    let body = format!("{}\r\n", "x".repeat(1022)).repeat(99);
    format!("{subject}From: ada@example.org\r\n\r\n{body}")
}

/// One SMTP session's two halves.
type Session = (
    tokio::io::BufReader<tokio::net::tcp::OwnedReadHalf>,
    tokio::net::tcp::OwnedWriteHalf,
);

/// Three sessions at DATA on `smtp`, opened one after another, each sending an
/// [`unfinished_message`]; and what the server answered each within half a second (`""`:
/// nothing).
async fn three_unfinished(smtp: std::net::SocketAddr) -> (Vec<Session>, Vec<String>) {
    let mut sessions = Vec::new();
    let mut answers = Vec::new();
    for _ in 0..3 {
        let (mut reader, mut write) = at_data(smtp).await;
        write
            .write_all(unfinished_message().as_bytes())
            .await
            .unwrap();
        write.flush().await.unwrap();
        answers.push(answer_within(&mut reader, Duration::from_millis(500)).await);
        sessions.push((reader, write));
    }
    (sessions, answers)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn data_in_flight_across_sessions_is_capped_and_a_client_past_it_waits_then_is_told_452() {
    let sink = Sink::start().await;
    let mut server = brief(&sink, |email| {
        email.max_size = Some(1024 * 1024);
        let smtp = email.smtp.as_mut().unwrap();
        smtp.max_data_in_flight = Some(256 * 1024);
        smtp.max_data_wait = Some(skillgate::config::values::Seconds(Duration::from_secs(2)));
    })
    .await;
    let smtp = server.email_addr().unwrap();
    // Three sessions each send 100 KiB of a message they do not finish: the third passes the
    // bound of 256 KiB together, though each is far below the size cap.
    let (mut held, answers) = three_unfinished(smtp).await;
    assert_eq!(
        answers,
        ["", "", ""],
        "the first two wait for the rest of their messages, the third for room"
    );
    // Room does not come within the wait: told to try again later.
    let third = &mut held[2].0;
    let told = answer_within(third, Duration::from_secs(20)).await;
    assert!(told.starts_with("452 4.3.1"), "{told}");
    // Finished messages give their bytes back: a new client is taken again.
    drop(held);
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    loop {
        let (mut reader, mut write) = at_data(smtp).await;
        write
            .write_all(b"From: ada@example.org\r\nSubject: hi\r\n\r\nhello\r\n.\r\n")
            .await
            .unwrap();
        let mut line = String::new();
        reader.read_line(&mut line).await.unwrap();
        if line.starts_with("250") {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "room again: {line}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    server.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_message_waiting_for_room_under_the_data_bound_is_taken_once_another_finishes() {
    let sink = Sink::start().await;
    let mut server = brief(&sink, |email| {
        email.max_size = Some(1024 * 1024);
        email.smtp.as_mut().unwrap().max_data_in_flight = Some(256 * 1024);
    })
    .await;
    let smtp = server.email_addr().unwrap();
    let (mut sessions, answers) = three_unfinished(smtp).await;
    assert_eq!(
        answers,
        ["", "", ""],
        "no session is turned away while it may wait for room"
    );
    // The first finishes its message and gives back what it held: the third goes on.
    let (first_reader, first_write) = &mut sessions[0];
    first_write.write_all(b".\r\n").await.unwrap();
    let first = answer_within(first_reader, Duration::from_secs(20)).await;
    assert!(first.starts_with("250"), "{first}");
    let (third_reader, third_write) = &mut sessions[2];
    third_write.write_all(b".\r\n").await.unwrap();
    let third = answer_within(third_reader, Duration::from_secs(20)).await;
    assert!(
        third.starts_with("250"),
        "the waiting message is taken whole: {third}"
    );
    // The second never finishes: its client leaves.
    drop(sessions);
    server.finish().await;
}
