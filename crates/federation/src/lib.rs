//! # dpcotrain-federation — gRPC nodes
//!
//! The protocol (`proto/dpcotrain/v1/node.proto`, compiled in `build.rs` with protox), a node
//! server that exposes a [`Party`]'s release path over gRPC, and [`GrpcPeer`], the gRPC
//! implementation of the co-training [`Peer`] trait — so the round logic of `dpcotrain-cotrain`
//! is written once and runs in-process or across the network with the same numbers.
//!
//! Status of this crate: protocol, Predict/Handshake/Status/RunRound, status codes for
//! malformed requests, loopback tests. TLS, tokens, durability and the node CLI come next
//! (issue 4).

pub mod convert;
pub mod server;

pub mod pb {
    tonic::include_proto!("dpcotrain.v1");
}

pub use server::{NodeService, serve};

use dpcotrain_cotrain::CotrainError;
use dpcotrain_cotrain::answer::{Answer, PredictRequest};
use dpcotrain_cotrain::peer::Peer;
use std::future::Future;
use tonic::transport::Channel;

/// Protocol version spoken by this build.
pub const PROTOCOL_VERSION: &str = "dpcotrain.v1";

/// A peer reached over gRPC.
#[derive(Clone)]
pub struct GrpcPeer {
    name: String,
    federation_id: String,
    client: pb::node_client::NodeClient<Channel>,
}

impl GrpcPeer {
    /// Connect to a node at `addr` (e.g. `http://127.0.0.1:50051`).
    pub async fn connect(name: &str, federation_id: &str, addr: &str) -> Result<Self, CotrainError> {
        let client = pb::node_client::NodeClient::connect(addr.to_string())
            .await
            .map_err(|e| CotrainError::Peer { peer: name.into(), message: format!("cannot connect to {addr}: {e}") })?;
        Ok(GrpcPeer { name: name.into(), federation_id: federation_id.into(), client })
    }
}

impl Peer for GrpcPeer {
    fn name(&self) -> String {
        self.name.clone()
    }

    fn predict(&self, req: PredictRequest) -> impl Future<Output = Result<Answer, CotrainError>> + Send {
        let mut client = self.client.clone();
        let name = self.name.clone();
        let msg = convert::request_to_pb(&req, &self.federation_id);
        async move {
            let resp = client.predict(msg).await.map_err(|s| CotrainError::Peer {
                peer: name.clone(),
                message: format!("{:?}: {}", s.code(), s.message()),
            })?;
            convert::answer_from_pb(resp.into_inner()).map_err(|e| CotrainError::Peer { peer: name, message: e })
        }
    }
}
