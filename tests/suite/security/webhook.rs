//! Webhook schemes that sign no timestamp (GitHub, plain HMAC): a captured delivery sent again
//! under a new delivery id is acknowledged as a duplicate and does not run again.

use hmac::{Hmac, Mac};
use sha2::Sha256;
use skillgate::gateway::webhook::routes::topic_for;

use crate::support::common::runtime;
use crate::webhook::routes::{Seen, secret, start, wait_runs};

/// `(path, signature header, delivery id header)` of the schemes without a signed timestamp.
const UNTIMED: [(&str, &str, &str); 2] = [
    ("/hooks/gh", "x-hub-signature-256", "x-github-delivery"),
    ("/hooks/hmac", "x-signature", "x-webhook-id"),
];

#[test]
fn a_body_resent_under_a_new_delivery_id_within_the_replay_window_runs_once() {
    for (path, signature_header, id_header) in UNTIMED {
        replayed_once(path, signature_header, id_header);
    }
}

fn replayed_once(path: &'static str, signature_header: &'static str, id_header: &'static str) {
    runtime().block_on(async {
        let seen = Seen::default();
        let server = start(&seen, false).await;
        let body = r#"{"action":"opened","issue":{"number":7}}"#;
        let mut mac = Hmac::<Sha256>::new_from_slice(secret().as_bytes()).unwrap();
        mac.update(body.as_bytes());
        let signature = format!(
            "sha256={}",
            skillgate::digest::hex(&mac.finalize().into_bytes())
        );
        let send = |delivery: &'static str| {
            server
                .client
                .post(server.url(path))
                .header(signature_header, signature.clone())
                .header(id_header, delivery)
                .body(body)
                .send()
        };
        assert_eq!(send("gh-1").await.unwrap().status(), 202);
        wait_runs(&seen, 1).await;
        // The captured body and signature, with a delivery id of the attacker's choosing.
        let replayed = send("gh-2").await.unwrap();
        assert_eq!(replayed.status(), 200, "{path}");
        let answer: serde_json::Value = replayed.json().await.unwrap();
        assert_eq!(answer["duplicate"], true);
        // The sender's own retry of the first delivery is still the plain duplicate it was.
        assert_eq!(send("gh-1").await.unwrap().status(), 200);
        let queued = server.queued(&topic_for(path)).await;
        let ids: Vec<&serde_json::Value> = queued.iter().map(|d| &d["deliveryId"]).collect();
        assert_eq!(ids, [&serde_json::json!("gh-1")], "queued once: {path}");
        assert_eq!(
            seen.runs.lock().len(),
            1,
            "the replay did not run the skill"
        );
    });
}
