//! Polynomial kernel.

use super::dot_product::InnerProduct;
use super::{Bounds, Kernel, KernelGrad};
use nalgebra::{DMatrix, DMatrixView, DVector, DVectorView};
use serde::{Deserialize, Serialize};

const KIND: &str = "polynomial";

/// Polynomial kernel (GPflow's form; Hughes-Hallett 2022 §2.1.3 uses degree 3)
///
/// k(x, x') = (Σ_d w_d x_d x'_d + c)^p,
///
/// with integer degree p ≥ 1 (fixed, not learned), weight variances w_d > 0 (one shared, or one
/// per input dimension) and offset c > 0. Name `"poly<p>"`, e.g. `"poly3"`. Parameters (log
/// scale): `[log w_1, …, log c]`. A product of p linear-plus-constant kernels, hence positive
/// semidefinite.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Polynomial {
    degree: u32,
    inner: InnerProduct,
}

impl Polynomial {
    /// One weight variance shared by all input dimensions.
    pub fn isotropic(degree: u32, weight_variance: f64, offset: f64) -> Self {
        Self::new(degree, vec![weight_variance], false, offset)
    }
    /// One weight variance per input dimension (the input dimension is `weights.len()`).
    pub fn ard(degree: u32, weight_variances: Vec<f64>, offset: f64) -> Self {
        Self::new(degree, weight_variances, true, offset)
    }
    fn new(degree: u32, weights: Vec<f64>, ard: bool, offset: f64) -> Self {
        assert!(degree >= 1, "kernel polynomial: the degree must be at least 1, got {degree}");
        Self { degree, inner: InnerProduct::new(KIND, weights, ard, offset) }
    }
    pub fn degree(&self) -> u32 {
        self.degree
    }
    /// Weight variances w_d (natural scale): one entry if isotropic.
    pub fn weight_variances(&self) -> &[f64] {
        self.inner.weights()
    }
    /// Offset c (natural scale).
    pub fn offset(&self) -> f64 {
        self.inner.bias()
    }
    fn pow(&self, u: f64) -> f64 {
        u.powi(self.degree as i32)
    }
    /// (u^p, p u^{p−1}).
    fn value_and_slope(&self, u: f64) -> (f64, f64) {
        let p = self.degree as i32;
        (u.powi(p), f64::from(self.degree) * u.powi(p - 1))
    }
}

impl Kernel for Polynomial {
    fn name(&self) -> String {
        format!("poly{}", self.degree)
    }
    fn n_params(&self) -> usize {
        self.inner.n_params()
    }
    fn params(&self) -> Vec<f64> {
        self.inner.params()
    }
    fn set_params(&mut self, p: &[f64]) {
        self.inner.set_params(KIND, p);
    }
    fn param_names(&self) -> Vec<String> {
        self.inner.param_names("offset")
    }
    fn bounds(&self) -> Vec<Bounds> {
        self.inner.bounds()
    }
    fn set_bounds(&mut self, b: &[Bounds]) {
        self.inner.set_bounds(KIND, b);
    }
    fn input_dim(&self) -> Option<usize> {
        self.inner.input_dim()
    }
    fn k(&self, x1: DMatrixView<'_, f64>, x2: DMatrixView<'_, f64>) -> DMatrix<f64> {
        self.inner.k(KIND, x1, x2, |u, _, _| self.pow(u))
    }
    fn diag(&self, x: DMatrixView<'_, f64>) -> DVector<f64> {
        DVector::from_vec(self.inner.diag(KIND, x, |a| self.pow(a)))
    }
    /// ∂k/∂u = p u^{p−1}; k does not depend on ⟨x, x⟩~ or ⟨x', x'⟩~ on their own.
    fn vjp(
        &self,
        x1: DMatrixView<'_, f64>,
        x2: DMatrixView<'_, f64>,
        g: DMatrixView<'_, f64>,
        want_x1: bool,
    ) -> KernelGrad {
        let grad = self.inner.vjp(KIND, x1, x2, g, want_x1, |u, _, _| {
            let (k, ku) = self.value_and_slope(u);
            (k, ku, 0.0, 0.0)
        });
        KernelGrad { params: grad.params, x1: grad.x1 }
    }
    fn diag_vjp(&self, x: DMatrixView<'_, f64>, g: DVectorView<'_, f64>) -> Vec<f64> {
        self.inner.diag_vjp(KIND, x, g, |a| self.value_and_slope(a)).0
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

    fn naive(p: u32, ws: Vec<f64>, c: f64) -> impl Fn(&[f64], &[f64]) -> f64 {
        move |a, b| ((0..a.len()).map(|d| ws[d.min(ws.len() - 1)] * a[d] * b[d]).sum::<f64>() + c).powi(p as i32)
    }

    #[test]
    fn polynomial_gradients_and_properties() {
        for p in 1..=4 {
            check_all(&Polynomial::isotropic(p, 0.7, 0.4), 3, 60 + u64::from(p));
            check_all(&Polynomial::ard(p, vec![0.5, 1.5], 1.3), 2, 70 + u64::from(p));
        }
        check_all(&Polynomial::isotropic(3, 1.0, 1.0), 1, 75);
    }

    #[test]
    fn polynomial_hand_values() {
        let (x, y) = (dmatrix![1.0, 2.0], dmatrix![3.0, -1.0]);
        let k = Polynomial::ard(3, vec![2.0, 0.5], 1.5);
        // 2·1·3 + 0.5·2·(−1) + 1.5 = 6.5; 6.5³ = 274.625
        assert_close(k.k(x.as_view(), y.as_view())[(0, 0)], 274.625, 1e-12, "poly3");
        assert_close(k.diag(x.as_view())[0], (2.0 + 2.0 + 1.5f64).powi(3), 1e-12, "poly3 diag");
        // Degree 1 is a linear kernel plus a constant.
        let k1 = Polynomial::isotropic(1, 0.8, 0.3);
        assert_close(k1.k(x.as_view(), y.as_view())[(0, 0)], 0.8 * (3.0 - 2.0) + 0.3, 1e-15, "poly1");
    }

    #[test]
    fn polynomial_metadata() {
        let k = Polynomial::ard(3, vec![1.0, 2.0], 0.5);
        assert_eq!((k.name(), k.n_params(), k.input_dim(), k.degree()), ("poly3".into(), 3, Some(2), 3));
        assert_eq!(k.param_names(), ["weight_variance[0]", "weight_variance[1]", "offset"]);
        let k = Polynomial::isotropic(2, 3.0, 0.5);
        assert_eq!((k.param_names(), k.input_dim()), (vec!["weight_variance".into(), "offset".into()], None));
        assert_eq!((k.weight_variances(), k.offset()), (&[3.0][..], 0.5));
    }

    #[test]
    fn polynomial_parallel_is_deterministic_and_exact() {
        check_parallel(&Polynomial::isotropic(3, 0.7, 0.4), 3, naive(3, vec![0.7], 0.4));
        check_parallel(&Polynomial::ard(2, vec![0.5, 1.5, 2.5], 1.0), 3, naive(2, vec![0.5, 1.5, 2.5], 1.0));
    }
}
