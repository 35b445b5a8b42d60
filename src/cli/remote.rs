//! The commands that can ask a running server instead of the store (`skillgate runs …`,
//! `skillgate dead …` with `--server`): the server's URL and key, and its JSON answers, with a
//! problem answer told as its detail.

use clap::Args;
use serde_json::Value;

/// Where to ask: a server URL and the key to ask with.
#[derive(Debug, Clone, Args)]
pub struct Remote {
    /// Ask this running server (`http://127.0.0.1:8787`) instead of reading the store.
    #[arg(long, env = "SKILLGATE_SERVER")]
    pub server: Option<String>,
    /// The API key to ask the server with (every run and dead letter needs an `admin` key).
    #[arg(
        long,
        env = "SKILLGATE_KEY",
        hide_env_values = true,
        requires = "server"
    )]
    pub key: Option<String>,
}

impl Remote {
    /// GETs `path` (with its query) from the server.
    pub async fn get(&self, path: &str) -> Result<Value, String> {
        self.send(reqwest::Method::GET, path).await
    }

    /// POSTs `{}` to `path`.
    pub async fn post(&self, path: &str) -> Result<Value, String> {
        self.send(reqwest::Method::POST, path).await
    }

    async fn send(&self, method: reqwest::Method, path: &str) -> Result<Value, String> {
        let server = self
            .server
            .as_deref()
            .unwrap_or_default()
            .trim_end_matches('/');
        let url = format!("{server}{path}");
        crate::tls::install();
        let mut request = reqwest::Client::new().request(method.clone(), &url);
        if method == reqwest::Method::POST {
            request = request
                .header("content-type", "application/json")
                .body("{}");
        }
        if let Some(key) = &self.key {
            request = request.bearer_auth(key);
        }
        let response = request.send().await.map_err(|e| format!("{url}: {e}"))?;
        let status = response.status();
        let body: Value = response
            .json()
            .await
            .map_err(|e| format!("{url}: the answer ({status}) is not JSON: {e}"))?;
        if status.is_success() {
            return Ok(body);
        }
        let detail = body["detail"].as_str().or(body["title"].as_str());
        Err(format!(
            "{url}: {status}: {}",
            detail.unwrap_or("the server refused")
        ))
    }
}

/// `value` as a query string parameter.
pub fn param(name: &str, value: &str) -> String {
    format!(
        "{name}={}",
        percent_encoding::utf8_percent_encode(value, percent_encoding::NON_ALPHANUMERIC)
    )
}
