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
                    .map_err(|e| format!("email.relay: {e}"))?
                    .build(),
            ),
        };
        Ok(Mailer {
            transport,
            from: from.to_string(),
        })
    }

    /// Sends `text` (markdown) as the answer to `mail`.
    pub async fn answer(
        &self,
        mail: &Mail,
        text: &str,
        status: &str,
        request_id: &str,
    ) -> Result<(), String> {
        let Some(transport) = &self.transport else {
            tracing::warn!(
                to = mail.reply_to,
                "no email relay is configured; the answer is not sent"
            );
            return Ok(());
        };
        let message = build(mail, &self.from, text, status, request_id)?;
        transport
            .send(message)
            .await
            .map(|_| ())
            .map_err(|e| format!("the relay refused the answer: {e}"))
    }
}

/// The answer as a message.
pub fn build(
    mail: &Mail,
    from: &str,
    text: &str,
    status: &str,
    request_id: &str,
) -> Result<Message, String> {
    let to: Mailbox = mail
        .reply_to
        .parse()
        .map_err(|e| format!("the reply address `{}`: {e}", mail.reply_to))?;
    let from: Mailbox = from
        .parse()
        .map_err(|e| format!("email.from `{from}`: {e}"))?;
    let subject = if mail.subject.len() >= 3 && mail.subject[..3].eq_ignore_ascii_case("re:") {
        mail.subject.clone()
    } else {
        format!("Re: {}", mail.subject)
    };
    let mut builder = Message::builder().from(from).to(to).subject(subject);
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

/// Markdown to HTML.
fn to_html(markdown: &str) -> String {
    let parser = pulldown_cmark::Parser::new_ext(
        markdown,
        pulldown_cmark::Options::ENABLE_STRIKETHROUGH | pulldown_cmark::Options::ENABLE_TABLES,
    );
    let mut html = String::from("<!doctype html><html><body>");
    pulldown_cmark::html::push_html(&mut html, parser);
    html.push_str("</body></html>");
    html
}
