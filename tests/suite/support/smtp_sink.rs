//! An SMTP server that takes every message and keeps it: where skillgate's answers go (its
//! relay) in the email tests. Speaks enough of RFC 5321 for lettre: EHLO, MAIL, RCPT, DATA,
//! RSET, NOOP, QUIT.
#![allow(dead_code)]

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::sync::Notify;

/// A message the sink took.
#[derive(Debug, Clone)]
pub struct Received {
    pub from: String,
    pub to: Vec<String>,
    pub raw: Vec<u8>,
}

impl Received {
    pub fn parsed(&self) -> mail_parser::Message<'_> {
        mail_parser::MessageParser::default()
            .parse(&self.raw)
            .expect("a MIME message")
    }

    pub fn header(&self, name: &str) -> Option<String> {
        self.parsed().header_raw(name).map(|v| v.trim().to_string())
    }

    /// The text part, with `\n` line ends.
    pub fn text(&self) -> String {
        self.parsed()
            .body_text(0)
            .map(|t| t.replace("\r\n", "\n"))
            .unwrap_or_default()
    }
}

#[derive(Clone)]
pub struct Sink {
    pub addr: SocketAddr,
    pub received: Arc<Mutex<Vec<Received>>>,
    changed: Arc<Notify>,
}

impl Sink {
    pub async fn start() -> Sink {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let sink = Sink {
            addr,
            received: Arc::default(),
            changed: Arc::default(),
        };
        let (received, changed) = (sink.received.clone(), sink.changed.clone());
        tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                let (received, changed) = (received.clone(), changed.clone());
                tokio::spawn(async move {
                    let _ = session(stream, received, changed).await;
                });
            }
        });
        sink
    }

    /// The relay URL to configure.
    pub fn relay(&self) -> String {
        format!("smtp://{}", self.addr)
    }

    /// Waits for a message to `to` whose `In-Reply-To` is `message_id`.
    pub async fn answer_to(&self, message_id: &str, wait: Duration) -> Option<Received> {
        let deadline = Instant::now() + wait;
        let wanted = format!("<{message_id}>");
        loop {
            let changed = self.changed.notified();
            if let Some(found) = self
                .received
                .lock()
                .iter()
                .find(|r| r.header("In-Reply-To").as_deref() == Some(wanted.as_str()))
                .cloned()
            {
                return Some(found);
            }
            if Instant::now() >= deadline {
                return None;
            }
            let _ = tokio::time::timeout(Duration::from_millis(100), changed).await;
        }
    }

    pub fn count(&self) -> usize {
        self.received.lock().len()
    }
}

async fn session(
    stream: tokio::net::TcpStream,
    received: Arc<Mutex<Vec<Received>>>,
    changed: Arc<Notify>,
) -> std::io::Result<()> {
    let (read, mut write) = stream.into_split();
    let mut reader = BufReader::new(read);
    write.write_all(b"220 sink ESMTP\r\n").await?;
    let mut from = String::new();
    let mut to = Vec::new();
    let mut line = String::new();
    loop {
        line.clear();
        if reader.read_line(&mut line).await? == 0 {
            return Ok(());
        }
        let upper = line.to_ascii_uppercase();
        let answer: &[u8] = if upper.starts_with("EHLO") {
            b"250-sink\r\n250 8BITMIME\r\n"
        } else if upper.starts_with("HELO")
            || upper.starts_with("NOOP")
            || upper.starts_with("RSET")
        {
            b"250 OK\r\n"
        } else if upper.starts_with("MAIL FROM:") {
            from = address(&line[10..]);
            to.clear();
            b"250 OK\r\n"
        } else if upper.starts_with("RCPT TO:") {
            to.push(address(&line[8..]));
            b"250 OK\r\n"
        } else if upper.starts_with("DATA") {
            write.write_all(b"354 go ahead\r\n").await?;
            let mut raw = Vec::new();
            loop {
                let mut data = String::new();
                if reader.read_line(&mut data).await? == 0 {
                    return Ok(());
                }
                if data == ".\r\n" || data == ".\n" {
                    break;
                }
                let data = data
                    .strip_prefix('.')
                    .filter(|_| data.starts_with(".."))
                    .unwrap_or(&data);
                raw.extend_from_slice(data.as_bytes());
            }
            received.lock().push(Received {
                from: from.clone(),
                to: to.clone(),
                raw,
            });
            changed.notify_waiters();
            b"250 OK kept\r\n"
        } else if upper.starts_with("QUIT") {
            write.write_all(b"221 bye\r\n").await?;
            return Ok(());
        } else {
            b"502 not here\r\n"
        };
        write.write_all(answer).await?;
    }
}

fn address(arg: &str) -> String {
    arg.trim()
        .trim_start_matches('<')
        .split('>')
        .next()
        .unwrap_or_default()
        .to_string()
}
