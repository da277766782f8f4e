//! The privacy–utility frontier of honest co-training (docs/honest-dp.md): for each data set,
//! number of private rows per party and seed, the test RMSE of each party
//!
//! - **alone** (its private-only model),
//! - **co-trained without DP** under the same protocol (the reference gain),
//! - **co-trained with calibrated DP** for every (ε, release mechanism, θ policy),
//!
//! all with label-free public queries: each party asks `queries` pool indices in one request,
//! folds the answers in with the Noisy combiner (marginal uncertainty) and re-fits once (D5).
//! Every (ε, mechanism) cell spends exactly ε per requester (one release). The noise draws
//! are seeded per (seed, party, requester, batch), so all cells of a seed share them (common
//! random numbers: differences between cells are not noise-draw luck).

pub mod command;

use dpcotrain_cotrain::CotrainError;
use dpcotrain_cotrain::PartyData;
use dpcotrain_cotrain::Scenario;
use dpcotrain_cotrain::Uncertainty;
use dpcotrain_cotrain::ccpp::{CcppConfig, RealData, ccpp};
use dpcotrain_cotrain::combiner::{AnswerForm, AnswerGuard, CombinerKind, PeerBlock, RefitTheta, ValueBasis};
use dpcotrain_cotrain::driver::build_parties_with;
use dpcotrain_cotrain::error::{Conflict, DataError};
use dpcotrain_cotrain::party::{AnswerReading, DpConfig, DpMode, ReleasePolicy, lock_party};
use dpcotrain_cotrain::readings::{FitStarts, Readings};
use dpcotrain_cotrain::settings::{AnswerDiscount, DEFAULT_ANSWER_DISCOUNT};
use dpcotrain_cotrain::{PublicTheta, QueryPolicy, ReleaseForm, ThetaPolicy};
use dpcotrain_cotrain::{RunReport, block_on, run_in_process};
use dpcotrain_cotrain::{SimConfig, simulate};
use dpcotrain_privacy::CapRule;
use dpcotrain_privacy::LabelRange;
use dpcotrain_privacy::Mechanism;
use dpcotrain_privacy::NoiseScale;
use dpcotrain_privacy::RankRule;
use nalgebra::DMatrix;
use rayon::prelude::*;
use serde::{Deserialize, Serialize};
use std::collections::HashSet;
use std::sync::atomic::{AtomicUsize, Ordering};

/// A data set of the frontier.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub enum FrontierData {
    /// Thomas §4.3.1.1's two one-covariate views with correlation r (CI = yes).
    Simulated { r: f64, masked: bool },
    /// A shipped real data set with its default views (CCPP: {AT, V} | {AP, RH}, Thomas §4.5).
    Real { data: RealData, masked: bool },
    /// The user's own views ([`FrontierConfig::views`]: the files the nodes read); each seed
    /// draws `n_obs` of each party's labelled rows at random, pool and test as given.
    Views,
}

impl FrontierData {
    pub fn name(&self) -> String {
        match self {
            FrontierData::Simulated { r, masked } => {
                format!("simulated r={r} {}", if *masked { "masked" } else { "unmasked" })
            }
            FrontierData::Real { data, masked } => {
                format!("{} {}", data.name(), if *masked { "masked" } else { "unmasked" })
            }
            FrontierData::Views => "views".into(),
        }
    }

    fn scenario(&self, cfg: &FrontierConfig, nobs: usize, seed: u64) -> Result<Scenario, CotrainError> {
        match *self {
            FrontierData::Views => {
                let views = cfg.views.as_ref().ok_or(DataError::NoneGiven { what: "view (frontier)" })?;
                subsample(views, nobs, seed)
            }
            FrontierData::Simulated { r, masked } => {
                simulate(&SimConfig { r, masking: masked, n_obs: nobs, seed, ..SimConfig::default() })
            }
            FrontierData::Real { data, masked } => {
                ccpp(&CcppConfig { masking: masked, n_obs: nobs, seed, ..CcppConfig::of(data) })
            }
        }
    }
}

/// The release mechanisms compared.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum FrontierMechanism {
    /// Hall et al. (2013) over the whole pool (release-once).
    Rkhs,
    /// Finite release at the asked indices, exact hat-matrix sensitivity, no cap.
    Finite,
    /// Finite release with influence capping (automatic label-free cap rule).
    FiniteCap,
}

impl FrontierMechanism {
    pub fn name(self) -> &'static str {
        match self {
            FrontierMechanism::Rkhs => "rkhs",
            FrontierMechanism::Finite => "finite",
            FrontierMechanism::FiniteCap => "finite+cap",
        }
    }
}

/// The θ policies compared.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ThetaChoice {
    /// Public constants (leaks nothing).
    Public,
    /// The responder's label-fitted θ̂ (leaks through variances, uncounted; for comparison).
    Fitted,
    /// θ chosen from the public grid by a DP vote, charged [`THETA_SHARE`] of each cell's ρ.
    Select,
}

/// Share of a cell's ρ (its ε per requester, in zCDP terms) spent on the θ vote under
/// [`ThetaChoice::Select`]; the release gets the rest, so the cell still spends exactly ε.
pub(crate) const THETA_SHARE: f64 = 0.2;

/// Under θ selection a cell's ε is split: the release gets (1 − THETA_SHARE) of its ρ and the
/// vote the rest (less a relative 1e-6, so that the two charges fit the budget after
/// round-off). Returns (the release's ε, the vote's GDP μ); refused when ε is too small to split.
fn theta_split(epsilon: f64, delta: f64) -> Result<(f64, f64), CotrainError> {
    let mu = NoiseScale::mu_for(epsilon, delta)?;
    let release_epsilon = NoiseScale::epsilon_of(mu * (1.0 - THETA_SHARE).sqrt(), delta);
    let mu_release = NoiseScale::mu_for(release_epsilon, delta).map_err(|_| {
        CotrainError::setting("frontier: ε", epsilon, "be large enough to split between the θ vote and the release")
    })?;
    Ok((release_epsilon, ((mu * mu - mu_release * mu_release) * (1.0 - 1e-6)).max(0.0).sqrt()))
}

impl ThetaChoice {
    pub fn name(self) -> &'static str {
        match self {
            ThetaChoice::Public => "public",
            ThetaChoice::Fitted => "fitted",
            ThetaChoice::Select => "select",
        }
    }

    /// The θ policy of a cell whose θ vote gets GDP parameter `mu_theta` (unused by the others
    /// and under DP off, where the vote is exact).
    fn policy(self, mu_theta: f64, public: PublicTheta) -> ThetaPolicy {
        match self {
            ThetaChoice::Public => ThetaPolicy::Public(public),
            ThetaChoice::Fitted => ThetaPolicy::Fitted,
            // The vote's grid is around the release's public θ, as a node's `theta = "select"` is.
            ThetaChoice::Select => ThetaPolicy::Selected { default: public, mu: mu_theta },
        }
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct FrontierConfig {
    pub data: Vec<FrontierData>,
    pub nobs: Vec<usize>,
    pub seeds: Vec<u64>,
    /// Node seeds per split seed ([`FrontierJob::node_seed`]; `[0]`: the split seed alone).
    pub node_seeds: Vec<u64>,
    /// How each party's private-only fit starts.
    pub fit_starts: FitStarts,
    /// How the parties treat covariates constant on their own rows ([`UnseenCovariates`]).
    pub unseen_covariates: dpcotrain_cotrain::readings::UnseenCovariates,
    pub epsilons: Vec<f64>,
    pub mechanisms: Vec<FrontierMechanism>,
    pub thetas: Vec<ThetaChoice>,
    /// Pool indices each party asks (one request, one release per requester).
    pub queries: usize,
    pub delta: f64,
    pub range: LabelRange,
    /// How queriers read answers.
    pub answers: AnswerForm,
    /// The cap rule of the finite+cap mechanism.
    pub cap: CapRule,
    /// The rank rule of the finite+cap mechanism (the plain finite mechanism keeps the full
    /// rank: it is Theorem 1 alone).
    pub rank: RankRule,
    /// Whether queriers check answers against their own labels (leave-one-out guard).
    pub guard: AnswerGuard,
    /// Whose data a querier's θ is re-fitted to after the answers arrive.
    pub refit_theta: RefitTheta,
    /// What a querier adds to each answer's reported variance.
    pub answer_noise: AnswerNoise,
    /// The answer check's threshold z (None: off; [`dpcotrain_cotrain::combiner::CoModel::answer_check_z`]).
    pub answer_check: Option<f64>,
    /// Factor on every answer's variance (`CoModel::answer_var_scale`; 1: as reported).
    pub answer_temper: f64,
    /// Decline DP answers below this ratio of own noise sd to the answer's noise sd
    /// (`CoModel::decline_noise_ratio`; None: off).
    pub decline_ratio: Option<f64>,
    /// The per-answer value rule (`CoModel::answer_min_value`; None: off).
    pub answer_min_value: Option<f64>,
    /// Which variance of an answer the value rule weighs.
    pub answer_min_value_basis: ValueBasis,
    /// The user's own views for [`FrontierData::Views`] (every party's data as its node reads it).
    pub views: Option<Scenario>,
    /// The public θ of the release model under θ policy `public` (queries keep the default).
    pub release_theta: PublicTheta,
}

/// The user's views with `nobs` labelled rows per party drawn at random (seeded per seed and
/// party; all of them when a party has exactly `nobs`); pool and test as given.
fn subsample(views: &Scenario, nobs: usize, seed: u64) -> Result<Scenario, CotrainError> {
    use rand::SeedableRng;
    let mut parties = Vec::with_capacity(views.parties.len());
    for (i, p) in views.parties.iter().enumerate() {
        let n = p.x_train.nrows();
        if nobs > n {
            return Err(DataError::TooFewRows {
                what: "frontier: n_obs labelled rows of each party",
                need: nobs,
                have: n,
            }
            .into());
        }
        let mut rng = rand_chacha::ChaCha20Rng::seed_from_u64(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ i as u64);
        let mut rows = rand::seq::index::sample(&mut rng, n, nobs).into_vec();
        rows.sort_unstable();
        let mut q = p.clone();
        q.x_train = p.x_train.select_rows(rows.iter());
        q.y_train = p.y_train.select_rows(rows.iter());
        parties.push(q);
    }
    let sc = Scenario {
        parties,
        description: format!("{} ({nobs} labelled rows per party, seed {seed})", views.description),
        pool_labels: views.pool_labels.clone(),
    };
    sc.validate()?;
    Ok(sc)
}

/// What a querier adds to each received answer's variance (a counterfactual switch of the
/// harm study in docs/results.md; [`dpcotrain_cotrain::combiner::CoModel::answer_extra_var`]).
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum AnswerNoise {
    /// A querier's own discount, as a node applies it (D30): `reported` (nothing: the protocol
    /// as the thesis specifies it), a fixed variance, `own` / `own:K` (K × its own fitted σ²).
    Discount(AnswerDiscount),
    /// The responder's fitted noise variance (an oracle: it is label-dependent and never
    /// released; for the diagnosis only).
    Responder,
    /// Chosen at each re-fit by the querier's augmented objective over a grid of variances
    /// ([`dpcotrain_cotrain::combiner::CoModel::answer_noise_grid`]).
    Profile,
}

impl AnswerNoise {
    /// The spelling `--answer-noise` reads (and the cells' JSON records).
    pub fn name(&self) -> String {
        match self {
            AnswerNoise::Discount(AnswerDiscount::Fixed(v)) if *v == 0.0 => "reported".into(),
            AnswerNoise::Discount(AnswerDiscount::OwnNoise(k)) if *k == 1.0 => "own".into(),
            AnswerNoise::Discount(d) => d.to_string(),
            AnswerNoise::Responder => "responder".into(),
            AnswerNoise::Profile => "profile".into(),
        }
    }
}

impl std::str::FromStr for AnswerNoise {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "reported" => Ok(AnswerNoise::Discount(AnswerDiscount::Fixed(0.0))),
            "own" => Ok(AnswerNoise::Discount(AnswerDiscount::OwnNoise(1.0))),
            "responder" => Ok(AnswerNoise::Responder),
            "profile" => Ok(AnswerNoise::Profile),
            x => x
                .parse::<AnswerDiscount>()
                .map(AnswerNoise::Discount)
                .map_err(|e| format!("{e}; or reported, own, responder, profile")),
        }
    }
}

impl FrontierConfig {
    /// The grid: ε ∈ {0.25, 0.5, 1, 2, 4, 8} × n_obs ∈ {25, 100, 400, 1600} × three
    /// mechanisms × both θ policies, on simulated r = 0.9 (masked and unmasked) and masked CCPP,
    /// 10 seeds, 25 queries, δ = 1e-5, labels clipped to [−3, 3].
    pub fn full() -> Self {
        FrontierConfig {
            data: vec![
                FrontierData::Simulated { r: 0.9, masked: true },
                FrontierData::Simulated { r: 0.9, masked: false },
                FrontierData::Real { data: RealData::Ccpp, masked: true },
            ],
            nobs: vec![25, 100, 400, 1600],
            seeds: (0..10).collect(),
            node_seeds: vec![0],
            fit_starts: FitStarts::default(),
            unseen_covariates: dpcotrain_cotrain::readings::UnseenCovariates::default(),
            epsilons: vec![0.25, 0.5, 1.0, 2.0, 4.0, 8.0],
            mechanisms: vec![FrontierMechanism::Rkhs, FrontierMechanism::Finite, FrontierMechanism::FiniteCap],
            thetas: vec![ThetaChoice::Public, ThetaChoice::Fitted],
            queries: 25,
            delta: 1e-5,
            range: LabelRange { lo: -3.0, hi: 3.0 },
            answers: AnswerForm::Likelihood,
            cap: CapRule::auto(),
            rank: RankRule::auto(),
            guard: AnswerGuard::Off,
            refit_theta: RefitTheta::Augmented,
            answer_noise: AnswerNoise::Discount(DEFAULT_ANSWER_DISCOUNT),
            answer_check: None,
            answer_temper: 1.0,
            decline_ratio: None,
            answer_min_value: None,
            answer_min_value_basis: ValueBasis::Read,
            views: None,
            release_theta: dpcotrain_cotrain::release_model::DEFAULT_RELEASE_THETA,
        }
    }

    pub fn validate(&self) -> Result<(), CotrainError> {
        if self.data.is_empty() || self.nobs.is_empty() || self.seeds.is_empty() {
            return Err(DataError::NoneGiven { what: "data set, n_obs and seed (frontier)" }.into());
        }
        for &e in &self.epsilons {
            dpcotrain_privacy::calibrate::check_epsilon(e)?;
        }
        dpcotrain_privacy::calibrate::check_delta(self.delta)?;
        if !(self.answer_temper.is_finite() && self.answer_temper >= 1.0) {
            return Err(CotrainError::setting("frontier: the answer temper", self.answer_temper, "be finite and ≥ 1"));
        }
        if self.queries == 0 {
            return Err(CotrainError::setting("frontier: queries", 0.0, "be at least 1"));
        }
        // Under θ selection each ε is split between the vote and the release (`dp`).
        if self.thetas.contains(&ThetaChoice::Select) {
            for &e in &self.epsilons {
                theta_split(e, self.delta)?;
            }
        }
        if let Some(k) = self.answer_min_value
            && !(k.is_finite() && k >= 0.0)
        {
            return Err(CotrainError::setting("frontier: the answer minimum value", k, "be finite and ≥ 0"));
        }
        if self.data.contains(&FrontierData::Views) != self.views.is_some() {
            return Err(Conflict::ViewsWithoutViewData.into());
        }
        Ok(())
    }

    /// Rows a complete job writes: per party, alone, then per θ policy the no-DP cell and every
    /// (mechanism, ε) cell (the built-in data sets have two parties; the user's views as many
    /// as they hold).
    pub fn rows_per_job(&self, data: &FrontierData) -> usize {
        let parties = match data {
            FrontierData::Views => self.views.as_ref().map_or(2, |v| v.parties.len()),
            _ => 2,
        };
        parties * (1 + self.thetas.len() * (1 + self.mechanisms.len() * self.epsilons.len()))
    }

    /// Jobs: one per (data set, n_obs, seed, node seed), largest n_obs first (long jobs start
    /// early).
    pub fn jobs(&self) -> Vec<FrontierJob> {
        let mut out = Vec::new();
        for &data in &self.data {
            for &nobs in &self.nobs {
                for &seed in &self.seeds {
                    for &node_seed in &self.node_seeds {
                        out.push(FrontierJob { data, nobs, seed, node_seed });
                    }
                }
            }
        }
        out.sort_by_key(|j| std::cmp::Reverse(j.nobs));
        out
    }

    /// The protocol's DP configuration of one cell (`None` = DP off).
    pub fn dp(&self, cell: Option<(f64, FrontierMechanism)>, theta: ThetaChoice) -> DpConfig {
        let queries = QueryPolicy::Public { per_turn: self.queries, theta: PublicTheta::default() };
        let Some((epsilon, mech)) = cell else {
            return DpConfig {
                mode: DpMode::Off,
                policy: ReleasePolicy::Batches,
                inflate_variance: false,
                release: ReleaseForm::Finite { cap: CapRule::None, rank: RankRule::Full },
                theta: theta.policy(1.0, self.release_theta),
                queries,
            };
        };
        let (release_epsilon, mu_theta) = if theta == ThetaChoice::Select {
            // Checked when the frontier was configured (FrontierConfig::validate).
            theta_split(epsilon, self.delta).expect("the frontier's ε split is checked")
        } else {
            (epsilon, 1.0)
        };
        let mode = DpMode::Calibrated {
            epsilon: release_epsilon,
            delta: self.delta,
            mechanism: Mechanism::Analytic,
            range: self.range,
            budget_epsilon: epsilon,
        };
        let (policy, release) = match mech {
            FrontierMechanism::Rkhs => (ReleasePolicy::ReleaseOnce, ReleaseForm::Rkhs),
            FrontierMechanism::Finite => {
                (ReleasePolicy::Batches, ReleaseForm::Finite { cap: CapRule::None, rank: RankRule::Full })
            }
            FrontierMechanism::FiniteCap => {
                (ReleasePolicy::Batches, ReleaseForm::Finite { cap: self.cap.clone(), rank: self.rank.clone() })
            }
        };
        DpConfig {
            mode,
            policy,
            inflate_variance: true,
            release,
            theta: theta.policy(mu_theta, self.release_theta),
            queries,
        }
    }
}

/// One (data set, n_obs, seed, node seed): every cell of the frontier for it.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct FrontierJob {
    pub data: FrontierData,
    pub nobs: usize,
    /// The split: which rows each party holds (and, with node seed 0, the parties' seeds too).
    pub seed: u64,
    /// The nodes' own seed on the same split (their restarts, queries' tie-breaks and noise
    /// draws): 0 is the split seed itself, as before node seeds existed.
    #[serde(default)]
    pub node_seed: u64,
}

impl FrontierJob {
    pub fn key(&self) -> String {
        job_key(&self.data.name(), self.nobs, self.seed, self.node_seed)
    }

    /// The seed the parties of this job are built with.
    pub fn party_seed(&self) -> u64 {
        if self.node_seed == 0 {
            return self.seed;
        }
        // SplitMix64's finaliser: node seeds 1, 2, … land far from every split seed.
        let mut z = self.node_seed.wrapping_mul(0x9E37_79B9_7F4A_7C15);
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        self.seed ^ z ^ (z >> 31)
    }
}

fn job_key(data: &str, nobs: usize, seed: u64, node_seed: u64) -> String {
    if node_seed == 0 { format!("{data}|{nobs}|{seed}") } else { format!("{data}|{nobs}|{seed}|node{node_seed}") }
}

fn is_zero(v: &u64) -> bool {
    *v == 0
}

/// Which run a [`FrontierRow`] is: the private-only model, the protocol without DP, or one
/// DP cell (spelled "alone", "no-dp", "dp" in runs.jsonl).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum RunCell {
    Alone,
    NoDp,
    Dp,
}

impl RunCell {
    pub fn name(self) -> &'static str {
        match self {
            RunCell::Alone => "alone",
            RunCell::NoDp => "no-dp",
            RunCell::Dp => "dp",
        }
    }
}

dpcotrain_cotrain::named_enum!(RunCell, "frontier run", [Alone, NoDp, Dp]);

/// One party's test RMSE in one cell.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct FrontierRow {
    pub data: String,
    pub nobs: usize,
    pub seed: u64,
    #[serde(default, skip_serializing_if = "is_zero")]
    pub node_seed: u64,
    pub party: String,
    pub cell: RunCell,
    pub theta: Option<String>,
    pub mechanism: Option<String>,
    pub epsilon: Option<f64>,
    pub rmse: f64,
    /// ε spent on this party's labels (largest over requesters).
    pub epsilon_spent: Option<f64>,
    pub error: Option<String>,
    /// Co-trained cells: the standard error of rmse − alone, paired over the test points.
    #[serde(default)]
    pub se_vs_alone: Option<f64>,
    /// The alone row: the test RMSE of predicting the public mean (the constant baseline).
    #[serde(default)]
    pub mean_baseline: Option<f64>,
}

impl FrontierRow {
    pub fn job_key(&self) -> String {
        job_key(&self.data, self.nobs, self.seed, self.node_seed)
    }
}

fn run(sc: &Scenario, dp: &DpConfig, seed: u64, cfg: &FrontierConfig) -> Result<RunReport, CotrainError> {
    // `seed`: the parties' ([`FrontierJob::party_seed`]).
    let parties = configured_parties(sc, dp, seed, cfg)?;
    block_on(run_in_process(&parties, 1))
}

/// The second counterfactual of a trace: how the same run is read again with one thing known
/// from the true pool labels (the harm study's oracles, docs/results.md).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum TraceOracle {
    /// Each answer's message variance raised to its true squared error (less the querier's σ²).
    AnswerError,
    /// A bias shared by a peer's answers (`CoModel::answer_level_var`) with the variance of
    /// their true mean error.
    Level,
    /// Every message variance divided by the querier's true own calibration at the queried
    /// points (its squared error there, less σ², over its latent variance).
    OwnCalibration,
    /// Every answer's mean set to the public mean of y (0 on the standardised scale), its
    /// variance kept: what the same pseudo-rows give with no information from the peer. Needs
    /// no pool labels and releases nothing; a counterfactual of the eleventh pass.
    PublicMean,
}

impl TraceOracle {
    pub fn name(self) -> &'static str {
        match self {
            TraceOracle::AnswerError => "answer-error",
            TraceOracle::Level => "level",
            TraceOracle::OwnCalibration => "own-calibration",
            TraceOracle::PublicMean => "public-mean",
        }
    }
}

dpcotrain_cotrain::named_enum!(TraceOracle, "trace oracle", [AnswerError, Level, OwnCalibration, PublicMean]);

/// One party's run seen from inside (`experiment frontier --trace`): the harm study's
/// diagnostics. Label-dependent: an experiment's view, never a node's.
#[derive(Debug, Clone, Serialize)]
pub struct PartyTrace {
    pub party: String,
    /// Per test point: y, alone mean, alone sd, after mean, after sd (latent sd); the mean of
    /// the private-only fit given the true labels of the pool entities this party asked about
    /// (as if every answer were a real label); the co-trained mean under the trace's
    /// [`TraceOracle`]. The last two are NaN without pool labels.
    pub test: Vec<[f64; 7]>,
    /// Per answer: pool index, released mean, reported variance, DP noise variance, the
    /// querier's private-only mean and latent sd there, the entity's true label (NaN without
    /// pool labels).
    pub answers: Vec<(usize, f64, f64, f64, f64, f64, f64)>,
    /// The querier's fitted noise variance before and after the re-fit.
    pub noise_before: f64,
    pub noise_after: f64,
    /// The querier's hyperparameters (the kernel's, then σ²) before and after the re-fit.
    pub theta_before: Vec<f64>,
    pub theta_after: Vec<f64>,
    /// What the oracle used: the level variance or the own calibration (NaN otherwise).
    pub oracle_value: f64,
}

/// The rows of `x` at `idx`.
fn rows_at(x: &DMatrix<f64>, idx: &[usize]) -> DMatrix<f64> {
    DMatrix::from_fn(idx.len(), x.ncols(), |r, c| x[(idx[r], c)])
}

/// Read a finished run's answers again under `oracle` (true pool labels `labels`), re-fit and
/// predict at the party's test points. Returns the means and the oracle's value.
fn reread(
    p: &mut dpcotrain_cotrain::party::Party,
    data: &PartyData,
    labels: &nalgebra::DVector<f64>,
    oracle: TraceOracle,
) -> Result<(nalgebra::DVector<f64>, f64), CotrainError> {
    let s2 = p.model().noise_variance();
    let mut value = f64::NAN;
    // An answer's message (docs/honest-dp.md): latent variance v, gain g = p/(p − v), and
    // variance v·g + s²·g².
    let message = |b: &PeerBlock, k: usize| {
        let p = b.prior.as_ref().map_or(1.0, |pr| pr[(k, k)]);
        let nv = b.noise_vars[k].unwrap_or(0.0);
        let v = (b.vars[k] - nv).clamp(0.0, p);
        let g = p / (p - v).max(1e-12);
        (v, g, v * g + nv * g * g)
    };
    // Set an answer's message variance to `target` through its noise variance (floored at 0).
    let set = |b: &mut PeerBlock, k: usize, target: f64| {
        let (v, g, _) = message(b, k);
        let nv_new = ((target - v * g) / (g * g)).max(0.0);
        b.noise_vars[k] = Some(nv_new);
        b.vars[k] = v + nv_new;
    };
    let mean = match oracle {
        TraceOracle::AnswerError => p.reread_answers(
            |blocks| {
                for b in blocks {
                    for (k, &j) in b.indices.clone().iter().enumerate() {
                        let (_, g, msg) = message(b, k);
                        let err = (b.means[k] * g - labels[j]).powi(2) - s2;
                        if err > msg {
                            set(b, k, err);
                        }
                    }
                }
            },
            None,
            &data.x_test,
        )?,
        TraceOracle::Level => {
            let (mut sum, mut vsum, mut n) = (0.0, 0.0, 0usize);
            for b in p.model().blocks() {
                for (k, &j) in b.indices.iter().enumerate() {
                    sum += b.means[k] - labels[j];
                    vsum += b.vars[k] + s2;
                    n += 1;
                }
            }
            let nf = n.max(1) as f64;
            value = ((sum / nf).powi(2) - vsum / nf / nf).max(0.0);
            p.reread_answers(|_| {}, Some(value), &data.x_test)?
        }
        TraceOracle::OwnCalibration => {
            let asked = p.model().asked();
            let xq = rows_at(&data.x_pool, &asked);
            let own = p.predict_alone(&xq)?;
            let err: f64 = asked.iter().enumerate().map(|(k, &j)| (own.mean[k] - labels[j]).powi(2) - s2).sum();
            let var: f64 = own.var.iter().map(|v| v.max(1e-12)).sum();
            value = (err / var).max(0.05);
            p.reread_answers(
                |blocks| {
                    for b in blocks {
                        for k in 0..b.indices.len() {
                            let (_, _, msg) = message(b, k);
                            set(b, k, msg / value);
                        }
                    }
                },
                None,
                &data.x_test,
            )?
        }
        TraceOracle::PublicMean => p.reread_answers(
            |blocks| {
                for b in blocks {
                    b.means.iter_mut().for_each(|m| *m = 0.0);
                }
            },
            None,
            &data.x_test,
        )?,
    };
    Ok((mean, value))
}

/// [`PartyTrace`] of every party of one run (the first θ policy of `cfg`, one round).
pub fn trace_run(
    cfg: &FrontierConfig,
    job: &FrontierJob,
    dp: Option<(f64, FrontierMechanism)>,
    oracle: TraceOracle,
) -> Result<Vec<PartyTrace>, CotrainError> {
    let sc = job.data.scenario(cfg, job.nobs, job.seed)?;
    let theta = *cfg.thetas.first().ok_or(DataError::NoneGiven { what: "θ policy (frontier)" })?;
    let dpc = cfg.dp(dp, theta);
    let parties = configured_parties(&sc, &dpc, job.party_seed(), cfg)?;
    let mut before = Vec::new();
    for (p, d) in parties.iter().zip(&sc.parties) {
        let mut g = lock_party(p)?;
        let pred = g.predict(&d.x_test, false)?;
        before.push((pred, g.model().noise_variance(), g.model().hyperparameters()));
    }
    block_on(run_in_process(&parties, 1))?;
    // The same run read again under the oracle (same seed: the same queries and noise draws).
    let mut reread_means = Vec::new();
    if let Some(labels) = &sc.pool_labels {
        let again = configured_parties(&sc, &dpc, job.party_seed(), cfg)?;
        block_on(run_in_process(&again, 1))?;
        for (p, d) in again.iter().zip(&sc.parties) {
            reread_means.push(reread(&mut *lock_party(p)?, d, labels, oracle)?);
        }
    }
    let mut out = Vec::new();
    for (i, (p, (alone, noise_before, theta_before))) in parties.iter().zip(before).enumerate() {
        let mut g = lock_party(p)?;
        let data = &sc.parties[i];
        let x = &data.x_test;
        let after = g.predict(x, false)?;
        let y = data.y_test.clone();
        let nan = nalgebra::DVector::from_element(y.len(), f64::NAN);
        // True labels at the asked entities, fitted as the party fits its own rows.
        let with_labels = match &sc.pool_labels {
            Some(labels) => {
                let asked = g.model().asked();
                let mut o = sc.clone();
                let d = &mut o.parties[i];
                let extra = rows_at(&d.x_pool, &asked);
                let mut x_new = d.x_train.clone().resize_vertically(d.x_train.nrows() + asked.len(), 0.0);
                x_new.rows_mut(d.x_train.nrows(), asked.len()).copy_from(&extra);
                let mut y_new = d.y_train.clone().resize_vertically(d.y_train.len() + asked.len(), 0.0);
                for (k, &j) in asked.iter().enumerate() {
                    y_new[d.y_train.len() + k] = labels[j];
                }
                d.x_train = x_new;
                d.y_train = y_new;
                let readings = Readings {
                    fit_starts: cfg.fit_starts,
                    unseen_covariates: cfg.unseen_covariates,
                    ..Readings::default()
                };
                let op = build_parties_with(
                    &o,
                    CombinerKind::Noisy,
                    Uncertainty::Marginal,
                    &cfg.dp(None, theta),
                    job.party_seed(),
                    readings,
                )?;
                let mut og = lock_party(&op[i])?;
                og.predict(x, false)?.mean
            }
            None => nan.clone(),
        };
        let (reread_mean, oracle_value) = reread_means.get(i).cloned().unwrap_or((nan, f64::NAN));
        let test = (0..y.len())
            .map(|k| {
                [
                    y[k],
                    alone.mean[k],
                    alone.var[k].max(0.0).sqrt(),
                    after.mean[k],
                    after.var[k].max(0.0).sqrt(),
                    with_labels[k],
                    reread_mean[k],
                ]
            })
            .collect();
        let mut answers = Vec::new();
        for b in &g.model().blocks().to_vec() {
            let xq = rows_at(&data.x_pool, &b.indices);
            let own = g.predict_alone(&xq)?;
            for (k, &j) in b.indices.iter().enumerate() {
                let truth = sc.pool_labels.as_ref().map_or(f64::NAN, |l| l[j]);
                let noise = b.noise_vars[k].unwrap_or(0.0);
                answers.push((j, b.means[k], b.vars[k], noise, own.mean[k], own.var[k].max(0.0).sqrt(), truth));
            }
        }
        out.push(PartyTrace {
            party: data.name.clone(),
            test,
            answers,
            noise_before,
            noise_after: g.model().noise_variance(),
            theta_before,
            theta_after: g.model().hyperparameters(),
            oracle_value,
        });
    }
    Ok(out)
}

/// The in-process parties of one run, with the frontier's querier options applied.
fn configured_parties(
    sc: &Scenario,
    dp: &DpConfig,
    seed: u64,
    cfg: &FrontierConfig,
) -> Result<Vec<std::sync::Arc<std::sync::Mutex<dpcotrain_cotrain::party::Party>>>, CotrainError> {
    let readings =
        Readings { fit_starts: cfg.fit_starts, unseen_covariates: cfg.unseen_covariates, ..Readings::default() };
    let parties = build_parties_with(sc, CombinerKind::Noisy, Uncertainty::Marginal, dp, seed, readings)?;
    let fitted_noise: Vec<f64> =
        parties.iter().map(|p| lock_party(p).map(|g| g.model().noise_variance())).collect::<Result<_, _>>()?;
    for (i, p) in parties.iter().enumerate() {
        let mut p = lock_party(p)?;
        p.set_answer_form(cfg.answers)?;
        p.set_send_likelihood(cfg.answers == AnswerForm::Functionals);
        p.set_guard(cfg.guard)?;
        let mut reading = AnswerReading {
            refit_theta: cfg.refit_theta,
            check_z: cfg.answer_check,
            decline_ratio: cfg.decline_ratio,
            min_value: cfg.answer_min_value,
            min_value_basis: cfg.answer_min_value_basis,
            var_scale: cfg.answer_temper,
            ..AnswerReading::default()
        };
        match cfg.answer_noise {
            AnswerNoise::Discount(d) => reading.discount = Some(d),
            // Two parties: the responder is the other one (more: the largest of the others).
            AnswerNoise::Responder => {
                reading.extra_var =
                    Some(fitted_noise.iter().enumerate().filter(|(j, _)| *j != i).map(|(_, v)| *v).fold(0.0, f64::max))
            }
            AnswerNoise::Profile => reading.noise_grid = Some(vec![0.0, 0.03, 0.1, 0.3, 1.0, 3.0, 10.0]),
        }
        p.set_answer_reading(&reading)?;
    }
    Ok(parties)
}

/// Every cell of one job.
pub(crate) fn run_job(cfg: &FrontierConfig, job: &FrontierJob) -> Vec<FrontierRow> {
    let base = |party: &str, cell: RunCell| FrontierRow {
        data: job.data.name(),
        nobs: job.nobs,
        seed: job.seed,
        node_seed: job.node_seed,
        party: party.into(),
        cell,
        theta: None,
        mechanism: None,
        epsilon: None,
        rmse: f64::NAN,
        epsilon_spent: None,
        error: None,
        se_vs_alone: None,
        mean_baseline: None,
    };
    let sc = match job.data.scenario(cfg, job.nobs, job.seed) {
        Ok(sc) => sc,
        Err(e) => {
            let mut r = base("*", RunCell::Alone);
            r.error = Some(e.to_string());
            return vec![r];
        }
    };
    let names: Vec<String> = sc.parties.iter().map(|p| p.name.clone()).collect();
    let mut rows = Vec::new();
    let mut push = |rep: Result<RunReport, CotrainError>,
                    cell: RunCell,
                    theta: Option<ThetaChoice>,
                    mech: Option<(f64, FrontierMechanism)>,
                    alone: bool| {
        for (i, name) in names.iter().enumerate() {
            let mut r = base(name, cell);
            r.theta = theta.map(|t| t.name().to_string());
            r.mechanism = mech.map(|(_, m)| m.name().to_string());
            r.epsilon = mech.map(|(e, _)| e);
            match &rep {
                Ok(rep) => {
                    let p = &rep.parties[i];
                    r.rmse = if alone { p.before.rmse } else { p.after.rmse };
                    if alone {
                        r.mean_baseline = Some(p.mean_baseline_rmse);
                    } else {
                        r.se_vs_alone = p.rmse_change_se;
                    }
                    if mech.is_some() {
                        r.epsilon_spent = Some(p.epsilon_released.iter().map(|(_, e)| *e).fold(0.0, f64::max));
                    }
                }
                Err(e) => r.error = Some(e.to_string()),
            }
            rows.push(r);
        }
    };
    for (k, &theta) in cfg.thetas.iter().enumerate() {
        let rep = run(&sc, &cfg.dp(None, theta), job.party_seed(), cfg);
        if k == 0 {
            // The private-only model does not depend on the release θ.
            let alone = rep.clone();
            push(alone, RunCell::Alone, None, None, true);
        }
        push(rep, RunCell::NoDp, Some(theta), None, false);
        for &mech in &cfg.mechanisms {
            for &eps in &cfg.epsilons {
                let rep = run(&sc, &cfg.dp(Some((eps, mech)), theta), job.party_seed(), cfg);
                push(rep, RunCell::Dp, Some(theta), Some((eps, mech)), false);
            }
        }
    }
    rows
}

/// Run every job not in `done` in parallel; `save` gets each job's rows as it finishes,
/// `progress(done, total)` after each job.
pub(crate) fn run_frontier(
    cfg: &FrontierConfig,
    done: &HashSet<String>,
    save: &(dyn Fn(&[FrontierRow]) + Sync),
    progress: &(dyn Fn(usize, usize) + Sync),
) -> Result<Vec<FrontierRow>, CotrainError> {
    cfg.validate()?;
    let jobs: Vec<FrontierJob> = cfg.jobs().into_iter().filter(|j| !done.contains(&j.key())).collect();
    let total = jobs.len();
    let count = AtomicUsize::new(0);
    let rows: Vec<Vec<FrontierRow>> = jobs
        .par_iter()
        .with_max_len(1)
        .map(|job| {
            let rows = run_job(cfg, job);
            save(&rows);
            progress(count.fetch_add(1, Ordering::SeqCst) + 1, total);
            rows
        })
        .collect();
    Ok(rows.into_iter().flatten().collect())
}

/// Whether a co-trained party-run is worse than alone beyond the test set's noise: by more
/// than 1% of alone *and* by more than two paired standard errors of the change.
pub fn hurt(alone: f64, after: f64, se: Option<f64>) -> bool {
    let d = after - alone;
    d > 0.01 * alone && se.is_some_and(|se| se.is_finite() && d > 2.0 * se)
}

/// One aggregated cell: mean RMSE over seeds and parties, the share of the matching no-DP gain
/// it recovers (per party), and how many party-runs it hurt.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct FrontierCell {
    pub data: String,
    pub nobs: usize,
    pub theta: String,
    pub mechanism: String,
    pub epsilon: f64,
    /// Party-runs (parties × seeds) in the cell.
    pub runs: usize,
    /// Mean test RMSE of predicting the public mean (the constant baseline).
    pub mean_baseline: f64,
    pub alone: f64,
    pub no_dp: f64,
    pub dp: f64,
    /// Standard error (over seeds and parties) of the mean paired difference dp − alone.
    pub se_vs_alone: f64,
    /// The share of the no-DP gain recovered, per party then averaged over the parties that
    /// have a gain to recover ([`PartyShare`]); NaN when none has.
    pub recovered: f64,
    /// Standard error of `recovered`: √(Σ share_se²)/m over the m parties averaged, treating
    /// their estimates as independent (they share seeds, so this is a rough guide). Printed in
    /// the tables; the journal carries each party's `share_se` instead.
    #[serde(skip)]
    pub recovered_se: f64,
    /// Each party's share (the cell's `recovered` averages the `Some`s).
    pub per_party: Vec<PartyShare>,
    /// dp/alone − 1 (positive: worse than private-only).
    pub worse_than_alone: f64,
    /// Party-runs the DP co-training hurt ([`hurt`]).
    pub hurt: usize,
    /// Party-runs the same protocol without DP hurt (the no-DP cell of the same θ policy).
    pub hurt_no_dp: usize,
    pub failed: usize,
}

/// One party's share of its no-DP gain recovered in a cell. With the gain G and recovered part
/// R as means over seeds of (alone − no-DP) and (alone − DP), the share is R/G — reported only
/// where G exceeds two standard errors of its mean over seeds (otherwise there is no gain to
/// recover, and a ratio to a gain indistinguishable from zero means nothing).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PartyShare {
    pub party: String,
    pub gain: f64,
    pub gain_se: f64,
    pub share: Option<f64>,
    /// Standard error of `share` over seeds, by the delta method for a ratio of paired means:
    /// √(Σᵢ (rᵢ − share·gᵢ)² / (k(k−1))) / |G|, rᵢ and gᵢ seed i's recovered part and gain
    /// (Cochran 1977, §6.3). Where G is barely beyond two SE this is of the order of the share
    /// itself: such a share says little either way.
    pub share_se: Option<f64>,
}

/// The share R̄/Ḡ of paired per-seed recovered parts `r` and gains `g`, and its delta-method
/// standard error; `None` unless Ḡ exceeds two standard errors of its mean.
fn share_of(r: &[f64], g: &[f64]) -> (f64, f64, Option<(f64, f64)>) {
    let (gain, gain_se) = mean_se(g);
    let k = r.len() as f64;
    let got = r.iter().sum::<f64>() / k;
    let share = (gain_se.is_finite() && gain > 2.0 * gain_se).then(|| {
        let ratio = got / gain;
        let ss: f64 = r.iter().zip(g).map(|(ri, gi)| (ri - ratio * gi).powi(2)).sum();
        (ratio, (ss / (k * (k - 1.0))).sqrt() / gain.abs())
    });
    (gain, gain_se, share)
}

/// Mean and standard error of the mean.
fn mean_se(v: &[f64]) -> (f64, f64) {
    let k = v.len() as f64;
    let m = v.iter().sum::<f64>() / k;
    let se =
        if v.len() > 1 { (v.iter().map(|x| (x - m).powi(2)).sum::<f64>() / (k - 1.0) / k).sqrt() } else { f64::NAN };
    (m, se)
}

/// Aggregate rows into cells (pairing each DP row with its own seed's alone and no-DP rows).
pub(crate) fn summarise(rows: &[FrontierRow]) -> Vec<FrontierCell> {
    use std::collections::BTreeMap;
    let id = |r: &FrontierRow| (r.data.clone(), r.nobs, r.seed, r.party.clone());
    let mut alone: BTreeMap<_, (f64, f64)> = BTreeMap::new();
    let mut nodp: BTreeMap<_, (f64, Option<f64>)> = BTreeMap::new();
    for r in rows {
        match r.cell {
            RunCell::Alone => {
                alone.insert(id(r), (r.rmse, r.mean_baseline.unwrap_or(f64::NAN)));
            }
            RunCell::NoDp => {
                nodp.insert((id(r), r.theta.clone().unwrap_or_default()), (r.rmse, r.se_vs_alone));
            }
            RunCell::Dp => {}
        }
    }
    /// One party-run: alone, no-DP, DP, its baseline, and the paired SEs of the two changes.
    struct Run {
        party: String,
        alone: f64,
        no_dp: f64,
        dp: f64,
        baseline: f64,
        se_no_dp: Option<f64>,
        se_dp: Option<f64>,
    }
    type Key = (String, usize, String, String, u64);
    let mut groups: BTreeMap<Key, Vec<Run>> = BTreeMap::new();
    let mut failed: BTreeMap<Key, usize> = BTreeMap::new();
    for r in rows.iter().filter(|r| r.cell == RunCell::Dp) {
        let theta = r.theta.clone().unwrap_or_default();
        let key: Key = (
            r.data.clone(),
            r.nobs,
            theta.clone(),
            r.mechanism.clone().unwrap_or_default(),
            r.epsilon.unwrap_or(f64::NAN).to_bits(),
        );
        match (alone.get(&id(r)), nodp.get(&(id(r), theta))) {
            (Some(&(a, baseline)), Some(&(n, se_no_dp))) if r.rmse.is_finite() && a.is_finite() && n.is_finite() => {
                groups.entry(key).or_default().push(Run {
                    party: r.party.clone(),
                    alone: a,
                    no_dp: n,
                    dp: r.rmse,
                    baseline,
                    se_no_dp,
                    se_dp: r.se_vs_alone,
                });
            }
            _ => *failed.entry(key).or_default() += 1,
        }
    }
    // Every cell that has rows, including one whose every run failed (its numbers are NaN).
    let keys: std::collections::BTreeSet<&Key> = groups.keys().chain(failed.keys()).collect();
    let mut out = Vec::new();
    for key in keys {
        let v = groups.get(key).map(Vec::as_slice).unwrap_or(&[]);
        let k = v.len() as f64;
        let mean = |f: &dyn Fn(&Run) -> f64| v.iter().map(f).sum::<f64>() / k;
        let (a, n, d) = (mean(&|t| t.alone), mean(&|t| t.no_dp), mean(&|t| t.dp));
        let diffs: Vec<f64> = v.iter().map(|t| t.dp - t.alone).collect();
        let (_, se) = mean_se(&diffs);
        let mut parties: Vec<&str> = v.iter().map(|t| t.party.as_str()).collect();
        parties.sort_unstable();
        parties.dedup();
        let per_party: Vec<PartyShare> = parties
            .iter()
            .map(|p| {
                let mine: Vec<&Run> = v.iter().filter(|t| t.party == *p).collect();
                let gains: Vec<f64> = mine.iter().map(|t| t.alone - t.no_dp).collect();
                let got: Vec<f64> = mine.iter().map(|t| t.alone - t.dp).collect();
                let (gain, gain_se, share) = share_of(&got, &gains);
                PartyShare {
                    party: (*p).to_string(),
                    gain,
                    gain_se,
                    share: share.map(|s| s.0),
                    share_se: share.map(|s| s.1),
                }
            })
            .collect();
        let shares: Vec<f64> = per_party.iter().filter_map(|p| p.share).collect();
        let share_var: f64 = per_party.iter().filter_map(|p| p.share_se).map(|se| se * se).sum();
        out.push(FrontierCell {
            data: key.0.clone(),
            nobs: key.1,
            theta: key.2.clone(),
            mechanism: key.3.clone(),
            epsilon: f64::from_bits(key.4),
            runs: v.len(),
            mean_baseline: mean(&|t| t.baseline),
            alone: a,
            no_dp: n,
            dp: d,
            se_vs_alone: se,
            recovered: if shares.is_empty() { f64::NAN } else { shares.iter().sum::<f64>() / shares.len() as f64 },
            recovered_se: if shares.is_empty() { f64::NAN } else { share_var.sqrt() / shares.len() as f64 },
            per_party,
            worse_than_alone: d / a - 1.0,
            hurt: v.iter().filter(|t| hurt(t.alone, t.dp, t.se_dp)).count(),
            hurt_no_dp: v.iter().filter(|t| hurt(t.alone, t.no_dp, t.se_no_dp)).count(),
            failed: failed.get(key).copied().unwrap_or(0),
        });
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use dpcotrain_cotrain::named::Named;

    #[test]
    fn the_journal_spells_its_cells_as_before() {
        // A runs.jsonl written before RunCell was an enum resumes: the spellings are fixed.
        let spelled: Vec<String> = RunCell::ALL.iter().map(|c| serde_json::to_string(c).unwrap()).collect();
        assert_eq!(spelled, ["\"alone\"", "\"no-dp\"", "\"dp\""]);
        for &c in RunCell::ALL {
            assert_eq!(serde_json::from_str::<RunCell>(&serde_json::to_string(&c).unwrap()).unwrap(), c);
        }
        let e = "nodp".parse::<RunCell>().unwrap_err().to_string();
        assert!(e.contains("\"nodp\"") && e.contains("no-dp"), "{e}");
        assert_eq!("own-calibration".parse::<TraceOracle>().unwrap(), TraceOracle::OwnCalibration);
    }

    /// Node seeds multiply the jobs; node seed 0 is the split seed itself (the rows and keys of
    /// folders made before node seeds existed), the others give distinct party seeds and keys.
    #[test]
    fn node_seeds_rerun_each_split_with_other_party_seeds() {
        let cfg = FrontierConfig { seeds: vec![0, 1, 2], node_seeds: vec![0, 1, 2, 3], ..FrontierConfig::full() };
        let jobs = cfg.jobs();
        assert_eq!(jobs.len(), cfg.data.len() * cfg.nobs.len() * 3 * 4);
        let keys: HashSet<String> = jobs.iter().map(FrontierJob::key).collect();
        assert_eq!(keys.len(), jobs.len());
        let seeds: HashSet<u64> = jobs.iter().map(FrontierJob::party_seed).collect();
        assert_eq!(seeds.len(), 3 * 4, "every (split, node seed) its own party seed");
        for j in jobs.iter().filter(|j| j.node_seed == 0) {
            assert_eq!(j.party_seed(), j.seed);
            assert!(!j.key().contains("node"));
        }
        let r = FrontierRow { node_seed: 2, ..row("P1", 1, "alone", 1.0, None) };
        let text = serde_json::to_string(&r).unwrap();
        assert!(text.contains("\"node_seed\":2") && r.job_key().ends_with("|node2"), "{text}");
        assert!(!serde_json::to_string(&row("P1", 1, "alone", 1.0, None)).unwrap().contains("node_seed"));
    }

    fn row(party: &str, seed: u64, cell: &str, rmse: f64, se: Option<f64>) -> FrontierRow {
        FrontierRow {
            data: "d".into(),
            nobs: 100,
            seed,
            node_seed: 0,
            party: party.into(),
            cell: cell.parse().unwrap(),
            theta: (cell != "alone").then(|| "public".into()),
            mechanism: (cell == "dp").then(|| "finite+cap".into()),
            epsilon: (cell == "dp").then_some(1.0),
            rmse,
            epsilon_spent: None,
            error: None,
            se_vs_alone: se,
            mean_baseline: (cell == "alone").then_some(1.0),
        }
    }

    /// The trace sees the same run as the frontier's rows: its alone and after columns give the
    /// rows' RMSEs exactly; the oracles' columns are filled where the pool labels are known, and
    /// the true labels at the asked entities are the pool's.
    #[test]
    fn a_trace_is_the_frontiers_run_seen_from_inside() {
        let mut cfg = FrontierConfig::full();
        cfg.data = vec![FrontierData::Simulated { r: 0.9, masked: true }];
        cfg.nobs = vec![25];
        cfg.seeds = vec![3];
        cfg.epsilons = vec![1.0];
        cfg.mechanisms = vec![FrontierMechanism::FiniteCap];
        cfg.thetas = vec![ThetaChoice::Public];
        let job = cfg.jobs()[0];
        let rows = run_job(&cfg, &job);
        let sc = job.data.scenario(&cfg, job.nobs, job.seed).unwrap();
        let labels = sc.pool_labels.clone().expect("simulated data know their pool labels");
        let rmse = |t: &PartyTrace, k: usize| {
            (t.test.iter().map(|p| (p[0] - p[k]).powi(2)).sum::<f64>() / t.test.len() as f64).sqrt()
        };
        for (cell, dp) in [("no-dp", None), ("dp", Some((1.0, FrontierMechanism::FiniteCap)))] {
            for oracle in
                [TraceOracle::AnswerError, TraceOracle::Level, TraceOracle::OwnCalibration, TraceOracle::PublicMean]
            {
                let traces = trace_run(&cfg, &job, dp, oracle).unwrap();
                assert_eq!(traces.len(), 2);
                for t in &traces {
                    let want = |c: &str| rows.iter().find(|r| r.party == t.party && r.cell.name() == c).unwrap().rmse;
                    assert!((rmse(t, 1) - want("alone")).abs() < 1e-12, "{cell} {}", t.party);
                    assert!((rmse(t, 3) - want(cell)).abs() < 1e-12, "{cell} {}", t.party);
                    assert!(rmse(t, 5).is_finite() && rmse(t, 6).is_finite());
                    assert_eq!(t.answers.len(), cfg.queries);
                    for a in &t.answers {
                        assert_eq!(a.6, labels[a.0]);
                    }
                    match oracle {
                        TraceOracle::AnswerError | TraceOracle::PublicMean => assert!(t.oracle_value.is_nan()),
                        _ => assert!(t.oracle_value >= 0.0, "{oracle:?}: {}", t.oracle_value),
                    }
                }
            }
        }
        // A user's views carry no pool labels: the oracles' columns are NaN, the rest is filled.
        let mut views = sc.clone();
        views.pool_labels = None;
        let mut user = cfg.clone();
        user.data = vec![FrontierData::Views];
        user.views = Some(views);
        let job = user.jobs()[0];
        for t in trace_run(&user, &job, None, TraceOracle::AnswerError).unwrap() {
            assert!(t.test.iter().all(|p| p[5].is_nan() && p[6].is_nan() && p[3].is_finite()));
            assert!(t.answers.iter().all(|a| a.6.is_nan()));
        }
    }

    #[test]
    fn hurt_needs_both_one_percent_and_two_paired_se() {
        assert!(hurt(1.0, 1.02, Some(0.005)));
        assert!(!hurt(1.0, 1.02, Some(0.011)), "within 2 SE");
        assert!(!hurt(1.0, 1.009, Some(0.0001)), "within 1%");
        assert!(!hurt(1.0, 1.5, None), "no SE, no verdict");
        assert!(!hurt(1.0, 0.8, Some(0.001)), "a gain");
    }

    /// Party A gains clearly without DP and recovers half of it; party B's no-DP "gain" is
    /// noise around zero, so it has no share (a pooled ratio would mix its noise in); one run of
    /// B is hurt under DP and one without.
    #[test]
    fn shares_are_per_party_and_only_where_there_is_a_gain() {
        let mut rows = Vec::new();
        for s in 0..4u64 {
            let jitter = [0.001, -0.001, 0.002, -0.002][s as usize];
            rows.push(row("A", s, "alone", 1.0, None));
            rows.push(row("A", s, "no-dp", 0.8 + jitter, Some(0.01)));
            rows.push(row("A", s, "dp", 0.9 + jitter, Some(0.01)));
            rows.push(row("B", s, "alone", 0.5, None));
            rows.push(row("B", s, "no-dp", 0.5 + [0.01, -0.01, 0.02, 0.0][s as usize], Some(0.001)));
            rows.push(row("B", s, "dp", 0.5 + [0.03, 0.0, -0.01, 0.0][s as usize], Some(0.001)));
        }
        let cells = summarise(&rows);
        assert_eq!(cells.len(), 1);
        let c = &cells[0];
        assert_eq!(c.runs, 8);
        let a = c.per_party.iter().find(|p| p.party == "A").unwrap();
        let b = c.per_party.iter().find(|p| p.party == "B").unwrap();
        assert!((a.share.unwrap() - 0.5).abs() < 1e-12, "{a:?}");
        // rᵢ − ½gᵢ = −jitter/2 per seed: √(2·0.0005² + 2·0.001²)/√(4·3) / 0.2.
        let expected_se = (2.0 * 0.0005f64.powi(2) + 2.0 * 0.001f64.powi(2)).sqrt() / 12f64.sqrt() / 0.2;
        assert!((a.share_se.unwrap() - expected_se).abs() < 1e-9, "{a:?} against {expected_se}");
        assert_eq!(b.share, None, "B's no-DP change is within its noise: {b:?}");
        assert_eq!(b.share_se, None);
        assert!((c.recovered - 0.5).abs() < 1e-12);
        assert!((c.recovered_se - expected_se).abs() < 1e-9, "one party averaged: its own SE");
        assert_eq!((c.hurt, c.hurt_no_dp), (1, 2));
        assert!((c.mean_baseline - 1.0).abs() < 1e-12);
    }
}
