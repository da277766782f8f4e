//! Scalable variational GPs of Thomas 2017 (thesis, chapters 2 and 3).
//!
//! - [`kronecker_vgp`]: inducing points on a full grid with Kronecker-structured K_uu and
//!   covariance and a Kronecker- or Tucker-structured variational mean (ch. 2; the TVGP),
//!   built on [`kron`] (the `kron_mvprod` of Algorithm 1) and [`mean_tensor`].
//! - [`rnvgp`]: the randomised-numerics VGP (ch. 3) with the O(m)-parameter covariance
//!   q(u) = N(K_uu μ, (K_uu⁻¹ + Σ⁻¹)⁻¹), whose gradients use unbiased randomised-truncation
//!   conjugate gradients ([`cg`]) and Hutchinson trace estimates ([`hutchinson`]).
//! - [`adagrad`]: the minibatch Adagrad loop both were trained with.
//!
//! Design notes (what differs from the thesis and why) are in docs/results.md, section
//! "Thomas 2017 ch. 2–3".

pub mod adagrad;
pub mod cg;
pub mod hutchinson;
pub mod kron;
pub mod kronecker_vgp;
pub mod mean_tensor;
pub mod rnvgp;

pub use adagrad::{AdagradOptions, StochasticObjective, adagrad};
pub use kronecker_vgp::KroneckerVgp;
pub use mean_tensor::MeanStructure;

/// Helpers shared by this module's tests.
#[cfg(test)]
pub(crate) mod test_support {
    use super::StochasticObjective;

    /// Assert that `grad` matches central finite differences (h = 1e-5) of `value` at the model's
    /// parameters, coordinate by coordinate (relative tolerance 1e-5).
    pub fn assert_fd_gradient<M: StochasticObjective + Clone>(
        m: &M,
        grad: &[f64],
        value: impl Fn(&M) -> f64,
        what: &str,
    ) {
        let p0 = m.params();
        assert_eq!(p0.len(), grad.len(), "{what}: gradient length");
        let h = 1e-5;
        for j in 0..p0.len() {
            let f = |d: f64| {
                let mut mm = m.clone();
                let mut p = p0.clone();
                p[j] += d;
                mm.set_params(&p).unwrap();
                value(&mm)
            };
            let fd = (f(h) - f(-h)) / (2.0 * h);
            let tol = 1e-5 * (1.0 + fd.abs().max(grad[j].abs()));
            assert!((fd - grad[j]).abs() < tol, "{what} parameter {j}: analytic {} vs FD {fd}", grad[j]);
        }
    }

    /// Sample mean and standard error of the mean.
    pub fn mean_se(v: &[f64]) -> (f64, f64) {
        let n = v.len() as f64;
        let mean = v.iter().sum::<f64>() / n;
        let sd = (v.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / (n - 1.0)).sqrt();
        (mean, sd / n.sqrt())
    }
}
