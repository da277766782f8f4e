//! Minibatch stochastic gradient ascent with Adagrad (Duchi, Hazan & Singer 2011), the optimiser
//! Thomas 2017 used for the TVGP (§2.5.1.1) and the RNVGP (§3.3.1.1).
//!
//! θ ← θ + η g / (√(Σ g²) + ε), per coordinate; frozen coordinates do not move. Batches are
//! drawn without replacement from a seeded permutation of the rows (a new permutation per
//! epoch), so a fit is a deterministic function of its seed.

use crate::{GpError, Place};
use nalgebra::{DMatrix, DVector};
use rand::seq::SliceRandom;
use rand_chacha::ChaCha8Rng;

/// A model trained by minibatch stochastic gradients.
pub trait StochasticObjective {
    fn params(&self) -> Vec<f64>;
    fn set_params(&mut self, p: &[f64]) -> Result<(), GpError>;
    /// An unbiased estimate of the gradient of the full-data bound from the rows `rows` of
    /// (x, y) (and, for randomised numerics, the generator `rng`).
    fn stochastic_gradient(
        &self,
        x: &DMatrix<f64>,
        y: &DVector<f64>,
        rows: &[usize],
        rng: &mut ChaCha8Rng,
    ) -> Result<Vec<f64>, GpError>;
}

/// Settings of an Adagrad fit.
#[derive(Debug, Clone, PartialEq)]
pub struct AdagradOptions {
    pub steps: usize,
    /// Minibatch size b (clamped to the number of rows).
    pub batch: usize,
    /// Step size η.
    pub learning_rate: f64,
    /// ε in the denominator.
    pub epsilon: f64,
    /// Coordinates that stay at their starting values (same length as the parameters, or empty).
    pub frozen: Vec<bool>,
}

impl Default for AdagradOptions {
    fn default() -> Self {
        AdagradOptions { steps: 1000, batch: 10, learning_rate: 0.05, epsilon: 1e-8, frozen: Vec::new() }
    }
}

/// A minibatch must be non-empty and index rows of the data.
pub(crate) fn check_minibatch(rows: &[usize], n: usize) -> Result<(), GpError> {
    if rows.is_empty() {
        return Err(GpError::Empty { what: "rows in the minibatch" });
    }
    if let Some(&r) = rows.iter().find(|&&r| r >= n) {
        return Err(GpError::RowOutOfRange { context: "minibatch", row: r, rows: n });
    }
    Ok(())
}

/// A parameter vector must have the model's length and finite entries.
pub(crate) fn check_params(p: &[f64], n: usize, model: &'static str) -> Result<(), GpError> {
    if p.len() != n {
        return Err(GpError::shape(model, p.len(), "parameters given", n, "in the model"));
    }
    if let Some(i) = p.iter().position(|v| !v.is_finite()) {
        return Err(GpError::non_finite("parameter vector", Place::Entry(i), p[i]));
    }
    Ok(())
}

/// Run `opts.steps` Adagrad ascent steps; `on_step(step)` is called after each (progress bars).
pub fn adagrad<M: StochasticObjective>(
    model: &mut M,
    x: &DMatrix<f64>,
    y: &DVector<f64>,
    opts: &AdagradOptions,
    rng: &mut ChaCha8Rng,
    mut on_step: impl FnMut(usize),
) -> Result<(), GpError> {
    let n = x.nrows();
    if n != y.len() {
        return Err(GpError::shape("adagrad", y.len(), "targets", n, "input rows"));
    }
    if n == 0 {
        return Err(GpError::Empty { what: "training rows" });
    }
    if opts.batch == 0 {
        return Err(GpError::parameter("adagrad minibatch size", 0.0, "be at least 1"));
    }
    if !(opts.learning_rate > 0.0 && opts.learning_rate.is_finite()) {
        return Err(GpError::parameter("adagrad learning rate", opts.learning_rate, "be positive and finite"));
    }
    let mut theta = model.params();
    if !opts.frozen.is_empty() && opts.frozen.len() != theta.len() {
        return Err(GpError::shape("adagrad", opts.frozen.len(), "frozen flags", theta.len(), "parameters"));
    }
    let b = opts.batch.min(n);
    let mut acc = vec![0.0; theta.len()];
    let mut order: Vec<usize> = (0..n).collect();
    let mut pos = n;
    for step in 0..opts.steps {
        if pos + b > n {
            order.shuffle(rng);
            pos = 0;
        }
        let rows = &order[pos..pos + b];
        pos += b;
        let g = model.stochastic_gradient(x, y, rows, rng)?;
        if let Some(i) = g.iter().position(|v| !v.is_finite()) {
            let diverged =
                GpError::Diverged { what: "the stochastic gradient", at: Some(Place::Parameter(i)), value: g[i] };
            return Err(GpError::AtStep { step: step as u64 + 1, source: Box::new(diverged) });
        }
        for (i, gi) in g.iter().enumerate() {
            if opts.frozen.get(i).copied().unwrap_or(false) {
                continue;
            }
            acc[i] += gi * gi;
            theta[i] += opts.learning_rate * gi / (acc[i].sqrt() + opts.epsilon);
        }
        model.set_params(&theta)?;
        on_step(step);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;

    /// Maximise −½ Σ (θ_j − c_j)² from noisy-free gradients: Adagrad reaches c, frozen stays.
    struct Quadratic(Vec<f64>);
    impl StochasticObjective for Quadratic {
        fn params(&self) -> Vec<f64> {
            self.0.clone()
        }
        fn set_params(&mut self, p: &[f64]) -> Result<(), GpError> {
            self.0 = p.to_vec();
            Ok(())
        }
        fn stochastic_gradient(
            &self,
            _: &DMatrix<f64>,
            _: &DVector<f64>,
            _: &[usize],
            _: &mut ChaCha8Rng,
        ) -> Result<Vec<f64>, GpError> {
            Ok(self.0.iter().zip([1.0, -2.0, 3.0]).map(|(t, c)| c - t).collect())
        }
    }

    #[test]
    fn adagrad_converges_on_a_quadratic_and_respects_frozen_coordinates() {
        let mut m = Quadratic(vec![0.0; 3]);
        let (x, y) = (DMatrix::zeros(5, 1), DVector::zeros(5));
        let opts = AdagradOptions {
            steps: 3000,
            batch: 2,
            learning_rate: 0.5,
            frozen: vec![false, false, true],
            ..Default::default()
        };
        adagrad(&mut m, &x, &y, &opts, &mut ChaCha8Rng::seed_from_u64(0), |_| {}).unwrap();
        assert!((m.0[0] - 1.0).abs() < 1e-3 && (m.0[1] + 2.0).abs() < 1e-3, "{:?}", m.0);
        assert_eq!(m.0[2], 0.0);
        let bad = AdagradOptions { learning_rate: f64::NAN, ..Default::default() };
        assert!(adagrad(&mut m, &x, &y, &bad, &mut ChaCha8Rng::seed_from_u64(0), |_| {}).is_err());
    }
}
