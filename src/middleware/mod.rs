//! Built-in middleware and native tools, one module each, registered by name with frontmatter.

pub mod cwd;
pub mod debug;
pub mod directive_code;
pub mod directive_files;
pub mod directive_tools;
pub mod directives;
pub mod execute;
pub mod log;
pub mod observe;
pub mod params;
pub mod paths;
pub mod profile;
pub mod validate_allowed_tools;
pub mod validate_args;
pub mod validate_returns;
pub mod workspace;

use crate::skills::tool::Tool;

/// The native tool builders live with the skills; named here too for code that builds
/// middleware.
pub use crate::skills::native::{metadata_middleware, native, native_fn, pass};

/// Every built-in native tool.
pub fn builtins() -> Vec<Tool> {
    let mut tools = vec![
        execute::tool(),
        validate_args::tool(),
        validate_returns::tool(),
        validate_allowed_tools::tool(),
        directives::tool(),
        params::tool(),
        paths::tool(),
        cwd::tool(),
        workspace::tool(),
        log::tool(),
        debug::tool(),
        profile::tool(),
        observe::tool(),
    ];
    tools.extend(directive_tools::tools());
    tools.extend(directive_files::tools());
    tools.extend(directive_code::tools());
    tools
}
