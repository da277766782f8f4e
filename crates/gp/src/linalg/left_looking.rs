//! A left-looking Cholesky factorisation for the small matrices of exact GPs and re-fits
//! (n up to a few hundred, one core): [`super::Cholesky::factor_of`]'s one-core path
//! (docs/decisions.md D34, D36; `bench gp` times it beside faer's, [`super::faer_factor`]).
//!
//! Golub & Van Loan (2013, *Matrix Computations*, 4th ed., §4.2.8–4.2.9) give the left-looking
//! ("gaxpy") form of the Cholesky factorisation and its blocked version. Here the blocks are
//! 8 columns wide, and L is built in row panels of 8 (`register_tile`): for block column
//! J = [j, j + b) and each block of 8 rows R at or below it,
//!
//! 1. one register tile brings A[R, J] up to date with everything to its left,
//!    W = A[R, J] − L[R, :j] L[J, :j]ᵀ, an 8 × j × b product whose inner dimension j is long, at
//!    the tile's full rate;
//! 2. the diagonal block is factored in scalars, W_JJ + εI = L_JJ L_JJᵀ; each block below it is
//!    solved in registers, L[R, J] = W L_JJ⁻ᵀ, column by column ([`below`]).
//!
//! At n = 225 on a 2-core Zen 4 it takes about 90 µs where faer 0.24's blocked factorisation
//! (which at this size spends its time in recursion and small triangular solves) takes about
//! 132 µs (docs/decisions.md D36 and docs/results.md, "Speed", for the measured runs). Its
//! backward error ‖LLᵀ − A‖/‖A‖ is no worse than faer's on SE kernel matrices with condition
//! numbers up to 10¹⁴ (tested).
//!
//! It rounds differently from faer's, so adopting it changed the last bits of every exact GP
//! below [`super::par_for`]'s threshold. With the rounding of its first version the thesis-DP
//! grid once blew up (Noisy and Hybrid party-runs above RMSE 100); the cause was not the factor
//! but the acceptance of pivots at the rounding level, which docs/decisions.md D33 now refuses.
//!
//! It runs on whichever of AVX-512, AVX2 + FMA or the baseline the CPU has, chosen at run time,
//! with the same bits on each (`register_tile`; tested: `every_path_gives_the_same_bits`), so
//! the factor does not depend on the CPU. A CPU without AVX2 + FMA gets faer's factorisation
//! instead (`register_tile::in_hardware`: the baseline's software FMAs are 40× slower).

#[cfg(target_arch = "x86_64")]
use super::register_tile::x86;
use super::register_tile::{B, Lanes, Path, at, tile, with_nb, with_panels};

/// Write into `l` (cleared first) the Cholesky factor of A + εI, n × n column-major with zeros
/// above the diagonal. A is n × n and column-major (`a[i + n·j]` = A_ij); only its lower
/// triangle is read. Returns `false` when a pivot is not positive and finite; `l` is then
/// empty.
pub(super) fn factor(a: &[f64], n: usize, eps: f64, l: &mut Vec<f64>) -> bool {
    factor_on(Path::detect(), a, n, eps, l)
}

/// [`factor`] on a given path, which must be available on this CPU.
fn factor_on(path: Path, a: &[f64], n: usize, eps: f64, l: &mut Vec<f64>) -> bool {
    assert_eq!(a.len(), n * n, "factor: shape");
    // Each entry of L is written once: the zeros above the diagonal here, the factor by the
    // kernel (no memset of the whole matrix first, 4% of the time at n = 225).
    l.clear();
    l.reserve(n * n);
    let spare = &mut l.spare_capacity_mut()[..n * n];
    for c in 1..n {
        for slot in &mut spare[c * n..c * n + c] {
            slot.write(0.0);
        }
    }
    let out = spare.as_mut_ptr().cast::<f64>();
    // Every panel entry a tile reads is stored first (tested with poisoned panels).
    let ok = with_panels(n, 0, |p, _| {
        // SAFETY: `p` holds ⌈n/8⌉ panels of 8 × n, `a` is n × n, `out` is valid for n × n
        // writes, and `path` is available on this CPU (`factor_on`'s contract).
        unsafe {
            match path {
                #[cfg(target_arch = "x86_64")]
                Path::Avx512 => factor_avx512(a, n, eps, p, out),
                #[cfg(target_arch = "x86_64")]
                Path::Avx2 => factor_avx2(a, n, eps, p, out),
                _ => factor_panels::<f64>(a, n, eps, p, out),
            }
        }
    });
    if ok {
        // SAFETY: a factorisation that succeeds writes every entry on and below the diagonal
        // (each block column's diagonal block and all rows below it); the zeros above were
        // written before.
        unsafe { l.set_len(n * n) };
    }
    ok
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
unsafe fn factor_avx512(a: &[f64], n: usize, eps: f64, p: &mut [f64], l: *mut f64) -> bool {
    // SAFETY: forwarded from `factor_on`; AVX-512F is available.
    unsafe { factor_panels::<x86::V8>(a, n, eps, p, l) }
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn factor_avx2(a: &[f64], n: usize, eps: f64, p: &mut [f64], l: *mut f64) -> bool {
    // SAFETY: forwarded from `factor_on`; AVX2 and FMA are available.
    unsafe { factor_panels::<x86::V4>(a, n, eps, p, l) }
}

/// The factorisation by block columns J = [j, j + b) of 8, left to right. For each block of rows
/// R ≥ J, the tile T = Σ_{m < j} L[R, m] L[J, m]ᵀ (from the panels of R and J) gives
/// W = A[R, J] − T; the diagonal block is factored in scalars, L_JJ L_JJᵀ = W_JJ + εI; below it
/// L[R, J] = W L_JJ⁻ᵀ, column by column, L[R, j + t] = (W[:, t] − Σ_{k<t} L[R, j + k] L_JJ[t, k]) /
/// L_JJ[t, t] in vectors over the rows (the division as a product with the reciprocal). Each
/// block of L goes to its panel (which later tiles read) and to `l`.
///
/// # Safety
/// The vector type's instructions are available; `p` holds ⌈n/8⌉ panels of 8 × n; `a` is n × n
/// and `l` valid for n × n writes (only entries on and below the diagonal are written).
#[inline(always)]
unsafe fn factor_panels<V: Lanes>(a: &[f64], n: usize, eps: f64, p: &mut [f64], l: *mut f64) -> bool {
    let mut j = 0;
    while j < n {
        let b = B.min(n - j);
        // The diagonal block: W_JJ = A_JJ + εI − T, lower triangle, then its factor d (d[t][q]
        // = L_JJ[q, t], column t), by columns (right-looking inside the block).
        let mut d = [[0.0f64; B]; B];
        for h in (0..B).step_by(V::W) {
            // SAFETY: panel J's columns 0..j (the caller's contract); lanes h..h + W.
            let t = unsafe { with_nb!(b, tile::<V>(p.as_ptr().add(at(n, j, 0) + h), p.as_ptr().add(at(n, j, 0)), j)) };
            for (c, &tc) in t.iter().enumerate().take(b) {
                let mut lanes = [0.0f64; B];
                // SAFETY: `lanes` holds 8 ≥ W values.
                unsafe { V::store(lanes.as_mut_ptr(), tc) };
                for (q, &v) in lanes.iter().enumerate().take(V::W) {
                    let row = h + q;
                    if row >= c && row < b {
                        let diag = if row == c { eps } else { 0.0 };
                        d[c][row] = (a[(j + c) * n + j + row] + diag) - v;
                    }
                }
            }
        }
        for c in 0..b {
            let pivot = d[c][c];
            // `!(pivot > 0)` also catches NaN.
            if !(pivot > 0.0 && pivot.is_finite()) {
                return false;
            }
            let root = pivot.sqrt();
            let inv = 1.0 / root;
            d[c][c] = root;
            for x in &mut d[c][c + 1..b] {
                *x *= inv;
            }
            let (done, rest) = d.split_at_mut(c + 1);
            let dc = &done[c];
            for (c2, col) in rest.iter_mut().enumerate().take(b - c - 1).map(|(k, col)| (c + 1 + k, col)) {
                let f = dc[c2];
                for (x, &y) in col[c2..b].iter_mut().zip(&dc[c2..b]) {
                    *x -= y * f;
                }
            }
        }
        let recip: [f64; B] = std::array::from_fn(|c| if c < b { 1.0 / d[c][c] } else { 0.0 });
        // L_JJ into panel J (all 8 lanes of its columns: zeros above the diagonal and in the
        // padding rows of the last panel) and into `l`.
        for c in 0..b {
            for q in 0..B {
                p[at(n, j, j + c) + q] = if q >= c && q < b { d[c][q] } else { 0.0 };
            }
            // SAFETY: rows j + c..j + b of column j + c, inside L (the caller's contract).
            unsafe { std::ptr::copy_nonoverlapping(d[c][c..b].as_ptr(), l.add((j + c) * n + j + c), b - c) };
        }
        // The blocks of rows below.
        let mut r = j + B;
        while r < n {
            for h in (0..B).step_by(V::W) {
                // SAFETY: the caller's contract; lanes h..h + W of rows R.
                unsafe { with_nb!(b, below::<V>(a, n, p, l, (j, r, h), &d, &recip)) };
            }
            r += B;
        }
        j += b;
    }
    true
}

/// Rows R = [r, r + 8) (lanes h..h + W) of block column J = [j, j + NB) below the diagonal:
/// the tile T = Σ_{m < j} L[R, m] L[J, m]ᵀ, W = A[R, J] − T, then L[R, J] = W L_JJ⁻ᵀ in vectors
/// over the rows, L[R, j + c] = (W[:, c] − Σ_{k<c} L[R, j + k] L_JJ[c, k]) · (1 / L_JJ[c, c]),
/// with `d[k][c]` = L_JJ[c, k] and `recip[c]` = 1 / L_JJ[c, c]; into panel R and `l`.
///
/// # Safety
/// As [`factor_panels`]; r < n, panels R and J hold L's columns 0..j.
#[inline(always)]
unsafe fn below<V: Lanes, const NB: usize>(
    a: &[f64],
    n: usize,
    p: &mut [f64],
    l: *mut f64,
    (j, r, h): (usize, usize, usize),
    d: &[[f64; B]; B],
    recip: &[f64; B],
) {
    // Rows of the block inside the matrix, and of these vector's lanes.
    let k = B.min(n - r).saturating_sub(h).min(V::W);
    // SAFETY: the caller's contract; every read and write of A, `l` and the panels is inside
    // them (a short block through a zero-padded copy).
    unsafe {
        let t = tile::<V, NB>(p.as_ptr().add(at(n, r, 0) + h), p.as_ptr().add(at(n, j, 0)), j);
        let mut y = [V::zero(); B];
        for c in 0..NB {
            let col = (j + c) * n + r + h;
            let ac = if k == V::W {
                V::load(a.as_ptr().add(col))
            } else {
                let mut lanes = [0.0f64; B];
                lanes[..k].copy_from_slice(&a[col..col + k]);
                V::load(lanes.as_ptr())
            };
            y[c] = V::sub(ac, t[c]);
        }
        // Arithmetic alone, with constant trip counts, so that both loops unroll (the test
        // folds away) and Y stays in registers.
        for c in 0..NB {
            let mut v = y[c];
            for kk in 0..NB {
                if kk < c {
                    v = V::fma(y[kk], V::splat(-d[kk][c]), v);
                }
            }
            y[c] = V::mul(v, V::splat(recip[c]));
        }
        for (c, &yc) in y.iter().enumerate().take(NB) {
            let col = (j + c) * n + r + h;
            V::store(p.as_mut_ptr().add(at(n, r, j + c) + h), yc);
            if k == V::W {
                V::store(l.add(col), yc);
            } else if k > 0 {
                let mut lanes = [0.0f64; B];
                V::store(lanes.as_mut_ptr(), yc);
                std::ptr::copy_nonoverlapping(lanes.as_ptr(), l.add(col), k);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::register_tile::poison_panels;
    use super::*;
    use faer::{MatMut, Par};
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

    /// A + εI's lower triangle with zeros above, faer's input.
    fn faer_input(a: &[f64], n: usize, eps: f64) -> Vec<f64> {
        (0..n * n).map(|k| if k % n < k / n { 0.0 } else { a[k] + if k % n == k / n { eps } else { 0.0 } }).collect()
    }

    fn paths() -> Vec<Path> {
        Path::ALL.into_iter().filter(|p| p.available()).collect()
    }

    #[test]
    fn every_path_gives_the_same_bits() {
        for n in [1, 3, 4, 7, 8, 9, 16, 17, 37, 225] {
            let a = spd(n, n as u64);
            let mut reference = Vec::new();
            poison_panels();
            assert!(factor_on(Path::Baseline, &a, n, 1e-9, &mut reference));
            for path in paths() {
                let mut l = Vec::new();
                poison_panels();
                assert!(factor_on(path, &a, n, 1e-9, &mut l));
                let same = l.iter().zip(&reference).all(|(x, y)| x.to_bits() == y.to_bits());
                assert!(same, "n = {n}: the {path:?} path rounds differently from the baseline");
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
            assert!(factor(&a, n, eps, &mut l));
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
            let mut f = faer_input(&a, n, eps);
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
            assert!(factor(&a, n, 0.0, &mut ours), "n = {n}, ℓ = {ell}: refused");
            let mut theirs = faer_input(&a, n, 0.0);
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
        assert!(!factor(&a, n, 0.0, &mut l));
        // A jitter that makes it positive definite is accepted, in the storage of the failure.
        assert!(factor(&a, n, 1.0, &mut l));
        // A NaN or an infinity anywhere in the lower triangle reaches a pivot.
        for (i, j, v) in [(3, 1, f64::NAN), (5, 0, f64::INFINITY), (5, 4, f64::NEG_INFINITY), (2, 2, f64::INFINITY)] {
            let mut bad = spd(n, 3);
            bad[i + n * j] = v;
            assert!(!factor(&bad, n, 0.0, &mut l), "({i}, {j}) = {v} was accepted");
        }
    }
}
