//! A raw-socket HTTP/1.1 keep-alive client for load generation: one request in flight per
//! connection, cycling through a fixed list of requests, so that it costs little next to the
//! servers it measures.

use std::net::SocketAddr;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// One keep-alive connection.
pub struct Conn {
    stream: TcpStream,
    buf: Vec<u8>,
    requests: Vec<Vec<u8>>,
    next: usize,
}

impl Conn {
    /// A connection to `addr` that sends `POST path` with `body` (JSON) for each of `requests`
    /// in turn.
    pub async fn open(addr: SocketAddr, requests: &[(&str, &str)]) -> std::io::Result<Conn> {
        let stream = TcpStream::connect(addr).await?;
        stream.set_nodelay(true)?;
        Ok(Conn {
            stream,
            buf: Vec::with_capacity(4096),
            requests: requests
                .iter()
                .map(|(path, body)| {
                    format!(
                        "POST {path} HTTP/1.1\r\nhost: {addr}\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{body}",
                        body.len()
                    )
                    .into_bytes()
                })
                .collect(),
            next: 0,
        })
    }

    /// Sends the next request and reads one whole response: its body when the status is 200,
    /// else what went wrong (the status line, or the I/O error).
    pub async fn round_trip(&mut self) -> Result<Vec<u8>, String> {
        let request = &self.requests[self.next % self.requests.len()];
        self.next += 1;
        self.stream
            .write_all(request)
            .await
            .map_err(|e| e.to_string())?;
        self.buf.clear();
        loop {
            let mut chunk = [0u8; 4096];
            let n = self
                .stream
                .read(&mut chunk)
                .await
                .map_err(|e| e.to_string())?;
            if n == 0 {
                return Err("the server closed the connection".into());
            }
            self.buf.extend_from_slice(&chunk[..n]);
            if let Some(end) = find(&self.buf, b"\r\n\r\n") {
                let head = String::from_utf8_lossy(&self.buf[..end]).to_ascii_lowercase();
                let length: usize = head
                    .lines()
                    .find_map(|l| l.strip_prefix("content-length:"))
                    .and_then(|v| v.trim().parse().ok())
                    .ok_or_else(|| format!("no content-length: {head}"))?;
                if self.buf.len() >= end + 4 + length {
                    if !head.starts_with("http/1.1 200") {
                        let body = String::from_utf8_lossy(&self.buf[end + 4..end + 4 + length]);
                        return Err(format!(
                            "{}: {body}",
                            head.lines().next().unwrap_or_default()
                        ));
                    }
                    return Ok(self.buf[end + 4..end + 4 + length].to_vec());
                }
            }
        }
    }
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}
