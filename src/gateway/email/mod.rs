//! The email transport: mail in over SMTP, skills run, answers out over SMTP.
//!
//! [`parse`] (reading a mail and whether it may be answered).

pub mod parse;
