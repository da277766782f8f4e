//! Durable file replacement, the one way the project writes a file that must never be seen
//! half-written: the node's state snapshot and ledger key, certificates and keys, tokens, and
//! the experiment reports.

use std::fs;
use std::io::Write;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};

/// Who may read the file (unix permissions; ignored elsewhere).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Access {
    /// 0644.
    Public,
    /// 0600: keys, tokens, the ledger's MAC key.
    Secret,
}

/// A report file (public), written as [`write_atomic`] writes; the error names the file.
pub fn write_report(path: &Path, text: &str) -> std::io::Result<()> {
    write_atomic(path, text.as_bytes(), Access::Public)
        .map_err(|e| std::io::Error::new(e.kind(), format!("cannot write {}: {e}", path.display())))
}

/// Write `data` to a new temporary file beside `path` (a name no other writer uses), fsync it,
/// rename it over `path` and fsync the directory: a reader sees the old content or the new,
/// never a torn file, and the new content survives a crash once this returns. On failure the
/// temporary file is removed.
pub fn write_atomic(path: &Path, data: &[u8], access: Access) -> std::io::Result<()> {
    static SEQ: AtomicU64 = AtomicU64::new(0);
    let dir = path.parent().filter(|d| !d.as_os_str().is_empty()).unwrap_or(Path::new("."));
    let base = path.file_name().map(|f| f.to_string_lossy().into_owned()).unwrap_or_default();
    let tmp = dir.join(format!(".{base}.{}.{}.tmp", std::process::id(), SEQ.fetch_add(1, Ordering::Relaxed)));
    let result = (|| {
        let mut opts = fs::OpenOptions::new();
        opts.write(true).create_new(true);
        #[cfg(unix)]
        std::os::unix::fs::OpenOptionsExt::mode(&mut opts, if access == Access::Secret { 0o600 } else { 0o644 });
        let mut file = opts.open(&tmp)?;
        file.write_all(data)?;
        file.sync_all()?;
        fs::rename(&tmp, path)?;
        sync_dir(dir)
    })();
    if result.is_err() {
        let _ = fs::remove_file(&tmp);
    }
    result
}

/// Whether `name` is a temporary file of [`write_atomic`] (`.<name>.<pid>.<n>.tmp`): one a
/// crash can leave behind, and the owner of the directory may remove once no writer is live.
pub(crate) fn is_temporary(name: &str) -> bool {
    let Some(inner) = name.strip_prefix('.').and_then(|n| n.strip_suffix(".tmp")) else { return false };
    let mut parts = inner.rsplitn(3, '.');
    let digits = |p: Option<&str>| p.is_some_and(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()));
    digits(parts.next()) && digits(parts.next()) && parts.next().is_some_and(|base| !base.is_empty())
}

/// Make the directory's entries (a rename, a new or removed file) durable (unix; a no-op
/// elsewhere, where directories cannot be opened for syncing).
pub(crate) fn sync_dir(dir: &Path) -> std::io::Result<()> {
    #[cfg(unix)]
    fs::File::open(dir)?.sync_all()?;
    #[cfg(not(unix))]
    let _ = dir;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replaces_whole_files_and_leaves_no_temporaries() {
        let tmp = tempfile::tempdir().unwrap();
        let d = tmp.path();
        let p = d.join("f.json");
        write_atomic(&p, b"one", Access::Public).unwrap();
        write_atomic(&p, b"two", Access::Secret).unwrap();
        assert_eq!(fs::read(&p).unwrap(), b"two");
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            assert_eq!(fs::metadata(&p).unwrap().permissions().mode() & 0o777, 0o600);
        }
        let names: Vec<String> =
            fs::read_dir(d).unwrap().map(|e| e.unwrap().file_name().into_string().unwrap()).collect();
        assert_eq!(names, vec!["f.json".to_string()]);
        assert!(is_temporary(".state.json.4242.7.tmp") && is_temporary(".ledger.key.1.0.tmp"));
        for not in ["state.json", ".state.json.tmp", "state.json.1.2.tmp", ".state.json.x.2.tmp", "..1.2.tmp"] {
            assert!(!is_temporary(not), "{not}");
        }
        // A failed write (no such directory) reports the error and leaves nothing behind.
        assert!(write_atomic(&d.join("missing/f.json"), b"x", Access::Public).is_err());
    }
}
