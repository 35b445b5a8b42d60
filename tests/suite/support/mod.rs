//! What the tests share: a throwaway project and the `skillgate` binary (`common`), a server on
//! a real socket (`server`), a served process (`process`), where events are kept (`stores`), and
//! local peers that speak the real protocols: DNS (`dns_fake`), the model APIs (`model_fake`),
//! Slack (`slack_fake`), an SMTP sink (`smtp_sink`), a WebSocket client (`ws_client`).

pub(crate) mod common;
pub(crate) mod dns_fake;
pub(crate) mod model_fake;
pub(crate) mod process;
pub(crate) mod record;
pub(crate) mod server;
pub(crate) mod slack_fake;
pub(crate) mod smtp_sink;
pub(crate) mod stores;
pub(crate) mod ws_client;
