//! Where a setting is written in a YAML file: the line and column of a dotted path
//! (`http.rate-limit.brust`), found by following indentation (block style) and keys inside
//! `{ ... }` on one line (flow style). Best effort: errors name the path even when it is not found.

/// 1-based line and column of the last key of `path` (`[n]` indices are skipped).
pub fn locate(text: &str, path: &str) -> Option<(usize, usize)> {
    let keys: Vec<&str> = path
        .split('.')
        .map(|k| k.split('[').next().unwrap_or(k))
        .filter(|k| !k.is_empty())
        .collect();
    let lines: Vec<&str> = text.lines().collect();
    let mut from = 0;
    let mut parent_indent: Option<usize> = None;
    let mut found = None;
    for key in keys {
        let mut hit = None;
        for (n, line) in lines.iter().enumerate().skip(from) {
            let trimmed = line.trim_start();
            if trimmed.is_empty() || trimmed.starts_with('#') {
                continue;
            }
            let indent = line.len() - trimmed.len();
            if n > from && parent_indent.is_some_and(|p| indent <= p) && found.is_some() {
                break;
            }
            let body = trimmed.trim_start_matches("- ");
            if body.starts_with(&format!("{key}:")) {
                hit = Some((n, indent + (trimmed.len() - body.len()), indent));
                break;
            }
            // Flow style on the line: `{ per-second: 5, brust: 10 }`.
            if let Some(col) = find_flow_key(line, key) {
                hit = Some((n, col, indent));
                break;
            }
        }
        let (n, col, indent) = hit?;
        found = Some((n + 1, col + 1));
        from = n;
        parent_indent = Some(indent);
    }
    found
}

fn find_flow_key(line: &str, key: &str) -> Option<usize> {
    let open = line.find('{')?;
    for sep in ['{', ',', ' '] {
        let needle = format!("{sep}{key}:");
        if let Some(at) = line[open..].find(&needle) {
            return Some(open + at + 1);
        }
        let spaced = format!("{sep} {key}:");
        if let Some(at) = line[open..].find(&spaced) {
            return Some(open + at + 2);
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn block_and_flow_keys_are_found_by_path() {
        let text =
            "http:\n  bind: x\n  rate-limit:\n    per-second: 5\n    brust: 10\nstore:\n  url: y\n";
        assert_eq!(locate(text, "http.rate-limit.brust"), Some((5, 5)));
        assert_eq!(locate(text, "store.url"), Some((7, 3)));
        assert_eq!(locate(text, "slack"), None);
        let flow = "http:\n  rate-limit: { per-second: 5, brust: 10 }\n";
        assert_eq!(locate(flow, "http.rate-limit.brust"), Some((2, 32)));
        let list = "http:\n  api-keys:\n    - { name: a, hash: x }\n";
        assert_eq!(locate(list, "http.api-keys[0].hash"), Some((3, 18)));
    }
}
