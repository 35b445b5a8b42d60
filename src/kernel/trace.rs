//! The kernel's tracing spans (one per invocation, one per chain entry): debug-level, so log
//! output at `info` leaves them off while trace export turns them on, and a disabled span puts
//! no wrapper around the future it would cover.

use std::future::Future;

use futures::future::Either;
use tracing::{Instrument, Span};

/// `run`, inside `span` when the span is enabled, bare otherwise. A plain `fn` rather than an
/// `async fn`, which would hold `run` twice (as its argument and as what it awaits): this wraps
/// every chain entry, so each entry's future, and every future that awaits one, would carry the
/// extra copy and move it.
pub(crate) fn in_span<F: Future>(span: Span, run: F) -> impl Future<Output = F::Output> {
    if span.is_disabled() {
        Either::Left(run)
    } else {
        Either::Right(run.instrument(span))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A future holding 1 KiB across its await.
    async fn large_run() -> u8 {
        let held = [7u8; 1024];
        std::future::ready(()).await;
        std::hint::black_box(held)[0]
    }

    #[test]
    fn a_run_in_a_span_is_held_once_by_the_future_that_covers_it() {
        let bare = std::mem::size_of_val(&large_run());
        let off = in_span(Span::none(), large_run());
        assert!(
            std::mem::size_of_val(&off) < bare + 128,
            "a run of {bare} bytes is held in {} bytes",
            std::mem::size_of_val(&off)
        );
        assert_eq!(futures::executor::block_on(off), 7);
    }
}
