//! Answering a mail: `Re:` subject, `In-Reply-To` and `References` so it threads, text plus an
//! HTML alternative (the answer is markdown), `Auto-Submitted: auto-replied` (RFC 3834) so
//! other robots do not answer back, and `X-Skillgate-Status` / `X-Skillgate-Request-Id` for
//! programs that read the answers. Sent through the relay with lettre.

use lettre::message::header::{HeaderName, HeaderValue};
use lettre::message::{Mailbox, MultiPart};
use lettre::{AsyncSmtpTransport, AsyncTransport, Message, Tokio1Executor};

use crate::gateway::email::parse::Mail;

/// The sending side: the relay, and the address answers come from.
pub struct Mailer {
    transport: Option<AsyncSmtpTransport<Tokio1Executor>>,
    from: String,
}

impl Mailer {
    /// `relay` in lettre's URL form (`smtp://user:pass@host:587`, `smtps://host`); without one,
    /// answers are only logged.
    pub fn new(relay: Option<&str>, from: &str) -> Result<Mailer, String> {
        crate::tls::install();
        let transport = match relay {
            None => None,
            Some(url) => Some(
                AsyncSmtpTransport::<Tokio1Executor>::from_url(url)
                    .map_err(|e| e.to_string())?
                    .build(),
            ),
        };
        Ok(Mailer {
            transport,
            from: from.to_string(),
        })
    }

    /// A fresh Message-ID for an answer, at the `from` domain (without angle brackets).
    pub fn message_id(&self) -> String {
        let domain = self.from.rsplit_once('@').map_or("localhost", |(_, d)| d);
        format!("{}@{domain}", crate::context::id::random_hex128())
    }

    /// Sends `text` (markdown) as the answer to `mail`, with Message-ID `message_id`.
    pub async fn answer(
        &self,
        mail: &Mail,
        message_id: &str,
        text: &str,
        status: &str,
        request_id: &str,
    ) -> Result<(), String> {
        let Some(transport) = &self.transport else {
            tracing::warn!(
                to = mail.from,
                "no email relay is configured; the answer is not sent"
            );
            return Ok(());
        };
        let message = build(mail, &self.from, message_id, text, status, request_id)?;
        transport
            .send(message)
            .await
            .map(|_| ())
            .map_err(|e| format!("the relay refused the answer: {e}"))
    }
}

/// The answer as a message, to the `From` of `mail` (never to a `Reply-To`: a header anyone can
/// write would make the bot mail whomever it names).
pub fn build(
    mail: &Mail,
    from: &str,
    message_id: &str,
    text: &str,
    status: &str,
    request_id: &str,
) -> Result<Message, String> {
    let to: Mailbox = mail
        .from
        .parse()
        .map_err(|e| format!("the sender's address `{}`: {e}", mail.from))?;
    let from: Mailbox = from
        .parse()
        .map_err(|e| format!("email.from `{from}`: {e}"))?;
    let subject = if mail.subject.len() >= 3 && mail.subject[..3].eq_ignore_ascii_case("re:") {
        mail.subject.clone()
    } else {
        format!("Re: {}", mail.subject)
    };
    let mut builder = Message::builder()
        .from(from)
        .to(to)
        .subject(subject)
        .message_id(Some(format!("<{message_id}>")));
    if let Some(id) = &mail.message_id {
        builder = builder.in_reply_to(format!("<{id}>"));
        let mut references: Vec<String> =
            mail.references.iter().map(|r| format!("<{r}>")).collect();
        references.push(format!("<{id}>"));
        builder = builder.references(references.join(" "));
    }
    for (name, value) in [
        ("Auto-Submitted", "auto-replied".to_string()),
        ("X-Skillgate-Status", status.to_string()),
        ("X-Skillgate-Request-Id", request_id.to_string()),
    ] {
        builder = builder.raw_header(HeaderValue::new(
            HeaderName::new_from_ascii_str(name),
            value,
        ));
    }
    builder
        .multipart(MultiPart::alternative_plain_html(
            text.to_string(),
            to_html(text),
        ))
        .map_err(|e| format!("building the answer: {e}"))
}

/// Markdown to an HTML document. The text comes from mail and skills, so it is made safe the
/// way [`crate::markdown::to_html`] makes it.
pub fn to_html(markdown: &str) -> String {
    let clean = crate::markdown::to_html(markdown);
    format!("<!doctype html><html><body>{clean}</body></html>")
}

#[cfg(test)]
mod tests {
    use super::to_html;

    #[test]
    fn raw_html_in_an_answer_is_shown_as_text_and_never_taken_as_markup() {
        let html = to_html(
            "Hi <img src=x onerror=alert(1)>\n\n<form action=https://evil.test><input name=p></form>\n\n**bold** [ok](https://example.org) [js](javascript:alert(1))",
        );
        assert!(!html.contains("<img"), "{html}");
        assert!(!html.contains("<form"), "{html}");
        assert!(
            html.contains("&lt;img src=x onerror=alert(1)&gt;"),
            "{html}"
        );
        assert!(!html.contains("javascript:"), "{html}");
        assert!(html.contains("<strong>bold</strong>"), "{html}");
        assert!(html.contains("href=\"https://example.org\""), "{html}");
    }
}
