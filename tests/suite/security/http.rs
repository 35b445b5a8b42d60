//! Security: http (see mod.rs).
