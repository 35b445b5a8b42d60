//! Security: args (see mod.rs).
