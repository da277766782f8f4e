//! `dpcotrain`: differentially private co-training of Gaussian processes — the product: a
//! party's node, the orchestrator's commands, the numerical core's CLI and the demo. It does
//! not link the experiments (`dpcotrain-lab`, crates/lab, has the grids, the frontier and the
//! benchmarks). The commands are library functions (`dpcotrain::cli`); this file is the clap
//! tree and the dispatch.

use clap::{Parser, Subcommand};
use dpcotrain::cli::{certs, data, data_view, demo, gp, node, privacy, run, status, svgp};
use dpcotrain::process;

#[derive(Debug, Parser)]
#[command(name = "dpcotrain", version, about = "Differentially private co-training of Gaussian processes")]
struct Cli {
    /// Log lines on stderr as text or JSON (one object per line). Levels come from RUST_LOG
    /// (default: info for `node serve`, which logs one line per RPC; warn otherwise).
    #[arg(long, global = true, value_parser = ["text", "json"], default_value = "text")]
    log_format: String,
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// The main job: two real nodes on loopback (mutual TLS), CCPP, the honest calibrated
    /// label-DP protocol (ε = 1); prints a table with a verdict per party and writes a report
    /// folder.
    Demo(demo::DemoArgs),
    /// The sparse-GP numerical core: fit and predict from CSV files.
    #[command(subcommand)]
    Gp(GpCommand),
    /// Label-DP arithmetic: calibrate the Gaussian mechanism, compose releases.
    #[command(subcommand)]
    Privacy(privacy::PrivacyCommand),
    /// A party's gRPC node.
    #[command(subcommand)]
    Node(NodeCommand),
    /// Drive co-training rounds across running nodes (federation.toml).
    Run(run::RunArgs),
    /// A running node's model version, rounds and privacy spent.
    Status(status::StatusArgs),
    /// Throw-away development secrets: a CA, certificates and tokens for a federation.
    Certs(certs::CertsArgs),
    /// Data helpers.
    #[command(subcommand)]
    Data(DataCommand),
}

#[derive(Debug, Subcommand)]
enum NodeCommand {
    /// Load the private view, fit the local GP and serve the release path over gRPC.
    Serve(node::ServeArgs),
    /// Validate a party config without serving; print what it resolves to (JSON).
    Check(node::CheckArgs),
    /// Check a node's state directory entry by entry and say what its MAC chain proves; with
    /// --write, keep a backup and rewrite it as the proven state.
    Repair(node::RepairArgs),
}

#[derive(Debug, Subcommand)]
enum DataCommand {
    /// Write the shipped CCPP data as two parties' CSV views ({AT,V} and {AP,RH}).
    SplitCcpp(data::SplitArgs),
    /// Draw the pool's and the test set's entities from a table's id column (pool-ids.csv,
    /// test-ids.csv: the public order every party uses).
    Ids(data_view::IdsArgs),
    /// Write this party's train.csv, pool.csv and test.csv from its own table and the agreed
    /// pool and test ids.
    View(data_view::ViewArgs),
}

#[derive(Debug, Subcommand)]
enum GpCommand {
    /// Fit a GP (exact, VFE, FITC or DTC) to a CSV file, optionally predict.
    Fit(gp::FitArgs),
    /// Fit a stochastic variational GP (SVGP) to a CSV streamed from disk, with checkpoints.
    Svgp(svgp::SvgpArgs),
}

fn main() {
    process::keep_freed_memory();
    let cli: Cli = process::parse();
    let serving = matches!(cli.command, Command::Node(NodeCommand::Serve(_)));
    process::init_logging(&cli.log_format, if serving { "info" } else { "warn" });
    if !matches!(
        cli.command,
        Command::Node(NodeCommand::Serve(_)) | Command::Demo(_) | Command::Run(_) | Command::Status(_)
    ) {
        process::default_sigpipe();
    }
    let rt = || tokio::runtime::Builder::new_multi_thread().enable_all().build();
    process::finish(match cli.command {
        Command::Node(NodeCommand::Serve(a)) => {
            rt().map_err(anyhow::Error::from).and_then(|r| r.block_on(node::serve_node(a)))
        }
        Command::Demo(a) => rt().map_err(anyhow::Error::from).and_then(|r| r.block_on(demo::run(a))),
        Command::Node(NodeCommand::Check(a)) => node::check(a),
        Command::Node(NodeCommand::Repair(a)) => node::repair(a),
        Command::Run(a) => rt().map_err(anyhow::Error::from).and_then(|r| r.block_on(run::run(a))),
        Command::Status(a) => rt().map_err(anyhow::Error::from).and_then(|r| r.block_on(status::status(a))),
        Command::Data(DataCommand::SplitCcpp(a)) => data::split_ccpp(a),
        Command::Data(DataCommand::Ids(a)) => data_view::ids(a),
        Command::Data(DataCommand::View(a)) => data_view::view(a),
        Command::Certs(a) => certs::certs(a),
        Command::Gp(GpCommand::Fit(args)) => gp::run(args),
        Command::Gp(GpCommand::Svgp(args)) => svgp::run(args),
        Command::Privacy(cmd) => privacy::run(cmd),
    });
}
