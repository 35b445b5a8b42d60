//! `skillgate serve` as a child process: started on a free port, its stderr read line by line,
//! stopped with SIGTERM or killed with SIGKILL.
#![allow(dead_code)]

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use crate::support::common::{sigterm, skillgate_command};

/// A running `skillgate serve` and its stderr lines.
pub struct Served {
    pub child: Child,
    pub addr: String,
    /// The line that says where it listens, with what.
    pub started: String,
    pub stderr: mpsc::Receiver<String>,
}

pub fn serve(project: &Path, args: &[&str], env: &[(&str, &str)]) -> Served {
    let mut command = skillgate_command(project);
    command
        .arg("serve")
        .args(args)
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    for (k, v) in env {
        command.env(k, v);
    }
    let mut child = command.spawn().expect("start skillgate serve");
    let (tx, rx) = mpsc::channel();
    let stderr = child.stderr.take().unwrap();
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            let _ = tx.send(line);
        }
    });
    let (addr, started) = loop {
        let line = rx
            .recv_timeout(Duration::from_secs(30))
            .expect("serve prints where it listens");
        // HTTP's address, or the operations listener's when HTTP is off.
        if let Some(rest) = line
            .split_once("listening on ")
            .and_then(|(_, doors)| doors.split("http://").nth(1))
        {
            break (rest.split_whitespace().next().unwrap().to_string(), line);
        }
    };
    Served {
        child,
        addr,
        started,
        stderr: rx,
    }
}

impl Served {
    /// Waits for a stderr line that contains `what`, taking each line as it comes (no
    /// polling): the line, or every line seen when `within` passed first.
    pub fn logged(&self, what: &str, within: Duration) -> Result<String, Vec<String>> {
        let deadline = std::time::Instant::now() + within;
        let mut seen = Vec::new();
        loop {
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            match self.stderr.recv_timeout(left) {
                Ok(line) if line.contains(what) => return Ok(line),
                Ok(line) => seen.push(line),
                Err(_) => return Err(seen),
            }
        }
    }

    pub fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    /// POSTs `body` as JSON to `path`: the status and the JSON answer.
    pub async fn post(&self, path: &str, body: &serde_json::Value) -> (u16, serde_json::Value) {
        self.post_as(None, path, body).await
    }

    /// [`Served::post`] with `key` as the bearer key, if any.
    pub async fn post_as(
        &self,
        key: Option<&str>,
        path: &str,
        body: &serde_json::Value,
    ) -> (u16, serde_json::Value) {
        let mut request = crate::support::common::http_client()
            .post(self.url(path))
            .json(body);
        if let Some(key) = key {
            request = request.bearer_auth(key);
        }
        let response = request.send().await.expect("request sent");
        let status = response.status().as_u16();
        (status, response.json().await.expect("a JSON answer"))
    }

    /// GETs `path`: its JSON answer.
    pub async fn get(&self, path: &str) -> serde_json::Value {
        self.get_as(None, path).await
    }

    /// [`Served::get`] with `key` as the bearer key, if any.
    pub async fn get_as(&self, key: Option<&str>, path: &str) -> serde_json::Value {
        let mut request = crate::support::common::http_client().get(self.url(path));
        if let Some(key) = key {
            request = request.bearer_auth(key);
        }
        request
            .send()
            .await
            .expect("request sent")
            .json()
            .await
            .expect("a JSON answer")
    }

    /// Where its SMTP listener listens, as its start line says.
    pub fn smtp_addr(&self) -> std::net::SocketAddr {
        self.started
            .split("smtp://")
            .nth(1)
            .and_then(|rest| rest.split([' ', ',', ')']).next())
            .and_then(|a| a.parse().ok())
            .unwrap_or_else(|| panic!("no smtp:// address in `{}`", self.started))
    }

    /// SIGTERM, then the exit code and the rest of stderr.
    pub fn stop(mut self) -> (Option<i32>, Vec<String>) {
        sigterm(&self.child);
        let code = self.child.wait().expect("wait").code();
        let rest: Vec<String> = self.stderr.try_iter().collect();
        (code, rest)
    }

    /// SIGKILL: the process gets no chance to clean up.
    pub fn kill(mut self) {
        self.child.kill().expect("kill");
        let _ = self.child.wait();
    }
}

impl Drop for Served {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
