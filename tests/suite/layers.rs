//! The layers of the crate, checked. Every module (a folder under `src/`, or a file beside them;
//! the gateway's core and each of its doors apart) stands on a floor ([`FLOORS`]) and names only
//! modules below it: no two modules import each other but on the kernel's interpreter floor
//! (skills, cascade, context, kernel). No door names another, and the gateway's core names no
//! door. Beside the floors, some pairs are kept apart ([`NOT_NAMED`]): the bottom names nothing
//! above it, middleware knows no agent, MCP or door, the bus and the sandbox know no middleware.
//! What the upper layers add to the kernel comes in through `crate::builtins`: tools, the bus as
//! a kernel extension, the script engine behind `ScriptBody` and `ScriptParser`.

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

/// The floors of the crate, bottom first: a module names only modules on floors below its own,
/// so no two modules import each other, but on the interpreter's floor (skills, cascade,
/// context and kernel: a tool's body takes a context, the kernel runs the cascade's chain on
/// it). Each folder under `src/` (or file beside them) is a module; the gateway is its core
/// (`src/gateway/*.rs` and `policy/`) and one module a door folder. `lib` and `main` only
/// declare and start the crate.
const FLOORS: [&[&str]; 11] = [
    &[
        "error",
        "digest",
        "tls",
        "model_usage",
        "markdown",
        "cpus",
        "json_text",
    ],
    &["telemetry", "failure"],
    &["skills", "cascade", "context", "kernel"],
    &["events", "sandbox"],
    &["session", "schedule", "shutdown", "middleware"],
    &["gateway"],
    &["config", "agent", "mcp"],
    &["reload"],
    &DOORS,
    &["builtins", "server"],
    &["cli", "trust_table", "contract"],
];

/// The floor whose modules may name each other: the kernel's interpreter loop.
const LOOP_FLOOR: usize = 2;

/// The doors in `src/gateway/` (MCP, the other door, is a module of its own).
const DOORS: [&str; 5] = [
    "gateway/http",
    "gateway/ws",
    "gateway/slack",
    "gateway/webhook",
    "gateway/email",
];

/// The module a file under `src/` belongs to (its path relative to `src/`).
fn module_of(relative: &Path) -> Option<String> {
    let parts: Vec<String> = relative
        .components()
        .map(|c| c.as_os_str().to_string_lossy().into_owned())
        .collect();
    match parts.as_slice() {
        [file] => {
            let name = file.strip_suffix(".rs")?;
            (name != "lib" && name != "main").then(|| name.to_string())
        }
        [top, child, _, ..]
            if top == "gateway" && DOORS.contains(&format!("gateway/{child}").as_str()) =>
        {
            Some(format!("gateway/{child}"))
        }
        [top, ..] => Some(top.clone()),
        [] => None,
    }
}

/// A line's code: comments and the text of string literals left out.
fn code_of(line: &str) -> String {
    let mut code = String::new();
    let mut in_string = false;
    let mut escaped = false;
    let mut chars = line.chars().peekable();
    while let Some(c) = chars.next() {
        if in_string {
            match c {
                _ if escaped => escaped = false,
                '\\' => escaped = true,
                '"' => {
                    in_string = false;
                    code.push('"');
                }
                _ => {}
            }
            continue;
        }
        match c {
            '"' => {
                in_string = true;
                code.push('"');
            }
            '/' if chars.peek() == Some(&'/') => break,
            _ => code.push(c),
        }
    }
    code
}

/// Splits `a, b::{c, d}, e` at its top-level commas.
fn top_level_items(group: &str) -> Vec<&str> {
    let mut items = Vec::new();
    let (mut depth, mut start) = (0usize, 0usize);
    for (i, c) in group.char_indices() {
        match c {
            '{' => depth += 1,
            '}' => depth = depth.saturating_sub(1),
            ',' if depth == 0 => {
                items.push(group[start..i].trim());
                start = i + 1;
            }
            _ => {}
        }
    }
    items.push(group[start..].trim());
    items.into_iter().filter(|i| !i.is_empty()).collect()
}

/// The inside of the braces that open `text` (`{a, {b}}` gives `a, {b}`).
fn braced(text: &str) -> &str {
    let mut depth = 0usize;
    for (i, c) in text.char_indices() {
        match c {
            '{' => depth += 1,
            '}' => {
                depth -= 1;
                if depth == 0 {
                    return &text[1..i];
                }
            }
            _ => {}
        }
    }
    &text[1..]
}

/// The modules a use tree after `crate::` names (`gateway::{http::X, Gateway}` names the HTTP
/// door and the gateway's core).
fn modules_of_tree(tree: &str, out: &mut Vec<String>) {
    if tree.starts_with('{') {
        for item in top_level_items(braced(tree)) {
            modules_of_tree(item, out);
        }
        return;
    }
    let top: String = tree
        .chars()
        .take_while(|c| c.is_alphanumeric() || *c == '_')
        .collect();
    if top.is_empty() {
        return;
    }
    if top != "gateway" {
        out.push(top);
        return;
    }
    let rest = tree["gateway".len()..]
        .strip_prefix("::")
        .unwrap_or_default();
    let children: Vec<String> = if rest.starts_with('{') {
        top_level_items(braced(rest))
            .into_iter()
            .map(|item| item.split("::").next().unwrap_or_default().to_string())
            .collect()
    } else {
        vec![
            rest.chars()
                .take_while(|c| c.is_alphanumeric() || *c == '_')
                .collect(),
        ]
    };
    for child in children {
        let door = format!("gateway/{child}");
        out.push(if DOORS.contains(&door.as_str()) {
            door
        } else {
            "gateway".to_string()
        });
    }
}

/// The modules a line of code names through `crate::`.
fn modules_named(line: &str) -> Vec<String> {
    let code = code_of(line);
    let mut out = Vec::new();
    for (at, _) in code.match_indices("crate::") {
        modules_of_tree(&code[at + "crate::".len()..], &mut out);
    }
    out
}

/// Every `(file:line, module of the file, module named)` of `src/` (an item the crate root
/// re-exports, such as `crate::Kernel`, is not a module and not counted).
fn namings() -> Vec<(String, String, String)> {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    let modules: Vec<String> = files
        .iter()
        .filter_map(|f| module_of(f.strip_prefix(&src).expect("under src")))
        .collect();
    let mut found = Vec::new();
    for file in files {
        let relative = file.strip_prefix(&src).expect("under src");
        let Some(module) = module_of(relative) else {
            continue;
        };
        let text = std::fs::read_to_string(&file).expect("read");
        for (n, line) in text.lines().enumerate() {
            for named in modules_named(line) {
                if named != module && modules.contains(&named) {
                    let at = format!("{}:{}", relative.display(), n + 1);
                    found.push((at, module.clone(), named));
                }
            }
        }
    }
    found
}

fn floor_of(module: &str) -> Option<usize> {
    FLOORS.iter().position(|floor| floor.contains(&module))
}

#[test]
fn each_module_names_only_modules_on_floors_below_its_own() {
    let mut offences = Vec::new();
    for (at, module, named) in namings() {
        let (Some(own), Some(other)) = (floor_of(&module), floor_of(&named)) else {
            offences.push(format!(
                "{at}: `{module}` names `{named}`, and one of them is on no floor: place it in FLOORS"
            ));
            continue;
        };
        if other > own || (other == own && own != LOOP_FLOOR) {
            offences.push(format!(
                "{at}: `{module}` (floor {own}) names `{named}` (floor {other})"
            ));
        }
    }
    assert!(
        offences.is_empty(),
        "a module names one that is not below it:\n{}",
        offences.join("\n")
    );
}

#[test]
fn no_door_names_another_door() {
    let doors: Vec<&str> = DOORS.iter().copied().chain(["mcp"]).collect();
    let offences: Vec<String> = namings()
        .into_iter()
        .filter(|(_, module, named)| {
            doors.contains(&module.as_str()) && doors.contains(&named.as_str())
        })
        .map(|(at, module, named)| format!("{at}: the door `{module}` names the door `{named}`"))
        .collect();
    assert!(offences.is_empty(), "{}", offences.join("\n"));
}

#[test]
fn the_gateway_core_names_no_door_and_nothing_that_composes_doors() {
    let above: Vec<&str> = DOORS
        .iter()
        .copied()
        .chain([
            "mcp", "server", "builtins", "cli", "config", "agent", "reload",
        ])
        .collect();
    let offences: Vec<String> = namings()
        .into_iter()
        .filter(|(_, module, named)| module == "gateway" && above.contains(&named.as_str()))
        .map(|(at, _, named)| format!("{at}: the gateway's core names `{named}`"))
        .collect();
    assert!(offences.is_empty(), "{}", offences.join("\n"));
}

#[test]
fn the_module_check_reads_use_trees_doors_and_string_free_code() {
    assert_eq!(
        modules_named("use crate::gateway::http::Server;"),
        ["gateway/http"]
    );
    assert_eq!(
        modules_named("use crate::gateway::{Gateway, ws::Hub, policy::Policy};"),
        ["gateway", "gateway/ws", "gateway"]
    );
    assert_eq!(
        modules_named("use crate::{events::Bus, gateway::{slack, keys::Caller}};"),
        ["events", "gateway/slack", "gateway"]
    );
    assert!(modules_named(r#"let m = "built without `crate::builtins`";"#).is_empty());
    assert!(modules_named("// crate::cli").is_empty());
    assert_eq!(
        module_of(Path::new("gateway/http/server.rs")).as_deref(),
        Some("gateway/http")
    );
    assert_eq!(
        module_of(Path::new("gateway/policy/access.rs")).as_deref(),
        Some("gateway")
    );
    assert_eq!(
        module_of(Path::new("gateway/keys.rs")).as_deref(),
        Some("gateway")
    );
    assert_eq!(module_of(Path::new("server.rs")).as_deref(), Some("server"));
    assert_eq!(module_of(Path::new("lib.rs")), None);
}
