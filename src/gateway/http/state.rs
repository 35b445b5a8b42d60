//! What every HTTP handler shares: the gateway, the settings, and what is derived from them.

use std::sync::Arc;

use crate::config::http::HttpConfig;
use crate::gateway::Gateway;
use crate::gateway::http::auth::PublicPaths;
use crate::gateway::http::hosts::AllowedHosts;
use crate::gateway::http::startup::BindError;
use crate::gateway::keys::{Caller, LiveKeys};
use crate::gateway::policy::Policy;
use crate::gateway::served::HttpDoor;

/// Cheap to clone (one reference count): axum clones the state for every layer and extractor
/// of every request.
#[derive(Clone)]
pub struct AppState(Arc<Shared>);

pub struct Shared {
    pub gateway: Gateway,
    pub config: HttpConfig,
    pub public: PublicPaths,
    pub hosts: AllowedHosts,
    /// Proxies whose forwarding headers name the client.
    pub trusted: Arc<crate::gateway::peers::TrustedProxies>,
    /// Which skills callers may reach (`expose-hidden`; keys carry their own scope).
    pub policy: Policy,
    /// The doors served on this listener beside HTTP's own routes (`/ws`).
    pub doors: Vec<Arc<dyn HttpDoor>>,
    /// Cancelled when the server stops: streams that never end by themselves (topics) end.
    pub stopping: tokio_util::sync::CancellationToken,
    /// Webhook workers and their runs, drained at shutdown.
    pub background: tokio_util::task::TaskTracker,
    /// What signs web session cookies (secrets shared by the replicas through the store).
    pub sessions: Arc<crate::gateway::http::session_cookie::SessionSecrets>,
    /// The keys in force, shared with the doors served here (`config.keys` is the same ring,
    /// as it was when this state was made).
    pub keys: LiveKeys,
}

impl std::ops::Deref for AppState {
    type Target = Shared;

    fn deref(&self) -> &Shared {
        &self.0
    }
}

impl AppState {
    /// What the doors this server starts run on.
    pub fn host(&self) -> crate::gateway::Host {
        crate::gateway::Host {
            gateway: self.gateway.clone(),
            policy: self.policy.clone(),
            timeout: self.config.timeout,
            stopping: self.stopping.clone(),
            background: self.background.clone(),
        }
    }

    pub fn new(
        gateway: Gateway,
        config: HttpConfig,
        keys: LiveKeys,
        doors: Vec<Arc<dyn HttpDoor>>,
    ) -> Result<AppState, BindError> {
        let gateway_store = {
            use crate::events::KernelBus;
            gateway.kernel.bus().store().clone()
        };
        let lasting = Lasting {
            gateway,
            doors,
            stopping: Default::default(),
            background: Default::default(),
            sessions: Arc::new(crate::gateway::http::session_cookie::SessionSecrets::new(
                gateway_store,
            )),
            keys,
        };
        AppState::make(lasting, config)
    }

    /// The same server with `config` (a reload): the gateway, the doors, what drains at
    /// shutdown and the session secrets stay.
    pub fn with_config(&self, config: HttpConfig) -> Result<AppState, BindError> {
        let lasting = Lasting {
            gateway: self.gateway.clone(),
            doors: self.doors.clone(),
            stopping: self.stopping.clone(),
            background: self.background.clone(),
            sessions: self.sessions.clone(),
            keys: self.keys.clone(),
        };
        AppState::make(lasting, config)
    }

    fn make(lasting: Lasting, config: HttpConfig) -> Result<AppState, BindError> {
        let Lasting {
            gateway,
            doors,
            stopping,
            background,
            sessions,
            keys,
        } = lasting;
        let public = PublicPaths::new(&config.public)?;
        // On loopback with no names given, only loopback names: a rebinding page is not served.
        let hosts = match AllowedHosts::new(&config.allowed_hosts)? {
            hosts if hosts.is_empty() && config.bind.ip().is_loopback() => AllowedHosts::loopback(),
            hosts => hosts,
        };
        let policy = Policy::new(&config.expose_hidden)?;
        let trusted = crate::gateway::peers::TrustedProxies::new(&config.trusted_proxies)
            .map(Arc::new)
            .map_err(BindError::TrustedProxies)?;
        Ok(AppState(Arc::new(Shared {
            gateway,
            config,
            public,
            hosts,
            trusted,
            policy,
            doors,
            stopping,
            background,
            sessions,
            keys,
        })))
    }
}

/// When a stream a caller follows (a topic, the runs) ends: the server stops, or a reload
/// revokes the key the caller follows it with.
#[derive(Clone)]
pub struct StreamEnd {
    stopping: tokio_util::sync::CancellationToken,
    revoked: Option<tokio_util::sync::CancellationToken>,
}

impl StreamEnd {
    /// A stream `caller` opened on the server of `state`.
    pub fn of(state: &AppState, caller: Option<&Caller>) -> StreamEnd {
        StreamEnd {
            stopping: state.stopping.clone(),
            revoked: match caller {
                Some(Caller::Key(key)) => Some(key.revoked().clone()),
                _ => None,
            },
        }
    }

    /// Ends only when `token` is cancelled.
    pub fn at(token: tokio_util::sync::CancellationToken) -> StreamEnd {
        StreamEnd {
            stopping: token,
            revoked: None,
        }
    }

    /// Waits until the stream must end.
    pub async fn reached(&self) {
        match &self.revoked {
            Some(revoked) => tokio::select! {
                () = self.stopping.cancelled() => {}
                () = revoked.cancelled() => {}
            },
            None => self.stopping.cancelled().await,
        }
    }
}

/// What a server keeps across reloads.
struct Lasting {
    gateway: Gateway,
    doors: Vec<Arc<dyn HttpDoor>>,
    stopping: tokio_util::sync::CancellationToken,
    background: tokio_util::task::TaskTracker,
    sessions: Arc<crate::gateway::http::session_cookie::SessionSecrets>,
    keys: LiveKeys,
}
