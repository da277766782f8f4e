//! Stochastic variational GP regression (SVGP; Hensman, Fusi & Lawrence 2013; Thomas 2017
//! §1.3.2 eqs 1.28–1.35) in the whitened parametrisation, for private views too large for the
//! collapsed bound's O(NM²) pass per step, or too large for memory.
//!
//! With L = chol(K_uu + εI) and u = L v, the variational posterior is q(v) = N(m, S) and
//!
//! ```text
//! a_i = L⁻¹ k_u(x_i),   μ_i = a_iᵀ m,   s_i = k(x_i, x_i) − a_iᵀa_i + a_iᵀ S a_i
//! L₃  = Σ_i [ log N(y_i | μ_i, σ²) − s_i / (2σ²) ] − KL(N(m, S) ‖ N(0, I))
//! KL  = ½ [ tr S + mᵀm − M + log|S⁻¹| ]
//! ```
//!
//! (Thomas's eq 1.35 prints k_ui k_iiᵀ; it means k_ui k_uiᵀ.) The bound is a sum over rows, so a
//! minibatch B scaled by N/|B| gives an unbiased estimate of it and of its gradient
//! ([`bound`]). q(v) is stored in its natural parameters, the precision Λ = S⁻¹ and h = Λm,
//! so a natural-gradient step of size γ is a convex combination (Hensman et al. 2013 §3;
//! Salimbeni, Eleftheriadis & Hensman 2018) and needs no matrix inverse:
//!
//! ```text
//! Λ ← (1 − γ) Λ + γ (I + (N/|B|) σ⁻² A_B A_Bᵀ),   h ← (1 − γ) h + γ (N/|B|) σ⁻² A_B y_B
//! ```
//!
//! With the full batch and γ = 1 this is the optimal q(v) for the current θ and Z, and L₃
//! then equals Titsias's collapsed bound (the identity test in `tests`). Hyperparameters and
//! Z take Adam steps ([`crate::optimize::adam`]) on the minibatch gradient — GPflow's
//! `SVGP` + `NaturalGradient` recipe ([`fit`]).

pub mod bound;
pub mod fit;
pub mod minibatch;

pub use bound::BatchBound;
pub use fit::{SvgpCheckpoint, SvgpEvent, SvgpOptions, SvgpProgress, SvgpReport, fit_svgp};
pub use minibatch::{BlockVisitor, InMemory, MinibatchSource, SourcePosition, epoch_rng};

use crate::features::InducingFeatures;
use crate::kernels::{Bounds, Kernel};
use crate::linalg::{Cholesky, JitterPolicy, col_sq_norms};
use crate::noise::NoiseVariance;
use crate::{CheckpointMismatch, GpError, Place, Prediction, validate_inputs};
use nalgebra::{DMatrix, DMatrixView, DVector, DVectorView};
use serde::{Deserialize, Serialize};

/// q(v) = N(Λ⁻¹h, Λ⁻¹) over the whitened inducing values v = L⁻¹u, in natural parameters.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct WhitenedQ {
    /// h = Λ m.
    pub h: DVector<f64>,
    /// Λ = S⁻¹ (symmetric, ⪰ I along every natural-gradient path from the prior).
    pub precision: DMatrix<f64>,
}

impl WhitenedQ {
    /// The prior p(v) = N(0, I).
    pub fn prior(m: usize) -> Self {
        WhitenedQ { h: DVector::zeros(m), precision: DMatrix::identity(m, m) }
    }

    fn check(&self, m: usize) -> Result<(), GpError> {
        let (rows, cols) = self.precision.shape();
        for (got, items) in [(self.h.len(), "entries of h"), (rows, "precision rows"), (cols, "precision columns")] {
            if got != m {
                return Err(GpError::shape("q(u)", got, items, m, "inducing points"));
            }
        }
        if let Some(i) = self.h.iter().position(|v| !v.is_finite()) {
            return Err(GpError::non_finite("q(u)'s h", Place::Entry(i), self.h[i]));
        }
        if let Some(k) = self.precision.iter().position(|v| !v.is_finite()) {
            return Err(GpError::non_finite("q(u)'s precision", Place::column_major(k, m), self.precision[k]));
        }
        // Every natural-gradient path from the prior keeps Λ ⪰ I (a convex combination of I and
        // I + AᵀA/σ²): a precision that is not symmetric, or not even ⪰ ½I, was not made by one.
        let p = &self.precision;
        let (asym, (row, column)) = (0..m)
            .flat_map(|i| (0..i).map(move |j| (i, j)))
            .map(|(i, j)| ((p[(i, j)] - p[(j, i)]).abs(), (i, j)))
            .fold((0.0, (0, 0)), |a, b| if b.0 > a.0 { b } else { a });
        let scale = p.iter().fold(1.0f64, |a, v| a.max(v.abs()));
        if asym > 1e-8 * scale {
            return Err(GpError::NotSymmetric { what: "q(u)'s precision", row, column, gap: asym });
        }
        if (p - DMatrix::identity(m, m) * 0.5).cholesky().is_none() {
            return Err(GpError::Checkpoint(CheckpointMismatch::PrecisionNotFromFit));
        }
        Ok(())
    }
}

/// An SVGP regression model: kernel, Gaussian noise σ², inducing inputs Z (M×D) and q(v).
#[derive(Debug, Clone)]
pub struct Svgp {
    pub kernel: Box<dyn Kernel>,
    pub noise: NoiseVariance,
    z: DMatrix<f64>,
    q: WhitenedQ,
    /// Whether Z is part of the hyperparameter vector.
    pub optimize_inducing: bool,
    /// Jitter ladder for K_uu (the collapsed models' default, so the identity test compares
    /// like with like; [`crate::KuuJitter::policy`] gives GPflow's fixed 10⁻⁶).
    pub jitter: JitterPolicy,
}

impl Svgp {
    /// A model with q(v) at the prior. σ² must be positive and finite; Z must be M×D with
    /// finite entries.
    pub fn new(kernel: Box<dyn Kernel>, noise: NoiseVariance, z: DMatrix<f64>) -> Result<Self, GpError> {
        if !(noise.variance.is_finite() && noise.variance > 0.0) {
            return Err(GpError::parameter("noise variance", noise.variance, "be positive and finite"));
        }
        if z.nrows() == 0 {
            return Err(GpError::Empty { what: "inducing points" });
        }
        validate_inputs(&z, kernel.as_ref(), "Z")?;
        let q = WhitenedQ::prior(z.nrows());
        Ok(Svgp { kernel, noise, z, q, optimize_inducing: true, jitter: JitterPolicy::ALWAYS })
    }

    pub fn z(&self) -> &DMatrix<f64> {
        &self.z
    }
    pub fn q(&self) -> &WhitenedQ {
        &self.q
    }
    pub fn input_dim(&self) -> usize {
        self.z.ncols()
    }

    /// Replace q(v) (e.g. from a checkpoint); its size must match Z.
    pub fn set_q(&mut self, q: WhitenedQ) -> Result<(), GpError> {
        q.check(self.z.nrows())?;
        self.q = q;
        Ok(())
    }

    /// chol(Λ) and the whitened mean m = Λ⁻¹h of q(v).
    pub(crate) fn q_factors(&self) -> Result<(Cholesky, DVector<f64>), GpError> {
        let chol_q = Cholesky::factor_of(&self.q.precision, "q(u) precision", JitterPolicy::IF_NEEDED)?;
        let mean = chol_q.solve_vec(&self.q.h);
        Ok((chol_q, mean))
    }

    /// Check a minibatch against the model: matching columns, finite values, equal lengths.
    pub(crate) fn check_batch(&self, x: DMatrixView<'_, f64>, y: DVectorView<'_, f64>) -> Result<(), GpError> {
        if x.nrows() != y.len() {
            return Err(GpError::shape("minibatch", y.len(), "targets", x.nrows(), "rows of X"));
        }
        if x.nrows() == 0 {
            return Err(GpError::Empty { what: "rows in the minibatch" });
        }
        if x.ncols() != self.z.ncols() {
            return Err(GpError::shape("minibatch", x.ncols(), "columns", self.z.ncols(), "columns of Z"));
        }
        if let Some(i) = y.iter().position(|v| !v.is_finite()) {
            return Err(GpError::non_finite("minibatch target", Place::Row(i), y[i]));
        }
        if let Some(k) = x.iter().position(|v| !v.is_finite()) {
            let at = Place::column_major(k, x.nrows());
            return Err(GpError::non_finite("minibatch", at, *x.iter().nth(k).expect("k < len")));
        }
        Ok(())
    }

    /// One natural-gradient step of size γ ∈ (0, 1] on q(v) from a minibatch of `n_total` rows
    /// (see the module docs). Linear in y: Λ does not depend on the labels.
    pub fn natural_gradient_step(
        &mut self,
        x: DMatrixView<'_, f64>,
        y: DVectorView<'_, f64>,
        n_total: usize,
        gamma: f64,
    ) -> Result<(), GpError> {
        self.check_batch(x, y)?;
        let a = self.whitened_cross(x)?.a;
        self.natgrad_from(&crate::linalg::aat(&a), &a, y, n_total, gamma)
    }

    /// The natural-gradient step given A = L⁻¹K_uf of the minibatch and its Gram matrix AAᵀ.
    pub(crate) fn natgrad_from(
        &mut self,
        gram: &DMatrix<f64>,
        a: &DMatrix<f64>,
        y: DVectorView<'_, f64>,
        n_total: usize,
        gamma: f64,
    ) -> Result<(), GpError> {
        if !(gamma > 0.0 && gamma <= 1.0) {
            return Err(GpError::parameter("natural-gradient step", gamma, "be in (0, 1]"));
        }
        let scale = n_total as f64 / a.ncols() as f64 / self.noise.variance;
        let m = self.z.nrows();
        let mut target = gram * scale;
        for i in 0..m {
            target[(i, i)] += 1.0;
        }
        let h_target = a * y * scale;
        self.q.precision = &self.q.precision * (1.0 - gamma) + target * gamma;
        crate::linalg::symmetrize_from_lower(&mut self.q.precision);
        self.q.h = &self.q.h * (1.0 - gamma) + h_target * gamma;
        Ok(())
    }

    /// The optimal q(v) for the current θ, Z and σ² given every row of `source` (one
    /// streamed pass accumulating Σ a_i a_iᵀ and Σ a_i y_i: O(NM²), memory O(M²)). The model
    /// then equals the collapsed VFE posterior with the same θ, Z and σ² (Titsias 2009).
    pub fn set_optimal_q(&mut self, source: &mut dyn MinibatchSource) -> Result<(), GpError> {
        let chol_uu =
            Cholesky::factor(InducingFeatures::Points.kuu(self.kernel.as_ref(), &self.z), "K_uu", self.jitter)?;
        let m = self.z.nrows();
        let (mut prec, mut h) = (DMatrix::<f64>::zeros(m, m), DVector::<f64>::zeros(m));
        source.for_each_block(&mut |x, y| {
            self.check_batch(x, y)?;
            let mut a = self.kernel.k(self.z.as_view(), x);
            chol_uu.solve_l_in_place(&mut a);
            crate::linalg::aat_acc(a.as_view(), &mut prec, 1.0, true);
            h += &a * y;
            Ok(())
        })?;
        crate::linalg::symmetrize_from_lower(&mut prec);
        let s2 = self.noise.variance;
        prec /= s2;
        for i in 0..m {
            prec[(i, i)] += 1.0;
        }
        self.q = WhitenedQ { h: h / s2, precision: prec };
        Ok(())
    }

    /// L₃ over every row of `source` at the current state, per row: Σ_i E_q[log p(y_i | f_i)]
    /// − KL(q ‖ p), divided by N (one streamed pass, O(NM²); the training position is not
    /// moved). The exact bound the fit ended at, where the training reports only a moving
    /// average of minibatch estimates.
    pub fn full_bound_per_row(&self, source: &mut dyn MinibatchSource) -> Result<f64, GpError> {
        let (mut ell, mut kl, mut rows) = (0.0, 0.0, 0usize);
        source.for_each_block(&mut |x, y| {
            // With n_total = the block's own size, the scale is 1: the block's expected
            // log-likelihood exactly.
            let b = self.batch_bound(x, y, x.nrows(), false)?;
            ell += b.expected_log_lik;
            kl = b.kl;
            rows += x.nrows();
            Ok(())
        })?;
        if rows == 0 {
            return Err(GpError::Empty { what: "rows in the data set" });
        }
        Ok((ell - kl) / rows as f64)
    }

    /// Latent predictive at `xs`: μ* = a*ᵀm, var* = k** − ‖a*‖² + ‖L_Λ⁻¹a*‖², with
    /// a* = L⁻¹k_u(x*); the full covariance on request.
    pub fn predict(&self, xs: &DMatrix<f64>, full_cov: bool) -> Result<Prediction, GpError> {
        crate::validate_test_inputs(xs, &self.z, self.kernel.as_ref())?;
        let a = self.whitened_cross(xs.as_view())?.a;
        let (chol_q, q_mean) = self.q_factors()?;
        let mut b = a.clone();
        chol_q.solve_l_in_place(&mut b);
        let mean = a.tr_mul(&q_mean);
        let var = self.kernel.diag(xs.as_view()) - col_sq_norms(&a) + col_sq_norms(&b);
        let cov = full_cov.then(|| self.kernel.k(xs.as_view(), xs.as_view()) - a.tr_mul(&a) + b.tr_mul(&b));
        Ok(Prediction::new(mean, var, cov))
    }

    /// Hyperparameters on the optimisation scale: kernel log-parameters, log σ² (if learned),
    /// then Z column-major (if `optimize_inducing`).
    pub fn params(&self) -> Vec<f64> {
        let mut p = self.kernel.params();
        if self.noise.learn {
            p.push(self.noise.variance.ln());
        }
        if self.optimize_inducing {
            p.extend_from_slice(self.z.as_slice());
        }
        p
    }

    pub fn set_params(&mut self, p: &[f64]) {
        let nk = self.kernel.n_params();
        self.kernel.set_params(&p[..nk]);
        let mut i = nk;
        if self.noise.learn {
            self.noise.variance = p[i].exp();
            i += 1;
        }
        if self.optimize_inducing {
            let len = self.z.len();
            self.z.as_mut_slice().copy_from_slice(&p[i..i + len]);
        }
    }

    pub fn bounds(&self) -> Vec<Bounds> {
        let mut b = self.kernel.bounds();
        if self.noise.learn {
            b.push(self.noise.bounds);
        }
        if self.optimize_inducing {
            b.extend(std::iter::repeat_n(Bounds::new(f64::NEG_INFINITY, f64::INFINITY), self.z.len()));
        }
        b
    }

    pub fn param_names(&self) -> Vec<String> {
        let mut n = self.kernel.param_names();
        if self.noise.learn {
            n.push("noise_variance".into());
        }
        if self.optimize_inducing {
            for d in 0..self.z.ncols() {
                for m in 0..self.z.nrows() {
                    n.push(format!("Z[{m},{d}]"));
                }
            }
        }
        n
    }
}

#[cfg(test)]
mod tests;
