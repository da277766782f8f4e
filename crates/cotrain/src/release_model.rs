//! What a party releases from, when it releases its private-only posterior (release-once and
//! batches): the **release model** — its private covariates and clipped labels, a kernel whose
//! hyperparameters are either public constants or its own label-fitted ones, and the per-row
//! noise variances of the finite mechanism (docs/honest-dp.md).
//!
//! The choices that decide whether a release leaks anything uncounted live here:
//! - [`ThetaPolicy`]: θ fitted on the labels (the thesis's setting) changes the released
//!   variances and prior covariances with the labels, which no ledger counts; public θ leaks
//!   nothing.
//! - [`ReleaseForm`]: the function-space release of Hall et al. (2013), valid anywhere, or the
//!   finite-dimensional release at the requested points with the exact hat-matrix sensitivity
//!   (and, optionally, influence capping).
//! - [`QueryPolicy`]: uncertainty sampling on the querier's own label-fitted model (the thesis),
//!   or label-free greedy variance under the public θ, so that the indices a querier sends
//!   reveal nothing about its labels.

use crate::CotrainError;
use dpcotrain_gp::inducing::greedy_variance;
use dpcotrain_gp::kernels::SquaredExponential;
use dpcotrain_gp::{ExactGp, Kernel, NoiseModel, Prediction, SparseGp, SparseKind};
use dpcotrain_privacy::RankRule;
use dpcotrain_privacy::finite::{CapRule, FiniteRelease, HatModel, hat, plan};
use dpcotrain_privacy::select::{Candidate, group_votes, noisy_vote};
use dpcotrain_privacy::spend::{ThetaSource, finite_form_name};
use dpcotrain_privacy::{LabelRange, Sensitivity};
use nalgebra::{DMatrix, DVector};
use serde::{Deserialize, Serialize};

/// Public hyperparameters of an SE-ARD kernel on publicly standardised inputs and labels:
/// s_f², one length-scale for every input, and the noise variance s₀².
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct PublicTheta {
    pub signal_variance: f64,
    pub lengthscale: f64,
    pub noise_variance: f64,
    /// What `lengthscale` is measured in (absolute by default, the meaning of every
    /// configuration and ledger written before the choice existed).
    #[serde(default, skip_serializing_if = "LengthscaleUnit::is_absolute")]
    pub unit: LengthscaleUnit,
}

/// The unit of a public length-scale.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum LengthscaleUnit {
    /// The length-scale as given, whatever the number of inputs.
    #[default]
    Absolute,
    /// A multiple of √(2D) for D inputs: the root mean squared distance between two
    /// standardised D-dimensional inputs (E‖x − x′‖² = 2D for independent unit-variance
    /// coordinates), the median heuristic's scale (Gretton et al. 2012; Garreau, Jitkrittum &
    /// Kanagawa 2017) computed from public facts alone — the dimension and the standardisation.
    Median,
}

impl LengthscaleUnit {
    pub fn name(self) -> &'static str {
        match self {
            LengthscaleUnit::Absolute => "absolute",
            LengthscaleUnit::Median => "median",
        }
    }

    pub fn is_absolute(&self) -> bool {
        *self == LengthscaleUnit::Absolute
    }
}

crate::named_enum!(LengthscaleUnit, "length-scale unit", [Absolute, Median]);

/// The honest default release θ (docs/decisions.md D32): s_f² = 1, ℓ = √(2D) for a view of D
/// covariates (the unit length-scale in the median unit), s₀² = 0.1. Public queries keep
/// [`PublicTheta::default`] (ℓ = 1 absolute).
pub const DEFAULT_RELEASE_THETA: PublicTheta =
    PublicTheta { signal_variance: 1.0, lengthscale: 1.0, noise_variance: 0.1, unit: LengthscaleUnit::Median };

impl Default for PublicTheta {
    /// s_f² = 1, ℓ = 1, s₀² = 0.1: unit-variance labels, unit-scale inputs, 10% noise.
    fn default() -> Self {
        PublicTheta { signal_variance: 1.0, lengthscale: 1.0, noise_variance: 0.1, unit: LengthscaleUnit::Absolute }
    }
}

impl PublicTheta {
    pub fn validate(&self) -> Result<(), CotrainError> {
        for (v, what) in [
            (self.signal_variance, "signal_variance"),
            (self.lengthscale, "lengthscale"),
            (self.noise_variance, "noise_variance"),
        ] {
            if !(v.is_finite() && v > 0.0) {
                return Err(CotrainError::setting(what, v, "be positive and finite (public θ)"));
            }
        }
        Ok(())
    }

    /// The length-scale for `dim` inputs, in absolute units.
    pub fn lengthscale_for(&self, dim: usize) -> f64 {
        match self.unit {
            LengthscaleUnit::Absolute => self.lengthscale,
            LengthscaleUnit::Median => self.lengthscale * (2.0 * dim.max(1) as f64).sqrt(),
        }
    }

    /// The SE-ARD kernel of these hyperparameters for `dim` inputs.
    pub fn kernel(&self, dim: usize) -> Box<dyn Kernel> {
        Box::new(SquaredExponential::ard(self.signal_variance, vec![self.lengthscale_for(dim); dim]))
    }

    /// The text peers compare: s_f², ℓ, s₀² (and the unit when it is not absolute).
    pub fn terms(&self) -> String {
        let unit = if self.unit.is_absolute() { String::new() } else { format!(";ℓ in {}", self.unit.name()) };
        format!("{},{},{}{unit}", self.signal_variance, self.lengthscale, self.noise_variance)
    }
}

/// Where the hyperparameters of a release come from.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(tag = "theta", rename_all = "lowercase")]
pub enum ThetaPolicy {
    /// The responder's private-only fit θ̂ (fitted on its labels): released variances and prior
    /// covariances then depend on the labels, and **no ledger counts that**. Kept to reproduce
    /// the thesis and earlier results.
    Fitted,
    /// Public constants: nothing about the labels enters θ.
    Public(PublicTheta),
    /// Chosen from the public grid [`theta_grid`] around `default` by a μ-GDP vote of disjoint
    /// groups of private rows ([`dpcotrain_privacy::select`]), charged to every requester's
    /// ledger (Δ = √2, σ = √2/μ). With DP off the vote is made without noise.
    Selected { default: PublicTheta, mu: f64 },
}

/// Length-scale multipliers of the θ-selection grid (relative to the default's).
pub(crate) const GRID_LENGTHSCALES: [f64; 5] = [0.25, 0.5, 1.0, 2.0, 4.0];
/// Noise-variance multipliers of the θ-selection grid.
pub(crate) const GRID_NOISES: [f64; 3] = [0.1, 1.0, 5.0];
/// Private rows per voting group (at most [`MAX_GROUPS`] groups, at least one).
pub(crate) const ROWS_PER_GROUP: usize = 40;
pub(crate) const MAX_GROUPS: usize = 64;
/// Head start of the default candidate, in noise sds of the vote histogram: another candidate
/// must out-vote it by this much, so that drowned votes keep the default (noise alone lets one
/// given rival overturn it with chance Φ(−4/√2) ≈ 0.23%, any of the 14 rivals with about 3.2%
/// at equal counts).
pub(crate) const HEAD_START_SD: f64 = 4.0;

/// The public candidate grid of θ selection: every length-scale multiplier × noise multiplier
/// applied to `default` (signal variance kept), and the index of `default` itself.
pub(crate) fn theta_grid(default: PublicTheta) -> (Vec<PublicTheta>, usize) {
    let mut grid = Vec::with_capacity(GRID_LENGTHSCALES.len() * GRID_NOISES.len());
    let mut at = 0;
    for &l in &GRID_LENGTHSCALES {
        for &s in &GRID_NOISES {
            if l == 1.0 && s == 1.0 {
                at = grid.len();
            }
            grid.push(PublicTheta {
                signal_variance: default.signal_variance,
                lengthscale: default.lengthscale * l,
                noise_variance: default.noise_variance * s,
                unit: default.unit,
            });
        }
    }
    (grid, at)
}

/// What a θ selection released and chose. Everything here is released or public: the noisy
/// vote counts (the DP output), the choice made from them, and the mechanism's constants —
/// never the votes themselves.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ThetaSelection {
    pub chosen: PublicTheta,
    /// Index of `chosen` in [`theta_grid`] of the default.
    pub winner: usize,
    pub noisy_counts: Vec<f64>,
    pub groups: usize,
    /// Noise sd of the histogram (0: DP off, an exact majority).
    pub sigma: f64,
    /// L2 sensitivity of the histogram (√2).
    pub sensitivity: f64,
}

/// Choose θ from [`theta_grid`]`(default)` by the vote of [`voting_groups`] disjoint groups of
/// the private rows, released with μ-GDP noise (μ = ∞: DP off); `z` holds one standard-normal
/// draw per candidate and `order` the uniformly random order that forms the groups
/// ([`dpcotrain_privacy::select::random_order`], drawn with `z`). The labels need no clipping
/// here: however far one label moves, it changes at most its own group's vote, so the
/// histogram's sensitivity is √2 for any labels and any order the rows arrive in.
pub(crate) fn select_theta(
    x: &DMatrix<f64>,
    y: &DVector<f64>,
    default: PublicTheta,
    mu: f64,
    z: &DVector<f64>,
    order: &[usize],
) -> Result<ThetaSelection, CotrainError> {
    default.validate()?;
    let (grid, at) = theta_grid(default);
    let candidates: Vec<Candidate> =
        grid.iter().map(|t| Candidate { kernel: t.kernel(x.ncols()), noise: t.noise_variance }).collect();
    let groups = voting_groups(x.nrows());
    let votes = group_votes(&candidates, x, y, groups, at, order)?;
    let r = noisy_vote(&votes, grid.len(), at, HEAD_START_SD, mu, z)?;
    Ok(ThetaSelection {
        chosen: grid[r.winner],
        winner: r.winner,
        noisy_counts: r.noisy_counts,
        groups,
        sigma: r.sigma,
        sensitivity: r.sensitivity,
    })
}

/// Number of voting groups for `n` private rows.
pub(crate) fn voting_groups(n: usize) -> usize {
    (n / ROWS_PER_GROUP).clamp(1, MAX_GROUPS).min(n.max(1))
}

impl ThetaPolicy {
    pub fn name(&self) -> &'static str {
        self.source().name()
    }

    /// The policy as a release's label names it.
    pub fn source(&self) -> ThetaSource {
        match self {
            ThetaPolicy::Fitted => ThetaSource::Fitted,
            ThetaPolicy::Public(_) => ThetaSource::Public,
            ThetaPolicy::Selected { .. } => ThetaSource::Select,
        }
    }

    /// Whether everything θ reveals about the labels is counted: nothing (public) or a charged
    /// DP selection. Only the label-fitted θ̂ leaks uncounted.
    pub fn is_counted(&self) -> bool {
        !matches!(self, ThetaPolicy::Fitted)
    }

    /// The public default θ (None for the fitted θ̂).
    pub fn public_default(&self) -> Option<PublicTheta> {
        match self {
            ThetaPolicy::Public(t) | ThetaPolicy::Selected { default: t, .. } => Some(*t),
            ThetaPolicy::Fitted => None,
        }
    }
}

/// The shape of a calibrated release.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "form", rename_all = "lowercase")]
pub enum ReleaseForm {
    /// Hall et al. (2013): the posterior-mean function plus a GP-prior path scaled to the RKHS
    /// sensitivity; valid at any points, its noise does not shrink with n.
    Rkhs,
    /// The posterior mean at the released points plus N(0, σ²) noise, σ from the exact
    /// hat-matrix L2 sensitivity; `cap` inflates the noise of high-influence rows and `rank`
    /// may restrict the release to the principal subspace of its mean (noise σ² U Uᵀ; the full
    /// release when absent from a serialised form).
    Finite {
        cap: CapRule,
        #[serde(default)]
        rank: RankRule,
    },
}

impl ReleaseForm {
    pub fn name(&self) -> String {
        match self {
            ReleaseForm::Rkhs => "rkhs".into(),
            ReleaseForm::Finite { cap, rank } => finite_form_name(cap, rank),
        }
    }
}

/// How a querier chooses the pool indices it asks about.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(tag = "queries", rename_all = "lowercase")]
pub enum QueryPolicy {
    /// Uncertainty sampling on the querier's own co-trained model, one index per turn (Thomas
    /// §4.2.1). The choice depends on the querier's labels through θ̂ and the model.
    Adaptive,
    /// Greedy maximum variance under public θ on the querier's covariates (label-free),
    /// `per_turn` indices per turn, sent in one request.
    Public { per_turn: usize, theta: PublicTheta },
}

impl QueryPolicy {
    pub fn name(&self) -> &'static str {
        match self {
            QueryPolicy::Adaptive => "adaptive",
            QueryPolicy::Public { .. } => "public",
        }
    }
}

/// Nominal noise variance (relative to s_f²) of an already-asked pool point in label-free
/// selection: the querier assumes an answer about as good as one of its own rows.
pub(crate) const NOMINAL_ANSWER_NOISE: f64 = 0.1;

/// The label-free part of a party's private-only release: covariates, kernel, base noise and
/// (for a large private set) inducing inputs chosen from covariates only.
#[derive(Debug, Clone)]
pub struct ReleaseModel {
    pub x: DMatrix<f64>,
    /// Labels, already clipped to the declared range.
    pub y: DVector<f64>,
    pub kernel: Box<dyn Kernel>,
    pub noise: f64,
    /// Inducing inputs of the VFE release model (large private sets).
    pub z: Option<DMatrix<f64>>,
}

impl ReleaseModel {
    /// `inducing`: Some(m) for a VFE release model with m greedy-variance inducing inputs
    /// (chosen from the covariates under `kernel`, deterministic in `seed`).
    pub fn new(
        x: DMatrix<f64>,
        y: DVector<f64>,
        kernel: Box<dyn Kernel>,
        noise: f64,
        inducing: Option<usize>,
        seed: u64,
    ) -> Result<Self, CotrainError> {
        if !(noise.is_finite() && noise > 0.0) {
            return Err(CotrainError::setting("release model noise variance", noise, "be positive and finite"));
        }
        let z = match inducing {
            Some(m) => Some(greedy_variance(kernel.as_ref(), &x, m.min(x.nrows()), 0.0, seed)?.z),
            None => None,
        };
        Ok(ReleaseModel { x, y, kernel, noise, z })
    }

    fn hat_model(&self) -> HatModel<'_> {
        match &self.z {
            Some(z) => HatModel::Vfe { z },
            None => HatModel::Exact,
        }
    }

    /// Plan a μ-GDP finite release at `xq` (capped by `cap`) for `dp = Some((μ, range))`; with
    /// `None` (DP off) the plain posterior at `xq` with σ = 0.
    pub fn plan(
        &self,
        xq: &DMatrix<f64>,
        dp: Option<(f64, LabelRange)>,
        cap: &CapRule,
        rank: &RankRule,
    ) -> Result<FiniteRelease, CotrainError> {
        let s2 = DVector::from_element(self.x.nrows(), self.noise);
        Ok(match dp {
            Some((mu, range)) => plan(self.kernel.as_ref(), &self.x, &s2, xq, self.hat_model(), range, mu, cap, rank)?,
            None => {
                let mut h = hat(self.kernel.as_ref(), &self.x, &s2, xq, self.hat_model())?;
                h.make_conservative(self.kernel.as_ref(), &self.x, xq, self.hat_model());
                FiniteRelease {
                    hat: h,
                    sensitivity: Sensitivity { value: 0.0, worst_row: 0 },
                    sigma: 0.0,
                    eta: None,
                    cap: None,
                    low_rank: None,
                }
            }
        })
    }

    /// The posterior of the release model at `xs` with its full covariance (for the
    /// function-space release), and, when `influence`, each row's RKHS label influence.
    pub fn function_posterior(
        &self,
        xs: &DMatrix<f64>,
        influence: bool,
    ) -> Result<(Prediction, Option<DVector<f64>>), CotrainError> {
        let noise = NoiseModel::homoscedastic(self.noise);
        let (x, y, k) = (self.x.clone(), self.y.clone(), self.kernel.clone());
        Ok(match &self.z {
            Some(z) => {
                let gp = SparseGp::new(SparseKind::Vfe, k, noise, x, y, z.clone())?;
                let inf = if influence { Some(gp.label_influence_rkhs()?) } else { None };
                (gp.posterior()?.predict(xs, true)?, inf)
            }
            None => {
                let gp = ExactGp::new(k, noise, x, y)?;
                let inf = if influence { Some(gp.label_influence_rkhs()?) } else { None };
                (gp.posterior()?.predict(xs, true)?, inf)
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_median_unit_length_scale_grows_with_the_root_of_twice_the_dimension() {
        let abs = PublicTheta::default();
        let med = PublicTheta { lengthscale: 0.5, unit: LengthscaleUnit::Median, ..abs };
        for d in [1usize, 2, 3, 8] {
            assert_eq!(abs.lengthscale_for(d), 1.0);
            assert!((med.lengthscale_for(d) - 0.5 * (2.0 * d as f64).sqrt()).abs() < 1e-15);
            // The kernel is built with it: k(x, x + ℓ·e₁) = s_f² e^{−1/2}.
            let k = med.kernel(d);
            let x = DMatrix::zeros(1, d);
            let mut y = DMatrix::zeros(1, d);
            y[(0, 0)] = med.lengthscale_for(d);
            let v = k.k(x.as_view(), y.as_view())[(0, 0)];
            assert!((v - (-0.5f64).exp()).abs() < 1e-12, "d = {d}: {v}");
        }
    }

    #[test]
    fn the_unit_is_absolute_in_what_was_written_before_it_and_is_named_where_peers_compare() {
        // A θ written before the unit existed reads as absolute, and an absolute θ writes the
        // same bytes as then.
        let old = r#"{"signal_variance":1.0,"lengthscale":1.0,"noise_variance":0.1}"#;
        let t: PublicTheta = serde_json::from_str(old).unwrap();
        assert_eq!(t, PublicTheta::default());
        assert_eq!(serde_json::to_string(&t).unwrap(), old);
        let med = PublicTheta { unit: LengthscaleUnit::Median, ..t };
        let back: PublicTheta = serde_json::from_str(&serde_json::to_string(&med).unwrap()).unwrap();
        assert_eq!(back, med);
        assert_eq!(t.terms(), "1,1,0.1");
        assert_ne!(med.terms(), t.terms());
        assert_eq!("median".parse::<LengthscaleUnit>().unwrap(), LengthscaleUnit::Median);
        let e = "metres".parse::<LengthscaleUnit>().unwrap_err().to_string();
        assert!(e.contains("metres") && e.contains("absolute") && e.contains("median"), "{e}");
        // The θ-selection grid keeps the default's unit.
        let (grid, at) = theta_grid(med);
        assert!(grid.iter().all(|g| g.unit == LengthscaleUnit::Median) && grid[at] == med);
    }
}
