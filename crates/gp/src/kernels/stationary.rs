//! The engine of stationary kernels k(x, x') = s² f(r²), r² = Σ_d (x_d − x'_d)²/ℓ_d²: the
//! hyperparameters (variance, isotropic or ARD length-scales, bounds) and the evaluation of K,
//! its diagonal and the gradients for any [`Profile`] f. `SquaredExponential` and `Matern` are
//! this engine with their profile.

use super::param::{self, Positive};
use super::tiling::*;
use super::{Bounds, KernelGrad};
use nalgebra::{DMatrix, DMatrixView, DVector, DVectorView};
use serde::{Deserialize, Serialize};
use std::ops::Range;

/// Shape of a stationary kernel k(x, x') = s² f(r²), r² = Σ_d (x_d − x'_d)²/ℓ_d².
pub(super) trait Profile: Copy + Send + Sync {
    /// f(r²), with f(0) = 1.
    fn f(self, r2: f64) -> f64;
    /// (f(r²), df/d(r²)). The derivative must be finite everywhere, r² = 0 included (use a
    /// subgradient where f is not differentiable).
    fn f_df(self, r2: f64) -> (f64, f64);
    /// f(r²) for every entry of a slice, in place (profiles with a vectorised form override it).
    #[inline]
    fn f_slice(self, r2: &mut [f64]) {
        r2.iter_mut().for_each(|v| *v = self.f(*v));
    }
    /// Whether `f_slice` is exactly `v ← v·(−½)` then [`super::vexp::exp_in_place`] (the
    /// squared-exponential profile): the AVX-512 path then evaluates the distances, the
    /// exponential and the variance's scaling of eight rows in registers
    /// ([`se_slice_avx512`]), with the same operations and so the same bits.
    const EXP_NEG_HALF: bool = false;
}

/// Hyperparameters and evaluation of a stationary kernel: variance s² and either one shared
/// length-scale (isotropic) or one per input dimension (ARD). Parameters: [log s², log ℓ…].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(super) struct Stationary {
    /// [s², ℓ…]: the parameter vector's order.
    params: Positive,
    ard: bool,
}

/// r²_i = Σ_d ((x1_id − x2_jd)/ℓ_d)² for i in `rows`, written into `out`; `inv` holds 1/ℓ_d.
/// Exactly 0 for identical points. The first dimension's square is stored, not added to a
/// zeroed `out`: 0 + t² is t² to the bit (t² is never −0), and the slice's memset is saved.
#[inline(always)]
fn sq_dist(x1: &Rows, rows: &Range<usize>, x2: &DMatrixView<'_, f64>, j: usize, inv: &[f64], out: &mut [f64]) {
    let Some((&s0, rest)) = inv.split_first() else {
        out.fill(0.0);
        return;
    };
    let x0 = x2[(j, 0)];
    for (o, &a) in out.iter_mut().zip(x1.col(0, rows)) {
        let t = (a - x0) * s0;
        *o = t * t;
    }
    for (d, &s) in rest.iter().enumerate() {
        let xj = x2[(j, d + 1)];
        for (o, &a) in out.iter_mut().zip(x1.col(d + 1, rows)) {
            let t = (a - xj) * s;
            *o += t * t;
        }
    }
}

/// The inputs of K's column slices that stay fixed through one evaluation.
struct SliceInputs<'a> {
    x1: &'a Rows,
    x2: &'a DMatrixView<'a, f64>,
    /// 1/ℓ_d.
    inv: &'a [f64],
    /// The variance s².
    s2: f64,
}

/// One slice of a column of K: s²·f(r²) for the rows `rows` of x1 against x2's row j.
#[inline(always)]
fn k_slice_body<P: Profile>(prof: P, a: &SliceInputs<'_>, rows: &Range<usize>, j: usize, out: &mut [f64]) {
    sq_dist(a.x1, rows, a.x2, j, a.inv, out);
    prof.f_slice(out);
    out.iter_mut().for_each(|v| *v *= a.s2);
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx2")]
fn k_slice_avx512<P: Profile>(prof: P, a: &SliceInputs<'_>, rows: &Range<usize>, j: usize, out: &mut [f64]) {
    if P::EXP_NEG_HALF && (1..=FUSED_MAX_DIM).contains(&a.inv.len()) {
        se_slice_avx512(a, rows, j, out)
    } else {
        k_slice_body(prof, a, rows, j, out)
    }
}

/// Input dimensions up to which [`se_slice_avx512`] runs (its row of x2 lives on the stack).
#[cfg(target_arch = "x86_64")]
const FUSED_MAX_DIM: usize = 32;

/// s²·exp(−½ r²) for the rows `rows` of x1 against x2's row j, eight rows per register: each
/// entry is computed and stored once, where [`k_slice_body`] makes a pass over the slice per
/// dimension, one for the scaling by −½, one for the exponential and one for s². One core
/// evaluates K 1.0–1.3× faster at 25–225 rows (noisy), a pass over K_uf on both cores runs
/// 1.2× faster (docs/results.md "The machine's FMA peak, and the kernel slice in registers"); the exponential's
/// multiply-adds, not the stores, now bound it. The operations
/// are `sq_dist`'s (t_d = (x1_d − x2_d)·(1/ℓ_d); the first square stored, each next one added
/// in order), the profile's (·(−½), [`super::vexp::exp8`]) and the scaling's (·s²), so the bits
/// are the body's (`every_k_slice_path_is_bit_identical`). 1 ≤ D ≤ [`FUSED_MAX_DIM`].
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
fn se_slice_avx512(a: &SliceInputs<'_>, rows: &Range<usize>, j: usize, out: &mut [f64]) {
    // The input dimension as a constant for the common small ones (the loop over dimensions
    // unrolled, x2's row and 1/ℓ held in registers across the slice).
    match a.inv.len() {
        1 => se_slice_dim::<1>(a, rows, j, out),
        2 => se_slice_dim::<2>(a, rows, j, out),
        3 => se_slice_dim::<3>(a, rows, j, out),
        4 => se_slice_dim::<4>(a, rows, j, out),
        5 => se_slice_dim::<5>(a, rows, j, out),
        6 => se_slice_dim::<6>(a, rows, j, out),
        7 => se_slice_dim::<7>(a, rows, j, out),
        8 => se_slice_dim::<8>(a, rows, j, out),
        _ => se_slice_dim::<0>(a, rows, j, out),
    }
}

/// [`se_slice_avx512`] for D = `C` dimensions, or for any D ≤ [`FUSED_MAX_DIM`] when `C` is 0.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
#[inline]
fn se_slice_dim<const C: usize>(a: &SliceInputs<'_>, rows: &Range<usize>, j: usize, out: &mut [f64]) {
    use std::arch::x86_64::*;
    let dim = if C == 0 { a.inv.len() } else { C };
    debug_assert!(C == 0 || C == a.inv.len(), "dispatched for {C} dimensions, got {}", a.inv.len());
    // The loads below are bounded by `out`; `rows` bounds the columns they read.
    assert_eq!(out.len(), rows.len(), "the slice and its rows differ in length");
    // Per dimension: x1's column from the slice's first row, x2's entry (j, d), 1/ℓ_d.
    let mut cols = [std::ptr::null::<f64>(); FUSED_MAX_DIM];
    let mut xj = [_mm512_setzero_pd(); FUSED_MAX_DIM];
    let mut inv = [_mm512_setzero_pd(); FUSED_MAX_DIM];
    for d in 0..dim {
        cols[d] = a.x1.col(d, rows).as_ptr();
        xj[d] = _mm512_set1_pd(a.x2[(j, d)]);
        inv[d] = _mm512_set1_pd(a.inv[d]);
    }
    let (half, s2) = (_mm512_set1_pd(-0.5), _mm512_set1_pd(a.s2));
    // The eight entries s²·exp(−½ r²) of rows i..; lanes outside `mask` are neither read nor
    // meaningful. r² in `sq_dist`'s order: t_0², then + t_d², t_d = (x1_d − x2_d)·(1/ℓ_d).
    let lanes = |i: usize, mask: __mmask8| {
        let mut r2 = _mm512_setzero_pd();
        for d in 0..dim {
            // SAFETY: the lanes of `mask` are rows i.. below rows.len() of column d (a
            // masked-off lane is not accessed).
            let x1 = unsafe { _mm512_maskz_loadu_pd(mask, cols[d].add(i)) };
            let t = _mm512_mul_pd(_mm512_sub_pd(x1, xj[d]), inv[d]);
            let tt = _mm512_mul_pd(t, t);
            r2 = if d == 0 { tt } else { _mm512_add_pd(r2, tt) };
        }
        _mm512_mul_pd(super::vexp::exp8(_mm512_mul_pd(r2, half)), s2)
    };
    let n = out.len();
    let mut i = 0;
    while i + 8 <= n {
        let k = lanes(i, 0xff);
        // SAFETY: out[i..i + 8] is in bounds.
        unsafe { _mm512_storeu_pd(out.as_mut_ptr().add(i), k) };
        i += 8;
    }
    if i < n {
        let mask = (1u8 << (n - i)) - 1;
        let k = lanes(i, mask);
        // SAFETY: the lanes of `mask` are out[i..n]; the others are not written.
        unsafe { _mm512_mask_storeu_pd(out.as_mut_ptr().add(i), mask, k) };
    }
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
fn k_slice_avx2<P: Profile>(prof: P, a: &SliceInputs<'_>, rows: &Range<usize>, j: usize, out: &mut [f64]) {
    k_slice_body(prof, a, rows, j, out)
}

/// [`k_slice_body`] compiled also for AVX2 and AVX-512 and picked at run time. Rust never
/// contracts a·b + c into an FMA (LLVM fuses only under fast-math flags, which Rust does not
/// emit), so every path performs the same IEEE operations and gives the same bits; the
/// element-wise loops just run 4 or 8 lanes wide instead of SSE2's 2.
fn k_slice<P: Profile>(prof: P, a: &SliceInputs<'_>, rows: &Range<usize>, j: usize, out: &mut [f64]) {
    #[cfg(target_arch = "x86_64")]
    if std::is_x86_feature_detected!("avx512f") {
        // SAFETY: the CPU supports the features the function was compiled for.
        unsafe { k_slice_avx512(prof, a, rows, j, out) };
        return;
    }
    #[cfg(target_arch = "x86_64")]
    if std::is_x86_feature_detected!("avx2") {
        // SAFETY: as above.
        unsafe { k_slice_avx2(prof, a, rows, j, out) };
        return;
    }
    k_slice_body(prof, a, rows, j, out)
}

/// Partial vjp sums of one column block.
struct StationaryPart {
    /// Σ G f.
    gf: f64,
    /// Σ G f' t_d² per dimension, t_d = (x1_d − x2_d)/ℓ_d.
    gdt2: Vec<f64>,
    /// Σ_j G f' t_d per row and dimension (N1×D column-major), if requested.
    gdt: Vec<f64>,
}

impl Stationary {
    /// Panics (programmer error) unless the variance and length-scales are positive and finite.
    pub(super) fn new(kind: &str, variance: f64, lengthscales: Vec<f64>, ard: bool) -> Self {
        assert!(
            variance.is_finite() && variance > 0.0,
            "kernel {kind}: variance must be positive and finite, got {variance}"
        );
        assert!(!lengthscales.is_empty(), "kernel {kind}: needs at least one length-scale");
        for &l in &lengthscales {
            assert!(l.is_finite() && l > 0.0, "kernel {kind}: length-scales must be positive and finite, got {l}");
        }
        Self { params: Positive::new([vec![variance], lengthscales].concat()), ard }
    }

    pub(super) fn variance(&self) -> f64 {
        self.params.values()[0]
    }
    pub(super) fn lengthscales(&self) -> &[f64] {
        &self.params.values()[1..]
    }
    pub(super) fn is_ard(&self) -> bool {
        self.ard
    }
    pub(super) fn n_params(&self) -> usize {
        self.params.len()
    }
    pub(super) fn params(&self) -> Vec<f64> {
        self.params.log_values().collect()
    }
    pub(super) fn set_params(&mut self, kind: &str, p: &[f64]) {
        self.params.set_log_values(kind, p);
    }
    pub(super) fn param_names(&self) -> Vec<String> {
        [vec!["variance".to_string()], param::names("lengthscale", self.ard, self.lengthscales().len())].concat()
    }
    pub(super) fn bounds(&self) -> Vec<Bounds> {
        self.params.bounds().to_vec()
    }
    pub(super) fn set_bounds(&mut self, kind: &str, b: &[Bounds]) {
        self.params.set_bounds(kind, b);
    }
    pub(super) fn input_dim(&self) -> Option<usize> {
        self.ard.then_some(self.lengthscales().len())
    }

    /// 1/ℓ_d for inputs of dimension `d`.
    pub(super) fn inv_lengthscales(&self, d: usize) -> Vec<f64> {
        if self.ard {
            self.lengthscales().iter().map(|l| 1.0 / l).collect()
        } else {
            vec![1.0 / self.lengthscales()[0]; d]
        }
    }

    pub(super) fn k<P: Profile>(
        &self,
        prof: P,
        kind: &str,
        x1: DMatrixView<'_, f64>,
        x2: DMatrixView<'_, f64>,
    ) -> DMatrix<f64> {
        let mut k = DMatrix::from_vec(x1.nrows(), x2.nrows(), vec![0.0; x1.nrows() * x2.nrows()]);
        self.k_into(prof, kind, x1, x2, &mut k);
        k
    }

    /// As [`Stationary::k`], into `k`'s storage (resized if the shape differs). Every entry is
    /// overwritten.
    pub(super) fn k_into<P: Profile>(
        &self,
        prof: P,
        kind: &str,
        x1: DMatrixView<'_, f64>,
        x2: DMatrixView<'_, f64>,
        k: &mut DMatrix<f64>,
    ) {
        let d = check_inputs(kind, self.input_dim(), &x1, &x2);
        let inv = self.inv_lengthscales(d);
        let (x1r, n1) = (Rows::new(&x1), x1.nrows());
        if k.shape() != (n1, x2.nrows()) {
            *k = DMatrix::from_vec(n1, x2.nrows(), vec![0.0; n1 * x2.nrows()]);
        }
        let inputs = SliceInputs { x1: &x1r, x2: &x2, inv: &inv, s2: self.variance() };
        // K(X, X): evaluate the lower triangle (i ≥ j) and mirror it. (x_i − x_j)² and
        // (x_j − x_i)² are the same number, so this is bit-identical to the full evaluation.
        let sym = same_view(&x1, &x2);
        update_columns(k, |j0, block| {
            for rows in row_tiles(n1) {
                for (j, col) in (j0..).zip(block.chunks_exact_mut(n1)) {
                    let start = if sym { rows.start.max(j) } else { rows.start };
                    if start >= rows.end {
                        continue;
                    }
                    let rows = start..rows.end;
                    k_slice(prof, &inputs, &rows, j, &mut col[rows.clone()]);
                }
            }
        });
        if sym {
            mirror_lower(k);
        }
    }

    pub(super) fn diag(&self, kind: &str, x: DMatrixView<'_, f64>) -> DVector<f64> {
        check_dim(kind, self.input_dim(), &x);
        DVector::from_element(x.nrows(), self.variance())
    }

    /// ∂L/∂log s² = Σ G∘K; ∂L/∂log ℓ_d = Σ_ij G_ij (∂k/∂r²)(−2) t_ijd²;
    /// ∂L/∂x1_id = Σ_j G_ij (∂k/∂r²) 2 t_ijd/ℓ_d, with t_ijd = (x1_id − x2_jd)/ℓ_d.
    pub(super) fn vjp<P: Profile>(
        &self,
        prof: P,
        kind: &str,
        x1: DMatrixView<'_, f64>,
        x2: DMatrixView<'_, f64>,
        g: DMatrixView<'_, f64>,
        want_x1: bool,
    ) -> KernelGrad {
        let d = check_inputs(kind, self.input_dim(), &x1, &x2);
        let (n1, n2) = (x1.nrows(), x2.nrows());
        check_grad_shape(kind, &g, n1, n2);
        let inv = self.inv_lengthscales(d);
        let x1r = Rows::new(&x1);
        let n_x = if want_x1 { n1 * d } else { 0 };

        // Per row tile: accumulate over the block's columns, then reduce over the tile's rows.
        let block = |cols: Range<usize>| {
            let mut part = StationaryPart { gf: 0.0, gdt2: vec![0.0; d], gdt: vec![0.0; n_x] };
            let tile = ROW_TILE.min(n1);
            let (mut w, mut gcol, mut acc_gf) = (vec![0.0; tile], vec![0.0; tile], vec![0.0; tile]);
            let mut acc_dt2 = vec![0.0; tile * d];
            let mut acc_dt = vec![0.0; if want_x1 { tile * d } else { 0 }];
            for rows in row_tiles(n1) {
                let m = rows.len();
                let (w, gcol, acc_gf) = (&mut w[..m], &mut gcol[..m], &mut acc_gf[..m]);
                let n_dt = acc_dt.len().min(m * d);
                let (acc_dt2, acc_dt) = (&mut acc_dt2[..m * d], &mut acc_dt[..n_dt]);
                acc_gf.fill(0.0);
                acc_dt2.fill(0.0);
                acc_dt.fill(0.0);
                for j in cols.clone() {
                    sq_dist(&x1r, &rows, &x2, j, &inv, w);
                    copy_column(&g, j, rows.start, gcol);
                    // w becomes G f' (the weight of every length-scale / input term).
                    for ((wi, &gij), a) in w.iter_mut().zip(&*gcol).zip(&mut *acc_gf) {
                        let (f, df) = prof.f_df(*wi);
                        *a += gij * f;
                        *wi = gij * df;
                    }
                    for (dd, &s) in inv.iter().enumerate() {
                        let xj = x2[(j, dd)];
                        let terms = x1r.col(dd, &rows).iter().zip(&*w);
                        let terms = terms.zip(&mut acc_dt2[dd * m..(dd + 1) * m]);
                        if want_x1 {
                            for (((&a, &wi), p), q) in terms.zip(&mut acc_dt[dd * m..]) {
                                let t = (a - xj) * s;
                                *p += wi * t * t;
                                *q += wi * t;
                            }
                        } else {
                            for ((&a, &wi), p) in terms {
                                let t = (a - xj) * s;
                                *p += wi * t * t;
                            }
                        }
                    }
                }
                part.gf += acc_gf.iter().sum::<f64>();
                for (total, acc) in part.gdt2.iter_mut().zip(acc_dt2.chunks_exact(m)) {
                    *total += acc.iter().sum::<f64>();
                }
                for (dd, acc) in acc_dt.chunks_exact(m).enumerate() {
                    part.gdt[dd * n1 + rows.start..dd * n1 + rows.end].copy_from_slice(acc);
                }
            }
            part
        };

        let (mut gf, mut gdt2, mut gdt) = (0.0, vec![0.0; d], vec![0.0; n_x]);
        reduce_column_blocks(n1, n2, block, |part| {
            gf += part.gf;
            gdt2.iter_mut().zip(&part.gdt2).for_each(|(a, b)| *a += b);
            gdt.iter_mut().zip(&part.gdt).for_each(|(a, b)| *a += b);
        });

        let s2 = self.variance();
        let ls = gdt2.iter().map(|v| -2.0 * s2 * v);
        let mut params = vec![s2 * gf];
        if self.ard {
            params.extend(ls);
        } else {
            params.push(ls.sum());
        }
        let x1 = want_x1.then(|| {
            let mut gx = DMatrix::from_vec(n1, d, gdt);
            for (mut col, &s) in gx.column_iter_mut().zip(&inv) {
                col *= 2.0 * s2 * s;
            }
            gx
        });
        KernelGrad { params, x1 }
    }

    /// Only the variance enters diag K = s².
    pub(super) fn diag_vjp(&self, kind: &str, x: DMatrixView<'_, f64>, g: DVectorView<'_, f64>) -> Vec<f64> {
        check_dim(kind, self.input_dim(), &x);
        assert_eq!(g.len(), x.nrows(), "kernel {kind}: g has the wrong length");
        let mut p = vec![0.0; self.n_params()];
        p[0] = self.variance() * g.iter().sum::<f64>();
        p
    }
}

/// The part of `impl Kernel` that every stationary kernel (a `core: Stationary` field) shares:
/// parameter bookkeeping, the input dimension, the diagonal and its gradient. The kernel
/// itself writes `name`, `k`, `k_into`, `vjp` (which choose its [`Profile`]) and `clone_box`.
macro_rules! delegate_stationary {
    () => {
        fn n_params(&self) -> usize {
            self.core.n_params()
        }
        fn params(&self) -> Vec<f64> {
            self.core.params()
        }
        fn set_params(&mut self, p: &[f64]) {
            let name = self.name();
            self.core.set_params(&name, p)
        }
        fn param_names(&self) -> Vec<String> {
            self.core.param_names()
        }
        fn bounds(&self) -> Vec<Bounds> {
            self.core.bounds()
        }
        fn set_bounds(&mut self, b: &[Bounds]) {
            let name = self.name();
            self.core.set_bounds(&name, b)
        }
        fn input_dim(&self) -> Option<usize> {
            self.core.input_dim()
        }
        fn diag(&self, x: DMatrixView<'_, f64>) -> DVector<f64> {
            self.core.diag(&self.name(), x)
        }
        fn diag_vjp(&self, x: DMatrixView<'_, f64>, g: DVectorView<'_, f64>) -> Vec<f64> {
            self.core.diag_vjp(&self.name(), x, g)
        }
    };
}
pub(super) use delegate_stationary;

#[cfg(test)]
mod tests {
    use super::super::squared_exponential::SeProfile;
    use super::*;
    use nalgebra::DMatrix;

    /// exp through the vectorised path (the SE profile's arithmetic, but without
    /// `EXP_NEG_HALF`, so that the AVX-512 path runs the body with it) and sqrt/exp through libm
    /// (as the Matérn profiles' scalar `f`).
    #[derive(Clone, Copy)]
    struct Vectorised;
    impl Profile for Vectorised {
        fn f(self, r2: f64) -> f64 {
            (-0.5 * r2).exp()
        }
        fn f_df(self, r2: f64) -> (f64, f64) {
            (self.f(r2), -0.5 * self.f(r2))
        }
        fn f_slice(self, r2: &mut [f64]) {
            r2.iter_mut().for_each(|v| *v *= -0.5);
            super::super::vexp::exp_in_place(r2);
        }
    }
    #[derive(Clone, Copy)]
    struct Scalar;
    impl Profile for Scalar {
        fn f(self, r2: f64) -> f64 {
            let r = (5.0 * r2).sqrt();
            (1.0 + r + r * r / 3.0) * (-r).exp()
        }
        fn f_df(self, r2: f64) -> (f64, f64) {
            (self.f(r2), 0.0)
        }
    }

    /// `sq_dist` stores the first dimension's square instead of adding it to a zeroed slice:
    /// the same bits as the sum from zero, for differences of −0 and infinities too (NaN stays NaN), with
    /// every entry overwritten (the slice starts as NaN), also with no dimensions at all.
    #[test]
    fn squared_distances_equal_the_sum_from_zero_bit_for_bit() {
        let v = [-0.0, 0.0, 1.5, -2.25, f64::INFINITY, f64::NEG_INFINITY, f64::NAN, 1e-300, 3e200];
        let x1 =
            DMatrix::from_fn(v.len() * 3, 3, |i, d| v[(i + d * 4) % v.len()] * if i % 3 == 0 { 1.0 } else { -1.0 });
        let x2 = DMatrix::from_fn(v.len(), 3, |i, d| v[(i * 5 + d) % v.len()]);
        let (x1r, x2v) = (Rows::new(&x1.as_view()), x2.as_view());
        let rows = 2..x1.nrows();
        for inv in [&[][..], &[0.5][..], &[1.0, 3.0, 0.25][..]] {
            for j in 0..x2.nrows() {
                let mut got = vec![f64::NAN; rows.len()];
                sq_dist(&x1r, &rows, &x2v, j, inv, &mut got);
                let mut want = vec![0.0; rows.len()];
                for (d, &s) in inv.iter().enumerate() {
                    for (w, &a) in want.iter_mut().zip(x1r.col(d, &rows)) {
                        let t = (a - x2v[(j, d)]) * s;
                        *w += t * t;
                    }
                }
                // Rust leaves a NaN's sign and payload unspecified (the compiler may swap an
                // addition's operands), so a NaN is compared as a NaN.
                let bits =
                    |x: &[f64]| x.iter().map(|v| if v.is_nan() { None } else { Some(v.to_bits()) }).collect::<Vec<_>>();
                assert_eq!(bits(&got), bits(&want), "{} dimensions, column {j}", inv.len());
            }
        }
    }

    /// Every path `k_slice` may dispatch to gives the portable body's bits, for a vectorised and
    /// a scalar profile, over a ragged tile.
    #[test]
    fn every_k_slice_path_is_bit_identical() {
        let x1 = DMatrix::from_fn(701, 3, |i, d| ((i * 37 + d * 11) % 97) as f64 * 0.043 - 2.1);
        let x2 = DMatrix::from_fn(5, 3, |i, d| ((i * 13 + d * 7) % 17) as f64 * 0.21 - 1.7);
        let (x1r, x2v, rows) = (Rows::new(&x1.as_view()), x2.as_view(), 3..700);
        let inputs = SliceInputs { x1: &x1r, x2: &x2v, inv: &[1.3, 0.7, 2.2], s2: 1.7 };
        fn run<P: Profile>(p: P, path: usize, a: &SliceInputs<'_>, rows: &Range<usize>) -> Vec<u64> {
            let (mut out, mut bits) = (vec![0.0; rows.len()], Vec::new());
            for j in 0..a.x2.nrows() {
                match path {
                    0 => k_slice_body(p, a, rows, j, &mut out),
                    1 => k_slice(p, a, rows, j, &mut out),
                    #[cfg(target_arch = "x86_64")]
                    // SAFETY: called only when the features were detected.
                    2 => unsafe { k_slice_avx2(p, a, rows, j, &mut out) },
                    #[cfg(target_arch = "x86_64")]
                    // SAFETY: as above.
                    3 => unsafe { k_slice_avx512(p, a, rows, j, &mut out) },
                    _ => unreachable!(),
                }
                bits.extend(out.iter().map(|v| v.to_bits()));
            }
            bits
        }
        let mut paths = vec![1];
        #[cfg(target_arch = "x86_64")]
        {
            if std::is_x86_feature_detected!("avx2") {
                paths.push(2);
            }
            if std::is_x86_feature_detected!("avx512f") {
                paths.push(3);
            }
        }
        for path in paths {
            assert_eq!(run(Vectorised, path, &inputs, &rows), run(Vectorised, 0, &inputs, &rows), "path {path}");
            assert_eq!(run(Scalar, path, &inputs, &rows), run(Scalar, 0, &inputs, &rows), "path {path}");
            assert_eq!(run(SeProfile, path, &inputs, &rows), run(SeProfile, 0, &inputs, &rows), "path {path}");
        }
    }

    /// The squared-exponential slice in registers ([`se_slice_avx512`], taken for 1–32
    /// dimensions) gives the body's bits: every tail length of its eight-row registers, slices
    /// starting anywhere, every dimension with its own unrolled form (1–8), the loop (9, 32),
    /// the body (33), and inputs that reach the exponential's edges (results that underflow to
    /// subnormals and to 0, infinities, −0, NaN).
    #[test]
    fn the_squared_exponential_slice_in_registers_matches_the_body() {
        #[cfg(target_arch = "x86_64")]
        {
            if !std::is_x86_feature_detected!("avx512f") {
                return;
            }
            // 93–99 against x2's entries in [−2.7, 2.3] at 1/ℓ = 0.4: −½r² from −685 to −815,
            // across exp's subnormal range (−708 to −745).
            let special = [
                -0.0,
                0.0,
                f64::INFINITY,
                f64::NEG_INFINITY,
                f64::NAN,
                1e-300,
                93.0,
                94.4,
                95.3,
                96.1,
                97.7,
                99.0,
                1e200,
            ];
            let mut subnormal = 0;
            for dim in [1, 2, 3, 4, 5, 6, 7, 8, 9, 32, 33] {
                let x1 = DMatrix::from_fn(61, dim, |i, d| {
                    if (i * 7 + d) % 11 == 0 {
                        special[(i + d) % special.len()]
                    } else {
                        ((i * 37 + d * 11) % 97) as f64 * 0.19 - 9.1
                    }
                });
                let x2 = DMatrix::from_fn(4, dim, |i, d| ((i * 13 + d * 7) % 17) as f64 * 0.31 - 2.7);
                let inv: Vec<f64> = (0..dim).map(|d| 0.4 + 0.1 * d as f64).collect();
                let (x1r, x2v) = (Rows::new(&x1.as_view()), x2.as_view());
                let inputs = SliceInputs { x1: &x1r, x2: &x2v, inv: &inv, s2: 2.3 };
                let bits = |v: &[f64]| v.iter().map(|x| (!x.is_nan()).then(|| x.to_bits())).collect::<Vec<_>>();
                for start in [0, 1, 5] {
                    for len in 0..=(61 - start).min(19) {
                        let rows = start..start + len;
                        for j in 0..x2.nrows() {
                            let (mut got, mut want) = (vec![f64::NAN; len], vec![f64::NAN; len]);
                            // SAFETY: AVX-512F was detected above.
                            unsafe { k_slice_avx512(SeProfile, &inputs, &rows, j, &mut got) };
                            k_slice_body(SeProfile, &inputs, &rows, j, &mut want);
                            assert_eq!(bits(&got), bits(&want), "{dim} dimensions, rows {rows:?}, column {j}");
                            subnormal += want.iter().filter(|v| v.is_subnormal()).count();
                        }
                    }
                }
            }
            assert!(subnormal > 0, "the inputs reach no subnormal kernel value");
        }
    }
}
