//! The transport contract (`skillgate::contract`: what every door must do, written once against
//! its `Harness` trait) run against each of skillgate's doors (HTTP, WebSocket, Slack, email) and
//! the example door of `examples/jsonl_door`, each harness in a file of its own, as a door's own
//! crate would run it: through the `contract` feature and `skillgate::transport_contract!`.
//!
//! A harness starts a real server for its door over the contract's project and talks to it with
//! a real client of that door.

pub mod email;
mod http;
mod jsonl;
pub mod slack;
mod websocket;

pub use skillgate::contract::{Credential, Harness, Outcome, Part, Refusal, Setup, natives};

use crate::support::common::Project;

/// A test server for a harness: `project` with the natives the rules use, on `http`.
pub async fn start_server(
    project: Project,
    doors: skillgate::server::DoorSettings,
    setup: &Setup,
) -> crate::support::server::TestServer {
    let tools = natives(&setup.held);
    crate::support::server::TestServer::start_doors(project, doors, move |mut b| {
        for tool in tools {
            b = b.native(tool);
        }
        b
    })
    .await
}
