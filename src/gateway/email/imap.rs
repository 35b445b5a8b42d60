//! Taking mail from an IMAP folder (RFC 3501, through async-imap): log in, select the folder,
//! pass every message above the remembered UID to the same intake as SMTP, remember each UID
//! once its mail is queued, then wait for more with IDLE (RFC 2177) where the server offers it,
//! else poll. The first time (or after the folder's UIDVALIDITY changed) the unread mail is
//! taken. Connection failures retry with backoff; a refused login marks the transport
//! unauthorized in `/readyz`.

use std::sync::Arc;
use std::time::Duration;

use async_imap::types::Fetch;
use futures::TryStreamExt;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpStream;
use tokio_util::sync::CancellationToken;

use crate::config::email::ImapConfig;
use crate::gateway::email::cursor::{Cursor, Position};
use crate::gateway::email::intake::{Intake, IntakeError, Taken};
use crate::gateway::transport::{Readiness, State};

/// The name `/readyz` shows for the mailbox.
pub const NAME: &str = "email-imap";
/// Longest wait for one exchange with the server.
const EXCHANGE: Duration = Duration::from_secs(60);
/// Longest wait between two attempts to reach the server.
const MAX_BACKOFF: Duration = Duration::from_secs(60);

trait Io: AsyncRead + AsyncWrite + Unpin + Send + std::fmt::Debug {}
impl<T: AsyncRead + AsyncWrite + Unpin + Send + std::fmt::Debug> Io for T {}

type Session = async_imap::Session<Box<dyn Io>>;

/// Why a session with the server ended.
#[derive(Debug)]
enum Failure {
    /// The server refused the login.
    Login(String),
    /// The server, the network or the store; trying again may help.
    Other(String),
}

impl From<async_imap::error::Error> for Failure {
    fn from(err: async_imap::error::Error) -> Failure {
        Failure::Other(err.to_string())
    }
}

/// Everything one poller needs.
pub struct Poller {
    pub config: ImapConfig,
    pub intake: Arc<Intake>,
    pub cursor: Cursor,
    pub max_size: usize,
    pub readiness: Readiness,
}

impl Poller {
    /// Takes mail until `stop`, reconnecting with backoff.
    pub async fn run(self, stop: CancellationToken) {
        self.readiness.set(NAME, State::Starting);
        let mut backoff = Duration::from_secs(1);
        loop {
            let ended = tokio::select! {
                () = stop.cancelled() => return,
                ended = self.session(&stop, &mut backoff) => ended,
            };
            let (state, error) = match ended {
                Ok(()) => return,
                Err(Failure::Login(error)) => (State::Unauthorized, error),
                Err(Failure::Other(error)) => (State::Down, error),
            };
            self.readiness.set(NAME, state);
            tracing::warn!(
                host = self.config.host,
                user = self.config.user,
                folder = self.config.folder,
                error,
                retry_in_ms = backoff.as_millis() as u64,
                "the IMAP mailbox cannot be read; trying again"
            );
            tokio::select! {
                () = stop.cancelled() => return,
                () = tokio::time::sleep(backoff) => {}
            }
            backoff = (backoff * 2).min(MAX_BACKOFF);
        }
    }

    /// One connection: log in, catch up, then wait and take until `stop` or a failure.
    async fn session(
        &self,
        stop: &CancellationToken,
        backoff: &mut Duration,
    ) -> Result<(), Failure> {
        let config = &self.config;
        let mut session = within(self.login()).await??;
        let idle = within(session.capabilities()).await??.has_str("IDLE");
        let mailbox = within(session.select(&config.folder)).await??;
        let validity = mailbox.uid_validity.unwrap_or(0);
        let mut last = match self.cursor.load().await.map_err(Failure::Other)? {
            Some(at) if at.validity == validity => at.uid,
            remembered => {
                if remembered.is_some() {
                    tracing::warn!(
                        folder = config.folder,
                        "the folder's UIDVALIDITY changed; taking its unread mail again"
                    );
                }
                self.catch_up(&mut session, validity, mailbox.uid_next)
                    .await?
            }
        };
        self.readiness.set(NAME, State::Ready);
        *backoff = Duration::from_secs(1);
        loop {
            last = self.take_new(&mut session, validity, last).await?;
            if idle {
                let mut handle = session.idle();
                within(handle.init()).await??;
                let (wait, interrupt) = handle.wait_with_timeout(config.poll_interval);
                let woke = tokio::select! {
                    () = stop.cancelled() => None,
                    woke = wait => Some(woke),
                };
                drop(interrupt);
                if woke.is_none() {
                    return Ok(());
                }
                woke.expect("checked")?;
                session = within(handle.done()).await??;
            } else {
                tokio::select! {
                    () = stop.cancelled() => {
                        let _ = within(session.logout()).await;
                        return Ok(());
                    }
                    () = tokio::time::sleep(config.poll_interval) => {}
                }
            }
        }
    }

    async fn login(&self) -> Result<Session, Failure> {
        let config = &self.config;
        let tcp = TcpStream::connect((config.host.as_str(), config.port))
            .await
            .map_err(|e| {
                Failure::Other(format!(
                    "connecting to {}:{}: {e}",
                    config.host, config.port
                ))
            })?;
        let stream: Box<dyn Io> = if config.tls {
            let connector = super::tls::connector(config.ca.as_deref()).map_err(Failure::Other)?;
            let name = super::tls::server_name(&config.host).map_err(Failure::Other)?;
            let tls = connector
                .connect(name, tcp)
                .await
                .map_err(|e| Failure::Other(format!("TLS with {}: {e}", config.host)))?;
            Box::new(tls)
        } else {
            Box::new(tcp)
        };
        let mut client = async_imap::Client::new(stream);
        client
            .read_response()
            .await
            .map_err(|e| Failure::Other(e.to_string()))?
            .ok_or_else(|| Failure::Other("the server closed before its greeting".into()))?;
        client
            .login(&config.user, &config.password)
            .await
            .map_err(|(err, _)| match err {
                async_imap::error::Error::No(reason) | async_imap::error::Error::Bad(reason) => {
                    Failure::Login(format!("login as {} refused: {reason}", config.user))
                }
                other => Failure::Other(other.to_string()),
            })
    }

    /// The first look at a folder: its unread mail is taken; the position is then the newest
    /// message.
    async fn catch_up(
        &self,
        session: &mut Session,
        validity: u32,
        uid_next: Option<u32>,
    ) -> Result<u32, Failure> {
        let mut unread: Vec<u32> = within(session.uid_search("UNSEEN"))
            .await??
            .into_iter()
            .collect();
        unread.sort_unstable();
        for &uid in &unread {
            self.take(session, uid).await?;
        }
        let newest = uid_next.map_or(0, |next| next.saturating_sub(1));
        let last = newest.max(unread.last().copied().unwrap_or(0));
        self.remember(validity, last).await?;
        Ok(last)
    }

    /// Takes every message above `last`, remembering each UID once its mail is queued; the
    /// new position.
    async fn take_new(
        &self,
        session: &mut Session,
        validity: u32,
        mut last: u32,
    ) -> Result<u32, Failure> {
        // `n:*` always names the newest message, even one at or below `n`: filtered below.
        let mut uids: Vec<u32> = within(session.uid_search(format!("UID {}:*", last + 1)))
            .await??
            .into_iter()
            .filter(|uid| *uid > last)
            .collect();
        uids.sort_unstable();
        for uid in uids {
            self.take(session, uid).await?;
            last = uid;
            self.remember(validity, last).await?;
        }
        Ok(last)
    }

    /// Keeps the folder's position in the store.
    async fn remember(&self, validity: u32, uid: u32) -> Result<(), Failure> {
        self.cursor
            .save(Position { validity, uid })
            .await
            .map_err(Failure::Other)
    }

    /// Fetches message `uid` and hands it to the intake. A mail too large or unreadable is
    /// logged and passed over; a store failure is an error (the UID is not remembered, so it
    /// is taken again).
    async fn take(&self, session: &mut Session, uid: u32) -> Result<(), Failure> {
        let size = fetch(session, uid, "(UID RFC822.SIZE)")
            .await?
            .and_then(|f| f.size)
            .unwrap_or(0) as usize;
        if size > self.max_size {
            tracing::warn!(
                uid,
                size,
                max = self.max_size,
                "a mail above the size cap is passed over"
            );
            return Ok(());
        }
        let Some(message) = fetch(session, uid, "(UID BODY[])").await? else {
            return Ok(());
        };
        let raw = message.body().unwrap_or_default();
        let envelope_from = return_path(raw);
        match self
            .intake
            .accept(raw, &envelope_from, &[], &Default::default())
            .await
        {
            Ok(Taken::Queued(id)) => tracing::debug!(uid, event = id, "mail queued"),
            Ok(Taken::Duplicate) => tracing::debug!(uid, "mail taken before"),
            Ok(Taken::Dropped(why)) => tracing::info!(uid, why, "mail dropped"),
            Err(IntakeError::Mail(err)) => {
                tracing::warn!(uid, error = %err, "a mail that cannot be read is passed over")
            }
            Err(IntakeError::Store(err)) => return Err(Failure::Other(err)),
        }
        Ok(())
    }
}

/// One message's `items`, or `None` when it is gone (expunged meanwhile).
async fn fetch(session: &mut Session, uid: u32, items: &str) -> Result<Option<Fetch>, Failure> {
    let fetches: Vec<Fetch> = within(async {
        session
            .uid_fetch(uid.to_string(), items)
            .await?
            .try_collect()
            .await
    })
    .await??;
    Ok(fetches.into_iter().find(|f| f.uid == Some(uid)))
}

/// Waits at most [`EXCHANGE`] for one exchange with the server.
async fn within<T>(exchange: impl Future<Output = T>) -> Result<T, Failure> {
    tokio::time::timeout(EXCHANGE, exchange)
        .await
        .map_err(|_| Failure::Other("the IMAP server did not answer in time".into()))
}

/// The return path the delivering server recorded (`Return-Path:`, `<>` for a bounce: given
/// as empty), else the `From` address: what the loop guard reads as the envelope sender.
fn return_path(raw: &[u8]) -> String {
    let Some(message) = mail_parser::MessageParser::new().parse_headers(raw) else {
        return String::new();
    };
    if let Some(path) = message.header_raw("Return-Path") {
        let path = path.trim();
        let path = path.strip_prefix('<').unwrap_or(path);
        let path = path.strip_suffix('>').unwrap_or(path);
        return path.trim().to_string();
    }
    message
        .from()
        .and_then(|a| a.first())
        .and_then(|a| a.address())
        .unwrap_or_default()
        .to_string()
}

#[cfg(test)]
mod tests {
    use super::return_path;

    #[test]
    fn the_return_path_header_is_the_envelope_sender_and_from_stands_in_without_it() {
        let bounce =
            b"Return-Path: <>\r\nFrom: MAILER-DAEMON@example.org\r\nSubject: x\r\n\r\nbody\r\n";
        assert_eq!(return_path(bounce), "");
        let kept = b"Return-Path: <ada@example.org>\r\nFrom: Ada <ada@example.org>\r\n\r\nhi\r\n";
        assert_eq!(return_path(kept), "ada@example.org");
        let none = b"From: Ada <ada@example.org>\r\nSubject: x\r\n\r\nhi\r\n";
        assert_eq!(return_path(none), "ada@example.org");
    }
}
