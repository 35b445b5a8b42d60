//! Reading an inbound mail: MIME parsed by mail-parser (multipart, transfer encodings,
//! charsets, HTML turned to text) within caps on parts, nesting and attachments; the fields a
//! skill sees; and whether the mail may be answered at all (RFC 3834: never to automatic mail,
//! lists, bounces, or ourselves).

use mail_parser::{Address, HeaderValue, MessageParser, MimeHeaders, PartType};
use serde_json::{Value, json};

/// Caps on what one mail may hold.
#[derive(Debug, Clone)]
pub struct Caps {
    pub max_parts: usize,
    pub max_depth: usize,
    pub max_attachments: usize,
    pub max_attachment_size: usize,
}

impl Default for Caps {
    fn default() -> Self {
        Caps {
            max_parts: 100,
            max_depth: 10,
            max_attachments: 20,
            max_attachment_size: 10 * 1024 * 1024,
        }
    }
}

/// Why a mail is refused. Said to the sender in the SMTP answer, so it names the problem.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MailError {
    #[error("the message is not a MIME message (no header section could be read)")]
    NotMime,
    #[error("the message has {count} MIME parts; at most {max} are taken")]
    TooManyParts { count: usize, max: usize },
    #[error("the message nests multiparts {depth} deep; at most {max} are taken")]
    TooDeep { depth: usize, max: usize },
    #[error("the message has {count} attachments; at most {max} are taken")]
    TooManyAttachments { count: usize, max: usize },
    #[error("the attachment `{name}` is {size} bytes; at most {max} are taken")]
    AttachmentTooLarge {
        name: String,
        size: usize,
        max: usize,
    },
    #[error("a text part is in the unknown charset `{0}`")]
    UnknownCharset(String),
    #[error("the message has no From address")]
    NoSender,
}

/// A mail as a skill sees it.
#[derive(Debug, Clone, PartialEq)]
pub struct Mail {
    /// The From address (lower case), and the name shown with it.
    pub from: String,
    pub from_name: Option<String>,
    /// Where replies go: Reply-To when given, else From.
    pub reply_to: String,
    pub to: Vec<String>,
    pub cc: Vec<String>,
    pub subject: String,
    pub text: String,
    pub html: Option<String>,
    /// Without angle brackets; `None` when the mail has none.
    pub message_id: Option<String>,
    pub in_reply_to: Vec<String>,
    pub references: Vec<String>,
    pub attachments: Vec<Value>,
    /// Why it must not be answered (automatic, a list, a bounce, ours), if so.
    pub no_reply: Option<&'static str>,
}

impl Mail {
    /// `nonlocals.request` fields.
    pub fn to_json(&self) -> Value {
        json!({
            "from": self.from, "fromName": self.from_name, "replyTo": self.reply_to,
            "to": self.to, "cc": self.cc, "subject": self.subject, "text": self.text,
            "html": self.html, "messageId": self.message_id, "inReplyTo": self.in_reply_to,
            "references": self.references, "attachments": self.attachments,
        })
    }

    pub fn from_json(v: &Value) -> Mail {
        let s = |k: &str| v[k].as_str().unwrap_or_default().to_string();
        let list = |k: &str| -> Vec<String> {
            v[k].as_array()
                .map(|a| {
                    a.iter()
                        .filter_map(|x| x.as_str().map(str::to_string))
                        .collect()
                })
                .unwrap_or_default()
        };
        Mail {
            from: s("from"),
            from_name: v["fromName"].as_str().map(str::to_string),
            reply_to: s("replyTo"),
            to: list("to"),
            cc: list("cc"),
            subject: s("subject"),
            text: s("text"),
            html: v["html"].as_str().map(str::to_string),
            message_id: v["messageId"].as_str().map(str::to_string),
            in_reply_to: list("inReplyTo"),
            references: list("references"),
            attachments: v["attachments"].as_array().cloned().unwrap_or_default(),
            no_reply: None,
        }
    }
}

/// Reads `raw`. `envelope_from` is the SMTP `MAIL FROM` (empty for a bounce); `ours` are the
/// addresses skillgate sends from.
pub fn read(
    raw: &[u8],
    envelope_from: &str,
    ours: &[String],
    caps: &Caps,
) -> Result<Mail, MailError> {
    let message = MessageParser::default()
        .parse(raw)
        .filter(|m| !m.parts.is_empty() && !m.parts[0].headers.is_empty())
        .ok_or(MailError::NotMime)?;
    if message.parts.len() > caps.max_parts {
        return Err(MailError::TooManyParts {
            count: message.parts.len(),
            max: caps.max_parts,
        });
    }
    let depth = depth(&message, 0, 0);
    if depth > caps.max_depth {
        return Err(MailError::TooDeep {
            depth,
            max: caps.max_depth,
        });
    }
    for part in &message.parts {
        if matches!(part.body, PartType::Text(_) | PartType::Html(_))
            && let Some(charset) = part.content_type().and_then(|c| c.attribute("charset"))
            && !known_charset(charset)
        {
            return Err(MailError::UnknownCharset(charset.to_string()));
        }
    }
    let count = message.attachment_count();
    if count > caps.max_attachments {
        return Err(MailError::TooManyAttachments {
            count,
            max: caps.max_attachments,
        });
    }
    let mut attachments = Vec::new();
    for part in message.attachments() {
        let name = part.attachment_name().unwrap_or("(unnamed)").to_string();
        let size = part.len();
        if size > caps.max_attachment_size {
            return Err(MailError::AttachmentTooLarge {
                name,
                size,
                max: caps.max_attachment_size,
            });
        }
        let content_type = part.content_type().map(|c| match c.subtype() {
            Some(sub) => format!("{}/{sub}", c.ctype()),
            None => c.ctype().to_string(),
        });
        attachments.push(json!({ "name": name, "contentType": content_type, "size": size }));
    }
    let first = |a: Option<&Address>| {
        a.and_then(|a| a.first())
            .and_then(|a| a.address.as_deref())
            .map(str::to_lowercase)
    };
    let from = first(message.from()).ok_or(MailError::NoSender)?;
    let from_name = message
        .from()
        .and_then(|a| a.first())
        .and_then(|a| a.name.as_deref())
        .map(str::to_string);
    let reply_to = first(message.reply_to()).unwrap_or_else(|| from.clone());
    let all = |a: Option<&Address>| -> Vec<String> {
        a.map(|a| {
            a.iter()
                .filter_map(|x| x.address.as_deref())
                .map(str::to_lowercase)
                .collect()
        })
        .unwrap_or_default()
    };
    let text = message
        .body_text(0)
        .map(|t| t.into_owned())
        .unwrap_or_default();
    let html = message.body_html(0).map(|h| h.into_owned()).filter(|_| {
        message.html_body.first().is_some_and(|i| {
            matches!(
                message.parts.get(*i as usize).map(|p| &p.body),
                Some(PartType::Html(_))
            )
        })
    });
    let ids = |v: &HeaderValue| -> Vec<String> {
        match v {
            HeaderValue::Text(t) => vec![t.to_string()],
            HeaderValue::TextList(l) => l.iter().map(|t| t.to_string()).collect(),
            _ => Vec::new(),
        }
    };
    let mut mail = Mail {
        from,
        from_name,
        reply_to,
        to: all(message.to()),
        cc: all(message.cc()),
        subject: message.subject().unwrap_or_default().to_string(),
        text,
        html,
        message_id: message.message_id().map(str::to_string),
        in_reply_to: ids(message.in_reply_to()),
        references: ids(message.references()),
        attachments,
        no_reply: None,
    };
    let header = |name: &str| {
        message
            .header_raw(name)
            .map(|v| v.trim().to_ascii_lowercase())
    };
    mail.no_reply = no_reply(
        header("auto-submitted").as_deref(),
        header("precedence").as_deref(),
        header("list-id").is_some() || header("list-unsubscribe").is_some(),
        envelope_from,
        &mail,
        ours,
    );
    Ok(mail)
}

/// RFC 3834 section 2 and common practice: whom an automatic answer must not go to.
fn no_reply(
    auto_submitted: Option<&str>,
    precedence: Option<&str>,
    list: bool,
    envelope_from: &str,
    mail: &Mail,
    ours: &[String],
) -> Option<&'static str> {
    if auto_submitted.is_some_and(|v| v.split(';').next().unwrap_or("").trim() != "no") {
        return Some("Auto-Submitted");
    }
    if precedence.is_some_and(|p| matches!(p, "bulk" | "list" | "junk")) {
        return Some("Precedence: bulk, list or junk");
    }
    if list {
        return Some("a mailing list (List-Id)");
    }
    if envelope_from.trim().is_empty() || envelope_from.trim() == "<>" {
        return Some("an empty return path (a bounce)");
    }
    let local = mail.reply_to.split('@').next().unwrap_or("");
    if matches!(
        local,
        "mailer-daemon" | "postmaster" | "noreply" | "no-reply"
    ) || local.starts_with("owner-")
        || local.ends_with("-request")
    {
        return Some("a system address");
    }
    if ours
        .iter()
        .any(|o| o.eq_ignore_ascii_case(&mail.reply_to) || o.eq_ignore_ascii_case(&mail.from))
    {
        return Some("our own address");
    }
    None
}

fn depth(message: &mail_parser::Message, part: usize, level: usize) -> usize {
    match message.parts.get(part).map(|p| &p.body) {
        Some(PartType::Multipart(children)) => children
            .iter()
            .map(|c| depth(message, *c as usize, level + 1))
            .max()
            .unwrap_or(level + 1),
        Some(PartType::Message(nested)) => depth(nested, 0, level + 1),
        _ => level,
    }
}

fn known_charset(name: &str) -> bool {
    let lower = name.trim().to_ascii_lowercase();
    matches!(
        lower.as_str(),
        "utf-8" | "utf8" | "us-ascii" | "ascii" | "utf-16" | "utf-16le" | "utf-16be"
    ) || mail_parser::decoders::charsets::map::charset_decoder(lower.as_bytes()).is_some()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mail(headers: &str, body: &str) -> Vec<u8> {
        format!("{headers}\r\n\r\n{body}").into_bytes()
    }

    const BASE: &str = "From: Ada <Ada@Example.org>\r\nTo: bot@skillgate.test\r\nSubject: Report\r\nMessage-ID: <m1@example.org>";

    #[test]
    fn a_plain_mail_gives_its_sender_subject_text_and_id() {
        let got = read(
            &mail(BASE, "hello\r\n"),
            "ada@example.org",
            &[],
            &Caps::default(),
        )
        .unwrap();
        assert_eq!(got.from, "ada@example.org");
        assert_eq!(got.from_name.as_deref(), Some("Ada"));
        assert_eq!(got.subject, "Report");
        assert_eq!(got.text.trim_end(), "hello");
        assert_eq!(got.message_id.as_deref(), Some("m1@example.org"));
        assert_eq!(got.no_reply, None);
    }

    #[test]
    fn quoted_printable_and_latin1_are_decoded() {
        let headers = format!(
            "{BASE}\r\nMIME-Version: 1.0\r\nContent-Type: text/plain; charset=iso-8859-1\r\nContent-Transfer-Encoding: quoted-printable"
        );
        let got = read(&mail(&headers, "caf=E9\r\n"), "a@b", &[], &Caps::default()).unwrap();
        assert_eq!(got.text.trim_end(), "café");
    }

    #[test]
    fn an_html_only_mail_has_text_too() {
        let headers =
            format!("{BASE}\r\nMIME-Version: 1.0\r\nContent-Type: text/html; charset=utf-8");
        let got = read(
            &mail(&headers, "<p>Hi <b>there</b></p>"),
            "a@b",
            &[],
            &Caps::default(),
        )
        .unwrap();
        assert!(got.text.contains("Hi there"), "{:?}", got.text);
        assert!(got.html.unwrap().contains("<b>there</b>"));
    }

    #[test]
    fn automatic_list_bounce_and_own_mail_are_not_answered() {
        let caps = Caps::default();
        for (extra, envelope, why) in [
            ("Auto-Submitted: auto-replied", "a@b", "Auto-Submitted"),
            ("Precedence: bulk", "a@b", "Precedence"),
            ("List-Id: <news.example.org>", "a@b", "List-Id"),
            ("X-Other: 1", "", "bounce"),
        ] {
            let got = read(
                &mail(&format!("{BASE}\r\n{extra}"), "x"),
                envelope,
                &[],
                &caps,
            )
            .unwrap();
            assert!(
                got.no_reply.unwrap().contains(why),
                "{extra}: {:?}",
                got.no_reply
            );
        }
        let ours = vec!["ada@example.org".to_string()];
        assert!(
            read(&mail(BASE, "x"), "a@b", &ours, &caps)
                .unwrap()
                .no_reply
                .is_some()
        );
        let daemon = "From: MAILER-DAEMON@example.org\r\nSubject: failure";
        assert!(
            read(&mail(daemon, "x"), "a@b", &[], &caps)
                .unwrap()
                .no_reply
                .is_some()
        );
        let no = format!("{BASE}\r\nAuto-Submitted: no");
        assert_eq!(
            read(&mail(&no, "x"), "a@b", &[], &caps).unwrap().no_reply,
            None
        );
    }

    #[test]
    fn an_unknown_charset_is_a_clear_error() {
        let headers =
            format!("{BASE}\r\nMIME-Version: 1.0\r\nContent-Type: text/plain; charset=x-martian-7");
        assert_eq!(
            read(&mail(&headers, "zzz"), "a@b", &[], &Caps::default()),
            Err(MailError::UnknownCharset("x-martian-7".into()))
        );
    }

    #[test]
    fn deep_nesting_and_too_many_parts_are_refused() {
        let mut body = String::from("leaf\r\n");
        let mut headers = String::new();
        for level in (0..12).rev() {
            let boundary = format!("b{level}");
            let inner_headers = headers.clone();
            body = format!("--{boundary}\r\n{inner_headers}\r\n{body}\r\n--{boundary}--\r\n");
            headers = format!("Content-Type: multipart/mixed; boundary={boundary}\r\n");
        }
        let raw = format!("{BASE}\r\nMIME-Version: 1.0\r\n{headers}\r\n{body}");
        let got = read(raw.as_bytes(), "a@b", &[], &Caps::default());
        assert!(matches!(got, Err(MailError::TooDeep { .. })), "{got:?}");
        let caps = Caps {
            max_parts: 3,
            ..Caps::default()
        };
        let got = read(raw.as_bytes(), "a@b", &[], &caps);
        assert!(
            matches!(got, Err(MailError::TooManyParts { .. })),
            "{got:?}"
        );
    }

    #[test]
    fn garbage_is_not_mime() {
        assert_eq!(
            read(b"", "a@b", &[], &Caps::default()),
            Err(MailError::NotMime)
        );
    }
}
