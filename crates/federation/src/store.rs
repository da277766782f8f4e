//! Crash-safe storage of a node's [`PartyState`] (ledger, released answers, noise paths, model
//! history): one JSON file replaced atomically — write `state.json.tmp`, fsync it, rename it
//! over `state.json`, fsync the directory. A reader sees the old state or the new one, never a
//! torn file. The node saves **before** an answer leaves it, so a crash can never reset
//! privacy spend or cause a re-draw of noise for something already released.
//!
//! The directory is locked (an OS advisory lock on `LOCK`) for the node's lifetime, so two
//! processes cannot share one ledger by accident; the OS drops the lock when the process dies.
//!
//! **Integrity.** The file is `{"state": …, "mac": "…"}`: an HMAC-SHA256 of the state's exact
//! bytes under a node-local key (`ledger.key`, 32 random bytes, mode 0600, made with the first
//! state). A state edited outside the node — a release dropped, a ρ zeroed — no longer matches
//! its MAC and the node refuses to start, naming the file. (Someone who can also read the key
//! can recompute the MAC; the party's restore then still cross-checks each ledger entry against
//! the batches released, naming the entry.)

use dpcotrain_cotrain::state::PartyState;
use std::fs::{self, File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("state directory {path}: {message}")]
    Io { path: PathBuf, message: String },
    #[error("state file {path} is corrupt: {message}")]
    Corrupt { path: PathBuf, message: String },
    #[error("state directory {path} is in use by another running node")]
    Locked { path: PathBuf },
    #[error(
        "state file {path}: {message}; the ledger may have been edited outside the node, so the node refuses to start (restore the file from a backup, or delete the state directory to start the federation over)"
    )]
    Tampered { path: PathBuf, message: String },
}

/// What `state.json` holds: the state's exact bytes and their MAC.
#[derive(serde::Serialize, serde::Deserialize)]
struct Envelope<'a> {
    #[serde(borrow)]
    state: &'a serde_json::value::RawValue,
    mac: String,
}

const KEY_FILE: &str = "ledger.key";

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn unhex(s: &str) -> Option<Vec<u8>> {
    if !s.len().is_multiple_of(2) {
        return None;
    }
    (0..s.len()).step_by(2).map(|i| u8::from_str_radix(s.get(i..i + 2)?, 16).ok()).collect()
}

/// The node-local MAC key of `dir`; made (and stored 0600) when `create` and it is missing.
fn mac_key(dir: &Path, create: bool) -> Result<Option<ring::hmac::Key>, StoreError> {
    let path = dir.join(KEY_FILE);
    let text = match fs::read_to_string(&path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound && create => {
            let bytes: [u8; 32] = rand::random();
            let tmp = dir.join("ledger.key.tmp");
            let mut opts = OpenOptions::new();
            opts.write(true).create(true).truncate(true);
            #[cfg(unix)]
            std::os::unix::fs::OpenOptionsExt::mode(&mut opts, 0o600);
            let mut f = opts.open(&tmp).map_err(|e| io(&tmp, e))?;
            f.write_all(hex(&bytes).as_bytes()).map_err(|e| io(&tmp, e))?;
            f.sync_all().map_err(|e| io(&tmp, e))?;
            fs::rename(&tmp, &path).map_err(|e| io(&path, e))?;
            return Ok(Some(ring::hmac::Key::new(ring::hmac::HMAC_SHA256, &bytes)));
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(io(&path, e)),
    };
    let bytes = unhex(text.trim())
        .filter(|b| b.len() == 32)
        .ok_or_else(|| StoreError::Corrupt { path: path.clone(), message: "not 64 hex digits".into() })?;
    Ok(Some(ring::hmac::Key::new(ring::hmac::HMAC_SHA256, &bytes)))
}

/// A node's state directory.
#[derive(Debug)]
pub struct StateStore {
    dir: PathBuf,
    _lock: File,
    /// The MAC key, read (or made) by the first save and kept: a save is on every answer's path.
    key: std::sync::OnceLock<ring::hmac::Key>,
}

fn io(path: &Path, e: impl std::fmt::Display) -> StoreError {
    StoreError::Io { path: path.to_path_buf(), message: e.to_string() }
}

impl StateStore {
    /// Open (creating it if needed) and lock the state directory.
    pub fn open(dir: &Path) -> Result<Self, StoreError> {
        fs::create_dir_all(dir).map_err(|e| io(dir, e))?;
        let lock_path = dir.join("LOCK");
        let lock = OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&lock_path)
            .map_err(|e| io(&lock_path, e))?;
        match lock.try_lock() {
            Ok(()) => {}
            Err(fs::TryLockError::WouldBlock) => return Err(StoreError::Locked { path: dir.to_path_buf() }),
            Err(fs::TryLockError::Error(e)) => return Err(io(&lock_path, e)),
        }
        Ok(StateStore { dir: dir.to_path_buf(), _lock: lock, key: std::sync::OnceLock::new() })
    }

    pub fn path(&self) -> PathBuf {
        self.dir.join("state.json")
    }

    /// The saved state, if any, after checking its MAC.
    pub fn load(&self) -> Result<Option<PartyState>, StoreError> {
        read_state(&self.dir)
    }

    /// Replace the saved state atomically and durably.
    pub fn save(&self, state: &PartyState) -> Result<(), StoreError> {
        let path = self.path();
        let tmp = self.dir.join("state.json.tmp");
        let key = match self.key.get() {
            Some(k) => k,
            None => {
                let k = mac_key(&self.dir, true)?.ok_or_else(|| io(&self.dir, "no ledger key"))?;
                self.key.get_or_init(|| k)
            }
        };
        let raw = serde_json::value::to_raw_value(state).map_err(|e| io(&tmp, e))?;
        let mac = hex(ring::hmac::sign(key, raw.get().as_bytes()).as_ref());
        let bytes = serde_json::to_vec(&Envelope { state: &raw, mac }).map_err(|e| io(&tmp, e))?;
        let mut f = File::create(&tmp).map_err(|e| io(&tmp, e))?;
        f.write_all(&bytes).map_err(|e| io(&tmp, e))?;
        f.sync_all().map_err(|e| io(&tmp, e))?;
        drop(f);
        fs::rename(&tmp, &path).map_err(|e| io(&path, e))?;
        // Make the rename itself durable.
        File::open(&self.dir).and_then(|d| d.sync_all()).map_err(|e| io(&self.dir, e))?;
        Ok(())
    }
}

/// The state saved in `dir`, if any, read without taking the lock (for `node check`, which
/// may run beside a serving node). Creates nothing.
pub fn peek(dir: &Path) -> Result<Option<PartyState>, StoreError> {
    read_state(dir)
}

fn read_state(dir: &Path) -> Result<Option<PartyState>, StoreError> {
    let path = dir.join("state.json");
    let text = match fs::read_to_string(&path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(io(&path, e)),
    };
    let tampered = |message: String| StoreError::Tampered { path: path.clone(), message };
    let env: Envelope =
        serde_json::from_str(&text).map_err(|e| StoreError::Corrupt { path: path.clone(), message: e.to_string() })?;
    let key = mac_key(dir, false)?.ok_or_else(|| {
        tampered(format!("its key {} is missing, so it cannot be verified", dir.join(KEY_FILE).display()))
    })?;
    let mac = unhex(&env.mac).ok_or_else(|| tampered("its MAC is not hex".into()))?;
    ring::hmac::verify(&key, env.state.get().as_bytes(), &mac)
        .map_err(|_| tampered("its content does not match its MAC".into()))?;
    serde_json::from_str(env.state.get())
        .map(Some)
        .map_err(|e| StoreError::Corrupt { path: path.clone(), message: e.to_string() })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn state(party: &str) -> PartyState {
        PartyState {
            format: dpcotrain_cotrain::state::STATE_FORMAT,
            party: party.into(),
            model_version: 3,
            requesters: Default::default(),
            frozen: None,
            answers: Default::default(),
            turns: vec![],
        }
    }

    fn tmpdir(tag: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("dpcotrain-store-{tag}-{}", std::process::id()));
        let _ = fs::remove_dir_all(&d);
        d
    }

    #[test]
    fn saves_loads_and_locks() {
        let d = tmpdir("basic");
        let s = StateStore::open(&d).unwrap();
        assert!(s.load().unwrap().is_none());
        s.save(&state("A")).unwrap();
        assert_eq!(s.load().unwrap(), Some(state("A")));
        assert!(!d.join("state.json.tmp").exists());
        // A second node on the same directory is refused while the first lives.
        assert!(matches!(StateStore::open(&d), Err(StoreError::Locked { .. })));
        drop(s);
        let s2 = StateStore::open(&d).unwrap();
        assert_eq!(s2.load().unwrap(), Some(state("A")));
        // A torn temp file left by a crash does not matter: state.json is intact.
        fs::write(d.join("state.json.tmp"), b"{\"format\": 1, \"par").unwrap();
        assert_eq!(s2.load().unwrap(), Some(state("A")));
        // A corrupt state file is reported with its path, not silently replaced.
        fs::write(d.join("state.json"), b"not json").unwrap();
        let e = s2.load().unwrap_err().to_string();
        assert!(e.contains("state.json") && e.contains("corrupt"), "{e}");
        let _ = fs::remove_dir_all(&d);
    }

    /// A state edited outside the node fails its MAC; so does a state whose key is gone. The
    /// key is private to the node's user.
    #[test]
    fn an_edited_state_is_refused() {
        let d = tmpdir("mac");
        let s = StateStore::open(&d).unwrap();
        s.save(&state("A")).unwrap();
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = fs::metadata(d.join(KEY_FILE)).unwrap().permissions().mode();
            assert_eq!(mode & 0o077, 0, "ledger.key readable by others: {mode:o}");
        }
        let text = fs::read_to_string(d.join("state.json")).unwrap();
        assert!(text.contains("\"model_version\":3"));
        // A semantic edit that keeps the file valid JSON.
        fs::write(d.join("state.json"), text.replace("\"model_version\":3", "\"model_version\":4")).unwrap();
        let e = s.load().unwrap_err();
        assert!(matches!(e, StoreError::Tampered { .. }), "{e}");
        assert!(e.to_string().contains("does not match its MAC") && e.to_string().contains("state.json"), "{e}");
        assert!(peek(&d).is_err(), "node check sees it too");
        // Restored bytes verify again; without the key nothing can be verified.
        fs::write(d.join("state.json"), &text).unwrap();
        assert_eq!(s.load().unwrap(), Some(state("A")));
        fs::remove_file(d.join(KEY_FILE)).unwrap();
        let e = s.load().unwrap_err().to_string();
        assert!(e.contains("ledger.key is missing"), "{e}");
        let _ = fs::remove_dir_all(&d);
    }
}
