//! Keeps deep invocation chains off the thread stack.
//!
//! A nested invocation is polled from inside its caller's poll, so every level of the onion
//! (each middleware, each nested skill) adds stack frames. Past a number of invocations nested
//! on one stack, the next one is moved to a task of its own, which starts on a fresh stack; the
//! caller awaits it. Dropping the caller still cancels it (the task is aborted), as it would be
//! inline.

use std::cell::Cell;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use futures::future::BoxFuture;
use tokio::task::JoinHandle;

use crate::error::{Result, SkillError};
use crate::kernel::invoke::Output;

/// Invocations nested on one stack before the next one moves to a task of its own.
const NESTED_LIMIT: u32 = 12;

thread_local! {
    static NESTED: Cell<u32> = const { Cell::new(0) };
}

enum State {
    Inline(BoxFuture<'static, Result<Output>>),
    Spawned(JoinHandle<Result<Output>>),
    Done,
}

/// An invocation future that counts its nesting and moves to a task when nested too deep.
pub struct Guarded {
    state: State,
    started: bool,
}

impl Guarded {
    pub fn new(inner: BoxFuture<'static, Result<Output>>) -> Guarded {
        Guarded {
            state: State::Inline(inner),
            started: false,
        }
    }
}

impl Future for Guarded {
    type Output = Result<Output>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = &mut *self;
        if !this.started {
            this.started = true;
            let deep = NESTED.with(Cell::get) >= NESTED_LIMIT;
            if deep && let Ok(runtime) = tokio::runtime::Handle::try_current() {
                let State::Inline(inner) = std::mem::replace(&mut this.state, State::Done) else {
                    unreachable!("a new invocation is inline")
                };
                // The task continues the caller's trace.
                this.state =
                    State::Spawned(runtime.spawn(tracing::Instrument::in_current_span(inner)));
            }
        }
        match &mut this.state {
            State::Inline(inner) => {
                NESTED.with(|n| n.set(n.get() + 1));
                let out = inner.as_mut().poll(cx);
                NESTED.with(|n| n.set(n.get() - 1));
                if out.is_ready() {
                    this.state = State::Done;
                }
                out
            }
            State::Spawned(handle) => match Pin::new(handle).poll(cx) {
                Poll::Pending => Poll::Pending,
                Poll::Ready(joined) => {
                    this.state = State::Done;
                    Poll::Ready(match joined {
                        Ok(out) => out,
                        Err(err) if err.is_panic() => std::panic::resume_unwind(err.into_panic()),
                        Err(_) => Err(SkillError::internal("the runtime is shutting down")),
                    })
                }
            },
            State::Done => Poll::Ready(Err(SkillError::internal(
                "invocation polled after it finished",
            ))),
        }
    }
}

impl Drop for Guarded {
    fn drop(&mut self) {
        if let State::Spawned(handle) = &self.state {
            handle.abort();
        }
    }
}
