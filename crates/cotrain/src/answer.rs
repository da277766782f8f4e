//! The messages of one exchange (docs/decisions.md D12): a request for predictions at pool
//! indices, and the answer a responder may release.

use nalgebra::DMatrix;
use serde::{Deserialize, Serialize};

/// How much of the responder's predictive uncertainty the querier integrates [Thomas §4.2.3].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Uncertainty {
    /// The mean is used as a data value (V = 0).
    None,
    /// V = diag of the latent predictive variances.
    Marginal,
    /// V = the latent predictive covariance over everything answered to this requester.
    Full,
}

crate::named_enum!(Uncertainty, "uncertainty mode", [None, Marginal, Full]);

impl Uncertainty {
    pub fn name(self) -> &'static str {
        match self {
            Uncertainty::None => "none",
            Uncertainty::Marginal => "marginal",
            Uncertainty::Full => "full",
        }
    }
}

/// A request for predictions at pool indices.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PredictRequest {
    /// Client-chosen id: a retry with the same id returns the same answer, no new noise or charge.
    pub request_id: String,
    pub requester: String,
    pub indices: Vec<usize>,
    pub uncertainty: Uncertainty,
    /// Whether the responder's prior covariance rows are wanted (Blocky, Hybrid).
    pub want_prior: bool,
    /// The latest [`Receipt`] the requester holds from this responder: a responder whose
    /// ledger is behind it refuses to release (its state was rolled back).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub witness: Option<Receipt>,
}

/// A responder's signed statement, attached to an answer after its state was saved: how far
/// its state had got (`seq`, the number of its state chain's last entry, which only grows)
/// and what its ledger had charged this requester. The requester keeps the latest one (in the
/// turn that absorbed the answer) and shows it with its next request, so a responder restored
/// from an older copy of its files cannot release again as if the lost entries never happened
/// (docs/decisions.md D28). Only the responder can check `mac` (HMAC-SHA256 under its ledger key).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Receipt {
    pub seq: u64,
    /// The responder's state chain at entry `seq`: the first 32 hex digits of that entry's
    /// MAC, which chains every entry before it. A responder rolled back to an older copy whose
    /// entry numbers have since caught up has a different entry there, and refuses.
    #[serde(default)]
    pub head: String,
    /// Releases charged to this requester.
    pub releases: u64,
    /// ρ charged to this requester.
    pub rho: f64,
    pub mac: String,
}

/// The privacy charge of one answer.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ChargeInfo {
    pub rho: f64,
    pub sigma: f64,
    pub sensitivity: f64,
    pub mechanism: dpcotrain_privacy::spend::Spend,
    /// False in the thesis reproduction mode (no formal guarantee).
    pub guaranteed: bool,
    /// False when this answer was post-processing of an earlier release (nothing spent).
    pub new_release: bool,
}

/// The exact likelihood of one batch release (docs/honest-dp.md, "The release as k linear
/// functionals"): the pool indices it covers, in release order, and w = Uᵀõ ~ N(L f(Q), R).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BatchLikelihood {
    pub indices: Vec<usize>,
    pub release: dpcotrain_privacy::ReleaseLikelihood,
}

/// What the responder releases.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Answer {
    pub responder: String,
    /// The indices of this request, in request order.
    pub indices: Vec<usize>,
    /// Released (DP-noised if DP is on) posterior means at `indices`.
    pub mean: Vec<f64>,
    /// Marginal mode: latent predictive variances at `indices`.
    pub var: Option<Vec<f64>>,
    /// Every index answered to this requester so far, in first-answer order; `cov` and
    /// `prior_cov` are over this list (the responder re-sends the full current matrices).
    pub answered: Vec<usize>,
    /// Full mode: latent predictive covariance over `answered`.
    pub cov: Option<DMatrix<f64>>,
    /// Prior covariance K(answered, answered) with the responder's kernel, when requested.
    pub prior_cov: Option<DMatrix<f64>>,
    /// The responder's model version that produced the means.
    pub model_version: u64,
    /// The privacy charge (None when DP is off).
    pub charge: Option<ChargeInfo>,
    /// ρ left in this requester's budget after the answer (None when DP is off).
    pub budget_rho_left: Option<f64>,
    /// Variance of the DP noise in each released mean at `indices` (public, label-free), and
    /// included in `var` when that is sent: σ² for a finite release, σ²k(x, x) for the
    /// function-space one, 0 without DP. None in the thesis reproduction mode (its variances do
    /// not include the noise).
    #[serde(default)]
    pub noise_var: Option<Vec<f64>>,
    /// The exact likelihood of the finite release made for this answer (its new indices, one
    /// batch), sent when the responder is asked to ([`crate::Party::set_send_likelihood`]): what the
    /// functional reading of the answer needs ([`crate::combiner::AnswerForm::Functionals`]).
    /// Label-free. In-process only for now: the wire protocol does not carry it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub likelihood: Option<BatchLikelihood>,
    /// The responder's receipt for this answer (nodes with a state store sign one; None
    /// in-process).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub receipt: Option<Receipt>,
}

impl Answer {
    /// This answer as a retry of its request id receives it: the same numbers, with a charge
    /// that says nothing was spent this time (not a new release, ρ = 0).
    #[must_use]
    pub fn as_replay(&self) -> Answer {
        let mut again = self.clone();
        if let Some(c) = again.charge.as_mut() {
            c.new_release = false;
            c.rho = 0.0;
        }
        again
    }

    /// A marginal-mode answer without DP (no charge, no noise variance, no prior): `mean` and
    /// latent `var` at `indices`, model version 1. For tests and for feeding a model directly.
    pub fn marginal(responder: &str, indices: Vec<usize>, mean: Vec<f64>, var: Vec<f64>) -> Answer {
        Answer {
            responder: responder.into(),
            answered: indices.clone(),
            indices,
            mean,
            var: Some(var),
            cov: None,
            prior_cov: None,
            model_version: 1,
            charge: None,
            budget_rho_left: None,
            noise_var: None,
            likelihood: None,
            receipt: None,
        }
    }
}
