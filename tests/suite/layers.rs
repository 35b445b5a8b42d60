//! The layers of the crate, checked: the bottom (`context`, `cascade`, `skills`, `kernel`)
//! names nothing above it, and each floor above names nothing of the floors over it
//! ([`NOT_NAMED`]) (`events`, `sandbox`, `middleware`, `gateway`, and the composition
//! root `builtins` and the `cli` that use them). What the upper layers add to the kernel comes in
//! through `crate::builtins`: tools, the bus as a kernel extension, the script engine behind
//! `ScriptBody` and `ScriptParser`.

use std::path::{Path, PathBuf};

const BOTTOM: [&str; 4] = ["context", "cascade", "skills", "kernel"];
const ABOVE: [&str; 6] = [
    "events",
    "sandbox",
    "middleware",
    "gateway",
    "builtins",
    "cli",
];

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).expect("read src") {
        let path = entry.expect("entry").path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// The upper modules a line of code names through `crate::`, plain or in a `use crate::{..}`.
fn names_above(line: &str) -> Vec<&'static str> {
    names_of(line, &ABOVE)
}

/// The modules of `modules` a line of code names through `crate::`.
fn names_of(line: &str, modules: &[&'static str]) -> Vec<&'static str> {
    let code = line.split("//").next().unwrap_or_default();
    let mut found = Vec::new();
    for (at, _) in code.match_indices("crate::") {
        let rest = &code[at + "crate::".len()..];
        let named: Vec<&str> = match rest.strip_prefix('{') {
            Some(group) => group
                .split('}')
                .next()
                .unwrap_or_default()
                .split(',')
                .map(|item| item.trim().split("::").next().unwrap_or_default())
                .collect(),
            None => vec![
                rest.split(|c: char| !c.is_alphanumeric() && c != '_')
                    .next()
                    .unwrap_or_default(),
            ],
        };
        for name in named {
            if let Some(above) = modules.iter().find(|a| **a == name) {
                found.push(*above);
            }
        }
    }
    found
}

/// Each line of `src/<floor>` that names one of `modules`, as `file:line: ...`.
fn naming(src: &Path, floor: &str, modules: &[&'static str]) -> Vec<String> {
    let mut files = Vec::new();
    rust_files(&src.join(floor), &mut files);
    assert!(!files.is_empty(), "src/{floor} has Rust files");
    let mut offences = Vec::new();
    for file in files {
        let text = std::fs::read_to_string(&file).expect("read");
        for (n, line) in text.lines().enumerate() {
            for named in names_of(line, modules) {
                offences.push(format!(
                    "{}:{}: `{floor}` names `crate::{named}`",
                    file.strip_prefix(src).unwrap_or(&file).display(),
                    n + 1
                ));
            }
        }
    }
    offences
}

#[test]
fn the_bottom_layers_name_nothing_above_them() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let offences: Vec<String> = BOTTOM
        .iter()
        .flat_map(|layer| naming(&src, layer, &ABOVE))
        .collect();
    assert!(
        offences.is_empty(),
        "layering broken:\n{}",
        offences.join("\n")
    );
}

/// The floors above the bottom, each with the modules it must not name: built-in tools and
/// middleware are made with `skills::native`, never with a higher floor's helpers, so the
/// middleware knows no agent, MCP or door, and the bus, the sandbox, sessions and schedules
/// know no middleware.
const NOT_NAMED: [(&str, &[&str]); 7] = [
    (
        "middleware",
        &[
            "events", "agent", "mcp", "gateway", "session", "schedule", "builtins", "cli",
        ],
    ),
    (
        "events",
        &[
            "middleware",
            "sandbox",
            "agent",
            "mcp",
            "gateway",
            "session",
            "schedule",
            "cli",
        ],
    ),
    (
        "sandbox",
        &[
            "middleware",
            "events",
            "agent",
            "mcp",
            "gateway",
            "session",
            "schedule",
            "builtins",
            "cli",
        ],
    ),
    (
        "session",
        &["middleware", "agent", "mcp", "gateway", "schedule", "cli"],
    ),
    (
        "schedule",
        &["middleware", "agent", "mcp", "gateway", "session", "cli"],
    ),
    ("agent", &["middleware", "mcp", "schedule", "cli"]),
    (
        "mcp",
        &["middleware", "agent", "schedule", "session", "cli"],
    ),
];

#[test]
fn each_floor_names_nothing_of_the_floors_above_it() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let offences: Vec<String> = NOT_NAMED
        .iter()
        .flat_map(|(floor, forbidden)| naming(&src, floor, forbidden))
        .collect();
    assert!(
        offences.is_empty(),
        "layering broken:\n{}",
        offences.join("\n")
    );
}

#[test]
fn the_check_sees_plain_and_grouped_imports_but_not_comments() {
    assert_eq!(names_above("use crate::events::Bus;"), ["events"]);
    assert_eq!(
        names_above("use crate::{context::Context, sandbox::Script};"),
        ["sandbox"]
    );
    assert_eq!(
        names_above("    let b = crate::gateway::send::tools();"),
        ["gateway"]
    );
    assert!(names_above("use crate::context::Context; // not crate::events").is_empty());
    assert!(names_above("use crate::kernel::Kernel;").is_empty());
}

#[test]
fn only_the_context_module_touches_a_contexts_state() {
    // The kernel, middleware, the sandbox and the gateway change a context through the methods
    // of `src/context` only.
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    let offences: Vec<String> = files
        .iter()
        .filter(|f| !f.starts_with(src.join("context")))
        .flat_map(|file| {
            let text = std::fs::read_to_string(file).expect("read");
            text.lines()
                .enumerate()
                .filter(|(_, l)| {
                    l.split("//")
                        .next()
                        .unwrap_or_default()
                        .contains(".0.state")
                })
                .map(|(n, _)| format!("{}:{}", file.display(), n + 1))
                .collect::<Vec<_>>()
        })
        .collect();
    assert!(
        offences.is_empty(),
        "context state touched directly:\n{}",
        offences.join("\n")
    );
}
