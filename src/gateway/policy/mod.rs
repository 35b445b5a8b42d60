//! What every transport decides the same way, decided here once: which skills a caller may
//! reach ([`access`]) and how a failed run is told to it ([`outcome`]). Each transport answers
//! in its own form (HTTP: statuses and problem documents; chat and mail: their own replies).

pub mod access;

pub use crate::failure::Failure;
pub use access::{PatternError, Policy, Refusal, Scope};
