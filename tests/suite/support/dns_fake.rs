//! A DNS server over real UDP that answers TXT questions from a table the tests fill (DKIM keys,
//! DMARC records) and NXDOMAIN to anything else: what skillgate's `email.dns-resolver` points at
//! in the email tests. One per test process, on its own thread, so it outlives any test's runtime.
//! Also signs mail with DKIM (ed25519) for domains whose key it publishes.
#![allow(dead_code)]

use std::collections::HashMap;
use std::net::{SocketAddr, UdpSocket};
use std::sync::{Arc, OnceLock};

use mail_auth::common::crypto::Ed25519Key;
use mail_auth::common::headers::HeaderWriter;
use mail_auth::dkim::DkimSigner;
use mail_auth::hickory_resolver::proto::op::{Message, MessageType, ResponseCode};
use mail_auth::hickory_resolver::proto::rr::rdata::TXT;
use mail_auth::hickory_resolver::proto::rr::{RData, Record, RecordType};
use parking_lot::Mutex;

/// The selector the test keys are published under.
pub const SELECTOR: &str = "sg";

pub struct Dns {
    pub addr: SocketAddr,
    records: Arc<Mutex<HashMap<String, Vec<String>>>>,
    keys: Mutex<HashMap<String, Vec<u8>>>,
}

/// The process's DNS server.
pub fn dns() -> &'static Dns {
    static DNS: OnceLock<Dns> = OnceLock::new();
    DNS.get_or_init(|| {
        let socket = UdpSocket::bind("127.0.0.1:0").expect("a UDP port");
        let addr = socket.local_addr().unwrap();
        let records: Arc<Mutex<HashMap<String, Vec<String>>>> = Arc::default();
        let table = records.clone();
        std::thread::spawn(move || {
            let mut buf = [0u8; 4096];
            while let Ok((n, peer)) = socket.recv_from(&mut buf) {
                if let Some(answer) = answer(&buf[..n], &table.lock()) {
                    let _ = socket.send_to(&answer, peer);
                }
            }
        });
        Dns {
            addr,
            records,
            keys: Mutex::default(),
        }
    })
}

fn answer(query: &[u8], table: &HashMap<String, Vec<String>>) -> Option<Vec<u8>> {
    let query = Message::from_vec(query).ok()?;
    let mut response = Message::response(query.metadata.id, query.metadata.op_code);
    response.metadata.message_type = MessageType::Response;
    response.metadata.authoritative = true;
    response.metadata.recursion_desired = query.metadata.recursion_desired;
    response.metadata.recursion_available = true;
    let mut found = false;
    for q in &query.queries {
        response.add_query(q.clone());
        let name = q
            .name()
            .to_ascii()
            .trim_end_matches('.')
            .to_ascii_lowercase();
        if q.query_type() == RecordType::TXT
            && let Some(values) = table.get(&name)
        {
            for value in values {
                response.add_answer(Record::from_rdata(
                    q.name().clone(),
                    60,
                    RData::TXT(TXT::new(vec![value.clone()])),
                ));
                found = true;
            }
        }
    }
    if !found {
        response.metadata.response_code = ResponseCode::NXDomain;
    }
    response.to_vec().ok()
}

impl Dns {
    /// Publishes TXT `value` at `name`.
    pub fn publish(&self, name: &str, value: &str) {
        self.records
            .lock()
            .entry(name.to_ascii_lowercase())
            .or_default()
            .push(value.to_string());
    }

    /// Makes `domain` a mail domain that signs: an ed25519 DKIM key under [`SELECTOR`] and a
    /// DMARC record (`p=reject`). Once per domain.
    pub fn signing_domain(&self, domain: &str) {
        let mut keys = self.keys.lock();
        if keys.contains_key(domain) {
            return;
        }
        let pkcs8 = Ed25519Key::generate_pkcs8().expect("an ed25519 key");
        let key = Ed25519Key::from_pkcs8_der(&pkcs8).unwrap();
        use base64::Engine;
        let public = base64::engine::general_purpose::STANDARD.encode(key.public_key());
        self.publish(
            &format!("{SELECTOR}._domainkey.{domain}"),
            &format!("v=DKIM1; k=ed25519; p={public}"),
        );
        self.publish(&format!("_dmarc.{domain}"), "v=DMARC1; p=reject");
        keys.insert(domain.to_string(), pkcs8);
    }

    /// `raw` with a DKIM-Signature of `domain` (made a signing domain first).
    pub fn sign(&self, domain: &str, raw: &[u8]) -> Vec<u8> {
        self.signing_domain(domain);
        let pkcs8 = self.keys.lock()[domain].clone();
        let key = Ed25519Key::from_pkcs8_der(&pkcs8).unwrap();
        let signature = DkimSigner::from_key(key)
            .domain(domain)
            .selector(SELECTOR)
            .headers([
                "From",
                "To",
                "Subject",
                "Message-ID",
                "Reply-To",
                "References",
                "In-Reply-To",
            ])
            .sign(raw)
            .expect("the mail signs");
        let mut signed = signature.to_header().into_bytes();
        signed.extend_from_slice(raw);
        signed
    }
}
