//! Hostile SMTP clients over raw sockets: DATA is counted against the size cap as it arrives
//! (a line without end holds no more than the cap), the sessions at once are capped (idle
//! clients cannot take the file descriptors HTTP needs), and the bytes of DATA in flight across
//! all sessions are capped (452, try again later).

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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn data_in_flight_across_sessions_is_capped_and_the_client_past_it_is_told_452() {
    let sink = Sink::start().await;
    let mut server = brief(&sink, |email| {
        email.max_size = Some(1024 * 1024);
        email.smtp.as_mut().unwrap().max_data_in_flight = Some(256 * 1024);
    })
    .await;
    let smtp = server.email_addr().unwrap();
    // Three sessions each hold 100 KiB of a message they do not finish: the third passes the
    // bound of 256 KiB together, though each is far below the size cap.
    let piece = format!("{}\r\n", "x".repeat(1022)).repeat(100);
    let mut held = Vec::new();
    let mut answers = Vec::new();
    for _ in 0..3 {
        let (mut reader, mut write) = at_data(smtp).await;
        write.write_all(piece.as_bytes()).await.unwrap();
        write.flush().await.unwrap();
        let mut line = String::new();
        let answered =
            tokio::time::timeout(Duration::from_millis(500), reader.read_line(&mut line)).await;
        answers.push(answered.map(|_| line).unwrap_or_default());
        held.push((reader, write));
    }
    assert_eq!(
        answers[0], "",
        "the first waits for the rest of its message"
    );
    assert!(answers[2].starts_with("452 4.3.1"), "{answers:?}");
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
