//! Whether a mail's `From` is who sent it: DKIM and DMARC checked by mail-auth against DNS (the
//! system's resolver, or `email.dns-resolver`), or the `Authentication-Results` of a relay the
//! configuration trusts. Only a verified sender gets command routes, a session history, and the
//! answer; an unverified one is answered at its `From` at most.

use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use mail_auth::hickory_resolver::config::{
    ConnectionConfig, NameServerConfig, ResolverConfig, ResolverOpts,
};
use mail_auth::spf::verify::SpfParameters;
use mail_auth::{AuthenticatedMessage, DkimResult, DmarcResult, MessageAuthenticator, SpfOutput};

/// How a sender was found to be who its `From` says, or why not.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// `how`: `dmarc` (an aligned DKIM signature or SPF pass under the domain's DMARC record),
    /// `dkim` (no DMARC record, a DKIM signature of the `From` domain itself) or `relay` (the
    /// trusted relay's `Authentication-Results` said `dmarc=pass`).
    Verified(&'static str),
    Unverified(String),
}

impl Verdict {
    pub fn verified(&self) -> bool {
        matches!(self, Verdict::Verified(_))
    }

    /// For the event data and the logs.
    pub fn describe(&self) -> String {
        match self {
            Verdict::Verified(how) => format!("verified ({how})"),
            Verdict::Unverified(why) => format!("unverified: {why}"),
        }
    }
}

/// The SMTP client a mail came from (none for mail read over IMAP).
#[derive(Debug, Clone, Default)]
pub struct Client {
    pub ip: Option<IpAddr>,
    /// What it said in EHLO/HELO.
    pub helo: String,
}

pub struct Verifier {
    authenticator: Result<MessageAuthenticator, String>,
    /// The authserv-id whose `Authentication-Results` header is believed.
    trusted_relay: Option<String>,
    /// Our host name, for SPF macros.
    hostname: String,
}

impl Verifier {
    /// `resolver`: the DNS server to ask (`None`: the system's, from /etc/resolv.conf).
    pub fn new(
        resolver: Option<SocketAddr>,
        trusted_relay: Option<String>,
        hostname: &str,
    ) -> Verifier {
        let authenticator = match resolver {
            Some(addr) => {
                let connection = |mut c: ConnectionConfig| {
                    c.port = addr.port();
                    c
                };
                let server = NameServerConfig::new(
                    addr.ip(),
                    true,
                    vec![
                        connection(ConnectionConfig::udp()),
                        connection(ConnectionConfig::tcp()),
                    ],
                );
                let mut options = ResolverOpts::default();
                options.timeout = Duration::from_secs(3);
                options.attempts = 1;
                MessageAuthenticator::new(ResolverConfig::from_name_servers(vec![server]), options)
            }
            None => MessageAuthenticator::new_system_conf(),
        }
        .map_err(|e| format!("the DNS resolver could not be set up: {e}"));
        if let Err(err) = &authenticator {
            tracing::warn!(error = %err, "email senders cannot be verified by DKIM and DMARC");
        }
        Verifier {
            authenticator,
            trusted_relay: trusted_relay.map(|r| r.to_ascii_lowercase()),
            hostname: hostname.to_string(),
        }
    }

    /// Checks `raw`, whose `From` is `from`, sent by `client` with envelope sender
    /// `envelope_from`.
    pub async fn check(
        &self,
        raw: &[u8],
        from: &str,
        envelope_from: &str,
        client: &Client,
    ) -> Verdict {
        let Some((_, domain)) = from.rsplit_once('@') else {
            return Verdict::Unverified("the From address has no domain".into());
        };
        let domain = domain.to_ascii_lowercase();
        let Some(message) = AuthenticatedMessage::parse(raw) else {
            return Verdict::Unverified("the message's header could not be read".into());
        };
        if let Some(relay) = &self.trusted_relay
            && let Some(results) = relay_results(&message.headers, relay)
        {
            return relay_verdict(&results, &domain);
        }
        let authenticator = match &self.authenticator {
            Ok(a) => a,
            Err(err) => return Verdict::Unverified(err.clone()),
        };
        let dkim = authenticator.verify_dkim(&message).await;
        let mail_from_domain = envelope_from
            .rsplit_once('@')
            .map_or(client.helo.as_str(), |(_, d)| d)
            .to_ascii_lowercase();
        let spf = match client.ip {
            Some(ip) if !envelope_from.is_empty() => {
                authenticator
                    .verify_spf(SpfParameters::verify_mail_from(
                        ip,
                        &client.helo,
                        &self.hostname,
                        envelope_from,
                    ))
                    .await
            }
            _ => SpfOutput::default(),
        };
        let dmarc = authenticator
            .verify_dmarc(mail_auth::dmarc::verify::DmarcParameters::new(
                &message,
                &dkim,
                &mail_from_domain,
                &spf,
            ))
            .await;
        match dmarc.result() {
            DmarcResult::Pass => Verdict::Verified("dmarc"),
            DmarcResult::None => {
                let signed_by_domain = dkim.iter().any(|o| {
                    o.result() == &DkimResult::Pass
                        && o.signature()
                            .is_some_and(|s| s.d.eq_ignore_ascii_case(&domain))
                });
                if signed_by_domain {
                    Verdict::Verified("dkim")
                } else {
                    Verdict::Unverified(format!(
                        "no DKIM signature of {domain} passed and {domain} publishes no DMARC record"
                    ))
                }
            }
            other => Verdict::Unverified(format!("DMARC for {domain}: {other:?}")),
        }
    }
}

/// The topmost `Authentication-Results` header of `relay` (the one it added; a relay that
/// checks removes any a sender forged with its name, RFC 8601 section 5), without its
/// authserv-id. `headers` are the message's, in order, as mail-auth read them.
fn relay_results(headers: &[(&[u8], &[u8])], relay: &str) -> Option<String> {
    headers.iter().find_map(|(name, value)| {
        if !name.eq_ignore_ascii_case(b"authentication-results") {
            return None;
        }
        // Folded lines are whitespace to what follows.
        let value = String::from_utf8_lossy(value).replace(['\r', '\n'], " ");
        let value = value.trim();
        let id_end = value.find([';', ' ', '\t']).unwrap_or(value.len());
        value[..id_end]
            .eq_ignore_ascii_case(relay)
            .then(|| value[id_end..].to_ascii_lowercase())
    })
}

/// What the relay's results say of `domain`: verified when `dmarc=pass` for the `From` domain.
fn relay_verdict(results: &str, domain: &str) -> Verdict {
    for result in results.split(';') {
        let mut words = result.split_whitespace();
        let Some(method) = words.next() else { continue };
        if method != "dmarc=pass" {
            continue;
        }
        let header_from = words.find_map(|w| w.strip_prefix("header.from="));
        return match header_from {
            Some(d) if d.trim_matches('"') != domain => Verdict::Unverified(format!(
                "the trusted relay passed DMARC for {d}, not for {domain}"
            )),
            _ => Verdict::Verified("relay"),
        };
    }
    Verdict::Unverified("the trusted relay's Authentication-Results has no dmarc=pass".into())
}

#[cfg(test)]
mod tests {
    use super::*;

    const RELAY: &str = "mx.example.org";

    #[test]
    fn the_topmost_results_of_the_trusted_relay_are_read_and_others_ignored() {
        let raw = b"Authentication-Results: mx.example.org;\r\n dkim=pass header.d=example.org;\r\n dmarc=pass header.from=example.org\r\nAuthentication-Results: mx.example.org; dmarc=fail\r\nFrom: a@example.org\r\n\r\nbody";
        let message = AuthenticatedMessage::parse(raw).unwrap();
        let results = relay_results(&message.headers, RELAY).unwrap();
        assert!(results.contains("dmarc=pass"), "{results}");
        assert_eq!(
            relay_verdict(&results, "example.org"),
            Verdict::Verified("relay")
        );
        let other =
            b"Authentication-Results: mx.evil.test; dmarc=pass\r\nFrom: a@example.org\r\n\r\n";
        let message = AuthenticatedMessage::parse(other).unwrap();
        assert_eq!(relay_results(&message.headers, RELAY), None);
    }

    #[test]
    fn a_relay_pass_for_another_domain_does_not_verify_the_from_domain() {
        let verdict = relay_verdict(" dmarc=pass header.from=evil.test", "example.org");
        assert!(!verdict.verified(), "{verdict:?}");
        assert!(!relay_verdict(" dkim=pass; dmarc=fail", "example.org").verified());
    }
}
