//! What every HTTP handler shares: the gateway, the settings, and what is derived from them.

use std::sync::Arc;

use globset::{Glob, GlobSet, GlobSetBuilder};

use crate::gateway::Gateway;
use crate::gateway::http::auth::{Caller, PublicPaths};
use crate::gateway::http::config::HttpConfig;
use crate::gateway::http::hosts::AllowedHosts;
use crate::skills::tool::Tool;

/// Cheap to clone (one reference count): axum clones the state for every layer and extractor
/// of every request.
#[derive(Clone)]
pub struct AppState(Arc<Shared>);

pub struct Shared {
    pub gateway: Gateway,
    pub config: HttpConfig,
    pub public: PublicPaths,
    pub hosts: AllowedHosts,
    exposed: GlobSet,
}

impl std::ops::Deref for AppState {
    type Target = Shared;

    fn deref(&self) -> &Shared {
        &self.0
    }
}

impl AppState {
    pub fn new(gateway: Gateway, config: HttpConfig) -> Result<AppState, String> {
        let public = PublicPaths::new(&config.public)?;
        let hosts = AllowedHosts::new(&config.allowed_hosts)?;
        let mut exposed = GlobSetBuilder::new();
        for pattern in &config.expose_hidden {
            exposed.add(
                Glob::new(pattern)
                    .map_err(|e| format!("expose-hidden pattern `{pattern}`: {e}"))?,
            );
        }
        Ok(AppState(Arc::new(Shared {
            gateway,
            config,
            public,
            hosts,
            exposed: exposed.build().map_err(|e| e.to_string())?,
        })))
    }

    /// True when `tool` may be reached over HTTP: a public skill, or one the config exposes.
    /// Hidden skills and middleware (which only make sense around a served skill) are not.
    pub fn visible(&self, tool: &Tool) -> bool {
        let middleware =
            tool.decl.get("role").and_then(serde_json::Value::as_str) == Some("middleware");
        !(tool.hidden || middleware) || self.exposed.is_match(&tool.name)
    }

    /// True when `tool` is visible and `caller` may invoke it: what `/skills` shows a caller.
    /// No caller means authentication is off.
    pub fn callable(&self, tool: &Tool, caller: Option<&Caller>) -> bool {
        self.visible(tool) && caller.is_none_or(|c| c.allows(&tool.name))
    }
}
