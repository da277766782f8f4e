//! # dpcotrain-experiments — the experiments, apart from the product
//!
//! What the product's crates never need at run time: the thesis's grids and their reports
//! (Thomas 2017 ch. 4: [`grid`], [`floors`], [`exchange`], the ours-vs-thesis tables of
//! [`thesis_tables`] and the two-sample tests of [`compare`]), the DP frontier of gain against ε
//! ([`frontier`]), and the sparse-GP papers' experiments ([`sparse`]: Bauer et al. 2016, Walder
//! et al. 2008, Hughes-Hallett 2022; [`scalable`]: Thomas 2017 ch. 1–3).
//!
//! Each experiment runs on the co-training layer (`dpcotrain-cotrain`) or the numerical core
//! (`dpcotrain-gp`) only, and writes its numbers (JSON), a Markdown report and SVG figures. Its
//! flags are a clap `Args`/`Subcommand` type beside the code that reads them, so the binary nests
//! [`ExperimentCommand`] and calls [`run`]: one line each.
//!
//! Errors are `anyhow` here: an experiment is a job whose failure a person reads, and no caller
//! branches on it (the product's crates keep typed errors).

pub mod command;
pub mod compare;
pub mod exchange;
pub mod files;
pub mod floors;
pub mod frontier;
pub mod grid;
pub mod scalable;
pub mod sparse;
pub mod summary;
pub mod thesis_tables;

pub use command::{ExperimentCommand, run};
