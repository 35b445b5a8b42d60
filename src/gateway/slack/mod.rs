//! The Slack transport: mentions, DMs and the channel messages a route listens to run skills,
//! and the answer goes in the thread. Events come over the Events API (`POST /slack/events`,
//! signed) or Socket Mode (a WebSocket the bot opens), go through one intake (once per
//! `event_id` across replicas, durably queued), and a worker runs them and answers with the Web
//! API.
//!
//! its settings are `crate::config::slack`; [`api`] (the Web API and its manners), [`intake`] (which events, which
//! route), [`events`] (the Events API endpoint), [`socket`] (Socket Mode), [`worker`] (runs and
//! answers), [`reply`] (how an answer is posted), [`mrkdwn`] (markdown to Slack's format),
//! [`setup`] (the settings put together at start).

pub mod api;

pub mod events;
pub mod intake;
pub mod mrkdwn;
pub mod reply;
pub mod setup;
pub mod socket;
pub mod worker;

use std::sync::Arc;
use std::time::Duration;

use tokio_util::sync::CancellationToken;

pub use crate::config::slack::{SlackConfig, SlackSettings};

use axum::Router;
use axum::routing::post;

use crate::gateway::Gateway;
use crate::gateway::Host;
use crate::gateway::door::Door;
use crate::gateway::served::{HttpDoor, Listener};
use crate::gateway::slack::api::WebApi;
use crate::gateway::slack::intake::Intake;
use crate::gateway::transport::State;

/// The transport's name (`nonlocals.gateway.transport`, `/readyz`).
pub const NAME: &str = "slack";

/// The Slack side of one server.
pub struct Slack {
    pub config: Arc<SlackConfig>,
    pub api: WebApi,
    pub intake: Intake,
}

impl Slack {
    pub fn new(gateway: &Gateway, config: SlackConfig) -> Slack {
        let config = Arc::new(config);
        Slack {
            api: WebApi::new(&config.api_url, &config.bot_token, config.post_interval),
            intake: Intake::new(gateway.clone(), config.clone()),
            config,
        }
    }

    /// Starts the identity check, Socket Mode (with an app token) and the worker on the
    /// server's background tracker, until the server stops.
    pub fn start(self: &Arc<Self>, host: &Host) {
        let (gateway, stop, tracker) = (&host.gateway, &host.stopping, &host.background);
        gateway.readiness.set(NAME, State::Starting);
        let slack = self.clone();
        let (who, stopping) = (gateway.clone(), stop.clone());
        tracker.spawn(async move { slack.identify(&who, stopping).await });
        if let Some(app_token) = self.config.app_token.clone() {
            tracker.spawn(socket::run(
                self.clone(),
                gateway.clone(),
                app_token,
                stop.clone(),
            ));
        }
        crate::gateway::queue::spawn_jobs(host, worker::lane(), self.clone(), worker::run);
    }

    /// `auth.test` until it answers: the bot's user id (to ignore its own messages and remove
    /// its mention), and readiness; a refused token is shown as `unauthorized`.
    async fn identify(&self, gateway: &Gateway, stop: CancellationToken) {
        let mut wait = Duration::from_secs(1);
        loop {
            match self.api.auth_test().await {
                Ok(identity) => {
                    tracing::info!(
                        bot = identity.user,
                        user_id = identity.user_id,
                        team = identity.team,
                        "Slack: signed in"
                    );
                    self.intake.set_identity(identity);
                    gateway.readiness.set(NAME, State::Ready);
                    return;
                }
                Err(err) if err.is_auth() => {
                    tracing::error!(error = %err, "Slack refused the bot token");
                    self.auth_failed(gateway);
                    return;
                }
                Err(err) => {
                    tracing::warn!(error = %err, "Slack auth.test failed; trying again");
                    gateway.readiness.set(NAME, State::Down);
                }
            }
            tokio::select! {
                () = stop.cancelled() => return,
                () = tokio::time::sleep(wait) => {}
            }
            wait = (wait * 2).min(Duration::from_secs(60));
        }
    }

    /// Slack refused the token: `/readyz` says so.
    pub fn auth_failed(&self, gateway: &Gateway) {
        gateway.readiness.set(NAME, State::Unauthorized);
    }
}

impl Slack {
    /// Where the Events API is served: only with a signing secret to check its requests by.
    fn events_path(&self) -> Option<&str> {
        self.config
            .signing_secret
            .as_ref()
            .map(|_| self.config.events_path.as_str())
    }
}

/// Served on the HTTP listener: the Events API endpoint (with a signing secret), which
/// authenticates by Slack's signature rather than an API key.
impl HttpDoor for Slack {
    fn routes(self: Arc<Self>, listener: &Listener) -> Router {
        let Some(path) = self.events_path().map(str::to_string) else {
            return Router::new();
        };
        Router::new()
            .route(&path, post(events::events))
            .with_state(events::Endpoint {
                slack: self,
                body_limit: listener.body_limit,
            })
    }

    fn paths(&self) -> Vec<(String, String)> {
        self.events_path()
            .map(|path| ("slack.events-path".to_string(), path.to_string()))
            .into_iter()
            .collect()
    }

    fn authenticates_in_band(&self, path: &str) -> bool {
        self.events_path() == Some(path)
    }
}

/// Slack's life: its identity check, Socket Mode and its worker, started by the HTTP server
/// (which also serves its Events API), or on a host of its own without HTTP.
impl Door for Slack {
    fn name(&self) -> &'static str {
        NAME
    }

    fn start(self: Arc<Self>, host: &Host) {
        Slack::start(&self, host);
    }
}
