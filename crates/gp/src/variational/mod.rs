//! Scalable variational GPs of Thomas 2017 (thesis, chapters 2 and 3).
//!
//! - [`kronecker_vgp`]: inducing points on a full grid with Kronecker-structured K_uu and
//!   covariance and a Kronecker- or Tucker-structured variational mean (ch. 2; the TVGP),
//!   built on [`kron`] (the `kron_mvprod` of Algorithm 1) and [`mean_tensor`].
//! - [`rnvgp`]: the randomised-numerics VGP (ch. 3) with the O(m)-parameter covariance
//!   q(u) = N(K_uu μ, (K_uu⁻¹ + Σ⁻¹)⁻¹), whose gradients use unbiased randomised-truncation
//!   conjugate gradients ([`cg`]) and Hutchinson trace estimates ([`hutchinson`]).
//! - [`adagrad`]: the minibatch Adagrad loop both were trained with.
//!
//! Design notes (what differs from the thesis and why) are in docs/results.md, section
//! "Thomas 2017 ch. 2–3".

pub mod adagrad;
pub mod cg;
pub mod hutchinson;
pub mod kron;
pub mod kronecker_vgp;
pub mod mean_tensor;
pub mod rnvgp;

pub use adagrad::{AdagradOptions, StochasticObjective, adagrad};
pub use kronecker_vgp::KroneckerVgp;
pub use mean_tensor::MeanStructure;
