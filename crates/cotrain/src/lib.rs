//! # dpcotrain-cotrain — co-training of GPs across views
//!
//! How a party picks what to ask (uncertainty sampling), what a peer releases (a DP-noised
//! posterior mean plus, per mode, its predictive (co)variance and prior covariance), and how
//! the answers change the local model (the Blocky, Noisy and Hybrid combiners of Thomas 2017
//! §4.2.2 with none / marginal / full uncertainty, §4.2.3). Everything is transport-free: rounds
//! run against the [`peer::Peer`] trait, so the same code runs in-process or over gRPC.
//!
//! Equations: Thomas 2017 ch. 4 (cited per module); decisions D1–D24: `docs/decisions.md`.

#[doc(hidden)]
pub use serde as __serde;

pub mod answer;
pub mod answer_cache;
pub mod baseline;
pub mod blocky;
pub mod boundary;
pub mod ccpp;
pub mod combiner;
pub mod data;
pub mod driver;
pub mod hybrid;
pub mod metrics;
pub mod named;
pub mod party;
pub mod peer;
pub mod psd;
pub mod readings;
pub mod release_model;
pub mod select;
pub mod settings;
pub mod simulate;
pub mod state;
pub mod table;
pub mod table_stream;

// The crate's API, curated: what the node, the CLI and the experiments build on. Specialised
// items stay reachable through their modules.
pub use answer::{Answer, ChargeInfo, PredictRequest, Receipt, Uncertainty};
pub use combiner::{CoModel, RefitPolicy, RefitTheta, SvgpTraining};
pub use data::{PartyData, Scenario};
pub use driver::{RunReport, block_on, build_parties, run_in_process};
pub use party::{AnswerReading, ModelView, Party};
pub use peer::{InProcessPeer, Peer};
pub use release_model::{PublicTheta, QueryPolicy, ReleaseForm, ThetaPolicy};
pub use settings::{AnswerDiscount, AnswerGuard, CombinerKind, DpConfig, DpMode, Guarantee, ReleasePolicy};
pub use simulate::{SimConfig, simulate};
pub use state::PartyState;
pub use table::Table;

#[cfg(test)]
mod combiners_tests;
#[cfg(test)]
mod guard_tests;
#[cfg(test)]
mod readings_tests;
#[cfg(test)]
mod release_tests;
#[cfg(test)]
mod sparse_party_tests;

/// The parameter vector shared by every combiner: the kernel's log-parameters, then log σ².
pub(crate) fn kernel_noise_params(kernel: &dyn dpcotrain_gp::Kernel, noise: &dpcotrain_gp::NoiseVariance) -> Vec<f64> {
    let mut p = kernel.params();
    p.push(noise.variance.ln());
    p
}

/// Inverse of [`kernel_noise_params`].
pub(crate) fn set_kernel_noise_params(
    kernel: &mut Box<dyn dpcotrain_gp::Kernel>,
    noise: &mut dpcotrain_gp::NoiseVariance,
    p: &[f64],
) {
    let nk = kernel.n_params();
    kernel.set_params(&p[..nk]);
    noise.variance = p[nk].exp();
}

/// The parameter-vector methods of `Objective` for a combiner with `kernel` and `noise` fields.
#[macro_export]
#[doc(hidden)]
macro_rules! kernel_noise_params {
    () => {
        fn params(&self) -> Vec<f64> {
            $crate::kernel_noise_params(self.kernel.as_ref(), &self.noise)
        }
        fn set_params(&mut self, p: &[f64]) {
            $crate::set_kernel_noise_params(&mut self.kernel, &mut self.noise, p)
        }
        fn bounds(&self) -> Vec<dpcotrain_gp::Bounds> {
            let mut b = self.kernel.bounds();
            b.push(self.noise.bounds);
            b
        }
        fn param_names(&self) -> Vec<String> {
            let mut n = self.kernel.param_names();
            n.push("noise_variance".into());
            n
        }
    };
}

/// Errors of the co-training layer.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum CotrainError {
    /// This party's own fault: a setting or data file it cannot use, a saved state it refuses,
    /// or an invariant of its code broken. Its operator's to fix, never the caller's (that is
    /// [`CotrainError::Request`]); a node maps it to gRPC `INTERNAL` by this type.
    #[error(transparent)]
    Own(#[from] OwnError),
    /// What a peer's request got wrong: the caller can fix it, and asking again unchanged will
    /// not help.
    #[error("invalid request: {0}")]
    Request(#[from] RequestError),
    #[error(transparent)]
    Gp(#[from] dpcotrain_gp::GpError),
    /// The requester's privacy budget would be exceeded: refused before anything was released
    /// (a node maps it to `RESOURCE_EXHAUSTED`). Every `PrivacyError::BudgetExceeded` arrives here.
    #[error(transparent)]
    Budget(dpcotrain_privacy::BudgetExceeded),
    /// Any other error of the privacy layer: this party's privacy parameters or numerics, its own.
    #[error(transparent)]
    Privacy(dpcotrain_privacy::PrivacyError),
    #[error("peer {peer}: {message}")]
    Peer { peer: String, message: String },
    /// The request never reached an answer: the peer was unreachable, timed out, or refused
    /// the handshake (another federation, another pool). Unlike a refusal of the request
    /// itself (e.g. its budget), retrying later may succeed.
    #[error("peer {peer} not reached: {message}")]
    Unreached { peer: String, message: String },
    /// A querier turn in which at least one peer was not reached (or withheld its answer for a
    /// reason that is not final): nothing was recorded, so the same round can be run again.
    #[error("round {round}: {querier}'s turn did not happen (nothing recorded): {}", .reasons.join("; "))]
    TurnNotTaken { round: usize, querier: String, reasons: Vec<String> },
}

/// The ways a [`answer::PredictRequest`] can be wrong, checked before anything is computed or
/// released. A node maps them to gRPC `INVALID_ARGUMENT` by type.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RequestError {
    #[error("this request id was already used for a different request (indices, uncertainty or prior); use a new id")]
    ReusedId,
    #[error("a party does not answer its own requests")]
    OwnRequest,
    #[error("request has no indices")]
    NoIndices,
    #[error("index {index} is outside the pool (size {pool})")]
    OutsidePool { index: usize, pool: usize },
    #[error("index {0} is requested twice")]
    Repeated(usize),
}

/// What is wrong on this party's own side (see [`CotrainError::Own`]).
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum OwnError {
    /// A setting, a combination of settings or a data file this party cannot use, found when it
    /// is built or configured (the message names the setting, file or row).
    #[error("invalid setting or data: {0}")]
    Config(String),
    /// A saved state this party refuses to restore (another party's, edited, or inconsistent).
    #[error("saved state refused: {0}")]
    State(String),
    /// A step the code never reaches while its invariants hold: a bug, reported instead of a
    /// panic. Nothing was released.
    #[error("internal: {0}")]
    Invariant(#[from] Invariant),
    /// A party's lock was poisoned by a panic while it was held.
    #[error("party state unavailable (a worker panicked while holding it)")]
    Poisoned,
}

/// The invariants of the release path and the model that a step relies on ([`OwnError::Invariant`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum Invariant {
    #[error("no release model was built for this privacy mode")]
    NoReleaseModel,
    #[error("release-once: no frozen release")]
    NoFrozenRelease,
    #[error("a calibrated DP mode gave no noise scale; nothing was released")]
    NoNoiseScale,
    #[error("θ selection was not made before the release model was built")]
    ThetaNotSelected,
    #[error("the thesis mode has no finite release")]
    ThesisHasNoFiniteRelease,
    #[error("finite release requested under the function-space form")]
    FiniteUnderFunctionSpace,
    #[error("mean weights of a sparse model live on Z; use label_influence")]
    SparseMeanWeights,
    #[error("turn {0} is not recorded")]
    TurnNotRecorded(usize),
}

impl CotrainError {
    /// A setting or data this party cannot use ([`OwnError::Config`]).
    pub fn config(msg: impl Into<String>) -> Self {
        CotrainError::Own(OwnError::Config(msg.into()))
    }

    /// A saved state this party refuses ([`OwnError::State`]).
    pub fn state(msg: impl Into<String>) -> Self {
        CotrainError::Own(OwnError::State(msg.into()))
    }
}

impl From<dpcotrain_privacy::PrivacyError> for CotrainError {
    fn from(e: dpcotrain_privacy::PrivacyError) -> Self {
        match e {
            dpcotrain_privacy::PrivacyError::BudgetExceeded(b) => CotrainError::Budget(b),
            e => CotrainError::Privacy(e),
        }
    }
}

impl From<Invariant> for CotrainError {
    fn from(e: Invariant) -> Self {
        CotrainError::Own(OwnError::Invariant(e))
    }
}

impl From<dpcotrain_gp::LinalgError> for CotrainError {
    fn from(e: dpcotrain_gp::LinalgError) -> Self {
        CotrainError::Gp(e.into())
    }
}
