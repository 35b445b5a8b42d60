//! The LLM agent, on top of the kernel (which knows nothing of models).
//!
//! - [`policy`]: the `agent` skill: config and limits, tool discovery, the callback refs, the
//!   trace. [`discover`] is its tool filter and prompt; [`code`] the invoke tool's callback;
//!   [`hook`] the lifecycle hook; `run` the state they share.
//! - [`agent_loop`]: `agent-model`, the provider skill running the loop against a model;
//!   [`model_call`] one call, with the model hook (spec 04) around it; [`context_edit`] keeps
//!   long conversations inside the window.
//! - [`provider`]: model vendors' wire protocols behind one [`provider::Provider`] trait.
//! - [`explore`]: `skill-list` and `skill-describe`, for agents in discovery mode.
//! - [`execute_middleware`], [`model_middleware`]: `agent-execute` and `model`, the default
//!   pipeline's middleware that hand a skill with a model to the `agent` skill.
//! - [`metrics`]: calls and tokens per provider and model.

pub mod agent_loop;
pub mod code;
pub mod config;
pub mod context_edit;
pub mod discover;
pub mod execute_middleware;
pub mod explore;
pub mod hook;
pub mod metrics;
pub mod model_call;
pub mod model_middleware;
pub mod policy;
pub mod provider;
mod run;

use crate::skills::tool::Tool;

/// The agent's built-in skills.
pub fn tools() -> Vec<Tool> {
    vec![
        policy::tool(),
        agent_loop::tool(),
        model_call::tool(),
        explore::list(),
        explore::describe(),
        execute_middleware::tool(),
        model_middleware::tool(),
    ]
}
