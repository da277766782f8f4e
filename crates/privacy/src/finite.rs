//! Finite-dimensional label-DP release of a GP posterior mean at a fixed set of points Q, with
//! the exact L2 sensitivity of the hat matrix and **influence capping**
//! (docs/honest-dp.md holds the proofs; this comment states what the code relies on).
//!
//! # Setting
//! Responder rows X (n × D), labels clipped to [a, b] (width d), a kernel k with hyperparameters
//! θ, and per-row noise variances s² (n). θ, s² and Q must not depend on the labels. The
//! posterior mean at Q is then linear in the labels, m_Q(y) = C y, with
//!
//! ```text
//! exact:  C = K_QX (K_XX + diag s²)⁻¹                                  (Rasmussen & Williams 2006, eq 2.25)
//! VFE:    C = K_Qu Σ K_uX diag(s²)⁻¹,  Σ = (K_uu + K_uX diag(s²)⁻¹ K_Xu)⁻¹   (Titsias 2009, eq 6)
//! ```
//!
//! # Theorem 1 (finite release)
//! Release õ = C·clip(y) + σ z with z ~ N(0, I_q). Neighbouring label vectors differ in one row j
//! by at most d, and C is the same for both, so ‖C(y − y′)‖₂ ≤ d‖C e_j‖₂ ≤ Δ := d·max_j ‖C e_j‖₂.
//! The privacy-loss distribution of a Gaussian mechanism with isotropic noise and mean shift of
//! norm η is N(η²/2σ², η²/σ²), so with σ = Δ/μ the release is μ-GDP (Dong, Roth & Su 2019,
//! Thm 2.7) and (ε, δ(ε))-DP on the exact curve (Balle & Wang 2018, Thm 8). The released
//! variances diag(K_QQ − K_QX A K_XQ) + σ² (and the covariance) are functions of X, Q, θ and s²
//! only: label-free, so they are post-processing. The released mean is computed as C·clip(y)
//! from the very C whose column norms give Δ, so round-off cannot open a gap between the two
//! (a relative margin of 1e-6 is added all the same).
//!
//! # Leave-one-out lemma (why capping works)
//! Exact: with A = (K + diag s²)⁻¹, the block inverse on row j gives
//! C e_j = A_jj·k₋ⱼ(Q, x_j) and 1/A_jj = s_j² + v_j, where k₋ⱼ is the posterior covariance given
//! every row but j and v_j = k₋ⱼ(x_j, x_j): neither depends on s_j. Hence
//! ‖C e_j‖ = ‖k₋ⱼ(Q, x_j)‖/(s_j² + v_j) falls as s_j² grows, and s_j² = ‖k₋ⱼ(Q,x_j)‖/τ − v_j
//! puts row j's influence exactly at τ. VFE: Sherman–Morrison on Σ⁻¹ = P_j + k_j k_jᵀ/s_j² gives
//! the same form with v_j = w_j := k_jᵀP_j⁻¹k_j; from t_j = k_jᵀΣk_j = w_j s_j²/(s_j² + w_j) it
//! follows that s_j² + v_j = s_j⁴/(s_j² − t_j).
//!
//! Inflating one row's noise changes the others' influence, so [`cap`] iterates; the privacy
//! guarantee never relies on the loop: Δ is always the exact maximum of the final C.
//! The capped mean is the posterior mean of a model with more noise than the real one; its
//! reported variance K_QQ − K_QX A K_XQ bounds its true mean squared error (the true error
//! covariance is K_QQ − 2CK_XQ + C(K + S₀)Cᵀ ⪯ K_QQ − 2CK_XQ + C(K + S_cap)Cᵀ = K_QQ − K_QX A K_XQ),
//! so the querier never over-trusts a capped answer.

use crate::PrivacyError;
use crate::calibrate::NoiseScale;
use crate::low_rank::RankRule;
use crate::sensitivity::{LabelRange, Sensitivity};
use dpcotrain_gp::kernels::Kernel;
use dpcotrain_gp::linalg::{Cholesky, JitterPolicy, aat, matmul};
use nalgebra::{DMatrix, DVector};
use serde::{Deserialize, Serialize};

/// Largest per-row noise variance capping may set, relative to the largest prior variance at
/// the training rows (a row at this noise has influence ~1e-12 of an ordinary row).
pub(crate) const MAX_NOISE_RATIO: f64 = 1e12;

/// Relative slack of the capping loop's stopping test (Δ itself is always exact).
pub(crate) const CAP_TOLERANCE: f64 = 1e-3;

/// Which posterior mean is released.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum HatModel<'a> {
    /// Exact GP posterior mean.
    Exact,
    /// VFE/DTC posterior mean with inducing inputs `z` (the two share the mean).
    Vfe { z: &'a DMatrix<f64> },
}

/// The label-free part of a finite release at Q: everything but the labels and the noise draw.
#[derive(Debug, Clone)]
pub struct Hat {
    /// q × n hat matrix: released mean = C·clip(y).
    pub c: DMatrix<f64>,
    /// ‖C e_j‖₂ for every row j.
    pub influence: DVector<f64>,
    /// s_j² + v_j (leave-one-out form; used by capping; a low-rank hat keeps its full hat's).
    pub loo_denominator: DVector<f64>,
    /// Posterior latent covariance at Q under the per-row noise s² (q × q).
    pub latent_cov: DMatrix<f64>,
    /// Prior covariance K_QQ.
    pub prior: DMatrix<f64>,
    /// The per-row noise variances this hat was built with.
    pub noise: DVector<f64>,
    /// Absolute jitter added by the Cholesky factorisations (already inside C and the covariance).
    pub jitter: f64,
}

impl Hat {
    /// Replace the VFE model's reported covariance by a bound on the true error covariance of
    /// the released estimate C·y (a no-op for the exact model, where the two coincide): for any
    /// linear estimator and real noise S₀ ⪯ diag s², the error covariance is at most
    /// K_QQ − C K_XQ − K_QX Cᵀ + C (K_XX + diag s²) Cᵀ. The VFE posterior covariance is not such
    /// a bound (it leaves out C(K − Q)Cᵀ), so a querier would over-trust the answer. O(q n²)
    /// flops, K_XX formed in column blocks of at most ~4M entries.
    pub fn make_conservative(&mut self, kernel: &dyn Kernel, x: &DMatrix<f64>, xq: &DMatrix<f64>, model: HatModel<'_>) {
        if matches!(model, HatModel::Exact) {
            return;
        }
        self.latent_cov = error_covariance(kernel, x, &self.noise, xq, &self.c, &self.prior);
    }

    /// Δ = d·max_j ‖C e_j‖₂ (with the safety margin) and the row that attains it.
    pub fn sensitivity(&self, range: LabelRange) -> Result<Sensitivity, PrivacyError> {
        let rows: Vec<usize> = (0..self.influence.len()).collect();
        crate::sensitivity::from_influence(&self.influence, &rows, range)
    }

    /// The noise-free released mean C·clip(y); C·y with no range (DP off: nothing to clip to).
    pub fn mean(&self, y: &DVector<f64>, range: Option<LabelRange>) -> Result<DVector<f64>, PrivacyError> {
        if y.len() != self.c.ncols() {
            return Err(PrivacyError::shape("hat matrix", y.len(), "labels", self.c.ncols(), "rows"));
        }
        Ok(match range {
            Some(r) => &self.c * r.clip(y),
            None => &self.c * y,
        })
    }
}

fn check_inputs(x: &DMatrix<f64>, s2: &DVector<f64>, xq: &DMatrix<f64>) -> Result<(), PrivacyError> {
    if x.nrows() == 0 {
        return Err(PrivacyError::empty("finite release", "private rows"));
    }
    if xq.nrows() == 0 {
        return Err(PrivacyError::empty("finite release", "release points"));
    }
    if x.ncols() != xq.ncols() {
        return Err(PrivacyError::shape(
            "finite release",
            xq.ncols(),
            "release-point columns",
            x.ncols(),
            "private-row columns",
        ));
    }
    if s2.len() != x.nrows() {
        return Err(PrivacyError::shape("finite release", s2.len(), "noise variances", x.nrows(), "rows"));
    }
    if let Some(j) = s2.iter().position(|v| !(v.is_finite() && *v > 0.0)) {
        return Err(PrivacyError::Entry {
            context: "finite release",
            name: "noise variance",
            item: "row",
            index: j,
            value: s2[j],
            bound: "be positive and finite",
        });
    }
    if x.iter().chain(xq.iter()).any(|v| !v.is_finite()) {
        return Err(PrivacyError::non_finite("finite release: non-finite covariate"));
    }
    Ok(())
}

/// Build the hat matrix, influences and posterior covariance at the rows of `xq`.
pub fn hat(
    kernel: &dyn Kernel,
    x: &DMatrix<f64>,
    s2: &DVector<f64>,
    xq: &DMatrix<f64>,
    model: HatModel<'_>,
) -> Result<Hat, PrivacyError> {
    check_inputs(x, s2, xq)?;
    match model {
        HatModel::Exact => hat_exact(kernel, x, s2, xq),
        HatModel::Vfe { z } => hat_vfe(kernel, x, z, s2, xq),
    }
}

fn hat_exact(kernel: &dyn Kernel, x: &DMatrix<f64>, s2: &DVector<f64>, xq: &DMatrix<f64>) -> Result<Hat, PrivacyError> {
    let n = x.nrows();
    let mut ky = kernel.k(x.as_view(), x.as_view());
    for j in 0..n {
        ky[(j, j)] += s2[j];
    }
    let chol = Cholesky::factor(ky, "K_XX + diag s²", JitterPolicy::IF_NEEDED)?;
    let jitter = chol.jitter().absolute;
    let kxq = kernel.k(x.as_view(), xq.as_view()); // n × q
    let mut w = kxq.clone();
    chol.solve_l_in_place(&mut w); // L⁻¹ K_XQ
    let prior = kernel.k(xq.as_view(), xq.as_view());
    let latent_cov = &prior - matmul(w.as_view(), true, w.as_view(), false);
    let mut ct = w; // Cᵀ = L⁻ᵀ L⁻¹ K_XQ
    chol.solve_lt_in_place(&mut ct);
    let a_diag = chol.inverse_lower().diagonal();
    let influence = DVector::from_fn(n, |j, _| scaled_norm(ct.row(j).iter()));
    let loo_denominator = a_diag.map(|a| 1.0 / a);
    Ok(Hat { c: ct.transpose(), influence, loo_denominator, latent_cov, prior, noise: s2.clone(), jitter })
}

fn hat_vfe(
    kernel: &dyn Kernel,
    x: &DMatrix<f64>,
    z: &DMatrix<f64>,
    s2: &DVector<f64>,
    xq: &DMatrix<f64>,
) -> Result<Hat, PrivacyError> {
    if z.nrows() == 0 {
        return Err(PrivacyError::empty("finite release", "inducing inputs"));
    }
    if z.ncols() != x.ncols() {
        return Err(PrivacyError::shape(
            "finite release",
            z.ncols(),
            "inducing-input columns",
            x.ncols(),
            "private-row columns",
        ));
    }
    if z.iter().any(|v| !v.is_finite()) {
        return Err(PrivacyError::non_finite("finite release: a non-finite inducing input"));
    }
    let n = x.nrows();
    let m = z.nrows();
    let kuu = kernel.k(z.as_view(), z.as_view());
    let chol_uu = Cholesky::factor(kuu, "K_uu", JitterPolicy::ALWAYS)?;
    let mut u = kernel.k(z.as_view(), x.as_view()); // K_uf
    chol_uu.solve_l_in_place(&mut u); // U = L⁻¹ K_uf
    let mut a = u.clone();
    for (j, mut col) in a.column_iter_mut().enumerate() {
        col /= s2[j].sqrt();
    }
    let b = aat(&a) + DMatrix::<f64>::identity(m, m);
    let chol_b = Cholesky::factor(b, "B = I + AAᵀ", JitterPolicy::IF_NEEDED)?;
    let jitter = chol_uu.jitter().absolute;
    let mut v1 = kernel.k(z.as_view(), xq.as_view());
    chol_uu.solve_l_in_place(&mut v1); // L⁻¹ K_uQ
    // Σ = L⁻ᵀ B⁻¹ L⁻¹, so Cᵀ = diag(s²)⁻¹ Uᵀ B⁻¹ V1.
    let binv_v1 = chol_b.solve(&v1);
    let mut ct = matmul(u.as_view(), true, binv_v1.as_view(), false);
    for j in 0..n {
        let inv = 1.0 / s2[j];
        ct.row_mut(j).scale_mut(inv);
    }
    // t_j = k_jᵀ Σ k_j = ‖L_B⁻¹ u_j‖²; s_j² + v_j = s_j⁴/(s_j² − t_j).
    let mut lb_u = u;
    chol_b.solve_l_in_place(&mut lb_u);
    let loo_denominator = DVector::from_fn(n, |j, _| {
        let t = lb_u.column(j).norm_squared();
        let s = s2[j];
        let gap = (s - t).max(s * 1e-15);
        s * s / gap
    });
    let prior = kernel.k(xq.as_view(), xq.as_view());
    // K_QQ − V1ᵀV1 + V1ᵀB⁻¹V1.
    let mut lb_v1 = v1.clone();
    chol_b.solve_l_in_place(&mut lb_v1);
    let latent_cov = &prior - matmul(v1.as_view(), true, v1.as_view(), false)
        + matmul(lb_v1.as_view(), true, lb_v1.as_view(), false);
    let influence = DVector::from_fn(n, |j, _| scaled_norm(ct.row(j).iter()));
    Ok(Hat { c: ct.transpose(), influence, loo_denominator, latent_cov, prior, noise: s2.clone(), jitter })
}

/// K_QQ − C K_XQ − K_QX Cᵀ + C (K_XX + diag s²) Cᵀ: the error covariance of the linear
/// estimator C·y of f(Q) when y = f(X) + e, e ~ N(0, diag s²), f ~ GP(0, k).
pub(crate) fn error_covariance(
    kernel: &dyn Kernel,
    x: &DMatrix<f64>,
    s2: &DVector<f64>,
    xq: &DMatrix<f64>,
    c: &DMatrix<f64>,
    prior: &DMatrix<f64>,
) -> DMatrix<f64> {
    let g = matmul(c.as_view(), false, kernel.k(x.as_view(), xq.as_view()).as_view(), false); // C K_XQ
    error_covariance_from(prior, &g, &crate::low_rank::released_mean_cov(kernel, x, s2, c))
}

/// K_QQ − G − Gᵀ + M with G = C K_XQ and M = C (K_XX + diag s²) Cᵀ: [`error_covariance`] from its
/// two products (for the estimator P C·y pass P G and P M P), exactly symmetric.
fn error_covariance_from(prior: &DMatrix<f64>, g: &DMatrix<f64>, m: &DMatrix<f64>) -> DMatrix<f64> {
    let mut out = prior - g - g.transpose() + m;
    crate::low_rank::symmetrise(&mut out);
    out
}

/// ‖v‖₂ computed as m·‖v/m‖₂ with m = max|v_i|, so that tiny entries (a release point far from
/// every private row) do not underflow to a zero norm — a zero Δ would release C·y unnoised.
fn scaled_norm<'a>(v: impl Iterator<Item = &'a f64> + Clone) -> f64 {
    let m = v.clone().fold(0.0f64, |m, x| m.max(x.abs()));
    if m == 0.0 || !m.is_finite() {
        return m;
    }
    m * v.map(|x| (x / m) * (x / m)).sum::<f64>().sqrt()
}

/// What one capping run did.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct CapReport {
    /// Target influence per unit label change.
    pub tau: f64,
    /// Hat evaluations made.
    pub iterations: usize,
    /// Rows whose noise variance was raised above its starting value.
    pub rows_inflated: usize,
    /// Whether max_j ‖C e_j‖ ≤ τ(1 + [`CAP_TOLERANCE`]) was reached (Δ is exact either way).
    pub converged: bool,
    /// max_j ‖C e_j‖ of the returned hat.
    pub max_influence: f64,
}

/// Inflate the noise variance of exactly the rows whose influence exceeds τ until every row's
/// influence is at most τ (to [`CAP_TOLERANCE`]), starting from `s2` (which must be label-free).
/// Returns the hat of the final noise variances; its influences are exact.
pub fn cap(
    kernel: &dyn Kernel,
    x: &DMatrix<f64>,
    s2: &DVector<f64>,
    xq: &DMatrix<f64>,
    model: HatModel<'_>,
    tau: f64,
    max_iterations: usize,
) -> Result<(Hat, CapReport), PrivacyError> {
    if !(tau.is_finite() && tau > 0.0) {
        return Err(PrivacyError::parameter("influence cap τ", tau, "be positive and finite"));
    }
    let ceiling = MAX_NOISE_RATIO * kernel.diag(x.as_view()).max().max(1e-300);
    let mut s = s2.clone();
    let mut iterations = 0;
    loop {
        let h = hat(kernel, x, &s, xq, model)?;
        iterations += 1;
        let max_influence = h.influence.max();
        let converged = max_influence <= tau * (1.0 + CAP_TOLERANCE);
        let report = |s: &DVector<f64>, converged: bool| {
            let rows_inflated = s.iter().zip(s2.iter()).filter(|(a, b)| a > b).count();
            CapReport { tau, iterations, rows_inflated, converged, max_influence }
        };
        if converged || iterations >= max_iterations.max(1) {
            let r = report(&s, converged);
            return Ok((h, r));
        }
        let mut moved = false;
        for j in 0..s.len() {
            let nj = h.influence[j];
            if nj > tau {
                let denom = h.loo_denominator[j];
                let v = (denom - s[j]).max(0.0);
                // Slightly past the target so the loop settles from above in few steps.
                let target = (nj * denom / tau * (1.0 + 0.5 * CAP_TOLERANCE) - v).min(ceiling);
                if target > s[j] {
                    s[j] = target;
                    moved = true;
                }
            }
        }
        if !moved {
            let r = report(&s, false);
            return Ok((h, r));
        }
    }
}

/// The expected reduction of a prior-variance querier's latent variance from one answer with
/// variance r_q (latent variance + the DP noise variance the release has at q), summed over Q:
/// Σ_q p_q²/(p_q + r_q), p_q the prior variance at q. Label-free; larger is better. Used to
/// choose the cap and the rank.
pub(crate) fn utility_score(rel: &FiniteRelease) -> f64 {
    let r = rel.hat.latent_cov.diagonal().map(|v| v.max(0.0)) + rel.noise_at_points();
    (0..rel.hat.prior.nrows())
        .map(|q| {
            let p = rel.hat.prior[(q, q)].max(0.0);
            if p + r[q] > 0.0 { p * p / (p + r[q]) } else { 0.0 }
        })
        .sum()
}

/// How the influence cap is chosen.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "rule", rename_all = "lowercase")]
pub enum CapRule {
    /// No capping: the plain finite release.
    None,
    /// τ = η·s_f·μ/d, which makes σ ≤ η·s_f (s_f² the largest prior variance at Q).
    Fixed { eta: f64 },
    /// Try every η of the list and keep the one with the best [`utility_score`] (label-free).
    Auto { etas: Vec<f64> },
}

impl std::str::FromStr for CapRule {
    type Err = PrivacyError;
    /// `auto`, `auto=X,Y,…` (the automatic rule over these η), `none`, or `eta=X` with X > 0 (the
    /// spelling of configs and the CLI).
    fn from_str(s: &str) -> Result<Self, PrivacyError> {
        match s.trim() {
            "auto" => Ok(CapRule::auto()),
            "none" => Ok(CapRule::None),
            other if other.starts_with("auto=") => {
                let list = &other["auto=".len()..];
                let etas = list
                    .split(',')
                    .map(|t| t.trim().parse::<f64>().ok().filter(|e| e.is_finite() && *e > 0.0))
                    .collect::<Option<Vec<f64>>>()
                    .filter(|v| !v.is_empty())
                    .ok_or_else(|| PrivacyError::Spelling {
                        what: "cap rule",
                        text: other.to_string(),
                        expected: "auto=X,Y,… with a list of positive multipliers η",
                    })?;
                Ok(CapRule::Auto { etas })
            }
            other => match other.strip_prefix("eta=").map(str::parse::<f64>) {
                Some(Ok(eta)) if eta.is_finite() && eta > 0.0 => Ok(CapRule::Fixed { eta }),
                _ => Err(PrivacyError::Spelling {
                    what: "cap rule",
                    text: other.to_string(),
                    expected: "auto, auto=X,Y,…, none or eta=X with X > 0",
                }),
            },
        }
    }
}

impl CapRule {
    /// The default automatic rule: η ∈ {1/8, 1/4, 1/2, 1, 2, 4} and no cap.
    pub fn auto() -> Self {
        CapRule::Auto { etas: vec![4.0, 2.0, 1.0, 0.5, 0.25, 0.125] }
    }

    pub fn name(&self) -> String {
        match self {
            CapRule::None => "none".into(),
            CapRule::Fixed { eta } => format!("eta={eta}"),
            CapRule::Auto { .. } if *self == CapRule::auto() => "auto".into(),
            CapRule::Auto { etas } => {
                format!("auto={}", etas.iter().map(|e| e.to_string()).collect::<Vec<_>>().join(","))
            }
        }
    }
}

/// A finite release ready to draw: the hat, its sensitivity, σ and how it was capped.
#[derive(Debug, Clone)]
pub struct FiniteRelease {
    pub hat: Hat,
    pub sensitivity: Sensitivity,
    pub sigma: f64,
    /// The η chosen (None: no cap).
    pub eta: Option<f64>,
    pub cap: Option<CapReport>,
    /// The low-rank release's basis and coordinates ([`crate::low_rank`]); None: the full
    /// release, C·clip(y) + σ z.
    pub low_rank: Option<LowRank>,
}

/// What a low-rank release draws: U (Uᵀ C·clip(y) + σ z) with z ~ N(0, I_k).
#[derive(Debug, Clone)]
pub struct LowRank {
    /// Orthonormal basis U (q × k): the top-k eigenvectors of C (K + diag s²) Cᵀ.
    pub u: DMatrix<f64>,
    /// Uᵀ C (k × n): the matrix whose column norms give Δ_k and from which the drawn k-vector is
    /// computed (so no rounding of U Uᵀ C can put a label-dependent component outside span(U),
    /// where there is no noise). `hat.c` holds U Uᵀ C for the reported quantities.
    pub coords: DMatrix<f64>,
}

impl FiniteRelease {
    /// Released variance at each point: posterior latent variance + σ² (label-free).
    pub fn released_var(&self) -> DVector<f64> {
        self.hat.latent_cov.diagonal().map(|v| v.max(0.0) + self.sigma * self.sigma)
    }

    /// Released covariance: posterior latent covariance + σ²I (label-free). For a low-rank
    /// release the DP noise covariance is σ² U Uᵀ ⪯ σ²I, and σ²I is what is reported: a reading
    /// that treats the points as independent (the marginal reading) then never over-counts the
    /// noise, whose correlation across points it cannot see. (Measured: reporting the exact
    /// per-point σ²‖U_q‖² instead let correlated noise through as independent evidence and
    /// hurt a few runs badly; docs/results.md, "The low-rank release".)
    pub fn released_cov(&self) -> DMatrix<f64> {
        let q = self.hat.latent_cov.nrows();
        &self.hat.latent_cov + DMatrix::identity(q, q) * (self.sigma * self.sigma)
    }

    /// The DP noise variance the release actually has at each point: σ², or σ²‖U_q‖² (row q
    /// of U) for a low-rank release. The quality a label-free rule compares candidates by; what
    /// is *reported* is σ² ([`FiniteRelease::released_cov`]).
    pub fn noise_at_points(&self) -> DVector<f64> {
        let s2 = self.sigma * self.sigma;
        match &self.low_rank {
            None => DVector::from_element(self.hat.c.nrows(), s2),
            Some(lr) => DVector::from_fn(lr.u.nrows(), |q, _| s2 * lr.u.row(q).norm_squared()),
        }
    }

    /// Released mean C·clip(y) + σz for a standard-normal draw z (no range: DP off, σ = 0); a
    /// low-rank release uses the first k draws, U Uᵀ C·clip(y) + σ U z₁..ₖ.
    pub fn release(
        &self,
        y: &DVector<f64>,
        range: Option<LabelRange>,
        z: &DVector<f64>,
    ) -> Result<DVector<f64>, PrivacyError> {
        if z.len() != self.hat.c.nrows() {
            return Err(PrivacyError::shape(
                "finite release",
                z.len(),
                "noise draws",
                self.hat.c.nrows(),
                "release points",
            ));
        }
        let Some(LowRank { u, coords }) = &self.low_rank else {
            return Ok(self.hat.mean(y, range)? + z * self.sigma);
        };
        if y.len() != coords.ncols() {
            return Err(PrivacyError::shape("low-rank release", y.len(), "labels", coords.ncols(), "rows"));
        }
        let yc = match range {
            Some(r) => r.clip(y),
            None => y.clone(),
        };
        Ok(u * (coords * yc + z.rows(0, u.ncols()) * self.sigma))
    }
}

/// Plan a μ-GDP finite release at `xq`: build the hat with the base noise `s2`, cap by `rule`,
/// offer each capped candidate at the ranks `rank` allows ([`crate::low_rank`]), keep the one
/// with the best [`utility_score`], and calibrate σ = Δ/μ. Everything here is label-free.
#[allow(clippy::too_many_arguments)]
pub fn plan(
    kernel: &dyn Kernel,
    x: &DMatrix<f64>,
    s2: &DVector<f64>,
    xq: &DMatrix<f64>,
    model: HatModel<'_>,
    range: LabelRange,
    mu: f64,
    rule: &CapRule,
    rank: &RankRule,
) -> Result<FiniteRelease, PrivacyError> {
    if !(mu.is_finite() && mu > 0.0) {
        return Err(PrivacyError::parameter("GDP parameter μ", mu, "be positive and finite"));
    }
    let finish = |hat: Hat, eta: Option<f64>, cap: Option<CapReport>| -> Result<FiniteRelease, PrivacyError> {
        let sensitivity = hat.sensitivity(range)?;
        let sigma = NoiseScale::Gdp { mu }.sigma(sensitivity.value);
        Ok(FiniteRelease { hat, sensitivity, sigma, eta, cap, low_rank: None })
    };
    let sf = |h: &Hat| h.prior.diagonal().max().max(0.0).sqrt();
    let mut best: Option<(f64, FiniteRelease)> = None;
    let mut consider = |full: FiniteRelease| -> Result<(), PrivacyError> {
        let q = full.hat.c.nrows();
        let mut variants = Vec::new();
        let ranks = rank.candidates(q);
        if !ranks.is_empty() {
            // One O(q n²) pass per cap candidate; each rank is then O(q³).
            let m = crate::low_rank::released_mean_cov(kernel, x, &full.hat.noise, &full.hat.c);
            let g = matmul(full.hat.c.as_view(), false, kernel.k(x.as_view(), xq.as_view()).as_view(), false);
            for k in ranks {
                variants.push(low_rank_release(&full, &m, &g, k, range, mu)?);
            }
        }
        if rank.allows_full(q) {
            variants.push(full);
        }
        for v in variants {
            let score = utility_score(&v);
            if best.as_ref().is_none_or(|(b, _)| score > *b) {
                best = Some((score, v));
            }
        }
        Ok(())
    };
    match rule {
        CapRule::None => consider(finish(hat(kernel, x, s2, xq, model)?, None, None)?)?,
        CapRule::Fixed { eta } => {
            check_eta(*eta)?;
            let base = hat(kernel, x, s2, xq, model)?;
            let tau = eta * sf(&base) * mu / range.width();
            let (h, rep) = cap(kernel, x, s2, xq, model, tau, 60)?;
            consider(finish(h, Some(*eta), Some(rep))?)?;
        }
        CapRule::Auto { etas } => {
            let base = hat(kernel, x, s2, xq, model)?;
            let s_f = sf(&base);
            consider(finish(base, None, None)?)?;
            // Largest η first: a smaller cap only raises noise further, so each run starts from
            // the previous run's noise variances (still label-free).
            let mut etas = etas.clone();
            etas.sort_by(|a, b| b.total_cmp(a));
            let mut start = s2.clone();
            for eta in etas {
                check_eta(eta)?;
                let tau = eta * s_f * mu / range.width();
                let (h, rep) = cap(kernel, x, &start, xq, model, tau, 60)?;
                start = h.noise.clone();
                consider(finish(h, Some(eta), Some(rep))?)?;
            }
        }
    }
    let mut chosen = best.ok_or_else(|| PrivacyError::empty("finite release", "candidate release"))?.1;
    if chosen.low_rank.is_none() {
        // (A low-rank candidate's covariance is already the conservative bound.)
        chosen.hat.make_conservative(kernel, x, xq, model);
    }
    Ok(chosen)
}

/// The rank-k release of `full` (Theorem 2 of [`crate::low_rank`]): basis U of the top-k
/// eigenvectors of `m` = C (K + diag s²) Cᵀ, coordinates Uᵀ C, influences ‖Uᵀ C e_j‖, the
/// error-covariance bound of the projected estimator P C·y (P = U Uᵀ) from `m` and `g` = C K_XQ:
/// K_QQ − P G − Gᵀ P + P M P ([`error_covariance`] of P C, without another O(q n²) pass), Δ_k
/// and σ = Δ_k/μ.
fn low_rank_release(
    full: &FiniteRelease,
    m: &DMatrix<f64>,
    g: &DMatrix<f64>,
    k: usize,
    range: LabelRange,
    mu: f64,
) -> Result<FiniteRelease, PrivacyError> {
    let u = crate::low_rank::principal_basis(m, k)?;
    let coords = u.transpose() * &full.hat.c; // k × n
    let p = &u * u.transpose();
    let latent = error_covariance_from(&full.hat.prior, &(&p * g), &(&p * m * &p));
    if latent.iter().any(|v| !v.is_finite()) {
        return Err(PrivacyError::non_finite("low-rank release: non-finite error covariance"));
    }
    let mut hat = full.hat.clone();
    hat.influence = DVector::from_fn(coords.ncols(), |j, _| scaled_norm(coords.column(j).iter()));
    hat.c = &u * &coords;
    hat.latent_cov = latent;
    let sensitivity = hat.sensitivity(range)?;
    let sigma = NoiseScale::Gdp { mu }.sigma(sensitivity.value);
    Ok(FiniteRelease { hat, sensitivity, sigma, eta: full.eta, cap: full.cap, low_rank: Some(LowRank { u, coords }) })
}

fn check_eta(eta: f64) -> Result<(), PrivacyError> {
    if !(eta.is_finite() && eta > 0.0) {
        return Err(PrivacyError::parameter("cap multiplier η", eta, "be positive and finite"));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use dpcotrain_gp::kernels::SquaredExponential;
    use dpcotrain_gp::{ExactGp, NoiseModel, NoiseVariance, SparseGp, SparseKind};
    use nalgebra::SymmetricEigen;

    /// Rows with one isolated point (row 0, far from the rest): the case capping is for.
    fn data(n: usize) -> (DMatrix<f64>, DVector<f64>, DMatrix<f64>) {
        let x = DMatrix::from_fn(n, 2, |i, j| {
            if i == 0 { 2.5 + j as f64 * 0.1 } else { ((i * 7 + j * 3) % 11) as f64 * 0.2 - 1.0 + j as f64 * 0.05 }
        });
        let y = DVector::from_fn(n, |i, _| ((i as f64) * 0.9).sin() * 2.0);
        let xq = DMatrix::from_fn(6, 2, |i, j| i as f64 * 0.55 - 1.2 + j as f64 * 0.3);
        (x, y, xq)
    }

    fn se() -> SquaredExponential {
        SquaredExponential::ard(1.0, vec![0.9, 1.3])
    }

    fn range() -> LabelRange {
        LabelRange::new(-3.0, 3.0).unwrap()
    }

    /// Released noise-free mean by an independent exact fit with per-row noise s².
    fn exact_mean(x: &DMatrix<f64>, y: &DVector<f64>, s2: &DVector<f64>, xq: &DMatrix<f64>) -> DVector<f64> {
        let base = s2.min();
        let noise = NoiseModel::PerPoint { sigma2: NoiseVariance::new(base), extra: s2.map(|v| v - base) };
        let gp = ExactGp::new(Box::new(se()), noise, x.clone(), y.clone()).unwrap();
        gp.posterior().unwrap().predict(xq, false).unwrap().mean
    }

    fn vfe_mean(
        x: &DMatrix<f64>,
        y: &DVector<f64>,
        s2: &DVector<f64>,
        z: &DMatrix<f64>,
        xq: &DMatrix<f64>,
    ) -> DVector<f64> {
        let base = s2.min();
        let noise = NoiseModel::PerPoint { sigma2: NoiseVariance::new(base), extra: s2.map(|v| v - base) };
        let gp = SparseGp::new(SparseKind::Vfe, Box::new(se()), noise, x.clone(), y.clone(), z.clone()).unwrap();
        gp.posterior().unwrap().predict(xq, false).unwrap().mean
    }

    /// Brute force: move each label to each end of the range and recompute the released vector
    /// with an independent model; the largest move must equal Δ (up to the margin) and every
    /// move must equal d·‖C e_j‖.
    fn brute_force(h: &Hat, mean: &dyn Fn(&DVector<f64>) -> DVector<f64>, y: &DVector<f64>, tol: f64) {
        let r = range();
        let s = h.sensitivity(r).unwrap();
        let mut worst: f64 = 0.0;
        for j in 0..y.len() {
            let (mut lo, mut hi) = (r.clip(y), r.clip(y));
            lo[j] = r.lo;
            hi[j] = r.hi;
            let moved = (mean(&hi) - mean(&lo)).norm();
            assert!(
                (moved - r.width() * h.influence[j]).abs() <= tol * (1.0 + moved),
                "row {j}: refit moved {moved}, hat says {}",
                r.width() * h.influence[j]
            );
            // The hat's own mean agrees with the independent model.
            assert!((h.mean(&hi, Some(r)).unwrap() - mean(&hi)).norm() <= tol * (1.0 + mean(&hi).norm()));
            worst = worst.max(moved);
        }
        assert!(worst <= s.value, "a neighbour moved the release by {worst} > Δ = {}", s.value);
        assert!(worst >= s.value / (1.0 + 2e-6) - tol * (1.0 + worst), "Δ = {} is loose vs {worst}", s.value);
    }

    #[test]
    fn exact_hat_sensitivity_equals_brute_force_refits() {
        let (x, y, xq) = data(15);
        let s2 = DVector::from_fn(15, |j, _| 0.1 + 0.01 * (j % 3) as f64);
        let h = hat(&se(), &x, &s2, &xq, HatModel::Exact).unwrap();
        brute_force(&h, &|y| exact_mean(&x, y, &s2, &xq), &y, 1e-9);
        // The latent covariance is the exact posterior's.
        let base = s2.min();
        let noise = NoiseModel::PerPoint { sigma2: NoiseVariance::new(base), extra: s2.map(|v| v - base) };
        let p = ExactGp::new(Box::new(se()), noise, x.clone(), y.clone())
            .unwrap()
            .posterior()
            .unwrap()
            .predict(&xq, true)
            .unwrap();
        assert!((p.cov.unwrap() - &h.latent_cov).abs().max() < 1e-10);
    }

    #[test]
    fn vfe_hat_sensitivity_equals_brute_force_refits_and_exact_at_z_equal_x() {
        let (x, y, xq) = data(30);
        let s2 = DVector::from_fn(30, |j, _| 0.08 + 0.02 * (j % 4) as f64);
        let z = x.rows(0, 7).clone_owned();
        let h = hat(&se(), &x, &s2, &xq, HatModel::Vfe { z: &z }).unwrap();
        brute_force(&h, &|y| vfe_mean(&x, y, &s2, &z, &xq), &y, 1e-7);
        // Identity: with Z = X (distinct rows) the VFE mean is the exact mean (up to K_uu's jitter).
        // Well-separated rows keep K_uu well conditioned, so its jitter is negligible.
        let x = DMatrix::from_fn(11, 2, |i, j| if j == 0 { i as f64 * 0.9 - 4.5 } else { ((i * 3) % 5) as f64 * 0.7 });
        let s2 = DVector::from_fn(11, |j, _| 0.08 + 0.02 * (j % 4) as f64);
        let hz = hat(&se(), &x, &s2, &xq, HatModel::Vfe { z: &x }).unwrap();
        let he = hat(&se(), &x, &s2, &xq, HatModel::Exact).unwrap();
        assert!((&hz.c - &he.c).abs().max() < 1e-5, "{}", (&hz.c - &he.c).abs().max());
        assert!((&hz.latent_cov - &he.latent_cov).abs().max() < 1e-5);
        for j in 0..11 {
            let rel = (hz.loo_denominator[j] - he.loo_denominator[j]).abs() / he.loo_denominator[j];
            assert!(rel < 1e-3, "row {j}: {} vs {}", hz.loo_denominator[j], he.loo_denominator[j]);
        }
    }

    /// The leave-one-out lemma: 1/A_jj = s_j² + v_j with v_j the posterior variance at x_j given
    /// every other row, and C e_j = A_jj·k₋ⱼ(Q, x_j).
    #[test]
    fn leave_one_out_lemma_holds() {
        let (x, _, xq) = data(12);
        let s2 = DVector::from_element(12, 0.1);
        let h = hat(&se(), &x, &s2, &xq, HatModel::Exact).unwrap();
        for j in [0usize, 5, 11] {
            let keep: Vec<usize> = (0..12).filter(|&i| i != j).collect();
            let xr = x.select_rows(keep.iter());
            let gp = ExactGp::new(Box::new(se()), NoiseModel::homoscedastic(0.1), xr, DVector::zeros(11)).unwrap();
            let mut pts = DMatrix::zeros(7, 2);
            pts.row_mut(0).copy_from(&x.row(j));
            pts.rows_mut(1, 6).copy_from(&xq);
            let cov = gp.posterior().unwrap().predict(&pts, true).unwrap().cov.unwrap();
            let v = cov[(0, 0)];
            assert!((h.loo_denominator[j] - (0.1 + v)).abs() < 1e-10);
            for q in 0..6 {
                let want = cov[(q + 1, 0)] / (0.1 + v);
                assert!((h.c[(q, j)] - want).abs() < 1e-10, "C[{q},{j}] {} vs {want}", h.c[(q, j)]);
            }
        }
    }

    #[test]
    fn capping_bounds_every_influence_and_is_verified_by_brute_force() {
        for model in ["exact", "vfe"] {
            let (x, y, xq) = data(25);
            let z = x.rows(0, 10).clone_owned();
            let hm = if model == "exact" { HatModel::Exact } else { HatModel::Vfe { z: &z } };
            let s2 = DVector::from_element(25, 0.1);
            let h0 = hat(&se(), &x, &s2, &xq, hm).unwrap();
            let tau = h0.influence.max() * 0.4;
            let (h, rep) = cap(&se(), &x, &s2, &xq, hm, tau, 60).unwrap();
            assert!(rep.converged, "{model}: {rep:?}");
            assert!(h.influence.max() <= tau * (1.0 + CAP_TOLERANCE), "{model}");
            assert!(rep.rows_inflated > 0 && rep.rows_inflated < 25, "{model}: {rep:?}");
            // Only rows that exceeded τ at some point were touched; noise never decreased.
            for j in 0..25 {
                assert!(h.noise[j] >= s2[j]);
                if h0.influence[j] <= tau * 0.5 && h.noise[j] > s2[j] {
                    // allowed (interaction), but the cap must have been needed at some iteration
                    assert!(h.noise[j] < 1e6, "{model}: row {j} inflated wildly");
                }
            }
            // More noise ⇒ larger posterior variance at Q.
            for q in 0..6 {
                assert!(h.latent_cov[(q, q)] >= h0.latent_cov[(q, q)] - 1e-12);
            }
            // Brute force on the capped model with independent refits.
            let s2c = h.noise.clone();
            if model == "exact" {
                brute_force(&h, &|y| exact_mean(&x, y, &s2c, &xq), &y, 1e-8);
            } else {
                brute_force(&h, &|y| vfe_mean(&x, y, &s2c, &z, &xq), &y, 1e-7);
            }
        }
    }

    /// The capped mean's reported covariance bounds its true error covariance under the real
    /// (uncapped) noise: K_QQ − 2CK_XQ + C(K + S₀)Cᵀ ⪯ latent_cov.
    #[test]
    fn capped_variance_is_conservative() {
        let (x, _, xq) = data(20);
        let s0 = DVector::from_element(20, 0.1);
        let h0 = hat(&se(), &x, &s0, &xq, HatModel::Exact).unwrap();
        let (h, _) = cap(&se(), &x, &s0, &xq, HatModel::Exact, h0.influence.max() * 0.3, 60).unwrap();
        let k = se();
        let kxx = k.k(x.as_view(), x.as_view()) + DMatrix::from_diagonal(&s0);
        let kxq = k.k(x.as_view(), xq.as_view());
        let ckxq = &h.c * &kxq;
        let truth = &h.prior - &ckxq - ckxq.transpose() + &h.c * kxx * h.c.transpose();
        let gap = &h.latent_cov - &truth;
        let eig = gap.symmetric_eigenvalues();
        assert!(eig.min() > -1e-10, "reported covariance under-states the true error: {}", eig.min());
        // And for the uncapped model the two coincide.
        let c0 = &h0.c * &kxq;
        let truth0 = &h0.prior - &c0 - c0.transpose()
            + &h0.c * (k.k(x.as_view(), x.as_view()) + DMatrix::from_diagonal(&s0)) * h0.c.transpose();
        assert!((&truth0 - &h0.latent_cov).abs().max() < 1e-10);
    }

    /// For VFE the released covariance bounds the true error covariance (random trials with few
    /// inducing points, where the VFE posterior covariance does not); for the exact model the
    /// error covariance is the posterior covariance.
    #[test]
    fn released_vfe_covariance_bounds_the_true_error() {
        let (x, _, xq) = data(20);
        let s2 = DVector::from_element(20, 0.1);
        let k = se();
        let mu = crate::gaussian::gdp_mu_for(1.0, 1e-5);
        let mut under_stated = false;
        for m in [1usize, 3, 6] {
            let z = x.rows(0, m).clone_owned();
            let rel = plan(&k, &x, &s2, &xq, HatModel::Vfe { z: &z }, range(), mu, &CapRule::auto(), &RankRule::Full)
                .unwrap();
            // True error covariance under the real noise s2 (⪯ the capped noise).
            let truth = error_covariance(&k, &x, &s2, &xq, &rel.hat.c, &rel.hat.prior);
            let gap = (&rel.hat.latent_cov - &truth).symmetric_eigenvalues();
            assert!(gap.min() > -1e-10, "m = {m}: reported covariance under-states the error by {}", gap.min());
            // The released covariance is the error covariance under the capped noise; the raw VFE
            // posterior covariance can under-state the error under the real noise.
            let capped = error_covariance(&k, &x, &rel.hat.noise, &xq, &rel.hat.c, &rel.hat.prior);
            assert!((&capped - &rel.hat.latent_cov).abs().max() < 1e-10);
            let raw = hat(&k, &x, &s2, &xq, HatModel::Vfe { z: &z }).unwrap();
            let raw_truth = error_covariance(&k, &x, &s2, &xq, &raw.c, &raw.prior);
            under_stated |= (0..6).any(|i| raw.latent_cov[(i, i)] < raw_truth[(i, i)] - 1e-6);
        }
        assert!(under_stated, "the raw VFE covariance was never short of the true error: the test shows nothing");
        let e = hat(&k, &x, &s2, &xq, HatModel::Exact).unwrap();
        let truth = error_covariance(&k, &x, &s2, &xq, &e.c, &e.prior);
        assert!((&truth - &e.latent_cov).abs().max() < 1e-10);
    }

    #[test]
    fn plan_calibrates_sigma_and_auto_is_never_worse_than_no_cap() {
        let (x, y, xq) = data(25);
        let s2 = DVector::from_element(25, 0.1);
        let mu = crate::gaussian::gdp_mu_for(1.0, 1e-5);
        let none = plan(&se(), &x, &s2, &xq, HatModel::Exact, range(), mu, &CapRule::None, &RankRule::Full).unwrap();
        assert!((none.sigma - none.sensitivity.value / mu).abs() < 1e-12);
        let fixed =
            plan(&se(), &x, &s2, &xq, HatModel::Exact, range(), mu, &CapRule::Fixed { eta: 1.0 }, &RankRule::Full)
                .unwrap();
        // η = 1 caps σ at the prior sd (to the loop's tolerance and the margin).
        let sf = fixed.hat.prior.diagonal().max().sqrt();
        assert!(fixed.sigma <= sf * (1.0 + CAP_TOLERANCE) * (1.0 + 1e-5), "{} > {sf}", fixed.sigma);
        assert!(fixed.sigma < none.sigma);
        let auto = plan(&se(), &x, &s2, &xq, HatModel::Exact, range(), mu, &CapRule::auto(), &RankRule::Full).unwrap();
        assert!(utility_score(&auto) >= utility_score(&none));
        assert!(utility_score(&auto) >= utility_score(&fixed) - 1e-12);
        // Released variance = latent + σ²; release = mean + σz.
        let z = DVector::from_fn(6, |i, _| i as f64 - 2.5);
        let rel = auto.release(&y, Some(range()), &z).unwrap();
        let m = auto.hat.mean(&y, Some(range())).unwrap();
        assert!((rel - m - &z * auto.sigma).norm() < 1e-12);
        assert!((auto.released_var()[0] - auto.hat.latent_cov[(0, 0)] - auto.sigma.powi(2)).abs() < 1e-12);
    }

    /// Theorem 2 by brute force: the low-rank release draws the k-vector Uᵀ C·clip(y) + σz; moving
    /// each label to each end of the range moves it by exactly d‖Uᵀ C e_j‖, the largest move is
    /// Δ_k (up to the margin), and Δ_k ≤ Δ of the full release with the same cap.
    #[test]
    fn low_rank_release_sensitivity_equals_brute_force_and_never_exceeds_the_full() {
        let (x, y, xq) = data(20);
        let s2 = DVector::from_element(20, 0.1);
        let mu = 0.5;
        let r = range();
        let z = x.rows(0, 6).clone_owned();
        let models = [HatModel::Exact, HatModel::Vfe { z: &z }];
        for (model, cap_rule) in models.iter().flat_map(|m| [(*m, CapRule::None), (*m, CapRule::Fixed { eta: 1.0 })]) {
            let full = plan(&se(), &x, &s2, &xq, model, r, mu, &cap_rule, &RankRule::Full).unwrap();
            for k in [1, 2, 4] {
                let low = plan(&se(), &x, &s2, &xq, model, r, mu, &cap_rule, &RankRule::Fixed { k }).unwrap();
                let u = low.low_rank.clone().expect("a rank-k release has a basis").u;
                assert_eq!((u.nrows(), u.ncols()), (6, k));
                assert!((u.transpose() * &u - DMatrix::identity(k, k)).abs().max() < 1e-12);
                // The drawn vector, recomputed from the *full* release's hat (an independent path).
                let drawn = |y: &DVector<f64>| u.transpose() * full.hat.mean(y, Some(r)).unwrap();
                let mut worst: f64 = 0.0;
                for j in 0..20 {
                    let (mut lo, mut hi) = (r.clip(&y), r.clip(&y));
                    lo[j] = r.lo;
                    hi[j] = r.hi;
                    let moved = (drawn(&hi) - drawn(&lo)).norm();
                    assert!((moved - r.width() * low.hat.influence[j]).abs() <= 1e-10 * (1.0 + moved), "row {j}");
                    worst = worst.max(moved);
                }
                assert!(worst <= low.sensitivity.value && worst >= low.sensitivity.value / (1.0 + 2e-6) - 1e-12);
                assert!(low.sensitivity.value <= full.sensitivity.value * (1.0 + 1e-12), "Δ_k > Δ");
                // The release is U (Uᵀ C y + σ z₁..ₖ); its noise covariance is σ² U Uᵀ, which
                // the reported σ²I dominates.
                let z = DVector::from_fn(6, |i, _| i as f64 - 2.5);
                let released = low.release(&y, Some(r), &z).unwrap();
                let expect = &u * (drawn(&y) + z.rows(0, k) * low.sigma);
                assert!((released - expect).norm() < 1e-10);
                let noise = (&u * u.transpose()) * low.sigma.powi(2);
                assert!((low.noise_at_points() - noise.diagonal()).abs().max() < 1e-12);
                let reported = low.released_cov() - &low.hat.latent_cov;
                let slack = SymmetricEigen::new(&reported - &noise).eigenvalues.min();
                assert!(slack >= -1e-12, "reported noise covariance below the real one: {slack}");
                assert!((low.released_var() - reported.diagonal() - low.hat.latent_cov.diagonal()).abs().max() < 1e-12);
                // The reported latent covariance is the error covariance of U Uᵀ C·y (computed
                // here the long way), which the exact posterior (the best linear estimator under
                // this model) never beats.
                let direct = error_covariance(&se(), &x, &low.hat.noise, &xq, &low.hat.c, &low.hat.prior);
                assert!((&direct - &low.hat.latent_cov).abs().max() < 1e-10);
                if model == HatModel::Exact {
                    let gap = &low.hat.latent_cov - &full.hat.latent_cov;
                    let min_eig = SymmetricEigen::new(gap).eigenvalues.min();
                    assert!(min_eig >= -1e-10, "projected error covariance below the posterior's: {min_eig}");
                }
            }
        }
    }

    /// The rank rule keeps the candidate with the best score, and the full release is among the
    /// candidates of `auto` (so auto never scores below it).
    #[test]
    fn the_rank_rule_keeps_the_best_scoring_candidate() {
        let (x, _, _) = data(40);
        let xq = DMatrix::from_fn(12, 2, |i, j| i as f64 * 0.2 - 1.2 + j as f64 * 0.1);
        let s2 = DVector::from_element(40, 0.1);
        let mu = 0.27;
        let r = range();
        let go = |rank: &RankRule| plan(&se(), &x, &s2, &xq, HatModel::Exact, r, mu, &CapRule::auto(), rank).unwrap();
        let auto = go(&RankRule::Auto { ks: vec![1, 2, 3, 5] });
        for k in [1, 2, 3, 5] {
            assert!(utility_score(&auto) >= utility_score(&go(&RankRule::Fixed { k })) - 1e-12, "k = {k}");
        }
        assert!(utility_score(&auto) >= utility_score(&go(&RankRule::Full)) - 1e-12);
        // Here the low rank pays: the score of the best low-rank candidate beats the full release.
        assert!(auto.low_rank.is_some(), "expected a low-rank choice at these close release points");
    }

    /// Influences of a row far from every release point are tiny, not zero: Δ never
    /// underflows to 0 (which would release C·y unnoised).
    #[test]
    fn influence_of_a_far_row_does_not_underflow() {
        let x = DMatrix::from_column_slice(2, 1, &[0.0, 0.3]);
        let xq = DMatrix::from_column_slice(1, 1, &[40.0]);
        let k = SquaredExponential::isotropic(1.0, 1.0);
        let h = hat(&k, &x, &DVector::from_element(2, 0.1), &xq, HatModel::Exact).unwrap();
        // k(40, 0) = exp(−800) ≈ 1e−348 underflows; at 37 it is ≈ 1e−298, whose square does.
        let xq = DMatrix::from_column_slice(1, 1, &[37.0]);
        let h2 = hat(&k, &x, &DVector::from_element(2, 0.1), &xq, HatModel::Exact).unwrap();
        assert!(h2.influence.max() > 0.0, "{}", h2.influence.max());
        assert!(h2.c.iter().any(|c| *c != 0.0));
        // Where C is exactly zero the mean is exactly zero too: nothing about the labels leaks.
        if h.influence.max() == 0.0 {
            assert!(h.c.iter().all(|c| *c == 0.0));
        }
        assert_eq!(scaled_norm([3e-200, 4e-200].iter()), 5e-200);
    }

    #[test]
    fn cap_rules_parse_from_their_names() {
        assert_eq!("auto".parse::<CapRule>().unwrap(), CapRule::auto());
        assert_eq!("none".parse::<CapRule>().unwrap(), CapRule::None);
        assert_eq!("eta=0.5".parse::<CapRule>().unwrap(), CapRule::Fixed { eta: 0.5 });
        let floor = "auto=4,2,1".parse::<CapRule>().unwrap();
        assert_eq!(floor, CapRule::Auto { etas: vec![4.0, 2.0, 1.0] });
        // Every rule's name parses back to the rule (the frontier's resume keys rely on it).
        for rule in [CapRule::auto(), CapRule::None, CapRule::Fixed { eta: 0.5 }, floor] {
            assert_eq!(rule.name().parse::<CapRule>().unwrap(), rule);
        }
        for bad in ["eta=-1", "eta=x", "eta=inf", "half", "auto=", "auto=1,-2", "auto=1,,2"] {
            assert!(bad.parse::<CapRule>().unwrap_err().to_string().contains(bad));
        }
    }

    #[test]
    fn bad_inputs_are_refused_with_reasons() {
        let (x, _, xq) = data(10);
        let s2 = DVector::from_element(10, 0.1);
        let err = |r: Result<Hat, PrivacyError>| r.unwrap_err().to_string();
        assert!(
            err(hat(&se(), &x, &DVector::from_element(9, 0.1), &xq, HatModel::Exact)).contains("9 noise variances")
        );
        let mut bad = s2.clone();
        bad[3] = 0.0;
        assert!(err(hat(&se(), &x, &bad, &xq, HatModel::Exact)).contains("row 3"));
        assert!(err(hat(&se(), &x, &s2, &DMatrix::zeros(0, 2), HatModel::Exact)).contains("no release points"));
        assert!(err(hat(&se(), &x, &s2, &DMatrix::zeros(3, 1), HatModel::Exact)).contains("columns"));
        let mut xn = x.clone();
        xn[(2, 1)] = f64::NAN;
        assert!(err(hat(&se(), &xn, &s2, &xq, HatModel::Exact)).contains("non-finite"));
        assert!(cap(&se(), &x, &s2, &xq, HatModel::Exact, 0.0, 10).is_err());
        assert!(plan(&se(), &x, &s2, &xq, HatModel::Exact, range(), 0.0, &CapRule::None, &RankRule::Full).is_err());
        assert!(
            plan(&se(), &x, &s2, &xq, HatModel::Exact, range(), 1.0, &CapRule::Fixed { eta: -1.0 }, &RankRule::Full)
                .is_err()
        );
    }
}
