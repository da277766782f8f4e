//! Real gRPC on loopback: two statisticians, 25 rounds, Noisy + marginal with calibrated DP —
//! the same numbers as the in-process run; and malformed requests get status codes while the
//! node stays up.

mod common;

use dpcotrain_cotrain::CombinerKind;
use dpcotrain_cotrain::Uncertainty;
use dpcotrain_cotrain::driver::{build_parties, evaluate, query_turn, run_in_process};
use dpcotrain_cotrain::{DpConfig, Party, ReleasePolicy};
use dpcotrain_cotrain::{SimConfig, simulate};
use dpcotrain_federation::pb::node_client::NodeClient;
use dpcotrain_federation::{Agreement, GrpcPeer, PeerOptions, Retry, pb};
use dpcotrain_privacy::LabelRange;
use std::sync::{Arc, Mutex};

const FED: &str = "fed-test";

fn dp() -> DpConfig {
    DpConfig::calibrated(1.0, 1e-5, 1.0, LabelRange::new(-3.0, 3.0).unwrap(), ReleasePolicy::ReleaseOnce)
}

fn parties() -> Vec<Arc<Mutex<Party>>> {
    let sc =
        simulate(&SimConfig { r: 0.9, n_obs: 25, n_pool: 200, n_test: 200, seed: 3, ..SimConfig::default() }).unwrap();
    build_parties(&sc, CombinerKind::Noisy, Uncertainty::Marginal, &dp(), 3).unwrap()
}

async fn start(party: Arc<Mutex<Party>>) -> (String, tokio::sync::oneshot::Sender<()>) {
    common::start(party, FED).await
}

/// `me`'s gRPC peer `name` at `addr`.
fn peer(me: &Arc<Mutex<Party>>, name: &str, addr: &str) -> GrpcPeer {
    common::peer(me, FED, name, addr, Retry::default())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn grpc_run_equals_in_process_run() {
    // In-process reference.
    let local = parties();
    let reference = run_in_process(&local, 25).await.unwrap();

    // The same parties, each behind its own gRPC node.
    let remote = parties();
    let (addr_a, stop_a) = start(remote[0].clone()).await;
    let (addr_b, stop_b) = start(remote[1].clone()).await;
    let name_a = remote[0].lock().unwrap().name().to_string();
    let name_b = remote[1].lock().unwrap().name().to_string();
    let peer_of_a = vec![peer(&remote[0], &name_b, &addr_b)];
    let peer_of_b = vec![peer(&remote[1], &name_a, &addr_a)];
    for round in 0..25 {
        query_turn(&remote[0], &peer_of_a, round).await.unwrap();
        query_turn(&remote[1], &peer_of_b, round).await.unwrap();
    }
    for (i, p) in remote.iter().enumerate() {
        let after = evaluate(&mut p.lock().unwrap()).unwrap();
        assert_eq!(after.rmse.to_bits(), reference.parties[i].after.rmse.to_bits(), "party {i}");
        assert_eq!(after.nlpd.to_bits(), reference.parties[i].after.nlpd.to_bits());
    }
    // Release-once: exactly one charge per requester, within the budget.
    let a = remote[0].lock().unwrap();
    let l = a.ledger(&name_b).unwrap();
    assert_eq!(l.releases.len(), 1);
    assert!(l.epsilon_spent() <= 1.0 + 1e-9);
    drop(a);
    let _ = stop_a.send(());
    let _ = stop_b.send(());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_requests_get_status_codes_and_the_node_stays_up() {
    let ps = parties();
    let (addr, stop) = start(ps[0].clone()).await;
    let mut c = NodeClient::connect(addr).await.unwrap();
    let good = pb::PredictRequest {
        request_id: "r1".into(),
        requester: "P2".into(),
        indices: vec![3],
        uncertainty: pb::Uncertainty::Marginal.into(),
        want_prior: false,
        federation_id: FED.into(),
        witness: None,
    };
    // No handshake yet.
    let err = c.predict(good.clone()).await.unwrap_err();
    assert_eq!(err.code(), tonic::Code::FailedPrecondition, "{}", err.message());
    let agreement = Agreement::of(&ps[0].lock().unwrap(), FED, 0.0, 1.0);
    // A handshake that disagrees on the pool or the privacy policy is refused.
    let mut bad = agreement.clone();
    bad.pool_hash = dpcotrain_federation::agreement::pool_hash(7);
    let hs = c.handshake(bad.to_pb("P2")).await.unwrap().into_inner();
    assert!(!hs.accepted && hs.reason.contains("pool"), "{}", hs.reason);
    let mut bad = agreement.clone();
    bad.epsilon = 8.0;
    let hs = c.handshake(bad.to_pb("P2")).await.unwrap().into_inner();
    assert!(!hs.accepted && hs.reason.contains("privacy policy"), "{}", hs.reason);
    let hs = c.handshake(agreement.to_pb("P2")).await.unwrap().into_inner();
    assert!(hs.accepted, "{}", hs.reason);
    let cases = [
        (pb::PredictRequest { indices: vec![], ..good.clone() }, tonic::Code::InvalidArgument),
        (
            pb::PredictRequest { request_id: "x1".into(), indices: vec![100_000], ..good.clone() },
            tonic::Code::InvalidArgument,
        ),
        (
            pb::PredictRequest { request_id: "x2".into(), indices: vec![4, 4], ..good.clone() },
            tonic::Code::InvalidArgument,
        ),
        (pb::PredictRequest { request_id: "x3".into(), uncertainty: 99, ..good.clone() }, tonic::Code::InvalidArgument),
        (
            pb::PredictRequest {
                request_id: "x5".into(),
                uncertainty: pb::Uncertainty::Unspecified.into(),
                ..good.clone()
            },
            tonic::Code::InvalidArgument,
        ),
        (pb::PredictRequest { request_id: "".into(), ..good.clone() }, tonic::Code::InvalidArgument),
        (
            pb::PredictRequest { request_id: "x4".into(), federation_id: "other".into(), ..good.clone() },
            tonic::Code::PermissionDenied,
        ),
    ];
    for (req, code) in cases {
        let err = c.predict(req.clone()).await.unwrap_err();
        assert_eq!(err.code(), code, "{req:?}: {}", err.message());
    }
    let ok = c.predict(good.clone()).await.unwrap().into_inner();
    assert_eq!(ok.indices, vec![3]);
    // A retry with the same id returns the same answer, charged nothing this time.
    let again = c.predict(good).await.unwrap().into_inner();
    let replay = dpcotrain_federation::convert::answer_from_pb(ok.clone()).unwrap().as_replay();
    assert_eq!(again, dpcotrain_federation::convert::answer_to_pb(&replay));
    assert!(ok.charge.as_ref().is_some_and(|c| c.new_release && c.rho > 0.0));
    let hs = c
        .handshake(pb::HandshakeRequest {
            protocol_version: "dpcotrain.v0".into(),
            federation_id: FED.into(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    assert!(!hs.accepted && hs.reason.contains("protocol"));
    let st = c.status(pb::StatusRequest::default()).await.unwrap().into_inner();
    assert_eq!(st.spend.len(), 1);
    assert!(st.spend[0].epsilon <= 1.0 + 1e-9);
    let _ = stop.send(());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_parties_complete_a_run_over_grpc() {
    let make = || {
        let mut sc = simulate(&SimConfig {
            r: 0.9,
            masking: false,
            n_obs: 15,
            n_pool: 60,
            n_test: 60,
            seed: 8,
            ..SimConfig::default()
        })
        .unwrap();
        let mut third = sc.parties[0].clone();
        third.name = "P3".into();
        for m in [&mut third.x_train, &mut third.x_pool, &mut third.x_test] {
            *m = m.map(|v| 0.7 * v + 0.1);
        }
        sc.parties.push(third);
        build_parties(&sc, CombinerKind::Hybrid, Uncertainty::Full, &dp(), 8).unwrap()
    };
    let local = make();
    let reference = run_in_process(&local, 4).await.unwrap();
    let remote = make();
    let mut addrs = Vec::new();
    let mut stops = Vec::new();
    for p in &remote {
        let (a, s) = start(p.clone()).await;
        addrs.push(a);
        stops.push(s);
    }
    let names: Vec<String> = remote.iter().map(|p| p.lock().unwrap().name().to_string()).collect();
    let mut peers = Vec::new();
    for (i, me) in remote.iter().enumerate() {
        let v: Vec<GrpcPeer> = (0..3).filter(|j| *j != i).map(|j| peer(me, &names[j], &addrs[j])).collect();
        peers.push(v);
    }
    for round in 0..4 {
        for i in 0..3 {
            let rep = query_turn(&remote[i], &peers[i], round).await.unwrap();
            assert_eq!(rep.answered_by.len(), 2, "both peers answered");
        }
    }
    for (i, p) in remote.iter().enumerate() {
        let after = evaluate(&mut p.lock().unwrap()).unwrap();
        assert_eq!(after.rmse.to_bits(), reference.parties[i].after.rmse.to_bits(), "party {i}");
    }
    for s in stops {
        let _ = s.send(());
    }
}

fn with_budget(policy: ReleasePolicy, budget_epsilon: f64) -> Vec<Arc<Mutex<Party>>> {
    let sc =
        simulate(&SimConfig { r: 0.9, n_obs: 25, n_pool: 200, n_test: 50, seed: 4, ..SimConfig::default() }).unwrap();
    let dp = DpConfig::calibrated(1.0, 1e-5, budget_epsilon, LabelRange::new(-3.0, 3.0).unwrap(), policy);
    build_parties(&sc, CombinerKind::Noisy, Uncertainty::Marginal, &dp, 4).unwrap()
}

/// `n` concurrent Predict calls from each of `requesters`, distinct ids, overlapping indices.
async fn flood(
    addr: &str,
    agreement: &Agreement,
    requesters: &[&str],
    n: usize,
) -> Vec<(String, Result<pb::PredictResponse, tonic::Status>)> {
    let c = NodeClient::connect(addr.to_string()).await.unwrap();
    for r in requesters {
        assert!(c.clone().handshake(agreement.to_pb(r)).await.unwrap().into_inner().accepted);
    }
    let mut tasks = Vec::new();
    for r in requesters {
        for k in 0..n {
            let mut c = c.clone();
            let req = pb::PredictRequest {
                request_id: format!("{r}-{k}"),
                requester: r.to_string(),
                indices: vec![(k * 7) as u64 % 50, 60 + k as u64],
                uncertainty: pb::Uncertainty::Marginal.into(),
                want_prior: false,
                federation_id: FED.into(),
                witness: None,
            };
            let who = r.to_string();
            tasks.push(tokio::spawn(async move { (who, c.predict(req).await.map(|r| r.into_inner())) }));
        }
    }
    let mut out = Vec::new();
    for t in tasks {
        out.push(t.await.unwrap());
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flood_of_concurrent_predicts_never_overspends() {
    // Budget for exactly one release per requester: each requester is charged once, whatever
    // the interleaving, and every answer about an index carries the same released mean.
    for policy in [ReleasePolicy::ReleaseOnce, ReleasePolicy::PerQuery] {
        let ps = with_budget(policy, 1.0);
        let agreement = Agreement::of(&ps[0].lock().unwrap(), FED, 0.0, 1.0);
        let (addr, stop) = start(ps[0].clone()).await;
        let requesters = ["P2", "P3", "P4"];
        let res = flood(&addr, &agreement, &requesters, 25).await;
        let mut means = std::collections::HashMap::new();
        for (who, r) in &res {
            let a = r.as_ref().expect("all fit in the budget");
            for (i, m) in a.indices.iter().zip(&a.mean) {
                let first = *means.entry((who.clone(), *i)).or_insert(*m);
                assert_eq!(first.to_bits(), m.to_bits(), "{policy:?}: index {i} released once to {who}");
            }
        }
        let p = ps[0].lock().unwrap();
        for r in requesters {
            let l = p.ledger(r).unwrap();
            assert_eq!(l.releases.len(), 1, "{policy:?}: {r} charged once");
            assert!(l.rho_spent() <= l.rho_budget * (1.0 + 1e-9));
        }
        drop(p);
        let _ = stop.send(());
    }
    // Budget below one release: every call is refused with RESOURCE_EXHAUSTED and nothing is
    // charged or released.
    let ps = with_budget(ReleasePolicy::PerQuery, 0.5);
    let agreement = Agreement::of(&ps[0].lock().unwrap(), FED, 0.0, 1.0);
    let (addr, stop) = start(ps[0].clone()).await;
    for (_, r) in flood(&addr, &agreement, &["P2", "P3"], 20).await {
        assert_eq!(r.unwrap_err().code(), tonic::Code::ResourceExhausted);
    }
    let p = ps[0].lock().unwrap();
    for r in ["P2", "P3"] {
        assert_eq!(p.ledger(r).map(|l| l.releases.len()).unwrap_or(0), 0);
    }
    drop(p);
    let _ = stop.send(());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreachable_peer_fails_clearly_after_a_bounded_time() {
    use dpcotrain_cotrain::Peer;
    use dpcotrain_cotrain::PredictRequest;
    // A port nobody listens on.
    let addr = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        format!("http://{}", l.local_addr().unwrap())
    };
    let ps = parties();
    let me = ps[0].lock().unwrap().name().to_string();
    let retry = Retry {
        call_timeout: std::time::Duration::from_secs(1),
        first_backoff: std::time::Duration::from_millis(20),
        max_backoff: std::time::Duration::from_millis(200),
        give_up_after: std::time::Duration::from_millis(1200),
    };
    let p = GrpcPeer::new(PeerOptions {
        me: me.clone(),
        name: "gone".into(),
        address: addr.clone(),
        agreement: Agreement::of(&ps[0].lock().unwrap(), FED, 0.0, 1.0),
        token: None,
        tls: None,
        retry,
    })
    .unwrap();
    let req = PredictRequest {
        request_id: "x".into(),
        requester: me,
        indices: vec![1],
        uncertainty: Uncertainty::Marginal,
        want_prior: false,
        witness: None,
    };
    // A hang guard, not a speed target: the bound the test checks is the retry loop's own
    // account of its tries and their span (below).
    let err = tokio::time::timeout(std::time::Duration::from_secs(120), p.predict(req))
        .await
        .expect("the call gave up by itself")
        .unwrap_err()
        .to_string();
    assert!(err.contains("gone") && err.contains("still failing after"), "{err}");
    // "still failing after N tries over S s": it retried with backoff and stopped once the next
    // wait would pass give_up_after (1.2 s), so S is at least give_up_after − max_backoff (the
    // loop's own clock; no upper bound here, which only a loaded machine would test).
    let tail = err.split("still failing after ").nth(1).unwrap();
    let tries: u32 = tail.split(' ').next().unwrap().parse().unwrap();
    let span: f64 = tail.split(" over ").nth(1).unwrap().split(' ').next().unwrap().parse().unwrap();
    assert!(tries >= 3 && span >= 1.0, "{tries} tries over {span} s: {err}");
}

/// θ chosen by the DP vote: the same numbers over gRPC as in process, and the vote's charge is
/// the first entry of each requester's ledger, visible in `status`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn theta_vote_over_grpc_equals_in_process_and_status_shows_its_charge() {
    use dpcotrain_cotrain::party::THETA_SELECTION_ID;
    use dpcotrain_cotrain::{PublicTheta, ThetaPolicy};
    let build = || {
        let sc = simulate(&SimConfig { r: 0.9, n_obs: 80, n_pool: 120, n_test: 100, seed: 4, ..SimConfig::default() })
            .unwrap();
        let dp = DpConfig {
            theta: ThetaPolicy::Selected { default: PublicTheta::default(), mu: 0.5 },
            ..DpConfig::honest(1.0, 1e-5, 3.0, LabelRange::new(-3.0, 3.0).unwrap(), 5)
        };
        build_parties(&sc, CombinerKind::Noisy, Uncertainty::Marginal, &dp, 4).unwrap()
    };
    let reference = run_in_process(&build(), 2).await.unwrap();
    let remote = build();
    let (addr_a, stop_a) = start(remote[0].clone()).await;
    let (addr_b, stop_b) = start(remote[1].clone()).await;
    let name_a = remote[0].lock().unwrap().name().to_string();
    let name_b = remote[1].lock().unwrap().name().to_string();
    let peer_of_a = vec![peer(&remote[0], &name_b, &addr_b)];
    let peer_of_b = vec![peer(&remote[1], &name_a, &addr_a)];
    for round in 0..2 {
        query_turn(&remote[0], &peer_of_a, round).await.unwrap();
        query_turn(&remote[1], &peer_of_b, round).await.unwrap();
    }
    for (i, p) in remote.iter().enumerate() {
        let after = evaluate(&mut p.lock().unwrap()).unwrap();
        assert_eq!(after.rmse.to_bits(), reference.parties[i].after.rmse.to_bits(), "party {i}");
    }
    let mut c = NodeClient::connect(addr_a.clone()).await.unwrap();
    let st = c.status(pb::StatusRequest::default()).await.unwrap().into_inner();
    let spend = st.spend.iter().find(|s| s.peer == name_b).expect("B asked A");
    let first = &spend.release_log[0];
    assert_eq!(first.id, THETA_SELECTION_ID);
    assert!((first.rho - 0.5 * 0.5 / 2.0).abs() < 1e-12, "ρ of the vote {}", first.rho);
    assert_eq!(spend.release_log.iter().filter(|r| r.id == THETA_SELECTION_ID).count(), 1);
    assert!(spend.release_log.len() >= 2, "the vote and at least one batch");
    let _ = stop_a.send(());
    let _ = stop_b.send(());
}
