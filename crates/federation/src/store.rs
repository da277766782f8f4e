//! Crash-safe storage of a node's [`PartyState`] (ledger, released answers, noise paths, model
//! history) as a snapshot and an append-only log:
//!
//! - `state.json`, the snapshot, replaced atomically ([`crate::durable::write_atomic`]: a
//!   temporary file, fsync, rename over `state.json`, fsync the directory), so a reader sees
//!   the old snapshot or the new one, never a torn file;
//! - `state.log`, one line per save after the snapshot: the [`StateDelta`] from the previous
//!   state, appended and fsynced. A save costs the size of what changed, not of the whole state
//!   (an answer with a 500 × 500 covariance used to rewrite every earlier answer too).
//!
//! When the log outgrows the snapshot (and 1 MiB), the next save writes a new snapshot and
//! starts a new log (compaction); the first save after opening does so too, so a log left by a
//! crash is folded in once. The node saves **before** an answer leaves it, so a crash can never
//! reset privacy spend or cause a re-draw of noise for something already released. A crash in
//! the middle of an append leaves a last line without its newline: that save never returned,
//! nothing was released after it, and loading ignores it.
//!
//! The directory is locked (an OS advisory lock on `LOCK`) for the node's lifetime, so two
//! processes cannot share one ledger by accident; the OS drops the lock when the process dies.
//!
//! **Integrity.** The snapshot is `{"state": …, "seq": k, "mac": "…"}`, the MAC an
//! HMAC-SHA256 under a node-local key (`ledger.key`, 32 random bytes, mode 0600, made with the
//! first state) of the state's exact bytes (and, for k > 0, of k). Each log line is
//! `{"seq": k, "delta": …, "mac": "…"}` with the MAC over the previous line's MAC (the
//! snapshot's for the first), k and the delta's bytes: a hash chain. A state edited outside the
//! node — a release dropped, a ρ zeroed, a log line removed, reordered or changed — no longer
//! matches and the node refuses to start, naming the file and line. (Someone who can also read
//! the key can recompute the MACs; the party's restore then still cross-checks each ledger entry
//! against the batches released, naming the entry. Cutting whole lines off the end of the log
//! rolls the node back to an earlier state, as restoring an old backup of the files would: a
//! MAC cannot tell an old state from a current one.)

use crate::durable::{Access, sync_dir, write_atomic};
use dpcotrain_cotrain::state::{PartyState, StateDelta};
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

/// What `state.json` holds: the state's exact bytes, the last log entry folded in, and the MAC.
#[derive(serde::Serialize, serde::Deserialize)]
struct Envelope<'a> {
    #[serde(borrow)]
    state: &'a serde_json::value::RawValue,
    #[serde(default, skip_serializing_if = "is_zero")]
    seq: u64,
    mac: String,
}

fn is_zero(v: &u64) -> bool {
    *v == 0
}

/// One line of `state.log`.
#[derive(serde::Serialize, serde::Deserialize)]
struct LogLine<'a> {
    seq: u64,
    #[serde(borrow)]
    delta: &'a serde_json::value::RawValue,
    mac: String,
}

const LOG_FILE: &str = "state.log";
/// The log is compacted into a new snapshot once it is larger than the snapshot and this.
const COMPACT_MIN_BYTES: u64 = 1 << 20;

fn snapshot_mac(key: &ring::hmac::Key, state: &[u8], seq: u64) -> String {
    let mut ctx = ring::hmac::Context::with_key(key);
    if seq > 0 {
        ctx.update(format!("seq {seq}\n").as_bytes());
    }
    ctx.update(state);
    hex(ctx.sign().as_ref())
}

fn line_mac(key: &ring::hmac::Key, prev: &str, seq: u64, delta: &[u8]) -> String {
    let mut ctx = ring::hmac::Context::with_key(key);
    ctx.update(format!("{prev}\n{seq}\n").as_bytes());
    ctx.update(delta);
    hex(ctx.sign().as_ref())
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
            write_atomic(&path, hex(&bytes).as_bytes(), Access::Secret).map_err(|e| io(&path, e))?;
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
    /// What is on disk: the state, the chain's last MAC and seq, and the sizes that decide
    /// compaction. `None` until the first save (which writes a snapshot).
    disk: std::sync::Mutex<Option<OnDisk>>,
}

#[derive(Debug)]
struct OnDisk {
    state: PartyState,
    mac: String,
    seq: u64,
    snapshot_bytes: u64,
    log_bytes: u64,
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
        Ok(StateStore {
            dir: dir.to_path_buf(),
            _lock: lock,
            key: std::sync::OnceLock::new(),
            disk: std::sync::Mutex::new(None),
        })
    }

    pub fn path(&self) -> PathBuf {
        self.dir.join("state.json")
    }

    /// The saved state, if any, after checking its MAC.
    pub fn load(&self) -> Result<Option<PartyState>, StoreError> {
        read_state(&self.dir)
    }

    fn key(&self) -> Result<&ring::hmac::Key, StoreError> {
        Ok(match self.key.get() {
            Some(k) => k,
            None => {
                let k = mac_key(&self.dir, true)?.ok_or_else(|| io(&self.dir, "no ledger key"))?;
                self.key.get_or_init(|| k)
            }
        })
    }

    /// Save `state` durably: one appended log line with what changed since the last save, or a
    /// new snapshot (the first save after opening, a state that is not a delta of the last one,
    /// or a log grown past the snapshot).
    pub fn save(&self, state: &PartyState) -> Result<(), StoreError> {
        let mut disk = self.disk.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(d) = disk.as_mut()
            && let Some(delta) = d.state.delta_to(state)
        {
            if delta.is_empty(&d.state) {
                return Ok(());
            }
            if d.log_bytes <= d.snapshot_bytes.max(COMPACT_MIN_BYTES) {
                return self.append(d, &delta, state);
            }
        }
        let last_seq = match disk.as_ref() {
            Some(d) => d.seq,
            None => self.seq_on_disk(),
        };
        *disk = Some(self.snapshot(state, last_seq)?);
        Ok(())
    }

    /// The largest entry number in the files as found (the snapshot's, or a log line's): a new
    /// snapshot numbers itself at least this, so log lines it folds in read as folded in.
    fn seq_on_disk(&self) -> u64 {
        let snap = fs::read_to_string(self.path())
            .ok()
            .and_then(|t| serde_json::from_str::<Envelope>(&t).ok().map(|e| e.seq))
            .unwrap_or(0);
        let log = fs::read(self.dir.join(LOG_FILE)).unwrap_or_default();
        log.split(|b| *b == b'\n')
            .filter_map(|l| serde_json::from_slice::<LogLine>(l).ok().map(|l| l.seq))
            .fold(snap, u64::max)
    }

    /// Append one delta to the log (fsynced).
    fn append(&self, d: &mut OnDisk, delta: &StateDelta, state: &PartyState) -> Result<(), StoreError> {
        let path = self.dir.join(LOG_FILE);
        let key = self.key()?;
        let seq = d.seq + 1;
        let raw = serde_json::value::to_raw_value(delta).map_err(|e| io(&path, e))?;
        let mac = line_mac(key, &d.mac, seq, raw.get().as_bytes());
        let mut line = serde_json::to_vec(&LogLine { seq, delta: &raw, mac: mac.clone() }).map_err(|e| io(&path, e))?;
        line.push(b'\n');
        let new_file = !path.exists();
        let mut f = OpenOptions::new().create(true).append(true).open(&path).map_err(|e| io(&path, e))?;
        f.write_all(&line).map_err(|e| io(&path, e))?;
        f.sync_all().map_err(|e| io(&path, e))?;
        if new_file {
            // Make the new file's directory entry durable.
            sync_dir(&self.dir).map_err(|e| io(&self.dir, e))?;
        }
        d.state.apply(delta).map_err(|e| io(&path, e))?;
        debug_assert!(d.state == *state, "a state delta did not reproduce the saved state");
        d.mac = mac;
        d.seq = seq;
        d.log_bytes += line.len() as u64;
        Ok(())
    }

    /// Write `state` as the new snapshot (atomically, durably), then remove the log it folds in.
    fn snapshot(&self, state: &PartyState, last_seq: u64) -> Result<OnDisk, StoreError> {
        let path = self.path();
        let key = self.key()?;
        // The snapshot's seq continues the chain's numbering, so a log line left by a crash
        // between the rename and the log's removal is recognised as already folded in.
        let seq = last_seq;
        let raw = serde_json::value::to_raw_value(state).map_err(|e| io(&path, e))?;
        let mac = snapshot_mac(key, raw.get().as_bytes(), seq);
        let bytes = serde_json::to_vec(&Envelope { state: &raw, seq, mac: mac.clone() }).map_err(|e| io(&path, e))?;
        write_atomic(&path, &bytes, Access::Public).map_err(|e| io(&path, e))?;
        let log = self.dir.join(LOG_FILE);
        match fs::remove_file(&log) {
            Ok(()) => sync_dir(&self.dir).map_err(|e| io(&self.dir, e))?,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(io(&log, e)),
        }
        Ok(OnDisk { state: state.clone(), mac, seq, snapshot_bytes: bytes.len() as u64, log_bytes: 0 })
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
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            if dir.join(LOG_FILE).exists() {
                return Err(StoreError::Tampered {
                    path: dir.join(LOG_FILE),
                    message: "a state log without its snapshot state.json".into(),
                });
            }
            return Ok(None);
        }
        Err(e) => return Err(io(&path, e)),
    };
    let tampered = |message: String| StoreError::Tampered { path: path.clone(), message };
    let env: Envelope =
        serde_json::from_str(&text).map_err(|e| StoreError::Corrupt { path: path.clone(), message: e.to_string() })?;
    let key = mac_key(dir, false)?.ok_or_else(|| {
        tampered(format!("its key {} is missing, so it cannot be verified", dir.join(KEY_FILE).display()))
    })?;
    if snapshot_mac(&key, env.state.get().as_bytes(), env.seq) != env.mac {
        return Err(tampered("its content does not match its MAC".into()));
    }
    let mut state: PartyState = serde_json::from_str(env.state.get())
        .map_err(|e| StoreError::Corrupt { path: path.clone(), message: e.to_string() })?;
    // The log: every complete line after the snapshot's seq, chained from the snapshot's MAC.
    let log = dir.join(LOG_FILE);
    let bytes = match fs::read(&log) {
        Ok(b) => b,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Some(state)),
        Err(e) => return Err(io(&log, e)),
    };
    let tampered = |line: usize, message: String| StoreError::Tampered {
        path: log.clone(),
        message: format!("line {line}: {message}"),
    };
    let (mut prev, mut seq) = (env.mac.clone(), env.seq);
    let complete = bytes.iter().rposition(|b| *b == b'\n').map_or(0, |i| i + 1);
    // Bytes after the last newline are a torn append: that save never returned, nothing was
    // released after it.
    for (n, raw_line) in bytes[..complete].split(|b| *b == b'\n').enumerate().take_while(|(_, l)| !l.is_empty()) {
        let line_no = n + 1;
        let text = std::str::from_utf8(raw_line).map_err(|_| tampered(line_no, "not UTF-8".into()))?;
        let l: LogLine = serde_json::from_str(text).map_err(|e| tampered(line_no, e.to_string()))?;
        if l.seq <= env.seq {
            // Folded into the snapshot already (a crash between the snapshot and the log's removal).
            continue;
        }
        if l.seq != seq + 1 {
            return Err(tampered(line_no, format!("entry {} follows entry {seq}: entries are missing", l.seq)));
        }
        if line_mac(&key, &prev, l.seq, l.delta.get().as_bytes()) != l.mac {
            return Err(tampered(line_no, "does not match its MAC (chained from the entry before it)".into()));
        }
        let delta: StateDelta = serde_json::from_str(l.delta.get()).map_err(|e| tampered(line_no, e.to_string()))?;
        state.apply(&delta).map_err(|e| tampered(line_no, e.to_string()))?;
        prev = l.mac;
        seq = l.seq;
    }
    Ok(Some(state))
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
            theta_selection: None,
            answers: Default::default(),
            answer_order: vec![],
            turns: vec![],
        }
    }

    thread_local! {
        /// This test's own temporary directory, removed when the test's thread ends.
        static TEST_DIR: tempfile::TempDir = tempfile::tempdir().expect("temporary directory");
    }

    fn tmpdir(tag: &str) -> PathBuf {
        TEST_DIR.with(|d| d.path().join(tag))
    }

    #[test]
    fn saves_loads_and_locks() {
        let d = tmpdir("basic");
        let s = StateStore::open(&d).unwrap();
        assert!(s.load().unwrap().is_none());
        s.save(&state("A")).unwrap();
        assert_eq!(s.load().unwrap(), Some(state("A")));
        let temps =
            fs::read_dir(&d).unwrap().filter(|e| e.as_ref().unwrap().file_name().to_string_lossy().ends_with(".tmp"));
        assert_eq!(temps.count(), 0, "no temporary file left");
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

    /// `state("A")` with `k` answers, in order: answer i has a q × q covariance, q = `q` for
    /// i ≥ `big_from` and 40 before (answers are never changed once given).
    fn with_answers(k: usize, q: usize) -> PartyState {
        sized(k, q, 0)
    }

    fn sized(k: usize, big: usize, big_from: usize) -> PartyState {
        let mut s = state("A");
        for i in 0..k {
            let q = if i >= big_from { big } else { 40 };
            let id = format!("B\u{1f}r{i}");
            let a = dpcotrain_cotrain::answer::Answer {
                responder: "A".into(),
                indices: vec![i],
                mean: vec![i as f64 * 0.5],
                var: None,
                answered: (0..q).collect(),
                cov: Some(nalgebra::DMatrix::from_fn(q, q, |r, c| (r + c + i) as f64 * 1e-3)),
                prior_cov: None,
                model_version: 3,
                charge: None,
                budget_rho_left: None,
                noise_var: None,
            };
            s.answers.insert(id.clone(), a);
            s.answer_order.push(id);
        }
        s
    }

    /// A store in a fresh directory holding a snapshot of `with_answers(0, q)` and a log of
    /// `k` appended saves (`with_answers(1..=k, q)`).
    fn store_with_log(tag: &str, k: usize, q: usize) -> (PathBuf, StateStore) {
        let d = tmpdir(tag);
        let s = StateStore::open(&d).unwrap();
        for i in 0..=k {
            s.save(&with_answers(i, q)).unwrap();
        }
        (d, s)
    }

    /// Saves after the first append one line each (the snapshot is not rewritten); every state
    /// loads back exactly; a big log is compacted into a new snapshot.
    #[test]
    fn appends_deltas_and_compacts() {
        let d = tmpdir("log");
        let s = StateStore::open(&d).unwrap();
        s.save(&with_answers(0, 40)).unwrap();
        let snap = fs::read(d.join("state.json")).unwrap();
        for k in 1..=6 {
            let st = with_answers(k, 40);
            s.save(&st).unwrap();
            assert_eq!(s.load().unwrap(), Some(st));
        }
        assert_eq!(fs::read(d.join("state.json")).unwrap(), snap, "the snapshot is not rewritten");
        let log = fs::read_to_string(d.join(LOG_FILE)).unwrap();
        assert_eq!(log.lines().count(), 6);
        // Each line carries one new answer (≈ 40² numbers), not every earlier one.
        let longest = log.lines().map(str::len).max().unwrap();
        assert!(longest < 2 * log.lines().next().unwrap().len(), "{longest}");
        // Saving the same state again writes nothing.
        s.save(&with_answers(6, 40)).unwrap();
        assert_eq!(fs::read_to_string(d.join(LOG_FILE)).unwrap(), log);
        // Big answers: once the log outgrows the snapshot and 1 MiB it is folded into a new one.
        let mut compacted = false;
        for k in 7..40 {
            let st = sized(k, 120, 7);
            s.save(&st).unwrap();
            compacted |= !d.join(LOG_FILE).exists();
            assert_eq!(s.load().unwrap(), Some(st));
        }
        assert!(compacted, "the log was never compacted");
        // A reopened store (first save writes a snapshot) still loads what it saved.
        drop(s);
        let s = StateStore::open(&d).unwrap();
        let st = with_answers(40, 10);
        s.save(&st).unwrap();
        assert_eq!(s.load().unwrap(), Some(st.clone()));
        assert!(!d.join(LOG_FILE).exists());
        s.save(&with_answers(41, 10)).unwrap();
        assert!(d.join(LOG_FILE).exists());
        let _ = fs::remove_dir_all(&d);
    }

    /// A torn last append is ignored; an edited, dropped or reordered line is refused by line.
    #[test]
    fn log_tampering_is_refused_and_a_torn_tail_ignored() {
        let (d, s) = store_with_log("logmac", 4, 5);
        let log_path = d.join(LOG_FILE);
        let log = fs::read_to_string(&log_path).unwrap();
        let lines: Vec<&str> = log.lines().collect();
        // A crash in the middle of the next append.
        fs::write(&log_path, format!("{log}{}", &lines[0][..20])).unwrap();
        assert_eq!(s.load().unwrap(), Some(with_answers(4, 5)));
        let refused = |text: String, needle: &str| {
            fs::write(&log_path, text).unwrap();
            let e = s.load().unwrap_err();
            assert!(matches!(e, StoreError::Tampered { .. }), "{e}");
            assert!(e.to_string().contains("state.log") && e.to_string().contains(needle), "{e}");
        };
        // A released mean changed in line 2 (answer r1).
        refused(log.replacen("\"mean\":[0.5]", "\"mean\":[1.5]", 1), "line 2: does not match its MAC");
        // Line 2 dropped.
        refused(format!("{}\n{}\n{}\n", lines[0], lines[2], lines[3]), "line 2: entry 3 follows entry 1");
        // Lines swapped.
        refused(format!("{}\n{}\n{}\n{}\n", lines[0], lines[2], lines[1], lines[3]), "line 2");
        // A log without its snapshot.
        fs::write(&log_path, &log).unwrap();
        fs::remove_file(d.join("state.json")).unwrap();
        let e = s.load().unwrap_err().to_string();
        assert!(e.contains("without its snapshot"), "{e}");
        let _ = fs::remove_dir_all(&d);
    }

    /// A crash after a new snapshot's rename but before the old log's removal: the old lines
    /// are recognised as folded in.
    #[test]
    fn a_log_left_behind_by_compaction_is_skipped() {
        let (d, s) = store_with_log("logstale", 3, 5);
        let old_log = fs::read(d.join(LOG_FILE)).unwrap();
        drop(s);
        let s = StateStore::open(&d).unwrap();
        s.save(&with_answers(3, 5)).unwrap(); // first save after opening: a snapshot
        assert!(!d.join(LOG_FILE).exists());
        fs::write(d.join(LOG_FILE), &old_log).unwrap();
        assert_eq!(s.load().unwrap(), Some(with_answers(3, 5)));
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
