//! One module per subcommand; `main.rs` holds the clap tree and the dispatch.

pub mod certs;
pub mod data;
pub mod data_view;
pub mod demo;
pub mod gp;
pub mod node;
pub mod party_figures;
pub mod privacy;
pub mod run;
pub mod status;
pub mod svgp;
