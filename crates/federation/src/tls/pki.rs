//! The throw-away development PKI: a federation CA and one leaf per node (EKU serverAuth +
//! clientAuth), made race-safely across processes ([`super::ensure_dev_pki`]).

use super::der::{cert_parts, common_name};
use super::*;

fn check_names(names: &[String]) -> Result<(), TlsError> {
    for n in names {
        let ok_char = |c: char| c.is_ascii_alphanumeric() || "-_.".contains(c);
        if n.is_empty() || n == "ca" || n.starts_with('.') || !n.chars().all(ok_char) {
            return Err(TlsError::BadName(n.clone()));
        }
    }
    Ok(())
}

fn cn(name: &str) -> DistinguishedName {
    let mut dn = DistinguishedName::new();
    dn.push(DnType::CommonName, name);
    dn
}

fn ca_params(common_name: &str) -> CertificateParams {
    let mut p = CertificateParams::default();
    p.distinguished_name = cn(common_name);
    p.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
    p.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
    p
}

/// The CA's signing half plus its subject name as DER (to check what we issue).
struct DevCa {
    issuer: Issuer<'static, KeyPair>,
    subject: Vec<u8>,
}

fn issue_leaf(dir: &Path, name: &str, hosts: &[String], ca: &DevCa) -> Result<(), TlsError> {
    let mut sans = hosts.to_vec();
    if !sans.iter().any(|h| h == name) {
        sans.push(name.to_string());
    }
    let mut p = CertificateParams::new(sans).map_err(gen_err(format!("SANs of {name}")))?;
    p.distinguished_name = cn(name);
    p.key_usages = vec![KeyUsagePurpose::DigitalSignature];
    p.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth, ExtendedKeyUsagePurpose::ClientAuth];
    p.use_authority_key_identifier_extension = true;
    let key = KeyPair::generate().map_err(gen_err(format!("key of {name}")))?;
    let cert = p.signed_by(&key, &ca.issuer).map_err(gen_err(format!("certificate of {name}")))?;
    let pem_path = dir.join(format!("{name}.pem"));
    if cert_parts(cert.der()).map(|c| c.issuer) != Some(&ca.subject[..]) {
        return Err(bad(
            &pem_path,
            "issuer name differs from ca.pem's subject: delete the PKI directory to regenerate it",
        ));
    }
    write_atomic(&dir.join(format!("{name}.key")), key.serialize_pem().as_bytes(), true)?;
    write_atomic(&pem_path, cert.pem().as_bytes(), false)
}

/// Creates a fresh throw-away federation CA in `dir` (`ca.pem`, `ca.key`) and, for each
/// name, `NAME.pem` + `NAME.key` signed by it: CN = NAME, SANs = `hosts` (IP addresses
/// become IP SANs) plus DNS NAME, EKU serverAuth + clientAuth. Overwrites existing files;
/// every file is written atomically, keys with mode 0600 on unix. Prefer [`ensure_dev_pki`].
pub fn generate_dev_pki(dir: &Path, names: &[String], hosts: &[String]) -> Result<(), TlsError> {
    check_names(names)?;
    fs::create_dir_all(dir).map_err(io_err("create directory", dir))?;
    let key = KeyPair::generate().map_err(gen_err("CA key"))?;
    let params = ca_params(DEV_CA_CN);
    let cert = params.self_signed(&key).map_err(gen_err("CA certificate"))?;
    let subject = cert_parts(cert.der()).map(|c| c.subject.to_vec()).unwrap_or_default();
    write_atomic(&dir.join("ca.key"), key.serialize_pem().as_bytes(), true)?;
    write_atomic(&dir.join("ca.pem"), cert.pem().as_bytes(), false)?;
    let ca = DevCa { issuer: Issuer::new(params, key), subject };
    names.iter().try_for_each(|n| issue_leaf(dir, n, hosts, &ca))
}

/// Makes sure `dir` holds a complete dev PKI with a leaf for every name; safe when
/// several processes (or threads) call it at once.
///
/// If `dir/.complete` exists and every `NAME.pem`/`NAME.key` is there, it does nothing.
/// Otherwise it takes the lock `dir/.lock` (an atomic `create_dir`, waiting at most
/// [`LOCK_TIMEOUT`] for another holder), and then either adds the missing leaves signed by
/// the existing CA, or, when the PKI was never completed, generates it all and writes
/// `.complete`. `hosts` only apply to leaves created by this call. Blocks: in async code
/// call it before starting the runtime or through `spawn_blocking`.
pub fn ensure_dev_pki(dir: &Path, names: &[String], hosts: &[String]) -> Result<(), TlsError> {
    check_names(names)?;
    let done = dir.join(".complete");
    let has = |n: &String| dir.join(format!("{n}.pem")).exists() && dir.join(format!("{n}.key")).exists();
    if done.exists() && names.iter().all(has) {
        return Ok(());
    }
    fs::create_dir_all(dir).map_err(io_err("create directory", dir))?;
    let _lock = DirLock::acquire(dir.join(".lock"), LOCK_TIMEOUT)?;
    if done.exists() {
        let missing: Vec<&String> = names.iter().filter(|n| !has(n)).collect();
        if !missing.is_empty() {
            let ca = load_ca(dir)?;
            missing.into_iter().try_for_each(|n| issue_leaf(dir, n, hosts, &ca))?;
        }
        return Ok(());
    }
    generate_dev_pki(dir, names, hosts)?;
    write_atomic(&done, b"dpcotrain dev PKI complete\n", false)
}

/// Loads the CA of an existing dev PKI so that new leaves chain to it.
fn load_ca(dir: &Path) -> Result<DevCa, TlsError> {
    let (ca_path, key_path) = (dir.join("ca.pem"), dir.join("ca.key"));
    let der = first_cert(&ca_path, &read(&ca_path)?)?;
    let key = KeyPair::from_pem(&read(&key_path)?)
        .map_err(|e| bad(&key_path, format!("not a PKCS#8 private key rcgen can use: {e}")))?;
    let parts = cert_parts(&der).ok_or_else(|| bad(&ca_path, "malformed X.509 certificate"))?;
    if parts.spki != key.subject_public_key_info() {
        return Err(bad(&key_path, format!("does not match {}", ca_path.display())));
    }
    let name = common_name(parts.subject).ok_or_else(|| bad(&ca_path, "subject has no CN"))?;
    let subject = parts.subject.to_vec();
    Ok(DevCa { issuer: Issuer::new(ca_params(&name), key), subject })
}

/// A directory used as a lock; removed on drop.
#[derive(Debug)]
pub(super) struct DirLock(PathBuf);

impl DirLock {
    pub(super) fn acquire(path: PathBuf, timeout: Duration) -> Result<Self, TlsError> {
        let start = Instant::now();
        loop {
            match fs::create_dir(&path) {
                Ok(()) => return Ok(DirLock(path)),
                Err(e) if e.kind() == ErrorKind::AlreadyExists => {
                    if start.elapsed() >= timeout {
                        return Err(TlsError::LockTimeout { path, waited: start.elapsed() });
                    }
                    std::thread::sleep(Duration::from_millis(25));
                }
                Err(e) => return Err(io_err("create lock directory", &path)(e)),
            }
        }
    }
}

impl Drop for DirLock {
    fn drop(&mut self) {
        let _ = fs::remove_dir(&self.0);
    }
}

/// [`crate::durable::write_atomic`] with this module's error; `secret` files get mode 0600.
fn write_atomic(path: &Path, data: &[u8], secret: bool) -> Result<(), TlsError> {
    let access = if secret { crate::durable::Access::Secret } else { crate::durable::Access::Public };
    crate::durable::write_atomic(path, data, access).map_err(io_err("write", path))
}
