//! The README's contents list: every section, in order, each linked to its heading's anchor.

/// The anchor a heading gets: lowercase, punctuation dropped, spaces as `-`.
fn anchor(title: &str) -> String {
    title
        .to_lowercase()
        .chars()
        .filter(|c| c.is_ascii_alphanumeric() || matches!(c, ' ' | '-' | '_'))
        .map(|c| if c == ' ' { '-' } else { c })
        .collect()
}

#[test]
fn the_contents_list_links_every_section_in_order() {
    let readme =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/README.md")).unwrap();
    let (_, after) = readme
        .split_once("\n## Contents\n")
        .expect("a contents list");
    let (list, body) = after.split_once("\n## ").expect("sections after it");
    let listed: Vec<(usize, String, String)> = list
        .lines()
        .filter_map(|line| {
            let depth = line.len() - line.trim_start().len();
            let item = line.trim_start().strip_prefix("- [")?;
            let (title, link) = item.split_once("](#")?;
            Some((
                depth / 2,
                title.to_string(),
                link.trim_end_matches(')').to_string(),
            ))
        })
        .collect();
    let sections: Vec<(usize, String)> = format!("\n## {body}")
        .lines()
        .filter_map(|line| {
            if let Some(title) = line.strip_prefix("### ") {
                Some((1, title.to_string()))
            } else {
                line.strip_prefix("## ").map(|title| (0, title.to_string()))
            }
        })
        .collect();
    assert_eq!(
        listed
            .iter()
            .map(|(d, t, _)| (*d, t.clone()))
            .collect::<Vec<_>>(),
        sections,
        "the contents list and the headings differ"
    );
    for (_, title, link) in &listed {
        assert_eq!(*link, anchor(title), "the link to `{title}`");
    }
}
