//! Matérn kernels with ν ∈ {1/2, 3/2, 5/2}.

use super::stationary::{Profile, Stationary, delegate_stationary};
use super::{Bounds, Kernel, KernelGrad};
use nalgebra::{DMatrix, DMatrixView, DVector, DVectorView};
use serde::{Deserialize, Serialize};

/// Smoothness ν of a [`Matern`] kernel.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum MaternNu {
    /// ν = 1/2: s² e^{−r} (exponential / Ornstein–Uhlenbeck kernel; GPflow's `Matern12`,
    /// whereas GPflow's `Exponential` is s² e^{−r/2}).
    Half,
    /// ν = 3/2: s² (1 + √3 r) e^{−√3 r}.
    ThreeHalves,
    /// ν = 5/2: s² (1 + √5 r + 5r²/3) e^{−√5 r}.
    FiveHalves,
}

impl MaternNu {
    fn base_name(self) -> &'static str {
        match self {
            MaternNu::Half => "matern12",
            MaternNu::ThreeHalves => "matern32",
            MaternNu::FiveHalves => "matern52",
        }
    }
}

/// f = e^{−r}; df/d(r²) = −e^{−r}/(2r), with the subgradient 0 at r = 0.
#[derive(Debug, Clone, Copy)]
struct Half;
/// f = (1 + √3 r) e^{−√3 r}; df/d(r²) = −(3/2) e^{−√3 r}.
#[derive(Debug, Clone, Copy)]
struct ThreeHalves;
/// f = (1 + √5 r + 5r²/3) e^{−√5 r}; df/d(r²) = −(5/6)(1 + √5 r) e^{−√5 r}.
#[derive(Debug, Clone, Copy)]
struct FiveHalves;

const SQRT3: f64 = 1.732_050_807_568_877_2;
const SQRT5: f64 = 2.236_067_977_499_79;

impl Profile for Half {
    #[inline]
    fn f(self, r2: f64) -> f64 {
        (-r2.sqrt()).exp()
    }
    #[inline]
    fn f_df(self, r2: f64) -> (f64, f64) {
        let r = r2.sqrt();
        let e = (-r).exp();
        (e, if r > 0.0 { -0.5 * e / r } else { 0.0 })
    }
}

impl Profile for ThreeHalves {
    #[inline]
    fn f(self, r2: f64) -> f64 {
        let a = SQRT3 * r2.sqrt();
        (1.0 + a) * (-a).exp()
    }
    #[inline]
    fn f_df(self, r2: f64) -> (f64, f64) {
        let a = SQRT3 * r2.sqrt();
        let e = (-a).exp();
        ((1.0 + a) * e, -1.5 * e)
    }
}

impl Profile for FiveHalves {
    #[inline]
    fn f(self, r2: f64) -> f64 {
        let a = SQRT5 * r2.sqrt();
        (1.0 + a + (5.0 / 3.0) * r2) * (-a).exp()
    }
    #[inline]
    fn f_df(self, r2: f64) -> (f64, f64) {
        let a = SQRT5 * r2.sqrt();
        let e = (-a).exp();
        ((1.0 + a + (5.0 / 3.0) * r2) * e, -(5.0 / 6.0) * (1.0 + a) * e)
    }
}

/// Runs `$body` with `$p` bound to the profile of `$nu` (monomorphised per ν).
macro_rules! with_profile {
    ($nu:expr, $p:ident => $body:expr) => {
        match $nu {
            MaternNu::Half => {
                let $p = Half;
                $body
            }
            MaternNu::ThreeHalves => {
                let $p = ThreeHalves;
                $body
            }
            MaternNu::FiveHalves => {
                let $p = FiveHalves;
                $body
            }
        }
    };
}

/// Matérn kernel, with r² = Σ_d (x_d − x'_d)²/ℓ_d²:
///
/// - ν = 1/2: k = s² e^{−r}
/// - ν = 3/2: k = s² (1 + √3 r) e^{−√3 r}
/// - ν = 5/2: k = s² (1 + √5 r + 5r²/3) e^{−√5 r}
///
/// with one shared length-scale ([`Matern::isotropic`], names `"matern12"`, `"matern32"`,
/// `"matern52"`, any input dimension) or one per dimension ([`Matern::ard`], same names with
/// `"-ard"`). Parameters (log scale): `[log s², log ℓ_1, …]`.
///
/// At r = 0 (coincident points) ν = 1/2 is not differentiable in the inputs: its input gradient
/// uses the subgradient 0 there. All gradients are finite everywhere.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Matern {
    nu: MaternNu,
    core: Stationary,
}

impl Matern {
    /// One length-scale shared by all input dimensions.
    pub fn isotropic(nu: MaternNu, variance: f64, lengthscale: f64) -> Self {
        Self { nu, core: Stationary::new(nu.base_name(), variance, vec![lengthscale], false) }
    }
    /// One length-scale per input dimension (the input dimension is `lengthscales.len()`).
    pub fn ard(nu: MaternNu, variance: f64, lengthscales: Vec<f64>) -> Self {
        Self { nu, core: Stationary::new(nu.base_name(), variance, lengthscales, true) }
    }
    /// Smoothness ν.
    pub fn nu(&self) -> MaternNu {
        self.nu
    }
    /// Variance s² (natural scale).
    pub fn variance(&self) -> f64 {
        self.core.variance()
    }
    /// Length-scales (natural scale): one entry if isotropic.
    pub fn lengthscales(&self) -> &[f64] {
        self.core.lengthscales()
    }
}

impl Kernel for Matern {
    delegate_stationary!();
    fn name(&self) -> String {
        let suffix = if self.core.is_ard() { "-ard" } else { "" };
        format!("{}{suffix}", self.nu.base_name())
    }
    fn k(&self, x1: DMatrixView<'_, f64>, x2: DMatrixView<'_, f64>) -> DMatrix<f64> {
        with_profile!(self.nu, p => self.core.k(p, &self.name(), x1, x2))
    }
    fn k_into(&self, x1: DMatrixView<'_, f64>, x2: DMatrixView<'_, f64>, out: &mut DMatrix<f64>) {
        with_profile!(self.nu, p => self.core.k_into(p, &self.name(), x1, x2, out))
    }
    fn vjp(
        &self,
        x1: DMatrixView<'_, f64>,
        x2: DMatrixView<'_, f64>,
        g: DMatrixView<'_, f64>,
        want_x1: bool,
    ) -> KernelGrad {
        with_profile!(self.nu, p => self.core.vjp(p, &self.name(), x1, x2, g, want_x1))
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

    const NUS: [MaternNu; 3] = [MaternNu::Half, MaternNu::ThreeHalves, MaternNu::FiveHalves];

    fn naive(nu: MaternNu, var: f64, ls: Vec<f64>) -> impl Fn(&[f64], &[f64]) -> f64 {
        move |a, b| {
            let r2: f64 = (0..a.len()).map(|d| ((a[d] - b[d]) / ls[d.min(ls.len() - 1)]).powi(2)).sum();
            let r = r2.sqrt();
            var * match nu {
                MaternNu::Half => (-r).exp(),
                MaternNu::ThreeHalves => (1.0 + 3f64.sqrt() * r) * (-(3f64.sqrt()) * r).exp(),
                MaternNu::FiveHalves => (1.0 + 5f64.sqrt() * r + 5.0 * r2 / 3.0) * (-(5f64.sqrt()) * r).exp(),
            }
        }
    }

    fn value(k: &Matern, x: &[f64], y: &[f64]) -> f64 {
        let (x, y) = (DMatrix::from_row_slice(1, x.len(), x), DMatrix::from_row_slice(1, y.len(), y));
        k.k(x.as_view(), y.as_view())[(0, 0)]
    }

    #[test]
    fn matern_isotropic_gradients_and_properties() {
        for (s, nu) in NUS.into_iter().enumerate() {
            let k = Matern::isotropic(nu, 1.3, 0.9);
            check_all(&k, 3, 10 + s as u64);
            check_all(&k, 1, 20 + s as u64);
        }
    }

    #[test]
    fn matern_ard_gradients_and_properties() {
        for (s, nu) in NUS.into_iter().enumerate() {
            check_all(&Matern::ard(nu, 0.8, vec![0.7, 1.3, 2.2]), 3, 30 + s as u64);
        }
    }

    #[test]
    fn matern_hand_values() {
        let k = Matern::isotropic(MaternNu::Half, 2.0, 2.0);
        assert_close(value(&k, &[0.0], &[3.0]), 0.44626032029685964, 0.0, "matern12");
        let k = Matern::isotropic(MaternNu::ThreeHalves, 1.0, 3f64.sqrt());
        assert_close(value(&k, &[0.0], &[1.0]), 0.7357588823428847, 0.0, "matern32");
        let k = Matern::isotropic(MaternNu::FiveHalves, 1.0, 5f64.sqrt());
        assert_close(value(&k, &[0.0], &[1.0]), 0.8583853627333655, 0.0, "matern52");
        // ARD, r = 1 from t = (0.6, 0.8).
        let expected = [0.36787944117144233, 0.4833577245965077, 0.5239941088318203];
        for (nu, e) in NUS.into_iter().zip(expected) {
            let k = Matern::ard(nu, 1.0, vec![1.0, 2.0]);
            assert_close(value(&k, &[0.0, 0.0], &[0.6, 1.6]), e, 0.0, &k.name());
            assert_eq!(value(&k, &[0.3, 0.4], &[0.3, 0.4]), 1.0);
        }
    }

    #[test]
    fn matern_names() {
        let names: Vec<String> = NUS.iter().map(|&nu| Matern::isotropic(nu, 1.0, 1.0).name()).collect();
        assert_eq!(names, ["matern12", "matern32", "matern52"]);
        let k = Matern::ard(MaternNu::FiveHalves, 1.0, vec![1.0; 4]);
        assert_eq!((k.name(), k.input_dim(), k.nu()), ("matern52-ard".into(), Some(4), MaternNu::FiveHalves));
    }

    #[test]
    fn matern_parallel_is_deterministic_and_exact() {
        for nu in NUS {
            check_parallel(&Matern::isotropic(nu, 1.3, 0.9), 2, naive(nu, 1.3, vec![0.9]));
            let ls = vec![0.7, 1.3, 2.2];
            check_parallel(&Matern::ard(nu, 0.8, ls.clone()), 3, naive(nu, 0.8, ls));
        }
    }

    /// (i) At r = 0 every gradient is finite; the length-scale gradients match finite
    /// differences, and so does the input gradient for the differentiable ν = 3/2, 5/2.
    #[test]
    fn matern_gradients_at_zero_distance_are_finite() {
        let mut r = rng(7);
        let x = uniform(&mut r, 4, 3, -1.0, 1.0);
        // Rows 1..5 of x2 coincide with the rows of x.
        let x2 = DMatrix::from_fn(5, 3, |i, d| if i == 0 { 0.1 } else { x[(i - 1, d)] });
        let g = uniform(&mut r, 4, 5, -1.0, 1.0);
        for nu in NUS {
            for k in [Matern::isotropic(nu, 1.1, 0.8), Matern::ard(nu, 1.1, vec![0.8, 1.2, 0.5])] {
                let grad = k.vjp(x.as_view(), x2.as_view(), g.as_view(), true);
                assert!(grad.params.iter().all(|v| v.is_finite()), "{}", k.name());
                assert!(grad.x1.as_ref().unwrap().iter().all(|v| v.is_finite()), "{}", k.name());
                let same = k.vjp(x.as_view(), x.as_view(), g.columns(0, 4), true);
                assert!(same.x1.unwrap().iter().all(|v| v.is_finite()), "{}", k.name());
                check_param_grad(&k, &x, &x2, &g);
                if nu != MaternNu::Half {
                    check_x1_grad(&k, &x, &x2, &g);
                }
            }
        }
        // ν = 1/2: the subgradient 0 at r = 0, i.e. only the pair at r > 0 contributes.
        let k = Matern::isotropic(MaternNu::Half, 1.0, 1.0);
        let (x, y) = (dmatrix![0.0], dmatrix![0.0, 1.0].transpose());
        let gx = k.vjp(x.as_view(), y.as_view(), dmatrix![1.0, 0.0].as_view(), true).x1.unwrap();
        assert_eq!(gx[(0, 0)], 0.0);
    }
}
