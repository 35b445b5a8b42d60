//! Fresh sandboxes made before they are needed, and finished ones freed after the answer.
//!
//! Every call outside a session runs in a sandbox of its own: a new QuickJS runtime and context,
//! never used before and never used again. Making one (the runtime, the intrinsics, the
//! prelude) is about a third of a short call's work, and freeing it (a garbage collection over
//! all of that) another tenth. Neither needs to sit between a caller and its answer:
//!
//! - a few sandboxes are kept made ahead ([`fresh`] takes one, and a task of the sandbox
//!   threads makes its replacement), so a call that finds one ready starts its script at once;
//!   when none is ready (a burst used them all) the call makes its own, as before;
//! - a finished sandbox is freed by a task of its own ([`discard`]), which runs once the call's
//!   task has ended and handed its answer over.
//!
//! A sandbox in the stock has run nothing: only the engine has touched it, so taking one is
//! the same as making one. The stock holds one a sandbox thread, at most four, each a few
//! hundred KiB, and is first filled by the first call (an idle server that runs no script
//! makes none).

use std::sync::atomic::{AtomicBool, Ordering};

use parking_lot::Mutex;

use crate::error::Result;
use crate::sandbox::engine::Engine;
use crate::sandbox::pool::threads;

/// Sandboxes made ahead, never used.
static STOCK: Mutex<Vec<Engine>> = Mutex::new(Vec::new());

/// Whether a task is making sandboxes for the stock.
static FILLING: AtomicBool = AtomicBool::new(false);

/// The most sandboxes the stock keeps ready, however many sandbox threads there are: enough for
/// calls that come one after another on each thread of a small server; a burst empties it
/// whatever its size.
const MAX_STOCK: usize = 4;

/// How many sandboxes the stock keeps ready: one a sandbox thread, at most [`MAX_STOCK`].
fn size() -> usize {
    threads().min(MAX_STOCK)
}

/// A fresh sandbox: one from the stock, else one made now. Either way the stock is topped up
/// in the background. Called on a sandbox thread.
pub(crate) async fn fresh() -> Result<Engine> {
    let ready = STOCK.lock().pop();
    refill();
    match ready {
        Some(engine) => Ok(engine),
        None => Engine::new(None).await,
    }
}

/// Frees a finished sandbox in a task of its own, after the call's answer has gone.
pub(crate) fn discard(engine: Engine) {
    tokio::spawn(async move { drop(engine) });
}

/// Starts a task that makes sandboxes until the stock is full, unless one is already at it.
fn refill() {
    if STOCK.lock().len() >= size() || FILLING.swap(true, Ordering::AcqRel) {
        return;
    }
    tokio::spawn(async {
        while STOCK.lock().len() < size() {
            match Engine::new(None).await {
                Ok(engine) => STOCK.lock().push(engine),
                // The call that needs one makes its own and reports the error.
                Err(_) => break,
            }
        }
        FILLING.store(false, Ordering::Release);
    });
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sandbox::pool;

    #[tokio::test]
    async fn taking_a_sandbox_tops_the_stock_up_to_one_a_sandbox_thread_at_most_four() {
        pool::run(|_| async {
            let taken = fresh().await?;
            // The refill runs as a task of the sandbox threads; wait for it to fill the stock.
            for _ in 0..2000 {
                if STOCK.lock().len() == size() && !FILLING.load(Ordering::Acquire) {
                    break;
                }
                tokio::time::sleep(std::time::Duration::from_millis(5)).await;
            }
            discard(taken);
            Ok(())
        })
        .await
        .unwrap();
        assert_eq!(STOCK.lock().len(), size());
    }
}
