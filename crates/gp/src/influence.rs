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
use crate::{GpError, Unsupported, validate_inputs};
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
    /// Multiscale features lie in the RKHS with Gram matrix K̃_uu (Walder et al. 2008 eq 12), so
    /// the same formula holds with their K̃_uu and K̃_uf.
    pub fn label_influence_rkhs(&self) -> Result<DVector<f64>, GpError> {
        let (x, z, features) = (self.x(), self.z(), self.features());
        let kuu = features.kuu(self.kernel.as_ref(), z);
        let chol_uu = Cholesky::factor(kuu, "K_uu", self.jitter)?;
        let lambda =
            self.noise.diagonal(x.nrows()).ok_or(GpError::Unsupported(Unsupported::InfluenceWithoutDiagonalNoise))?;
        if self.kind == crate::SparseKind::Fitc {
            return Err(GpError::Unsupported(Unsupported::InfluenceOfFitc));
        }
        let mut u = features.kuf(self.kernel.as_ref(), z, x.as_view());
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

#[cfg(test)]
mod tests {
    use crate::features::{InducingFeatures, Multiscale};
    use crate::kernels::SquaredExponential;
    use crate::linalg::Cholesky;
    use crate::{NoiseModel, SparseGp, SparseKind};
    use nalgebra::{DMatrix, DVector};

    /// Brute force: move one label by 1, refit q(u), and take the RKHS norm of the change in
    /// the mean function f = Σ α_i φ_i (α = K_uu⁻¹ m_u, ‖f‖² = αᵀ K_uu α), for ordinary and
    /// multiscale features.
    #[test]
    fn vfe_influence_equals_the_rkhs_norm_of_a_unit_label_change() {
        let x = DMatrix::from_fn(25, 2, |i, j| ((i * 7 + j * 11) % 13) as f64 * 0.3 - 1.8);
        let y = DVector::from_fn(25, |i, _| (x[(i, 0)] * 1.3).sin() + 0.4 * x[(i, 1)]);
        let z = DMatrix::from_fn(6, 2, |i, j| i as f64 * 0.6 - 1.5 + 0.1 * j as f64);
        let k = SquaredExponential::ard(1.2, vec![0.8, 1.1]);
        let a = DMatrix::from_fn(6, 2, |i, j| 0.8 + 0.3 * ((i + j) % 4) as f64);
        for features in [InducingFeatures::Points, InducingFeatures::Multiscale(Multiscale::from_relative(&a).unwrap())]
        {
            let model = |y: DVector<f64>| {
                let mut gp = SparseGp::new(
                    SparseKind::Vfe,
                    Box::new(k.clone()),
                    NoiseModel::homoscedastic(0.2),
                    x.clone(),
                    y,
                    z.clone(),
                )
                .unwrap();
                gp.set_features(features.clone()).unwrap();
                gp
            };
            let gp = model(y.clone());
            let inf = gp.label_influence_rkhs().unwrap();
            let kuu = features.kuu(&k, &z);
            let chol = Cholesky::factor(kuu, "K_uu", gp.jitter).unwrap();
            let kj = chol.l() * chol.l().transpose();
            let alpha = |gp: &SparseGp| chol.solve_vec(&gp.posterior().unwrap().q_u().0);
            let a0 = alpha(&gp);
            for j in [0, 7, 24] {
                let mut y2 = y.clone();
                y2[j] += 1.0;
                let d = alpha(&model(y2)) - &a0;
                let norm = d.dot(&(&kj * &d)).sqrt();
                assert!((norm - inf[j]).abs() < 1e-8 * norm, "{features:?} row {j}: {norm} vs {}", inf[j]);
            }
        }
    }
}
