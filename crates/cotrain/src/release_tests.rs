//! The release path: retries, budgets, policies, validation, and what leaves a node. White-box
//! (they change a party's model version by hand), so inside the crate.

use crate::answer::{PredictRequest, Uncertainty};
use crate::combiner::CombinerKind;
use crate::data::PartyData;
use crate::party::{DpConfig, DpMode, Party, ReleasePolicy};
use dpcotrain_gp::NoiseVariance;
use dpcotrain_gp::kernels::SquaredExponential;
use dpcotrain_privacy::LabelRange;
use dpcotrain_privacy::Mechanism;
use nalgebra::{DMatrix, DVector};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

fn data(name: &str, seed: u64) -> PartyData {
    let mut r = ChaCha8Rng::seed_from_u64(seed);
    let x: DMatrix<f64> = DMatrix::from_fn(20, 1, |_, _| r.random_range(-2.0..2.0));
    let y = x.map(|v| 0.9 * v + 0.1 * r.random_range(-1.0..1.0)).column(0).clone_owned();
    let pool: DMatrix<f64> = DMatrix::from_fn(30, 1, |_, _| r.random_range(-2.0..2.0));
    let test: DMatrix<f64> = DMatrix::from_fn(10, 1, |_, _| r.random_range(-2.0..2.0));
    PartyData {
        name: name.into(),
        columns: vec!["x".into()],
        x_train: x,
        y_train: y,
        y_test: DVector::from_fn(10, |i, _| 0.9 * test[(i, 0)]),
        x_pool: pool,
        x_test: test,
    }
}

fn party(dp: DpConfig, kind: CombinerKind) -> Party {
    Party::new(
        data("B", 1),
        kind,
        Uncertainty::Full,
        Box::new(SquaredExponential::isotropic(1.0, 1.0)),
        NoiseVariance::new(0.1),
        dp,
        Some(7),
        Default::default(),
    )
    .unwrap()
}

fn req(id: &str, idx: Vec<usize>) -> PredictRequest {
    PredictRequest {
        request_id: id.into(),
        requester: "A".into(),
        indices: idx,
        uncertainty: Uncertainty::Full,
        want_prior: true,
        witness: None,
    }
}

fn calibrated(budget: f64, policy: ReleasePolicy) -> DpConfig {
    DpConfig {
        mode: DpMode::Calibrated {
            epsilon: 1.0,
            delta: 1e-5,
            mechanism: Mechanism::Analytic,
            range: LabelRange::new(-3.0, 3.0).unwrap(),
            budget_epsilon: budget,
        },
        policy,
        inflate_variance: true,
        ..DpConfig::off()
    }
}

#[test]
fn retries_return_the_same_answer_without_a_new_charge() {
    let mut p = party(calibrated(3.0, ReleasePolicy::PerQuery), CombinerKind::Noisy);
    let a = p.answer(&req("r1", vec![4])).unwrap();
    let spent = p.ledger("A").unwrap().rho_spent();
    assert!(spent > 0.0);
    let b = p.answer(&req("r1", vec![4])).unwrap();
    // The same numbers; the retry's charge says that nothing was spent this time.
    assert_eq!(b, a.as_replay());
    assert!(a.charge.as_ref().unwrap().new_release && !b.charge.as_ref().unwrap().new_release);
    assert_eq!(b.charge.as_ref().unwrap().rho, 0.0);
    assert_eq!(p.ledger("A").unwrap().rho_spent(), spent);
    // A new request for an already released index (same model version): post-processing.
    let c = p.answer(&req("r2", vec![4, 9])).unwrap();
    assert_eq!(c.mean[0], a.mean[0], "means stay as first released");
    assert!(!c.charge.as_ref().unwrap().new_release);
    assert_eq!(p.ledger("A").unwrap().rho_spent(), spent);
    assert_eq!(c.answered, vec![4, 9]);
    assert_eq!(c.cov.as_ref().unwrap().shape(), (2, 2));
    assert_eq!(c.prior_cov.as_ref().unwrap().shape(), (2, 2));
}

#[test]
fn per_query_charges_each_new_model_version_and_refuses_before_overspending() {
    // Budget ε = 1 equals one release at the calibrated σ for ε = 1: the second new mean
    // function must be refused, and the refusal must not change the ledger.
    let mut p = party(calibrated(1.0, ReleasePolicy::PerQuery), CombinerKind::Noisy);
    let a = p.answer(&req("r1", vec![1])).unwrap();
    let ch = a.charge.unwrap();
    // Per-query answers use the label-fitted θ̂: the charge is recorded, but not as a formal
    // guarantee for everything released (θ̂ and the variances leak, uncounted).
    assert!(ch.new_release && !ch.guaranteed && ch.sigma > 0.0);
    p.model.version += 1; // the model absorbed something: a new mean function
    let err = p.answer(&req("r2", vec![2])).unwrap_err();
    assert!(err.to_string().contains("budget"), "{err}");
    assert_eq!(p.ledger("A").unwrap().releases.len(), 1);
    assert!(p.ledger("A").unwrap().epsilon_spent() <= 1.0 + 1e-9);
}

#[test]
fn release_once_charges_once() {
    let mut p = party(calibrated(1.0, ReleasePolicy::ReleaseOnce), CombinerKind::Noisy);
    for (k, i) in [3usize, 8, 12, 20].iter().enumerate() {
        p.model.version += 1; // model changes do not matter: the release is frozen
        let a = p.answer(&req(&format!("r{k}"), vec![*i])).unwrap();
        assert_eq!(a.charge.as_ref().unwrap().new_release, k == 0);
    }
    assert_eq!(p.ledger("A").unwrap().releases.len(), 1);
}

#[test]
fn thesis_mode_is_flagged_and_noise_is_seeded() {
    let dp = DpConfig {
        mode: DpMode::Thesis { multiplier: 0.42 },
        policy: ReleasePolicy::PerQuery,
        inflate_variance: false,
        ..DpConfig::off()
    };
    let mut p = party(dp.clone(), CombinerKind::Noisy);
    let a = p.answer(&req("r1", vec![5])).unwrap();
    let c = a.charge.clone().unwrap();
    assert!(!c.guaranteed);
    assert_eq!(c.sigma, 0.42);
    let mut q = party(dp, CombinerKind::Noisy);
    assert_eq!(q.answer(&req("r1", vec![5])).unwrap(), a, "same seed ⇒ same noisy answer");
    let mut off = party(DpConfig::off(), CombinerKind::Noisy);
    let clean = off.answer(&req("r1", vec![5])).unwrap();
    assert!(clean.charge.is_none());
    assert!((clean.mean[0] - a.mean[0]).abs() > 1e-9, "noise was added");
}

#[test]
fn malformed_requests_are_errors() {
    let mut p = party(DpConfig::off(), CombinerKind::Hybrid);
    assert!(p.answer(&req("a", vec![])).is_err());
    assert!(p.answer(&req("b", vec![30])).is_err());
    assert!(p.answer(&req("c", vec![2, 2])).is_err());
    let mut own = req("d", vec![1]);
    own.requester = "B".into();
    assert!(p.answer(&own).is_err());
    // and the party still answers afterwards
    assert!(p.answer(&req("e", vec![1])).is_ok());
}
