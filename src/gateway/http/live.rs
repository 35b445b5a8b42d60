//! What a reload changes in a running HTTP server: the keys and their scopes, the settings each
//! request reads (request and body timeouts, body limit, rate limit, CORS, allowed hosts, public
//! paths, hidden skills), the project's web routes and the routes of the doors served on the
//! listener (webhooks), put in force for the next request while requests in flight finish on
//! what they started with. Settings bound to the listener or to
//! the doors' workers are kept as they run and named, so the caller can say they need a restart.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use arc_swap::ArcSwap;
use axum::Router;
use parking_lot::Mutex;

use crate::config::errors::ConfigErrors;
use crate::config::http::HttpConfig;
use crate::config::values::share_fits;
use crate::gateway::http::listen::{LiveServing, Serving};
use crate::gateway::http::routes;
use crate::gateway::http::server::{build_router, check_door_paths};
use crate::gateway::http::state::AppState;

/// A running server's state and what serves its requests.
pub struct Live {
    serving: LiveServing,
    state: Mutex<AppState>,
    project: PathBuf,
}

impl Live {
    pub(super) fn new(state: AppState, router: Router, project: &Path) -> Live {
        let serving = Serving {
            router,
            body_timeout: state.config.body_timeout,
            body_limit: state.config.body_limit,
        };
        Live {
            serving: Arc::new(ArcSwap::from_pointee(serving)),
            state: Mutex::new(state),
            project: project.to_path_buf(),
        }
    }

    /// The state in force.
    pub(super) fn state(&self) -> AppState {
        self.state.lock().clone()
    }

    pub(super) fn serving(&self) -> LiveServing {
        self.serving.clone()
    }
}

/// Puts new settings in force in a running server (what `serve` does on a reload); cheap to
/// clone.
#[derive(Clone)]
pub struct Reconfigure(pub(super) Arc<Live>);

/// What [`Reconfigure::apply`] did.
#[derive(Debug, Default)]
pub struct Applied {
    /// Settings given new values that only a restart applies (kept as they run).
    pub need_restart: Vec<&'static str>,
}

impl Reconfigure {
    /// Puts `config` in force: new requests are served with its keys, scopes and settings and
    /// the project's web routes as the skills now declare them; a key it drops or changes is
    /// revoked (its open streams close, its stored work pauses). Everything is checked first:
    /// on a mistake nothing changes and the mistake is returned.
    pub fn apply(&self, mut config: HttpConfig) -> Result<Applied, String> {
        let live = &self.0;
        let mut state = live.state.lock();
        let need_restart = keep_restart_settings(&state.config, &mut config);
        // The body budget takes a restart: a body limit it cannot hold whole waits for one too.
        let mut short = ConfigErrors::default();
        share_fits(
            &mut short,
            ("http.total-body-bytes", "http.peer-body-bytes"),
            (config.total_body_bytes, config.peer_body_bytes),
            ("body-limit", config.body_limit),
        );
        if !short.is_empty() {
            return Err(format!(
                "{short} (the running value: it takes a restart, so `http.body-limit` may not rise past it in a reload)"
            ));
        }
        let index = state.gateway.kernel.registry().current();
        let web_routes = routes::collect(&index, &live.project).map_err(|e| e.to_string())?;
        // A trial with the keys as given: a mistake found here leaves the keys as they were.
        let trial = state
            .with_config(config.clone())
            .map_err(|e| e.to_string())?;
        drop(build_router(&trial, &web_routes).map_err(|e| e.to_string())?);
        drop(trial);
        // The web routes clear of the doors' paths; then the doors served here take what the
        // skills declare now (webhook routes), each kept off the paths the web routes and the
        // other doors serve: the last change, so a mistake before it changed nothing.
        check_door_paths(&web_routes, &state.doors).map_err(|e| e.to_string())?;
        for (i, door) in state.doors.iter().enumerate() {
            let others: Vec<String> = (state.doors.iter().enumerate())
                .filter(|(j, _)| *j != i)
                .flat_map(|(_, d)| d.paths().into_iter().map(|(_, path)| path))
                .collect();
            let taken = |path: &str| {
                routes::is_served(&web_routes, path) || others.iter().any(|p| p == path)
            };
            door.clone().reload((&index, &live.project), &taken)?;
        }
        config.keys = state.keys.replace(config.keys);
        let next = state.with_config(config).map_err(|e| e.to_string())?;
        let router = build_router(&next, &web_routes).map_err(|e| e.to_string())?;
        live.serving.store(Arc::new(Serving {
            router,
            body_timeout: next.config.body_timeout,
            body_limit: next.config.body_limit,
        }));
        *state = next;
        Ok(Applied { need_restart })
    }
}

/// Sets in `next` the running values of what a restart alone changes, and names those `next`
/// wanted changed.
fn keep_restart_settings(running: &HttpConfig, next: &mut HttpConfig) -> Vec<&'static str> {
    let mut changed = Vec::new();
    crate::gateway::restart::keep_running!(running, next, changed;
        bind => "http.bind",
        grace => "http.grace",
        drain => "http.drain",
        header_timeout => "http.header-timeout",
        max_connections => "http.max-connections",
        max_connections_per_peer => "http.max-connections-per-peer",
        max_runs => "http.max-runs",
        max_args_in_flight => "http.max-args-in-flight",
        total_body_bytes => "http.total-body-bytes",
        peer_body_bytes => "http.peer-body-bytes",
        trusted_proxies => "http.trusted-proxies",
    );
    if format!("{:?}", running.websocket) != format!("{:?}", next.websocket) {
        changed.push("websocket");
        next.websocket = running.websocket.clone();
    }
    changed
}
