//! The inverse of a symmetric positive-definite matrix from its Cholesky factor on one core,
//! (LLᵀ)⁻¹ = L⁻ᵀL⁻¹ = UUᵀ with U = L⁻ᵀ, for the small matrices of exact GPs
//! ([`super::Cholesky::inverse_lower`]'s one-core path, docs/decisions.md D36).
//!
//! Two sweeps, as LAPACK's `potri` makes them (`trtri`, then `lauum`; Anderson et al. 1999,
//! *LAPACK Users' Guide*, 3rd ed.), both built on the register tile of `register_tile`: an 8-row
//! block of a matrix times an 8-column block, summed over a long inner dimension, with the 8 × 8
//! result in eight vector registers (one AVX-512 vector of 8 f64 per column).
//!
//! 1. **U = L⁻ᵀ**, by block columns I = [i, i + b) of U (block rows of X = L⁻¹ = Uᵀ), left to
//!    right. From X[I, :i] = −L_II⁻¹ Σ_m L[I, m] X[m, :i],
//!    U[C, I] = −(Σ_{m = c}^{i−1} U[C, m] L[I, m]ᵀ) L_II⁻ᵀ
//!    for each 8-row block C = [c, c + 8) above the diagonal block, since U[C, m] = 0 for m < c.
//!    The sum is one tile over i − c terms; the 8 × 8 factor L_II⁻¹ (by substitution) is applied
//!    to it in registers, 36 multiply-adds (it is triangular; [`above`]). U[I, I] = L_II⁻ᵀ.
//! 2. **S = UUᵀ**, lower triangle, by block columns J: for each 8-row block J' ≥ J,
//!    S[J', J] = Σ_{r ≥ j'} U[J', r] U[J, r]ᵀ, one tile over n − j' terms (U[J', r] = 0 for
//!    r < j'; [`gram_tile`]).
//!
//! U is kept in row panels (rows [c, c + 8) of all n columns, 8 contiguous values per column), so
//! both of a tile's operands are read as contiguous streams; the last panel's padding rows are
//! zero. Every block is 8 wide except the last, whose tiles have as many accumulators as it has
//! rows (`register_tile::with_nb`), so no size wastes a whole tile on a short remainder.
//!
//! Each entry is one fixed chain: the tile's fused multiply-adds in increasing inner index from
//! zero, then (for U) the 8 × 8 factor's in increasing column. AVX-512 computes 8 rows per
//! vector, AVX2 + FMA 4 (a tile in two halves), the baseline one (`f64::mul_add`): the three give
//! the same bits (tested), so the inverse does not depend on the CPU; one without AVX2 + FMA gets
//! faer's inverse instead (`register_tile::in_hardware`). At n = 225 on a 2-core Zen 4 it takes
//! about two thirds of the time of faer 0.24's inverse (docs/decisions.md D36; `bench gp` times
//! both).

#[cfg(target_arch = "x86_64")]
use super::register_tile::x86;
use super::register_tile::{B, Lanes, Path, at, tile, with_nb, with_panels};

/// Write into `out` (n × n, column-major, zero on entry) the lower triangle of (LLᵀ)⁻¹, leaving
/// the zeros above it, given the Cholesky factor L (n × n, column-major, positive diagonal; only
/// its lower triangle is read).
pub(super) fn inverse_lower(l: &[f64], n: usize, out: &mut [f64]) {
    inverse_on(Path::detect(), l, n, out);
}

/// [`inverse_lower`] on a given path, which must be available on this CPU.
pub(super) fn inverse_on(path: Path, l: &[f64], n: usize, out: &mut [f64]) {
    assert!(l.len() == n * n && out.len() == n * n, "inverse_lower: shapes");
    debug_assert!(out.iter().all(|&v| v == 0.0), "inverse_lower: out must be zero");
    if n == 0 {
        return;
    }
    // Never read before written: every panel entry a tile reads, and every lane of the
    // diagonal blocks, is stored first (tested with poisoned panels).
    with_panels(n, B * n, |u, packed| {
        // SAFETY: `u` holds the ⌈n/8⌉ panels of 8 × n, `packed` 8 · n values, `out` n × n, and
        // `path` is available on this CPU (`inverse_on`'s contract).
        unsafe {
            match path {
                #[cfg(target_arch = "x86_64")]
                Path::Avx512 => sweeps_avx512(l, n, u, packed, out),
                #[cfg(target_arch = "x86_64")]
                Path::Avx2 => sweeps_avx2(l, n, u, packed, out),
                _ => sweeps::<f64>(l, n, u, packed, out),
            }
        }
    });
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
unsafe fn sweeps_avx512(l: &[f64], n: usize, u: &mut [f64], packed: &mut [f64], out: &mut [f64]) {
    // SAFETY: forwarded from `inverse_on`; AVX-512F is available.
    unsafe { sweeps::<x86::V8>(l, n, u, packed, out) }
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn sweeps_avx2(l: &[f64], n: usize, u: &mut [f64], packed: &mut [f64], out: &mut [f64]) {
    // SAFETY: forwarded from `inverse_on`; AVX2 and FMA are available.
    unsafe { sweeps::<x86::V4>(l, n, u, packed, out) }
}

/// Both sweeps.
///
/// # Safety
/// The vector type's instructions are available; `u` holds ⌈n/8⌉ panels of 8 × n (any values).
#[inline(always)]
unsafe fn sweeps<V: Lanes>(l: &[f64], n: usize, u: &mut [f64], packed: &mut [f64], out: &mut [f64]) {
    // SAFETY: the caller's contract.
    unsafe {
        triangular_inverse::<V>(l, n, u, packed);
        gram_lower::<V>(u, n, out);
    }
}

/// U = L⁻ᵀ into the panels `u`, each panel c from its column c on (left of it U is zero and
/// nothing reads it); `packed` is scratch for 8 · n values.
///
/// # Safety
/// As [`sweeps`].
#[inline(always)]
unsafe fn triangular_inverse<V: Lanes>(l: &[f64], n: usize, u: &mut [f64], packed: &mut [f64]) {
    let mut i = 0;
    while i < n {
        let b = B.min(n - i);
        // L's rows I, 8 per column with zeros below the last row: packed[8m + r] = L[i + r, m].
        for m in 0..i + b {
            let dst = &mut packed[B * m..B * m + B];
            dst[..b].copy_from_slice(&l[m * n + i..m * n + i + b]);
            dst[b..].fill(0.0);
        }
        // W = L_II⁻¹ by forward substitution: w[c][r] = W[r, c], zero above the diagonal.
        let mut w = [[0.0f64; B]; B];
        for c in 0..b {
            w[c][c] = 1.0 / packed[B * (i + c) + c];
            for r in c + 1..b {
                let mut s = 0.0;
                for k in c..r {
                    s += packed[B * (i + k) + r] * w[c][k];
                }
                w[c][r] = -s / packed[B * (i + r) + r];
            }
        }
        let mut c = 0;
        while c < i {
            for h in (0..B).step_by(V::W) {
                // SAFETY: the caller's contract; lanes h..h + W of panel c.
                unsafe { with_nb!(b, above::<V>(u, packed, n, (c, i, h), &w)) };
            }
            c += B;
        }
        // U[I, I] = Wᵀ: U[i + q, i + r] = W[r, q], all 8 lanes of the block's columns (zeros
        // below the diagonal and in the last panel's padding rows, which the tiles read).
        for r in 0..b {
            for q in 0..B {
                u[at(n, i, i + r) + q] = if q <= r { w[q][r] } else { 0.0 };
            }
        }
        i += b;
    }
}

/// U[C, I] for the 8-row block C = [c, c + 8) above the diagonal block I = [i, i + NB) (lanes
/// h..h + W): the tile P = Σ_{m = c}^{i−1} U[C, m] L[I, m]ᵀ, then U[C, i + r] = −Σ_{k ≤ r}
/// P[:, k] W[r, k] with W = L_II⁻¹ (`w[k][r]` = W[r, k]), a product then fused multiply-adds
/// in increasing k.
///
/// # Safety
/// As [`sweeps`]; c < i, panel c holds U's columns c..i, `packed` L's rows I.
#[inline(always)]
#[allow(clippy::needless_range_loop)] // indexed loops with constant bounds unroll; iterators did not (10% slower)
unsafe fn above<V: Lanes, const NB: usize>(
    u: &mut [f64],
    packed: &[f64],
    n: usize,
    (c, i, h): (usize, usize, usize),
    w: &[[f64; B]; B],
) {
    // SAFETY: the caller's contract.
    unsafe {
        let p = tile::<V, NB>(u.as_ptr().add(at(n, c, c) + h), packed.as_ptr().add(B * c), i - c);
        for r in 0..NB {
            let mut v = V::mul(p[0], V::splat(-w[0][r]));
            // A constant trip count, so that both loops unroll (the test folds away).
            for k in 1..NB {
                if k <= r {
                    v = V::fma(p[k], V::splat(-w[k][r]), v);
                }
            }
            V::store(u.as_mut_ptr().add(at(n, c, i + r) + h), v);
        }
    }
}

/// The lower triangle of S = UUᵀ into `out` (zero, n × n column-major), from the panels `u`.
///
/// # Safety
/// As [`sweeps`]; `u` holds U.
#[inline(always)]
unsafe fn gram_lower<V: Lanes>(u: &[f64], n: usize, out: &mut [f64]) {
    let mut j = 0;
    while j < n {
        let bj = B.min(n - j);
        let mut jj = j;
        while jj < n {
            for h in (0..B).step_by(V::W) {
                // SAFETY: the caller's contract; lanes h..h + W of panel jj.
                unsafe { with_nb!(bj, gram_tile::<V>(u, n, out, (j, jj, h))) };
            }
            jj += B;
        }
        j += bj;
    }
}

/// S[J', J] for the 8-row block J' = [jj, jj + 8) at or below J = [j, j + NB) (lanes h..h + W):
/// the tile Σ_{r ≥ jj} U[J', r] U[J, r]ᵀ, stored into `out` below the diagonal.
///
/// # Safety
/// As [`sweeps`]; j ≤ jj < n, `u` holds U.
#[inline(always)]
unsafe fn gram_tile<V: Lanes, const NB: usize>(
    u: &[f64],
    n: usize,
    out: &mut [f64],
    (j, jj, h): (usize, usize, usize),
) {
    // SAFETY: the caller's contract; every write is inside `out`.
    unsafe {
        let s = tile::<V, NB>(u.as_ptr().add(at(n, jj, jj) + h), u.as_ptr().add(at(n, j, jj)), n - jj);
        if jj > j && jj + B <= n {
            for (t, &st) in s.iter().enumerate().take(NB) {
                V::store(out.as_mut_ptr().add((j + t) * n + jj + h), st);
            }
        } else {
            // The diagonal block (its lower part) or the last, short block of rows.
            let mut lanes = [0.0f64; B];
            for (t, &st) in s.iter().enumerate().take(NB) {
                V::store(lanes.as_mut_ptr(), st);
                for (q, &v) in lanes.iter().enumerate().take(V::W) {
                    let row = jj + h + q;
                    if row < n && row >= j + t {
                        out[(j + t) * n + row] = v;
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use nalgebra::DMatrix;
    use rand::{Rng, SeedableRng};

    /// The Cholesky factor of a random SPD matrix B Bᵀ/n + I.
    fn factor(n: usize, seed: u64) -> DMatrix<f64> {
        let mut r = rand_chacha::ChaCha8Rng::seed_from_u64(seed);
        let b = DMatrix::from_fn(n, n + 2, |_, _| r.random_range(-1.0..1.0));
        let a = &b * b.transpose() / n as f64 + DMatrix::identity(n, n);
        a.cholesky().expect("SPD").l()
    }

    fn paths() -> Vec<Path> {
        Path::ALL.into_iter().filter(|p| p.available()).collect()
    }

    #[test]
    fn every_path_inverts_with_zeros_above_and_the_same_bits() {
        for n in [1, 2, 7, 8, 9, 15, 16, 17, 37, 64, 100, 131, 225] {
            let l = factor(n, 11 + n as u64);
            let want = (&l * l.transpose()).try_inverse().expect("invertible");
            let scale = want.abs().max();
            let mut reference = vec![0.0; n * n];
            super::super::register_tile::poison_panels();
            inverse_on(Path::Baseline, l.as_slice(), n, &mut reference);
            for j in 0..n {
                for i in 0..n {
                    let got = reference[i + n * j];
                    if i < j {
                        assert_eq!(got, 0.0, "n = {n}: ({i}, {j}) above the diagonal");
                    } else {
                        assert!(
                            (got - want[(i, j)]).abs() < 1e-12 * scale,
                            "n = {n}: ({i}, {j}) = {got}, want {}",
                            want[(i, j)]
                        );
                    }
                }
            }
            for path in paths() {
                let mut got = vec![0.0; n * n];
                super::super::register_tile::poison_panels();
                inverse_on(path, l.as_slice(), n, &mut got);
                let same = got.iter().zip(&reference).all(|(x, y)| x.to_bits() == y.to_bits());
                assert!(same, "n = {n}: the {path:?} path rounds differently from the baseline");
            }
        }
    }

    #[test]
    fn the_upper_triangle_of_the_factor_is_not_read() {
        let n = 19;
        let l = factor(n, 4);
        let mut dirty = l.clone();
        for j in 1..n {
            for i in 0..j {
                dirty[(i, j)] = f64::NAN;
            }
        }
        let (mut clean_out, mut dirty_out) = (vec![0.0; n * n], vec![0.0; n * n]);
        inverse_lower(l.as_slice(), n, &mut clean_out);
        inverse_lower(dirty.as_slice(), n, &mut dirty_out);
        assert!(clean_out.iter().zip(&dirty_out).all(|(x, y)| x.to_bits() == y.to_bits()));
    }
}
