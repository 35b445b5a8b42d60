//! The HTTP server: the router with its layers, the listener, and graceful shutdown (stop
//! accepting, drain for a bounded grace period; whoever runs the doors announces `shutdown`).

use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::extract::DefaultBodyLimit;
use axum::http::{HeaderValue, Method, header};
use axum::middleware::from_fn_with_state;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;
use tower_governor::GovernorError;
use tower_governor::governor::GovernorConfigBuilder;
use tower_http::cors::{AllowOrigin, CorsLayer};

use crate::config::http::HttpConfig;
use crate::gateway::http::auth::{self, CallerKey};
use crate::gateway::http::live::{Live, Reconfigure};
use crate::gateway::http::public::PublicDir;
use crate::gateway::http::startup::BindError;
use crate::gateway::http::state::AppState;
use crate::gateway::http::{
    console, dead, descriptors, idempotency, invoke, listen, ops, request_id, routes, runs,
    runs_stream, skills, topics,
};
use crate::gateway::keys::LiveKeys;
use crate::gateway::receiving::Budget;
use crate::gateway::served::{HttpDoor, Listener};
use crate::gateway::transport::{Report, State, Transport};
use crate::gateway::{Gateway, GatewayError};

/// A bound HTTP server, not yet serving.
pub struct Server {
    listener: TcpListener,
    live: Arc<Live>,
}

impl Server {
    /// Builds the router (the project's custom routes, collected by [`routes::collect`], and the
    /// routes of `doors`, the other doors served on this listener) and binds the listener.
    /// [`crate::server::Doors::bind`] does this with the doors the settings ask for.
    /// `keys` are the keys in force (`config.keys` put in force), `project` where the web
    /// routes are collected again on a reload.
    pub async fn bind(
        (gateway, config, keys): (Gateway, HttpConfig, LiveKeys),
        web_routes: Vec<routes::WebRoute>,
        doors: Vec<Arc<dyn HttpDoor>>,
        project: &Path,
    ) -> Result<Server, BindError> {
        check_door_paths(&web_routes, &doors)?;
        let bind = config.bind;
        let state = AppState::new(gateway, config, keys, doors)?;
        let router = build_router(&state, &web_routes)?;
        let listener = TcpListener::bind(bind)
            .await
            .map_err(|source| BindError::Listen { addr: bind, source })?;
        state.gateway.readiness.set(NAME, State::Starting);
        Ok(Server {
            listener,
            live: Arc::new(Live::new(state, router, project)),
        })
    }

    pub fn local_addr(&self) -> SocketAddr {
        self.listener
            .local_addr()
            .unwrap_or_else(|_| self.live.state().config.bind)
    }

    /// What reloads this server's settings while it runs.
    pub fn reconfigure(&self) -> Reconfigure {
        Reconfigure(self.live.clone())
    }

    /// Serves until `stop` is cancelled, then stops accepting and drains for up to `grace`
    /// (whoever runs the doors announces the shutdown, once for all of them).
    async fn serve(self, stop_serving: CancellationToken, grace: Duration) -> Report {
        let Server { listener, live } = self;
        // What lasts across reloads (the doors, the gateway, what drains) is the same in every
        // state a reload makes; the connection limits need a restart.
        let state = live.state();
        let host = state.host();
        for door in &state.doors {
            door.clone().start(&host);
        }
        let stop = CancellationToken::new();
        let config = &state.config;
        let max_connections = descriptors::fit(config.max_connections);
        if max_connections < config.max_connections {
            tracing::warn!(
                max_connections,
                configured = config.max_connections,
                "max-connections lowered to {max_connections}: the process may not open enough files for {} (raise `ulimit -n`)",
                config.max_connections
            );
        }
        let limits = listen::Limits {
            header_timeout: config.header_timeout,
            max_connections,
            per_peer: config.max_connections_per_peer,
            trusted: state.trusted.clone(),
            bodies: Some({
                let gauges = state.gateway.metrics.bodies();
                Budget::new(
                    config.total_body_bytes,
                    config.peer_body_bytes,
                    gauges.receiving,
                    gauges.waiting,
                )
            }),
        };
        let metrics = state.gateway.metrics.clone();
        let readiness = state.gateway.readiness.clone();
        let serve = listen::serve(listener, live.serving(), limits, metrics, stop.clone());
        let mut serving = tokio::spawn(serve);
        readiness.set(NAME, State::Ready);
        tokio::select! {
            () = stop_serving.cancelled() => {}
            ended = &mut serving => {
                readiness.set(NAME, State::Down);
                tracing::error!(?ended, "the HTTP server stopped on its own");
                return Report { transport: NAME, drained: true, abandoned: 0 };
            }
        }
        readiness.set(NAME, State::Stopping);
        stop.cancel();
        state.stopping.cancel();
        // Sockets stop taking work and close once their invocations answered.
        for door in &state.doors {
            door.begin_close();
        }
        state.background.close();
        let sockets = async {
            futures::future::join_all(state.doors.iter().map(|d| d.drained())).await;
            state.background.wait().await;
        };
        let mut served = false;
        let drained = async {
            let _ = (&mut serving).await;
            served = true;
            sockets.await;
        };
        match tokio::time::timeout(grace, drained).await {
            Ok(_) => Report {
                transport: NAME,
                drained: true,
                abandoned: 0,
            },
            Err(_) => {
                let abandoned = state.gateway.metrics.in_flight_now()
                    + state.doors.iter().map(|d| d.in_flight()).sum::<i64>();
                tracing::warn!(
                    grace_ms = grace.as_millis() as u64,
                    abandoned,
                    "the shutdown grace period ran out; aborting {abandoned} in-flight request(s)"
                );
                // Aborted runs answer 503 (or an SSE `error` event); connections that still
                // do not finish are dropped.
                state.gateway.halt();
                if !served
                    && tokio::time::timeout(Duration::from_secs(1), &mut serving)
                        .await
                        .is_err()
                {
                    serving.abort();
                }
                Report {
                    transport: NAME,
                    drained: false,
                    abandoned,
                }
            }
        }
    }
}

/// The transport's name.
pub const NAME: &str = "http";

#[async_trait::async_trait]
impl Transport for Server {
    fn name(&self) -> &'static str {
        NAME
    }

    async fn run(self: Box<Self>, stop: CancellationToken, grace: Duration) -> Report {
        self.serve(stop, grace).await
    }
}

/// Refuses a door's path that a web route or another door already serves.
pub(super) fn check_door_paths(
    web_routes: &[routes::WebRoute],
    doors: &[Arc<dyn HttpDoor>],
) -> Result<(), BindError> {
    let mut clashes = Vec::new();
    let mut served: Vec<String> = Vec::new();
    for (setting, path) in doors.iter().flat_map(|door| door.paths()) {
        if routes::is_served(web_routes, &path) || served.contains(&path) {
            clashes.push(format!("{setting}: `{path}` is already served"));
        }
        served.push(path);
    }
    if clashes.is_empty() {
        Ok(())
    } else {
        Err(BindError::DoorPath(clashes))
    }
}

pub(super) fn build_router(
    state: &AppState,
    web_routes: &[routes::WebRoute],
) -> Result<Router, BindError> {
    let config = &state.config;
    let mut router: Router<AppState> = Router::new()
        .route("/invoke/{skill}", post(invoke::invoke))
        .route("/skills", get(skills::list))
        .route("/skills/{name}", get(skills::describe))
        .route("/healthz", get(ops::healthz))
        .route("/readyz", get(ops::readyz))
        .route("/metrics", get(ops::metrics))
        .route("/openapi.yaml", get(ops::openapi_yaml))
        .route("/openapi.json", get(super::project_openapi::serve))
        .route("/asyncapi.yaml", get(ops::asyncapi_yaml))
        .route("/events/{topic}", get(topics::follow))
        .route("/runs", get(runs::list))
        .route("/runs/stream", get(runs_stream::stream))
        .route("/runs/{id}", get(runs::show))
        .route("/runs/{id}/retry", post(runs::retry))
        .route("/dead", get(dead::list))
        .route("/dead/{id}/replay", post(dead::replay))
        .route("/docs", get(ops::docs))
        .merge(console::routes());
    router = routes::mount(router, web_routes);
    router = match &config.public_dir {
        Some(dir) => {
            let public = PublicDir::new(dir)?;
            router.fallback(move |req: axum::extract::Request| public.clone().serve(req))
        }
        None => router.fallback(ops::not_found),
    };
    // The doors served here bring their routes with their own state, under the same layers.
    let mut router: Router = router.with_state(state.clone());
    let listener = Listener {
        host: state.host(),
        keys: state.keys.clone(),
        body_limit: config.body_limit,
        cors_origins: config.cors_origins.clone().into(),
    };
    for door in &state.doors {
        router = router.merge(door.clone().routes(&listener));
    }
    router = router.method_not_allowed_fallback(ops::method_not_allowed);
    let governor = if config.rate_per_second > 0 {
        let period = Duration::from_nanos(1_000_000_000 / u64::from(config.rate_per_second));
        let governor = GovernorConfigBuilder::default()
            .key_extractor(CallerKey)
            .period(period)
            .burst_size(config.rate_burst)
            .finish()
            .ok_or(BindError::RateLimit)?;
        let governor = Arc::new(governor);
        let limiter = Arc::downgrade(governor.limiter());
        // Forget idle callers now and then so the limiter does not grow without bound (until
        // a reload replaces it).
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(Duration::from_secs(60));
            loop {
                tick.tick().await;
                match limiter.upgrade() {
                    Some(limiter) => limiter.retain_recent(),
                    None => return,
                }
            }
        });
        Some(tower_governor::GovernorLayer::new(governor).error_handler(rate_limited))
    } else {
        None
    };
    let allow_origins = if config.cors_origins.is_empty() {
        None
    } else {
        Some(cors(&config.cors_origins)?)
    };
    // Every layer composed into one and applied once: each `Router::layer` boxes the service
    // again, and every request clones that box and boxes its future. Outermost first; a layer
    // for what is not configured passes the request straight on.
    router = router.layer(
        tower::ServiceBuilder::new()
            .layer(from_fn_with_state(state.clone(), request_id::track))
            .layer(DefaultBodyLimit::max(config.body_limit))
            .option_layer(allow_origins)
            .option_layer(
                (!config.keys.is_empty())
                    .then(|| from_fn_with_state(state.clone(), auth::authenticate)),
            )
            .option_layer(governor),
    );
    Ok(router)
}

fn rate_limited(err: GovernorError) -> Response<Body> {
    match err {
        GovernorError::TooManyRequests { wait_time, headers } => {
            let mut response = GatewayError::RateLimited { wait: wait_time }.into_response();
            if let Some(mut headers) = headers {
                // The limiter's own `Retry-After` may say 0; the answer's says at least 1.
                headers.remove(header::RETRY_AFTER);
                response.headers_mut().extend(headers);
            }
            response
        }
        other => {
            tracing::error!(error = %other, "rate limiter failed");
            GatewayError::Internal {
                cause: format!("the rate limiter failed: {other}"),
                run: None,
            }
            .into_response()
        }
    }
}

fn cors(origins: &[String]) -> Result<CorsLayer, BindError> {
    let layer = CorsLayer::new()
        .allow_methods([
            Method::GET,
            Method::POST,
            Method::PUT,
            Method::PATCH,
            Method::DELETE,
        ])
        .allow_headers([
            header::AUTHORIZATION,
            header::CONTENT_TYPE,
            header::ACCEPT,
            header::HeaderName::from_static(request_id::HEADER),
            header::HeaderName::from_static(idempotency::HEADER),
        ])
        .expose_headers([
            header::HeaderName::from_static(request_id::HEADER),
            header::HeaderName::from_static(idempotency::REPLAYED),
            header::RETRY_AFTER,
        ]);
    if origins.iter().any(|o| o == "*") {
        return Ok(layer.allow_origin(AllowOrigin::any()));
    }
    let mut list = Vec::new();
    for origin in origins {
        list.push(
            HeaderValue::from_str(origin).map_err(|_| BindError::CorsOrigin(origin.clone()))?,
        );
    }
    Ok(layer.allow_origin(AllowOrigin::list(list)))
}
