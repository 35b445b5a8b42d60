//! A server for a harness: the contract's project with its natives, the doors its settings ask
//! for and the door under test added the way an embedding program adds its own
//! ([`Doors::with`]), serving on a task of its own until the harness stops it.

use std::net::SocketAddr;
use std::sync::Arc;

use tokio::sync::oneshot;
use tokio::task::JoinHandle;

use crate::Kernel;
use crate::contract::{Project, Setup, natives};
use crate::gateway::Gateway;
use crate::gateway::door::Door;
use crate::gateway::metrics::Metrics;
use crate::server::{DoorSettings, Doors, ShutdownReport};

/// A running server; dropping it without [`Server::finish`] leaves it serving until the
/// runtime ends.
pub struct Server {
    pub kernel: Kernel,
    /// Where HTTP listens, when the settings serve it.
    pub http: Option<SocketAddr>,
    stop: Option<oneshot::Sender<String>>,
    running: JoinHandle<ShutdownReport>,
    _project: Project,
}

impl Server {
    /// Starts `project` with the contract's natives (the `held` of `setup`), the doors of
    /// `settings`, and `doors` beside them.
    pub async fn start(
        project: Project,
        settings: DoorSettings,
        setup: &Setup,
        doors: Vec<Arc<dyn Door>>,
    ) -> Server {
        let mut builder = project.builder();
        for tool in natives(&setup.held) {
            builder = builder.native(tool);
        }
        let kernel = builder.build();
        let gateway = Gateway::new(kernel.clone(), Arc::new(Metrics::new()));
        let grace = settings.http.grace;
        let mut bound = Doors::bind(gateway, settings, project.path())
            .await
            .expect("the server binds");
        for door in doors {
            bound = bound.with(door);
        }
        let http = bound.http_addr();
        let (stop, stopped) = oneshot::channel::<String>();
        let running = tokio::spawn(bound.run_until(
            async move { stopped.await.unwrap_or_else(|_| "harness dropped".into()) },
            grace,
        ));
        Server {
            kernel,
            http,
            stop: Some(stop),
            running,
            _project: project,
        }
    }

    /// Tells every door to stop: no new work is taken, work in flight may finish.
    pub fn begin_shutdown(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send("the harness stopped the server".into());
        }
    }

    /// Stops the server (if not yet told) and waits; true when everything in flight drained
    /// within the grace period.
    pub async fn finish(mut self) -> bool {
        self.begin_shutdown();
        self.running.await.map(|r| r.drained).unwrap_or(false)
    }
}
