//! Mutual TLS between federation nodes' gRPC endpoints.
//!
//! Every node is both a gRPC server and a client, so each one holds a single leaf
//! certificate (EKU serverAuth + clientAuth) signed by the federation CA, and trusts
//! only that CA, both for the servers it calls and for the clients calling it.
//!
//! * [`ensure_dev_pki`] / [`generate_dev_pki`] make a throw-away development PKI in a
//!   directory: `ca.pem`, `ca.key` and `NAME.pem` + `NAME.key` per node.
//! * [`NodeTls`] points at one node's CA / cert / key files and builds tonic's
//!   [`ServerTlsConfig`] (client certificates *required*) and [`ClientTlsConfig`].
//! * [`peer_identity`] gives the CN of the verified client certificate of a request,
//!   so a handler can check that a message's `requester` is the party that authenticated.
//!
//! Certificates are parsed with a small DER walk (subject CN, issuer, public key) rather
//! than an X.509 crate: that is all this module needs and it adds no dependencies.

mod der;
mod pki;

use der::{cert_parts, common_name};
#[cfg(test)]
use pki::DirLock;
pub use pki::{ensure_dev_pki, generate_dev_pki};
use std::fs;
use std::io::ErrorKind;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose, PublicKeyData,
};
use rustls_pki_types::{CertificateDer, PrivateKeyDer, pem::PemObject};
use tonic::transport::{Certificate, ClientTlsConfig, Identity, ServerTlsConfig};

/// Common name of the CA made by [`generate_dev_pki`].
pub(crate) const DEV_CA_CN: &str = "dpcotrain dev federation CA";
/// How long [`ensure_dev_pki`] waits for another process that holds `dir/.lock`.
pub(crate) const LOCK_TIMEOUT: Duration = Duration::from_secs(10);

/// Everything that can go wrong; each message names the file involved and what to do.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    /// Reading, writing or creating a file or directory failed.
    #[error("cannot {action} {}: {source}", path.display())]
    Io {
        action: &'static str,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// A file exists but its content is unusable.
    #[error("{}: {problem}", path.display())]
    BadFile { path: PathBuf, problem: String },
    /// rcgen could not build a key or certificate.
    #[error("cannot generate {what}: {source}")]
    Generate {
        what: String,
        #[source]
        source: rcgen::Error,
    },
    /// Another process held the PKI lock for too long.
    #[error(
        "waited {waited:?} for {}: another process is creating the dev PKI, or one died while \
         doing so; if no node is starting, delete that directory and retry",
        path.display()
    )]
    LockTimeout { path: PathBuf, waited: Duration },
    /// A node name unusable as a file name / DNS SAN.
    #[error("invalid node name {0:?}: use ASCII letters, digits, '-', '_' or '.', not \"ca\"")]
    BadName(String),
}

fn io_err(action: &'static str, path: &Path) -> impl FnOnce(std::io::Error) -> TlsError {
    let path = path.to_path_buf();
    move |source| TlsError::Io { action, path, source }
}

fn bad(path: &Path, problem: impl Into<String>) -> TlsError {
    TlsError::BadFile { path: path.to_path_buf(), problem: problem.into() }
}

fn gen_err(what: impl Into<String>) -> impl FnOnce(rcgen::Error) -> TlsError {
    let what = what.into();
    move |source| TlsError::Generate { what, source }
}

fn read(path: &Path) -> Result<String, TlsError> {
    fs::read_to_string(path).map_err(io_err("read", path))
}

fn first_cert(path: &Path, pem: &str) -> Result<CertificateDer<'static>, TlsError> {
    let certs: Result<Vec<_>, _> = CertificateDer::pem_slice_iter(pem.as_bytes()).collect();
    let certs = certs.map_err(|e| bad(path, format!("bad PEM certificate: {e}")))?;
    certs.into_iter().next().ok_or_else(|| bad(path, "contains no \"BEGIN CERTIFICATE\" block"))
}

/// One node's TLS files: the federation CA, its own certificate and its private key.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NodeTls {
    /// CA certificate(s) (PEM) that peers' certificates must chain to.
    pub ca: PathBuf,
    /// This node's certificate (PEM), optionally followed by intermediates.
    pub cert: PathBuf,
    /// This node's private key (PEM).
    pub key: PathBuf,
}

/// The PEM text of a [`NodeTls`]'s files, checked by [`NodeTls::load`].
pub struct NodePem {
    /// CA certificate(s).
    pub ca: String,
    /// Node certificate chain.
    pub cert: String,
    /// Node private key.
    pub key: String,
}

impl std::fmt::Debug for NodePem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let (ca, cert) = (&self.ca, &self.cert);
        f.debug_struct("NodePem").field("ca", ca).field("cert", cert).field("key", &"<redacted>").finish()
    }
}

impl NodeTls {
    /// Paths of node `name` in a PKI made by [`ensure_dev_pki`].
    pub fn dev(dir: &Path, name: &str) -> Self {
        let file = |ext: &str| dir.join(format!("{name}.{ext}"));
        NodeTls { ca: dir.join("ca.pem"), cert: file("pem"), key: file("key") }
    }

    /// Reads the three files and checks that they hold PEM certificates / a private key,
    /// and (when rcgen can parse the key) that the key belongs to the certificate.
    pub fn load(&self) -> Result<NodePem, TlsError> {
        let (ca, cert, key) = (read(&self.ca)?, read(&self.cert)?, read(&self.key)?);
        first_cert(&self.ca, &ca)?;
        let leaf = first_cert(&self.cert, &cert)?;
        PrivateKeyDer::from_pem_slice(key.as_bytes())
            .map_err(|e| bad(&self.key, format!("no usable PEM private key: {e}")))?;
        if let (Ok(kp), Some(parts)) = (KeyPair::from_pem(&key), cert_parts(&leaf))
            && kp.subject_public_key_info() != parts.spki
        {
            return Err(bad(&self.key, format!("does not match certificate {}", self.cert.display())));
        }
        Ok(NodePem { ca, cert, key })
    }

    /// Server side: presents our certificate and *requires* a client certificate chaining
    /// to our CA (handshakes without one, or with another CA's, fail).
    pub fn server_config(&self) -> Result<ServerTlsConfig, TlsError> {
        let pem = self.load()?;
        // tonic builds the server's rustls config with the process-default CryptoProvider
        // (its client side names ring explicitly). rustls picks ring by itself while ring is
        // its only enabled backend, and panics if another crate also enables aws-lc-rs;
        // installing ring first avoids that. Fails harmlessly if one is already installed.
        let _ = rustls::crypto::ring::default_provider().install_default();
        Ok(ServerTlsConfig::new()
            .identity(Identity::from_pem(pem.cert, pem.key))
            .client_ca_root(Certificate::from_pem(pem.ca))
            .client_auth_optional(false))
    }

    /// Client side: trusts only our CA, expects the server certificate to be valid for
    /// `domain` (a DNS SAN, e.g. "localhost" or the peer's name) and presents our certificate.
    pub fn client_config(&self, domain: &str) -> Result<ClientTlsConfig, TlsError> {
        let pem = self.load()?;
        Ok(ClientTlsConfig::new()
            .domain_name(domain)
            .ca_certificate(Certificate::from_pem(pem.ca))
            .identity(Identity::from_pem(pem.cert, pem.key)))
    }
}

/// The CN of the client certificate that authenticated the connection carrying a request,
/// read from the request's extensions (already verified against the CA by the TLS layer);
/// `None` without TLS client auth.
pub(crate) fn peer_identity(extensions: &http::Extensions) -> Option<String> {
    use tonic::transport::server::{TcpConnectInfo, TlsConnectInfo};
    let certs = extensions.get::<TlsConnectInfo<TcpConnectInfo>>()?.peer_certs()?;
    common_name(cert_parts(certs.first()?)?.subject)
}

#[cfg(test)]
mod tests {
    use super::*;

    thread_local! {
        /// This test's own temporary directory, removed when the test's thread ends.
        static TEST_DIR: tempfile::TempDir = tempfile::tempdir().expect("temporary directory");
    }

    fn tmp(name: &str) -> PathBuf {
        TEST_DIR.with(|d| d.path().join(name))
    }

    #[test]
    fn missing_files_are_named() {
        let dir = tmp("missing");
        let err = NodeTls::dev(&dir, "A").load().unwrap_err().to_string();
        assert!(err.starts_with("cannot read ") && err.contains("ca.pem"), "{err}");
        generate_dev_pki(&dir, &["A".into()], &[]).unwrap();
        fs::remove_file(dir.join("A.key")).unwrap();
        let err = NodeTls::dev(&dir, "A").server_config().unwrap_err().to_string();
        assert!(err.contains("A.key") && err.contains("No such file"), "{err}");
    }

    #[test]
    fn wrong_contents_are_explained() {
        let dir = tmp("wrong");
        generate_dev_pki(&dir, &["A".into(), "B".into()], &[]).unwrap();
        let swapped = NodeTls { key: dir.join("B.key"), ..NodeTls::dev(&dir, "A") };
        let err = swapped.load().unwrap_err().to_string();
        assert!(err.contains("B.key: does not match certificate") && err.contains("A.pem"), "{err}");
        let key_as_cert = NodeTls { cert: dir.join("A.key"), ..NodeTls::dev(&dir, "A") };
        let err = key_as_cert.load().unwrap_err().to_string();
        assert!(err.contains("A.key: contains no \"BEGIN CERTIFICATE\""), "{err}");
        let err = generate_dev_pki(&dir, &["../x".into()], &[]).unwrap_err().to_string();
        assert!(err.starts_with("invalid node name \"../x\""), "{err}");
    }

    #[test]
    fn stale_lock_times_out_with_advice() {
        let dir = tmp("lock");
        fs::create_dir_all(dir.join(".lock")).unwrap();
        let err = DirLock::acquire(dir.join(".lock"), Duration::from_millis(100)).unwrap_err();
        assert!(err.to_string().contains(".lock: another process"), "{err}");
    }

    #[test]
    fn der_walk_reads_cn_and_keys_are_private() {
        let dir = tmp("der");
        generate_dev_pki(&dir, &["node-7".into()], &["127.0.0.1".into()]).unwrap();
        let ca = first_cert(&dir.join("ca.pem"), &read(&dir.join("ca.pem")).unwrap()).unwrap();
        let leaf = first_cert(&dir.join("x"), &read(&dir.join("node-7.pem")).unwrap()).unwrap();
        let (ca, leaf) = (cert_parts(&ca).unwrap(), cert_parts(&leaf).unwrap());
        assert_eq!(common_name(leaf.subject).as_deref(), Some("node-7"));
        assert_eq!(common_name(ca.subject).as_deref(), Some(DEV_CA_CN));
        assert_eq!(leaf.issuer, ca.subject);
        assert!(cert_parts(&[0x30, 0x82, 0xff]).is_none());
        #[cfg(unix)]
        for f in ["ca.key", "node-7.key"] {
            use std::os::unix::fs::PermissionsExt;
            let mode = fs::metadata(dir.join(f)).unwrap().permissions().mode() & 0o777;
            assert_eq!(mode, 0o600, "{f}");
        }
    }

    mod props {
        use super::*;
        use proptest::prelude::*;

        proptest! {
            #![proptest_config(ProptestConfig::with_cases(512))]

            /// The DER walk never panics on any bytes: it reads a certificate or gives up.
            #[test]
            fn der_walk_never_panics_on_any_bytes(bytes in prop::collection::vec(any::<u8>(), 0..300)) {
                if let Some(parts) = cert_parts(&bytes) {
                    let _ = common_name(parts.subject);
                    let _ = common_name(parts.issuer);
                }
                let _ = common_name(&bytes);
            }
        }

        proptest! {
            #![proptest_config(ProptestConfig::with_cases(24))]

            /// A certificate for any (DNS-safe) name: the walk reads that name back; a certificate
            /// with any byte changed or cut short reads without a panic.
            #[test]
            fn der_walk_reads_any_name_and_survives_corruption(
                name in "[a-z][a-z0-9-]{0,20}",
                flip in any::<prop::sample::Index>(),
                byte in any::<u8>(),
                cut in any::<prop::sample::Index>(),
            ) {
                let dir = tempfile::tempdir().unwrap();
                generate_dev_pki(dir.path(), std::slice::from_ref(&name), &["127.0.0.1".into()]).unwrap();
                let pem = dir.path().join(format!("{name}.pem"));
                let der = first_cert(&pem, &read(&pem).unwrap()).unwrap();
                prop_assert_eq!(common_name(cert_parts(&der).unwrap().subject), Some(name.clone()));
                let mut bad = der.to_vec();
                let i = flip.index(bad.len());
                bad[i] = byte;
                if let Some(parts) = cert_parts(&bad) {
                    let _ = common_name(parts.subject);
                }
                let _ = cert_parts(&der[..cut.index(der.len())]);
            }
        }
    }
}
