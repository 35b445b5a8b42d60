//! The SMTP listener (RFC 5321, commands parsed by smtp-proto): EHLO with SIZE, 8BITMIME,
//! PIPELINING; MAIL, RCPT, DATA, RSET, NOOP, QUIT. A message is answered 250 only once it is
//! durably queued, 4xx while the store cannot take it (the sender retries), 552 above the size
//! cap, 550 with the reason when it cannot be read. STARTTLS is not offered.

use std::sync::Arc;
use std::time::Duration;

use smtp_proto::Request;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::{TcpListener, TcpStream};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::gateway::email::config::EmailConfig;
use crate::gateway::email::intake::{Intake, IntakeError, Taken};

/// A client that says nothing this long is let go (RFC 5321 4.5.3.2 suggests 5 minutes).
const IDLE: Duration = Duration::from_secs(300);
/// Longest command line.
const MAX_LINE: usize = 4096;
/// Recipients of one message.
const MAX_RECIPIENTS: usize = 100;

/// Accepts connections until `stop`; each session is tracked on `tracker`.
pub async fn serve(
    listener: TcpListener,
    intake: Arc<Intake>,
    config: Arc<EmailConfig>,
    stop: CancellationToken,
    tracker: TaskTracker,
) {
    loop {
        let accepted = tokio::select! {
            () = stop.cancelled() => return,
            accepted = listener.accept() => accepted,
        };
        match accepted {
            Ok((stream, peer)) => {
                // Each answer is one write; sent at once, not held back for the client's ACK.
                let _ = stream.set_nodelay(true);
                let (intake, config, stop) = (intake.clone(), config.clone(), stop.clone());
                tracker.spawn(async move {
                    if let Err(err) = session(stream, &intake, &config, &stop).await {
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

async fn session(
    stream: TcpStream,
    intake: &Intake,
    config: &EmailConfig,
    stop: &CancellationToken,
) -> std::io::Result<()> {
    let (read, mut write) = stream.into_split();
    let mut reader = BufReader::new(read);
    let host = &config.hostname;
    write
        .write_all(format!("220 {host} ESMTP skillgate\r\n").as_bytes())
        .await?;
    let mut greeted = false;
    let mut envelope = Envelope::default();
    let mut line = Vec::new();
    loop {
        line.clear();
        let mut limited = (&mut reader).take(MAX_LINE as u64 + 1);
        let read = tokio::select! {
            () = stop.cancelled() => {
                write.write_all(format!("421 4.3.2 {host} shutting down\r\n").as_bytes()).await?;
                return Ok(());
            }
            read = tokio::time::timeout(IDLE, limited.read_until(b'\n', &mut line)) => read,
        };
        let n = match read {
            Ok(Ok(n)) => n,
            Ok(Err(err)) => return Err(err),
            Err(_) => {
                write.write_all(b"421 4.4.2 idle too long\r\n").await?;
                return Ok(());
            }
        };
        if n == 0 {
            return Ok(());
        }
        if line.len() > MAX_LINE {
            write.write_all(b"500 5.5.2 line too long\r\n").await?;
            return Ok(());
        }
        let answer = match Request::parse(&mut line.iter()) {
            Ok(Request::Ehlo { .. }) => {
                greeted = true;
                envelope = Envelope::default();
                format!(
                    "250-{host}\r\n250-SIZE {}\r\n250-8BITMIME\r\n250-PIPELINING\r\n250 SMTPUTF8\r\n",
                    config.max_size
                )
            }
            Ok(Request::Helo { .. }) => {
                greeted = true;
                envelope = Envelope::default();
                format!("250 {host}\r\n")
            }
            Ok(Request::Mail { from }) => {
                if !greeted {
                    "503 5.5.1 say EHLO first\r\n".into()
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
                    write
                        .write_all(b"354 End data with <CR><LF>.<CR><LF>\r\n")
                        .await?;
                    let data = receive(&mut reader, config.max_size).await?;
                    let from = envelope.from.take().unwrap_or_default();
                    let to = std::mem::take(&mut envelope.to);
                    match data {
                        None => format!(
                            "552 5.3.4 message size exceeds the limit of {} bytes\r\n",
                            config.max_size
                        ),
                        Some(raw) => answer(intake.accept(&raw, &from, &to).await),
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
                write
                    .write_all(format!("221 2.0.0 {host} closing\r\n").as_bytes())
                    .await?;
                return Ok(());
            }
            Ok(Request::StartTls) => "502 5.5.1 STARTTLS is not offered\r\n".into(),
            Ok(other) => format!("502 5.5.1 {} is not implemented\r\n", other.name()),
            Err(_) => "500 5.5.2 syntax error\r\n".into(),
        };
        write.write_all(answer.as_bytes()).await?;
    }
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

/// The message after DATA, dot-unstuffed, up to the lone `.`; `None` (with the rest read and
/// dropped) when it is larger than `max`.
async fn receive(
    reader: &mut BufReader<tokio::net::tcp::OwnedReadHalf>,
    max: usize,
) -> std::io::Result<Option<Vec<u8>>> {
    let mut data = Vec::new();
    let mut line = Vec::new();
    let mut over = false;
    loop {
        line.clear();
        let n = tokio::time::timeout(IDLE, reader.read_until(b'\n', &mut line))
            .await
            .map_err(|_| std::io::Error::new(std::io::ErrorKind::TimedOut, "DATA stalled"))??;
        if n == 0 {
            return Err(std::io::Error::new(
                std::io::ErrorKind::UnexpectedEof,
                "the client left during DATA",
            ));
        }
        if line == b".\r\n" || line == b".\n" {
            return Ok((!over).then_some(data));
        }
        let body = if line.starts_with(b"..") {
            &line[1..]
        } else {
            &line[..]
        };
        if data.len() + body.len() > max {
            over = true;
            data.clear();
        }
        if !over {
            data.extend_from_slice(body);
        }
    }
}
