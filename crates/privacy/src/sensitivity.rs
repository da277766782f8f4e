//! Sensitivity of a released GP posterior mean to one changed private label, with labels
//! clipped to a declared range of width d (Hall, Rinaldo & Wasserman 2013):
//!
//! - Δ_H = d·max_{j private} √[C K C]_jj — valid for releasing the mean function anywhere (Hall
//!   et al. 2013, RKHS mechanism with GP-prior noise of the same kernel), and its VFE analogue
//!   for parties whose local model is sparse: [`from_influence`] of the model's RKHS influence
//!   norms (what the release path uses, for every combiner's augmented model; the tests check
//!   it against independent refits through the exact and VFE forms, `rkhs_exact`, `rkhs_vfe`);
//! - [`mahalanobis_exact`]: Δ_M = d·max_j √(c_jᵀ M⁻¹ c_j) for a known finite release set with
//!   noise covariance M = K_** + τI (Δ_M ≤ Δ_H).
//!
//! Rows of the responder's training set that are pseudo-observations from peers are not private
//! to the responder: only `private_rows` enter the maximum. A relative safety margin of 1e-6
//! covers floating-point error in the solve.

use crate::PrivacyError;
use dpcotrain_gp::ExactGp;
#[cfg(test)]
use dpcotrain_gp::SparseGp;
use nalgebra::{DMatrix, DVector};
use serde::{Deserialize, Serialize};

/// Relative inflation applied to every computed sensitivity.
pub(crate) const SAFETY_MARGIN: f64 = 1e-6;

/// Public clipping range for labels; its width d bounds a label change.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct LabelRange {
    pub lo: f64,
    pub hi: f64,
}

impl LabelRange {
    pub fn new(lo: f64, hi: f64) -> Result<Self, PrivacyError> {
        if !(lo.is_finite() && hi.is_finite() && hi > lo) {
            return Err(PrivacyError::Interval { name: "label range", lo, hi });
        }
        Ok(LabelRange { lo, hi })
    }
    pub fn width(&self) -> f64 {
        self.hi - self.lo
    }
    /// Clip labels into the range (what the responder must do before fitting).
    pub fn clip(&self, y: &DVector<f64>) -> DVector<f64> {
        y.map(|v| v.clamp(self.lo, self.hi))
    }
}

/// A computed sensitivity and the private row that attains it.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Sensitivity {
    pub value: f64,
    pub worst_row: usize,
}

/// Δ = d·max over `private_rows` of the per-label influence norms (with the safety margin).
pub fn from_influence(
    influence: &DVector<f64>,
    private_rows: &[usize],
    range: LabelRange,
) -> Result<Sensitivity, PrivacyError> {
    if private_rows.is_empty() {
        return Err(PrivacyError::empty("sensitivity (nothing to protect)", "private rows"));
    }
    let mut best = Sensitivity { value: f64::NEG_INFINITY, worst_row: private_rows[0] };
    for &j in private_rows {
        let v = *influence
            .get(j)
            .ok_or_else(|| PrivacyError::out_of_range("sensitivity", "private row", j, influence.len()))?;
        if !v.is_finite() {
            return Err(PrivacyError::Entry {
                context: "sensitivity",
                name: "influence",
                item: "row",
                index: j,
                value: v,
                bound: "be finite",
            });
        }
        if v > best.value {
            best = Sensitivity { value: v, worst_row: j };
        }
    }
    best.value *= range.width() * (1.0 + SAFETY_MARGIN);
    Ok(best)
}

/// Δ_H for an exact-GP responder.
#[cfg(test)]
fn rkhs_exact(gp: &ExactGp, private_rows: &[usize], range: LabelRange) -> Result<Sensitivity, PrivacyError> {
    from_influence(&gp.label_influence_rkhs()?, private_rows, range)
}

/// Δ_M for an exact-GP responder releasing at the rows of `xs` with noise covariance
/// K_** + τI.
pub fn mahalanobis_exact(
    gp: &ExactGp,
    private_rows: &[usize],
    range: LabelRange,
    xs: &DMatrix<f64>,
    tau: f64,
) -> Result<Sensitivity, PrivacyError> {
    from_influence(&gp.label_influence_mahalanobis(xs, tau)?, private_rows, range)
}

/// Δ_H for a VFE (or DTC) responder.
#[cfg(test)]
fn rkhs_vfe(gp: &SparseGp, private_rows: &[usize], range: LabelRange) -> Result<Sensitivity, PrivacyError> {
    from_influence(&gp.label_influence_rkhs()?, private_rows, range)
}

#[cfg(test)]
mod tests {
    use super::*;
    use dpcotrain_gp::kernels::{Kernel, SquaredExponential};
    use dpcotrain_gp::{NoiseModel, NoiseVariance, SparseKind};

    fn se() -> Box<dyn Kernel> {
        Box::new(SquaredExponential::isotropic(1.0, 1.0))
    }

    #[test]
    fn notes_test_vector() {
        // A hand-worked case: X = [0, .5, 1, 3], s² = 0.1, d = 1, X* = [.25, 2, 5].
        let x = DMatrix::from_column_slice(4, 1, &[0.0, 0.5, 1.0, 3.0]);
        let y = DVector::from_vec(vec![0.3, -0.2, 0.8, 0.1]);
        let gp = ExactGp::new(se(), NoiseModel::homoscedastic(0.1), x, y).unwrap();
        let inf = gp.label_influence_rkhs().unwrap();
        for (a, b) in inf.iter().zip([1.083245, 0.967447, 1.083030, 0.914935]) {
            assert!((a - b).abs() < 2e-6, "{a} vs {b}");
        }
        let r = LabelRange::new(0.0, 1.0).unwrap();
        let s = rkhs_exact(&gp, &[0, 1, 2, 3], r).unwrap();
        assert!((s.value - 1.083245).abs() < 3e-6 && s.worst_row == 0);
        let xs = DMatrix::from_column_slice(3, 1, &[0.25, 2.0, 5.0]);
        let m = gp.label_influence_mahalanobis(&xs, 1e-9).unwrap();
        for (a, b) in m.iter().zip([0.551347, 0.530557, 0.742797, 0.499701]) {
            assert!((a - b).abs() < 2e-6, "{a} vs {b}");
        }
        let sm = mahalanobis_exact(&gp, &[0, 1, 2, 3], r, &xs, 1e-9).unwrap();
        assert!((sm.value - 0.742797).abs() < 3e-6 && sm.worst_row == 2);
        // Only private rows count: excluding row 0 (a pseudo-observation) changes the max.
        let s2 = rkhs_exact(&gp, &[1, 2, 3], r).unwrap();
        assert_eq!(s2.worst_row, 2);
        assert!(rkhs_exact(&gp, &[], r).is_err());
        assert!(rkhs_exact(&gp, &[7], r).is_err());
    }

    /// ‖f_{y+e_j} − f_y‖_H from two independent fits: Δα = α' − α, norm² = Δαᵀ K Δα.
    #[test]
    fn rkhs_sensitivity_equals_brute_force_refits() {
        let x = DMatrix::from_fn(12, 2, |i, j| ((i * 5 + j * 3) % 7) as f64 * 0.4 - 1.0);
        let y = DVector::from_fn(12, |i, _| (i as f64 * 0.7).sin());
        let extra = DVector::from_fn(12, |i, _| if i >= 9 { 0.3 } else { 0.0 }); // 3 pseudo-rows
        let noise = NoiseModel::PerPoint { sigma2: NoiseVariance::new(0.05), extra };
        let k = SquaredExponential::ard(1.2, vec![0.8, 1.1]);
        let gp = ExactGp::new(Box::new(k.clone()), noise.clone(), x.clone(), y.clone()).unwrap();
        let kk = k.k(x.as_view(), x.as_view());
        let a0 = gp.posterior().unwrap().alpha().clone();
        let inf = gp.label_influence_rkhs().unwrap();
        for j in 0..12 {
            let mut y2 = y.clone();
            y2[j] += 1.0;
            let gp2 = ExactGp::new(Box::new(k.clone()), noise.clone(), x.clone(), y2).unwrap();
            let da = gp2.posterior().unwrap().alpha() - &a0;
            let brute = da.dot(&(&kk * &da)).sqrt();
            assert!((brute - inf[j]).abs() < 1e-8 * (1.0 + brute), "row {j}: {brute} vs {}", inf[j]);
        }
        // Δ_M ≤ Δ_H (finite release set, any τ ≥ 0).
        let xs = DMatrix::from_fn(5, 2, |i, j| i as f64 * 0.3 - 0.5 + j as f64 * 0.1);
        let m = gp.label_influence_mahalanobis(&xs, 1e-8).unwrap();
        for j in 0..12 {
            assert!(m[j] <= inf[j] * (1.0 + 1e-9), "row {j}: {} > {}", m[j], inf[j]);
        }
    }

    #[test]
    fn vfe_sensitivity_equals_brute_force_refits_and_matches_exact_at_z_equal_x() {
        let x = DMatrix::from_fn(40, 1, |i, _| i as f64 * 0.1 - 2.0);
        let y = DVector::from_fn(40, |i, _| (i as f64 * 0.3).sin());
        let z = DMatrix::from_column_slice(6, 1, &[-1.8, -1.0, -0.3, 0.4, 1.1, 1.8]);
        let k = SquaredExponential::isotropic(1.0, 0.6);
        let mk = |y: DVector<f64>| {
            SparseGp::new(SparseKind::Vfe, Box::new(k.clone()), NoiseModel::homoscedastic(0.1), x.clone(), y, z.clone())
                .unwrap()
        };
        let gp = mk(y.clone());
        let inf = gp.label_influence_rkhs().unwrap();
        let (m0, _) = gp.posterior().unwrap().q_u();
        let kuu = k.k(z.as_view(), z.as_view());
        let eps = gp.posterior().unwrap().jitter().absolute;
        let kuu_j = &kuu + DMatrix::identity(6, 6) * eps;
        let ch = kuu_j.clone().cholesky().unwrap();
        for j in [0usize, 7, 20, 39] {
            let mut y2 = y.clone();
            y2[j] += 1.0;
            let (m1, _) = mk(y2).posterior().unwrap().q_u();
            // f = k(·,Z)β with m_u = (K_uu+εI)β at the jittered model ⇒ β = (K_uu+εI)⁻¹ m_u.
            let db = ch.solve(&(&m1 - &m0));
            let brute = db.dot(&(&kuu_j * &db)).sqrt();
            assert!((brute - inf[j]).abs() < 1e-7 * (1.0 + brute), "row {j}: {brute} vs {}", inf[j]);
        }
        let r = LabelRange::new(-3.0, 3.0).unwrap();
        let s = rkhs_vfe(&gp, &(0..40).collect::<Vec<_>>(), r).unwrap();
        assert!((s.value - 6.0 * inf.max()).abs() < 1e-5 * s.value);
        // Bounded by d/σ: a label's influence on the posterior mean has RKHS norm ≤ 1/σ.
        assert!(s.value <= 6.0 / 0.1f64.sqrt());
    }
}
