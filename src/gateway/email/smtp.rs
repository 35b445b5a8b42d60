//! The SMTP listener (RFC 5321, commands parsed by smtp-proto): EHLO with SIZE, 8BITMIME,
//! PIPELINING, and STARTTLS (RFC 3207) when a certificate is configured; MAIL, RCPT, DATA, RSET,
//! NOOP, QUIT. A message is answered 250 only once it is durably queued, 4xx while the store
//! cannot take it (the sender retries), 552 above the size cap, 550 with the reason when it
//! cannot be read.

use std::sync::Arc;
use std::time::Duration;

use smtp_proto::Request;
use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, BufReader};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Semaphore;
use tokio_rustls::TlsAcceptor;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::config::email::EmailConfig;
use crate::gateway::email::intake::{Intake, IntakeError, Taken};
use crate::gateway::email::verify::Client;
use crate::gateway::pace::Pace;

/// A client that says nothing this long is let go (RFC 5321 4.5.3.2 suggests 5 minutes).
const IDLE: Duration = Duration::from_secs(300);
/// Longest command line.
const MAX_LINE: usize = 4096;
/// Recipients of one message.
const MAX_RECIPIENTS: usize = 100;
/// The most of one line read at once during DATA.
const DATA_PIECE: usize = 8192;

/// The pause after turning a client away while every session is taken: at most 100 refusals a
/// second.
const REFUSAL_PAUSE: Duration = Duration::from_millis(10);

/// Accepts connections until `stop`; each session is tracked on `tracker`. With `tls`,
/// STARTTLS is offered.
pub async fn serve(
    listener: TcpListener,
    intake: Arc<Intake>,
    config: Arc<EmailConfig>,
    tls: Option<TlsAcceptor>,
    stop: CancellationToken,
    tracker: TaskTracker,
) {
    let sessions = Arc::new(tokio::sync::Semaphore::new(config.max_connections));
    let in_flight = InFlight::new(
        config.max_data_in_flight,
        config.max_data_wait,
        config.max_data_rate,
    );
    loop {
        let accepted = tokio::select! {
            () = stop.cancelled() => return,
            accepted = listener.accept() => accepted,
        };
        match accepted {
            Ok((mut stream, peer)) => {
                // Each answer is one write; sent at once, not held back for the client's ACK.
                let _ = stream.set_nodelay(true);
                let Ok(permit) = sessions.clone().try_acquire_owned() else {
                    // Past the cap: told at once and let go, holding nothing.
                    tracing::debug!(%peer, "an SMTP client was turned away: too many sessions");
                    let busy = format!(
                        "421 4.7.0 {} too many connections, try again later\r\n",
                        config.hostname
                    );
                    tracker.spawn(async move {
                        let _ = tokio::time::timeout(
                            Duration::from_secs(5),
                            stream.write_all(busy.as_bytes()),
                        )
                        .await;
                    });
                    // Refusals are paced: clients that reconnect as soon as they are turned
                    // away wait in the listen queue instead of spinning the accept loop.
                    tokio::select! {
                        () = stop.cancelled() => return,
                        () = tokio::time::sleep(REFUSAL_PAUSE) => {}
                        // A session ended: the next client is served at once.
                        _ = sessions.clone().acquire_owned() => {}
                    }
                    continue;
                };
                let (intake, config, stop) = (intake.clone(), config.clone(), stop.clone());
                let in_flight = in_flight.clone();
                let tls = tls.clone();
                tracker.spawn(async move {
                    let _permit = permit;
                    if let Err(err) =
                        session(stream, peer, (&intake, &in_flight), &config, tls, &stop).await
                    {
                        tracing::debug!(%peer, error = %err, "an SMTP session ended");
                    }
                });
            }
            Err(err) => {
                tracing::warn!(error = %err, "accepting an SMTP connection failed");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    }
}

/// One message being received.
#[derive(Default)]
struct Envelope {
    from: Option<String>,
    to: Vec<String>,
}

/// How a conversation ended.
enum Ended {
    /// QUIT, the client left, or the server stops.
    Closed,
    /// The client said STARTTLS and was told to go ahead.
    StartTls,
}

/// What a conversation may offer and has.
#[derive(Clone, Copy)]
struct Security {
    /// STARTTLS can be offered (a certificate is configured and TLS is not on yet).
    offer: bool,
    /// The connection is encrypted.
    on: bool,
}

async fn session(
    stream: TcpStream,
    peer: std::net::SocketAddr,
    (intake, in_flight): (&Intake, &Arc<InFlight>),
    config: &EmailConfig,
    tls: Option<TlsAcceptor>,
    stop: &CancellationToken,
) -> std::io::Result<()> {
    let mut reader = BufReader::new(stream);
    let host = &config.hostname;
    say(
        &mut reader,
        format!("220 {host} ESMTP skillgate\r\n").as_bytes(),
    )
    .await?;
    let plain = Security {
        offer: tls.is_some(),
        on: false,
    };
    let mut client = Client {
        ip: Some(peer.ip()),
        helo: String::new(),
    };
    let ended = converse(
        &mut reader,
        (intake, in_flight),
        config,
        plain,
        &mut client,
        stop,
    )
    .await?;
    let (Ended::StartTls, Some(acceptor)) = (ended, tls) else {
        return Ok(());
    };
    // Anything the client sent after STARTTLS before the handshake was sent in the clear and
    // could have been injected (RFC 3207 section 4.2 says to discard it): hang up instead.
    if !reader.buffer().is_empty() {
        return Ok(());
    }
    let stream = acceptor.accept(reader.into_inner()).await?;
    let mut reader = BufReader::new(stream);
    let secure = Security {
        offer: false,
        on: true,
    };
    // The client starts over with EHLO (RFC 3207 section 4.2).
    converse(
        &mut reader,
        (intake, in_flight),
        config,
        secure,
        &mut client,
        stop,
    )
    .await?;
    Ok(())
}

/// Commands and answers until QUIT, the client leaves, the server stops, or STARTTLS.
async fn converse<S: AsyncRead + AsyncWrite + Unpin>(
    reader: &mut BufReader<S>,
    (intake, in_flight): (&Intake, &Arc<InFlight>),
    config: &EmailConfig,
    security: Security,
    client: &mut Client,
    stop: &CancellationToken,
) -> std::io::Result<Ended> {
    let host = &config.hostname;
    let mut greeted = false;
    let mut envelope = Envelope::default();
    let mut line = Vec::new();
    loop {
        line.clear();
        let mut limited = (&mut *reader).take(MAX_LINE as u64 + 1);
        let read = tokio::select! {
            () = stop.cancelled() => {
                say(reader, format!("421 4.3.2 {host} shutting down\r\n").as_bytes()).await?;
                return Ok(Ended::Closed);
            }
            read = tokio::time::timeout(IDLE, limited.read_until(b'\n', &mut line)) => read,
        };
        let n = match read {
            Ok(Ok(n)) => n,
            Ok(Err(err)) => return Err(err),
            Err(_) => {
                say(reader, b"421 4.4.2 idle too long\r\n").await?;
                return Ok(Ended::Closed);
            }
        };
        if n == 0 {
            return Ok(Ended::Closed);
        }
        if line.len() > MAX_LINE {
            say(reader, b"500 5.5.2 line too long\r\n").await?;
            return Ok(Ended::Closed);
        }
        let answer = match Request::parse(&mut line.iter()) {
            Ok(Request::Ehlo { host: name }) => {
                client.helo = name.to_ascii_lowercase();
                greeted = true;
                envelope = Envelope::default();
                let starttls = if security.offer {
                    "250-STARTTLS\r\n"
                } else {
                    ""
                };
                format!(
                    "250-{host}\r\n250-SIZE {}\r\n250-8BITMIME\r\n250-PIPELINING\r\n{starttls}250 SMTPUTF8\r\n",
                    config.max_size
                )
            }
            Ok(Request::Helo { host: name }) => {
                client.helo = name.to_ascii_lowercase();
                greeted = true;
                envelope = Envelope::default();
                format!("250 {host}\r\n")
            }
            Ok(Request::Mail { from }) => {
                if !greeted {
                    "503 5.5.1 say EHLO first\r\n".into()
                } else if config.require_tls && !security.on {
                    "530 5.7.0 Must issue a STARTTLS command first\r\n".into()
                } else if from.size > config.max_size {
                    format!(
                        "552 5.3.4 message size exceeds the limit of {} bytes\r\n",
                        config.max_size
                    )
                } else {
                    envelope = Envelope {
                        from: Some(from.address.to_string()),
                        to: Vec::new(),
                    };
                    "250 2.1.0 OK\r\n".into()
                }
            }
            Ok(Request::Rcpt { to }) => {
                if envelope.from.is_none() {
                    "503 5.5.1 MAIL first\r\n".into()
                } else if envelope.to.len() >= MAX_RECIPIENTS {
                    "452 4.5.3 too many recipients\r\n".into()
                } else {
                    envelope.to.push(to.address.to_string());
                    "250 2.1.5 OK\r\n".into()
                }
            }
            Ok(Request::Data) => {
                if envelope.to.is_empty() {
                    "503 5.5.1 RCPT first\r\n".into()
                } else {
                    say(reader, b"354 End data with <CR><LF>.<CR><LF>\r\n").await?;
                    let data = receive(reader, config.max_size, in_flight).await?;
                    let from = envelope.from.take().unwrap_or_default();
                    let to = std::mem::take(&mut envelope.to);
                    match data {
                        // Told as soon as the cap is passed, and let go: the rest of the
                        // message is never read (it could go on without end).
                        Data::TooBig => {
                            let refusal = format!(
                                "552 5.3.4 message size exceeds the limit of {} bytes; closing\r\n",
                                config.max_size
                            );
                            say(reader, refusal.as_bytes()).await?;
                            return Ok(Ended::Closed);
                        }
                        // Many messages arrive at once, and room did not come in time: this
                        // one is told to come back later.
                        Data::Busy => {
                            say(reader, b"452 4.3.1 too much mail arriving at once; try again later; closing\r\n").await?;
                            return Ok(Ended::Closed);
                        }
                        Data::Message(raw, _held) => {
                            answer(intake.accept(&raw, &from, &to, client).await)
                        }
                    }
                }
            }
            Ok(Request::Rset) => {
                envelope = Envelope::default();
                "250 2.0.0 OK\r\n".into()
            }
            Ok(Request::Noop { .. }) => "250 2.0.0 OK\r\n".into(),
            Ok(Request::Vrfy { .. }) => {
                "252 2.5.2 cannot verify, but will take the message\r\n".into()
            }
            Ok(Request::Quit) => {
                say(reader, format!("221 2.0.0 {host} closing\r\n").as_bytes()).await?;
                return Ok(Ended::Closed);
            }
            Ok(Request::StartTls) if security.offer => {
                if !greeted {
                    "503 5.5.1 say EHLO first\r\n".into()
                } else {
                    say(reader, b"220 2.0.0 Ready to start TLS\r\n").await?;
                    return Ok(Ended::StartTls);
                }
            }
            Ok(Request::StartTls) if security.on => "503 5.5.1 TLS is already on\r\n".into(),
            Ok(Request::StartTls) => "502 5.5.1 STARTTLS is not offered\r\n".into(),
            Ok(other) => format!("502 5.5.1 {} is not implemented\r\n", other.name()),
            Err(_) => "500 5.5.2 syntax error\r\n".into(),
        };
        say(reader, answer.as_bytes()).await?;
    }
}

/// Sends an answer out at once (a TLS stream holds written bytes until flushed).
async fn say<S: AsyncRead + AsyncWrite + Unpin>(
    reader: &mut BufReader<S>,
    answer: &[u8],
) -> std::io::Result<()> {
    let stream = reader.get_mut();
    stream.write_all(answer).await?;
    stream.flush().await
}

/// The SMTP answer to a received message.
fn answer(taken: Result<Taken, IntakeError>) -> String {
    match taken {
        Ok(Taken::Queued(id)) => format!("250 2.0.0 OK queued as {id}\r\n"),
        Ok(Taken::Duplicate) => "250 2.0.0 OK (already received)\r\n".into(),
        Ok(Taken::Dropped(_)) => "250 2.0.0 OK\r\n".into(),
        Err(IntakeError::Mail(err)) => format!("550 5.6.0 {err}\r\n"),
        Err(IntakeError::Store(err)) => {
            tracing::error!(error = %err, "a mail could not be queued; the sender will retry");
            "451 4.3.0 temporary failure, try again later\r\n".into()
        }
    }
}

/// Bytes of DATA being received by every session together, bounded by
/// `email.smtp.max-data-in-flight` (a message that would pass it waits for room, at most
/// `email.smtp.max-data-wait`), and the pace they are read at, bounded by
/// `email.smtp.max-data-rate`.
pub struct InFlight {
    max: usize,
    /// The bytes free under `max`, as permits handed out first come, first served.
    room: Semaphore,
    wait: Duration,
    /// The pace bytes are read at; `None`: unpaced.
    rate: Option<Pace>,
}

impl InFlight {
    pub fn new(max: usize, wait: Duration, rate: usize) -> Arc<InFlight> {
        let max = max.min(Semaphore::MAX_PERMITS);
        Arc::new(InFlight {
            max,
            room: Semaphore::new(max),
            wait,
            rate: Pace::new(rate),
        })
    }

    /// Bytes held now.
    #[cfg(test)]
    fn used(&self) -> usize {
        self.max - self.room.available_permits()
    }

    /// Waits until `n` more bytes may be read, at the configured pace.
    async fn pace(&self, n: usize) {
        if let Some(rate) = &self.rate {
            rate.take(n).await;
        }
    }

    /// Takes `n` more bytes for `held`, waiting for room as long as the bound allows; `false`
    /// when none came in time (or `n` is more than the whole bound). A session that waits
    /// leaves its client's bytes unread: a flood of DATA past the bound waits in the senders'
    /// sockets instead of turning into sessions let go and opened again as fast as the
    /// senders reconnect.
    async fn take(&self, held: &mut Held, n: usize) -> bool {
        let Ok(count) = u32::try_from(n) else {
            return false;
        };
        if n > self.max {
            return false;
        }
        let permit = match self.room.try_acquire_many(count) {
            Ok(permit) => permit,
            Err(_) => match tokio::time::timeout(self.wait, self.room.acquire_many(count)).await {
                Ok(Ok(permit)) => permit,
                _ => return false,
            },
        };
        // Given back by `held` when the message is done with.
        permit.forget();
        held.0 += n;
        true
    }
}

/// The bytes one message holds of the bound; given back when it is dropped.
struct Held(usize, Arc<InFlight>);

impl Drop for Held {
    fn drop(&mut self) {
        if self.0 > 0 {
            self.1.room.add_permits(self.0);
        }
    }
}

/// What DATA brought.
enum Data {
    Message(Vec<u8>, Held),
    /// Past `max-size`.
    TooBig,
    /// Past `max-data-in-flight` for longer than `max-data-wait`.
    Busy,
}

/// The message after DATA, dot-unstuffed, up to the lone `.`; [`Data::TooBig`] as soon as it is
/// larger than `max`. Lines are read in pieces of at most [`DATA_PIECE`] bytes and each counts
/// against the cap as it arrives, so a client that never sends a newline holds no more memory
/// than the cap (RFC 5321 allows 1000 octets a line; longer ones are taken, in pieces).
async fn receive<S: AsyncRead + Unpin>(
    reader: &mut BufReader<S>,
    max: usize,
    in_flight: &Arc<InFlight>,
) -> std::io::Result<Data> {
    let mut held = Held(0, in_flight.clone());
    let mut data = Vec::new();
    let mut piece = Vec::new();
    // Whether the next piece starts a line (where `.` ends the message and `..` is unstuffed).
    let mut at_start = true;
    loop {
        piece.clear();
        let mut limited = (&mut *reader).take(DATA_PIECE as u64);
        let n = tokio::time::timeout(IDLE, limited.read_until(b'\n', &mut piece))
            .await
            .map_err(|_| std::io::Error::new(std::io::ErrorKind::TimedOut, "DATA stalled"))??;
        if n == 0 {
            return Err(std::io::Error::new(
                std::io::ErrorKind::UnexpectedEof,
                "the client left during DATA",
            ));
        }
        if at_start && (piece == b".\r\n" || piece == b".\n") {
            return Ok(Data::Message(data, held));
        }
        let body = if at_start && piece.starts_with(b"..") {
            &piece[1..]
        } else {
            &piece[..]
        };
        if data.len() + body.len() > max {
            return Ok(Data::TooBig);
        }
        // The bound counts the memory the message holds (its capacity), grown by doubling up
        // to the cap.
        let needed = data.len() + body.len();
        if needed > data.capacity() {
            let grown = needed.max(data.capacity() * 2).min(max);
            if !in_flight.take(&mut held, grown - data.capacity()).await {
                return Ok(Data::Busy);
            }
            data.reserve_exact(grown - data.len());
        }
        in_flight.pace(n).await;
        data.extend_from_slice(body);
        at_start = piece.ends_with(b"\n");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `lines` lines of `width` bytes each, then the lone dot.
    fn message(lines: usize, width: usize) -> Vec<u8> {
        let mut raw = Vec::new();
        for _ in 0..lines {
            raw.extend(std::iter::repeat_n(b'x', width - 2));
            raw.extend_from_slice(b"\r\n");
        }
        raw.extend_from_slice(b".\r\n");
        raw
    }

    #[tokio::test]
    async fn the_data_bound_counts_the_memory_a_message_holds_not_its_length() {
        // 600 bytes arrive in lines of 100: held as 100, 200, 400, then 800 bytes of capacity.
        let raw = message(6, 100);
        let in_flight = InFlight::new(700, Duration::ZERO, 0);
        let mut reader = BufReader::new(raw.as_slice());
        let data = receive(&mut reader, 10_000, &in_flight).await.unwrap();
        assert!(
            matches!(data, Data::Busy),
            "800 bytes held passed a 700-byte bound"
        );
        assert_eq!(in_flight.used(), 0, "given back");

        let in_flight = InFlight::new(800, Duration::ZERO, 0);
        let mut reader = BufReader::new(raw.as_slice());
        let Data::Message(data, _held) = receive(&mut reader, 10_000, &in_flight).await.unwrap()
        else {
            panic!("the message fits its bound");
        };
        assert_eq!(data.len(), 600);
        assert_eq!(in_flight.used(), data.capacity());
    }

    /// Another message holding `held` bytes of `in_flight`, and one of 600 bytes (800 of
    /// capacity at its end) being received beside it, on a task.
    async fn beside(
        in_flight: &Arc<InFlight>,
        held: usize,
    ) -> (Held, tokio::task::JoinHandle<Data>) {
        let mut other = Held(0, in_flight.clone());
        assert!(in_flight.take(&mut other, held).await);
        let in_flight = in_flight.clone();
        let receiving = tokio::spawn(async move {
            let raw = message(6, 100);
            let mut reader = BufReader::new(raw.as_slice());
            receive(&mut reader, 10_000, &in_flight).await.unwrap()
        });
        (other, receiving)
    }

    #[tokio::test(start_paused = true)]
    async fn a_message_past_the_data_bound_waits_for_room_and_goes_on_when_another_gives_it_back() {
        let in_flight = InFlight::new(1000, Duration::from_secs(30), 0);
        let (other, mut receiving) = beside(&in_flight, 800).await;
        // It takes the 200 bytes left, then waits for the next 200 it needs.
        tokio::time::sleep(Duration::from_secs(20)).await;
        assert!(
            tokio::time::timeout(Duration::ZERO, &mut receiving)
                .await
                .is_err(),
            "waits for room rather than being turned away"
        );
        assert_eq!(in_flight.used(), 1000);
        drop(other);
        let Data::Message(data, _held) = receiving.await.unwrap() else {
            panic!("taken once the other message gave its bytes back");
        };
        assert_eq!(data.len(), 600);
        assert_eq!(in_flight.used(), data.capacity());
    }

    #[tokio::test(start_paused = true)]
    async fn a_message_that_finds_no_room_within_the_wait_is_turned_away_and_gives_back_what_it_held()
     {
        let in_flight = InFlight::new(1000, Duration::from_secs(30), 0);
        let began = tokio::time::Instant::now();
        let (_other, receiving) = beside(&in_flight, 800).await;
        assert!(matches!(receiving.await.unwrap(), Data::Busy));
        assert_eq!(
            began.elapsed(),
            Duration::from_secs(30),
            "after the whole wait"
        );
        assert_eq!(in_flight.used(), 800, "only the other message's bytes held");
        // A message larger than the whole bound is turned away at once.
        let mut held = Held(0, in_flight.clone());
        assert!(!in_flight.take(&mut held, 1001).await);
        assert_eq!(began.elapsed(), Duration::from_secs(30));
    }

    #[tokio::test(start_paused = true)]
    async fn data_is_read_at_most_the_configured_bytes_a_second() {
        let in_flight = InFlight::new(1 << 20, Duration::ZERO, 8192);
        let began = tokio::time::Instant::now();
        in_flight.pace(8192).await;
        in_flight.pace(8192).await;
        // A second's worth goes at once, the next waits its second.
        assert_eq!(began.elapsed(), Duration::from_secs(1));
        let unpaced = InFlight::new(1 << 20, Duration::ZERO, 0);
        unpaced.pace(1 << 30).await;
        assert_eq!(began.elapsed(), Duration::from_secs(1), "unpaced: no wait");
    }
}
