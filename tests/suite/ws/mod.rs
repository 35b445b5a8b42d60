//! The WebSocket door (`endpoint`): the protocol, subscriptions, limits and keys.

mod endpoint;
