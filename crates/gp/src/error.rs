//! The numerical core's errors, typed: each variant carries the numbers it is about (a
//! parameter and its bound, two sizes that disagree, the place of a non-finite value, the step
//! a fit failed at), so that a caller matches on fields rather than reading a message. The
//! messages name the same things as before; some are worded anew.

use crate::linalg::LinalgError;
use crate::optimize::OptimError;
use crate::svgp::SourcePosition;
use std::fmt;
use std::path::PathBuf;
use std::sync::Arc;

/// Errors of the numerical core. Callers match on the variants and their fields; the messages
/// are for people.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum GpError {
    /// A factorisation failed (the matrix, its size and the jitter tried are in the
    /// [`LinalgError`]).
    #[error(transparent)]
    Linalg(#[from] LinalgError),
    /// A parameter outside its domain: `name` was `value`, and `bound` says what it must
    /// ("be positive and finite", "be in (0, 1]", "be at least 1").
    #[error("invalid input: {name} must {bound}, got {value}")]
    Parameter { name: &'static str, value: f64, bound: &'static str },
    /// Sizes that disagree: in `context`, `got` `items` for `expected` `per` (e.g. "training
    /// data: 4 targets for 5 rows of X").
    #[error("invalid input: {context}: {got} {items} for {expected} {per}")]
    Shape { context: &'static str, got: usize, items: &'static str, expected: usize, per: &'static str },
    /// Nothing to work on: no `what` (training rows, inducing points, rows in a minibatch).
    #[error("invalid input: no {what}")]
    Empty { what: &'static str },
    /// More `what` asked for than there are: `asked` from `available` `from` (inducing points
    /// from training rows, a minibatch from a data set).
    #[error("invalid input: cannot select {asked} {what} from {available} {from}")]
    TooMany { what: &'static str, asked: usize, available: usize, from: &'static str },
    /// A number that must be finite was not: `what` at `at` is `value`.
    #[error("invalid input: {what} {at} is {value}")]
    NonFinite { what: &'static str, at: Place, value: f64 },
    /// An entry of an array outside its domain: `what` at `at` is `value`, and `bound` says
    /// what it must ("be finite and ≥ 0").
    #[error("invalid input: {what} {at} is {value}; it must {bound}")]
    OutOfDomain { what: &'static str, at: Place, value: f64, bound: &'static str },
    /// A row index past the end: in `context`, row `row` of `rows`.
    #[error("invalid input: {context}: row {row} out of range ({rows} rows)")]
    RowOutOfRange { context: &'static str, row: usize, rows: usize },
    /// A row listed twice where each may appear once (`context` says where).
    #[error("invalid input: {context}: row {row} listed twice")]
    DuplicateRow { context: &'static str, row: usize },
    /// A matrix that must be symmetric is not: `what` differs from its transpose by `gap` at
    /// (`row`, `column`), the largest difference.
    #[error("invalid input: {what} is not symmetric at ({row},{column}): it differs from its transpose by {gap:e}")]
    NotSymmetric { what: &'static str, row: usize, column: usize, gap: f64 },
    /// A fit's starting parameter outside its bounds (it would be clamped without a word):
    /// `name` starts at `value`, outside [`lower`, `upper`].
    #[error(
        "invalid input: {name} starts at {value:.4e}, outside its bounds [{lower:.4e}, {upper:.4e}] (log scale for \
         kernel and noise parameters); standardise the data or start inside the bounds"
    )]
    OutsideBounds { name: String, value: f64, lower: f64, upper: f64 },
    /// A combination of model, noise and request the core does not implement; see
    /// [`Unsupported`].
    #[error("invalid input: {0}")]
    Unsupported(Unsupported),
    /// A checkpoint (or a q(u)) that does not fit the model or the fit asked for; see
    /// [`CheckpointMismatch`].
    #[error("invalid input: {0}")]
    Checkpoint(CheckpointMismatch),
    /// A position a source cannot resume at (past the epoch's `rows`, or a streaming source's
    /// chunk in a source held in memory).
    #[error(
        "invalid input: cannot resume at row {} (chunk {}, +{}) of an epoch of {rows} rows",
        .position.row, .position.chunk, .position.in_chunk
    )]
    CannotResume { position: SourcePosition, rows: usize },
    /// An error of the layer that supplied the data (a streamed CSV file's reader, say), kept
    /// whole: [`SourceError::downcast_ref`] recovers its own type.
    #[error("invalid input: {0}")]
    Source(#[source] SourceError),
    /// A checkpoint that could not be serialised or written to `path`.
    #[error("writing checkpoint {}: {source}", .path.display())]
    CheckpointWrite { path: PathBuf, source: SourceError },
    /// The objective or its gradient became non-finite: `what` is `value` (`at`: the
    /// parameter whose gradient entry it is; none for the objective itself).
    #[error("optimisation failed: {what}{} is {value}", optional(.at))]
    Diverged { what: &'static str, at: Option<Place>, value: f64 },
    /// Truncated CG ran `max_iter` iterations without reaching relative residual `tolerance`
    /// (it stopped at `residual`).
    #[error(
        "optimisation failed: CG did not reach relative residual {tolerance:.1e} within {max_iter} iterations (at {residual:.2e})"
    )]
    CgNotConverged { tolerance: f64, max_iter: usize, residual: f64 },
    /// CG met a direction of curvature pᵀAp = `curvature` ≤ 0 at `iteration`: its `size`×`size`
    /// matrix A is not positive definite.
    #[error(
        "optimisation failed: CG: pᵀAp = {curvature} at iteration {iteration}: A ({size}×{size}) is not positive definite"
    )]
    CgNotPositiveDefinite { curvature: f64, iteration: usize, size: usize },
    /// The L-BFGS driver refused its arguments (lengths or bounds; a caller's bug).
    #[error("optimisation failed: {0}")]
    Optimiser(#[from] OptimError),
    /// The model's objective failed at the starting point of a run (the model's own error).
    #[error("optimisation failed: objective failed at the starting point: {0}")]
    StartFailed(Box<GpError>),
    /// The optimiser refused the starting point itself (a NaN coordinate, a value it reads as
    /// not finite); `reason` is its text, since its termination carries no more than that.
    #[error("optimisation failed: objective failed at the starting point: {reason}")]
    StartRejected { reason: String },
    /// Every run of a multi-start fit failed before it was recorded.
    #[error("optimisation failed: no run succeeded")]
    NoRunSucceeded,
    /// A failure of step `step` (1-based) of a stochastic fit; `source` says what.
    #[error("step {step}: {source}")]
    AtStep { step: u64, source: Box<GpError> },
}

impl GpError {
    /// [`GpError::Parameter`].
    pub fn parameter(name: &'static str, value: f64, bound: &'static str) -> Self {
        GpError::Parameter { name, value, bound }
    }

    /// [`GpError::Shape`].
    pub fn shape(context: &'static str, got: usize, items: &'static str, expected: usize, per: &'static str) -> Self {
        GpError::Shape { context, got, items, expected, per }
    }

    /// [`GpError::NonFinite`].
    pub fn non_finite(what: &'static str, at: Place, value: f64) -> Self {
        GpError::NonFinite { what, at, value }
    }

    /// [`GpError::Source`]: any error of the layer that supplied the data.
    pub fn from_source(e: impl std::error::Error + Send + Sync + 'static) -> Self {
        GpError::Source(SourceError::new(e))
    }

    /// The error itself, or for [`GpError::AtStep`] the error of that step.
    pub fn innermost(&self) -> &GpError {
        match self {
            GpError::AtStep { source, .. } => source.innermost(),
            other => other,
        }
    }
}

/// Where in an array a value sits. Displayed as it reads after the array's name: "of row 3",
/// "row 3, column 1", "entry 4", "of parameter 2".
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Place {
    /// A row of a matrix or an entry of a per-row vector (targets, noise variances).
    Row(usize),
    /// An entry of a matrix.
    Cell { row: usize, column: usize },
    /// An entry of a vector that is not per row (a checkpoint's values, q(u)'s h).
    Entry(usize),
    /// An index into a model's parameter vector (or its gradient).
    Parameter(usize),
}

impl Place {
    /// The (row, column) of entry `k` of an `nrows`-row column-major matrix.
    pub fn column_major(k: usize, nrows: usize) -> Self {
        Place::Cell { row: k % nrows.max(1), column: k / nrows.max(1) }
    }
}

impl fmt::Display for Place {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Place::Row(i) => write!(f, "of row {i}"),
            Place::Cell { row, column } => write!(f, "row {row}, column {column}"),
            Place::Entry(i) => write!(f, "entry {i}"),
            Place::Parameter(i) => write!(f, "of parameter {i}"),
        }
    }
}

/// " of parameter 3", or nothing.
fn optional(at: &Option<Place>) -> String {
    at.map(|p| format!(" {p}")).unwrap_or_default()
}

/// Combinations the core does not implement.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Unsupported {
    /// The dense-block noise model with a sparse model (the exact GP only).
    #[error(
        "the dense-block noise model is supported by the exact GP only; use per-point variances with sparse models"
    )]
    BlockNoiseInSparseModel,
    /// Label influence with noise that is not diagonal.
    #[error("label influence needs diagonal noise")]
    InfluenceWithoutDiagonalNoise,
    /// Label influence of a FITC posterior.
    #[error(
        "label influence is implemented for VFE/DTC posteriors; FITC's effective noise depends on the inputs differently"
    )]
    InfluenceOfFitc,
    /// Multiscale inducing features with a kernel other than the squared exponential (`kernel`
    /// is its name).
    #[error("multiscale inducing features are defined for the squared-exponential kernel (se or se-ard), not {kernel}")]
    MultiscaleKernel { kernel: String },
    /// Posterior sampling from a prediction without its full covariance.
    #[error("posterior sampling needs a prediction with full covariance")]
    SamplingWithoutCovariance,
}

/// Why an SVGP checkpoint (or a q(u) set on a model) was refused.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum CheckpointMismatch {
    /// Written for a model with other parameters (`checkpoint`'s names, not the `model`'s).
    #[error("the checkpoint is of a model with parameters [{}], not [{}]", summary(.checkpoint), summary(.model))]
    Model { checkpoint: Vec<String>, model: Vec<String> },
    /// Its parameters and Adam moments do not all have the model's `model` entries.
    #[error("the checkpoint has {params} parameters and Adam moments of {adam_m} and {adam_v}, the model {model}")]
    Lengths { params: usize, adam_m: usize, adam_v: usize, model: usize },
    /// At step `step`, past the `steps` the fit asks for (it would report a fit never run).
    #[error("the checkpoint is at step {step}, past the {steps} steps asked for: ask for at least {step} steps")]
    PastSteps { step: u64, steps: u64 },
    /// q(u)'s precision is not even ⪰ ½I, which every natural-gradient step keeps it above.
    #[error("q(u)'s precision is not ⪰ I (every natural-gradient step keeps it so): it was not written by a fit")]
    PrecisionNotFromFit,
}

/// At most six names, else the first four and the count.
fn summary(names: &[String]) -> String {
    if names.len() <= 6 { names.join(", ") } else { format!("{}, … ({} in all)", names[..4].join(", "), names.len()) }
}

/// An error of another layer carried in a [`GpError`], shared so that `GpError` stays
/// `Clone`. Displayed as the error itself; two are equal only if they are the same error (the
/// same allocation), since an arbitrary error has no equality.
#[derive(Clone)]
pub struct SourceError(Arc<dyn std::error::Error + Send + Sync>);

impl SourceError {
    /// Share `e`.
    pub fn new(e: impl std::error::Error + Send + Sync + 'static) -> Self {
        SourceError(Arc::new(e))
    }

    /// The error as its own type, if it is a `T`.
    pub fn downcast_ref<T: std::error::Error + 'static>(&self) -> Option<&T> {
        self.0.downcast_ref::<T>()
    }
}

impl PartialEq for SourceError {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }
}

impl fmt::Debug for SourceError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&*self.0, f)
    }
}

impl fmt::Display for SourceError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&*self.0, f)
    }
}

/// Transparent: the wrapped error's own source.
impl std::error::Error for SourceError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.0.source()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernels::SquaredExponential;
    use crate::svgp::{InMemory, SvgpOptions, fit_svgp};
    use crate::{ExactGp, NoiseModel, NoiseVariance, Svgp};
    use nalgebra::{DMatrix, DVector};

    fn exact(x: DMatrix<f64>, y: DVector<f64>) -> GpError {
        let k = Box::new(SquaredExponential::isotropic(1.0, 1.0));
        ExactGp::new(k, NoiseModel::homoscedastic(0.1), x, y).unwrap_err()
    }

    /// The refusals of bad data carry their numbers, and print them as before.
    #[test]
    fn bad_data_comes_back_as_typed_variants_with_their_fields() {
        let x = DMatrix::from_fn(5, 2, |i, j| (i + j) as f64);
        let e = exact(x.clone(), DVector::zeros(4));
        assert_eq!(
            e,
            GpError::Shape { context: "training data", got: 4, items: "targets", expected: 5, per: "rows of X" }
        );
        assert_eq!(e.to_string(), "invalid input: training data: 4 targets for 5 rows of X");

        let mut y = DVector::zeros(5);
        y[2] = f64::NAN;
        let e = exact(x.clone(), y);
        assert!(
            matches!(e, GpError::NonFinite { what: "target", at: Place::Row(2), value } if value.is_nan()),
            "{e:?}"
        );
        assert_eq!(e.to_string(), "invalid input: target of row 2 is NaN");

        let mut bad = x.clone();
        bad[(3, 1)] = f64::INFINITY;
        let e = exact(bad, DVector::zeros(5));
        let at = Place::Cell { row: 3, column: 1 };
        assert_eq!(e, GpError::NonFinite { what: "X", at, value: f64::INFINITY });
        assert_eq!(e.to_string(), "invalid input: X row 3, column 1 is inf");

        let e = exact(DMatrix::zeros(0, 2), DVector::zeros(0));
        assert_eq!(e, GpError::Empty { what: "training rows" });

        let e = crate::inducing::kmeans(&x, 7, 10, 0).unwrap_err();
        let from = "training rows";
        assert_eq!(e, GpError::TooMany { what: "k-means centroids", asked: 7, available: 5, from });
    }

    /// A failure inside a stochastic fit names its step and keeps the step's own error whole.
    #[test]
    fn a_fit_failure_is_wrapped_with_its_step() {
        let mut x = DMatrix::from_fn(6, 1, |i, _| i as f64);
        x[(4, 0)] = f64::NAN;
        let mut source = InMemory::new(x, DVector::zeros(6), 6, 0).unwrap();
        let z = DMatrix::from_column_slice(2, 1, &[0.0, 3.0]);
        let mut model =
            Svgp::new(Box::new(SquaredExponential::isotropic(1.0, 1.0)), NoiseVariance::new(0.1), z).unwrap();
        let e = fit_svgp(&mut model, &mut source, &SvgpOptions::default(), None, &mut |_| Ok(())).unwrap_err();
        let GpError::AtStep { step: 1, source } = &e else { panic!("{e:?}") };
        assert!(
            matches!(**source, GpError::NonFinite { what: "minibatch", at: Place::Cell { column: 0, .. }, .. }),
            "{source:?}"
        );
        assert!(std::ptr::eq(e.innermost(), &**source), "innermost is the step's own error");
        assert!(e.to_string().starts_with("step 1: invalid input: minibatch row "), "{e}");
    }

    /// Another layer's error is kept as its own type; copies are equal, other errors are not.
    #[test]
    fn a_source_error_downcasts_to_its_own_type() {
        let e = GpError::from_source(std::io::Error::other("disk on fire"));
        assert_eq!(e.to_string(), "invalid input: disk on fire");
        let GpError::Source(s) = &e else { panic!("{e:?}") };
        assert_eq!(s.downcast_ref::<std::io::Error>().map(|io| io.to_string()).as_deref(), Some("disk on fire"));
        assert!(s.downcast_ref::<fmt::Error>().is_none());
        assert_eq!(e.clone(), e);
        assert_ne!(GpError::from_source(std::io::Error::other("disk on fire")), e);
    }
}
