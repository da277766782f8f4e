//! Test metrics of a party's model on its own view of the test entities (D14).

use nalgebra::DVector;
use serde::Serialize;

#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Metrics {
    pub rmse: f64,
    /// Negative log predictive density of y (latent variance + noise), mean over test points.
    pub nlpd: f64,
}

/// Root mean squared error of `mean` against `y`.
pub fn rmse(mean: &DVector<f64>, y: &DVector<f64>) -> f64 {
    ((mean - y).norm_squared() / y.len() as f64).sqrt()
}

/// The public mean of y on the scale every party's labels are expressed in: the federation's
/// agreed standardisation y_std = (y − y_mean)/y_scale (docs/decisions.md D18) has mean 0.
pub const PUBLIC_MEAN: f64 = 0.0;

/// Test RMSE of the constant prediction `public_mean`: the predict-the-mean baseline, what a
/// party gets from no label at all. A model worse than this has learned nothing usable.
pub fn mean_baseline_rmse(y: &DVector<f64>, public_mean: f64) -> f64 {
    if y.is_empty() {
        return f64::NAN;
    }
    (y.iter().map(|v| (v - public_mean).powi(2)).sum::<f64>() / y.len() as f64).sqrt()
}

pub fn metrics(mean: &DVector<f64>, var_latent: &DVector<f64>, noise: f64, y: &DVector<f64>) -> Metrics {
    let n = y.len() as f64;
    let rmse = rmse(mean, y);
    let nlpd = (0..y.len())
        .map(|i| {
            let v = (var_latent[i] + noise).max(1e-300);
            0.5 * ((2.0 * std::f64::consts::PI * v).ln() + (y[i] - mean[i]).powi(2) / v)
        })
        .sum::<f64>()
        / n;
    Metrics { rmse, nlpd }
}

/// Standard error of RMSE(b) − RMSE(a) over the same test points, from the per-point squared
/// errors `a` and `b` (paired; delta method): with g_i = b_i/(2·RMSE_b) − a_i/(2·RMSE_a), the
/// difference's SE is sd(g)/√T. `None` with fewer than two points or a zero RMSE.
pub fn rmse_change_se(a: &[f64], b: &[f64]) -> Option<f64> {
    let t = a.len();
    if t < 2 || b.len() != t {
        return None;
    }
    let rmse = |e: &[f64]| (e.iter().sum::<f64>() / t as f64).sqrt();
    let (ra, rb) = (rmse(a), rmse(b));
    if !(ra > 0.0 && rb > 0.0) {
        return None;
    }
    let g: Vec<f64> = a.iter().zip(b).map(|(x, y)| y / (2.0 * rb) - x / (2.0 * ra)).collect();
    let mean = g.iter().sum::<f64>() / t as f64;
    let var = g.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / (t - 1) as f64;
    Some((var / t as f64).sqrt())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The delta-method SE matches the spread of the RMSE change over resampled test sets.
    #[test]
    fn rmse_change_se_matches_the_bootstrap() {
        use rand::{Rng, SeedableRng};
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(7);
        let t = 400;
        // Correlated errors: the co-trained model errs where the private one does, a bit less.
        let ea: Vec<f64> = (0..t).map(|_| rng.random_range(-1.0..1.0)).collect();
        let eb: Vec<f64> = ea.iter().map(|e| 0.9 * e + 0.1 * rng.random_range(-1.0..1.0)).collect();
        let (a, b): (Vec<f64>, Vec<f64>) = (ea.iter().map(|e| e * e).collect(), eb.iter().map(|e| e * e).collect());
        let se = rmse_change_se(&a, &b).unwrap();
        let rmse = |e: &[f64]| (e.iter().sum::<f64>() / e.len() as f64).sqrt();
        let diffs: Vec<f64> = (0..2000)
            .map(|_| {
                let idx: Vec<usize> = (0..t).map(|_| rng.random_range(0..t)).collect();
                let ra: Vec<f64> = idx.iter().map(|&i| a[i]).collect();
                let rb: Vec<f64> = idx.iter().map(|&i| b[i]).collect();
                rmse(&rb) - rmse(&ra)
            })
            .collect();
        let m = diffs.iter().sum::<f64>() / diffs.len() as f64;
        let boot = (diffs.iter().map(|d| (d - m).powi(2)).sum::<f64>() / (diffs.len() - 1) as f64).sqrt();
        assert!((se / boot - 1.0).abs() < 0.1, "delta {se} vs bootstrap {boot}");
        // Paired: far tighter than treating the two RMSEs as independent.
        let unpaired = ((rmse(&a).powi(2) + rmse(&b).powi(2)) / (2.0 * t as f64)).sqrt();
        assert!(se < 0.5 * unpaired, "{se} vs {unpaired}");
        assert_eq!(rmse_change_se(&a[..1], &b[..1]), None);
    }

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
