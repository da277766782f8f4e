//! Statistical DP audit (the privacy-loss distribution estimated by sampling): on neighbouring label sets D, D'
//! (one label moved by the full clipping width d), run the release mechanism many times and
//! check the empirical privacy loss on the most powerful test events stays within the claimed
//! (ε, δ). The same audit must *detect* the thesis reproduction mode, which claims (1, 0.00625)
//! but uses σ = 0.42.

use dpcotrain_gp::kernels::{Kernel, SquaredExponential};
use dpcotrain_gp::linalg::{Cholesky, JitterPolicy};
use dpcotrain_gp::{ExactGp, NoiseModel};
use dpcotrain_privacy::calibrate::{Mechanism, THESIS_MULTIPLIER, calibrate};
use dpcotrain_privacy::finite::{CapRule, HatModel, plan};
use dpcotrain_privacy::gaussian::gdp_mu_for;
use dpcotrain_privacy::low_rank::RankRule;
use dpcotrain_privacy::sensitivity::{LabelRange, mahalanobis_exact};
use nalgebra::{DMatrix, DVector};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha20Rng;
use rand_distr::StandardNormal;

struct Setup {
    mu_d: DVector<f64>,
    mu_d2: DVector<f64>,
    chol_m: Cholesky,
    delta_m: f64,
}

fn setup() -> Setup {
    let x: DMatrix<f64> = DMatrix::from_column_slice(10, 1, &[-2.0, -1.5, -1.1, -0.6, 0.0, 0.3, 0.9, 1.4, 1.8, 2.5]);
    let y = DVector::from_fn(10, |i, _| (x[(i, 0)] * 1.3).sin().clamp(-1.0, 1.0));
    let k = SquaredExponential::isotropic(1.0, 0.8);
    let range = LabelRange::new(-1.0, 1.0).unwrap();
    let xs = DMatrix::from_column_slice(5, 1, &[-1.8, -0.4, 0.5, 1.2, 2.2]);
    let tau = 1e-9;
    let gp = ExactGp::new(Box::new(k.clone()), NoiseModel::homoscedastic(0.1), x.clone(), y.clone()).unwrap();
    let s = mahalanobis_exact(&gp, &(0..10).collect::<Vec<_>>(), range, &xs, tau).unwrap();
    // Neighbour: the worst label moved across the whole range.
    let mut y2 = y.clone();
    y2[s.worst_row] = if y[s.worst_row] > 0.0 { -1.0 } else { 1.0 };
    let gp2 = ExactGp::new(Box::new(k.clone()), NoiseModel::homoscedastic(0.1), x, y2).unwrap();
    let mu_d = gp.posterior().unwrap().predict(&xs, false).unwrap().mean;
    let mu_d2 = gp2.posterior().unwrap().predict(&xs, false).unwrap().mean;
    let mut m = k.k(xs.as_view(), xs.as_view());
    for i in 0..5 {
        m[(i, i)] += tau;
    }
    let chol_m = Cholesky::factor(m, "M", JitterPolicy::IF_NEEDED).unwrap();
    Setup { mu_d, mu_d2, chol_m, delta_m: s.value }
}

/// The finite release (isotropic noise, hat-matrix sensitivity), uncapped or capped: the worst
/// neighbouring pair is the row with the largest ‖C e_j‖ moved across the whole range. A
/// low-rank release is audited as the k-vector Uᵀ C·y + σz it draws (the mechanism; the
/// multiplication by U is post-processing).
fn setup_finite(rule: &CapRule, rank: &RankRule, epsilon: f64, delta: f64) -> (Setup, f64) {
    // One isolated row (x = 4) so that capping has something to do.
    let x: DMatrix<f64> =
        DMatrix::from_column_slice(11, 1, &[-2.0, -1.5, -1.1, -0.6, 0.0, 0.3, 0.9, 1.4, 1.8, 2.5, 4.0]);
    let range = LabelRange::new(-1.0, 1.0).unwrap();
    let y = DVector::from_fn(11, |i, _| (x[(i, 0)] * 1.3).sin().clamp(-1.0, 1.0));
    let xq = DMatrix::from_column_slice(5, 1, &[-1.8, -0.4, 0.5, 1.2, 3.6]);
    let k = SquaredExponential::isotropic(1.0, 0.8);
    let s2 = DVector::from_element(11, 0.1);
    let mu = gdp_mu_for(epsilon, delta);
    let rel = plan(&k, &x, &s2, &xq, HatModel::Exact, range, mu, rule, rank).unwrap();
    // The tight pair by brute force over every row (not the code's own worst row): the mean the
    // mechanism draws around — C·clip(y), or the k-vector Uᵀ C·clip(y) of a low-rank release —
    // with one label at each end of the range.
    let drawn = |y: &DVector<f64>| {
        let m = rel.hat.mean(y, Some(range)).unwrap();
        match &rel.low_rank {
            None => m,
            Some(lr) => lr.u.transpose() * m,
        }
    };
    let pair = |j: usize| {
        let (mut lo, mut hi) = (y.clone(), y.clone());
        lo[j] = range.lo;
        hi[j] = range.hi;
        (drawn(&lo), drawn(&hi))
    };
    let moved = |j: usize| {
        let (a, b) = pair(j);
        (b - a).norm()
    };
    let j = (0..y.len()).max_by(|&a, &b| moved(a).total_cmp(&moved(b))).unwrap();
    let (mu_d, mu_d2) = pair(j);
    let dim = mu_d.len();
    let chol_m = Cholesky::factor(DMatrix::identity(dim, dim), "I", JitterPolicy::IF_NEEDED).unwrap();
    let st = Setup { mu_d, mu_d2, chol_m, delta_m: rel.sensitivity.value };
    (st, rel.sigma)
}

/// Largest empirical ε over threshold events {s > t} and {s < t} of the whitened
/// likelihood-ratio statistic, counting only events with enough mass to estimate.
fn empirical_epsilon(st: &Setup, sigma: f64, delta: f64, n: usize, seed: u64) -> f64 {
    let a = st.chol_m.solve_l_vec(&st.mu_d);
    let a2 = st.chol_m.solve_l_vec(&st.mu_d2);
    let dir = (&a2 - &a).normalize();
    let mut rng = ChaCha20Rng::seed_from_u64(seed);
    let mut draw = |mu: &DVector<f64>| -> f64 {
        // release = μ + σ L_M ξ; whitened: L_M⁻¹ release = a + σ ξ.
        let xi = DVector::from_fn(mu.len(), |_, _| rng.sample::<f64, _>(StandardNormal));
        let out = mu + st.chol_m.l() * xi * sigma;
        (st.chol_m.solve_l_vec(&out) - &a).dot(&dir)
    };
    let s_d: Vec<f64> = (0..n).map(|_| draw(&st.mu_d)).collect();
    let s_d2: Vec<f64> = (0..n).map(|_| draw(&st.mu_d2)).collect();
    let sep = (&a2 - &a).norm();
    let mut worst = 0.0f64;
    for k in 0..=40 {
        let t = -2.0 * sigma + (sep + 4.0 * sigma) * k as f64 / 40.0;
        for upper in [true, false] {
            let frac = |v: &[f64]| v.iter().filter(|s| if upper { **s > t } else { **s < t }).count() as f64 / n as f64;
            let (p, p2) = (frac(&s_d), frac(&s_d2));
            for (big, small) in [(p2, p), (p, p2)] {
                // Conservative: subtract 3 standard errors from the larger, add to the smaller.
                let se = |q: f64| (q * (1.0 - q) / n as f64).sqrt();
                let (b, s) = (big - 3.0 * se(big) - delta, small + 3.0 * se(small));
                if b > 0.0 && s > 1e-4 {
                    worst = worst.max((b / s).ln());
                }
            }
        }
    }
    worst
}

#[test]
fn calibrated_mechanism_passes_the_audit() {
    let st = setup();
    let delta = 1e-5;
    let c = calibrate(Mechanism::Analytic, 1.0, delta, st.delta_m).unwrap();
    let eps = empirical_epsilon(&st, c.sigma, delta, 200_000, 1);
    assert!(eps <= 1.0, "empirical ε {eps} exceeds the claimed 1");
    // The audit has power: the neighbouring releases are distinguishable (ε_emp well above 0).
    assert!(eps > 0.3, "audit too weak: {eps}");
}

#[test]
fn thesis_mode_fails_the_audit_and_is_flagged() {
    let st = setup();
    let t = calibrate(Mechanism::Thesis { multiplier: THESIS_MULTIPLIER }, 1.0, 0.00625, 1.0).unwrap();
    assert!(!t.guaranteed);
    let eps = empirical_epsilon(&st, t.sigma, 0.00625, 200_000, 2);
    assert!(eps > 1.0, "the thesis mode should violate its claimed ε = 1 here, got {eps}");
}

#[test]
fn finite_release_passes_the_audit_uncapped_and_capped() {
    let delta = 1e-5;
    let cases = [
        (CapRule::None, RankRule::Full, 3u64),
        (CapRule::Fixed { eta: 1.0 }, RankRule::Full, 4),
        (CapRule::auto(), RankRule::Full, 5),
        (CapRule::None, RankRule::Fixed { k: 2 }, 6),
        (CapRule::auto(), RankRule::Fixed { k: 3 }, 7),
    ];
    for (rule, rank, seed) in cases {
        let (st, sigma) = setup_finite(&rule, &rank, 1.0, delta);
        assert_eq!(st.mu_d.len(), if rank == RankRule::Full { 5 } else { rank.candidates(5)[0] });
        // The worst pair attains the sensitivity (the audit tests the tight case).
        let moved = (&st.mu_d2 - &st.mu_d).norm();
        assert!((moved - st.delta_m).abs() <= 2e-6 * st.delta_m, "{rule:?} {rank:?}: {moved} vs Δ {}", st.delta_m);
        let eps = empirical_epsilon(&st, sigma, delta, 200_000, seed);
        assert!(eps <= 1.0, "{rule:?} {rank:?}: empirical ε {eps} exceeds the claimed 1");
        assert!(eps > 0.3, "{rule:?} {rank:?}: audit too weak: {eps}");
        // Half the calibrated noise is caught.
        let eps_half = empirical_epsilon(&st, sigma * 0.5, delta, 200_000, seed + 10);
        assert!(eps_half > 1.0, "{rule:?} {rank:?}: the audit should catch σ/2, got {eps_half}");
    }
}

/// The θ vote's histogram release on its worst neighbouring pair: one group's vote moved from
/// one candidate to another (‖h − h′‖ = √2, attained), at the σ = √2/μ of (ε, δ) = (1, 1e-5).
#[test]
fn theta_vote_histogram_passes_the_audit() {
    use dpcotrain_privacy::select::{VOTE_SENSITIVITY, noisy_vote};
    let delta = 1e-5;
    let mu = gdp_mu_for(1.0, delta);
    let zero = DVector::zeros(4);
    let h = DVector::from_vec(noisy_vote(&[0, 0, 1, 2, 2], 4, 0, 0.0, mu, &zero).unwrap().noisy_counts);
    let h2 = DVector::from_vec(noisy_vote(&[0, 0, 1, 2, 3], 4, 0, 0.0, mu, &zero).unwrap().noisy_counts);
    assert!(((&h2 - &h).norm() - VOTE_SENSITIVITY).abs() < 1e-12);
    let sigma = noisy_vote(&[0], 4, 0, 0.0, mu, &zero).unwrap().sigma;
    let chol_m = Cholesky::factor(DMatrix::identity(4, 4), "I", JitterPolicy::IF_NEEDED).unwrap();
    let st = Setup { mu_d: h, mu_d2: h2, chol_m, delta_m: VOTE_SENSITIVITY };
    let eps = empirical_epsilon(&st, sigma, delta, 200_000, 21);
    assert!(eps <= 1.0, "empirical ε {eps} exceeds the claimed 1");
    assert!(eps > 0.3, "audit too weak: {eps}");
    let eps_half = empirical_epsilon(&st, sigma * 0.5, delta, 200_000, 22);
    assert!(eps_half > 1.0, "the audit should catch σ/2, got {eps_half}");
}
