//! MCP both ways: skillgate served to MCP clients (`served`), MCP servers mounted as skills
//! (`mounted`).

mod mounted;
pub(crate) mod served;
