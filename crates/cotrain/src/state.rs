//! A party's durable state: what must survive a crash so that a restarted party never
//! re-spends privacy or re-draws noise for something it has already released.
//!
//! The private data, the kernel and the private-only fit are *not* stored: they are rebuilt
//! from the party's configuration (the fit is deterministic). What is stored is everything
//! the party has said or heard:
//! - per requester: the privacy ledger, the indices answered, the released means and the
//!   current noise path (its points, values and exact generator position);
//! - the release-once noise vector (drawn once, possibly from OS entropy);
//! - the DP θ selection (its noisy counts and choice: drawn once, possibly from OS entropy);
//! - every answer by request id (so a retried id returns the same bytes);
//! - every turn folded into the model (replayed in order to rebuild the augmented model).
//!
//! A node writes this before any answer leaves it (see `dpcotrain-federation`'s store).

use crate::CotrainError;
use crate::answer::Answer;
use crate::answer_cache::AnswerCache;
use crate::error::{LedgerMismatch, StateRefusal};
use crate::party::{BatchRelease, Party, QueryPath, RequesterState, THETA_SELECTION_ID, TurnRecord};
use crate::release_model::ThetaSelection;
use dpcotrain_privacy::Ledger;
use dpcotrain_privacy::noise::{NoisePath, NoisePathState};
use nalgebra::DVector;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// Format version of [`PartyState`].
pub const STATE_FORMAT: u32 = 1;

#[derive(Clone, PartialEq, Serialize, Deserialize)]
pub struct RequesterRecord {
    pub answered: Vec<usize>,
    /// (pool index, released mean), sorted by index. With the noise records below it would
    /// give the private means back, so no other crate can read it.
    pub(crate) released: Vec<(usize, f64)>,
    pub ledger: Option<Ledger>,
    /// The current noise path (policy per-query).
    pub path: Option<PathRecord>,
    /// Policy batches: the finite releases made (their means are in `released`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub batches: Vec<BatchRelease>,
}

/// A requester's per-query noise path as saved: written as the array `[version, path, σ]`
/// that saved states have always held.
#[derive(Clone, PartialEq, Serialize, Deserialize)]
#[serde(from = "PathArray", into = "PathArray")]
pub struct PathRecord {
    /// The model version (mean function) the path belongs to.
    pub(crate) version: u64,
    /// The path's state: its draws so far are the noise of released means (secret).
    pub(crate) path: NoisePathState,
    /// The scale σ of its draws.
    pub(crate) sigma: f64,
}

/// [`PathRecord`]'s saved form, `[version, path, σ]`: a type only this crate names, so the
/// conversion that unwraps the path is not an API.
#[derive(Serialize, Deserialize)]
struct PathArray(u64, NoisePathState, f64);

impl From<PathArray> for PathRecord {
    fn from(PathArray(version, path, sigma): PathArray) -> Self {
        PathRecord { version, path, sigma }
    }
}

impl From<PathRecord> for PathArray {
    fn from(r: PathRecord) -> Self {
        PathArray(r.version, r.path, r.sigma)
    }
}

#[derive(Clone, PartialEq, Serialize, Deserialize)]
pub struct FrozenRecord {
    pub(crate) sigma: f64,
    pub(crate) sensitivity: f64,
    /// The noise of the release-once draw (secret: with a released mean it gives the private
    /// mean back). Only this crate reads it; the store serialises it whole.
    pub(crate) noise: DVector<f64>,
}

// `Debug` of the records that hold release noise or released means shows their sizes, never
// the values: a stray `{:?}` in a log must not give a private mean back.
impl std::fmt::Debug for RequesterRecord {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RequesterRecord")
            .field("answered", &self.answered.len())
            .field("released", &self.released.len())
            .field("ledger", &self.ledger)
            .field("path", &self.path)
            .field("batches", &self.batches.len())
            .finish()
    }
}

impl std::fmt::Debug for PathRecord {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PathRecord").field("version", &self.version).field("sigma", &self.sigma).finish_non_exhaustive()
    }
}

impl std::fmt::Debug for FrozenRecord {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FrozenRecord")
            .field("sigma", &self.sigma)
            .field("sensitivity", &self.sensitivity)
            .field("noise", &format_args!("[{} values]", self.noise.len()))
            .finish()
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PartyState {
    pub format: u32,
    pub party: String,
    pub model_version: u64,
    pub requesters: BTreeMap<String, RequesterRecord>,
    pub frozen: Option<FrozenRecord>,
    /// The DP θ selection made at construction (θ policy `select`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub theta_selection: Option<ThetaSelection>,
    pub answers: BTreeMap<String, Answer>,
    /// Keys of `answers`, oldest first per requester (the cache's eviction order).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub answer_order: Vec<String>,
    pub turns: Vec<TurnRecord>,
}

/// What changed between two saved states of one party: what a node appends to its state log
/// instead of rewriting the whole state ([`PartyState::delta_to`], [`PartyState::apply`]).
/// Requester records that changed are carried whole; answers and turns only where they differ.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StateDelta {
    pub model_version: u64,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub requesters: BTreeMap<String, RequesterRecord>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub requesters_removed: Vec<String>,
    /// `Some(f)`: the release-once record became `f`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub frozen: Option<Option<FrozenRecord>>,
    /// `Some(t)`: the θ selection record became `t`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub theta_selection: Option<Option<ThetaSelection>>,
    /// Answers added, oldest first (appended to the order).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub answers_added: Vec<(String, Answer)>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub answers_removed: Vec<String>,
    /// Turns from this position on are replaced by `turns`.
    pub turns_from: usize,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub turns: Vec<TurnRecord>,
}

impl StateDelta {
    /// Whether applying it changes nothing.
    pub fn is_empty(&self, base: &PartyState) -> bool {
        self.model_version == base.model_version
            && self.requesters.is_empty()
            && self.requesters_removed.is_empty()
            && self.frozen.is_none()
            && self.theta_selection.is_none()
            && self.answers_added.is_empty()
            && self.answers_removed.is_empty()
            && self.turns_from == base.turns.len()
            && self.turns.is_empty()
    }
}

impl PartyState {
    /// The delta that turns `self` into `new` (same party): `self.apply(&d)` equals `new`. `None`
    /// when the answers are not ordered as the answer cache orders them (survivors in their
    /// order, new ones appended); the caller then saves `new` whole.
    pub fn delta_to(&self, new: &PartyState) -> Option<StateDelta> {
        if self.format != new.format || self.party != new.party {
            return None;
        }
        let requesters = new
            .requesters
            .iter()
            .filter(|(k, v)| self.requesters.get(*k) != Some(*v))
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        let requesters_removed = self.requesters.keys().filter(|k| !new.requesters.contains_key(*k)).cloned().collect();
        let frozen = (self.frozen != new.frozen).then(|| new.frozen.clone());
        let theta_selection = (self.theta_selection != new.theta_selection).then(|| new.theta_selection.clone());
        let answers_removed: Vec<String> =
            self.answer_order.iter().filter(|k| !new.answers.contains_key(*k)).cloned().collect();
        let answers_added: Vec<(String, Answer)> = new
            .answer_order
            .iter()
            .filter(|k| !self.answers.contains_key(*k))
            .filter_map(|k| new.answers.get(k).map(|a| (k.clone(), a.clone())))
            .collect();
        let turns_from = self
            .turns
            .iter()
            .zip(&new.turns)
            .position(|(a, b)| a != b)
            .unwrap_or(self.turns.len().min(new.turns.len()));
        // Requesters, the frozen record and turns are carried whole where they differ, so they
        // come out exact. Answers are never changed in place (the cache only inserts at the end
        // and evicts), so the delta is exact when the order says so: both states list every
        // answer once, and the new order is the old one without the removed keys plus the added
        // ones. Anything else (a state saved before the order was kept) is saved whole.
        let listed = |s: &PartyState| {
            s.answers.len() == s.answer_order.len() && s.answer_order.iter().all(|k| s.answers.contains_key(k))
        };
        if !listed(self) || !listed(new) {
            return None;
        }
        let removed: std::collections::HashSet<&String> = answers_removed.iter().collect();
        let expected =
            self.answer_order.iter().filter(|k| !removed.contains(k)).chain(answers_added.iter().map(|(k, _)| k));
        if !expected.eq(new.answer_order.iter()) {
            return None;
        }
        // A cheap guard against an answer changed in place after all (its means, indices and
        // version, not its matrices): such a state is saved whole.
        let same =
            |a: &Answer, b: &Answer| a.indices == b.indices && a.mean == b.mean && a.model_version == b.model_version;
        if self.answers.iter().any(|(k, a)| new.answers.get(k).is_some_and(|b| !same(a, b))) {
            return None;
        }
        Some(StateDelta {
            model_version: new.model_version,
            requesters,
            requesters_removed,
            frozen,
            theta_selection,
            answers_added,
            answers_removed,
            turns_from,
            turns: new.turns[turns_from..].to_vec(),
        })
    }

    /// Apply a delta made by [`PartyState::delta_to`]. A delta that does not fit is refused
    /// before anything is changed (the store relies on it to keep the last proven state).
    pub fn apply(&mut self, d: &StateDelta) -> Result<(), CotrainError> {
        if d.turns_from > self.turns.len() {
            return Err(CotrainError::state(
                &self.party,
                StateRefusal::Delta { from: d.turns_from, turns: self.turns.len() },
            ));
        }
        self.model_version = d.model_version;
        for k in &d.requesters_removed {
            self.requesters.remove(k);
        }
        for (k, v) in &d.requesters {
            self.requesters.insert(k.clone(), v.clone());
        }
        if let Some(f) = &d.frozen {
            self.frozen = f.clone();
        }
        if let Some(t) = &d.theta_selection {
            self.theta_selection = t.clone();
        }
        for k in &d.answers_removed {
            self.answers.remove(k);
        }
        let removed: std::collections::HashSet<&String> = d.answers_removed.iter().collect();
        self.answer_order.retain(|k| !removed.contains(k));
        for (k, a) in &d.answers_added {
            if self.answers.insert(k.clone(), a.clone()).is_none() {
                self.answer_order.push(k.clone());
            }
        }
        self.turns.truncate(d.turns_from);
        self.turns.extend(d.turns.iter().cloned());
        Ok(())
    }

    /// Total ρ charged across all requesters' ledgers.
    pub fn rho_spent(&self) -> f64 {
        self.requesters.values().filter_map(|r| r.ledger.as_ref()).map(|l| l.rho_spent()).sum()
    }
}

/// The ledger agrees with what was released: every release's ρ is Δ²/(2σ²) of its own Δ and σ,
/// and every finite batch released to the requester has its charge (same id, Δ and σ). A
/// ledger edited outside the node (a release dropped, a ρ zeroed) fails here, naming the entry.
fn check_ledger(name: &str, r: &RequesterRecord, theta: Option<&ThetaSelection>) -> Result<(), StateRefusal> {
    let bad = |mismatch: LedgerMismatch| StateRefusal::Ledger { requester: name.to_string(), mismatch };
    let Some(ledger) = &r.ledger else {
        return Ok(());
    };
    // A noisy θ vote is charged to every ledger before anything else.
    if let Some(t) = theta.filter(|t| t.sigma > 0.0) {
        match ledger.releases.iter().find(|rel| rel.id == THETA_SELECTION_ID) {
            Some(rel) if close(rel.sigma, t.sigma) && close(rel.sensitivity, t.sensitivity) => {}
            Some(rel) => {
                return Err(bad(LedgerMismatch::ThetaVote {
                    sigma: rel.sigma,
                    sensitivity: rel.sensitivity,
                    vote_sigma: t.sigma,
                    vote_sensitivity: t.sensitivity,
                }));
            }
            None => return Err(bad(LedgerMismatch::NoThetaVote { id: THETA_SELECTION_ID })),
        }
    }
    for rel in &ledger.releases {
        let expect = dpcotrain_privacy::accountant::rho_of(rel.sensitivity, rel.sigma);
        if !(rel.rho.is_finite() && rel.rho >= 0.0 && close(rel.rho, expect)) {
            return Err(bad(LedgerMismatch::Rho {
                id: rel.id.clone(),
                rho: rel.rho,
                sensitivity: rel.sensitivity,
                sigma: rel.sigma,
                expected: expect,
            }));
        }
    }
    for (k, b) in r.batches.iter().enumerate().filter(|(_, b)| b.sigma > 0.0) {
        let id = format!("{name}#batch{k}");
        match ledger.releases.iter().find(|rel| rel.id == id) {
            Some(rel) if close(rel.sigma, b.sigma) && close(rel.sensitivity, b.sensitivity) => {}
            Some(rel) => {
                return Err(bad(LedgerMismatch::Batch {
                    id,
                    batch: k,
                    sigma: rel.sigma,
                    sensitivity: rel.sensitivity,
                    batch_sigma: b.sigma,
                    batch_sensitivity: b.sensitivity,
                }));
            }
            None => {
                return Err(bad(LedgerMismatch::NoBatchCharge { id, batch: k, indices: b.indices.len() }));
            }
        }
    }
    if !r.released.is_empty() && ledger.releases.is_empty() {
        return Err(bad(LedgerMismatch::NoRelease { released: r.released.len() }));
    }
    Ok(())
}

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() <= 1e-9 * a.abs().max(b.abs()).max(1e-300)
}

impl Party {
    /// Snapshot of everything the party has released or absorbed.
    pub fn state(&self) -> PartyState {
        let requesters = self
            .requesters
            .iter()
            .map(|(name, st)| {
                let mut released: Vec<(usize, f64)> = st.released.iter().map(|(&i, &m)| (i, m)).collect();
                released.sort_by_key(|&(i, _)| i);
                let rec = RequesterRecord {
                    answered: st.answered.clone(),
                    released,
                    ledger: st.ledger.clone(),
                    path: st.path.as_ref().map(|p| PathRecord {
                        version: p.version,
                        path: p.path.state(),
                        sigma: p.sigma,
                    }),
                    batches: st.batches.clone(),
                };
                (name.clone(), rec)
            })
            .collect();
        let (answers, answer_order) = self.cache.export();
        PartyState {
            format: STATE_FORMAT,
            party: self.name.clone(),
            model_version: self.model.version,
            requesters,
            frozen: self.frozen.as_ref().map(|f| FrozenRecord {
                sigma: f.sigma,
                sensitivity: f.sensitivity,
                noise: f.noise.clone(),
            }),
            theta_selection: self.theta_selection.clone(),
            answers,
            answer_order,
            turns: self.turns.clone(),
        }
    }

    /// Resume from a snapshot. `self` must be freshly built from the same configuration and
    /// data (nothing absorbed or released yet); the turns are replayed and checked against the
    /// recorded objectives, the release-once σ against the recomputed one — a mismatch means
    /// the data or configuration changed, and is refused rather than silently released anew.
    pub fn restore(&mut self, s: &PartyState) -> Result<(), CotrainError> {
        let bad = |refusal: StateRefusal| CotrainError::state(&s.party, refusal);
        if s.format != STATE_FORMAT {
            return Err(bad(StateRefusal::Format { saved: s.format, expected: STATE_FORMAT }));
        }
        if s.party != self.name {
            return Err(bad(StateRefusal::OtherParty { node: self.name.clone() }));
        }
        if !self.turns.is_empty() || !self.requesters.is_empty() || !self.cache.is_empty() {
            return Err(bad(StateRefusal::NotFresh));
        }
        let pool = self.data.pool_size();
        // The θ selection first: it was drawn once (maybe from OS entropy) and everything
        // released since used it, so the saved one replaces this party's fresh draw, and the
        // release model (and a release-once freeze) is rebuilt on it.
        match (&self.theta_selection, &s.theta_selection) {
            (None, None) => {}
            (Some(fresh), Some(saved)) => {
                let (grid, _) = crate::release_model::theta_grid(
                    self.dp
                        .theta
                        .public_default()
                        .ok_or_else(|| bad(StateRefusal::PolicyChanged { what: "θ policy" }))?,
                );
                if grid.get(saved.winner) != Some(&saved.chosen) || saved.noisy_counts.len() != grid.len() {
                    return Err(bad(StateRefusal::ThetaGrid));
                }
                // The saved vote must have been released under the settings in force now: its
                // noise is what every ledger charges for it (ρ = Δ²/σ²), and a vote saved with
                // DP off (σ = 0) or another θ-vote ε would otherwise be kept and charged as if
                // it had this node's noise. Refused here, before anything is released.
                if !close(saved.sigma, fresh.sigma)
                    || !close(saved.sensitivity, fresh.sensitivity)
                    || saved.groups != fresh.groups
                {
                    return Err(bad(StateRefusal::ThetaVote {
                        saved_sigma: saved.sigma,
                        saved_sensitivity: saved.sensitivity,
                        saved_groups: saved.groups,
                        sigma: fresh.sigma,
                        sensitivity: fresh.sensitivity,
                        groups: fresh.groups,
                    }));
                }
                if self.theta_selection.as_ref() != Some(saved) {
                    self.theta_selection = Some(saved.clone());
                    self.rebuild_release()?;
                }
            }
            _ => return Err(bad(StateRefusal::PolicyChanged { what: "θ policy" })),
        }
        for t in &s.turns {
            let replayed = self.fold_in(t.round, t.index, t.answers.clone(), t.refused.clone())?.objective;
            if let Some(rmse) = t.test_rmse {
                self.record_test_rmse(t.round, rmse);
            }
            match (replayed, t.objective) {
                (None, None) => {}
                (Some(a), Some(b)) if close(a, b) => {}
                (a, b) => {
                    return Err(bad(StateRefusal::Replay { round: t.round, replayed: a, saved: b }));
                }
            }
        }
        if self.model.version != s.model_version {
            return Err(bad(StateRefusal::Version { replayed: self.model.version, saved: s.model_version }));
        }
        match (&mut self.frozen, &s.frozen) {
            (None, None) => {}
            (Some(f), Some(r)) => {
                if !close(f.sigma, r.sigma) || !close(f.sensitivity, r.sensitivity) || f.noise.len() != r.noise.len() {
                    return Err(bad(StateRefusal::ReleaseOnce {
                        saved_sigma: r.sigma,
                        saved_sensitivity: r.sensitivity,
                        sigma: f.sigma,
                        sensitivity: f.sensitivity,
                    }));
                }
                f.noise = r.noise.clone();
            }
            _ => return Err(bad(StateRefusal::PolicyChanged { what: "release policy" })),
        }
        for (name, r) in &s.requesters {
            if let Some(&(i, _)) = r.released.iter().find(|(i, _)| *i >= pool) {
                return Err(bad(StateRefusal::ReleasedOutsidePool { index: i, pool }));
            }
            let path = match &r.path {
                Some(r) => Some(QueryPath {
                    version: r.version,
                    path: NoisePath::restore(self.model.kernel.clone(), &r.path)?,
                    sigma: r.sigma,
                }),
                None => None,
            };
            let st = RequesterState {
                answered: r.answered.clone(),
                released: r.released.iter().copied().collect(),
                ledger: r.ledger.clone(),
                path,
                batches: r.batches.clone(),
            };
            check_ledger(name, r, s.theta_selection.as_ref()).map_err(bad)?;
            for b in &r.batches {
                if b.var.len() != b.indices.len()
                    || b.cov.nrows() != b.indices.len()
                    || b.indices.iter().any(|i| !st.released.contains_key(i))
                {
                    return Err(bad(StateRefusal::Batch { requester: name.clone() }));
                }
            }
            self.requesters.insert(name.clone(), st);
        }
        self.cache = AnswerCache::import(&s.answers, &s.answer_order);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::PathRecord;
    use dpcotrain_gp::kernels::SquaredExponential;
    use dpcotrain_privacy::NoisePath;

    #[test]
    fn a_saved_noise_path_keeps_the_array_form_saved_states_hold() {
        let mut path = NoisePath::seeded(Box::new(SquaredExponential::isotropic(1.0, 1.0)), 1, 5);
        path.sample_at(&nalgebra::DMatrix::from_row_slice(2, 1, &[0.0, 1.0])).unwrap();
        let state = path.state();
        // What states saved before PathRecord hold: the array [version, path, σ].
        let saved = serde_json::to_value((7u64, state.clone(), 0.42)).unwrap();
        let r: PathRecord = serde_json::from_value(saved.clone()).unwrap();
        assert_eq!(r, PathRecord { version: 7, path: state, sigma: 0.42 });
        assert_eq!(serde_json::to_value(&r).unwrap(), saved);
    }
}
