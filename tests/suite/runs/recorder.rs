//! The recorder under load: it keeps up with runs arriving faster than one batch a linger.

use std::sync::Arc;
use std::time::Duration;

use serde_json::json;
use skillgate::events::memory::MemoryStore;
use skillgate::events::runs::{RecordConfig, Recorder, RunRecord};
use skillgate::events::{EventStore, Limits};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_record_keeps_up_with_runs_arriving_faster_than_a_batch_a_linger() {
    let store: Arc<dyn EventStore> = Arc::new(MemoryStore::new(Limits::default()));
    let recorder = Recorder::new(store);
    recorder.configure(Some(RecordConfig::default()));
    // 30,000 runs at about 50,000 a second: more than a batch (1,024) every linger (50 ms), and
    // more than the queue (8,192) holds while a writer waits a linger per batch.
    const BURSTS: usize = 60;
    const BURST: usize = 500;
    for burst in 0..BURSTS {
        for i in 0..BURST {
            let run =
                RunRecord::begin(format!("r{burst}-{i}"), "http", "local", "noop", &json!({}));
            recorder.record(run.end(Ok(Some(&json!({ "ok": true })))));
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
