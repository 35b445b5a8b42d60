//! A line-delimited JSON door over TCP, written outside skillgate's source against its public
//! API: the example of adding a transport (README "Adding a transport").
//!
//! A client sends one JSON object a line and gets JSON lines back:
//!
//! ```text
//! → {"id": "1", "skill": "hello", "args": {"name": "Ada"}, "key": "sg_...", "stream": true}
//! ← {"id": "1", "message": "thinking..."}                  (streamed parts, with "stream")
//! ← {"id": "1", "result": "Hello, Ada!"}                    (or)
//! ← {"id": "1", "error": {"type": "not-found", "detail": "..."}}
//! ```
//!
//! What a door does, and what it is given for it:
//! - authenticate the caller (`key`, checked against the server's keys; without keys, the
//!   local caller, so bind it to loopback);
//! - find the skill through the host's policy (hidden skills, a key's scope) and dispatch it
//!   on the gateway, which fills the context, checks the args and runs the skill;
//! - deliver the reply parts and the outcome in its own form, telling errors by their public
//!   slug and detail only;
//! - stop taking work when the host stops, and let runs in flight answer.

use std::net::SocketAddr;
use std::sync::Arc;

use serde_json::{Map, Value, json};
use skillgate::context::id;
use skillgate::gateway::door::Door;
use skillgate::gateway::keys::KeyRing;
use skillgate::gateway::{GatewayError, Host, Inbound, ReplyPart};
use skillgate::kernel::ToolRef;
use skillgate::kernel::authority::Principal;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::{TcpListener, TcpStream};

/// The door's name (`nonlocals.gateway.transport`, `/readyz`).
pub const NAME: &str = "jsonl";

/// Longest line a client may send.
const MAX_LINE: usize = 1024 * 1024;

pub struct JsonlDoor {
    listener: parking_lot::Mutex<Option<TcpListener>>,
    addr: SocketAddr,
    keys: KeyRing,
}

impl JsonlDoor {
    /// Binds `addr`; callers authenticate with one of `keys` (none: the local caller).
    pub async fn bind(addr: SocketAddr, keys: KeyRing) -> std::io::Result<Arc<JsonlDoor>> {
        let listener = TcpListener::bind(addr).await?;
        let addr = listener.local_addr()?;
        Ok(Arc::new(JsonlDoor {
            listener: parking_lot::Mutex::new(Some(listener)),
            addr,
            keys,
        }))
    }

    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// Who sent `key`: a key's principal, the local caller when keys are off, or refused.
    fn caller(&self, key: Option<&str>) -> Result<Principal, GatewayError> {
        if self.keys.is_empty() {
            return Ok(Principal::local());
        }
        key.and_then(|k| self.keys.verify(k))
            .map(|k| k.principal().clone())
            .ok_or(GatewayError::Unauthorized {
                presented: key.is_some(),
            })
    }
}

impl Door for JsonlDoor {
    fn name(&self) -> &'static str {
        NAME
    }

    fn start(self: Arc<Self>, host: &Host) {
        let Some(listener) = self.listener.lock().take() else {
            return;
        };
        host.gateway
            .readiness
            .set(NAME, skillgate::gateway::transport::State::Ready);
        let (door, host) = (self.clone(), host.clone());
        let tracker = host.background.clone();
        tracker.spawn(async move {
            loop {
                let accepted = tokio::select! {
                    () = host.stopping.cancelled() => break,
                    accepted = listener.accept() => accepted,
                };
                if let Ok((socket, _)) = accepted {
                    host.background
                        .spawn(serve(door.clone(), host.clone(), socket));
                }
            }
        });
    }
}

/// One connection: a request a line, answered in turn, until the client leaves or the host
/// stops (a run in flight answers first).
async fn serve(door: Arc<JsonlDoor>, host: Host, socket: TcpStream) {
    // Runs count against this address's share of the runs at once.
    let client = socket.peer_addr().ok().map(|addr| addr.ip());
    let (read, mut write) = socket.into_split();
    let mut lines = BufReader::new(read);
    let mut line = String::new();
    loop {
        line.clear();
        // A line longer than the cap is cut there (and fails to parse).
        let mut limited = AsyncReadExt::take(&mut lines, MAX_LINE as u64);
        let read = tokio::select! {
            () = host.stopping.cancelled() => break,
            read = limited.read_line(&mut line) => read,
        };
        if !matches!(read, Ok(n) if n > 0) {
            break;
        }
        let request: Map<String, Value> = match serde_json::from_str(&line) {
            Ok(request) => request,
            Err(err) => {
                let error = GatewayError::malformed_json(&err);
                if send(&mut write, &answer(&Value::Null, Err(&error)))
                    .await
                    .is_err()
                {
                    break;
                }
                continue;
            }
        };
        if handle(&door, &host, (request, client), &mut write)
            .await
            .is_err()
        {
            break;
        }
    }
}

/// Runs one request and writes its answer lines.
async fn handle(
    door: &JsonlDoor,
    host: &Host,
    (request, client): (Map<String, Value>, Option<std::net::IpAddr>),
    write: &mut (impl AsyncWriteExt + Unpin),
) -> std::io::Result<()> {
    let id = request.get("id").cloned().unwrap_or(Value::Null);
    let key = request.get("key").and_then(Value::as_str);
    let principal = match door.caller(key) {
        Ok(principal) => principal,
        Err(error) => return send(write, &answer(&id, Err(&error))).await,
    };
    let skill = request.get("skill").and_then(Value::as_str).unwrap_or("");
    let index = host.gateway.kernel.registry().current();
    let tool = match host.policy.reach(&index, skill, scope(door, key)) {
        Ok(tool) => tool,
        Err(refusal) => return send(write, &answer(&id, Err(&refusal.into()))).await,
    };
    let stream = request.get("stream").and_then(Value::as_bool) == Some(true);
    let args = request.get("args").cloned().unwrap_or_else(|| json!({}));
    let request_id = id::format(id::next_id());
    let mut dispatch = host.gateway.dispatch(Inbound {
        transport: NAME,
        skill: ToolRef::Name(Arc::from(tool.name.as_str())),
        tool: Some(tool.clone()),
        authority: host.policy.authority(&tool, principal),
        announce: Some(json!({ "skill": tool.name, "args": args, "requestId": request_id })),
        args,
        request: Map::new(),
        request_id: request_id.clone(),
        reply_to: json!({ "id": id }),
        follow: false,
        timeout: Some(host.timeout),
        duplex: false,
        session: None,
        client,
    });
    while let Some(part) = dispatch.parts.recv().await {
        match part {
            ReplyPart::Message(message) | ReplyPart::Chunk(message) if stream => {
                send(write, &json!({ "id": id, "message": message })).await?;
            }
            ReplyPart::Done(outcome) => {
                let line = match outcome {
                    Ok(result) => answer(&id, Ok(result.map_or(Value::Null, |v| (*v).clone()))),
                    Err(err) => answer(
                        &id,
                        Err(&GatewayError::from_run(&err, &tool.name, &request_id)),
                    ),
                };
                return send(write, &line).await;
            }
            _ => {}
        }
    }
    let error = GatewayError::Internal {
        cause: "the run ended without an answer".into(),
        run: None,
    };
    send(write, &answer(&id, Err(&error))).await
}

/// The skills `key` may name: its scope, or every skill without keys.
fn scope<'a>(door: &'a JsonlDoor, key: Option<&str>) -> &'a skillgate::gateway::policy::Scope {
    match key.and_then(|k| door.keys.verify(k)) {
        Some(key) => key.scope(),
        None => skillgate::gateway::policy::Scope::all(),
    }
}

/// The final line: the result, or the error by its public slug and detail.
fn answer(id: &Value, outcome: Result<Value, &GatewayError>) -> Value {
    match outcome {
        Ok(result) => json!({ "id": id, "result": result }),
        Err(error) => json!({
            "id": id,
            "error": { "type": error.slug(), "detail": error.public_detail() },
        }),
    }
}

async fn send(write: &mut (impl AsyncWriteExt + Unpin), line: &Value) -> std::io::Result<()> {
    let mut bytes = line.to_string().into_bytes();
    bytes.push(b'\n');
    write.write_all(&bytes).await
}
