//! The command line end to end: the real binary over the skill trees in `tests/fixtures/`.

use std::process::Output;

use serde_json::Value;

use crate::support::common::{fixture, skillgate_command, stderr, stdout};

/// Runs the binary on the fixture tree `tests/fixtures/<project>`.
fn skillgate(project: &str, args: &[&str]) -> Output {
    skillgate_command(&fixture(project))
        // The fixtures are part of the repository: keep the event store out of them.
        .args(["--store", "memory"])
        .args(args)
        .output()
        .expect("run skillgate")
}

#[test]
fn run_hello_greets_the_name_given_as_a_flag() {
    let out = skillgate("tree", &["run", "hello", "--name", "Ada"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(stdout(&out), "Hello, Ada! Welcome to skillgate.\n");
}

#[test]
fn skills_list_shows_bundled_and_project_skills_but_not_hidden_ones() {
    let out = skillgate("tree", &["skills", "list"]);
    assert_eq!(out.status.code(), Some(0));
    let text = stdout(&out);
    for name in ["hello", "greet", "wrapped", "base"] {
        assert!(
            text.lines().any(|l| l.starts_with(name)),
            "{name} missing:\n{text}"
        );
    }
    let listed: Vec<&str> = text
        .lines()
        .filter_map(|l| l.split_whitespace().next())
        .collect();
    assert!(
        !listed.contains(&"shout"),
        "hidden skill listed: {listed:?}"
    );
    assert!(
        !listed.contains(&"validate-args"),
        "internal tool listed: {listed:?}"
    );
    let tagged = stdout(&skillgate("tree", &["skills", "list", "--tag", "fixture"]));
    let names: Vec<&str> = tagged
        .lines()
        .filter_map(|l| l.split_whitespace().next())
        .collect();
    assert_eq!(names, ["greet", "wrapped"]);
}

#[test]
fn inherit_passes_params_and_the_authority_sets_the_working_folder() {
    let out = skillgate("tree", &["run", "greet", "--name", "Ada"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let text = stdout(&out);
    assert!(text.starts_with("Hi Ada from "), "{text}");
    assert!(
        text.trim_end().ends_with("workspace"),
        "cwd from main.skill.md: {text}"
    );
    // The inherited params schema is enforced: a missing name is a usage error.
    let out = skillgate("tree", &["run", "greet"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        stderr(&out).contains("\"name\" is a required property"),
        "{}",
        stderr(&out)
    );
}

#[test]
fn private_keys_do_not_pass_through_inherit() {
    let out = skillgate("tree", &["skills", "describe", "greet", "--json"]);
    let described: Value = serde_json::from_slice(&out.stdout).expect("json");
    assert_eq!(described["tags"], serde_json::json!(["fixture"]));
    assert!(described["params"]["required"][0] == "name", "{described}");
}

#[test]
fn order_places_markdown_middleware_before_execute_and_it_answers() {
    let described: Value = serde_json::from_slice(
        &skillgate("tree", &["skills", "describe", "wrapped", "--json"]).stdout,
    )
    .expect("json");
    let pipeline: Vec<&str> = described["pipeline"]
        .as_array()
        .expect("pipeline")
        .iter()
        .filter_map(Value::as_str)
        .collect();
    let at = |n: &str| pipeline.iter().position(|p| *p == n).expect(n);
    assert!(
        at("directives") < at("shout") && at("shout") < at("execute"),
        "{pipeline:?}"
    );
    let out = skillgate("tree", &["run", "wrapped"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    // shout's expanded prompt is the result: it ran as middleware and the body never ran.
    assert_eq!(stdout(&out), "(shouted by true)\n");
}

#[test]
fn debug_hook_shows_injected_directives_after_metadata_middleware() {
    let out = skillgate(
        "tree",
        &[
            "run",
            "greet",
            "--name",
            "Ada",
            "--set",
            "debug=true",
            "-vv",
        ],
    );
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let log = stderr(&out);
    let position = |needle: &str| {
        log.find(needle)
            .unwrap_or_else(|| panic!("`{needle}` not in debug log:\n{log}"))
    };
    assert!(position("pipeline-enter greet") < position("next-enter greet / cwd"));
    assert!(position("next-enter greet / cwd") < position("next-enter greet / validate-args"));
    assert!(position("next-enter greet / directives") < position("next-enter greet / arg"));
    assert!(position("next-enter greet / arg") < position("next-enter greet / execute"));
    assert!(position("next-exit greet / execute") < position("pipeline-exit greet"));
}

#[test]
fn unknown_skill_is_a_usage_error_suggesting_close_names() {
    let out = skillgate("tree", &["run", "gret"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        stderr(&out).contains("did you mean `greet`"),
        "{}",
        stderr(&out)
    );
}

#[test]
fn a_flag_of_the_wrong_type_is_a_usage_error_naming_it() {
    let out = skillgate("tree", &["run", "hello", "--name"]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(stderr(&out).contains("--name"), "{}", stderr(&out));
}

#[test]
fn an_order_cycle_fails_the_skill_naming_the_cycle() {
    let out = skillgate("cycle", &["run", "loop"]);
    assert_eq!(out.status.code(), Some(1));
    let err = stderr(&out);
    assert!(
        err.contains("first -> second -> first") || err.contains("second -> first -> second"),
        "{err}"
    );
}

#[test]
fn a_skill_file_path_runs_directly() {
    let path = fixture("tree/skills/greet.skill.md");
    let out = skillgate(
        "tree",
        &["run", path.to_str().expect("utf-8 path"), "--name", "Bo"],
    );
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(stdout(&out).starts_with("Hi Bo from "));
}

#[test]
fn help_is_available_on_every_command() {
    for args in [
        vec!["--help"],
        vec!["run", "--help"],
        vec!["skills", "--help"],
        vec!["skills", "list", "--help"],
    ] {
        let out = skillgate("tree", &args);
        assert_eq!(out.status.code(), Some(0), "{args:?}");
        assert!(stdout(&out).contains("Usage"), "{args:?}");
    }
    assert_eq!(skillgate("tree", &["bogus"]).status.code(), Some(2));
}

#[test]
fn run_without_a_skill_runs_the_projects_main_skill() {
    let out = skillgate("tree", &["run"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(stdout(&out), "The fixture project's main skill.\n");
    let out = skillgate("cycle", &["run"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("no main skill"), "{}", stderr(&out));
}

#[test]
fn bad_yaml_in_a_skill_names_file_line_and_column() {
    let dir = tempfile::tempdir().expect("temp dir");
    std::fs::create_dir_all(dir.path().join("skills")).expect("mkdir");
    std::fs::write(
        dir.path().join("skills/broken.skill.md"),
        "---\nname: broken\nmetadata:\n  params: {type: object\n---\nbody\n",
    )
    .expect("write");
    let out = crate::support::common::skillgate(dir.path(), &["run", "broken"]);
    assert_eq!(out.status.code(), Some(2));
    let err = stderr(&out);
    assert!(err.contains("broken.skill.md:4:"), "file and line: {err}");
    assert!(err.contains("invalid YAML"), "{err}");
}

#[test]
fn serve_help_groups_its_options_under_headings() {
    let out = crate::support::common::skillgate(std::path::Path::new("."), &["serve", "--help"]);
    let help = String::from_utf8_lossy(&out.stdout);
    let at = |needle: &str| {
        help.find(needle)
            .unwrap_or_else(|| panic!("`{needle}` in help:\n{help}"))
    };
    for (heading, options) in [
        ("\nHTTP:\n", ["--bind", "--api-keys", "--max-connections"]),
        (
            "\nWebSocket:\n",
            [
                "--ws-auth-timeout",
                "--ws-send-queue",
                "--ws-max-connections",
            ],
        ),
        (
            "\nEvent store:\n",
            ["--store", "--visibility", "--handler-timeout"],
        ),
        ("\nLogging:\n", ["--verbose", "--log-format", "--quiet"]),
    ] {
        let start = at(heading);
        let end = help[start + heading.len()..]
            .find("\n\n")
            .map_or(help.len(), |e| start + heading.len() + e);
        for option in options {
            let found = at(&format!(" {option}"));
            assert!(
                (start..end).contains(&found),
                "`{option}` under `{}`:\n{help}",
                heading.trim()
            );
        }
    }
}

#[test]
fn init_writes_a_project_that_runs_at_once() {
    let parent = tempfile::tempdir().unwrap();
    let dir = parent.path().join("hello-project");
    let out = crate::support::common::skillgate(parent.path(), &["init", dir.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    for file in [
        "main.skill.md",
        "skills/greet.skill.md",
        "skills/word-count.skill.js",
        "skillgate.yaml",
        ".gitignore",
    ] {
        assert!(dir.join(file).is_file(), "{file} was not written");
    }
    assert!(
        std::fs::read_to_string(dir.join(".gitignore"))
            .unwrap()
            .contains("/.skillgate/")
    );
    // The main skill, the markdown example and the JavaScript example all run in it.
    let out = crate::support::common::skillgate(&dir, &["run"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(stdout(&out).contains("Hello, world!"), "{}", stdout(&out));
    let out = crate::support::common::skillgate(&dir, &["run", "greet", "--name", "Ada"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(stdout(&out).contains("Hello, Ada!"), "{}", stdout(&out));
    let out =
        crate::support::common::skillgate(&dir, &["run", "word-count", "--text", "one two three"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(
        stdout(&out).contains("\"words\": 3") || stdout(&out).contains("\"words\":3"),
        "{}",
        stdout(&out)
    );
}

#[test]
fn init_refuses_to_overwrite_a_project_and_writes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("skillgate.yaml"), "# mine\n").unwrap();
    let out = crate::support::common::skillgate(dir.path(), &["init"]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(stderr(&out).contains("skillgate.yaml"), "{}", stderr(&out));
    assert_eq!(
        std::fs::read_to_string(dir.path().join("skillgate.yaml")).unwrap(),
        "# mine\n"
    );
    assert!(!dir.path().join("main.skill.md").exists());
}

#[test]
fn init_config_reads_cleanly_with_every_transport_uncommented() {
    let dir = tempfile::tempdir().unwrap();
    let out = crate::support::common::skillgate(dir.path(), &["init"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    // Uncomment each section as a user would: drop the `# ` before section headers and the
    // lines indented under them (comments inside stay comments).
    let text = std::fs::read_to_string(dir.path().join("skillgate.yaml")).unwrap();
    let sections = ["http:", "websocket:", "store:", "slack:", "email:"];
    let mut uncommented = String::new();
    for line in text.lines() {
        let body = line.strip_prefix("# ");
        let keep = match body {
            Some(b) if sections.iter().any(|s| b.starts_with(s)) || b.starts_with("  ") => b,
            _ => line,
        };
        uncommented.push_str(keep);
        uncommented.push('\n');
    }
    for section in sections {
        assert!(
            uncommented.contains(&format!("\n{section}")),
            "{section} missing:\n{uncommented}"
        );
    }
    std::fs::write(dir.path().join("skillgate.yaml"), &uncommented).unwrap();
    let out = skillgate_command(dir.path())
        .env(
            "SKILLGATE_API_KEYS",
            "ci=sha256:9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08",
        )
        .env("DATABASE_URL", "memory")
        .env("SLACK_BOT_TOKEN", "xoxb-test")
        .env("SLACK_SIGNING_SECRET", "secret")
        .env("SMTP_RELAY_URL", "smtp://127.0.0.1:2525")
        .args(["migrate", "--check"])
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}\n{uncommented}",
        stderr(&out)
    );
}

/// The value of mimalloc's `arena_eager_commit` in the binary, as mimalloc reports it on start
/// (`MIMALLOC_VERBOSE`), with `MIMALLOC_ARENA_EAGER_COMMIT` set to `env` when given.
#[cfg(target_os = "linux")]
fn arena_eager_commit(env: Option<&str>) -> Option<String> {
    let mut command = skillgate_command(&fixture("tree"));
    command.arg("--version").env("MIMALLOC_VERBOSE", "1");
    match env {
        Some(value) => command.env("MIMALLOC_ARENA_EAGER_COMMIT", value),
        None => command.env_remove("MIMALLOC_ARENA_EAGER_COMMIT"),
    };
    let out = command.output().expect("run skillgate");
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    stderr(&out)
        .lines()
        .find_map(|line| line.split_once("option 'arena_eager_commit':"))
        .map(|(_, value)| value.trim().to_string())
}

#[cfg(target_os = "linux")]
#[test]
fn the_allocator_commits_memory_as_it_is_used_unless_the_environment_says_otherwise() {
    // Committing a whole arena up front kept about 10 MiB more resident in an idle server.
    assert_eq!(arena_eager_commit(None).as_deref(), Some("0"));
    assert_eq!(arena_eager_commit(Some("1")).as_deref(), Some("1"));
}
