//! What every HTTP handler shares: the gateway, the settings, and what is derived from them.

use std::sync::Arc;

use crate::config::http::HttpConfig;
use crate::gateway::Gateway;
use crate::gateway::http::auth::PublicPaths;
use crate::gateway::http::hosts::AllowedHosts;
use crate::gateway::http::startup::BindError;
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
    pub sessions: crate::gateway::http::session_cookie::SessionSecrets,
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
        doors: Vec<Arc<dyn HttpDoor>>,
    ) -> Result<AppState, BindError> {
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
        let gateway_store = {
            use crate::events::KernelBus;
            gateway.kernel.bus().store().clone()
        };
        Ok(AppState(Arc::new(Shared {
            gateway,
            config,
            public,
            hosts,
            trusted,
            policy,
            doors,
            stopping: Default::default(),
            background: Default::default(),
            sessions: crate::gateway::http::session_cookie::SessionSecrets::new(gateway_store),
        })))
    }
}
