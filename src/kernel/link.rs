//! The caller's signal linked to a run's context: while the run lasts, cancelling the one aborts
//! the other, with no task of its own.
//!
//! The run's future watches the signal itself: each time it is polled it first looks at the
//! signal, whose waker is the run's own. A cancelled signal aborts the context before the run
//! is polled again, so the body sees the abort where it waits. A run dropped unfinished after
//! its signal was cancelled (a door that stops waiting on the same signal, a timeout) aborts
//! its context as it goes, so work it left behind is told. A run that has finished is no
//! longer linked.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context as Task, Poll};

use futures::future::Either;
use pin_project_lite::pin_project;
use tokio_util::sync::{CancellationToken, WaitForCancellationFutureOwned};

use crate::context::Context;

/// The reason a linked context is aborted with.
const REASON: &str = "aborted by the caller's signal";

pin_project! {
    /// `run`, with `ctx` aborted when the caller's signal is cancelled while it lasts.
    pub(crate) struct Linked<'a, F> {
        #[pin]
        run: F,
        // Waiting for the signal; `None` once it fired or once the run ended.
        #[pin]
        waiting: Option<WaitForCancellationFutureOwned>,
        signal: CancellationToken,
        ctx: &'a Context,
    }

    impl<F> PinnedDrop for Linked<'_, F> {
        fn drop(this: Pin<&mut Self>) {
            let this = this.project();
            if this.waiting.is_some() && this.signal.is_cancelled() {
                this.ctx.abort(Some(REASON));
            }
        }
    }
}

/// `run`, linked to the caller's `signal` if there is one. A signal cancelled already aborts
/// `ctx` now, before the chain starts. `run` is pinned where the caller holds it: only a
/// pointer to it is moved.
pub(crate) fn watch<'a, F: Future>(
    ctx: &'a Context,
    signal: Option<CancellationToken>,
    run: Pin<&'a mut F>,
) -> Either<Pin<&'a mut F>, Linked<'a, Pin<&'a mut F>>> {
    match signal {
        None => Either::Left(run),
        Some(signal) if signal.is_cancelled() => {
            ctx.abort(Some(REASON));
            Either::Left(run)
        }
        Some(signal) => Either::Right(Linked {
            run,
            waiting: Some(signal.clone().cancelled_owned()),
            signal,
            ctx,
        }),
    }
}

impl<F: Future> Future for Linked<'_, F> {
    type Output = F::Output;

    fn poll(self: Pin<&mut Self>, cx: &mut Task<'_>) -> Poll<F::Output> {
        let mut this = self.project();
        if let Some(waiting) = this.waiting.as_mut().as_pin_mut()
            && waiting.poll(cx).is_ready()
        {
            this.ctx.abort(Some(REASON));
            this.waiting.set(None);
        }
        let out = this.run.poll(cx);
        if out.is_ready() {
            this.waiting.set(None);
        }
        out
    }
}
