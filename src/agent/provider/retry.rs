//! Trying a model call again: on 429 and 5xx (after the server's `Retry-After` when it gives
//! one, else with exponential backoff), on a timeout or a dropped connection; never once text
//! has been streamed (the caller has seen it), never for a refused key or a request the server
//! will refuse again.

use std::time::Duration;

use super::{Delta, ModelRequest, ModelResponse, OnDelta, Provider, ProviderError};

#[derive(Debug, Clone, Copy)]
pub struct RetryPolicy {
    /// Attempts after the first.
    pub retries: u32,
    /// The first wait; each next one doubles.
    pub base: Duration,
    /// The longest wait, also for a server's `Retry-After`.
    pub cap: Duration,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        RetryPolicy {
            retries: 3,
            base: Duration::from_millis(500),
            cap: Duration::from_secs(30),
        }
    }
}

/// `provider.call` with retries; `on_retry(attempt, error, wait)` before each wait.
pub async fn call(
    provider: &dyn Provider,
    request: &ModelRequest,
    policy: RetryPolicy,
    on_delta: OnDelta<'_>,
    on_retry: &mut (dyn FnMut(u32, &ProviderError, Duration) + Send),
) -> Result<ModelResponse, ProviderError> {
    let mut attempt = 0;
    loop {
        let mut streamed = false;
        let mut forward = |delta: Delta| {
            streamed = true;
            on_delta(delta);
        };
        match provider.call(request, &mut forward).await {
            Ok(mut response) => {
                response.retries = attempt;
                return Ok(response);
            }
            Err(err) => {
                let Some(asked) = err.retry() else {
                    return Err(err);
                };
                if streamed || attempt >= policy.retries {
                    return Err(err);
                }
                let backoff = policy.base.saturating_mul(1 << attempt.min(16));
                let wait = asked.unwrap_or(backoff).min(policy.cap);
                attempt += 1;
                on_retry(attempt, &err, wait);
                tokio::time::sleep(wait).await;
            }
        }
    }
}
