//! The operations endpoint: `GET /metrics` counts RPCs by method and code and shows ε spent per
//! requester, and the standard gRPC health service answers SERVING — on one plaintext port.

mod common;

use dpcotrain_cotrain::CombinerKind;
use dpcotrain_cotrain::Uncertainty;
use dpcotrain_cotrain::build_parties;
use dpcotrain_cotrain::{DpConfig, Party};
use dpcotrain_cotrain::{SimConfig, simulate};
use dpcotrain_federation::pb::node_client::NodeClient;
use dpcotrain_federation::{Agreement, NodeService, pb};
use dpcotrain_privacy::LabelRange;
use std::sync::{Arc, Mutex};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tonic_health::pb::health_check_response::ServingStatus;
use tonic_health::pb::health_client::HealthClient;

const FED: &str = "ops";

fn party() -> Arc<Mutex<Party>> {
    let sc = simulate(&SimConfig { n_obs: 20, n_pool: 40, n_test: 20, seed: 5, ..SimConfig::default() }).unwrap();
    let dp = DpConfig::honest(1.0, 1e-5, 2.0, LabelRange::new(-3.0, 3.0).unwrap(), 5);
    build_parties(&sc, CombinerKind::Noisy, Uncertainty::Marginal, &dp, 5).unwrap().remove(0)
}

/// One plain HTTP/1.1 GET; returns (status line, body).
async fn http_get(addr: std::net::SocketAddr, path: &str) -> (String, String) {
    let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
    s.write_all(format!("GET {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n").as_bytes())
        .await
        .unwrap();
    let mut raw = String::new();
    s.read_to_string(&mut raw).await.unwrap();
    let (head, body) = raw.split_once("\r\n\r\n").unwrap_or((&raw, ""));
    (head.lines().next().unwrap_or("").to_string(), body.to_string())
}

/// The value of the sample line that starts with `series` (name and labels, exactly).
fn sample(text: &str, series: &str) -> Option<f64> {
    text.lines().find_map(|l| l.strip_prefix(series).and_then(|v| v.trim().parse().ok()))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_count_rpcs_and_spend_and_health_answers() {
    let p = party();
    let agreement = Agreement::of(&p.lock().unwrap(), FED, 0.0, 1.0);
    let svc = NodeService::new(p.clone(), FED);
    let ops_listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let ops_addr = ops_listener.local_addr().unwrap();
    let (ops_stop, ops_rx) = tokio::sync::oneshot::channel::<()>();
    let ops = tokio::spawn(dpcotrain_federation::ops::serve_ops(svc.clone(), ops_listener, async {
        let _ = ops_rx.await;
    }));
    let (addr, stop) = common::start_service(svc).await;

    // Before any RPC: the endpoint answers, nothing counted, nothing spent.
    let (status, body) = http_get(ops_addr, "/metrics").await;
    assert!(status.contains("200"), "{status}");
    assert_eq!(sample(&body, r#"dpcotrain_rpc_total{method="Predict",code="Ok"}"#), None, "{body}");

    let mut c = NodeClient::connect(addr).await.unwrap();
    assert!(c.handshake(agreement.to_pb("P2")).await.unwrap().into_inner().accepted);
    let ask = |id: &str, indices: Vec<u64>| pb::PredictRequest {
        request_id: id.into(),
        requester: "P2".into(),
        indices,
        uncertainty: pb::Uncertainty::Marginal.into(),
        want_prior: true,
        federation_id: FED.into(),
        witness: None,
    };
    c.predict(ask("r1", vec![1, 2, 3])).await.unwrap();
    // A malformed request (index outside the pool) is counted under its code.
    let err = c.predict(ask("r2", vec![100_000])).await.unwrap_err();
    assert_eq!(err.code(), tonic::Code::InvalidArgument);
    c.status(pb::StatusRequest::default()).await.unwrap();

    let (_, body) = http_get(ops_addr, "/metrics").await;
    assert_eq!(sample(&body, r#"dpcotrain_rpc_total{method="Handshake",code="Ok"}"#), Some(1.0), "{body}");
    assert_eq!(sample(&body, r#"dpcotrain_rpc_total{method="Predict",code="Ok"}"#), Some(1.0), "{body}");
    assert_eq!(sample(&body, r#"dpcotrain_rpc_total{method="Predict",code="InvalidArgument"}"#), Some(1.0));
    assert_eq!(sample(&body, r#"dpcotrain_rpc_total{method="Status",code="Ok"}"#), Some(1.0));
    assert_eq!(sample(&body, r#"dpcotrain_rpc_duration_seconds_count{method="Predict"}"#), Some(2.0), "{body}");
    let eps = sample(&body, r#"dpcotrain_epsilon_spent{requester="P2"}"#)
        .unwrap_or_else(|| panic!("no ε series for P2:\n{body}"));
    let ledger_eps = p.lock().unwrap().ledger("P2").unwrap().epsilon_spent();
    assert!(eps > 0.0 && (eps - ledger_eps).abs() < 1e-12, "metrics ε {eps} vs ledger {ledger_eps}");
    assert!(sample(&body, "dpcotrain_model_version").is_some(), "{body}");
    // Nothing but counts, latencies, spend and versions leaves through this port.
    let families = [
        "dpcotrain_rpc_",
        "dpcotrain_epsilon_spent",
        "dpcotrain_rho_spent",
        "dpcotrain_model_version",
        "dpcotrain_turns",
    ];
    for line in body.lines().filter(|l| !l.starts_with('#') && !l.trim().is_empty()) {
        assert!(families.iter().any(|f| line.starts_with(f)), "unexpected series {line:?}");
    }

    // gRPC health (h2c) on the same port, for the whole server and for the node service.
    let channel =
        tonic::transport::Channel::from_shared(format!("http://{ops_addr}")).unwrap().connect().await.unwrap();
    let mut h = HealthClient::new(channel);
    for service in ["", "dpcotrain.v2.Node"] {
        let r = h
            .check(tonic_health::pb::HealthCheckRequest { service: service.into() })
            .await
            .unwrap_or_else(|e| panic!("health of {service:?}: {e}"))
            .into_inner();
        assert_eq!(r.status(), ServingStatus::Serving, "{service:?}");
    }
    let _ = stop.send(());
    let _ = ops_stop.send(());
    ops.await.unwrap().unwrap();
}
