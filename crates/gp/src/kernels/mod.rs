//! Covariance functions k(x, x').
//!
//! Conventions (shared by every kernel, see ARCHITECTURE.md):
//! - Inputs are matrices with **one point per row** (N×D), passed as nalgebra views so that
//!   row-chunks of a large design matrix can be used without copying.
//! - Every hyperparameter is optimised on an **unconstrained log scale**: `params()` returns
//!   log values for positive quantities (variances, length-scales), and `bounds()` is in the same
//!   log scale. (A linear kernel's offset `c`, if any, would be raw; none of ours has one.)
//! - Gradients are **vector–Jacobian products**: given G = ∂L/∂K (same shape as K(X1, X2)), the
//!   kernel returns ∂L/∂θ = Σ_ij G_ij ∂K_ij/∂θ (w.r.t. the log-parameters) and, on request,
//!   ∂L/∂X1 = Σ_j G_ij ∂k(x1_i, x2_j)/∂x1_i (N1×D) — the inducing-input gradient.
//!   This avoids materialising one N1×N2 matrix per hyperparameter.
//! - Results must be deterministic (bit-identical for the same inputs), also when evaluated in
//!   parallel: reductions happen in a fixed order.

use nalgebra::{DMatrix, DMatrixView, DVector, DVectorView};

mod arc_cosine;
mod combination;
mod constant;
mod dot_product;
mod linear;
mod matern;
mod param;
mod polynomial;
mod spec;
mod squared_exponential;
mod stationary;
#[cfg(test)]
mod test_support;
mod tiling;
pub(crate) mod vexp;

pub use arc_cosine::{ArcCosine, ArcCosineOrder};
pub use combination::{Product, Sum};
pub use constant::Constant;
pub use linear::Linear;
pub use matern::{Matern, MaternNu};
pub use polynomial::Polynomial;
pub use spec::{BaseKernel, KERNEL_NAMES, KernelInit, KernelSpec, KernelSpecError};
pub use squared_exponential::SquaredExponential;

/// Box bounds on one log-parameter.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Bounds {
    pub lower: f64,
    pub upper: f64,
}

impl Bounds {
    pub const fn new(lower: f64, upper: f64) -> Self {
        Self { lower, upper }
    }
    /// Default bounds for a positive parameter on normalised data: [1e-6, 1e6] in natural units.
    pub fn positive_default() -> Self {
        Self { lower: (1e-6f64).ln(), upper: (1e6f64).ln() }
    }
    pub fn contains(&self, x: f64) -> bool {
        x >= self.lower && x <= self.upper
    }
    pub fn clamp(&self, x: f64) -> f64 {
        x.clamp(self.lower, self.upper)
    }
}

/// Result of a vector–Jacobian product through a kernel matrix.
#[derive(Debug, Clone, PartialEq)]
pub struct KernelGrad {
    /// ∂L/∂θ for each log-parameter, in `params()` order.
    pub params: Vec<f64>,
    /// ∂L/∂X1 (N1×D), present when requested.
    pub x1: Option<DMatrix<f64>>,
}

/// A covariance function with hyperparameters on a log scale.
pub trait Kernel: std::fmt::Debug + Send + Sync {
    /// Short name, e.g. `"se-ard"`, `"matern32"`, `"sum(se,linear)"`.
    fn name(&self) -> String;
    /// Number of hyperparameters (length of `params()`).
    fn n_params(&self) -> usize;
    /// Hyperparameters on the optimisation (log) scale.
    fn params(&self) -> Vec<f64>;
    /// Set hyperparameters from the optimisation (log) scale. Panics only on a length mismatch
    /// (a programming error); values outside `bounds()` are accepted (the optimiser keeps them in).
    fn set_params(&mut self, p: &[f64]);
    /// Human-readable names, e.g. `["variance", "lengthscale[0]", "lengthscale[1]"]`.
    fn param_names(&self) -> Vec<String>;
    /// Bounds on each log-parameter.
    fn bounds(&self) -> Vec<Bounds>;
    /// Replace the bounds (same length as `params()`).
    fn set_bounds(&mut self, b: &[Bounds]);
    /// Input dimension the kernel requires, if fixed (ARD kernels); `None` if any.
    fn input_dim(&self) -> Option<usize>;

    /// K(X1, X2), N1×N2.
    fn k(&self, x1: DMatrixView<'_, f64>, x2: DMatrixView<'_, f64>) -> DMatrix<f64>;
    /// K(X1, X2) written into `out` (resized if its shape differs), with the same numbers as
    /// [`Kernel::k`]. Stationary kernels override it to reuse `out`'s storage: sparse models
    /// evaluate the M×N K_uf at every optimiser step, and a fresh 400 MB allocation costs
    /// 0.2 s of page faults on this machine.
    fn k_into(&self, x1: DMatrixView<'_, f64>, x2: DMatrixView<'_, f64>, out: &mut DMatrix<f64>) {
        *out = self.k(x1, x2);
    }
    /// diag K(X, X), length N.
    fn diag(&self, x: DMatrixView<'_, f64>) -> DVector<f64>;
    /// Vector–Jacobian product of K(X1, X2) with G (N1×N2); see module docs.
    fn vjp(
        &self,
        x1: DMatrixView<'_, f64>,
        x2: DMatrixView<'_, f64>,
        g: DMatrixView<'_, f64>,
        want_x1: bool,
    ) -> KernelGrad;
    /// As [`Kernel::vjp`], given the already-evaluated K = K(X1, X2). Kernels whose derivatives
    /// are cheap functions of K (the squared exponential) override this to skip re-evaluating
    /// K; the default ignores `k` and calls `vjp`. Sparse models keep K_uf and use this.
    fn vjp_given_k(
        &self,
        x1: DMatrixView<'_, f64>,
        x2: DMatrixView<'_, f64>,
        k: DMatrixView<'_, f64>,
        g: DMatrixView<'_, f64>,
        want_x1: bool,
    ) -> KernelGrad {
        let _ = k;
        self.vjp(x1, x2, g, want_x1)
    }
    /// ∂L/∂θ (log-parameters) for L that depends on K = K(X, X) through a **symmetric**
    /// G = ∂L/∂K, given K: the same numbers as `vjp_given_k(x, x, k, g, false).params` up to
    /// round-off. Only the lower triangles of `k` and `g` are read. Kernels with a cheaper
    /// symmetric form override it (the squared exponential: one pass over the lower triangle,
    /// no exponentials); the default calls `vjp_given_k` on the full matrices.
    fn vjp_sym_given_k(&self, x: DMatrixView<'_, f64>, k: DMatrixView<'_, f64>, g: DMatrixView<'_, f64>) -> Vec<f64> {
        let sym = |m: DMatrixView<'_, f64>| DMatrix::from_fn(m.nrows(), m.ncols(), |i, j| m[(i.max(j), i.min(j))]);
        let (k, g) = (sym(k), sym(g));
        self.vjp_given_k(x, x, k.as_view(), g.as_view(), false).params
    }
    /// Σ_n g_n ∂k(x_n, x_n)/∂θ for each log-parameter.
    fn diag_vjp(&self, x: DMatrixView<'_, f64>, g: DVectorView<'_, f64>) -> Vec<f64>;
    /// Clone into a box (kernels are stored as `Box<dyn Kernel>` in models).
    fn clone_box(&self) -> Box<dyn Kernel>;
    /// This kernel as a squared exponential, if it is one (multiscale inducing features are
    /// defined for the SE kernel only; see `features`).
    fn as_squared_exponential(&self) -> Option<&SquaredExponential> {
        None
    }
}

impl Clone for Box<dyn Kernel> {
    fn clone(&self) -> Self {
        self.clone_box()
    }
}
