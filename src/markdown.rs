//! Markdown written by people (skill descriptions, the API's descriptions, answers to mail) as
//! HTML that is safe to put in a page: raw HTML in it is shown as text, never taken as markup,
//! and what the markdown makes is cleaned by ammonia (links only to http, https and mailto and
//! to the page's own paths; no scripts, forms, styles or event handlers).

/// `markdown` as a cleaned HTML fragment.
pub fn to_html(markdown: &str) -> String {
    use pulldown_cmark::{Event, Options, Parser};
    let parser = Parser::new_ext(
        markdown,
        Options::ENABLE_STRIKETHROUGH | Options::ENABLE_TABLES,
    )
    .map(|event| match event {
        Event::Html(raw) | Event::InlineHtml(raw) => Event::Text(raw),
        other => other,
    });
    let mut body = String::new();
    pulldown_cmark::html::push_html(&mut body, parser);
    ammonia::Builder::default()
        .url_schemes(["http", "https", "mailto"].into())
        .clean(&body)
        .to_string()
}

#[cfg(test)]
mod tests {
    use super::to_html;

    #[test]
    fn markdown_becomes_html_and_raw_html_stays_text() {
        let html =
            to_html("Runs `skillgate serve`: **fast**. <script>alert(1)</script> [docs](/docs#x)");
        assert!(html.contains("<code>skillgate serve</code>"), "{html}");
        assert!(html.contains("<strong>fast</strong>"), "{html}");
        assert!(html.contains("&lt;script&gt;"), "{html}");
        assert!(!html.contains("<script>"), "{html}");
        assert!(html.contains("href=\"/docs#x\""), "{html}");
    }
}
