//! The kernel's tracing spans (one per invocation, one per chain entry): debug-level, so log
//! output at `info` leaves them off while trace export turns them on, and a disabled span puts
//! no wrapper around the future it would cover.

use std::future::Future;

use tracing::{Instrument, Span};

/// Awaits `run` inside `span` when the span is enabled, bare otherwise.
pub(crate) async fn in_span<F: Future>(span: Span, run: F) -> F::Output {
    if span.is_disabled() {
        run.await
    } else {
        run.instrument(span).await
    }
}
