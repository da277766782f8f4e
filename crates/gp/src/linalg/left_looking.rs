//! A left-looking Cholesky factorisation for the small matrices of exact GPs and re-fits
//! (n up to a few hundred, one core): [`super::Cholesky::factor_of`]'s one-core path
//! (docs/decisions.md D34; `bench gp` times it beside faer's, [`super::faer_factor`]).
//!
//! Golub & Van Loan (2013, *Matrix Computations*, 4th ed., §4.2.8–4.2.9) give the left-looking
//! ("gaxpy") form of the Cholesky factorisation and its blocked version. Here the blocks are
//! [`BLOCK`] columns wide: block column J = [j, j + b) is
//!
//! 1. copied from A (plus the jitter on the diagonal, [`load`]),
//! 2. brought up to date with everything to its left by one matrix product,
//!    A[j:, J] −= L[j:, :j] · L[J, :j]ᵀ, an (n − j) × j × b GEMM whose inner dimension j is long, so
//!    faer runs it near its full rate, and
//! 3. factored column by column ([`panel`]), each column an axpy per earlier column of the block,
//!    which folds the panel's triangular solve into the factorisation.
//!
//! At n = 225 on a 2-core Zen 4 it takes 97–98 µs where faer 0.24's blocked factorisation
//! (which at this size spends its time in recursion and small triangular solves) takes
//! 132–135 µs: 74–80% and 53–58% of one core's GEMM rate in three `bench gp` runs
//! (docs/results.md, "Speed"). Its backward error
//! ‖LLᵀ − A‖/‖A‖ is no worse than faer's on SE kernel matrices with condition numbers up to
//! 10¹⁴ (tested).
//!
//! It rounds differently from faer's, so adopting it changed the last bits of every exact GP
//! below [`super::par_for`]'s threshold. With its rounding the thesis-DP grid once blew up
//! (Noisy and Hybrid party-runs above RMSE 100); the cause was not this factor but the
//! acceptance of pivots at the rounding level, which docs/decisions.md D33 now refuses.
//!
//! The panel runs on whichever of AVX-512, AVX2 or plain x86-64 (SSE2) the CPU has, chosen at
//! run time. The three compile the same source; Rust never fuses a multiply and an add, so they
//! round identically, and the factor's bits do not depend on the CPU beyond what faer's GEMM does
//! (tested: `every_panel_path_gives_the_same_bits`).

use faer::prelude::Reborrow;
use faer::{Accum, MatMut, Par};

/// Columns per block: 4 was faster than 8 at n = 100, 225 and 500 (docs/results.md, "Speed").
const BLOCK: usize = 4;

/// Fill `l` (cleared first) with A + εI's lower triangle and zeros above it, the input of
/// [`factor_in_place`]. A is n × n and column-major (`a[i + n·j]` = A_ij); only its lower
/// triangle is read. One pass, so the factor's storage is written once before the factorisation.
pub(super) fn load(a: &[f64], n: usize, eps: f64, l: &mut Vec<f64>) {
    assert_eq!(a.len(), n * n, "load: shape");
    l.clear();
    l.reserve(n * n);
    for c in 0..n {
        l.resize(c * n + c, 0.0);
        l.extend_from_slice(&a[c * n + c..(c + 1) * n]);
        l[c * n + c] += eps;
    }
}

/// Factor in place the matrix that [`load`] wrote: on success `l` holds the Cholesky factor,
/// zero above the diagonal. Returns `false` when a pivot is not positive and finite; `l` is then
/// partly overwritten.
pub(super) fn factor_in_place(l: &mut [f64], n: usize) -> bool {
    factor_on(Path::detect(), l, n)
}

/// [`factor_in_place`] on a given path, which must be available on this CPU.
fn factor_on(path: Path, l: &mut [f64], n: usize) -> bool {
    assert_eq!(l.len(), n * n, "factor_in_place: shape");
    let mut j = 0;
    while j < n {
        let b = BLOCK.min(n - j);
        if j > 0 {
            // The product also writes the strict upper part of the diagonal block, which is
            // zero before it (from `load`) and zeroed again after the panel.
            let lm = MatMut::from_column_major_slice_mut(&mut *l, n, n);
            let (left, right) = lm.split_at_col_mut(j);
            let below = left.rb().submatrix(j, 0, n - j, j);
            let across = left.rb().submatrix(j, 0, b, j);
            faer::linalg::matmul::matmul(
                right.submatrix_mut(j, 0, n - j, b),
                Accum::Add,
                below,
                across.transpose(),
                -1.0,
                Par::Seq,
            );
        }
        // SAFETY: `l` holds n × n values with column stride n, j + b ≤ n, and `path` is
        // available on this CPU (`factor_on`'s contract).
        if !unsafe { panel(path, l.as_mut_ptr(), n, n, j, b) } {
            return false;
        }
        for c in j + 1..j + b {
            l[c * n + j..c * n + c].fill(0.0);
        }
        j += b;
    }
    true
}

/// The instruction set the panel runs on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Path {
    Avx512,
    Avx2,
    /// Whatever the build targets (x86-64: SSE2).
    Baseline,
}

impl Path {
    #[cfg(test)]
    const ALL: [Path; 3] = [Path::Avx512, Path::Avx2, Path::Baseline];

    /// The widest path this CPU has.
    fn detect() -> Path {
        #[cfg(target_arch = "x86_64")]
        {
            if std::is_x86_feature_detected!("avx512f") {
                return Path::Avx512;
            }
            if std::is_x86_feature_detected!("avx2") {
                return Path::Avx2;
            }
        }
        Path::Baseline
    }

    /// Whether this CPU can run the path.
    #[cfg(test)]
    fn available(self) -> bool {
        match self {
            #[cfg(target_arch = "x86_64")]
            Path::Avx512 => std::is_x86_feature_detected!("avx512f"),
            #[cfg(target_arch = "x86_64")]
            Path::Avx2 => std::is_x86_feature_detected!("avx2"),
            #[cfg(not(target_arch = "x86_64"))]
            Path::Avx512 | Path::Avx2 => false,
            Path::Baseline => true,
        }
    }
}

/// Factor columns j..j+b of L in place, rows c..n of each column c, once the block column holds
/// A[j:, J] − L[j:, :j]·L[J, :j]ᵀ: for each column, subtract the earlier columns of the block
/// (L[c:, c] −= L[c, k]·L[c:, k]), take the square root of the pivot and scale below it.
///
/// # Safety
/// `p` points to an n × n column-major matrix with column stride `ld` ≥ n that nothing else
/// accesses during the call, j + b ≤ n, and `path` is available on this CPU.
unsafe fn panel(path: Path, p: *mut f64, ld: usize, n: usize, j: usize, b: usize) -> bool {
    // SAFETY: (all arms) the caller's contract; the target-feature arms are taken only where
    // `Path::detect` (or the test's `available`) found the feature.
    unsafe {
        match path {
            #[cfg(target_arch = "x86_64")]
            Path::Avx512 => panel_avx512(p, ld, n, j, b),
            #[cfg(target_arch = "x86_64")]
            Path::Avx2 => panel_avx2(p, ld, n, j, b),
            _ => panel_body(p, ld, n, j, b),
        }
    }
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
unsafe fn panel_avx512(p: *mut f64, ld: usize, n: usize, j: usize, b: usize) -> bool {
    // SAFETY: forwarded from `panel`.
    unsafe { panel_body(p, ld, n, j, b) }
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn panel_avx2(p: *mut f64, ld: usize, n: usize, j: usize, b: usize) -> bool {
    // SAFETY: forwarded from `panel`.
    unsafe { panel_body(p, ld, n, j, b) }
}

#[inline(always)]
unsafe fn panel_body(p: *mut f64, ld: usize, n: usize, j: usize, b: usize) -> bool {
    for c in j..j + b {
        // SAFETY: column c's rows c..n and column k's rows c..n (k < c) are disjoint ranges
        // inside the matrix (`panel`'s contract).
        let col = unsafe { std::slice::from_raw_parts_mut(p.add(c * ld + c), n - c) };
        for k in j..c {
            // SAFETY: as above.
            let lk = unsafe { std::slice::from_raw_parts(p.add(k * ld + c), n - c) };
            let f = lk[0];
            for (x, y) in col.iter_mut().zip(lk) {
                *x -= f * y;
            }
        }
        let d = col[0];
        // `!(d > 0)` also catches NaN.
        if !(d > 0.0 && d.is_finite()) {
            return false;
        }
        let d = d.sqrt();
        col[0] = d;
        let inv = 1.0 / d;
        for x in &mut col[1..] {
            *x *= inv;
        }
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::{Rng, SeedableRng};

    /// A random SPD matrix B Bᵀ/n + I, column-major, with NaN above the diagonal (only the
    /// lower triangle may be read).
    fn spd(n: usize, seed: u64) -> Vec<f64> {
        let mut r = rand_chacha::ChaCha8Rng::seed_from_u64(seed);
        let b: Vec<f64> = (0..n * (n + 2)).map(|_| r.random_range(-1.0..1.0)).collect();
        let mut a = vec![f64::NAN; n * n];
        for j in 0..n {
            for i in j..n {
                let s: f64 = (0..n + 2).map(|k| b[i + n * k] * b[j + n * k]).sum();
                a[i + n * j] = s / n as f64 + if i == j { 1.0 } else { 0.0 };
            }
        }
        a
    }

    fn paths() -> Vec<Path> {
        Path::ALL.into_iter().filter(|p| p.available()).collect()
    }

    #[test]
    fn every_panel_path_gives_the_same_bits() {
        for n in [1, 3, 4, 37, 225] {
            let a = spd(n, n as u64);
            let mut reference = Vec::new();
            load(&a, n, 1e-9, &mut reference);
            assert!(factor_on(Path::Baseline, &mut reference, n));
            for path in paths() {
                let mut l = Vec::new();
                load(&a, n, 1e-9, &mut l);
                assert!(factor_on(path, &mut l, n));
                let same = l.iter().zip(&reference).all(|(x, y)| x.to_bits() == y.to_bits());
                assert!(same, "n = {n}: the {path:?} panel rounds differently from the baseline");
            }
        }
    }

    #[test]
    fn the_factor_reconstructs_a_and_agrees_with_faer() {
        use faer::dyn_stack::{MemBuffer, MemStack};
        use faer::linalg::cholesky::llt::factor::{cholesky_in_place, cholesky_in_place_scratch};
        for n in [2, 5, 64, 131, 300] {
            let a = spd(n, 7 + n as u64);
            let eps = 0.25;
            let mut l = Vec::new();
            load(&a, n, eps, &mut l);
            assert!(factor_in_place(&mut l, n));
            let mut worst: f64 = 0.0;
            for j in 0..n {
                for i in 0..j {
                    assert_eq!(l[i + n * j], 0.0, "n = {n}: L({i}, {j}) above the diagonal");
                }
                for i in j..n {
                    let llt: f64 = (0..=j).map(|k| l[i + n * k] * l[j + n * k]).sum();
                    let want = a[i + n * j] + if i == j { eps } else { 0.0 };
                    worst = worst.max((llt - want).abs());
                }
            }
            assert!(worst < 1e-12, "n = {n}: |LLᵀ − (A + εI)| = {worst:e}");
            // faer's blocked factorisation of the same matrix: the same factor up to round-off.
            let mut f = Vec::new();
            load(&a, n, eps, &mut f);
            let mut buf = MemBuffer::new(cholesky_in_place_scratch::<f64>(n, Par::Seq, Default::default()));
            let m = MatMut::from_column_major_slice_mut(&mut f, n, n);
            cholesky_in_place(m, Default::default(), Par::Seq, MemStack::new(&mut buf), Default::default())
                .expect("faer factors an SPD matrix");
            let diff = (0..n * n).filter(|k| k % n >= k / n).map(|k| (l[k] - f[k]).abs()).fold(0.0, f64::max);
            assert!(diff < 1e-12, "n = {n}: differs from faer by {diff:e}");
        }
    }

    #[test]
    fn on_ill_conditioned_kernel_matrices_the_backward_error_is_no_worse_than_faers() {
        use faer::dyn_stack::{MemBuffer, MemStack};
        use faer::linalg::cholesky::llt::factor::{cholesky_in_place, cholesky_in_place_scratch};
        let mut r = rand_chacha::ChaCha8Rng::seed_from_u64(1);
        // SE kernel matrices with long length-scales and tiny noise: condition numbers 10⁸–10¹⁴.
        for (n, ell, noise) in [(100, 3.0, 1e-8), (225, 10.0, 1e-10), (225, 30.0, 1e-12), (60, 5.0, 1e-14)] {
            let x: Vec<f64> = (0..n).map(|_| r.random_range(-2.0..2.0)).collect();
            let a: Vec<f64> = (0..n * n)
                .map(|k| {
                    let (i, j) = (k % n, k / n);
                    (-0.5 * (x[i] - x[j]).powi(2) / (ell * ell)).exp() + if i == j { noise } else { 0.0 }
                })
                .collect();
            let backward = |l: &[f64]| {
                let (mut num, mut den) = (0.0, 0.0);
                for j in 0..n {
                    for i in 0..n {
                        let llt: f64 = (0..=i.min(j)).map(|k| l[i + n * k] * l[j + n * k]).sum();
                        num += (llt - a[i + n * j]).powi(2);
                        den += a[i + n * j].powi(2);
                    }
                }
                (num / den).sqrt()
            };
            let mut ours = Vec::new();
            load(&a, n, 0.0, &mut ours);
            assert!(factor_in_place(&mut ours, n), "n = {n}, ℓ = {ell}: refused");
            let mut theirs = Vec::new();
            load(&a, n, 0.0, &mut theirs);
            let mut buf = MemBuffer::new(cholesky_in_place_scratch::<f64>(n, Par::Seq, Default::default()));
            let m = MatMut::from_column_major_slice_mut(&mut theirs, n, n);
            cholesky_in_place(m, Default::default(), Par::Seq, MemStack::new(&mut buf), Default::default())
                .expect("faer factors it");
            let (e_ours, e_faer) = (backward(&ours), backward(&theirs));
            assert!(
                e_ours <= 2.0 * e_faer + 1e-17,
                "n = {n}, ℓ = {ell}: backward error {e_ours:e} against faer's {e_faer:e}"
            );
        }
    }

    #[test]
    fn a_matrix_that_is_not_positive_definite_is_refused() {
        // All ones (rank one) with a smaller second diagonal entry: the second pivot is negative.
        let n = 6;
        let mut a = vec![1.0; n * n];
        a[1 + n] = 0.5;
        let mut l = Vec::new();
        load(&a, n, 0.0, &mut l);
        assert!(!factor_in_place(&mut l, n));
        // A jitter that makes it positive definite is accepted, in the storage of the failure.
        load(&a, n, 1.0, &mut l);
        assert!(factor_in_place(&mut l, n));
        // A NaN or an infinity anywhere in the lower triangle reaches a pivot.
        for (i, j, v) in [(3, 1, f64::NAN), (5, 0, f64::INFINITY), (5, 4, f64::NEG_INFINITY), (2, 2, f64::INFINITY)] {
            let mut bad = spd(n, 3);
            bad[i + n * j] = v;
            load(&bad, n, 0.0, &mut l);
            assert!(!factor_in_place(&mut l, n), "({i}, {j}) = {v} was accepted");
        }
    }
}
