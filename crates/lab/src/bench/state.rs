//! `dpcotrain-lab bench state`: what a flood of large answers costs a node's durable state.
//!
//! A party (simulated, 50 private rows, a 500-entity pool, calibrated DP, `release-once`: one
//! charge per requester, every later answer post-processing, so a flood is never refused) is
//! asked for the **whole pool with full covariance and prior** — two 500 × 500 matrices, the
//! largest answer there is — by `--requesters` requesters in turn, each request with a new id,
//! and the state is saved after each answer as a node does before the answer leaves. Two
//! stores are timed on the same sequence, alternately (A B A B: the machine is shared):
//!
//! - `log`: the node's store — an appended delta per save, compacted when the log outgrows the
//!   snapshot;
//! - `rewrite`: the whole state rewritten (and fsynced) at every save, as before the log.
//!
//! Reported per store: median and largest save time, bytes on disk at the end, bytes written.

use clap::Args;
use dpcotrain_cotrain::CombinerKind;
use dpcotrain_cotrain::PartyState;
use dpcotrain_cotrain::build_parties;
use dpcotrain_cotrain::{DpConfig, ReleasePolicy};
use dpcotrain_cotrain::{PredictRequest, Uncertainty};
use dpcotrain_cotrain::{SimConfig, simulate};
use dpcotrain_federation::store::StateStore;
use dpcotrain_privacy::LabelRange;
use serde_json::json;
use std::path::Path;
use std::time::Instant;

#[derive(Debug, Args)]
pub struct StateBenchArgs {
    /// Requesters flooding the node (each keeps its own answer cache).
    #[arg(long, default_value_t = 4)]
    pub requesters: usize,
    /// Whole-pool requests per requester.
    #[arg(long, default_value_t = 6)]
    pub requests: usize,
    /// Alternating repetitions of the two stores (A B A B …).
    #[arg(long, default_value_t = 2)]
    pub reps: usize,
    #[arg(long)]
    pub json: bool,
}

fn dir_bytes(dir: &Path) -> u64 {
    ["state.json", "state.log"].iter().filter_map(|f| std::fs::metadata(dir.join(f)).ok()).map(|m| m.len()).sum()
}

/// Save every state of `states` in `dir` and time each save. `rewrite`: a fresh store per save
/// (its first save writes the whole state).
fn run_store(dir: &Path, states: &[PartyState], rewrite: bool) -> anyhow::Result<(Vec<f64>, u64, u64)> {
    let _ = std::fs::remove_dir_all(dir);
    let mut times = Vec::with_capacity(states.len());
    let mut written = 0u64;
    let mut store = Some(StateStore::open(dir)?);
    for s in states {
        if rewrite {
            drop(store.take()); // release the lock first
            store = Some(StateStore::open(dir)?);
        }
        let log_before = std::fs::metadata(dir.join("state.log")).map(|m| m.len()).unwrap_or(0);
        let t = Instant::now();
        store.as_ref().expect("open store").save(s)?;
        times.push(t.elapsed().as_secs_f64());
        let log_after = std::fs::metadata(dir.join("state.log")).map(|m| m.len()).unwrap_or(0);
        // An append writes the log's growth; a snapshot writes the whole snapshot.
        written += if log_after > log_before {
            log_after - log_before
        } else {
            std::fs::metadata(dir.join("state.json")).map(|m| m.len()).unwrap_or(0)
        };
    }
    Ok((times, dir_bytes(dir), written))
}

fn median(v: &[f64]) -> f64 {
    let mut s = v.to_vec();
    s.sort_by(f64::total_cmp);
    s[s.len() / 2]
}

pub fn run(a: StateBenchArgs) -> anyhow::Result<()> {
    if a.requesters == 0 || a.requests == 0 || a.reps == 0 {
        anyhow::bail!("--requesters, --requests and --reps must be at least 1");
    }
    let sc = simulate(&SimConfig { n_obs: 50, seed: 7, ..SimConfig::default() })?;
    let dp = DpConfig::calibrated(1.0, 1e-5, 1.0, LabelRange::new(-3.0, 3.0)?, ReleasePolicy::ReleaseOnce);
    let parties = build_parties(&sc, CombinerKind::Noisy, Uncertainty::Full, &dp, 7)?;
    let mut party = parties[0].lock().map_err(|_| anyhow::anyhow!("lock poisoned"))?;
    let pool: Vec<usize> = (0..party.pool_size()).collect();
    let mut states = Vec::new();
    let mut answer_bytes = 0usize;
    for k in 0..a.requests {
        for r in 0..a.requesters {
            let req = PredictRequest {
                request_id: format!("flood-{k}"),
                requester: format!("R{r}"),
                indices: pool.clone(),
                uncertainty: Uncertainty::Full,
                want_prior: true,
                witness: None,
            };
            let ans = party.answer(&req)?;
            answer_bytes = dpcotrain_cotrain::answer_cache::answer_bytes(&ans);
            states.push(party.state());
        }
    }
    drop(party);
    let base = std::env::temp_dir().join(format!("dpcotrain-bench-state-{}", std::process::id()));
    let mut rows: Vec<(&str, Vec<f64>, u64, u64)> = Vec::new();
    for rep in 0..a.reps {
        for (name, rewrite) in [("log", false), ("rewrite", true)] {
            let (t, on_disk, written) = run_store(&base.join(format!("{name}-{rep}")), &states, rewrite)?;
            match rows.iter_mut().find(|r| r.0 == name) {
                Some(row) => {
                    row.1.extend(t);
                    row.2 = on_disk;
                    row.3 += written;
                }
                None => rows.push((name, t, on_disk, written)),
            }
        }
    }
    let _ = std::fs::remove_dir_all(&base);
    let saves = states.len();
    let out: Vec<_> = rows
        .iter()
        .map(|(name, t, on_disk, written)| {
            json!({
                "store": name,
                "saves": saves,
                "save_ms_median": median(t) * 1e3,
                "save_ms_max": t.iter().cloned().fold(0.0, f64::max) * 1e3,
                "bytes_on_disk_at_end": on_disk,
                "bytes_written_per_rep": written / a.reps as u64,
            })
        })
        .collect();
    if a.json {
        println!("{}", serde_json::to_string_pretty(&out)?);
        return Ok(());
    }
    println!(
        "{saves} saves: {} requesters × {} whole-pool answers (full covariance + prior, {:.1} MB each), {} alternating repetitions",
        a.requesters,
        a.requests,
        answer_bytes as f64 / 1e6,
        a.reps
    );
    println!("{:<8} {:>12} {:>12} {:>16} {:>18}", "store", "median ms", "max ms", "on disk (MB)", "written/rep (MB)");
    for r in &out {
        println!(
            "{:<8} {:>12.1} {:>12.1} {:>16.1} {:>18.1}",
            r["store"].as_str().unwrap_or(""),
            r["save_ms_median"].as_f64().unwrap_or(f64::NAN),
            r["save_ms_max"].as_f64().unwrap_or(f64::NAN),
            r["bytes_on_disk_at_end"].as_f64().unwrap_or(f64::NAN) / 1e6,
            r["bytes_written_per_rep"].as_f64().unwrap_or(f64::NAN) / 1e6
        );
    }
    Ok(())
}
