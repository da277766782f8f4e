//! Randomised traces (Hutchinson 1990; Thomas 2017 §3.1.2, eqs 3.5–3.6): with a probe matrix
//! r (m × d) of independent zero-mean unit-variance entries, E[r rᵀ/d] = I, so
//! tr(M) = E[(1/d) tr(rᵀ M r)], which needs only products M r. With r = I and scale 1 the same
//! formulas give the exact trace — the deterministic mode the gradient tests use.

use nalgebra::{DMatrix, DVector};
use rand_chacha::ChaCha8Rng;
use rand_distr::{Distribution, StandardNormal};

/// Distribution of the probe entries.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum ProbeKind {
    /// ±1 with probability ½ each (the lowest-variance choice for real symmetric M).
    Rademacher,
    Gaussian,
}

/// Probe vectors (columns of `r`) and the factor that makes scale · r rᵀ an unbiased (or, for
/// the identity, exact) estimate of I.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Probes {
    pub r: DMatrix<f64>,
    pub scale: f64,
}

impl Probes {
    /// d random probes of dimension m.
    pub fn random(m: usize, d: usize, kind: ProbeKind, rng: &mut ChaCha8Rng) -> Self {
        let r = DMatrix::from_fn(m, d, |_, _| match kind {
            ProbeKind::Rademacher => {
                if rand::Rng::random::<bool>(rng) {
                    1.0
                } else {
                    -1.0
                }
            }
            ProbeKind::Gaussian => StandardNormal.sample(rng),
        });
        Probes { r, scale: 1.0 / d.max(1) as f64 }
    }

    /// The m unit vectors: traces and diagonals come out exact.
    pub fn exact(m: usize) -> Self {
        Probes { r: DMatrix::identity(m, m), scale: 1.0 }
    }

    /// scale · Σ_j r_jᵀ (M r_j), given the products M r (m × d) (the tests' unbiasedness check).
    #[cfg(test)]
    pub fn trace(&self, m_r: &DMatrix<f64>) -> f64 {
        self.scale * self.r.iter().zip(m_r.iter()).map(|(a, b)| a * b).sum::<f64>()
    }

    /// scale · Σ_j r_j ⊙ (M r_j): an unbiased estimate of diag(M) (Bekas et al. 2007).
    pub fn diagonal(&self, m_r: &DMatrix<f64>) -> DVector<f64> {
        DVector::from_fn(self.r.nrows(), |i, _| self.scale * self.r.row(i).dot(&m_r.row(i)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::linalg::{Cholesky, JitterPolicy};
    use rand::{Rng, SeedableRng};

    /// tr(A⁻¹ B) for an SPD A and a symmetric B, and the solves A⁻¹ (B r).
    fn problem() -> (Cholesky, DMatrix<f64>, f64) {
        let mut rng = ChaCha8Rng::seed_from_u64(5);
        let g = DMatrix::from_fn(12, 12, |_, _| rng.random_range(-1.0..1.0));
        let a = &g * g.transpose() + DMatrix::identity(12, 12);
        let h = DMatrix::from_fn(12, 12, |_, _| rng.random_range(-1.0..1.0));
        let b = &h + h.transpose();
        let ch = Cholesky::factor(a, "A", JitterPolicy::IF_NEEDED).unwrap();
        let exact = ch.solve(&b).trace();
        (ch, b, exact)
    }

    fn mean_se(n: u64, probes: impl Fn(&mut ChaCha8Rng) -> Probes) -> (f64, f64, f64) {
        let (ch, b, exact) = problem();
        let v: Vec<f64> = (0..n)
            .map(|s| {
                let p = probes(&mut ChaCha8Rng::seed_from_u64(s));
                p.trace(&ch.solve(&(&b * &p.r)))
            })
            .collect();
        let (mean, se) = super::super::test_support::mean_se(&v);
        (mean, se, exact)
    }

    #[test]
    fn hutchinson_is_unbiased_and_a_wrong_scale_is_caught() {
        let within = |(m, se, e): (f64, f64, f64)| se > 0.0 && (m - e).abs() <= 3.0 * se;
        for kind in [ProbeKind::Rademacher, ProbeKind::Gaussian] {
            let r = mean_se(3000, |rng| Probes::random(12, 3, kind, rng));
            assert!(within(r), "{kind:?}: mean {} ± {} vs exact {}", r.0, r.1, r.2);
        }
        // Uniform(−1, 1) probes have variance 1/3: without rescaling the estimate is biased.
        let biased = mean_se(3000, |rng| Probes {
            r: DMatrix::from_fn(12, 3, |_, _| rng.random_range(-1.0..1.0)),
            scale: 1.0 / 3.0,
        });
        assert!(!within(biased), "unit-variance violation should be caught: {biased:?}");
        // Exact probes give the trace and the diagonal exactly.
        let (ch, b, exact) = problem();
        let e = Probes::exact(12);
        let mr = ch.solve(&(&b * &e.r));
        assert!((e.trace(&mr) - exact).abs() < 1e-12 * exact.abs().max(1.0));
        assert!((e.diagonal(&mr) - ch.solve(&b).diagonal()).amax() < 1e-12);
    }
}
