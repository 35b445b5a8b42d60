//! Bounded property tests (proptest, a fixed number of cases so CI time stays flat) over what
//! strangers and careless authors hand skillgate: HTTP args with `$` keys, skill frontmatter and
//! skill bodies. The properties: no panic, no crash, no 5xx for a caller's mistake, and every
//! refusal says what was wrong and where.

use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};
use serde_json::{Map, Value, json};
use skillgate::skills::Source;
use skillgate::skills::loader::parse_skill;

use crate::support::common::{Project, hello_project};
use crate::support::server::{TestServer, config};

/// Any JSON value, a few levels deep, with keys that are often `$`-prefixed.
fn json_value() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(Value::from),
        any::<f64>()
            .prop_map(|f| serde_json::Number::from_f64(f).map_or(Value::Null, Value::Number)),
        ".{0,12}".prop_map(Value::String),
    ];
    leaf.prop_recursive(4, 32, 6, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
            prop::collection::vec((key(), inner), 0..6)
                .prop_map(|pairs| Value::Object(pairs.into_iter().collect())),
        ]
    })
}

/// Object keys: plain names, `$`-prefixed options real and made up, odd characters.
fn key() -> impl Strategy<Value = String> {
    prop_oneof![
        "[a-z]{1,8}",
        Just("$context".to_string()),
        Just("$detached".to_string()),
        "\\$[a-z]{0,6}",
        ".{0,6}",
    ]
}

fn args() -> impl Strategy<Value = Map<String, Value>> {
    prop::collection::vec((key(), json_value()), 0..6).prop_map(|pairs| pairs.into_iter().collect())
}

#[test]
fn http_args_with_directive_keys_at_any_depth_are_refused_by_path_and_nothing_is_a_5xx() {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let mut server = runtime.block_on(TestServer::start(hello_project(), config()));
    let mut runner = TestRunner::new(Config::with_cases(96));
    let result = runner.run(&args(), |args| {
        // Directive keys are refused wherever they are; other `$` keys are data.
        let refused =
            skillgate::kernel::authority::find_directive_key(&Value::Object(args.clone()));
        let (status, body) = runtime.block_on(async {
            let response = server
                .post_json("/invoke/hello", &Value::Object(args.clone()))
                .await;
            let status = response.status().as_u16();
            (
                status,
                response.json::<Value>().await.unwrap_or(Value::Null),
            )
        });
        prop_assert!(status < 500, "{status} {body}");
        if let Some(path) = refused {
            prop_assert_eq!(status, 422);
            prop_assert_eq!(body["errors"][0]["path"].as_str(), Some(path.as_str()));
        } else {
            prop_assert!(status == 200 || status == 422, "{} {}", status, body);
        }
        Ok(())
    });
    runtime.block_on(async {
        assert_eq!(server.get("/healthz").await.status(), 200);
        server.finish().await;
    });
    result.unwrap();
}

/// Frontmatter text: YAML made of JSON (a flow mapping) or arbitrary lines with YAML's
/// special characters, anchors and aliases among them.
fn frontmatter() -> impl Strategy<Value = String> {
    prop_oneof![
        prop::collection::vec((key(), json_value()), 0..6).prop_map(|pairs| {
            let map: Map<String, Value> = pairs.into_iter().collect();
            Value::Object(map).to_string()
        }),
        prop::collection::vec(
            prop_oneof![
                "[a-z$-]{1,8}: .{0,16}",
                "  - .{0,8}",
                Just("a: &x [*x, *x]".to_string()),
                Just("b: &y [1, 2]\nc: [*y, *y, *y]".to_string()),
                Just("metadata: { params: 3 }".to_string()),
                Just("name: Bad Name".to_string()),
                ".{0,20}",
            ],
            0..8,
        )
        .prop_map(|lines| lines.join("\n")),
    ]
}

#[test]
fn any_frontmatter_loads_or_is_refused_with_the_file_named() {
    let mut runner = TestRunner::new(Config::with_cases(256));
    let result = runner.run(&(frontmatter(), ".{0,40}"), |(yaml, body)| {
        let text = format!("---\n{yaml}\n---\n{body}\n");
        let file = "skills/fuzz.skill.md";
        match parse_skill(Source::Inline(file.into()), file, &text, "fuzz", None) {
            Ok(tool) => prop_assert!(!tool.name.is_empty()),
            Err(err) => prop_assert!(err.message().contains(file), "{}", err.message()),
        }
        Ok(())
    });
    result.unwrap();
}

#[test]
fn any_skill_body_runs_or_fails_with_an_error_never_a_panic() {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let mut runner = TestRunner::new(Config::with_cases(64));
    let body = prop::collection::vec(
        prop_oneof![
            ".{0,12}",
            Just(":arg[name]".to_string()),
            Just(":skill[".to_string()),
            Just(":skill[nope]{x=1}".to_string()),
            Just(":env[".to_string()),
            Just("{{".to_string()),
            Just("${".to_string()),
            Just(":::".to_string()),
        ],
        0..8,
    )
    .prop_map(|parts| parts.concat());
    let result = runner.run(&body, |body| {
        let project = Project::new();
        let file = format!("---\nname: fuzz\ndescription: Fuzzed.\n---\n{body}\n");
        project.skill("fuzz.skill.md", &file);
        let kernel = project.kernel();
        let out = runtime.block_on(kernel.invoke(
            "fuzz",
            json!({ "name": "x" }),
            skillgate::InvokeOptions::default(),
        ));
        if let Err(err) = out {
            prop_assert!(!err.message().is_empty());
        }
        Ok(())
    });
    result.unwrap();
}
