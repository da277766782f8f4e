//! Inducing-input selection [Hughes-Hallett 2022 §3.1.1–3.1.3].
//!
//! - [`greedy_variance`]: pivoted incomplete Cholesky of K_ff (Burt et al. 2019 / RobustGP
//!   `ConditionalVariance`): pick the training input with the largest conditional variance
//!   d_n = [K_ff − Q_ff]_nn; the first pick is random (seeded). O(NM²) time, O(NM) memory.
//!   The residuals returned are diag(K_ff − Q_ff) for the selected set, so Σ d = tr(K_ff − Q_ff)
//!   (property P6).
//! - [`kmeans`]: k-means++ seeding then Lloyd iterations (seeded), centroids as Z.
//! - [`random_subset`]: M distinct training rows, seeded.
//! - User-supplied Z: pass the matrix straight to the model.

use crate::GpError;
use crate::kernels::Kernel;
use nalgebra::{DMatrix, DVector};
use rand::seq::index::sample;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha20Rng;

/// Result of greedy conditional-variance selection.
#[derive(Debug, Clone, PartialEq)]
pub struct GreedySelection {
    /// Indices into the rows of X, in selection order.
    pub indices: Vec<usize>,
    /// Z = X\[indices\] (M×D).
    pub z: DMatrix<f64>,
    /// Residual conditional variances d_n = [K_ff − Q_ff]_nn after the last pick (length N).
    pub residuals: DVector<f64>,
}

impl GreedySelection {
    /// Σ_n d_n = tr(K_ff − Q_ff).
    pub fn trace(&self) -> f64 {
        self.residuals.sum()
    }
}

/// Greedy conditional-variance selection of up to `m_max` rows of `x`; stops early when the
/// largest residual falls below `tol`. The first pick is uniform at random from `seed`.
pub fn greedy_variance(
    kernel: &dyn Kernel,
    x: &DMatrix<f64>,
    m_max: usize,
    tol: f64,
    seed: u64,
) -> Result<GreedySelection, GpError> {
    let n = x.nrows();
    check_count(m_max, n, "inducing points")?;
    let mut rng = ChaCha20Rng::seed_from_u64(seed);
    let mut d = kernel.diag(x.as_view());
    // C: column m is e_m (length N); N×M so that each e_m is contiguous.
    let mut c = DMatrix::<f64>::zeros(n, m_max);
    let mut indices = Vec::with_capacity(m_max);
    let mut selected = vec![false; n];
    let mut next = rng.random_range(0..n);
    for m in 0..m_max {
        let i = next;
        let di = d[i];
        if !di.is_finite() || di <= tol {
            break;
        }
        let k_col = kernel.k(x.as_view(), x.rows(i, 1));
        let sqrt_di = di.sqrt();
        // e = (k(X, x_i) − C[:m]ᵀ C[:m, i]) / √d_i
        let mut e = DVector::from_column_slice(k_col.as_slice());
        if m > 0 {
            let cm = c.columns(0, m);
            let ci = cm.row(i).transpose();
            e.gemv(-1.0, &cm, &ci, 1.0);
        }
        e /= sqrt_di;
        for j in 0..n {
            d[j] = (d[j] - e[j] * e[j]).max(0.0);
        }
        c.column_mut(m).copy_from(&e);
        d[i] = 0.0;
        selected[i] = true;
        indices.push(i);
        // Next pivot: largest residual among the unselected (first index wins ties).
        let mut best = usize::MAX;
        let mut best_v = f64::NEG_INFINITY;
        for j in 0..n {
            if !selected[j] && d[j] > best_v {
                best_v = d[j];
                best = j;
            }
        }
        if best == usize::MAX {
            break;
        }
        next = best;
    }
    let z = x.select_rows(indices.iter());
    Ok(GreedySelection { indices, z, residuals: d })
}

/// 1 ≤ M ≤ N: at least one of `what`, and no more than the rows.
fn check_count(m: usize, n: usize, what: &'static str) -> Result<(), GpError> {
    if m == 0 {
        return Err(GpError::Empty { what });
    }
    if m > n {
        return Err(GpError::TooMany { what, asked: m, available: n, from: "training rows" });
    }
    Ok(())
}

/// M distinct training rows chosen uniformly at random.
pub fn random_subset(x: &DMatrix<f64>, m: usize, seed: u64) -> Result<DMatrix<f64>, GpError> {
    let n = x.nrows();
    check_count(m, n, "random inducing points")?;
    let mut rng = ChaCha20Rng::seed_from_u64(seed);
    let mut idx = sample(&mut rng, n, m).into_vec();
    idx.sort_unstable();
    Ok(x.select_rows(idx.iter()))
}

/// k-means++ seeding followed by at most `iters` Lloyd iterations; returns the M centroids.
/// An empty cluster keeps its previous centroid.
pub fn kmeans(x: &DMatrix<f64>, m: usize, iters: usize, seed: u64) -> Result<DMatrix<f64>, GpError> {
    let (n, dim) = x.shape();
    check_count(m, n, "k-means centroids")?;
    let mut rng = ChaCha20Rng::seed_from_u64(seed);
    let dist2 =
        |a: usize, cent: &DMatrix<f64>, k: usize| -> f64 { (0..dim).map(|d| (x[(a, d)] - cent[(k, d)]).powi(2)).sum() };
    let mut cent = DMatrix::<f64>::zeros(m, dim);
    let first = rng.random_range(0..n);
    cent.row_mut(0).copy_from(&x.row(first));
    let mut best: Vec<f64> = (0..n).map(|i| dist2(i, &cent, 0)).collect();
    for k in 1..m {
        let total: f64 = best.iter().sum();
        let pick = if total > 0.0 {
            let mut u = rng.random_range(0.0..total);
            let mut chosen = n - 1;
            for (i, b) in best.iter().enumerate() {
                if u < *b {
                    chosen = i;
                    break;
                }
                u -= b;
            }
            chosen
        } else {
            rng.random_range(0..n)
        };
        cent.row_mut(k).copy_from(&x.row(pick));
        for (i, b) in best.iter_mut().enumerate() {
            *b = b.min(dist2(i, &cent, k));
        }
    }
    let mut assign = vec![usize::MAX; n];
    for _ in 0..iters {
        let mut changed = false;
        for (i, a) in assign.iter_mut().enumerate() {
            let mut bk = 0;
            let mut bd = f64::INFINITY;
            for k in 0..m {
                let dd = dist2(i, &cent, k);
                if dd < bd {
                    bd = dd;
                    bk = k;
                }
            }
            if *a != bk {
                *a = bk;
                changed = true;
            }
        }
        if !changed {
            break;
        }
        let mut sums = DMatrix::<f64>::zeros(m, dim);
        let mut counts = vec![0usize; m];
        for (i, &a) in assign.iter().enumerate() {
            counts[a] += 1;
            for d in 0..dim {
                sums[(a, d)] += x[(i, d)];
            }
        }
        for k in 0..m {
            if counts[k] > 0 {
                for d in 0..dim {
                    cent[(k, d)] = sums[(k, d)] / counts[k] as f64;
                }
            }
        }
    }
    Ok(cent)
}
