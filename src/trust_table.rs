//! The table of who may run each built-in tool, computed from the tools and the kernel's own
//! rules (`kernel::authority`): what SECURITY.md and the README show, kept equal to the code by a
//! test.

use crate::kernel::authority::{Authority, Grants, Level, Principal};
use crate::skills::tool::Tool;

/// What an authority may do with a tool, by the kernel's rules alone.
fn verdict(authority: &Authority, tool: &Tool) -> &'static str {
    if !authority.may_name(tool) {
        "no (not found)"
    } else if authority.check_class(tool).is_err() {
        "no (denied)"
    } else {
        "yes"
    }
}

/// Limits a tool applies itself to what it is given, beyond who may name it.
fn note(name: &str) -> &'static str {
    match name {
        "event-emit" => {
            "below project: only the key's `topics`; reserved topics never, not even with admin"
        }
        "event-wait" | "event-ack" => {
            "below project: the key's `topics`, its own queues; admin names any queue; reserved topics' queues: project only"
        }
        "event-subscribe" => {
            "the handler runs as its principal's call; `ref` checked against its skills; reserved topics: project only"
        }
        "event-unsubscribe" => "its own handlers; admin any; reserved topics: project only",
        "schedule-create" => {
            "the schedule runs as its principal's call; `ref` checked against its skills; replaces only its own"
        }
        "schedule-delete" | "schedule-list" => "its own schedules; admin any",
        "session-clear" => "the conversation it is in",
        "web-send" => "project code serving a web route may",
        "skill-list" | "skill-describe" => "lists only what the caller may invoke",
        _ => "",
    }
}

/// The markdown table: every built-in tool × (project, caller, caller with admin, untrusted
/// code), sorted by name.
pub fn markdown() -> String {
    let admin = Principal::key("ops", Grants::new(None, None, true).unwrap_or_default());
    let columns = [
        Authority::project(),
        Authority::caller(Principal::local()),
        Authority::caller(admin),
        Authority {
            level: Level::Untrusted,
            principal: Principal::local(),
        },
    ];
    let mut tools = crate::builtins::tools();
    tools.sort_by(|a, b| a.name.cmp(&b.name));
    tools.dedup_by(|a, b| a.name == b.name);
    let mut out = String::from(
        "| tool | class | project | caller | caller with admin | untrusted code | also |\n|---|---|---|---|---|---|---|\n",
    );
    for tool in &tools {
        let cells: Vec<&str> = columns.iter().map(|a| verdict(a, tool)).collect();
        out.push_str(&format!(
            "| `{}` | {} | {} | {} | {} | {} | {} |\n",
            tool.name,
            tool.class.as_str(),
            cells[0],
            cells[1],
            cells[2],
            cells[3],
            note(&tool.name)
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_table_refuses_the_control_plane_to_callers_and_internal_tools_below_project() {
        let table = markdown();
        let row = |name: &str| {
            table
                .lines()
                .find(|l| l.starts_with(&format!("| `{name}` |")))
                .unwrap_or_else(|| panic!("a row for {name}"))
                .to_string()
        };
        assert!(row("schedule-create").contains("| yes | no (denied) | yes | no (denied) |"));
        assert!(
            row("agent").contains("| yes | no (not found) | no (not found) | no (not found) |")
        );
        assert!(row("event-emit").contains("| yes | yes | yes | yes |"));
    }
}
