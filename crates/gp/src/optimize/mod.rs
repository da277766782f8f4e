//! Box-constrained limited-memory BFGS for hyperparameter optimisation.
//!
//! [`minimize`] minimises a smooth objective `f: ℝⁿ → ℝ` over the box
//! `lower ≤ x ≤ upper` (each bound may be `±∞`). It follows the ideas of
//! L-BFGS-B (Byrd, Lu, Nocedal & Zhu, *A limited memory algorithm for bound
//! constrained optimization*, SIAM J. Sci. Comput. 16(5):1190–1208, 1995), but it
//! is a projected quasi-Newton method, not a port of that code. It also keeps
//! going when some evaluations fail, which happens in Gaussian-process work
//! when a Cholesky factorisation breaks down at extreme hyperparameters.
//!
//! # Algorithm
//!
//! Write `P(z)` for the projection onto the box (component-wise clamping) and
//! `g = ∇f(x)`. Each iteration does the following:
//!
//! 1. **Active set.** Let `γ` be the current scale of the inverse-Hessian
//!    approximation: `sᵀy / yᵀy` from the newest curvature pair, or
//!    `γ₀ = min(1, 1/‖g‖∞)` when the memory is empty. Variable `i` is *held*
//!    for this iteration if it is fixed (`lowerᵢ = upperᵢ`), or if `−gᵢ` points
//!    at a bound and the scaled steepest-descent step `xᵢ − γgᵢ` would reach or
//!    cross that bound. In particular, a variable that sits on a bound with
//!    `−gᵢ` pointing out of the box is held. A held variable moves straight to
//!    that bound: `dᵢ = boundᵢ − xᵢ`, which is zero if it is already there.
//!    All other variables are *free*. This is the ε-active set of Bertsekas's
//!    two-metric projection method (*Projected Newton methods for optimization
//!    problems with simple constraints*, SIAM J. Control Optim. 20(2), 1982),
//!    with `ε` taken from the Cauchy-step scale. L-BFGS-B's generalised Cauchy
//!    point fixes the same kind of variables. This choice matters in practice.
//!    If only variables exactly on a bound are held, a variable that creeps up
//!    to its bound keeps the quasi-Newton step coupled to it. The projection
//!    then cuts that step short at a tiny breakpoint, and the iteration stalls.
//! 2. **Direction.** On the free variables, `d = −H g`, where `H` is the
//!    L-BFGS inverse-Hessian approximation *restricted to the free variables*.
//!    It is computed with the two-loop recursion (Nocedal & Wright, *Numerical
//!    Optimization*, 2nd ed., 2006, ch. 7, Algorithm 7.4), with every inner
//!    product taken over the free components only. The initial matrix is
//!    `H₀ = γI` (eq. 7.20), with `γ` from the newest pair whose restricted
//!    curvature `s_Fᵀy_F` is safely positive. Pairs that fail this test are
//!    skipped, so the restricted `H` stays positive definite. When the memory
//!    is empty, `d = −γ₀g`, so the first trial step `α = 1` is a
//!    steepest-descent step of length at most 1 in the infinity norm. A free
//!    component that sits on a bound and points out of the box is set to zero,
//!    because the projection would cancel it at once. This makes `gᵀd` exactly
//!    the initial slope of the projected path.
//! 3. **Descent safeguard.** If `gᵀd` is not negative and finite, the memory
//!    is cleared and the scaled steepest-descent direction of step 2 is used.
//!    The first trial step of every line search is `α = 1`, or the step at
//!    which the whole path has reached the bounds, if that comes first.
//! 4. **Projected line search** along the path `x(α) = P(x + αd)`. A trial is
//!    accepted when it satisfies the projected Armijo condition
//!    `f(x(α)) ≤ f(x) + c₁·gᵀ(x(α) − x)` (with `gᵀ(x(α) − x) < 0`) together with
//!    the strong-Wolfe curvature condition `|φ'(α)| ≤ c₂|φ'(0)|`. Here
//!    `c₁ = 10⁻⁴`, `c₂ = 0.9`, and `φ'` is the right derivative of
//!    `α ↦ f(x(α))`, with clipped components left out. While the path does not
//!    hit a bound, this is exactly the strong-Wolfe search of Nocedal & Wright,
//!    Algorithms 3.5 (bracketing) and 3.6 (zoom). Trial steps come from safeguarded
//!    cubic interpolation (eq. 3.59), with a quadratic and then bisection as
//!    fall-backs. Extrapolation is limited to `[1.1, 4]` times the previous
//!    step increment, as in Moré & Thuente (*Line search algorithms
//!    with guaranteed sufficient decrease*, ACM TOMS 20(3), 1994). Past a breakpoint the same
//!    logic runs on the bent path. A trial whose evaluation **fails** (an
//!    `Err`, a non-finite value or gradient, or a gradient of the wrong length)
//!    counts as "too far". If a sufficient-decrease point is already known,
//!    that point is accepted. Otherwise the step is halved. If the evaluation
//!    budget runs out, the best sufficient-decrease point found so far is
//!    accepted. The same happens once the bracket is narrower than 10 % of the
//!    step, which is the `xtol` test of Moré–Thuente that SciPy's `dcsrch` also
//!    uses.
//!
//!    **Round-off.** When f is a large number computed with cancellation (a VFE ELBO of
//!    order 10⁴ whose trace term subtracts two numbers of order 10⁷), its values may be
//!    reproducible only to ~10⁻⁷ relative while its gradient is still accurate. Along a
//!    flat ridge the decrease a step achieves then falls below f's round-off, Armijo
//!    cannot be decided, and the search above fails although the gradient shows the way.
//!    The search therefore also watches for Hager & Zhang's approximate Wolfe conditions
//!    (*Algorithm 851: CG_DESCENT*, ACM TOMS 32(1):113–137, 2006, which also states their
//!    error bound `ε_k`, here simplified to `ε·|f(x_k)|`) on the straight part of the path:
//!    `σφ'(0) ≤ φ'(α) ≤ (2δ − 1)φ'(0)` and `φ(α) ≤ φ(0) + ε|φ(0)|`, with `σ = c₂ = 0.9`,
//!    `δ = 0.1` and `ε = 10⁻⁶` (their defaults). For a quadratic φ the derivative part
//!    is the Armijo condition with `c₁ = δ`, since `φ(α) − φ(0) = α(φ'(0) + φ'(α))/2`,
//!    but it is decided by gradients, not by differences of f. If the search would fail,
//!    it returns the first trial that met them; from then on the run accepts such a
//!    trial as soon as it is found (Hager & Zhang also switch once and for all). A run
//!    whose line searches all succeed never switches and is unchanged bit for bit.
//!    The search fails only if no trial met either test.
//! 5. **Memory update.** With `s = x₊ − x` and `y = g₊ − g`, the pair is stored
//!    only if `sᵀy > ε·yᵀy` (`ε` = machine epsilon). Otherwise it is skipped,
//!    as in L-BFGS-B. When a line search fails and the memory is not empty,
//!    the memory is cleared and the iteration is retried with steepest
//!    descent (as often as it happens: every success refills the memory). A
//!    failure with an empty memory ends the run with
//!    [`Termination::LineSearchFailed`].
//!
//! The run stops when the projected-gradient infinity norm
//! `‖P(x − g) − x‖∞ ≤ pgtol` holds. It also stops when an accepted step reduces `f`
//! by no more than `ftol · max(|fₖ|, |fₖ₊₁|, 1)` (SciPy's `factr·ε` test), when
//! `max_iters` is reached, when the line search fails, or when the callback
//! returns `false`. Once the run has switched to approximate Wolfe, the measured
//! reduction `fₖ − fₖ₊₁` is round-off: the `ftol` test then uses the trapezoid
//! estimate `−½(gₖ + gₖ₊₁)ᵀ(xₖ₊₁ − xₖ)` of the reduction (exact for a quadratic), and
//! must hold for 5 consecutive steps, because an approximate Wolfe step can be short
//! far from the optimum. [`LbfgsResult::approximate_steps`] counts the steps accepted
//! that way.
//!
//! # Differences from L-BFGS-B proper
//!
//! L-BFGS-B finds its active set with a generalised Cauchy point along the
//! projected steepest-descent path. It then minimises the compact quasi-Newton
//! model over the free subspace. This module takes the active set from a
//! scaled steepest-descent step (step 1) and lets the projected line search
//! add further bounds. This is simpler and reaches the same KKT points. The
//! bounded-Rosenbrock test checks this against SciPy's L-BFGS-B. The iterates
//! and evaluation counts differ from SciPy's. Where f's round-off hides the decrease
//! of a step (step 4, "Round-off"), L-BFGS-B's `dcsrch` fails and the run ends
//! "ABNORMAL"; this module goes on with approximate Wolfe steps
//! (`tests/optimize_ridge.rs` compares the two on such a ridge). Offline comparisons on 900
//! random bounded Rosenbrock, ill-conditioned convex quadratic and
//! Styblinski–Tang problems gave about the same iteration counts and 3–5 %
//! more evaluations.
//!
//! # Guarantees
//!
//! * The returned point is the best successfully evaluated point. It is never
//!   worse than the (projected) starting point when that point evaluates.
//! * It is deterministic: the same inputs give bit-identical outputs (no
//!   threading, hashing or randomness).
//! * It does not panic on bad data. Invalid arguments (length mismatch,
//!   crossed or NaN bounds, bad options) return an [`OptimError`]. A start
//!   point that is NaN, or that stays infinite after projection, gives
//!   [`Termination::InitialEvaluationFailed`] without calling `f`. Trial
//!   points with non-finite coordinates are never passed to `f`.
//!
//! # Warm starts and changing objectives
//!
//! [`minimize`] keeps no state between calls. To warm-start, pass the previous
//! [`LbfgsResult::x`] as `x0`. This also covers an objective that changes
//! during training, for example when inducing points are re-selected every 25
//! iterations. Return `false` from the callback of [`minimize_with_callback`]
//! to stop, change the objective, and call again from the returned `x`. The
//! curvature memory is rebuilt: after a jump of the objective (new inducing
//! points), the old pairs describe the old objective. Iteration numbers passed
//! to the callback start at 1 on each call.
//!
//! When the objective changes only a little between calls — a GP re-fitted after
//! one more observation, as co-training does after every answer — the previous
//! run's curvature is a good model of the new Hessian. [`minimize_from`] starts
//! from the pairs of [`LbfgsResult::curvature`] instead of an empty memory, so the
//! first trial step is a quasi-Newton step rather than a steepest-descent step of
//! arbitrary length (Nocedal & Wright 2006, §7.2 discuss the choice of `H₀`; carrying
//! the pairs over is the "warm-started" L-BFGS of sequences of related problems).
//! The safeguards of steps 3–5 apply unchanged: a stale pair that makes `−Hg` a
//! non-descent direction, or a line search that fails along it, clears the memory
//! and falls back to steepest descent, so a bad carry-over costs evaluations, never
//! correctness. Pairs of a different dimension are ignored.

pub mod adam;
mod line_search;
mod memory;

use line_search::{Accepted, line_search};
use memory::{Memory, search_direction};
use std::collections::VecDeque;
use std::fmt;

/// Outcome of one objective evaluation at x: value and gradient, or a failure
/// (e.g. a Cholesky factorisation that failed at these parameters).
pub(crate) type EvalResult = Result<(f64, Vec<f64>), String>;

/// Sufficient-decrease (Armijo) constant `c₁`.
const C1: f64 = 1e-4;
/// Curvature (strong Wolfe) constant `c₂`; 0.9 is the usual choice for quasi-Newton methods.
const C2: f64 = 0.9;
/// Relative bracket width below which the line search accepts its best
/// sufficient-decrease point without insisting on the curvature condition
/// (the `xtol` of Moré–Thuente / SciPy's `dcsrch`, same value).
const XTOL: f64 = 0.1;
/// Relative threshold for skipping curvature pairs: keep only if `sᵀy > CURV_EPS·yᵀy`.
const CURV_EPS: f64 = f64::EPSILON;
/// `δ` of Hager & Zhang's (2006) approximate Wolfe conditions (their default, 0.1).
const APPROX_DELTA: f64 = 0.1;
/// `ε` of Hager & Zhang's (2006) `ε_k = ε·|f(x_k)|`, the increase of f the approximate
/// Wolfe conditions tolerate as round-off (their default, 10⁻⁶).
const APPROX_EPS: f64 = 1e-6;
/// Once approximate Wolfe is on, the `ftol` test must hold for this many consecutive steps:
/// an approximate Wolfe step may be short while the run is far from the optimum.
const APPROX_FTOL_STEPS: usize = 5;

/// Options for [`minimize`].
#[derive(Debug, Clone)]
pub struct LbfgsOptions {
    /// Maximum number of iterations, i.e. accepted steps (default 200). With `0`
    /// only the start point is evaluated.
    pub max_iters: usize,
    /// Number of stored curvature pairs `m` (default 10). `0` gives projected
    /// steepest descent.
    pub memory: usize,
    /// Stop when `‖P(x − g) − x‖∞ ≤ pgtol` (default `1e-6`, as in SciPy).
    pub pgtol: f64,
    /// Stop when an accepted step reduces `f` by no more than
    /// `ftol · max(|fₖ|, |fₖ₊₁|, 1)`. The default `1e-10` is tighter than
    /// SciPy's default `factr·ε ≈ 2.2e-9`. Set it to `0` to disable the test.
    pub ftol: f64,
    /// Maximum number of evaluations in one line search, failed ones included
    /// (default 20, as in SciPy). Must be at least 1.
    pub max_line_search: usize,
}

impl Default for LbfgsOptions {
    fn default() -> Self {
        Self { max_iters: 200, memory: 10, pgtol: 1e-6, ftol: 1e-10, max_line_search: 20 }
    }
}

/// Which convergence test was met.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ConvergenceReason {
    /// `‖P(x − g) − x‖∞ ≤ pgtol`: the point is (approximately) a KKT point.
    ProjectedGradient,
    /// The last accepted step reduced `f` by at most `ftol · max(|fₖ|, |fₖ₊₁|, 1)`.
    RelativeReduction,
}

/// Why [`minimize`] stopped.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Termination {
    /// A convergence test was met.
    Converged(ConvergenceReason),
    /// `max_iters` accepted steps were taken without convergence.
    MaxIterations,
    /// No point with sufficient decrease, and none meeting the approximate Wolfe
    /// conditions, was found, even along steepest descent with a cleared memory.
    /// This usually means the run is at a minimum to within the round-off of the
    /// gradient, or the gradient is inconsistent with the values. The returned
    /// point is still the best one seen.
    LineSearchFailed,
    /// The start point could not be evaluated (the message says why). No
    /// iteration was attempted.
    InitialEvaluationFailed(String),
    /// The callback passed to [`minimize_with_callback`] returned `false`.
    StoppedByCallback,
}

impl Termination {
    /// `true` for [`Termination::Converged`].
    pub fn is_converged(&self) -> bool {
        matches!(self, Termination::Converged(_))
    }
}

/// Result of [`minimize`].
#[derive(Debug, Clone)]
pub struct LbfgsResult {
    /// Best point found, always inside the box. With
    /// [`Termination::InitialEvaluationFailed`] it is the projected `x0`, which
    /// may contain the NaN or infinity that made the start unusable.
    pub x: Vec<f64>,
    /// Objective at `x`. NaN only with [`Termination::InitialEvaluationFailed`].
    pub f: f64,
    /// Gradient at `x`. All NaN only with [`Termination::InitialEvaluationFailed`].
    pub grad: Vec<f64>,
    /// Accepted steps taken.
    pub iterations: usize,
    /// Calls to the objective, failed ones and the initial one included.
    pub evaluations: usize,
    /// Calls that returned `Err`, a non-finite value or gradient, or a gradient
    /// of the wrong length.
    pub failed_evaluations: usize,
    /// Why the run stopped.
    pub termination: Termination,
    /// `‖P(x − g) − x‖∞` at the returned point (NaN if it was never evaluated).
    pub projected_gradient_norm: f64,
    /// Accepted steps that met Hager & Zhang's approximate Wolfe conditions rather than
    /// sufficient decrease in f (module docs, step 4); 0 unless f's round-off hid the decrease.
    pub approximate_steps: usize,
    /// The curvature pairs the run ended with (for [`minimize_from`]).
    pub curvature: Curvature,
}

/// The L-BFGS curvature pairs `(s, y)` of a finished run, oldest first: the run's
/// inverse-Hessian model, to warm-start a run on a nearby objective with
/// [`minimize_from`] (module docs, "Warm starts and changing objectives").
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Curvature {
    pairs: Vec<(Vec<f64>, Vec<f64>)>,
}

impl Curvature {
    /// Number of stored pairs.
    pub fn len(&self) -> usize {
        self.pairs.len()
    }

    /// `true` without pairs (a run that took no step, or a fresh start).
    pub fn is_empty(&self) -> bool {
        self.pairs.is_empty()
    }
}

/// Invalid arguments to [`minimize`]. These are caller bugs, not numerical failures.
#[derive(Debug, Clone, PartialEq)]
pub enum OptimError {
    /// `x0`, `lower` and `upper` do not all have the same length.
    DimensionMismatch {
        /// Length of `x0`.
        x0: usize,
        /// Length of `lower`.
        lower: usize,
        /// Length of `upper`.
        upper: usize,
    },
    /// The bounds of one variable are NaN, crossed (`lower > upper`), or
    /// leave no finite value (`lower = +∞` or `upper = −∞`).
    InvalidBounds {
        /// Index of the offending variable.
        index: usize,
        /// Its lower bound.
        lower: f64,
        /// Its upper bound.
        upper: f64,
    },
    /// An option outside its domain: `name` was `value` and must `bound`.
    InvalidOptions { name: &'static str, value: f64, bound: &'static str },
}

impl fmt::Display for OptimError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            OptimError::DimensionMismatch { x0, lower, upper } => {
                write!(f, "dimension mismatch: x0 has {x0} entries, lower has {lower}, upper has {upper}")
            }
            OptimError::InvalidBounds { index, lower, upper } => write!(
                f,
                "invalid bounds for variable {index}: lower = {lower}, upper = {upper} \
                 (need lower <= upper, no NaN, lower < +inf, upper > -inf)"
            ),
            OptimError::InvalidOptions { name, value, bound } => {
                write!(f, "invalid options: {name} must {bound}, got {value}")
            }
        }
    }
}

impl std::error::Error for OptimError {}

/// Minimise `f` over the box `lower ≤ x ≤ upper` (each bound may be `±∞`),
/// starting from `x0`, which is projected into the box first.
///
/// `f` returns the value and the gradient at `x`, or `Err(message)` when it
/// cannot be evaluated there. Failures do not end the run, as explained in the
/// [module documentation](self). An invalid argument returns [`OptimError`].
/// Anything that goes wrong numerically is reported through
/// [`LbfgsResult::termination`] instead.
///
/// ```
/// use dpcotrain_gp::optimize::{minimize, LbfgsOptions};
/// // minimise (x - 3)² subject to x ≤ 1  →  x = 1
/// let res = minimize(
///     |x: &[f64]| Ok(((x[0] - 3.0).powi(2), vec![2.0 * (x[0] - 3.0)])),
///     &[0.0], &[f64::NEG_INFINITY], &[1.0], &LbfgsOptions::default(),
/// ).unwrap();
/// assert_eq!(res.x, vec![1.0]);
/// assert!(res.termination.is_converged());
/// ```
pub fn minimize<F>(
    f: F,
    x0: &[f64],
    lower: &[f64],
    upper: &[f64],
    opts: &LbfgsOptions,
) -> Result<LbfgsResult, OptimError>
where
    F: FnMut(&[f64]) -> EvalResult,
{
    minimize_with_callback(f, x0, lower, upper, opts, |_, _, _| true)
}

/// Same as [`minimize`], but calls `callback(iteration, x, f(x))` after every
/// accepted step. `iteration` counts from 1, and `x` is the new iterate. If the
/// callback returns `false`, the run stops with [`Termination::StoppedByCallback`].
///
/// A caller that re-selects inducing points every 25 iterations can return
/// `iteration % 25 != 0`. It then changes its objective and calls again with
/// `x0 = result.x`:
///
/// ```
/// use dpcotrain_gp::optimize::{minimize_with_callback, LbfgsOptions, Termination};
/// let opts = LbfgsOptions::default();
/// let (lower, upper) = ([-10.0; 2], [10.0; 2]);
/// let mut centre = 3.0; // stands in for the current inducing points
/// let mut x = vec![-5.0, 4.0];
/// let mut rounds = 0;
/// for _ in 0..20 {
///     rounds += 1;
///     let c = centre;
///     let objective = |x: &[f64]| {
///         let f = (x[0] - c).powi(2) + 10.0 * (x[1] - x[0] * x[0]).powi(2);
///         let g1 = 20.0 * (x[1] - x[0] * x[0]);
///         Ok((f, vec![2.0 * (x[0] - c) - 2.0 * x[0] * g1, g1]))
///     };
///     let res = minimize_with_callback(objective, &x, &lower, &upper, &opts, |iter, _x, fx| {
///         println!("iter {iter}: f = {fx:.6}");
///         iter % 25 != 0
///     })
///     .unwrap();
///     x = res.x;
///     if res.termination != Termination::StoppedByCallback {
///         break; // converged (or failed) on the current objective
///     }
///     centre = 0.5 * (centre + x[0]); // "re-select the inducing points"
/// }
/// assert!(rounds > 1 && (x[0] - centre).abs() < 1e-4, "{rounds} rounds, x = {x:?}");
/// ```
pub fn minimize_with_callback<F, C>(
    f: F,
    x0: &[f64],
    lower: &[f64],
    upper: &[f64],
    opts: &LbfgsOptions,
    callback: C,
) -> Result<LbfgsResult, OptimError>
where
    F: FnMut(&[f64]) -> EvalResult,
    C: FnMut(usize, &[f64], f64) -> bool,
{
    minimize_from(f, x0, lower, upper, opts, &Curvature::default(), callback)
}

/// [`minimize_with_callback`] whose curvature memory starts with the pairs of an
/// earlier run (typically [`LbfgsResult::curvature`] of the previous fit of a slightly
/// different objective) instead of empty. The newest `opts.memory` pairs are kept;
/// pairs whose length is not `x0.len()`, or whose curvature `sᵀy` is not safely
/// positive, are ignored. With an empty `curvature` this is exactly
/// [`minimize_with_callback`].
pub(crate) fn minimize_from<F, C>(
    f: F,
    x0: &[f64],
    lower: &[f64],
    upper: &[f64],
    opts: &LbfgsOptions,
    curvature: &Curvature,
    mut callback: C,
) -> Result<LbfgsResult, OptimError>
where
    F: FnMut(&[f64]) -> EvalResult,
    C: FnMut(usize, &[f64], f64) -> bool,
{
    validate(x0, lower, upper, opts)?;
    let n = x0.len();

    if let Some(i) = x0.iter().position(|v| v.is_nan()) {
        return Ok(failed_start(project(x0, lower, upper), 0, 0, format!("x0[{i}] is NaN")));
    }
    let mut x = project(x0, lower, upper);
    if let Some(i) = x.iter().position(|v| !v.is_finite()) {
        let msg = format!("x0[{i}] = {} is not finite and its bound does not make it finite", x[i]);
        return Ok(failed_start(x, 0, 0, msg));
    }

    let mut ev = Evaluator::new(f, n);
    let (mut fx, mut g) = match ev.eval(&x) {
        Ok(v) => v,
        Err(msg) => {
            return Ok(failed_start(x, ev.evaluations, ev.failed, msg));
        }
    };

    let mut memory = Memory::new(opts.memory);
    for (s, y) in curvature.pairs.iter().filter(|(s, y)| s.len() == n && y.len() == n) {
        memory.push(s.clone(), y.clone());
    }
    let mut iterations = 0usize;
    // Switched on by the first step the approximate Wolfe conditions rescue, and kept for the
    // rest of the run (Hager & Zhang 2006 also switch once and for all).
    let mut approximate = false;
    let mut approximate_steps = 0usize;
    let mut small_steps = 0usize;
    let termination = loop {
        if projected_gradient_norm(&x, &g, lower, upper) <= opts.pgtol {
            break Termination::Converged(ConvergenceReason::ProjectedGradient);
        }
        if iterations >= opts.max_iters {
            break Termination::MaxIterations;
        }

        // --- search direction -------------------------------------------------
        let mut fresh = memory.is_empty();
        let mut d = search_direction(&memory, &x, &g, lower, upper);
        let mut dphi0 = dot(&g, &d);
        if !fresh && !is_descent(dphi0) {
            memory.clear();
            fresh = true;
            d = search_direction(&memory, &x, &g, lower, upper);
            dphi0 = dot(&g, &d);
        }
        if !is_descent(dphi0) {
            // Only reachable when ‖g_free‖² underflows: no usable descent direction.
            break Termination::LineSearchFailed;
        }

        // --- line search --------------------------------------------------------
        let searched = line_search(&mut ev, &x, fx, &g, &d, lower, upper, opts.max_line_search, approximate);
        let Some(step) = searched else {
            if fresh {
                break Termination::LineSearchFailed;
            }
            // Scipy-style recovery: drop the (possibly misleading) memory, retry
            // from the same point with scaled steepest descent.
            memory.clear();
            continue;
        };

        // --- update -------------------------------------------------------------
        let s: Vec<f64> = step.x.iter().zip(&x).map(|(a, b)| a - b).collect();
        let y: Vec<f64> = step.g.iter().zip(&g).map(|(a, b)| a - b).collect();
        if step.approximate {
            approximate = true;
            approximate_steps += 1;
        }
        // The decrease the ftol test sees. Once f's round-off has hidden a decrease, measured
        // differences of f are noise: use the trapezoid estimate −½(g + g₊)ᵀs of
        // ∫ gᵀ ds along the step (exact for a quadratic, the estimate behind the approximate
        // Wolfe conditions of Hager & Zhang 2006), which the gradient resolves.
        let decrease = if approximate { -0.5 * (dot(&g, &s) + dot(&step.g, &s)) } else { fx - step.f };
        memory.push(s, y);
        let f_prev = fx;
        x = step.x;
        fx = step.f;
        g = step.g;
        iterations += 1;

        if !callback(iterations, &x, fx) {
            break Termination::StoppedByCallback;
        }
        small_steps = if decrease <= opts.ftol * f_prev.abs().max(fx.abs()).max(1.0) { small_steps + 1 } else { 0 };
        if small_steps >= if approximate { APPROX_FTOL_STEPS } else { 1 } {
            break if projected_gradient_norm(&x, &g, lower, upper) <= opts.pgtol {
                Termination::Converged(ConvergenceReason::ProjectedGradient)
            } else {
                Termination::Converged(ConvergenceReason::RelativeReduction)
            };
        }
    };

    // The line search only accepts decreasing steps, so the iterate is normally
    // the best point; `best` also covers a rejected trial that happened to be lower.
    let evaluations = ev.evaluations;
    let failed_evaluations = ev.failed;
    let (bx, bf, bg) = match ev.best {
        Some(b) if b.f < fx => (b.x, b.f, b.g),
        _ => (x, fx, g),
    };
    let pg = projected_gradient_norm(&bx, &bg, lower, upper);
    Ok(LbfgsResult {
        x: bx,
        f: bf,
        grad: bg,
        iterations,
        evaluations,
        failed_evaluations,
        termination,
        projected_gradient_norm: pg,
        approximate_steps,
        curvature: Curvature { pairs: memory.into_pairs() },
    })
}

/// Infinity norm of the projected gradient, `‖P(x − g) − x‖∞`. It is zero
/// exactly at the KKT points of the box-constrained problem. Slices must have
/// equal lengths (extra entries are ignored).
pub fn projected_gradient_norm(x: &[f64], g: &[f64], lower: &[f64], upper: &[f64]) -> f64 {
    x.iter()
        .zip(g)
        .zip(lower.iter().zip(upper))
        .map(|((&xi, &gi), (&l, &u))| (clamp(xi - gi, l, u) - xi).abs())
        .fold(0.0, |m: f64, v| if v.is_nan() || v > m { v } else { m }) // NaN propagates
}

// ---------------------------------------------------------------------------
// Internals
// ---------------------------------------------------------------------------

fn validate(x0: &[f64], lower: &[f64], upper: &[f64], opts: &LbfgsOptions) -> Result<(), OptimError> {
    if lower.len() != x0.len() || upper.len() != x0.len() {
        return Err(OptimError::DimensionMismatch { x0: x0.len(), lower: lower.len(), upper: upper.len() });
    }
    for (index, (&l, &u)) in lower.iter().zip(upper).enumerate() {
        if l.is_nan() || u.is_nan() || l > u || l == f64::INFINITY || u == f64::NEG_INFINITY {
            return Err(OptimError::InvalidBounds { index, lower: l, upper: u });
        }
    }
    if opts.max_line_search == 0 {
        return Err(OptimError::InvalidOptions { name: "max_line_search", value: 0.0, bound: "be at least 1" });
    }
    if opts.pgtol.is_nan() || opts.pgtol < 0.0 {
        return Err(OptimError::InvalidOptions { name: "pgtol", value: opts.pgtol, bound: "be >= 0" });
    }
    if opts.ftol.is_nan() || opts.ftol < 0.0 {
        return Err(OptimError::InvalidOptions { name: "ftol", value: opts.ftol, bound: "be >= 0" });
    }
    Ok(())
}

fn failed_start(x: Vec<f64>, evaluations: usize, failed: usize, msg: String) -> LbfgsResult {
    let n = x.len();
    LbfgsResult {
        x,
        f: f64::NAN,
        grad: vec![f64::NAN; n],
        iterations: 0,
        evaluations,
        failed_evaluations: failed,
        termination: Termination::InitialEvaluationFailed(msg),
        projected_gradient_norm: f64::NAN,
        approximate_steps: 0,
        curvature: Curvature::default(),
    }
}

/// `true` for a usable initial slope `gᵀd`: negative and finite.
fn is_descent(slope: f64) -> bool {
    slope < 0.0 && slope.is_finite()
}

/// Clamp that keeps NaN as NaN (unlike `f64::max`/`min`, which drop it).
fn clamp(v: f64, l: f64, u: f64) -> f64 {
    if v < l {
        l
    } else if v > u {
        u
    } else {
        v
    }
}

fn project(x: &[f64], lower: &[f64], upper: &[f64]) -> Vec<f64> {
    x.iter().zip(lower.iter().zip(upper)).map(|(&v, (&l, &u))| clamp(v, l, u)).collect()
}

fn dot(a: &[f64], b: &[f64]) -> f64 {
    a.iter().zip(b).map(|(x, y)| x * y).sum()
}

fn masked_dot(a: &[f64], b: &[f64], mask: &[bool]) -> f64 {
    a.iter().zip(b).zip(mask).filter(|(_, m)| **m).map(|((x, y), _)| x * y).sum()
}

/// Variables that sit exactly on a bound with `−g` pointing out of the box, or are fixed.
fn on_bound_outward(xi: f64, gi: f64, l: f64, u: f64) -> bool {
    l == u || (xi <= l && gi > 0.0) || (xi >= u && gi < 0.0)
}

/// Scale `γ₀ = min(1, 1/‖g‖∞)` of the first steepest-descent step, with the
/// norm taken over the variables that can move.
fn steepest_scale(x: &[f64], g: &[f64], lower: &[f64], upper: &[f64]) -> f64 {
    let gmax = x
        .iter()
        .zip(g)
        .zip(lower.iter().zip(upper))
        .filter(|((xi, gi), (l, u))| !on_bound_outward(**xi, **gi, **l, **u))
        .fold(0.0f64, |m, ((_, gi), _)| m.max(gi.abs()));
    if gmax > 1.0 { 1.0 / gmax } else { 1.0 }
}

/// Evaluates the objective, checks what it returns, and counts calls and failures.
struct Evaluator<F> {
    f: F,
    n: usize,
    evaluations: usize,
    failed: usize,
    best: Option<Accepted>,
}

impl<F> Evaluator<F>
where
    F: FnMut(&[f64]) -> EvalResult,
{
    fn new(f: F, n: usize) -> Self {
        Self { f, n, evaluations: 0, failed: 0, best: None }
    }

    fn eval(&mut self, x: &[f64]) -> EvalResult {
        self.evaluations += 1;
        let out = match (self.f)(x) {
            Err(msg) => Err(msg),
            Ok((fx, g)) => {
                if !fx.is_finite() {
                    Err(format!("objective value is not finite ({fx})"))
                } else if g.len() != self.n {
                    Err(format!("gradient has length {}, expected {}", g.len(), self.n))
                } else if let Some(i) = g.iter().position(|v| !v.is_finite()) {
                    Err(format!("gradient component {i} is not finite ({})", g[i]))
                } else {
                    Ok((fx, g))
                }
            }
        };
        match &out {
            Err(_) => self.failed += 1,
            Ok((fx, g)) => {
                if self.best.as_ref().is_none_or(|b| *fx < b.f) {
                    self.best = Some(Accepted { x: x.to_vec(), f: *fx, g: g.clone(), approximate: false });
                }
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const INF: f64 = f64::INFINITY;

    /// SciPy's `rosen` / `rosen_der`.
    fn rosenbrock(x: &[f64]) -> EvalResult {
        let n = x.len();
        let mut f = 0.0;
        let mut g = vec![0.0; n];
        for i in 0..n - 1 {
            let t = x[i + 1] - x[i] * x[i];
            f += 100.0 * t * t + (1.0 - x[i]).powi(2);
            g[i] += -400.0 * x[i] * t - 2.0 * (1.0 - x[i]);
            g[i + 1] += 200.0 * t;
        }
        Ok((f, g))
    }

    fn unbounded(n: usize) -> (Vec<f64>, Vec<f64>) {
        (vec![-INF; n], vec![INF; n])
    }

    #[test]
    fn rosenbrock_10d_unbounded() {
        let (l, u) = unbounded(10);
        let res = minimize(rosenbrock, &[-1.2; 10], &l, &u, &LbfgsOptions::default()).unwrap();
        eprintln!("{res:?}");
        assert!(res.termination.is_converged(), "{:?}", res.termination);
        assert!(res.f < 1e-10, "f = {}", res.f);
        for (i, xi) in res.x.iter().enumerate() {
            assert!((xi - 1.0).abs() < 1e-4, "x[{i}] = {xi}");
        }
        assert_eq!(res.failed_evaluations, 0);
    }

    /// Reference: `scipy.optimize.minimize(rosen, [-1.2]*10, jac=rosen_der,
    /// method="L-BFGS-B", bounds=[(-2, 0.5)]*10)`.
    #[test]
    fn rosenbrock_10d_bounded_matches_scipy() {
        let res = minimize(rosenbrock, &[-1.2; 10], &[-2.0; 10], &[0.5; 10], &LbfgsOptions::default()).unwrap();
        eprintln!("{res:?}");
        assert!(res.termination.is_converged(), "{:?}", res.termination);
        let f_ref = 7.594812948946875;
        assert!(((res.f - f_ref) / f_ref).abs() < 1e-6, "f = {} vs scipy {f_ref}", res.f);
        let x_ref = [0.5, 0.263066, 0.080031];
        for (i, (a, b)) in res.x.iter().zip(x_ref).enumerate() {
            assert!((a - b).abs() < 1e-4, "x[{i}] = {a} vs scipy {b}");
        }
        assert_eq!(res.x[0], 0.5, "x[0] must sit exactly on its bound");
        assert!(res.x.iter().all(|&v| (-2.0..=0.5).contains(&v)));
    }

    /// `½xᵀAx − bᵀx` with tridiagonal `A`. `b` is built so that the KKT point is
    /// `x*`, with x₀ at its upper bound and x₄ at its lower bound (strictly
    /// active: the multipliers are nonzero).
    #[test]
    fn quadratic_with_active_bounds() {
        let n = 6;
        let a = |x: &[f64]| -> Vec<f64> {
            (0..n)
                .map(|i| {
                    let mut v = 4.0 * x[i];
                    if i > 0 {
                        v -= x[i - 1];
                    }
                    if i + 1 < n {
                        v -= x[i + 1];
                    }
                    v
                })
                .collect()
        };
        let x_star = [1.0, 0.3, -0.2, 0.5, -1.0, 0.7];
        let g_star = [-0.5, 0.0, 0.0, 0.0, 0.8, 0.0];
        let b: Vec<f64> = a(&x_star).iter().zip(g_star).map(|(v, g)| v - g).collect();
        let f = |x: &[f64]| -> EvalResult {
            let ax = a(x);
            let fx = 0.5 * dot(x, &ax) - dot(&b, x);
            let g = ax.iter().zip(&b).map(|(p, q)| p - q).collect();
            Ok((fx, g))
        };
        let lower = [-5.0, -INF, -INF, -INF, -1.0, -INF];
        let upper = [1.0, INF, INF, INF, 5.0, INF];
        let res = minimize(f, &[0.0; 6], &lower, &upper, &LbfgsOptions::default()).unwrap();
        eprintln!("{res:?}");
        assert_eq!(res.termination, Termination::Converged(ConvergenceReason::ProjectedGradient));
        assert_eq!(res.x[0], 1.0, "upper bound must be hit exactly");
        assert_eq!(res.x[4], -1.0, "lower bound must be hit exactly");
        for (i, (xi, si)) in res.x.iter().zip(x_star).enumerate() {
            assert!((xi - si).abs() < 1e-6, "x[{i}] = {xi} vs {si}");
        }
        assert!(res.projected_gradient_norm <= 1e-6);
        // The gradient on the active bounds is the (nonzero) multiplier.
        assert!((res.grad[0] + 0.5).abs() < 1e-5 && (res.grad[4] - 0.8).abs() < 1e-5);
    }

    /// Ill-conditioned 2-D quadratic (cond ≈ 1e5) whose solution has x₀ on its
    /// lower bound. This is a regression test. When only variables exactly on a
    /// bound were held, x₀ crept toward the bound. The projected path then had a
    /// kink at a tiny step, and the run stopped on `RelativeReduction` with
    /// ‖pg‖∞ ≈ 2.4 after 50 evaluations. SciPy's L-BFGS-B reaches f = −6310.516876542929.
    #[test]
    fn ill_conditioned_quadratic_reaching_bound_does_not_stall() {
        let a = [3695.1591124455067, 6279.311215682616, 6279.311215682616, 10674.538454410344];
        let b = [6823.727824561612, 11604.806217241894];
        let f = |x: &[f64]| -> EvalResult {
            let ax = [a[0] * x[0] + a[1] * x[1], a[2] * x[0] + a[3] * x[1]];
            let fx = 0.5 * (ax[0] * x[0] + ax[1] * x[1]) - b[0] * x[0] - b[1] * x[1];
            Ok((fx, vec![ax[0] - b[0], ax[1] - b[1]]))
        };
        let lower = [-1.2304471293962944, -0.5519105026829321];
        let upper = [0.5246343961165831, 2.3938491214470976];
        let x0 = [-2.8136479993669203, 0.37860767016768015];
        let res = minimize(f, &x0, &lower, &upper, &LbfgsOptions::default()).unwrap();
        eprintln!("{res:?}");
        assert_eq!(res.termination, Termination::Converged(ConvergenceReason::ProjectedGradient));
        assert_eq!(res.x[0], lower[0]);
        let x1 = (b[1] - a[2] * lower[0]) / a[3];
        assert!((res.x[1] - x1).abs() < 1e-8, "x = {:?}, want x1 = {x1}", res.x);
        assert!((res.f - -6310.516876542929).abs() < 1e-8);
        assert!(res.evaluations <= 30, "{} evaluations", res.evaluations);
    }

    /// A gradient that points the wrong way: no step gives sufficient decrease,
    /// so the run ends with `LineSearchFailed` and returns x0 unchanged.
    #[test]
    fn inconsistent_gradient_fails_cleanly() {
        let f = |x: &[f64]| -> EvalResult { Ok((x[0] * x[0], vec![-2.0 * x[0]])) };
        let res = minimize(f, &[1.5], &[-INF], &[INF], &LbfgsOptions::default()).unwrap();
        assert_eq!(res.termination, Termination::LineSearchFailed);
        assert_eq!((res.x[0], res.f), (1.5, 2.25));
        assert_eq!(res.failed_evaluations, 0);
    }

    /// Pseudo-Huber in x₀ (almost linear far away, so secant steps overshoot
    /// badly) that cannot be evaluated for x₀ > 1; the minimiser x₀ = 0.9 lies
    /// just inside the failure boundary.
    #[test]
    fn recovers_from_failed_evaluations() {
        let f = |x: &[f64]| -> EvalResult {
            if x[0] > 1.0 {
                return Err("cholesky failed".into());
            }
            let t = x[0] - 0.9;
            let h = (1.0 + t * t).sqrt();
            let fx = h - 1.0 + (x[1] + 0.5).powi(2);
            Ok((fx, vec![t / h, 2.0 * (x[1] + 0.5)]))
        };
        let (l, u) = unbounded(2);
        let res = minimize(f, &[-20.0, 3.0], &l, &u, &LbfgsOptions::default()).unwrap();
        eprintln!("{res:?}");
        assert!(res.termination.is_converged(), "{:?}", res.termination);
        assert!(res.failed_evaluations > 0);
        assert!((res.x[0] - 0.9).abs() < 1e-5, "x = {:?}", res.x);
        assert!((res.x[1] + 0.5).abs() < 1e-5, "x = {:?}", res.x);

        // The very first trial (x = 1.5) fails. With no curvature information
        // yet, only shrinking the step can make progress.
        let mut trials = Vec::new();
        let f = |x: &[f64]| -> EvalResult {
            trials.push(x[0]);
            if x[0] > 1.0 {
                return Err("cholesky failed".into());
            }
            Ok((5.0 * (x[0] - 0.9).powi(2), vec![10.0 * (x[0] - 0.9)]))
        };
        let res = minimize(f, &[0.5], &[-INF], &[INF], &LbfgsOptions::default()).unwrap();
        assert!(res.termination.is_converged(), "{:?}", res.termination);
        assert!((res.x[0] - 0.9).abs() < 1e-7, "x = {:?}", res.x);
        assert_eq!(trials[1], 1.5);
        assert!(res.failed_evaluations >= 1);
    }

    /// A NaN value or an infinite gradient counts as a failed evaluation as well.
    #[test]
    fn non_finite_outputs_are_failures() {
        let f = |x: &[f64]| -> EvalResult {
            let fx = (x[0] - 2.0).powi(2);
            if x[0] < -1.0 {
                Ok((f64::NAN, vec![0.0]))
            } else if x[0] > 2.5 {
                Ok((fx, vec![f64::INFINITY]))
            } else {
                Ok((fx, vec![2.0 * (x[0] - 2.0)]))
            }
        };
        let res = minimize(f, &[-0.9], &[-INF], &[INF], &LbfgsOptions::default()).unwrap();
        eprintln!("{res:?}");
        assert!(res.termination.is_converged(), "{:?}", res.termination);
        assert!((res.x[0] - 2.0).abs() < 1e-6);
        assert!(res.f.is_finite() && res.grad[0].is_finite());
    }

    #[test]
    fn initial_evaluation_failure() {
        let mut calls = 0;
        let res = minimize(
            |_x: &[f64]| {
                calls += 1;
                Err("not positive definite".to_string())
            },
            &[1.0, 2.0],
            &[-INF; 2],
            &[INF; 2],
            &LbfgsOptions::default(),
        )
        .unwrap();
        assert_eq!(calls, 1);
        assert_eq!(res.termination, Termination::InitialEvaluationFailed("not positive definite".into()));
        assert_eq!((res.evaluations, res.failed_evaluations), (1, 1));
        assert_eq!(res.iterations, 0);
        assert_eq!(res.x, vec![1.0, 2.0]);
        assert!(res.f.is_nan());

        // A NaN objective value at x0 is a failed initial evaluation too.
        let res = minimize(|_x: &[f64]| Ok((f64::NAN, vec![0.0])), &[0.0], &[-INF], &[INF], &LbfgsOptions::default())
            .unwrap();
        assert!(matches!(
            res.termination,
            Termination::InitialEvaluationFailed(ref m) if m.contains("not finite")
        ));
        // So is a gradient of the wrong length.
        let res =
            minimize(|_x: &[f64]| Ok((1.0, vec![0.0; 3])), &[0.0], &[-INF], &[INF], &LbfgsOptions::default()).unwrap();
        assert!(matches!(
            res.termination,
            Termination::InitialEvaluationFailed(ref m) if m.contains("length 3")
        ));
    }

    #[test]
    fn nan_or_unprojectable_start_is_not_evaluated() {
        let calls = std::cell::Cell::new(0);
        let mut f = |x: &[f64]| {
            calls.set(calls.get() + 1);
            rosenbrock(x)
        };
        let opts = LbfgsOptions::default();
        let res = minimize(&mut f, &[0.0, f64::NAN], &[-1.0; 2], &[1.0; 2], &opts).unwrap();
        assert!(matches!(
            res.termination,
            Termination::InitialEvaluationFailed(ref m) if m.contains("x0[1] is NaN")
        ));
        assert_eq!(res.evaluations, 0);
        let res = minimize(&mut f, &[INF, 0.0], &[-INF; 2], &[INF; 2], &opts).unwrap();
        assert!(matches!(res.termination, Termination::InitialEvaluationFailed(_)));
        assert_eq!(calls.get(), 0);
        // An infinite start with a finite bound is simply projected.
        let res = minimize(&mut f, &[INF, -INF], &[-2.0; 2], &[0.5; 2], &opts).unwrap();
        assert!(res.termination.is_converged(), "{:?}", res.termination);
        assert!(calls.get() > 0);
    }

    #[test]
    fn invalid_arguments_are_errors() {
        let opts = LbfgsOptions::default();
        let r = minimize(rosenbrock, &[0.0; 3], &[0.0; 2], &[1.0; 3], &opts);
        assert!(matches!(r, Err(OptimError::DimensionMismatch { .. })));
        let r = minimize(rosenbrock, &[0.0; 2], &[0.0, 2.0], &[1.0, 1.0], &opts);
        assert_eq!(r.unwrap_err(), OptimError::InvalidBounds { index: 1, lower: 2.0, upper: 1.0 });
        let r = minimize(rosenbrock, &[0.0; 2], &[f64::NAN, 0.0], &[1.0; 2], &opts);
        assert!(matches!(r, Err(OptimError::InvalidBounds { index: 0, .. })));
        let r = minimize(rosenbrock, &[0.0; 2], &[INF; 2], &[INF; 2], &opts);
        assert!(matches!(r, Err(OptimError::InvalidBounds { index: 0, .. })));
        for bad in [
            LbfgsOptions { max_line_search: 0, ..opts.clone() },
            LbfgsOptions { pgtol: f64::NAN, ..opts.clone() },
            LbfgsOptions { ftol: -1.0, ..opts.clone() },
        ] {
            let r = minimize(rosenbrock, &[0.0; 2], &[-1.0; 2], &[1.0; 2], &bad);
            assert!(matches!(r, Err(OptimError::InvalidOptions { .. })), "{r:?}");
        }
        let msg = OptimError::InvalidBounds { index: 3, lower: 2.0, upper: 1.0 }.to_string();
        assert!(msg.contains("variable 3"), "{msg}");
    }

    #[test]
    fn deterministic_bit_identical() {
        let run = || minimize(rosenbrock, &[-1.2; 10], &[-2.0; 10], &[0.5; 10], &LbfgsOptions::default()).unwrap();
        let (a, b) = (run(), run());
        let bits = |v: &[f64]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
        assert_eq!(bits(&a.x), bits(&b.x));
        assert_eq!(bits(&a.grad), bits(&b.grad));
        assert_eq!(a.f.to_bits(), b.f.to_bits());
        assert_eq!(
            (a.iterations, a.evaluations, a.failed_evaluations),
            (b.iterations, b.evaluations, b.failed_evaluations)
        );
        assert_eq!(a.termination, b.termination);
    }

    #[test]
    fn callback_early_stop_and_warm_restart() {
        let (l, u) = unbounded(10);
        let opts = LbfgsOptions::default();
        let mut seen = Vec::new();
        let res = minimize_with_callback(rosenbrock, &[-1.2; 10], &l, &u, &opts, |it, x, fx| {
            assert_eq!(x.len(), 10);
            seen.push((it, fx));
            it < 3
        })
        .unwrap();
        assert_eq!(res.termination, Termination::StoppedByCallback);
        assert_eq!(res.iterations, 3);
        assert_eq!(seen.iter().map(|s| s.0).collect::<Vec<_>>(), [1, 2, 3]);
        assert!(seen.windows(2).all(|w| w[1].1 < w[0].1), "{seen:?}");
        assert_eq!(res.f, seen[2].1);

        // Warm restart from the stopped point finishes the job.
        let res2 = minimize(rosenbrock, &res.x, &l, &u, &opts).unwrap();
        assert!(res2.termination.is_converged(), "{:?}", res2.termination);
        assert!(res2.f < 1e-10);
    }

    /// A sequence of related problems (a shifted, ill-conditioned quadratic, as a GP's LML moves
    /// when one observation is added): carrying the previous run's curvature over reaches the
    /// same optimum in fewer evaluations, an empty carry is the cold start bit for bit, and a
    /// carry of the wrong dimension or from an unrelated objective is harmless.
    #[test]
    fn carried_curvature_warm_starts_a_nearby_problem() {
        let h = [[40.0, 12.0, 0.0], [12.0, 9.0, -2.0], [0.0, -2.0, 2.0]];
        let shifted = |c: [f64; 3]| {
            move |x: &[f64]| -> EvalResult {
                let d: Vec<f64> = x.iter().zip(c).map(|(a, b)| a - b).collect();
                let g: Vec<f64> = h.iter().map(|row| row.iter().zip(&d).map(|(a, b)| a * b).sum()).collect();
                Ok((0.5 * dot(&d, &g), g))
            }
        };
        let (l, u) = unbounded(3);
        let opts = LbfgsOptions::default();
        let first = minimize(shifted([1.0, -1.0, 2.0]), &[0.0; 3], &l, &u, &opts).unwrap();
        assert!(first.termination.is_converged() && !first.curvature.is_empty());
        let next = shifted([1.05, -0.97, 2.1]);
        let cold = minimize_with_callback(next, &first.x, &l, &u, &opts, |_, _, _| true).unwrap();
        let warm = minimize_from(next, &first.x, &l, &u, &opts, &first.curvature, |_, _, _| true).unwrap();
        for r in [&cold, &warm] {
            assert!(r.termination.is_converged(), "{:?}", r.termination);
            for (xi, ci) in r.x.iter().zip([1.05, -0.97, 2.1]) {
                assert!((xi - ci).abs() < 1e-5, "{:?}", r.x);
            }
        }
        assert!(
            warm.evaluations * 2 <= cold.evaluations,
            "carried curvature: {} evaluations, cold start: {}",
            warm.evaluations,
            cold.evaluations
        );
        // An empty carry is the cold start; pairs of another dimension are ignored.
        let empty = minimize_from(next, &first.x, &l, &u, &opts, &Curvature::default(), |_, _, _| true).unwrap();
        let (l4, u4) = unbounded(4);
        let other = minimize(rosenbrock, &[-1.2; 4], &l4, &u4, &opts).unwrap();
        assert!(!other.curvature.is_empty());
        let foreign = minimize_from(next, &first.x, &l, &u, &opts, &other.curvature, |_, _, _| true).unwrap();
        for r in [&empty, &foreign] {
            assert_eq!(
                r.x.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
                cold.x.iter().map(|v| v.to_bits()).collect::<Vec<_>>()
            );
            assert_eq!(r.evaluations, cold.evaluations);
        }
        // Curvature of an unrelated 3-D objective (Rosenbrock's) misleads the first step but
        // the safeguards still reach the optimum.
        let rosen3 = minimize(rosenbrock, &[-1.2; 3], &l, &u, &opts).unwrap();
        let misled = minimize_from(next, &first.x, &l, &u, &opts, &rosen3.curvature, |_, _, _| true).unwrap();
        assert!(misled.termination.is_converged(), "{:?}", misled.termination);
        for (xi, ci) in misled.x.iter().zip([1.05, -0.97, 2.1]) {
            assert!((xi - ci).abs() < 1e-5, "{:?}", misled.x);
        }
    }

    /// Every trial point fails: the start point is returned, untouched.
    #[test]
    fn line_search_failure_returns_start() {
        let x0 = [0.3, -0.7];
        let f = |x: &[f64]| -> EvalResult { if x == x0 { rosenbrock(x) } else { Err("boom".into()) } };
        let opts = LbfgsOptions::default();
        let res = minimize(f, &x0, &[-INF; 2], &[INF; 2], &opts).unwrap();
        assert_eq!(res.termination, Termination::LineSearchFailed);
        assert_eq!(res.x, x0.to_vec());
        assert_eq!(res.f, rosenbrock(&x0).unwrap().0);
        assert_eq!(res.iterations, 0);
        assert_eq!(res.failed_evaluations, res.evaluations - 1);
        assert!(res.failed_evaluations >= opts.max_line_search);
    }

    #[test]
    fn fixed_variables_empty_problem_and_max_iters() {
        // lower == upper pins a variable.
        let res =
            minimize(rosenbrock, &[0.0, 0.0, 0.0], &[-INF, 0.25, -INF], &[INF, 0.25, INF], &LbfgsOptions::default())
                .unwrap();
        assert!(res.termination.is_converged(), "{:?}", res.termination);
        assert_eq!(res.x[1], 0.25);
        assert!(res.projected_gradient_norm <= 1e-6);

        // n = 0 evaluates once and is trivially optimal.
        let res = minimize(|_x: &[f64]| Ok((3.0, vec![])), &[], &[], &[], &LbfgsOptions::default()).unwrap();
        assert_eq!(res.termination, Termination::Converged(ConvergenceReason::ProjectedGradient));
        assert_eq!((res.f, res.evaluations), (3.0, 1));

        // max_iters is honoured.
        let opts = LbfgsOptions { max_iters: 5, ..LbfgsOptions::default() };
        let (l, u) = unbounded(10);
        let res = minimize(rosenbrock, &[-1.2; 10], &l, &u, &opts).unwrap();
        assert_eq!(res.termination, Termination::MaxIterations);
        assert_eq!(res.iterations, 5);

        // memory = 0 (projected steepest descent) still makes progress.
        let opts = LbfgsOptions { memory: 0, max_iters: 50, ..LbfgsOptions::default() };
        let f0 = rosenbrock(&[-1.2; 10]).unwrap().0;
        let res = minimize(rosenbrock, &[-1.2; 10], &l, &u, &opts).unwrap();
        assert!(res.f < f0);
    }
}
