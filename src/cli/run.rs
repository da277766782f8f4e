//! `dpcotrain run`: drive co-training rounds across running nodes (federation.toml), and the
//! orchestration loop the demo shares.

use crate::cli::party_figures::party_json;
use clap::Args;
use dpcotrain_federation::config::{FederationConfig, load};
use dpcotrain_federation::launch::{Drove, drive, orchestrator};
use dpcotrain_federation::orchestrator::Orchestrator;
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
fn positions(orch: &Orchestrator, position: &[u32]) -> String {
    let rounds = |r: u32| if r == 1 { "1 round".to_string() } else { format!("{r} rounds") };
    if position.windows(2).all(|w| w[0] == w[1]) {
        return format!("every node had done {}", rounds(position.first().copied().unwrap_or(0)));
    }
    orch.nodes
        .iter()
        .zip(position)
        .enumerate()
        .map(
            |(i, (n, &r))| {
                if i == 0 { format!("{} had done {}", n.name, rounds(r)) } else { format!("{} {r}", n.name) }
            },
        )
        .collect::<Vec<_>>()
        .join(", ")
}

/// "round 5" or "rounds 5 to 10": rounds `start + 1` to `target`, numbered from 1.
fn ran_rounds(start: u32, target: u32) -> String {
    if start + 1 == target { format!("round {target}") } else { format!("rounds {} to {target}", start + 1) }
}

pub async fn run(a: RunArgs) -> anyhow::Result<()> {
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
    let mut rows = Vec::new();
    for i in 0..per_round.len() {
        rows.push(party_json(&orch.status(i).await.map_err(anyhow::Error::msg)?));
    }
    let ran = per_round.first().map_or(0, Vec::len);
    if a.json {
        println!(
            "{}",
            serde_json::json!({"federation_id": cfg.federation_id, "rounds": target, "started_at_round": start,
                               "position_before": position, "rounds_run": ran,
                               "parties": rows, "refused": failures, "skipped": skipped})
        );
    } else {
        if ran == 0 {
            println!("nothing to do: {} (target {target})", positions(&orch, &position));
        } else if position.iter().any(|&r| r > 0) {
            println!("continued an earlier run: {}; ran {}", positions(&orch, &position), ran_rounds(start, target));
        }
        println!(
            "{:<10} {:>12} {:>12} {:>12}  privacy spent on its labels (ε per requester; all requesters together)",
            "party", "mean only", "RMSE alone", "RMSE after"
        );
        let release_mark = |s: &serde_json::Value| {
            let log = s["release_log"].as_array().map(Vec::as_slice).unwrap_or_default();
            crate::cli::party_figures::epsilon_mark(log.iter().map(|r| r["guaranteed"].as_bool() == Some(true)))
        };
        let mut any_unguaranteed = false;
        let cell = |v: &serde_json::Value| v.as_f64().map_or_else(|| "—".to_string(), |x| format!("{x:.4}"));
        for r in &rows {
            let spent: Vec<String> = r["privacy_spent"]
                .as_array()
                .map(|v| {
                    v.iter()
                        .map(|s| {
                            format!(
                                "{}: {:.3}{}",
                                s["peer"].as_str().unwrap_or("?"),
                                s["epsilon"].as_f64().unwrap_or(0.0),
                                release_mark(s)
                            )
                        })
                        .collect()
                })
                .unwrap_or_default();
            let total = r["privacy_spent_total"]["epsilon"].as_f64().unwrap_or(0.0);
            let spends = r["privacy_spent"].as_array().map(Vec::as_slice).unwrap_or_default();
            let total_mark = crate::cli::party_figures::epsilon_mark(spends.iter().map(|s| release_mark(s).is_empty()));
            any_unguaranteed |= !total_mark.is_empty();
            println!(
                "{:<10} {:>12} {:>12} {:>12}  {}",
                r["party"].as_str().unwrap_or(""),
                cell(&r["rmse_mean_baseline"]),
                cell(&r["rmse_before"]),
                cell(&r["rmse_after"]),
                if spent.is_empty() {
                    "none".to_string()
                } else {
                    format!("{}; together {total:.3}{total_mark}", spent.join(", "))
                }
            );
        }
        println!("(mean only: test RMSE of predicting the public mean of y, the baseline that needs no label)");
        if any_unguaranteed {
            println!("{}", crate::cli::party_figures::NOT_GUARANTEED_NOTE);
        }
        println!(
            "(together: the ε of all requesters' releases combined — what colluding requesters could learn together)"
        );
        for r in &rows {
            let (Some(alone), Some(after)) = (r["rmse_before"].as_f64(), r["rmse_after"].as_f64()) else {
                println!(
                    "{}: test figures not shared (computed on its private labels; privacy.share_test_metrics in its party.toml)",
                    r["party"].as_str().unwrap_or("")
                );
                continue;
            };
            println!(
                "{}: {}",
                r["party"].as_str().unwrap_or(""),
                crate::cli::party_figures::verdict(alone, after, r["rmse_change_se"].as_f64(), None)
            );
        }
        for line in crate::cli::party_figures::baseline_lines(&rows) {
            println!("{line}");
        }
        if !skipped.is_empty() {
            println!(
                "{} peer requests not sent: each peer's budget for the querier was already spent (its one release was made)",
                skipped.len()
            );
        }
    }
    if !failures.is_empty() {
        for why in &failures {
            eprintln!("failed: {why}");
        }
        anyhow::bail!("{} of the run's exchanges failed or were refused (listed above)", failures.len());
    }
    Ok(())
}
