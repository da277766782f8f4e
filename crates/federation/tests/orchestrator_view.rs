//! What the orchestrator receives is label-free unless a party opts in: under the honest
//! default, moving one of A's training labels changes nothing in A's `RunRound` and `Status`
//! answers to the orchestrator (byte for byte) — and changes the test RMSE once A shares its
//! test metrics (`privacy.share_test_metrics`).

mod common;

use dpcotrain_cotrain::CombinerKind;
use dpcotrain_cotrain::DpConfig;
use dpcotrain_cotrain::Uncertainty;
use dpcotrain_cotrain::build_parties;
use dpcotrain_cotrain::{SimConfig, simulate};
use dpcotrain_federation::pb::node_client::NodeClient;
use dpcotrain_federation::{NodeService, Retry, pb};
use dpcotrain_privacy::LabelRange;
use prost::Message;

const FED: &str = "fed-view";

/// A's answers to the orchestrator for rounds 0 and 1 (RunRound, then Status), encoded; A's
/// first training label moved by `shift`.
async fn orchestrator_view(shift: f64, share: bool) -> (Vec<Vec<u8>>, pb::StatusResponse) {
    let mut sc =
        simulate(&SimConfig { r: 0.9, n_obs: 30, n_pool: 100, n_test: 80, seed: 11, ..SimConfig::default() }).unwrap();
    sc.parties[0].y_train[0] += shift;
    let dp = DpConfig::honest(1.0, 1e-5, 10.0, LabelRange::new(-3.0, 3.0).unwrap(), 5);
    let ps = build_parties(&sc, CombinerKind::Noisy, Uncertainty::Marginal, &dp, 3).unwrap();
    let (addr_b, stop_b) = common::start(ps[1].clone(), FED).await;
    let peer = common::peer(&ps[0], FED, "P2", &addr_b, Retry::default());
    let svc = NodeService::new(ps[0].clone(), FED).with_peers(vec![peer]).with_shared_test_metrics(share);
    let (addr_a, stop_a) = common::start_service(svc).await;
    let mut c = NodeClient::connect(addr_a).await.unwrap();
    let mut seen = Vec::new();
    let mut status = pb::StatusResponse::default();
    for round in 0..2 {
        seen.push(c.run_round(pb::RunRoundRequest { round }).await.unwrap().into_inner().encode_to_vec());
        status = c.status(pb::StatusRequest::default()).await.unwrap().into_inner();
        seen.push(status.encode_to_vec());
    }
    let _ = stop_a.send(());
    let _ = stop_b.send(());
    (seen, status)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_orchestrator_sees_nothing_label_dependent_unless_the_party_opts_in() {
    let (base, st) = orchestrator_view(0.0, false).await;
    assert!(!st.restricted && st.rounds_done == 2 && st.model_version > 1, "{st:?}");
    assert_eq!((st.test_rmse, st.test_rmse_alone, st.rmse_change_se), (None, None, None));
    assert_eq!((st.test_rmse_mean_baseline, st.labels_clipped), (None, None));
    assert!(st.rmse_per_round.is_empty() && !st.answers_set_aside);
    let (moved, _) = orchestrator_view(1.5, false).await;
    assert_eq!(base, moved, "a training label changed what the orchestrator receives");
    // Opted in: the figures are there, and they do depend on the label.
    let (shared, st) = orchestrator_view(0.0, true).await;
    assert!(st.test_rmse.is_some() && st.test_rmse_mean_baseline.is_some() && st.rmse_per_round.len() == 2, "{st:?}");
    let rr = pb::RunRoundResponse::decode(shared[0].as_slice()).unwrap();
    assert!(rr.test_rmse.is_some());
    let (shared_moved, _) = orchestrator_view(1.5, true).await;
    assert_ne!(shared, shared_moved);
}
