//! The lower triangle of XᵀX for a lower-triangular X: the second half of an inverse from a
//! Cholesky factor, (LLᵀ)⁻¹ = L⁻ᵀL⁻¹ = XᵀX with X = L⁻¹ (LAPACK's `lauum`; Anderson et al.
//! 1999, *LAPACK Users' Guide*, 3rd ed.), on one core.
//!
//! Block row J = [j, j + b) of S = XᵀX, left of and on the diagonal, is
//! S[J, :j+b] = X[:, J]ᵀ X[:, :j+b] = X[j:, J]ᵀ X[j:, :j+b],
//! because X[k, J] = 0 for k < j. X[j:, :j+b] is dense apart from the upper part of its top
//! b × b block, so each block row is one GEMM, b × (n − j) × (j + b), with a long inner dimension
//! and no zeros multiplied outside the diagonal blocks: about n³/3 flops in all, as many as the
//! product needs. faer's own product (inside `llt::inverse`) recurses into small triangular
//! products instead; at n = 100 and 225 this one takes 0.45 and 0.67 of its time
//! (docs/decisions.md D35).

use faer::{Accum, MatMut, MatRef, Par};

/// Rows per block: 8 was faster than 4, 12 and 16 at n = 100 and 225 (docs/decisions.md D35).
const BLOCK: usize = 8;

/// Overwrite X (n × n, column-major, lower triangular with zeros above its diagonal, which are
/// read: the diagonal block of each product includes them) with the lower triangle of XᵀX, zeros
/// above it. Block row J of the result needs X's rows from j down only, so once computed (into a
/// b × n buffer) it replaces X's rows J, which no later block reads.
pub(super) fn lower_gram_in_place(x: &mut [f64], n: usize) {
    assert_eq!(x.len(), n * n, "lower_gram_in_place: shape");
    let mut row = vec![0.0; BLOCK * n];
    let mut j = 0;
    while j < n {
        let b = BLOCK.min(n - j);
        let xm = MatRef::from_column_major_slice(&*x, n, n);
        faer::linalg::matmul::matmul(
            MatMut::from_column_major_slice_mut(&mut row[..b * (j + b)], b, j + b),
            Accum::Replace,
            xm.submatrix(j, j, n - j, b).transpose(),
            xm.submatrix(j, 0, n - j, j + b),
            1.0,
            Par::Seq,
        );
        for c in 0..j + b {
            x[c * n + j..c * n + j + b].copy_from_slice(&row[c * b..(c + 1) * b]);
        }
        j += b;
    }
    // Each diagonal block was computed whole; its strict upper part belongs to S's upper triangle.
    for c in 1..n {
        x[c * n..c * n + c].fill(0.0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use nalgebra::DMatrix;
    use rand::{Rng, SeedableRng};

    #[test]
    fn the_lower_triangle_of_xtx_with_zeros_above() {
        let mut r = rand_chacha::ChaCha8Rng::seed_from_u64(5);
        for n in [1, 2, 7, 8, 9, 37, 100, 131] {
            let x = DMatrix::from_fn(n, n, |i, j| if i >= j { r.random_range(-1.0..1.0) } else { 0.0 });
            let want = x.transpose() * &x;
            let mut s = x.as_slice().to_vec();
            lower_gram_in_place(&mut s, n);
            for j in 0..n {
                for i in 0..n {
                    let got = s[i + n * j];
                    if i < j {
                        assert_eq!(got, 0.0, "n = {n}: S({i}, {j}) above the diagonal");
                    } else {
                        let tol = 1e-13 * (1.0 + want[(i, j)].abs());
                        assert!(
                            (got - want[(i, j)]).abs() < tol,
                            "n = {n}: S({i}, {j}) = {got}, want {}",
                            want[(i, j)]
                        );
                    }
                }
            }
        }
    }
}
