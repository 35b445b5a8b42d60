//! Skill definitions and discovery: markdown and native tools, search paths and shadowing,
//! directive syntax, and the `allowed-tools` patterns.

pub mod describe;
pub mod directive_syntax;
pub mod frontmatter;
pub mod index;
pub mod loader;
pub mod native;
pub mod patterns;
pub mod registry;
pub mod tool;

pub use tool::{Body, Source, Tool};
