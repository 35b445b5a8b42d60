//! The principals the doors identify besides API keys: a chat user (`slack:<team>:<user>`), a
//! mail sender (`email:<address>`), a webhook route (`webhook:<path>`). They may reach what their
//! route lets them (the route decides the skill, or its `skills` list the named ones), read and
//! emit on no topic, and never administer: only keys hold `topics` or `admin`.

use crate::kernel::authority::{Grants, Keys, Principal};

/// A peer principal with the id `id`.
pub fn peer(id: &str) -> Principal {
    // No topic pattern: none. Grants without patterns cannot fail to compile.
    Principal::peer(id, Grants::new(None, Some(&[]), false).unwrap_or_default())
}

/// The principal a retry of a run recorded for `id` runs for, as it is now: a key's current
/// grants (refused once it is revoked), the local caller, the project, or a peer of a door.
pub fn recorded(id: &str, keys: Option<&Keys>) -> Result<Principal, String> {
    match id {
        "project" => Ok(Principal::project()),
        "local" => Ok(Principal::local()),
        "" => Err("the run's principal is not recorded".into()),
        _ => match id.strip_prefix("key:") {
            Some(name) => keys
                .and_then(|keys| keys.0.read().as_ref().and_then(|dir| dir.lookup(name)))
                .ok_or_else(|| format!("the key `{name}` it ran for is revoked (or keys are off)")),
            None => Ok(peer(id)),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_peer_reads_no_topic_and_does_not_administer() {
        let p = peer("slack:T1:U1");
        assert_eq!(p.id(), "slack:T1:U1");
        assert!(!p.may_use_topic("orders") && !p.admin());
        assert!(p.may_invoke("hello"));
    }

    #[test]
    fn a_key_principal_is_found_again_only_while_the_key_exists() {
        assert!(recorded("key:ops", None).unwrap_err().contains("revoked"));
        assert_eq!(recorded("local", None).unwrap(), Principal::local());
        let peer = recorded("email:ada@example.com", None).unwrap();
        assert!(!peer.admin() && peer.id() == "email:ada@example.com");
    }
}
