//! Driving rounds across running nodes (`dpcotrain run`). The orchestrator sees no data: it
//! asks each node for its status and to run its querier turn. A node that is down is retried
//! with backoff (a restarted node resumes from its saved state); `RunRound` is idempotent by
//! round number, so a retry after a lost reply never runs a turn twice.

use crate::auth::request;
use crate::pb;
use crate::peer::{Retry, channel};
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
}

impl Orchestrator {
    /// `nodes`: (name, address, orchestrator token, TLS verifying the node's name).
    pub fn new(
        nodes: Vec<(String, String, Option<String>, Option<ClientTlsConfig>)>,
        retry: Retry,
    ) -> Result<Self, String> {
        let mut out = Vec::new();
        for (name, address, token, tls) in nodes {
            let ch = channel(&address, tls.as_ref(), &retry)?;
            let client = pb::node_client::NodeClient::new(ch).max_decoding_message_size(crate::MAX_MESSAGE_BYTES);
            out.push(NodeHandle { name, address, token, client });
        }
        Ok(Orchestrator { nodes: out, retry, federation_id: None })
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
        match request(pb::StatusRequest {}, n.token.as_deref(), Duration::from_secs(5)) {
            Ok(req) => c.status(req).await.is_ok(),
            Err(_) => false,
        }
    }

    /// A node's status, whoever it is.
    pub async fn status_unchecked(&self, i: usize) -> Result<pb::StatusResponse, String> {
        let n = &self.nodes[i];
        self.retry
            .run(&format!("status of {} at {}", n.name, n.address), || {
                let mut c = n.client.clone();
                let req = request(pb::StatusRequest {}, n.token.as_deref(), self.retry.call_timeout);
                async move { c.status(req.map_err(Status::invalid_argument)?).await.map(|r| r.into_inner()) }
            })
            .await
            .map_err(|s| format!("{} ({}): {:?}: {}", n.name, n.address, s.code(), s.message()))
    }

    /// Ask node `i` to take its turn in `round`.
    pub async fn run_round(&self, i: usize, round: u32) -> Result<pb::RunRoundResponse, String> {
        let n = &self.nodes[i];
        self.retry
            .run(&format!("round {round} on {}", n.name), || {
                let mut c = n.client.clone();
                let req = request(pb::RunRoundRequest { round }, n.token.as_deref(), self.retry.call_timeout);
                async move { c.run_round(req.map_err(Status::invalid_argument)?).await.map(|r| r.into_inner()) }
            })
            .await
            .map_err(|s| format!("round {round} on {} ({}): {:?}: {}", n.name, n.address, s.code(), s.message()))
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
