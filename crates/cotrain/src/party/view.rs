//! What leaves a [`super::Party`] about its model: a label-free view ([`ModelView`]) for
//! reports, status and metrics, and the switches of how it reads its peers' answers
//! ([`AnswerReading`]). The model itself ([`CoModel`]) never leaves the party: no caller can
//! clone it, re-fit it, or read its rows, weights or inducing inputs (the compile_fail doc
//! tests of `crate::boundary` check that an outside crate cannot). Predictions at covariates
//! the caller supplies (`Party::predict`, `Party::predict_alone`) are for the party's own
//! operator and evaluation, never a peer.

use crate::answer::Uncertainty;
use crate::combiner::{CoModel, CombinerKind, LocalModel, LooCheck, PeerBlock, RefitTheta, ValueBasis};
use crate::settings::AnswerDiscount;

/// A party's model seen from outside: its settings, version, fitted noise and the answers it
/// received from peers — nothing computed from its private rows beyond those scalars.
///
/// The model is not reachable through the view:
/// ```compile_fail
/// # fn f(p: &dpcotrain_cotrain::Party) {
/// let m: &dpcotrain_cotrain::CoModel = p.model().0; // the field is private
/// # }
/// ```
#[derive(Clone, Copy)]
pub struct ModelView<'a>(pub(crate) &'a CoModel);

impl ModelView<'_> {
    /// Bumped whenever the model (data or hyperparameters) changes.
    pub fn version(&self) -> u64 {
        self.0.version
    }

    pub fn kind(&self) -> CombinerKind {
        self.0.kind
    }

    pub fn uncertainty(&self) -> Uncertainty {
        self.0.uncertainty
    }

    /// Whether received answers are in the model (false: none yet, or the guard set them aside).
    pub fn answers_used(&self) -> bool {
        self.0.answers_used()
    }

    pub fn local_model(&self) -> LocalModel {
        self.0.local_model()
    }

    /// The optimiser limits of the re-fits (a setting).
    pub fn refit_training(&self) -> dpcotrain_gp::train::TrainOptions {
        self.0.train.clone()
    }

    /// Whether the local model is sparse (VFE or SVGP on inducing inputs).
    pub fn is_sparse(&self) -> bool {
        self.0.is_sparse()
    }

    /// The fitted hyperparameters: the kernel's log-parameters, then log σ². Label-dependent
    /// (fitted to the private rows and the answers): for the party's own operator, never a peer.
    pub fn hyperparameters(&self) -> Vec<f64> {
        crate::kernel_noise_params(self.0.kernel.as_ref(), &self.0.noise)
    }

    /// How many inducing inputs the sparse local model has (None: exact). The inputs are
    /// chosen from the private covariates, so only their number leaves the party.
    pub fn inducing_count(&self) -> Option<usize> {
        self.0.sparse_inducing().map(|z| z.nrows())
    }

    /// The current fitted noise variance σ² (after the latest re-fit).
    pub fn noise_variance(&self) -> f64 {
        self.0.noise.variance
    }

    /// The private-only fit's noise variance (before any answer).
    pub fn private_noise_variance(&self) -> f64 {
        self.0.private_noise_variance()
    }

    /// The variance added to every received answer (D30's discount).
    pub fn answer_extra_var(&self) -> f64 {
        self.0.answer_extra_var
    }

    /// Answers declined by [`CoModel::decline_noise_ratio`] so far.
    pub fn declined_answers(&self) -> usize {
        self.0.declined_answers
    }

    /// Objective evaluations spent in re-fits so far.
    pub fn refit_evaluations(&self) -> usize {
        self.0.refit_evaluations
    }

    /// How many answer rows the model holds.
    pub fn n_pseudo(&self) -> usize {
        self.0.n_pseudo()
    }

    /// Pool indices this party has received answers at, in first-answer order.
    pub fn asked(&self) -> Vec<usize> {
        self.0.asked()
    }

    /// Everything received from each peer (the peers' answers, as absorbed).
    pub fn blocks(&self) -> &[PeerBlock] {
        &self.0.blocks
    }

    /// The answer guard's last verdict.
    pub fn loo_check(&self) -> Option<LooCheck> {
        self.0.loo_check()
    }
}

/// How a party reads the answers it receives, beyond the product's settings: the harm study's
/// switches ([`super::Party::set_answer_reading`]). The default reads as the product does.
#[derive(Debug, Clone, PartialEq)]
pub struct AnswerReading {
    /// D30's discount (None: keep the party's own).
    pub discount: Option<AnswerDiscount>,
    /// A fixed variance added to every answer instead (None: keep).
    pub extra_var: Option<f64>,
    /// Choose the added variance per re-fit from these candidates by the augmented objective
    /// ([`CoModel::answer_noise_grid`]; None: off).
    pub noise_grid: Option<Vec<f64>>,
    /// Whose data the re-fit's θ is fitted to.
    pub refit_theta: RefitTheta,
    /// The answer check's threshold z ([`CoModel::answer_check_z`]; None: off).
    pub check_z: Option<f64>,
    /// [`CoModel::decline_noise_ratio`] (None: off).
    pub decline_ratio: Option<f64>,
    /// Factor on every answer's variance ([`CoModel::answer_var_scale`]; 1: as reported).
    pub var_scale: f64,
    /// The per-answer value rule ([`CoModel::answer_min_value`]; None: off).
    pub min_value: Option<f64>,
    /// Which variance of an answer the value rule weighs ([`CoModel::answer_min_value_basis`]).
    pub min_value_basis: ValueBasis,
}

impl Default for AnswerReading {
    fn default() -> Self {
        AnswerReading {
            discount: None,
            extra_var: None,
            noise_grid: None,
            refit_theta: RefitTheta::Augmented,
            check_z: None,
            decline_ratio: None,
            var_scale: 1.0,
            min_value: None,
            min_value_basis: ValueBasis::Read,
        }
    }
}
