//! The recorder under load: it keeps up with runs arriving faster than one batch a linger.

use std::sync::Arc;
use std::time::Duration;

use serde_json::json;
use skillgate::events::memory::MemoryStore;
use skillgate::events::records::{Records, RunFilter};
use skillgate::events::runs::{RecordConfig, Recorder, RunRecord};
use skillgate::events::{EventStore, Limits};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_record_keeps_up_with_runs_arriving_faster_than_a_batch_a_linger() {
    let store: Arc<dyn EventStore> = Arc::new(MemoryStore::new(Limits::default()));
    let recorder = Recorder::new(store);
    recorder.configure(Some(RecordConfig::default()));
    // 30,000 runs at about 50,000 a second: 2,500 every linger (50 ms), and more than the queue
    // (8,192) holds in all, so the writer must take them as they come.
    const BURSTS: usize = 60;
    const BURST: usize = 500;
    for burst in 0..BURSTS {
        for i in 0..BURST {
            let run =
                RunRecord::begin(&format!("r{burst}-{i}"), "http", "local", "noop", json!({}));
            recorder.record(run.end(Ok(Some(&Arc::new(json!({ "ok": true }))))));
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    recorder.settled().await;
    assert_eq!(
        (recorder.written_total(), recorder.dropped_total()),
        ((BURSTS * BURST) as u64, 0),
        "every run written, none dropped"
    );
}

#[tokio::test(flavor = "current_thread")]
async fn runs_waiting_to_be_written_hold_at_most_eight_mib_of_args_past_which_they_are_dropped() {
    let store: Arc<dyn EventStore> = Arc::new(MemoryStore::new(Limits::default()));
    let recorder = Recorder::new(store);
    recorder.configure(Some(RecordConfig::default()));
    // 2,000 runs of 100 KB args while the writer cannot run (this thread never yields): whole,
    // they would hold 200 MB. Each is cut to the record's 16 KiB before it waits, and the
    // queue takes 8 MiB of them.
    let args = json!({ "text": "x".repeat(100_000) });
    const RUNS: u64 = 2000;
    for i in 0..RUNS {
        let run = RunRecord::begin(&format!("big-{i}"), "ws", "local", "echo", args.clone());
        recorder.record(run.end(Ok(Some(&Arc::new(json!({ "ok": true }))))));
    }
    recorder.settled().await;
    let (written, dropped) = (recorder.written_total(), recorder.dropped_total());
    assert_eq!(
        written + dropped,
        RUNS,
        "each run written or counted as dropped"
    );
    let fits = 8 * 1024 * 1024 / (16 * 1024);
    assert!(
        written <= fits && written >= fits * 9 / 10,
        "{written} runs waited: about 8 MiB of 16 KiB payloads is {fits}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn runs_are_written_in_the_order_they_ended_whichever_thread_ended_them() {
    let store = Arc::new(MemoryStore::new(Limits::default()));
    let recorder = Arc::new(Recorder::new(store.clone()));
    recorder.configure(Some(RecordConfig::default()));
    let run = |id: &str| RunRecord::begin(id, "http", "local", "noop", json!({})).end(Ok(None));
    // Each thread keeps its runs in a buffer of its own until the writer takes them all. Thread
    // B takes a buffer before thread A does, then records again after A: its second run is the
    // newest, though its buffer comes before A's.
    let (to_b, todo) = std::sync::mpsc::channel::<&'static str>();
    let (done, recorded) = std::sync::mpsc::channel();
    let b = {
        let recorder = recorder.clone();
        std::thread::spawn(move || {
            for id in todo {
                recorder.record(run(id));
                done.send(()).unwrap();
            }
        })
    };
    recorder.record(run("first"));
    to_b.send("b-1").unwrap();
    recorded.recv().unwrap();
    let a = recorder.clone();
    std::thread::spawn(move || a.record(run("a-1")))
        .join()
        .unwrap();
    to_b.send("b-2").unwrap();
    recorded.recv().unwrap();
    drop(to_b);
    b.join().unwrap();
    recorder.settled().await;
    let listed = store
        .runs(&RunFilter {
            limit: 10,
            ..RunFilter::default()
        })
        .await
        .unwrap();
    let ids: Vec<&str> = listed.iter().map(|r| r.id.as_str()).collect();
    assert_eq!(ids, ["b-2", "a-1", "b-1", "first"], "newest first");
}
