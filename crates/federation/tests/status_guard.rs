//! `Status` tells the operator when the answer guard has set the received answers aside.

mod common;

use dpcotrain_cotrain::build_parties;
use dpcotrain_cotrain::{Answer, Uncertainty};
use dpcotrain_cotrain::{AnswerGuard, CombinerKind};
use dpcotrain_cotrain::{DpConfig, Party};
use dpcotrain_cotrain::{SimConfig, simulate};
use dpcotrain_federation::pb;
use dpcotrain_federation::pb::node_client::NodeClient;
use std::sync::{Arc, Mutex};

/// A party (simulated, unmasked) that folded in answers far from its own labels (5 prior sd,
/// stated as nearly exact), with the guard `guard`.
fn party(guard: AnswerGuard) -> Arc<Mutex<Party>> {
    let sc =
        simulate(&SimConfig { n_obs: 30, n_pool: 40, n_test: 20, masking: false, seed: 4, ..SimConfig::default() })
            .unwrap();
    let p = build_parties(&sc, CombinerKind::Noisy, Uncertainty::Marginal, &DpConfig::off(), 4).unwrap().remove(0);
    {
        let mut g = p.lock().unwrap();
        g.set_guard(guard).unwrap();
        let indices: Vec<usize> = (0..40).step_by(2).collect();
        let n = indices.len();
        let answer = Answer::marginal("P2", indices, vec![5.0; n], vec![1e-3; n]);
        g.fold_in(0, Some(0), vec![answer], vec![]).unwrap();
    }
    p
}

async fn set_aside(guard: AnswerGuard) -> bool {
    // The guard's verdict reads the private labels: the node shares it only when it opts in.
    let svc = dpcotrain_federation::NodeService::new(party(guard), "guard").with_shared_test_metrics(true);
    let (addr, stop) = common::start_service(svc).await;
    let mut c = NodeClient::connect(addr).await.unwrap();
    let st = c.status(pb::StatusRequest::default()).await.unwrap().into_inner();
    let _ = stop.send(());
    st.answers_set_aside
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_reports_answers_set_aside_by_the_guard() {
    assert!(set_aside(AnswerGuard::Loo).await, "the guard should set contradicting answers aside");
    assert!(!set_aside(AnswerGuard::Off).await, "without the guard the answers are used");
}
