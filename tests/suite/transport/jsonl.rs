//! The contract over the example door of `examples/jsonl_door` (a line-delimited JSON door over
//! TCP written against the public API alone, added through `Doors::with`): a door added from
//! outside skillgate passes the same rules as its own. This harness uses only what a door's own
//! crate has: the public API and `skillgate::contract` (the `contract` feature).

use serde_json::{Value, json};
use skillgate::Kernel;
use skillgate::gateway::keys::{ApiKey, KeyRing, hash_key};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpStream;

use skillgate::contract::{Credential, Harness, Outcome, Part, Project, Refusal, Server, Setup};
use skillgate::server::DoorSettings;

#[path = "../../../examples/jsonl_door/door.rs"]
mod door;

const KEY: &str = "sg_jsonl_contract_key";

pub struct Jsonl {
    server: Server,
    addr: std::net::SocketAddr,
    credentials: bool,
}

impl Harness for Jsonl {
    const NAME: &'static str = door::NAME;
    /// A door that hands the gateway an announcement emits `gateway-message`.
    const ANNOUNCES: bool = true;

    async fn start(project: Project, setup: Setup) -> Self {
        let keys = if setup.credentials {
            KeyRing::new(vec![
                ApiKey::new("contract", &hash_key(KEY), vec![]).unwrap(),
            ])
            .unwrap()
        } else {
            KeyRing::default()
        };
        let jsonl = door::JsonlDoor::bind("127.0.0.1:0".parse().unwrap(), keys.clone())
            .await
            .expect("bind");
        let addr = jsonl.local_addr();
        // The door alone: HTTP off, no other door.
        let mut settings = DoorSettings::http(Default::default());
        settings.serve_http = false;
        settings.http.keys = keys;
        let server = Server::start(project, settings, &setup, vec![jsonl]).await;
        Jsonl {
            server,
            addr,
            credentials: setup.credentials,
        }
    }

    fn kernel(&self) -> &Kernel {
        &self.server.kernel
    }

    async fn invoke(&self, skill: &str, args: Value, credential: Credential) -> Outcome {
        let key = match (self.credentials, credential) {
            (true, Credential::Valid) => Some(KEY),
            (true, Credential::Wrong) => Some("sg_not_the_key"),
            _ => None,
        };
        let lines = exchange(self.addr, skill, args, key, false).await;
        outcome(lines.last().expect("an answer"))
    }

    async fn stream(&self, skill: &str, args: Value) -> Vec<Part> {
        let key = self.credentials.then_some(KEY);
        exchange(self.addr, skill, args, key, true)
            .await
            .iter()
            .map(|line| match line.get("message") {
                Some(message) => Part::Message(message.clone()),
                None => Part::Final(outcome(line)),
            })
            .collect()
    }

    fn start_invoke(&self, skill: &str, args: Value) -> tokio::task::JoinHandle<Outcome> {
        let (addr, key, skill) = (
            self.addr,
            self.credentials.then_some(KEY),
            skill.to_string(),
        );
        tokio::spawn(async move {
            let lines = exchange(addr, &skill, args, key, false).await;
            outcome(lines.last().expect("an answer"))
        })
    }

    fn begin_shutdown(&mut self) {
        self.server.begin_shutdown();
    }

    async fn finish(self) -> bool {
        self.server.finish().await
    }
}

/// One request on a new connection: every line answered, up to the final one.
async fn exchange(
    addr: std::net::SocketAddr,
    skill: &str,
    args: Value,
    key: Option<&str>,
    stream: bool,
) -> Vec<Value> {
    let socket = TcpStream::connect(addr).await.expect("connect");
    let (read, mut write) = socket.into_split();
    let request = json!({ "id": "1", "skill": skill, "args": args, "key": key, "stream": stream });
    write
        .write_all(format!("{request}\n").as_bytes())
        .await
        .unwrap();
    let mut lines = BufReader::new(read).lines();
    let mut answers = Vec::new();
    while let Some(line) = lines.next_line().await.expect("read") {
        let line: Value = serde_json::from_str(&line).expect("a JSON line");
        let last = line.get("message").is_none();
        answers.push(line);
        if last {
            break;
        }
    }
    answers
}

fn outcome(line: &Value) -> Outcome {
    if let Some(result) = line.get("result") {
        return Outcome::Ok(result.clone());
    }
    let kind = match line["error"]["type"].as_str() {
        Some("unauthorized") => Refusal::Credential,
        Some("not-found") => Refusal::NotFound,
        Some("invalid-args" | "bad-request" | "malformed-json") => Refusal::InvalidArgs,
        Some("denied") => Refusal::Denied,
        _ => Refusal::Failed,
    };
    Outcome::Refused(kind, line.to_string())
}

skillgate::transport_contract!(Jsonl);
