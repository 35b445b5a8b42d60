//! TLS for the email transport: the SMTP listener's STARTTLS certificate (PEM files read at
//! start and again on each reload) and the IMAP client's connector (the system's trusted roots).

use std::sync::Arc;

use arc_swap::ArcSwap;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;
use tokio_rustls::{TlsAcceptor, TlsConnector};

use crate::config::ConfigErrors;
use crate::config::email::TlsSettings;

/// The SMTP listener's certificate: read from its files at start and again on each reload (a
/// certificate renewed in place, as certbot and cert-manager do, is offered to the next
/// STARTTLS without a restart).
#[derive(Debug)]
pub struct LiveCert {
    settings: TlsSettings,
    current: ArcSwap<CertifiedKey>,
    /// The files' bytes as last read, to tell a renewal from a reload that changed nothing.
    read: parking_lot::Mutex<Vec<u8>>,
}

impl LiveCert {
    /// Reads the certificate and key, or says what is wrong with the files.
    pub fn read(settings: &TlsSettings) -> Result<Arc<LiveCert>, ConfigErrors> {
        let (key, read) = certified(settings)?;
        Ok(Arc::new(LiveCert {
            settings: settings.clone(),
            current: ArcSwap::from_pointee(key),
            read: parking_lot::Mutex::new(read),
        }))
    }

    /// Reads the files again: `Ok(true)` when they changed and the new certificate is offered
    /// from now on; on a mistake the one in use stays.
    pub fn reload(&self) -> Result<bool, ConfigErrors> {
        let (key, read) = certified(&self.settings)?;
        let mut last = self.read.lock();
        if *last == read {
            return Ok(false);
        }
        self.current.store(Arc::new(key));
        *last = read;
        Ok(true)
    }

    /// The acceptor STARTTLS hands a connection to: it offers the certificate in use then.
    pub fn acceptor(self: &Arc<Self>) -> TlsAcceptor {
        let config = rustls::ServerConfig::builder()
            .with_no_client_auth()
            .with_cert_resolver(self.clone());
        TlsAcceptor::from(Arc::new(config))
    }
}

impl ResolvesServerCert for LiveCert {
    fn resolve(&self, _hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(self.current.load_full())
    }
}

/// The acceptor for `settings`' files as they are now (see [`LiveCert`] for one that reloads).
pub fn acceptor(settings: &TlsSettings) -> Result<TlsAcceptor, ConfigErrors> {
    Ok(LiveCert::read(settings)?.acceptor())
}

/// The certificate chain and key of `settings`, checked to go together, and the files' bytes.
fn certified(settings: &TlsSettings) -> Result<(CertifiedKey, Vec<u8>), ConfigErrors> {
    crate::tls::install();
    let refused = |path: &str, message: String| {
        let mut errors = ConfigErrors::default();
        errors.at(path, message);
        errors
    };
    let read = |path: &str, setting: &str| {
        std::fs::read(path).map_err(|e| refused(setting, format!("`{path}`: {e}")))
    };
    let cert_pem = read(&settings.cert, "email.smtp.tls.cert")?;
    let key_pem = read(&settings.key, "email.smtp.tls.key")?;
    let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(&cert_pem)
        .collect::<Result<_, _>>()
        .map_err(|e| refused("email.smtp.tls.cert", format!("`{}`: {e}", settings.cert)))?;
    if certs.is_empty() {
        return Err(refused(
            "email.smtp.tls.cert",
            format!("`{}` holds no certificate", settings.cert),
        ));
    }
    let key = PrivateKeyDer::from_pem_slice(&key_pem)
        .map_err(|e| refused("email.smtp.tls.key", format!("`{}`: {e}", settings.key)))?;
    let provider = rustls::crypto::CryptoProvider::get_default()
        .cloned()
        .unwrap_or_else(|| Arc::new(rustls::crypto::ring::default_provider()));
    let key = CertifiedKey::from_der(certs, key, &provider).map_err(|e| {
        refused(
            "email.smtp.tls",
            format!("the certificate and key do not go together: {e}"),
        )
    })?;
    let mut bytes = cert_pem;
    bytes.extend_from_slice(&key_pem);
    Ok((key, bytes))
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
