//! The composition root: a kernel with everything skillgate ships. The kernel knows none of
//! it; this is the one place that wires the layers above it in: the built-in middleware and
//! tools, the `event-*` skills and an event bus, `gateway-send` and `web-send`, and the
//! JavaScript sandbox as the reader and runner of `.skill.js` files, and the pool of MCP servers
//! skills mount.

use std::path::PathBuf;
use std::sync::Arc;

use crate::events::memory::MemoryStore;
use crate::events::{Bus, BusConfig, Limits};
use crate::kernel::{Kernel, KernelBuilder};

/// Every tool skillgate ships.
pub fn tools() -> Vec<crate::skills::tool::Tool> {
    let mut tools = crate::middleware::builtins();
    tools.extend(crate::events::skills::tools());
    tools.extend(crate::gateway::send::tools());
    tools.extend(crate::agent::tools());
    tools.push(crate::mcp::middleware::tool());
    tools.extend(crate::schedule::tools::tools());
    tools.push(crate::session::middleware::tool());
    tools.push(crate::session::clear::tool());
    tools
}

/// A kernel builder for the project in `project_dir` with every built-in, and an in-memory
/// event bus unless one is given (`.bus(...)` from [`crate::events::WithBus`]).
pub fn builder(project_dir: impl Into<PathBuf>) -> KernelBuilder {
    let bus = Arc::new(Bus::new(
        Arc::new(MemoryStore::new(Limits::default())),
        BusConfig::default(),
    ));
    Kernel::builder(project_dir)
        .builtins(tools())
        .script_parser(crate::sandbox::load)
        .extension(bus)
        // Whoever holds API keys (`serve`) installs them, so stored work finds its key.
        .extension(Arc::new(crate::kernel::authority::Keys::new()))
        .extension(Arc::new(crate::mcp::client::Pool::new()))
}

#[cfg(test)]
mod tests {
    /// A built-in's `ref` param (the skill it invokes or stores) declares the names the tools
    /// accept, so a schema-driven client is never refused for a name's form.
    #[test]
    fn every_ref_param_declares_the_skill_name_pattern() {
        let mut checked = 0;
        for tool in super::tools() {
            if let Some(schema) = tool
                .params()
                .and_then(|p| p.get("properties"))
                .and_then(|p| p.get("ref"))
            {
                assert_eq!(
                    schema["pattern"],
                    crate::skills::frontmatter::TOOL_NAME_PATTERN,
                    "{}",
                    tool.name
                );
                checked += 1;
            }
        }
        assert!(checked >= 2, "event-subscribe and schedule-create at least");
    }
}
