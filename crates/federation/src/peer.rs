//! [`GrpcPeer`]: a peer reached over gRPC, implementing the co-training `Peer` trait.
//!
//! The channel connects lazily, so a peer may start after us. Before its first Predict the
//! peer handshakes (and again whenever the node answers `FAILED_PRECONDITION`, e.g. after a
//! restart). Transient failures (unavailable, deadline exceeded) are retried with exponential
//! backoff and jitter under the *same* request id — the node returns the same answer for a
//! retried id, with no new noise and no new charge — until [`Retry::give_up_after`], then a
//! clear error. Permanent failures (refused handshake, unauthenticated, budget exhausted,
//! invalid request) are not retried.

use crate::agreement::Agreement;
use crate::auth::request;
use crate::{convert, pb};
use dpcotrain_cotrain::CotrainError;
use dpcotrain_cotrain::Peer;
use dpcotrain_cotrain::error::{PeerFault, RemoteCode};
use dpcotrain_cotrain::{Answer, PredictRequest};
use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};
use tonic::transport::{Channel, ClientTlsConfig, Endpoint};
use tonic::{Code, Status};

/// Retry and deadline policy of outgoing calls.
#[derive(Debug, Clone, Copy)]
pub struct Retry {
    /// Deadline of one call.
    pub call_timeout: Duration,
    /// First backoff; doubles up to `max_backoff`.
    pub first_backoff: Duration,
    pub max_backoff: Duration,
    /// Stop retrying after this long and report the peer unreachable.
    pub give_up_after: Duration,
}

impl Default for Retry {
    fn default() -> Self {
        Retry {
            call_timeout: Duration::from_secs(60),
            first_backoff: Duration::from_millis(50),
            max_backoff: Duration::from_secs(2),
            give_up_after: Duration::from_secs(30),
        }
    }
}

impl Retry {
    /// Run `call` until it succeeds, fails permanently, or the time is up.
    pub async fn run<T, F, Fut>(&self, what: &str, mut call: F) -> Result<T, Status>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = Result<T, Status>>,
    {
        let start = Instant::now();
        let mut backoff = self.first_backoff;
        let mut tries = 0u32;
        let mut warned = WarnEvery::new(WARN_EVERY);
        loop {
            tries += 1;
            match call().await {
                Ok(v) => return Ok(v),
                Err(s) if is_transient(&s) && start.elapsed() + backoff < self.give_up_after => {
                    if warned.due(start.elapsed()) {
                        tracing::warn!(
                            "{what}: try {tries} failed ({:?}: {}); retrying for up to {:.0} s more{}",
                            s.code(),
                            s.message(),
                            (self.give_up_after.saturating_sub(start.elapsed())).as_secs_f64(),
                            not_running_hint(&s)
                        );
                    }
                    // ±25 % jitter so retrying peers do not stampede together.
                    let j = 0.75 + 0.5 * rand::random::<f64>();
                    tokio::time::sleep(backoff.mul_f64(j)).await;
                    backoff = (backoff * 2).min(self.max_backoff);
                }
                Err(s) if is_transient(&s) => {
                    return Err(Status::new(
                        s.code(),
                        format!(
                            "{what}: still failing after {tries} tries over {:.1} s: {}{}",
                            start.elapsed().as_secs_f64(),
                            s.message(),
                            not_running_hint(&s)
                        ),
                    ));
                }
                Err(s) => return Err(s),
            }
        }
    }
}

/// How often a retry loop says it is still failing: the first failure at once, then one line
/// per interval (a node that is down for the whole 120 s wait gives 6 lines, not 64).
const WARN_EVERY: Duration = Duration::from_secs(20);

/// Due once at the first failure, then whenever `every` has passed since the last line.
#[derive(Debug)]
struct WarnEvery {
    every: Duration,
    last: Option<Duration>,
}

impl WarnEvery {
    fn new(every: Duration) -> Self {
        WarnEvery { every, last: None }
    }
    fn due(&mut self, elapsed: Duration) -> bool {
        let due = self.last.is_none_or(|l| elapsed >= l + self.every);
        if due {
            self.last = Some(elapsed);
        }
        due
    }
}

/// For a connection that cannot be made at all, what is most likely wrong.
fn not_running_hint(s: &Status) -> &'static str {
    let refused = s.code() == Code::Unavailable
        && ["connect", "refused", "dns", "resolve"].iter().any(|w| s.message().to_ascii_lowercase().contains(w));
    if refused {
        " (is the node running — `dpcotrain node serve --config its party.toml` — and is the address right?)"
    } else {
        ""
    }
}

/// Worth retrying with the same request id.
pub(crate) fn is_transient(s: &Status) -> bool {
    matches!(s.code(), Code::Unavailable | Code::DeadlineExceeded | Code::Aborted | Code::Unknown | Code::Cancelled)
}

/// How to reach one peer.
#[derive(Debug, Clone)]
pub struct PeerOptions {
    /// Our own party name (the `requester` of our calls).
    pub me: String,
    /// The peer's party name.
    pub name: String,
    /// e.g. `https://127.0.0.1:50052` (or `http://` without TLS).
    pub address: String,
    /// What we agree to; sent in the handshake.
    pub agreement: Agreement,
    /// The pair's bearer token.
    pub token: Option<String>,
    pub tls: Option<ClientTlsConfig>,
    pub retry: Retry,
}

/// A peer reached over gRPC.
#[derive(Clone)]
pub struct GrpcPeer {
    opts: Arc<PeerOptions>,
    client: pb::node_client::NodeClient<Channel>,
    handshaken: Arc<AtomicBool>,
}

/// Codes after which the exchange did not happen but is still owed: the peer was not reached
/// (transient codes), or it could not keep its promises this time — it withheld the answer
/// because its state could not be saved (`INTERNAL`), or its ledger is behind a receipt it
/// signed (`DATA_LOSS`). The querier's turn is then not taken, so running the round again asks
/// again (under the same request id: nothing is charged twice).
pub(crate) fn is_not_final(s: &Status) -> bool {
    is_transient(s) || matches!(s.code(), Code::Internal | Code::DataLoss)
}

/// A failed call: see [`is_not_final`]; any other code is the peer's final refusal of this
/// request (its budget, an invalid request).
fn peer_err(name: &str, s: &Status) -> CotrainError {
    let fault = PeerFault::Status { code: remote_code(s.code()), message: s.message().to_string() };
    if is_not_final(s) {
        CotrainError::Unreached { peer: name.into(), fault }
    } else {
        CotrainError::Peer { peer: name.into(), fault }
    }
}

/// A peer's gRPC status code in the co-training layer's terms: the codes this node's own
/// errors map to ([`crate::error`]) read back as what they meant.
pub fn remote_code(c: Code) -> RemoteCode {
    match c {
        Code::ResourceExhausted => RemoteCode::BudgetExhausted,
        Code::InvalidArgument => RemoteCode::InvalidRequest,
        Code::Internal => RemoteCode::Internal,
        Code::DataLoss => RemoteCode::DataLoss,
        Code::Unavailable | Code::DeadlineExceeded | Code::Aborted | Code::Cancelled | Code::Unknown => {
            RemoteCode::Unavailable
        }
        Code::FailedPrecondition => RemoteCode::NotHandshaken,
        Code::Unauthenticated | Code::PermissionDenied => RemoteCode::Unauthenticated,
        other => RemoteCode::Other(other as i32),
    }
}

/// A handshake that failed in any way: the peer was not reached as the party we agree with.
fn unreached(e: CotrainError) -> CotrainError {
    match e {
        CotrainError::Peer { peer, fault } => CotrainError::Unreached { peer, fault },
        e => e,
    }
}

/// A lazily connecting channel to `address` with our deadlines, limits and TLS.
pub fn channel(address: &str, tls: Option<&ClientTlsConfig>, retry: &Retry) -> Result<Channel, PeerFault> {
    let fault = |what, e: tonic::transport::Error| PeerFault::Channel {
        what,
        address: address.to_string(),
        detail: e.to_string(),
    };
    let mut ep = Endpoint::from_shared(address.to_string())
        .map_err(|e| fault("bad address", e))?
        .connect_timeout(Duration::from_secs(5))
        .timeout(retry.call_timeout)
        .tcp_nodelay(true)
        // HTTP/2 pings notice a peer that vanished without closing the connection.
        .http2_keep_alive_interval(Duration::from_secs(30))
        .keep_alive_timeout(Duration::from_secs(10))
        .keep_alive_while_idle(true);
    if let Some(t) = tls {
        ep = ep.tls_config(t.clone()).map_err(|e| fault("TLS settings for", e))?;
    }
    Ok(ep.connect_lazy())
}

impl GrpcPeer {
    /// A peer (no I/O yet: the channel connects on first use).
    pub fn new(opts: PeerOptions) -> Result<Self, CotrainError> {
        let ch = channel(&opts.address, opts.tls.as_ref(), &opts.retry)
            .map_err(|fault| CotrainError::Peer { peer: opts.name.clone(), fault })?;
        let client = pb::node_client::NodeClient::new(ch)
            .max_decoding_message_size(crate::MAX_MESSAGE_BYTES)
            .max_encoding_message_size(crate::MAX_MESSAGE_BYTES);
        Ok(GrpcPeer { opts: Arc::new(opts), client, handshaken: Arc::new(AtomicBool::new(false)) })
    }

    /// Handshake now (retrying while the peer is unreachable).
    pub async fn handshake(&self) -> Result<(), CotrainError> {
        let o = &self.opts;
        let resp = o
            .retry
            .run(&format!("handshake with {}", o.name), || {
                let mut c = self.client.clone();
                let msg = o.agreement.to_pb(&o.me);
                async move {
                    let req =
                        request(msg, o.token.as_deref(), o.retry.call_timeout).map_err(Status::invalid_argument)?;
                    c.handshake(req).await
                }
            })
            .await
            .map_err(|s| peer_err(&o.name, &s))?
            .into_inner();
        if !resp.accepted {
            return Err(CotrainError::Peer {
                peer: o.name.clone(),
                fault: PeerFault::HandshakeRefused { reason: resp.reason },
            });
        }
        if resp.party != o.name {
            return Err(CotrainError::Peer {
                peer: o.name.clone(),
                fault: PeerFault::WrongParty {
                    address: o.address.clone(),
                    party: resp.party,
                    expected: o.name.clone(),
                },
            });
        }
        self.handshaken.store(true, Ordering::SeqCst);
        Ok(())
    }

    async fn predict_once(&self, msg: pb::PredictRequest) -> Result<pb::PredictResponse, Status> {
        let o = &self.opts;
        o.retry
            .run(&format!("predict from {}", o.name), || {
                let mut c = self.client.clone();
                let msg = msg.clone();
                async move {
                    let req =
                        request(msg, o.token.as_deref(), o.retry.call_timeout).map_err(Status::invalid_argument)?;
                    c.predict(req).await.map(|r| r.into_inner())
                }
            })
            .await
    }
}

impl Peer for GrpcPeer {
    fn name(&self) -> String {
        self.opts.name.clone()
    }

    fn predict(&self, req: PredictRequest) -> impl Future<Output = Result<Answer, CotrainError>> + Send {
        let msg = convert::request_to_pb(&req, &self.opts.agreement.federation_id);
        async move {
            let name = &self.opts.name;
            if !self.handshaken.load(Ordering::SeqCst) {
                self.handshake().await.map_err(unreached)?;
            }
            let resp = match self.predict_once(msg.clone()).await {
                // The node forgot us (it restarted): handshake again, then retry the same id.
                Err(s) if s.code() == Code::FailedPrecondition => {
                    self.handshaken.store(false, Ordering::SeqCst);
                    self.handshake().await.map_err(unreached)?;
                    self.predict_once(msg).await
                }
                r => r,
            }
            .map_err(|s| peer_err(name, &s))?;
            let a = convert::answer_from_pb(resp).map_err(|detail| CotrainError::Peer {
                peer: name.clone(),
                fault: PeerFault::Undecodable { detail },
            })?;
            if a.responder != *name {
                return Err(CotrainError::Peer {
                    peer: name.clone(),
                    fault: PeerFault::SignedBy { responder: a.responder },
                });
            }
            Ok(a)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_long_wait_warns_a_few_times_not_at_every_try() {
        // The retry loop's schedule: 50 ms doubling to 2 s, for 120 s (64 tries).
        let (mut t, mut b, mut w, mut lines, mut tries) =
            (Duration::ZERO, Duration::from_millis(50), WarnEvery::new(WARN_EVERY), 0, 0);
        while t < Duration::from_secs(120) {
            tries += 1;
            lines += usize::from(w.due(t));
            t += b;
            b = (b * 2).min(Duration::from_secs(2));
        }
        assert!(tries > 60, "{tries}");
        assert_eq!(lines, 6, "one line at once, then one per 20 s");
    }

    #[test]
    fn an_unreachable_node_is_named_as_perhaps_not_running() {
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        let retry = Retry {
            call_timeout: Duration::from_millis(10),
            first_backoff: Duration::from_millis(1),
            max_backoff: Duration::from_millis(2),
            give_up_after: Duration::from_millis(30),
        };
        let err = rt
            .block_on(retry.run("status of B", || async {
                Err::<(), _>(Status::unavailable("tcp connect error: Connection refused"))
            }))
            .unwrap_err();
        assert!(err.message().contains("still failing") && err.message().contains("is the node running"), "{err:?}");
        // A node that answers but is overloaded is running: no such hint.
        let err = rt
            .block_on(retry.run("status of B", || async { Err::<(), _>(Status::unavailable("server overloaded")) }))
            .unwrap_err();
        assert!(!err.message().contains("is the node running"), "{err:?}");
    }
}
