//! Security: sandbox (see mod.rs).
