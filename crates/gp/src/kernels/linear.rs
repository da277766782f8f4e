//! Linear (dot-product) kernel.

use super::param::{self, Positive};
use super::tiling::{
    ROW_TILE, Rows, check_dim, check_grad_shape, check_inputs, copy_column, fill_columns, reduce_column_blocks,
    row_tiles,
};
use super::{Bounds, Kernel, KernelGrad};
use nalgebra::{DMatrix, DMatrixView, DVector, DVectorView};
use serde::{Deserialize, Serialize};
use std::ops::Range;

/// Linear kernel (no offset)
///
/// k(x, x') = Σ_d σ_d² x_d x'_d,
///
/// with one shared variance ([`Linear::isotropic`], any input dimension) or one per dimension
/// ([`Linear::ard`]). Name `"linear"`. Parameters (log scale): `[log σ_1², …]`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Linear {
    variances: Positive,
    ard: bool,
}

/// Partial vjp sums of one column block.
struct LinearPart {
    /// Σ_ij G_ij x1_id x2_jd per dimension.
    params: Vec<f64>,
    /// (G X2)_id over the block (N1×D column-major), if requested.
    gx2: Vec<f64>,
}

impl Linear {
    /// One variance shared by all input dimensions.
    pub fn isotropic(variance: f64) -> Self {
        Self::new(vec![variance], false)
    }
    /// One variance per input dimension (the input dimension is `variances.len()`).
    pub fn ard(variances: Vec<f64>) -> Self {
        Self::new(variances, true)
    }
    fn new(variances: Vec<f64>, ard: bool) -> Self {
        assert!(!variances.is_empty(), "kernel linear: needs at least one variance");
        for &v in &variances {
            assert!(v.is_finite() && v > 0.0, "kernel linear: variances must be positive and finite, got {v}");
        }
        Self { variances: Positive::new(variances), ard }
    }
    /// Variances σ_d² (natural scale): one entry if isotropic.
    pub fn variances(&self) -> &[f64] {
        self.variances.values()
    }
    /// σ_d² for inputs of dimension `d`.
    fn per_dim(&self, d: usize) -> Vec<f64> {
        if self.ard { self.variances().to_vec() } else { vec![self.variances()[0]; d] }
    }
    /// Gradients per input dimension → gradients per parameter.
    fn to_params(&self, per_dim: Vec<f64>) -> Vec<f64> {
        if self.ard { per_dim } else { vec![per_dim.iter().sum()] }
    }
}

impl Kernel for Linear {
    fn name(&self) -> String {
        "linear".to_string()
    }
    fn n_params(&self) -> usize {
        self.variances.len()
    }
    fn params(&self) -> Vec<f64> {
        self.variances.log_values().collect()
    }
    fn set_params(&mut self, p: &[f64]) {
        self.variances.set_log_values("linear", p);
    }
    fn param_names(&self) -> Vec<String> {
        param::names("variance", self.ard, self.variances.len())
    }
    fn bounds(&self) -> Vec<Bounds> {
        self.variances.bounds().to_vec()
    }
    fn set_bounds(&mut self, b: &[Bounds]) {
        self.variances.set_bounds("linear", b);
    }
    fn input_dim(&self) -> Option<usize> {
        self.ard.then_some(self.variances.len())
    }

    fn k(&self, x1: DMatrixView<'_, f64>, x2: DMatrixView<'_, f64>) -> DMatrix<f64> {
        let d = check_inputs("linear", self.input_dim(), &x1, &x2);
        let v = self.per_dim(d);
        let (x1r, n1) = (Rows::new(&x1), x1.nrows());
        fill_columns(n1, x2.nrows(), |j0, block| {
            for rows in row_tiles(n1) {
                for (j, col) in (j0..).zip(block.chunks_exact_mut(n1)) {
                    let out = &mut col[rows.clone()];
                    for (dd, &vd) in v.iter().enumerate() {
                        let c = vd * x2[(j, dd)];
                        let x1d = x1r.col(dd, &rows);
                        out.iter_mut().zip(x1d).for_each(|(o, &a)| *o += c * a);
                    }
                }
            }
        })
    }

    fn diag(&self, x: DMatrixView<'_, f64>) -> DVector<f64> {
        let d = check_dim("linear", self.input_dim(), &x);
        let v = self.per_dim(d);
        DVector::from_fn(x.nrows(), |i, _| (0..d).fold(0.0, |acc, dd| acc + v[dd] * x[(i, dd)] * x[(i, dd)]))
    }

    /// ∂L/∂log σ_d² = σ_d² Σ_ij G_ij x1_id x2_jd; ∂L/∂X1 = (G X2) diag(σ²).
    fn vjp(
        &self,
        x1: DMatrixView<'_, f64>,
        x2: DMatrixView<'_, f64>,
        g: DMatrixView<'_, f64>,
        want_x1: bool,
    ) -> KernelGrad {
        let d = check_inputs("linear", self.input_dim(), &x1, &x2);
        let (n1, n2) = (x1.nrows(), x2.nrows());
        check_grad_shape("linear", &g, n1, n2);
        let v = self.per_dim(d);
        let x1r = Rows::new(&x1);
        let n_x = if want_x1 { n1 * d } else { 0 };

        // Per row tile: accumulate (G X2) over the block's columns, then reduce over the rows.
        let block = |cols: Range<usize>| {
            let mut part = LinearPart { params: vec![0.0; d], gx2: vec![0.0; n_x] };
            let tile = ROW_TILE.min(n1);
            let (mut gcol, mut acc) = (vec![0.0; tile], vec![0.0; tile * d]);
            for rows in row_tiles(n1) {
                let m = rows.len();
                let (gcol, acc) = (&mut gcol[..m], &mut acc[..m * d]);
                acc.fill(0.0);
                for j in cols.clone() {
                    copy_column(&g, j, rows.start, gcol);
                    for (dd, a) in acc.chunks_exact_mut(m).enumerate() {
                        let xj = x2[(j, dd)];
                        a.iter_mut().zip(&*gcol).for_each(|(a, &gij)| *a += gij * xj);
                    }
                }
                for (dd, a) in acc.chunks_exact(m).enumerate() {
                    let x1d = x1r.col(dd, &rows);
                    part.params[dd] += x1d.iter().zip(a).map(|(x, a)| x * a).sum::<f64>();
                    if want_x1 {
                        part.gx2[dd * n1 + rows.start..dd * n1 + rows.end].copy_from_slice(a);
                    }
                }
            }
            part
        };

        let (mut per_dim, mut gx2) = (vec![0.0; d], vec![0.0; n_x]);
        reduce_column_blocks(n1, n2, block, |part| {
            per_dim.iter_mut().zip(&part.params).for_each(|(a, b)| *a += b);
            gx2.iter_mut().zip(&part.gx2).for_each(|(a, b)| *a += b);
        });
        per_dim.iter_mut().zip(&v).for_each(|(p, vd)| *p *= vd);
        let x1 = want_x1.then(|| {
            let mut gx = DMatrix::from_vec(n1, d, gx2);
            gx.column_iter_mut().zip(&v).for_each(|(mut col, &vd)| col *= vd);
            gx
        });
        KernelGrad { params: self.to_params(per_dim), x1 }
    }

    fn diag_vjp(&self, x: DMatrixView<'_, f64>, g: DVectorView<'_, f64>) -> Vec<f64> {
        let d = check_dim("linear", self.input_dim(), &x);
        assert_eq!(g.len(), x.nrows(), "kernel linear: g has the wrong length");
        let v = self.per_dim(d);
        let per_dim =
            (0..d).map(|dd| v[dd] * x.column(dd).iter().zip(g.iter()).map(|(a, gn)| gn * a * a).sum::<f64>()).collect();
        self.to_params(per_dim)
    }

    fn clone_box(&self) -> Box<dyn Kernel> {
        Box::new(self.clone())
    }
}

#[cfg(test)]
mod tests {
    use super::super::test_support::*;
    use super::*;
    use nalgebra::dmatrix;

    fn naive(vs: Vec<f64>) -> impl Fn(&[f64], &[f64]) -> f64 {
        move |a, b| (0..a.len()).map(|d| vs[d.min(vs.len() - 1)] * a[d] * b[d]).sum()
    }

    #[test]
    fn linear_isotropic_gradients_and_properties() {
        check_all(&Linear::isotropic(1.7), 3, 40);
        check_all(&Linear::isotropic(0.6), 1, 41);
    }

    #[test]
    fn linear_ard_gradients_and_properties() {
        check_all(&Linear::ard(vec![0.5, 1.5, 2.5]), 3, 42);
    }

    #[test]
    fn linear_hand_values() {
        let (x, y) = (dmatrix![1.0, 2.0, 3.0], dmatrix![4.0, -5.0, 6.0]);
        let k = Linear::isotropic(2.0);
        assert_close(k.k(x.as_view(), y.as_view())[(0, 0)], 24.0, 0.0, "linear iso");
        let k = Linear::ard(vec![1.0, 2.0, 3.0]);
        assert_close(k.k(x.as_view(), y.as_view())[(0, 0)], 38.0, 0.0, "linear ard");
        assert_close(k.diag(x.as_view())[0], 1.0 + 8.0 + 27.0, 0.0, "linear diag");
    }

    #[test]
    fn linear_metadata() {
        let k = Linear::ard(vec![1.0, 2.0]);
        assert_eq!((k.name(), k.n_params(), k.input_dim()), ("linear".into(), 2, Some(2)));
        assert_eq!(k.param_names(), ["variance[0]", "variance[1]"]);
        let k = Linear::isotropic(3.0);
        assert_eq!((k.param_names(), k.input_dim(), k.variances()), (vec!["variance".into()], None, &[3.0][..]));
    }

    #[test]
    fn linear_parallel_is_deterministic_and_exact() {
        check_parallel(&Linear::isotropic(1.7), 3, naive(vec![1.7]));
        check_parallel(&Linear::ard(vec![0.5, 1.5, 2.5]), 3, naive(vec![0.5, 1.5, 2.5]));
    }
}
