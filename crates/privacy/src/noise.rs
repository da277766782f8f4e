//! GP-prior noise paths for the release mechanism [Thomas §1.4; Hall et al. 2013]:
//! released = μ(X_q) + σ·g(X_q), g ~ GP(0, k_responder).
//!
//! A [`NoisePath`] is one draw of g that can be **extended consistently**: values at points
//! already drawn are returned unchanged, and new points are drawn from the conditional
//! g(X_new) | g(X_old). Reusing one path across *different* mean functions is unsafe (their
//! differences cancel the noise), so a path belongs to one released mean function
//! (docs/decisions.md D9–D10); the caller enforces that.
//!
//! Randomness: [`NoisePath::from_os_entropy`] seeds a ChaCha20 CSPRNG from the operating system
//! (production); [`NoisePath::seeded`] is for simulations and tests.

use crate::PrivacyError;
use dpcotrain_gp::Jitter;
use dpcotrain_gp::kernels::Kernel;
use dpcotrain_gp::linalg::{Cholesky, JitterPolicy};
use nalgebra::{DMatrix, DVector};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha20Rng;
use rand_distr::StandardNormal;
use serde::{Deserialize, Serialize};

/// Everything of a [`NoisePath`] but its kernel: the points drawn, their values and the exact
/// position of the generator. A node persists this before a release leaves it, so a restarted
/// node extends the *same* path and never re-draws noise for a mean it has already released.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NoisePathState {
    pub points: DMatrix<f64>,
    pub values: DVector<f64>,
    /// ChaCha20 key.
    pub seed: [u8; 32],
    pub stream: u64,
    /// Word position in the key stream (u128, as decimal text: JSON numbers cannot hold it).
    pub word_pos: String,
    pub max_jitter: Jitter,
}

#[derive(Debug, Clone)]
pub struct NoisePath {
    kernel: Box<dyn Kernel>,
    points: DMatrix<f64>,
    values: DVector<f64>,
    rng: ChaCha20Rng,
    /// Largest jitter used by any draw (it slightly inflates the sampled covariance).
    pub max_jitter: Jitter,
}

/// q independent standard normals for an isotropic (finite-release) Gaussian mechanism: from a
/// ChaCha20 generator seeded with `seed` (simulation, tests), or from one seeded by the operating
/// system's CSPRNG when `seed` is `None` (production).
pub fn iid_standard_normal(q: usize, seed: Option<u64>) -> DVector<f64> {
    let mut rng = match seed {
        Some(s) => ChaCha20Rng::seed_from_u64(s),
        None => ChaCha20Rng::from_os_rng(),
    };
    DVector::from_fn(q, |_, _| rng.sample::<f64, _>(StandardNormal))
}

impl NoisePath {
    pub fn seeded(kernel: Box<dyn Kernel>, dim: usize, seed: u64) -> Self {
        Self::with_rng(kernel, dim, ChaCha20Rng::seed_from_u64(seed))
    }

    /// A path whose randomness comes from the OS (a cryptographically secure generator).
    pub fn from_os_entropy(kernel: Box<dyn Kernel>, dim: usize) -> Self {
        Self::with_rng(kernel, dim, ChaCha20Rng::from_os_rng())
    }

    fn with_rng(kernel: Box<dyn Kernel>, dim: usize, rng: ChaCha20Rng) -> Self {
        NoisePath {
            kernel,
            points: DMatrix::zeros(0, dim),
            values: DVector::zeros(0),
            rng,
            max_jitter: Jitter::default(),
        }
    }

    /// The path's state, to persist (see [`NoisePathState`]).
    pub fn state(&self) -> NoisePathState {
        NoisePathState {
            points: self.points.clone(),
            values: self.values.clone(),
            seed: self.rng.get_seed(),
            stream: self.rng.get_stream(),
            word_pos: self.rng.get_word_pos().to_string(),
            max_jitter: self.max_jitter,
        }
    }

    /// Rebuild a path from its persisted state and the kernel it was drawn with.
    pub fn restore(kernel: Box<dyn Kernel>, s: &NoisePathState) -> Result<Self, PrivacyError> {
        let word_pos: u128 = s.word_pos.parse().map_err(|_| PrivacyError::Spelling {
            what: "noise path state: word_pos",
            text: s.word_pos.clone(),
            expected: "a number",
        })?;
        if s.points.nrows() != s.values.len() {
            return Err(PrivacyError::shape("noise path state", s.values.len(), "values", s.points.nrows(), "points"));
        }
        let mut rng = ChaCha20Rng::from_seed(s.seed);
        rng.set_stream(s.stream);
        rng.set_word_pos(word_pos);
        Ok(NoisePath { kernel, points: s.points.clone(), values: s.values.clone(), rng, max_jitter: s.max_jitter })
    }

    /// Number of points drawn so far.
    pub fn len(&self) -> usize {
        self.values.len()
    }

    pub fn is_empty(&self) -> bool {
        self.values.is_empty()
    }

    fn find(&self, row: &[f64]) -> Option<usize> {
        (0..self.points.nrows()).find(|&i| self.points.row(i).iter().zip(row).all(|(a, b)| a == b))
    }

    /// g at the rows of `xs`: stored values for points seen before, a conditional draw for the
    /// rest (all new points jointly).
    pub fn sample_at(&mut self, xs: &DMatrix<f64>) -> Result<DVector<f64>, PrivacyError> {
        if xs.ncols() != self.points.ncols() {
            return Err(PrivacyError::shape(
                "noise path",
                xs.ncols(),
                "point columns",
                self.points.ncols(),
                "path dimensions",
            ));
        }
        if xs.iter().any(|v| !v.is_finite()) {
            return Err(PrivacyError::non_finite("noise path: non-finite input point"));
        }
        let mut out = DVector::zeros(xs.nrows());
        let mut new_rows: Vec<usize> = Vec::new();
        for i in 0..xs.nrows() {
            let row: Vec<f64> = xs.row(i).iter().copied().collect();
            match self.find(&row) {
                Some(k) => out[i] = self.values[k],
                None => {
                    // Duplicates inside the request share one draw.
                    if !new_rows.iter().any(|&r| xs.row(r) == xs.row(i)) {
                        new_rows.push(i);
                    }
                }
            }
        }
        if !new_rows.is_empty() {
            let xn = xs.select_rows(new_rows.iter());
            let knn = self.kernel.k(xn.as_view(), xn.as_view());
            let knn_max = knn.diagonal().max();
            let (mean, cov) = if self.is_empty() {
                (DVector::zeros(xn.nrows()), knn)
            } else {
                let chol_old = Cholesky::factor(
                    self.kernel.k(self.points.as_view(), self.points.as_view()),
                    "noise K_old",
                    JitterPolicy::IF_NEEDED,
                )?;
                let mut v = self.kernel.k(self.points.as_view(), xn.as_view());
                chol_old.solve_l_in_place(&mut v);
                let w = chol_old.solve_l_vec(&self.values);
                (v.tr_mul(&w), knn - v.tr_mul(&v))
            };
            // New points (almost) determined by old ones leave a conditional covariance at the
            // rounding level, possibly indefinite. A floor of 1e-10 of the prior variance on its
            // diagonal keeps it factorisable; it only *adds* independent noise (never less
            // privacy) and is ~1e-5 of the noise's standard deviation.
            let mut cov = cov;
            let floor = 1e-10 * knn_max.max(f64::MIN_POSITIVE);
            for i in 0..cov.nrows() {
                cov[(i, i)] += floor;
            }
            let (factor, jitter) = conditional_factor(cov, floor)?;
            if jitter.absolute > self.max_jitter.absolute {
                self.max_jitter = jitter;
            }
            let xi = DVector::from_fn(xn.nrows(), |_, _| self.rng.sample::<f64, _>(StandardNormal));
            let draw = mean + factor * xi;
            let old = self.points.nrows();
            let mut pts = DMatrix::zeros(old + xn.nrows(), xn.ncols());
            pts.rows_mut(0, old).copy_from(&self.points);
            pts.rows_mut(old, xn.nrows()).copy_from(&xn);
            self.points = pts;
            self.values =
                DVector::from_iterator(old + draw.len(), self.values.iter().copied().chain(draw.iter().copied()));
            for i in 0..xs.nrows() {
                if let Some(k) = new_rows.iter().position(|&r| xs.row(r) == xs.row(i)) {
                    out[i] = draw[k];
                }
            }
        }
        Ok(out)
    }
}

/// A factor F with F·Fᵀ ⪰ `cov` for the conditional draw, and the jitter it needed.
///
/// Cholesky with the usual ladder first. When the new points are (almost) determined by old
/// ones, `cov` is rounding error around zero and can be indefinite beyond any jitter relative to
/// its own tiny diagonal (K_old's own jitter makes the Schur complement inexact); then the
/// symmetric eigendecomposition is used with every eigenvalue lifted to at least `floor`: the
/// draw gets at least the floor's independent noise in every direction, never less noise than
/// the (numerically zero) conditional covariance asks for. The largest lift is reported as the
/// jitter.
fn conditional_factor(cov: DMatrix<f64>, floor: f64) -> Result<(DMatrix<f64>, Jitter), PrivacyError> {
    if let Ok(chol) = Cholesky::factor_of(&cov, "noise conditional covariance", JitterPolicy::IF_NEEDED) {
        return Ok((chol.l().clone_owned(), chol.jitter()));
    }
    let n = cov.nrows();
    let mean_diag = (cov.trace() / n.max(1) as f64).abs().max(f64::MIN_POSITIVE);
    let eig = nalgebra::SymmetricEigen::new(cov);
    if eig.eigenvalues.iter().any(|l| !l.is_finite()) {
        return Err(PrivacyError::non_finite("noise conditional covariance is not finite"));
    }
    let mut lift = 0.0f64;
    let roots = DVector::from_iterator(
        n,
        eig.eigenvalues.iter().map(|&l| {
            let l2 = l.max(floor);
            lift = lift.max(l2 - l);
            l2.sqrt()
        }),
    );
    let factor = &eig.eigenvectors * DMatrix::from_diagonal(&roots);
    Ok((factor, Jitter { relative: lift / mean_diag, absolute: lift }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use dpcotrain_gp::kernels::SquaredExponential;

    fn kern() -> Box<dyn Kernel> {
        Box::new(SquaredExponential::isotropic(1.0, 0.7))
    }

    /// Points (almost) determined by earlier ones, asked in pairs after a near-singular K_old:
    /// the conditional covariance is rounding noise, possibly indefinite beyond any jitter
    /// relative to its own tiny diagonal. The draw must still succeed, stay finite and keep
    /// the path consistent (a 2-core concurrency test hit this as a Cholesky failure).
    #[test]
    fn nearly_determined_points_still_draw() {
        let mut u = 0x9E37_79B9_7F4A_7C15u64;
        let mut uniform = move || {
            u ^= u << 13;
            u ^= u >> 7;
            u ^= u << 17;
            -3.0 + 6.0 * (u >> 11) as f64 / (1u64 << 53) as f64
        };
        for (seed, ell) in (0..40u64).zip([0.5, 1.0, 2.0, 4.0].into_iter().cycle()) {
            let mut p = NoisePath::seeded(Box::new(SquaredExponential::isotropic(2.2, ell)), 1, seed);
            for k in 0..80 {
                let pts = DMatrix::from_column_slice(2, 1, &[uniform(), uniform()]);
                let v = p.sample_at(&pts).unwrap_or_else(|e| panic!("seed {seed}, ℓ {ell}, pair {k}: {e}"));
                assert!(v.iter().all(|x| x.is_finite()));
                assert_eq!(p.sample_at(&pts).unwrap(), v, "stored values are reused");
            }
        }
    }

    #[test]
    fn path_is_consistent_and_seeded() {
        let mut p = NoisePath::seeded(kern(), 1, 5);
        let a = p.sample_at(&DMatrix::from_column_slice(3, 1, &[0.0, 1.0, 2.0])).unwrap();
        let b = p.sample_at(&DMatrix::from_column_slice(3, 1, &[2.0, 0.5, 0.0])).unwrap();
        assert_eq!(b[0], a[2]);
        assert_eq!(b[2], a[0]);
        assert_eq!(p.len(), 4);
        let mut q = NoisePath::seeded(kern(), 1, 5);
        assert_eq!(q.sample_at(&DMatrix::from_column_slice(3, 1, &[0.0, 1.0, 2.0])).unwrap(), a);
        assert!(p.sample_at(&DMatrix::from_element(1, 2, 0.0)).is_err());
    }

    #[test]
    fn extended_paths_have_the_prior_covariance() {
        // Draw at X1 first, then extend to X2: the joint of (g(X1), g(X2)) over many paths
        // must match K([X1; X2]).
        let x1 = DMatrix::from_column_slice(2, 1, &[0.0, 1.0]);
        let x2 = DMatrix::from_column_slice(2, 1, &[0.4, 2.0]);
        let all = DMatrix::from_column_slice(4, 1, &[0.0, 1.0, 0.4, 2.0]);
        let k = kern().k(all.as_view(), all.as_view());
        let reps = 20000;
        let mut acc = DMatrix::<f64>::zeros(4, 4);
        for s in 0..reps {
            let mut p = NoisePath::seeded(kern(), 1, 1000 + s);
            let a = p.sample_at(&x1).unwrap();
            let b = p.sample_at(&x2).unwrap();
            let v = DVector::from_vec(vec![a[0], a[1], b[0], b[1]]);
            acc += &v * v.transpose();
        }
        acc /= reps as f64;
        assert!((acc - k).abs().max() < 0.04);
    }

    #[test]
    fn restored_path_continues_exactly() {
        let x1 = DMatrix::from_column_slice(2, 1, &[0.0, 1.0]);
        let x2 = DMatrix::from_column_slice(2, 1, &[0.4, 2.0]);
        let mut p = NoisePath::from_os_entropy(kern(), 1);
        let a = p.sample_at(&x1).unwrap();
        let state = p.state();
        let b = p.sample_at(&x2).unwrap();
        let mut q = NoisePath::restore(kern(), &state).unwrap();
        assert_eq!(q.sample_at(&x1).unwrap(), a);
        assert_eq!(q.sample_at(&x2).unwrap(), b);
        let mut bad = state.clone();
        bad.word_pos = "x".into();
        assert!(NoisePath::restore(kern(), &bad).is_err());
    }

    #[test]
    fn points_determined_by_earlier_ones_do_not_fail() {
        // A long-lengthscale path extended two points at a time over a dense pool (what a
        // flood of small requests does): late points are determined by earlier ones up to
        // rounding, and their conditional covariance used to fail to factorise.
        use rand::Rng;
        for seed in 0..20u64 {
            let mut r = ChaCha20Rng::seed_from_u64(seed);
            let k: Box<dyn Kernel> = Box::new(SquaredExponential::isotropic(1.0, 3.0));
            let mut p = NoisePath::seeded(k, 1, seed);
            let pool: Vec<f64> = (0..200).map(|_| r.random_range(-3.0..3.0)).collect();
            for pair in pool.chunks(2) {
                let g = p.sample_at(&DMatrix::from_column_slice(pair.len(), 1, pair)).unwrap();
                assert!(g.iter().all(|v| v.is_finite()));
            }
        }
    }

    #[test]
    fn os_entropy_paths_differ() {
        let x = DMatrix::from_column_slice(2, 1, &[0.0, 1.0]);
        let a = NoisePath::from_os_entropy(kern(), 1).sample_at(&x).unwrap();
        let b = NoisePath::from_os_entropy(kern(), 1).sample_at(&x).unwrap();
        assert_ne!(a, b);
    }
}
