//! Mutual TLS (temporary stub while the dev PKI lands).
use std::path::{Path, PathBuf};
use tonic::Request;
use tonic::transport::{ClientTlsConfig, ServerTlsConfig};

#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct TlsError(String);

pub struct NodeTls {
    pub ca: PathBuf,
    pub cert: PathBuf,
    pub key: PathBuf,
}
impl NodeTls {
    pub fn server_config(&self) -> Result<ServerTlsConfig, TlsError> {
        Err(TlsError("stub".into()))
    }
    pub fn client_config(&self, _domain: &str) -> Result<ClientTlsConfig, TlsError> {
        Err(TlsError("stub".into()))
    }
}
pub fn ensure_dev_pki(_dir: &Path, _names: &[String], _hosts: &[String]) -> Result<(), TlsError> {
    Err(TlsError("stub".into()))
}

/// The common name of the caller's verified client certificate.
pub fn peer_identity<T>(_req: &Request<T>) -> Option<String> {
    None
}
