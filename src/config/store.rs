//! The `store` section and the event store flags: one struct for `--store`/`SKILLGATE_STORE`
//! and friends and for `store:` in `skillgate.yaml`. Flags win, then the file, then
//! `DATABASE_URL` (for the URL), then the defaults.

use std::time::Duration;

use clap::Args;
use serde::Deserialize;

use crate::config::values::Secret;
use crate::events::runs::RecordConfig;
use crate::events::{BusConfig, Limits};

/// Where events live and how they are delivered. Every field is optional: unset means "the
/// next source decides".
/// The keys of the `store` section that hold secrets (a URL's password).
pub const SECRETS: [Secret; 1] = [Secret {
    key: "url",
    url: true,
    example: "DATABASE_URL",
}];

#[derive(Debug, Clone, Default, Args, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
#[command(next_help_heading = "Event store")]
pub struct StoreSettings {
    /// The event store: `sqlite://<file>` (relative to the project), `postgres://...` or
    /// `memory`. Without it, `DATABASE_URL` when set, else `sqlite://.skillgate/events.db`.
    // Help does not show the value from the environment: it may hold a password.
    #[arg(
        id = "store",
        long = "store",
        global = true,
        env = "SKILLGATE_STORE",
        hide_env_values = true
    )]
    pub url: Option<String>,
    /// Events each topic keeps for replay [default: 1000].
    #[arg(long, global = true, env = "SKILLGATE_BUFFER_EVENTS")]
    pub buffer_events: Option<usize>,
    /// Oldest event kept for replay, in seconds [default: 86400].
    #[arg(long, global = true, env = "SKILLGATE_BUFFER_AGE")]
    pub buffer_age: Option<u64>,
    /// Deliveries after which an event moves to `<topic>.dead` [default: 5].
    #[arg(long, global = true, env = "SKILLGATE_DELIVERY_LIMIT",
          value_parser = clap::value_parser!(u32).range(1..))]
    pub delivery_limit: Option<u32>,
    /// How long a delivered event stays invisible before it is delivered again, in
    /// milliseconds [default: 30000].
    #[arg(long, global = true, env = "SKILLGATE_VISIBILITY")]
    pub visibility: Option<u64>,
    /// How long one run of an event handler skill may take, in milliseconds (default: the
    /// visibility timeout). A run past it is stopped and its event delivered again.
    #[arg(long, global = true, env = "SKILLGATE_HANDLER_TIMEOUT",
          value_parser = clap::value_parser!(u64).range(1..))]
    pub handler_timeout: Option<u64>,
    /// Record every root run from every door in the store (`GET /runs`, `skillgate runs`)
    /// [default: true].
    #[arg(long = "runs", global = true, env = "SKILLGATE_RUNS", action = clap::ArgAction::Set)]
    pub runs: Option<bool>,
    /// Seconds a recorded run is kept [default: 604800, a week].
    #[arg(long, global = true, env = "SKILLGATE_RUNS_RETENTION")]
    pub runs_retention: Option<u64>,
    /// Recorded runs kept at most (the newest) [default: 100000].
    #[arg(long, global = true, env = "SKILLGATE_RUNS_MAX")]
    pub runs_max: Option<usize>,
    /// Share of the runs that end well and take less than a second whose chain entries'
    /// timings are recorded, from 0 to 1 (the others' always are) [default: 0.01].
    #[arg(long, global = true, env = "SKILLGATE_RUNS_DETAIL_SAMPLE", value_parser = sample)]
    pub runs_detail_sample: Option<f64>,
    /// Seconds after it started that a recorded run may be retried (`POST /runs/{id}/retry`,
    /// `skillgate runs retry`) [default: 86400, a day].
    #[arg(long, global = true, env = "SKILLGATE_RETRY_WINDOW")]
    pub retry_window: Option<u64>,
}

/// A share from 0 to 1.
fn sample(text: &str) -> Result<f64, String> {
    match text.trim().parse::<f64>() {
        Ok(share) if (0.0..=1.0).contains(&share) => Ok(share),
        _ => Err(format!("`{text}` is not a share from 0 to 1 (0.01 is 1%)")),
    }
}

impl StoreSettings {
    /// These settings, with what `file` sets where these leave a gap.
    pub fn or(self, file: StoreSettings) -> StoreSettings {
        StoreSettings {
            url: self.url.or(file.url),
            buffer_events: self.buffer_events.or(file.buffer_events),
            buffer_age: self.buffer_age.or(file.buffer_age),
            delivery_limit: self.delivery_limit.or(file.delivery_limit),
            visibility: self.visibility.or(file.visibility),
            handler_timeout: self.handler_timeout.or(file.handler_timeout),
            runs: self.runs.or(file.runs),
            runs_retention: self.runs_retention.or(file.runs_retention),
            runs_max: self.runs_max.or(file.runs_max),
            runs_detail_sample: self.runs_detail_sample.or(file.runs_detail_sample),
            retry_window: self.retry_window.or(file.retry_window),
        }
    }

    /// The store URL in use: set here, else `DATABASE_URL` (what sqlx, hosting platforms and
    /// Postgres tools set), else the embedded SQLite file.
    pub fn url(&self) -> String {
        self.url
            .clone()
            .or_else(|| std::env::var("DATABASE_URL").ok().filter(|u| !u.is_empty()))
            .unwrap_or_else(|| crate::events::store_url::DEFAULT_STORE.to_string())
    }

    pub fn limits(&self) -> Limits {
        let defaults = Limits::default();
        Limits {
            buffer_events: self.buffer_events.unwrap_or(defaults.buffer_events),
            buffer_age: self
                .buffer_age
                .map_or(defaults.buffer_age, Duration::from_secs),
            delivery_limit: self.delivery_limit.unwrap_or(defaults.delivery_limit),
        }
    }

    pub fn bus(&self) -> BusConfig {
        let mut bus = match self.visibility {
            Some(ms) => BusConfig::with_visibility(Duration::from_millis(ms)),
            None => BusConfig::default(),
        };
        if let Some(ms) = self.handler_timeout {
            bus.handler_timeout = Duration::from_millis(ms);
        }
        bus.runs = self.runs();
        bus
    }

    /// How runs are recorded; `None` when `runs: false`.
    pub fn runs(&self) -> Option<RecordConfig> {
        if self.runs == Some(false) {
            return None;
        }
        let defaults = RecordConfig::default();
        Some(RecordConfig {
            retention: self
                .runs_retention
                .map_or(defaults.retention, Duration::from_secs),
            keep: self.runs_max.unwrap_or(defaults.keep),
            detail_sample: self
                .runs_detail_sample
                .map_or(defaults.detail_sample, |s| s.clamp(0.0, 1.0)),
            retry_window: self
                .retry_window
                .map_or(defaults.retry_window, Duration::from_secs),
            ..defaults
        })
    }
}
