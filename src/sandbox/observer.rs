//! What a caller of untrusted code may want to know besides its result: the lines it wrote to
//! `console` (bounded) and whether it ended with `ctx.manager.finish` rather than a return.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use parking_lot::Mutex;

use crate::context::Context;

/// Where the observer sits on the code's own context (not inherited by what it invokes).
pub(crate) const PATH: &str = "sandbox.observer";

/// Console bytes kept; later lines are counted, not kept.
const MAX_BYTES: usize = 16 * 1024;

#[derive(Debug, Default)]
pub struct Observer {
    console: Mutex<Console>,
    finished: AtomicBool,
}

#[derive(Debug, Default)]
struct Console {
    lines: Vec<String>,
    bytes: usize,
    dropped: usize,
}

impl Observer {
    pub(crate) fn console(&self, level: &str, text: &str) {
        let mut console = self.console.lock();
        let line = match level {
            "info" => text.to_string(),
            other => format!("[{other}] {text}"),
        };
        if console.bytes + line.len() > MAX_BYTES {
            console.dropped += 1;
            return;
        }
        console.bytes += line.len();
        console.lines.push(line);
    }

    pub(crate) fn mark_finished(&self) {
        self.finished.store(true, Ordering::Relaxed);
    }

    /// True when the code called `ctx.manager.finish` on its own context.
    pub fn finished(&self) -> bool {
        self.finished.load(Ordering::Relaxed)
    }

    /// The console lines kept, and how many were left out for size.
    pub fn console_lines(&self) -> (Vec<String>, usize) {
        let console = self.console.lock();
        (console.lines.clone(), console.dropped)
    }
}

/// The observer on `ctx` itself, if its caller set one.
pub(crate) fn of(ctx: &Context) -> Option<Arc<Observer>> {
    ctx.extension::<Observer>(PATH)
}
