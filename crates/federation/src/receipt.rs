//! Receipts: a node's signed statement, after a release was saved, of how far its state had got
//! and what its ledger had charged the requester (docs/decisions.md D28).
//!
//! The requester keeps the latest receipt from each peer (in the turn that absorbed the
//! answer) and shows it with its next request. The node checks it against its own state
//! before answering: a state restored from an older copy of its files (a VM or volume
//! snapshot, a backup, a log cut short) is *behind* a receipt it signed, and the node refuses
//! with `DATA_LOSS` instead of releasing again as if the lost releases never happened. A
//! receipt names the chain's entry *and its head* (the entry's MAC, which chains every entry
//! before it), so a restored state whose entry numbers and ρ have caught up since (a requester
//! that hides its receipts asked until they did) is caught too: its entry there has another
//! head. The node notes the receipt in its chain (under the snapshot's MAC: deleting a file
//! does not make it forget), so that `dpcotrain node repair --adopt-witnessed` can charge the
//! missing spend. A receipt the node cannot verify (its ledger key changed: the
//! state directory was replaced) is treated the same way when it claims more than the ledger
//! counts; one that claims no more is harmless, genuine or not.
//!
//! The orchestrator does the same with each node's *head* receipt (signed for
//! [`EVERY_REQUESTER`]: the chain position and the ledgers' totals), returned by `Status` and
//! shown back with the next `Status`; a node behind it stops releasing to anyone.
//!
//! What this covers: a rollback of a node's files (by accident, or by an operator restoring a
//! snapshot), as soon as an honest requester or the orchestrator that saw a later state calls.
//! What it does not: a requester that hides its receipts (it is the party that would gain from
//! the lost entries) calling before the orchestrator does; an orchestrator that colludes with
//! it; a node's operator who runs modified code (they hold the labels anyway).

use crate::store::{StateStore, StoreError};
use dpcotrain_cotrain::Party;
use dpcotrain_cotrain::Receipt;

/// The bytes a receipt's MAC covers.
fn message(federation: &str, responder: &str, requester: &str, w: &Receipt) -> Vec<u8> {
    format!(
        "dpcotrain receipt 2\n{federation}\n{responder}\n{requester}\n{}\n{}\n{}\n{:016x}\n",
        w.seq,
        w.head,
        w.releases,
        w.rho.to_bits()
    )
    .into_bytes()
}

/// The name a node's head receipt is signed for: every requester together.
pub const EVERY_REQUESTER: &str = "*";

/// What `party`'s ledger has charged `requester` (every requester for [`EVERY_REQUESTER`]):
/// (releases, ρ).
fn charged(party: &Party, requester: &str) -> (u64, f64) {
    if requester == EVERY_REQUESTER {
        let releases = party.requesters().iter().filter_map(|r| party.ledger(r)).map(|l| l.releases.len() as u64).sum();
        return (releases, party.privacy_spent_total().0);
    }
    party.ledger(requester).map_or((0, 0.0), |l| (l.releases.len() as u64, l.rho_spent()))
}

/// The receipt for `requester` as the node's state stands now (call after the save).
pub fn sign(store: &StateStore, federation: &str, party: &Party, requester: &str) -> Result<Receipt, StoreError> {
    let seq = store.seq();
    let head = store.head_at(seq)?.unwrap_or_default();
    let (releases, rho) = charged(party, requester);
    let mut r = Receipt { seq, head, releases, rho, mac: String::new() };
    r.mac = store.sign(&message(federation, party.name(), requester, &r))?;
    Ok(r)
}

/// Whether this node signed `w` for `requester` (its ledger key, this federation and party).
pub fn verify(
    store: &StateStore,
    federation: &str,
    party: &str,
    requester: &str,
    w: &Receipt,
) -> Result<bool, StoreError> {
    store.verify(&message(federation, party, requester, w), &w.mac)
}

/// Why a receipt cannot be adopted at all, signed or not: numbers no node can have signed.
pub fn implausible(w: &Receipt) -> Option<String> {
    if w.seq > crate::store::MAX_SEQ {
        Some(format!("entry {} is beyond the largest a chain may reach ({})", w.seq, crate::store::MAX_SEQ))
    } else if !(w.rho.is_finite() && w.rho >= 0.0) {
        Some(format!("ρ = {} is not a finite non-negative number", w.rho))
    } else {
        None
    }
}

/// Why a node may not answer `requester`, who shows `witness`.
#[derive(Debug, thiserror::Error)]
pub enum Behind {
    #[error(
        "this node's state is behind a receipt it signed for {requester}: the receipt records entry {receipt_seq} with ρ = {receipt_rho} over {receipt_releases} releases; this node's state is at entry {seq} with ρ = {rho} over {releases} releases. Its state files were restored from an older copy or lost their last entries, so it will not release to {requester} as if those releases never happened. {RECOVER}"
    )]
    Rolled {
        requester: String,
        receipt_seq: u64,
        receipt_rho: f64,
        receipt_releases: u64,
        seq: u64,
        rho: f64,
        releases: u64,
    },
    #[error(
        "{requester} shows a receipt (entry {receipt_seq}, ρ = {receipt_rho}) ahead of this node's state that this node cannot verify: either its ledger key changed (its state directory was replaced or deleted since it signed the receipt) or the receipt is not genuine. It will not release to {requester} until the spend that receipt records is counted. {RECOVER}"
    )]
    Unverified { requester: String, receipt_seq: u64, receipt_rho: f64 },
    #[error(
        "this node's state is not the one it signed a receipt for {requester} at: the receipt records entry {receipt_seq} with chain head {receipt_head}, and this node's entry {receipt_seq} has head {head} (it is at entry {seq} now). Its state files were restored from an older copy and have gone on since, so the releases the receipt counts may be missing from its ledger; it will not release to {requester}. {RECOVER}"
    )]
    Forked { requester: String, receipt_seq: u64, receipt_head: String, head: String, seq: u64 },
}

const RECOVER: &str = "To recover, stop the node and put back the newest copy of its state directory; if there is none, run `dpcotrain node repair --config <party.toml> --adopt-witnessed --write`, which charges the ledger the spend the receipt proves (noted in the state).";

/// Relative slack on ρ: a ledger that adopted a receipt's spend sums to it up to round-off.
const RHO_TOLERANCE: f64 = 1e-12;

/// Check `witness` (shown by `requester`) against the node's state; a receipt ahead of it, or
/// one it cannot verify, or one whose entry this node's chain has with another head, is noted
/// (in the chain itself) and refused.
pub fn check(
    store: &StateStore,
    federation: &str,
    party: &Party,
    requester: &str,
    witness: &Receipt,
) -> Result<Result<(), Behind>, StoreError> {
    let w = witness;
    let signed = verify(store, federation, party.name(), requester, w)?;
    let seq = store.seq();
    let (releases, rho) = charged(party, requester);
    // Only a state behind what the receipt claims is refused: a receipt that claims less than
    // the ledger counts is harmless, genuine or not. The MAC tells a rollback (a receipt this
    // node signed) from a replaced state directory or a receipt it never signed. A receipt
    // this node signed whose entry its chain has with another head is a rollback whose entry
    // numbers (and ρ) have caught up since: counters alone no longer show it.
    let behind = seq < w.seq || rho < w.rho * (1.0 - RHO_TOLERANCE);
    let forked = match (signed && !behind && !w.head.is_empty(), store.accepts(w.seq, &w.head)?) {
        (true, Some(false)) => Some(store.head_at(w.seq)?.unwrap_or_default()),
        _ => None,
    };
    let verdict = if let Some(head) = forked {
        Err(Behind::Forked { requester: requester.into(), receipt_seq: w.seq, receipt_head: w.head.clone(), head, seq })
    } else if !behind {
        Ok(())
    } else if signed {
        Err(Behind::Rolled {
            requester: requester.into(),
            receipt_seq: w.seq,
            receipt_rho: w.rho,
            receipt_releases: w.releases,
            seq,
            rho,
            releases,
        })
    } else {
        Err(Behind::Unverified { requester: requester.into(), receipt_seq: w.seq, receipt_rho: w.rho })
    };
    if verdict.is_err() {
        store.record_witness(requester, w, &party.state())?;
    }
    Ok(verdict)
}

/// What adopting one noted receipt did (`node repair --adopt-witnessed`).
#[derive(Debug, Clone, PartialEq)]
pub enum Adoption {
    /// `requester`'s ledger now charges at least `rho_to` (`added` more). `forked`: the chain
    /// has another entry where the receipt's head was, so the lost branch's releases are charged
    /// on top of what the ledger counts (it cannot tell which of them the new branch repeats).
    Charged { requester: String, receipt: Receipt, rho_to: f64, added: f64, forked: bool },
    /// The orchestrator's head receipt: a total, not who received it; every requester with a
    /// ledger here and every configured peer is charged `gap`.
    Total { receipt: Receipt, gap: f64, forked: bool },
    /// Not adopted (it stays noted, and the node keeps refusing its holder).
    Refused { requester: String, why: String },
}

#[derive(Debug, thiserror::Error)]
pub enum AdoptError {
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error(transparent)]
    Party(#[from] dpcotrain_cotrain::CotrainError),
}

/// Charge `party` (restored from `store`) the spend the receipts noted in `store` prove, in
/// memory: receipts this node signed (and, with `unverified`, ones signed under another ledger
/// key, which may be forged), never one numbered beyond what a chain can reach. `peers`: every
/// configured peer (a total is charged to each). Save with [`StateStore::adopt`], giving it the
/// requesters adopted and the receipts this node signed (only their heads are trusted).
pub fn adopt_noted(
    store: &StateStore,
    federation: &str,
    party: &mut Party,
    peers: &[String],
    unverified: bool,
) -> Result<Vec<(Adoption, bool)>, AdoptError> {
    let mut out = Vec::new();
    for (requester, r) in store.noted()? {
        if let Some(why) = implausible(&r) {
            out.push((Adoption::Refused { requester, why: format!("{why}; no node signed it") }, false));
            continue;
        }
        let signed = verify(store, federation, party.name(), &requester, &r)?;
        if !signed && !unverified {
            let why = format!(
                "this node cannot verify the receipt (entry {}, rho {:.6}): it was signed under another ledger key, or not by this node. If the state directory was replaced or lost, --adopt-unverified adopts it anyway (it charges the spend the receipt claims)",
                r.seq, r.rho
            );
            out.push((Adoption::Refused { requester, why }, false));
            continue;
        }
        let forked = signed && !r.head.is_empty() && store.accepts(r.seq, &r.head)? == Some(false);
        let id = format!("restored from receipt {requester}@{}", r.seq);
        let charged = |p: &Party, who: &str| p.ledger(who).map_or(0.0, dpcotrain_privacy::Ledger::rho_spent);
        if requester == EVERY_REQUESTER {
            let gap = if forked { r.rho } else { r.rho - party.privacy_spent_total().0 };
            if gap > 0.0 {
                let mut who = party.requesters();
                who.extend(peers.iter().cloned());
                who.sort();
                who.dedup();
                for req in who {
                    let now = charged(party, &req);
                    party.charge_missing(&req, now + gap, &id)?;
                }
            }
            out.push((Adoption::Total { receipt: r, gap: gap.max(0.0), forked }, signed));
            continue;
        }
        let rho_to = if forked { charged(party, &requester) + r.rho } else { r.rho };
        let added = party.charge_missing(&requester, rho_to, &id)?;
        out.push((Adoption::Charged { requester, receipt: r, rho_to, added, forked }, signed));
    }
    Ok(out)
}
