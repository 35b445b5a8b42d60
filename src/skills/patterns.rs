//! Tool-selection patterns of `allowed-tools`: globs, `#tag` selectors and `name(k=v)` specifiers.
//!
//! `allowed-tools` is a string of space-delimited patterns or a JSON array of
//! such strings. Whitespace inside `( )` or `"…"` does not split. A pattern is:
//!
//! ```text
//! file-*  event-?ait  [ab]*  ns/*   glob over tool names (`*` also matches `/` and `:`)
//! #net  #re*                        tag selector: any tool with a tag matching the glob
//! web-fetch(url=https://*)          specifier: name or tag, then comma-separated items
//! file-*(path="/tmp/a, b/*", mode=r*, $policy=deny)
//! shell(cmd="rm *", $deny)          deny rule with constraints
//! !file-write                       deny rule: the tool is refused outright
//! ```
//!
//! Items: `key=value` requires the arg `key` to be present and to match the
//! value glob (strings as-is, numbers and bools by their JSON text, arrays
//! element-wise; objects and null never match). A value may be double-quoted
//! to hold commas, spaces or parentheses. Backslash escapes are the glob's own,
//! in or out of quotes: `\"` is `"`, `\\` is `\`, `\*` is a literal star.
//! `$policy=deny` refuses args not named by a `key=value` item
//! (`$policy=allow`, the default, lets them through); `$deny` makes the pattern
//! a deny rule. `!p(…)` is the same as `p(…, $deny)`.
//!
//! A call is refused if any deny rule matches (name/tag and all constraints),
//! else allowed if any allow rule matches, else refused with the reason.

use globset::{GlobBuilder, GlobMatcher};
use serde_json::Value;

/// The tool being called, as far as pattern matching cares.
#[derive(Debug, Clone, Copy)]
pub struct ToolInfo<'a> {
    pub name: &'a str,
    pub tags: &'a [String],
}

/// A compiled `allowed-tools` declaration.
#[derive(Debug, Clone)]
pub struct AllowedTools {
    rules: Vec<Rule>,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AllowedToolsError {
    #[error("allowed-tools pattern `{pattern}`: {reason}")]
    Invalid { pattern: String, reason: String },
    #[error("allowed-tools must be a string or an array of strings, got {0}")]
    NotStringOrArray(String),
}

/// Why a call was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct Denial {
    pub tool: String,
    pub message: String,
}

impl Denial {
    fn new(tool: &str, message: String) -> Self {
        let tool = tool.to_string();
        Self { tool, message }
    }
}

#[derive(Debug, Clone)]
struct Rule {
    source: String,
    deny: bool,
    /// Name part without `#`; `tag` says whether it selects by tag.
    selector: String,
    tag: bool,
    glob: GlobMatcher,
    constraints: Vec<Constraint>,
    strict: bool,
}

#[derive(Debug, Clone)]
struct Constraint {
    key: String,
    text: String,
    glob: GlobMatcher,
}

const GLOB_CHARS: &[char] = &['*', '?', '[', ']', '{', '}', '\\'];

impl AllowedTools {
    /// Parses a JSON string or array of strings.
    pub fn parse(spec: &Value) -> Result<Self, AllowedToolsError> {
        match spec {
            Value::String(s) => Self::parse_str(s),
            Value::Array(items) => {
                let mut rules = Vec::new();
                for item in items {
                    let Value::String(s) = item else {
                        return Err(AllowedToolsError::NotStringOrArray(format!(
                            "an array containing {}",
                            kind(item)
                        )));
                    };
                    rules.extend(Self::parse_str(s)?.rules);
                }
                Ok(Self { rules })
            }
            other => Err(AllowedToolsError::NotStringOrArray(kind(other).to_string())),
        }
    }

    /// Parses a string of space-delimited patterns.
    pub fn parse_str(spec: &str) -> Result<Self, AllowedToolsError> {
        let rules = split_patterns(spec)
            .into_iter()
            .map(parse_rule)
            .collect::<Result<_, _>>()?;
        Ok(Self { rules })
    }

    /// True when no pattern was declared (`check` then refuses everything; callers skip it).
    pub fn is_empty(&self) -> bool {
        self.rules.is_empty()
    }

    /// Decides whether `tool` may be called with `args`.
    pub fn check(&self, tool: ToolInfo<'_>, args: &Value) -> Result<(), Denial> {
        let name = tool.name;
        let refuse = |message| Err(Denial::new(name, message));
        let selected: Vec<&Rule> = self.rules.iter().filter(|r| r.selects(tool)).collect();
        let denied = |r: &&&Rule| r.deny && r.violation(args).is_none();
        if let Some(Rule { source, .. }) = selected.iter().find(denied) {
            return refuse(format!(
                "tool `{name}` is denied by allowed-tools pattern `{source}`"
            ));
        }
        let allows = selected.iter().filter(|r| !r.deny);
        let verdicts: Vec<_> = allows.map(|r| (r, r.violation(args))).collect();
        if verdicts.iter().any(|(_, why)| why.is_none()) {
            return Ok(());
        }
        if let Some((rule, Some(why))) = verdicts.first() {
            return refuse(format!(
                "tool `{name}` is not allowed with these args by allowed-tools pattern `{}`: {why}",
                rule.source
            ));
        }
        let listed = match self.patterns().join("`, `") {
            none if none.is_empty() => "none declared".to_string(),
            listed => format!("`{listed}`"),
        };
        refuse(format!("tool `{name}` is not in allowed-tools ({listed})"))
    }

    /// Name/tag match of any allow rule, ignoring arg constraints, and not denied outright (used for tool discovery lists).
    pub fn admits_name(&self, tool: ToolInfo<'_>) -> bool {
        let outright = |r: &Rule| r.deny && r.constraints.is_empty() && r.selects(tool);
        !self.rules.iter().any(outright) && self.rules.iter().any(|r| !r.deny && r.selects(tool))
    }

    /// True when `name` appears literally (no glob characters, not via a tag) as the name part of an allow rule (hidden tools are only discoverable this way).
    pub fn names_explicitly(&self, name: &str) -> bool {
        self.rules
            .iter()
            .any(|r| !r.deny && !r.tag && !r.selector.contains(GLOB_CHARS) && r.selector == name)
    }

    /// True when a bare `*` allow rule is present (discovery mode for the agent).
    pub fn has_bare_star(&self) -> bool {
        self.rules.iter().any(|r| {
            !r.deny && !r.tag && r.selector == "*" && r.constraints.is_empty() && !r.strict
        })
    }

    /// The source text of each pattern, in order.
    pub fn patterns(&self) -> Vec<String> {
        self.rules.iter().map(|r| r.source.clone()).collect()
    }
}

impl Rule {
    fn selects(&self, tool: ToolInfo<'_>) -> bool {
        if self.tag {
            tool.tags.iter().any(|t| self.glob.is_match(t))
        } else {
            self.glob.is_match(tool.name)
        }
    }

    /// The first reason `args` fail this rule's constraints, if any.
    fn violation(&self, args: &Value) -> Option<String> {
        let empty = serde_json::Map::new();
        let obj = match args {
            Value::Object(map) => map,
            Value::Null => &empty,
            _ if self.constraints.is_empty() && !self.strict => return None,
            _ => return Some("args are not a JSON object".to_string()),
        };
        let failure = self.constraints.iter().find_map(|c| match obj.get(&c.key) {
            None => Some(format!("arg `{}` is missing", c.key)),
            Some(v) => value_failure(&c.key, v, c),
        });
        if failure.is_some() || !self.strict {
            return failure;
        }
        obj.keys()
            .find(|k| !self.constraints.iter().any(|c| &c.key == *k))
            .map(|k| format!("arg `{k}` is not allowed under $policy=deny"))
    }
}

fn value_failure(key: &str, value: &Value, c: &Constraint) -> Option<String> {
    let text = match value {
        Value::String(s) => s.clone(),
        Value::Number(_) | Value::Bool(_) => value.to_string(),
        Value::Array(items) => return items.iter().find_map(|v| value_failure(key, v, c)),
        _ => {
            return Some(format!(
                "arg `{key}` is {}, which never matches",
                kind(value)
            ));
        }
    };
    (!c.glob.is_match(&text))
        .then(|| format!("arg `{key}`: value `{text}` does not match `{}`", c.text))
}

fn kind(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a bool",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// Tracks `"…"` (with backslash escapes inside) one char at a time.
#[derive(Default)]
struct Quotes {
    open: bool,
    escaped: bool,
}

impl Quotes {
    /// True when `c` is a plain char outside quotes.
    fn outside(&mut self, c: char) -> bool {
        let (open, escaped) = (self.open, self.escaped);
        self.escaped = open && !escaped && c == '\\';
        self.open ^= c == '"' && !escaped;
        !open && c != '"'
    }
}

/// Splits on whitespace outside parentheses and double quotes.
fn split_patterns(spec: &str) -> Vec<&str> {
    let (mut quotes, mut depth, mut start, mut out) = (Quotes::default(), 0usize, None, vec![]);
    for (i, c) in spec.char_indices() {
        if quotes.outside(c) {
            match c {
                '(' => depth += 1,
                ')' => depth = depth.saturating_sub(1),
                c if c.is_whitespace() && depth == 0 => {
                    out.extend(start.take().map(|s| &spec[s..i]));
                    continue;
                }
                _ => {}
            }
        }
        start.get_or_insert(i);
    }
    out.extend(start.map(|s| &spec[s..]));
    out
}

/// Byte index of the first of `stop` outside quotes; errors on an unterminated quote.
fn find_unquoted(s: &str, stop: &[char]) -> Result<Option<usize>, String> {
    let mut quotes = Quotes::default();
    let mut chars = s.char_indices();
    match chars.find(|&(_, c)| quotes.outside(c) && stop.contains(&c)) {
        None if quotes.open => Err("unterminated quote".to_string()),
        found => Ok(found.map(|(i, _)| i)),
    }
}

fn compile(glob: &str) -> Result<GlobMatcher, String> {
    let mut builder = GlobBuilder::new(glob);
    let built = builder
        .literal_separator(false)
        .backslash_escape(true)
        .build();
    let error = |e: globset::Error| format!("invalid glob `{glob}`: {}", e.kind());
    built.map(|g| g.compile_matcher()).map_err(error)
}

const QUOTE_PARENS: &str = "quote values that contain parentheses";

macro_rules! bail {
    ($($fmt:tt)*) => { return Err(format!($($fmt)*)) };
}

fn parse_rule(source: &str) -> Result<Rule, AllowedToolsError> {
    parse_rule_inner(source).map_err(|reason| AllowedToolsError::Invalid {
        pattern: source.to_string(),
        reason,
    })
}

fn parse_rule_inner(source: &str) -> Result<Rule, String> {
    let body = source.strip_prefix('!');
    let (deny, body) = (body.is_some(), body.unwrap_or(source));
    let parens = &['(', ')'];
    let (name, inner) = match find_unquoted(body, parens)? {
        None => (body, ""),
        Some(i) if body[i..].starts_with(')') => bail!("unbalanced parenthesis: `)` without `(`"),
        Some(open) => {
            let rest = &body[open + 1..];
            match find_unquoted(rest, parens)? {
                None => bail!("unbalanced parenthesis: missing `)`"),
                Some(i) if rest[i..].starts_with('(') => bail!("nested `(`: {QUOTE_PARENS}"),
                Some(i) if rest[i + 1..].starts_with(')') => {
                    bail!("unbalanced parenthesis: extra `)`")
                }
                Some(i) if i + 1 < rest.len() => bail!("unexpected text after `)`"),
                Some(close) => (&body[..open], &rest[..close]),
            }
        }
    };
    if name.contains('"') {
        bail!("quotes are only allowed in argument values");
    }
    let (tag, selector) = match name.strip_prefix('#') {
        Some("") => bail!("empty tag after `#`"),
        Some(t) => (true, t),
        None if name.is_empty() => bail!("empty name"),
        None => (false, name),
    };
    let mut rule = Rule {
        source: source.to_string(),
        deny,
        selector: selector.to_string(),
        tag,
        glob: compile(selector)?,
        constraints: Vec::new(),
        strict: false,
    };
    if inner.trim().is_empty() {
        return Ok(rule);
    }
    let mut policy: Option<bool> = None;
    let mut rest = inner;
    loop {
        let comma = find_unquoted(rest, &[','])?;
        let item = rest[..comma.unwrap_or(rest.len())].trim();
        parse_item(item, &mut rule, &mut policy)?;
        match comma {
            Some(i) => rest = &rest[i + 1..],
            None => break,
        }
    }
    if rule.deny && policy.is_some() {
        bail!("`$policy` has no meaning on a deny rule");
    }
    rule.strict = policy == Some(true);
    Ok(rule)
}

fn parse_item(item: &str, rule: &mut Rule, strict: &mut Option<bool>) -> Result<(), String> {
    if item.is_empty() {
        bail!("empty item between commas");
    }
    if let Some(flag) = item.strip_prefix('$') {
        match flag.split_once('=').map(|(k, v)| (k.trim(), v.trim())) {
            None if flag == "deny" => rule.deny = true,
            Some(("policy", _)) if strict.is_some() => bail!("`$policy` given twice"),
            Some(("policy", v @ ("allow" | "deny"))) => *strict = Some(v == "deny"),
            Some(("policy", v)) => bail!("bad $policy value `{v}` (expected allow or deny)"),
            _ => bail!("unknown flag `{item}` (expected $deny or $policy=allow|deny)"),
        }
        return Ok(());
    }
    let Some((key, value)) = item.split_once('=').map(|(k, v)| (k.trim(), v.trim())) else {
        bail!("item `{item}` has no `=` (expected key=value, $deny or $policy=...)");
    };
    if key.is_empty() || key.contains('"') {
        bail!("item `{item}` needs a plain, unquoted key before `=`");
    }
    let mut quotes = Quotes::default();
    let mut chars = value.char_indices();
    let close = chars.find(|&(i, c)| quotes.outside(c) || (i > 0 && !quotes.open));
    let text = match close {
        _ if value.is_empty() => bail!("empty value for `{key}` (use \"\" for an empty string)"),
        _ if !value.starts_with('"') && !value.contains('"') => value,
        Some((end, '"')) if end + 1 == value.len() => &value[1..end],
        _ if quotes.open => bail!("unterminated quote"),
        _ => bail!("value of `{key}`: a quote must enclose the whole value"),
    };
    rule.constraints.push(Constraint {
        key: key.to_string(),
        text: text.to_string(),
        glob: compile(text)?,
    });
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn tools(spec: &str) -> AllowedTools {
        AllowedTools::parse_str(spec).expect("valid spec")
    }

    fn tool<'a>(name: &'a str, tags: &'a [String]) -> ToolInfo<'a> {
        ToolInfo { name, tags }
    }

    /// `verdict!(spec, tool, args => allowed)` asserts what `check` decides.
    macro_rules! verdict {
        ($spec:expr, $name:expr, $args:tt => $want:expr) => {
            let got = tools($spec).check(tool($name, &[]), &json!($args));
            assert_eq!(
                got.is_ok(),
                $want,
                "{} / {} / {}: {got:?}",
                $spec,
                $name,
                json!($args)
            );
        };
    }

    fn refusal(spec: &str, name: &str, args: Value) -> String {
        let denial = tools(spec).check(tool(name, &[]), &args).expect_err(spec);
        assert_eq!(denial.tool, name);
        denial.message
    }

    #[test]
    fn name_globs_match_and_star_crosses_namespaces() {
        verdict!("file-*", "file-read", {} => true);
        verdict!("file-*", "net-get", {} => false);
        verdict!("*", "mcp:github/issues", {} => true);
        verdict!("event-?ait", "event-wait", {} => true);
        verdict!("[ab]*", "b-tool", {} => true);
        verdict!("[ab]*", "c-tool", {} => false);
        verdict!("{file,net}-get", "net-get", {} => true);
    }

    #[test]
    fn tag_selectors_match_exact_tags_and_tag_globs() {
        let tags = ["network".to_string(), "read".to_string()];
        let ok = |spec, tags| tools(spec).check(tool("x", tags), &json!({})).is_ok();
        assert!(ok("#read", &tags) && !ok("#read", &[]) && !ok("#rea", &tags));
        assert!(ok("#net*", &tags) && !ok("#write", &tags));
    }

    #[test]
    fn array_and_string_specs_split_the_same_way() {
        let from_array = AllowedTools::parse(&json!(["a b", "c(x=1 2)"])).expect("valid");
        let from_str = AllowedTools::parse(&json!("a  b\tc(x=1 2)")).expect("valid");
        assert_eq!(from_array.patterns(), ["a", "b", "c(x=1 2)"]);
        assert_eq!(from_str.patterns(), from_array.patterns());
    }

    #[test]
    fn whitespace_in_parens_or_quotes_does_not_split() {
        let spec = r#"run(cmd="ls -l", dir = /tmp/*)"#;
        assert_eq!(tools(&format!("{spec} x")).patterns(), [spec, "x"]);
        verdict!(spec, "run", {"cmd": "ls -l", "dir": "/tmp/x"} => true);
        let err = AllowedTools::parse_str(r#"a "q x""#).expect_err("quoted name");
        assert!(err.to_string().contains("pattern `\"q x\"`"), "{err}");
    }

    #[test]
    fn missing_or_mismatching_constrained_arg_fails() {
        verdict!("fetch(url=https://*)", "fetch", {"url": "https://a/b"} => true);
        verdict!("fetch(url=https://*)", "fetch", {} => false);
        verdict!("fetch(url=https://*)", "fetch", null => false);
        verdict!("fetch(url=https://*)", "fetch", "https://a" => false);
        verdict!("fetch(url=https://*)", "fetch", {"url": "http://a"} => false);
    }

    #[test]
    fn arg_values_match_by_type() {
        verdict!("t(n=4?, b=true)", "t", {"n": 42, "b": true} => true);
        verdict!("t(n=4?)", "t", {"n": 5} => false);
        verdict!("t(b=true)", "t", {"b": false} => false);
        verdict!("t(n=1.5)", "t", {"n": 1.5} => true);
        verdict!("t(p=/tmp/*)", "t", {"p": ["/tmp/a", "/tmp/b"]} => true);
        verdict!("t(p=/tmp/*)", "t", {"p": ["/tmp/a", "/etc/b"]} => false);
        verdict!("t(p=*)", "t", {"p": {"a": 1}} => false);
        verdict!("t(p=*)", "t", {"p": null} => false);
        verdict!("t(p=*)", "t", {"p": ""} => true);
        let msg = refusal("t(p=/tmp/*)", "t", json!({"p": ["/tmp/a", "/etc/b"]}));
        assert!(
            msg.ends_with("arg `p`: value `/etc/b` does not match `/tmp/*`"),
            "{msg}"
        );
    }

    #[test]
    fn policy_deny_refuses_unnamed_args_and_allow_is_default() {
        verdict!("w(path=/tmp/*)", "w", {"path": "/tmp/a", "mode": "w"} => true);
        verdict!("w(path=/tmp/*, $policy=allow)", "w", {"path": "/tmp/a", "mode": "w"} => true);
        verdict!("w(path=/tmp/*, $policy=deny)", "w", {"path": "/tmp/a"} => true);
        verdict!("w($policy=deny)", "w", {"x": 1} => false);
        verdict!("w($policy=deny)", "w", {} => true);
        let msg = refusal(
            "w(path=*, $policy=deny)",
            "w",
            json!({"path": "a", "mode": "w"}),
        );
        assert!(
            msg.ends_with("arg `mode` is not allowed under $policy=deny"),
            "{msg}"
        );
    }

    #[test]
    fn deny_rules_override_allow_rules() {
        verdict!("file-* !file-write", "file-read", {} => true);
        verdict!("* file-write($deny)", "file-write", {} => false);
        verdict!("* !#danger", "x", {} => true);
        let tags = ["danger".to_string()];
        assert!(
            tools("* !#danger")
                .check(tool("x", &tags), &json!({}))
                .is_err()
        );
        let msg = refusal("file-* !file-write", "file-write", json!({}));
        assert_eq!(
            msg,
            "tool `file-write` is denied by allowed-tools pattern `!file-write`"
        );
    }

    #[test]
    fn deny_with_constraints_refuses_only_matching_calls() {
        verdict!(r#"shell shell(cmd="rm *", $deny)"#, "shell", {"cmd": "ls"} => true);
        verdict!(r#"shell shell(cmd="rm *", $deny)"#, "shell", {} => true);
        verdict!(r#"shell shell(cmd="rm *", $deny)"#, "shell", {"cmd": "rm -rf /"} => false);
        verdict!("* !shell(cmd=rm*)", "shell", {"cmd": "rm x"} => false);
    }

    #[test]
    fn refusal_names_pattern_and_first_failing_arg() {
        let spec = "w(path=/tmp/*, mode=r)";
        let msg = refusal(spec, "w", json!({"mode": "w"}));
        let want = "tool `w` is not allowed with these args by allowed-tools pattern";
        assert_eq!(msg, format!("{want} `{spec}`: arg `path` is missing"));
        let msg = refusal(spec, "w", json!({"path": "/tmp/x", "mode": "w"}));
        assert!(
            msg.ends_with("arg `mode`: value `w` does not match `r`"),
            "{msg}"
        );
    }

    #[test]
    fn unlisted_tool_message_lists_patterns() {
        let msg = refusal("a b(x=1)", "c", json!({}));
        assert_eq!(msg, "tool `c` is not in allowed-tools (`a`, `b(x=1)`)");
    }

    #[test]
    fn empty_set_reports_empty_and_refuses() {
        assert!(tools(" \n ").is_empty() && !tools("a").is_empty());
        assert!(AllowedTools::parse(&json!([])).expect("valid").is_empty());
        verdict!("", "a", {} => false);
    }

    #[test]
    fn quoted_values_hold_commas_parens_and_escapes() {
        let spec = r#"t(q="a, (b) \"c\" \\d", star="x\*")"#;
        verdict!(spec, "t", {"q": r#"a, (b) "c" \d"#, "star": "x*"} => true);
        verdict!(spec, "t", {"q": r#"a, (b) "c" \d"#, "star": "xy"} => false);
        verdict!(r#"t(e="")"#, "t", {"e": ""} => true);
    }

    #[test]
    fn parse_errors_name_the_pattern_and_reason() {
        let cases = [
            ("ok t(a=1", "`t(a=1`: unbalanced parenthesis: missing `)`"),
            ("t(a=1))", "extra `)`"),
            ("t(a=1)x", "unexpected text after `)`"),
            ("t)", "`)` without `(`"),
            ("t(a=(b))", "nested `(`"),
            (r#"t(a="x)"#, "unterminated quote"),
            (r#"t(a="x"y)"#, "a quote must enclose the whole value"),
            ("(a=1)", "empty name"),
            ("#", "empty tag"),
            ("t(a)", "item `a` has no `=`"),
            ("t(=1)", "plain, unquoted key"),
            ("t($allow)", "unknown flag `$allow`"),
            ("t($policy=maybe)", "bad $policy value `maybe`"),
            ("t($policy=deny,$policy=allow)", "given twice"),
            ("[ab", "invalid glob `[ab`"),
            ("t(a=[x)", "invalid glob `[x`"),
            ("t(a=1,,b=2)", "empty item"),
            ("t(a=)", "empty value"),
            ("!t(a=1, $policy=deny)", "no meaning on a deny rule"),
        ];
        for (spec, want) in cases {
            let err = AllowedTools::parse_str(spec).expect_err(spec).to_string();
            let ok = err.starts_with("allowed-tools pattern `") && err.contains(want);
            assert!(ok, "{err}");
        }
    }

    #[test]
    fn non_string_specs_are_rejected() {
        let err = AllowedTools::parse(&json!(3)).expect_err("number");
        assert_eq!(err, AllowedToolsError::NotStringOrArray("a number".into()));
        let err = AllowedTools::parse(&json!(["a", {"b": 1}])).expect_err("object item");
        assert!(
            err.to_string()
                .ends_with("got an array containing an object")
        );
    }

    #[test]
    fn admits_name_ignores_constraints_but_not_outright_denies() {
        let t = tools("fetch(url=https://*) file-* !file-write file-read(p=x, $deny)");
        assert!(t.admits_name(tool("fetch", &[])) && t.admits_name(tool("file-read", &[])));
        assert!(!t.admits_name(tool("file-write", &[])) && !t.admits_name(tool("net", &[])));
    }

    #[test]
    fn names_explicitly_requires_a_literal_allow_name() {
        let t = tools("secret(x=1) file-* #hidden !gone");
        assert!(t.names_explicitly("secret") && !t.names_explicitly("file-a"));
        assert!(!t.names_explicitly("file-*") && !t.names_explicitly("hidden"));
        assert!(!t.names_explicitly("gone"));
    }

    #[test]
    fn has_bare_star_only_for_unconstrained_star_allow() {
        assert!(tools("a *").has_bare_star());
        for spec in ["a*", "#*", "*(x=1)", "*($policy=deny)", "!*"] {
            assert!(!tools(spec).has_bare_star(), "{spec}");
        }
    }
}
