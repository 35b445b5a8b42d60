//! TLS for the email transport: the SMTP listener's STARTTLS certificate (PEM files read at
//! start) and the IMAP client's connector (the system's trusted roots).

use std::sync::Arc;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use tokio_rustls::{TlsAcceptor, TlsConnector};

use crate::config::ConfigErrors;
use crate::config::email::TlsSettings;

/// The acceptor STARTTLS hands a connection to, or what is wrong with the files.
pub fn acceptor(settings: &TlsSettings) -> Result<TlsAcceptor, ConfigErrors> {
    crate::tls::install();
    let refused = |path: &str, message: String| {
        let mut errors = ConfigErrors::default();
        errors.at(path, message);
        errors
    };
    let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(&settings.cert)
        .and_then(|certs| certs.collect::<Result<_, _>>())
        .map_err(|e| refused("email.smtp.tls.cert", format!("`{}`: {e}", settings.cert)))?;
    if certs.is_empty() {
        return Err(refused(
            "email.smtp.tls.cert",
            format!("`{}` holds no certificate", settings.cert),
        ));
    }
    let key = PrivateKeyDer::from_pem_file(&settings.key)
        .map_err(|e| refused("email.smtp.tls.key", format!("`{}`: {e}", settings.key)))?;
    let config = rustls::ServerConfig::builder()
        .with_no_client_auth()
        .with_single_cert(certs, key)
        .map_err(|e| {
            refused(
                "email.smtp.tls",
                format!("the certificate and key do not go together: {e}"),
            )
        })?;
    Ok(TlsAcceptor::from(Arc::new(config)))
}

/// A client connector trusting the system's roots and, when given, the certificates of one
/// more PEM file (a private CA).
pub fn connector(extra_roots: Option<&str>) -> Result<TlsConnector, String> {
    crate::tls::install();
    let mut roots = rustls::RootCertStore::empty();
    let native = rustls_native_certs::load_native_certs();
    roots.add_parsable_certificates(native.certs);
    if let Some(path) = extra_roots {
        let certs = CertificateDer::pem_file_iter(path)
            .and_then(|certs| certs.collect::<Result<Vec<_>, _>>())
            .map_err(|e| format!("`{path}`: {e}"))?;
        for cert in certs {
            roots
                .add(cert)
                .map_err(|e| format!("`{path}`: not a CA certificate: {e}"))?;
        }
    }
    let config = rustls::ClientConfig::builder()
        .with_root_certificates(roots)
        .with_no_client_auth();
    Ok(TlsConnector::from(Arc::new(config)))
}

/// `host` as the name a certificate is checked against.
pub fn server_name(host: &str) -> Result<ServerName<'static>, String> {
    ServerName::try_from(host.to_string()).map_err(|e| format!("`{host}`: {e}"))
}
