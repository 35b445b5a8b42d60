//! The principals the doors identify besides API keys: a chat user (`slack:<team>:<user>`), a
//! mail sender (`email:<address>`), a webhook route (`webhook:<path>`). They may reach what their
//! route lets them (the route decides the skill, or its `skills` list the named ones), read and
//! emit on no topic, and never administer: only keys hold `topics` or `admin`.

use crate::kernel::authority::{Grants, Principal};

/// A peer principal with the id `id`.
pub fn peer(id: &str) -> Principal {
    // No topic pattern: none. Grants without patterns cannot fail to compile.
    Principal::peer(id, Grants::new(None, Some(&[]), false).unwrap_or_default())
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
}
