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
//! reset privacy spend or cause a re-draw of noise for something already released.
//!
//! **Failed and torn writes.** A save that fails (a full disk, a failed fsync) returns an error,
//! so the answer is withheld; the store cuts the log back to its length before the append and
//! makes the next save a fresh snapshot, so a fragment never stays in front of later lines. A
//! crash in the middle of an append leaves a last line without its newline: that save never
//! returned, nothing was released after it, and loading ignores it. Should a fragment be
//! followed by complete lines anyway (a cut-back that itself failed), loading accepts it only
//! when the next complete line continues the chain (entry number and MAC from the entry before
//! the fragment): then the chain proves that no entry was lost. Anything else is refused, and
//! `dpcotrain node repair` shows what can be proven intact ([`repair`]). Temporary files left by
//! a crashed snapshot are removed when the store is opened.
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
use dpcotrain_cotrain::Receipt;
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
        "state file {path}: {message}; the ledger may have been damaged or edited outside the node, so the node refuses to start. Run `dpcotrain node repair --config <party.toml>` to see which entries can be proven intact (it changes nothing without --write), or restore the state directory from a backup. Do not delete the state directory: that resets this node's privacy ledger, and every requester could then spend its whole budget again"
    )]
    Tampered { path: PathBuf, message: String },
}

/// What `state.json` holds: the state's exact bytes, the last log entry folded in, the chain's
/// earlier heads, the receipts noted as ahead of the state, and the MAC over all of them.
#[derive(serde::Serialize, serde::Deserialize)]
struct Envelope<'a> {
    #[serde(borrow)]
    state: &'a serde_json::value::RawValue,
    #[serde(default, skip_serializing_if = "is_zero")]
    seq: u64,
    /// `[[seq, head], …]` of every entry before this snapshot ([`Chain::heads`]).
    #[serde(borrow, default, skip_serializing_if = "Option::is_none")]
    heads: Option<&'a serde_json::value::RawValue>,
    /// Receipts noted as ahead of the state, by requester ([`Chain::witnessed`]).
    #[serde(borrow, default, skip_serializing_if = "Option::is_none")]
    witnessed: Option<&'a serde_json::value::RawValue>,
    mac: String,
}

/// What the chain remembers beyond the state: the head of every entry (so that a receipt for
/// entry k can be checked against the entry this chain has there) and the receipts requesters
/// showed that the state is behind. Both live in the MAC'd snapshot (and the heads of later
/// entries in the log lines), so deleting a side file forgets nothing.
#[derive(Debug, Default, Clone)]
struct Chain {
    /// Per entry number, the heads accepted there: the node's own first, then those of receipts
    /// adopted after a rollback (their entries are the lost branch's).
    heads: std::collections::BTreeMap<u64, Vec<String>>,
    witnessed: std::collections::BTreeMap<String, Receipt>,
}

/// How many entry numbers' heads a snapshot keeps (the latest): about 3 MB. A receipt for an
/// older entry is checked by its counters alone.
const MAX_HEADS: usize = 1 << 16;

impl Chain {
    fn add_head(&mut self, seq: u64, head: String) {
        let v = self.heads.entry(seq).or_default();
        if !v.contains(&head) {
            v.push(head);
        }
    }

    /// Keep the heads of at most [`MAX_HEADS`] entry numbers, the latest, all before `seq`.
    fn prune(&mut self, seq: u64) {
        self.heads.retain(|&k, _| k < seq);
        while self.heads.len() > MAX_HEADS {
            self.heads.pop_first();
        }
    }
}

/// An entry's head: the first 32 hex digits (128 bits) of its MAC.
fn head_of(mac: &str) -> String {
    mac.chars().take(32).collect()
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

fn snapshot_mac(key: &ring::hmac::Key, env: &Envelope) -> String {
    let mut ctx = ring::hmac::Context::with_key(key);
    if env.seq > 0 {
        ctx.update(format!("seq {}\n", env.seq).as_bytes());
    }
    if let Some(h) = env.heads {
        ctx.update(format!("heads {}\n", h.get()).as_bytes());
    }
    if let Some(w) = env.witnessed {
        ctx.update(format!("witnessed {}\n", w.get()).as_bytes());
    }
    ctx.update(env.state.get().as_bytes());
    hex(ctx.sign().as_ref())
}

fn line_mac(key: &ring::hmac::Key, prev: &str, seq: u64, delta: &[u8]) -> String {
    let mut ctx = ring::hmac::Context::with_key(key);
    ctx.update(format!("{prev}\n{seq}\n").as_bytes());
    ctx.update(delta);
    hex(ctx.sign().as_ref())
}

/// The largest entry number a state chain may reach (2^62 saves: never, at any rate of saves).
/// A number beyond it (in a receipt to adopt, say) is not genuine, and no arithmetic on entry
/// numbers can wrap.
pub const MAX_SEQ: u64 = 1 << 62;

const KEY_FILE: &str = "ledger.key";
/// Where earlier versions noted receipts (now in the snapshot); read and merged if present.
const WITNESS_FILE: &str = "witnessed.json";

fn legacy_witnessed(dir: &Path) -> Result<std::collections::BTreeMap<String, Receipt>, StoreError> {
    let path = dir.join(WITNESS_FILE);
    match fs::read(&path) {
        Ok(b) => serde_json::from_slice(&b).map_err(|e| StoreError::Corrupt { path, message: e.to_string() }),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Default::default()),
        Err(e) => Err(io(&path, e)),
    }
}

/// The receipts noted in `dir` by [`StateStore::record_witness`], by requester (read without
/// the lock, from the MAC-checked snapshot).
pub fn witnessed(dir: &Path) -> Result<std::collections::BTreeMap<String, Receipt>, StoreError> {
    Ok(load_chain(dir)?.witnessed)
}

/// The chain's heads and noted receipts as the files in `dir` prove them.
fn load_chain(dir: &Path) -> Result<Chain, StoreError> {
    let mut chain = Chain::default();
    if let Some(sc) = scan(dir)? {
        for (seq, head) in sc.heads {
            chain.add_head(seq, head);
        }
        chain.witnessed = sc.witnessed;
    }
    for (requester, w) in legacy_witnessed(dir)? {
        note(&mut chain.witnessed, &requester, &w);
    }
    Ok(chain)
}

/// Keep `w` as `requester`'s noted receipt if it claims more than the one kept (ρ, then entry
/// number); whether it changed anything.
fn note(all: &mut std::collections::BTreeMap<String, Receipt>, requester: &str, w: &Receipt) -> bool {
    let keep = all.get(requester).is_none_or(|old| (w.rho, w.seq) > (old.rho, old.seq));
    if keep {
        all.insert(requester.to_string(), w.clone());
    }
    keep
}

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
    /// Temporary files of crashed snapshots removed when the store was opened.
    cleaned: Vec<PathBuf>,
    /// The largest entry number this store has written: after a failed save the files may not
    /// tell it (a log that cannot be read), and numbering never goes back.
    high_seq: std::sync::atomic::AtomicU64,
    /// Heads and noted receipts ([`Chain`]), read from the files when first needed.
    chain: std::sync::Mutex<Option<Chain>>,
    /// Test-only fault injection in the append path (a full disk, a failed fsync).
    #[cfg(test)]
    fault: std::sync::Mutex<Option<Fault>>,
}

/// A fault injected into the next append (tests of the failure paths).
#[cfg(test)]
#[derive(Debug, Clone, Copy)]
enum Fault {
    /// The disk fills after this many bytes of the line: a torn write, then ENOSPC.
    FullAfter(usize),
    /// The write succeeds and the fsync fails (EIO).
    SyncFails,
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
        // Under the lock no other node writes here: any temporary file is a crashed write's.
        let cleaned = remove_temporaries(dir)?;
        Ok(StateStore {
            dir: dir.to_path_buf(),
            _lock: lock,
            key: std::sync::OnceLock::new(),
            disk: std::sync::Mutex::new(None),
            cleaned,
            high_seq: std::sync::atomic::AtomicU64::new(0),
            chain: std::sync::Mutex::new(None),
            #[cfg(test)]
            fault: std::sync::Mutex::new(None),
        })
    }

    /// The temporary files of crashed writes that opening the store removed.
    pub fn cleaned(&self) -> &[PathBuf] {
        &self.cleaned
    }

    /// The number of the chain's last entry on disk (the snapshot's or the last log line's):
    /// it grows by one with every save that changed something, and never goes back.
    pub fn seq(&self) -> u64 {
        match self.disk.lock().unwrap_or_else(|e| e.into_inner()).as_ref() {
            Some(d) => d.seq,
            None => self.seq_on_disk(),
        }
    }

    fn wrote(&self, seq: u64) {
        self.high_seq.fetch_max(seq, std::sync::atomic::Ordering::SeqCst);
    }

    /// The chain's memory, read from the files the first time.
    fn chain(&self) -> Result<std::sync::MutexGuard<'_, Option<Chain>>, StoreError> {
        let mut c = self.chain.lock().unwrap_or_else(|e| e.into_inner());
        if c.is_none() {
            *c = Some(load_chain(&self.dir)?);
        }
        Ok(c)
    }

    /// The head of entry `seq` of this node's chain (None for an entry number it never had,
    /// or one whose head is no longer kept).
    pub fn head_at(&self, seq: u64) -> Result<Option<String>, StoreError> {
        Ok(self.chain()?.as_ref().and_then(|c| c.heads.get(&seq).and_then(|v| v.first().cloned())))
    }

    /// Whether `head` is this chain's entry `seq` (its own, or one adopted there); None when no
    /// head is kept for that entry number.
    pub fn accepts(&self, seq: u64, head: &str) -> Result<Option<bool>, StoreError> {
        Ok(self.chain()?.as_ref().and_then(|c| c.heads.get(&seq)).map(|v| v.iter().any(|h| h == head)))
    }

    /// The receipts noted as ahead of this node's state, by requester.
    pub fn noted(&self) -> Result<std::collections::BTreeMap<String, Receipt>, StoreError> {
        Ok(self.chain()?.as_ref().map(|c| c.witnessed.clone()).unwrap_or_default())
    }

    /// HMAC-SHA256 under the ledger key of `message` (receipts this node signs).
    pub fn sign(&self, message: &[u8]) -> Result<String, StoreError> {
        Ok(hex(ring::hmac::sign(self.key()?, message).as_ref()))
    }

    /// Whether `mac` is this node's signature of `message` (constant time).
    pub fn verify(&self, message: &[u8], mac: &str) -> Result<bool, StoreError> {
        let Some(tag) = unhex(mac) else { return Ok(false) };
        Ok(ring::hmac::verify(self.key()?, message, &tag).is_ok())
    }

    pub fn path(&self) -> PathBuf {
        self.dir.join("state.json")
    }

    /// The state directory.
    pub fn dir(&self) -> &Path {
        &self.dir
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
    ///
    /// A failed save leaves the files as they were before it (the log is cut back to its length
    /// before the append) or, where even that failed, with a torn last line that loading
    /// ignores; either way the next save writes a fresh snapshot.
    pub fn save(&self, state: &PartyState) -> Result<(), StoreError> {
        let mut disk = self.disk.lock().unwrap_or_else(|e| e.into_inner());
        let result = self.save_locked(&mut disk, state);
        if result.is_err() {
            // What is on disk is no longer known exactly: the next save starts a new snapshot,
            // numbered after every entry found in the files.
            *disk = None;
        }
        result
    }

    fn save_locked(&self, disk: &mut Option<OnDisk>, state: &PartyState) -> Result<(), StoreError> {
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
        let last_seq = self.last_seq(disk);
        *disk = Some(self.snapshot(state, last_seq)?);
        Ok(())
    }

    /// The number of the chain's last entry: the one saved, or (before the first save, or after
    /// a failed one) the largest found in the files.
    fn last_seq(&self, disk: &Option<OnDisk>) -> u64 {
        disk.as_ref().map_or_else(|| self.seq_on_disk(), |d| d.seq)
    }

    /// The largest entry number in the files as found (the snapshot's, or a log line's): a new
    /// snapshot numbers itself at least this, so log lines it folds in read as folded in.
    fn seq_on_disk(&self) -> u64 {
        let snap = fs::read_to_string(self.path())
            .ok()
            .and_then(|t| serde_json::from_str::<Envelope>(&t).ok().map(|e| e.seq))
            .unwrap_or(0);
        let log = read_log(&self.dir.join(LOG_FILE)).ok().flatten().unwrap_or_default();
        let high = self.high_seq.load(std::sync::atomic::Ordering::SeqCst);
        log.split(|b| *b == b'\n').filter_map(|l| parse_line(l).map(|(_, l)| l.seq)).fold(snap.max(high), u64::max)
    }

    /// Append one delta to the log (fsynced).
    fn append(&self, d: &mut OnDisk, delta: &StateDelta, state: &PartyState) -> Result<(), StoreError> {
        let path = self.dir.join(LOG_FILE);
        let key = self.key()?;
        if d.seq >= MAX_SEQ {
            return Err(io(
                &path,
                format!("entry number {} is beyond the largest a chain may reach ({MAX_SEQ})", d.seq),
            ));
        }
        let seq = d.seq + 1;
        let raw = serde_json::value::to_raw_value(delta).map_err(|e| io(&path, e))?;
        let mac = line_mac(key, &d.mac, seq, raw.get().as_bytes());
        let mut line = serde_json::to_vec(&LogLine { seq, delta: &raw, mac: mac.clone() }).map_err(|e| io(&path, e))?;
        line.push(b'\n');
        let new_file = !path.exists();
        let mut f = OpenOptions::new().create(true).append(true).open(&path).map_err(|e| io(&path, e))?;
        let before = f.metadata().map_err(|e| io(&path, e))?.len();
        if let Err(e) = self.write_line(&mut f, &line) {
            // Cut the log back to where it was, so no fragment stays in front of a later line
            // (if this fails too, loading still tells a fragment from a lost entry).
            let cut = f.set_len(before).and_then(|()| f.sync_all());
            let extra = match cut {
                Ok(()) => String::new(),
                Err(c) => format!(" (cutting the log back to {before} bytes failed too: {c})"),
            };
            return Err(io(&path, format!("{e}{extra}")));
        }
        if new_file {
            // Make the new file's directory entry durable.
            sync_dir(&self.dir).map_err(|e| io(&self.dir, e))?;
        }
        d.state.apply(delta).map_err(|e| io(&path, e))?;
        debug_assert!(d.state == *state, "a state delta did not reproduce the saved state");
        if let Some(c) = self.chain.lock().unwrap_or_else(|e| e.into_inner()).as_mut() {
            c.add_head(seq, head_of(&mac));
        }
        d.mac = mac;
        d.seq = seq;
        d.log_bytes += line.len() as u64;
        self.wrote(seq);
        Ok(())
    }

    /// Adopt the receipts noted for `requesters` (after a rollback, once `state` charges the
    /// spend they prove): save `state` as a new snapshot numbered after every one of them, take
    /// the heads of `trusted` (receipts this node signed) as entries of this chain at their
    /// numbers, so that they match from now on, and forget those requesters' notes. Other
    /// notes stay.
    pub fn adopt(&self, state: &PartyState, requesters: &[&str], trusted: &[&Receipt]) -> Result<(), StoreError> {
        let noted = self.noted()?;
        let floor = requesters.iter().filter_map(|r| noted.get(*r)).map(|r| r.seq).max().unwrap_or(0);
        if floor >= MAX_SEQ {
            return Err(io(
                &self.path(),
                format!("entry number {floor} is beyond the largest a chain may reach ({MAX_SEQ})"),
            ));
        }
        let mut disk = self.disk.lock().unwrap_or_else(|e| e.into_inner());
        let last = self.last_seq(&disk);
        *disk = None;
        *disk = Some(self.snapshot_editing(state, last.max(floor), |c| {
            for r in trusted.iter().filter(|r| !r.head.is_empty()) {
                c.add_head(r.seq, r.head.clone());
            }
            for r in requesters {
                c.witnessed.remove(*r);
            }
        })?);
        Ok(())
    }

    /// Note a receipt a requester showed that this node's state is behind (or cannot verify),
    /// kept per requester (the largest ρ, then entry number), in the chain itself: a new
    /// snapshot of `state` (the state as saved) that carries it under the MAC, so that deleting
    /// a file cannot make the node forget it. `dpcotrain node repair --adopt-witnessed` charges
    /// what the noted receipts prove. The note counts only once the snapshot is on disk.
    pub fn record_witness(&self, requester: &str, w: &Receipt, state: &PartyState) -> Result<(), StoreError> {
        let mut disk = self.disk.lock().unwrap_or_else(|e| e.into_inner());
        if !note(&mut self.noted()?, requester, w) {
            return Ok(());
        }
        let last = self.last_seq(&disk);
        *disk = None;
        *disk = Some(self.snapshot_editing(state, last, |c| {
            note(&mut c.witnessed, requester, w);
        })?);
        Ok(())
    }

    /// Write one line and fsync it; an error from either is a failed save.
    #[cfg_attr(not(test), allow(clippy::unused_self))] // `self` carries the tests' injected fault
    fn write_line(&self, f: &mut File, line: &[u8]) -> std::io::Result<()> {
        #[cfg(test)]
        match self.fault.lock().unwrap_or_else(|e| e.into_inner()).take() {
            Some(Fault::FullAfter(n)) => {
                f.write_all(&line[..n.min(line.len())])?;
                return Err(std::io::Error::from_raw_os_error(28)); // ENOSPC
            }
            Some(Fault::SyncFails) => {
                f.write_all(line)?;
                return Err(std::io::Error::from_raw_os_error(5)); // EIO
            }
            None => {}
        }
        f.write_all(line)?;
        f.sync_all()
    }

    /// Write `state` as the new snapshot (atomically, durably), then remove the log it folds in.
    fn snapshot(&self, state: &PartyState, last_seq: u64) -> Result<OnDisk, StoreError> {
        self.snapshot_editing(state, last_seq, |_| {})
    }

    /// [`StateStore::snapshot`] with the chain's memory changed by `edit`; the change counts
    /// (in memory too) only once the snapshot is on disk.
    fn snapshot_editing(
        &self,
        state: &PartyState,
        last_seq: u64,
        edit: impl FnOnce(&mut Chain),
    ) -> Result<OnDisk, StoreError> {
        let path = self.path();
        let key = self.key()?;
        // The snapshot's seq continues the chain's numbering (one past every entry it folds
        // in), so a log line left by a crash between the rename and the log's removal is
        // recognised as already folded in, and every save has a number of its own.
        if last_seq >= MAX_SEQ {
            return Err(io(
                &path,
                format!("entry number {last_seq} is beyond the largest a chain may reach ({MAX_SEQ})"),
            ));
        }
        let seq = last_seq + 1;
        let raw = serde_json::value::to_raw_value(state).map_err(|e| io(&path, e))?;
        let mut guard = self.chain()?;
        let mut chain = guard.clone().unwrap_or_default();
        edit(&mut chain);
        chain.prune(seq);
        let heads: Vec<(u64, &String)> = chain.heads.iter().flat_map(|(k, v)| v.iter().map(|h| (*k, h))).collect();
        let heads = (!heads.is_empty())
            .then(|| serde_json::value::to_raw_value(&heads))
            .transpose()
            .map_err(|e| io(&path, e))?;
        let witnessed = (!chain.witnessed.is_empty())
            .then(|| serde_json::value::to_raw_value(&chain.witnessed))
            .transpose()
            .map_err(|e| io(&path, e))?;
        let mut env =
            Envelope { state: &raw, seq, heads: heads.as_deref(), witnessed: witnessed.as_deref(), mac: String::new() };
        env.mac = snapshot_mac(key, &env);
        let mac = env.mac.clone();
        let bytes = serde_json::to_vec(&env).map_err(|e| io(&path, e))?;
        write_atomic(&path, &bytes, Access::Public).map_err(|e| io(&path, e))?;
        chain.add_head(seq, head_of(&mac));
        *guard = Some(chain);
        // An earlier version's witnessed.json is merged into the chain, which this snapshot now
        // carries: the file goes (kept, it would bring adopted notes back).
        match fs::remove_file(self.dir.join(WITNESS_FILE)) {
            Ok(()) => sync_dir(&self.dir).map_err(|e| io(&self.dir, e))?,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(io(&self.dir.join(WITNESS_FILE), e)),
        }
        let log = self.dir.join(LOG_FILE);
        match fs::remove_file(&log) {
            Ok(()) => sync_dir(&self.dir).map_err(|e| io(&self.dir, e))?,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(io(&log, e)),
        }
        self.wrote(seq);
        Ok(OnDisk { state: state.clone(), mac, seq, snapshot_bytes: bytes.len() as u64, log_bytes: 0 })
    }
}

/// The state saved in `dir`, if any, read without taking the lock (for `node check`, which
/// may run beside a serving node). Creates nothing.
pub fn peek(dir: &Path) -> Result<Option<PartyState>, StoreError> {
    read_state(dir)
}

fn read_state(dir: &Path) -> Result<Option<PartyState>, StoreError> {
    let Some(scan) = scan(dir)? else { return Ok(None) };
    if let Some((line, message)) = scan.problem {
        return Err(StoreError::Tampered { path: dir.join(LOG_FILE), message: format!("line {line}: {message}") });
    }
    Ok(Some(scan.state))
}

/// The log's bytes (None if there is none); only a regular file is read.
fn read_log(log: &Path) -> Result<Option<Vec<u8>>, StoreError> {
    match fs::metadata(log) {
        Ok(m) if m.is_file() => fs::read(log).map(Some).map_err(|e| io(log, e)),
        Ok(_) => Err(StoreError::Corrupt { path: log.to_path_buf(), message: "not a regular file".into() }),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(io(log, e)),
    }
}

/// What the files of a state directory prove: the snapshot and the log's entries up to the
/// first one the chain does not vouch for.
#[derive(Debug)]
struct Scan {
    /// The state after the last proven entry.
    state: PartyState,
    /// That entry's number.
    seq: u64,
    /// The snapshot's entry number.
    snapshot_seq: u64,
    /// Log entries applied on top of the snapshot.
    applied: usize,
    /// Torn fragments in front of a line that continues the chain: (line number, bytes).
    fragments: Vec<(usize, usize)>,
    /// Bytes after the last newline: an append torn by a crash (that save never returned).
    torn_tail: usize,
    /// The first complete line not proven, and why; it and every line after it are not applied.
    problem: Option<(usize, String)>,
    /// Complete lines from the problem on.
    unproven_lines: usize,
    /// The head of every proven entry, and the receipts the snapshot noted ([`Chain`]).
    heads: Vec<(u64, String)>,
    witnessed: std::collections::BTreeMap<String, Receipt>,
}

/// The start of every serialised [`LogLine`]: a fragment of a torn append is cut off in front
/// of the next one.
const LINE_START: &[u8] = b"{\"seq\":";

/// The byte offsets at which a log line may start within one line of the file: 0, then after a
/// torn fragment.
fn line_starts(raw: &[u8]) -> impl Iterator<Item = usize> + '_ {
    std::iter::once(0).chain((1..raw.len()).filter(|&i| raw[i..].starts_with(LINE_START)))
}

fn parse_at(raw: &[u8], at: usize) -> Option<LogLine<'_>> {
    std::str::from_utf8(&raw[at..]).ok().and_then(|t| serde_json::from_str(t).ok())
}

/// The first log line found in one line of the file (after a torn fragment, if any).
fn parse_line(raw: &[u8]) -> Option<(usize, LogLine<'_>)> {
    line_starts(raw).find_map(|i| parse_at(raw, i).map(|l| (i, l)))
}

fn scan(dir: &Path) -> Result<Option<Scan>, StoreError> {
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
    if snapshot_mac(&key, &env) != env.mac {
        return Err(tampered("its content does not match its MAC".into()));
    }
    let state: PartyState = serde_json::from_str(env.state.get())
        .map_err(|e| StoreError::Corrupt { path: path.clone(), message: e.to_string() })?;
    let corrupt = |e: serde_json::Error| StoreError::Corrupt { path: path.clone(), message: e.to_string() };
    let mut heads: Vec<(u64, String)> = match env.heads {
        Some(h) => serde_json::from_str(h.get()).map_err(corrupt)?,
        None => Vec::new(),
    };
    heads.push((env.seq, head_of(&env.mac)));
    let witnessed = match env.witnessed {
        Some(w) => serde_json::from_str(w.get()).map_err(corrupt)?,
        None => Default::default(),
    };
    let mut scan = Scan {
        state,
        seq: env.seq,
        snapshot_seq: env.seq,
        applied: 0,
        fragments: vec![],
        torn_tail: 0,
        problem: None,
        unproven_lines: 0,
        heads,
        witnessed,
    };
    // The log: every complete line after the snapshot's seq, chained from the snapshot's MAC.
    let log = dir.join(LOG_FILE);
    let Some(bytes) = read_log(&log)? else { return Ok(Some(scan)) };
    let mut prev = env.mac.clone();
    let complete = bytes.iter().rposition(|b| *b == b'\n').map_or(0, |i| i + 1);
    // Bytes after the last newline are a torn append: that save never returned, nothing was
    // released after it.
    scan.torn_tail = bytes.len() - complete;
    let lines: Vec<&[u8]> = bytes[..complete].split(|b| *b == b'\n').take_while(|l| !l.is_empty()).collect();
    for (n, raw) in lines.iter().enumerate() {
        let line_no = n + 1;
        match next_entry(&key, &prev, scan.seq, env.seq, raw) {
            Ok(Entry::Folded) => {}
            Ok(Entry::Next { at, line }) => {
                let delta: StateDelta = match serde_json::from_str(line.delta.get()) {
                    Ok(d) => d,
                    Err(e) => {
                        scan.problem = Some((line_no, e.to_string()));
                        scan.unproven_lines = lines.len() - n;
                        break;
                    }
                };
                // `apply` refuses before it changes anything, so the state stays the proven one.
                if let Err(e) = scan.state.apply(&delta) {
                    scan.problem = Some((line_no, e.to_string()));
                    scan.unproven_lines = lines.len() - n;
                    break;
                }
                if at > 0 {
                    scan.fragments.push((line_no, at));
                }
                scan.heads.push((line.seq, head_of(&line.mac)));
                prev = line.mac;
                scan.seq = line.seq;
                scan.applied += 1;
            }
            Err(message) => {
                scan.problem = Some((line_no, message));
                scan.unproven_lines = lines.len() - n;
                break;
            }
        }
    }
    // A torn append is a prefix of the line the save was writing: `{"seq":` and the next entry
    // number. Anything else after the last newline (a log overwritten with zero bytes, or with
    // anything at all) is not a save that never returned, and ignoring it would silently drop
    // every entry it replaced: refused, like a line that does not match its MAC.
    let numbers: &[u64] = if scan.applied == 0 {
        &[scan.seq.saturating_add(1), scan.snapshot_seq]
    } else {
        &[scan.seq.saturating_add(1)]
    };
    if scan.problem.is_none() && scan.torn_tail > 0 && !is_torn_append(&bytes[complete..], numbers) {
        let tail = &bytes[complete..];
        let what = if tail.iter().all(|b| *b == 0) { "all zero bytes".to_string() } else { "not an entry".to_string() };
        scan.problem = Some((
            lines.len() + 1,
            format!(
                "its last {} bytes (after the last complete line, without a newline) are {what}; an append torn by a crash starts with {{\"seq\":{}",
                tail.len(),
                scan.seq.saturating_add(1)
            ),
        ));
        scan.unproven_lines = 1;
    }
    Ok(Some(scan))
}

/// Whether `tail` (the bytes after the log's last newline) can be the start of the line that
/// a save was appending when it was cut short: one of the entry numbers in `numbers` (the next
/// entry's; or, when every line of the log is folded into the snapshot, the snapshot's own — a
/// crash between a new snapshot and the old log's removal can leave the torn append of the
/// entry whose number the snapshot then took). Cut inside the number, a prefix of one.
fn is_torn_append(tail: &[u8], numbers: &[u64]) -> bool {
    if tail.len() <= LINE_START.len() {
        return LINE_START.starts_with(tail);
    }
    if !tail.starts_with(LINE_START) {
        return false;
    }
    let rest = &tail[LINE_START.len()..];
    let digits = rest.iter().take_while(|b| b.is_ascii_digit()).count();
    numbers.iter().any(|n| {
        let n = n.to_string();
        if digits == rest.len() { n.as_bytes().starts_with(rest) } else { &rest[..digits] == n.as_bytes() }
    })
}

enum Entry<'a> {
    /// Already folded into the snapshot (a crash between the snapshot and the log's removal).
    Folded,
    /// The next entry of the chain, starting at byte `at` of the line (after a torn fragment).
    Next { at: usize, line: LogLine<'a> },
}

/// Read one line of the log as the entry after `seq` (MAC `prev`), or say why it is not.
fn next_entry<'a>(
    key: &ring::hmac::Key,
    prev: &str,
    seq: u64,
    snapshot_seq: u64,
    raw: &'a [u8],
) -> Result<Entry<'a>, String> {
    let whole = std::str::from_utf8(raw)
        .map_err(|_| "not UTF-8".to_string())
        .and_then(|t| serde_json::from_str::<LogLine>(t).map_err(|e| e.to_string()));
    let l = match whole {
        Ok(l) => l,
        Err(why) => {
            // A fragment of a torn append, then a whole line: accepted only if that line is the
            // next entry of the chain, which proves the fragment's save never completed.
            return line_starts(raw)
                .skip(1)
                .find_map(|at| {
                    let l = parse_at(raw, at)?;
                    (l.seq == seq.saturating_add(1) && line_mac(key, prev, l.seq, l.delta.get().as_bytes()) == l.mac)
                        .then_some(Entry::Next { at, line: l })
                })
                .ok_or(why);
        }
    };
    if l.seq <= snapshot_seq {
        return Ok(Entry::Folded);
    }
    if l.seq != seq.saturating_add(1) {
        return Err(format!("entry {} follows entry {seq}: entries are missing", l.seq));
    }
    if line_mac(key, prev, l.seq, l.delta.get().as_bytes()) != l.mac {
        return Err("does not match its MAC (chained from the entry before it)".into());
    }
    Ok(Entry::Next { at: 0, line: l })
}

/// What [`repair`] found, and did.
#[derive(Debug, Clone, serde::Serialize)]
pub struct RepairReport {
    pub dir: PathBuf,
    /// The snapshot's entry number and the last entry the chain proves.
    pub snapshot_seq: u64,
    pub proven_seq: u64,
    /// Log entries proven and kept.
    pub kept_entries: usize,
    /// Torn fragments found in front of a line that continues the chain (harmless: the chain
    /// proves no entry was lost): (line, bytes).
    pub fragments: Vec<(usize, usize)>,
    /// Bytes of a torn last append.
    pub torn_tail_bytes: usize,
    /// The first line the chain does not prove, and why.
    pub problem: Option<(usize, String)>,
    /// Complete lines not kept (that line and every one after it).
    pub dropped_lines: usize,
    /// Per requester of the kept state: (name, releases, ρ, ε, whether every release behind
    /// that ε is a formal guarantee).
    pub ledgers: Vec<(String, usize, f64, f64, bool)>,
    /// Where the files were copied before rewriting (with `write`).
    pub backup: Option<PathBuf>,
    /// Whether the state directory was rewritten as one snapshot of the kept state.
    pub written: bool,
}

impl RepairReport {
    /// Whether the files needed no repair.
    pub fn clean(&self) -> bool {
        self.fragments.is_empty() && self.torn_tail_bytes == 0 && self.problem.is_none()
    }

    /// Whether keeping only the proven entries may lose releases (lines that were not proven).
    pub fn may_roll_back(&self) -> bool {
        self.dropped_lines > 0
    }
}

/// Check a state directory entry by entry and report what its MAC chain proves; with `write`,
/// copy its files into `repair-<time>/` inside it and rewrite it as one snapshot of the proven
/// state (which removes torn fragments and anything unproven). Takes the directory's lock, so
/// it refuses while a node serves from it. A snapshot that does not verify cannot be repaired
/// (an error says so): nothing in it can be proven.
pub fn repair(dir: &Path, write: bool) -> Result<RepairReport, StoreError> {
    let store = StateStore::open(dir)?;
    let scan = scan(dir)?
        .ok_or_else(|| StoreError::Io { path: dir.join("state.json"), message: "no saved state to repair".into() })?;
    let ledgers = scan
        .state
        .requesters
        .iter()
        .filter_map(|(name, r)| {
            r.ledger.as_ref().map(|l| {
                let guaranteed = l.releases.iter().all(|r| r.guaranteed);
                (name.clone(), l.releases.len(), l.rho_spent(), l.epsilon_spent(), guaranteed)
            })
        })
        .collect();
    let mut report = RepairReport {
        dir: dir.to_path_buf(),
        snapshot_seq: scan.snapshot_seq,
        proven_seq: scan.seq,
        kept_entries: scan.applied,
        fragments: scan.fragments.clone(),
        torn_tail_bytes: scan.torn_tail,
        problem: scan.problem.clone(),
        dropped_lines: scan.unproven_lines,
        ledgers,
        backup: None,
        written: false,
    };
    if write && !report.clean() {
        let stamp = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs());
        let backup = dir.join(format!("repair-{stamp}"));
        fs::create_dir_all(&backup).map_err(|e| io(&backup, e))?;
        for name in ["state.json", LOG_FILE] {
            let from = dir.join(name);
            if from.exists() {
                let to = backup.join(name);
                fs::copy(&from, &to).map_err(|e| io(&to, e))?;
                File::open(&to).and_then(|f| f.sync_all()).map_err(|e| io(&to, e))?;
            }
        }
        sync_dir(&backup).map_err(|e| io(&backup, e))?;
        sync_dir(dir).map_err(|e| io(dir, e))?;
        report.backup = Some(backup);
        store.snapshot(&scan.state, scan.seq)?;
        report.written = true;
    }
    Ok(report)
}

/// Remove the temporary files a crashed [`write_atomic`] left in `dir` (`.<name>.<pid>.<n>.tmp`).
fn remove_temporaries(dir: &Path) -> Result<Vec<PathBuf>, StoreError> {
    let mut removed = Vec::new();
    for entry in fs::read_dir(dir).map_err(|e| io(dir, e))? {
        let entry = entry.map_err(|e| io(dir, e))?;
        let name = entry.file_name().to_string_lossy().into_owned();
        if crate::durable::is_temporary(&name) && entry.file_type().is_ok_and(|t| t.is_file()) {
            fs::remove_file(entry.path()).map_err(|e| io(&entry.path(), e))?;
            removed.push(entry.path());
        }
    }
    if !removed.is_empty() {
        sync_dir(dir).map_err(|e| io(dir, e))?;
        tracing::info!("{}: removed {} temporary file(s) left by a crashed write", dir.display(), removed.len());
    }
    Ok(removed)
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
                likelihood: None,
                receipt: None,
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
        // A crash in the middle of the next append: its first bytes, cut anywhere.
        let next = format!("{{\"seq\":{},\"delta\":{{\"answers\":", s.seq() + 1);
        for cut in [1, 5, 7, 8, next.len()] {
            fs::write(&log_path, format!("{log}{}", &next[..cut])).unwrap();
            assert_eq!(s.load().unwrap(), Some(with_answers(4, 5)), "cut at {cut}");
        }
        let refused = |text: String, needle: &str| {
            fs::write(&log_path, text).unwrap();
            let e = s.load().unwrap_err();
            assert!(matches!(e, StoreError::Tampered { .. }), "{e}");
            assert!(e.to_string().contains("state.log") && e.to_string().contains(needle), "{e}");
        };
        // The log overwritten with zero bytes has no newline, like one torn append; it used to
        // load as the snapshot alone, every entry dropped. So did a tail of zeros, and a tail
        // that is the start of an entry other than the next one.
        refused("\0".repeat(28 * 1024), "line 1: its last 28672 bytes");
        refused("\0".repeat(28 * 1024), "all zero bytes");
        // `node repair` shows it, and warns that keeping the proven state may roll back.
        let r = repair_of_copy(&d);
        assert!(r.problem.is_some() && r.may_roll_back() && r.kept_entries == 0, "{r:?}");
        refused(format!("{log}{}", "\0".repeat(300)), "line 5: its last 300 bytes");
        refused(format!("{log}{}", &lines[0][..20]), "not an entry");
        refused(format!("{log}garbage"), "not an entry");
        // A released mean changed in line 2 (answer r1).
        refused(log.replacen("\"mean\":[0.5]", "\"mean\":[1.5]", 1), "line 2: does not match its MAC");
        // Line 2 dropped.
        refused(format!("{}\n{}\n{}\n", lines[0], lines[2], lines[3]), "line 2: entry 4 follows entry 2");
        // Lines swapped.
        refused(format!("{}\n{}\n{}\n{}\n", lines[0], lines[2], lines[1], lines[3]), "line 2");
        // A log without its snapshot.
        fs::write(&log_path, &log).unwrap();
        fs::remove_file(d.join("state.json")).unwrap();
        let e = s.load().unwrap_err().to_string();
        assert!(e.contains("without its snapshot"), "{e}");
        let _ = fs::remove_dir_all(&d);
    }

    /// Every entry keeps its head across appends, compaction and a reopen (the snapshot carries
    /// the earlier ones); the heads and noted receipts are under the snapshot's MAC, and a noted
    /// receipt survives the loss of every other file but the state, its log and its key.
    #[test]
    fn heads_and_noted_receipts_live_in_the_chain() {
        let (d, s) = store_with_log("heads", 4, 5);
        let heads: Vec<String> = (1..=s.seq()).map(|k| s.head_at(k).unwrap().expect("a head per entry")).collect();
        assert_eq!(heads.iter().collect::<std::collections::BTreeSet<_>>().len(), heads.len(), "heads differ");
        let w = Receipt { seq: 99, head: "ab".repeat(16), releases: 1, rho: 0.5, mac: "00".repeat(32) };
        s.record_witness("B", &w, &with_answers(4, 5)).unwrap();
        drop(s);
        let s = StateStore::open(&d).unwrap();
        for (k, h) in heads.iter().enumerate() {
            assert_eq!(s.head_at(k as u64 + 1).unwrap().as_ref(), Some(h), "entry {} after a reopen", k + 1);
        }
        assert_eq!(s.noted().unwrap().get("B"), Some(&w));
        assert_eq!(witnessed(&d).unwrap().get("B"), Some(&w), "read without the lock");
        // Compaction keeps them too.
        s.save(&with_answers(5, 5)).unwrap();
        assert_eq!(s.head_at(1).unwrap().as_ref(), Some(&heads[0]));
        assert_eq!(s.noted().unwrap().get("B"), Some(&w));
        // Edited under the MAC: refused.
        let text = fs::read_to_string(d.join("state.json")).unwrap();
        for (from, to) in [(heads[0].as_str(), "00000000000000000000000000000000"), ("\"rho\":0.5", "\"rho\":0.25")] {
            assert!(text.contains(from), "{from} not in the snapshot");
            fs::write(d.join("state.json"), text.replacen(from, to, 1)).unwrap();
            assert!(matches!(s.load(), Err(StoreError::Tampered { .. })), "an edit of {from} was accepted");
        }
        fs::write(d.join("state.json"), &text).unwrap();
        // Adoption takes a trusted receipt's head at its entry (beside the chain's own there)
        // and forgets the note; an untrusted one's head is not taken.
        let own = s.head_at(2).unwrap().unwrap();
        let at2 = Receipt { seq: 2, head: "cd".repeat(16), ..w.clone() };
        s.adopt(&with_answers(5, 5), &["B"], &[&w, &at2]).unwrap();
        assert_eq!(s.accepts(99, &w.head).unwrap(), Some(true));
        assert_eq!(s.accepts(2, &at2.head).unwrap(), Some(true));
        assert_eq!(s.accepts(2, &own).unwrap(), Some(true), "the chain's own head at 2 was replaced");
        assert_eq!(s.head_at(2).unwrap(), Some(own));
        assert_eq!(s.accepts(3, &"ef".repeat(16)).unwrap(), Some(false));
        assert!(s.noted().unwrap().is_empty() && s.seq() == 100, "seq {}", s.seq());
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

    /// Two crashes in a row: one in the middle of an append, then one between the snapshot that
    /// the restart's first save writes (numbered as the torn entry would have been) and the old
    /// log's removal. The torn tail names the snapshot's own number and every line is folded:
    /// the state loads (it was refused as tampered).
    #[test]
    fn a_torn_append_left_behind_by_compaction_is_skipped() {
        let (d, s) = store_with_log("torn-folded", 3, 5);
        let log_path = d.join(LOG_FILE);
        let torn = format!("{}{{\"seq\":{},\"delta\":{{", fs::read_to_string(&log_path).unwrap(), s.seq() + 1);
        fs::write(&log_path, &torn).unwrap();
        drop(s);
        let s = StateStore::open(&d).unwrap();
        assert_eq!(s.load().unwrap(), Some(with_answers(3, 5)));
        s.save(&with_answers(3, 5)).unwrap(); // first save after opening: a snapshot
        assert!(!log_path.exists());
        fs::write(&log_path, &torn).unwrap(); // the crash kept the old log
        assert_eq!(s.load().unwrap(), Some(with_answers(3, 5)));
        let _ = fs::remove_dir_all(&d);
    }

    fn inject(s: &StateStore, f: Fault) {
        *s.fault.lock().unwrap() = Some(f);
    }

    /// A disk that fills in the middle of an append (or an fsync that fails): the save fails,
    /// the log is cut back to the bytes before it, and the next save (a fresh snapshot) and
    /// every reload see exactly the states that were saved.
    #[test]
    fn a_failed_append_is_cut_back_and_the_next_save_recovers() {
        for fault in [Fault::FullAfter(37), Fault::SyncFails] {
            let (d, s) = store_with_log("full", 3, 5);
            let log_path = d.join(LOG_FILE);
            let before = fs::read(&log_path).unwrap();
            inject(&s, fault);
            let e = s.save(&with_answers(4, 5)).unwrap_err().to_string();
            assert!(e.contains("state.log") && (e.contains("os error 28") || e.contains("os error 5")), "{e}");
            assert_eq!(fs::read(&log_path).unwrap(), before, "{fault:?}: the log was not cut back");
            assert_eq!(s.load().unwrap(), Some(with_answers(3, 5)));
            // The next save is a snapshot numbered after every entry on disk; appends follow.
            let seq = s.seq();
            s.save(&with_answers(4, 5)).unwrap();
            assert!(!log_path.exists(), "the next save after a failure writes a snapshot");
            s.save(&with_answers(5, 5)).unwrap();
            assert_eq!(s.seq(), seq + 2, "a snapshot and an append: two entries");
            assert_eq!(s.load().unwrap(), Some(with_answers(5, 5)));
            drop(s);
            let s = StateStore::open(&d).unwrap();
            assert_eq!(s.load().unwrap(), Some(with_answers(5, 5)));
            let _ = fs::remove_dir_all(&d);
        }
    }

    /// What the previous version left after a full disk: a fragment without its newline, then
    /// the next save's whole line. The chain continues across the fragment, so nothing was
    /// lost and the state loads exactly; a fragment before a line that does not continue the
    /// chain is refused, and the refusal never advises deleting the ledger.
    #[test]
    fn a_fragment_before_a_continuing_line_is_recovered_and_only_then() {
        let (d, s) = store_with_log("frag", 4, 5);
        let log_path = d.join(LOG_FILE);
        let log = fs::read_to_string(&log_path).unwrap();
        let lines: Vec<&str> = log.lines().collect();
        let frag = &lines[2][..lines[2].len() / 2];
        let torn = format!("{}\n{}\n{frag}{}\n{}\n", lines[0], lines[1], lines[2], lines[3]);
        fs::write(&log_path, &torn).unwrap();
        assert_eq!(s.load().unwrap(), Some(with_answers(4, 5)));
        let r = repair_of_copy(&d);
        assert_eq!(r.fragments, vec![(3, frag.len())]);
        assert!(!r.may_roll_back() && !r.clean());
        // The fragment then entry 4 (entry 3 missing): refused.
        fs::write(&log_path, format!("{}\n{}\n{frag}{}\n", lines[0], lines[1], lines[3])).unwrap();
        let e = s.load().unwrap_err();
        assert!(matches!(e, StoreError::Tampered { .. }), "{e}");
        let e = e.to_string();
        assert!(e.contains("line 3") && e.contains("node repair"), "{e}");
        assert!(!e.contains("or delete the state directory") && e.contains("resets this node's privacy ledger"), "{e}");
        let _ = fs::remove_dir_all(&d);
    }

    /// `repair` (report only) of a copy of `d`: it takes the lock, which `d`'s store holds.
    fn repair_of_copy(d: &Path) -> RepairReport {
        let copy = d.with_extension("copy");
        let _ = fs::remove_dir_all(&copy);
        fs::create_dir_all(&copy).unwrap();
        for e in fs::read_dir(d).unwrap() {
            let e = e.unwrap();
            if e.file_type().unwrap().is_file() && e.file_name() != "LOCK" {
                fs::copy(e.path(), copy.join(e.file_name())).unwrap();
            }
        }
        repair(&copy, false).unwrap()
    }

    /// `repair` reports what the chain proves and changes nothing without `write`; with it,
    /// keeps a backup and rewrites the directory as the proven state, which then loads.
    #[test]
    fn repair_keeps_what_the_chain_proves() {
        let (d, s) = store_with_log("repair", 4, 5);
        let log_path = d.join(LOG_FILE);
        let log = fs::read_to_string(&log_path).unwrap();
        let edited = log.replacen("\"mean\":[0.5]", "\"mean\":[1.5]", 1);
        fs::write(&log_path, &edited).unwrap();
        drop(s);
        // A node serving from the directory holds the lock: repair refuses.
        let held = StateStore::open(&d).unwrap();
        assert!(matches!(repair(&d, true), Err(StoreError::Locked { .. })));
        drop(held);
        let r = repair(&d, false).unwrap();
        assert_eq!((r.kept_entries, r.dropped_lines, r.written), (1, 3, false));
        assert_eq!(r.problem.as_ref().map(|p| p.0), Some(2));
        assert!(r.may_roll_back());
        assert_eq!(fs::read_to_string(&log_path).unwrap(), edited, "changed without --write");
        let r = repair(&d, true).unwrap();
        assert!(r.written);
        let backup = r.backup.unwrap();
        assert_eq!(fs::read_to_string(backup.join(LOG_FILE)).unwrap(), edited);
        let s = StateStore::open(&d).unwrap();
        assert_eq!(s.load().unwrap(), Some(with_answers(1, 5)));
        // A clean directory needs nothing.
        drop(s);
        let r = repair(&d, true).unwrap();
        assert!(r.clean() && !r.written && r.backup.is_none());
        let _ = fs::remove_dir_all(&d);
    }

    /// Temporary files of crashed snapshots are removed when the store opens; others stay.
    #[test]
    fn crashed_temporaries_are_removed_at_open() {
        let (d, s) = store_with_log("tmps", 1, 5);
        drop(s);
        let leaked: Vec<PathBuf> = (0..5).map(|i| d.join(format!(".state.json.{}.{i}.tmp", 4000 + i))).collect();
        for p in &leaked {
            fs::write(p, vec![b'x'; 1 << 16]).unwrap();
        }
        fs::write(d.join("notes.tmp"), b"mine").unwrap();
        let s = StateStore::open(&d).unwrap();
        let mut cleaned = s.cleaned().to_vec();
        cleaned.sort();
        assert_eq!(cleaned, leaked);
        assert!(leaked.iter().all(|p| !p.exists()) && d.join("notes.tmp").exists());
        assert_eq!(s.load().unwrap(), Some(with_answers(1, 5)));
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

    /// A state directory saved before refusals carried a code (issue 57), its turns' `refused`
    /// as `[peer, text]` pairs, opens and loads through the store: the MAC holds over the bytes
    /// as they were written, the earlier "not asked:" text reads as `NotAsked` and any other as
    /// `Recorded`, an edit of the old bytes is still refused, and the node goes on saving.
    #[test]
    fn a_state_saved_with_text_refusals_loads_with_typed_codes() {
        use dpcotrain_cotrain::RemoteCode;
        use dpcotrain_cotrain::party::TurnRecord;
        let d = tmpdir("text-refusals");
        let mut st = state("A");
        st.turns.push(TurnRecord {
            round: 0,
            index: Some(4),
            answers: vec![],
            refused: vec![],
            objective: None,
            test_rmse: None,
            guard: None,
        });
        let s = StateStore::open(&d).unwrap();
        s.save(&st).unwrap();
        drop(s);
        // The snapshot as the earlier version wrote it: the text pairs, under the node's own key.
        let key = mac_key(&d, false).unwrap().expect("the first save wrote the key");
        let text = fs::read_to_string(d.join("state.json")).unwrap();
        let env: Envelope = serde_json::from_str(&text).unwrap();
        let mut v: serde_json::Value = serde_json::from_str(env.state.get()).unwrap();
        v["turns"][0]["refused"] = serde_json::json!([
            ["B", "not asked: the requester's budget at B is spent"],
            ["C", "peer C: status Unavailable: connection refused"]
        ]);
        let raw = serde_json::value::to_raw_value(&v).unwrap();
        let mut old =
            Envelope { state: &raw, seq: env.seq, heads: env.heads, witnessed: env.witnessed, mac: String::new() };
        old.mac = snapshot_mac(&key, &old);
        fs::write(d.join("state.json"), serde_json::to_vec(&old).unwrap()).unwrap();
        let s = StateStore::open(&d).unwrap();
        let got = s.load().unwrap().expect("the old state loads");
        let codes: Vec<(&str, RemoteCode)> = got.turns[0].refused.iter().map(|r| (r.peer.as_str(), r.code)).collect();
        assert_eq!(codes, [("B", RemoteCode::NotAsked), ("C", RemoteCode::Recorded)]);
        assert_eq!(got.turns[0].refused[1].message, "peer C: status Unavailable: connection refused");
        // Tampering with the old form is still caught: the MAC covers the pairs.
        let tampered =
            fs::read_to_string(d.join("state.json")).unwrap().replace("connection refused", "connection reset");
        fs::write(d.join("state.json"), &tampered).unwrap();
        assert!(matches!(s.load(), Err(StoreError::Tampered { .. })), "an edited old state is refused as tampered");
        fs::write(d.join("state.json"), serde_json::to_vec(&old).unwrap()).unwrap();
        // The next save writes the typed form, and it loads the same.
        let mut next = got.clone();
        next.model_version += 1;
        s.save(&next).unwrap();
        assert_eq!(s.load().unwrap(), Some(next));
        let _ = fs::remove_dir_all(&d);
    }
}
