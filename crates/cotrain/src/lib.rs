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
pub mod error;
pub mod hybrid;
pub mod metrics;
pub mod named;
pub mod party;
pub mod peer;
pub mod psd;
pub mod readings;
mod refit_rules;

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
pub use error::{CotrainError, Invariant, OwnError, Refusal, RemoteCode, RequestError};
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
