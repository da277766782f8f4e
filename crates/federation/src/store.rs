//! Crash-safe storage of a node's [`PartyState`] (ledger, released answers, noise paths, model
//! history): one JSON file replaced atomically — write `state.json.tmp`, fsync it, rename it
//! over `state.json`, fsync the directory. A reader sees the old state or the new one, never a
//! torn file. The node saves **before** an answer leaves it, so a crash can never reset
//! privacy spend or cause a re-draw of noise for something already released.
//!
//! The directory is locked (an OS advisory lock on `LOCK`) for the node's lifetime, so two
//! processes cannot share one ledger by accident; the OS drops the lock when the process dies.

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
}

/// A node's state directory.
#[derive(Debug)]
pub struct StateStore {
    dir: PathBuf,
    _lock: File,
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
        Ok(StateStore { dir: dir.to_path_buf(), _lock: lock })
    }

    pub fn path(&self) -> PathBuf {
        self.dir.join("state.json")
    }

    /// The saved state, if any.
    pub fn load(&self) -> Result<Option<PartyState>, StoreError> {
        read_state(&self.path())
    }

    /// Replace the saved state atomically and durably.
    pub fn save(&self, state: &PartyState) -> Result<(), StoreError> {
        let path = self.path();
        let tmp = self.dir.join("state.json.tmp");
        let bytes = serde_json::to_vec(state).map_err(|e| io(&tmp, e))?;
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
    read_state(&dir.join("state.json"))
}

fn read_state(path: &Path) -> Result<Option<PartyState>, StoreError> {
    let text = match fs::read_to_string(path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(io(path, e)),
    };
    serde_json::from_str(&text)
        .map(Some)
        .map_err(|e| StoreError::Corrupt { path: path.to_path_buf(), message: e.to_string() })
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
}
