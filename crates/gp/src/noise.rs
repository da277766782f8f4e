//! Observation-noise models: y = f + e, e ~ N(0, Σ_noise).
//!
//! - [`NoiseModel::Homoscedastic`]: Σ = σ²I.
//! - [`NoiseModel::PerPoint`]: Σ = diag(σ² + v_n) with known extra variances v_n ≥ 0
//!   (the co-training "marginal" pseudo-observations, docs/decisions.md D12/D13).
//! - [`NoiseModel::Block`]: Σ = σ²I + V on a subset of rows, V a dense PSD block (the "full"
//!   uncertainty mode, docs/decisions.md D21). Exact GP only.
//!
//! σ² is the only learnable noise parameter; it is optimised as log σ² when `learn` is set.

use crate::kernels::Bounds;
use crate::{GpError, Place};
use nalgebra::{DMatrix, DVector};

/// The learnable part shared by every noise model: σ² with bounds (log scale).
#[derive(Debug, Clone, PartialEq)]
pub struct NoiseVariance {
    pub variance: f64,
    pub bounds: Bounds,
    /// Whether σ² is a trainable hyperparameter.
    pub learn: bool,
}

impl NoiseVariance {
    pub fn new(variance: f64) -> Self {
        Self { variance, bounds: Bounds::new((1e-6f64).ln(), (1e3f64).ln()), learn: true }
    }
    pub fn fixed(variance: f64) -> Self {
        Self { learn: false, ..Self::new(variance) }
    }
}

#[derive(Debug, Clone, PartialEq)]
pub enum NoiseModel {
    Homoscedastic(NoiseVariance),
    PerPoint { sigma2: NoiseVariance, extra: DVector<f64> },
    Block { sigma2: NoiseVariance, rows: Vec<usize>, block: DMatrix<f64> },
}

impl NoiseModel {
    pub fn homoscedastic(variance: f64) -> Self {
        NoiseModel::Homoscedastic(NoiseVariance::new(variance))
    }

    pub fn sigma2(&self) -> &NoiseVariance {
        match self {
            NoiseModel::Homoscedastic(s) => s,
            NoiseModel::PerPoint { sigma2, .. } | NoiseModel::Block { sigma2, .. } => sigma2,
        }
    }

    pub fn sigma2_mut(&mut self) -> &mut NoiseVariance {
        match self {
            NoiseModel::Homoscedastic(s) => s,
            NoiseModel::PerPoint { sigma2, .. } | NoiseModel::Block { sigma2, .. } => sigma2,
        }
    }

    /// Check the model against N training rows: σ² > 0 and finite, extras finite and ≥ 0,
    /// block rows distinct and in range, block square, symmetric and finite.
    pub fn validate(&self, n: usize) -> Result<(), GpError> {
        let s = self.sigma2().variance;
        if !(s.is_finite() && s > 0.0) {
            return Err(GpError::parameter("noise variance", s, "be a positive finite number"));
        }
        match self {
            NoiseModel::Homoscedastic(_) => Ok(()),
            NoiseModel::PerPoint { extra, .. } => {
                if extra.len() != n {
                    return Err(GpError::shape("per-point noise", extra.len(), "variances", n, "training rows"));
                }
                if let Some((i, v)) = extra.iter().enumerate().find(|(_, v)| !(v.is_finite() && **v >= 0.0)) {
                    let (what, bound) = ("per-point noise variance", "be finite and ≥ 0");
                    return Err(GpError::OutOfDomain { what, at: Place::Row(i), value: *v, bound });
                }
                Ok(())
            }
            NoiseModel::Block { rows, block, .. } => {
                for (got, items) in [(block.nrows(), "rows"), (block.ncols(), "columns")] {
                    if got != rows.len() {
                        return Err(GpError::shape("noise block", got, items, rows.len(), "listed rows"));
                    }
                }
                let mut seen = vec![false; n];
                for &r in rows {
                    if r >= n {
                        return Err(GpError::RowOutOfRange { context: "noise block", row: r, rows: n });
                    }
                    if std::mem::replace(&mut seen[r], true) {
                        return Err(GpError::DuplicateRow { context: "noise block", row: r });
                    }
                }
                for i in 0..block.nrows() {
                    for j in 0..block.ncols() {
                        let (a, b) = (block[(i, j)], block[(j, i)]);
                        if !a.is_finite() {
                            return Err(GpError::non_finite("noise block", Place::Cell { row: i, column: j }, a));
                        }
                        if (a - b).abs() > 1e-10 * (a.abs() + b.abs()).max(1e-300) {
                            let gap = (a - b).abs();
                            return Err(GpError::NotSymmetric { what: "noise block", row: i, column: j, gap });
                        }
                    }
                }
                Ok(())
            }
        }
    }

    /// Diagonal noise λ_n = σ² + v_n for the diagonal models; `None` for the dense block.
    pub fn diagonal(&self, n: usize) -> Option<DVector<f64>> {
        match self {
            NoiseModel::Homoscedastic(s) => Some(DVector::from_element(n, s.variance)),
            NoiseModel::PerPoint { sigma2, extra } => Some(extra.map(|v| v + sigma2.variance)),
            NoiseModel::Block { .. } => None,
        }
    }

    /// Add Σ_noise to `k` in place (N×N).
    pub fn add_to(&self, k: &mut DMatrix<f64>) {
        let n = k.nrows();
        let s = self.sigma2().variance;
        for i in 0..n {
            k[(i, i)] += s;
        }
        match self {
            NoiseModel::Homoscedastic(_) => {}
            NoiseModel::PerPoint { extra, .. } => {
                for i in 0..n {
                    k[(i, i)] += extra[i];
                }
            }
            NoiseModel::Block { rows, block, .. } => {
                for (a, &ra) in rows.iter().enumerate() {
                    for (b, &rb) in rows.iter().enumerate() {
                        k[(ra, rb)] += block[(a, b)];
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod error_tests {
    use super::*;

    /// A bad σ² is a typed error naming the parameter, its value and its bound, and reads as
    /// the one line a user sees.
    #[test]
    fn a_bad_noise_variance_is_a_typed_error() {
        let e = NoiseModel::Homoscedastic(NoiseVariance { variance: -0.5, ..NoiseVariance::new(1.0) })
            .validate(3)
            .unwrap_err();
        assert_eq!(e, GpError::Parameter { name: "noise variance", value: -0.5, bound: "be a positive finite number" });
        assert_eq!(e.to_string(), "invalid input: noise variance must be a positive finite number, got -0.5");
    }
}
