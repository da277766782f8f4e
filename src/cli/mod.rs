//! One module per subcommand; `main.rs` holds the clap tree and the dispatch.

pub mod bench;
pub mod certs;
pub mod data;
pub mod demo;
pub mod experiment;
pub mod files;
pub mod frontier;
pub mod gp;
pub mod node;
pub mod party_figures;
pub mod privacy;
pub mod run;
pub mod scalable;
pub mod sparse;
pub mod status;
pub mod summary;
pub mod svgp;
