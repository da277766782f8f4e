//! A node keeps its promises under faults, over real gRPC and real state directories:
//! - a peer whose save fails (a full disk: its state log on /dev/full) withholds its answer, and
//!   the querier's turn is *not taken* — retried, it happens, with nothing charged twice and the
//!   same numbers as a run without the fault;
//! - a peer whose state files were rolled back (each way an operator or a restore can do it)
//!   is caught by the receipt the querier holds: it refuses with DATA_LOSS, notes the receipt,
//!   and answers again once the receipt's spend is adopted.

mod common;

use dpcotrain_cotrain::CombinerKind;
use dpcotrain_cotrain::CotrainError;
use dpcotrain_cotrain::Uncertainty;
use dpcotrain_cotrain::driver::{build_parties, evaluate, query_turn};
use dpcotrain_cotrain::{DpConfig, Party};
use dpcotrain_cotrain::{SimConfig, simulate};
use dpcotrain_federation::store::{StateStore, witnessed};
use dpcotrain_federation::{GrpcPeer, NodeService, Retry};
use dpcotrain_privacy::LabelRange;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

const FED: &str = "fed-faults";

/// Two parties under the honest DP default (a finite release per batch of new indices: every
/// answer is a new charge).
fn parties() -> Vec<Arc<Mutex<Party>>> {
    let sc =
        simulate(&SimConfig { r: 0.9, n_obs: 25, n_pool: 120, n_test: 100, seed: 5, ..SimConfig::default() }).unwrap();
    let dp = DpConfig::honest(0.5, 1e-5, 50.0, LabelRange::new(-3.0, 3.0).unwrap(), 2);
    build_parties(&sc, CombinerKind::Noisy, Uncertainty::Marginal, &dp, 3).unwrap()
}

/// `me`'s gRPC peer `name` at `addr`, giving up on an unreachable peer within a second.
fn peer(me: &Arc<Mutex<Party>>, name: &str, addr: &str) -> GrpcPeer {
    let retry = Retry {
        call_timeout: Duration::from_secs(20),
        first_backoff: Duration::from_millis(20),
        max_backoff: Duration::from_millis(100),
        give_up_after: Duration::from_millis(600),
    };
    common::peer(me, FED, name, addr, retry)
}

/// Open (and lock) `dir`, waiting for a stopped node's lock to go.
async fn open(dir: &Path) -> StateStore {
    for _ in 0..100 {
        match StateStore::open(dir) {
            Ok(s) => return s,
            Err(dpcotrain_federation::store::StoreError::Locked { .. }) => {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            Err(e) => panic!("{e}"),
        }
    }
    panic!("{} stayed locked", dir.display());
}

/// Serve `party` with its state in `dir` (restored from it first, as `node serve` does).
async fn serve(party: &Arc<Mutex<Party>>, dir: &Path) -> (String, tokio::sync::oneshot::Sender<()>) {
    let store = open(dir).await;
    if let Some(st) = store.load().unwrap() {
        party.lock().unwrap().restore(&st).unwrap();
    }
    let svc = NodeService::new(party.clone(), FED).with_store(store);
    svc.halt_if_behind_noted().unwrap();
    common::start_service(svc).await
}

fn rho_charged(p: &Arc<Mutex<Party>>, requester: &str) -> (usize, f64) {
    p.lock().unwrap().ledger(requester).map_or((0, 0.0), |l| (l.releases.len(), l.rho_spent()))
}

/// A turn not taken because its peer answered DATA_LOSS: the code travels typed, not in words.
fn data_loss(err: &CotrainError) -> bool {
    matches!(err, CotrainError::TurnNotTaken { reasons, .. }
        if reasons.iter().any(|r| r.code == dpcotrain_cotrain::RemoteCode::DataLoss))
}

/// B's disk fills while it saves its answer to A: B withholds it (INTERNAL), A's turn is not
/// taken (nothing recorded). Once the disk takes writes again, the same round is taken; B
/// charged the exchange once, and A ends exactly where a run without the fault ends.

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_peer_that_cannot_save_leaves_the_turn_not_taken_and_the_retry_takes_it() {
    assert!(Path::new("/dev/full").exists(), "this test needs /dev/full (a device whose writes fail with ENOSPC)");
    let tmp = tempfile::tempdir().unwrap();
    // The reference: the same rounds without a fault.
    let reference = {
        let ps = parties();
        let (addr, stop) = serve(&ps[1], &tmp.path().join("ref")).await;
        let to_b = vec![peer(&ps[0], "P2", &addr)];
        for round in 0..4 {
            query_turn(&ps[0], &to_b, round).await.unwrap();
        }
        let _ = stop.send(());
        evaluate(&mut ps[0].lock().unwrap()).unwrap().rmse
    };
    let ps = parties();
    let dir = tmp.path().join("b");
    let (addr, stop) = serve(&ps[1], &dir).await;
    let to_b = vec![peer(&ps[0], "P2", &addr)];
    query_turn(&ps[0], &to_b, 0).await.unwrap();
    query_turn(&ps[0], &to_b, 1).await.unwrap();
    // The disk is full: B's next append goes to a device that refuses every write.
    let log = dir.join("state.log");
    let _ = std::fs::remove_file(&log);
    std::os::unix::fs::symlink("/dev/full", &log).unwrap();
    let err = query_turn(&ps[0], &to_b, 2).await.unwrap_err();
    assert!(matches!(err, CotrainError::TurnNotTaken { round: 2, .. }), "{err}");
    assert!(err.to_string().contains("could not be saved"), "{err}");
    assert!(ps[0].lock().unwrap().turn(2).is_none(), "a turn whose exchange failed was recorded");
    // B charged the withheld answer in memory only; nothing reached A.
    assert_eq!(rho_charged(&ps[1], "P1").0, 3);
    // B's next save starts a new snapshot (which replaces the broken log): the retry of the same
    // round gets the answer B withheld, charged once.
    let rep = query_turn(&ps[0], &to_b, 2).await.unwrap();
    assert_eq!(rep.answered_by, vec!["P2".to_string()]);
    assert!(rep.refused.is_empty(), "{:?}", rep.refused);
    assert_eq!(rho_charged(&ps[1], "P1").0, 3, "the retried exchange was charged twice");
    query_turn(&ps[0], &to_b, 3).await.unwrap();
    let after = evaluate(&mut ps[0].lock().unwrap()).unwrap().rmse;
    assert_eq!(after.to_bits(), reference.to_bits(), "{after} vs {reference} without the fault");
    let _ = stop.send(());
    // What B saved is what it charged.
    let saved = dpcotrain_federation::store::peek(&dir).unwrap().unwrap();
    assert_eq!(saved.requesters["P1"].ledger.as_ref().unwrap().releases.len(), 4);
}

/// With three parties, one peer answering and one unreachable is not a turn either: the
/// exchange with the unreachable one would be skipped silently.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_unreached_peer_among_answering_ones_leaves_the_turn_not_taken() {
    let ps = parties();
    let (addr, stop) = common::start(ps[1].clone(), FED).await;
    let dead = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        format!("http://{}", l.local_addr().unwrap())
    };
    let peers = vec![peer(&ps[0], "P2", &addr), peer(&ps[0], "P3", &dead)];
    let err = query_turn(&ps[0], &peers, 0).await.unwrap_err();
    assert!(matches!(err, CotrainError::TurnNotTaken { .. }), "{err}");
    assert!(ps[0].lock().unwrap().turns().is_empty());
    let _ = stop.send(());
}

/// Copy every regular file of `from` into a fresh `to` (a backup or a volume snapshot).
fn copy_dir(from: &Path, to: &Path) {
    let _ = std::fs::remove_dir_all(to);
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        if e.file_type().unwrap().is_file() {
            std::fs::copy(e.path(), to.join(e.file_name())).unwrap();
        }
    }
}

/// The ways a node's state goes back in time, applied to B's directory `dir` (`old` is a copy
/// taken two turns earlier).
#[derive(Debug, Clone, Copy)]
enum Rollback {
    /// The log cut in the middle of its last line.
    LogTruncatedMidLine,
    /// The log emptied.
    LogEmptied,
    /// The log deleted.
    LogDeleted,
    /// An older state.json, without a log.
    OldSnapshotAlone,
    /// An older consistent pair (a VM or volume snapshot restore).
    OlderPair,
    /// The whole directory replaced by a fresh one (a new ledger key).
    DirectoryReplaced,
}

fn roll_back(how: Rollback, dir: &Path, old: &Path) {
    let log = dir.join("state.log");
    match how {
        Rollback::LogTruncatedMidLine => {
            let text = std::fs::read(&log).unwrap();
            let last = text[..text.len() - 1].iter().rposition(|b| *b == b'\n').map_or(0, |i| i + 1);
            std::fs::write(&log, &text[..last + (text.len() - last) / 2]).unwrap();
        }
        Rollback::LogEmptied => std::fs::write(&log, b"").unwrap(),
        Rollback::LogDeleted => std::fs::remove_file(&log).unwrap(),
        Rollback::OldSnapshotAlone => {
            std::fs::copy(old.join("state.json"), dir.join("state.json")).unwrap();
            std::fs::remove_file(&log).unwrap();
        }
        Rollback::OlderPair => copy_dir(old, dir),
        Rollback::DirectoryReplaced => {
            std::fs::remove_dir_all(dir).unwrap();
        }
    }
}

/// What `node repair --adopt-witnessed --write` does: charge what the noted receipts prove
/// (unverifiable ones too: the replaced directory's receipts were signed under its old key) and
/// save, trusting only the heads of receipts the node signed.
fn adopt_all(store: &StateStore, p: &mut Party) {
    use dpcotrain_federation::receipt::{Adoption, adopt_noted};
    let done = adopt_noted(store, FED, p, &[], true).unwrap();
    let mut names = Vec::new();
    let mut trusted = Vec::new();
    for (a, signed) in &done {
        match a {
            Adoption::Charged { requester, receipt, .. } => {
                names.push(requester.as_str());
                if *signed {
                    trusted.push(receipt);
                }
            }
            other => panic!("not adopted: {other:?}"),
        }
    }
    store.adopt(&p.state(), &names, &trusted).unwrap();
}

/// B (`ps[1]`, its state in `dir`) answers four of A's turns; its files are copied to `old`
/// after the second. A's latest receipt from B.
async fn four_turns_copied_after_two(
    ps: &[Arc<Mutex<Party>>],
    dir: &Path,
    old: &Path,
) -> dpcotrain_cotrain::answer::Receipt {
    let (addr, stop) = serve(&ps[1], dir).await;
    let to_b = vec![peer(&ps[0], "P2", &addr)];
    for round in 0..4 {
        if round == 2 {
            copy_dir(dir, old);
        }
        query_turn(&ps[0], &to_b, round).await.unwrap();
    }
    let _ = stop.send(());
    ps[0].lock().unwrap().receipt_from("P2").expect("A holds a receipt from B")
}

/// Every rollback variant: B restarts from the rolled-back files, A shows its latest receipt,
/// B refuses (DATA_LOSS, the turn not taken) and releases nothing, and notes the receipt. After
/// `node repair --adopt-witnessed` (its library steps) B answers again, its ledger counting at
/// least what the receipt proves.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_rollback_of_a_peers_state_is_refused_until_the_receipt_is_adopted() {
    use Rollback::*;
    let tmp = tempfile::tempdir().unwrap();
    for (k, how) in [LogTruncatedMidLine, LogEmptied, LogDeleted, OldSnapshotAlone, OlderPair, DirectoryReplaced]
        .into_iter()
        .enumerate()
    {
        let ps = parties();
        let dir = tmp.path().join(format!("b{k}"));
        let old: PathBuf = tmp.path().join(format!("old{k}"));
        let receipt = four_turns_copied_after_two(&ps, &dir, &old).await;
        assert_eq!(receipt.releases, 4);
        roll_back(how, &dir, &old);
        // B restarts from what is left: a fresh party restored from the files.
        let b = parties().remove(1);
        let (addr, stop) = serve(&b, &dir).await;
        let before = rho_charged(&b, "P1");
        assert!(before.1 < receipt.rho, "{how:?}: the files were not rolled back ({before:?})");
        let to_b = vec![peer(&ps[0], "P2", &addr)];
        let err = query_turn(&ps[0], &to_b, 4).await.unwrap_err();
        let msg = err.to_string();
        assert!(matches!(err, CotrainError::TurnNotTaken { round: 4, .. }), "{how:?}: {msg}");
        assert!(data_loss(&err), "{how:?}: {msg}");
        let expect = if matches!(how, DirectoryReplaced) { "cannot verify" } else { "behind a receipt it signed" };
        assert!(msg.contains(expect) && msg.contains("node repair"), "{how:?}: {msg}");
        assert_eq!(rho_charged(&b, "P1"), before, "{how:?}: a rolled-back node released");
        assert!(ps[0].lock().unwrap().turn(4).is_none());
        let _ = stop.send(());
        assert_eq!(witnessed(&dir).unwrap().get("P1"), Some(&receipt), "{how:?}: the receipt was not noted");
        // Recovery (what `node repair --adopt-witnessed --write` does).
        {
            let b = parties().remove(1);
            let store = open(&dir).await;
            if let Some(st) = store.load().unwrap() {
                b.lock().unwrap().restore(&st).unwrap();
            }
            adopt_all(&store, &mut b.lock().unwrap());
        }
        let b = parties().remove(1);
        let (addr, stop) = serve(&b, &dir).await;
        let to_b = vec![peer(&ps[0], "P2", &addr)];
        let rep = query_turn(&ps[0], &to_b, 4).await.unwrap();
        assert_eq!(rep.answered_by, vec!["P2".to_string()], "{how:?}: {:?}", rep.refused);
        let (_, rho) = rho_charged(&b, "P1");
        assert!(rho > receipt.rho, "{how:?}: the ledger counts {rho}, the receipt {}", receipt.rho);
        let _ = stop.send(());
    }
}

/// A requester that hides its receipts is not caught by them; the orchestrator's head receipt
/// is. B is restored from an older copy; a requester with no receipt gets an answer (nothing
/// can tell yet), then the orchestrator's next Status shows B its head receipt: B refuses with
/// DATA_LOSS and releases nothing more to anyone — also after a restart — until the spend is
/// adopted. The receipts survive in the orchestrator's file between runs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_orchestrators_head_receipt_stops_a_rolled_back_node_for_everyone() {
    use dpcotrain_federation::orchestrator::Orchestrator;
    let tmp = tempfile::tempdir().unwrap();
    let (dir, old, receipts) = (tmp.path().join("b"), tmp.path().join("old"), tmp.path().join("receipts.json"));
    let orch = |addr: &str| {
        Orchestrator::new(
            vec![("P2".into(), addr.into(), None, None)],
            Retry { give_up_after: Duration::from_millis(300), ..Retry::default() },
        )
        .unwrap()
        .with_receipts_file(&receipts)
        .unwrap()
    };
    let ps = parties();
    let (addr, stop) = serve(&ps[1], &dir).await;
    let to_b = vec![peer(&ps[0], "P2", &addr)];
    query_turn(&ps[0], &to_b, 0).await.unwrap();
    orch(&addr).status(0).await.unwrap();
    copy_dir(&dir, &old);
    query_turn(&ps[0], &to_b, 1).await.unwrap();
    query_turn(&ps[0], &to_b, 2).await.unwrap();
    let head = orch(&addr).status(0).await.unwrap().head.expect("a node with a store signs its head");
    assert_eq!(orch(&addr).receipt("P2").unwrap().seq, head.seq, "kept in the file between runs");
    let _ = stop.send(());
    copy_dir(&old, &dir);
    let b = parties().remove(1);
    let (addr, stop) = serve(&b, &dir).await;
    // A requester without receipts (it hides them, or lost its own state) is answered.
    let hider = parties().remove(0);
    let to_b = vec![peer(&hider, "P2", &addr)];
    query_turn(&hider, &to_b, 0).await.unwrap();
    let released = rho_charged(&b, "P1");
    // The orchestrator's Status shows B its head receipt: B is behind it.
    let e = orch(&addr).status(0).await.unwrap_err();
    assert!(e.contains("DataLoss") && e.contains("behind a receipt it signed for *"), "{e}");
    let err = query_turn(&hider, &to_b, 1).await.unwrap_err();
    assert!(data_loss(&err), "{err}");
    assert_eq!(rho_charged(&b, "P1"), released, "a halted node released");
    let _ = stop.send(());
    // A restart does not lift it: the receipt was noted.
    let b = parties().remove(1);
    let (addr, stop) = serve(&b, &dir).await;
    let hider = parties().remove(0);
    let err = query_turn(&hider, &[peer(&hider, "P2", &addr)], 0).await.unwrap_err();
    assert!(data_loss(&err), "{err}");
    let _ = stop.send(());
    assert!(witnessed(&dir).unwrap().contains_key("*"));
    // Deleting every file beside the state, its log and its key (the noted receipt lived in
    // witnessed.json, and a restart without it used to release to the hider again) forgets
    // nothing: the note is in the MAC'd state itself.
    for e in std::fs::read_dir(&dir).unwrap() {
        let name = e.unwrap().file_name().into_string().unwrap();
        if !["state.json", "state.log", "ledger.key", "LOCK"].contains(&name.as_str()) {
            std::fs::remove_file(dir.join(&name)).unwrap();
        }
    }
    let b = parties().remove(1);
    let (addr, stop) = serve(&b, &dir).await;
    let hider = parties().remove(0);
    let err = query_turn(&hider, &[peer(&hider, "P2", &addr)], 0).await.unwrap_err();
    assert!(data_loss(&err), "a restart without its side files forgot the rollback: {err}");
    assert_eq!(rho_charged(&b, "P1"), released, "released after the side files were deleted");
    let _ = stop.send(());
}

/// A rolled-back node whose counters have caught up: B is restored from an older copy, a
/// requester that hides its receipts asks until B's entry number and ρ for it are again at
/// least what A's receipt records (so that comparing counters, as receipts used to, shows
/// nothing), and B re-released what the lost entries had released, with fresh noise. A's
/// genuine receipt names the entry *and its head*; B's chain has another entry there, so B
/// refuses A (DATA_LOSS), releases nothing to it, and notes the receipt.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rollback_whose_counters_caught_up_is_caught_by_the_chain_head() {
    let tmp = tempfile::tempdir().unwrap();
    let (dir, old) = (tmp.path().join("b"), tmp.path().join("old"));
    let ps = parties();
    let receipt = four_turns_copied_after_two(&ps, &dir, &old).await;
    assert_eq!(receipt.head.len(), 32, "{receipt:?}");
    copy_dir(&old, &dir);
    let b = parties().remove(1);
    let (addr, stop) = serve(&b, &dir).await;
    // The hider asks until B's counters are back where A's receipt says they were.
    let hider = parties().remove(0);
    let to_b_hidden = vec![peer(&hider, "P2", &addr)];
    let seq_now = || {
        let log = std::fs::read_to_string(dir.join("state.log")).unwrap_or_default();
        let snap: serde_json::Value = serde_json::from_slice(&std::fs::read(dir.join("state.json")).unwrap()).unwrap();
        log.lines()
            .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok()?["seq"].as_u64())
            .fold(snap["seq"].as_u64().unwrap_or(0), u64::max)
    };
    let mut round = 0;
    while seq_now() < receipt.seq || rho_charged(&b, "P1").1 < receipt.rho {
        query_turn(&hider, &to_b_hidden, round).await.unwrap();
        round += 1;
        assert!(round < 12, "B's counters never caught up: entry {} of {}", seq_now(), receipt.seq);
    }
    let before = rho_charged(&b, "P1");
    let err = query_turn(&ps[0], &[peer(&ps[0], "P2", &addr)], 4).await.unwrap_err();
    let msg = err.to_string();
    assert!(matches!(err, CotrainError::TurnNotTaken { round: 4, .. }), "{msg}");
    assert!(data_loss(&err) && msg.contains("not the one it signed a receipt for"), "{msg}");
    assert_eq!(rho_charged(&b, "P1"), before, "B released to A from a forked chain");
    let _ = stop.send(());
    assert_eq!(witnessed(&dir).unwrap().get("P1"), Some(&receipt), "the receipt was not noted");
    // Adopting the receipt (what `node repair --adopt-witnessed --write` does) takes its head
    // as the chain's entry there: A is answered again.
    {
        let b = parties().remove(1);
        let store = open(&dir).await;
        let st = store.load().unwrap().unwrap();
        b.lock().unwrap().restore(&st).unwrap();
        let mut p = b.lock().unwrap();
        let now = p.ledger("P1").unwrap().rho_spent();
        adopt_all(&store, &mut p);
        // The lost branch's spend is charged on top: B's ledger cannot tell which of its new
        // releases repeat the lost ones (it used to charge nothing here, ρ having caught up).
        let after = p.ledger("P1").unwrap().rho_spent();
        assert!(after >= (now + receipt.rho) * (1.0 - 1e-12), "charged {after}, not {now} + {}", receipt.rho);
    }
    let b = parties().remove(1);
    let (addr, stop) = serve(&b, &dir).await;
    let rep = query_turn(&ps[0], &[peer(&ps[0], "P2", &addr)], 4).await.unwrap();
    assert_eq!(rep.answered_by, vec!["P2".to_string()], "{:?}", rep.refused);
    let _ = stop.send(());
}
