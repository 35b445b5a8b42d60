//! Security: fuzz (see mod.rs).
