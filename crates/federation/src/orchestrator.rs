//! Driving rounds across running nodes (`dpcotrain run`). The orchestrator sees no data: it
//! asks each node for its status and to run its querier turn. A node that is down is retried
//! with backoff (a restarted node resumes from its saved state); `RunRound` is idempotent by
//! round number, so a retry after a lost reply never runs a turn twice.
//!
//! The orchestrator witnesses each node's state: it keeps the head receipt a node's `Status`
//! returns (its state chain's entry number and ledger totals, signed by the node;
//! [`crate::receipt`]) in a file beside the federation config, and shows it back with the next
//! `Status`. A node restored from an older copy of its files is behind it, refuses with
//! `DATA_LOSS` and stops releasing to anyone until the spend is adopted.

use crate::auth::request;
use crate::durable::{Access, write_atomic};
use crate::peer::{Retry, channel};
use crate::{convert, pb};
use dpcotrain_cotrain::Receipt;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::Duration;
use tonic::Status;
use tonic::transport::{Channel, ClientTlsConfig};

/// One node as the orchestrator knows it.
#[derive(Clone)]
pub struct NodeHandle {
    pub name: String,
    pub address: String,
    token: Option<String>,
    client: pb::node_client::NodeClient<Channel>,
}

pub struct Orchestrator {
    pub nodes: Vec<NodeHandle>,
    pub retry: Retry,
    /// When set, a node serving another federation is refused.
    pub federation_id: Option<String>,
    /// The latest head receipt of each node, and the file that keeps them between runs.
    receipts: Mutex<BTreeMap<String, Receipt>>,
    receipts_file: Option<PathBuf>,
}

impl Orchestrator {
    /// `nodes`: (name, address, orchestrator token, TLS verifying the node's name).
    pub fn new(
        nodes: Vec<(String, String, Option<String>, Option<ClientTlsConfig>)>,
        retry: Retry,
    ) -> Result<Self, String> {
        let mut out = Vec::new();
        for (name, address, token, tls) in nodes {
            let ch = channel(&address, tls.as_ref(), &retry).map_err(|e| e.to_string())?;
            let client = pb::node_client::NodeClient::new(ch).max_decoding_message_size(crate::MAX_MESSAGE_BYTES);
            out.push(NodeHandle { name, address, token, client });
        }
        Ok(Orchestrator {
            nodes: out,
            retry,
            federation_id: None,
            receipts: Mutex::new(BTreeMap::new()),
            receipts_file: None,
        })
    }

    /// Keep the nodes' head receipts in `path` (read now if it exists; written, atomically,
    /// whenever a node returns a newer one).
    pub fn with_receipts_file(mut self, path: &Path) -> Result<Self, String> {
        let map = match std::fs::read(path) {
            Ok(b) => serde_json::from_slice(&b).map_err(|e| format!("{}: {e}", path.display()))?,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => BTreeMap::new(),
            Err(e) => return Err(format!("{}: {e}", path.display())),
        };
        self.receipts = Mutex::new(map);
        self.receipts_file = Some(path.to_path_buf());
        Ok(self)
    }

    /// The head receipt held for node `name`.
    pub fn receipt(&self, name: &str) -> Option<Receipt> {
        self.receipts.lock().unwrap_or_else(|e| e.into_inner()).get(name).cloned()
    }

    fn keep_receipt(&self, name: &str, head: Option<&pb::Receipt>) -> Result<(), String> {
        let Some(head) = head else { return Ok(()) };
        let r = convert::receipt_from_pb(head).map_err(|e| format!("{name}: {e}"))?;
        let mut map = self.receipts.lock().unwrap_or_else(|e| e.into_inner());
        if map.get(name) == Some(&r) {
            return Ok(());
        }
        map.insert(name.to_string(), r);
        if let Some(path) = &self.receipts_file {
            let bytes = serde_json::to_vec_pretty(&*map).map_err(|e| e.to_string())?;
            write_atomic(path, &bytes, Access::Public).map_err(|e| format!("{}: {e}", path.display()))?;
        }
        Ok(())
    }

    /// A node's status (retried while it is unreachable); checks it is the party we think.
    pub async fn status(&self, i: usize) -> Result<pb::StatusResponse, String> {
        let st = self.status_unchecked(i).await?;
        let n = &self.nodes[i];
        if st.party != n.name {
            return Err(format!("the node at {} is party {:?}, not {:?}", n.address, st.party, n.name));
        }
        if let Some(f) = &self.federation_id
            && &st.federation_id != f
        {
            return Err(format!(
                "{} ({}) serves federation {:?}, not {f:?}: refusing to drive it",
                n.name, n.address, st.federation_id
            ));
        }
        Ok(st)
    }

    /// Whether node `i` answers Status right now (one attempt, no retries).
    pub async fn reachable(&self, i: usize) -> bool {
        let n = &self.nodes[i];
        let mut c = n.client.clone();
        match request(pb::StatusRequest { witness: None }, n.token.as_deref(), Duration::from_secs(5)) {
            Ok(req) => c.status(req).await.is_ok(),
            Err(_) => false,
        }
    }

    /// A node's status, whoever it is.
    pub async fn status_unchecked(&self, i: usize) -> Result<pb::StatusResponse, String> {
        let n = &self.nodes[i];
        let witness = self.receipt(&n.name).as_ref().map(convert::receipt_to_pb);
        let st = self
            .retry
            .run(&format!("status of {} at {}", n.name, n.address), || {
                let mut c = n.client.clone();
                let req = request(
                    pb::StatusRequest { witness: witness.clone() },
                    n.token.as_deref(),
                    self.retry.call_timeout,
                );
                async move { c.status(req.map_err(Status::invalid_argument)?).await.map(|r| r.into_inner()) }
            })
            .await
            .map_err(|s| format!("{} ({}): {:?}: {}", n.name, n.address, s.code(), s.message()))?;
        if st.party == n.name {
            self.keep_receipt(&n.name, st.head.as_ref())?;
        }
        Ok(st)
    }

    /// Ask node `i` to take its turn in `round`.
    /// Run `round` on node `i`; a failure keeps its gRPC code (whether running again can help).
    pub async fn run_round(&self, i: usize, round: u32) -> Result<pb::RunRoundResponse, RoundFailure> {
        let n = &self.nodes[i];
        self.retry
            .run(&format!("round {round} on {}", n.name), || {
                let mut c = n.client.clone();
                let req = request(pb::RunRoundRequest { round }, n.token.as_deref(), self.retry.call_timeout);
                async move { c.run_round(req.map_err(Status::invalid_argument)?).await.map(|r| r.into_inner()) }
            })
            .await
            .map_err(|s| RoundFailure {
                code: s.code(),
                text: format!("round {round} on {} ({}): {:?}: {}", n.name, n.address, s.code(), s.message()),
            })
    }
}

/// A round a node did not complete: its gRPC code and the whole message.
#[derive(Debug, Clone)]
pub struct RoundFailure {
    pub code: tonic::Code,
    pub text: String,
}

impl RoundFailure {
    /// Whether running the same command again can succeed (a node or peer down, a full disk,
    /// a deadline), as opposed to a disagreement in the configurations, which it cannot fix.
    pub fn is_transient(&self) -> bool {
        use tonic::Code;
        matches!(
            self.code,
            Code::Unavailable
                | Code::DeadlineExceeded
                | Code::Internal
                | Code::DataLoss
                | Code::ResourceExhausted
                | Code::Aborted
                | Code::Unknown
                | Code::Cancelled
        )
    }
}

impl std::fmt::Display for RoundFailure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.text)
    }
}

/// The orchestrator's default policy: a node's turn may itself wait for an unreachable peer
/// (30 s), so calls get a longer deadline, and a node that is down is waited for up to 2 min.
pub fn orchestrator_retry() -> Retry {
    Retry {
        call_timeout: Duration::from_secs(300),
        first_backoff: Duration::from_millis(100),
        max_backoff: Duration::from_secs(2),
        give_up_after: Duration::from_secs(120),
    }
}

#[cfg(test)]
mod round_failure_tests {
    use super::RoundFailure;
    use tonic::Code;

    #[test]
    fn only_failures_that_can_pass_are_transient() {
        let f = |code| RoundFailure { code, text: String::new() };
        for c in [Code::Unavailable, Code::DeadlineExceeded, Code::Internal, Code::DataLoss, Code::ResourceExhausted] {
            assert!(f(c).is_transient(), "{c:?}");
        }
        for c in [Code::FailedPrecondition, Code::InvalidArgument, Code::PermissionDenied, Code::Unauthenticated] {
            assert!(!f(c).is_transient(), "{c:?}");
        }
    }
}
