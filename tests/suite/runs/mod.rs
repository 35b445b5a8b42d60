//! The runs record: the store's part on every store (`store`), runs from each door read back
//! over HTTP with who may see them and what is redacted (`doors`), retries and the live stream
//! (`retry`), dead letters listed and replayed (`dead`), and `skillgate runs` (`cli`).

mod agent;
mod cli;
pub(crate) mod dead;
mod doors;
mod recorder;
mod retry;
mod store;
