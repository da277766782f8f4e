//! Predictive distribution and optimal q(u) of a fitted sparse model
//! [Titsias 2009 eqs 6–7; Hughes-Hallett 2022 eqs 2.11a–c].
//!
//! ```text
//! T1 = L⁻¹ K_u*,  T2 = L_B⁻¹ T1
//! μ* = T2ᵀ c,  var* = diag K_** − colsum(T1²) + colsum(T2²)
//! Σ* = K_** − T1ᵀT1 + T2ᵀT2
//! q(u) = N(L L_B⁻ᵀ c,  L B⁻¹ Lᵀ)
//! ```
//!
//! The same formulas serve VFE, DTC (identical predictive) and FITC (with FITC's Λ in A).

use crate::features::InducingFeatures;
use crate::kernels::Kernel;
use crate::linalg::{Cholesky, col_sq_norms, gemm};
use crate::{GpError, Jitter, Prediction};
use nalgebra::{DMatrix, DVector};

#[derive(Debug, Clone)]
pub struct SparsePosterior {
    kernel: Box<dyn Kernel>,
    z: DMatrix<f64>,
    features: InducingFeatures,
    chol_uu: Cholesky,
    chol_b: Cholesky,
    c: DVector<f64>,
    objective: f64,
    trace_k_minus_q: f64,
}

impl SparsePosterior {
    pub(super) fn new(
        gp: &super::SparseGp,
        chol_uu: Cholesky,
        chol_b: Cholesky,
        c: DVector<f64>,
        objective: f64,
        trace_k_minus_q: f64,
    ) -> Self {
        SparsePosterior {
            kernel: gp.kernel.clone(),
            z: gp.z().clone(),
            features: gp.features().clone(),
            chol_uu,
            chol_b,
            c,
            objective,
            trace_k_minus_q,
        }
    }

    /// The training objective at which this posterior was formed.
    pub fn objective(&self) -> f64 {
        self.objective
    }

    /// tr(K_ff − Q_ff) on the training inputs.
    pub fn trace_k_minus_q(&self) -> f64 {
        self.trace_k_minus_q
    }

    pub fn jitter(&self) -> Jitter {
        self.chol_uu.jitter()
    }

    pub fn z(&self) -> &DMatrix<f64> {
        &self.z
    }

    /// The inducing features the posterior conditions on.
    pub fn features(&self) -> &InducingFeatures {
        &self.features
    }

    /// Latent predictive at `xs` (rows).
    pub fn predict(&self, xs: &DMatrix<f64>, full_cov: bool) -> Result<Prediction, GpError> {
        crate::validate_test_inputs(xs, &self.z, self.kernel.as_ref())?;
        let mut t1 = self.features.kuf(self.kernel.as_ref(), &self.z, xs.as_view());
        self.chol_uu.solve_l_in_place(&mut t1);
        let mut t2 = t1.clone();
        self.chol_b.solve_l_in_place(&mut t2);
        let mean = t2.tr_mul(&self.c);
        let var = self.kernel.diag(xs.as_view()) - col_sq_norms(&t1) + col_sq_norms(&t2);
        let cov = if full_cov {
            let mut c = self.kernel.k(xs.as_view(), xs.as_view());
            gemm(&mut c, -1.0, t1.as_view(), true, t1.as_view(), false, true);
            gemm(&mut c, 1.0, t2.as_view(), true, t2.as_view(), false, true);
            Some(c)
        } else {
            None
        };
        Ok(Prediction::new(mean, var, cov))
    }

    /// Optimal q(u) = N(m_u, S_u) (Titsias): m_u = L L_B⁻ᵀ c, S_u = L B⁻¹ Lᵀ.
    pub fn q_u(&self) -> (DVector<f64>, DMatrix<f64>) {
        let w = self.chol_b.solve_lt_vec(&self.c);
        let m_u = self.chol_uu.l() * w;
        // L B⁻¹ Lᵀ = (L_B⁻¹ Lᵀ)ᵀ (L_B⁻¹ Lᵀ)
        let mut t = self.chol_uu.l().transpose();
        self.chol_b.solve_l_in_place(&mut t);
        let s_u = t.tr_mul(&t);
        (m_u, s_u)
    }
}
