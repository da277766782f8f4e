//! The privacy layer's errors: typed where a caller or a user acts on the kind (a parameter
//! and its bound, a non-finite input, a budget that does not fit).

/// A release refused before anything left: its cost does not fit the requester's budget.
#[derive(Debug, Clone, Copy, PartialEq, thiserror::Error)]
#[error(
    "privacy budget would be exceeded: this release costs ρ = {cost:.6e} but only {remaining:.6e} of ρ = {budget:.6e} remains (ε = {epsilon}, δ = {delta:e}); refused before release"
)]
pub struct BudgetExceeded {
    pub cost: f64,
    pub remaining: f64,
    pub budget: f64,
    pub epsilon: f64,
    pub delta: f64,
}

/// Errors of the privacy layer.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum PrivacyError {
    /// A parameter outside its domain: `name` was `value`, and `bound` says what it must
    /// ("be positive", "lie strictly between 0 and 1").
    #[error("invalid privacy parameter: {name} must {bound}, got {value}")]
    Parameter { name: &'static str, value: f64, bound: &'static str },
    /// Inputs whose sizes disagree: `got` `items` given for `expected` `per` (in `context`).
    #[error("invalid privacy parameter: {context}: {got} {items} for {expected} {per}")]
    Shape { context: &'static str, got: usize, items: &'static str, expected: usize, per: &'static str },
    /// A rule spelled in a way it cannot be read: `what` `text` is not one of `expected`.
    #[error("invalid privacy parameter: {what} {text:?} is not {expected}")]
    Spelling { what: &'static str, text: String, expected: &'static str },
    /// A number that must be finite was not (`what` names it and where it was).
    #[error("invalid privacy parameter: {what}")]
    NonFinite { what: &'static str },
    /// Something that must not be empty was: `context` had no `what`.
    #[error("invalid privacy parameter: {context}: no {what}")]
    Empty { context: &'static str, what: &'static str },
    /// An index outside its range: `what` `index` where there are `len`.
    #[error("invalid privacy parameter: {context}: {what} {index} is outside the {len} there are")]
    OutOfRange { context: &'static str, what: &'static str, index: usize, len: usize },
    /// One entry of a vector outside its domain: `name` of `item` `index` was `value` and must
    /// `bound`.
    #[error("invalid privacy parameter: {context}: {name} of {item} {index} must {bound}, got {value}")]
    Entry {
        context: &'static str,
        name: &'static str,
        item: &'static str,
        index: usize,
        value: f64,
        bound: &'static str,
    },
    /// An interval that must be finite with `lo < hi` was not.
    #[error("invalid privacy parameter: {name} must be finite with lo < hi, got [{lo}, {hi}]")]
    Interval { name: &'static str, lo: f64, hi: f64 },
    /// A list of row indices that must be a permutation of `0..n` was not.
    #[error("invalid privacy parameter: {context}: the order is not a permutation of the {n} rows")]
    NotPermutation { context: &'static str, n: usize },
    /// Matrices whose shapes do not fit each other (`what` lists them, `shapes` in that order).
    #[error("invalid privacy parameter: {context}: {what} {shapes:?} do not fit {points} points")]
    Shapes { context: &'static str, what: &'static str, shapes: Vec<(usize, usize)>, points: usize },
    #[error(transparent)]
    BudgetExceeded(#[from] BudgetExceeded),
    #[error(transparent)]
    Gp(#[from] dpcotrain_gp::GpError),
}

impl From<dpcotrain_gp::LinalgError> for PrivacyError {
    fn from(e: dpcotrain_gp::LinalgError) -> Self {
        PrivacyError::Gp(e.into())
    }
}

impl PrivacyError {
    /// [`PrivacyError::Empty`].
    pub fn empty(context: &'static str, what: &'static str) -> Self {
        PrivacyError::Empty { context, what }
    }

    /// [`PrivacyError::OutOfRange`].
    pub fn out_of_range(context: &'static str, what: &'static str, index: usize, len: usize) -> Self {
        PrivacyError::OutOfRange { context, what, index, len }
    }

    /// [`PrivacyError::Parameter`].
    pub fn parameter(name: &'static str, value: f64, bound: &'static str) -> Self {
        PrivacyError::Parameter { name, value, bound }
    }

    /// [`PrivacyError::Shape`].
    pub fn shape(context: &'static str, got: usize, items: &'static str, expected: usize, per: &'static str) -> Self {
        PrivacyError::Shape { context, got, items, expected, per }
    }

    /// [`PrivacyError::NonFinite`].
    pub fn non_finite(what: &'static str) -> Self {
        PrivacyError::NonFinite { what }
    }
}
