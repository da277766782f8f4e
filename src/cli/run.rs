//! `dpcotrain run`: drive co-training rounds across running nodes (federation.toml), and the
//! orchestration loop the demo shares.

use crate::cli::party_figures::{NOT_GUARANTEED_NOTE, PartyFigures, baseline_lines, verdict};
use clap::Args;
use dpcotrain_federation::config::{FederationConfig, load};
use dpcotrain_federation::launch::{Drove, drive, orchestrator};
use serde::Serialize;
use std::path::PathBuf;

#[derive(Debug, Args)]
pub struct RunArgs {
    #[arg(long)]
    pub config: PathBuf,
    /// Total number of rounds to reach (default: the config's `rounds`). A federation that
    /// was interrupted continues where it stopped.
    #[arg(long)]
    pub rounds: Option<u32>,
    #[arg(long)]
    pub json: bool,
}

/// Rounds done so far, counted as `status` counts them ("rounds done"): "every node had done
/// 3 rounds", or "A had done 3 rounds, B 4". Rounds are numbered from 1 everywhere a person
/// reads them (the progress bar, these lines, `status`); JSON keeps counts.
fn positions(nodes: &[String], position: &[u32]) -> String {
    let rounds = |r: u32| if r == 1 { "1 round".to_string() } else { format!("{r} rounds") };
    if position.windows(2).all(|w| w[0] == w[1]) {
        return format!("every node had done {}", rounds(position.first().copied().unwrap_or(0)));
    }
    nodes
        .iter()
        .zip(position)
        .enumerate()
        .map(|(i, (n, &r))| if i == 0 { format!("{n} had done {}", rounds(r)) } else { format!("{n} {r}") })
        .collect::<Vec<_>>()
        .join(", ")
}

/// "round 5" or "rounds 5 to 10": rounds `start + 1` to `target`, numbered from 1.
fn ran_rounds(start: u32, target: u32) -> String {
    if start + 1 == target { format!("round {target}") } else { format!("rounds {} to {target}", start + 1) }
}

/// What `run` did: the target, where the nodes stood, the rounds run, each party's figures
/// afterwards, and the exchanges refused or not sent. `--json` prints it as JSON; otherwise its
/// `Display` is the table a person reads.
#[derive(Debug, Clone, Serialize)]
pub struct RunReport {
    pub federation_id: String,
    /// The total number of rounds to reach.
    pub rounds: u32,
    /// The first round run (the lowest position, at most the target).
    pub started_at_round: u32,
    /// Rounds each node had done when the run began (node order).
    pub position_before: Vec<u32>,
    pub rounds_run: usize,
    pub parties: Vec<PartyFigures>,
    /// Exchanges that failed or were refused (`"round 3, A ← B: …"`).
    pub refused: Vec<String>,
    /// Peer requests not sent: the peer's budget for the querier was already spent.
    pub skipped: Vec<String>,
    /// The nodes' names (node order), for the lines that say where each stood.
    #[serde(skip)]
    pub nodes: Vec<String>,
}

/// Drive the federation to the target round (continuing an interrupted run) and read every
/// node's status afterwards.
pub async fn run_report(a: &RunArgs) -> anyhow::Result<RunReport> {
    let cfg: FederationConfig = load(&a.config)?;
    let target = a.rounds.unwrap_or(cfg.rounds);
    let orch = orchestrator(&cfg, &a.config)?;
    let bar = indicatif::ProgressBar::new(0);
    bar.set_style(
        indicatif::ProgressStyle::with_template("{bar:30} round {msg} ({pos}/{len} turns, eta {eta})")
            .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
    );
    let n = orch.nodes.len() as u64;
    let mut first = true;
    let mut skipped: Vec<String> = Vec::new();
    let drove = drive(&orch, target, |round, i, r| {
        skipped.extend(r.skipped.iter().cloned());
        if first {
            bar.set_length((target - round) as u64 * n);
            first = false;
        }
        bar.set_message(format!("{}/{target}", round + 1));
        if i + 1 == n as usize {
            bar.inc(0);
        }
        bar.inc(1);
    })
    .await?;
    bar.finish_and_clear();
    let Drove { position, start, per_round, failures } = drove;
    let mut parties = Vec::new();
    for i in 0..per_round.len() {
        parties.push(PartyFigures::from(&orch.status(i).await.map_err(anyhow::Error::msg)?));
    }
    Ok(RunReport {
        federation_id: cfg.federation_id,
        rounds: target,
        started_at_round: start,
        position_before: position,
        rounds_run: per_round.first().map_or(0, Vec::len),
        parties,
        refused: failures,
        skipped,
        nodes: orch.nodes.iter().map(|n| n.name.clone()).collect(),
    })
}

impl std::fmt::Display for RunReport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let (target, position) = (self.rounds, &self.position_before);
        if self.rounds_run == 0 {
            writeln!(f, "nothing to do: {} (target {target})", positions(&self.nodes, position))?;
        } else if position.iter().any(|&r| r > 0) {
            writeln!(
                f,
                "continued an earlier run: {}; ran {}",
                positions(&self.nodes, position),
                ran_rounds(self.started_at_round, target)
            )?;
        }
        writeln!(
            f,
            "{:<10} {:>12} {:>12} {:>12}  privacy spent on its labels (ε per requester; all requesters together)",
            "party", "mean only", "RMSE alone", "RMSE after"
        )?;
        let cell = |v: Option<f64>| v.map_or_else(|| "—".to_string(), |x| format!("{x:.4}"));
        let mut any_unguaranteed = false;
        for p in &self.parties {
            let spent: Vec<String> =
                p.privacy_spent.iter().map(|s| format!("{}: {:.3}{}", s.peer, s.epsilon, s.mark())).collect();
            let total_mark = p.mark();
            any_unguaranteed |= !total_mark.is_empty();
            writeln!(
                f,
                "{:<10} {:>12} {:>12} {:>12}  {}",
                p.party,
                cell(p.rmse_mean_baseline),
                cell(p.rmse_before),
                cell(p.rmse_after),
                if spent.is_empty() {
                    "none".to_string()
                } else {
                    format!("{}; together {:.3}{total_mark}", spent.join(", "), p.privacy_spent_total.epsilon)
                }
            )?;
        }
        writeln!(f, "(mean only: test RMSE of predicting the public mean of y, the baseline that needs no label)")?;
        if any_unguaranteed {
            writeln!(f, "{NOT_GUARANTEED_NOTE}")?;
        }
        writeln!(
            f,
            "(together: the ε of all requesters' releases combined — what colluding requesters could learn together)"
        )?;
        for p in &self.parties {
            let (Some(alone), Some(after)) = (p.rmse_before, p.rmse_after) else {
                writeln!(
                    f,
                    "{}: test figures not shared (computed on its private labels; privacy.share_test_metrics in its party.toml)",
                    p.party
                )?;
                continue;
            };
            writeln!(f, "{}: {}", p.party, verdict(alone, after, p.rmse_change_se, None))?;
        }
        for line in baseline_lines(&self.parties) {
            writeln!(f, "{line}")?;
        }
        if !self.skipped.is_empty() {
            writeln!(
                f,
                "{} peer requests not sent: each peer's budget for the querier was already spent (its one release was made)",
                self.skipped.len()
            )?;
        }
        Ok(())
    }
}

pub async fn run(a: RunArgs) -> anyhow::Result<()> {
    let report = run_report(&a).await?;
    super::print_report(&report, super::Output::json_if(a.json))?;
    if !report.refused.is_empty() {
        for why in &report.refused {
            eprintln!("failed: {why}");
        }
        anyhow::bail!("{} of the run's exchanges failed or were refused (listed above)", report.refused.len());
    }
    Ok(())
}
