//! # dpcotrain-privacy — honest label privacy for GP releases
//!
//! A party releases its GP posterior mean at pool points, either as a function plus a GP-prior
//! sample path scaled by σ (Hall, Rinaldo & Wasserman 2013; Thomas 2017 §1.4), or — the honest
//! default — as a finite vector at the asked points plus independent noise, calibrated to the
//! exact hat-matrix sensitivity after influence capping ([`finite`]; docs/honest-dp.md). This
//! crate computes how much one label can move a release ([`sensitivity`], [`finite`]), how much
//! noise a target (ε, δ) needs
//! ([`calibrate`]), draws the noise ([`noise`]), and keeps the books ([`accountant`]):
//! every release is a Gaussian mechanism with ρ = Δ²/(2σ²) (zCDP), compositions add ρ, and the
//! headline (ε, δ) comes from the exact Gaussian-DP conversion, with the CKS conversion as a
//! cross-check (Bun & Steinke 2016; Dong, Roth & Su 2019; Canonne, Kamath & Steinke 2020; the
//! analytic Gaussian mechanism of Balle & Wang 2018; the RKHS release of Hall, Rinaldo &
//! Wasserman 2013; the finite release of docs/honest-dp.md).
//!
//! Neighbouring relation: one private label changes by at most d (labels clipped to a declared
//! range of width d). Covariates are protected by not being shared, not by DP.

pub mod accountant;
pub mod calibrate;
mod error;
pub mod finite;
pub mod gaussian;
pub mod low_rank;
pub mod noise;
pub mod release_likelihood;
pub mod select;
pub mod sensitivity;
pub mod spend;

// The crate's API, curated: what the layers above build on. The mechanisms' internals stay
// reachable through their modules.
pub use accountant::{Charge, Ledger, Release};
pub use calibrate::{Calibration, Mechanism, NoiseScale, calibrate};
pub use error::{BudgetExceeded, PrivacyError};
pub use finite::{CapRule, FiniteRelease};
pub use low_rank::RankRule;
pub use noise::NoisePath;
pub use release_likelihood::ReleaseLikelihood;
pub use sensitivity::{LabelRange, Sensitivity};
pub use spend::{Calibrator, Spend, ThetaSource};
