//! Test metrics of a party's model on its own view of the test entities (D14).

use nalgebra::DVector;
use serde::Serialize;

#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Metrics {
    pub rmse: f64,
    /// Negative log predictive density of y (latent variance + noise), mean over test points.
    pub nlpd: f64,
}

pub fn metrics(mean: &DVector<f64>, var_latent: &DVector<f64>, noise: f64, y: &DVector<f64>) -> Metrics {
    let n = y.len() as f64;
    let rmse = ((mean - y).norm_squared() / n).sqrt();
    let nlpd = (0..y.len())
        .map(|i| {
            let v = (var_latent[i] + noise).max(1e-300);
            0.5 * ((2.0 * std::f64::consts::PI * v).ln() + (y[i] - mean[i]).powi(2) / v)
        })
        .sum::<f64>()
        / n;
    Metrics { rmse, nlpd }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rmse_and_nlpd() {
        let y = DVector::from_vec(vec![1.0, -1.0]);
        let m = DVector::from_vec(vec![0.0, 0.0]);
        let v = DVector::from_vec(vec![0.5, 0.5]);
        let r = metrics(&m, &v, 0.5, &y);
        assert!((r.rmse - 1.0).abs() < 1e-15);
        let expect = 0.5 * ((2.0 * std::f64::consts::PI).ln() + 1.0);
        assert!((r.nlpd - expect).abs() < 1e-12);
    }
}
