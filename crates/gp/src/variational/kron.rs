//! Kronecker-product algebra without forming the product (Saatçi 2011; Thomas 2017 §2.1).
//!
//! A vector of length N = Π n_l is read as an order-p tensor whose index (i₁, …, i_p) sits at
//! position Σ_l i_l·stride_l with stride_p = 1 and stride_l = Π_{l' > l} n_l' — the ordering
//! of the Kronecker product A⁽¹⁾ ⊗ … ⊗ A⁽ᵖ⁾ (the first factor varies slowest).

use nalgebra::{DMatrix, DVector};

/// (A⁽¹⁾ ⊗ … ⊗ A⁽ᵖ⁾) x without forming the product: `kron_mvprod` of Thomas 2017 Algorithm 1
/// (Saatçi 2011, Algorithm 13). The factors may be rectangular (m_l × n_l, x of length Π n_l);
/// the cost is O(N Σ_l m_l) instead of O(N²).
///
/// # Panics
/// If x's length is not the product of the factors' column counts (a programming error).
pub(crate) fn kron_mvprod(factors: &[&DMatrix<f64>], x: &[f64]) -> DVector<f64> {
    let n_in: usize = factors.iter().map(|a| a.ncols()).product();
    assert_eq!(x.len(), n_in, "kron_mvprod: x has {} entries, the factors take {n_in}", x.len());
    let mut cur = x.to_vec();
    // The fastest mode is the last factor: reshape so that it indexes the rows, multiply, and
    // transpose, which rotates the next mode to the front. After p rotations the order is restored.
    for a in factors.iter().rev() {
        let n = a.ncols();
        let rest = cur.len() / n;
        let xm = DMatrix::from_column_slice(n, rest, &cur);
        let z = *a * xm; // m × rest
        let m = a.nrows();
        let mut next = vec![0.0; m * rest];
        for i in 0..m {
            for j in 0..rest {
                next[j + i * rest] = z[(i, j)];
            }
        }
        cur = next;
    }
    DVector::from_vec(cur)
}

/// v⁽¹⁾ ⊗ … ⊗ v⁽ᵖ⁾ (the outer product of vectors, vectorised in Kronecker order).
pub(crate) fn kron_vectors(vs: &[&DVector<f64>]) -> DVector<f64> {
    let mut out = vec![1.0];
    for v in vs {
        let mut next = Vec::with_capacity(out.len() * v.len());
        for a in &out {
            next.extend(v.iter().map(|b| a * b));
        }
        out = next;
    }
    DVector::from_vec(out)
}

/// The mode-l Gram of two tensors of mode sizes `dims`: out[a, b] = Σ x[j] y[j'] over the
/// index pairs with j_l = a, j'_l = b and j, j' equal in every other mode (x₍ₗ₎ y₍ₗ₎ᵀ of the
/// mode-l unfoldings). This is ∂⟨x, (⊗ A) x⟩/∂A⁽ˡ⁾ when y = (⊗_{l'≠l} A⁽ˡ'⁾ ⊗ I) x.
pub(crate) fn mode_gram(dims: &[usize], l: usize, x: &[f64], y: &[f64]) -> DMatrix<f64> {
    let n: usize = dims.iter().product();
    assert_eq!((x.len(), y.len()), (n, n), "mode_gram: tensor sizes differ from the mode sizes");
    let stride: usize = dims[l + 1..].iter().product();
    let nl = dims[l];
    let mut out = DMatrix::zeros(nl, nl);
    for (j, xj) in x.iter().enumerate() {
        let a = (j / stride) % nl;
        let base = j - a * stride;
        for b in 0..nl {
            out[(a, b)] += xj * y[base + b * stride];
        }
    }
    out
}

/// Dense A⁽¹⁾ ⊗ … ⊗ A⁽ᵖ⁾ (tests and small reference computations only).
#[cfg(test)]
pub(crate) fn kron_dense(factors: &[&DMatrix<f64>]) -> DMatrix<f64> {
    factors.iter().fold(DMatrix::from_element(1, 1, 1.0), |acc, a| acc.kronecker(a))
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::{Rng, SeedableRng};
    use rand_chacha::ChaCha8Rng;

    fn random(r: usize, c: usize, rng: &mut ChaCha8Rng) -> DMatrix<f64> {
        DMatrix::from_fn(r, c, |_, _| rng.random_range(-1.0..1.0))
    }

    #[test]
    fn kron_mvprod_matches_the_dense_kronecker_product() {
        let mut rng = ChaCha8Rng::seed_from_u64(3);
        for shapes in
            [vec![(3, 3)], vec![(2, 2), (3, 3)], vec![(3, 2), (2, 4), (4, 3)], vec![(2, 2); 4], vec![(1, 3), (1, 2)]]
        {
            let fs: Vec<DMatrix<f64>> = shapes.iter().map(|&(r, c)| random(r, c, &mut rng)).collect();
            let refs: Vec<&DMatrix<f64>> = fs.iter().collect();
            let n: usize = shapes.iter().map(|s| s.1).product();
            let x = DVector::from_fn(n, |_, _| rng.random_range(-1.0..1.0));
            let dense = kron_dense(&refs) * &x;
            let fast = kron_mvprod(&refs, x.as_slice());
            assert_eq!(fast.len(), dense.len());
            assert!((fast - dense).amax() < 1e-13, "{shapes:?}");
        }
    }

    #[test]
    fn kron_vectors_and_mode_gram_match_dense_definitions() {
        let mut rng = ChaCha8Rng::seed_from_u64(4);
        let vs: Vec<DVector<f64>> =
            [2, 3, 2].iter().map(|&n| DVector::from_fn(n, |_, _| rng.random_range(-1.0..1.0))).collect();
        let as_mats: Vec<DMatrix<f64>> =
            vs.iter().map(|v| DMatrix::from_column_slice(v.len(), 1, v.as_slice())).collect();
        let dense = kron_dense(&as_mats.iter().collect::<Vec<_>>());
        assert!((kron_vectors(&vs.iter().collect::<Vec<_>>()) - dense.column(0)).amax() < 1e-15);
        // ∂⟨x, (⊗G)x⟩/∂G⁽ˡ⁾ by finite differences of the dense form.
        let dims = [2, 3, 2];
        let gs: Vec<DMatrix<f64>> = dims.iter().map(|&n| random(n, n, &mut rng)).collect();
        let x = DVector::from_fn(12, |_, _| rng.random_range(-1.0..1.0));
        let q = |gs: &[DMatrix<f64>]| x.dot(&(kron_dense(&gs.iter().collect::<Vec<_>>()) * &x));
        for l in 0..3 {
            let eye = DMatrix::identity(dims[l], dims[l]);
            let mut fs: Vec<&DMatrix<f64>> = gs.iter().collect();
            fs[l] = &eye;
            let y = kron_mvprod(&fs, x.as_slice());
            let g = mode_gram(&dims, l, x.as_slice(), y.as_slice());
            for a in 0..dims[l] {
                for b in 0..dims[l] {
                    let h = 1e-6;
                    let (mut p, mut m) = (gs.clone(), gs.clone());
                    p[l][(a, b)] += h;
                    m[l][(a, b)] -= h;
                    let fd = (q(&p) - q(&m)) / (2.0 * h);
                    assert!((fd - g[(a, b)]).abs() < 1e-8, "mode {l} ({a},{b}): {fd} vs {}", g[(a, b)]);
                }
            }
        }
    }
}
