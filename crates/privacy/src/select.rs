//! Differentially private choice of hyperparameters from a public grid: **sample and
//! aggregate** (Nissim, Raskhodnikova & Smith 2007) with a **Gaussian noisy histogram** of votes
//! (docs/honest-dp.md, "Choosing θ with DP").
//!
//! # Mechanism
//! The private rows are split into k groups by a uniformly random permutation π drawn with the
//! vote's noise (row π(j) goes to group j mod k), independent of the data and of the order in
//! which the rows arrive.
//! Each group votes for the candidate θ of the public grid with the largest log marginal
//! likelihood (Rasmussen & Williams 2006, eq 5.8) of that group's rows alone. The vote counts
//! h ∈ ℕ^C are released as h̃ = h + σz, z ~ N(0, I_C), and θ̂ = argmax_c (h̃_c + b·[c = c₀]), where
//! c₀ is the public default and b ≥ 0 a public head start (so that when the votes are too few to
//! stand out of the noise the default wins rather than a random candidate).
//!
//! # Theorem (selection is μ-GDP, μ = √2/σ)
//! Changing one label changes the data of exactly one group, hence at most one vote: one count
//! falls by one and another rises by one, ‖h − h′‖₂ ≤ √2. This holds even when the rows arrive
//! in an order that depends on the labels (a file sorted by its target, say, where changing one
//! label moves rows): π is uniform and drawn afresh, so for any arrival order the assignment of
//! rows to groups has the same distribution, and coupling the two neighbours' permutations so that
//! every row lands in the same group leaves only the changed row's group different. With a fixed
//! rule such as "row i to group i mod k" it would not (a re-sorted file shifts every row between
//! the old and the new position of the changed one). The histogram release is a Gaussian
//! mechanism with L2 sensitivity √2, so it is (√2/σ)-GDP (Dong, Roth & Su 2019, Thm 2.7), and
//! θ̂ — a function of h̃ and public constants only — is post-processing. Its cost enters the
//! ledger as a Gaussian release with Δ = √2 and this σ (ρ = 1/σ²). The label-free parts released
//! afterwards with θ̂ (variances, prior covariances, the finite mechanism's σ) are functions of
//! θ̂, covariates and public constants: post-processing too. The later releases of means are,
//! for every fixed θ̂, Gaussian mechanisms with their own exact Δ, so vote and releases compose
//! adaptively by adding ρ (Dong, Roth & Su 2019, Thm 3.2; Bun & Steinke 2016, Lemma 2.3).

use crate::PrivacyError;
use dpcotrain_gp::kernels::Kernel;
use dpcotrain_gp::{ExactGp, NoiseModel};
use nalgebra::{DMatrix, DVector};

/// L2 sensitivity of the vote histogram to one label: one vote moves from one bin to another.
pub const VOTE_SENSITIVITY: f64 = std::f64::consts::SQRT_2;

/// A candidate of the public grid: a kernel and a homoscedastic noise variance.
pub struct Candidate {
    pub kernel: Box<dyn Kernel>,
    pub noise: f64,
}

/// The positions in the group order of group g out of k (position j belongs to group j mod k).
pub(crate) fn group_rows(n: usize, k: usize, g: usize) -> Vec<usize> {
    (g..n).step_by(k.max(1)).collect()
}

/// A uniformly random order of n rows for the vote's groups: from OS entropy (a deployed node)
/// or from `seed` (reproducible experiments, which carry no guarantee).
pub fn random_order(n: usize, seed: Option<u64>) -> Vec<usize> {
    use rand::SeedableRng;
    use rand::seq::SliceRandom;
    let mut rng = match seed {
        Some(s) => rand_chacha::ChaCha20Rng::seed_from_u64(s),
        None => rand_chacha::ChaCha20Rng::from_os_rng(),
    };
    let mut order: Vec<usize> = (0..n).collect();
    order.shuffle(&mut rng);
    order
}

/// Each group's vote: the index of the candidate with the largest log marginal likelihood of
/// that group's rows (ties and failed fits go to the lower index; a group whose every fit fails
/// votes for `fallback`). Group g holds rows `order[g]`, `order[g + k]`, …; its vote reads only
/// its own labels. `order` must be a permutation of the rows ([`random_order`]).
pub fn group_votes(
    candidates: &[Candidate],
    x: &DMatrix<f64>,
    y: &DVector<f64>,
    groups: usize,
    fallback: usize,
    order: &[usize],
) -> Result<Vec<usize>, PrivacyError> {
    if candidates.is_empty() {
        return Err(PrivacyError::empty("θ selection", "candidates in the grid"));
    }
    if fallback >= candidates.len() {
        return Err(PrivacyError::out_of_range("θ selection", "default candidate", fallback, candidates.len()));
    }
    if x.nrows() != y.len() {
        return Err(PrivacyError::shape("θ selection", y.len(), "labels", x.nrows(), "rows"));
    }
    if groups == 0 || groups > x.nrows() {
        return Err(PrivacyError::shape("θ selection (1 ≤ groups ≤ rows)", groups, "groups", x.nrows(), "rows"));
    }
    if let Some(c) = candidates.iter().position(|c| !(c.noise.is_finite() && c.noise > 0.0)) {
        return Err(PrivacyError::Entry {
            context: "θ selection",
            name: "noise variance",
            item: "candidate",
            index: c,
            value: candidates[c].noise,
            bound: "be positive and finite",
        });
    }
    let mut seen = vec![false; x.nrows()];
    if order.len() != x.nrows() || !order.iter().all(|&i| i < seen.len() && !std::mem::replace(&mut seen[i], true)) {
        return Err(PrivacyError::NotPermutation { context: "θ selection", n: x.nrows() });
    }
    let mut votes = Vec::with_capacity(groups);
    for g in 0..groups {
        let rows: Vec<usize> = group_rows(x.nrows(), groups, g).into_iter().map(|j| order[j]).collect();
        let xg = x.select_rows(rows.iter());
        let yg = y.select_rows(rows.iter());
        let mut best: Option<(usize, f64)> = None;
        for (c, cand) in candidates.iter().enumerate() {
            let lml = ExactGp::new(cand.kernel.clone(), NoiseModel::homoscedastic(cand.noise), xg.clone(), yg.clone())
                .and_then(|gp| gp.log_marginal_likelihood());
            if let Ok(v) = lml
                && v.is_finite()
                && best.is_none_or(|(_, b)| v > b)
            {
                best = Some((c, v));
            }
        }
        votes.push(best.map_or(fallback, |(c, _)| c));
    }
    Ok(votes)
}

/// The released histogram and the choice made from it.
#[derive(Debug, Clone, PartialEq)]
pub struct VoteRelease {
    /// h̃ = h + σz (this is what the guarantee covers; θ̂ is post-processing of it).
    pub noisy_counts: Vec<f64>,
    /// argmax of h̃ with the head start added to the default.
    pub winner: usize,
    pub sigma: f64,
    /// [`VOTE_SENSITIVITY`].
    pub sensitivity: f64,
}

/// Release the vote histogram of `votes` over `candidates` bins with noise σ = √2/μ (μ-GDP) and
/// pick the winner; `head_start_sd` σ (≥ 0) is added to `default`'s noisy count. `z` is a
/// standard-normal draw per bin. μ = +∞ means no noise (DP off): the plain majority, no head
/// start.
pub fn noisy_vote(
    votes: &[usize],
    candidates: usize,
    default: usize,
    head_start_sd: f64,
    mu: f64,
    z: &DVector<f64>,
) -> Result<VoteRelease, PrivacyError> {
    if mu.is_nan() || mu <= 0.0 {
        return Err(PrivacyError::parameter("θ selection: GDP parameter μ", mu, "be positive"));
    }
    if !(head_start_sd.is_finite() && head_start_sd >= 0.0) {
        return Err(PrivacyError::parameter("θ selection: head start", head_start_sd, "be ≥ 0"));
    }
    if z.len() != candidates {
        return Err(PrivacyError::shape("θ selection", z.len(), "noise draws", candidates, "candidates"));
    }
    if default >= candidates {
        return Err(PrivacyError::out_of_range("θ selection", "default candidate", default, candidates));
    }
    if let Some(&v) = votes.iter().find(|&&v| v >= candidates) {
        return Err(PrivacyError::out_of_range("θ selection", "vote", v, candidates));
    }
    let sigma = crate::NoiseScale::Gdp { mu }.sigma(VOTE_SENSITIVITY);
    let mut noisy_counts = vec![0.0; candidates];
    for &v in votes {
        noisy_counts[v] += 1.0;
    }
    for (c, h) in noisy_counts.iter_mut().enumerate() {
        *h += sigma * z[c];
    }
    let head_start = head_start_sd * sigma;
    let score = |c: usize| noisy_counts[c] + if c == default { head_start } else { 0.0 };
    let winner = (0..candidates).fold(default, |best, c| if score(c) > score(best) { c } else { best });
    Ok(VoteRelease { noisy_counts, winner, sigma, sensitivity: VOTE_SENSITIVITY })
}

#[cfg(test)]
mod tests {
    use super::*;
    use dpcotrain_gp::kernels::SquaredExponential;

    fn grid() -> Vec<Candidate> {
        [(0.1, 0.05), (0.5, 0.05), (2.0, 0.05), (0.5, 4.0)]
            .iter()
            .map(|&(l, s2)| Candidate { kernel: Box::new(SquaredExponential::isotropic(1.0, l)), noise: s2 })
            .collect()
    }

    fn identity(n: usize) -> Vec<usize> {
        (0..n).collect()
    }

    fn data(n: usize) -> (DMatrix<f64>, DVector<f64>) {
        let x = DMatrix::from_fn(n, 1, |i, _| -2.0 + 4.0 * i as f64 / n as f64);
        let y = x.column(0).map(|v| (3.0 * v).sin());
        (x, y)
    }

    #[test]
    fn random_orders_are_permutations_seeded_or_not() {
        for seed in [Some(3), None] {
            let mut o = random_order(50, seed);
            assert_ne!(o, identity(50), "a shuffle of 50 rows left them in place");
            o.sort_unstable();
            assert_eq!(o, identity(50));
        }
        assert_eq!(random_order(50, Some(3)), random_order(50, Some(3)));
        assert_ne!(random_order(50, None), random_order(50, None));
    }

    #[test]
    fn groups_partition_the_rows() {
        let mut all: Vec<usize> = (0..4).flat_map(|g| group_rows(10, 4, g)).collect();
        all.sort();
        assert_eq!(all, (0..10).collect::<Vec<_>>());
        assert_eq!(group_rows(10, 4, 1), vec![1, 5, 9]);
    }

    #[test]
    fn groups_vote_for_the_length_scale_of_the_data() {
        // sin(3x) has a length-scale of about 0.3 and no noise: every group prefers (0.5, 0.05).
        let (x, y) = data(120);
        let votes = group_votes(&grid(), &x, &y, 4, 0, &identity(120)).unwrap();
        assert_eq!(votes, vec![1; 4]);
    }

    /// Brute force: moving any one label to either end of the range changes the histogram by
    /// at most √2 in L2 (one vote moves), and only that row's group can change its vote.
    #[test]
    fn one_label_moves_at_most_one_vote() {
        let (x, y) = data(24);
        let k = 4;
        let base = group_votes(&grid(), &x, &y, k, 0, &identity(24)).unwrap();
        let hist = |v: &[usize]| {
            let mut h = [0.0f64; 4];
            for &c in v {
                h[c] += 1.0;
            }
            h
        };
        let mut moved_any = false;
        for j in 0..y.len() {
            for end in [-6.0, 6.0] {
                let mut y2 = y.clone();
                y2[j] = end;
                let v2 = group_votes(&grid(), &x, &y2, k, 0, &identity(24)).unwrap();
                for g in 0..k {
                    if g != j % k {
                        assert_eq!(v2[g], base[g], "row {j} changed group {g}'s vote");
                    }
                }
                let (h, h2) = (hist(&base), hist(&v2));
                let d: f64 = h.iter().zip(h2.iter()).map(|(a, b)| (a - b).powi(2)).sum::<f64>().sqrt();
                assert!(d <= VOTE_SENSITIVITY + 1e-12);
                moved_any |= d > 0.0;
            }
        }
        assert!(moved_any, "no label change moved a vote: the test has no power");
    }

    #[test]
    fn the_head_start_keeps_the_default_when_votes_are_drowned() {
        let z = DVector::from_vec(vec![0.0, 0.0, 0.1]);
        // Two votes for candidate 2 with σ = √2/0.1 ≈ 14: the noise decides, and with a head
        // start of 4σ the default (0) stays.
        let r = noisy_vote(&[2, 2], 3, 0, 4.0, 0.1, &z).unwrap();
        assert_eq!(r.winner, 0);
        assert!((r.sigma - VOTE_SENSITIVITY / 0.1).abs() < 1e-12);
        // Without the head start the same noisy counts elect candidate 2 (the test has power).
        assert_eq!(noisy_vote(&[2, 2], 3, 0, 0.0, 0.1, &z).unwrap().winner, 2);
        // With a large μ the votes win over the head start.
        let r = noisy_vote(&[2; 10], 3, 0, 4.0, 10.0, &z).unwrap();
        assert_eq!(r.winner, 2);
        assert_eq!(r.noisy_counts.len(), 3);
        // μ = ∞ (DP off): the exact counts, plain majority.
        let r = noisy_vote(&[1, 2, 2], 3, 0, 4.0, f64::INFINITY, &z).unwrap();
        assert_eq!((r.winner, r.sigma, r.noisy_counts.clone()), (2, 0.0, vec![0.0, 1.0, 2.0]));
    }

    #[test]
    fn bad_input_is_refused() {
        let z = DVector::zeros(3);
        assert!(noisy_vote(&[0], 3, 0, 0.0, 0.0, &z).is_err());
        assert!(noisy_vote(&[0], 3, 0, 0.0, f64::NAN, &z).is_err());
        assert!(noisy_vote(&[0], 3, 0, -1.0, 1.0, &z).is_err());
        assert!(noisy_vote(&[3], 3, 0, 0.0, 1.0, &z).is_err());
        assert!(noisy_vote(&[0], 3, 3, 0.0, 1.0, &z).is_err());
        assert!(noisy_vote(&[0], 2, 0, 0.0, 1.0, &z).is_err());
        let (x, y) = data(10);
        let id = identity(10);
        assert!(group_votes(&[], &x, &y, 2, 0, &id).is_err());
        assert!(group_votes(&grid(), &x, &y, 0, 0, &id).is_err());
        assert!(group_votes(&grid(), &x, &y, 11, 0, &id).is_err());
        assert!(group_votes(&grid(), &x, &y, 2, 4, &id).is_err());
        assert!(group_votes(&grid(), &x, &y.rows(0, 9).into_owned(), 2, 0, &id).is_err());
        // The group order must be a permutation of the rows.
        for bad in [vec![0; 10], (0..9).collect::<Vec<_>>(), (1..11).collect::<Vec<_>>()] {
            let e = group_votes(&grid(), &x, &y, 2, 0, &bad).unwrap_err().to_string();
            assert!(e.contains("not a permutation"), "{e}");
        }
    }
}
