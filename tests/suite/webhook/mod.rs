//! Signed webhooks (`routes`): each scheme, replays, queued deliveries across restarts.

pub(crate) mod routes;
