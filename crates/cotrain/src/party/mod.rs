//! A party: its private view, its augmented model, and the **only release path** — how it
//! answers a peer's request (docs/decisions.md D8–D12, D19).
//!
//! Release policies:
//! - [`ReleasePolicy::PerQuery`] (the thesis, D8 R): answer from the current augmented model.
//!   A released mean function is μ + σ·g with g one GP-prior path of the responder's kernel.
//!   In the thesis mode one path per requester is read off at each released index (D9 R); in
//!   calibrated mode a new path is drawn whenever the model (hence the mean function) changed,
//!   and each new (requester, model version) is a new Gaussian mechanism charged to that
//!   requester's ledger. Further indices read from the same path are post-processing.
//! - [`ReleasePolicy::ReleaseOnce`] (D8 P): a frozen private-only posterior released once over
//!   the whole pool; one charge per requester, every later answer is post-processing.
//!
//! Each index is released at most once per requester: its mean stays as first released. A
//! retried request id returns the cached answer: no new noise, no new charge (the cache is
//! bounded per requester: [`crate::answer_cache`]); the same id asking something else is refused.

mod batches;
mod per_query;
mod release_once;
mod view;

pub use view::{AnswerReading, ModelView};

use crate::answer::{Answer, BatchLikelihood, ChargeInfo, PredictRequest, Uncertainty};
use crate::answer_cache::{self, AnswerCache};
use crate::combiner::{CoModel, CombinerKind, LocalModel, PeerBlock, SPARSE_THRESHOLD, SvgpTraining};
use crate::data::PartyData;
use crate::error::Refusal;
use crate::error::{Conflict, OwnError};
use crate::readings::{AnswerSource, BlockyTheta, Readings, SharedVariance, ThesisNoise};
use crate::release_model::{ReleaseForm, ReleaseModel, ThetaPolicy, ThetaSelection, select_theta};
pub use crate::settings::{DpConfig, DpMode, ReleasePolicy, discounts_answer_noise};
use crate::{CotrainError, RequestError};

/// Ledger id of the θ-selection charge (one per requester's ledger).
pub const THETA_SELECTION_ID: &str = "theta-selection";
use dpcotrain_gp::NoiseVariance;
use dpcotrain_gp::kernels::Kernel;
use dpcotrain_privacy::FiniteRelease;
use dpcotrain_privacy::RankRule;
use dpcotrain_privacy::accountant::{Charge, Ledger, rho_of};
use dpcotrain_privacy::noise::{NoisePath, iid_standard_normal};
use dpcotrain_privacy::sensitivity::{LabelRange, from_influence};
use dpcotrain_privacy::{Calibrator, NoiseScale, Spend};
use nalgebra::{DMatrix, DVector};
use std::collections::HashMap;

/// Inducing points of the sparse local model of a large private set.
pub const DEFAULT_INDUCING: usize = 300;

/// One turn's answers absorbed and the model re-fitted ([`Party::stage`]), waiting to be
/// installed ([`Party::commit_turn`]).
#[derive(Debug)]
pub struct StagedTurn {
    model: Option<CoModel>,
    base_version: u64,
    answers: Vec<Answer>,
    refused: Vec<Refusal>,
    objective: Option<f64>,
    guard: Option<crate::combiner::LooCheck>,
}

/// A shared party, locked; a lock poisoned by a panic is [`crate::OwnError::Poisoned`] (the
/// one place that mapping is written: the driver, the in-process peer and the experiments use it).
pub fn lock_party(p: &std::sync::Mutex<Party>) -> Result<std::sync::MutexGuard<'_, Party>, CotrainError> {
    p.lock().map_err(|_| CotrainError::Own(OwnError::Poisoned))
}

/// A per-query requester's GP-prior noise path: the model version (mean function) it belongs
/// to, the path, and the scale σ its draws are multiplied by.
#[derive(Debug, Clone)]
pub(crate) struct QueryPath {
    pub(crate) version: u64,
    pub(crate) path: NoisePath,
    pub(crate) sigma: f64,
}

/// Release bookkeeping for one requester.
#[derive(Debug, Clone, Default)]
pub(crate) struct RequesterState {
    pub(crate) answered: Vec<usize>,
    pub(crate) released: HashMap<usize, f64>,
    pub(crate) ledger: Option<Ledger>,
    /// The per-query noise path of this requester (policy per-query).
    pub(crate) path: Option<QueryPath>,
    /// Policy batches: every finite release made to this requester, in order.
    pub(crate) batches: Vec<BatchRelease>,
}

/// One finite release at requested indices (policy batches). Everything here but the means
/// (kept in `released`) is label-free.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct BatchRelease {
    pub indices: Vec<usize>,
    pub sigma: f64,
    pub sensitivity: f64,
    /// The cap multiplier chosen (None: uncapped).
    pub eta: Option<f64>,
    /// Released variance at each index: posterior latent variance + σ².
    pub var: Vec<f64>,
    /// Released covariance over `indices`: posterior latent covariance + σ²I (for a low-rank
    /// release σ²I bounds its noise covariance σ² U Uᵀ).
    pub cov: DMatrix<f64>,
}

/// The frozen private-only release of [`ReleasePolicy::ReleaseOnce`].
#[derive(Debug, Clone)]
pub(crate) struct Frozen {
    mean: DVector<f64>,
    var: DVector<f64>,
    cov: DMatrix<f64>,
    prior: DMatrix<f64>,
    pub(crate) sigma: f64,
    pub(crate) sensitivity: f64,
    pub(crate) noise: DVector<f64>,
    /// Finite release: independent noise (σ²I); otherwise a GP-prior path (σ²K).
    pub(crate) isotropic: bool,
}

/// A party: its private view, its model, and the release path. `Debug` shows label-free facts
/// only (a stray `{:?}` in a log must not print labels or noise).
#[derive(Clone)]
pub struct Party {
    pub(crate) name: String,
    /// The private view: covariates and labels. Never leaves the crate except through the
    /// release path ([`Party::answer`]) and label-free counts.
    pub(crate) data: PartyData,
    pub(crate) model: CoModel,
    pub(crate) dp: DpConfig,
    /// Seed for simulation noise; `None` draws noise from the OS CSPRNG.
    pub(crate) seed: Option<u64>,
    pub(crate) requesters: HashMap<String, RequesterState>,
    pub(crate) cache: AnswerCache,
    pub(crate) frozen: Option<Frozen>,
    /// Every querier turn this party has folded in, in order (the model's history).
    pub(crate) turns: Vec<TurnRecord>,
    /// (model version, σ, Δ) of the per-query mechanism: the sensitivity is a pass over every
    /// private row, so it is computed once per model version (eagerly, after each fit).
    calibration: Option<(u64, f64, f64)>,
    /// The label-free release model (release-once and batches).
    pub(crate) release_model: Option<ReleaseModel>,
    /// The DP choice of θ (ThetaPolicy::Selected), made once at construction.
    pub(crate) theta_selection: Option<ThetaSelection>,
    /// ρ each peer said was left of its budget for this party, after its latest answer.
    pub(crate) peer_budget: HashMap<String, f64>,
    /// Under `blocky_theta = querier`: each requester's θ₁ (kernel log-parameters) at the time
    /// of asking, handed over by the in-process driver (the wire protocol does not carry it).
    requester_theta: HashMap<String, Vec<f64>>,
    /// Whether a batch release also sends its exact likelihood ([`Party::set_send_likelihood`]).
    send_likelihood: bool,
}

impl std::fmt::Debug for Party {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Party")
            .field("name", &self.name)
            .field("labelled_rows", &self.data.y_train.len())
            .field("pool", &self.data.pool_size())
            .field("model_version", &self.model.version)
            .field("turns", &self.turns.len())
            .field("requesters", &self.requesters.len())
            .finish_non_exhaustive()
    }
}

/// The labels a party's own model fits under `dp`: its labels as they are, clipped to the
/// release's label range where that model is itself what is released
/// ([`own_model_is_released`]), because the sensitivity assumes the clipped labels.
pub fn labels_the_model_fits(dp: &DpConfig, y: &DVector<f64>) -> DVector<f64> {
    match &dp.mode {
        DpMode::Calibrated { range, .. } if own_model_is_released(dp) => range.clip(y),
        _ => y.clone(),
    }
}

/// One querier turn as folded into the model: replaying these in order rebuilds the model
/// (absorb + re-fit are deterministic), which is how a restarted node resumes.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct TurnRecord {
    pub round: usize,
    pub index: Option<usize>,
    pub answers: Vec<Answer>,
    pub refused: Vec<Refusal>,
    pub objective: Option<f64>,
    /// Test RMSE of the model after this turn, when a node evaluated it (for `status`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub test_rmse: Option<f64>,
    /// The answer guard's verdict after this turn's re-fit (None: guard off or no answers).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub guard: Option<crate::combiner::LooCheck>,
}

/// Whether the party's own (co-trained or private-only) model is itself what it releases, so
/// that under calibrated DP it must be fitted to clipped labels: policy per-query (the co-trained
/// model answers), and release-once of the function-space form with the fitted θ (frozen from the
/// private-only fit). Under every other setting the release is computed by the separate
/// label-free release model from a clipped copy of the labels, and the party's own model — what
/// "alone" measures — never sees a clipped label.
pub fn own_model_is_released(dp: &DpConfig) -> bool {
    match dp.policy {
        ReleasePolicy::PerQuery => true,
        ReleasePolicy::ReleaseOnce => !matches!(dp.release, ReleaseForm::Finite { .. }) && !dp.theta.is_counted(),
        ReleasePolicy::Batches => false,
    }
}

/// A calibrated mode that yielded no σ: never released unnoised.
fn uncalibrated() -> CotrainError {
    CotrainError::from(crate::Invariant::NoNoiseScale)
}

fn mix(seed: u64, name: &str, version: u64) -> u64 {
    // FNV-1a over the requester name, mixed with the seed and version (SplitMix64 finaliser).
    let mut h: u64 = 0xcbf29ce484222325;
    for b in name.bytes() {
        h = (h ^ b as u64).wrapping_mul(0x100000001b3);
    }
    let mut z = seed ^ h ^ version.wrapping_mul(0x9E3779B97F4A7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58476D1CE4E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D049BB133111EB);
    z ^ (z >> 31)
}

/// The part of every [`Answer`] no release policy decides: the responder's name, the request's
/// indices in request order, and the ρ left in the requester's budget (unsigned: a node's store
/// adds the receipt after saving). A policy fills in what it released with struct-update
/// syntax, so an answer is put together in one way.
fn answer_to(responder: &str, req: &PredictRequest, st: &RequesterState) -> Answer {
    Answer {
        responder: responder.to_string(),
        indices: req.indices.clone(),
        mean: Vec::new(),
        var: None,
        answered: Vec::new(),
        cov: None,
        prior_cov: None,
        model_version: 0,
        charge: None,
        budget_rho_left: st.ledger.as_ref().map(|l| l.rho_remaining()),
        noise_var: None,
        likelihood: None,
        receipt: None,
    }
}

impl Party {
    /// A party with its private data; fits the private-only model (pre-co-training), under the
    /// given readings of the ambiguous protocol choices ([`crate::readings`]; refused, naming
    /// the key, where a reading does not apply to `dp`). The private-only model fits the labels
    /// as they are, the same fit in every privacy mode, and the release clips its own copy
    /// ([`Party::release_labels`]) — except where the own model is itself what is released
    /// (per-query, release-once with fitted θ), which fits the clipped labels.
    #[allow(clippy::too_many_arguments)] // the party's data, model, privacy, seed and readings
    pub fn new(
        data: PartyData,
        kind: CombinerKind,
        uncertainty: Uncertainty,
        kernel: Box<dyn Kernel>,
        noise: NoiseVariance,
        dp: DpConfig,
        seed: Option<u64>,
        readings: Readings,
    ) -> Result<Self, CotrainError> {
        Self::with_local_model(data, kind, uncertainty, kernel, noise, dp, seed, readings, LocalModel::Auto, None)
    }

    /// As [`Party::new`], with the local model chosen ([`LocalModel`]) and, for the sparse
    /// ones, M inducing inputs (default [`DEFAULT_INDUCING`], at most the private rows).
    #[allow(clippy::too_many_arguments)]
    pub fn with_local_model(
        mut data: PartyData,
        kind: CombinerKind,
        uncertainty: Uncertainty,
        kernel: Box<dyn Kernel>,
        noise: NoiseVariance,
        dp: DpConfig,
        seed: Option<u64>,
        readings: Readings,
        local: LocalModel,
        inducing: Option<usize>,
    ) -> Result<Self, CotrainError> {
        dp.validate()?;
        readings.check(&dp)?;
        // The party's own model sees its labels as they are, except where that model is itself
        // what is released (see [`own_model_is_released`]): then it must fit the clipped labels
        // the sensitivity assumes. The release model and the θ vote always clip (their own
        // copy), so under the honest policies "alone" is the same fit in every privacy mode.
        data.y_train = labels_the_model_fits(&dp, &data.y_train);
        let mut model = CoModel::new(
            kind,
            uncertainty,
            kernel,
            noise,
            data.x_train.clone(),
            data.y_train.clone(),
            data.x_pool.clone(),
        )?;
        if let Some(s) = seed {
            model.train.seed = s;
        }
        model.set_readings(readings);
        let n = data.x_train.nrows();
        let m = inducing.unwrap_or(DEFAULT_INDUCING).min(n);
        match local {
            // Large private set: VFE local model (D21); Blocky/Hybrid refuse with the reason.
            LocalModel::Auto if n > SPARSE_THRESHOLD => model.use_sparse(m)?,
            LocalModel::Auto | LocalModel::Exact => {}
            LocalModel::Vfe => model.use_sparse(m)?,
            LocalModel::Svgp => model.use_svgp(m, SvgpTraining::default())?,
        }
        model.fit_private()?;
        let mut party = Party {
            name: data.name.clone(),
            data,
            model,
            dp,
            seed,
            requesters: HashMap::new(),
            cache: AnswerCache::default(),
            frozen: None,
            turns: Vec::new(),
            calibration: None,
            release_model: None,
            theta_selection: None,
            peer_budget: HashMap::new(),
            requester_theta: HashMap::new(),
            send_likelihood: false,
        };
        if let ThetaPolicy::Selected { default, mu } = party.dp.theta {
            let mu = if matches!(party.dp.mode, DpMode::Calibrated { .. }) { mu } else { f64::INFINITY };
            let (grid, _) = crate::release_model::theta_grid(default);
            // Seeded (experiments only): per party, under names no requester can take (they are
            // letters, digits, '-' and '_'), so parties' votes are not correlated.
            let tag = |what: &str| format!("\u{0}{what}/{}", party.name);
            let z = iid_standard_normal(grid.len(), party.seed.map(|s| mix(s, &tag("theta-selection"), 0)));
            // The groups come from a fresh uniform permutation, so the row order of the party's
            // file (which may depend on the labels) cannot widen the vote's sensitivity.
            let order = dpcotrain_privacy::select::random_order(
                party.data.x_train.nrows(),
                party.seed.map(|s| mix(s, &tag("theta-selection-groups"), 0)),
            );
            party.theta_selection =
                Some(select_theta(&party.data.x_train, &party.release_labels(), default, mu, &z, &order)?);
        }
        party.rebuild_release()?;
        if party.dp.policy == ReleasePolicy::PerQuery {
            party.calibrate()?;
        }
        party.model.warm()?;
        Ok(party)
    }

    /// Build the release model and, under release-once, freeze the release (at construction,
    /// and again when a restored state brings back the θ selection made before a restart).
    pub(crate) fn rebuild_release(&mut self) -> Result<(), CotrainError> {
        let needs_release_model = self.dp.policy == ReleasePolicy::Batches
            || (self.dp.policy == ReleasePolicy::ReleaseOnce
                && (self.dp.theta.is_counted() || matches!(self.dp.release, ReleaseForm::Finite { .. })));
        if needs_release_model {
            self.release_model = Some(self.build_release_model()?);
        }
        if self.dp.policy == ReleasePolicy::ReleaseOnce {
            self.freeze()?;
        }
        Ok(())
    }

    /// The DP θ selection this party made (θ policy `select`).
    pub fn theta_selection(&self) -> Option<&ThetaSelection> {
        self.theta_selection.as_ref()
    }

    fn path_with(&self, k: Box<dyn Kernel>, requester: &str, version: u64) -> NoisePath {
        let d = self.data.dim();
        match self.seed {
            Some(s) => NoisePath::seeded(k, d, mix(s, requester, version)),
            None => NoisePath::from_os_entropy(k, d),
        }
    }

    /// Fold one turn's answers into the model (absorb each, then re-fit once) and record it:
    /// [`Party::stage`] on the party's own model, then [`Party::commit_turn`].
    pub fn fold_in(
        &mut self,
        round: usize,
        index: Option<usize>,
        answers: Vec<Answer>,
        refused: Vec<Refusal>,
    ) -> Result<&TurnRecord, CotrainError> {
        let base_version = self.model.version;
        let staged = Self::stage_in_place(&mut self.model, base_version, answers, refused)?;
        self.commit_staged(round, index, staged)
    }

    /// Absorb a turn's answers into `model` (a copy of this party's, taken with
    /// [`Party::model_for_turn`]) and re-fit it, away from the party: what a node runs outside
    /// the lock its peers' requests wait on, so no peer's latency depends on the re-fit (whose
    /// iterations depend on the private labels). [`Party::commit_turn`] then installs it.
    pub(crate) fn stage(
        mut model: CoModel,
        base_version: u64,
        answers: Vec<Answer>,
        refused: Vec<Refusal>,
    ) -> Result<StagedTurn, CotrainError> {
        let mut staged = Self::stage_in_place(&mut model, base_version, answers, refused)?;
        staged.model = Some(model);
        Ok(staged)
    }

    /// A copy of the model to stage a turn on, and its version.
    pub(crate) fn model_for_turn(&self) -> (CoModel, u64) {
        (self.model.clone(), self.model.version)
    }

    fn stage_in_place(
        model: &mut CoModel,
        base_version: u64,
        answers: Vec<Answer>,
        refused: Vec<Refusal>,
    ) -> Result<StagedTurn, CotrainError> {
        // A peer's malformed answer (wrong shapes, NaN, negative variance…) is refused and
        // recorded, never absorbed; the other answers still count.
        let mut refused = refused;
        let mut accepted = Vec::with_capacity(answers.len());
        for a in answers {
            match model.absorb(&a) {
                Ok(()) => accepted.push(a),
                Err(e) => refused.push(Refusal {
                    peer: a.responder.clone(),
                    code: e.code(),
                    message: format!("answer not absorbed: {e}"),
                }),
            }
        }
        let answers = accepted;
        let objective = if answers.is_empty() { None } else { Some(model.refit()?) };
        let guard = if answers.is_empty() { None } else { model.loo_check() };
        Ok(StagedTurn { model: None, base_version, answers, refused, objective, guard })
    }

    /// Install a turn staged with [`Party::stage`] and record it. Refused if the party's model
    /// changed since the copy was taken (turns are one at a time).
    pub(crate) fn commit_turn(
        &mut self,
        round: usize,
        index: Option<usize>,
        mut staged: StagedTurn,
    ) -> Result<&TurnRecord, CotrainError> {
        if self.model.version != staged.base_version {
            return Err(OwnError::ModelChanged { base: staged.base_version, now: self.model.version }.into());
        }
        if let Some(m) = staged.model.take() {
            self.model = m;
        }
        self.commit_staged(round, index, staged)
    }

    fn commit_staged(
        &mut self,
        round: usize,
        index: Option<usize>,
        staged: StagedTurn,
    ) -> Result<&TurnRecord, CotrainError> {
        let StagedTurn { answers, refused, objective, guard, .. } = staged;
        for a in &answers {
            if let Some(r) = a.budget_rho_left {
                self.peer_budget.insert(a.responder.clone(), r);
            }
        }
        self.turns.push(TurnRecord { round, index, answers, refused, objective, test_rmse: None, guard });
        if self.dp.policy == ReleasePolicy::PerQuery {
            self.calibrate()?;
        }
        self.model.warm()?;
        Ok(self.turns.last().expect("just pushed"))
    }

    /// The turn this party took in `round`, if it has taken it.
    pub fn turn(&self, round: usize) -> Option<&TurnRecord> {
        self.turns.iter().rev().find(|t| t.round == round)
    }

    /// Note the test RMSE after the latest turn of `round` (kept in the state for `status`).
    pub fn record_test_rmse(&mut self, round: usize, rmse: f64) {
        if let Some(t) = self.turns.iter_mut().rev().find(|t| t.round == round) {
            t.test_rmse = Some(rmse);
        }
    }

    /// Test RMSE after each round, oldest first (NaN for a round nobody evaluated).
    pub fn rmse_per_round(&self) -> Vec<f64> {
        let mut out: Vec<(usize, f64)> = Vec::new();
        for t in &self.turns {
            let v = t.test_rmse.unwrap_or(f64::NAN);
            match out.iter_mut().find(|(r, _)| *r == t.round) {
                Some(slot) => slot.1 = v,
                None => out.push((t.round, v)),
            }
        }
        out.sort_by_key(|(r, _)| *r);
        out.into_iter().map(|(_, v)| v).collect()
    }

    /// Every turn folded in so far.
    pub fn turns(&self) -> &[TurnRecord] {
        &self.turns
    }

    /// The latest receipt this party holds from `peer` (the largest `seq` among the answers it
    /// absorbed): shown with the next request to that peer.
    pub fn receipt_from(&self, peer: &str) -> Option<crate::answer::Receipt> {
        self.turns
            .iter()
            .flat_map(|t| &t.answers)
            .filter(|a| a.responder == peer)
            .filter_map(|a| a.receipt.as_ref())
            .max_by_key(|r| r.seq)
            .cloned()
    }

    /// Why asking `peer` for new indices would be refused for budget, if it would: its latest
    /// answer left less ρ than one more release at the agreed (ε, δ) costs.
    pub fn peer_budget_spent(&self, peer: &str) -> Option<Refusal> {
        // Calibrated releases only (whatever their mechanism); thesis mode and DP off charge none.
        if !matches!(self.dp.mode, DpMode::Calibrated { .. }) {
            return None;
        }
        let scale = self.dp.mode.noise_scale().ok().flatten()?;
        let left = *self.peer_budget.get(peer)?;
        let cost = scale.release_rho();
        (left < cost * (1.0 - 1e-6)).then(|| Refusal::not_asked(peer, left, cost))
    }

    /// ρ charged over every requester's ledger together, and its ε at the ledgers' δ: what
    /// all requesters colluding could learn about this party's labels (GDP composition).
    pub fn privacy_spent_total(&self) -> (f64, f64) {
        let ledgers: Vec<&Ledger> = self.requesters.values().filter_map(|r| r.ledger.as_ref()).collect();
        let rho: f64 = ledgers.iter().map(|l| l.rho_spent()).sum();
        match ledgers.iter().map(|l| l.delta).reduce(f64::min) {
            Some(delta) => (rho, dpcotrain_privacy::accountant::epsilon_exact(rho, delta)),
            None => (0.0, 0.0),
        }
    }

    /// Names of the peers this party has answered.
    pub fn requesters(&self) -> Vec<String> {
        let mut v: Vec<String> = self.requesters.keys().cloned().collect();
        v.sort();
        v
    }

    /// Record `requester`'s θ₁ (its kernel's log-parameters) for the Blocky query block under
    /// `blocky_theta = querier` (Thomas 2017 eq 4.6 as printed); refused when this party's kernel
    /// has another number of parameters.
    pub fn set_requester_theta(&mut self, requester: &str, theta: Vec<f64>) -> Result<(), CotrainError> {
        let n = self.model.kernel.n_params();
        if theta.len() != n {
            return Err(Conflict::QuerierThetaParams {
                requester: requester.to_string(),
                responder: self.name.clone(),
                theta: theta.len(),
                kernel: n,
            }
            .into());
        }
        self.requester_theta.insert(requester.to_string(), theta);
        Ok(())
    }

    /// The requester's ledger (created on first use).
    pub fn ledger(&self, requester: &str) -> Option<&Ledger> {
        self.requesters.get(requester).and_then(|r| r.ledger.as_ref())
    }

    /// The labels every release is computed from: clipped to the declared range under
    /// calibrated DP (the sensitivity assumes it), as they are otherwise. A copy: the party's own
    /// model keeps the labels as they are ([`Party::with_local_model`]).
    pub(crate) fn release_labels(&self) -> DVector<f64> {
        match &self.dp.mode {
            DpMode::Calibrated { range, .. } => range.clip(&self.data.y_train),
            _ => self.data.y_train.clone(),
        }
    }

    /// How many of this party's labels a release clips to the declared range (0 unless DP is
    /// calibrated). Label-dependent: shown to the party's own operator (`node check`, `status`
    /// as the orchestrator, the demo), never to a peer.
    pub fn labels_clipped(&self) -> usize {
        match &self.dp.mode {
            DpMode::Calibrated { range, .. } => {
                self.data.y_train.iter().filter(|&&y| !(range.lo..=range.hi).contains(&y)).count()
            }
            _ => 0,
        }
    }

    /// The covariates constant on this party's labelled rows, and how many pool entities lie
    /// at another value (label-free; for the party's own operator: `node check`, `node serve`'s
    /// start-up warning).
    pub fn constant_covariates(&self) -> Vec<crate::data::ConstantCovariate> {
        self.data.constant_covariates()
    }

    /// The co-trained model's prediction at covariates the caller supplies (in this party's
    /// view): for the party's own operator and evaluation. Nothing a peer receives comes from
    /// here; the release path is [`Party::answer`].
    pub fn predict(&mut self, xs: &DMatrix<f64>, full_cov: bool) -> Result<dpcotrain_gp::Prediction, CotrainError> {
        self.model.predict(xs, full_cov)
    }

    /// The party's name (public: it names the party to its peers).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The privacy configuration (public terms: the agreement a peer sees is built from it).
    pub fn dp(&self) -> &DpConfig {
        &self.dp
    }

    /// Draw the release noise from the OS CSPRNG (`None`) or a seeded stream from here on.
    pub fn set_seed(&mut self, seed: Option<u64>) {
        self.seed = seed;
    }

    /// What the co-trained model says about itself without its data (version, settings,
    /// fitted noise, the answers it received): [`ModelView`]. The model itself never leaves the
    /// party — no caller can clone it, predict from its private-only posterior or read its
    /// weights — and its operations that change it are [`Party`]'s own (answer, fold in,
    /// configure).
    pub fn model(&self) -> ModelView<'_> {
        ModelView(&self.model)
    }

    /// The private-only model's latent predictive at covariates the caller supplies (this
    /// party's view; its own labels, its private fit's θ): the "alone" of an evaluation, for the
    /// party's own operator and the lab's traces. Like [`Party::predict`], nothing a peer
    /// receives comes from here. Exact local model only.
    pub fn predict_alone(&mut self, xs: &DMatrix<f64>) -> Result<dpcotrain_gp::Prediction, CotrainError> {
        self.model.predict_private(xs, false)
    }

    /// A counterfactual: the predictive mean at `xs` of a copy of the model that reads the
    /// answers already received differently — `edit` changes the received blocks (the peers'
    /// answers, never this party's rows), `level_var` sets the variance of a level shared by
    /// one peer's answers ([`CoModel::answer_level_var`]) — re-fitted as after a turn. The
    /// party itself is not changed. The lab's oracles use it; a node never does.
    pub fn reread_answers(
        &self,
        edit: impl FnOnce(&mut [PeerBlock]),
        level_var: Option<f64>,
        xs: &DMatrix<f64>,
    ) -> Result<DVector<f64>, CotrainError> {
        let mut model = self.model.clone();
        edit(&mut model.blocks);
        if let Some(v) = level_var {
            model.answer_level_var = v;
        }
        model.version += 1;
        model.refit()?;
        Ok(model.predict(xs, false)?.mean)
    }

    /// The size of the shared pool (public: entities are named by index).
    pub fn pool_size(&self) -> usize {
        self.data.pool_size()
    }

    /// How many labelled rows the party holds (a count, shown to its own operator).
    pub fn n_labels(&self) -> usize {
        self.data.y_train.len()
    }

    /// RMSE of predicting `mean` at every test entity: the predict-the-mean baseline beside
    /// "alone" (label-dependent, for the party's own operator and an opted-in orchestrator).
    pub fn mean_baseline_rmse(&self, mean: f64) -> f64 {
        crate::metrics::mean_baseline_rmse(&self.data.y_test, mean)
    }

    /// How the model reads peers' answers ([`CoModel::set_answer_form`]).
    pub fn set_answer_form(&mut self, form: crate::combiner::AnswerForm) -> Result<(), CotrainError> {
        self.model.set_answer_form(form)
    }

    /// Whether each batch release (policy batches) also sends its exact likelihood
    /// ([`crate::answer::BatchLikelihood`]: label-free, O(k n²) to form), which the functional
    /// reading of a querier needs. Off by default.
    pub fn set_send_likelihood(&mut self, on: bool) {
        self.send_likelihood = on;
    }

    /// The guard against harmful answers ([`CoModel::set_guard`]).
    pub fn set_guard(&mut self, guard: crate::settings::AnswerGuard) -> Result<(), CotrainError> {
        self.model.set_guard(guard)
    }

    /// What a re-fit after each turn re-estimates ([`crate::combiner::RefitPolicy`]).
    pub fn set_refit_policy(&mut self, policy: crate::combiner::RefitPolicy) {
        self.model.refit_policy = policy;
    }

    /// The optimiser limits of every later re-fit (D5; default `TrainOptions::default()`).
    pub fn set_refit_training(&mut self, train: dpcotrain_gp::train::TrainOptions) {
        self.model.train = train;
    }

    /// The variance added to every answer ([`CoModel::set_answer_discount`], D30).
    pub fn set_answer_discount(&mut self, discount: crate::settings::AnswerDiscount) -> Result<(), CotrainError> {
        self.model.set_answer_discount(discount)
    }

    /// How this party reads the answers it receives beyond the product's settings: the harm
    /// study's switches ([`AnswerReading`]). They change only this party's own model, never
    /// what it releases.
    pub fn set_answer_reading(&mut self, r: &AnswerReading) -> Result<(), CotrainError> {
        // Before the first turn only: the per-query policy releases the co-trained model, whose
        // calibration and noise path are keyed by its version, and a restored node replays its
        // turns under the settings it starts with.
        if !self.turns.is_empty() || self.model.n_pseudo() > 0 {
            return Err(Conflict::ReadingAfterFirstTurn.into());
        }
        // Every value is checked before any is applied: a refusal changes nothing.
        if let Some(d) = r.discount {
            d.validate()?;
        }
        for (key, v) in [("answer extra variance", r.extra_var), ("answer minimum value", r.min_value)] {
            if let Some(v) = v
                && !(v.is_finite() && v >= 0.0)
            {
                return Err(CotrainError::setting(key, v, "be finite and non-negative"));
            }
        }
        if !(r.var_scale.is_finite() && r.var_scale > 0.0) {
            return Err(CotrainError::setting("answer variance scale", r.var_scale, "be positive and finite"));
        }
        if let Some(d) = r.discount {
            self.model.set_answer_discount(d)?;
        }
        if let Some(v) = r.extra_var {
            self.model.answer_extra_var = v;
        }
        self.model.answer_noise_grid = r.noise_grid.clone();
        if r.noise_grid.is_some() {
            self.model.answer_extra_var = 0.0;
        }
        self.model.refit_theta = r.refit_theta;
        self.model.answer_check_z = r.check_z;
        self.model.decline_noise_ratio = r.decline_ratio;
        self.model.answer_var_scale = r.var_scale;
        self.model.answer_min_value = r.min_value;
        self.model.answer_min_value_basis = r.min_value_basis;
        // Not a version bump: the version seeds the per-query noise paths, and the reading
        // changes nothing released. A cached posterior is dropped instead.
        self.model.forget_posterior();
        Ok(())
    }

    /// The label-free release model: private covariates and clipped labels, with public θ, the
    /// DP-selected θ, or (ThetaPolicy::Fitted, which leaks uncounted) the private fit's θ̂.
    pub(crate) fn build_release_model(&self) -> Result<ReleaseModel, CotrainError> {
        let (kernel, noise) = match (&self.dp.theta, &self.theta_selection) {
            (ThetaPolicy::Public(t), _) | (ThetaPolicy::Selected { .. }, Some(ThetaSelection { chosen: t, .. })) => {
                (t.kernel(self.data.dim()), t.noise_variance)
            }
            (ThetaPolicy::Selected { .. }, None) => {
                return Err(crate::Invariant::ThetaNotSelected.into());
            }
            (ThetaPolicy::Fitted, _) => (self.model.kernel.clone(), self.model.noise.variance),
        };
        let n = self.data.x_train.nrows();
        let inducing = (n > SPARSE_THRESHOLD).then_some(DEFAULT_INDUCING.min(n));
        ReleaseModel::new(
            self.data.x_train.clone(),
            self.release_labels(),
            kernel,
            noise,
            inducing,
            self.model.train.seed,
        )
    }

    /// (μ, label range) of one calibrated finite release; None when DP is off.
    fn finite_dp(&self) -> Result<Option<(f64, LabelRange)>, CotrainError> {
        match &self.dp.mode {
            DpMode::Off => Ok(None),
            DpMode::Calibrated { range, .. } => {
                // The release's μ = 1/σ₁ (analytic: the exact GDP μ for (ε, δ); classic: ε/c(δ)).
                Ok(self.dp.mode.noise_scale()?.map(|s| (s.release_mu(), *range)))
            }
            DpMode::Thesis { .. } => Err(crate::Invariant::ThesisHasNoFiniteRelease.into()),
        }
    }

    /// Plan the finite release of the private-only posterior at the pool `indices`; also the
    /// release model and the label range (None: DP off) that the release is made with.
    /// The finite release at `indices`; `whole_pool` (release-once) keeps the full rank: its
    /// frozen noise is drawn per pool point.
    fn plan_finite(
        &self,
        indices: &[usize],
        whole_pool: bool,
    ) -> Result<(FiniteRelease, &ReleaseModel, Option<LabelRange>), CotrainError> {
        let ReleaseForm::Finite { cap, rank } = &self.dp.release else {
            return Err(crate::Invariant::FiniteUnderFunctionSpace.into());
        };
        let rm = self.release_model.as_ref().ok_or_else(|| CotrainError::from(crate::Invariant::NoReleaseModel))?;
        let xq = self.data.x_pool.select_rows(indices.iter());
        let dp = self.finite_dp()?;
        let plan = rm.plan(&xq, dp, cap, if whole_pool { &RankRule::Full } else { rank })?;
        Ok((plan, rm, dp.map(|(_, r)| r)))
    }

    /// Answer a peer's request through the release path.
    pub fn answer(&mut self, req: &PredictRequest) -> Result<Answer, CotrainError> {
        // Retries are recognised per (requester, request id): another requester reusing an id
        // gets nothing of the first requester's answer.
        let cache_key = answer_cache::key(&req.requester, &req.request_id);
        if let Some(a) = self.cache.get(&cache_key) {
            if !answer_cache::answers_request(a, req) {
                return Err(RequestError::ReusedId.into());
            }
            // The same numbers; its charge says that nothing was spent this time.
            return Ok(a.as_replay());
        }
        if req.requester == self.name {
            return Err(RequestError::OwnRequest.into());
        }
        let pool = self.data.pool_size();
        if req.indices.is_empty() {
            return Err(RequestError::NoIndices.into());
        }
        let mut seen = std::collections::HashSet::new();
        for &i in &req.indices {
            if i >= pool {
                return Err(RequestError::OutsidePool { index: i, pool }.into());
            }
            if !seen.insert(i) {
                return Err(RequestError::Repeated(i).into());
            }
        }
        let ans = match self.dp.policy {
            ReleasePolicy::ReleaseOnce => self.answer_release_once(req)?,
            ReleasePolicy::PerQuery => self.answer_per_query(req)?,
            ReleasePolicy::Batches => self.answer_batches(req)?,
        };
        self.cache.insert(cache_key, ans.clone());
        Ok(ans)
    }

    /// Charge `requester`'s ledger whatever it lacks of `rho` (the spend a receipt from before a
    /// rollback of this node's state proves; [`Ledger::record_missing`]), under id `id`.
    /// Returns the ρ added (0 when the ledger already counts as much, or DP is off).
    pub fn charge_missing(&mut self, requester: &str, rho: f64, id: &str) -> Result<f64, CotrainError> {
        self.ledger_for(requester)?;
        let Some(ledger) = self.requesters.get_mut(requester).and_then(|st| st.ledger.as_mut()) else {
            return Ok(0.0);
        };
        let gap = rho - ledger.rho_spent();
        if gap <= 0.0 {
            return Ok(0.0);
        }
        ledger.record_missing(id, gap)?;
        Ok(gap)
    }

    /// The requester's ledger, created on first use. A DP θ selection is charged to it first:
    /// every requester sees θ̂ through the released variances.
    fn ledger_for(&mut self, requester: &str) -> Result<(), CotrainError> {
        let guaranteed = self.guaranteed();
        let st = self.requesters.entry(requester.to_string()).or_default();
        if st.ledger.is_none()
            && let DpMode::Calibrated { delta, budget_epsilon, .. } = &self.dp.mode
        {
            let mut ledger = Ledger::new(*budget_epsilon, *delta)?;
            if let Some(sel) = &self.theta_selection {
                ledger.charge(THETA_SELECTION_ID, sel.sensitivity, sel.sigma, &Spend::ThetaVote, guaranteed)?;
            }
            st.ledger = Some(ledger);
        }
        Ok(())
    }

    /// Whether a release's (ε, δ) is a formal guarantee for everything this node lets out about
    /// its labels: calibrated DP, a counted θ (public or a charged vote) and label-free queries.
    /// With the fitted θ̂ (the earlier policies) the guarantee covers the means given θ̂ only —
    /// θ̂ and the released variances depend on the labels, uncounted. With adaptive queries the
    /// indices this node sends as a querier are chosen by uncertainty sampling on its own
    /// label-fitted model, so they too depend on its labels, uncounted. Either way its releases
    /// are recorded as not guaranteed.
    pub fn guaranteed(&self) -> bool {
        self.dp.guarantee().is_formal()
    }

    /// What a release of this party is, as its ledger records it.
    fn spend(&self) -> Spend {
        match &self.dp.mode {
            DpMode::Off => Spend::None,
            DpMode::Thesis { .. } => Spend::Thesis,
            DpMode::Calibrated { mechanism, .. } => match (&self.dp.release, Calibrator::from(*mechanism)) {
                (ReleaseForm::Rkhs, Calibrator::Thesis) => Spend::Thesis,
                (ReleaseForm::Rkhs, calibrator) => Spend::Rkhs { calibrator },
                (ReleaseForm::Finite { cap, rank }, calibrator) => {
                    Spend::Finite { calibrator, cap: cap.clone(), rank: rank.clone(), theta: self.dp.theta.source() }
                }
            },
        }
    }
}
