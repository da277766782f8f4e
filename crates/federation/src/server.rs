//! The node server: a [`Party`] behind the `dpcotrain.v2.Node` service.
//!
//! - Only `Predict` returns anything derived from labels, and only through `Party::answer` (the
//!   release path); the caller must be an authenticated peer that has handshaken, and may ask
//!   only in its own name.
//! - The state (ledger, released answers, noise paths, model history) is saved crash-safely
//!   **before** an answer leaves ([`StateStore`]); if saving fails the answer is withheld.
//! - `RunRound` is for the orchestrator only and is idempotent by round number.
//! - Malformed requests get `INVALID_ARGUMENT`, a wrong federation id or a requester that is
//!   not the caller `PERMISSION_DENIED`, an unknown caller `UNAUTHENTICATED`, a missing
//!   handshake `FAILED_PRECONDITION`, an exhausted budget `RESOURCE_EXHAUSTED`; the node stays
//!   up. The party lock is never held across an await; numerical work runs on the blocking pool.

use crate::agreement::Agreement;
use crate::auth::{Auth, AuthLayer, Principal, principal};
use crate::conn_limits::{ConnLimits, GuardedListener};
use crate::error::NodeError;
use crate::metrics::Metrics;
use crate::pb::node_server::{Node, NodeServer};
use crate::store::StateStore;
use crate::trace::{RpcNote, TraceLayer};
use crate::{GrpcPeer, convert, pb, receipt};
use dpcotrain_cotrain::CotrainError;
use dpcotrain_cotrain::driver::{evaluate, evaluate_with_errors, query_turn};
use dpcotrain_cotrain::metrics::rmse_change_se;
use dpcotrain_cotrain::party::{Party, TurnRecord};
use std::collections::HashSet;
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::net::TcpListener;
use tonic::transport::ServerTlsConfig;
use tonic::{Request, Response, Status};

/// The service state of one node.
#[derive(Clone)]
pub struct NodeService {
    pub party: Arc<Mutex<Party>>,
    pub agreement: Agreement,
    /// Peers this node queries when asked to run a round.
    pub peers: Arc<Vec<GrpcPeer>>,
    auth: Arc<Auth>,
    store: Option<Arc<StateStore>>,
    handshaken: Arc<Mutex<HashSet<String>>>,
    /// One querier turn at a time.
    turn: Arc<tokio::sync::Mutex<()>>,
    /// This party's name (fixed), so a Handshake never waits for the party lock.
    name: Arc<str>,
    /// Squared test errors of the private-only model, point by point (for the paired SE).
    alone_sq_errors: Arc<Vec<f64>>,
    /// RPC counts and latencies, spend gauges ([`crate::ops`]).
    metrics: Arc<Metrics>,
    /// Whether the orchestrator may see the label-dependent figures (test RMSE and the rest;
    /// `privacy.share_test_metrics`).
    share_test_metrics: bool,
    /// Why this node stopped releasing to anyone: the orchestrator showed a head receipt its
    /// state is behind ([`crate::receipt`]). Cleared only by a restart after the spend is adopted.
    halted: Arc<Mutex<Option<String>>>,
}

impl NodeService {
    /// A node with no authentication, no state file and no peers (library use and tests);
    /// y is taken as already standardised (mean 0, scale 1).
    pub fn new(party: Arc<Mutex<Party>>, federation_id: &str) -> Self {
        let (agreement, name) = {
            let p = party.lock().expect("fresh party lock");
            (Agreement::of(&p, federation_id, 0.0, 1.0), Arc::from(p.name()))
        };
        NodeService {
            name,
            party,
            agreement,
            peers: Arc::new(Vec::new()),
            auth: Arc::new(Auth::open()),
            store: None,
            handshaken: Arc::new(Mutex::new(HashSet::new())),
            turn: Arc::new(tokio::sync::Mutex::new(())),
            alone_sq_errors: Arc::new(Vec::new()),
            metrics: Arc::new(Metrics::default()),
            halted: Arc::new(Mutex::new(None)),
            share_test_metrics: false,
        }
    }

    /// Let the orchestrator see this node's label-dependent figures (off by default).
    pub fn with_shared_test_metrics(mut self, share: bool) -> Self {
        self.share_test_metrics = share;
        self
    }

    /// Stop releasing if a head receipt noted before a restart (in the state's chain) is still
    /// ahead of the state (call after the party was restored).
    pub fn halt_if_behind_noted(&self) -> Result<(), NodeError> {
        let Some(store) = &self.store else { return Ok(()) };
        let noted = store.noted()?;
        if let Some(w) = noted.get(receipt::EVERY_REQUESTER) {
            let p = self.party.lock().map_err(|_| NodeError::Poisoned)?;
            if let Err(behind) = receipt::check(store, &self.agreement.federation_id, &p, receipt::EVERY_REQUESTER, w)?
            {
                *self.halted.lock().map_err(|_| NodeError::Poisoned)? = Some(behind.to_string());
            }
        }
        Ok(())
    }

    /// This node's metrics (served by [`crate::ops::serve_ops`]).
    pub fn metrics(&self) -> &Metrics {
        &self.metrics
    }

    /// The private-only model's squared test errors (its RMSE and the paired SE of the change
    /// are reported by Status).
    pub fn with_alone_errors(mut self, sq_errors: Vec<f64>) -> Self {
        self.alone_sq_errors = Arc::new(sq_errors);
        self
    }

    pub fn with_agreement(mut self, a: Agreement) -> Self {
        self.agreement = a;
        self
    }

    pub fn with_auth(mut self, auth: Auth) -> Self {
        self.auth = Arc::new(auth);
        self
    }

    pub fn with_peers(mut self, peers: Vec<GrpcPeer>) -> Self {
        self.peers = Arc::new(peers);
        self
    }

    /// Save state to `store` before every answer leaves (the caller restores the party from
    /// it first, if it holds a state).
    pub fn with_store(mut self, store: StateStore) -> Self {
        self.store = Some(Arc::new(store));
        self
    }
}

fn save(store: &Option<Arc<StateStore>>, p: &Party) -> Result<(), NodeError> {
    match store {
        Some(s) => Ok(s.save(&p.state())?),
        None => Ok(()),
    }
}

/// The label-dependent figures `Status` gives a node's orchestrator when the node shares them.
struct TestMetrics {
    rmse: f64,
    alone: Option<f64>,
    change_se: Option<f64>,
    per_round: Vec<f64>,
    set_aside: bool,
    baseline: Option<f64>,
    clipped: u32,
}

fn turn_to_pb(querier: &str, t: &TurnRecord, rmse: Option<f64>) -> pb::RunRoundResponse {
    pb::RunRoundResponse {
        querier: querier.into(),
        index: t.index.map(|i| i as u64),
        answered_by: t.answers.iter().map(|a| a.responder.clone()).collect(),
        refused: t.refused.iter().filter(|r| !r.not_asked_for_budget()).map(|r| format!("{}: {r}", r.peer)).collect(),
        skipped: t.refused.iter().filter(|r| r.not_asked_for_budget()).map(|r| format!("{}: {r}", r.peer)).collect(),
        test_rmse: rmse,
        indices: match t.answers.first() {
            Some(a) => a.indices.iter().map(|&i| i as u64).collect(),
            None => t.index.map(|i| i as u64).into_iter().collect(),
        },
    }
}

async fn blocking<T: Send + 'static>(f: impl FnOnce() -> Result<T, NodeError> + Send + 'static) -> Result<T, Status> {
    Ok(tokio::task::spawn_blocking(f).await.map_err(NodeError::Worker)??)
}

#[tonic::async_trait]
impl Node for NodeService {
    async fn handshake(&self, req: Request<pb::HandshakeRequest>) -> Result<Response<pb::HandshakeResponse>, Status> {
        let note = RpcNote::of(&req);
        note.caller(&req.get_ref().party);
        let out = self.handshake_inner(req).await;
        if let Ok(r) = &out
            && !r.get_ref().accepted
        {
            note.refused(&r.get_ref().reason);
        }
        out
    }

    async fn predict(&self, req: Request<pb::PredictRequest>) -> Result<Response<pb::PredictResponse>, Status> {
        let note = RpcNote::of(&req);
        note.caller(&req.get_ref().requester);
        note.request(&req.get_ref().request_id);
        self.predict_inner(req).await
    }

    async fn status(&self, req: Request<pb::StatusRequest>) -> Result<Response<pb::StatusResponse>, Status> {
        self.status_inner(req).await
    }

    async fn run_round(&self, req: Request<pb::RunRoundRequest>) -> Result<Response<pb::RunRoundResponse>, Status> {
        let note = RpcNote::of(&req);
        note.caller(crate::auth::ORCHESTRATOR);
        note.request(&format!("round {}", req.get_ref().round));
        self.run_round_inner(req).await
    }
}

impl NodeService {
    async fn handshake_inner(
        &self,
        req: Request<pb::HandshakeRequest>,
    ) -> Result<Response<pb::HandshakeResponse>, Status> {
        let who = principal(&req)?;
        let r = req.into_inner();
        // No party lock here: a Handshake answers even while a turn re-fits the model.
        let party = self.name.to_string();
        let verdict = match &who {
            Principal::Orchestrator => Err("the orchestrator does not handshake".to_string()),
            Principal::Peer(p) if *p != r.party => {
                Err(format!("you authenticated as {p:?} but call yourself {}", crate::clip(&r.party)))
            }
            _ if r.party == party => Err("a party does not handshake with itself".into()),
            _ => self.agreement.check(&r),
        };
        let verdict = verdict.and_then(|()| {
            let mut known = self.handshaken.lock().map_err(|_| "lock poisoned".to_string())?;
            if !known.contains(&r.party) && known.len() >= crate::MAX_REQUESTERS {
                return Err(format!(
                    "this node already knows {} requesters, the most it accepts",
                    crate::MAX_REQUESTERS
                ));
            }
            known.insert(r.party.clone());
            Ok(())
        });
        Ok(Response::new(pb::HandshakeResponse {
            accepted: verdict.is_ok(),
            party,
            reason: verdict.err().unwrap_or_default(),
            protocol_version: crate::PROTOCOL_VERSION.into(),
        }))
    }

    async fn predict_inner(&self, req: Request<pb::PredictRequest>) -> Result<Response<pb::PredictResponse>, Status> {
        let who = principal(&req)?;
        let r = req.into_inner();
        if r.federation_id != self.agreement.federation_id {
            return Err(Status::permission_denied(format!("unknown federation {}", crate::clip(&r.federation_id))));
        }
        match &who {
            Principal::Orchestrator => {
                return Err(Status::permission_denied("the orchestrator cannot ask for predictions"));
            }
            Principal::Peer(p) if *p != r.requester => {
                return Err(Status::permission_denied(format!(
                    "you authenticated as {p:?} and cannot ask in {}'s name",
                    crate::clip(&r.requester)
                )));
            }
            _ => {}
        }
        if !self.handshaken.lock().map_err(|_| Status::internal("lock poisoned"))?.contains(&r.requester) {
            return Err(Status::failed_precondition(format!(
                "{} has not handshaken with this node",
                crate::clip(&r.requester)
            )));
        }
        let creq = convert::request_from_pb(&r).map_err(Status::invalid_argument)?;
        if let Some(why) = self.halted.lock().map_err(|_| Status::internal("lock poisoned"))?.clone() {
            return Err(Status::data_loss(why));
        }
        let party = self.party.clone();
        let store = self.store.clone();
        let federation = self.agreement.federation_id.clone();
        let answer = blocking(move || {
            let mut p = party.lock().map_err(|_| NodeError::Poisoned)?;
            // A state behind the requester's latest receipt was rolled back: release nothing.
            if let (Some(s), Some(w)) = (&store, &creq.witness) {
                receipt::check(s, &federation, &p, &creq.requester, w)??;
            }
            let mut a = p.answer(&creq)?;
            // Durable before it leaves (also for a cached retry: it may not have been saved).
            save(&store, &p)?;
            if let Some(s) = &store {
                a.receipt = Some(receipt::sign(s, &federation, &p, &creq.requester)?);
            }
            Ok(a)
        })
        .await?;
        Ok(Response::new(convert::answer_to_pb(&answer)))
    }

    async fn status_inner(&self, req: Request<pb::StatusRequest>) -> Result<Response<pb::StatusResponse>, Status> {
        // A peer sees only its own spend and no test RMSE (it is computed on this node's private
        // test labels with its label-fitted model); the orchestrator sees everything.
        let caller = match principal(&req)? {
            Principal::Peer(p) => Some(p),
            Principal::Anyone | Principal::Orchestrator => None,
        };
        let witness = match (&caller, &req.get_ref().witness) {
            (None, Some(w)) => Some(convert::receipt_from_pb(w).map_err(Status::invalid_argument)?),
            _ => None,
        };
        let (store, halted, federation_id) =
            (self.store.clone(), self.halted.clone(), self.agreement.federation_id.clone());
        let party = self.party.clone();
        let share = self.share_test_metrics;
        let alone_sq = self.alone_sq_errors.clone();
        let federation = self.agreement.federation_id.clone();
        let resp = blocking(move || {
            let mut p = party.lock().map_err(|_| NodeError::Poisoned)?;
            // The orchestrator's head receipt: a state behind it was rolled back; stop releasing.
            if let (Some(s), Some(w)) = (&store, &witness)
                && let Err(behind) = receipt::check(s, &federation_id, &p, receipt::EVERY_REQUESTER, w)?
            {
                *halted.lock().map_err(|_| NodeError::Poisoned)? = Some(behind.to_string());
                return Err(behind.into());
            }
            let head = match (&store, &caller) {
                (Some(s), None) => Some(receipt::sign(s, &federation_id, &p, receipt::EVERY_REQUESTER)?),
                _ => None,
            };
            let spend = p
                .requesters()
                .into_iter()
                .filter(|name| caller.as_ref().is_none_or(|c| c == name))
                .filter_map(|name| {
                    p.ledger(&name).map(|l| pb::PeerSpend {
                        peer: name.clone(),
                        rho: l.rho_spent(),
                        epsilon: l.epsilon_spent(),
                        releases: l.releases.len() as u32,
                        rho_budget: l.rho_budget,
                        release_log: l
                            .releases
                            .iter()
                            .map(|r| pb::LedgerRelease {
                                id: r.id.clone(),
                                mechanism: r.mechanism.to_string(),
                                sigma: r.sigma,
                                sensitivity: r.sensitivity,
                                rho: r.rho,
                                guaranteed: r.guaranteed,
                            })
                            .collect(),
                    })
                })
                .collect::<Vec<_>>();
            // A peer sees its own spend; the orchestrator every requester's and the total.
            let (rho_total, epsilon_total) = match &caller {
                Some(_) => spend.first().map_or((0.0, 0.0), |s| (s.rho, s.epsilon)),
                None => p.privacy_spent_total(),
            };
            let restricted = caller.is_some();
            // Figures computed on the private labels: only for the orchestrator, and only when
            // this node's config shares them.
            let metrics = if !restricted && share {
                let (now, now_sq) = evaluate_with_errors(&mut p)?;
                let alone =
                    (!alone_sq.is_empty()).then(|| (alone_sq.iter().sum::<f64>() / alone_sq.len() as f64).sqrt());
                Some(TestMetrics {
                    rmse: now.rmse,
                    alone,
                    change_se: rmse_change_se(&alone_sq, &now_sq).filter(|v| v.is_finite()),
                    per_round: p.rmse_per_round(),
                    set_aside: !p.model().answers_used(),
                    baseline: Some(p.mean_baseline_rmse(dpcotrain_cotrain::metrics::PUBLIC_MEAN))
                        .filter(|v| v.is_finite()),
                    clipped: u32::try_from(p.labels_clipped()).unwrap_or(u32::MAX),
                })
            } else {
                None
            };
            let federation_id = federation.clone();
            let rounds = p.turns().iter().map(|t| t.round).collect::<HashSet<_>>().len() as u32;
            Ok(pb::StatusResponse {
                party: p.name().to_string(),
                model_version: p.model().version(),
                rounds_done: rounds,
                spend,
                test_rmse: metrics.as_ref().map(|m| m.rmse),
                test_rmse_alone: metrics.as_ref().and_then(|m| m.alone),
                rho_total,
                epsilon_total,
                restricted,
                federation_id,
                rmse_change_se: metrics.as_ref().and_then(|m| m.change_se),
                rmse_per_round: metrics.as_ref().map(|m| m.per_round.clone()).unwrap_or_default(),
                answers_set_aside: metrics.as_ref().is_some_and(|m| m.set_aside),
                test_rmse_mean_baseline: metrics.as_ref().and_then(|m| m.baseline),
                labels_clipped: metrics.as_ref().map(|m| m.clipped),
                head: head.as_ref().map(convert::receipt_to_pb),
            })
        })
        .await?;
        Ok(Response::new(resp))
    }

    async fn run_round_inner(
        &self,
        req: Request<pb::RunRoundRequest>,
    ) -> Result<Response<pb::RunRoundResponse>, Status> {
        match principal(&req)? {
            Principal::Anyone | Principal::Orchestrator => {}
            Principal::Peer(p) => {
                return Err(Status::permission_denied(format!("{p:?} is a peer, not the orchestrator")));
            }
        }
        let round = req.into_inner().round as usize;
        let _one_turn_at_a_time = self.turn.lock().await;
        let party = self.party.clone();
        let done = blocking(move || {
            let p = party.lock().map_err(|_| NodeError::Poisoned)?;
            Ok(p.turn(round).cloned())
        })
        .await?;
        if done.is_none() {
            // The turn (its peer calls and the re-fit) runs on a blocking thread, driven by this
            // runtime's handle: the re-fit never occupies a worker, so other calls stay live.
            let (party, peers, rt) = (self.party.clone(), self.peers.clone(), tokio::runtime::Handle::current());
            tokio::task::spawn_blocking(move || rt.block_on(query_turn(&party, &peers, round)))
                .await
                .map_err(NodeError::Worker)?
                .map_err(NodeError::from)?;
        }
        let party = self.party.clone();
        let store = self.store.clone();
        let share = self.share_test_metrics;
        let resp = blocking(move || {
            let mut p = party.lock().map_err(|_| NodeError::Poisoned)?;
            // Kept in the node's state (its own record); sent only when shared.
            let rmse = evaluate(&mut p)?.rmse;
            p.record_test_rmse(round, rmse);
            save(&store, &p)?;
            let t = p
                .turn(round)
                .cloned()
                .ok_or_else(|| CotrainError::from(dpcotrain_cotrain::Invariant::TurnNotRecorded(round)))?;
            Ok(turn_to_pb(p.name(), &t, share.then_some(rmse)))
        })
        .await?;
        Ok(Response::new(resp))
    }
}

/// How long a client may take to complete the TLS handshake.
pub(crate) const TLS_HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// Serve `service` on `listener` (with mutual TLS when `tls` is given) until `shutdown`
/// resolves; in-flight calls finish first. Connections are held to [`ConnLimits::GRPC`] and
/// the TLS handshake to [`TLS_HANDSHAKE_TIMEOUT`].
pub async fn serve(
    service: NodeService,
    listener: TcpListener,
    tls: Option<ServerTlsConfig>,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(), tonic::transport::Error> {
    // Bounded concurrency per connection and per HTTP/2 connection, and keepalive pings so a
    // vanished peer's connection is noticed.
    let auth = AuthLayer::new(service.auth.clone());
    let trace = TraceLayer::new(service.metrics.clone());
    let mut b = tonic::transport::Server::builder()
        .timeout(Duration::from_secs(300))
        .concurrency_limit_per_connection(32)
        .max_concurrent_streams(64)
        .http2_keepalive_interval(Some(Duration::from_secs(30)))
        .http2_keepalive_timeout(Some(Duration::from_secs(10)));
    if let Some(t) = tls {
        // A client that starts a TLS handshake and never finishes it is dropped.
        b = b.tls_config(t.timeout(TLS_HANDSHAKE_TIMEOUT))?;
    }
    // Tracing outermost (every call, refused or not, gets its span, line and count;
    // crate::trace), then authentication in front of every service: the principal reaches the
    // handlers in the request's extensions (crate::auth).
    b.layer(trace)
        .layer(auth)
        .add_service(
            NodeServer::new(service)
                .max_decoding_message_size(crate::MAX_MESSAGE_BYTES)
                .max_encoding_message_size(crate::MAX_MESSAGE_BYTES),
        )
        // No Nagle: a multi-segment answer (e.g. 25 × 25 covariances) would otherwise wait for
        // the peer's delayed ACK (~40 ms).
        // Connections under limits: per address, first bytes, idle (crate::conn_limits).
        .serve_with_incoming_shutdown(GuardedListener::new(listener, ConnLimits::GRPC).into_stream(), shutdown)
        .await
}
