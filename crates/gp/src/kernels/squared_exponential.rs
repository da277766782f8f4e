//! Squared-exponential (RBF) kernel.
//!
//! Because `mod.rs` is fixed, this file also hosts the machinery shared by the other kernels:
//! - a partition of an N1×N2 output into column blocks that depends only on the shape, with
//!   ordered (hence bit-deterministic) parallel reductions over those blocks;
//! - `Stationary`, the engine of stationary kernels k = s² f(r²), also used by `Matern`;
//! - (tests only) `test_support`, the finite-difference harness used by every kernel's tests.

use super::{Bounds, Kernel, KernelGrad};
use nalgebra::{DMatrix, DMatrixView, DVector, DVectorView};
use rayon::prelude::*;
use serde::{Deserialize, Serialize};
use std::ops::Range;

// ------------------------------------------------------------------------------------------
// Column blocks
// ------------------------------------------------------------------------------------------

/// Outputs with more entries than this are evaluated in parallel.
const PAR_MIN_ENTRIES: usize = 200_000;
/// Smallest block (in entries) worth a task of its own.
const BLOCK_MIN_ENTRIES: usize = 16_384;
/// At most this many column blocks (bounds the memory held by partial results).
const MAX_BLOCKS: usize = 64;
/// Rows processed together inside a block, so that the working set stays in cache when N1 is
/// large (e.g. K(X, Z) with X 100000×D).
pub(super) const ROW_TILE: usize = 512;

/// Columns per block. Depends only on the shape, never on the number of threads.
fn cols_per_block(n1: usize, n2: usize) -> usize {
    BLOCK_MIN_ENTRIES.div_ceil(n1.max(1)).max(n2.div_ceil(MAX_BLOCKS)).max(1)
}

fn is_parallel(n1: usize, n2: usize) -> bool {
    n1.saturating_mul(n2) > PAR_MIN_ENTRIES
}

/// The row tiles of an N1-row output: fixed by N1 alone.
pub(super) fn row_tiles(n1: usize) -> impl Iterator<Item = Range<usize>> {
    (0..n1).step_by(ROW_TILE).map(move |r0| r0..(r0 + ROW_TILE).min(n1))
}

/// Builds an N1×N2 matrix block by block: `fill(j0, block)` writes `block`, the contiguous
/// column-major storage of the columns j0, j0+1, … (its length is a multiple of N1), which
/// starts zeroed.
pub(super) fn fill_columns<F>(n1: usize, n2: usize, fill: F) -> DMatrix<f64>
where
    F: Fn(usize, &mut [f64]) + Sync,
{
    let mut out = DMatrix::from_vec(n1, n2, vec![0.0; n1 * n2]);
    update_columns(&mut out, fill);
    out
}

/// Updates a matrix in place block by block, like [`fill_columns`].
pub(super) fn update_columns<F>(out: &mut DMatrix<f64>, update: F)
where
    F: Fn(usize, &mut [f64]) + Sync,
{
    let (n1, n2) = out.shape();
    if n1 == 0 || n2 == 0 {
        return;
    }
    let cpb = cols_per_block(n1, n2);
    let data = out.as_mut_slice();
    if is_parallel(n1, n2) {
        let chunks = data.par_chunks_mut(n1 * cpb);
        chunks.enumerate().for_each(|(b, c)| update(b * cpb, c));
    } else {
        let chunks = data.chunks_mut(n1 * cpb);
        chunks.enumerate().for_each(|(b, c)| update(b * cpb, c));
    }
}

/// Deterministic map-reduce over the column blocks of an N1×N2 output: `map` turns a range of
/// columns into a partial result and `fold` consumes the partial results strictly in block
/// order, so the result is bit-identical whatever the number of threads.
pub(super) fn reduce_column_blocks<T, M, F>(n1: usize, n2: usize, map: M, mut fold: F)
where
    T: Send,
    M: Fn(Range<usize>) -> T + Sync,
    F: FnMut(T),
{
    if n1 == 0 || n2 == 0 {
        return;
    }
    let cpb = cols_per_block(n1, n2);
    let n_blocks = n2.div_ceil(cpb);
    let cols = |b: usize| b * cpb..((b + 1) * cpb).min(n2);
    if !is_parallel(n1, n2) {
        (0..n_blocks).for_each(|b| fold(map(cols(b))));
        return;
    }
    // Waves bound the memory of pending partial results; they do not change the fold order.
    let wave = 4 * rayon::current_num_threads().max(1);
    for b0 in (0..n_blocks).step_by(wave) {
        let blocks = b0..(b0 + wave).min(n_blocks);
        let parts: Vec<T> = blocks.into_par_iter().map(|b| map(cols(b))).collect();
        parts.into_iter().for_each(&mut fold);
    }
}

/// Copies rows `r0..r0 + buf.len()` of column `j` of a (possibly strided) view into `buf`.
pub(super) fn copy_column(m: &DMatrixView<'_, f64>, j: usize, r0: usize, buf: &mut [f64]) {
    buf.copy_from_slice(column_slice(m, j, r0, buf.len()));
}

/// Rows `r0..r0 + len` of column `j` of a view as a slice (views have unit row stride, so a
/// column segment is contiguous).
#[inline]
pub(super) fn column_slice<'a>(m: &DMatrixView<'a, f64>, j: usize, r0: usize, len: usize) -> &'a [f64] {
    assert!(j < m.ncols() && r0 + len <= m.nrows(), "column_slice out of range");
    if len == 0 {
        return &[];
    }
    // SAFETY: the view guarantees that (i, j) for i < nrows lives at ptr + i + j·col_stride
    // (row stride 1, checked by the type) and stays valid for 'a; the range was checked above.
    unsafe { std::slice::from_raw_parts(m.as_ptr().add(j * m.strides().1 + r0), len) }
}

/// Contiguous column-major copy of an N×D input, read by row tiles.
pub(super) struct Rows {
    data: Vec<f64>,
    n: usize,
}

impl Rows {
    pub(super) fn new(x: &DMatrixView<'_, f64>) -> Self {
        Self { data: x.iter().copied().collect(), n: x.nrows() }
    }
    /// x_{i,d} for i in `rows`.
    #[inline]
    pub(super) fn col(&self, d: usize, rows: &Range<usize>) -> &[f64] {
        &self.data[d * self.n + rows.start..d * self.n + rows.end]
    }
}

/// Whether `x1` and `x2` are the very same view (same data, shape and strides): K(X, X) is
/// then symmetric and only its lower triangle needs evaluating.
pub(super) fn same_view(x1: &DMatrixView<'_, f64>, x2: &DMatrixView<'_, f64>) -> bool {
    x1.as_ptr() == x2.as_ptr() && x1.shape() == x2.shape() && x1.strides() == x2.strides()
}

/// Copies the strict lower triangle of a square matrix onto its upper triangle (tiled, so
/// that both the reads and the writes stay in cache).
pub(super) fn mirror_lower(m: &mut DMatrix<f64>) {
    const T: usize = 32;
    let n = m.nrows();
    let data = m.as_mut_slice();
    for j0 in (0..n).step_by(T) {
        for i0 in (0..=j0).step_by(T) {
            // Upper entries (i, j), i < j, in the tile rows i0.., columns j0..
            for j in j0..(j0 + T).min(n) {
                for i in i0..(i0 + T).min(j) {
                    data[j * n + i] = data[i * n + j];
                }
            }
        }
    }
}

/// exp(x) for a slice, in place, vectorised: Cody–Waite reduction x = k ln2 + r (|r| ≤ ln2/2),
/// a degree-13 Taylor polynomial for expm1(r) evaluated with fused multiply-adds (Estrin), and the
/// result 2ᵏ·(1 + expm1 r) rounded once. Error ≲ 1 ulp (glibc's `exp`: ≲ 0.5 ulp). Branch-free:
/// x is clamped to [−746, 710] (exp underflows to 0 / overflows to ∞ beyond), 2ᵏ is applied as
/// two exact power-of-two factors so that subnormal and infinite results come out right, and
/// NaN propagates. The same arithmetic runs on every target (an AVX2+FMA build is selected at
/// run time on x86-64), so results are bit-identical whichever path runs.
pub(super) mod vexp {
    const LOG2E: f64 = std::f64::consts::LOG2_E;
    /// ln 2 split so that k·LN2_HI is exact for |k| < 2¹¹ (fdlibm's constants, digits as published).
    #[allow(clippy::excessive_precision)]
    const LN2_HI: f64 = 6.931_471_803_691_238_164_9e-1;
    #[allow(clippy::excessive_precision)]
    const LN2_LO: f64 = 1.908_214_929_270_587_700_02e-10;
    /// 1.5·2⁵²: adding it rounds to an integer that sits in the low mantissa bits.
    const SHIFT: f64 = 6_755_399_441_055_744.0;
    const LO: f64 = -746.0;
    const HI: f64 = 710.0;
    /// 1/j! for j = 13 down to 2.
    const C: [f64; 12] = [
        1.0 / 6_227_020_800.0,
        1.0 / 479_001_600.0,
        1.0 / 39_916_800.0,
        1.0 / 3_628_800.0,
        1.0 / 362_880.0,
        1.0 / 40_320.0,
        1.0 / 5_040.0,
        1.0 / 720.0,
        1.0 / 120.0,
        1.0 / 24.0,
        1.0 / 6.0,
        0.5,
    ];

    /// 2ᵏ for k ∈ [−1022, 1023].
    #[inline(always)]
    fn pow2(k: i64) -> f64 {
        f64::from_bits((k.wrapping_add(1023) as u64).wrapping_shl(52))
    }

    #[inline(always)]
    pub(super) fn exp1(x: f64) -> f64 {
        let x = x.clamp(LO, HI); // NaN stays NaN
        let t = x.mul_add(LOG2E, SHIFT);
        let n = t - SHIFT;
        let r = (-n).mul_add(LN2_HI, x);
        let r = (-n).mul_add(LN2_LO, r);
        // p(r) = Σ_{j=2..13} r^{j−2}/j! by Estrin's scheme (short dependency chains, so that
        // successive vectors overlap in the pipeline).
        let r2 = r * r;
        let r4 = r2 * r2;
        let r8 = r4 * r4;
        let c = |j: usize| C[13 - j]; // 1/j!
        let q0 = c(3).mul_add(r, c(2));
        let q1 = c(5).mul_add(r, c(4));
        let q2 = c(7).mul_add(r, c(6));
        let q3 = c(9).mul_add(r, c(8));
        let q4 = c(11).mul_add(r, c(10));
        let q5 = c(13).mul_add(r, c(12));
        let s0 = q1.mul_add(r2, q0);
        let s1 = q3.mul_add(r2, q2);
        let s2 = q5.mul_add(r2, q4);
        let p = s2.mul_add(r8, s1.mul_add(r4, s0));
        let em1 = r2.mul_add(p, r);
        // k ∈ [−1077, 1025]; 2ᵏ = 2^k1 · 2^k2 with both factors normal. In the normal range
        // this is exactly 2ᵏ·round(1 + em1).
        let k = t.to_bits().wrapping_sub(SHIFT.to_bits()) as i64;
        let k1 = k >> 1;
        let s1 = pow2(k1);
        s1.mul_add(em1, s1) * pow2(k.wrapping_sub(k1))
    }

    #[inline(always)]
    fn exp_all(v: &mut [f64]) {
        v.iter_mut().for_each(|x| *x = exp1(*x));
    }

    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx2,fma")]
    fn exp_avx2_fma(v: &mut [f64]) {
        exp_all(v)
    }

    /// v ← exp(v), element-wise.
    pub fn exp_in_place(v: &mut [f64]) {
        #[cfg(target_arch = "x86_64")]
        if std::is_x86_feature_detected!("avx2") && std::is_x86_feature_detected!("fma") {
            // SAFETY: the CPU supports the features the function was compiled for.
            unsafe { exp_avx2_fma(v) };
            return;
        }
        exp_all(v)
    }
}

/// Checks that `x` has the dimension a kernel requires; returns it.
pub(super) fn check_dim(kind: &str, dim: Option<usize>, x: &DMatrixView<'_, f64>) -> usize {
    if let Some(d) = dim {
        assert_eq!(
            x.ncols(),
            d,
            "kernel {kind}: inputs have {} columns but the kernel has input dimension {d}",
            x.ncols()
        );
    }
    x.ncols()
}

/// Checks that X1 and X2 have the same dimension (and the kernel's, if fixed); returns it.
pub(super) fn check_inputs(
    kind: &str,
    dim: Option<usize>,
    x1: &DMatrixView<'_, f64>,
    x2: &DMatrixView<'_, f64>,
) -> usize {
    assert_eq!(x1.ncols(), x2.ncols(), "kernel {kind}: x1 has {} columns but x2 has {}", x1.ncols(), x2.ncols());
    check_dim(kind, dim, x1)
}

/// Checks that G has the shape of K(X1, X2).
pub(super) fn check_grad_shape(kind: &str, g: &DMatrixView<'_, f64>, n1: usize, n2: usize) {
    assert_eq!(g.shape(), (n1, n2), "kernel {kind}: G is {:?} but K(X1, X2) is {:?}", g.shape(), (n1, n2));
}

// ------------------------------------------------------------------------------------------
// Stationary engine
// ------------------------------------------------------------------------------------------

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
}

/// f(r²) = exp(−r²/2).
#[derive(Debug, Clone, Copy)]
struct SeProfile;

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
}

/// Hyperparameters and evaluation of a stationary kernel: variance s² and either one shared
/// length-scale (isotropic) or one per input dimension (ARD). Parameters: [log s², log ℓ…].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(super) struct Stationary {
    variance: f64,
    lengthscales: Vec<f64>,
    ard: bool,
    bounds: Vec<Bounds>,
}

/// r²_i = Σ_d ((x1_id − x2_jd)/ℓ_d)² for i in `rows`, written into `out`; `inv` holds 1/ℓ_d.
/// Exactly 0 for identical points.
#[inline]
fn sq_dist(x1: &Rows, rows: &Range<usize>, x2: &DMatrixView<'_, f64>, j: usize, inv: &[f64], out: &mut [f64]) {
    out.fill(0.0);
    for (d, &s) in inv.iter().enumerate() {
        let xj = x2[(j, d)];
        for (o, &a) in out.iter_mut().zip(x1.col(d, rows)) {
            let t = (a - xj) * s;
            *o += t * t;
        }
    }
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
        let bounds = vec![Bounds::positive_default(); 1 + lengthscales.len()];
        Self { variance, lengthscales, ard, bounds }
    }

    pub(super) fn variance(&self) -> f64 {
        self.variance
    }
    pub(super) fn lengthscales(&self) -> &[f64] {
        &self.lengthscales
    }
    pub(super) fn is_ard(&self) -> bool {
        self.ard
    }
    pub(super) fn n_params(&self) -> usize {
        1 + self.lengthscales.len()
    }
    pub(super) fn params(&self) -> Vec<f64> {
        let ls = self.lengthscales.iter().map(|l| l.ln());
        std::iter::once(self.variance.ln()).chain(ls).collect()
    }
    pub(super) fn set_params(&mut self, kind: &str, p: &[f64]) {
        assert_eq!(p.len(), self.n_params(), "kernel {kind}: wrong number of parameters");
        self.variance = p[0].exp();
        self.lengthscales.iter_mut().zip(&p[1..]).for_each(|(l, q)| *l = q.exp());
    }
    pub(super) fn param_names(&self) -> Vec<String> {
        let mut names = vec!["variance".to_string()];
        if self.ard {
            names.extend((0..self.lengthscales.len()).map(|d| format!("lengthscale[{d}]")));
        } else {
            names.push("lengthscale".to_string());
        }
        names
    }
    pub(super) fn bounds(&self) -> Vec<Bounds> {
        self.bounds.clone()
    }
    pub(super) fn set_bounds(&mut self, kind: &str, b: &[Bounds]) {
        assert_eq!(b.len(), self.n_params(), "kernel {kind}: wrong number of bounds");
        self.bounds = b.to_vec();
    }
    pub(super) fn input_dim(&self) -> Option<usize> {
        self.ard.then_some(self.lengthscales.len())
    }

    /// 1/ℓ_d for inputs of dimension `d`.
    pub(super) fn inv_lengthscales(&self, d: usize) -> Vec<f64> {
        if self.ard { self.lengthscales.iter().map(|l| 1.0 / l).collect() } else { vec![1.0 / self.lengthscales[0]; d] }
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
        let (x1r, n1, s2) = (Rows::new(&x1), x1.nrows(), self.variance);
        if k.shape() != (n1, x2.nrows()) {
            *k = DMatrix::from_vec(n1, x2.nrows(), vec![0.0; n1 * x2.nrows()]);
        }
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
                    let out = &mut col[rows.clone()];
                    sq_dist(&x1r, &rows, &x2, j, &inv, out);
                    prof.f_slice(out);
                    out.iter_mut().for_each(|v| *v *= s2);
                }
            }
        });
        if sym {
            mirror_lower(k);
        }
    }

    pub(super) fn diag(&self, kind: &str, x: DMatrixView<'_, f64>) -> DVector<f64> {
        check_dim(kind, self.input_dim(), &x);
        DVector::from_element(x.nrows(), self.variance)
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

        let s2 = self.variance;
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
        p[0] = self.variance * g.iter().sum::<f64>();
        p
    }
}

// ------------------------------------------------------------------------------------------
// Squared exponential
// ------------------------------------------------------------------------------------------

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
    fn name(&self) -> String {
        if self.core.is_ard() { "se-ard" } else { "se" }.to_string()
    }
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
    fn k(&self, x1: DMatrixView<'_, f64>, x2: DMatrixView<'_, f64>) -> DMatrix<f64> {
        self.core.k(SeProfile, &self.name(), x1, x2)
    }
    fn k_into(&self, x1: DMatrixView<'_, f64>, x2: DMatrixView<'_, f64>, out: &mut DMatrix<f64>) {
        self.core.k_into(SeProfile, &self.name(), x1, x2, out)
    }
    fn diag(&self, x: DMatrixView<'_, f64>) -> DVector<f64> {
        self.core.diag(&self.name(), x)
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
            .map_init(
                || DMatrix::<f64>::zeros(n1, CHUNK),
                |w, &(start, len)| {
                    // W for this chunk (n1×len, column-major, in a buffer reused across chunks),
                    // its row/column sums, then W·X2c as one thin GEMM.
                    let mut row_sum = vec![0.0; n1];
                    let mut col_sum = vec![0.0; len];
                    for (jj, cs_out) in col_sum.iter_mut().enumerate() {
                        let j = start + jj;
                        let (gc, kc) = (column_slice(&g, j, 0, n1), column_slice(&k, j, 0, n1));
                        let wc = &mut w.as_mut_slice()[jj * n1..(jj + 1) * n1];
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
                    crate::linalg::gemm(&mut wx2, 1.0, w.columns(0, len), false, x2c.as_view(), false, false);
                    (row_sum, wx2, col_sum)
                },
            )
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
    fn diag_vjp(&self, x: DMatrixView<'_, f64>, g: DVectorView<'_, f64>) -> Vec<f64> {
        self.core.diag_vjp(&self.name(), x, g)
    }
    fn clone_box(&self) -> Box<dyn Kernel> {
        Box::new(self.clone())
    }
}

/// Σ_i f(a_i, b_i) with four interleaved partial sums (so that the additions vectorise),
/// combined in a fixed order: deterministic.
#[inline(always)]
fn sum4(a: &[f64], b: &[f64], f: impl Fn(f64, f64) -> f64) -> f64 {
    let mut acc = [0.0f64; 4];
    let (ca, cb) = (a.chunks_exact(4), b.chunks_exact(4));
    let (ra, rb) = (ca.remainder(), cb.remainder());
    for (x, y) in ca.zip(cb) {
        for ((a, &xv), &yv) in acc.iter_mut().zip(x).zip(y) {
            *a += f(xv, yv);
        }
    }
    for (l, (&x, &y)) in ra.iter().zip(rb).enumerate() {
        acc[l] += f(x, y);
    }
    (acc[0] + acc[1]) + (acc[2] + acc[3])
}

// ------------------------------------------------------------------------------------------
// Test harness shared by every kernel's tests
// ------------------------------------------------------------------------------------------

#[cfg(test)]
pub(super) mod test_support {
    use super::super::{Kernel, KernelGrad};
    use nalgebra::{DMatrix, DVector, SymmetricEigen};
    use rand::{Rng, SeedableRng};
    use rand_chacha::ChaCha8Rng;

    /// Step of the central differences (log-parameters and inputs).
    const H: f64 = 1e-6;
    const RTOL: f64 = 1e-6;

    pub fn rng(seed: u64) -> ChaCha8Rng {
        ChaCha8Rng::seed_from_u64(seed)
    }

    pub fn uniform(rng: &mut ChaCha8Rng, r: usize, c: usize, lo: f64, hi: f64) -> DMatrix<f64> {
        DMatrix::from_fn(r, c, |_, _| rng.random_range(lo..hi))
    }

    /// |a − b| ≤ RTOL·max(|a|, |b|) + atol.
    pub fn assert_close(a: f64, b: f64, atol: f64, what: &str) {
        assert!(a.is_finite() && b.is_finite(), "{what}: non-finite {a} vs {b}");
        let tol = RTOL * a.abs().max(b.abs()) + atol;
        assert!((a - b).abs() <= tol, "{what}: {a} vs {b} (|diff| {} > {tol})", (a - b).abs());
    }

    /// ⟨G, K(X1, X2)⟩ and Σ|G∘K| (the scale of its rounding error).
    fn inner(k: &dyn Kernel, x1: &DMatrix<f64>, x2: &DMatrix<f64>, g: &DMatrix<f64>) -> (f64, f64) {
        let kk = k.k(x1.as_view(), x2.as_view());
        (g.dot(&kk), g.component_mul(&kk).abs().sum())
    }

    fn with_params(k: &dyn Kernel, p: &[f64]) -> Box<dyn Kernel> {
        let mut k = k.clone_box();
        k.set_params(p);
        k
    }

    /// (a) vjp(...).params = d/dθ ⟨G, K(θ)⟩.
    pub fn check_param_grad(k: &dyn Kernel, x1: &DMatrix<f64>, x2: &DMatrix<f64>, g: &DMatrix<f64>) {
        let an = k.vjp(x1.as_view(), x2.as_view(), g.as_view(), false);
        assert!(an.x1.is_none());
        assert_eq!(an.params.len(), k.n_params());
        let p0 = k.params();
        let atol = 1e-8 * (1.0 + inner(k, x1, x2, g).1);
        for (i, &a) in an.params.iter().enumerate() {
            let (mut pp, mut pm) = (p0.clone(), p0.clone());
            pp[i] += H;
            pm[i] -= H;
            let fp = inner(&*with_params(k, &pp), x1, x2, g).0;
            let fm = inner(&*with_params(k, &pm), x1, x2, g).0;
            assert_close(a, (fp - fm) / (2.0 * H), atol, &format!("{} dθ[{i}]", k.name()));
        }
    }

    /// (b) vjp(...).x1 = d/dX1 ⟨G, K(X1, X2)⟩ (and the params agree with the want_x1 = false call).
    pub fn check_x1_grad(k: &dyn Kernel, x1: &DMatrix<f64>, x2: &DMatrix<f64>, g: &DMatrix<f64>) {
        let an = k.vjp(x1.as_view(), x2.as_view(), g.as_view(), true);
        let plain = k.vjp(x1.as_view(), x2.as_view(), g.as_view(), false);
        assert_eq!(an.params, plain.params, "{}: params depend on want_x1", k.name());
        let gx = an.x1.expect("x1 gradient requested");
        assert_eq!(gx.shape(), x1.shape());
        let atol = 1e-8 * (1.0 + inner(k, x1, x2, g).1);
        for i in 0..x1.nrows() {
            for d in 0..x1.ncols() {
                let (mut xp, mut xm) = (x1.clone(), x1.clone());
                xp[(i, d)] += H;
                xm[(i, d)] -= H;
                let fd = (inner(k, &xp, x2, g).0 - inner(k, &xm, x2, g).0) / (2.0 * H);
                assert_close(gx[(i, d)], fd, atol, &format!("{} dX1[{i},{d}]", k.name()));
            }
        }
    }

    /// (c) diag_vjp = d/dθ ⟨g, diag K(θ)⟩.
    pub fn check_diag_vjp(k: &dyn Kernel, x: &DMatrix<f64>, g: &DVector<f64>) {
        let an = k.diag_vjp(x.as_view(), g.as_view());
        assert_eq!(an.len(), k.n_params());
        let p0 = k.params();
        let atol = 1e-8 * (1.0 + g.component_mul(&k.diag(x.as_view())).abs().sum());
        for (i, &a) in an.iter().enumerate() {
            let (mut pp, mut pm) = (p0.clone(), p0.clone());
            pp[i] += H;
            pm[i] -= H;
            let fp = g.dot(&with_params(k, &pp).diag(x.as_view()));
            let fm = g.dot(&with_params(k, &pm).diag(x.as_view()));
            assert_close(a, (fp - fm) / (2.0 * H), atol, &format!("{} diag dθ[{i}]", k.name()));
        }
    }

    /// (d) diag(X) = diag K(X, X).
    pub fn check_diag(k: &dyn Kernel, x: &DMatrix<f64>) {
        let full = k.k(x.as_view(), x.as_view());
        let d = k.diag(x.as_view());
        assert_eq!(d.len(), x.nrows());
        for i in 0..x.nrows() {
            assert_close(d[i], full[(i, i)], 1e-14, &format!("{} diag[{i}]", k.name()));
        }
    }

    /// (e) K(X, X) is symmetric and positive semidefinite.
    pub fn check_psd(k: &dyn Kernel, x: &DMatrix<f64>) {
        let kk = k.k(x.as_view(), x.as_view());
        let scale = kk.abs().max();
        for i in 0..kk.nrows() {
            for j in 0..i {
                let (a, b) = (kk[(i, j)], kk[(j, i)]);
                assert!((a - b).abs() <= 1e-14 * scale, "{} not symmetric", k.name());
            }
        }
        let min = SymmetricEigen::new(kk.clone()).eigenvalues.min();
        assert!(min >= -1e-10 * kk.trace(), "{}: eigenvalue {min}", k.name());
    }

    /// (g) set_params(params()) round-trips; names, bounds and params agree in length.
    pub fn check_roundtrip(k: &dyn Kernel, x: &DMatrix<f64>) {
        let p = k.params();
        assert_eq!(p.len(), k.n_params());
        assert_eq!(k.param_names().len(), k.n_params());
        assert_eq!(k.bounds().len(), k.n_params());
        let k2 = with_params(k, &p);
        assert_eq!(k2.name(), k.name());
        for (a, b) in k2.params().iter().zip(&p) {
            assert!((a - b).abs() <= 1e-15 * (1.0 + b.abs()), "{}: {a} vs {b}", k.name());
        }
        let (ka, kb) = (k.k(x.as_view(), x.as_view()), k2.k(x.as_view(), x.as_view()));
        assert!((&ka - kb).abs().max() <= 1e-14, "{}: K changed", k.name());
        // Set values are really used.
        let shifted: Vec<f64> = p.iter().map(|v| v + 0.25).collect();
        assert_eq!(with_params(k, &shifted).params().len(), p.len());
        assert_ne!(with_params(k, &shifted).k(x.as_view(), x.as_view()), ka);
    }

    /// (a)–(e) and (g) on random, well-conditioned inputs of dimension `d`.
    pub fn check_all(k: &dyn Kernel, d: usize, seed: u64) {
        let mut r = rng(seed);
        let x1 = uniform(&mut r, 5, d, -1.0, 1.0);
        let x2 = uniform(&mut r, 7, d, -1.0, 1.0);
        let g = uniform(&mut r, 5, 7, -1.0, 1.0);
        let gd = DVector::from_fn(5, |_, _| r.random_range(-1.0..1.0));
        check_param_grad(k, &x1, &x2, &g);
        check_x1_grad(k, &x1, &x2, &g);
        check_diag_vjp(k, &x1, &gd);
        check_diag(k, &x1);
        let x = uniform(&mut r, 12, d, -1.0, 1.0);
        check_psd(k, &x);
        check_roundtrip(k, &x);
    }

    fn max_rel_diff(a: &DMatrix<f64>, b: &DMatrix<f64>) -> f64 {
        (a - b).abs().max() / b.abs().max().max(1e-300)
    }

    /// Σ of the vjps over `parts` slices of X2's rows (G's columns): params summed, and the
    /// X1 gradients summed.
    fn sliced_vjp(k: &dyn Kernel, x1: &DMatrix<f64>, x2: &DMatrix<f64>, g: &DMatrix<f64>) -> KernelGrad {
        let (n2, w) = (x2.nrows(), x2.nrows() / 4);
        let mut sum = KernelGrad { params: vec![0.0; k.n_params()], x1: Some(DMatrix::zeros(x1.nrows(), x1.ncols())) };
        for c0 in (0..n2).step_by(w) {
            let part = k.vjp(x1.as_view(), x2.rows(c0, w), g.columns(c0, w), true);
            sum.params.iter_mut().zip(&part.params).for_each(|(p, q)| *p += q);
            *sum.x1.as_mut().unwrap() += part.x1.unwrap();
        }
        sum
    }

    /// vjp == sliced_vjp up to rounding (scale: Σ|G∘K|).
    fn assert_vjp_close(k: &dyn Kernel, a: &KernelGrad, b: &KernelGrad, scale: f64, what: &str) {
        for (i, (p, q)) in a.params.iter().zip(&b.params).enumerate() {
            assert!((p - q).abs() <= 1e-10 * scale, "{} {what}: dθ[{i}] {p} vs {q}", k.name());
        }
        let (ax, bx) = (a.x1.as_ref().unwrap(), b.x1.as_ref().unwrap());
        if ax.abs().max() > 0.0 {
            assert!(max_rel_diff(ax, bx) <= 1e-10, "{} {what}: dX1", k.name());
        }
    }

    /// (h) A parallel-size case (300×2000, and its transpose 2000×300 whose rows span several
    /// row tiles): K and the vjp are bit-identical across calls and thread counts, K equals a
    /// naive per-entry evaluation, and the vjp equals the sum of vjps over column slices (which
    /// exercises the ordered merge of many blocks).
    pub fn check_parallel(k: &dyn Kernel, d: usize, naive: impl Fn(&[f64], &[f64]) -> f64) {
        let mut r = rng(99);
        let x1 = uniform(&mut r, 300, d, -1.0, 1.0);
        let x2 = uniform(&mut r, 2000, d, -1.0, 1.0);
        let g = uniform(&mut r, 300, 2000, -1.0, 1.0);
        let one_thread = rayon::ThreadPoolBuilder::new().num_threads(1).build().unwrap();
        let row = |m: &DMatrix<f64>, i: usize| m.row(i).iter().copied().collect::<Vec<_>>();
        let r1: Vec<_> = (0..300).map(|i| row(&x1, i)).collect();
        let r2: Vec<_> = (0..2000).map(|j| row(&x2, j)).collect();
        let nv = DMatrix::from_fn(300, 2000, |i, j| naive(&r1[i], &r2[j]));
        let scale = g.component_mul(&nv).abs().sum();

        // ⟨G, K(X1, X2)⟩ = ⟨Gᵀ, K(X2, X1)⟩: both orientations give the same dθ.
        let mut dtheta: Vec<Vec<f64>> = Vec::new();
        for (x1, x2, g, nv) in [(&x1, &x2, g.clone(), nv.clone()), (&x2, &x1, g.transpose(), nv.transpose())] {
            let what = format!("{}×{}", x1.nrows(), x2.nrows());
            let eval = || k.k(x1.as_view(), x2.as_view());
            let kk = eval();
            assert_eq!(kk, eval(), "{} {what}: K not repeatable", k.name());
            assert_eq!(kk, one_thread.install(eval), "{} {what}: K depends on threads", k.name());
            assert!(max_rel_diff(&kk, &nv) <= 1e-12, "{} {what}: K vs naive", k.name());

            let vjp = || k.vjp(x1.as_view(), x2.as_view(), g.as_view(), true);
            let a = vjp();
            assert_eq!(a, vjp(), "{} {what}: vjp not repeatable", k.name());
            assert_eq!(a, one_thread.install(vjp), "{} {what}: vjp depends on threads", k.name());
            assert_vjp_close(k, &a, &sliced_vjp(k, x1, x2, &g), scale, &what);
            if let Some(first) = dtheta.first() {
                for (p, q) in a.params.iter().zip(first) {
                    assert!((p - q).abs() <= 1e-10 * scale, "{}: dθ of K(X2, X1)", k.name());
                }
            }
            dtheta.push(a.params.clone());
            // Row slices (strided views, each within one row tile) give the same dX1 rows.
            let (ax, h) = (a.x1.as_ref().unwrap(), x1.nrows() / 5);
            for r0 in (0..x1.nrows()).step_by(h) {
                let part = k.vjp(x1.rows(r0, h), x2.as_view(), g.rows(r0, h), true);
                let (px, rows) = (part.x1.unwrap(), ax.rows(r0, h).clone_owned());
                let err = (&px - &rows).abs().max();
                assert!(err <= 1e-10 * ax.abs().max(), "{} {what}: dX1 rows {r0}..", k.name());
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::test_support::*;
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
