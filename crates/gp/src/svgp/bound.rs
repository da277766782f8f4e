//! The uncollapsed bound L₃ of Hensman, Fusi & Lawrence (2013) on a minibatch, in the whitened
//! parametrisation, and its analytic gradient with respect to the hyperparameters (kernel,
//! log σ², Z) at fixed q(v).
//!
//! With c = N/|B|, r = y − Aᵀm and S = Λ⁻¹ (module docs of [`super`] for the notation):
//!
//! ```text
//! ∂/∂A        = (c/σ²) (m rᵀ + A − S A)
//! ∂/∂diag K_ff = −c/(2σ²)
//! ∂/∂log σ²   = c Σ_i [ −½ + (r_i² + s_i)/(2σ²) ]
//! ∂/∂K_uf     = L⁻ᵀ ∂/∂A
//! ∂/∂L        = −tril(L⁻ᵀ (∂/∂A) Aᵀ)      (A = L⁻¹K_uf)
//! ∂/∂K_uu     = Murray (2016) reverse mode of the Cholesky, plus the jitter term
//! ```
//!
//! The reverse mode needs only Lᵀ ∂/∂L = −(∂/∂A) Aᵀ ([`crate::linalg::Cholesky::backward_from_product`]),
//! and with P = AAᵀ (the natural-gradient step's Gram matrix) that is an M×M expression:
//!
//! ```text
//! (∂/∂A) Aᵀ = (c/σ²) (m (A r)ᵀ + P − S P)
//! ```
//!
//! so neither the M×M×|B| product (∂/∂A) Aᵀ nor a product with L is formed. K_uu's own vjp
//! reads the K_uu the factor was built from ([`crate::kernels::Kernel::vjp_given_k`]).
//! The KL term does not depend on the hyperparameters in the whitened form; its tr S is
//! ‖L_Λ⁻¹‖²_F.

use super::Svgp;
use crate::features::InducingFeatures;
use crate::linalg::{Cholesky, col_sq_norms};
use crate::{GpError, Jitter, Place};
use nalgebra::{DMatrix, DMatrixView, DVectorView};

const LN_2PI: f64 = 1.837_877_066_409_345_3;

/// L₃ on a minibatch (scaled to the whole data set) and, when asked, its gradient with respect
/// to [`Svgp::params`].
#[derive(Debug, Clone, PartialEq)]
pub struct BatchBound {
    /// c Σ_i E_q[log p(y_i | f_i)] − KL.
    pub value: f64,
    /// c Σ_i E_q[log p(y_i | f_i)].
    pub expected_log_lik: f64,
    /// KL(q(v) ‖ p(v)) ≥ 0.
    pub kl: f64,
    pub grad: Option<Vec<f64>>,
    pub jitter: Jitter,
}

impl Svgp {
    /// L₃ on the minibatch (`x`, `y`) of a data set of `n_total` rows; the gradient (in
    /// [`Svgp::params`] order) when `want_grad`.
    pub fn batch_bound(
        &self,
        x: DMatrixView<'_, f64>,
        y: DVectorView<'_, f64>,
        n_total: usize,
        want_grad: bool,
    ) -> Result<BatchBound, GpError> {
        self.check_batch(x, y)?;
        let cross = self.whitened_cross(x)?;
        let gram = want_grad.then(|| crate::linalg::aat(&cross.a));
        self.bound_from(&cross, gram.as_ref(), x, y, n_total)
    }

    /// One training step's numerics: a natural-gradient step of size γ on q(v), then L₃ and its
    /// gradient at the new q(v) — sharing chol(K_uu), K_uf and A = L⁻¹K_uf, which the two
    /// would otherwise each compute (θ and Z do not change in between).
    pub fn natgrad_then_bound(
        &mut self,
        x: DMatrixView<'_, f64>,
        y: DVectorView<'_, f64>,
        n_total: usize,
        gamma: f64,
    ) -> Result<BatchBound, GpError> {
        self.check_batch(x, y)?;
        check_total(n_total, x.nrows())?;
        let cross = self.whitened_cross(x)?;
        let gram = crate::linalg::aat(&cross.a);
        self.natgrad_from(&gram, &cross.a, y, n_total, gamma)?;
        self.bound_from(&cross, Some(&gram), x, y, n_total)
    }

    /// K_uu, its factor, K_uf and A = L⁻¹K_uf for a minibatch.
    pub(crate) fn whitened_cross(&self, x: DMatrixView<'_, f64>) -> Result<WhitenedCross, GpError> {
        // The factorisation runs on one core (faster than two at M ≤ 500, [`crate::linalg`]),
        // so the other evaluates K_uf meanwhile.
        let factor = || {
            let kuu = InducingFeatures::Points.kuu(self.kernel.as_ref(), &self.z);
            Cholesky::factor_of(&kuu, "K_uu", self.jitter).map(|chol| (kuu, chol))
        };
        let (factored, kuf) = rayon::join(factor, || self.kernel.k(self.z.as_view(), x));
        let (kuu, chol_uu) = factored?;
        let mut a = kuf.clone();
        chol_uu.solve_l_in_place(&mut a);
        Ok(WhitenedCross { kuu, chol_uu, kuf, a })
    }

    /// L₃ on the minibatch from its [`WhitenedCross`]; the gradient when `gram` = AAᵀ (full,
    /// symmetric) is given.
    fn bound_from(
        &self,
        cross: &WhitenedCross,
        gram: Option<&DMatrix<f64>>,
        x: DMatrixView<'_, f64>,
        y: DVectorView<'_, f64>,
        n_total: usize,
    ) -> Result<BatchBound, GpError> {
        let WhitenedCross { kuu, chol_uu, kuf, a } = cross;
        check_total(n_total, x.nrows())?;
        let (chol_q, mean) = self.q_factors()?;
        let (m, b) = (self.z.nrows(), x.nrows());
        let c = n_total as f64 / b as f64;
        let s2 = self.noise.variance;
        let kernel = self.kernel.as_ref();
        // B = L_Λ⁻¹ A: a_iᵀ S a_i = ‖b_i‖².
        let mut bq = a.clone();
        chol_q.solve_l_in_place(&mut bq);
        let kdiag = kernel.diag(x);
        let qdiag = col_sq_norms(a);
        let sdiag = col_sq_norms(&bq);
        let mu = a.tr_mul(&mean);
        let r = y - &mu;
        let var = &kdiag - &qdiag + &sdiag;
        let quad: f64 = r.iter().zip(var.iter()).map(|(ri, vi)| ri * ri + vi).sum();
        let expected_log_lik = c * (-0.5 * b as f64 * (LN_2PI + s2.ln()) - quad / (2.0 * s2));

        // KL = ½[tr Λ⁻¹ + mᵀm − M + log|Λ|].
        let trace_s = chol_q.trace_inverse();
        let kl = 0.5 * (trace_s + mean.norm_squared() - m as f64 + chol_q.logdet());
        let value = expected_log_lik - kl;
        let jitter = chol_uu.jitter();
        if !value.is_finite() {
            return Err(GpError::Diverged { what: "the SVGP bound", at: None, value });
        }
        let Some(gram) = gram else {
            return Ok(BatchBound { value, expected_log_lik, kl, grad: None, jitter });
        };

        // ∂/∂A = (c/σ²)(m rᵀ + A − S A), S A = L_Λ⁻ᵀ B.
        // In place: the product of (A − S A) and c/σ² in the storage of S A, entry for entry.
        let mut g_a = bq;
        chol_q.solve_lt_in_place(&mut g_a);
        g_a.zip_apply(a, |sa, a| *sa = (a - *sa) * (c / s2));
        g_a.ger(c / s2, &mean, &r, 1.0);
        let g_kdiag = nalgebra::DVector::from_element(b, -c / (2.0 * s2));
        let g_log_s2 = c * (-0.5 * b as f64 + quad / (2.0 * s2));

        // Through A = L⁻¹K_uf: Lᵀ L̄ = −(∂/∂A) Aᵀ = −(c/σ²)(m (A r)ᵀ + P − S P).
        let mut g_kuf = g_a;
        chol_uu.solve_lt_in_place(&mut g_kuf);
        let sp = chol_q.solve(gram);
        let ar = a * &r;
        let mut lt_lbar = (sp - gram) * (c / s2);
        lt_lbar.ger(-c / s2, &mean, &ar, 1.0);
        let mut g_uu = chol_uu.backward_from_product(lt_lbar);
        let shift = chol_uu.jitter_slope() * g_uu.trace() / m as f64;
        for i in 0..m {
            g_uu[(i, i)] += shift;
        }

        let feats = InducingFeatures::Points;
        let want_z = self.optimize_inducing;
        let gf = feats.vjp_kuf(kernel, &self.z, x, kuf.as_view(), g_kuf.as_view(), want_z);
        let gu = feats.vjp_kuu(kernel, &self.z, Some(kuu.as_view()), g_uu.as_view(), want_z);
        let gd = kernel.diag_vjp(x, g_kdiag.as_view());
        let mut grad: Vec<f64> = (0..kernel.n_params()).map(|p| gf.kernel[p] + gu.kernel[p] + gd[p]).collect();
        if self.noise.learn {
            grad.push(g_log_s2);
        }
        if want_z {
            let gz: DMatrix<f64> = gf.z.expect("asked for ∂/∂Z") + gu.z.expect("asked for ∂/∂Z");
            grad.extend_from_slice(gz.as_slice());
        }
        if let Some(i) = grad.iter().position(|g| !g.is_finite()) {
            return Err(GpError::Diverged { what: "the SVGP gradient", at: Some(Place::Parameter(i)), value: grad[i] });
        }
        Ok(BatchBound { value, expected_log_lik, kl, grad: Some(grad), jitter })
    }
}

/// What a minibatch shares between the natural-gradient step and the bound: K_uu (no jitter),
/// L = chol(K_uu + εI), K_uf and A = L⁻¹K_uf.
pub(crate) struct WhitenedCross {
    pub kuu: DMatrix<f64>,
    pub chol_uu: Cholesky,
    pub kuf: DMatrix<f64>,
    pub a: DMatrix<f64>,
}

/// A minibatch's data set has at least as many rows as the minibatch.
fn check_total(n_total: usize, batch: usize) -> Result<(), GpError> {
    if n_total < batch {
        return Err(GpError::TooMany {
            what: "minibatch rows",
            asked: batch,
            available: n_total,
            from: "rows in the data set",
        });
    }
    Ok(())
}
