//! SIGINT/SIGTERM: wait for one, and announce it on the `shutdown` topic before exiting.

use serde_json::json;

use crate::events::KernelBus;
use crate::kernel::{InvokeOptions, Kernel};

/// Which signal ended the process.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Signal {
    Interrupt,
    Terminate,
}

impl Signal {
    pub fn name(self) -> &'static str {
        match self {
            Signal::Interrupt => "SIGINT",
            Signal::Terminate => "SIGTERM",
        }
    }

    /// The conventional exit code: 128 + signal number.
    pub fn exit_code(self) -> u8 {
        match self {
            Signal::Interrupt => 130,
            Signal::Terminate => 143,
        }
    }
}

/// SIGINT and SIGTERM, caught from the moment this returns (so a signal sent right after the
/// start line is printed stops the server cleanly instead of killing it).
pub fn listen() -> Signals {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        Signals {
            interrupt: signal(SignalKind::interrupt()).ok(),
            terminate: signal(SignalKind::terminate()).ok(),
        }
    }
    #[cfg(not(unix))]
    {
        Signals {}
    }
}

/// The signals [`listen`] caught.
pub struct Signals {
    #[cfg(unix)]
    interrupt: Option<tokio::signal::unix::Signal>,
    #[cfg(unix)]
    terminate: Option<tokio::signal::unix::Signal>,
}

impl Signals {
    /// The next signal caught.
    pub async fn recv(&mut self) -> Signal {
        #[cfg(unix)]
        {
            async fn next(signal: Option<&mut tokio::signal::unix::Signal>) {
                match signal {
                    Some(signal) => {
                        signal.recv().await;
                    }
                    None => std::future::pending().await,
                }
            }
            tokio::select! {
                () = next(self.interrupt.as_mut()) => Signal::Interrupt,
                () = next(self.terminate.as_mut()) => Signal::Terminate,
            }
        }
        #[cfg(not(unix))]
        {
            let _ = tokio::signal::ctrl_c().await;
            Signal::Interrupt
        }
    }
}

/// Emits `{ topic: shutdown, type: signal, data: { signal } }` and waits for the emit (handlers
/// run on their own, so they have only as long as the process lives).
pub async fn announce(kernel: &Kernel, signal: Signal) {
    announce_reason(kernel, signal.name()).await;
    kernel.bus().shutdown();
}

/// Emits the `shutdown` event with `reason` (a signal name, or why an embedder stops) and
/// waits for the emit; the bus keeps running (a server still drains).
pub async fn announce_reason(kernel: &Kernel, reason: &str) {
    let args = json!({ "topic": "shutdown", "type": "signal", "data": { "signal": reason } });
    let mut options = InvokeOptions::default();
    options.context.extensions.push((
        crate::events::SYSTEM_EMIT_PATH.into(),
        std::sync::Arc::new(crate::events::SystemEmit),
    ));
    if let Err(err) = kernel.invoke("event-emit", args, options).await {
        tracing::warn!(error = %err, "could not emit the shutdown event");
    }
}
