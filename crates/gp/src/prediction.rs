//! Predictive distributions returned by every model.

use nalgebra::{DMatrix, DVector};

/// Predictive distribution of the latent f at test points: mean, marginal variance and,
/// on request, the full covariance. Observation-space (y) variances add the noise.
#[derive(Debug, Clone, PartialEq)]
pub struct Prediction {
    pub mean: DVector<f64>,
    /// Latent marginal variances, clamped at 0 (see `clamped`).
    pub var: DVector<f64>,
    /// Latent full covariance, when requested.
    pub cov: Option<DMatrix<f64>>,
    /// Number of marginal variances that came out negative (round-off) and were clamped to 0.
    pub clamped: usize,
}

impl Prediction {
    /// Build from a mean and raw (possibly slightly negative) variances.
    pub fn new(mean: DVector<f64>, raw_var: DVector<f64>, cov: Option<DMatrix<f64>>) -> Self {
        let clamped = raw_var.iter().filter(|v| **v < 0.0).count();
        let var = raw_var.map(|v| v.max(0.0));
        Prediction { mean, var, cov, clamped }
    }

    /// Marginal variances of y* = f* + e with homoscedastic test noise σ².
    pub fn var_y(&self, noise: f64) -> DVector<f64> {
        self.var.add_scalar(noise)
    }
}
