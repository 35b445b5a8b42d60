//! A door's life on a [`Host`], whichever way it takes work in: started when the server runs,
//! closed when it stops, drained within the shutdown grace. A door served on the HTTP listener
//! also implements [`HttpDoor`](crate::gateway::served::HttpDoor), and the HTTP server runs
//! its life; a door on its own (email, Slack in Socket Mode without HTTP, a door an embedding
//! program adds) runs as a transport of its own through [`Hosted`].

use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;
use tokio_util::sync::CancellationToken;

use crate::gateway::Host;
use crate::gateway::transport::{Report, State, Transport};

pub trait Door: Send + Sync + 'static {
    /// Its name in logs and `/readyz` (`email`, `slack`).
    fn name(&self) -> &'static str;

    /// The server runs: start the door's work (listeners, workers, its own connections) on
    /// `host`'s background tracker, until `host.stopping`.
    fn start(self: Arc<Self>, host: &Host) {
        let _ = host;
    }

    /// Shutdown began: take no new connections or work.
    fn begin_close(&self) {}

    /// Invocations running through the door now (counted as abandoned when the shutdown grace
    /// runs out).
    fn in_flight(&self) -> i64 {
        0
    }

    /// Resolves once the door's connections are done (after [`Door::begin_close`]).
    fn drained(&self) -> BoxFuture<'_, ()> {
        Box::pin(async {})
    }
}

/// A door run as a transport of its own, on a host of its own (its stopping signal and its
/// tracker of background work; the gateway and policy shared with every other door).
pub struct Hosted {
    door: Arc<dyn Door>,
    host: Host,
}

impl Hosted {
    pub fn new(door: Arc<dyn Door>, host: Host) -> Hosted {
        Hosted { door, host }
    }
}

#[async_trait::async_trait]
impl Transport for Hosted {
    fn name(&self) -> &'static str {
        self.door.name()
    }

    async fn run(self: Box<Self>, stop: CancellationToken, grace: Duration) -> Report {
        let Hosted { door, host } = *self;
        let name = door.name();
        door.clone().start(&host);
        stop.cancelled().await;
        host.gateway.readiness.set(name, State::Stopping);
        host.stopping.cancel();
        door.begin_close();
        host.background.close();
        let drained = async {
            door.drained().await;
            host.background.wait().await;
        };
        match tokio::time::timeout(grace, drained).await {
            Ok(()) => Report {
                transport: name,
                drained: true,
                abandoned: 0,
            },
            Err(_) => {
                let abandoned = door.in_flight() + host.background.len() as i64;
                tracing::warn!(
                    transport = name,
                    grace_ms = grace.as_millis() as u64,
                    abandoned,
                    "the shutdown grace period ran out; aborting the door's runs"
                );
                host.gateway.halt();
                Report {
                    transport: name,
                    drained: false,
                    abandoned,
                }
            }
        }
    }
}
