//! `dpcotrain-lab`: the lab beside the product — the thesis's experiment grids, the DP frontier
//! and the harm studies, the sparse-GP papers' experiments, and the benchmarks. The product
//! binary (`dpcotrain`: node, run, status, demo…) links none of this.

mod bench;

use clap::{Parser, Subcommand};
use dpcotrain::process;

#[derive(Debug, Parser)]
#[command(
    name = "dpcotrain-lab",
    version,
    about = "dpcotrain's lab: experiment grids, the DP frontier, sparse-GP experiments and benchmarks"
)]
struct Cli {
    /// Log lines on stderr as text or JSON (one object per line). Levels come from RUST_LOG
    /// (default: warn).
    #[arg(long, global = true, value_parser = ["text", "json"], default_value = "text")]
    log_format: String,
    #[command(subcommand)]
    command: Command,
}

// Parsed once per process: the size of the largest command line's options does not matter.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Subcommand)]
enum Command {
    /// The thesis's experiment grids, the DP frontier, the sparse-GP papers' experiments.
    #[command(subcommand)]
    Experiment(dpcotrain_experiments::ExperimentCommand),
    /// Benchmarks on this machine: the numerical core (`gp`) and the federation (`node`).
    #[command(subcommand)]
    Bench(bench::BenchCommand),
}

fn main() {
    process::keep_freed_memory();
    let cli: Cli = process::parse();
    process::init_logging(&cli.log_format, "warn");
    process::default_sigpipe();
    process::finish(match cli.command {
        Command::Experiment(cmd) => dpcotrain_experiments::run(cmd),
        Command::Bench(cmd) => bench::run(cmd),
    });
}
