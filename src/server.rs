//! One server's doors, bound from its settings and run together: HTTP with the doors served on
//! its listener (the WebSocket endpoint, Slack's Events API, webhooks, MCP), email on a host of
//! its own, Slack in Socket Mode on its own when HTTP is off, and any door an embedding program
//! adds. What `skillgate serve`, the tests and the benches start.

use std::future::Future;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use crate::config::ConfigErrors;
use crate::config::env::Vars;
use crate::config::slack::SlackConfig;
use crate::events::KernelBus;
use crate::gateway::door::{Door, Hosted};
use crate::gateway::email::EmailSettings;
use crate::gateway::http::HttpConfig;
use crate::gateway::policy::Policy;
use crate::gateway::served::HttpDoor;
use crate::gateway::slack::SlackSettings;
use crate::gateway::transport::{self, Report, StartError, Transport};
use crate::gateway::{Gateway, Host, email, http, slack, webhook, ws};
use crate::mcp::http::McpDoor;
use crate::skills::index::SearchIndex;

/// What the doors are asked to be.
#[derive(Debug, Clone)]
pub struct DoorSettings {
    /// HTTP's settings; its request timeout and `expose-hidden` hold for every door.
    pub http: HttpConfig,
    /// False: no HTTP listener (`serve --no-http`); email and Slack in Socket Mode still run.
    pub serve_http: bool,
    /// The `slack:` section of the config file (the main skill's `metadata.slack` and Slack's
    /// variables are added when the door is made).
    pub slack: SlackSettings,
    /// The `email:` section of the config file.
    pub email: EmailSettings,
    /// Where the operations listener listens (`/healthz`, `/readyz`, `/metrics`, no key), if
    /// anywhere.
    pub ops: Option<SocketAddr>,
    /// Where Slack's and email's variables are read [default: the process environment].
    pub vars: Vars,
}

impl DoorSettings {
    /// HTTP alone with `http` (and the doors on its listener its settings ask for).
    pub fn http(http: HttpConfig) -> DoorSettings {
        DoorSettings {
            http,
            serve_http: true,
            slack: SlackSettings::default(),
            email: EmailSettings::default(),
            ops: None,
            vars: Vars::process(),
        }
    }

    /// Resolves the settings of the doors beside HTTP (Slack with the main skill's
    /// `metadata.slack` and Slack's variables, email with its variables), checks the skills
    /// their routes name and, without HTTP, that Slack can use Socket Mode: every mistake at
    /// once, each under its setting's path.
    pub fn resolve(&self, index: &SearchIndex, project: &Path) -> Result<Resolved, ConfigErrors> {
        let mut errors = ConfigErrors::default();
        let mut collect = |more: ConfigErrors| errors.extend(more);
        let slack = slack::setup::resolve(index, project, self.slack.clone(), &self.vars)
            .unwrap_or_else(|more| {
                collect(more);
                None
            });
        let email =
            email::setup::resolve(index, self.email.clone(), &self.vars).unwrap_or_else(|more| {
                collect(more);
                None
            });
        if !self.serve_http && slack.as_ref().is_some_and(|s| s.app_token.is_none()) {
            errors.at(
                "slack.app-token",
                "without HTTP (--no-http) Slack reaches the server only by Socket Mode: set SLACK_APP_TOKEN (or slack.app-token)",
            );
        }
        errors.or_ok(Resolved { slack, email })
    }
}

/// The settings of the doors beside HTTP, resolved and checked ([`DoorSettings::resolve`]).
pub struct Resolved {
    slack: Option<SlackConfig>,
    email: Option<email::setup::Resolved>,
}

/// The door whose setting the first of `errors` is.
fn door_of(errors: &ConfigErrors) -> &'static str {
    let path = errors.0.first().map_or("", |e| e.path.as_str());
    if path.starts_with("email") {
        email::NAME
    } else if path.starts_with("slack") || path.starts_with("metadata.slack") {
        slack::NAME
    } else {
        http::NAME
    }
}

/// The doors of one server, bound (listeners open, settings checked), not yet serving.
pub struct Doors {
    gateway: Gateway,
    transports: Vec<Box<dyn Transport>>,
    /// The door hosts' shared parts, for doors added later.
    policy: Policy,
    timeout: Duration,
    http: Option<SocketAddr>,
    /// What reloads HTTP's settings while it serves.
    reconfigure: Option<http::Reconfigure>,
    smtp: Option<SocketAddr>,
    /// The email door, whose routes and certificate a reload changes.
    email: Option<Arc<email::Email>>,
    /// The Slack door, whose routes a reload changes.
    slack: Option<Arc<slack::Slack>>,
    /// Run apart from the doors: stopped once they are done, so probes see them drain.
    ops: Option<http::OpsListener>,
}

/// How a shutdown went, every door together.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShutdownReport {
    /// True when every door's in-flight work finished within the grace period.
    pub drained: bool,
    /// Work still running when the grace ran out, over every door (0 when drained).
    pub abandoned: i64,
    /// Each door's own report, in the order the doors were bound.
    pub doors: Vec<Report>,
}

impl ShutdownReport {
    fn of(doors: Vec<Report>) -> ShutdownReport {
        ShutdownReport {
            drained: doors.iter().all(|r| r.drained),
            abandoned: doors.iter().map(|r| r.abandoned).sum(),
            doors,
        }
    }
}

impl Doors {
    /// Checks the settings and binds every door they ask for; the first door that refuses
    /// names itself in the error.
    pub async fn bind(
        gateway: Gateway,
        settings: DoorSettings,
        project: &Path,
    ) -> Result<Doors, StartError> {
        let index = gateway.kernel.registry().current();
        let resolved = settings
            .resolve(&index, project)
            .map_err(|errors| StartError::config(door_of(&errors), errors.to_string()))?;
        Doors::open(gateway, settings, resolved, project).await
    }

    /// Binds every door `settings` ask for, with the doors beside HTTP already resolved
    /// ([`DoorSettings::resolve`], which reported every mistake at once).
    pub async fn open(
        gateway: Gateway,
        settings: DoorSettings,
        Resolved { slack, email }: Resolved,
        project: &Path,
    ) -> Result<Doors, StartError> {
        let index = gateway.kernel.registry().current();
        let DoorSettings {
            http: config,
            serve_http,
            ops,
            ..
        } = settings;
        // Stored work of a key runs with the key's grants of now, and pauses while it is gone:
        // whichever doors run, the keys are the server's.
        let keys = crate::gateway::keys::LiveKeys::new(config.keys.clone());
        if let Some(directory) = gateway.kernel.extension::<crate::kernel::authority::Keys>() {
            directory.install(Arc::new(keys.clone()));
        }
        let policy = Policy::new(&config.expose_hidden)
            .map_err(|e| StartError::config(http::NAME, e.to_string()))?;
        let timeout = config.timeout;
        let slack = match slack {
            Some(config) => Some(
                slack::setup::open(&gateway, config)
                    .await
                    .map_err(|e| StartError::runtime(slack::NAME, e))?,
            ),
            None => None,
        };
        let mut doors = Doors {
            gateway: gateway.clone(),
            transports: Vec::new(),
            policy,
            timeout,
            http: None,
            reconfigure: None,
            smtp: None,
            email: None,
            slack: slack.clone(),
            ops: None,
        };
        if let Some(addr) = ops {
            doors.ops = Some(http::OpsListener::bind(gateway.clone(), addr, &keys).await?);
        }
        if serve_http {
            let mut served: Vec<Arc<dyn HttpDoor>> = Vec::new();
            if let Some(slack) = slack {
                served.push(slack);
            }
            if config.websocket.enabled {
                served.push(Arc::new(ws::Hub::new(
                    config.websocket.clone(),
                    gateway.metrics.ws(),
                )));
            }
            let web_routes = http::routes::collect(&index, project)
                .map_err(|e| http::BindError::from(e).for_transport())?;
            let taken = |path: &str| http::routes::is_served(&web_routes, path);
            if let Some(webhooks) =
                webhook::Webhooks::configure(&gateway, &index, project, &taken).await?
            {
                served.push(webhooks);
            }
            served.push(Arc::new(McpDoor));
            let server =
                http::Server::bind((gateway.clone(), config, keys), web_routes, served, project)
                    .await
                    .map_err(http::BindError::for_transport)?;
            doors.http = Some(server.local_addr());
            doors.reconfigure = Some(server.reconfigure());
            doors.transports.push(Box::new(server));
        } else if let Some(slack) = slack {
            doors = doors.with(slack);
        }
        if let Some(resolved) = email {
            let email = email::setup::open(&gateway, resolved)
                .await
                .map_err(|e| StartError::runtime(email::NAME, e))?;
            doors.smtp = email.addr;
            doors.email = Some(email.clone());
            doors = doors.with(email);
        }
        Ok(doors)
    }

    /// Adds a door of its own (not served on the HTTP listener): it runs on a host of its own,
    /// with the gateway, policy and run timeout every door shares.
    pub fn with(mut self, door: Arc<dyn Door>) -> Doors {
        let host = Host {
            gateway: self.gateway.clone(),
            policy: self.policy.clone(),
            timeout: self.timeout,
            stopping: CancellationToken::new(),
            background: Default::default(),
        };
        self.transports.push(Box::new(Hosted::new(door, host)));
        self
    }

    /// Where HTTP listens (none with HTTP off).
    pub fn http_addr(&self) -> Option<SocketAddr> {
        self.http
    }

    /// What puts new HTTP settings in force while the server runs (none with HTTP off).
    pub fn reconfigure(&self) -> Option<http::Reconfigure> {
        self.reconfigure.clone()
    }

    /// The email door, when it runs: a reload gives its intake new routes
    /// ([`email::intake::Intake::reroute`]) and reads its certificate again
    /// ([`email::tls::LiveCert::reload`]).
    pub fn email(&self) -> Option<Arc<email::Email>> {
        self.email.clone()
    }

    /// The Slack door, when it runs: a reload gives its intake new routes
    /// ([`slack::intake::Intake::reroute`]).
    pub fn slack(&self) -> Option<Arc<slack::Slack>> {
        self.slack.clone()
    }

    /// Where the email door's SMTP listener listens, when it is configured.
    pub fn email_addr(&self) -> Option<SocketAddr> {
        self.smtp
    }

    /// Where the operations listener listens, when it is asked for.
    pub fn ops_addr(&self) -> Option<SocketAddr> {
        self.ops.as_ref().and_then(http::OpsListener::local_addr)
    }

    /// Serves until `shutdown` resolves with its reason (`SIGTERM`), then stops every door,
    /// announces `shutdown` once, drains within `grace` and closes the bus. Ends early, with
    /// every door's report, if the doors all stop on their own.
    pub async fn run_until(
        self,
        shutdown: impl Future<Output = String> + Send,
        grace: Duration,
    ) -> ShutdownReport {
        let kernel = self.gateway.kernel.clone();
        let ops_stop = CancellationToken::new();
        let ops = self
            .ops
            .map(|ops| tokio::spawn(Box::new(ops).run(ops_stop.clone(), grace)));
        let stop = CancellationToken::new();
        let mut running = tokio::spawn(transport::run_all(self.transports, stop.clone(), grace));
        let reports = tokio::select! {
            reason = shutdown => {
                stop.cancel();
                crate::shutdown::announce_reason(&kernel, &reason).await;
                running.await
            }
            reports = &mut running => reports,
        };
        kernel.bus().shutdown();
        ops_stop.cancel();
        if let Some(ops) = ops {
            let _ = ops.await;
        }
        ShutdownReport::of(reports.unwrap_or_else(|err| {
            tracing::error!(error = %err, "the doors' task failed");
            Vec::new()
        }))
    }
}
