//! The `dpcotrain` binary's layer as a library: each command of the product (`cli`) and what
//! both binaries do as processes (`process`). `dpcotrain-lab` (crates/lab) builds on it; the
//! product binary never links the lab.

pub mod cli;
pub mod process;
