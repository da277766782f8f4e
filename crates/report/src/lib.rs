//! # dpcotrain-report — how results are drawn
//!
//! Presentation only, computing nothing of the science: [`svg`] draws dependency-free charts
//! from plain series, [`numbers`] prints figures with one minus sign (U+2212) everywhere, and
//! [`thesis`] holds Thomas 2017's published tables as data. The experiments that fill them
//! (and the ours-vs-thesis tables and tests) live in `dpcotrain-experiments`.

pub mod numbers;
pub mod svg;
pub mod thesis;

// The crate's API, curated.
pub use numbers::{minus, signed};
pub use svg::{Figure, LineChart, Marker, Series};
