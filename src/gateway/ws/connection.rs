//! One socket's life: authenticate (the upgrade's key, or an `auth` frame in time), then read
//! frames until the socket closes: invocations run through the shared dispatch with their log,
//! message and event frames streamed and one `result` or `error` at the end, several at once;
//! `cancel` aborts one; `message` feeds a run's `gateway-receive`; subscriptions stream topics.
//! The server pings a quiet socket and closes one that stays silent past the idle timeout.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use serde_json::{Map, Value, json};
use tokio::sync::mpsc;
use tokio_tungstenite::tungstenite::{Error as WsError, Message};
use tokio_util::sync::CancellationToken;

use crate::context::id;
use crate::context::shape::Shape;
use crate::gateway::error::RunRef;
use crate::gateway::keys::Caller;
use crate::gateway::reply::Inbox;
use crate::gateway::served::Listener;
use crate::gateway::ws::hub::{Hub, RunGuard};
use crate::gateway::ws::outbox::{Limits, Outbox, code, split};
use crate::gateway::ws::protocol::{ClientFrame, FrameError, Invoke, out};
use crate::gateway::ws::subscription::Subscriptions;
use crate::gateway::ws::upgrade::Socket;
use crate::gateway::{Dispatch, GatewayError, Inbound, ReplyPart};
use crate::kernel::ToolRef;

/// Who is on the other end, for `nonlocals.request`.
pub struct Peer {
    pub remote: SocketAddr,
    /// The client the server counts (`remote`, or the address a trusted proxy passed on).
    pub client: std::net::IpAddr,
    /// Request headers of the upgrade (without credentials).
    pub headers: Value,
    /// The credential of the upgrade request, if it carried one.
    pub caller: Option<Caller>,
}

/// A running invocation of this socket.
struct Running {
    cancel: CancellationToken,
    inbox: Option<Inbox>,
}

struct Connection {
    on: Arc<Listener>,
    hub: Arc<Hub>,
    id: String,
    /// The conversation every run on this connection shares (`ws:<128 random bits>`).
    session: String,
    peer: Peer,
    outbox: Arc<Outbox>,
    /// `None` until authenticated; then the caller (`None` inside: keys are off).
    caller: Option<Option<Caller>>,
    runs: HashMap<String, Running>,
    finished: mpsc::UnboundedSender<String>,
    subscriptions: Subscriptions,
    draining: bool,
}

/// Serves one upgraded socket until it closes.
pub async fn serve(socket: Socket, on: Arc<Listener>, hub: Arc<Hub>, peer: Peer) {
    let config = hub.config.clone();
    let limits = Limits {
        frames: config.send_queue,
        bytes: config.send_queue_bytes,
        total_bytes: config.total_send_queue_bytes,
        total: hub.queued.clone(),
        write_timeout: config.idle_timeout,
    };
    let (mut incoming, outbox, writer) = split(socket, limits);
    let writer = tokio::spawn(writer);
    let (finished, mut finished_rx) = mpsc::unbounded_channel();
    let needs_auth = !on.keys.current().is_empty() && peer.caller.is_none();
    let caller = (!needs_auth).then(|| peer.caller.clone());
    let id = id::format(id::next_id());
    outbox.push(out::welcome(&id, needs_auth));
    let subscriptions = Subscriptions::new(&on.host.gateway.kernel, outbox.clone());
    let mut conn = Connection {
        on,
        hub: hub.clone(),
        id,
        session: format!("ws:{}", id::random_hex128()),
        peer,
        outbox: outbox.clone(),
        caller,
        runs: HashMap::new(),
        finished,
        subscriptions,
        draining: false,
    };
    let auth_deadline = tokio::time::sleep(config.auth_timeout);
    tokio::pin!(auth_deadline);
    // Pinged at half the idle timeout, a live peer always answers before the timeout.
    let mut heard = tokio::time::Instant::now();
    let mut ping = tokio::time::interval(config.idle_timeout / 2);
    ping.reset();
    loop {
        // Cancelled when a reload revokes the key this socket runs with.
        let revocation = match conn.caller() {
            Some(Caller::Key(key)) => Some(key.revoked().clone()),
            _ => None,
        };
        tokio::select! {
            biased;
            () = outbox.closed() => break,
            () = hub.closing().cancelled(), if !conn.draining => conn.drain(),
            () = revoked(revocation.as_ref()) => {
                outbox.close(code::POLICY, "the API key was revoked");
            }
            Some(id) = finished_rx.recv() => {
                conn.runs.remove(&id);
                conn.close_if_drained();
            }
            () = &mut auth_deadline, if conn.caller.is_none() => {
                outbox.close(
                    code::POLICY,
                    format!("not authenticated within {} s: send an `auth` frame with a key", config.auth_timeout.as_secs()),
                );
            }
            _ = ping.tick() => {
                if heard.elapsed() >= config.idle_timeout {
                    outbox.close(code::NORMAL, format!("idle: nothing received for {} s", config.idle_timeout.as_secs()));
                } else {
                    outbox.ping();
                }
            }
            message = incoming.next() => {
                heard = tokio::time::Instant::now();
                match message {
                    Some(Ok(Message::Text(text))) => conn.frame(text.as_str()).await,
                    Some(Ok(Message::Binary(_))) => conn.outbox.push(out::error(
                        None,
                        &GatewayError::BadRequest("frames are JSON text; binary frames are not part of the protocol".into()),
                    )),
                    Some(Ok(Message::Close(_))) | None => break,
                    Some(Ok(Message::Ping(_) | Message::Pong(_) | Message::Frame(_))) => {}
                    Some(Err(WsError::Capacity(_))) => {
                        outbox.close(code::TOO_BIG, format!("a message is larger than {} bytes", config.max_message));
                    }
                    // The intake's refusals: a large message too slow to arrive, a bad frame.
                    Some(Err(WsError::Io(err))) if err.kind() == std::io::ErrorKind::TimedOut => {
                        outbox.close(code::POLICY, err.to_string());
                    }
                    Some(Err(WsError::Io(err))) if err.kind() == std::io::ErrorKind::InvalidData => {
                        outbox.close(code::PROTOCOL, err.to_string());
                    }
                    Some(Err(err)) => {
                        tracing::debug!(connection = conn.id, error = %err, "WebSocket read failed");
                        break;
                    }
                }
            }
        }
    }
    // The socket is done: its runs are aborted, its held group events go back to their queues.
    outbox.close(code::NORMAL, "");
    for (_, run) in conn.runs.drain() {
        run.cancel.cancel();
    }
    conn.subscriptions.release_held().await;
    // A writer still waiting for a client that takes nothing is stopped, freeing its queue.
    let abort = writer.abort_handle();
    if tokio::time::timeout(Duration::from_secs(5), writer)
        .await
        .is_err()
    {
        abort.abort();
    }
}

/// Waits for `token` (forever without one).
async fn revoked(token: Option<&tokio_util::sync::CancellationToken>) {
    match token {
        Some(token) => token.cancelled().await,
        None => std::future::pending().await,
    }
}

impl Connection {
    async fn frame(&mut self, text: &str) {
        let frame = match ClientFrame::parse(text) {
            Ok(frame) => frame,
            Err(FrameError { error, id }) => {
                self.outbox.push(out::error(id.as_deref(), &error));
                return;
            }
        };
        if self.caller.is_none() {
            match frame {
                ClientFrame::Auth(auth) => self.authenticate(&auth.key),
                ClientFrame::Ping => self.outbox.push(out::pong()),
                other => self.outbox.push(out::error(
                    frame_id(&other),
                    &GatewayError::Unauthorized { presented: false },
                )),
            }
            return;
        }
        match frame {
            ClientFrame::Auth(_) => self.outbox.push(out::error(
                None,
                &GatewayError::BadRequest("this socket is already authenticated".into()),
            )),
            ClientFrame::Invoke(invoke) => self.invoke(invoke),
            ClientFrame::Cancel(target) => match self.runs.remove(&target.id) {
                Some(run) => run.cancel.cancel(),
                None => self.outbox.push(out::error(
                    Some(&target.id),
                    &GatewayError::BadRequest(format!(
                        "no invocation `{}` is running on this socket",
                        target.id
                    )),
                )),
            },
            ClientFrame::Message(to) => {
                // A message to a run is the caller's data, like its args.
                if let Err(err) = crate::gateway::edge::check_args(&to.message) {
                    let err = GatewayError::from_run(&err, "gateway-receive", &to.id);
                    self.outbox.push(out::error(Some(&to.id), &err));
                    return;
                }
                let refused = match self.runs.get(&to.id) {
                    None => Some(format!(
                        "no invocation `{}` is running on this socket",
                        to.id
                    )),
                    Some(Running { inbox: None, .. }) => Some("this run takes no messages".into()),
                    Some(Running {
                        inbox: Some(inbox), ..
                    }) => inbox.try_send(to.message).err().map(|_| {
                        format!(
                            "invocation `{}` has too many unread messages (it reads them with gateway-receive)",
                            to.id
                        )
                    }),
                };
                if let Some(why) = refused {
                    self.outbox
                        .push(out::error(Some(&to.id), &GatewayError::BadRequest(why)));
                }
            }
            ClientFrame::Subscribe(subscribe) => {
                let principal = Caller::principal(self.caller());
                if self.draining {
                    self.outbox.push(out::error(None, &shutting_down()));
                } else if !principal.may_use_topic(&subscribe.topic)
                    || (subscribe.group.is_some()
                        && crate::events::is_reserved_topic(&subscribe.topic))
                {
                    self.outbox.push(out::error(
                        None,
                        &GatewayError::Denied {
                            message: format!(
                                "this key may not follow the topic `{}` (its `topics` do not name it; reserved topics need `admin`)",
                                subscribe.topic
                            ),
                            run: None,
                        },
                    ));
                } else {
                    self.subscriptions.subscribe(subscribe, &principal);
                }
            }
            ClientFrame::Unsubscribe(u) => self.subscriptions.unsubscribe(&u.topic),
            ClientFrame::Ack(event) => self.subscriptions.settle(&event.event_id, false).await,
            ClientFrame::Nack(event) => self.subscriptions.settle(&event.event_id, true).await,
            ClientFrame::Ping => self.outbox.push(out::pong()),
        }
    }

    fn caller(&self) -> Option<&Caller> {
        self.caller.as_ref().and_then(Option::as_ref)
    }

    fn authenticate(&mut self, key: &str) {
        match self.on.keys.current().verify(key) {
            Some(found) => {
                self.outbox.push(out::authenticated(Some(&found.name)));
                self.caller = Some(Some(Caller::Key(found.clone())));
            }
            None => self.outbox.close(code::POLICY, "the API key is not valid"),
        }
    }

    fn invoke(&mut self, invoke: Invoke) {
        let Invoke { id, skill, args } = invoke;
        if self.draining {
            self.outbox.push(out::error(Some(&id), &shutting_down()));
            return;
        }
        if self.runs.contains_key(&id) {
            self.outbox.push(out::error(
                Some(&id),
                &GatewayError::BadRequest(format!(
                    "invocation `{id}` is still running on this socket: choose another id"
                )),
            ));
            return;
        }
        let index = self.on.host.gateway.kernel.registry().current();
        let tool = match self
            .on
            .host
            .policy
            .reach(&index, &skill, Caller::scope(self.caller()))
        {
            Ok(tool) => tool,
            Err(refusal) => {
                self.outbox.push(out::error(Some(&id), &refusal.into()));
                return;
            }
        };
        let args = args.unwrap_or_else(|| Value::Object(Map::new()));
        let request_id = id::format(id::next_id());
        let authority = self
            .on
            .host
            .policy
            .authority(&tool, Caller::principal(self.caller()));
        let inbound = Inbound {
            transport: super::NAME,
            skill: ToolRef::Name(Arc::from(tool.name.as_str())),
            tool: Some(tool.clone()),
            authority,
            announce: Some(json!({
                "skill": skill,
                "args": args,
                "requestId": request_id,
                "connection": self.id,
                "id": id,
            })),
            args,
            request: self.request_fields(),
            request_id: request_id.clone(),
            reply_to: json!({ "connection": self.id, "id": id }),
            follow: true,
            timeout: Some(self.on.host.timeout),
            duplex: true,
            session: Some(self.session.clone()),
            client: Some(self.peer.client),
        };
        let mut dispatch = self.on.host.gateway.dispatch(inbound);
        let cancel = CancellationToken::new();
        self.runs.insert(
            id.clone(),
            Running {
                cancel: cancel.clone(),
                inbox: dispatch.inbox.take(),
            },
        );
        let run = RunTask {
            id,
            run: RunRef {
                skill: tool.name.clone(),
                request_id,
            },
            outbox: self.outbox.clone(),
            finished: self.finished.clone(),
            _counted: self.hub.begin_run(),
        };
        tokio::spawn(run.stream(dispatch, cancel));
    }

    /// `nonlocals.request` of this socket's invocations.
    fn request_fields(&self) -> Map<String, Value> {
        static FIELDS: Shape<6> = Shape::new([
            "transport",
            "method",
            "path",
            "connection",
            "remote",
            "headers",
        ]);
        FIELDS.object([
            json!("websocket"),
            json!("GET"),
            json!("/ws"),
            json!(self.id),
            json!(self.peer.remote.to_string()),
            self.peer.headers.clone(),
        ])
    }

    /// The server is shutting down: no new work; the socket closes once its runs answered.
    fn drain(&mut self) {
        self.draining = true;
        self.subscriptions.stop_all();
        self.close_if_drained();
    }

    fn close_if_drained(&self) {
        if self.draining && self.runs.is_empty() {
            self.outbox
                .close(code::GOING_AWAY, "the server is shutting down");
        }
    }
}

fn shutting_down() -> GatewayError {
    GatewayError::Unavailable("the server is shutting down: no new work is taken".into())
}

fn frame_id(frame: &ClientFrame) -> Option<&str> {
    match frame {
        ClientFrame::Invoke(i) => Some(&i.id),
        ClientFrame::Cancel(t) => Some(&t.id),
        ClientFrame::Message(m) => Some(&m.id),
        _ => None,
    }
}

/// Streams one invocation's parts to the socket.
struct RunTask {
    id: String,
    run: RunRef,
    outbox: Arc<Outbox>,
    finished: mpsc::UnboundedSender<String>,
    _counted: RunGuard,
}

impl RunTask {
    async fn stream(self, mut dispatch: Dispatch, cancel: CancellationToken) {
        let id = &self.id;
        loop {
            let part = tokio::select! {
                part = dispatch.parts.recv() => part,
                () = cancel.cancelled() => {
                    // Dropping the dispatch aborts the run.
                    drop(dispatch);
                    self.outbox.push(out::error(Some(id), &GatewayError::Aborted {
                        message: "cancelled by the client".into(),
                        run: self.run.clone(),
                    }));
                    break;
                }
            };
            match part {
                Some(ReplyPart::Message(message) | ReplyPart::Chunk(message)) => {
                    self.outbox.push(out::message(id, message));
                }
                Some(ReplyPart::Partial(text)) => self.outbox.push(out::partial(id, text)),
                Some(ReplyPart::Log(log)) => self.outbox.push(out::log(id, &log)),
                Some(ReplyPart::Event(event)) => self.outbox.push(out::run_event(id, event)),
                Some(ReplyPart::Gap(missed)) => self.outbox.push(out::run_gap(id, missed)),
                Some(ReplyPart::Head { .. }) => {}
                Some(ReplyPart::Done(Ok(result))) => {
                    let value = result.map_or(Value::Null, Arc::unwrap_or_clone);
                    self.outbox.push(out::result(id, value));
                    break;
                }
                Some(ReplyPart::Done(Err(err))) => {
                    let error = GatewayError::from_run(&err, &self.run.skill, &self.run.request_id);
                    self.outbox.push(out::error(Some(id), &error));
                    break;
                }
                None => {
                    self.outbox.push(out::error(
                        Some(id),
                        &GatewayError::Internal {
                            cause: "the run ended without an answer".into(),
                            run: Some(self.run.clone()),
                        },
                    ));
                    break;
                }
            }
        }
        let _ = self.finished.send(self.id.clone());
    }
}
