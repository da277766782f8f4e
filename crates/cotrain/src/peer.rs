//! The transport-free peer interface. The round driver talks to peers only through [`Peer`],
//! so the same logic runs in-process ([`InProcessPeer`]) or over gRPC (the federation crate).

use crate::CotrainError;
use crate::answer::{Answer, PredictRequest};
use crate::party::Party;
use std::future::Future;
use std::sync::{Arc, Mutex};

/// Something that answers prediction requests.
pub trait Peer: Send + Sync {
    fn name(&self) -> String;
    fn predict(&self, req: PredictRequest) -> impl Future<Output = Result<Answer, CotrainError>> + Send;
}

/// A peer living in the same process.
#[derive(Clone)]
pub struct InProcessPeer {
    pub party: Arc<Mutex<Party>>,
}

impl Peer for InProcessPeer {
    fn name(&self) -> String {
        self.party.lock().expect("party lock").name.clone()
    }
    fn predict(&self, req: PredictRequest) -> impl Future<Output = Result<Answer, CotrainError>> + Send {
        let res = crate::party::lock_party(&self.party).and_then(|mut p| p.answer(&req));
        std::future::ready(res)
    }
}
