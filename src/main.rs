//! `dpcotrain`: differentially private co-training of Gaussian processes.
//!
//! Subcommands grow with the project; see README.md for the two commands a newcomer runs.

mod cli;

use clap::{CommandFactory, FromArgMatches, Parser, Subcommand};
use cli::{bench, certs, data, demo, gp, node, privacy, run, status, svgp};

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
    /// The thesis's experiment grids: floors, simulated, ccpp.
    #[command(subcommand)]
    Experiment(dpcotrain_experiments::ExperimentCommand),
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
    /// Benchmarks on this machine: the numerical core (`gp`) and the federation (`node`).
    #[command(subcommand)]
    Bench(bench::BenchCommand),
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
}

#[derive(Debug, Subcommand)]
enum GpCommand {
    /// Fit a GP (exact, VFE, FITC or DTC) to a CSV file, optionally predict.
    Fit(gp::FitArgs),
    /// Fit a stochastic variational GP (SVGP) to a CSV streamed from disk, with checkpoints.
    Svgp(svgp::SvgpArgs),
}

/// Every (sub)command accepts negative numbers as option values, so `--epsilon -1` reaches our
/// validation ("must be positive") instead of clap's "unexpected argument '-1'".
/// Logs go to stderr; RUST_LOG sets the levels (a node serves at info by default, so each RPC
/// leaves one line).
fn init_logging(cli: &Cli) {
    use std::io::IsTerminal as _;
    let default = if matches!(cli.command, Command::Node(NodeCommand::Serve(_))) { "info" } else { "warn" };
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default));
    let builder = tracing_subscriber::fmt().with_writer(std::io::stderr).with_env_filter(filter).with_target(false);
    if cli.log_format == "json" {
        builder.json().init();
    } else {
        builder.with_ansi(std::io::stderr().is_terminal()).init();
    }
}

fn with_negative_numbers(cmd: clap::Command) -> clap::Command {
    cmd.allow_negative_numbers(true).mut_subcommands(with_negative_numbers)
}

fn main() {
    keep_freed_memory();
    let matches = match with_negative_numbers(Cli::command()).try_get_matches() {
        Ok(m) => m,
        Err(e) => usage_error(&e),
    };
    let cli = Cli::from_arg_matches(&matches).unwrap_or_else(|e| e.exit());
    init_logging(&cli);
    if !matches!(
        cli.command,
        Command::Node(NodeCommand::Serve(_)) | Command::Demo(_) | Command::Run(_) | Command::Status(_)
    ) {
        default_sigpipe();
    }
    let rt = || tokio::runtime::Builder::new_multi_thread().enable_all().build();
    let result = match cli.command {
        Command::Node(NodeCommand::Serve(a)) => {
            rt().map_err(anyhow::Error::from).and_then(|r| r.block_on(node::serve_node(a)))
        }
        Command::Demo(a) => rt().map_err(anyhow::Error::from).and_then(|r| r.block_on(demo::run(a))),
        Command::Node(NodeCommand::Check(a)) => node::check(a),
        Command::Node(NodeCommand::Repair(a)) => node::repair(a),
        Command::Run(a) => rt().map_err(anyhow::Error::from).and_then(|r| r.block_on(run::run(a))),
        Command::Status(a) => rt().map_err(anyhow::Error::from).and_then(|r| r.block_on(status::status(a))),
        Command::Data(DataCommand::SplitCcpp(a)) => data::split_ccpp(a),
        Command::Certs(a) => certs::certs(a),
        Command::Gp(GpCommand::Fit(args)) => gp::run(args),
        Command::Gp(GpCommand::Svgp(args)) => svgp::run(args),
        Command::Privacy(cmd) => privacy::run(cmd),
        Command::Experiment(cmd) => dpcotrain_experiments::run(cmd),
        Command::Bench(cmd) => bench::run(cmd),
    };
    if let Err(e) = result {
        eprintln!("error: {}", error_line(&e));
        std::process::exit(1);
    }
}

/// A command line that does not parse: help and version as clap prints them; any other error
/// as one line (clap's message without its usage block) and exit status 2, the usage-error
/// convention (every other error exits 1).
fn usage_error(e: &clap::Error) -> ! {
    use clap::error::ErrorKind;
    if matches!(e.kind(), ErrorKind::DisplayHelp | ErrorKind::DisplayVersion)
        || e.kind() == ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand
    {
        e.exit();
    }
    let text = e.to_string();
    let parts: Vec<&str> = text
        .lines()
        .map(str::trim)
        .take_while(|l| !l.starts_with("Usage:") && !l.starts_with("For more information"))
        .filter(|l| !l.is_empty())
        .collect();
    let line = parts
        .iter()
        .enumerate()
        .map(|(i, l)| if i > 0 && l.starts_with("tip:") { format!("; {l}") } else { format!(" {l}") })
        .collect::<String>()
        .trim()
        .replace(":  ", ": ");
    eprintln!("{} (--help lists the options)", line.trim_end_matches('.'));
    std::process::exit(2);
}

/// Let a write to a closed pipe end the process the way other command-line tools end (`… |
/// head`), rather than as a panic in `println!`. Only for commands that write a report to
/// stdout and hold no sockets: a node keeps the runtime's "ignore SIGPIPE" so a peer that hangs
/// up is an error on that connection, never the end of the process.
fn default_sigpipe() {
    #[cfg(unix)]
    // SAFETY: restoring the default disposition of one signal before any thread is started.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
}

/// Keep freed memory in the process. glibc's malloc serves a block above its mmap threshold
/// (128 KiB, raised only as large blocks are freed) from a fresh mapping and trims the heap
/// above 128 KiB of free top, so every step of a model that allocates a few 4 MB matrices
/// (the SVGP step's K_uf, A = L⁻¹K_uf and their gradients at M = 500, batch 1,000) faulted and
/// zeroed them in again: a fresh `bench svgp --n 10000` spent a third of a step in the kernel's
/// page faults (69–78 ms per step; 49–51 ms with these two settings, A B A B on one machine,
/// docs/results.md "Allocator"). Blocks up to 32 MiB (glibc's ceiling) come from the heap, and
/// up to 256 MiB of free heap stays mapped for the next step. Numbers do not change (only
/// where memory lives); library users keep their allocator's defaults.
fn keep_freed_memory() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: mallopt sets two thresholds of glibc's allocator; called at start, before any
    // thread is started.
    unsafe {
        libc::mallopt(libc::M_MMAP_THRESHOLD, 32 << 20);
        libc::mallopt(libc::M_TRIM_THRESHOLD, 256 << 20);
    }
}

/// An error and its causes on one line, `outer: inner`, leaving out a cause whose text the
/// message already contains (many errors quote their source: no `No such file or directory (os
/// error 2): No such file or directory (os error 2)`).
fn error_line(e: &anyhow::Error) -> String {
    let mut out = String::new();
    for cause in e.chain() {
        let text = cause.to_string();
        if text.is_empty() || out.contains(&text) {
            continue;
        }
        if !out.is_empty() {
            out.push_str(": ");
        }
        out.push_str(&text);
    }
    out.lines().map(str::trim).filter(|l| !l.is_empty()).collect::<Vec<_>>().join(" ")
}
