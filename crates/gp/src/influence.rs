//! How much one training label moves the posterior mean: the norms behind label-DP
//! sensitivity (Hall, Rinaldo & Wasserman 2013). Pure GP algebra; the privacy crate turns
//! them into Δ = d·max over the private rows.
//!
//! Exact GP: f_y(·) = k(·,X) C y with C = (K + Σ)⁻¹, so ∂f/∂y_j = k(·,X) C e_j and
//!
//! ```text
//! ‖∂f/∂y_j‖²_H = [C K C]_jj                      (RKHS norm; Hall et al. 2013)
//! ‖∂f(X*)/∂y_j‖²_{M⁻¹} = c_jᵀ M⁻¹ c_j,  c_j = K_*X C e_j,  M = K_** + τI   (finite set)
//! ```
//!
//! VFE: f_y(·) = k(·,Z) β with β = Σ K_uf Λ⁻¹ y, Σ = (K_uu + K_uf Λ⁻¹ K_fu)⁻¹, so
//! ∂β/∂y_j = Σ k_j/λ_j and ‖∂f/∂y_j‖²_H = (Σk_j)ᵀ K_uu (Σk_j)/λ_j²; computed with the jittered
//! K_uu + εI, which can only over-estimate the norm (a safe direction for DP).

use crate::exact::ExactGp;
use crate::linalg::{Cholesky, JitterPolicy, matmul};
use crate::sparse::SparseGp;
use crate::{GpError, validate_inputs};
use nalgebra::{DMatrix, DVector};

impl ExactGp {
    /// C = (K + Σ + εI)⁻¹ and K for the training rows.
    fn c_and_k(&self) -> Result<(DMatrix<f64>, DMatrix<f64>), GpError> {
        let k = self.kernel.k(self.x().as_view(), self.x().as_view());
        let mut ky = k.clone();
        self.noise.add_to(&mut ky);
        let chol = Cholesky::factor(ky, "K_ff + noise", JitterPolicy::IF_NEEDED)?;
        Ok((chol.inverse(), k))
    }

    /// √[C K C]_jj for every training row j: the RKHS norm of the change in the posterior
    /// mean per unit change of label j.
    pub fn label_influence_rkhs(&self) -> Result<DVector<f64>, GpError> {
        let (c, k) = self.c_and_k()?;
        let ck = matmul(c.as_view(), false, k.as_view(), false);
        let n = c.nrows();
        Ok(DVector::from_fn(n, |j, _| {
            let v: f64 = (0..n).map(|i| ck[(j, i)] * c[(i, j)]).sum();
            v.max(0.0).sqrt()
        }))
    }

    /// √(c_jᵀ M⁻¹ c_j) for every training row j, for a release at the rows of `xs` with noise
    /// covariance M = K_** + τI (τ ≥ 0 the jitter the sampler used).
    pub fn label_influence_mahalanobis(&self, xs: &DMatrix<f64>, tau: f64) -> Result<DVector<f64>, GpError> {
        validate_inputs(xs, self.kernel.as_ref(), "release points")?;
        let (c, _) = self.c_and_k()?;
        let mut m = self.kernel.k(xs.as_view(), xs.as_view());
        for i in 0..m.nrows() {
            m[(i, i)] += tau;
        }
        let chol_m = Cholesky::factor(m, "K_** + τI", JitterPolicy::IF_NEEDED)?;
        let ksx = self.kernel.k(xs.as_view(), self.x().as_view());
        let mut w = matmul(ksx.as_view(), false, c.as_view(), false); // c_j as columns
        chol_m.solve_l_in_place(&mut w);
        Ok(DVector::from_iterator(w.ncols(), w.column_iter().map(|col| col.norm())))
    }
}

impl SparseGp {
    /// RKHS norm of the change in the VFE/DTC posterior mean per unit change of each label.
    pub fn label_influence_rkhs(&self) -> Result<DVector<f64>, GpError> {
        let (x, z) = (self.x(), self.z());
        let kuu = self.kernel.k(z.as_view(), z.as_view());
        let chol_uu = Cholesky::factor(kuu, "K_uu", self.jitter)?;
        let lambda =
            self.noise.diagonal(x.nrows()).ok_or_else(|| GpError::invalid("label influence needs diagonal noise"))?;
        if self.kind == crate::SparseKind::Fitc {
            return Err(GpError::invalid(
                "label influence is implemented for VFE/DTC posteriors; FITC's effective noise depends on the inputs differently",
            ));
        }
        let mut u = self.kernel.k(z.as_view(), x.as_view());
        chol_uu.solve_l_in_place(&mut u); // L⁻¹ K_uf
        let mut a = u.clone();
        for (j, mut col) in a.column_iter_mut().enumerate() {
            col /= lambda[j].sqrt();
        }
        let m = z.nrows();
        let b = crate::linalg::aat(&a) + DMatrix::<f64>::identity(m, m);
        let chol_b = Cholesky::factor(b, "B = I + AAᵀ", JitterPolicy::IF_NEEDED)?;
        // Σ k_j = L⁻ᵀ B⁻¹ L⁻¹ k_j; norm² with K_uu + εI = L Lᵀ: ‖Lᵀ Σ k_j‖² = ‖B⁻¹ u_j‖².
        let mut t = u;
        chol_b.solve_l_in_place(&mut t);
        chol_b.solve_lt_in_place(&mut t);
        Ok(DVector::from_fn(x.nrows(), |j, _| t.column(j).norm() / lambda[j]))
    }
}
