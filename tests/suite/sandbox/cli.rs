//! Through the CLI: the binary over `tests/fixtures/scripts`.

use serde_json::{Value, json};

use super::js_project;
use crate::support::common::{fixture, skillgate, stderr, stdout};

#[test]
fn cli_runs_a_skill_js_with_flags_checked_against_its_params() {
    let out = skillgate(
        &fixture("scripts"),
        &["run", "greet-js", "--name", "Ada", "--times", "2"],
    );
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(stdout(&out), "Hello, Ada! Hello, Ada!\n");
    let out = skillgate(&fixture("scripts"), &["run", "greet-js"]);
    assert_eq!(out.status.code(), Some(2), "missing name is a usage error");
    assert!(stderr(&out).contains("\"name\" is a required property"));
}

#[test]
fn cli_runs_a_markdown_skill_served_by_js_middleware() {
    let out = skillgate(&fixture("scripts"), &["run", "shouted", "--who", "Bo"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(stdout(&out), "QUIET WORDS FOR BO\n");
}

#[test]
fn cli_runs_folder_js_skills_and_skill_js_paths() {
    let out = skillgate(&fixture("scripts"), &["run", "report"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let value: Value = serde_json::from_slice(&out.stdout).expect("json result");
    assert_eq!(value, json!({"tool": "report", "uri": true}));
    let path = fixture("scripts/skills/greet-js.skill.js");
    let path = path.to_str().expect("utf-8 path");
    let out = skillgate(&fixture("scripts"), &["run", path, "--name", "Cy"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(stdout(&out), "Hello, Cy!\n");
}

#[test]
fn cli_lists_js_skills_and_reports_their_failures() {
    let out = skillgate(&fixture("scripts"), &["skills", "list", "--tag", "fixture"]);
    let names: Vec<String> = stdout(&out)
        .lines()
        .filter_map(|l| l.split_whitespace().next().map(str::to_string))
        .collect();
    assert_eq!(names, ["greet-js", "shouted"]);
    let out = skillgate(&fixture("scripts"), &["run", "fails"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stderr(&out).contains("deliberate failure from fails.skill.js"),
        "{}",
        stderr(&out)
    );
}

#[test]
fn cli_names_file_line_and_column_of_a_js_syntax_error() {
    let p = js_project(&[(
        "bad.skill.js",
        "export const frontmatter = { name: 'bad' };\nexport default async function () {\n  return [1, 2;\n}\n",
    )]);
    let out = skillgate(p.path(), &["run", "bad"]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    let err = stderr(&out);
    assert!(err.contains("bad.skill.js:3:"), "file and line: {err}");
    assert!(err.contains("syntax error"), "{err}");
}
