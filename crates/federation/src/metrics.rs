//! What a node counts and logs about its RPCs: the Prometheus [`Metrics`] (counts, latencies,
//! ε spent per requester, the model version) (one structured line per RPC is [`crate::trace`]'s).
//! Nothing private is recorded — never labels, covariates or released values. The operations
//! endpoint ([`crate::ops`]) serves the metrics; the auth layer and the handlers record into
//! them.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;
use std::sync::atomic::AtomicU64;

/// At most this many requesters get their own ε series (the rest are summed in `other`): in an
/// insecure development node a requester name is whatever a client claims, and a metrics
/// endpoint must not grow without bound.
pub(crate) const MAX_REQUESTER_SERIES: usize = 64;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RpcLabels {
    method: String,
    code: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct MethodLabels {
    method: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RequesterLabels {
    requester: String,
}

fn latency_histogram() -> Histogram {
    // 1 ms … ~16 s in factors of 4 (a Predict answers in milliseconds, a RunRound re-fits).
    Histogram::new(exponential_buckets(0.001, 4.0, 8))
}

/// A node's metrics (shared by the RPC handlers and the metrics endpoint).
pub struct Metrics {
    registry: Registry,
    rpcs: Family<RpcLabels, Counter>,
    latency: Family<MethodLabels, Histogram, fn() -> Histogram>,
    epsilon: Family<RequesterLabels, Gauge<f64, AtomicU64>>,
    rho: Family<RequesterLabels, Gauge<f64, AtomicU64>>,
    model_version: Gauge,
    turns: Gauge,
}

impl std::fmt::Debug for Metrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Metrics")
    }
}

impl Default for Metrics {
    fn default() -> Self {
        let mut registry = Registry::with_prefix("dpcotrain");
        let rpcs = Family::<RpcLabels, Counter>::default();
        let latency = Family::<MethodLabels, Histogram, fn() -> Histogram>::new_with_constructor(latency_histogram);
        let epsilon = Family::<RequesterLabels, Gauge<f64, AtomicU64>>::default();
        let rho = Family::<RequesterLabels, Gauge<f64, AtomicU64>>::default();
        let model_version = Gauge::default();
        let turns = Gauge::default();
        registry.register("rpc", "RPCs answered, by method and gRPC status code", rpcs.clone());
        registry.register("rpc_duration_seconds", "RPC latency by method", latency.clone());
        registry.register(
            "epsilon_spent",
            "ε spent on this party's labels per requester (δ of the node's privacy config)",
            epsilon.clone(),
        );
        registry.register("rho_spent", "zCDP ρ spent on this party's labels per requester", rho.clone());
        registry.register("model_version", "Version of the co-trained local model", model_version.clone());
        registry.register("turns", "Querier turns recorded", turns.clone());
        Metrics { registry, rpcs, latency, epsilon, rho, model_version, turns }
    }
}

/// RPCs whose latency is not published: it depends on the private labels.
const LABEL_TIMED: [&str; 1] = ["RunRound"];

impl Metrics {
    /// Count an RPC by method and outcome and, unless its time depends on the labels, observe
    /// its latency.
    pub fn record_rpc(&self, method: &str, code: tonic::Code, seconds: f64) {
        let code = format!("{code:?}");
        self.rpcs.get_or_create(&RpcLabels { method: method.into(), code }).inc();
        // A turn's time includes its re-fit, whose iterations depend on the private labels: it
        // is not published on this unauthenticated port (the node's own log keeps it).
        if !LABEL_TIMED.contains(&method) {
            self.latency.get_or_create(&MethodLabels { method: method.into() }).observe(seconds);
        }
    }

    /// Refresh the gauges read from the party (spend per requester, model version, turns).
    pub fn observe_party(&self, p: &dpcotrain_cotrain::party::Party) {
        let mut names = p.requesters();
        names.sort();
        let (mut other_eps, mut other_rho, mut others) = (0.0, 0.0, false);
        for (k, name) in names.iter().enumerate() {
            let Some(l) = p.ledger(name) else { continue };
            let (eps, rho) = (l.epsilon_spent(), l.rho_spent());
            if k < MAX_REQUESTER_SERIES {
                // Names are authenticated principals under mutual TLS; cut at 64 characters all
                // the same (the exposition format escapes the rest).
                let labels = RequesterLabels { requester: name.chars().take(64).collect() };
                self.epsilon.get_or_create(&labels).set(eps);
                self.rho.get_or_create(&labels).set(rho);
            } else {
                (other_eps, other_rho, others) = (other_eps + eps, other_rho + rho, true);
            }
        }
        if others {
            let labels = RequesterLabels { requester: "other".into() };
            self.epsilon.get_or_create(&labels).set(other_eps);
            self.rho.get_or_create(&labels).set(other_rho);
        }
        self.model_version.set(p.model().version() as i64);
        self.turns.set(p.turns().len() as i64);
    }

    /// The Prometheus text exposition of every metric.
    pub fn encode(&self) -> String {
        let mut out = String::new();
        // Writing into a String cannot fail.
        let _ = prometheus_client::encoding::text::encode(&mut out, &self.registry);
        out
    }
}
