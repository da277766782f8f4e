//! Evaluation machinery shared by every kernel: a partition of an N1×N2 output into column
//! blocks that depends only on the shape, with ordered (hence bit-deterministic) parallel
//! reductions over those blocks; row tiles and contiguous row copies; the input-shape checks.

use nalgebra::{DMatrix, DMatrixView};
use rayon::prelude::*;
use std::ops::Range;

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

/// Σ_i f(a_i, b_i) with four interleaved partial sums (so that the additions vectorise),
/// combined in a fixed order: deterministic.
#[inline(always)]
pub(super) fn sum4(a: &[f64], b: &[f64], f: impl Fn(f64, f64) -> f64) -> f64 {
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
