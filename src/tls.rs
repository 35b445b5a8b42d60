//! TLS for outbound connections (Slack, model vendors): rustls with the ring provider,
//! installed once for the process.

/// Makes ring the process's rustls provider (idempotent).
pub fn install() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        let _ = rustls::crypto::ring::default_provider().install_default();
    });
}
