//! Model usage of each call: counted in the process's counters ([`crate::model_usage`]) and put
//! on the span of the call as OpenTelemetry GenAI attributes.

use crate::agent::provider::{ModelResponse, ProviderError};
use crate::model_usage::{ModelLabels, TokenLabels, counters};

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
