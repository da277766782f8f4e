//! The exact likelihood of a finite release for the latent values at its points
//! (docs/honest-dp.md, "The release as k linear functionals").
//!
//! # Setting
//! A finite release at q points Q draws the k-vector w = W·clip(y) + σz, z ~ N(0, I_k), and
//! publishes õ = U w, where W (k × n) is label-free: W = Uᵀ C for the low-rank release
//! ([`crate::low_rank`], U the principal basis) and W = C, U = I for the full one (k = q).
//!
//! # The likelihood
//! Under the release model's GP prior f ~ GP(0, k) with noise variances S = diag s² (the
//! capped, conservative ones the release was planned with), f(X) given g = f(Q) is Gaussian with
//! mean K_XQ K_QQ⁻¹ g and covariance K_XX − K_XQ K_QQ⁻¹ K_QX (Rasmussen & Williams 2006,
//! eq. A.6). Since w is linear in y (clipping aside),
//!
//! ```text
//!   w | g  ~  N(L g, R),    L = W K_XQ K_QQ⁻¹            (k × q)
//!                          R = W (K_XX − K_XQ K_QQ⁻¹ K_QX + S) Wᵀ + σ² I_k   (k × k)
//! ```
//!
//! everything label-free. This is the whole of what the release says about g: k linear
//! functionals with correlated noise R. A reading point by point (mean and variance at each of
//! the q points, the prior divided out per point) keeps the right noise along each released
//! direction but also reads the q − k directions the release left out as "observed near the
//! prior mean", and ignores the correlation of the estimation error across points; this form
//! does neither. R ⪰ σ² I under DP and R ⪰ W S Wᵀ without, so R is positive definite.
//! Sending L, R and U adds only label-free, covariate-derived matrices to the answer (the
//! release already reports its latent covariance over Q, which is of the same kind).

use crate::PrivacyError;
use crate::finite::FiniteRelease;
use crate::low_rank::{released_mean_cov, symmetrise};
use dpcotrain_gp::kernels::Kernel;
use dpcotrain_gp::linalg::{Cholesky, JitterPolicy, matmul};
use nalgebra::DMatrix;
use serde::{Deserialize, Serialize};

/// What a finite release says about g = f(Q): w = Uᵀõ ~ N(L g, R).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ReleaseLikelihood {
    /// U (q × k), orthonormal columns: the drawn vector is w = Uᵀõ (the identity for the full
    /// release).
    pub basis: DMatrix<f64>,
    /// L = W K_XQ K_QQ⁻¹ (k × q).
    pub map: DMatrix<f64>,
    /// R (k × k), positive definite.
    pub noise: DMatrix<f64>,
}

impl ReleaseLikelihood {
    /// Check the shapes (q points, k ≤ q functionals) and that every entry is finite: what a
    /// querier calls on a peer's matrices before reading them.
    pub fn validate(&self, q: usize) -> Result<(), PrivacyError> {
        let k = self.basis.ncols();
        let shapes =
            self.basis.nrows() == q && k >= 1 && k <= q && self.map.shape() == (k, q) && self.noise.shape() == (k, k);
        if !shapes {
            return Err(PrivacyError::Shapes {
                context: "release likelihood",
                what: "basis, map and noise",
                shapes: vec![self.basis.shape(), self.map.shape(), self.noise.shape()],
                points: q,
            });
        }
        let finite = |m: &DMatrix<f64>| m.iter().all(|v| v.is_finite());
        if !(finite(&self.basis) && finite(&self.map) && finite(&self.noise)) {
            return Err(PrivacyError::non_finite("release likelihood: a non-finite entry"));
        }
        Ok(())
    }
}

impl FiniteRelease {
    /// The exact likelihood of this release for f at its points `xq` (see the module): `kernel`
    /// and `x` are the release model's, as given to [`crate::finite::plan`]. O(k n² + n q²)
    /// flops, K_XX formed in column blocks.
    pub fn likelihood(
        &self,
        kernel: &dyn Kernel,
        x: &DMatrix<f64>,
        xq: &DMatrix<f64>,
    ) -> Result<ReleaseLikelihood, PrivacyError> {
        let q = self.hat.c.nrows();
        if xq.nrows() != q || x.nrows() != self.hat.c.ncols() || xq.ncols() != x.ncols() {
            return Err(PrivacyError::Shapes {
                context: "release likelihood",
                what: "release points, private rows and the release's hat matrix",
                shapes: vec![xq.shape(), x.shape(), self.hat.c.shape()],
                points: q,
            });
        }
        let (basis, w) = match &self.low_rank {
            Some(lr) => (lr.u.clone(), lr.coords.clone()),
            None => (DMatrix::identity(q, q), self.hat.c.clone()),
        };
        let kxq = kernel.k(x.as_view(), xq.as_view()); // n × q
        let b = matmul(w.as_view(), false, kxq.as_view(), false); // W K_XQ, k × q
        let kqq = Cholesky::factor_of(&self.hat.prior, "K_QQ", JitterPolicy::IF_NEEDED)?;
        let map = kqq.solve(&b.transpose()).transpose(); // B K_QQ⁻¹ (K_QQ symmetric)
        let mut noise = released_mean_cov(kernel, x, &self.hat.noise, &w) - &b * map.transpose();
        for i in 0..noise.nrows() {
            noise[(i, i)] += self.sigma * self.sigma;
        }
        symmetrise(&mut noise);
        let lik = ReleaseLikelihood { basis, map, noise };
        lik.validate(q)?;
        Ok(lik)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::finite::{CapRule, HatModel, plan};
    use crate::low_rank::RankRule;
    use crate::sensitivity::LabelRange;
    use dpcotrain_gp::kernels::SquaredExponential;
    use nalgebra::DVector;

    fn setup() -> (SquaredExponential, DMatrix<f64>, DMatrix<f64>, DVector<f64>) {
        let x = DMatrix::from_fn(12, 1, |i, _| -2.0 + 0.3 * i as f64);
        let xq = DMatrix::from_fn(5, 1, |i, _| -1.0 + 0.7 * i as f64);
        let s2 = DVector::from_element(12, 0.1);
        (SquaredExponential::isotropic(1.0, 0.8), x, xq, s2)
    }

    /// L and R against the joint Gaussian of (f(X), f(Q), ε, z) formed by hand: the moments of
    /// w = W(f(X) + ε) + σz and g = f(Q) give L = Cov(w, g) Cov(g)⁻¹ and
    /// R = Cov(w) − L Cov(g, w), computed here from the (n + q)-point prior directly.
    #[test]
    fn likelihood_matches_the_joint_gaussian_by_hand() {
        let (k, x, xq, s2) = setup();
        let range = LabelRange::new(-3.0, 3.0).unwrap();
        for rank in [RankRule::Full, RankRule::Fixed { k: 2 }] {
            let rel = plan(&k, &x, &s2, &xq, HatModel::Exact, range, 1.0, &CapRule::None, &rank).unwrap();
            let lik = rel.likelihood(&k, &x, &xq).unwrap();
            let w = match &rel.low_rank {
                Some(lr) => lr.coords.clone(),
                None => rel.hat.c.clone(),
            };
            let kxx = k.k(x.as_view(), x.as_view());
            let kxq = k.k(x.as_view(), xq.as_view());
            let kqq = k.k(xq.as_view(), xq.as_view());
            let cov_w = &w * (kxx + DMatrix::from_diagonal(&s2)) * w.transpose()
                + DMatrix::identity(w.nrows(), w.nrows()) * rel.sigma.powi(2);
            let cov_wg = &w * &kxq;
            let l = &cov_wg * kqq.clone().try_inverse().unwrap();
            let r = &cov_w - &l * cov_wg.transpose();
            assert!((&lik.map - &l).abs().max() < 1e-7 * (1.0 + l.abs().max()), "{rank:?}: L");
            assert!((&lik.noise - &r).abs().max() < 1e-8 * (1.0 + r.abs().max()), "{rank:?}: R");
            // R ⪰ σ² I: positive definite under DP.
            let ev = lik.noise.clone().symmetric_eigenvalues();
            assert!(ev.min() >= rel.sigma.powi(2) * (1.0 - 1e-9), "{rank:?}: {ev}");
            // w = Uᵀ õ recovers the drawn vector: õ lies in span(U).
            let y = DVector::from_fn(12, |i, _| (0.5 * i as f64).sin());
            let z = DVector::from_fn(5, |i, _| 0.1 * i as f64 - 0.2);
            let released = rel.release(&y, Some(range), &z).unwrap();
            let back = &lik.basis * (lik.basis.transpose() * &released);
            assert!((back - &released).abs().max() < 1e-12);
        }
    }

    /// Many draws of (f, ε, z) from the prior: the empirical regression of w on g has slope L
    /// and residual covariance R (an independent, sampling check of the closed form).
    #[test]
    fn likelihood_agrees_with_sampled_releases() {
        use rand::SeedableRng;
        use rand_distr::{Distribution, StandardNormal};
        let (k, x, xq, s2) = setup();
        // Labels of sd ≈ 1 clip at ±6 about once in 10⁸ draws; μ = 20 keeps σ near the signal's size.
        let range = LabelRange::new(-6.0, 6.0).unwrap();
        let rel =
            plan(&k, &x, &s2, &xq, HatModel::Exact, range, 20.0, &CapRule::None, &RankRule::Fixed { k: 2 }).unwrap();
        let lik = rel.likelihood(&k, &x, &xq).unwrap();
        let n = 12;
        let mut all = DMatrix::zeros(n + 5, 1);
        all.rows_mut(0, n).copy_from(&x);
        all.rows_mut(n, 5).copy_from(&xq);
        let kall = k.k(all.as_view(), all.as_view()) + DMatrix::identity(n + 5, n + 5) * 1e-10;
        let chol = kall.cholesky().unwrap();
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(7);
        let draws = 40_000;
        let (mut gg, mut wg, mut ww) =
            (DMatrix::<f64>::zeros(5, 5), DMatrix::<f64>::zeros(2, 5), DMatrix::<f64>::zeros(2, 2));
        for _ in 0..draws {
            let e = DVector::from_fn(n + 5, |_, _| -> f64 { StandardNormal.sample(&mut rng) });
            let f = chol.l() * e;
            let y = DVector::from_fn(n, |i, _| {
                f[i] + s2[i].sqrt() * {
                    let v: f64 = StandardNormal.sample(&mut rng);
                    v
                }
            });
            let z = DVector::from_fn(5, |_, _| -> f64 { StandardNormal.sample(&mut rng) });
            let w = lik.basis.transpose() * rel.release(&y, Some(range), &z).unwrap();
            let g = f.rows(n, 5).clone_owned();
            gg += &g * g.transpose();
            wg += &w * g.transpose();
            ww += &w * w.transpose();
        }
        // The moments the closed form implies: Cov(w, g) = L K_QQ and Cov(w) = L K_QQ Lᵀ + R
        // (a regression of w on the strongly correlated g would be too noisy to compare).
        let kqq = k.k(xq.as_view(), xq.as_view());
        let cov_wg = &lik.map * &kqq;
        let cov_w = &cov_wg * lik.map.transpose() + &lik.noise;
        let (wg, ww) = (wg / draws as f64, ww / draws as f64);
        assert!((&wg - &cov_wg).abs().max() < 0.03 * cov_wg.abs().max(), "Cov(w, g): {wg} vs {cov_wg}");
        assert!((&ww - &cov_w).abs().max() < 0.03 * cov_w.abs().max(), "Cov(w): {ww} vs {cov_w}");
        let gg = gg / draws as f64;
        assert!((&gg - &kqq).abs().max() < 0.03, "Cov(g): {gg} vs {kqq}");
    }

    #[test]
    fn malformed_matrices_are_refused() {
        let (k, x, xq, s2) = setup();
        let range = LabelRange::new(-3.0, 3.0).unwrap();
        let rel =
            plan(&k, &x, &s2, &xq, HatModel::Exact, range, 1.0, &CapRule::None, &RankRule::Fixed { k: 2 }).unwrap();
        let lik = rel.likelihood(&k, &x, &xq).unwrap();
        assert!(lik.validate(5).is_ok());
        assert!(lik.validate(4).unwrap_err().to_string().contains("do not fit 4 points"));
        let mut bad = lik.clone();
        bad.noise[(0, 1)] = f64::NAN;
        assert!(bad.validate(5).unwrap_err().to_string().contains("non-finite"));
        assert!(rel.likelihood(&k, &x, &xq.rows(0, 4).clone_owned()).is_err());
    }
}
