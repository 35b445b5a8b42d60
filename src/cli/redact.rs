//! Store URLs in messages: the password (`user:password@`, or a `password=` parameter) is
//! shown as `***`, wherever the URL or the password itself appears.

use percent_encoding::percent_decode_str;

const HIDDEN: &str = "***";

/// `url` with its password replaced by `***`.
pub fn url(url: &str) -> String {
    let mut out = url.to_string();
    // From the last so the earlier ranges stay valid.
    for range in secrets(url).into_iter().rev() {
        out.replace_range(range, HIDDEN);
    }
    out
}

/// `message` with `url`, and the password in any form, redacted.
pub fn message(message: &str, url: &str) -> String {
    let mut out = message.replace(url, &self::url(url));
    for range in secrets(url) {
        let secret = url[range].to_string();
        let decoded = percent_decode_str(&secret).decode_utf8_lossy().into_owned();
        // Too short a password would hide ordinary words: the URL itself is redacted above.
        for form in [secret, decoded] {
            if form.len() >= 4 {
                out = out.replace(&form, HIDDEN);
            }
        }
    }
    out
}

/// Where in `url` its passwords are, in order.
fn secrets(url: &str) -> Vec<std::ops::Range<usize>> {
    let mut found = Vec::new();
    let Some(scheme_end) = url.find("://") else {
        return found;
    };
    let start = scheme_end + 3;
    let rest = &url[start..];
    let authority_end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    if let Some(at) = rest[..authority_end].rfind('@')
        && let Some(colon) = rest[..at].find(':')
        && colon + 1 < at
    {
        found.push(start + colon + 1..start + at);
    }
    if let Some(question) = rest.find('?') {
        let mut offset = start + question + 1;
        let query = rest[question + 1..].split('#').next().unwrap_or_default();
        for pair in query.split('&') {
            if let Some((key, value)) = pair.split_once('=')
                && key.eq_ignore_ascii_case("password")
                && !value.is_empty()
            {
                let value_start = offset + key.len() + 1;
                found.push(value_start..value_start + value.len());
            }
            offset += pair.len() + 1;
        }
    }
    found
}

#[cfg(test)]
mod tests {
    use super::{message, url};

    #[test]
    fn passwords_in_store_urls_are_redacted() {
        assert_eq!(
            url("postgres://app:s3cr%40t@db:5432/events"),
            "postgres://app:***@db:5432/events"
        );
        assert_eq!(
            url("postgres://db/events?user=app&password=hunter22"),
            "postgres://db/events?user=app&password=***"
        );
        assert_eq!(url("postgres://app@db/events"), "postgres://app@db/events");
        assert_eq!(
            url("sqlite://.skillgate/events.db"),
            "sqlite://.skillgate/events.db"
        );
        let said = message(
            "cannot open `postgres://app:s3cr%40t@db/e`: password s3cr@t refused",
            "postgres://app:s3cr%40t@db/e",
        );
        assert_eq!(
            said,
            "cannot open `postgres://app:***@db/e`: password *** refused"
        );
    }
}
