//! The node's typed errors and the gRPC status each maps to. The code comes from the type,
//! never from message text: a client's retry policy depends on it (UNAVAILABLE is retried,
//! the others are not).

use crate::store::StoreError;
use dpcotrain_cotrain::CotrainError;
#[cfg(test)]
use dpcotrain_cotrain::RequestError;
#[cfg(test)]
use dpcotrain_privacy::PrivacyError;
use tonic::Status;

#[derive(Debug, thiserror::Error)]
pub enum NodeError {
    #[error(transparent)]
    Cotrain(#[from] CotrainError),
    /// The state could not be saved, so the answer was withheld (nothing left the node).
    #[error("answer withheld: the state could not be saved: {0}")]
    Save(#[from] StoreError),
    /// A blocking worker panicked or was cancelled.
    #[error("worker failed: {0}")]
    Worker(#[from] tokio::task::JoinError),
    /// The node's state is behind a receipt the requester holds (a rollback): nothing released.
    #[error(transparent)]
    Behind(#[from] crate::receipt::Behind),
    /// The party's lock was poisoned by a panic while it was held.
    #[error("party state unavailable (a worker panicked while holding it)")]
    Poisoned,
}

impl From<&NodeError> for tonic::Code {
    fn from(e: &NodeError) -> Self {
        use tonic::Code;
        match e {
            NodeError::Cotrain(c) => match c {
                // Refused before anything was released: asking again will not help.
                CotrainError::Budget(_) => Code::ResourceExhausted,
                // What the caller's request got wrong: asking again unchanged will not help.
                CotrainError::Request(_) => Code::InvalidArgument,
                // This node's own settings, state, invariants, privacy parameters or numerics:
                // not the caller's to fix.
                CotrainError::Own(_) | CotrainError::Privacy(_) | CotrainError::Gp(_) => Code::Internal,
                // A peer of this node could not be reached, or answered what it cannot use: transient.
                CotrainError::Peer { .. } | CotrainError::Unreached { .. } => Code::Unavailable,
                // Not retried by the orchestrator: the querier already retried its peers.
                CotrainError::TurnNotTaken { .. } => Code::FailedPrecondition,
            },
            // Never a retryable code: a disk that refused a save will not take it on a retry.
            NodeError::Save(_) | NodeError::Worker(_) | NodeError::Poisoned => Code::Internal,
            // Not retried within a call; the querier's turn is not taken (the exchange is owed).
            NodeError::Behind(_) => Code::DataLoss,
        }
    }
}

impl From<NodeError> for Status {
    fn from(e: NodeError) -> Self {
        Status::new(tonic::Code::from(&e), e.to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tonic::Code;

    #[test]
    fn codes_come_from_the_type() {
        let budget =
            dpcotrain_privacy::BudgetExceeded { cost: 1.0, remaining: 0.0, budget: 1.0, epsilon: 1.0, delta: 1e-5 };
        let cases = [
            // A budget refusal from the privacy layer becomes CotrainError::Budget on its way up.
            (NodeError::Cotrain(CotrainError::from(PrivacyError::from(budget))), Code::ResourceExhausted),
            (NodeError::Cotrain(CotrainError::from(PrivacyError::parameter("ε", -1.0, "be positive"))), Code::Internal),
            // A message's words never decide: an internal state that mentions a request is internal.
            (
                NodeError::Cotrain(CotrainError::setting("the word budget in a key: bad request", 0.0, "be valid")),
                Code::Internal,
            ),
            (NodeError::Cotrain(dpcotrain_cotrain::Invariant::NoReleaseModel.into()), Code::Internal),
            (NodeError::Cotrain(CotrainError::Own(dpcotrain_cotrain::OwnError::Poisoned)), Code::Internal),
            (
                NodeError::Cotrain(CotrainError::Request(RequestError::OutsidePool { index: 9, pool: 5 })),
                Code::InvalidArgument,
            ),
            (NodeError::Cotrain(CotrainError::Request(RequestError::ReusedId)), Code::InvalidArgument),
            (
                NodeError::Cotrain(CotrainError::Unreached {
                    peer: "B".into(),
                    fault: dpcotrain_cotrain::error::PeerFault::HandshakeRefused { reason: "x".into() },
                }),
                Code::Unavailable,
            ),
            (
                NodeError::Cotrain(CotrainError::TurnNotTaken { round: 1, querier: "A".into(), reasons: vec![] }),
                Code::FailedPrecondition,
            ),
            (NodeError::Save(StoreError::Io { path: "/x".into(), message: "disk full".into() }), Code::Internal),
            (NodeError::Poisoned, Code::Internal),
            (
                NodeError::Behind(crate::receipt::Behind::Unverified {
                    requester: "A".into(),
                    receipt_seq: 3,
                    receipt_rho: 0.1,
                }),
                Code::DataLoss,
            ),
        ];
        for (e, want) in cases {
            let s = Status::from(e);
            assert_eq!(s.code(), want, "{}", s.message());
        }
    }
}
