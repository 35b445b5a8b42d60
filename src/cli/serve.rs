//! `skillgate serve`: the HTTP gateway over the project's skills until SIGINT/SIGTERM.

use std::path::Path;
use std::process::ExitCode;
use std::sync::Arc;

use clap::Args;

use crate::cli::{FAILED, USAGE};
use crate::config::websocket::{WsConfig, WsSettings};
use crate::config::{ConfigErrors, ConfigFile};
use crate::context::log::LogConfig;
use crate::events::{Bus, BusConfig, EventStore};
use crate::gateway::Gateway;
use crate::gateway::http::routes;
use crate::gateway::http::{HttpConfig, HttpSettings};
use crate::gateway::metrics::Metrics;
use crate::server::{DoorSettings, Doors};
use tokio_util::sync::CancellationToken;

/// The HTTP flags; each is also a key of the config file's `http:` section, and flags (and
/// their `SKILLGATE_*` variables) win over the file.
#[derive(Debug, Args)]
pub struct ServeArgs {
    #[command(flatten)]
    pub http: HttpSettings,
    #[command(flatten)]
    pub websocket: WsSettings,
    /// Watch the skill folders, the main skill and the config file, and reload the skills when
    /// they change (SIGHUP reloads either way).
    #[arg(long, env = "SKILLGATE_WATCH", default_value_t = true, action = clap::ArgAction::Set)]
    pub watch: bool,
    /// Serve no HTTP: email and Slack in Socket Mode only, with `/healthz`, `/readyz` and
    /// `/metrics` on the operations listener (at `--ops-bind`, else the HTTP address).
    #[arg(long, env = "SKILLGATE_NO_HTTP")]
    pub no_http: bool,
    /// Serve `/healthz`, `/readyz` and `/metrics` on this address too, without API keys (keep it
    /// on loopback or a private network).
    #[arg(long, env = "SKILLGATE_OPS_BIND", value_name = "ADDR")]
    pub ops_bind: Option<std::net::SocketAddr>,
}

pub async fn serve(
    project: &Path,
    file: &ConfigFile,
    (store, store_label): (Arc<dyn EventStore>, String),
    (bus, limits): (BusConfig, super::RunLimits),
    log: LogConfig,
    args: &ServeArgs,
) -> ExitCode {
    let settings = args.http.clone().or(file.http.clone());
    let origin = |path: &str| file.origin(path);
    let config = HttpConfig::resolve(project, settings, &origin);
    let websocket = WsConfig::resolve(args.websocket.clone().or(file.websocket.clone()), &origin);
    let store_kind = store.kind();
    let bus = Arc::new(Bus::new(store, bus));
    let kernel = super::kernel_builder(project, log, bus, limits)
        .extension(Arc::new(crate::reload::ReloadState::default()))
        .extension(Arc::new(crate::schedule::health::ScheduleHealth::default()))
        .build();
    let index = kernel.registry().current();
    for failure in index.failures() {
        eprintln!("warning: {}", failure.error);
    }
    // Every mistake at once: HTTP's and WebSocket's settings, the other doors' (which need the
    // skills, for the main skill's settings and the skills their routes name), the routes'.
    let mut errors = match &config {
        Ok(_) => ConfigErrors::default(),
        Err(errors) => errors.clone(),
    };
    if let Err(more) = &websocket {
        errors.extend(more.clone());
    }
    let mut settings = DoorSettings {
        serve_http: !args.no_http,
        slack: file.slack.clone(),
        email: file.email.clone(),
        ..DoorSettings::http(HttpConfig::default())
    };
    let resolved = settings
        .resolve(&index, project)
        .map_err(|more| errors.extend(more.located(&origin)));
    errors.extend(route_mistakes(&index, project));
    let (config, resolved) = match (config, websocket, resolved) {
        (Ok(mut config), Ok(websocket), Ok(resolved)) if errors.is_empty() => {
            config.websocket = websocket;
            // Without HTTP, the probes find the operations listener where HTTP would be.
            settings.ops = args
                .ops_bind
                .or_else(|| args.no_http.then_some(config.bind));
            settings.http = config;
            (settings, resolved)
        }
        _ => {
            for error in &errors.0 {
                eprintln!("error: {error}");
            }
            return ExitCode::from(USAGE);
        }
    };
    let skills = index.tools().filter(|t| !t.hidden).count();
    let open = config.http.keys.is_empty();
    let loopback = config.http.bind.ip().is_loopback();
    let keys = config.http.keys.len();
    let grace = config.http.grace;
    let drain = config.http.drain;
    let gateway = Gateway::new(kernel.clone(), Arc::new(Metrics::new()))
        .with_run_bounds(config.http.max_runs, config.http.max_args_in_flight);
    let readiness = gateway.readiness.clone();
    let doors = match Doors::open(gateway, config, resolved, project).await {
        Ok(doors) => doors,
        Err(err) => {
            eprintln!("error: {err}");
            return ExitCode::from(if err.config { USAGE } else { FAILED });
        }
    };
    // Caught before the start line: whoever reads it may signal at once.
    let mut signals = crate::shutdown::listen();
    // Every transport stops together on SIGINT/SIGTERM; the shutdown is announced once.
    let stop = CancellationToken::new();
    // Skills reload on changes and SIGHUP (also caught before the start line), and the config
    // file's settings are put in force with them: HTTP's keys and settings, the doors' routes,
    // the SMTP certificate.
    let apply = super::reconfigure::applier(
        kernel.clone(),
        super::reconfigure::Reloaded {
            http: doors.reconfigure(),
            email: doors.email(),
            slack: doors.slack(),
        },
        (args.http.clone(), args.websocket.clone()),
        (project, file),
    );
    let reloader = crate::reload::spawn(
        kernel.clone(),
        (project.to_path_buf(), file.path.clone()),
        (args.watch, crate::reload::Applies::SkillsRoutesAndSchedules),
        apply,
        stop.clone(),
    );
    // Event-driven skills get their workers now, not at their first invocation; a durable
    // handler queue left from before a restart gets its worker back too.
    let routed = crate::events::routes::subscribe_declared(&kernel).await;
    let kept = crate::events::restore_subscriptions(&kernel).await;
    // Declared schedules are written to the store; every replica then fires what is due, each
    // firing on one of them.
    let scheduled = crate::schedule::runner::sync_declared(&kernel).await;
    let scheduler = crate::schedule::runner::spawn(kernel.clone(), stop.clone());
    let listening: Vec<String> = [
        doors.http_addr().map(|a| format!("http://{a}")),
        doors.email_addr().map(|a| format!("smtp://{a}")),
        doors
            .ops_addr()
            .map(|a| format!("http://{a} (operations: /healthz, /readyz, /metrics)")),
    ]
    .into_iter()
    .flatten()
    .collect();
    let declared: String = [
        (routed, "event route(s)"),
        (kept, "kept subscription(s)"),
        (scheduled, "declared schedule(s)"),
    ]
    .iter()
    .filter(|(n, _)| *n > 0)
    .map(|(n, what)| format!(", {n} {what}"))
    .collect();
    eprintln!(
        "skillgate: listening on {} ({skills} skills{declared}, {store_kind} event store {store_label}, {})",
        listening.join(" and "),
        if open {
            "no API keys: one local caller, without admin".to_string()
        } else {
            format!("{keys} API key(s)")
        }
    );
    if let Some(addr) = doors.http_addr().filter(|_| open && !loopback) {
        eprintln!(
            "warning: listening on {addr} without API keys (--insecure-no-auth): anyone who reaches it is the local caller; set SKILLGATE_API_KEYS instead"
        );
    }
    let shutdown = {
        let stop = stop.clone();
        async move {
            let signal = signals.recv().await;
            if !drain.is_zero() {
                // Out of the balancer first: `/readyz` fails while work is still taken.
                readiness.drain();
                eprintln!(
                    "skillgate: {}: draining for {:.1} s (`/readyz` answers 503, work is still taken)",
                    signal.name(),
                    drain.as_secs_f64()
                );
                // A second signal cuts the drain short.
                tokio::select! {
                    () = tokio::time::sleep(drain) => {}
                    again = signals.recv() => {
                        eprintln!("skillgate: {}: the drain ends early", again.name());
                    }
                }
            }
            eprintln!(
                "skillgate: {}: stopping; in-flight work gets up to {:.1} s",
                signal.name(),
                grace.as_secs_f64()
            );
            stop.cancel();
            signal.name().to_string()
        }
    };
    let reports = doors.run_until(shutdown, grace).await.doors;
    reloader.abort();
    scheduler.abort();
    let cut_off: Vec<String> = reports
        .iter()
        .filter(|r| !r.drained)
        .map(|r| format!("{}: {} cut off", r.transport, r.abandoned))
        .collect();
    if cut_off.is_empty() {
        eprintln!("skillgate: stopped");
        ExitCode::SUCCESS
    } else {
        let abandoned: i64 = reports.iter().map(|r| r.abandoned).sum();
        eprintln!(
            "skillgate: the shutdown grace period of {:.1} s ran out; {abandoned} request(s) were cut off ({})",
            grace.as_secs_f64(),
            cut_off.join(", ")
        );
        ExitCode::from(FAILED)
    }
}

/// The mistakes in the routes the project's skills declare (`web`, `webhook`, `event`).
pub fn route_errors(project: &Path) -> ConfigErrors {
    let kernel = crate::builtins::builder(project).build();
    route_mistakes(&kernel.registry().current(), project)
}

fn route_mistakes(index: &crate::skills::index::SearchIndex, project: &Path) -> ConfigErrors {
    let mut errors = ConfigErrors::default();
    for message in routes::check(index, project) {
        errors.push(None, "", message.to_string());
    }
    let web = routes::collect(index, project).unwrap_or_default();
    let taken = |path: &str| routes::is_served(&web, path);
    for message in crate::gateway::webhook::routes::collect(index, project, &taken).1 {
        errors.push(None, "", message);
    }
    for message in crate::events::routes::collect(index).1 {
        errors.push(None, "", message);
    }
    for message in crate::schedule::runner::declared(index, 0).1 {
        errors.push(None, "", message);
    }
    errors
}
