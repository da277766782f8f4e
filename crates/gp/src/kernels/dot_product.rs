//! The evaluation core of dot-product kernels: kernels that depend on two inputs only through
//! the weighted inner products
//!
//! u = ⟨x, x'⟩~ = Σ_d w_d x_d x'_d + b,   a = ⟨x, x⟩~,   a' = ⟨x', x'⟩~,
//!
//! with weight variances w_d > 0 (one shared, or one per input dimension) and a bias variance
//! b > 0. The polynomial kernel ([`super::Polynomial`]) is a function of u alone; the arc-cosine
//! kernels ([`super::ArcCosine`]) of all three. A kernel supplies k(u, a, a') and its partial
//! derivatives; this module does the K matrix, the vector–Jacobian products (∂L/∂ log w_d,
//! ∂L/∂ log b and ∂L/∂X1 by the chain rule through u, a and a') and the diagonal, with the same
//! column-block machinery (and hence the same bit-determinism) as every other kernel.

use super::Bounds;
use super::param::{self, Positive};
use super::tiling::{
    Rows, check_dim, check_grad_shape, check_inputs, copy_column, fill_columns, reduce_column_blocks, row_tiles,
};
use nalgebra::{DMatrix, DMatrixView, DVectorView};
use serde::{Deserialize, Serialize};
use std::ops::Range;

/// Weight variances w_d and bias variance b of ⟨x, x'⟩~ (natural scale), with their bounds on
/// the log scale (weights first, then the bias).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(super) struct InnerProduct {
    /// [w…, b]: the parameter vector's order.
    params: Positive,
    ard: bool,
}

/// One pair's value k and partials (∂k/∂u, ∂k/∂a, ∂k/∂a').
pub(super) type Partials = (f64, f64, f64, f64);

/// ∂L/∂(log-parameters) of the inner product, the Σ G∘K needed for an overall scale, and
/// ∂L/∂X1.
pub(super) struct InnerGrad {
    /// ∂L/∂ log w (one entry if isotropic), then ∂L/∂ log b.
    pub params: Vec<f64>,
    /// Σ_ij G_ij k_ij (the gradient of an overall log-variance that multiplies k).
    pub g_dot_k: f64,
    pub x1: Option<DMatrix<f64>>,
}

/// Partial sums of one column block of the vjp.
struct Part {
    /// (Σ_j H^u_ij x2_jd), N1×D column-major, H^u = G∘∂k/∂u.
    gu: Vec<f64>,
    /// Σ_j H^a_ij per row, H^a = G∘∂k/∂a.
    ha: Vec<f64>,
    /// Σ_j (Σ_i H^a'_ij) x2_jd² per dimension.
    hb_x2: Vec<f64>,
    /// Σ_ij (H^u + H^a + H^a')_ij (the bias enters u, a and a' alike).
    h_all: f64,
    g_dot_k: f64,
}

impl InnerProduct {
    pub fn new(kind: &str, weights: Vec<f64>, ard: bool, bias: f64) -> Self {
        assert!(!weights.is_empty(), "kernel {kind}: needs at least one weight variance");
        for &v in weights.iter().chain([&bias]) {
            assert!(
                v.is_finite() && v > 0.0,
                "kernel {kind}: weight and bias variances must be positive and finite, got {v}"
            );
        }
        Self { params: Positive::new([weights, vec![bias]].concat()), ard }
    }
    pub fn weights(&self) -> &[f64] {
        let v = self.params.values();
        &v[..v.len() - 1]
    }
    pub fn bias(&self) -> f64 {
        self.params.values()[self.params.len() - 1]
    }
    pub fn input_dim(&self) -> Option<usize> {
        self.ard.then_some(self.weights().len())
    }
    pub fn n_params(&self) -> usize {
        self.params.len()
    }
    /// The parameters as one block, for a kernel that scales this one (`ArcCosine`).
    pub(super) fn positive(&self) -> &Positive {
        &self.params
    }
    pub(super) fn positive_mut(&mut self) -> &mut Positive {
        &mut self.params
    }
    pub fn params(&self) -> Vec<f64> {
        self.params.log_values().collect()
    }
    pub fn set_params(&mut self, kind: &str, p: &[f64]) {
        self.params.set_log_values(kind, p);
    }
    /// `weight_variance[d]` (or `weight_variance`), then `bias_name`.
    pub fn param_names(&self, bias_name: &str) -> Vec<String> {
        [param::names("weight_variance", self.ard, self.weights().len()), vec![bias_name.to_string()]].concat()
    }
    pub fn bounds(&self) -> Vec<Bounds> {
        self.params.bounds().to_vec()
    }
    pub fn set_bounds(&mut self, kind: &str, b: &[Bounds]) {
        self.params.set_bounds(kind, b);
    }

    fn per_dim(&self, d: usize) -> Vec<f64> {
        if self.ard { self.weights().to_vec() } else { vec![self.weights()[0]; d] }
    }

    /// ⟨x_i, x_i⟩~ for every row, summed in the same order as the pairwise u (so that u = a
    /// exactly for a point paired with itself).
    fn self_products(&self, x: &DMatrixView<'_, f64>, w: &[f64]) -> Vec<f64> {
        (0..x.nrows())
            .map(|i| w.iter().enumerate().fold(self.bias(), |acc, (d, &wd)| acc + (wd * x[(i, d)]) * x[(i, d)]))
            .collect()
    }

    /// u for the rows `rows` of X1 against row j of X2, written into `u`.
    fn pair_products(
        &self,
        x1r: &Rows,
        rows: &Range<usize>,
        x2: &DMatrixView<'_, f64>,
        j: usize,
        w: &[f64],
        u: &mut [f64],
    ) {
        u.fill(self.bias());
        for (d, &wd) in w.iter().enumerate() {
            let c = wd * x2[(j, d)];
            u.iter_mut().zip(x1r.col(d, rows)).for_each(|(o, &a)| *o += c * a);
        }
    }

    /// K(X1, X2) with k = f(u, a, a').
    pub fn k(
        &self,
        kind: &str,
        x1: DMatrixView<'_, f64>,
        x2: DMatrixView<'_, f64>,
        f: impl Fn(f64, f64, f64) -> f64 + Sync,
    ) -> DMatrix<f64> {
        let d = check_inputs(kind, self.input_dim(), &x1, &x2);
        let w = self.per_dim(d);
        let (a1, a2) = (self.self_products(&x1, &w), self.self_products(&x2, &w));
        let (x1r, n1) = (Rows::new(&x1), x1.nrows());
        fill_columns(n1, x2.nrows(), |j0, block| {
            for rows in row_tiles(n1) {
                for (j, col) in (j0..).zip(block.chunks_exact_mut(n1)) {
                    let out = &mut col[rows.clone()];
                    self.pair_products(&x1r, &rows, &x2, j, &w, out);
                    out.iter_mut().zip(&a1[rows.clone()]).for_each(|(o, &a)| *o = f(*o, a, a2[j]));
                }
            }
        })
    }

    /// diag K(X, X) with k(x, x) = f(a).
    pub fn diag(&self, kind: &str, x: DMatrixView<'_, f64>, f: impl Fn(f64) -> f64) -> Vec<f64> {
        let d = check_dim(kind, self.input_dim(), &x);
        self.self_products(&x, &self.per_dim(d)).into_iter().map(f).collect()
    }

    /// Σ_n g_n ∂k(x_n, x_n)/∂(log w, log b) and Σ_n g_n k(x_n, x_n), given
    /// `f(a) = (k(x, x), dk(x, x)/da)`.
    pub fn diag_vjp(
        &self,
        kind: &str,
        x: DMatrixView<'_, f64>,
        g: DVectorView<'_, f64>,
        f: impl Fn(f64) -> (f64, f64),
    ) -> (Vec<f64>, f64) {
        let d = check_dim(kind, self.input_dim(), &x);
        assert_eq!(g.len(), x.nrows(), "kernel {kind}: g has the wrong length");
        let w = self.per_dim(d);
        let (mut per_dim, mut bias, mut g_dot_k) = (vec![0.0; d], 0.0, 0.0);
        for (i, a) in self.self_products(&x, &w).into_iter().enumerate() {
            let (k, dk) = f(a);
            g_dot_k += g[i] * k;
            bias += g[i] * dk;
            per_dim.iter_mut().enumerate().for_each(|(dd, p)| *p += g[i] * dk * x[(i, dd)] * x[(i, dd)]);
        }
        per_dim.iter_mut().zip(&w).for_each(|(p, wd)| *p *= wd);
        let mut params = self.to_params(per_dim);
        params.push(bias * self.bias());
        (params, g_dot_k)
    }

    fn to_params(&self, per_dim: Vec<f64>) -> Vec<f64> {
        if self.ard { per_dim } else { vec![per_dim.iter().sum()] }
    }

    /// The vjp of ⟨G, K(X1, X2)⟩ given `partials(u, a, a') = (k, ∂k/∂u, ∂k/∂a, ∂k/∂a')`:
    ///
    /// ∂/∂ log w_d = w_d [Σ_ij H^u_ij x1_id x2_jd + Σ_ij H^a_ij x1_id² + Σ_ij H^a'_ij x2_jd²],
    /// ∂/∂ log b = b Σ_ij (H^u + H^a + H^a')_ij,  ∂/∂x1_id = w_d [Σ_j H^u_ij x2_jd + 2 x1_id Σ_j H^a_ij],
    ///
    /// with H^• = G∘∂k/∂•.
    pub fn vjp(
        &self,
        kind: &str,
        x1: DMatrixView<'_, f64>,
        x2: DMatrixView<'_, f64>,
        g: DMatrixView<'_, f64>,
        want_x1: bool,
        partials: impl Fn(f64, f64, f64) -> Partials + Sync,
    ) -> InnerGrad {
        let d = check_inputs(kind, self.input_dim(), &x1, &x2);
        let (n1, n2) = (x1.nrows(), x2.nrows());
        check_grad_shape(kind, &g, n1, n2);
        let w = self.per_dim(d);
        let (a1, a2) = (self.self_products(&x1, &w), self.self_products(&x2, &w));
        let x1r = Rows::new(&x1);

        let block = |cols: Range<usize>| {
            let mut part =
                Part { gu: vec![0.0; n1 * d], ha: vec![0.0; n1], hb_x2: vec![0.0; d], h_all: 0.0, g_dot_k: 0.0 };
            let tile = super::tiling::ROW_TILE.min(n1);
            let (mut u, mut gcol) = (vec![0.0; tile], vec![0.0; tile]);
            for rows in row_tiles(n1) {
                let m = rows.len();
                let (u, gcol) = (&mut u[..m], &mut gcol[..m]);
                for j in cols.clone() {
                    self.pair_products(&x1r, &rows, &x2, j, &w, u);
                    copy_column(&g, j, rows.start, gcol);
                    let mut hb_j = 0.0;
                    for (t, i) in rows.clone().enumerate() {
                        let (k, ku, ka, kb) = partials(u[t], a1[i], a2[j]);
                        let gij = gcol[t];
                        part.g_dot_k += gij * k;
                        let (hu, ha, hb) = (gij * ku, gij * ka, gij * kb);
                        part.h_all += hu + ha + hb;
                        part.ha[i] += ha;
                        hb_j += hb;
                        // Reuse u's storage for H^u of this column.
                        u[t] = hu;
                    }
                    for (dd, hbd) in part.hb_x2.iter_mut().enumerate() {
                        let xj = x2[(j, dd)];
                        *hbd += hb_j * xj * xj;
                        let gu = &mut part.gu[dd * n1 + rows.start..dd * n1 + rows.end];
                        gu.iter_mut().zip(&*u).for_each(|(o, &h)| *o += h * xj);
                    }
                }
            }
            part
        };

        let mut total =
            Part { gu: vec![0.0; n1 * d], ha: vec![0.0; n1], hb_x2: vec![0.0; d], h_all: 0.0, g_dot_k: 0.0 };
        reduce_column_blocks(n1, n2, block, |part| {
            total.gu.iter_mut().zip(&part.gu).for_each(|(a, b)| *a += b);
            total.ha.iter_mut().zip(&part.ha).for_each(|(a, b)| *a += b);
            total.hb_x2.iter_mut().zip(&part.hb_x2).for_each(|(a, b)| *a += b);
            total.h_all += part.h_all;
            total.g_dot_k += part.g_dot_k;
        });
        let per_dim: Vec<f64> = (0..d)
            .map(|dd| {
                let x1d = x1r.col(dd, &(0..n1));
                let cross: f64 = x1d.iter().zip(&total.gu[dd * n1..(dd + 1) * n1]).map(|(x, s)| x * s).sum();
                let own: f64 = x1d.iter().zip(&total.ha).map(|(x, h)| h * x * x).sum();
                w[dd] * (cross + own + total.hb_x2[dd])
            })
            .collect();
        let x1 = want_x1.then(|| {
            DMatrix::from_fn(n1, d, |i, dd| {
                w[dd] * (total.gu[dd * n1 + i] + 2.0 * x1r.col(dd, &(i..i + 1))[0] * total.ha[i])
            })
        });
        let mut params = self.to_params(per_dim);
        params.push(self.bias() * total.h_all);
        InnerGrad { params, g_dot_k: total.g_dot_k, x1 }
    }
}
