//! The web console at `/console`: its login, forms and pages over HTTP (`pages`), and in a
//! real headless Chromium driven over WebDriver (`browser`).

mod browser;
mod pages;
pub(crate) mod support;
