//! # dpcotrain-gp — the sparse-GP numerical core
//!
//! Kernels, exact GP regression, the collapsed sparse approximations (SGPR/VFE, DTC, FITC),
//! inducing-point selection, hyperparameter learning with analytic gradients, and sampling.
//! f64 throughout; Cholesky with a recorded jitter ladder; no knowledge of privacy or networks.
//!
//! Names follow the papers and GPflow: `Kuu`, `Kuf`, `L` = chol(Kuu), `A` = L⁻¹Kuf/σ,
//! `B` = I + AAᵀ, `LB` = chol(B). Equation references are to the papers (Rasmussen &
//! Williams 2006; Titsias 2009; Bauer, van der Wilk & Rasmussen 2016; Hughes-Hallett 2022).

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

pub use exact::ExactGp;
pub use features::{InducingFeatures, Multiscale};
pub use kernels::{Bounds, Kernel};
pub use linalg::{Cholesky, Jitter, JitterPolicy, JitterScale, KuuJitter, LinalgError};
pub use noise::{NoiseModel, NoiseVariance};
pub use prediction::Prediction;
pub use sparse::{ObjectiveTerms, SparseGp, SparseKind};
pub use svgp::Svgp;

/// Errors of the numerical core.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum GpError {
    #[error(transparent)]
    Linalg(#[from] LinalgError),
    /// A parameter outside its domain: `name` was `value`, and `bound` says what it must
    /// ("be positive and finite", "be in (0, 1]").
    #[error("invalid input: {name} must {bound}, got {value}")]
    Parameter { name: &'static str, value: f64, bound: &'static str },
    /// A number that must be finite was not (`what` says which and where).
    #[error("invalid input: {what}")]
    NonFinite { what: String },
    #[error("invalid input: {0}")]
    InvalidInput(String),
    #[error("optimisation failed: {0}")]
    Optimisation(String),
}

impl GpError {
    pub fn invalid(msg: impl Into<String>) -> Self {
        GpError::InvalidInput(msg.into())
    }

    /// [`GpError::Parameter`].
    pub fn parameter(name: &'static str, value: f64, bound: &'static str) -> Self {
        GpError::Parameter { name, value, bound }
    }

    /// [`GpError::NonFinite`].
    pub fn non_finite(what: impl Into<String>) -> Self {
        GpError::NonFinite { what: what.into() }
    }
}

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
        return Err(GpError::invalid(format!("X has {} rows but y has {} values", x.nrows(), y.len())));
    }
    if x.nrows() == 0 {
        return Err(GpError::invalid("no training rows"));
    }
    validate_inputs(x, kernel, "X")?;
    if let Some(i) = y.iter().position(|v| !v.is_finite()) {
        return Err(GpError::invalid(format!("target of row {i} is {}", y[i])));
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
        return Err(GpError::invalid(format!(
            "test inputs have {} columns, inducing inputs {}",
            xs.ncols(),
            z.ncols()
        )));
    }
    Ok(())
}

pub(crate) fn validate_inputs(x: &nalgebra::DMatrix<f64>, kernel: &dyn Kernel, what: &str) -> Result<(), GpError> {
    if let Some(d) = kernel.input_dim()
        && d != x.ncols()
    {
        return Err(GpError::invalid(format!(
            "{what} has {} columns but the kernel {} expects {d}",
            x.ncols(),
            kernel.name()
        )));
    }
    for j in 0..x.ncols() {
        for i in 0..x.nrows() {
            if !x[(i, j)].is_finite() {
                return Err(GpError::invalid(format!("{what} row {i}, column {j} is {}", x[(i, j)])));
            }
        }
    }
    Ok(())
}
