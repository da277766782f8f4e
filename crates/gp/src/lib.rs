//! # dpcotrain-gp — the sparse-GP numerical core
//!
//! Kernels, exact GP regression, the collapsed sparse approximations (SGPR/VFE, DTC, FITC),
//! inducing-point selection, hyperparameter learning with analytic gradients, and sampling.
//! f64 throughout; Cholesky with a recorded jitter ladder; no knowledge of privacy or networks.
//!
//! Names follow the papers and GPflow: `Kuu`, `Kuf`, `L` = chol(Kuu), `A` = L⁻¹Kuf/σ,
//! `B` = I + AAᵀ, `LB` = chol(B). Equation references are to the papers (Rasmussen &
//! Williams 2006; Titsias 2009; Bauer, van der Wilk & Rasmussen 2016; Hughes-Hallett 2022).

mod error;
pub mod exact;
pub mod features;
pub mod inducing;
pub mod influence;
pub mod kernels;
pub mod linalg;
pub mod noise;
pub mod optimize;
pub mod prediction;
pub mod sampling;
pub mod sparse;
pub mod standardize;
pub mod svgp;
pub mod train;
pub mod variational;

pub use error::{CheckpointMismatch, GpError, Place, SourceError, Unsupported};
pub use exact::ExactGp;
pub use features::{InducingFeatures, Multiscale};
pub use kernels::{Bounds, Kernel};
pub use linalg::{Cholesky, Jitter, JitterPolicy, JitterScale, KuuJitter, LinalgError};
pub use noise::{NoiseModel, NoiseVariance};
pub use prediction::Prediction;
pub use sparse::{ObjectiveTerms, SparseGp, SparseKind};
pub use svgp::Svgp;

/// One evaluation of a model's training objective (higher is better) and its gradient
/// with respect to the model's parameter vector.
#[derive(Debug, Clone, PartialEq)]
pub struct Evaluation {
    pub value: f64,
    pub grad: Vec<f64>,
    /// The jitter added to the matrix that needed it (K_uu for sparse models, K + Σ for exact).
    pub jitter: Jitter,
}

/// A model whose hyperparameters can be learned: a parameter vector on the optimisation
/// scale, its bounds, and an objective with analytic gradient.
pub trait Objective {
    fn params(&self) -> Vec<f64>;
    fn set_params(&mut self, p: &[f64]);
    fn bounds(&self) -> Vec<Bounds>;
    fn param_names(&self) -> Vec<String>;
    /// Objective (log marginal likelihood or its bound; higher is better) and gradient.
    fn evaluate(&self) -> Result<Evaluation, GpError>;
}

/// Check a design matrix and targets: same length, at least one row, all finite, and the
/// kernel's input dimension if it fixes one.
pub(crate) fn validate_data(
    x: &nalgebra::DMatrix<f64>,
    y: &nalgebra::DVector<f64>,
    kernel: &dyn Kernel,
) -> Result<(), GpError> {
    if x.nrows() != y.len() {
        return Err(GpError::shape("training data", y.len(), "targets", x.nrows(), "rows of X"));
    }
    if x.nrows() == 0 {
        return Err(GpError::Empty { what: "training rows" });
    }
    validate_inputs(x, kernel, "X")?;
    if let Some(i) = y.iter().position(|v| !v.is_finite()) {
        return Err(GpError::non_finite("target", Place::Row(i), y[i]));
    }
    Ok(())
}

/// [`validate_inputs`] for points to predict at, which must also have Z's columns.
pub(crate) fn validate_test_inputs(
    xs: &nalgebra::DMatrix<f64>,
    z: &nalgebra::DMatrix<f64>,
    kernel: &dyn Kernel,
) -> Result<(), GpError> {
    validate_inputs(xs, kernel, "test inputs")?;
    if xs.ncols() != z.ncols() {
        return Err(GpError::shape("test inputs", xs.ncols(), "columns", z.ncols(), "columns of Z"));
    }
    Ok(())
}

pub(crate) fn validate_inputs(
    x: &nalgebra::DMatrix<f64>,
    kernel: &dyn Kernel,
    what: &'static str,
) -> Result<(), GpError> {
    if let Some(d) = kernel.input_dim()
        && d != x.ncols()
    {
        return Err(GpError::shape(what, x.ncols(), "columns", d, "inputs of the kernel"));
    }
    for j in 0..x.ncols() {
        for i in 0..x.nrows() {
            if !x[(i, j)].is_finite() {
                return Err(GpError::non_finite(what, Place::Cell { row: i, column: j }, x[(i, j)]));
            }
        }
    }
    Ok(())
}
