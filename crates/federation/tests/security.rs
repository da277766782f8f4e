//! Mutual TLS + per-peer bearer tokens on a real node (loopback): only peers named in the
//! node's configuration get through, each only in its own name; the orchestrator may drive
//! rounds but not ask for predictions; unauthenticated callers are refused.

use dpcotrain_cotrain::CombinerKind;
use dpcotrain_cotrain::Uncertainty;
use dpcotrain_cotrain::build_parties;
use dpcotrain_cotrain::{DpConfig, Party};
use dpcotrain_cotrain::{SimConfig, simulate};
use dpcotrain_federation::auth::{Auth, ORCHESTRATOR, request};
use dpcotrain_federation::pb::node_client::NodeClient;
use dpcotrain_federation::peer::channel;
use dpcotrain_federation::tls::{NodeTls, ensure_dev_pki};
use dpcotrain_federation::{Agreement, NodeService, Retry, pb, serve};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tonic::Code;
use tonic::transport::Channel;

const FED: &str = "sec";

thread_local! {
    /// This test's own temporary directory (each test runs on its own thread), removed when
    /// the test's thread ends.
    static TEST_DIR: tempfile::TempDir = tempfile::tempdir().expect("temporary directory");
}

/// A fresh path `name` inside this test's own temporary directory.
fn test_dir(name: &str) -> PathBuf {
    TEST_DIR.with(|d| d.path().join(name))
}

fn tmp(tag: &str) -> PathBuf {
    test_dir(&format!("sec-{tag}"))
}

fn party() -> Arc<Mutex<Party>> {
    let sc = simulate(&SimConfig { n_obs: 20, n_pool: 40, n_test: 20, seed: 2, ..SimConfig::default() }).unwrap();
    build_parties(&sc, CombinerKind::Noisy, Uncertainty::Marginal, &DpConfig::off(), 2).unwrap().remove(0)
}

fn tok(c: char) -> String {
    c.to_string().repeat(32)
}

fn client(dir: &Path, me: &str, addr: &str) -> NodeClient<Channel> {
    let tls = NodeTls::dev(dir, me).client_config("A").unwrap();
    NodeClient::new(channel(addr, Some(&tls), &Retry::default()).unwrap())
}

fn req<T>(msg: T, token: Option<&str>) -> tonic::Request<T> {
    request(msg, token, Duration::from_secs(20)).unwrap()
}

fn predict(requester: &str) -> pb::PredictRequest {
    pb::PredictRequest {
        request_id: format!("{requester}-1"),
        requester: requester.into(),
        indices: vec![1, 2],
        uncertainty: pb::Uncertainty::Marginal.into(),
        want_prior: false,
        federation_id: FED.into(),
        witness: None,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_named_authenticated_peers_get_answers() {
    let dir = tmp("pki");
    let names: Vec<String> = ["A", "B", "C", "D", ORCHESTRATOR].iter().map(|s| s.to_string()).collect();
    ensure_dev_pki(&dir, &names, &["localhost".into(), "127.0.0.1".into()]).unwrap();
    // A rogue CA that also issued a certificate named "B".
    let rogue = tmp("rogue");
    ensure_dev_pki(&rogue, &["B".to_string()], &["localhost".into()]).unwrap();

    // Node A knows peers B and C (not D) and the orchestrator.
    let p = party();
    let agreement = Agreement::of(&p.lock().unwrap(), FED, 0.0, 1.0);
    let auth =
        Auth::tokens(vec![(tok('b'), "B".into()), (tok('c'), "C".into()), (tok('o'), ORCHESTRATOR.into())], true)
            .unwrap();
    let svc = NodeService::new(p, FED).with_auth(auth);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = format!("https://{}", listener.local_addr().unwrap());
    let (stop, rx) = tokio::sync::oneshot::channel::<()>();
    let tls = NodeTls::dev(&dir, "A").server_config().unwrap();
    tokio::spawn(serve(svc, listener, Some(tls), async {
        let _ = rx.await;
    }));

    // B, properly authenticated, handshakes and gets an answer in its own name.
    let mut b = client(&dir, "B", &addr);
    let hs = b.handshake(req(agreement.to_pb("B"), Some(&tok('b')))).await.unwrap().into_inner();
    assert!(hs.accepted, "{}", hs.reason);
    let ans = b.predict(req(predict("B"), Some(&tok('b')))).await.unwrap().into_inner();
    assert_eq!(ans.indices, vec![1, 2]);

    let code = |r: Result<tonic::Response<pb::PredictResponse>, tonic::Status>| r.map(|_| ()).unwrap_err().code();
    // ... but not in C's name (C would be charged, or get a fresh budget).
    assert_eq!(code(b.predict(req(predict("C"), Some(&tok('b')))).await), Code::PermissionDenied);
    // No token, or C's token with B's certificate: refused.
    assert_eq!(code(b.predict(req(predict("B"), None)).await), Code::Unauthenticated);
    assert_eq!(code(b.predict(req(predict("C"), Some(&tok('c')))).await), Code::Unauthenticated);
    // A peer cannot drive rounds.
    let e = b.run_round(req(pb::RunRoundRequest { round: 0 }, Some(&tok('b')))).await.unwrap_err();
    assert_eq!(e.code(), Code::PermissionDenied);

    // D has a certificate from the federation CA but is not one of A's peers: no token works.
    let mut d = client(&dir, "D", &addr);
    assert_eq!(code(d.predict(req(predict("D"), Some(&tok('d')))).await), Code::Unauthenticated);
    assert_eq!(code(d.predict(req(predict("D"), Some(&tok('b')))).await), Code::Unauthenticated);

    // A certificate named B from another CA, or no client certificate at all: the TLS
    // handshake fails, the service is never reached.
    let mut r = client(&rogue, "B", &addr);
    assert!(r.predict(req(predict("B"), Some(&tok('b')))).await.is_err());
    let ca = tonic::transport::Certificate::from_pem(std::fs::read(dir.join("ca.pem")).unwrap());
    let anon = tonic::transport::ClientTlsConfig::new().ca_certificate(ca).domain_name("A");
    let mut n = NodeClient::new(channel(&addr, Some(&anon), &Retry::default()).unwrap());
    assert!(n.predict(req(predict("B"), Some(&tok('b')))).await.is_err());
    // Plaintext to a TLS node fails too.
    let mut plain = NodeClient::new(channel(&addr.replace("https", "http"), None, &Retry::default()).unwrap());
    assert!(plain.predict(req(predict("B"), Some(&tok('b')))).await.is_err());

    // The orchestrator may drive rounds and read status, but not ask for predictions.
    let mut o = client(&dir, ORCHESTRATOR, &addr);
    assert_eq!(code(o.predict(req(predict(ORCHESTRATOR), Some(&tok('o')))).await), Code::PermissionDenied);
    let st = o.status(req(pb::StatusRequest::default(), Some(&tok('o')))).await.unwrap().into_inner();
    assert_eq!(st.party, "P1");
    // Label-dependent figures only if the node shares them (off here, as by default):
    // crates/federation/tests/orchestrator_view.rs.
    assert!(!st.restricted && st.test_rmse.is_none(), "the orchestrator sees the node's test RMSE unasked");
    assert!(st.test_rmse_mean_baseline.is_none() && st.labels_clipped.is_none(), "{st:?}");
    // A peer may read status, but sees only its own spend and no test RMSE (computed on the
    // node's private test labels).
    let sb = b.status(req(pb::StatusRequest::default(), Some(&tok('b')))).await.unwrap().into_inner();
    assert!(sb.restricted);
    assert_eq!((sb.test_rmse, sb.test_rmse_alone, sb.rmse_change_se), (None, None, None));
    assert_eq!((sb.test_rmse_mean_baseline, sb.labels_clipped), (None, None), "label-dependent: not for a peer");
    assert!(sb.spend.iter().all(|s| s.peer == "B"), "{:?}", sb.spend);
    let rr = o.run_round(req(pb::RunRoundRequest { round: 0 }, Some(&tok('o')))).await.unwrap().into_inner();
    assert!(rr.index.is_some() && rr.answered_by.is_empty(), "no peers configured: asked nobody");
    assert_eq!(rr.test_rmse, None);

    // The node is still up and B still gets the same (cached) answer.
    let again = b.predict(req(predict("B"), Some(&tok('b')))).await.unwrap().into_inner();
    assert_eq!(again, ans);
    let _ = stop.send(());
    let _ = std::fs::remove_dir_all(&dir);
    let _ = std::fs::remove_dir_all(&rogue);
}
