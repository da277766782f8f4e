//! Durable party state: a party rebuilt from its configuration and restored from a snapshot
//! (through JSON, as a node stores it) continues exactly where the original was — same
//! ledger, same released means, same noise path, same model — and refuses a snapshot that
//! does not belong to its data.

use dpcotrain_cotrain::answer::{PredictRequest, Uncertainty};
use dpcotrain_cotrain::combiner::CombinerKind;
use dpcotrain_cotrain::driver::{block_on, build_parties, evaluate, query_turn};
use dpcotrain_cotrain::party::{DpConfig, Party, ReleasePolicy};
use dpcotrain_cotrain::peer::InProcessPeer;
use dpcotrain_cotrain::simulate::{SimConfig, simulate};
use dpcotrain_cotrain::state::PartyState;
use dpcotrain_privacy::LabelRange;
use std::sync::{Arc, Mutex};

fn dp(policy: ReleasePolicy) -> DpConfig {
    DpConfig::calibrated(1.0, 1e-5, 40.0, LabelRange::new(-3.0, 3.0).unwrap(), policy)
}

fn parties(policy: ReleasePolicy, seed: u64) -> Vec<Arc<Mutex<Party>>> {
    let sc = simulate(&SimConfig { n_obs: 25, seed, masking: true, ..SimConfig::default() }).unwrap();
    build_parties(&sc, CombinerKind::Noisy, Uncertainty::Marginal, &dp(policy), seed).unwrap()
}

fn rounds(ps: &[Arc<Mutex<Party>>], range: std::ops::Range<usize>) {
    for round in range {
        for i in 0..ps.len() {
            let peers: Vec<InProcessPeer> =
                (0..ps.len()).filter(|&j| j != i).map(|j| InProcessPeer { party: ps[j].clone() }).collect();
            block_on(query_turn(&ps[i], &peers, round)).unwrap();
        }
    }
}

fn snapshot(p: &Arc<Mutex<Party>>) -> String {
    serde_json::to_string(&p.lock().unwrap().state()).unwrap()
}

fn restored(policy: ReleasePolicy, seed: u64, saved: &[String]) -> Vec<Arc<Mutex<Party>>> {
    let fresh = parties(policy, seed);
    for (p, s) in fresh.iter().zip(saved) {
        let st: PartyState = serde_json::from_str(s).unwrap();
        p.lock().unwrap().restore(&st).unwrap();
    }
    fresh
}

#[test]
fn a_restored_federation_continues_number_for_number() {
    for policy in [ReleasePolicy::PerQuery, ReleasePolicy::ReleaseOnce] {
        let a = parties(policy, 3);
        rounds(&a, 0..6);
        let saved: Vec<String> = a.iter().map(snapshot).collect();
        let st: PartyState = serde_json::from_str(&saved[0]).unwrap();
        assert_eq!(st.turns.len(), 6);
        assert!(st.rho_spent() > 0.0);
        let b = restored(policy, 3, &saved);
        // The snapshot of the restored party is the snapshot it was restored from.
        assert_eq!(b.iter().map(snapshot).collect::<Vec<_>>(), saved, "{policy:?}");
        rounds(&a, 6..10);
        rounds(&b, 6..10);
        for (pa, pb) in a.iter().zip(&b) {
            assert_eq!(snapshot(pa), snapshot(pb), "{policy:?}");
            let ra = evaluate(&mut pa.lock().unwrap()).unwrap().rmse;
            let rb = evaluate(&mut pb.lock().unwrap()).unwrap().rmse;
            assert_eq!(ra.to_bits(), rb.to_bits());
        }
    }
}

fn req(id: &str, idx: Vec<usize>) -> PredictRequest {
    PredictRequest {
        request_id: id.into(),
        requester: "party2".into(),
        indices: idx,
        uncertainty: Uncertainty::Marginal,
        want_prior: false,
        witness: None,
    }
}

#[test]
fn os_entropy_noise_survives_a_restart() {
    // Production noise (OS entropy): after a restart the same path is extended, a retried id
    // returns the same answer and nothing is charged twice.
    for policy in [ReleasePolicy::PerQuery, ReleasePolicy::ReleaseOnce] {
        let a = parties(policy, 5);
        let name = a[1].lock().unwrap().name().to_string();
        let r = |id: &str, idx| PredictRequest { requester: name.clone(), ..req(id, idx) };
        let mut p = a[0].lock().unwrap();
        p.set_seed(None);
        let first = p.answer(&r("q1", vec![3, 7])).unwrap();
        let saved = serde_json::to_string(&p.state()).unwrap();
        let next = p.answer(&r("q2", vec![11, 3])).unwrap();
        let spent = p.ledger(&name).unwrap().rho_spent();
        drop(p);

        let b = parties(policy, 5);
        let mut q = b[0].lock().unwrap();
        q.set_seed(None);
        q.restore(&serde_json::from_str(&saved).unwrap()).unwrap();
        assert_eq!(q.answer(&r("q1", vec![3, 7])).unwrap(), first.as_replay(), "{policy:?}: retry after restart");
        assert_eq!(q.answer(&r("q2", vec![11, 3])).unwrap(), next, "{policy:?}: the path continues");
        assert_eq!(q.ledger(&name).unwrap().rho_spent(), spent);
        assert_eq!(q.ledger(&name).unwrap().releases.len(), 1);
    }
}

#[test]
fn a_snapshot_of_other_data_is_refused() {
    let a = parties(ReleasePolicy::PerQuery, 3);
    rounds(&a, 0..3);
    let saved = snapshot(&a[0]);
    // Different data (another seed): the replay does not reproduce the saved objectives.
    let other = parties(ReleasePolicy::PerQuery, 4);
    let err = other[0].lock().unwrap().restore(&serde_json::from_str(&saved).unwrap()).unwrap_err();
    assert!(err.to_string().contains("changed"), "{err}");
    // Another party's snapshot.
    let fresh = parties(ReleasePolicy::PerQuery, 3);
    let err = fresh[1].lock().unwrap().restore(&serde_json::from_str(&saved).unwrap()).unwrap_err();
    assert!(err.to_string().contains("another party"), "{err}");
    // Restoring twice.
    let fresh = parties(ReleasePolicy::PerQuery, 3);
    let st: PartyState = serde_json::from_str(&saved).unwrap();
    fresh[0].lock().unwrap().restore(&st).unwrap();
    assert!(fresh[0].lock().unwrap().restore(&st).is_err());
}

#[test]
fn a_malformed_answer_is_refused_not_absorbed() {
    use dpcotrain_cotrain::answer::Answer;
    let ps = parties(ReleasePolicy::PerQuery, 3);
    let mut p = ps[0].lock().unwrap();
    let version = p.model().version();
    let bad = Answer {
        responder: "mallory".into(),
        indices: vec![2],
        mean: vec![f64::NAN],
        var: Some(vec![0.1]),
        answered: vec![2],
        cov: None,
        prior_cov: None,
        model_version: 0,
        charge: None,
        budget_rho_left: None,
        noise_var: None,
        likelihood: None,
        receipt: None,
    };
    let good = Answer { responder: "P2".into(), mean: vec![0.3], ..bad.clone() };
    let rec = p.fold_in(0, Some(2), vec![bad, good], vec![]).unwrap().clone();
    assert_eq!(rec.answers.len(), 1);
    assert_eq!(rec.answers[0].responder, "P2");
    assert!(
        rec.refused.iter().any(|r| r.peer == "mallory"
            && r.code == dpcotrain_cotrain::RemoteCode::MalformedAnswer
            && r.message.contains("not absorbed")),
        "{:?}",
        rec.refused
    );
    assert!(p.model().version() > version, "the good answer was absorbed and the model re-fitted");
    assert!(evaluate(&mut p).unwrap().rmse.is_finite());
}

/// A ledger edited outside the node is refused at restore, naming the requester and the entry:
/// a dropped release (ε spent would fall back to 0) and a zeroed ρ.
#[test]
fn an_edited_ledger_is_refused_naming_the_entry() {
    let honest = DpConfig::honest(1.0, 1e-5, 1.0, LabelRange::new(-3.0, 3.0).unwrap(), 10);
    let sc = simulate(&SimConfig { n_obs: 25, seed: 5, masking: true, ..SimConfig::default() }).unwrap();
    let build = || build_parties(&sc, CombinerKind::Noisy, Uncertainty::Marginal, &honest, 5).unwrap();
    let ps = build();
    rounds(&ps, 0..1);
    let st = ps[0].lock().unwrap().state();
    let l = st.requesters["P2"].ledger.as_ref().unwrap();
    assert_eq!(l.releases.len(), 1, "one batch released to P2");
    // Untouched: restores.
    build()[0].lock().unwrap().restore(&st).unwrap();
    // The release dropped.
    let mut dropped = st.clone();
    dropped.requesters.get_mut("P2").unwrap().ledger.as_mut().unwrap().releases.pop();
    let err = build()[0].lock().unwrap().restore(&dropped).unwrap_err().to_string();
    assert!(err.contains("requester \"P2\"") && err.contains("batch 0") && err.contains("no charge"), "{err}");
    // Its ρ zeroed.
    let mut zeroed = st.clone();
    zeroed.requesters.get_mut("P2").unwrap().ledger.as_mut().unwrap().releases[0].rho = 0.0;
    let err = build()[0].lock().unwrap().restore(&zeroed).unwrap_err().to_string();
    assert!(err.contains("\"P2#batch0\"") && err.contains("records ρ = 0"), "{err}");
    // Its σ inflated (a smaller ρ) without touching ρ: the batch's σ no longer matches.
    let mut sigma = st.clone();
    let rel = &mut sigma.requesters.get_mut("P2").unwrap().ledger.as_mut().unwrap().releases[0];
    rel.sigma *= 10.0;
    rel.rho = dpcotrain_privacy::accountant::rho_of(rel.sensitivity, rel.sigma);
    let err = build()[0].lock().unwrap().restore(&sigma).unwrap_err().to_string();
    assert!(err.contains("batch 0 was released with"), "{err}");
}

/// The re-fit policy's choices (restart on every K-th re-fit) are replayed on restore: a party
/// restored mid-run with `every=2` continues number for number, and the policy changes numbers
/// (so the replay really exercises it).
#[test]
fn a_restored_party_replays_its_refit_policy() {
    use dpcotrain_cotrain::combiner::RefitPolicy;
    let policy = ReleasePolicy::ReleaseOnce;
    let with = |refit: RefitPolicy, ps: Vec<Arc<Mutex<Party>>>| {
        for p in &ps {
            p.lock().unwrap().set_refit_policy(refit);
        }
        ps
    };
    let a = with(RefitPolicy::RestartEvery(2), parties(policy, 7));
    rounds(&a, 0..5);
    let saved: Vec<String> = a.iter().map(snapshot).collect();
    let b = with(RefitPolicy::RestartEvery(2), parties(policy, 7));
    for (p, s) in b.iter().zip(&saved) {
        p.lock().unwrap().restore(&serde_json::from_str(s).unwrap()).unwrap();
    }
    rounds(&a, 5..9);
    rounds(&b, 5..9);
    for (pa, pb) in a.iter().zip(&b) {
        assert_eq!(snapshot(pa), snapshot(pb));
    }
    let warm = with(RefitPolicy::Warm, parties(policy, 7));
    rounds(&warm, 0..9);
    let restart = with(RefitPolicy::WarmRestart, parties(policy, 7));
    rounds(&restart, 0..9);
    let theta =
        |ps: &[Arc<Mutex<Party>>]| ps.iter().map(|p| p.lock().unwrap().model().hyperparameters()).collect::<Vec<_>>();
    assert_ne!(theta(&warm), theta(&restart), "the policy must matter somewhere in 9 rounds");
}
