//! The round driver [Thomas §4.3.1.1; science-notes D7, D16]: in each round every party in turn
//! picks its most uncertain unasked pool index, asks every other party, folds the answers in
//! and re-fits its hyperparameters. 25 rounds by default.

use crate::CotrainError;
use crate::answer::PredictRequest;
use crate::metrics::{Metrics, metrics};
use crate::peer::{InProcessPeer, Peer};
use crate::responder::Party;
use crate::select::most_uncertain;
use serde::Serialize;
use std::sync::{Arc, Mutex};

/// What one querier turn did.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TurnReport {
    pub round: usize,
    pub querier: String,
    /// The pool index asked (None when every index had been asked).
    pub index: Option<usize>,
    /// Peers that answered.
    pub answered_by: Vec<String>,
    /// Peers that refused or failed, with the reason (e.g. budget exhausted).
    pub refused: Vec<(String, String)>,
    /// Augmented objective after the re-fit.
    pub objective: Option<f64>,
}

fn lock(p: &Mutex<Party>) -> Result<std::sync::MutexGuard<'_, Party>, CotrainError> {
    p.lock().map_err(|_| CotrainError::invalid("party lock poisoned"))
}

/// One querier turn against `peers` (never holds the querier's lock across an await).
pub async fn query_turn<P: Peer>(
    querier: &Mutex<Party>,
    peers: &[P],
    round: usize,
) -> Result<TurnReport, CotrainError> {
    let (name, index, uncertainty, want_prior) = {
        let mut q = lock(querier)?;
        let idx = most_uncertain(&mut q.model)?;
        (q.name.clone(), idx, q.model.uncertainty, q.model.kind.needs_prior())
    };
    let mut report =
        TurnReport { round, querier: name.clone(), index, answered_by: vec![], refused: vec![], objective: None };
    let Some(index) = index else { return Ok(report) };
    let mut answers = Vec::new();
    for peer in peers {
        let pname = peer.name();
        let req = PredictRequest {
            request_id: format!("{name}:round{round}:{pname}"),
            requester: name.clone(),
            indices: vec![index],
            uncertainty,
            want_prior,
        };
        match peer.predict(req).await {
            Ok(a) => answers.push(a),
            Err(e) => report.refused.push((pname, e.to_string())),
        }
    }
    let mut q = lock(querier)?;
    for a in &answers {
        q.model.absorb(a)?;
        report.answered_by.push(a.responder.clone());
    }
    if !answers.is_empty() {
        report.objective = Some(q.model.refit()?);
    }
    Ok(report)
}

/// Test metrics of a party's current model on its own view of the test entities.
pub fn evaluate(p: &mut Party) -> Result<Metrics, CotrainError> {
    let xt = p.data.x_test.clone();
    let pred = p.model.predict(&xt, false)?;
    Ok(metrics(&pred.mean, &pred.var, p.model.noise.variance, &p.data.y_test))
}

/// Per-party outcome of a co-training run.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PartyOutcome {
    pub name: String,
    pub before: Metrics,
    pub after: Metrics,
    pub queries: usize,
    /// ρ charged by this party's releases, per requester (calibrated DP only).
    pub rho_released: Vec<(String, f64)>,
    /// ε of those releases at the ledger's δ (exact Gaussian-DP conversion).
    pub epsilon_released: Vec<(String, f64)>,
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
    for p in parties {
        before.push(evaluate(&mut *lock(p)?)?);
    }
    let mut turns = Vec::new();
    for round in 0..rounds {
        for (i, q) in parties.iter().enumerate() {
            let peers: Vec<InProcessPeer> = parties
                .iter()
                .enumerate()
                .filter(|(j, _)| *j != i)
                .map(|(_, p)| InProcessPeer { party: p.clone() })
                .collect();
            turns.push(query_turn(q, &peers, round).await?);
        }
    }
    let mut outcomes = Vec::new();
    for (i, p) in parties.iter().enumerate() {
        let mut g = lock(p)?;
        let after = evaluate(&mut g)?;
        let mut rho = Vec::new();
        let mut eps = Vec::new();
        for other in parties.iter().enumerate().filter(|(j, _)| *j != i).map(|(_, o)| o) {
            let oname = lock(other)?.name.clone();
            if let Some(l) = g.ledger(&oname) {
                rho.push((oname.clone(), l.rho_spent()));
                eps.push((oname, l.epsilon_spent()));
            }
        }
        outcomes.push(PartyOutcome {
            name: g.name.clone(),
            before: before[i],
            after,
            queries: turns.iter().filter(|t| t.querier == g.name && t.index.is_some()).count(),
            rho_released: rho,
            epsilon_released: eps,
        });
    }
    Ok(RunReport { rounds, parties: outcomes, turns })
}

/// Drive a future to completion on the current thread (in-process runs need no runtime: the
/// in-process peer never suspends).
pub fn block_on<F: std::future::Future>(f: F) -> F::Output {
    use std::task::{Context, Poll, RawWaker, RawWakerVTable, Waker};
    fn noop_raw() -> RawWaker {
        fn clone(_: *const ()) -> RawWaker {
            noop_raw()
        }
        fn noop(_: *const ()) {}
        static VTABLE: RawWakerVTable = RawWakerVTable::new(clone, noop, noop, noop);
        RawWaker::new(std::ptr::null(), &VTABLE)
    }
    // SAFETY: the vtable's functions do nothing and never dereference the data pointer.
    let waker = unsafe { Waker::from_raw(noop_raw()) };
    let mut cx = Context::from_waker(&waker);
    let mut f = std::pin::pin!(f);
    loop {
        if let Poll::Ready(v) = f.as_mut().poll(&mut cx) {
            return v;
        }
        std::thread::yield_now();
    }
}
