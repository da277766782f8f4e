//! Seeded Gaussian sampling from GP priors and posteriors [Rasmussen & Williams 2006 §A.2].
//!
//! ```text
//! g = chol(K(X*, X*) + εI) ξ,   ξ ~ N(0, I)
//! ```
//!
//! The DP mechanism of the co-training layer draws its noise paths here. The jitter used is
//! returned with the samples, because it slightly changes the sampled covariance.

use crate::kernels::Kernel;
use crate::linalg::{Cholesky, JitterPolicy};
use crate::{GpError, Jitter, Prediction, Unsupported, validate_inputs};
use nalgebra::{DMatrix, DVector};
use rand::Rng;
use rand_distr::StandardNormal;

/// Samples (one per column) and the jitter that made the covariance factorisable.
#[derive(Debug, Clone, PartialEq)]
pub struct Samples {
    /// P×S: one sample path per column.
    pub paths: DMatrix<f64>,
    pub jitter: Jitter,
}

/// Draw `count` samples of N(mean, cov) using `rng`.
pub(crate) fn mvn<R: Rng + ?Sized>(
    mean: &DVector<f64>,
    cov: &DMatrix<f64>,
    count: usize,
    rng: &mut R,
) -> Result<Samples, GpError> {
    for (got, items) in [(cov.nrows(), "covariance rows"), (cov.ncols(), "covariance columns")] {
        if got != mean.len() {
            return Err(GpError::shape("sampling", got, items, mean.len(), "entries of the mean"));
        }
    }
    let chol = Cholesky::factor_of(cov, "sample covariance", JitterPolicy::IF_NEEDED)?;
    let p = mean.len();
    let xi = DMatrix::<f64>::from_fn(p, count, |_, _| rng.sample(StandardNormal));
    let mut paths = chol.l() * xi;
    for mut col in paths.column_iter_mut() {
        col += mean;
    }
    Ok(Samples { paths, jitter: chol.jitter() })
}

/// Prior sample paths f ~ GP(0, k) at the rows of `xs`.
pub fn prior<R: Rng + ?Sized>(
    kernel: &dyn Kernel,
    xs: &DMatrix<f64>,
    count: usize,
    rng: &mut R,
) -> Result<Samples, GpError> {
    validate_inputs(xs, kernel, "sample inputs")?;
    let k = kernel.k(xs.as_view(), xs.as_view());
    mvn(&DVector::zeros(xs.nrows()), &k, count, rng)
}

/// Posterior sample paths from a prediction that carries its full covariance.
pub fn posterior<R: Rng + ?Sized>(pred: &Prediction, count: usize, rng: &mut R) -> Result<Samples, GpError> {
    let cov = pred.cov.as_ref().ok_or(GpError::Unsupported(Unsupported::SamplingWithoutCovariance))?;
    mvn(&pred.mean, cov, count, rng)
}
