//! The LLM agent, on top of the kernel (which knows nothing of models).
//!
//! - [`provider`]: model vendors' wire protocols behind one [`provider::Provider`] trait:
//!   messages and tool definitions in, streamed text and tool calls out, with retries and
//!   clear errors.

pub mod provider;
