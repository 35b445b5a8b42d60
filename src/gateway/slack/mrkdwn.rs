//! Markdown to Slack's mrkdwn, and long texts split under Slack's message limit with code
//! fences kept balanced across the parts.

use pulldown_cmark::{Event, Options, Parser, Tag, TagEnd};

/// Characters of one posted message: Slack truncates `text` past 40,000 and advises at most
/// 4,000; parts stay under that with room for a fence reopened at their start.
pub const PART_LIMIT: usize = 3_900;

/// `markdown` as mrkdwn: `**bold**` → `*bold*`, `_em_`, `~~strike~~` → `~strike~`, links as
/// `<url|text>`, headings in bold, bullets as `•`, quotes and code kept; `&`, `<` and `>` in
/// text escaped as Slack requires.
pub fn to_mrkdwn(markdown: &str) -> String {
    let mut out = Writer::default();
    let parser = Parser::new_ext(
        markdown,
        Options::ENABLE_STRIKETHROUGH | Options::ENABLE_TABLES,
    );
    for event in parser {
        out.event(event);
    }
    let mut text = out.text;
    let kept_newline = markdown.ends_with('\n');
    while text.ends_with('\n') {
        text.pop();
    }
    if kept_newline && !text.is_empty() {
        text.push('\n');
    }
    text
}

#[derive(Default)]
struct Writer {
    text: String,
    /// Open lists: the next number of an ordered one, `None` for bullets.
    lists: Vec<Option<u64>>,
    quote: usize,
    /// The destination of each open link, written after its text.
    links: Vec<String>,
    in_code_block: bool,
    /// Cells of the table row being read.
    row: Vec<String>,
    in_cell: bool,
}

impl Writer {
    fn push(&mut self, s: &str) {
        if self.in_cell {
            if let Some(cell) = self.row.last_mut() {
                cell.push_str(s);
            }
            return;
        }
        if self.quote > 0 && (self.text.is_empty() || self.text.ends_with('\n')) {
            self.text.push_str(&"> ".repeat(self.quote));
        }
        self.text.push_str(s);
    }

    fn newline(&mut self) {
        self.text.push('\n');
    }

    /// Ends a block: a blank line after it (a line break inside a list), never more.
    fn block_end(&mut self) {
        let want = if self.lists.is_empty() { 2 } else { 1 };
        let have = self.text.len() - self.text.trim_end_matches('\n').len();
        for _ in have..want {
            self.newline();
        }
    }

    fn event(&mut self, event: Event<'_>) {
        match event {
            Event::Start(tag) => self.start(tag),
            Event::End(tag) => self.end(tag),
            Event::Text(text) => {
                if self.in_code_block {
                    // Line by line, so a quote prefix lands on each line.
                    for line in text.split_inclusive('\n') {
                        self.push(line);
                    }
                } else {
                    self.push(&escape(&text));
                }
            }
            Event::Code(code) => {
                self.push("`");
                self.push(&escape(&code));
                self.push("`");
            }
            Event::Html(html) | Event::InlineHtml(html) => self.push(&escape(&html)),
            Event::SoftBreak | Event::HardBreak => self.newline(),
            Event::Rule => {
                self.push("———");
                self.block_end();
            }
            Event::TaskListMarker(done) => self.push(if done { "☑ " } else { "☐ " }),
            Event::FootnoteReference(name) => self.push(&format!("[{}]", escape(&name))),
            Event::InlineMath(m) | Event::DisplayMath(m) => self.push(&escape(&m)),
        }
    }

    fn start(&mut self, tag: Tag<'_>) {
        match tag {
            Tag::Heading { .. } | Tag::Strong => self.push("*"),
            Tag::Emphasis => self.push("_"),
            Tag::Strikethrough => self.push("~"),
            Tag::BlockQuote(_) => self.quote += 1,
            Tag::CodeBlock(_) => {
                self.in_code_block = true;
                self.push("```\n");
            }
            Tag::List(first) => {
                if !self.lists.is_empty() && !self.text.ends_with('\n') {
                    self.newline();
                }
                self.lists.push(first);
            }
            Tag::Item => {
                let depth = self.lists.len().saturating_sub(1);
                let marker = match self.lists.last_mut() {
                    Some(Some(n)) => {
                        let marker = format!("{n}. ");
                        *n += 1;
                        marker
                    }
                    _ => "• ".to_string(),
                };
                self.push(&"    ".repeat(depth));
                self.push(&marker);
            }
            Tag::Link { dest_url, .. } | Tag::Image { dest_url, .. } => {
                self.push("<");
                self.push(&escape(&dest_url));
                self.push("|");
                self.links.push(dest_url.to_string());
            }
            Tag::TableRow | Tag::TableHead => self.row.clear(),
            Tag::TableCell => {
                self.row.push(String::new());
                self.in_cell = true;
            }
            _ => {}
        }
    }

    fn end(&mut self, tag: TagEnd) {
        match tag {
            TagEnd::Paragraph => self.block_end(),
            TagEnd::Heading(_) => {
                self.push("*");
                self.block_end();
            }
            TagEnd::Strong => self.push("*"),
            TagEnd::Emphasis => self.push("_"),
            TagEnd::Strikethrough => self.push("~"),
            TagEnd::BlockQuote(_) => {
                self.quote = self.quote.saturating_sub(1);
                if self.quote == 0 {
                    self.block_end();
                }
            }
            TagEnd::CodeBlock => {
                self.in_code_block = false;
                if !self.text.ends_with('\n') {
                    self.newline();
                }
                self.push("```");
                self.block_end();
            }
            TagEnd::List(_) => {
                self.lists.pop();
                if self.lists.is_empty() {
                    self.newline();
                }
            }
            TagEnd::Item if !self.text.ends_with('\n') => self.newline(),
            TagEnd::Link | TagEnd::Image => {
                self.links.pop();
                self.push(">");
            }
            TagEnd::TableCell => self.in_cell = false,
            TagEnd::TableHead | TagEnd::TableRow => {
                let row = std::mem::take(&mut self.row).join(" | ");
                self.push(&row);
                self.newline();
            }
            TagEnd::Table => self.newline(),
            _ => {}
        }
    }
}

/// Slack's three control characters in text.
fn escape(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

/// `text` in parts of at most `limit` characters, cut at a paragraph, then a line, then a
/// space; a code block cut in two is closed at the end of one part and reopened in the next.
pub fn split(text: &str, limit: usize) -> Vec<String> {
    let limit = limit.max(16);
    let mut parts = Vec::new();
    let mut rest = text;
    let mut reopen = false;
    while !rest.is_empty() {
        let prefix = if reopen { "```\n" } else { "" };
        // Room for a closing fence too.
        let room = limit - prefix.len() - 4;
        if rest.chars().count() + prefix.len() <= limit {
            parts.push(format!("{prefix}{rest}"));
            break;
        }
        let cut = cut_point(rest, room);
        let (head, tail) = rest.split_at(cut);
        let fences = head.matches("```").count() + usize::from(reopen);
        let open = fences % 2 == 1;
        let mut part = format!("{prefix}{}", head.trim_end_matches([' ', '\n']));
        if open {
            if !part.ends_with('\n') {
                part.push('\n');
            }
            part.push_str("```");
        }
        parts.push(part);
        rest = tail.trim_start_matches([' ', '\n']);
        reopen = open;
    }
    parts
}

/// A byte index at most `room` characters in, at the best break before it.
fn cut_point(text: &str, room: usize) -> usize {
    let hard = text.char_indices().nth(room).map_or(text.len(), |(i, _)| i);
    let window = &text[..hard];
    for sep in ["\n\n", "\n", " "] {
        if let Some(at) = window.rfind(sep)
            && at > hard / 2
        {
            return at + sep.len();
        }
    }
    hard
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn markdown_emphasis_links_and_headings_become_mrkdwn() {
        assert_eq!(
            to_mrkdwn(
                "# Report\n\n**Total**: _3_ ~~4~~ items, see [the list](https://x.test/a?b=1&c=2)."
            ),
            "*Report*\n\n*Total*: _3_ ~4~ items, see <https://x.test/a?b=1&amp;c=2|the list>."
        );
    }

    #[test]
    fn bullets_numbers_quotes_and_code_are_kept_readable() {
        let out =
            to_mrkdwn("- one\n- two\n  1. deep\n\n> quoted\n\n```rust\nlet a = b < c;\n```\n");
        assert_eq!(
            out,
            "• one\n• two\n    1. deep\n\n> quoted\n\n```\nlet a = b < c;\n```\n"
        );
    }

    #[test]
    fn control_characters_in_text_are_escaped_so_they_cannot_ping_or_link() {
        assert_eq!(
            to_mrkdwn("a <!channel> & <@U1>"),
            "a &lt;!channel&gt; &amp; &lt;@U1&gt;"
        );
    }

    #[test]
    fn plain_text_keeps_its_final_newline() {
        assert_eq!(to_mrkdwn("Hello, Ada!\n"), "Hello, Ada!\n");
        assert_eq!(to_mrkdwn("Hello"), "Hello");
    }

    #[test]
    fn a_long_text_is_split_under_the_limit_at_line_breaks() {
        let line = "word ".repeat(15);
        let text = vec![line.trim_end(); 40].join("\n");
        let parts = split(&text, 200);
        assert!(parts.len() > 1);
        for part in &parts {
            assert!(
                part.chars().count() <= 200,
                "{} chars",
                part.chars().count()
            );
            assert!(part.ends_with("word"), "cut inside a line: {part:?}");
        }
        let joined: String = parts.join("\n");
        assert_eq!(joined, text);
    }

    #[test]
    fn a_code_block_cut_in_two_is_closed_and_reopened() {
        let body: Vec<String> = (0..60).map(|i| format!("line {i:02}")).collect();
        let text = format!("```\n{}\n```", body.join("\n"));
        let parts = split(&text, 200);
        assert!(parts.len() > 1);
        for part in &parts {
            assert!(part.starts_with("```"), "{part:?}");
            assert!(part.ends_with("```"), "{part:?}");
            assert_eq!(part.matches("```").count(), 2, "{part:?}");
            assert!(part.chars().count() <= 200);
        }
    }

    #[test]
    fn a_word_longer_than_the_limit_is_cut_hard() {
        let parts = split(&"x".repeat(450), 200);
        assert!(parts.iter().all(|p| p.chars().count() <= 200));
        assert_eq!(parts.concat(), "x".repeat(450));
    }
}
