//! The Slack Web API as the bot uses it (`auth.test`, `chat.postMessage`, `chat.update`,
//! `apps.connections.open`) against a configurable base URL, with Slack's manners: a 429 waits
//! its `Retry-After`, a 5xx or a network failure backs off and tries again, and messages to one
//! channel are spaced by the post interval (Slack allows about one a second).

use std::collections::HashMap;
use std::time::Duration;

use parking_lot::Mutex;
use serde_json::{Value, json};
use tokio::time::Instant;

/// Tries of one call before it fails.
const ATTEMPTS: u32 = 5;
/// The longest `Retry-After` honored as such; longer waits are capped.
const MAX_RETRY_AFTER: Duration = Duration::from_secs(60);
/// Time one call may take.
const CALL_TIMEOUT: Duration = Duration::from_secs(30);

/// Why a call failed.
#[derive(Debug, Clone, thiserror::Error)]
pub enum ApiError {
    /// Slack answered `ok: false` (`channel_not_found`, `not_in_channel`, `invalid_auth`, …).
    #[error("{method}: Slack answered `{error}`")]
    Slack { method: &'static str, error: String },
    /// An HTTP status that is neither success nor worth retrying, or one that kept failing.
    #[error("{method}: HTTP {status}")]
    Status { method: &'static str, status: u16 },
    /// The request did not get an answer (after the retries).
    #[error("{method}: {detail}")]
    Transport {
        method: &'static str,
        detail: String,
    },
}

impl ApiError {
    /// True when the token is wrong or revoked: retrying cannot help, `/readyz` shows it.
    pub fn is_auth(&self) -> bool {
        matches!(self, ApiError::Slack { error, .. } if matches!(
            error.as_str(),
            "invalid_auth" | "not_authed" | "account_inactive" | "token_revoked" | "token_expired"
        ))
    }
}

/// Who the bot is (`auth.test`).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Identity {
    pub user_id: String,
    pub user: String,
    pub team_id: String,
    pub team: String,
    pub bot_id: String,
}

/// A Web API client for one bot token.
pub struct WebApi {
    http: reqwest::Client,
    base: String,
    bot_token: String,
    post_interval: Duration,
    /// Channel → when it may get its next message.
    next_post: Mutex<HashMap<String, Instant>>,
}

impl WebApi {
    /// `base` ends with `/` (`https://slack.com/api/`).
    pub fn new(base: &str, bot_token: &str, post_interval: Duration) -> WebApi {
        crate::tls::install();
        WebApi {
            http: reqwest::Client::builder()
                .timeout(CALL_TIMEOUT)
                .build()
                .unwrap_or_default(),
            base: base.to_string(),
            bot_token: bot_token.to_string(),
            post_interval,
            next_post: Mutex::new(HashMap::new()),
        }
    }

    pub async fn auth_test(&self) -> Result<Identity, ApiError> {
        let v = self.call("auth.test", &self.bot_token, &json!({})).await?;
        let s = |k: &str| v[k].as_str().unwrap_or_default().to_string();
        Ok(Identity {
            user_id: s("user_id"),
            user: s("user"),
            team_id: s("team_id"),
            team: s("team"),
            bot_id: s("bot_id"),
        })
    }

    /// Posts `text` (mrkdwn) to `channel`, in `thread_ts` if given, with message `metadata`;
    /// returns the message's `ts`.
    pub async fn post_message(
        &self,
        channel: &str,
        thread_ts: Option<&str>,
        text: &str,
        metadata: Option<Value>,
    ) -> Result<String, ApiError> {
        self.pace(channel).await;
        let mut body = json!({ "channel": channel, "text": text, "unfurl_links": false });
        if let Some(ts) = thread_ts {
            body["thread_ts"] = Value::from(ts);
        }
        if let Some(metadata) = metadata {
            body["metadata"] = metadata;
        }
        let v = self
            .call("chat.postMessage", &self.bot_token, &body)
            .await?;
        Ok(v["ts"].as_str().unwrap_or_default().to_string())
    }

    /// Replaces the text (and metadata) of the message `ts`.
    pub async fn update(
        &self,
        channel: &str,
        ts: &str,
        text: &str,
        metadata: Option<Value>,
    ) -> Result<(), ApiError> {
        let mut body = json!({ "channel": channel, "ts": ts, "text": text });
        if let Some(metadata) = metadata {
            body["metadata"] = metadata;
        }
        self.call("chat.update", &self.bot_token, &body).await?;
        Ok(())
    }

    /// A Socket Mode WebSocket URL, with the app-level token.
    pub async fn open_connection(&self, app_token: &str) -> Result<String, ApiError> {
        let v = self
            .call("apps.connections.open", app_token, &json!({}))
            .await?;
        v["url"]
            .as_str()
            .map(str::to_string)
            .ok_or(ApiError::Slack {
                method: "apps.connections.open",
                error: "no url in the answer".into(),
            })
    }

    /// Waits for `channel`'s turn.
    async fn pace(&self, channel: &str) {
        let now = Instant::now();
        let at = {
            let mut next = self.next_post.lock();
            if next.len() > 10_000 {
                next.retain(|_, t| *t > now);
            }
            let slot = next.entry(channel.to_string()).or_insert(now);
            let at = (*slot).max(now);
            *slot = at + self.post_interval;
            at
        };
        tokio::time::sleep_until(at).await;
    }

    /// One method call: JSON in, the answer's JSON out when `ok`.
    async fn call(
        &self,
        method: &'static str,
        token: &str,
        body: &Value,
    ) -> Result<Value, ApiError> {
        let url = format!("{}{method}", self.base);
        let mut backoff = Duration::from_millis(250);
        let mut last = None;
        for attempt in 1..=ATTEMPTS {
            let sent = self
                .http
                .post(&url)
                .bearer_auth(token)
                .json(body)
                .send()
                .await;
            // A failure worth another try, and how long to wait before it.
            let (failure, wait) = match sent {
                Err(err) => {
                    let detail = err.to_string();
                    (ApiError::Transport { method, detail }, backoff)
                }
                Ok(response) if response.status().as_u16() == 429 => {
                    let wait = retry_after(&response)
                        .unwrap_or(backoff)
                        .min(MAX_RETRY_AFTER);
                    tracing::info!(
                        method,
                        wait_ms = wait.as_millis() as u64,
                        "Slack rate limit: waiting as told"
                    );
                    (
                        ApiError::Status {
                            method,
                            status: 429,
                        },
                        wait,
                    )
                }
                Ok(response) if response.status().is_server_error() => {
                    let status = response.status().as_u16();
                    (ApiError::Status { method, status }, backoff)
                }
                Ok(response) => return answer(method, response).await,
            };
            // The backoff grows with failures, not with Slack's own waits.
            if !matches!(failure, ApiError::Status { status: 429, .. }) {
                backoff *= 2;
            }
            last = Some(failure);
            if attempt < ATTEMPTS {
                tokio::time::sleep(wait).await;
            }
        }
        Err(last.unwrap_or(ApiError::Transport {
            method,
            detail: "no attempt made".into(),
        }))
    }
}

/// A final answer: an error status, or the JSON when Slack says `ok`.
async fn answer(method: &'static str, response: reqwest::Response) -> Result<Value, ApiError> {
    let status = response.status();
    if !status.is_success() {
        return Err(ApiError::Status {
            method,
            status: status.as_u16(),
        });
    }
    let answer: Value = response.json().await.map_err(|e| ApiError::Transport {
        method,
        detail: format!("the answer is not JSON: {e}"),
    })?;
    if answer["ok"] == true {
        return Ok(answer);
    }
    Err(ApiError::Slack {
        method,
        error: answer["error"]
            .as_str()
            .unwrap_or("unknown_error")
            .to_string(),
    })
}

/// `Retry-After` in seconds.
fn retry_after(response: &reqwest::Response) -> Option<Duration> {
    response
        .headers()
        .get("retry-after")?
        .to_str()
        .ok()?
        .trim()
        .parse::<u64>()
        .ok()
        .map(Duration::from_secs)
}
