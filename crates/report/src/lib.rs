//! # dpcotrain-report — what the experiments write
//!
//! Plotting and report writing, computing nothing of the science: every function takes the
//! experiment layer's results (run rows of `dpcotrain_cotrain::grid`, the runs of
//! `dpcotrain_cotrain::exchange`) and returns text — SVG ([`svg`]) or Markdown ([`tables`]).
//! [`thesis`] holds Thomas 2017's published tables as data, for the ours-vs-thesis comparisons.
//! [`numbers`] prints figures with one minus sign (U+2212) everywhere.
//! [`compare`] sets our runs against those tables as two-sample tests (Welch z, Stouffer, sign test).

pub mod compare;
pub mod numbers;
pub mod svg;
pub mod tables;
pub mod thesis;
