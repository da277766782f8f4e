//! A party's augmented model: its private data plus the pseudo-observations received from
//! peers, folded in by a combiner (Blocky, Noisy or Hybrid; Thomas §4.2.2) with an uncertainty
//! mode (none / marginal / full; §4.2.3). After each answer the party re-fits its own
//! hyperparameters on the augmented objective (D5), warm-started, plus one restart from the
//! pre-co-training values; the better is kept.
//!
//! Rows of the augmented data: the n private rows, then one row per (peer, answered index) in
//! peer order then first-answer order (D16). V and K₂^q are block-diagonal over peers.

use crate::CotrainError;
use crate::answer::{Answer, Uncertainty};
use crate::blocky::{BlockyModel, BlockyPredictor};
use crate::error::{AnswerFault, Conflict, DataError, OwnError, PeerFault};
use crate::hybrid::{HybridModel, HybridPredictor};
use crate::psd::project_psd;
use crate::readings::{FitStarts, Readings, SelectionVariance};
pub use crate::settings::{AnswerDiscount, AnswerGuard, CombinerKind};
use dpcotrain_gp::exact::ExactPosterior;
use dpcotrain_gp::inducing::greedy_variance;
use dpcotrain_gp::kernels::Kernel;
use dpcotrain_gp::linalg::{Cholesky, JitterPolicy};
use dpcotrain_gp::optimize::Curvature;
use dpcotrain_gp::sparse::SparsePosterior;
use dpcotrain_gp::train::{SgprStrategy, TrainOptions, train, train_from, train_sparse};
use dpcotrain_gp::{ExactGp, NoiseModel, NoiseVariance, Objective, Prediction, SparseGp, SparseKind};
use nalgebra::{DMatrix, DVector};
use serde::{Deserialize, Serialize};

/// How the Noisy combiner reads an answer (docs/honest-dp.md, "reading an answer").
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum AnswerForm {
    /// The released mean is an observation of f with noise V (Thomas §4.2.2.2): the peer's
    /// prior is counted as if it were data. Where the peer knows nothing its answer is its prior
    /// mean with V ≈ its prior variance, which still pulls the querier's model.
    Posterior,
    /// The answer is turned back into the likelihood message of the peer's labels before use:
    /// with prior variance p, latent posterior variance v and DP noise variance s² at the point,
    /// the pseudo-observation is m·p/(p − v) with noise v·p/(p − v) + s²·(p/(p − v))² (the
    /// Gaussian that, multiplied into the peer's prior, gives its posterior). An answer where the
    /// peer knows nothing then carries no weight. Needs the prior covariance and the noise
    /// variance; marginal uncertainty only.
    Likelihood,
    /// The answer read as what the release is: k linear functionals of the latent values at
    /// its points with correlated noise, w = Uᵀõ ~ N(L f(Q), R) (docs/honest-dp.md, "The release
    /// as k linear functionals"; [`dpcotrain_privacy::ReleaseLikelihood`]). The view mismatch
    /// is read as independent per point, f₂(Q) = f₁(Q) + δ with δ ~ N(0, τ² I) for τ² the
    /// answer discount (D30), so the functionals' noise is R + τ² L Lᵀ. Needs each batch's
    /// likelihood in its answer ([`crate::Party::set_send_likelihood`]; in-process only: the
    /// wire protocol does not carry it) and an exact local model.
    Functionals,
}

crate::named_enum!(AnswerForm, "answer reading", [Likelihood, Posterior, Functionals]);

impl AnswerForm {
    pub fn name(self) -> &'static str {
        match self {
            AnswerForm::Likelihood => "likelihood",
            AnswerForm::Posterior => "posterior",
            AnswerForm::Functionals => "functionals",
        }
    }

    /// Whether this reading is defined for `kind` with `uncertainty` (the likelihood reading is
    /// for the noisy combiner with marginal uncertainty only).
    pub fn check(self, kind: CombinerKind, uncertainty: Uncertainty) -> Result<(), CotrainError> {
        if self != AnswerForm::Posterior && (kind != CombinerKind::Noisy || uncertainty != Uncertainty::Marginal) {
            return Err(Conflict::ReadingNeedsNoisyMarginal {
                reading: self.name(),
                combiner: kind.name(),
                uncertainty: uncertainty.name(),
            }
            .into());
        }
        Ok(())
    }
}

/// Which GP a party fits to its private view (docs/decisions.md D21, D26).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum LocalModel {
    /// Exact up to [`SPARSE_THRESHOLD`] private rows, VFE above.
    Auto,
    Exact,
    /// Titsias's collapsed bound, θ and Z by L-BFGS (greedy-variance start).
    Vfe,
    /// θ and Z learned by SVGP's minibatch optimisation (Hensman et al. 2013: natural
    /// gradients on q(u), Adam on θ and Z), O(bM²) per step instead of O(NM²) per evaluation;
    /// q(u) is then set to its optimum, so the model's mean and variance — and its answers and
    /// their sensitivity — are the VFE posterior's at the learned θ and Z.
    Svgp,
}

impl LocalModel {
    pub fn name(self) -> &'static str {
        match self {
            LocalModel::Auto => "auto",
            LocalModel::Exact => "exact",
            LocalModel::Vfe => "vfe",
            LocalModel::Svgp => "svgp",
        }
    }
}

crate::named_enum!(LocalModel, "model.local", [Auto, Exact, Vfe, Svgp]);

/// How an SVGP local model is trained (see [`LocalModel::Svgp`]).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SvgpTraining {
    /// Minibatch rows (at most the private rows).
    pub batch: usize,
    /// Optimisation steps: at least `min_steps`, and at least `epochs` passes.
    pub epochs: f64,
    pub min_steps: u64,
    pub learning_rate: f64,
    pub natgrad_step: f64,
}

impl Default for SvgpTraining {
    fn default() -> Self {
        SvgpTraining { batch: 256, epochs: 20.0, min_steps: 1000, learning_rate: 0.02, natgrad_step: 0.2 }
    }
}

/// The leave-one-out comparison behind [`AnswerGuard::Loo`], over the private rows.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct LooCheck {
    /// Mean leave-one-out squared residual with the answers (the re-fitted augmented model).
    pub with_answers: f64,
    /// The same for the private-only model (its own fitted θ).
    pub alone: f64,
    /// The standard error of `with_answers − alone`, paired over the private rows.
    #[serde(default)]
    pub se: f64,
    /// Whether the answers are used (`Loo`: `with_answers ≤ alone`; `LooTest`:
    /// `with_answers − alone ≤ 2 se`).
    pub used: bool,
}

/// Largest noise variance (relative to the prior variance) given to a pseudo-row that carries
/// no information: such a row is kept (the model's shape does not change) but weighs nothing.
pub(crate) const UNINFORMATIVE_NOISE: f64 = 1e8;

/// Which variance of an answer the per-answer value rule ([`CoModel::answer_min_value`])
/// weighs against the querier's own latent variance.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ValueBasis {
    /// As the querier reads it: the peer's variance (its DP noise included) and the querier's
    /// own discount (D30: 30 × its σ²) and scaling on top.
    #[default]
    Read,
    /// Before the querier's discount and scaling: each answer's variance as its reading gives it
    /// (the peer's variance with its DP noise; under the likelihood reading, the message's, the
    /// peer's prior divided out). The discount scales with the querier's own σ², so against it
    /// a party with noisy labels (whose latent variance is small beside its σ²) would set every
    /// answer aside, DP or not (docs/results.md, "The eleventh pass"). Not defined for the
    /// functional reading, whose messages carry the discount.
    Undiscounted,
}

crate::named_enum!(ValueBasis, "value rule basis", [Read, Undiscounted]);

impl ValueBasis {
    /// The spelling of the lab's `--answer-min-value-basis`.
    pub fn name(self) -> &'static str {
        match self {
            ValueBasis::Read => "read",
            ValueBasis::Undiscounted => "undiscounted",
        }
    }
}

/// Everything received from one peer.
#[derive(Debug, Clone, PartialEq)]
pub struct PeerBlock {
    pub peer: String,
    /// Pool indices in first-answer order.
    pub indices: Vec<usize>,
    /// Released means (as first released; never re-released).
    pub means: Vec<f64>,
    /// Marginal latent variances (0 when not sent).
    pub vars: Vec<f64>,
    /// DP noise variance of each released mean (None when the answer did not say).
    pub noise_vars: Vec<Option<f64>>,
    /// Latest full latent covariance over `indices`.
    pub cov: Option<DMatrix<f64>>,
    /// Latest prior covariance over `indices`.
    pub prior: Option<DMatrix<f64>>,
    /// The exact likelihood of each batch release of this peer (functional reading).
    pub likelihoods: Vec<crate::answer::BatchLikelihood>,
}

/// Whose data θ is fitted to after answers arrive.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RefitTheta {
    /// D5 (Thomas 2017 §4.2.1): re-optimise θ on the private rows and the answers together.
    Augmented,
    /// Keep the private fit's θ (fitted to the party's own labels only): answers enter the
    /// posterior as data but cannot move the hyperparameters.
    Own,
    /// As `Augmented`, but no length-scale may end shorter than the private fit's: answers may
    /// make a covariate less relevant to this party's function, never more (its own labelled
    /// rows decide what varies along each covariate). A harm-study switch (docs/results.md, "The
    /// twelfth pass"): a DP answer's noise can otherwise make a covariate look relevant.
    AugmentedNoShorter,
    /// Both re-fits, `Augmented` and `AugmentedNoShorter`; the free one is kept only when the
    /// length-scales it shortens raise the augmented log marginal likelihood significantly: twice
    /// the gain above the χ² 95% quantile with one degree of freedom per shortened length-scale
    /// (Wilks 1938; the constrained fit is nested in the free one). A harm-study switch.
    AugmentedTested,
    /// As `Augmented`, with every length-scale held at the private fit's: the answers re-fit the
    /// signal and noise variances only. A peer's answers are a function of the peer's view, so
    /// along a covariate the peer does not see they are flat whatever the truth, and under DP
    /// their noise has shapes of its own; neither says how fast this party's function varies,
    /// which its own labelled rows decide. A harm-study switch (docs/results.md, "The twelfth
    /// pass").
    AugmentedAmplitude,
    /// As `Augmented`, kept inside the private rows' 95% likelihood region for θ: when the
    /// re-fitted θ lowers the private rows' own log marginal likelihood by more than half the χ²
    /// 95% quantile with one degree of freedom per hyperparameter (Wilks 1938), θ is moved back
    /// along the line to the private fit's θ̂ until it is on the region's edge. Answers choose
    /// among the θ the party's own labels allow; they cannot overrule them. A harm-study switch
    /// (docs/results.md, "The twelfth pass").
    AugmentedWithinOwn,
    /// As `Augmented`, with the length-scale of every covariate that is constant on the party's
    /// own labelled rows held at the private fit's value. Those rows cannot tell how fast the
    /// function varies along such a covariate (its length-scale stays where the private fit
    /// started it), so the re-fit would set it from the answers alone, and a peer that does not
    /// see the covariate answers flat along it whatever the truth. A harm-study switch
    /// (docs/results.md, "The twelfth pass"); under `unseen_covariates = drop`, the default since
    /// D39, such a length-scale is already held, and this is `Augmented`.
    AugmentedHoldConstant,
}

crate::named_enum!(
    RefitTheta,
    "refit theta",
    [
        Augmented,
        Own,
        AugmentedNoShorter,
        AugmentedTested,
        AugmentedAmplitude,
        AugmentedWithinOwn,
        AugmentedHoldConstant
    ]
);

impl RefitTheta {
    pub fn name(self) -> &'static str {
        match self {
            RefitTheta::Augmented => "augmented",
            RefitTheta::Own => "own",
            RefitTheta::AugmentedNoShorter => "augmented-no-shorter",
            RefitTheta::AugmentedTested => "augmented-tested",
            RefitTheta::AugmentedAmplitude => "augmented-amplitude",
            RefitTheta::AugmentedWithinOwn => "augmented-within-own",
            RefitTheta::AugmentedHoldConstant => "augmented-hold-constant",
        }
    }
}

/// How the D5 re-fit after each received answer starts (Thomas 2017 §4.2.1 re-optimises θ₁ on
/// the augmented data; where from is our choice). Each L-BFGS run is an exact LML + gradient
/// evaluation loop, so a restart doubles a re-fit's cost.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RefitPolicy {
    /// From the current θ only, with the previous re-fit's L-BFGS curvature (default;
    /// docs/decisions.md D5 gives the measurements behind it).
    Warm,
    /// From the current θ and from the private fit's θ; the better objective is kept.
    WarmRestart,
    /// As `WarmRestart` on every K-th re-fit, `Warm` on the others.
    RestartEvery(usize),
}

impl RefitPolicy {
    /// Whether re-fit number `n` (0-based) also restarts from the private fit's θ.
    pub fn restarts(self, n: usize) -> bool {
        match self {
            RefitPolicy::Warm => false,
            RefitPolicy::WarmRestart => true,
            RefitPolicy::RestartEvery(k) => (n + 1).is_multiple_of(k),
        }
    }
}

impl std::fmt::Display for RefitPolicy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            RefitPolicy::Warm => f.write_str("warm"),
            RefitPolicy::WarmRestart => f.write_str("warm+restart"),
            RefitPolicy::RestartEvery(k) => write!(f, "every={k}"),
        }
    }
}

impl std::str::FromStr for RefitPolicy {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s.trim() {
            "warm" => Ok(RefitPolicy::Warm),
            "warm+restart" => Ok(RefitPolicy::WarmRestart),
            other => match other.strip_prefix("every=").map(str::parse::<usize>) {
                Some(Ok(k)) if k >= 1 => Ok(RefitPolicy::RestartEvery(k)),
                _ => Err(format!("{s:?} is not a re-fit policy (warm, warm+restart or every=K with K ≥ 1)")),
            },
        }
    }
}

crate::serde_via_str!(RefitPolicy);

#[derive(Debug, Clone)]
pub struct CoModel {
    pub(crate) kind: CombinerKind,
    pub(crate) uncertainty: Uncertainty,
    /// How answers are read (Noisy combiner).
    pub(crate) answer_form: AnswerForm,
    /// Whether answers are checked against the private labels before use.
    guard: AnswerGuard,
    /// The readings of the ambiguous protocol choices ([`CoModel::set_readings`]).
    pub(crate) readings: Readings,
    /// The private-only posterior at the private fit's θ (answers under
    /// `answer_source = private`), built on first use.
    private_post: Option<ExactPosterior>,
    /// The guard's last verdict (None: no check since the last answer).
    loo: Option<LooCheck>,
    pub(crate) kernel: Box<dyn Kernel>,
    pub(crate) noise: NoiseVariance,
    pub(crate) x_tr: DMatrix<f64>,
    y_tr: DVector<f64>,
    /// This party's covariates of the shared pool.
    x_pool: DMatrix<f64>,
    pub(crate) blocks: Vec<PeerBlock>,
    /// Bumped whenever the model (data or hyperparameters) changes.
    pub(crate) version: u64,
    /// Hyperparameters of the private-only fit (the restart point of every re-fit).
    pub(crate) pre_params: Option<Vec<f64>>,
    pub(crate) train: TrainOptions,
    /// Where D5 re-fits start (see [`RefitPolicy`]).
    pub(crate) refit_policy: RefitPolicy,
    /// Whose data the D5 re-fit's θ is fitted to ([`RefitTheta`]).
    pub(crate) refit_theta: RefitTheta,
    /// Variance added to every received answer's reported variance (each pseudo row's noise):
    /// the answer as a label of *this* party's function also carries the responder's residual
    /// noise, which no answer reports. 0 by default.
    pub(crate) answer_extra_var: f64,
    /// Variance of a bias shared by all answers of one peer (τ²): the answers are read as
    /// f(x) + b + e with b ~ N(0, τ²) common to the peer's answers, so their common level
    /// counts as one observation of variance τ² + v/q, not q independent ones; their
    /// differences keep full weight (exact local model; 0: off).
    pub(crate) answer_level_var: f64,
    /// Factor on every answer's variance after it is read (the message's variance, the DP
    /// noise included): 1 reads answers as reported, K > 1 gives each answer 1/K of its weight
    /// (the harm study's tempering switch; 1 by default).
    pub(crate) answer_var_scale: f64,
    /// When set, each re-fit first chooses `answer_extra_var` from these candidates by the
    /// augmented objective at the current θ (a profile marginal likelihood of the party's own
    /// rows and the answers together).
    pub(crate) answer_noise_grid: Option<Vec<f64>>,
    /// The answer check (docs/results.md, "Does co-training ever hurt a party?"): an answer whose distance from this party's
    /// private-only prediction exceeds `z` standard deviations of that difference (its own
    /// latent variance + its noise σ² + the answer's variance) gets its variance raised until
    /// the distance is exactly `z` — kept, but weighted as the evidence allows (exact local
    /// model; None: off).
    pub(crate) answer_check_z: Option<f64>,
    /// Decline a peer's DP answers when this party's own fitted noise sd is below `ratio` times
    /// the answer's DP noise sd (root mean of its `noise_var`): a party whose own error is
    /// already far below the release's noise gains nothing from it on average and is made worse
    /// by the draw in about one run in three (docs/results.md, "The sixth pass"). Reads only
    /// this party's own fit; a declined answer is counted in [`CoModel::declined_answers`] and
    /// changes nothing else. None: off (the harm study's switch).
    pub(crate) decline_noise_ratio: Option<f64>,
    /// Answers declined by [`CoModel::decline_noise_ratio`] so far.
    pub(crate) declined_answers: usize,
    /// The per-answer value rule: an answer whose variance (as read, the discount included)
    /// exceeds 1/K of this party's own private-only latent variance at its entity weighs
    /// nothing there — it could cut that variance by less than K/(1+K), so it brings little and
    /// risks what its reported variance does not cover. Reads only this party's own fit (exact
    /// local model). None: off (the harm study's switch, issue 56).
    pub(crate) answer_min_value: Option<f64>,
    /// Which variance of an answer [`CoModel::answer_min_value`] compares with.
    pub(crate) answer_min_value_basis: ValueBasis,
    /// Re-fits so far (replayed on restore, so the policy's choices repeat).
    refits: usize,
    /// The L-BFGS curvature the last re-fit's warm run and restart ended with: the next
    /// re-fit's objective differs by one answer, so it starts from this inverse-Hessian model
    /// (docs/decisions.md D5; rebuilt identically when a restore replays the re-fits).
    refit_curvature: [Curvature; 2],
    /// Objective evaluations spent in re-fits so far (the cost measure of `experiment`).
    pub(crate) refit_evaluations: usize,
    /// Eigenvalues clipped while projecting reported matrices to PSD (diagnostic).
    pub(crate) psd_clipped: usize,
    /// Large private sets: the local GP is VFE with these inducing inputs (greedy variance,
    /// chosen at the private fit). `None`: exact GP.
    sparse_z: Option<DMatrix<f64>>,
    /// Number of inducing points requested for the sparse path.
    sparse_m: Option<usize>,
    /// Learn the sparse path's θ and Z by SVGP instead of L-BFGS on the collapsed bound.
    svgp: Option<SvgpTraining>,
    /// The posterior factorisations for (version, parameters, pseudo rows), reused by every
    /// prediction until the model changes (an O(N³) factorisation for the exact combiners, an
    /// O(NM²) one for the sparse model).
    post: Option<(PostKey, Predictor)>,
}

/// What a cached posterior depends on beyond the private data (fixed at construction): the
/// model version, the hyperparameters, the combiner and mode, and the received blocks.
type PostKey = (u64, Vec<f64>, CombinerKind, Uncertainty, Vec<PeerBlock>);

/// A factorised posterior, ready to predict.
#[derive(Debug, Clone)]
enum Predictor {
    Noisy(ExactPosterior),
    Sparse(SparsePosterior),
    Blocky(BlockyPredictor),
    Hybrid(HybridPredictor),
}

impl Predictor {
    fn predict(&self, xs: &DMatrix<f64>, full_cov: bool) -> Result<Prediction, CotrainError> {
        Ok(match self {
            Predictor::Noisy(p) => p.predict(xs, full_cov)?,
            Predictor::Sparse(p) => p.predict(xs, full_cov)?,
            Predictor::Blocky(p) => p.predict(xs, full_cov)?,
            Predictor::Hybrid(p) => p.predict(xs, full_cov)?,
        })
    }
}

/// Memo of exact private fits. A private fit is a deterministic function of the private data,
/// the initial kernel and noise, and the training options (seeded restarts), so runs that share
/// a data configuration (a grid's combiners × uncertainty modes, both DP settings) can reuse
/// it instead of repeating four L-BFGS runs. The key holds every input exactly, as typed
/// fields and bit patterns: the kernel's structure (its name, which spells the expression and
/// every structural choice — ARD, Matérn order, polynomial degree, arc-cosine order — and its
/// input dimension), its parameters and bounds, the noise's, the options' and the data's; the
/// value is the fitted kernel and noise objects themselves, so a hit is bit-identical to a
/// fresh fit. Bounded (oldest entries dropped), process-wide, thread-safe.
mod private_fit {
    use super::*;
    use std::collections::VecDeque;
    use std::sync::Mutex;

    /// What a kernel is, exactly: equal only for kernels that evaluate alike from the same start.
    #[derive(PartialEq)]
    struct KernelKey {
        name: String,
        input_dim: Option<usize>,
        params: Vec<u64>,
        bounds: Vec<(u64, u64)>,
    }

    /// The options a fit depends on (`progress` only reports, so it is not part of the key).
    #[derive(PartialEq)]
    struct OptionsKey {
        max_iters: usize,
        restarts: usize,
        seed: u64,
        restart_spread: u64,
        ftol: u64,
        pgtol: u64,
    }

    #[derive(PartialEq)]
    pub(super) struct Key {
        kernel: KernelKey,
        /// σ², its bounds, whether it is learned.
        noise: (u64, (u64, u64), bool),
        opts: OptionsKey,
        shape: (usize, usize),
        x: Vec<u64>,
        y: Vec<u64>,
    }

    fn bits(b: &dpcotrain_gp::Bounds) -> (u64, u64) {
        (b.lower.to_bits(), b.upper.to_bits())
    }
    pub(super) type Fit = (Box<dyn Kernel>, NoiseVariance, f64);

    const CAPACITY: usize = 64;
    static FITS: Mutex<VecDeque<(Key, Fit)>> = Mutex::new(VecDeque::new());

    pub(super) fn key(
        kernel: &dyn Kernel,
        noise: &NoiseVariance,
        x: &DMatrix<f64>,
        y: &DVector<f64>,
        opts: &TrainOptions,
    ) -> Key {
        Key {
            kernel: KernelKey {
                name: kernel.name(),
                input_dim: kernel.input_dim(),
                params: kernel.params().iter().map(|v| v.to_bits()).collect(),
                bounds: kernel.bounds().iter().map(bits).collect(),
            },
            noise: (noise.variance.to_bits(), bits(&noise.bounds), noise.learn),
            opts: OptionsKey {
                max_iters: opts.max_iters,
                restarts: opts.restarts,
                seed: opts.seed,
                restart_spread: opts.restart_spread.to_bits(),
                ftol: opts.ftol.to_bits(),
                pgtol: opts.pgtol.to_bits(),
            },
            shape: x.shape(),
            x: x.iter().map(|v| v.to_bits()).collect(),
            y: y.iter().map(|v| v.to_bits()).collect(),
        }
    }

    pub(super) fn get(key: &Key) -> Option<Fit> {
        let fits = FITS.lock().unwrap_or_else(|e| e.into_inner());
        fits.iter().find(|(k, _)| k == key).map(|(_, f)| f.clone())
    }

    pub(super) fn put(key: Key, fit: Fit) {
        let mut fits = FITS.lock().unwrap_or_else(|e| e.into_inner());
        if fits.iter().any(|(k, _)| *k == key) {
            return;
        }
        if fits.len() == CAPACITY {
            fits.pop_front();
        }
        fits.push_back((key, fit));
    }

    #[cfg(test)]
    mod tests {
        use super::*;
        use dpcotrain_gp::kernels::{Polynomial, SquaredExponential};

        #[test]
        fn the_key_tells_apart_kernels_that_share_their_parameters() {
            let x = DMatrix::from_row_slice(3, 1, &[0.0, 1.0, 2.0]);
            let y = DVector::from_row_slice(&[0.1, 0.2, 0.3]);
            let noise = NoiseVariance::new(0.1);
            let opts = TrainOptions::default();
            let k = |kernel: &dyn Kernel| key(kernel, &noise, &x, &y, &opts);
            let iso = SquaredExponential::isotropic(1.0, 0.7);
            assert!(k(&iso) == k(&iso.clone()), "the same kernel, the same key");
            assert!(k(&iso) != k(&SquaredExponential::ard(1.0, vec![0.7])), "ARD in one dimension is another kernel");
            assert!(k(&Polynomial::isotropic(2, 1.0, 1.0)) != k(&Polynomial::isotropic(3, 1.0, 1.0)));
            let mut bounded = iso.clone();
            bounded.set_bounds(&[dpcotrain_gp::Bounds::new(-1.0, 1.0); 2]);
            assert!(k(&iso) != k(&bounded), "bounds change the fit");
            let hooked = TrainOptions {
                progress: Some(dpcotrain_gp::train::ProgressHook(std::sync::Arc::new(|_| {}))),
                ..TrainOptions::default()
            };
            assert!(k(&iso) == key(&iso, &noise, &x, &y, &hooked), "a progress hook only reports");
            let y2 = DVector::from_row_slice(&[0.1, 0.2, 0.30000000000000004]);
            assert!(k(&iso) != key(&iso, &noise, &x, &y2, &opts), "one label's last bit");
        }
    }
}

/// Private sets above this size use the VFE local model by default (docs/decisions.md D21).
pub const SPARSE_THRESHOLD: usize = 3000;

/// Pseudo rows: own covariates (q × d), means, V (q × q) and K₂^q (q × q).
type Pseudo = (DMatrix<f64>, DVector<f64>, DMatrix<f64>, DMatrix<f64>);

/// The combiner-specific model built from the current data.
enum Built {
    Noisy(ExactGp),
    /// Noisy on a VFE local model (generalised per-point noise).
    Sparse(SparseGp),
    Blocky(BlockyModel),
    Hybrid(HybridModel),
}

impl CoModel {
    pub fn new(
        kind: CombinerKind,
        uncertainty: Uncertainty,
        kernel: Box<dyn Kernel>,
        noise: NoiseVariance,
        x_tr: DMatrix<f64>,
        y_tr: DVector<f64>,
        x_pool: DMatrix<f64>,
    ) -> Result<Self, CotrainError> {
        if x_tr.nrows() != y_tr.len() || x_tr.nrows() == 0 {
            return Err(DataError::NoPrivateRows.into());
        }
        if x_pool.ncols() != x_tr.ncols() {
            return Err(DataError::PoolColumns.into());
        }
        let noise = NoiseVariance { learn: true, ..noise };
        Ok(CoModel {
            kind,
            uncertainty,
            answer_form: AnswerForm::Posterior,
            guard: AnswerGuard::Off,
            readings: Readings::default(),
            private_post: None,
            loo: None,
            kernel,
            noise,
            x_tr,
            y_tr,
            x_pool,
            blocks: Vec::new(),
            version: 0,
            pre_params: None,
            train: TrainOptions::default(),
            refit_policy: RefitPolicy::Warm,
            refit_theta: RefitTheta::Augmented,
            answer_extra_var: 0.0,
            answer_level_var: 0.0,
            answer_var_scale: 1.0,
            answer_noise_grid: None,
            answer_check_z: None,
            decline_noise_ratio: None,
            declined_answers: 0,
            answer_min_value: None,
            answer_min_value_basis: ValueBasis::Read,
            refits: 0,
            refit_curvature: Default::default(),
            refit_evaluations: 0,
            psd_clipped: 0,
            post: None,
            sparse_z: None,
            sparse_m: None,
            svgp: None,
        })
    }

    /// Use a VFE local model with `m` greedy-variance inducing points (large private sets).
    /// Only the Noisy combiner works on top of it, with none or marginal uncertainty: Blocky and
    /// Hybrid need the exact private block (Blocky inverts K₁(X_tr) + σ²I; Hybrid forms K_aug
    /// over every private row), which is what a sparse model avoids.
    pub fn use_sparse(&mut self, m: usize) -> Result<(), CotrainError> {
        if self.kind != CombinerKind::Noisy {
            return Err(Conflict::CombinerNeedsExact { combiner: self.kind.name() }.into());
        }
        if self.uncertainty == Uncertainty::Full || self.answer_form == AnswerForm::Functionals {
            return Err(Conflict::DenseNoiseUnderSparse.into());
        }
        if self.guard != AnswerGuard::Off {
            return Err(Conflict::GuardNeedsExact.into());
        }
        if m == 0 || m > self.x_tr.nrows() {
            return Err(CotrainError::setting(
                "the number of inducing points M",
                m as f64,
                "lie between 1 and the number of private rows",
            ));
        }
        self.sparse_m = Some(m);
        Ok(())
    }

    /// Whether the local model is sparse.
    pub fn is_sparse(&self) -> bool {
        self.sparse_m.is_some()
    }

    /// As [`CoModel::use_sparse`], with θ and Z learned by SVGP ([`LocalModel::Svgp`]).
    pub fn use_svgp(&mut self, m: usize, training: SvgpTraining) -> Result<(), CotrainError> {
        for (ok, key, value, bound) in [
            (training.batch >= 1, "SVGP minibatch size", training.batch as f64, "be at least 1"),
            (
                training.epochs.is_finite() && training.epochs > 0.0,
                "SVGP epochs",
                training.epochs,
                "be positive and finite",
            ),
            (
                training.learning_rate.is_finite() && training.learning_rate > 0.0,
                "SVGP learning rate",
                training.learning_rate,
                "be positive and finite",
            ),
            (
                training.natgrad_step > 0.0 && training.natgrad_step <= 1.0,
                "SVGP natural-gradient step",
                training.natgrad_step,
                "lie in (0, 1]",
            ),
        ] {
            if !ok {
                return Err(CotrainError::setting(key, value, bound));
            }
        }
        self.use_sparse(m)?;
        self.svgp = Some(training);
        Ok(())
    }

    /// The inducing inputs of the sparse local model (after the private fit).
    pub fn sparse_inducing(&self) -> Option<&DMatrix<f64>> {
        self.sparse_z.as_ref()
    }

    /// The local model in use (never `Auto`).
    pub fn local_model(&self) -> LocalModel {
        match (self.sparse_m, self.svgp) {
            (None, _) => LocalModel::Exact,
            (Some(_), None) => LocalModel::Vfe,
            (Some(_), Some(_)) => LocalModel::Svgp,
        }
    }

    pub fn n_private(&self) -> usize {
        self.x_tr.nrows()
    }

    pub fn x_pool(&self) -> &DMatrix<f64> {
        &self.x_pool
    }

    /// Number of pseudo-observation rows.
    pub fn n_pseudo(&self) -> usize {
        self.blocks.iter().map(|b| b.indices.len()).sum()
    }

    /// Pool indices already asked of any peer by this party.
    pub fn asked(&self) -> Vec<usize> {
        let mut v: Vec<usize> = self.blocks.iter().flat_map(|b| b.indices.iter().copied()).collect();
        v.sort_unstable();
        v.dedup();
        v
    }

    pub(crate) fn params(&self) -> Vec<f64> {
        crate::kernel_noise_params(self.kernel.as_ref(), &self.noise)
    }

    pub(crate) fn set_params(&mut self, p: &[f64]) {
        crate::set_kernel_noise_params(&mut self.kernel, &mut self.noise, p)
    }

    /// Fit the hyperparameters on the private data alone (the pre-co-training model).
    pub fn fit_private(&mut self) -> Result<f64, CotrainError> {
        let held = self.hold_unseen();
        let result = match (self.sparse_m, self.svgp) {
            (Some(m), Some(t)) => self.fit_private_svgp(m, t),
            _ => self.fit_private_inner(),
        };
        if let Some(b) = held {
            self.kernel.set_bounds(&b);
        }
        result
    }

    fn fit_private_inner(&mut self) -> Result<f64, CotrainError> {
        if let Some(m) = self.sparse_m {
            let z = greedy_variance(self.kernel.as_ref(), &self.x_tr, m, 0.0, self.train.seed)?.z;
            let mut gp = SparseGp::new(
                SparseKind::Vfe,
                self.kernel.clone(),
                NoiseModel::Homoscedastic(self.noise.clone()),
                self.x_tr.clone(),
                self.y_tr.clone(),
                z,
            )?;
            let r = train_sparse(&mut gp, SgprStrategy::REINIT_RETRAIN, &self.train)?;
            self.kernel = gp.kernel.clone();
            self.noise = gp.noise.sigma2().clone();
            self.sparse_z = Some(gp.z().clone());
            self.pre_params = Some(self.params());
            self.version += 1;
            return Ok(r.objective);
        }
        // D17/D38: 3 restarts for the private fit, drawn from one fixed stream (`fit_starts =
        // fixed-4`, the default) or the party's seed (`best-of-4`); `fit_starts = single` is one
        // run from the GPy default start s² = ℓ = σ² = 1.
        let restarts = match self.readings.fit_starts {
            FitStarts::Single => {
                let mut p = self.params();
                p.iter_mut().for_each(|v| *v = 0.0);
                self.set_params(&p);
                0
            }
            FitStarts::BestOf(_) | FitStarts::Fixed(_) => self.train.restarts.max(self.readings.fit_starts.restarts()),
        };
        let seed = self.readings.fit_starts.seed(self.train.seed);
        let opts = TrainOptions { restarts, seed, ..self.train.clone() };
        let key = private_fit::key(self.kernel.as_ref(), &self.noise, &self.x_tr, &self.y_tr, &opts);
        let (kernel, noise, objective) = match private_fit::get(&key) {
            Some(hit) => hit,
            None => {
                let mut gp = ExactGp::new(
                    self.kernel.clone(),
                    NoiseModel::Homoscedastic(self.noise.clone()),
                    self.x_tr.clone(),
                    self.y_tr.clone(),
                )?;
                let r = train(&mut gp, &opts)?;
                let fit = (gp.kernel.clone(), gp.noise.sigma2().clone(), r.objective);
                private_fit::put(key, fit.clone());
                fit
            }
        };
        self.kernel = kernel;
        self.noise = noise;
        self.pre_params = Some(self.params());
        self.private_post = None;
        self.version += 1;
        Ok(objective)
    }

    /// Fold an answer in (means of new indices appended; matrices replaced by the latest).
    /// A malformed answer is rejected whole: the model is unchanged.
    pub fn absorb(&mut self, a: &Answer) -> Result<(), CotrainError> {
        let saved = self.blocks.clone();
        let r = self.absorb_inner(a);
        if r.is_err() {
            self.blocks = saved;
        } else {
            // A new answer is judged afresh at the next re-fit.
            self.loo = None;
        }
        r
    }

    fn absorb_inner(&mut self, a: &Answer) -> Result<(), CotrainError> {
        let fault = |f: AnswerFault| answer_fault(&a.responder, f);
        if a.mean.len() != a.indices.len() || a.mean.iter().any(|m| !m.is_finite()) {
            return Err(fault(AnswerFault::Means));
        }
        let pool = self.x_pool.nrows();
        if let Some(&bad) = a.indices.iter().chain(&a.answered).find(|&&i| i >= pool) {
            return Err(fault(AnswerFault::OutsidePool { index: bad }));
        }
        if a.var.as_ref().is_some_and(|v| v.len() != a.indices.len())
            || a.noise_var.as_ref().is_some_and(|v| v.len() != a.indices.len())
        {
            return Err(fault(AnswerFault::VarianceCount));
        }
        if let Some(&bad) = a.noise_var.iter().flatten().find(|n| !(n.is_finite() && **n >= 0.0)) {
            return Err(fault(AnswerFault::NoiseVariance { value: bad }));
        }
        if let (Some(ratio), Some(nv)) = (self.decline_noise_ratio, &a.noise_var)
            && !nv.is_empty()
        {
            let noise_sd = (nv.iter().sum::<f64>() / nv.len() as f64).sqrt();
            if self.private_noise_variance().sqrt() < ratio * noise_sd {
                self.declined_answers += 1;
                return Ok(());
            }
        }
        let pos = match self.blocks.iter().position(|b| b.peer == a.responder) {
            Some(p) => p,
            None => {
                self.blocks.push(PeerBlock {
                    peer: a.responder.clone(),
                    indices: vec![],
                    means: vec![],
                    vars: vec![],
                    noise_vars: vec![],
                    cov: None,
                    prior: None,
                    likelihoods: Vec::new(),
                });
                self.blocks.len() - 1
            }
        };
        let b = &mut self.blocks[pos];
        for (k, &i) in a.indices.iter().enumerate() {
            if b.indices.contains(&i) {
                continue; // means stay as first released
            }
            b.indices.push(i);
            b.means.push(a.mean[k]);
            let v = a.var.as_ref().map(|v| v[k]).unwrap_or(0.0);
            if !(v.is_finite() && v >= 0.0) {
                return Err(fault(AnswerFault::Variance { value: v }));
            }
            b.vars.push(v);
            b.noise_vars.push(a.noise_var.as_ref().map(|n| n[k]));
        }
        let q = b.indices.len();
        let check = |m: &Option<DMatrix<f64>>, what: &'static str| -> Result<Option<DMatrix<f64>>, CotrainError> {
            match m {
                None => Ok(None),
                Some(m) => {
                    if a.answered != b.indices || m.nrows() != q || m.ncols() != q || m.iter().any(|v| !v.is_finite()) {
                        return Err(fault(AnswerFault::NotCovering { what }));
                    }
                    Ok(Some(m.clone()))
                }
            }
        };
        let cov = check(&a.cov, "covariance")?;
        let prior = check(&a.prior_cov, "prior covariance")?;
        if self.answer_form == AnswerForm::Likelihood && (prior.is_none() || a.noise_var.is_none()) {
            return Err(fault(AnswerFault::LikelihoodNeedsPriorAndNoise));
        }
        if let Some(l) = &a.likelihood {
            l.release.validate(l.indices.len()).map_err(|e| fault(AnswerFault::Release(Box::new(e))))?;
            if l.indices.iter().any(|i| !a.indices.contains(i))
                || b.likelihoods.iter().any(|old| old.indices.iter().any(|i| l.indices.contains(i)))
            {
                return Err(fault(AnswerFault::LikelihoodOutside));
            }
            b.likelihoods.push(l.clone());
        }
        if self.answer_form == AnswerForm::Functionals
            && b.indices.iter().any(|i| !b.likelihoods.iter().any(|l| l.indices.contains(i)))
        {
            return Err(fault(AnswerFault::FunctionalNeedsLikelihood));
        }
        if cov.is_some() {
            b.cov = cov;
        }
        if prior.is_some() {
            b.prior = prior;
        }
        self.version += 1;
        Ok(())
    }

    /// Augmented pseudo rows: own covariates, means, V and K₂^q (block-diagonal over peers).
    fn pseudo(&mut self) -> Result<Pseudo, CotrainError> {
        let q = self.n_pseudo();
        let d = self.x_tr.ncols();
        let mut xq = DMatrix::zeros(q, d);
        let mut mu = DVector::zeros(q);
        let mut v = DMatrix::zeros(q, q);
        let mut k2 = DMatrix::zeros(q, q);
        let mut off = 0;
        let mut clipped = 0;
        let mut v_msg: Vec<f64> = Vec::with_capacity(q);
        if self.answer_form == AnswerForm::Likelihood && self.uncertainty != Uncertainty::Marginal {
            return Err(Conflict::LikelihoodNeedsMarginal.into());
        }
        for b in &self.blocks {
            let nb = b.indices.len();
            for (k, &i) in b.indices.iter().enumerate() {
                xq.row_mut(off + k).copy_from(&self.x_pool.row(i));
                mu[off + k] = b.means[k];
            }
            if self.answer_form == AnswerForm::Likelihood {
                let (m, v) = likelihood_messages(b)?;
                for k in 0..nb {
                    mu[off + k] = m[k];
                    v_msg.push(v[k]);
                }
            }
            let vb = match self.uncertainty {
                _ if self.answer_form == AnswerForm::Functionals => {
                    let prior = self.kernel.diag(xq.rows(off, nb)).mean();
                    let (m, block) = functional_messages(b, self.answer_var_scale, self.answer_extra_var, prior)?;
                    mu.rows_mut(off, nb).copy_from(&m);
                    block
                }
                Uncertainty::None => DMatrix::zeros(nb, nb),
                Uncertainty::Marginal if self.answer_form == AnswerForm::Likelihood => {
                    DMatrix::from_diagonal(&DVector::from_column_slice(&v_msg[off..off + nb]))
                }
                Uncertainty::Marginal => DMatrix::from_diagonal(&DVector::from_column_slice(&b.vars)),
                Uncertainty::Full => {
                    let c = b.cov.as_ref().ok_or_else(|| answer_fault(&b.peer, AnswerFault::NoCovariance))?;
                    let (p, n) = project_psd(c);
                    clipped += n;
                    p
                }
            };
            v.view_mut((off, off), (nb, nb)).copy_from(&vb);
            if self.kind.needs_prior() {
                let pr = b.prior.as_ref().ok_or_else(|| {
                    answer_fault(&b.peer, AnswerFault::CombinerNeedsPrior { combiner: self.kind.name() })
                })?;
                let (p, n) = project_psd(pr);
                clipped += n;
                k2.view_mut((off, off), (nb, nb)).copy_from(&p);
            }
            off += nb;
        }
        self.psd_clipped += clipped;
        // The answers' variances before the discount, for the value rule's `Undiscounted` basis.
        let undiscounted: Option<Vec<f64>> = (self.answer_min_value.is_some()
            && self.answer_min_value_basis == ValueBasis::Undiscounted)
            .then(|| (0..q).map(|i| v[(i, i)]).collect());
        if undiscounted.is_some() && self.answer_form == AnswerForm::Functionals {
            return Err(Conflict::UndiscountedNeedsPointAnswers.into());
        }
        // The functional messages carry the tempering and the discount already (in R).
        let functional = self.answer_form == AnswerForm::Functionals;
        if self.answer_var_scale != 1.0 && !functional {
            v *= self.answer_var_scale;
        }
        if self.answer_extra_var > 0.0 && !functional {
            for i in 0..q {
                v[(i, i)] += self.answer_extra_var;
            }
        }
        if self.answer_level_var > 0.0 && !self.is_sparse() {
            let mut off = 0;
            for b in &self.blocks {
                let nb = b.indices.len();
                v.view_mut((off, off), (nb, nb)).add_scalar_mut(self.answer_level_var);
                off += nb;
            }
        }
        if let Some(z) = self.answer_check_z
            && q > 0
            && !self.is_sparse()
        {
            let own = self.predict_private(&xq, false)?;
            let s2 = self.private_noise_variance();
            for i in 0..q {
                let r = mu[i] - own.mean[i];
                let spread = own.var[i] + s2 + v[(i, i)];
                if r * r > z * z * spread {
                    v[(i, i)] += r * r / (z * z) - spread;
                }
            }
        }
        if let Some(k) = self.answer_min_value
            && q > 0
            && !self.is_sparse()
        {
            let own = self.predict_private(&xq, false)?;
            let prior = self.kernel.diag(xq.rows(0, q));
            for i in 0..q {
                let basis = undiscounted.as_ref().map_or(v[(i, i)], |r| r[i]);
                if own.var[i] < k * basis {
                    v[(i, i)] += UNINFORMATIVE_NOISE * prior[i];
                }
            }
        }
        Ok((xq, mu, v, k2))
    }

    /// [`LocalModel::Svgp`]'s private fit: θ and Z by SVGP from the greedy-variance start on
    /// the private rows (minibatches in a seeded order), then the collapsed VFE model at those
    /// θ and Z — the SVGP with its optimal q(u) — serves every prediction and re-fit.
    fn fit_private_svgp(&mut self, m: usize, t: SvgpTraining) -> Result<f64, CotrainError> {
        use dpcotrain_gp::Svgp;
        use dpcotrain_gp::optimize::adam::AdamOptions;
        use dpcotrain_gp::svgp::{InMemory, SvgpOptions, fit_svgp};
        let z = greedy_variance(self.kernel.as_ref(), &self.x_tr, m, 0.0, self.train.seed)?.z;
        let mut svgp = Svgp::new(self.kernel.clone(), self.noise.clone(), z)?;
        let n = self.x_tr.nrows();
        let batch = t.batch.min(n);
        let mut source = InMemory::new(self.x_tr.clone(), self.y_tr.clone(), batch, self.train.seed)?;
        let epochs = (t.epochs * n as f64 / batch as f64).ceil() as u64;
        let opts = SvgpOptions {
            steps: epochs.max(t.min_steps),
            adam: AdamOptions { learning_rate: t.learning_rate, ..Default::default() },
            natgrad_step: t.natgrad_step,
            checkpoint_every: 0,
            progress_every: 0,
        };
        fit_svgp(&mut svgp, &mut source, &opts, None, &mut |_| Ok(()))?;
        let gp = SparseGp::new(
            SparseKind::Vfe,
            svgp.kernel.clone(),
            NoiseModel::Homoscedastic(svgp.noise.clone()),
            self.x_tr.clone(),
            self.y_tr.clone(),
            svgp.z().clone(),
        )?;
        let objective = gp.objective_value()?;
        self.kernel = svgp.kernel;
        self.noise = svgp.noise;
        self.sparse_z = Some(gp.z().clone());
        self.pre_params = Some(self.params());
        self.version += 1;
        Ok(objective)
    }

    /// Check answers against this party's own labels (Noisy combiner, exact local model).
    ///
    /// With [`AnswerGuard::Loo`], every re-fit ends with a leave-one-out comparison over the
    /// private rows (Rasmussen & Williams 2006, eq 5.12: for any jointly Gaussian model the
    /// prediction of y_i from every other row has residual α_i/[K_y⁻¹]_ii): the mean squared
    /// residual of the augmented model (private rows and pseudo-rows, re-fitted θ₁) against that
    /// of the private-only model (its own θ₁). If the answers make it larger, they are set aside:
    /// kept (and persisted) but unused, and the model is the private-only one until the next
    /// answer arrives. This protects a party whose own rows cover where it will predict (its
    /// private rows look like its test set); where answers help only in regions without private
    /// rows, the check cannot see the gain and may set them aside. The check reads the private
    /// labels, so it is only safe where the co-trained model is never released — the honest
    /// policy (`batches`) releases the private-only posterior.
    pub fn set_guard(&mut self, guard: AnswerGuard) -> Result<(), CotrainError> {
        if guard != AnswerGuard::Off {
            if self.kind != CombinerKind::Noisy {
                return Err(Conflict::GuardNeedsNoisy { combiner: self.kind.name() }.into());
            }
            if self.is_sparse() {
                return Err(Conflict::GuardNeedsExact.into());
            }
        }
        self.guard = guard;
        self.loo = None;
        self.version += 1;
        Ok(())
    }

    pub fn guard(&self) -> AnswerGuard {
        self.guard
    }

    /// The guard's verdict after the latest re-fit (None: guard off, or no re-fit since the last
    /// answer).
    pub fn loo_check(&self) -> Option<LooCheck> {
        self.loo
    }

    /// Whether the received answers are part of the model now.
    pub fn answers_used(&self) -> bool {
        self.loo.is_none_or(|c| c.used)
    }

    /// Leave-one-out squared residuals of the first `n` rows of `gp` (R&W eq 5.12).
    fn loo_squared(gp: &ExactGp, n: usize) -> Result<Vec<f64>, CotrainError> {
        let post = gp.posterior()?;
        let kinv = post.cholesky().inverse_lower();
        let alpha = post.alpha();
        let r: Vec<f64> = (0..n).map(|i| (alpha[i] / kinv[(i, i)]).powi(2)).collect();
        if r.iter().any(|v| !v.is_finite()) {
            return Err(OwnError::NonFinite { what: "leave-one-out residuals" }.into());
        }
        Ok(r)
    }

    /// The exact GP on the private rows alone with `kernel` and `noise`.
    pub(crate) fn private_gp(&self, kernel: Box<dyn Kernel>, noise: NoiseVariance) -> Result<ExactGp, CotrainError> {
        Ok(ExactGp::new(kernel, NoiseModel::Homoscedastic(noise), self.x_tr.clone(), self.y_tr.clone())?)
    }

    /// The private-only model at the private fit's θ₁.
    fn private_only(&self) -> Result<ExactGp, CotrainError> {
        let (mut k, mut s) = (self.kernel.clone(), self.noise.clone());
        if let Some(pre) = &self.pre_params {
            crate::set_kernel_noise_params(&mut k, &mut s, pre);
        }
        self.private_gp(k, s)
    }

    /// Run the guard's comparison on the current (re-fitted) model and apply its verdict.
    pub(crate) fn check_answers(&mut self) -> Result<(), CotrainError> {
        self.loo = None;
        let n = self.x_tr.nrows();
        if self.guard == AnswerGuard::Off || self.n_pseudo() == 0 || n < 2 {
            return Ok(());
        }
        let Built::Noisy(aug) = self.build()? else {
            return Err(Conflict::GuardNeedsExact.into());
        };
        let with = Self::loo_squared(&aug, n)?;
        let own = Self::loo_squared(&self.private_only()?, n)?;
        let nf = n as f64;
        let with_answers = with.iter().sum::<f64>() / nf;
        let alone = own.iter().sum::<f64>() / nf;
        let d: Vec<f64> = with.iter().zip(&own).map(|(a, b)| a - b).collect();
        let dm = with_answers - alone;
        let se = (d.iter().map(|x| (x - dm).powi(2)).sum::<f64>() / (nf - 1.0) / nf).sqrt();
        let used = match self.guard {
            AnswerGuard::LooTest => dm <= 2.0 * se,
            _ => with_answers <= alone,
        };
        self.loo = Some(LooCheck { with_answers, alone, se, used });
        if !used && let Some(pre) = self.pre_params.clone() {
            self.set_params(&pre);
        }
        self.version += 1;
        Ok(())
    }

    /// Choose how answers are read; the likelihood reading is defined for the Noisy combiner with
    /// marginal uncertainty only.
    pub fn set_answer_form(&mut self, form: AnswerForm) -> Result<(), CotrainError> {
        form.check(self.kind, self.uncertainty)?;
        if form == AnswerForm::Functionals && self.is_sparse() {
            return Err(Conflict::FunctionalUnderSparse.into());
        }
        self.answer_form = form;
        self.version += 1;
        Ok(())
    }

    /// Set the readings of the ambiguous protocol choices (docs/decisions.md D25). The combiner
    /// reads `hybrid` and `selection_variance`; the party reads the others.
    pub fn set_readings(&mut self, readings: Readings) {
        self.readings = readings;
        self.version += 1;
    }

    pub fn readings(&self) -> Readings {
        self.readings
    }

    /// The variance uncertainty sampling ranks candidates by: the clamped predictive variance,
    /// or under `selection_variance = raw` the raw one (Blocky's can be negative; the other
    /// combiners' raw and clamped variances differ only by round-off below zero).
    pub fn selection_variance(&mut self, xs: &DMatrix<f64>) -> Result<DVector<f64>, CotrainError> {
        if self.readings.selection_variance == SelectionVariance::Raw && self.kind == CombinerKind::Blocky {
            self.predict(xs, false)?;
            if let Some((_, Predictor::Blocky(p))) = &self.post {
                return Ok(p.raw_variance(xs)?);
            }
        }
        Ok(self.predict(xs, false)?.var)
    }

    /// Latent predictive of the private-only model (private rows, the private fit's θ): what a
    /// responder answers from under `answer_source = private` (exact local model only).
    pub fn predict_private(&mut self, xs: &DMatrix<f64>, full_cov: bool) -> Result<Prediction, CotrainError> {
        if self.is_sparse() {
            return Err(Conflict::PrivateSourceNeedsExact.into());
        }
        if self.private_post.is_none() {
            self.private_post = Some(self.private_only()?.posterior()?);
        }
        Ok(self.private_post.as_ref().expect("just built").predict(xs, full_cov)?)
    }

    /// The kernel of the private fit (its θ), for answers under `answer_source = private`.
    pub fn private_kernel(&self) -> Box<dyn Kernel> {
        let (mut k, mut s) = (self.kernel.clone(), self.noise.clone());
        if let Some(pre) = &self.pre_params {
            crate::set_kernel_noise_params(&mut k, &mut s, pre);
        }
        k
    }

    /// The noise variance of the private fit.
    /// Sets what every received answer's variance is raised by (D30): a fixed variance, or K
    /// times [`Self::private_noise_variance`], the private-only fit's σ² — read from the
    /// party's own labels for its own model, so nothing released changes.
    pub fn set_answer_discount(&mut self, discount: AnswerDiscount) -> Result<(), CotrainError> {
        discount.validate()?;
        self.answer_extra_var = discount.variance(self.private_noise_variance());
        Ok(())
    }

    pub fn private_noise_variance(&self) -> f64 {
        match &self.pre_params {
            Some(pre) => pre[pre.len() - 1].exp(),
            None => self.noise.variance,
        }
    }

    /// Whether answers must carry the peer's prior covariance.
    pub fn needs_prior(&self) -> bool {
        self.kind.needs_prior() || self.answer_form == AnswerForm::Likelihood
    }

    fn build(&mut self) -> Result<Built, CotrainError> {
        if !self.answers_used() {
            return Ok(Built::Noisy(self.private_gp(self.kernel.clone(), self.noise.clone())?));
        }
        let (xq, mu, v, k2) = self.pseudo()?;
        let n = self.x_tr.nrows();
        let q = xq.nrows();
        let d = self.x_tr.ncols();
        let mut xo = DMatrix::zeros(n + q, d);
        xo.rows_mut(0, n).copy_from(&self.x_tr);
        xo.rows_mut(n, q).copy_from(&xq);
        let mut y = DVector::zeros(n + q);
        y.rows_mut(0, n).copy_from(&self.y_tr);
        y.rows_mut(n, q).copy_from(&mu);
        Ok(match self.kind {
            CombinerKind::Noisy => {
                let s = self.noise.clone();
                let noise = match self.uncertainty {
                    _ if q == 0 => NoiseModel::Homoscedastic(s),
                    Uncertainty::None => NoiseModel::Homoscedastic(s),
                    _ if self.answer_form == AnswerForm::Functionals => {
                        NoiseModel::Block { sigma2: s, rows: (n..n + q).collect(), block: v }
                    }
                    Uncertainty::Marginal if self.answer_level_var > 0.0 && self.sparse_z.is_none() => {
                        NoiseModel::Block { sigma2: s, rows: (n..n + q).collect(), block: v }
                    }
                    Uncertainty::Marginal => {
                        let mut extra = DVector::zeros(n + q);
                        extra.rows_mut(n, q).copy_from(&v.diagonal());
                        NoiseModel::PerPoint { sigma2: s, extra }
                    }
                    Uncertainty::Full => NoiseModel::Block { sigma2: s, rows: (n..n + q).collect(), block: v },
                };
                match &self.sparse_z {
                    Some(z) => {
                        let noise = match noise {
                            NoiseModel::Block { .. } => unreachable!("use_sparse refuses full mode"),
                            other => other,
                        };
                        Built::Sparse(SparseGp::new(SparseKind::Vfe, self.kernel.clone(), noise, xo, y, z.clone())?)
                    }
                    None => Built::Noisy(ExactGp::new(self.kernel.clone(), noise, xo, y)?),
                }
            }
            CombinerKind::Blocky => Built::Blocky(BlockyModel::new(
                self.kernel.clone(),
                self.noise.clone(),
                self.x_tr.clone(),
                self.y_tr.clone(),
                xq,
                mu,
                k2 + v,
            )),
            CombinerKind::Hybrid => Built::Hybrid(
                HybridModel::new(self.kernel.clone(), self.noise.clone(), xo, y, q, k2 + v)
                    .with_form(self.readings.hybrid),
            ),
        })
    }

    /// D5: re-optimise θ₁ on the augmented objective (warm start, plus, as the
    /// [`RefitPolicy`] says, a restart from the pre-co-training θ; the better is kept), then
    /// apply the answer guard. Returns the objective of the re-fitted augmented model.
    pub fn refit(&mut self) -> Result<f64, CotrainError> {
        // Answers set aside earlier are judged afresh with this re-fit.
        self.loo = None;
        if self.refit_theta == RefitTheta::AugmentedTested {
            // Two re-fits of clones, each under its own rule (`refit_rules.rs`).
            return self.refit_tested();
        }
        if let Some(grid) = self.answer_noise_grid.clone()
            && self.answers_used()
        {
            let mut best: Option<(f64, f64)> = None;
            for t in grid {
                self.answer_extra_var = t;
                let value = match self.build()? {
                    Built::Noisy(m) => m.evaluate().map(|e| e.value),
                    Built::Sparse(m) => m.evaluate().map(|e| e.value),
                    Built::Blocky(m) => m.evaluate().map(|e| e.value),
                    Built::Hybrid(m) => m.evaluate().map(|e| e.value),
                };
                if let Ok(v) = value
                    && v.is_finite()
                    && best.is_none_or(|(b, _)| v > b)
                {
                    best = Some((v, t));
                }
            }
            self.answer_extra_var = best.map_or(0.0, |(_, t)| t);
        }
        if self.refit_theta == RefitTheta::Own {
            // θ stays the private fit's: the objective at it, for the turn's record.
            let value = match &self.build()? {
                Built::Noisy(m) => m.evaluate()?.value,
                Built::Sparse(m) => m.evaluate()?.value,
                Built::Blocky(m) => m.evaluate()?.value,
                Built::Hybrid(m) => m.evaluate()?.value,
            };
            self.refits += 1;
            self.version += 1;
            self.check_answers()?;
            return Ok(value);
        }
        // Held length-scales for this re-fit (`refit_rules.rs`), put back in reverse order
        // whatever the outcome; the model is built under them.
        let (unseen_bounds, rule_bounds) = self.hold_for_refit();
        let result = self.build().and_then(|b| self.refit_augmented(b));
        if let Some(b) = rule_bounds {
            self.kernel.set_bounds(&b);
        }
        if let Some(b) = unseen_bounds {
            self.kernel.set_bounds(&b);
        }
        match (self.refit_theta, result) {
            (RefitTheta::AugmentedWithinOwn, Ok(_)) => self.within_own_region(),
            (_, result) => result,
        }
    }

    /// The D5 re-fit proper ([`CoModel::refit`]) from the model `built` at the current θ.
    fn refit_augmented(&mut self, built: Built) -> Result<f64, CotrainError> {
        let pre = if self.refit_policy.restarts(self.refits) { self.pre_params.clone() } else { None };
        self.refits += 1;
        let opts = self.train.clone();
        /// Warm run and (if `pre`) restart, each from its own carried curvature; the better
        /// run's parameters win. Returns them with the evaluations spent.
        fn fit<M: Objective>(
            m: &mut M,
            pre: &Option<Vec<f64>>,
            opts: &TrainOptions,
            curvature: &mut [Curvature; 2],
        ) -> Result<((f64, Vec<f64>), usize), CotrainError> {
            let warm = m.params();
            let mut evaluations = 0;
            let mut starts = 1;
            let mut best = match train_from(m, opts, &curvature[0]) {
                Ok(r) => {
                    evaluations += r.evaluations;
                    curvature[0] = r.curvature;
                    Some((r.objective, m.params()))
                }
                Err(_) => None,
            };
            if let Some(pre) = pre
                && pre != &warm
            {
                starts += 1;
                m.set_params(pre);
                if let Ok(r) = train_from(m, opts, &curvature[1]) {
                    evaluations += r.evaluations;
                    curvature[1] = r.curvature;
                    if best.as_ref().is_none_or(|b| r.objective > b.0) {
                        best = Some((r.objective, m.params()));
                    }
                }
            }
            let best = best.ok_or(CotrainError::Own(OwnError::RefitFailed { starts }))?;
            Ok((best, evaluations))
        }
        let curvature = &mut self.refit_curvature;
        let ((obj, p), evaluations) = match built {
            Built::Noisy(mut m) => fit(&mut m, &pre, &opts, curvature)?,
            Built::Sparse(mut m) => fit(&mut m, &pre, &opts, curvature)?,
            Built::Blocky(mut m) => fit(&mut m, &pre, &opts, curvature)?,
            Built::Hybrid(mut m) => fit(&mut m, &pre, &opts, curvature)?,
        };
        self.refit_evaluations += evaluations;
        self.set_params(&p);
        self.version += 1;
        self.check_answers()?;
        Ok(obj)
    }

    /// Drop the cached posterior (after a setting it does not key on changed).
    pub(crate) fn forget_posterior(&mut self) {
        self.post = None;
    }

    /// Factorise the sparse posterior now (after a fit), so the first answer does not pay for it.
    pub fn warm(&mut self) -> Result<(), CotrainError> {
        if self.is_sparse() {
            let x = self.x_pool.rows(0, self.x_pool.nrows().min(1)).clone_owned();
            self.predict(&x, false)?;
        }
        Ok(())
    }

    /// Latent predictive of the augmented model at arbitrary points of this party's view.
    /// The factorised posterior is cached until the model changes.
    pub fn predict(&mut self, xs: &DMatrix<f64>, full_cov: bool) -> Result<Prediction, CotrainError> {
        self.posterior()?.predict(xs, full_cov)
    }

    /// The predictive mean alone (what a test RMSE needs): the same numbers as
    /// `predict(xs, _).mean`, without the O(N²·M) triangular solve of the variances.
    pub fn predict_mean(&mut self, xs: &DMatrix<f64>) -> Result<DVector<f64>, CotrainError> {
        Ok(match self.posterior()? {
            Predictor::Noisy(p) => p.predict_mean(xs)?,
            Predictor::Blocky(p) => p.predict_mean(xs)?,
            Predictor::Hybrid(p) => p.predict_mean(xs)?,
            Predictor::Sparse(p) => p.predict(xs, false)?.mean,
        })
    }

    /// The factorised posterior of the current model, from the cache if nothing changed.
    fn posterior(&mut self) -> Result<&Predictor, CotrainError> {
        let key: PostKey = (
            self.version,
            crate::kernel_noise_params(self.kernel.as_ref(), &self.noise),
            self.kind,
            self.uncertainty,
            self.blocks.clone(),
        );
        if !matches!(&self.post, Some((k, _)) if *k == key) {
            self.post = None;
            let post = match self.build()? {
                Built::Noisy(m) => Predictor::Noisy(m.posterior()?),
                Built::Sparse(m) => Predictor::Sparse(m.posterior()?),
                Built::Blocky(m) => Predictor::Blocky(m.into_predictor()?),
                Built::Hybrid(m) => Predictor::Hybrid(m.into_predictor()?),
            };
            self.post = Some((key, post));
        }
        Ok(&self.post.as_ref().expect("just cached").1)
    }

    /// The augmented objective at the current hyperparameters.
    pub fn objective(&mut self) -> Result<f64, CotrainError> {
        Ok(match self.build()? {
            Built::Noisy(m) => m.evaluate()?.value,
            Built::Sparse(m) => m.evaluate()?.value,
            Built::Blocky(m) => m.evaluate()?.value,
            Built::Hybrid(m) => m.evaluate()?.value,
        })
    }

    /// The posterior mean is f = k₁(·, R) w with w linear in the labels; returns R and
    /// ∂w/∂y_private (|R| × n): the input of the label-DP sensitivity.
    pub(crate) fn mean_weights(&mut self) -> Result<(DMatrix<f64>, DMatrix<f64>), CotrainError> {
        Ok(match self.build()? {
            Built::Noisy(m) => {
                let post = m.posterior()?;
                let kinv = post.cholesky().inverse();
                (m.x().clone(), kinv.columns(0, self.x_tr.nrows()).clone_owned())
            }
            Built::Blocky(m) => m.mean_weights()?,
            Built::Hybrid(m) => m.mean_weights()?,
            Built::Sparse(_) => {
                return Err(crate::Invariant::SparseMeanWeights.into());
            }
        })
    }

    /// ‖∂f/∂y_j‖ in the RKHS of this party's kernel for each private row j.
    pub(crate) fn label_influence(&mut self) -> Result<DVector<f64>, CotrainError> {
        if let Built::Sparse(m) = self.build()? {
            // VFE form (the Titsias 2009 mean): f = k(·,Z)β, ‖∂f/∂y_j‖²_H = (Σk_j)ᵀK_uu(Σk_j)/λ_j².
            let all = m.label_influence_rkhs()?;
            return Ok(all.rows(0, self.x_tr.nrows()).clone_owned());
        }
        let (rows, w) = self.mean_weights()?;
        let k = self.kernel.k(rows.as_view(), rows.as_view());
        let kw = &k * &w;
        Ok(DVector::from_iterator(w.ncols(), (0..w.ncols()).map(|j| w.column(j).dot(&kw.column(j)).max(0.0).sqrt())))
    }
}

/// Relative precision floor of the functional messages: the q − k directions a release says
/// nothing about get noise variance `FUNCTIONAL_FLOOR` × the querier's prior variance, i.e.
/// weight ≈ 10⁻⁴ (a dense noise block of finite entries, so the exact GP path takes it as is).
const FUNCTIONAL_FLOOR: f64 = 1e4;

/// The functional messages of one peer's answers (see [`AnswerForm::Functionals`]): each batch's
/// k observations w = Uᵀõ ~ N(L g, R') with R' = `scale`·R + τ² L Lᵀ, written as q
/// pseudo-observations ỹ of g with a dense noise block N that carries the same information:
/// N⁻¹ = Lᵀ R'⁻¹ L + I/(FUNCTIONAL_FLOOR·p) and ỹ = N Lᵀ R'⁻¹ w (the Gaussian in g that the
/// functionals' likelihood is, up to the floor). Returned over the block's indices, in order;
/// entries across batches are zero.
fn functional_messages(
    b: &PeerBlock,
    scale: f64,
    tau2: f64,
    prior: f64,
) -> Result<(DVector<f64>, DMatrix<f64>), CotrainError> {
    let fail = |f: AnswerFault| answer_fault(&b.peer, f);
    let nb = b.indices.len();
    let mut means = DVector::zeros(nb);
    let mut block = DMatrix::zeros(nb, nb);
    let mut covered = 0;
    let floor = 1.0 / (FUNCTIONAL_FLOOR * prior.max(f64::MIN_POSITIVE));
    for lik in &b.likelihoods {
        let pos: Vec<usize> = lik
            .indices
            .iter()
            .map(|i| b.indices.iter().position(|j| j == i))
            .collect::<Option<_>>()
            .ok_or_else(|| fail(AnswerFault::LikelihoodUnanswered))?;
        let r = &lik.release;
        let released = DVector::from_iterator(pos.len(), pos.iter().map(|&p| b.means[p]));
        let w = r.basis.transpose() * released;
        let noise = &r.noise * scale + &r.map * r.map.transpose() * tau2;
        let noise = (&noise + noise.transpose()) * 0.5;
        let chol = Cholesky::factor(noise, "R (release functionals)", JitterPolicy::IF_NEEDED)
            .map_err(|e| fail(AnswerFault::Release(Box::new(e.into()))))?;
        let a = chol.solve(&r.map); // R'⁻¹ L, k × q
        let precision = r.map.transpose() * &a;
        let mut precision = (&precision + precision.transpose()) * 0.5;
        for d in 0..precision.nrows() {
            precision[(d, d)] += floor;
        }
        let info = a.transpose() * w;
        let pc = Cholesky::factor(precision, "Lᵀ R'⁻¹ L (release functionals)", JitterPolicy::IF_NEEDED)
            .map_err(|e| fail(AnswerFault::Release(Box::new(e.into()))))?;
        let m = pc.solve_vec(&info);
        let n = pc.inverse();
        for (s, &ps) in pos.iter().enumerate() {
            means[ps] = m[s];
            for (t, &pt) in pos.iter().enumerate() {
                block[(ps, pt)] = n[(s, t)];
            }
        }
        covered += pos.len();
    }
    if covered != nb {
        return Err(fail(AnswerFault::FunctionalNeedsLikelihood));
    }
    Ok((means, block))
}

/// The likelihood messages of one peer's answers (see [`AnswerForm::Likelihood`]): for each
/// answered index the pseudo-observation and its noise variance.
fn likelihood_messages(b: &PeerBlock) -> Result<(Vec<f64>, Vec<f64>), CotrainError> {
    let fail = |f: AnswerFault| answer_fault(&b.peer, f);
    let prior = b.prior.as_ref().ok_or_else(|| fail(AnswerFault::NoPrior))?;
    if prior.nrows() != b.indices.len() || prior.ncols() != b.indices.len() || b.noise_vars.len() != b.indices.len() {
        return Err(fail(AnswerFault::NotCovering { what: "the prior covariance or the noise variances" }));
    }
    let mut means = Vec::with_capacity(b.indices.len());
    let mut vars = Vec::with_capacity(b.indices.len());
    for k in 0..b.indices.len() {
        let p = prior[(k, k)];
        let s2 = b.noise_vars[k].ok_or_else(|| fail(AnswerFault::NoNoiseVariance))?;
        if !(p.is_finite() && p > 0.0) {
            return Err(fail(AnswerFault::PriorVariance { value: p }));
        }
        let v = (b.vars[k] - s2).clamp(0.0, p);
        let gap = p - v;
        let cap = UNINFORMATIVE_NOISE * p;
        if gap <= p / UNINFORMATIVE_NOISE {
            means.push(0.0);
            vars.push(cap);
            continue;
        }
        let g = p / gap;
        let var = v * g + s2 * g * g;
        if !(var.is_finite() && var <= cap) {
            // Too noisy to carry information: weightless (a capped variance with the full mean
            // would give the noise far too much weight).
            means.push(0.0);
            vars.push(cap);
            continue;
        }
        means.push(b.means[k] * g);
        vars.push(var);
    }
    Ok((means, vars))
}

/// `peer`'s answer does not fit (see [`AnswerFault`]).
fn answer_fault(peer: &str, fault: AnswerFault) -> CotrainError {
    CotrainError::Peer { peer: peer.to_string(), fault: PeerFault::Answer(fault) }
}
