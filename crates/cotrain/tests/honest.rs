//! The honest release (docs/honest-dp.md): public θ, label-free queries, finite releases of the
//! capped private-only posterior in batches. What leaves a node may depend on the labels only
//! through the noised means, and every batch is charged exactly once.

use dpcotrain_cotrain::answer::{PredictRequest, Uncertainty};
use dpcotrain_cotrain::combiner::CombinerKind;
use dpcotrain_cotrain::data::PartyData;
use dpcotrain_cotrain::party::{DpConfig, Party, ReleasePolicy, THETA_SELECTION_ID};
use dpcotrain_cotrain::release_model::{
    DEFAULT_RELEASE_THETA, PublicTheta, QueryPolicy, ReleaseForm, ReleaseModel, ThetaPolicy,
};
use dpcotrain_cotrain::select::public_greedy;
use dpcotrain_gp::kernels::SquaredExponential;
use dpcotrain_gp::{ExactGp, NoiseModel, NoiseVariance};
use dpcotrain_privacy::CapRule;
use dpcotrain_privacy::LabelRange;
use dpcotrain_privacy::RankRule;
use dpcotrain_privacy::gaussian::{gdp_epsilon, gdp_mu_for};
use nalgebra::{DMatrix, DVector};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

fn range() -> LabelRange {
    LabelRange::new(-3.0, 3.0).unwrap()
}

/// 2-D covariates with one isolated row; `label_seed` changes only the labels.
fn data(label_seed: u64) -> PartyData {
    let mut r = ChaCha8Rng::seed_from_u64(11);
    let mut x: DMatrix<f64> = DMatrix::from_fn(30, 2, |_, _| r.random_range(-1.5..1.5));
    x[(0, 0)] = 3.0;
    x[(0, 1)] = 3.0;
    let pool: DMatrix<f64> = DMatrix::from_fn(40, 2, |_, _| r.random_range(-2.0..2.0));
    let test: DMatrix<f64> = DMatrix::from_fn(10, 2, |_, _| r.random_range(-2.0..2.0));
    let mut ry = ChaCha8Rng::seed_from_u64(label_seed);
    let y = DVector::from_fn(30, |i, _| x[(i, 0)] - 0.5 * x[(i, 1)] + ry.random_range(-1.0..1.0));
    PartyData {
        name: "B".into(),
        columns: vec!["u".into(), "v".into()],
        x_train: x,
        y_train: y,
        y_test: DVector::from_fn(10, |i, _| test[(i, 0)]),
        x_pool: pool,
        x_test: test,
    }
}

fn try_party(dp: DpConfig, label_seed: u64) -> Result<Party, dpcotrain_cotrain::CotrainError> {
    party_of(data(label_seed), dp)
}

/// A party on `d` with the tests' kernel, noise and seed.
fn party_of(d: PartyData, dp: DpConfig) -> Result<Party, dpcotrain_cotrain::CotrainError> {
    Party::new(
        d,
        CombinerKind::Noisy,
        Uncertainty::Marginal,
        Box::new(SquaredExponential::ard(1.0, vec![1.0, 1.0])),
        NoiseVariance::new(0.1),
        dp,
        Some(5),
        Default::default(),
    )
}

fn party(dp: DpConfig, label_seed: u64) -> Party {
    try_party(dp, label_seed).unwrap()
}

fn req(id: &str, idx: Vec<usize>, uncertainty: Uncertainty) -> PredictRequest {
    PredictRequest {
        request_id: id.into(),
        requester: "A".into(),
        indices: idx,
        uncertainty,
        want_prior: true,
        witness: None,
    }
}

/// ε = 1 per batch; the budget admits exactly two batches (GDP composition: μ√2).
fn honest() -> DpConfig {
    let two = gdp_epsilon(2f64.sqrt() * gdp_mu_for(1.0, 1e-5), 1e-5) * (1.0 + 1e-6);
    DpConfig::honest(1.0, 1e-5, two, range(), 5)
}

#[test]
fn a_batch_is_charged_once_at_exactly_its_mechanism_cost() {
    let mut p = party(honest(), 1);
    let a = p.answer(&req("r1", vec![3, 7, 11], Uncertainty::Marginal)).unwrap();
    let c = a.charge.clone().unwrap();
    assert!(c.new_release && c.guaranteed);
    let mu = gdp_mu_for(1.0, 1e-5);
    // σ = Δ/μ, so ρ = Δ²/(2σ²) = μ²/2 whatever the cap did.
    assert!((c.sigma - c.sensitivity / mu).abs() < 1e-12 * c.sigma);
    assert!((c.rho - mu * mu / 2.0).abs() < 1e-12);
    assert!((p.ledger("A").unwrap().epsilon_spent() - 1.0).abs() < 1e-6);
    // The capped σ is at most the auto rule's largest η (4) times the prior sd.
    assert!(c.sigma <= 4.0 * 1.001 + 1e-9, "σ = {}", c.sigma);
    // Asking again for released indices is post-processing: same values, nothing charged.
    let b = p.answer(&req("r2", vec![7, 3], Uncertainty::Marginal)).unwrap();
    assert_eq!(b.mean, vec![a.mean[1], a.mean[0]]);
    assert!(b.charge.is_none());
    assert!((p.ledger("A").unwrap().epsilon_spent() - 1.0).abs() < 1e-6);
    // New indices are a second batch (a second charge); the old ones keep their values.
    let d = p.answer(&req("r3", vec![11, 20], Uncertainty::Marginal)).unwrap();
    assert_eq!(d.mean[0], a.mean[2]);
    assert!(d.charge.unwrap().new_release);
    assert_eq!(p.ledger("A").unwrap().releases.len(), 2);
    // The budget holds two batches: a third (total μ√3) does not fit and is refused before
    // anything is released or recorded.
    let before = p.state();
    assert!(p.answer(&req("r4", vec![30], Uncertainty::Marginal)).is_err());
    assert_eq!(p.ledger("A").unwrap().releases.len(), 2);
    assert_eq!(p.state().requesters, before.requesters);
}

#[test]
fn a_node_that_asks_adaptively_records_its_releases_as_not_guaranteed() {
    // Same release (public θ, finite, batches), but this node chooses its own queries by
    // uncertainty sampling on its label-fitted model: those indices depend on its labels,
    // uncounted, so its ledger must not claim a guarantee.
    let adaptive = DpConfig { queries: QueryPolicy::Adaptive, ..honest() };
    let mut p = party(adaptive, 1);
    let c = p.answer(&req("r1", vec![3, 7], Uncertainty::Marginal)).unwrap().charge.unwrap();
    assert!(c.new_release && !c.guaranteed);
    assert!(p.ledger("A").unwrap().releases.iter().all(|r| !r.guaranteed));
    // The same node with label-free queries claims it: the flag follows the query policy alone.
    let c = party(honest(), 1).answer(&req("r1", vec![3, 7], Uncertainty::Marginal)).unwrap().charge.unwrap();
    assert!(c.guaranteed);
}

/// A low-rank batch (Theorem 2): its noise lives in k dimensions (the released means minus the
/// noise-free projected means lie in the span of U), what it reports (variances, covariance,
/// noise variance σ², a bound on its σ²‖U_q‖²) is the same for two label vectors, and it
/// survives a restart.
#[test]
fn a_low_rank_batch_releases_noise_in_k_dimensions_and_nothing_label_dependent_besides_the_means() {
    let low = |seed| {
        let dp = DpConfig {
            release: ReleaseForm::Finite { cap: CapRule::auto(), rank: RankRule::Fixed { k: 2 } },
            ..honest()
        };
        party(dp, seed)
    };
    let q = vec![2, 9, 17, 33, 38];
    let (mut p1, mut p2) = (low(1), low(2));
    let a1 = p1.answer(&req("f", q.clone(), Uncertainty::Full)).unwrap();
    let a2 = p2.answer(&req("f", q.clone(), Uncertainty::Full)).unwrap();
    assert_ne!(a1.mean, a2.mean);
    assert_eq!((&a1.cov, &a1.noise_var, &a1.prior_cov), (&a2.cov, &a2.noise_var, &a2.prior_cov));
    let c = a1.charge.clone().unwrap();
    let mu = gdp_mu_for(1.0, 1e-5);
    assert!((c.rho - mu * mu / 2.0).abs() < 1e-12 && (c.sigma - c.sensitivity / mu).abs() < 1e-12 * c.sigma);
    assert!(a1.noise_var.as_ref().unwrap().iter().all(|v| *v == c.sigma * c.sigma));
    // The same plan, recomputed: its basis has 2 columns, and the noise the answer carries
    // (its means minus the plan's noise-free means) lies in their span.
    let d = data(1);
    let t = DEFAULT_RELEASE_THETA; // the release's θ (D32); queries keep PublicTheta::default()
    let rm =
        ReleaseModel::new(d.x_train.clone(), range().clip(&d.y_train), t.kernel(2), t.noise_variance, None, 0).unwrap();
    let xq = d.x_pool.select_rows(q.iter());
    let plan = rm.plan(&xq, Some((mu, range())), &CapRule::auto(), &RankRule::Fixed { k: 2 }).unwrap();
    let u = plan.low_rank.clone().expect("rank 2").u;
    assert_eq!(u.ncols(), 2);
    assert!((plan.sigma - c.sigma).abs() < 1e-12);
    let noise = DVector::from_vec(a1.mean.clone()) - plan.hat.mean(&rm.y, Some(range())).unwrap();
    let outside = &noise - &u * (u.transpose() * &noise);
    assert!(noise.norm() > 1e-6 && outside.norm() < 1e-10 * (1.0 + noise.norm()), "{outside}");
    // A restart replays the released batch number for number.
    let saved = p1.state();
    let mut r = low(1);
    r.restore(&saved).unwrap();
    let again = r.answer(&req("f2", q, Uncertainty::Marginal)).unwrap();
    assert_eq!(again.mean, a1.mean);
}

#[test]
fn what_leaves_the_node_depends_on_labels_only_through_the_noised_means() {
    let q = vec![2, 9, 17, 33];
    for u in [Uncertainty::Marginal, Uncertainty::Full] {
        let mut p1 = party(honest(), 1);
        let mut p2 = party(honest(), 2);
        let a1 = p1.answer(&req(&format!("{u:?}"), q.clone(), u)).unwrap();
        let a2 = p2.answer(&req(&format!("{u:?}"), q.clone(), u)).unwrap();
        assert_ne!(a1.mean, a2.mean, "different labels, different means");
        assert_eq!(a1.var, a2.var);
        assert_eq!(a1.cov, a2.cov);
        assert_eq!(a1.prior_cov, a2.prior_cov);
        let (c1, c2) = (a1.charge.unwrap(), a2.charge.unwrap());
        assert_eq!((c1.sigma, c1.sensitivity), (c2.sigma, c2.sensitivity));
    }
    // With the responder's fitted θ the same release form leaks through the variances.
    let fitted = DpConfig { theta: ThetaPolicy::Fitted, ..honest() };
    let mut f1 = party(fitted.clone(), 1);
    let mut f2 = party(fitted, 2);
    let a1 = f1.answer(&req("x", q.clone(), Uncertainty::Marginal)).unwrap();
    let a2 = f2.answer(&req("x", q, Uncertainty::Marginal)).unwrap();
    assert_ne!(a1.var, a2.var, "fitted θ: the released variances change with the labels");
}

#[test]
fn without_noise_the_release_is_the_public_theta_posterior_mean_and_variance() {
    let mut p = party(DpConfig::honest_protocol_without_dp(5), 1);
    let q = vec![1, 4, 25];
    let a = p.answer(&req("r", q.clone(), Uncertainty::Marginal)).unwrap();
    assert!(a.charge.is_none());
    let d = data(1);
    let t = DEFAULT_RELEASE_THETA; // the release's θ (D32); queries keep PublicTheta::default()
    let gp = ExactGp::new(t.kernel(2), NoiseModel::homoscedastic(t.noise_variance), d.x_train, d.y_train).unwrap();
    let pr = gp.posterior().unwrap().predict(&d.x_pool.select_rows(q.iter()), false).unwrap();
    for k in 0..3 {
        assert!((a.mean[k] - pr.mean[k]).abs() < 1e-10);
        assert!((a.var.as_ref().unwrap()[k] - pr.var[k]).abs() < 1e-10);
    }
}

#[test]
fn released_sigma_matches_an_independent_plan_and_capping_pays() {
    let d = data(1);
    let q = vec![0, 5, 6, 12, 19];
    let xq = d.x_pool.select_rows(q.iter());
    let t = DEFAULT_RELEASE_THETA; // the release's θ (D32); queries keep PublicTheta::default()
    let rm =
        ReleaseModel::new(d.x_train.clone(), range().clip(&d.y_train), t.kernel(2), t.noise_variance, None, 0).unwrap();
    let mu = gdp_mu_for(1.0, 1e-5);
    let none = rm.plan(&xq, Some((mu, range())), &CapRule::None, &RankRule::Full).unwrap();
    let auto = rm.plan(&xq, Some((mu, range())), &CapRule::auto(), &RankRule::auto()).unwrap();
    let mut p = party(honest(), 1);
    let a = p.answer(&req("r", q, Uncertainty::Marginal)).unwrap();
    let c = a.charge.unwrap();
    assert!((c.sigma - auto.sigma).abs() < 1e-12 && (c.sensitivity - auto.sensitivity.value).abs() < 1e-12);
    assert!(auto.sigma < none.sigma, "capping should shrink σ here: {} vs {}", auto.sigma, none.sigma);
    // Released variance = capped (and, at low rank, projected) latent variance + σ², and the
    // answer's noise variance is σ² (for a low-rank release a bound on its σ²‖U_q‖²).
    let v = a.var.unwrap();
    for (k, vk) in v.iter().enumerate() {
        assert!((vk - auto.hat.latent_cov[(k, k)] - auto.sigma.powi(2)).abs() < 1e-10);
        assert!((a.noise_var.as_ref().unwrap()[k] - auto.sigma.powi(2)).abs() < 1e-12);
    }
    // The noised means are the noise-free capped means plus N(0, σ²) draws: their deviation is
    // of the right size (5 draws: within a factor of 4 of σ√5 in norm).
    let m0 = auto.hat.mean(&rm.y, Some(range())).unwrap();
    let dev = (DVector::from_vec(a.mean) - m0).norm();
    assert!(dev > 0.0 && dev < 4.0 * auto.sigma * 5f64.sqrt() + 1e-12, "deviation {dev}, σ {}", auto.sigma);
}

#[test]
fn public_selection_is_label_free_and_equals_brute_force_greedy() {
    let d = data(1);
    let t = PublicTheta::default();
    let k = t.kernel(2);
    let asked = vec![3usize, 8];
    let got = public_greedy(k.as_ref(), &d.x_train, &d.x_pool, &asked, 4, 0.1, 0.1).unwrap();
    // Brute force: refit an exact GP on private rows + chosen points each step and take the
    // unasked point of largest variance (ties → lowest index).
    let mut chosen = asked.clone();
    let mut want = Vec::new();
    for _ in 0..4 {
        let n = d.x_train.nrows();
        let mut xs = DMatrix::zeros(n + chosen.len(), 2);
        xs.rows_mut(0, n).copy_from(&d.x_train);
        for (k2, &i) in chosen.iter().enumerate() {
            xs.row_mut(n + k2).copy_from(&d.x_pool.row(i));
        }
        let gp = ExactGp::new(k.clone(), NoiseModel::homoscedastic(0.1), xs, DVector::zeros(n + chosen.len())).unwrap();
        let v = gp.posterior().unwrap().predict(&d.x_pool, false).unwrap().var;
        let best = (0..d.x_pool.nrows()).filter(|i| !chosen.contains(i)).fold(None::<usize>, |b, i| match b {
            Some(b) if v[b] >= v[i] => Some(b),
            _ => Some(i),
        });
        let b = best.unwrap();
        want.push(b);
        chosen.push(b);
    }
    assert_eq!(got, want);
    // Nothing but covariates enters: the labels are not even an argument. Asked indices are
    // never chosen again, and asking for more than remain returns what remains.
    let all = public_greedy(k.as_ref(), &d.x_train, &d.x_pool, &[], 100, 0.1, 0.1).unwrap();
    assert_eq!(all.len(), 40);
    assert!(
        public_greedy(k.as_ref(), &d.x_train, &d.x_pool, &(0..40).collect::<Vec<_>>(), 3, 0.1, 0.1).unwrap().is_empty()
    );
    assert!(public_greedy(k.as_ref(), &d.x_train, &d.x_pool, &[], 3, 0.0, 0.1).is_err());
}

#[test]
fn impossible_combinations_are_refused_with_reasons() {
    let bad = |dp: DpConfig| try_party(dp, 1).unwrap_err().to_string();
    assert!(bad(DpConfig { policy: ReleasePolicy::PerQuery, ..honest() }).contains("per-query"));
    assert!(bad(DpConfig { release: ReleaseForm::Rkhs, ..honest() }).contains("finite"));
    let t = PublicTheta { lengthscale: -1.0, ..PublicTheta::default() };
    assert!(bad(DpConfig { theta: ThetaPolicy::Public(t), ..honest() }).contains("lengthscale"));
}

/// A retry is recognised per (requester, request id): another requester reusing the id gets a
/// release of its own (charged to its own ledger), never the first requester's answer.
#[test]
fn a_request_id_does_not_replay_across_requesters() {
    let mut p = party(honest(), 1);
    let a = p.answer(&req("same-id", vec![3, 7], Uncertainty::Marginal)).unwrap();
    let mut other = req("same-id", vec![3, 7], Uncertainty::Marginal);
    other.requester = "C".into();
    let c = p.answer(&other).unwrap();
    assert_ne!(c.mean, a.mean, "C must not receive A's noised means");
    assert!(c.charge.unwrap().new_release);
    assert_eq!(p.ledger("C").unwrap().releases.len(), 1);
    assert_eq!(p.ledger("A").unwrap().releases.len(), 1);
    // A's own retry still returns A's answer.
    assert_eq!(p.answer(&req("same-id", vec![3, 7], Uncertainty::Marginal)).unwrap(), a.as_replay());
}

/// The answer cache is bounded per requester; a retry of an evicted id is answered as a new
/// request (here post-processing of released indices: same means, nothing charged), and the
/// saved state stays bounded and delta-encodable.
#[test]
fn the_answer_cache_is_bounded_and_an_evicted_retry_is_charged_as_new() {
    use dpcotrain_cotrain::answer_cache::MAX_ANSWERS_PER_REQUESTER;
    let mut p = party(honest(), 1);
    let first = p.answer(&req("r0", vec![3, 7], Uncertainty::Marginal)).unwrap();
    let mut state = p.state();
    for k in 1..=MAX_ANSWERS_PER_REQUESTER + 5 {
        p.answer(&req(&format!("r{k}"), vec![7, 3], Uncertainty::Marginal)).unwrap();
        let next = p.state();
        let d = state.delta_to(&next).expect("a delta");
        let mut applied = state.clone();
        applied.apply(&d).unwrap();
        assert_eq!(applied, next);
        state = next;
    }
    assert_eq!(state.answers.len(), MAX_ANSWERS_PER_REQUESTER);
    assert!(!state.answers.keys().any(|k| k.ends_with("\u{1f}r0")), "the oldest answer was evicted");
    assert_eq!(p.ledger("A").unwrap().releases.len(), 1);
    // r0 again: a new request for released indices — the first-released means, no new charge.
    let again = p.answer(&req("r0", vec![3, 7], Uncertainty::Marginal)).unwrap();
    assert_eq!(again.mean, first.mean);
    assert!(again.charge.is_none());
    assert_eq!(p.ledger("A").unwrap().releases.len(), 1);
    // The same id asking for something else is refused, not answered with the first answer.
    let e = p.answer(&req("r0", vec![3], Uncertainty::Marginal)).unwrap_err().to_string();
    assert!(e.contains("already used for a different request"), "{e}");
}

#[test]
fn batches_survive_a_restart_number_for_number() {
    let mut p = party(honest(), 1);
    let a = p.answer(&req("r1", vec![3, 7], Uncertainty::Full)).unwrap();
    let snap = p.state();
    let json = serde_json::to_string(&snap).unwrap();
    let mut fresh = party(honest(), 1);
    fresh.restore(&serde_json::from_str(&json).unwrap()).unwrap();
    // A retried id returns the same numbers (its charge: nothing spent this time); a new request
    // for old indices returns the old values and the same covariance; the ledger is intact.
    let again = fresh.answer(&req("r1", vec![3, 7], Uncertainty::Full)).unwrap();
    assert_eq!(again, a.as_replay());
    assert!(
        again.charge.as_ref().is_some_and(|c| !c.new_release && c.rho == 0.0) && a.charge.as_ref().unwrap().rho > 0.0
    );
    let b = fresh.answer(&req("r2", vec![7, 3], Uncertainty::Full)).unwrap();
    assert_eq!(b.mean, vec![a.mean[1], a.mean[0]]);
    assert_eq!(b.cov, a.cov);
    assert_eq!(fresh.ledger("A"), p.ledger("A"));
}

/// The querier's five pool points of the reading tests below.
fn grid() -> DMatrix<f64> {
    DMatrix::from_column_slice(5, 1, &[-2.0, -0.5, 0.7, 2.0, 2.6])
}

mod likelihood_reading {
    use super::grid;
    use dpcotrain_cotrain::answer::{Answer, Uncertainty};
    use dpcotrain_cotrain::combiner::{AnswerForm, CoModel, CombinerKind};
    use dpcotrain_gp::kernels::SquaredExponential;
    use dpcotrain_gp::{ExactGp, NoiseModel, NoiseVariance};
    use nalgebra::{DMatrix, DVector};

    fn model() -> CoModel {
        let x = DMatrix::from_column_slice(4, 1, &[-1.0, -0.3, 0.4, 1.1]);
        let y = DVector::from_vec(vec![-0.8, -0.2, 0.5, 0.9]);
        let pool = DMatrix::from_column_slice(3, 1, &[2.5, 0.0, -2.2]);
        let mut m = CoModel::new(
            CombinerKind::Noisy,
            Uncertainty::Marginal,
            Box::new(SquaredExponential::isotropic(1.3, 0.9)),
            NoiseVariance::new(0.05),
            x,
            y,
            pool,
        )
        .unwrap();
        m.set_answer_form(AnswerForm::Likelihood).unwrap();
        m
    }

    fn answer(mean: f64, var: f64, noise_var: f64, prior: f64) -> Answer {
        Answer {
            responder: "B".into(),
            indices: vec![0],
            mean: vec![mean],
            var: Some(vec![var]),
            answered: vec![0],
            cov: None,
            prior_cov: Some(DMatrix::from_element(1, 1, prior)),
            model_version: 0,
            charge: None,
            budget_rho_left: None,
            noise_var: Some(vec![noise_var]),
            likelihood: None,
            receipt: None,
        }
    }

    /// A peer whose posterior at the point came from one observation ỹ = 2 with noise r = 0.5
    /// under prior variance p = 1 (so v = 1/3, m = 4/3), plus DP noise s² = 0.2 on the mean:
    /// the likelihood reading recovers the observation, ỹ = m·p/(p − v) = 2 with noise
    /// r + s²·(p/(p − v))² = 0.5 + 0.45.
    #[test]
    fn recovers_the_peers_observation_from_its_posterior() {
        let mut m = model();
        let (p, r, s2) = (1.0, 0.5, 0.2);
        let v = 1.0 / (1.0 / p + 1.0 / r);
        let mean = v * 2.0 / r;
        m.absorb(&answer(mean, v + s2, s2, p)).unwrap();
        let got = m.predict(&grid(), false).unwrap();
        let x = DMatrix::from_column_slice(5, 1, &[-1.0, -0.3, 0.4, 1.1, 2.5]);
        let y = DVector::from_vec(vec![-0.8, -0.2, 0.5, 0.9, 2.0]);
        let extra = DVector::from_vec(vec![0.0, 0.0, 0.0, 0.0, r + s2 * (p / (p - v)).powi(2)]);
        let noise = NoiseModel::PerPoint { sigma2: NoiseVariance::new(0.05), extra };
        let want = ExactGp::new(Box::new(SquaredExponential::isotropic(1.3, 0.9)), noise, x, y)
            .unwrap()
            .posterior()
            .unwrap()
            .predict(&grid(), false)
            .unwrap();
        assert!((got.mean - want.mean).abs().max() < 1e-10);
        assert!((got.var - want.var).abs().max() < 1e-10);
    }

    /// An answer whose DP noise swamps everything it says gets no weight, not a capped weight
    /// on a huge mean.
    #[test]
    fn a_swamped_answer_carries_no_weight() {
        let mut alone = model();
        let before = alone.predict(&grid(), false).unwrap();
        let mut m = model();
        // v within 1e-7 of p: g = 1e7, s²g² = 1e14 ≫ the cap.
        m.absorb(&answer(2.0, 1.0 - 1e-7 + 1.0, 1.0, 1.0)).unwrap();
        let after = m.predict(&grid(), false).unwrap();
        assert!((&after.mean - &before.mean).abs().max() < 1e-6);
    }

    /// A peer that knows nothing at the point answers its prior (mean 0, variance p): the
    /// likelihood reading gives it no weight; the posterior reading (the thesis) pulls the
    /// querier towards 0.
    #[test]
    fn an_answer_that_is_the_peers_prior_carries_no_weight() {
        let mut alone = model();
        let before = alone.predict(&grid(), false).unwrap();
        let mut m = model();
        m.absorb(&answer(0.0, 1.0, 0.0, 1.0)).unwrap();
        let after = m.predict(&grid(), false).unwrap();
        let moved = (&after.mean - &before.mean).abs().max();
        assert!(moved < 1e-6, "{moved}");
        let mut thesis = model();
        thesis.set_answer_form(AnswerForm::Posterior).unwrap();
        thesis.absorb(&answer(0.0, 1.0, 0.0, 1.0)).unwrap();
        let pulled = thesis.predict(&grid(), false).unwrap();
        assert!((&pulled.mean - &before.mean).abs().max() > 0.05);
    }

    #[test]
    fn answers_without_the_needed_parts_are_refused() {
        let mut m = model();
        let mut a = answer(0.3, 0.5, 0.1, 1.0);
        a.noise_var = None;
        assert!(m.absorb(&a).unwrap_err().to_string().contains("noise variance"));
        let mut a = answer(0.3, 0.5, 0.1, 1.0);
        a.prior_cov = None;
        assert!(m.absorb(&a).unwrap_err().to_string().contains("prior covariance"));
        // The rejected answers left nothing behind: the model still predicts.
        assert!(m.predict(&grid(), false).is_ok());
        let mut m = model();
        let mut a = answer(0.3, 0.5, 0.1, 1.0);
        a.noise_var = Some(vec![-1.0]);
        assert!(m.absorb(&a).is_err());
    }
}

/// The functional reading (`AnswerForm::Functionals`): a release read as its k linear
/// functionals w = Uᵀõ ~ N(L f(Q), R) (docs/honest-dp.md, "The release as k linear functionals").
mod functional_reading {
    use super::grid;
    use dpcotrain_cotrain::answer::{Answer, BatchLikelihood, Uncertainty};
    use dpcotrain_cotrain::combiner::{AnswerForm, CoModel, CombinerKind};
    use dpcotrain_gp::kernels::{Kernel, SquaredExponential};
    use dpcotrain_privacy::finite::{FiniteRelease, HatModel, plan};
    use dpcotrain_privacy::{CapRule, LabelRange, RankRule};
    use nalgebra::{DMatrix, DVector};

    /// The querier: four labelled rows in one dimension, three pool entities (its view).
    fn querier(form: AnswerForm) -> CoModel {
        let x = DMatrix::from_column_slice(4, 1, &[-1.0, -0.3, 0.4, 1.1]);
        let y = DVector::from_vec(vec![-0.8, -0.2, 0.5, 0.9]);
        let pool = DMatrix::from_column_slice(3, 1, &[2.5, 1.9, -2.2]);
        let mut m = CoModel::new(
            CombinerKind::Noisy,
            Uncertainty::Marginal,
            Box::new(SquaredExponential::isotropic(1.3, 0.9)),
            dpcotrain_gp::NoiseVariance::new(0.05),
            x,
            y,
            pool,
        )
        .unwrap();
        m.set_answer_form(form).unwrap();
        m
    }

    /// The responder's release at pool entities `idx` (its own view: other covariates), ε ≈ 1.
    fn release(idx: &[usize], rank: RankRule) -> (FiniteRelease, BatchLikelihood, Vec<f64>) {
        let kernel = SquaredExponential::isotropic(1.0, 1.0);
        let x2 = DMatrix::from_fn(9, 1, |i, _| -2.0 + 0.55 * i as f64);
        let y2 = DVector::from_fn(9, |i, _| (0.7 * i as f64 - 2.0).sin());
        let pool2 = DMatrix::from_column_slice(3, 1, &[1.8, 1.2, -1.5]);
        let xq = pool2.select_rows(idx.iter());
        let s2 = DVector::from_element(9, 0.1);
        let range = LabelRange::new(-3.0, 3.0).unwrap();
        let rel = plan(&kernel, &x2, &s2, &xq, HatModel::Exact, range, 1.0, &CapRule::None, &rank).unwrap();
        let z = DVector::from_fn(idx.len(), |i, _| 0.4 - 0.3 * i as f64);
        let released = rel.release(&y2, Some(range), &z).unwrap();
        let lik = BatchLikelihood { indices: idx.to_vec(), release: rel.likelihood(&kernel, &x2, &xq).unwrap() };
        (rel, lik, released.iter().copied().collect())
    }

    fn answer(idx: &[usize], rel: &FiniteRelease, lik: Option<BatchLikelihood>, mean: Vec<f64>) -> Answer {
        Answer {
            responder: "B".into(),
            indices: idx.to_vec(),
            mean,
            var: Some(rel.released_var().iter().copied().collect()),
            answered: idx.to_vec(),
            cov: None,
            prior_cov: Some(rel.hat.prior.clone()),
            model_version: 0,
            charge: None,
            budget_rho_left: None,
            noise_var: Some(vec![rel.sigma * rel.sigma; idx.len()]),
            likelihood: lik,
            receipt: None,
        }
    }

    /// At one point the release's exact likelihood is the point-by-point message: L = (p − v)/p
    /// and R = v(p − v)/p + σ², so L⁻¹w = m·p/(p − v) with variance v·p/(p − v) + σ²(p/(p − v))²
    /// (the likelihood reading). The two readings agree up to the functional reading's
    /// precision floor (a relative 10⁻⁴).
    #[test]
    fn at_one_point_it_is_the_likelihood_reading() {
        let (rel, lik, mean) = release(&[0], RankRule::Full);
        assert!(rel.sigma > 0.1, "a DP release: σ = {}", rel.sigma);
        let mut alone = querier(AnswerForm::Functionals);
        let before = alone.predict(&grid(), false).unwrap().mean;
        let mut point = querier(AnswerForm::Likelihood);
        point.absorb(&answer(&[0], &rel, None, mean.clone())).unwrap();
        let mut functional = querier(AnswerForm::Functionals);
        functional.absorb(&answer(&[0], &rel, Some(lik), mean)).unwrap();
        let (a, b) = (point.predict(&grid(), false).unwrap().mean, functional.predict(&grid(), false).unwrap().mean);
        let moved = (&a - &before).abs().max();
        assert!(moved > 0.02, "the answer moves the querier: {moved}");
        assert!((&a - &b).abs().max() < 1e-3 * moved, "{a} vs {b}");
    }

    /// A rank-2 release at three entities, read by the functional reading, predicts as the
    /// querier's GP conditioned by hand on its rows and on w = L h + e, e ~ N(0, R), where
    /// h = f₁(Q) + ε₁ (an answer stands for a label at the entity, noise included, as every
    /// reading of the noisy combiner has it): the joint Gaussian of (y₁, w) formed directly.
    #[test]
    fn a_low_rank_release_conditions_on_its_k_functionals() {
        let idx = [0, 1, 2];
        let (rel, lik, mean) = release(&idx, RankRule::Fixed { k: 2 });
        assert_eq!(lik.release.basis.ncols(), 2);
        let mut m = querier(AnswerForm::Functionals);
        let before = m.predict(&grid(), false).unwrap().mean;
        m.absorb(&answer(&idx, &rel, Some(lik.clone()), mean.clone())).unwrap();
        let got = m.predict(&grid(), false).unwrap().mean;
        // By hand.
        let k1 = SquaredExponential::isotropic(1.3, 0.9);
        let x1 = DMatrix::from_column_slice(4, 1, &[-1.0, -0.3, 0.4, 1.1]);
        let y1 = DVector::from_vec(vec![-0.8, -0.2, 0.5, 0.9]);
        let q1 = DMatrix::from_column_slice(3, 1, &[2.5, 1.9, -2.2]);
        let (l, r) = (&lik.release.map, &lik.release.noise);
        let w = lik.release.basis.transpose() * DVector::from_vec(mean);
        let s2 = 0.05;
        let k11 = k1.k(x1.as_view(), x1.as_view()) + DMatrix::identity(4, 4) * s2;
        let k1q = k1.k(x1.as_view(), q1.as_view());
        let kqq = k1.k(q1.as_view(), q1.as_view()) + DMatrix::identity(3, 3) * s2;
        let mut joint = DMatrix::zeros(6, 6);
        joint.view_mut((0, 0), (4, 4)).copy_from(&k11);
        joint.view_mut((0, 4), (4, 2)).copy_from(&(&k1q * l.transpose()));
        joint.view_mut((4, 0), (2, 4)).copy_from(&(l * k1q.transpose()));
        joint.view_mut((4, 4), (2, 2)).copy_from(&(l * &kqq * l.transpose() + r));
        let mut obs = DVector::zeros(6);
        obs.rows_mut(0, 4).copy_from(&y1);
        obs.rows_mut(4, 2).copy_from(&w);
        let ks1 = k1.k(grid().as_view(), x1.as_view());
        let ksq = k1.k(grid().as_view(), q1.as_view()) * l.transpose();
        let mut cross = DMatrix::zeros(5, 6);
        cross.view_mut((0, 0), (5, 4)).copy_from(&ks1);
        cross.view_mut((0, 4), (5, 2)).copy_from(&ksq);
        let want = cross * joint.cholesky().unwrap().solve(&obs);
        let moved = (&want - &before).abs().max();
        assert!(moved > 0.02, "the answer moves the querier: {moved}");
        assert!((&got - &want).abs().max() < 1e-3 * moved, "{got} vs {want}");
    }

    #[test]
    fn answers_without_a_well_formed_likelihood_are_refused() {
        let idx = [0, 1, 2];
        let (rel, lik, mean) = release(&idx, RankRule::Fixed { k: 2 });
        let mut m = querier(AnswerForm::Functionals);
        let e = m.absorb(&answer(&idx, &rel, None, mean.clone())).unwrap_err().to_string();
        assert!(e.contains("needs the release likelihood"), "{e}");
        let mut bad = lik.clone();
        bad.release.noise = DMatrix::identity(3, 3);
        let e = m.absorb(&answer(&idx, &rel, Some(bad), mean.clone())).unwrap_err().to_string();
        assert!(e.contains("do not fit"), "{e}");
        let mut bad = lik.clone();
        bad.indices = vec![0, 1, 7];
        let e = m.absorb(&answer(&idx, &rel, Some(bad), mean.clone())).unwrap_err().to_string();
        assert!(e.contains("outside this answer"), "{e}");
        // Nothing was kept from the refused answers; the good one is read.
        m.absorb(&answer(&idx, &rel, Some(lik), mean)).unwrap();
        assert!(m.predict(&grid(), false).is_ok());
        // The sparse local model has no dense noise block: refused by name.
        let mut sparse = querier(AnswerForm::Likelihood);
        sparse.use_sparse(2).unwrap();
        let e = sparse.set_answer_form(AnswerForm::Functionals).unwrap_err().to_string();
        assert!(e.contains("sparse"), "{e}");
    }
}

/// Release-once with the finite form: the capped private-only posterior over the whole pool,
/// one charge per requester; every later answer is post-processing of that one release.
#[test]
fn whole_pool_finite_release_is_one_charge() {
    let dp = DpConfig { policy: ReleasePolicy::ReleaseOnce, ..honest() };
    let mut p = party(dp, 1);
    let a = p.answer(&req("r1", vec![3, 7], Uncertainty::Marginal)).unwrap();
    let c = a.charge.clone().unwrap();
    assert!(c.new_release && c.guaranteed);
    let b = p.answer(&req("r2", vec![20, 3], Uncertainty::Marginal)).unwrap();
    assert!(!b.charge.unwrap().new_release);
    assert_eq!(b.mean[1], a.mean[0]);
    assert_eq!(p.ledger("A").unwrap().releases.len(), 1);
    // σ, the noise variance and the released variance are those of one plan over the whole pool.
    let d = data(1);
    let t = DEFAULT_RELEASE_THETA; // the release's θ (D32); queries keep PublicTheta::default()
    let rm =
        ReleaseModel::new(d.x_train.clone(), range().clip(&d.y_train), t.kernel(2), t.noise_variance, None, 0).unwrap();
    let mu = gdp_mu_for(1.0, 1e-5);
    let whole = rm.plan(&d.x_pool, Some((mu, range())), &CapRule::auto(), &RankRule::Full).unwrap();
    assert!((c.sigma - whole.sigma).abs() < 1e-12);
    assert!((a.noise_var.unwrap()[0] - whole.sigma.powi(2)).abs() < 1e-12);
    assert!((a.var.unwrap()[0] - whole.hat.latent_cov[(3, 3)] - whole.sigma.powi(2)).abs() < 1e-10);
}

/// A private view above the sparse threshold: the release model is VFE (greedy-variance
/// inducing inputs from the covariates), the batch is charged exactly once at μ²/2, the
/// released variances are label-free, and the release is the VFE hat's mean.
#[test]
fn a_large_private_view_releases_through_the_vfe_hat() {
    use dpcotrain_cotrain::combiner::SPARSE_THRESHOLD;
    let n = SPARSE_THRESHOLD + 1;
    let make = |label_seed: u64| {
        let mut r = ChaCha8Rng::seed_from_u64(3);
        let x: DMatrix<f64> = DMatrix::from_fn(n, 1, |_, _| r.random_range(-2.0..2.0));
        let pool: DMatrix<f64> = DMatrix::from_fn(30, 1, |_, _| r.random_range(-2.0..2.0));
        let test: DMatrix<f64> = DMatrix::from_fn(5, 1, |_, _| r.random_range(-2.0..2.0));
        let mut ry = ChaCha8Rng::seed_from_u64(label_seed);
        let y = DVector::from_fn(n, |i, _| x[(i, 0)].sin() + 0.3 * ry.random_range(-1.0..1.0));
        let d = PartyData {
            name: "B".into(),
            columns: vec!["u".into()],
            x_train: x,
            y_train: y,
            y_test: DVector::from_fn(5, |i, _| test[(i, 0)].sin()),
            x_pool: pool,
            x_test: test,
        };
        Party::new(
            d,
            CombinerKind::Noisy,
            Uncertainty::Marginal,
            Box::new(SquaredExponential::ard(1.0, vec![1.0])),
            NoiseVariance::new(0.1),
            honest(),
            Some(5),
            Default::default(),
        )
        .unwrap()
    };
    let (mut p1, mut p2) = (make(1), make(2));
    assert!(p1.model().is_sparse());
    let q = vec![1, 4, 9];
    let a1 = p1.answer(&req("r", q.clone(), Uncertainty::Marginal)).unwrap();
    let a2 = p2.answer(&req("r", q, Uncertainty::Marginal)).unwrap();
    let c = a1.charge.clone().unwrap();
    assert!((c.rho - gdp_mu_for(1.0, 1e-5).powi(2) / 2.0).abs() < 1e-12);
    assert!(c.sigma > 0.0 && c.sigma.is_finite());
    assert_eq!(a1.var, a2.var, "label-free variances");
    assert_eq!(a1.charge.as_ref().map(|c| c.sigma), a2.charge.as_ref().map(|c| c.sigma));
    assert_ne!(a1.mean, a2.mean);
}

/// The honest setting with θ chosen by the DP vote (GDP μ = `mu`) around the public default.
fn selected(mu: f64, budget_epsilon: f64) -> DpConfig {
    DpConfig {
        theta: ThetaPolicy::Selected { default: PublicTheta::default(), mu },
        ..DpConfig::honest(1.0, 1e-5, budget_epsilon, range(), 5)
    }
}

fn request_from(requester: &str, id: &str, idx: Vec<usize>) -> PredictRequest {
    PredictRequest { requester: requester.into(), ..req(id, idx, Uncertainty::Marginal) }
}

#[test]
fn the_theta_vote_is_charged_once_to_every_requester_and_releases_use_its_choice() {
    // A large μ: the vote (one group of 30 rows) decides, not the noise or the head start.
    let mu_t = 20.0;
    let mu1 = gdp_mu_for(1.0, 1e-5);
    let budget = gdp_epsilon((mu_t * mu_t + 2.0 * mu1 * mu1).sqrt(), 1e-5) * (1.0 + 1e-6);
    let mut p = party(selected(mu_t, budget), 1);
    let sel = p.theta_selection().unwrap().clone();
    assert!((sel.sigma - std::f64::consts::SQRT_2 / mu_t).abs() < 1e-12);
    assert_eq!((sel.noisy_counts.len(), sel.groups), (15, 1));
    assert_ne!(sel.chosen, PublicTheta::default(), "the data should vote away from the default here");
    for requester in ["A", "C"] {
        p.answer(&request_from(requester, &format!("{requester}1"), vec![3, 7])).unwrap();
        let l = p.ledger(requester).unwrap();
        assert_eq!(l.releases.len(), 2);
        assert_eq!(l.releases[0].id, THETA_SELECTION_ID);
        assert!((l.releases[0].rho - mu_t * mu_t / 2.0).abs() < 1e-9 * mu_t * mu_t);
    }
    // A second batch is charged; the vote is not charged again; the budget (vote + two
    // batches) then refuses a third batch.
    p.answer(&request_from("A", "A2", vec![11])).unwrap();
    let l = p.ledger("A").unwrap();
    assert_eq!(l.releases.iter().filter(|r| r.id == THETA_SELECTION_ID).count(), 1);
    assert_eq!(l.releases.len(), 3);
    assert!(p.answer(&request_from("A", "A3", vec![12])).is_err());
    // The release is the public-θ release at the chosen θ: same variances, same means (same
    // seeded noise draws).
    let fixed = DpConfig { theta: ThetaPolicy::Public(sel.chosen), ..DpConfig::honest(1.0, 1e-5, budget, range(), 5) };
    let mut q = party(fixed, 1);
    // (Noise draws are seeded per requester and batch number: q makes C's first batch too.)
    q.answer(&request_from("C", "C1", vec![3, 7])).unwrap();
    let (a, b) = (
        p.answer(&request_from("C", "C2", vec![20, 21])).unwrap(),
        q.answer(&request_from("C", "C2", vec![20, 21])).unwrap(),
    );
    assert_eq!((a.mean, a.var), (b.mean, b.var));
}

#[test]
fn a_budget_that_cannot_hold_the_vote_and_one_release_is_refused() {
    let e = try_party(selected(0.5, 1.0), 1).unwrap_err().to_string();
    assert!(e.contains("budget_epsilon"), "{e}");
    let bad_mu = try_party(selected(f64::NAN, 10.0), 1).unwrap_err().to_string();
    assert!(bad_mu.contains("μ"), "{bad_mu}");
}

#[test]
fn without_dp_the_vote_is_an_exact_majority_and_charges_nothing() {
    let dp = DpConfig {
        theta: ThetaPolicy::Selected { default: PublicTheta::default(), mu: 1.0 },
        ..DpConfig::honest_protocol_without_dp(5)
    };
    let mut p = party(dp, 1);
    let sel = p.theta_selection().unwrap().clone();
    assert_eq!(sel.sigma, 0.0);
    assert_eq!(sel.noisy_counts.iter().sum::<f64>(), 1.0);
    assert_eq!(sel.noisy_counts[sel.winner], 1.0);
    p.answer(&req("r1", vec![1, 2], Uncertainty::Marginal)).unwrap();
    assert!(p.ledger("A").is_none());
}

/// A party without a seed: its noise (and θ vote) come from OS entropy, as in production.
fn unseeded(dp: DpConfig) -> Party {
    Party::new(
        data(1),
        CombinerKind::Noisy,
        Uncertainty::Marginal,
        Box::new(SquaredExponential::ard(1.0, vec![1.0, 1.0])),
        NoiseVariance::new(0.1),
        dp,
        None,
        Default::default(),
    )
    .unwrap()
}

#[test]
fn a_restarted_party_keeps_the_theta_vote_it_released() {
    // OS entropy: a fresh party draws a new vote; the restored one must use the saved vote.
    let mu_t = 0.5;
    let mu1 = gdp_mu_for(1.0, 1e-5);
    let budget = gdp_epsilon((mu_t * mu_t + 3.0 * mu1 * mu1).sqrt(), 1e-5) * (1.0 + 1e-6);
    let build = || unseeded(selected(mu_t, budget));
    let mut p = build();
    let first = p.answer(&request_from("A", "A1", vec![3, 7])).unwrap();
    let saved = p.state();
    assert_eq!(saved.theta_selection.as_ref(), p.theta_selection());
    let mut q = build();
    assert_ne!(q.theta_selection(), p.theta_selection(), "a fresh OS draw should differ");
    q.restore(&saved).unwrap();
    assert_eq!(q.theta_selection(), p.theta_selection());
    // Released values come back; the vote is not charged again; a new batch has the variances
    // of the saved θ.
    assert_eq!(q.answer(&request_from("A", "A1b", vec![7, 3])).unwrap().mean, vec![first.mean[1], first.mean[0]]);
    let (a, b) =
        (p.answer(&request_from("A", "A2", vec![20])).unwrap(), q.answer(&request_from("A", "A2", vec![20])).unwrap());
    assert_eq!(a.var, b.var);
    assert_eq!(q.ledger("A").unwrap().releases.iter().filter(|r| r.id == THETA_SELECTION_ID).count(), 1);
    // A ledger whose vote charge was removed on disk is refused.
    let mut dropped = saved.clone();
    dropped.requesters.get_mut("A").unwrap().ledger.as_mut().unwrap().releases.retain(|r| r.id != THETA_SELECTION_ID);
    let e = build().restore(&dropped).unwrap_err().to_string();
    assert!(e.contains("θ vote") && e.contains(THETA_SELECTION_ID), "{e}");
    // A state whose vote is not of this grid is refused.
    let mut bad = saved.clone();
    bad.theta_selection.as_mut().unwrap().winner = 99;
    assert!(build().restore(&bad).unwrap_err().to_string().contains("θ selection"));
}

#[test]
fn a_theta_vote_saved_under_other_privacy_settings_is_refused_at_restore() {
    let mu1 = gdp_mu_for(1.0, 1e-5);
    let build = unseeded;
    let calibrated = |mu_t: f64| {
        let budget = gdp_epsilon((mu_t * mu_t + 3.0 * mu1 * mu1).sqrt(), 1e-5) * (1.0 + 1e-6);
        selected(mu_t, budget)
    };
    // Saved by a node running without DP: the vote is an exact majority (σ = 0).
    let off = DpConfig {
        theta: ThetaPolicy::Selected { default: PublicTheta::default(), mu: 0.5 },
        ..DpConfig::honest_protocol_without_dp(5)
    };
    let saved_off = build(off.clone()).state();
    assert_eq!(saved_off.theta_selection.as_ref().unwrap().sigma, 0.0);
    let e = build(calibrated(0.5)).restore(&saved_off).unwrap_err().to_string();
    assert!(e.contains("noise sd 0") && e.contains("privacy settings"), "{e}");
    // Saved with another θ-vote μ: its noise is not what the ledgers would charge now.
    let saved_other = build(calibrated(0.25)).state();
    let e = build(calibrated(0.5)).restore(&saved_other).unwrap_err().to_string();
    assert!(e.contains("privacy settings"), "{e}");
    // The same settings restore (the check is not a blanket refusal), both ways round.
    build(calibrated(0.5)).restore(&build(calibrated(0.5)).state()).unwrap();
    build(off.clone()).restore(&build(off).state()).unwrap();
}

/// "Alone" is the party's private-only fit on its labels as they are, in every privacy mode of
/// the honest policies: the clipping the release's sensitivity needs happens on the release's
/// own copy. Only where the own model *is* the release (per-query) does it fit clipped labels.
#[test]
fn alone_is_the_same_fit_in_every_privacy_mode_and_only_the_release_clips() {
    let mut d = data(1);
    d.y_train[1] = 5.0;
    d.y_train[2] = -4.5;
    let make = |dp: DpConfig| party_of(d.clone(), dp).unwrap();
    let predict = |p: &mut Party| p.predict(&d.x_test, false).unwrap().mean;
    let mut off = make(DpConfig::off());
    let mut honest_off = make(DpConfig::honest_protocol_without_dp(5));
    let mut private = make(honest());
    let alone = predict(&mut off);
    for other in [predict(&mut honest_off), predict(&mut private)] {
        let same = alone.iter().zip(other.iter()).all(|(a, b)| a.to_bits() == b.to_bits());
        assert!(same, "the private-only fit moved with the privacy mode: {alone} vs {other}");
    }
    assert_eq!((off.labels_clipped(), private.labels_clipped()), (0, 2));
    // The release is still of the clipped labels: at a huge ε (noise ~1e-6) with no cap and full
    // rank, the released means are the public-θ posterior on the clipped labels.
    let mut near_exact = honest();
    near_exact.mode = dpcotrain_cotrain::party::DpMode::Calibrated {
        epsilon: 1e7,
        delta: 1e-5,
        mechanism: dpcotrain_privacy::calibrate::Mechanism::Analytic,
        range: range(),
        budget_epsilon: 1e7,
    };
    near_exact.release = ReleaseForm::Finite { cap: CapRule::None, rank: RankRule::Full };
    let mut p = make(near_exact);
    let released = DVector::from_vec(p.answer(&req("r", vec![0, 1, 2], Uncertainty::Marginal)).unwrap().mean);
    let t = DEFAULT_RELEASE_THETA; // the release's θ (D32); queries keep PublicTheta::default()
    let posterior = |y: DVector<f64>| {
        let rm = ReleaseModel::new(d.x_train.clone(), y, t.kernel(2), t.noise_variance, None, 0).unwrap();
        rm.function_posterior(&d.x_pool.rows(0, 3).into_owned(), false).unwrap().0.mean
    };
    let (clipped, raw) = (posterior(range().clip(&d.y_train)), posterior(d.y_train.clone()));
    assert!((&raw - &clipped).amax() > 1e-3, "the test's clipping must matter");
    let (to_clipped, to_raw) = ((&released - &clipped).amax(), (&released - &raw).amax());
    assert!(to_clipped < 0.1 * to_raw, "released {released} is not the clipped posterior {clipped} (raw {raw})");
    // Under per-query the co-trained model answers, so it must fit the clipped labels.
    let mut per_query = make(DpConfig::calibrated(1.0, 1e-5, 1.0, range(), ReleasePolicy::PerQuery));
    let pq = predict(&mut per_query);
    assert!((pq - alone).amax() > 1e-6, "per-query's released model must see the clipped labels");
    assert!(dpcotrain_cotrain::party::own_model_is_released(&DpConfig::calibrated(
        1.0,
        1e-5,
        1.0,
        range(),
        ReleasePolicy::PerQuery
    )));
    assert!(!dpcotrain_cotrain::party::own_model_is_released(&honest()));
}
