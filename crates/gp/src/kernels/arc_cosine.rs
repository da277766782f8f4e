//! Arc-cosine kernels of Cho & Saul (2009).

use super::dot_product::{InnerProduct, Partials};
use super::param::{self, Positive};
use super::{Bounds, Kernel, KernelGrad};
use nalgebra::{DMatrix, DMatrixView, DVector, DVectorView};
use serde::{Deserialize, Serialize};
use std::f64::consts::PI;

const KIND: &str = "arc-cosine";

/// Order n of an arc-cosine kernel: the covariance of an infinitely wide one-layer network with
/// step (n = 0) or ReLU (n = 1) activations (Cho & Saul 2009, eq 1).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum ArcCosineOrder {
    /// J₀(θ) = π − θ: piecewise-constant sample paths (step functions).
    Zero,
    /// J₁(θ) = sin θ + (π − θ) cos θ: piecewise-linear sample paths.
    One,
}

/// Arc-cosine kernel (Cho & Saul 2009, eqs 1–3; GPflow's `ArcCosine` form, used for step
/// functions by Hughes-Hallett 2022 §3.2)
///
/// k(x, x') = s² (1/π) ‖x‖~ⁿ ‖x'‖~ⁿ J_n(θ),   cos θ = ⟨x, x'⟩~ / (‖x‖~ ‖x'‖~),
///
/// where ⟨x, x'⟩~ = Σ_d w_d x_d x'_d + b (weight variances w_d, bias variance b) and ‖x‖~² =
/// ⟨x, x⟩~. With u = ⟨x, x'⟩~, a = ‖x‖~², a' = ‖x'‖~² and r = a a' − u² the kernel is
/// s²(1 − θ/π) for n = 0 and (s²/π)(√r + (π − θ) u) for n = 1, θ = atan2(√r, u), and
/// k(x, x) = s² aⁿ. Name `"arccos0"` / `"arccos1"`. Parameters (log scale):
/// `[log s², log w_1, …, log b]`.
///
/// Order 0 is not differentiable where θ = 0 (x' a positive multiple of x in the augmented
/// space, e.g. coincident points): there its gradient is taken as the one of k(x, x) = s²,
/// i.e. zero in w, b and the inputs — the subgradient that the diagonal of K(X, X) needs. Its
/// derivatives grow like 1/sin θ as two points become parallel.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ArcCosine {
    order: ArcCosineOrder,
    /// s² (the parameter vector's first entry; the inner product's follow).
    variance: Positive,
    inner: InnerProduct,
}

/// Below this r/(a a') = sin²θ order 0 treats the pair as parallel (θ ≈ 1e-7).
const PARALLEL: f64 = 1e-14;

impl ArcCosine {
    /// One weight variance shared by all input dimensions.
    pub fn isotropic(order: ArcCosineOrder, variance: f64, weight_variance: f64, bias_variance: f64) -> Self {
        Self::new(order, variance, vec![weight_variance], false, bias_variance)
    }
    /// One weight variance per input dimension (the input dimension is `weights.len()`).
    pub fn ard(order: ArcCosineOrder, variance: f64, weight_variances: Vec<f64>, bias_variance: f64) -> Self {
        Self::new(order, variance, weight_variances, true, bias_variance)
    }
    fn new(order: ArcCosineOrder, variance: f64, weights: Vec<f64>, ard: bool, bias: f64) -> Self {
        assert!(
            variance.is_finite() && variance > 0.0,
            "kernel arc-cosine: variance must be positive and finite, got {variance}"
        );
        let inner = InnerProduct::new(KIND, weights, ard, bias);
        Self { order, variance: Positive::new(vec![variance]), inner }
    }
    pub fn order(&self) -> ArcCosineOrder {
        self.order
    }
    /// s² (natural scale).
    pub fn variance(&self) -> f64 {
        self.variance.values()[0]
    }
    /// Weight variances w_d (natural scale): one entry if isotropic.
    pub fn weight_variances(&self) -> &[f64] {
        self.inner.weights()
    }
    /// Bias variance b (natural scale).
    pub fn bias_variance(&self) -> f64 {
        self.inner.bias()
    }

    /// k and (∂k/∂u, ∂k/∂a, ∂k/∂a') at one pair.
    fn partials(&self, u: f64, a: f64, b: f64) -> Partials {
        let s2 = self.variance();
        let r = (a * b - u * u).max(0.0);
        let sr = r.sqrt();
        let theta = sr.atan2(u);
        match self.order {
            ArcCosineOrder::Zero => {
                let k = s2 * (1.0 - theta / PI);
                if r <= PARALLEL * a * b {
                    return (k, 0.0, 0.0, 0.0);
                }
                let c = s2 / (PI * sr);
                (k, c, -0.5 * c * u / a, -0.5 * c * u / b)
            }
            ArcCosineOrder::One => {
                let k = s2 / PI * (sr + (PI - theta) * u);
                let c = s2 * sr / (2.0 * PI);
                (k, s2 * (PI - theta) / PI, c / a, c / b)
            }
        }
    }

    /// (k(x, x), dk(x, x)/da) with a = ‖x‖~².
    fn diagonal(&self, a: f64) -> (f64, f64) {
        match self.order {
            ArcCosineOrder::Zero => (self.variance(), 0.0),
            ArcCosineOrder::One => (self.variance() * a, self.variance()),
        }
    }
}

impl Kernel for ArcCosine {
    fn name(&self) -> String {
        match self.order {
            ArcCosineOrder::Zero => "arccos0".into(),
            ArcCosineOrder::One => "arccos1".into(),
        }
    }
    fn n_params(&self) -> usize {
        1 + self.inner.n_params()
    }
    fn params(&self) -> Vec<f64> {
        param::log_values(&[&self.variance, self.inner.positive()])
    }
    fn set_params(&mut self, p: &[f64]) {
        param::set_log_values(KIND, &mut [&mut self.variance, self.inner.positive_mut()], p);
    }
    fn param_names(&self) -> Vec<String> {
        [vec!["variance".to_string()], self.inner.param_names("bias_variance")].concat()
    }
    fn bounds(&self) -> Vec<Bounds> {
        param::bounds(&[&self.variance, self.inner.positive()])
    }
    fn set_bounds(&mut self, b: &[Bounds]) {
        param::set_bounds(KIND, &mut [&mut self.variance, self.inner.positive_mut()], b);
    }
    fn input_dim(&self) -> Option<usize> {
        self.inner.input_dim()
    }
    fn k(&self, x1: DMatrixView<'_, f64>, x2: DMatrixView<'_, f64>) -> DMatrix<f64> {
        self.inner.k(KIND, x1, x2, |u, a, b| self.partials(u, a, b).0)
    }
    fn diag(&self, x: DMatrixView<'_, f64>) -> DVector<f64> {
        DVector::from_vec(self.inner.diag(KIND, x, |a| self.diagonal(a).0))
    }
    /// The chain rule through u, a and a' (module `dot_product`); ∂L/∂ log s² = Σ G∘K.
    fn vjp(
        &self,
        x1: DMatrixView<'_, f64>,
        x2: DMatrixView<'_, f64>,
        g: DMatrixView<'_, f64>,
        want_x1: bool,
    ) -> KernelGrad {
        let grad = self.inner.vjp(KIND, x1, x2, g, want_x1, |u, a, b| self.partials(u, a, b));
        KernelGrad { params: [vec![grad.g_dot_k], grad.params].concat(), x1: grad.x1 }
    }
    fn diag_vjp(&self, x: DMatrixView<'_, f64>, g: DVectorView<'_, f64>) -> Vec<f64> {
        let (inner, g_dot_k) = self.inner.diag_vjp(KIND, x, g, |a| self.diagonal(a));
        [vec![g_dot_k], inner].concat()
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

    /// Cho & Saul's definition, directly: s²/π ‖x‖ⁿ‖x'‖ⁿ J_n(arccos(cos θ)).
    fn naive(order: ArcCosineOrder, s2: f64, ws: Vec<f64>, b: f64) -> impl Fn(&[f64], &[f64]) -> f64 {
        move |x, y| {
            let dot =
                |p: &[f64], q: &[f64]| (0..p.len()).map(|d| ws[d.min(ws.len() - 1)] * p[d] * q[d]).sum::<f64>() + b;
            let (nx, ny) = (dot(x, x).sqrt(), dot(y, y).sqrt());
            let theta = (dot(x, y) / (nx * ny)).clamp(-1.0, 1.0).acos();
            match order {
                ArcCosineOrder::Zero => s2 / PI * (PI - theta),
                ArcCosineOrder::One => s2 / PI * nx * ny * (theta.sin() + (PI - theta) * theta.cos()),
            }
        }
    }

    const ORDERS: [ArcCosineOrder; 2] = [ArcCosineOrder::Zero, ArcCosineOrder::One];

    #[test]
    fn arc_cosine_gradients_and_properties() {
        for (i, order) in ORDERS.into_iter().enumerate() {
            let s = 80 + 10 * i as u64;
            check_all(&ArcCosine::isotropic(order, 1.3, 0.8, 0.5), 3, s);
            check_all(&ArcCosine::ard(order, 0.7, vec![0.5, 2.0], 1.2), 2, s + 1);
            check_all(&ArcCosine::isotropic(order, 1.0, 1.0, 0.1), 1, s + 2);
        }
    }

    #[test]
    fn arc_cosine_hand_values() {
        // w = 1, b = 1: x̃ = (1, 1), ỹ = (−1, 1) are orthogonal, θ = π/2, ‖x̃‖ = ‖ỹ‖ = √2.
        let (x, y) = (dmatrix![1.0], dmatrix![-1.0]);
        let k0 = ArcCosine::isotropic(ArcCosineOrder::Zero, 2.0, 1.0, 1.0);
        assert_close(k0.k(x.as_view(), y.as_view())[(0, 0)], 1.0, 1e-15, "arccos0 at π/2");
        let k1 = ArcCosine::isotropic(ArcCosineOrder::One, 2.0, 1.0, 1.0);
        // s²/π · 2 · (sin π/2 + π/2 · 0) = 4/π
        assert_close(k1.k(x.as_view(), y.as_view())[(0, 0)], 4.0 / PI, 1e-15, "arccos1 at π/2");
        // Opposite directions (θ = π): order 0 gives 0, order 1 gives 0.
        let (x, y) = (dmatrix![3.0, 0.0], dmatrix![-3.0, 0.0]);
        let k0 = ArcCosine::isotropic(ArcCosineOrder::Zero, 1.0, 1.0, 1e-6);
        assert!(k0.k(x.as_view(), y.as_view())[(0, 0)].abs() < 1e-3);
        // k(x, x) = s² ‖x̃‖^{2n}.
        let k1 = ArcCosine::ard(ArcCosineOrder::One, 1.5, vec![2.0, 0.5], 0.25);
        assert_close(k1.diag(x.as_view())[0], 1.5 * (2.0 * 9.0 + 0.25), 1e-14, "arccos1 diag");
    }

    /// The subgradient at coincident points matches the gradient of the diagonal, so the
    /// gradient of a K(X, X) objective is finite and right.
    #[test]
    fn arc_cosine_gradient_through_k_x_x() {
        let mut r = rng(7);
        let x = uniform(&mut r, 6, 2, -1.0, 1.0);
        let gs = uniform(&mut r, 6, 6, -1.0, 1.0);
        let g = (&gs + gs.transpose()) * 0.5;
        for order in ORDERS {
            let k = ArcCosine::ard(order, 1.1, vec![0.6, 1.4], 0.3);
            check_param_grad(&k, &x, &x, &g);
        }
    }

    #[test]
    fn arc_cosine_metadata() {
        let k = ArcCosine::ard(ArcCosineOrder::One, 1.0, vec![1.0, 2.0], 0.5);
        assert_eq!((k.name(), k.n_params(), k.input_dim()), ("arccos1".into(), 4, Some(2)));
        assert_eq!(k.param_names(), ["variance", "weight_variance[0]", "weight_variance[1]", "bias_variance"]);
        let k = ArcCosine::isotropic(ArcCosineOrder::Zero, 2.0, 3.0, 0.5);
        assert_eq!((k.name(), k.input_dim(), k.order()), ("arccos0".into(), None, ArcCosineOrder::Zero));
        assert_eq!((k.variance(), k.weight_variances(), k.bias_variance()), (2.0, &[3.0][..], 0.5));
    }

    #[test]
    fn arc_cosine_parallel_is_deterministic_and_exact() {
        for order in ORDERS {
            check_parallel(&ArcCosine::isotropic(order, 1.3, 0.8, 0.5), 3, naive(order, 1.3, vec![0.8], 0.5));
            let ws = vec![0.5, 1.5, 2.5];
            check_parallel(&ArcCosine::ard(order, 0.7, ws.clone(), 1.0), 3, naive(order, 0.7, ws, 1.0));
        }
    }
}
