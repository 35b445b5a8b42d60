//! The email transport: mail in over SMTP or from an IMAP folder, skills run, answers out over
//! SMTP through a relay.
//!
//! its settings are `crate::config::email`; [`parse`] (reading a mail and whether it may be answered), [`intake`]
//! (routes, once per Message-ID, the durable queue), [`smtp`] (the listener), [`imap`] (the
//! folder poller) with [`cursor`] (where it read up to), [`tls`] (STARTTLS and the IMAP client's
//! TLS), [`verify`] (whether the sender is who `From` says), [`thread`] (conversations the
//! server can vouch for), [`worker`] (runs and answers), [`reply`] (the answer as a threaded
//! mail), [`setup`] (put together at start).

pub mod cursor;
pub mod imap;
pub mod intake;
pub mod parse;
pub mod reply;
pub mod setup;
pub mod smtp;
pub mod thread;
pub mod tls;
pub mod verify;
pub mod worker;

use std::net::SocketAddr;
use std::sync::Arc;

use tokio::net::TcpListener;

pub use crate::config::email::{EmailConfig, EmailSettings};

use crate::events::KernelBus;
use crate::gateway::Host;
use crate::gateway::door::Door;
use crate::gateway::email::intake::Intake;
use crate::gateway::email::reply::Mailer;
use crate::gateway::transport::State;

/// The transport's name (`nonlocals.gateway.transport`, `/readyz`).
pub const NAME: &str = "email";

/// The email side of one server.
pub struct Email {
    pub config: Arc<EmailConfig>,
    pub intake: Arc<Intake>,
    pub mailer: Mailer,
    /// STARTTLS, when a certificate is configured.
    pub tls: Option<tokio_rustls::TlsAcceptor>,
    /// Its certificate, read again on a reload.
    pub cert: Option<Arc<tls::LiveCert>>,
    /// Where the SMTP listener listens (none when mail comes by IMAP only).
    pub addr: Option<SocketAddr>,
    /// Bound at start, served once the server runs.
    listener: parking_lot::Mutex<Option<TcpListener>>,
}

impl Email {
    /// Serves SMTP, polls the IMAP folder and runs the worker on the server's background
    /// tracker until it stops.
    pub fn start(self: &Arc<Self>, host: &Host) {
        if let Some(listener) = self.listener.lock().take() {
            host.gateway.readiness.set(NAME, State::Ready);
            host.background.spawn(smtp::serve(
                listener,
                self.intake.clone(),
                self.config.clone(),
                self.tls.clone(),
                host.stopping.clone(),
                host.background.clone(),
            ));
        }
        if let Some(imap) = &self.config.imap {
            let cursor = cursor::Cursor::new(
                host.gateway.kernel.bus().clone(),
                &imap.host,
                &imap.user,
                &imap.folder,
            );
            let poller = imap::Poller {
                config: imap.clone(),
                intake: self.intake.clone(),
                cursor,
                max_size: self.config.max_size,
                readiness: host.gateway.readiness.clone(),
            };
            host.background.spawn(poller.run(host.stopping.clone()));
        }
        crate::gateway::queue::spawn_jobs(host, worker::lane(), self.clone(), worker::run);
    }
}

/// Email is a door of its own: `serve` runs it beside HTTP (or without it), on its own host.
impl Door for Email {
    fn name(&self) -> &'static str {
        NAME
    }

    fn start(self: Arc<Self>, host: &Host) {
        Email::start(&self, host);
    }
}
