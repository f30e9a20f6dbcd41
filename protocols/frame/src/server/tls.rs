//! TLS on a frame port: a certificate chain and key (PEM files), TLS 1.2 and
//! 1.3 through rustls (the Celeborn 0.5.x client offers only TLS 1.2 by
//! default). Client certificates are not asked for.

use std::path::PathBuf;
use std::sync::Arc;

use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};
use serde::{Deserialize, Serialize};
pub use tokio_rustls::TlsAcceptor;

/// `cert` and `key`: PEM files (the chain, leaf first; a PKCS#8, PKCS#1 or
/// SEC1 key).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TlsFiles {
    pub cert: PathBuf,
    pub key: PathBuf,
}

#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    #[error("cannot read the certificate chain {path}: {source}")]
    Cert {
        path: PathBuf,
        source: rustls_pki_types::pem::Error,
    },
    #[error("{0} holds no certificate")]
    NoCert(PathBuf),
    #[error("cannot read the private key {path}: {source}")]
    Key {
        path: PathBuf,
        source: rustls_pki_types::pem::Error,
    },
    #[error("the certificate and key do not make a TLS server: {0}")]
    Config(#[from] rustls::Error),
}

impl TlsFiles {
    /// Loads the files into an acceptor (at start, so that a bad file fails
    /// the start rather than the first connection).
    pub fn acceptor(&self) -> Result<TlsAcceptor, TlsError> {
        let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(&self.cert)
            .and_then(|certs| certs.collect())
            .map_err(|source| TlsError::Cert {
                path: self.cert.clone(),
                source,
            })?;
        if certs.is_empty() {
            return Err(TlsError::NoCert(self.cert.clone()));
        }
        let key = PrivateKeyDer::from_pem_file(&self.key).map_err(|source| TlsError::Key {
            path: self.key.clone(),
            source,
        })?;
        // An explicit provider: the build links more than one.
        let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
        let config = rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()?
            .with_no_client_auth()
            .with_single_cert(certs, key)?;
        Ok(TlsAcceptor::from(Arc::new(config)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bad_files_fail_at_load_with_the_path() {
        let dir = std::env::temp_dir().join(format!("sy-tls-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let missing = TlsFiles {
            cert: dir.join("missing.pem"),
            key: dir.join("missing-key.pem"),
        };
        let e = missing.acceptor().err().expect("a missing file fails");
        assert!(e.to_string().contains("missing.pem"), "{e}");
        let empty = dir.join("empty.pem");
        std::fs::write(&empty, "not a pem\n").unwrap();
        let e = TlsFiles {
            cert: empty.clone(),
            key: empty,
        }
        .acceptor()
        .err()
        .expect("no certificate fails");
        assert!(matches!(e, TlsError::NoCert(_)), "{e}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
