//! The contract over WebSocket: `invoke` frames on `/ws` with a tokio-tungstenite client,
//! `message` frames streamed, one `result` or `error` frame (a problem document) at the end,
//! keys in the upgrade request or an `auth` frame.

use serde_json::{Value, json};
use skillgate::Kernel;
use skillgate::gateway::keys::{ApiKey, KeyRing, hash_key};

use super::{Credential, Harness, Outcome, Part, Refusal, Setup};
use crate::support::common::Project;
use crate::support::server::{TestServer, config};
use crate::support::ws_client::{Frame, WsClient, request};

const KEY: &str = "sg_contract_key";

pub struct WebSocket {
    server: TestServer,
    credentials: bool,
}

impl WebSocket {
    /// A connected client: with the valid key in the upgrade request when keys are on.
    async fn client(&self, credential: Credential) -> Result<WsClient, Outcome> {
        let key = match (self.credentials, credential) {
            (true, Credential::Valid) => Some(KEY),
            _ => None,
        };
        let (mut client, welcome) = WsClient::connect(self.server.addr, key).await;
        if self.credentials && credential == Credential::Wrong {
            assert_eq!(welcome["authenticated"], false);
            client
                .send(json!({ "type": "auth", "key": "sg_not_the_key" }))
                .await;
            return match client.next().await {
                Frame::Closed(code, reason) => Err(Outcome::Refused(
                    Refusal::Credential,
                    format!("{code} {reason}"),
                )),
                Frame::Json(frame) => panic!("a wrong key closes the socket: {frame}"),
            };
        }
        Ok(client)
    }
}

impl Harness for WebSocket {
    const NAME: &'static str = "websocket";
    /// Spec 03 lists the websocket transport among those that emit `gateway-message`.
    const ANNOUNCES: bool = true;

    async fn start(project: Project, setup: Setup) -> Self {
        let mut settings = config();
        if setup.credentials {
            settings.keys = KeyRing::new(vec![
                ApiKey::new("contract", &hash_key(KEY), vec![]).unwrap(),
            ])
            .unwrap();
        }
        let server = super::start_server(
            project,
            skillgate::server::DoorSettings::http(settings),
            &setup,
        )
        .await;
        WebSocket {
            server,
            credentials: setup.credentials,
        }
    }

    fn kernel(&self) -> &Kernel {
        &self.server.kernel
    }

    async fn invoke(&self, skill: &str, args: Value, credential: Credential) -> Outcome {
        let mut client = match self.client(credential).await {
            Ok(client) => client,
            Err(refused) => return refused,
        };
        invoke_on(&mut client, skill, args).await
    }

    async fn stream(&self, skill: &str, args: Value) -> Vec<Part> {
        let mut client = self.client(Credential::Valid).await.expect("connected");
        client
            .send(json!({ "type": "invoke", "id": "s", "skill": skill, "args": args }))
            .await;
        let mut parts = Vec::new();
        for frame in client.answer("s").await {
            match frame["type"].as_str() {
                Some("message") => parts.push(Part::Message(frame["message"].clone())),
                Some("result") | Some("error") => parts.push(Part::Final(outcome(&frame))),
                _ => {}
            }
        }
        parts
    }

    fn start_invoke(&self, skill: &str, args: Value) -> tokio::task::JoinHandle<Outcome> {
        let addr = self.server.addr;
        let key = self.credentials.then_some(KEY);
        let skill = skill.to_string();
        tokio::spawn(async move {
            let mut client = WsClient::open(request(addr, key)).await.expect("upgrade");
            let _welcome = client.recv().await;
            invoke_on(&mut client, &skill, args).await
        })
    }

    fn begin_shutdown(&mut self) {
        self.server.begin_shutdown("test");
    }

    async fn finish(mut self) -> bool {
        self.server.finish().await.drained
    }
}

async fn invoke_on(client: &mut WsClient, skill: &str, args: Value) -> Outcome {
    client
        .send(json!({ "type": "invoke", "id": "1", "skill": skill, "args": args }))
        .await;
    let frames = client.answer("1").await;
    outcome(frames.last().expect("an answer"))
}

fn outcome(frame: &Value) -> Outcome {
    if frame["type"] == "result" {
        return Outcome::Ok(frame["value"].clone());
    }
    let status = frame["problem"]["status"].as_u64().unwrap_or(0);
    let kind = match status {
        401 => Refusal::Credential,
        404 => Refusal::NotFound,
        400 | 422 => Refusal::InvalidArgs,
        403 => Refusal::Denied,
        _ => Refusal::Failed,
    };
    Outcome::Refused(kind, frame.to_string())
}

skillgate::transport_contract!(WebSocket);
