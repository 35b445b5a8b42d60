//! The Slack door (`door`): the Events API and Socket Mode against a local Slack that speaks its
//! Web API, routes, threads and sessions.

mod door;
