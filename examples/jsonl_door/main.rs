//! A door added from outside skillgate: serves a project's skills over HTTP (as `serve` does)
//! and over the line-delimited JSON door of `door.rs`, through the library's `Doors` builder.
//!
//! ```sh
//! cargo run --example jsonl_door -- ./my-project
//! printf '{"id":1,"skill":"hello","args":{"name":"Ada"}}\n' | nc 127.0.0.1 7070
//! ```

mod door;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use skillgate::gateway::Gateway;
use skillgate::gateway::http::HttpConfig;
use skillgate::gateway::keys::KeyRing;
use skillgate::gateway::metrics::Metrics;
use skillgate::server::{DoorSettings, Doors};

#[tokio::main]
async fn main() {
    let project = std::env::args()
        .nth(1)
        .map_or_else(|| PathBuf::from("."), PathBuf::from);
    let kernel = skillgate::builtins::builder(&project).build();
    let gateway = Gateway::new(kernel, Arc::new(Metrics::new()));
    // No keys: loopback only, one local caller (as `serve` on its defaults).
    let jsonl = door::JsonlDoor::bind(([127, 0, 0, 1], 7070).into(), KeyRing::default())
        .await
        .expect("listen on 127.0.0.1:7070");
    let doors = Doors::bind(gateway, DoorSettings::http(HttpConfig::default()), &project)
        .await
        .unwrap_or_else(|err| panic!("{err}"))
        .with(jsonl.clone());
    eprintln!(
        "serving http://{} and jsonl://{}",
        doors.http_addr().expect("HTTP"),
        jsonl.local_addr()
    );
    let shutdown = async {
        let _ = tokio::signal::ctrl_c().await;
        "SIGINT".to_string()
    };
    let report = doors.run_until(shutdown, Duration::from_secs(10)).await;
    eprintln!("stopped (drained: {})", report.drained);
}
