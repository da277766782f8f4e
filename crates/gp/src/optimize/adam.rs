//! Adam (Kingma & Ba 2015, Algorithm 1) for stochastic objectives, with projection onto box
//! bounds after each step. Used for the hyperparameters and inducing inputs of SVGP, whose
//! minibatch gradients are too noisy for the quasi-Newton method of [`super::minimize`].

use crate::kernels::Bounds;
use serde::{Deserialize, Serialize};

/// Adam's settings (Kingma & Ba 2015 defaults except the step size, GPflow's 0.01).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct AdamOptions {
    /// Step size α.
    pub learning_rate: f64,
    pub beta1: f64,
    pub beta2: f64,
    pub epsilon: f64,
}

impl Default for AdamOptions {
    fn default() -> Self {
        AdamOptions { learning_rate: 0.01, beta1: 0.9, beta2: 0.999, epsilon: 1e-8 }
    }
}

/// Adam's moment estimates and step count: everything a resumed run needs to continue with
/// the same numbers.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Adam {
    pub options: AdamOptions,
    /// First-moment estimate m_t.
    pub m: Vec<f64>,
    /// Second-moment estimate v_t.
    pub v: Vec<f64>,
    /// Steps taken, t.
    pub t: u64,
}

impl Adam {
    pub fn new(n: usize, options: AdamOptions) -> Self {
        Adam { options, m: vec![0.0; n], v: vec![0.0; n], t: 0 }
    }

    /// One **ascent** step on `x` along the gradient `g` of an objective to maximise, then
    /// clamp each coordinate into its bounds. Non-finite gradient entries are refused (the
    /// caller reports the step as failed) rather than written into the moments.
    pub fn ascend(&mut self, x: &mut [f64], g: &[f64], bounds: &[Bounds]) -> Result<(), usize> {
        assert_eq!(x.len(), self.m.len(), "Adam: parameter length changed");
        assert_eq!(g.len(), x.len(), "Adam: gradient length");
        if let Some(i) = g.iter().position(|v| !v.is_finite()) {
            return Err(i);
        }
        self.t += 1;
        let AdamOptions { learning_rate, beta1, beta2, epsilon } = self.options;
        let (c1, c2) = (1.0 - beta1.powf(self.t as f64), 1.0 - beta2.powf(self.t as f64));
        for i in 0..x.len() {
            self.m[i] = beta1 * self.m[i] + (1.0 - beta1) * g[i];
            self.v[i] = beta2 * self.v[i] + (1.0 - beta2) * g[i] * g[i];
            let (mh, vh) = (self.m[i] / c1, self.v[i] / c2);
            x[i] = bounds[i].clamp(x[i] + learning_rate * mh / (vh.sqrt() + epsilon));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Adam climbs a concave quadratic to its maximum and respects bounds.
    #[test]
    fn adam_finds_the_maximum_of_a_quadratic_and_keeps_bounds() {
        let target = [1.5, -2.0, 0.3];
        let bounds = vec![Bounds::new(-10.0, 10.0), Bounds::new(-1.0, 10.0), Bounds::new(-10.0, 10.0)];
        let mut x = vec![0.0; 3];
        let mut adam = Adam::new(3, AdamOptions { learning_rate: 0.05, ..Default::default() });
        for _ in 0..3000 {
            let g: Vec<f64> = x.iter().zip(target).map(|(xi, ti)| -(xi - ti)).collect();
            adam.ascend(&mut x, &g, &bounds).unwrap();
        }
        assert!((x[0] - 1.5).abs() < 1e-3, "{x:?}");
        assert_eq!(x[1], -1.0, "bound respected");
        assert!((x[2] - 0.3).abs() < 1e-3);
        assert_eq!(adam.ascend(&mut x, &[0.0, f64::NAN, 0.0], &bounds), Err(1));
    }
}
