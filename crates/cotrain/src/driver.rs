//! The round driver [Thomas §4.3.1.1; docs/decisions.md D7, D16]: in each round every party in turn
//! picks its most uncertain unasked pool index, asks every other party, folds the answers in
//! and re-fits its hyperparameters. 25 rounds by default.

use crate::CotrainError;
use crate::answer::PredictRequest;
use crate::combiner::CombinerKind;
use crate::error::Refusal;
use crate::metrics::{Metrics, metrics};
use crate::party::{Party, lock_party};
use crate::peer::{InProcessPeer, Peer};
use crate::readings::{BlockyTheta, Readings};
use crate::release_model::{NOMINAL_ANSWER_NOISE, QueryPolicy};
use crate::select::{most_uncertain, public_greedy};
use serde::Serialize;
use std::sync::{Arc, Mutex};

/// What one querier turn did.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TurnReport {
    pub round: usize,
    pub querier: String,
    /// The (first) pool index asked (None when every index had been asked).
    pub index: Option<usize>,
    /// Every pool index asked this turn (one under adaptive queries; a batch under public ones).
    pub indices: Vec<usize>,
    /// Peers that answered.
    pub answered_by: Vec<String>,
    /// Peers that refused or failed, with the reason (e.g. budget exhausted).
    pub refused: Vec<Refusal>,
    /// Augmented objective after the re-fit.
    pub objective: Option<f64>,
}

/// One querier turn against `peers` (never holds the querier's lock across an await).
pub async fn query_turn<P: Peer>(
    querier: &Mutex<Party>,
    peers: &[P],
    round: usize,
) -> Result<TurnReport, CotrainError> {
    let (name, indices, uncertainty, want_prior) = {
        let mut q = lock_party(querier)?;
        let idx = match q.dp.queries {
            QueryPolicy::Adaptive => most_uncertain(&mut q.model)?.into_iter().collect(),
            QueryPolicy::Public { per_turn, theta } => {
                let kernel = theta.kernel(q.data.dim());
                let asked = q.model.asked();
                public_greedy(
                    kernel.as_ref(),
                    &q.data.x_train,
                    q.model.x_pool(),
                    &asked,
                    per_turn,
                    theta.noise_variance,
                    NOMINAL_ANSWER_NOISE * theta.signal_variance,
                )?
            }
        };
        (q.name.clone(), idx, q.model.uncertainty, q.model.needs_prior())
    };
    let index = indices.first().copied();
    let mut report = TurnReport {
        round,
        querier: name.clone(),
        index,
        indices: indices.clone(),
        answered_by: vec![],
        refused: vec![],
        objective: None,
    };
    if index.is_none() {
        lock_party(querier)?.fold_in(round, None, vec![], vec![])?;
        return Ok(report);
    }
    let mut answers = Vec::new();
    let mut unreached = false;
    for peer in peers {
        let pname = peer.name();
        // Under public (batched) queries, a peer whose budget for us is spent is not asked again.
        if let Some(why) = {
            let q = lock_party(querier)?;
            match q.dp.queries {
                QueryPolicy::Public { .. } => q.peer_budget_spent(&pname),
                QueryPolicy::Adaptive => None,
            }
        } {
            report.refused.push(why);
            continue;
        }
        // The id is a function of (querier, round, peer) on purpose: an orchestrator that
        // crashes and re-drives the round sends the same id, and gets the answer already given
        // (no new noise, no new charge). Guessing it gains another requester nothing: answers
        // are kept per authenticated requester (crate::answer_cache).
        let req = PredictRequest {
            request_id: format!("{name}:round{round}:{pname}"),
            requester: name.clone(),
            indices: indices.clone(),
            uncertainty,
            want_prior,
            witness: lock_party(querier)?.receipt_from(&pname),
        };
        match peer.predict(req).await {
            Ok(a) => answers.push(a),
            Err(e) => {
                unreached |= matches!(e, CotrainError::Unreached { .. });
                report.refused.push(Refusal::of(&pname, &e));
            }
        }
    }
    // A peer was not reached (or could not keep its promises: a failed save, a ledger behind
    // its receipts): the turn did not happen, even if other peers answered — an exchange the
    // round owes is never skipped silently. Nothing is recorded, so running the same round again
    // takes it; the peers that did answer give the same answers to the same request ids (no new
    // noise, no new charge).
    if unreached {
        return Err(CotrainError::TurnNotTaken { round, querier: name, reasons: report.refused.clone() });
    }
    // A turn in which every peer was deliberately not asked (each one's budget for us is
    // spent) asked nothing: it is recorded without an index.
    let none_asked = !peers.is_empty()
        && answers.is_empty()
        && report.refused.len() == peers.len()
        && report.refused.iter().all(Refusal::not_asked_for_budget);
    if none_asked {
        report.index = None;
        report.indices.clear();
    }
    // The re-fit runs on a copy, away from the querier's lock: the peers' requests to this party
    // (which wait on it) never wait for a re-fit, whose time depends on the private labels.
    let (model, version) = lock_party(querier)?.model_for_turn();
    let staged = Party::stage(model, version, answers, report.refused.clone())?;
    let mut q = lock_party(querier)?;
    let rec = q.commit_turn(round, report.index, staged)?;
    report.answered_by = rec.answers.iter().map(|a| a.responder.clone()).collect();
    report.refused = rec.refused.clone();
    report.objective = rec.objective;
    Ok(report)
}

/// Test metrics of a party's current model on its own view of the test entities.
pub fn evaluate(p: &mut Party) -> Result<Metrics, CotrainError> {
    evaluate_with_errors(p).map(|(m, _)| m)
}

/// [`evaluate`]'s RMSE alone, from the predictive mean (no variances: the per-round curve).
pub fn test_rmse(p: &mut Party) -> Result<f64, CotrainError> {
    let mean = p.model.predict_mean(&p.data.x_test)?;
    Ok(crate::metrics::rmse(&mean, &p.data.y_test))
}

/// [`evaluate`] and, from the same prediction, the squared error at each test point (what a
/// paired comparison of two models needs).
pub fn evaluate_with_errors(p: &mut Party) -> Result<(Metrics, Vec<f64>), CotrainError> {
    let pred = p.model.predict(&p.data.x_test, false)?;
    let sq = pred.mean.iter().zip(p.data.y_test.iter()).map(|(m, y)| (m - y).powi(2)).collect();
    Ok((metrics(&pred.mean, &pred.var, p.model.noise.variance, &p.data.y_test), sq))
}

/// Per-party outcome of a co-training run.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PartyOutcome {
    pub name: String,
    pub before: Metrics,
    pub after: Metrics,
    pub queries: usize,
    /// Test RMSE after each round.
    pub rmse_per_round: Vec<f64>,
    /// ρ charged by this party's releases, per requester (calibrated DP only).
    pub rho_released: Vec<(String, f64)>,
    /// ε of those releases at the ledger's δ (exact Gaussian-DP conversion).
    pub epsilon_released: Vec<(String, f64)>,
    /// Objective evaluations this party's re-fits took (the run's main cost).
    pub refit_evaluations: usize,
    /// Standard error of after.rmse − before.rmse, paired over the test points
    /// ([`crate::metrics::rmse_change_se`]); None with fewer than two test points.
    pub rmse_change_se: Option<f64>,
    /// Test RMSE of predicting the public mean ([`crate::metrics::mean_baseline_rmse`]).
    pub mean_baseline_rmse: f64,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RunReport {
    pub rounds: usize,
    pub parties: Vec<PartyOutcome>,
    pub turns: Vec<TurnReport>,
}

/// Run `rounds` rounds among in-process parties (each asks all the others, D16).
pub async fn run_in_process(parties: &[Arc<Mutex<Party>>], rounds: usize) -> Result<RunReport, CotrainError> {
    let mut before = Vec::new();
    let mut errors_before = Vec::new();
    for p in parties {
        let (m, sq) = evaluate_with_errors(&mut *lock_party(p)?)?;
        before.push(m);
        errors_before.push(sq);
    }
    let mut turns = Vec::new();
    let mut per_round = vec![Vec::with_capacity(rounds); parties.len()];
    for round in 0..rounds {
        for (i, q) in parties.iter().enumerate() {
            let peers: Vec<InProcessPeer> = parties
                .iter()
                .enumerate()
                .filter(|(j, _)| *j != i)
                .map(|(_, p)| InProcessPeer { party: p.clone() })
                .collect();
            hand_over_theta(q, &peers)?;
            turns.push(query_turn(q, &peers, round).await?);
        }
        for (i, p) in parties.iter().enumerate() {
            per_round[i].push(test_rmse(&mut *lock_party(p)?)?);
        }
    }
    let mut outcomes = Vec::new();
    for (i, p) in parties.iter().enumerate() {
        let mut g = lock_party(p)?;
        let (after, errors_after) = evaluate_with_errors(&mut g)?;
        let mut rho = Vec::new();
        let mut eps = Vec::new();
        for other in parties.iter().enumerate().filter(|(j, _)| *j != i).map(|(_, o)| o) {
            let oname = lock_party(other)?.name.clone();
            if let Some(l) = g.ledger(&oname) {
                rho.push((oname.clone(), l.rho_spent()));
                eps.push((oname, l.epsilon_spent()));
            }
        }
        outcomes.push(PartyOutcome {
            name: g.name.clone(),
            before: before[i],
            after,
            queries: turns.iter().filter(|t| t.querier == g.name).map(|t| t.indices.len()).sum(),
            rmse_per_round: per_round[i].clone(),
            rho_released: rho,
            epsilon_released: eps,
            refit_evaluations: g.model.refit_evaluations,
            rmse_change_se: crate::metrics::rmse_change_se(&errors_before[i], &errors_after),
            mean_baseline_rmse: g.mean_baseline_rmse(crate::metrics::PUBLIC_MEAN),
        });
    }
    Ok(RunReport { rounds, parties: outcomes, turns })
}

/// Under `blocky_theta = querier` (Thomas 2017 eq 4.6 as printed: the Blocky query block is
/// K₂(X₂^q, X₂^q; θ₁)), give every responder the querier's current θ₁ before it asks. Only the
/// in-process driver can: the wire protocol does not carry θ₁.
fn hand_over_theta(querier: &Mutex<Party>, peers: &[InProcessPeer]) -> Result<(), CotrainError> {
    let (name, theta) = {
        let q = lock_party(querier)?;
        let r = q.model.readings();
        if r.blocky_theta != BlockyTheta::Querier || q.model.kind != CombinerKind::Blocky {
            return Ok(());
        }
        (q.name.clone(), q.model.kernel.params())
    };
    for p in peers {
        lock_party(&p.party)?.set_requester_theta(&name, theta.clone())?;
    }
    Ok(())
}

/// Drive a future to completion on the current thread (in-process runs need no runtime: the
/// in-process peer never suspends).
pub fn block_on<F: Future>(f: F) -> F::Output {
    let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
    let mut f = std::pin::pin!(f);
    loop {
        if let std::task::Poll::Ready(v) = f.as_mut().poll(&mut cx) {
            return v;
        }
        std::thread::yield_now();
    }
}

/// Default kernel of a party (D17): SE-ARD with s² = Var(y), ℓ_d = 1 on standardised inputs,
/// bounds ℓ ∈ [1e-3, 1e3], s² ∈ [1e-4, 1e2]; noise σ² = 0.1·Var(y) in [1e-6, 10].
pub fn default_kernel(data: &crate::data::PartyData) -> (Box<dyn dpcotrain_gp::Kernel>, dpcotrain_gp::NoiseVariance) {
    use dpcotrain_gp::Bounds;
    use dpcotrain_gp::kernels::{Kernel, SquaredExponential};
    let y = &data.y_train;
    let n = y.len() as f64;
    let m = y.mean();
    let var = if n > 1.0 { y.iter().map(|v| (v - m).powi(2)).sum::<f64>() / (n - 1.0) } else { 1.0 };
    let var = if var > 1e-4 { var.min(1e2) } else { 1.0 };
    let d = data.dim();
    let mut k = SquaredExponential::ard(var, vec![1.0; d]);
    let mut b = vec![Bounds::new(1e-4f64.ln(), 1e2f64.ln())];
    b.extend(std::iter::repeat_n(Bounds::new(1e-3f64.ln(), 1e3f64.ln()), d));
    k.set_bounds(&b);
    let mut noise = dpcotrain_gp::NoiseVariance::new((0.1 * var).max(1e-6));
    noise.bounds = Bounds::new(1e-6f64.ln(), 10f64.ln());
    (Box::new(k), noise)
}

/// One in-process party per scenario party, all with the same combiner, mode and DP setting.
pub fn build_parties(
    scenario: &crate::data::Scenario,
    kind: CombinerKind,
    uncertainty: crate::answer::Uncertainty,
    dp: &crate::party::DpConfig,
    seed: u64,
) -> Result<Vec<Arc<Mutex<Party>>>, CotrainError> {
    build_parties_with(scenario, kind, uncertainty, dp, seed, Readings::default())
}

/// [`build_parties`] under the given readings of the ambiguous protocol choices.
pub fn build_parties_with(
    scenario: &crate::data::Scenario,
    kind: CombinerKind,
    uncertainty: crate::answer::Uncertainty,
    dp: &crate::party::DpConfig,
    seed: u64,
    readings: Readings,
) -> Result<Vec<Arc<Mutex<Party>>>, CotrainError> {
    scenario.validate()?;
    let dims: Vec<usize> = scenario.parties.iter().map(|d| d.dim()).collect();
    readings.check_views(kind, &dims)?;
    let mut out = Vec::new();
    for (i, d) in scenario.parties.iter().enumerate() {
        let (k, noise) = default_kernel(d);
        let seed = Some(seed.wrapping_add(i as u64));
        let p = Party::new(d.clone(), kind, uncertainty, k, noise, dp.clone(), seed, readings)?;
        out.push(Arc::new(Mutex::new(p)));
    }
    Ok(out)
}
