//! The low-rank finite release: the finite release of [`crate::finite`] restricted to the
//! principal subspace of its released mean (docs/honest-dp.md, "Theorem 2").
//!
//! # Setting
//! A finite release at q points has hat matrix C (q × n, label-free) and per-row noise
//! variances s² (label-free, after capping). Under the GP prior the released mean C·y has
//! covariance M = C (K_XX + diag s²) Cᵀ, a function of X, Q, θ and s² only. Let U (q × k) hold
//! the eigenvectors of M with the k largest eigenvalues.
//!
//! # Theorem 2 (low-rank release)
//! Release õ = U (Uᵀ C·clip(y) + σ z), z ~ N(0, I_k), with Δ_k = d·max_j ‖Uᵀ C e_j‖₂ and
//! σ = Δ_k/μ. The k-vector Uᵀ C·clip(y) + σz is a Gaussian mechanism with L2 sensitivity Δ_k
//! (Theorem 1's argument with Uᵀ C in place of C: it is label-free), so it is μ-GDP (Dong, Roth
//! & Su 2019, Thm 2.7); multiplying by the label-free U is post-processing. Since U has
//! orthonormal columns, ‖Uᵀ C e_j‖ ≤ ‖C e_j‖, so Δ_k ≤ Δ: never more noise per coordinate than
//! the full release, and the noise lives in k of the q dimensions — its covariance at the
//! points is σ² U Uᵀ, whose trace is k σ² against q σ² for the full release.
//!
//! # What the answer reports
//! The estimate U Uᵀ C·y of f(Q) is linear in y, so its error covariance under the GP prior and
//! the real noise S₀ ⪯ diag s² is at most K_QQ − P C K_XQ − K_QX Cᵀ P + P C (K_XX + diag s²) Cᵀ P
//! with P = U Uᵀ ([`crate::finite::error_covariance`] with P C): label-free, and it is what the
//! release reports as the latent covariance, plus σ² U Uᵀ for the DP noise. Projecting drops
//! the part of the signal outside the subspace; that loss is inside this bound, so a querier is
//! never told the answer is better than it is.
//!
//! # Choosing k
//! [`RankRule::Auto`] offers each candidate k (and the full release) to the same label-free
//! score as the cap (the expected variance reduction of a prior-variance querier, summed over
//! the points) and keeps the best; the score sees both the smaller per-point noise and the
//! signal the projection drops.

use crate::PrivacyError;
use dpcotrain_gp::kernels::Kernel;
use dpcotrain_gp::linalg::matmul;
use nalgebra::{DMatrix, DVector, SymmetricEigen};
use serde::{Deserialize, Serialize};

/// Which ranks a finite release may use.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "rank", rename_all = "lowercase")]
pub enum RankRule {
    /// The full release: independent noise at every point (Theorem 1 alone).
    Full,
    /// Rank k (the full release when k ≥ the number of points).
    Fixed { k: usize },
    /// Each k of the list and the full release, scored alike; the best is kept.
    Auto { ks: Vec<usize> },
}

impl Default for RankRule {
    /// The full release (the meaning of a configuration written before ranks existed).
    fn default() -> Self {
        RankRule::Full
    }
}

impl RankRule {
    /// The default automatic rule: k ∈ {3, 5, 10} or the full release.
    pub fn auto() -> Self {
        RankRule::Auto { ks: vec![3, 5, 10] }
    }

    /// The ranks to try besides the full release, for `q` release points.
    pub fn candidates(&self, q: usize) -> Vec<usize> {
        match self {
            RankRule::Full => Vec::new(),
            RankRule::Fixed { k } => vec![*k].into_iter().filter(|&k| k < q).collect(),
            RankRule::Auto { ks } => ks.iter().copied().filter(|&k| k < q).collect(),
        }
    }

    /// Whether the full release is also a candidate (not under a fixed rank below q).
    pub fn allows_full(&self, q: usize) -> bool {
        match self {
            RankRule::Fixed { k } => *k >= q,
            RankRule::Full | RankRule::Auto { .. } => true,
        }
    }

    pub fn name(&self) -> String {
        match self {
            RankRule::Full => "full".into(),
            RankRule::Fixed { k } => format!("k={k}"),
            RankRule::Auto { .. } if *self == RankRule::auto() => "auto".into(),
            RankRule::Auto { ks } => format!("auto={}", ks.iter().map(|k| k.to_string()).collect::<Vec<_>>().join(",")),
        }
    }
}

impl std::str::FromStr for RankRule {
    type Err = PrivacyError;
    /// `full`, `auto`, `auto=K,L,…` or `k=K` with K ≥ 1 (the spelling of configs and the CLI).
    fn from_str(s: &str) -> Result<Self, PrivacyError> {
        let bad = || PrivacyError::Spelling {
            what: "rank rule",
            text: s.to_string(),
            expected: "full, auto, auto=K,L,… or k=K with K ≥ 1",
        };
        let positive = |t: &str| t.trim().parse::<usize>().ok().filter(|&k| k >= 1);
        match s.trim() {
            "full" => Ok(RankRule::Full),
            "auto" => Ok(RankRule::auto()),
            other => {
                if let Some(list) = other.strip_prefix("auto=") {
                    let ks = list.split(',').map(positive).collect::<Option<Vec<_>>>().filter(|v| !v.is_empty());
                    ks.map(|ks| RankRule::Auto { ks }).ok_or_else(bad)
                } else if let Some(k) = other.strip_prefix("k=") {
                    positive(k).map(|k| RankRule::Fixed { k }).ok_or_else(bad)
                } else {
                    Err(bad())
                }
            }
        }
    }
}

/// C (K_XX + diag s²) Cᵀ (q × q): the prior covariance of the released mean C·y, with K_XX
/// formed in column blocks of at most ~4M entries (O(q n²) flops, O(n·block) memory).
pub(crate) fn released_mean_cov(
    kernel: &dyn Kernel,
    x: &DMatrix<f64>,
    s2: &DVector<f64>,
    c: &DMatrix<f64>,
) -> DMatrix<f64> {
    let n = x.nrows();
    let q = c.nrows();
    let mut ckc = DMatrix::<f64>::zeros(q, q);
    let block = (4_000_000 / n.max(1)).clamp(16, n.max(16));
    let mut start = 0;
    while start < n {
        let b = block.min(n - start);
        let kxb = kernel.k(x.as_view(), x.rows(start, b)); // n × b
        let ck = matmul(c.as_view(), false, kxb.as_view(), false); // q × b
        ckc += matmul(ck.as_view(), false, c.columns(start, b), true);
        for j in 0..b {
            let col = c.column(start + j);
            ckc.ger(s2[start + j], &col, &col, 1.0);
        }
        start += b;
    }
    symmetrise(&mut ckc);
    ckc
}

pub(crate) fn symmetrise(m: &mut DMatrix<f64>) {
    for i in 0..m.nrows() {
        for j in 0..i {
            let v = 0.5 * (m[(i, j)] + m[(j, i)]);
            m[(i, j)] = v;
            m[(j, i)] = v;
        }
    }
}

/// The orthonormal eigenvectors (q × k) of the symmetric `m` with the k largest eigenvalues, in
/// decreasing order.
pub(crate) fn principal_basis(m: &DMatrix<f64>, k: usize) -> Result<DMatrix<f64>, PrivacyError> {
    let q = m.nrows();
    if m.ncols() != q {
        return Err(PrivacyError::shape("principal basis", m.ncols(), "columns", q, "rows"));
    }
    if k == 0 || k > q {
        return Err(PrivacyError::shape("principal basis (rank 1 to q)", k, "basis vectors", q, "points"));
    }
    if m.iter().any(|v| !v.is_finite()) {
        return Err(PrivacyError::non_finite("principal basis: non-finite released-mean covariance"));
    }
    let eig = SymmetricEigen::new(m.clone());
    let mut order: Vec<usize> = (0..q).collect();
    order.sort_by(|&a, &b| eig.eigenvalues[b].total_cmp(&eig.eigenvalues[a]));
    let mut u = DMatrix::from_fn(q, k, |i, j| eig.eigenvectors[(i, order[j])]);
    // A fixed sign per vector (its largest entry positive), so that the noise U z a seed draws
    // does not depend on the eigen-solver's sign convention.
    for mut col in u.column_iter_mut() {
        let at = col.iamax();
        if col[at] < 0.0 {
            col.neg_mut();
        }
    }
    Ok(u)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rank_rules_parse_and_name_each_other() {
        for s in ["full", "auto", "auto=2,4", "k=3"] {
            let r: RankRule = s.parse().unwrap();
            assert_eq!(r.name(), s);
            assert_eq!(r.name().parse::<RankRule>().unwrap(), r);
        }
        for bad in ["", "k=0", "k=-1", "auto=", "auto=3,x", "rank"] {
            let e = bad.parse::<RankRule>().unwrap_err().to_string();
            assert!(e.contains("rank rule"), "{e}");
        }
        assert_eq!(RankRule::auto().candidates(25), vec![3, 5, 10]);
        assert_eq!(RankRule::auto().candidates(4), vec![3]);
        assert!(RankRule::Fixed { k: 3 }.candidates(25) == vec![3] && !RankRule::Fixed { k: 3 }.allows_full(25));
        assert!(RankRule::Fixed { k: 30 }.candidates(25).is_empty() && RankRule::Fixed { k: 30 }.allows_full(25));
    }

    #[test]
    fn the_basis_is_orthonormal_and_spans_the_largest_eigenvalues() {
        let a = DMatrix::from_fn(6, 6, |i, j| ((i * 7 + j * 3) % 5) as f64 - 2.0);
        let m = &a * a.transpose() + DMatrix::from_diagonal(&DVector::from_fn(6, |i, _| i as f64));
        let u = principal_basis(&m, 3).unwrap();
        assert!((u.transpose() * &u - DMatrix::identity(3, 3)).abs().max() < 1e-12);
        // The captured variance tr(Uᵀ M U) equals the sum of the 3 largest eigenvalues.
        let mut ev: Vec<f64> = SymmetricEigen::new(m.clone()).eigenvalues.iter().copied().collect();
        ev.sort_by(|a, b| b.total_cmp(a));
        let captured = (u.transpose() * &m * &u).trace();
        assert!((captured - ev[..3].iter().sum::<f64>()).abs() < 1e-9 * captured);
        assert!(principal_basis(&m, 0).is_err() && principal_basis(&m, 7).is_err());
    }
}
