//! The README's performance figures are generated: each block between `<!-- bench:ID ... -->`
//! and `<!-- /bench:ID -->` is what `bench/results.json` gives, and the Performance section types
//! no measured figure outside them. `scripts/bench` rewrites the blocks through this test
//! (`SKILLGATE_UPDATE_README=1`), the way snapshot tests update their snapshots.

mod render;

use render::{BLOCKS, JUDGED_ROWS, Results};

const README: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/README.md");
const RESULTS: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/bench/results.json");

fn results() -> Results {
    let text =
        std::fs::read_to_string(RESULTS).expect("bench/results.json (scripts/bench writes it)");
    let value: serde_json::Value =
        serde_json::from_str(&text).unwrap_or_else(|e| panic!("bench/results.json: {e}"));
    for key in ["machine", "date", "commit", "benches"] {
        assert!(!value[key].is_null(), "bench/results.json has no `{key}`");
    }
    for (id, bench) in value["benches"].as_object().expect("benches is an object") {
        for key in ["date", "commit", "mode", "cpu", "rows"] {
            assert!(
                !bench[key].is_null(),
                "bench/results.json: `{id}` has no `{key}`"
            );
        }
    }
    Results(value)
}

/// The block `id`'s span in `readme`: the byte range of its content, between the end of the
/// opening marker's line and the start of the closing marker.
fn span(readme: &str, id: &str) -> Option<std::ops::Range<usize>> {
    let open = format!("<!-- bench:{id} ");
    let close = format!("<!-- /bench:{id} -->");
    let start = readme.find(&open)?;
    assert_eq!(
        readme.matches(&open).count(),
        1,
        "README: one `bench:{id}` block"
    );
    let content = start + readme[start..].find('\n')? + 1;
    let end = content
        + readme[content..]
            .find(&close)
            .unwrap_or_else(|| panic!("README: `{close}` missing"));
    Some(content..end)
}

/// `readme` with every block rendered from `results`, and the blocks that differed (each with
/// what the README has and what the results give).
fn regenerate(readme: &str, results: &Results) -> (String, Vec<String>) {
    let mut readme = readme.to_string();
    let mut stale = Vec::new();
    for (id, render) in BLOCKS {
        let range = span(&readme, id)
            .unwrap_or_else(|| panic!("README has no `<!-- bench:{id} ... -->` block"));
        let want = format!("\n{}\n", render(results));
        if readme[range.clone()] != want {
            stale.push(format!(
                "{id}:\n--- README\n{}--- bench/results.json gives\n{want}",
                &readme[range.clone()]
            ));
            readme.replace_range(range, &want);
        }
    }
    let known: Vec<&str> = BLOCKS.iter().map(|(id, _)| *id).collect();
    for (at, _) in readme.match_indices("<!-- bench:") {
        let id: String = readme[at + 11..]
            .chars()
            .take_while(|c| !c.is_whitespace())
            .collect();
        assert!(
            known.contains(&id.as_str()),
            "README block `bench:{id}` has no renderer"
        );
    }
    (readme, stale)
}

#[test]
fn the_readme_performance_blocks_are_what_bench_results_json_gives() {
    let readme = std::fs::read_to_string(README).unwrap();
    let (regenerated, stale) = regenerate(&readme, &results());
    if std::env::var("SKILLGATE_UPDATE_README").is_ok_and(|v| v == "1") {
        if regenerated != readme {
            std::fs::write(README, &regenerated).unwrap();
        }
        return;
    }
    assert!(
        stale.is_empty(),
        "README blocks differ from bench/results.json (run `scripts/bench`, or \
         SKILLGATE_UPDATE_README=1 on this test after editing the results):\n{}",
        stale.join("\n")
    );
}

#[test]
fn a_figure_edited_by_hand_inside_a_block_is_found_and_put_back() {
    let readme = std::fs::read_to_string(README).unwrap();
    let results = results();
    let (generated, _) = regenerate(&readme, &results);
    let range = span(&generated, "http").expect("an http block");
    let block = &generated[range.clone()];
    let digit = block
        .find(|c: char| c.is_ascii_digit())
        .expect("the http block has figures");
    let mut edited = generated.clone();
    let at = range.start + digit;
    let changed = if &edited[at..at + 1] == "9" { "8" } else { "9" };
    edited.replace_range(at..at + 1, changed);
    let (put_back, stale) = regenerate(&edited, &results);
    assert_eq!(stale.len(), 1, "one block differs: {stale:?}");
    assert!(stale[0].starts_with("http:"), "{}", stale[0]);
    assert_eq!(put_back, generated);
}

/// Whether `line` holds a number with a unit of measure: `2.3 µs`, `57k req/s`, `61%`, `1.2x`.
fn typed_figure(line: &str) -> Option<String> {
    const UNITS: &[&str] = &[
        "ms", "µs", "MB", "MiB", "KiB", "GB", "GiB", "req/s", "/s", "%", "x", "k", "M",
    ];
    let chars: Vec<char> = line.chars().collect();
    let mut i = 0;
    while i < chars.len() {
        if chars[i].is_ascii_digit()
            && (i == 0 || !chars[i - 1].is_alphanumeric() && chars[i - 1] != '-')
        {
            let mut j = i;
            while j < chars.len() && (chars[j].is_ascii_digit() || matches!(chars[j], '.' | ',')) {
                j += 1;
            }
            let rest: String = chars[j..].iter().collect();
            let rest = rest.trim_start_matches(' ');
            let word = rest.split_whitespace().next().unwrap_or("");
            if word.len() > 2 && word.trim_end_matches([',', '.', ';', ')']).ends_with("/s") {
                return Some(chars[i..j].iter().collect::<String>() + " " + word);
            }
            for unit in UNITS {
                if let Some(after) = rest.strip_prefix(unit)
                    && after.chars().next().is_none_or(|c| !c.is_alphanumeric())
                {
                    return Some(chars[i..j].iter().collect::<String>() + " " + unit);
                }
            }
            i = j;
        } else {
            i += 1;
        }
    }
    None
}

#[test]
fn the_performance_section_types_no_measured_figure_outside_its_generated_blocks() {
    let readme = std::fs::read_to_string(README).unwrap();
    let start = readme
        .find("\n## Performance\n")
        .expect("a Performance section");
    let section = &readme[start..];
    let section = &section[..section[1..].find("\n## ").map_or(section.len(), |e| e + 1)];
    let mut in_block = false;
    let mut in_code = false;
    for line in section.lines() {
        if line.starts_with("<!-- bench:") {
            in_block = true;
        } else if line.starts_with("<!-- /bench:") {
            in_block = false;
        } else if line.starts_with("```") {
            in_code = !in_code;
        } else if !in_block && !in_code {
            // Code spans name settings and commands, not figures.
            let prose: String = line.split('`').step_by(2).collect::<Vec<_>>().join(" ");
            assert!(
                typed_figure(&prose).is_none(),
                "README Performance: `{}` is typed by hand in: {line}",
                typed_figure(&prose).unwrap()
            );
        }
    }
    assert!(!in_block, "README Performance: a block is not closed");
}

#[test]
fn a_typed_figure_is_told_from_a_count_or_a_name() {
    for typed in [
        "2.3 µs",
        "57k req/s",
        "it serves 61% of",
        "1.2x bare",
        "34 MiB",
        "3,840 turns/s",
    ] {
        assert!(typed_figure(typed).is_some(), "{typed}");
    }
    for plain in [
        "1000 subscribers",
        "2-core machine",
        "16 clients",
        "HTTP/1.1",
        "p99",
        "W3C",
    ] {
        assert!(typed_figure(plain).is_none(), "{plain}");
    }
}

#[test]
fn every_row_a_target_judges_is_among_the_results_and_judged() {
    let results = results();
    for (id, label) in JUDGED_ROWS {
        match results.judged_row(id, label) {
            None => {} // not measured yet: its block says so
            Some(None) => panic!("bench/results.json: `{id}` has no row `{label}` to judge"),
            Some(Some(judged)) => assert!(
                judged.contains("met") || judged.contains("missed"),
                "`{id}` row `{label}` is judged: {judged}"
            ),
        }
    }
}
