//! The operations endpoint of a node: Prometheus metrics and the standard gRPC health service
//! (`grpc.health.v1.Health`, from `tonic-health`), served together on their own **plaintext**
//! port. Kubernetes' gRPC and HTTP probes cannot present the node's client certificate, so they
//! cannot reach the mutual-TLS port; nothing private is served here (counts, latencies, ε spent
//! per requester and the model version — never labels, covariates or released values).
//!
//! One port speaks both protocols: HTTP/1.1 `GET /metrics` (Prometheus text format) and HTTP/2
//! (h2c) gRPC health checks, through axum's server (already in the tree through tonic).

use crate::pb::node_server::NodeServer;
use crate::server::NodeService;
use axum::extract::State;
use axum::http::header::CONTENT_TYPE;
use axum::response::IntoResponse;
use std::future::Future;
use tokio::net::TcpListener;

async fn metrics_handler(State(service): State<NodeService>) -> impl IntoResponse {
    // Never wait for the party: a turn may hold it for seconds while it re-fits. When it is
    // busy the gauges keep their last values.
    if let Ok(p) = service.party.try_lock() {
        service.metrics().observe_party(&p);
    }
    ([(CONTENT_TYPE, "text/plain; version=0.0.4; charset=utf-8")], service.metrics().encode())
}

/// Serve the operations endpoint of `service` on `listener` until `shutdown` resolves: `GET
/// /metrics` and the gRPC health service, which reports SERVING for the whole server ("") and
/// for `dpcotrain.v2.Node`.
pub async fn serve_ops(
    service: NodeService,
    listener: TcpListener,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let (reporter, health) = tonic_health::server::health_reporter();
    reporter.set_serving::<NodeServer<NodeService>>().await;
    let app = tonic::service::Routes::new(health)
        .into_axum_router()
        .route("/metrics", axum::routing::get(metrics_handler).with_state(service));
    // Connections under limits: per address, first bytes, idle, lifetime (crate::conn_limits).
    let listener = crate::conn_limits::GuardedListener::new(listener, crate::conn_limits::ConnLimits::OPS);
    axum::serve(listener, app).with_graceful_shutdown(shutdown).await
}
