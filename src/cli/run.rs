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

/// "A at round 3, B at 4" (or "both at round 3").
fn positions(orch: &Orchestrator, position: &[u32]) -> String {
    if position.windows(2).all(|w| w[0] == w[1]) {
        return format!("every node at round {}", position.first().copied().unwrap_or(0));
    }
    orch.nodes.iter().zip(position).map(|(n, r)| format!("{} at round {r}", n.name)).collect::<Vec<_>>().join(", ")
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
            println!("continued an earlier run: {}; ran rounds {start} to {}", positions(&orch, &position), target - 1);
        }
        println!(
            "{:<10} {:>12} {:>12} {:>12}  privacy spent on its labels (ε per requester; all requesters together)",
            "party", "mean only", "RMSE alone", "RMSE after"
        );
        let cell = |v: &serde_json::Value| v.as_f64().map_or_else(|| "—".to_string(), |x| format!("{x:.4}"));
        for r in &rows {
            let spent: Vec<String> = r["privacy_spent"]
                .as_array()
                .map(|v| {
                    v.iter()
                        .map(|s| {
                            format!(
                                "{}: {:.3}",
                                s["peer"].as_str().unwrap_or("?"),
                                s["epsilon"].as_f64().unwrap_or(0.0)
                            )
                        })
                        .collect()
                })
                .unwrap_or_default();
            let total = r["privacy_spent_total"]["epsilon"].as_f64().unwrap_or(0.0);
            println!(
                "{:<10} {:>12} {:>12} {:>12}  {}",
                r["party"].as_str().unwrap_or(""),
                cell(&r["rmse_mean_baseline"]),
                cell(&r["rmse_before"]),
                cell(&r["rmse_after"]),
                if spent.is_empty() {
                    "none".to_string()
                } else {
                    format!("{}; together {total:.3}", spent.join(", "))
                }
            );
        }
        println!("(mean only: test RMSE of predicting the public mean of y, the baseline that needs no label)");
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
