//! Model usage counters (calls, errors, retries, tokens in and out per provider and model): the
//! agent counts them, the gateway's `/metrics` shows them. They live below both, so neither
//! names the other.

use std::sync::OnceLock;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::registry::Registry;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ModelLabels {
    pub provider: String,
    pub model: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct TokenLabels {
    pub provider: String,
    pub model: String,
    /// `input` or `output`.
    pub r#type: String,
}

#[derive(Default)]
pub struct Counters {
    pub calls: Family<ModelLabels, Counter>,
    pub errors: Family<ModelLabels, Counter>,
    pub retries: Family<ModelLabels, Counter>,
    pub tokens: Family<TokenLabels, Counter>,
}

/// The process's counters.
pub fn counters() -> &'static Counters {
    static COUNTERS: OnceLock<Counters> = OnceLock::new();
    COUNTERS.get_or_init(Counters::default)
}

/// Adds the model counters to a registry (the gateway's `/metrics`).
pub fn register(registry: &mut Registry) {
    let c = counters();
    let per_model = [
        ("model_calls", "Model calls by provider and model", &c.calls),
        (
            "model_errors",
            "Model calls that failed after their retries",
            &c.errors,
        ),
        (
            "model_retries",
            "Model call attempts retried (429, 5xx, timeouts)",
            &c.retries,
        ),
    ];
    for (name, help, family) in per_model {
        registry.register(name, help, family.clone());
    }
    let tokens = "Tokens sent to (input) and received from (output) models";
    registry.register("model_tokens", tokens, c.tokens.clone());
}
