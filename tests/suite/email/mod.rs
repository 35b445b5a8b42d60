//! The email door: mail over SMTP answered through a sink (`smtp`), mail taken from an IMAP
//! folder (`imap`).

mod imap;
pub(crate) mod smtp;
