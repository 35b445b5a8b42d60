//! Model usage as Prometheus counters (calls, errors, tokens in and out per provider and model)
//! and as OpenTelemetry GenAI attributes on the span of each call.

use std::sync::OnceLock;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::registry::Registry;

use crate::agent::provider::{ModelResponse, ProviderError};

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ModelLabels {
    provider: String,
    model: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct TokenLabels {
    provider: String,
    model: String,
    /// `input` or `output`.
    r#type: String,
}

#[derive(Default)]
struct Counters {
    calls: Family<ModelLabels, Counter>,
    errors: Family<ModelLabels, Counter>,
    retries: Family<ModelLabels, Counter>,
    tokens: Family<TokenLabels, Counter>,
}

fn counters() -> &'static Counters {
    static COUNTERS: OnceLock<Counters> = OnceLock::new();
    COUNTERS.get_or_init(Counters::default)
}

/// Adds the model counters to a registry (the gateway's `/metrics`).
pub fn register(registry: &mut Registry) {
    let c = counters();
    registry.register(
        "model_calls",
        "Model calls by provider and model",
        c.calls.clone(),
    );
    registry.register(
        "model_errors",
        "Model calls that failed after their retries",
        c.errors.clone(),
    );
    registry.register(
        "model_retries",
        "Model call attempts retried (429, 5xx, timeouts)",
        c.retries.clone(),
    );
    registry.register(
        "model_tokens",
        "Tokens sent to (input) and received from (output) models",
        c.tokens.clone(),
    );
}

/// Counts one call (after its retries) and puts the GenAI attributes on the current span.
pub(crate) fn record(
    span: &tracing::Span,
    provider: &str,
    model: &str,
    out: &Result<ModelResponse, ProviderError>,
) {
    let labels = ModelLabels {
        provider: provider.to_string(),
        model: model.to_string(),
    };
    let c = counters();
    c.calls.get_or_create(&labels).inc();
    match out {
        Ok(response) => {
            c.retries
                .get_or_create(&labels)
                .inc_by(u64::from(response.retries));
            for (kind, n) in [
                ("input", response.usage.input_tokens),
                ("output", response.usage.output_tokens),
            ] {
                c.tokens
                    .get_or_create(&TokenLabels {
                        provider: labels.provider.clone(),
                        model: labels.model.clone(),
                        r#type: kind.into(),
                    })
                    .inc_by(n);
            }
            span.record("gen_ai.usage.input_tokens", response.usage.input_tokens);
            span.record("gen_ai.usage.output_tokens", response.usage.output_tokens);
            span.record("gen_ai.response.model", response.model.as_str());
            let reason = serde_json::to_value(response.stop).unwrap_or_default();
            span.record(
                "gen_ai.response.finish_reasons",
                reason.as_str().unwrap_or_default(),
            );
        }
        Err(err) => {
            c.errors.get_or_create(&labels).inc();
            span.record("error.type", err.to_string().as_str());
        }
    }
}
