//! `run.signal`: aborting a context aborts every context below it.
//!
//! Checks walk the parent chain (no per-context registration, so creating a context costs
//! nothing here). A `CancellationToken` is made only when someone needs to *wait* for an abort,
//! as a child of the parent's token, so a later abort of any ancestor still reaches it.

use std::sync::atomic::Ordering;

use tokio_util::sync::CancellationToken;

use crate::context::Context;
use crate::error::{ErrorKind, SkillError};

impl Context {
    /// `abort(reason)`: aborts this context and, through it, all its children.
    pub fn abort(&self, reason: Option<&str>) {
        let _ = self
            .0
            .abort_reason
            .set(reason.unwrap_or("aborted").to_string());
        self.0.aborted.store(true, Ordering::Release);
        if let Some(token) = self.0.token.get() {
            token.cancel();
        }
    }

    /// The abort reason if this context or an ancestor was aborted.
    pub fn aborted(&self) -> Option<String> {
        // A cancelled token below the context that was aborted keeps walking up, so children
        // report the reason given to `abort` rather than a generic one.
        let mut cancelled = false;
        let mut ctx = Some(self);
        while let Some(c) = ctx {
            if c.0.aborted.load(Ordering::Acquire) {
                return Some(c.0.abort_reason.get().cloned().unwrap_or_default());
            }
            cancelled |= c.0.token.get().is_some_and(CancellationToken::is_cancelled);
            ctx = c.parent();
        }
        cancelled.then(|| "aborted".into())
    }

    /// A token cancelled when this context (or an ancestor) is aborted.
    pub fn signal(&self) -> CancellationToken {
        self.0
            .token
            .get_or_init(|| {
                let token = match self.parent() {
                    Some(parent) => parent.signal().child_token(),
                    None => CancellationToken::new(),
                };
                if self.aborted().is_some() {
                    token.cancel();
                }
                token
            })
            .clone()
    }

    /// Resolves when the context is aborted.
    pub async fn cancelled(&self) {
        self.signal().cancelled().await;
    }

    /// The error for an aborted context.
    pub fn abort_error(&self) -> Option<SkillError> {
        self.aborted()
            .map(|reason| SkillError::new(ErrorKind::Aborted, format!("aborted: {reason}")))
    }
}
