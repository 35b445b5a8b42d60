//! The runs record: the store's part on every store (`store`), runs from each door read back
//! over HTTP with who may see them and what is redacted (`doors`), and `skillgate runs`
//! (`cli`).

mod cli;
mod doors;
mod store;
