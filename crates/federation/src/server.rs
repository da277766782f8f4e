//! The node server: a [`Party`] behind the `dpcotrain.v1.Node` service.
//!
//! Only `Predict` returns anything derived from labels, and only through `Party::answer` (the
//! release path). Malformed requests get `INVALID_ARGUMENT`, a wrong federation id
//! `PERMISSION_DENIED`, an exhausted budget `RESOURCE_EXHAUSTED`; the node stays up. The party
//! lock is never held across an await, and numerical work runs on the blocking pool.

use crate::convert;
use crate::pb;
use crate::pb::node_server::{Node, NodeServer};
use dpcotrain_cotrain::CotrainError;
use dpcotrain_cotrain::driver::{evaluate, query_turn};
use dpcotrain_cotrain::responder::Party;
use std::future::Future;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use tokio::net::TcpListener;
use tonic::{Request, Response, Status};

/// The service state of one node.
#[derive(Clone)]
pub struct NodeService {
    pub party: Arc<Mutex<Party>>,
    pub federation_id: String,
    /// Peers this node queries when asked to run a round.
    pub peers: Arc<tokio::sync::Mutex<Vec<crate::GrpcPeer>>>,
    rounds_done: Arc<AtomicU32>,
}

impl NodeService {
    pub fn new(party: Arc<Mutex<Party>>, federation_id: &str) -> Self {
        NodeService {
            party,
            federation_id: federation_id.into(),
            peers: Arc::new(tokio::sync::Mutex::new(Vec::new())),
            rounds_done: Arc::new(AtomicU32::new(0)),
        }
    }
}

fn to_status(e: CotrainError) -> Status {
    let msg = e.to_string();
    match e {
        CotrainError::Privacy(_) if msg.contains("budget") => Status::resource_exhausted(msg),
        CotrainError::Invalid(_) => Status::invalid_argument(msg),
        _ => Status::internal(msg),
    }
}

#[tonic::async_trait]
impl Node for NodeService {
    async fn handshake(&self, req: Request<pb::HandshakeRequest>) -> Result<Response<pb::HandshakeResponse>, Status> {
        let r = req.into_inner();
        let party = self.party.lock().map_err(|_| Status::internal("party lock poisoned"))?.name.clone();
        let (accepted, reason) = if r.protocol_version != crate::PROTOCOL_VERSION {
            (false, format!("protocol {} is not {}", r.protocol_version, crate::PROTOCOL_VERSION))
        } else if r.federation_id != self.federation_id {
            (false, format!("federation {:?} is not {:?}", r.federation_id, self.federation_id))
        } else {
            (true, String::new())
        };
        Ok(Response::new(pb::HandshakeResponse {
            accepted,
            party,
            reason,
            protocol_version: crate::PROTOCOL_VERSION.into(),
        }))
    }

    async fn predict(&self, req: Request<pb::PredictRequest>) -> Result<Response<pb::PredictResponse>, Status> {
        let r = req.into_inner();
        if r.federation_id != self.federation_id {
            return Err(Status::permission_denied(format!("unknown federation {:?}", r.federation_id)));
        }
        let creq = convert::request_from_pb(&r).map_err(Status::invalid_argument)?;
        let party = self.party.clone();
        let answer = tokio::task::spawn_blocking(move || {
            let mut p = party.lock().map_err(|_| CotrainError::invalid("party lock poisoned"))?;
            p.answer(&creq)
        })
        .await
        .map_err(|e| Status::internal(format!("worker failed: {e}")))?
        .map_err(to_status)?;
        Ok(Response::new(convert::answer_to_pb(&answer)))
    }

    async fn status(&self, _req: Request<pb::StatusRequest>) -> Result<Response<pb::StatusResponse>, Status> {
        let party = self.party.clone();
        let rounds = self.rounds_done.load(Ordering::Relaxed);
        let resp = tokio::task::spawn_blocking(move || -> Result<pb::StatusResponse, CotrainError> {
            let mut p = party.lock().map_err(|_| CotrainError::invalid("party lock poisoned"))?;
            let rmse = evaluate(&mut p)?.rmse;
            let spend = p
                .requesters()
                .into_iter()
                .filter_map(|name| {
                    p.ledger(&name).map(|l| pb::PeerSpend {
                        peer: name.clone(),
                        rho: l.rho_spent(),
                        epsilon: l.epsilon_spent(),
                    })
                })
                .collect();
            Ok(pb::StatusResponse {
                party: p.name.clone(),
                model_version: p.model.version,
                rounds_done: rounds,
                spend,
                test_rmse: rmse,
            })
        })
        .await
        .map_err(|e| Status::internal(format!("worker failed: {e}")))?
        .map_err(to_status)?;
        Ok(Response::new(resp))
    }

    async fn run_round(&self, req: Request<pb::RunRoundRequest>) -> Result<Response<pb::RunRoundResponse>, Status> {
        let round = req.into_inner().round as usize;
        let peers = self.peers.lock().await.clone();
        let party = self.party.clone();
        // query_turn locks the party only around synchronous sections.
        let rep = query_turn(&party, &peers, round).await.map_err(to_status)?;
        self.rounds_done.fetch_add(1, Ordering::Relaxed);
        let rmse = {
            let mut p = self.party.lock().map_err(|_| Status::internal("party lock poisoned"))?;
            evaluate(&mut p).map_err(to_status)?.rmse
        };
        Ok(Response::new(pb::RunRoundResponse {
            querier: rep.querier,
            asked: rep.index.is_some(),
            index: rep.index.unwrap_or(0) as u64,
            answered_by: rep.answered_by,
            refused: rep.refused.into_iter().map(|(p, why)| format!("{p}: {why}")).collect(),
            test_rmse: rmse,
        }))
    }
}

/// Serve `service` on `listener` until `shutdown` resolves.
pub async fn serve(
    service: NodeService,
    listener: TcpListener,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(), tonic::transport::Error> {
    tonic::transport::Server::builder()
        .add_service(NodeServer::new(service).max_decoding_message_size(16 << 20))
        .serve_with_incoming_shutdown(tonic::transport::server::TcpIncoming::from(listener), shutdown)
        .await
}
