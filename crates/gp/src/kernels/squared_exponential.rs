//! Squared-exponential (RBF) kernel.

use super::stationary::{Profile, Stationary, delegate_stationary};
use super::tiling::*;
use super::vexp;
use super::{Bounds, Kernel, KernelGrad};
use nalgebra::{DMatrix, DMatrixView, DVector, DVectorView};
use rayon::prelude::*;
use serde::{Deserialize, Serialize};

thread_local! {
    /// [`SquaredExponential::vjp_given_k`]'s W block, one per thread, kept between calls.
    static W_BUFFER: std::cell::RefCell<Vec<f64>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// f(r²) = exp(−r²/2).
#[derive(Debug, Clone, Copy)]
pub(super) struct SeProfile;

impl Profile for SeProfile {
    #[inline]
    fn f(self, r2: f64) -> f64 {
        (-0.5 * r2).exp()
    }
    #[inline]
    fn f_df(self, r2: f64) -> (f64, f64) {
        let f = (-0.5 * r2).exp();
        (f, -0.5 * f)
    }
    #[inline]
    fn f_slice(self, r2: &mut [f64]) {
        r2.iter_mut().for_each(|v| *v *= -0.5);
        vexp::exp_in_place(r2);
    }
    const EXP_NEG_HALF: bool = true;
}

/// Squared-exponential (RBF) kernel
///
/// k(x, x') = s² exp(−r²/2),  r² = Σ_d (x_d − x'_d)²/ℓ_d²,
///
/// with one shared length-scale ([`SquaredExponential::isotropic`], name `"se"`, any input
/// dimension) or one per dimension ([`SquaredExponential::ard`], name `"se-ard"`).
/// Parameters (log scale): `[log s², log ℓ_1, …]`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SquaredExponential {
    core: Stationary,
}

impl SquaredExponential {
    /// One length-scale shared by all input dimensions.
    pub fn isotropic(variance: f64, lengthscale: f64) -> Self {
        Self { core: Stationary::new("se", variance, vec![lengthscale], false) }
    }
    /// One length-scale per input dimension (the input dimension is `lengthscales.len()`).
    pub fn ard(variance: f64, lengthscales: Vec<f64>) -> Self {
        Self { core: Stationary::new("se-ard", variance, lengthscales, true) }
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

impl Kernel for SquaredExponential {
    delegate_stationary!();
    fn as_squared_exponential(&self) -> Option<&SquaredExponential> {
        Some(self)
    }
    fn name(&self) -> String {
        if self.core.is_ard() { "se-ard" } else { "se" }.to_string()
    }
    fn k(&self, x1: DMatrixView<'_, f64>, x2: DMatrixView<'_, f64>) -> DMatrix<f64> {
        self.core.k(SeProfile, &self.name(), x1, x2)
    }
    fn k_into(&self, x1: DMatrixView<'_, f64>, x2: DMatrixView<'_, f64>, out: &mut DMatrix<f64>) {
        self.core.k_into(SeProfile, &self.name(), x1, x2, out)
    }
    fn vjp(
        &self,
        x1: DMatrixView<'_, f64>,
        x2: DMatrixView<'_, f64>,
        g: DMatrixView<'_, f64>,
        want_x1: bool,
    ) -> KernelGrad {
        self.core.vjp(SeProfile, &self.name(), x1, x2, g, want_x1)
    }
    /// With W = G∘K (so Σ W = s²Σ G f and s² f' = −½ f·s²):
    /// ∂/∂log s² = Σ W; ∂/∂log ℓ_d = Σ_ij W_ij (x1_id − x2_jd)²/ℓ_d²;
    /// ∂/∂x1_id = −Σ_j W_ij (x1_id − x2_jd)/ℓ_d². The squared differences are expanded into
    /// row/column sums and one W·X2 product (after centring both inputs on X1's column means),
    /// so the cost is O(N1·N2·D) multiply-adds with no exponentials.
    fn vjp_given_k(
        &self,
        x1: DMatrixView<'_, f64>,
        x2: DMatrixView<'_, f64>,
        k: DMatrixView<'_, f64>,
        g: DMatrixView<'_, f64>,
        want_x1: bool,
    ) -> KernelGrad {
        let name = self.name();
        let d = check_inputs(&name, self.core.input_dim(), &x1, &x2);
        let (n1, n2) = (x1.nrows(), x2.nrows());
        check_grad_shape(&name, &g, n1, n2);
        check_grad_shape(&name, &k, n1, n2);
        // One fused pass over the columns of W = G∘K (never stored): row sums, column sums
        // and W·X2 (after centring both inputs on X1's column means).
        let center: Vec<f64> = (0..d).map(|c| x1.column(c).mean()).collect();
        let x1c = DMatrix::from_fn(n1, d, |i, c| x1[(i, c)] - center[c]);
        // Fixed column chunks (shape-determined) processed in parallel, reduced in order.
        const CHUNK: usize = 512;
        let chunks: Vec<(usize, usize)> = (0..n2).step_by(CHUNK).map(|s| (s, CHUNK.min(n2 - s))).collect();
        let parts: Vec<(Vec<f64>, DMatrix<f64>, Vec<f64>)> = chunks
            .par_iter()
            .map(|&(start, len)| {
                // W for this chunk (n1×len, column-major, in a per-thread buffer kept between
                // calls: rayon may start a fresh job per chunk, and zeroing a fresh 2 MB buffer
                // each time cost the VFE step ~3% in memset), its row/column sums, then W·X2c
                // as one thin GEMM. Every entry read is written first.
                W_BUFFER.with_borrow_mut(|buf| {
                    if buf.len() < n1 * len {
                        buf.resize(n1 * len, 0.0);
                    }
                    let w = &mut buf[..n1 * len];
                    let mut row_sum = vec![0.0; n1];
                    let mut col_sum = vec![0.0; len];
                    for (jj, cs_out) in col_sum.iter_mut().enumerate() {
                        let j = start + jj;
                        let (gc, kc) = (column_slice(&g, j, 0, n1), column_slice(&k, j, 0, n1));
                        let wc = &mut w[jj * n1..(jj + 1) * n1];
                        let mut cs = 0.0;
                        for (((wv, gv), kv), rs) in wc.iter_mut().zip(gc).zip(kc).zip(row_sum.iter_mut()) {
                            *wv = gv * kv;
                            *rs += *wv;
                            cs += *wv;
                        }
                        *cs_out = cs;
                    }
                    let x2c = DMatrix::from_fn(len, d, |jj, c| x2[(start + jj, c)] - center[c]);
                    let mut wx2 = DMatrix::<f64>::zeros(n1, d);
                    let wv = DMatrixView::from_slice(w, n1, len);
                    crate::linalg::gemm(&mut wx2, 1.0, wv, false, x2c.as_view(), false, false);
                    (row_sum, wx2, col_sum)
                })
            })
            .collect();
        let mut row_sum = vec![0.0; n1];
        let mut wx2 = DMatrix::<f64>::zeros(n1, d);
        let mut col_sum = Vec::with_capacity(n2);
        for (rs, w, cs) in parts {
            row_sum.iter_mut().zip(&rs).for_each(|(a, b)| *a += b);
            wx2 += w;
            col_sum.extend(cs);
        }
        let total: f64 = row_sum.iter().sum();
        let x2sq: Vec<f64> =
            (0..d).map(|c| (0..n2).map(|j| (x2[(j, c)] - center[c]).powi(2) * col_sum[j]).sum()).collect();
        let inv = self.core.inv_lengthscales(d);
        let mut sq = vec![0.0; d];
        for c in 0..d {
            let a: f64 = (0..n1).map(|i| x1c[(i, c)] * x1c[(i, c)] * row_sum[i]).sum();
            let b = x2sq[c];
            let cross: f64 = (0..n1).map(|i| x1c[(i, c)] * wx2[(i, c)]).sum();
            sq[c] = (a + b - 2.0 * cross) * inv[c] * inv[c];
        }
        let mut params = vec![total];
        if self.core.is_ard() {
            params.extend(sq);
        } else {
            params.push(sq.iter().sum());
        }
        let x1g = want_x1
            .then(|| DMatrix::from_fn(n1, d, |i, c| -(x1c[(i, c)] * row_sum[i] - wx2[(i, c)]) * inv[c] * inv[c]));
        KernelGrad { params, x1: x1g }
    }
    /// With W = G∘K over the lower triangle (off-diagonal entries count twice; t = 0 on the
    /// diagonal): ∂/∂log s² = Σ W; ∂/∂log ℓ_d = Σ W_ij (x_id − x_jd)²/ℓ_d². O(N²D/2)
    /// multiply-adds, no exponentials, direct (no expanded squares, so no cancellation).
    fn vjp_sym_given_k(&self, x: DMatrixView<'_, f64>, k: DMatrixView<'_, f64>, g: DMatrixView<'_, f64>) -> Vec<f64> {
        let name = self.name();
        let d = check_dim(&name, self.core.input_dim(), &x);
        let n = x.nrows();
        check_grad_shape(&name, &g, n, n);
        check_grad_shape(&name, &k, n, n);
        let inv = self.core.inv_lengthscales(d);
        let xr = Rows::new(&x);
        let (mut diag, mut off, mut sq) = (0.0, 0.0, vec![0.0; d]);
        let mut w = vec![0.0; n];
        for j in 0..n {
            diag += g[(j, j)] * k[(j, j)];
            let m = n - j - 1;
            if m == 0 {
                continue;
            }
            let w = &mut w[..m];
            let (gc, kc) = (column_slice(&g, j, j + 1, m), column_slice(&k, j, j + 1, m));
            w.iter_mut().zip(gc.iter().zip(kc)).for_each(|(a, (b, c))| *a = b * c);
            off += sum4(w, w, |a, _| a);
            let rows = j + 1..n;
            for (dd, (&s, acc)) in inv.iter().zip(sq.iter_mut()).enumerate() {
                let xj = x[(j, dd)];
                *acc += sum4(xr.col(dd, &rows), w, |a, wi| {
                    let t = (a - xj) * s;
                    wi * t * t
                });
            }
        }
        let mut params = vec![diag + 2.0 * off];
        if self.core.is_ard() {
            params.extend(sq.iter().map(|v| 2.0 * v));
        } else {
            params.push(2.0 * sq.iter().sum::<f64>());
        }
        params
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
    use rand::Rng;

    fn se_naive(var: f64, ls: &[f64]) -> impl Fn(&[f64], &[f64]) -> f64 {
        move |a, b| {
            let r2: f64 = (0..a.len()).map(|d| ((a[d] - b[d]) / ls[d.min(ls.len() - 1)]).powi(2)).sum();
            var * (-0.5 * r2).exp()
        }
    }

    #[test]
    fn se_isotropic_gradients_and_properties() {
        let k = SquaredExponential::isotropic(1.3, 0.8);
        check_all(&k, 3, 1);
        check_all(&k, 1, 2);
    }

    #[test]
    fn se_ard_gradients_and_properties() {
        check_all(&SquaredExponential::ard(0.7, vec![0.6, 1.4, 2.1]), 3, 3);
    }

    #[test]
    fn se_vjp_given_k_equals_vjp() {
        let mut r = rng(77);
        for (k, d, offset) in [
            (SquaredExponential::ard(0.7, vec![0.6, 1.4, 2.1]), 3, 0.0),
            (SquaredExponential::ard(1.3, vec![30.0, 5.0]), 2, 1000.0),
            (SquaredExponential::isotropic(2.0, 0.8), 2, 0.0),
        ] {
            let x1 = uniform(&mut r, 40, d, -2.0, 2.0).add_scalar(offset);
            let x2 = uniform(&mut r, 300, d, -2.0, 2.0).add_scalar(offset);
            let g = uniform(&mut r, 40, 300, -1.0, 1.0);
            let kk = k.k(x1.as_view(), x2.as_view());
            let a = k.vjp(x1.as_view(), x2.as_view(), g.as_view(), true);
            let b = k.vjp_given_k(x1.as_view(), x2.as_view(), kk.as_view(), g.as_view(), true);
            for (p, q) in a.params.iter().zip(&b.params) {
                assert_close(*p, *q, 1e-9, "vjp_given_k params");
            }
            let (ax, bx) = (a.x1.unwrap(), b.x1.unwrap());
            assert!((&ax - &bx).abs().max() < 1e-9 * (1.0 + ax.abs().max()), "vjp_given_k inputs");
        }
    }

    #[test]
    fn vectorised_exp_matches_std_exp() {
        let ulps = |a: f64, b: f64| (a.to_bits() as i64 - b.to_bits() as i64).unsigned_abs();
        let mut r = rng(5);
        let mut xs: Vec<f64> = (0..20_000).map(|_| r.random_range(-40.0..5.0)).collect();
        xs.extend((0..2_000).map(|_| r.random_range(-708.0..709.0)));
        xs.extend([0.0, -0.0, 1.0, -1.0, 1e-300, -1e-300, 0.5 * std::f64::consts::LN_2, 709.7, -745.0]);
        let mut v = xs.clone();
        vexp::exp_in_place(&mut v);
        for (&x, &e) in xs.iter().zip(&v) {
            assert!(ulps(e, x.exp()) <= 2, "exp({x}) = {e} vs {}", x.exp());
        }
        // Specials: exact 1 at 0 (k(x, x) = s² exactly), under/overflow, NaN.
        let mut v = vec![0.0, -0.0, f64::NEG_INFINITY, -800.0, f64::INFINITY, 800.0, f64::NAN, -740.0];
        vexp::exp_in_place(&mut v);
        assert_eq!(&v[..6], &[1.0, 1.0, 0.0, 0.0, f64::INFINITY, f64::INFINITY]);
        assert!(v[6].is_nan());
        assert!(v[7] > 0.0 && v[7] < f64::MIN_POSITIVE && ulps(v[7], (-740.0f64).exp()) <= 1);
        // Odd lengths (the vector loop's remainder).
        for n in 0..9 {
            let mut v: Vec<f64> = (0..n).map(|i| -(i as f64) * 0.3).collect();
            vexp::exp_in_place(&mut v);
            for (i, e) in v.iter().enumerate() {
                assert!(ulps(*e, (-(i as f64) * 0.3).exp()) <= 2);
            }
        }
    }

    #[test]
    fn symmetric_k_is_bit_identical_to_the_full_evaluation() {
        let mut r = rng(11);
        for (k, d) in
            [(SquaredExponential::ard(0.7, vec![0.6, 1.4, 2.1]), 3), (SquaredExponential::isotropic(2.0, 0.3), 1)]
        {
            for n in [1, 7, 40, 600] {
                let x = uniform(&mut r, n, d, -2.0, 2.0);
                let copy = x.clone();
                let sym = k.k(x.as_view(), x.as_view());
                let full = k.k(x.as_view(), copy.as_view());
                assert_eq!(sym, full, "n = {n}");
                assert_eq!(sym, sym.transpose());
            }
        }
    }

    #[test]
    fn se_vjp_sym_given_k_equals_vjp_and_reads_only_the_lower_triangle() {
        use super::super::Matern;
        use super::super::MaternNu;
        let mut r = rng(78);
        let kernels: Vec<(Box<dyn Kernel>, usize)> = vec![
            (Box::new(SquaredExponential::ard(0.7, vec![0.6, 1.4, 2.1])), 3),
            (Box::new(SquaredExponential::ard(1.3, vec![0.4])), 1),
            (Box::new(SquaredExponential::isotropic(2.0, 0.8)), 2),
            (Box::new(Matern::ard(MaternNu::ThreeHalves, 1.1, vec![0.5, 0.9])), 2),
        ];
        for (k, d) in kernels {
            for n in [1, 2, 5, 61] {
                let x = uniform(&mut r, n, d, -2.0, 2.0);
                let a = uniform(&mut r, n, n, -1.0, 1.0);
                let g = &a + a.transpose();
                let kk = k.k(x.as_view(), x.as_view());
                let full = k.vjp(x.as_view(), x.as_view(), g.as_view(), false).params;
                // Garbage above the diagonal must not matter.
                let (mut kl, mut gl) = (kk.clone(), g.clone());
                for j in 1..n {
                    for i in 0..j {
                        kl[(i, j)] = f64::NAN;
                        gl[(i, j)] = 1e300;
                    }
                }
                let sym = k.vjp_sym_given_k(x.as_view(), kl.as_view(), gl.as_view());
                assert_eq!(sym.len(), full.len());
                let scale = g.abs().sum() * kk.abs().max() * 10.0;
                for (p, q) in full.iter().zip(&sym) {
                    assert_close(*p, *q, 1e-12 * scale, &format!("{} vjp_sym n = {n}", k.name()));
                }
            }
        }
    }

    #[test]
    fn se_hand_values() {
        let k = SquaredExponential::isotropic(2.0, 0.5);
        let (x, y) = (dmatrix![0.0, 0.0], dmatrix![0.3, 0.4]);
        assert_close(k.k(x.as_view(), y.as_view())[(0, 0)], 1.2130613194252668, 0.0, "se");
        assert_eq!(k.k(x.as_view(), x.as_view())[(0, 0)], 2.0);
        let k = SquaredExponential::ard(1.5, vec![1.0, 2.0, 0.5]);
        let (x, y) = (dmatrix![1.0, 2.0, 3.0], dmatrix![0.0, 0.0, 3.5]);
        assert_close(k.k(x.as_view(), y.as_view())[(0, 0)], 0.33469524022264474, 0.0, "se-ard");
    }

    #[test]
    fn se_metadata() {
        let k = SquaredExponential::ard(0.5, vec![1.0, 2.0]);
        assert_eq!((k.name(), k.n_params(), k.input_dim()), ("se-ard".into(), 3, Some(2)));
        assert_eq!(k.param_names(), ["variance", "lengthscale[0]", "lengthscale[1]"]);
        assert_eq!(k.bounds(), vec![Bounds::positive_default(); 3]);
        assert_eq!((k.variance(), k.lengthscales()), (0.5, &[1.0, 2.0][..]));
        let mut k = SquaredExponential::isotropic(1.0, 1.0);
        assert_eq!((k.name(), k.n_params(), k.input_dim()), ("se".into(), 2, None));
        k.set_bounds(&[Bounds::new(-1.0, 1.0), Bounds::new(-2.0, 2.0)]);
        assert_eq!(k.bounds()[1], Bounds::new(-2.0, 2.0));
        k.set_params(&[2.0f64.ln(), 3.0f64.ln()]);
        assert!((k.variance() - 2.0).abs() < 1e-15 && (k.lengthscales()[0] - 3.0).abs() < 1e-15);
    }

    #[test]
    fn se_parallel_is_deterministic_and_exact() {
        check_parallel(&SquaredExponential::isotropic(1.3, 0.8), 3, se_naive(1.3, &[0.8]));
        let ls = [0.6, 1.4, 2.1];
        check_parallel(&SquaredExponential::ard(0.7, ls.to_vec()), 3, se_naive(0.7, &ls));
    }

    #[test]
    fn se_identical_points_give_exact_variance() {
        let k = SquaredExponential::ard(1.7, vec![0.3, 0.9]);
        let x = dmatrix![0.1, 1e8; -3.0, 2.5];
        let kk = k.k(x.as_view(), x.as_view());
        assert_eq!((kk[(0, 0)], kk[(1, 1)]), (1.7, 1.7));
    }

    #[test]
    #[should_panic(expected = "input dimension 3")]
    fn se_ard_rejects_wrong_dimension() {
        let x = DMatrix::<f64>::zeros(2, 2);
        SquaredExponential::ard(1.0, vec![1.0; 3]).k(x.as_view(), x.as_view());
    }

    #[test]
    #[should_panic(expected = "x1 has 2 columns but x2 has 1")]
    fn se_rejects_mismatched_inputs() {
        let (x1, x2) = (DMatrix::<f64>::zeros(2, 2), DMatrix::<f64>::zeros(2, 1));
        SquaredExponential::isotropic(1.0, 1.0).k(x1.as_view(), x2.as_view());
    }
}
