//! Security: kernel (see mod.rs).
