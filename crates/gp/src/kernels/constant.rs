//! Constant kernel.

use super::param::Positive;
use super::tiling::{check_grad_shape, check_inputs, reduce_column_blocks};
use super::{Bounds, Kernel, KernelGrad};
use nalgebra::{DMatrix, DMatrixView, DVector, DVectorView};
use serde::{Deserialize, Serialize};

/// Constant kernel
///
/// k(x, x') = σ²
///
/// for inputs of any dimension. Name `"constant"`. Parameters (log scale): `[log σ²]`.
/// Its input gradient is zero.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Constant {
    variance: Positive,
}

impl Constant {
    /// Constant kernel with value σ² = `variance` (positive, finite).
    pub fn new(variance: f64) -> Self {
        assert!(
            variance.is_finite() && variance > 0.0,
            "kernel constant: variance must be positive and finite, got {variance}"
        );
        Self { variance: Positive::new(vec![variance]) }
    }
    /// Variance σ² (natural scale).
    pub fn variance(&self) -> f64 {
        self.variance.values()[0]
    }
}

impl Kernel for Constant {
    fn name(&self) -> String {
        "constant".to_string()
    }
    fn n_params(&self) -> usize {
        1
    }
    fn params(&self) -> Vec<f64> {
        self.variance.log_values().collect()
    }
    fn set_params(&mut self, p: &[f64]) {
        self.variance.set_log_values("constant", p);
    }
    fn param_names(&self) -> Vec<String> {
        vec!["variance".to_string()]
    }
    fn bounds(&self) -> Vec<Bounds> {
        self.variance.bounds().to_vec()
    }
    fn set_bounds(&mut self, b: &[Bounds]) {
        self.variance.set_bounds("constant", b);
    }
    fn input_dim(&self) -> Option<usize> {
        None
    }
    fn k(&self, x1: DMatrixView<'_, f64>, x2: DMatrixView<'_, f64>) -> DMatrix<f64> {
        check_inputs("constant", None, &x1, &x2);
        DMatrix::from_element(x1.nrows(), x2.nrows(), self.variance())
    }
    fn diag(&self, x: DMatrixView<'_, f64>) -> DVector<f64> {
        DVector::from_element(x.nrows(), self.variance())
    }
    /// ∂L/∂log σ² = σ² Σ G; ∂L/∂X1 = 0.
    fn vjp(
        &self,
        x1: DMatrixView<'_, f64>,
        x2: DMatrixView<'_, f64>,
        g: DMatrixView<'_, f64>,
        want_x1: bool,
    ) -> KernelGrad {
        let d = check_inputs("constant", None, &x1, &x2);
        let (n1, n2) = (x1.nrows(), x2.nrows());
        check_grad_shape("constant", &g, n1, n2);
        let block_sum = |cols: std::ops::Range<usize>| -> f64 { cols.map(|j| g.column(j).iter().sum::<f64>()).sum() };
        let mut sum = 0.0;
        reduce_column_blocks(n1, n2, block_sum, |s| sum += s);
        KernelGrad { params: vec![self.variance() * sum], x1: want_x1.then(|| DMatrix::zeros(n1, d)) }
    }
    fn diag_vjp(&self, x: DMatrixView<'_, f64>, g: DVectorView<'_, f64>) -> Vec<f64> {
        assert_eq!(g.len(), x.nrows(), "kernel constant: g has the wrong length");
        vec![self.variance() * g.iter().sum::<f64>()]
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

    #[test]
    fn constant_gradients_and_properties() {
        check_all(&Constant::new(2.3), 3, 50);
        check_all(&Constant::new(0.4), 1, 51);
    }

    #[test]
    fn constant_hand_values() {
        let k = Constant::new(3.5);
        let (x, y) = (dmatrix![1.0, 2.0; 0.0, 0.0], dmatrix![-4.0, 9.0]);
        assert_eq!(k.k(x.as_view(), y.as_view()), dmatrix![3.5; 3.5]);
        assert_eq!(k.diag(x.as_view()), nalgebra::dvector![3.5, 3.5]);
        let gx = k.vjp(x.as_view(), y.as_view(), dmatrix![1.0; 2.0].as_view(), true);
        assert_eq!(gx.params, vec![3.5 * 3.0]);
        assert_eq!(gx.x1.unwrap(), DMatrix::zeros(2, 2));
        assert_eq!((k.name(), k.n_params(), k.input_dim()), ("constant".into(), 1, None));
    }

    #[test]
    fn constant_parallel_is_deterministic_and_exact() {
        check_parallel(&Constant::new(2.3), 3, |_, _| 2.3);
    }
}
