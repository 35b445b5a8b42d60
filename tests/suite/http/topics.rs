//! `GET /events/{topic}`: a topic as server-sent events with durable ids, resumed after
//! `Last-Event-ID` with no gap and no duplicate.

use std::time::Duration;

use skillgate::events::KernelBus;

use crate::support::common::{Project, event};
use crate::support::server::{SseReader, TestServer, config, with_keys};

async fn follow(server: &TestServer, last: Option<&str>) -> SseReader {
    let mut request = server.client.get(server.url("/events/orders"));
    if let Some(last) = last {
        request = request.header("last-event-id", last);
    }
    let response = request.send().await.expect("request sent");
    assert_eq!(response.status(), 200);
    SseReader::new(response)
}

/// The next `event` event: its `n` and its id.
async fn next(reader: &mut SseReader) -> (u64, String) {
    let sse = tokio::time::timeout(Duration::from_secs(20), reader.next())
        .await
        .expect("an event arrives")
        .expect("the stream goes on");
    assert_eq!(sse.event, "event");
    let id = sse.id.expect("a durable id");
    assert_eq!(sse.data["id"], id.as_str());
    (sse.data["data"]["n"].as_u64().unwrap(), id)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_topic_stream_resumes_after_last_event_id_with_no_gap_and_no_duplicate() {
    let server = TestServer::start(Project::new(), config()).await;
    let bus = server.kernel.bus().clone();
    let mut reader = follow(&server, None).await;
    bus.emit(&event("orders", 1)).await.unwrap();
    bus.emit(&event("orders", 2)).await.unwrap();
    assert_eq!(next(&mut reader).await.0, 1);
    let (n, last) = next(&mut reader).await;
    assert_eq!(n, 2);
    drop(reader);
    bus.emit(&event("orders", 3)).await.unwrap();
    let mut reader = follow(&server, Some(&last)).await;
    bus.emit(&event("orders", 4)).await.unwrap();
    assert_eq!(next(&mut reader).await.0, 3);
    assert_eq!(next(&mut reader).await.0, 4);
    let extra = tokio::time::timeout(Duration::from_millis(500), reader.next()).await;
    assert!(extra.is_err(), "no duplicate: {extra:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_key_limited_to_some_skills_cannot_follow_a_topic() {
    let server = TestServer::start(Project::new(), with_keys()).await;
    let response = server
        .client
        .get(server.url("/events/orders"))
        .bearer_auth("sg_narrow_key")
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 403);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn topic_streams_end_when_the_server_shuts_down() {
    let mut server = TestServer::start(Project::new(), config()).await;
    let mut reader = follow(&server, None).await;
    server.begin_shutdown("test");
    let end = tokio::time::timeout(Duration::from_secs(20), reader.next())
        .await
        .expect("the stream ends");
    assert!(end.is_none(), "{end:?}");
    assert!(server.finish().await.drained);
}
