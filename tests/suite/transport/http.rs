//! The contract over HTTP: `POST /invoke/{skill}` with reqwest, JSON answers and server-sent
//! events, bearer keys, problem documents.

use serde_json::Value;
use skillgate::Kernel;
use skillgate::gateway::keys::{ApiKey, KeyRing, hash_key};

use super::{Credential, Harness, Outcome, Part, Refusal, Setup};
use crate::support::common::Project;
use crate::support::server::{TestServer, config};

const KEY: &str = "sg_contract_key";

pub struct Http(TestServer);

impl Harness for Http {
    const NAME: &'static str = "http";
    /// Spec 03 lists the transports that announce messages; plain HTTP requests are not among
    /// them (`gateway-message: true` in the config turns it on).
    const ANNOUNCES: bool = false;

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
        Http(server)
    }

    fn kernel(&self) -> &Kernel {
        &self.0.kernel
    }

    async fn invoke(&self, skill: &str, args: Value, credential: Credential) -> Outcome {
        let mut request = self.0.client.post(self.0.url(&format!("/invoke/{skill}")));
        request = match credential {
            Credential::Valid => request.bearer_auth(KEY),
            Credential::Wrong => request.bearer_auth("sg_not_the_key"),
            Credential::Missing => request,
        };
        outcome(request.json(&args).send().await.expect("request sent")).await
    }

    async fn stream(&self, skill: &str, args: Value) -> Vec<Part> {
        let mut reader = self.0.stream(&format!("/invoke/{skill}"), &args).await;
        let mut parts = Vec::new();
        while let Some(event) = reader.next().await {
            match event.event.as_str() {
                "message" | "chunk" => parts.push(Part::Message(event.data)),
                "result" => parts.push(Part::Final(Outcome::Ok(event.data["result"].clone()))),
                "error" => parts.push(Part::Final(refusal(
                    event.data["status"].as_u64().unwrap_or(0) as u16,
                    event.data.to_string(),
                ))),
                _ => {}
            }
        }
        parts
    }

    fn start_invoke(&self, skill: &str, args: Value) -> tokio::task::JoinHandle<Outcome> {
        let request = self
            .0
            .client
            .post(self.0.url(&format!("/invoke/{skill}")))
            .json(&args);
        tokio::spawn(async move { outcome(request.send().await.expect("request sent")).await })
    }

    fn begin_shutdown(&mut self) {
        self.0.begin_shutdown("test");
    }

    async fn finish(mut self) -> bool {
        self.0.finish().await.drained
    }
}

async fn outcome(response: reqwest::Response) -> Outcome {
    let status = response.status().as_u16();
    let text = response.text().await.expect("body");
    if status == 200 {
        let body: Value = serde_json::from_str(&text).expect("a JSON answer");
        return Outcome::Ok(body["result"].clone());
    }
    refusal(status, text)
}

fn refusal(status: u16, text: String) -> Outcome {
    let kind = match status {
        401 => Refusal::Credential,
        404 => Refusal::NotFound,
        400 | 422 => Refusal::InvalidArgs,
        403 => Refusal::Denied,
        _ => Refusal::Failed,
    };
    Outcome::Refused(kind, text)
}

skillgate::transport_contract!(Http);
