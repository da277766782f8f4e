//! The reading switches (docs/decisions.md D25): each test fails if its switch does nothing.
//! White-box: they read a party's model and pool covariates, which are private to this crate
//! (`Party`'s fields), so they live inside it.

use crate::answer::{PredictRequest, Uncertainty};
use crate::combiner::CombinerKind;
use crate::driver::{block_on, build_parties_with, run_in_process};
use crate::party::{DpConfig, Party};
use crate::readings::{
    AnswerSource, BlockyTheta, FitStarts, HybridForm, Readings, SelectionVariance, SharedVariance, ThesisNoise,
};
use crate::simulate::{SimConfig, simulate};
use std::sync::{Arc, Mutex};

type Parties = Vec<Arc<Mutex<Party>>>;

/// Two parties on the simulated data (r = 0.9, CI, masked, n_obs = 25, small pool), after
/// `rounds` rounds of co-training under `readings`.
fn parties(
    kind: CombinerKind,
    unc: Uncertainty,
    dp: &DpConfig,
    seed: u64,
    readings: Readings,
    rounds: usize,
) -> Parties {
    let sc = simulate(&SimConfig { n_pool: 60, n_test: 40, seed, ..SimConfig::default() }).unwrap();
    let ps = build_parties_with(&sc, kind, unc, dp, seed, readings).unwrap();
    if rounds > 0 {
        block_on(run_in_process(&ps, rounds)).unwrap();
    }
    ps
}

fn request(
    id: &str,
    requester: &str,
    indices: Vec<usize>,
    uncertainty: Uncertainty,
    want_prior: bool,
) -> PredictRequest {
    PredictRequest {
        request_id: id.into(),
        requester: requester.into(),
        indices,
        uncertainty,
        want_prior,
        witness: None,
    }
}

/// A pool index neither party has asked about yet.
fn unasked(ps: &Parties) -> usize {
    let asked: Vec<usize> = ps.iter().flat_map(|p| p.lock().unwrap().model.asked()).collect();
    (0..60).find(|i| !asked.contains(i)).unwrap()
}

#[test]
fn answer_source_private_answers_from_the_private_only_model() {
    let private = Readings { answer_source: AnswerSource::Private, ..Readings::default() };
    for (readings, from_private) in [(Readings::default(), false), (private, true)] {
        let ps = parties(CombinerKind::Noisy, Uncertainty::Marginal, &DpConfig::off(), 3, readings, 3);
        let i = unasked(&ps);
        let other = ps[1].lock().unwrap().name().to_string();
        let mut p = ps[0].lock().unwrap();
        let a = p.answer(&request("x", &other, vec![i], Uncertainty::Marginal, false)).unwrap();
        let x = p.data.x_pool.rows(i, 1).clone_owned();
        let own = p.model.predict_private(&x, false).unwrap();
        let co = p.model.predict(&x, false).unwrap();
        assert!((own.mean[0] - co.mean[0]).abs() > 1e-6, "the co-trained model moved: the test can tell them apart");
        let want = if from_private { &own } else { &co };
        assert!((a.mean[0] - want.mean[0]).abs() < 1e-12, "mean {} vs {}", a.mean[0], want.mean[0]);
        assert!((a.var.as_ref().unwrap()[0] - want.var[0]).abs() < 1e-12);
    }
}

#[test]
fn blocky_theta_querier_evaluates_the_responders_view_with_the_queriers_theta() {
    let q = Readings { blocky_theta: BlockyTheta::Querier, ..Readings::default() };
    let ps = parties(CombinerKind::Blocky, Uncertainty::None, &DpConfig::off(), 4, q, 2);
    let i = unasked(&ps);
    let (theta1, name1) = {
        let p = ps[0].lock().unwrap();
        (p.model.kernel.params(), p.name.clone())
    };
    let mut p2 = ps[1].lock().unwrap();
    let theta2 = p2.model.kernel.params();
    assert!(theta1.iter().zip(&theta2).any(|(a, b)| (a - b).abs() > 1e-3), "θ₁ ≠ θ₂ here");
    // The querier's θ₁ at the time of asking (the driver hands it over before each turn); the
    // answer's prior block is K₂(X₂^q, X₂^q; θ₁).
    p2.set_requester_theta(&name1, theta1.clone()).unwrap();
    let a = p2.answer(&request("y", &name1, vec![i], Uncertainty::None, true)).unwrap();
    let xa = p2.data.x_pool.select_rows(a.answered.iter());
    let mut k1 = p2.model.kernel.clone();
    k1.set_params(&theta1);
    let want = k1.k(xa.as_view(), xa.as_view());
    let own = p2.model.kernel.k(xa.as_view(), xa.as_view());
    let got = a.prior_cov.unwrap();
    assert!((&got - &want).amax() < 1e-12);
    assert!((&got - &own).amax() > 1e-6, "the responder's own θ gives another block");
    // A θ of another dimension is refused, naming the reading.
    let err = p2.set_requester_theta(&name1, vec![0.0; 5]).unwrap_err().to_string();
    assert!(err.contains("readings.blocky_theta"), "{err}");
    drop(p2);
    // In a run, the driver hands θ₁ over: the querier's absorbed query block changes.
    let default = parties(CombinerKind::Blocky, Uncertainty::None, &DpConfig::off(), 4, Readings::default(), 2);
    let block = |ps: &Parties| ps[0].lock().unwrap().model.blocks[0].prior.clone().unwrap();
    assert!((block(&ps) - block(&default)).amax() > 1e-6);
}

/// Noise of two answers from `seed`'s responder at two close pool points, asked in separate
/// requests with nothing folded in between (so the model mean is the same for both).
fn noise_pair(seed: u64, readings: Readings) -> (f64, f64) {
    let ps = parties(CombinerKind::Noisy, Uncertainty::None, &DpConfig::thesis(), seed, readings, 0);
    let mut p = ps[0].lock().unwrap();
    let x = p.data.x_pool.column(0).clone_owned();
    // The two pool points closest to each other.
    let mut best = (0, 1, f64::INFINITY);
    for i in 0..x.len() {
        for j in i + 1..x.len() {
            if (x[i] - x[j]).abs() < best.2 {
                best = (i, j, (x[i] - x[j]).abs());
            }
        }
    }
    let (i, j, _) = best;
    let xs = p.data.x_pool.select_rows([i, j].iter());
    let mean = p.model.predict(&xs, false).unwrap().mean;
    let a = p.answer(&request("a", "Q", vec![i], Uncertainty::None, false)).unwrap();
    let b = p.answer(&request("b", "Q", vec![j], Uncertainty::None, false)).unwrap();
    (a.mean[0] - mean[0], b.mean[0] - mean[1])
}

fn correlation(v: &[(f64, f64)]) -> f64 {
    let n = v.len() as f64;
    let (ma, mb) = (v.iter().map(|p| p.0).sum::<f64>() / n, v.iter().map(|p| p.1).sum::<f64>() / n);
    let sab: f64 = v.iter().map(|p| (p.0 - ma) * (p.1 - mb)).sum();
    let saa: f64 = v.iter().map(|p| (p.0 - ma).powi(2)).sum();
    let sbb: f64 = v.iter().map(|p| (p.1 - mb).powi(2)).sum();
    sab / (saa * sbb).sqrt()
}

#[test]
fn thesis_noise_fresh_per_query_draws_independently_and_deterministically() {
    let fresh = Readings { thesis_noise: ThesisNoise::FreshPerQuery, ..Readings::default() };
    let path: Vec<(f64, f64)> = (0..30).map(|s| noise_pair(s, Readings::default())).collect();
    let indep: Vec<(f64, f64)> = (0..30).map(|s| noise_pair(s, fresh)).collect();
    // One smooth path per requester: two close points get nearly the same noise.
    assert!(correlation(&path) > 0.9, "path: {}", correlation(&path));
    // A fresh draw per query: uncorrelated (|r| < 0.5 for 30 pairs is a 4-sd margin).
    assert!(correlation(&indep).abs() < 0.5, "fresh: {}", correlation(&indep));
    // Seeded: the same seed and readings give the same numbers.
    assert_eq!(noise_pair(7, fresh), indep[7]);
    // Calibrated DP keeps its own noise and accounting: the reading is refused there.
    let cal = DpConfig::calibrated(
        1.0,
        1e-5,
        1.0,
        dpcotrain_privacy::sensitivity::LabelRange::new(-3.0, 3.0).unwrap(),
        crate::party::ReleasePolicy::PerQuery,
    );
    let sc = simulate(&SimConfig { n_pool: 20, n_test: 10, ..SimConfig::default() }).unwrap();
    let err = build_parties_with(&sc, CombinerKind::Noisy, Uncertainty::Marginal, &cal, 0, fresh).unwrap_err();
    assert!(err.to_string().contains("readings.thesis_noise"), "{err}");
}

#[test]
fn shared_variance_y_adds_the_responders_noise_variance() {
    let y = Readings { shared_variance: SharedVariance::Y, ..Readings::default() };
    let mut vars = Vec::new();
    let mut noise = 0.0;
    for readings in [Readings::default(), y] {
        let ps = parties(CombinerKind::Noisy, Uncertainty::Marginal, &DpConfig::off(), 5, readings, 0);
        let mut p = ps[0].lock().unwrap();
        noise = p.model.noise.variance;
        let a = p.answer(&request("v", "Q", vec![3, 7], Uncertainty::Marginal, false)).unwrap();
        let f = p.answer(&request("f", "R", vec![3, 7], Uncertainty::Full, false)).unwrap();
        vars.push((a.var.unwrap(), f.cov.unwrap()));
    }
    assert!(noise > 1e-3);
    for k in 0..2 {
        assert!((vars[1].0[k] - vars[0].0[k] - noise).abs() < 1e-12, "marginal {k}");
        assert!((vars[1].1[(k, k)] - vars[0].1[(k, k)] - noise).abs() < 1e-12, "full diagonal {k}");
    }
    assert_eq!(vars[1].1[(0, 1)], vars[0].1[(0, 1)], "off-diagonal unchanged");
}

#[test]
fn fit_starts_single_is_one_run_from_the_gpy_start() {
    let single = Readings { fit_starts: FitStarts::Single, ..Readings::default() };
    let fit = |seed: u64, readings: Readings| {
        let cfg = SimConfig { r: 0.5, masking: false, n_obs: 10, n_pool: 10, n_test: 10, seed, ..SimConfig::default() };
        let sc = simulate(&cfg).unwrap();
        let ps =
            build_parties_with(&sc, CombinerKind::Noisy, Uncertainty::None, &DpConfig::off(), seed, readings).unwrap();
        let p = ps[0].lock().unwrap();
        let mut theta = p.model.kernel.params();
        theta.push(p.model.noise.variance.ln());
        theta
    };
    // On small samples the readings reach different optima (the small-n bias of the default
    // fit's four starts, docs/results.md); the same seed and reading give the same fit.
    let differ = (0..12)
        .filter(|&s| fit(s, Readings::default()).iter().zip(&fit(s, single)).any(|(a, b)| (a - b).abs() > 1e-3))
        .count();
    assert!(differ >= 1);
    assert_eq!(fit(3, single), fit(3, single));
}

/// `fixed-K` draws the private fit's restarts from one fixed stream: on the same data, parties
/// with different seeds get the same fit, bit for bit; `best-of-K` draws them from the party's
/// seed, and on some small samples its fit changes with the seed (the "alone" lottery of
/// issue 56).
#[test]
fn fit_starts_fixed_does_not_depend_on_the_party_seed() {
    let fit = |data_seed: u64, party_seed: u64, fit_starts: FitStarts| {
        let cfg = SimConfig {
            r: 0.5,
            masking: false,
            n_obs: 10,
            n_pool: 10,
            n_test: 10,
            seed: data_seed,
            ..SimConfig::default()
        };
        let sc = simulate(&cfg).unwrap();
        let readings = Readings { fit_starts, ..Readings::default() };
        let ps =
            build_parties_with(&sc, CombinerKind::Noisy, Uncertainty::None, &DpConfig::off(), party_seed, readings)
                .unwrap();
        let p = ps[0].lock().unwrap();
        let mut theta = p.model.kernel.params();
        theta.push(p.model.noise.variance.ln());
        theta.iter().map(|v| v.to_bits()).collect::<Vec<_>>()
    };
    let mut seeded_differ = 0;
    for data in 0..12 {
        let fixed: Vec<_> = (0..4).map(|party| fit(data, 100 + party, FitStarts::Fixed(4))).collect();
        assert!(fixed.windows(2).all(|w| w[0] == w[1]), "data {data}: fixed-4 changed with the party seed");
        let seeded: Vec<_> = (0..4).map(|party| fit(data, 100 + party, FitStarts::BestOf(4))).collect();
        seeded_differ += usize::from(seeded.windows(2).any(|w| w[0] != w[1]));
    }
    assert!(seeded_differ >= 1, "best-of-4 never changed with the seed: the test cannot tell the two apart");
}

#[test]
fn hybrid_yu_changes_the_co_trained_model() {
    let yu = Readings { hybrid: HybridForm::Yu, ..Readings::default() };
    let mut rmse = Vec::new();
    for readings in [Readings::default(), yu] {
        let ps = parties(CombinerKind::Hybrid, Uncertainty::Marginal, &DpConfig::off(), 6, readings, 3);
        let mut p = ps[0].lock().unwrap();
        assert_eq!(p.model.readings().hybrid, readings.hybrid);
        let xt = p.data.x_test.clone();
        rmse.push(p.model.predict(&xt, false).unwrap().mean);
    }
    assert!((&rmse[0] - &rmse[1]).amax() > 1e-4);
}

#[test]
fn selection_variance_raw_breaks_blockys_index_order_scan() {
    let raw = Readings { selection_variance: SelectionVariance::Raw, ..Readings::default() };
    let mut asked = Vec::new();
    for readings in [Readings::default(), raw] {
        let ps = parties(CombinerKind::Blocky, Uncertainty::None, &DpConfig::off(), 0, readings, 0);
        let rep = block_on(run_in_process(&ps, 8)).unwrap();
        asked.push(rep.turns.iter().map(|t| t.index).collect::<Vec<_>>());
        // Under raw, each chosen index has the largest raw variance among the unasked ones.
        if readings.selection_variance == SelectionVariance::Raw {
            let mut p = ps[0].lock().unwrap();
            let done = p.model.asked();
            let cand: Vec<usize> = (0..p.data.pool_size()).filter(|i| !done.contains(i)).collect();
            let xs = p.data.x_pool.select_rows(cand.iter());
            let v = p.model.selection_variance(&xs).unwrap();
            let clamped = p.model.predict(&xs, false).unwrap().var;
            assert!(v.iter().zip(clamped.iter()).all(|(r, c)| *c == r.max(0.0) || (*c - r).abs() < 1e-12));
        }
    }
    assert_ne!(asked[0], asked[1], "the two readings ask different indices");
}

/// `unseen_covariates` is written only when not the default (`drop`, D39): a grid.json or config
/// written before the key existed (the thesis preset's, say) reads and writes back byte for byte,
/// a missing key reads as `drop`, and `free` and `median` round-trip.
#[test]
fn unseen_covariates_is_written_only_when_not_the_default() {
    use crate::readings::UnseenCovariates;
    assert_eq!(Readings::default().unseen_covariates, UnseenCovariates::Drop);
    let plain = serde_json::to_string(&Readings::thesis()).unwrap();
    assert!(!plain.contains("unseen_covariates"), "{plain}");
    let back: Readings = serde_json::from_str(&plain).unwrap();
    assert_eq!(back, Readings::thesis());
    let missing: Readings = serde_json::from_str(r#"{"fit_starts": "single"}"#).unwrap();
    assert_eq!(missing.unseen_covariates, UnseenCovariates::Drop);
    for (how, name) in [(UnseenCovariates::Median, "median"), (UnseenCovariates::Free, "free")] {
        let held = Readings { unseen_covariates: how, ..Readings::default() };
        let text = serde_json::to_string(&held).unwrap();
        assert!(text.contains(&format!("\"unseen_covariates\":\"{name}\"")), "{text}");
        assert_eq!(serde_json::from_str::<Readings>(&text).unwrap(), held);
        assert!(held.to_string().ends_with(&format!(" unseen_covariates={name}")), "{held}");
    }
    assert!(!Readings::default().to_string().contains("unseen"));
}
