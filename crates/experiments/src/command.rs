//! `dpcotrain-lab experiment floors | simulated | ccpp`: the thesis's grids (Thomas 2017 §4.3, §4.5).

use crate::files::{load_jsonl, write_atomic};
use crate::floors::{floors_table, monte_carlo_floor};
use crate::grid::{Dataset, DpLabel, DpSetting, Grid, RunRow, Shard, job_keys, run_grid_resumable, sort_rows};
use crate::summary::mean_sd;
use crate::thesis_tables as report;
use anyhow::Context;
use clap::{Args, Subcommand, ValueEnum};
use dpcotrain_cotrain::ReleasePolicy;
use dpcotrain_cotrain::SimConfig;
use dpcotrain_cotrain::Uncertainty;
use dpcotrain_cotrain::readings::{
    AnswerSource, BlockyTheta, FitStarts, HybridForm, ReadingPreset, Readings, SelectionVariance, SharedVariance,
    ThesisNoise,
};
use dpcotrain_cotrain::{CombinerKind, RefitPolicy};
use dpcotrain_privacy::LabelRange;
use indicatif::{ProgressBar, ProgressStyle};
use serde_json::json;
use std::collections::BTreeMap;
use std::io::Write;
use std::path::PathBuf;
use std::time::Instant;

#[derive(Debug, Subcommand)]
pub enum ExperimentCommand {
    /// Tables 4.1 and 4.2 (analytic explainable standard deviation) with a Monte-Carlo check.
    Floors {
        #[arg(long)]
        json: bool,
    },
    /// The simulated grid of Thomas §4.3 (defaults: the thesis's full grid).
    Simulated(SimArgs),
    /// The CCPP grid of Thomas §4.5.
    Ccpp(GridArgs),
    /// The privacy–utility frontier of honest co-training: RMSE alone / without DP / at each ε
    /// for each release mechanism and θ policy, with the share of the no-DP gain recovered.
    Frontier(crate::frontier::command::FrontierArgs),
    /// The sparse-GP papers' experiments (Bauer et al. 2016; Walder et al. 2008).
    #[command(subcommand)]
    Sparse(crate::sparse::SparseCommand),
    /// The scalable variational GPs of Thomas 2017 ch. 1–3 (SVGP against SGPR; Kronecker/Tucker
    /// VGP; RNVGP).
    #[command(subcommand)]
    Scalable(crate::scalable::ScalableCommand),
    /// One report (tables vs the thesis, orderings, figures) from the runs.jsonl of several
    /// experiment folders (e.g. no DP, thesis DP, calibrated ε = 1 and ε = 4).
    Report {
        /// Experiment folders (each with runs.jsonl).
        #[arg(long = "runs", required = true)]
        runs: Vec<PathBuf>,
        #[arg(long)]
        out: PathBuf,
    },
    /// Merge the folders of a sharded grid (`--shard K/N` runs) into one folder with the same
    /// runs.jsonl, tables and figures as an unsharded run; refuses missing, repeated or
    /// unfinished shards and shards of different grids (naming the setting that differs), and
    /// clears the report files of an earlier report from --out.
    Merge {
        /// Shard folders (each with runs.jsonl and shard.json).
        #[arg(required = true)]
        shards: Vec<PathBuf>,
        #[arg(long)]
        out: PathBuf,
    },
}

#[derive(Debug, Clone, Copy, ValueEnum, PartialEq)]
pub enum DpArg {
    Off,
    Thesis,
    Calibrated,
}

#[derive(Debug, Clone, Copy, ValueEnum, PartialEq)]
pub enum PolicyArg {
    ReleaseOnce,
    PerQuery,
}

#[derive(Debug, Args)]
pub struct GridArgs {
    /// Number of seeds (0..N).
    #[arg(long, default_value_t = 10)]
    pub seeds: u64,
    /// Private labelled rows per party (comma list). Default: the thesis's values.
    #[arg(long, value_delimiter = ',')]
    pub nobs: Option<Vec<usize>>,
    /// Masking values (comma list of yes/no).
    #[arg(long, value_delimiter = ',', default_value = "no,yes")]
    pub masking: Vec<String>,
    #[arg(long, value_delimiter = ',', default_value = "blocky,noisy,hybrid")]
    pub combiner: Vec<CombinerKind>,
    #[arg(long, value_delimiter = ',', default_value = "none,marginal,full")]
    pub uncertainty: Vec<Uncertainty>,
    #[arg(long, value_enum, default_value = "off")]
    pub dp: DpArg,
    /// Calibrated DP: ε per requester (one release with the release-once policy).
    #[arg(long, default_value_t = 1.0, value_parser = dpcotrain_privacy::calibrate::parse_epsilon, allow_negative_numbers = true)]
    pub epsilon: f64,
    #[arg(long, default_value_t = 1e-5, value_parser = dpcotrain_privacy::calibrate::parse_delta, allow_negative_numbers = true)]
    pub delta: f64,
    #[arg(long, value_enum, default_value = "release-once")]
    pub policy: PolicyArg,
    /// Label clipping range for calibrated DP (standardised labels).
    #[arg(long, value_delimiter = ',', default_value = "-3,3", allow_negative_numbers = true)]
    pub label_range: Vec<f64>,
    #[arg(long, default_value_t = 25)]
    pub rounds: usize,
    /// Where each D5 re-fit starts: warm (the current θ, the default), warm+restart (also from
    /// the private fit's θ, the better kept; 2.8× the evaluations), or every=K (the restart on
    /// every K-th re-fit only). docs/decisions.md D5
    #[arg(long, default_value = "warm", value_name = "POLICY")]
    pub refit: RefitPolicy,
    /// A named combination of the protocol readings (docs/decisions.md D25): `default` (the
    /// project's reading) or `thesis` (the combination that reproduces Thomas 2017 best). The
    /// flags below override single readings.
    #[arg(long, default_value = "default", value_name = "PRESET")]
    pub reading: ReadingPreset,
    /// Which model a responder answers from: cotrained (default) or private.
    #[arg(long, value_name = "SOURCE")]
    pub answer_source: Option<AnswerSource>,
    /// Whose θ the Blocky query block uses: responder (default) or querier (eq 4.6 as printed;
    /// views of equal dimension only).
    #[arg(long, value_name = "WHOSE")]
    pub blocky_theta: Option<BlockyTheta>,
    /// Thesis DP noise: per-requester-path (default) or fresh-per-query.
    #[arg(long, value_name = "DRAW")]
    pub thesis_noise: Option<ThesisNoise>,
    /// Hybrid's noise placement: joint (default) or yu (Yu et al. 2007).
    #[arg(long, value_name = "FORM")]
    pub hybrid: Option<HybridForm>,
    /// The variance an answer carries: latent (default) or y (latent + the responder's σ²).
    #[arg(long, value_name = "WHICH")]
    pub shared_variance: Option<SharedVariance>,
    /// Starts of the private-only fit: fixed-4 (default, D38), best-of-K (restarts from the
    /// party's seed: the default before D38), fixed-K or single (GPy start s² = ℓ = σ² = 1).
    #[arg(long, value_name = "STARTS")]
    pub fit_starts: Option<FitStarts>,
    /// The variance uncertainty sampling ranks: clamped (default) or raw.
    #[arg(long, value_name = "WHICH")]
    pub selection_variance: Option<SelectionVariance>,
    /// A small subset (2 seeds, n_obs 25, 5 rounds) for smoke tests.
    #[arg(long)]
    pub quick: bool,
    /// Report folder: runs.jsonl (every run, appended as it finishes: an interrupted grid
    /// resumes from it), runs.csv, summary.md, tables.md (ours vs the thesis), SVG figures.
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// Ignore (delete) runs saved in --out by an earlier invocation.
    #[arg(long)]
    pub fresh: bool,
    /// Run only the K-th of N deterministic slices of the grid (K in 0..N; run j of the grid
    /// belongs to shard j mod N) into --out; `experiment merge` joins the shards' folders.
    #[arg(long, value_name = "K/N", requires = "out")]
    pub shard: Option<Shard>,
    /// Print one JSON row per run and party.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub struct SimArgs {
    /// Correlations r (comma list).
    #[arg(long, value_delimiter = ',', default_value = "0.5,0.75,0.9,0.99")]
    pub r: Vec<f64>,
    /// Conditional independence values (comma list of yes/no).
    #[arg(long, value_delimiter = ',', default_value = "no,yes")]
    pub ci: Vec<String>,
    #[command(flatten)]
    pub grid: GridArgs,
}

fn yes_no(v: &[String], flag: &str) -> anyhow::Result<Vec<bool>> {
    v.iter()
        .map(|s| match s.trim() {
            "yes" | "true" => Ok(true),
            "no" | "false" => Ok(false),
            other => anyhow::bail!("--{flag}: {other:?} is not yes or no"),
        })
        .collect()
}

fn dp_setting(a: &GridArgs) -> anyhow::Result<DpSetting> {
    Ok(match a.dp {
        DpArg::Off => DpSetting::Off,
        DpArg::Thesis => DpSetting::Thesis,
        DpArg::Calibrated => {
            dpcotrain_privacy::calibrate::check_epsilon(a.epsilon)?;
            dpcotrain_privacy::calibrate::check_delta(a.delta)?;
            if a.label_range.len() != 2 {
                anyhow::bail!("--label-range takes two numbers LO,HI");
            }
            DpSetting::Calibrated {
                epsilon: a.epsilon,
                delta: a.delta,
                policy: if a.policy == PolicyArg::ReleaseOnce {
                    ReleasePolicy::ReleaseOnce
                } else {
                    ReleasePolicy::PerQuery
                },
                range: LabelRange::new(a.label_range[0], a.label_range[1])?,
            }
        }
    })
}

/// The preset of `--reading` with the single-reading flags applied over it.
pub(crate) fn readings(a: &GridArgs) -> Readings {
    let mut r = a.reading.readings();
    r.answer_source = a.answer_source.unwrap_or(r.answer_source);
    r.blocky_theta = a.blocky_theta.unwrap_or(r.blocky_theta);
    r.thesis_noise = a.thesis_noise.unwrap_or(r.thesis_noise);
    r.hybrid = a.hybrid.unwrap_or(r.hybrid);
    r.shared_variance = a.shared_variance.unwrap_or(r.shared_variance);
    r.fit_starts = a.fit_starts.unwrap_or(r.fit_starts);
    r.selection_variance = a.selection_variance.unwrap_or(r.selection_variance);
    r
}

fn fill_grid(grid: &mut Grid, a: &GridArgs) -> anyhow::Result<()> {
    grid.seeds = (0..a.seeds).collect();
    if let Some(n) = &a.nobs {
        grid.nobs = n.clone();
    }
    grid.masking = yes_no(&a.masking, "masking")?;
    grid.combiners = a.combiner.clone();
    grid.uncertainty = a.uncertainty.clone();
    grid.rounds = a.rounds;
    grid.refit = a.refit;
    grid.readings = readings(a);
    // Refuse a reading that does not apply before any run starts (naming the key).
    grid.readings.check(&grid.dp.config())?;
    if a.quick {
        grid.seeds = (0..a.seeds.min(2)).collect();
        grid.nobs = vec![25];
        grid.rounds = a.rounds.min(5);
    }
    if grid.seeds.is_empty() || grid.nobs.is_empty() || grid.rounds == 0 {
        anyhow::bail!("the grid is empty: need at least one seed, one n_obs and one round");
    }
    Ok(())
}

pub fn run(cmd: ExperimentCommand) -> anyhow::Result<()> {
    match cmd {
        ExperimentCommand::Floors { json } => floors(json),
        ExperimentCommand::Simulated(a) => {
            let mut grid = Grid::thesis_simulated(dp_setting(&a.grid)?);
            let r = a.r.clone();
            if let Some(bad) = r.iter().find(|v| !(**v > 0.0 && **v <= 1.0)) {
                anyhow::bail!("--r: {bad} is outside (0, 1]");
            }
            grid.dataset = Dataset::Simulated { r, ci: yes_no(&a.ci, "ci")?, n_pool: 500, n_test: 500 };
            fill_grid(&mut grid, &a.grid)?;
            execute(&grid, &a.grid)
        }
        ExperimentCommand::Ccpp(a) => {
            let mut grid = Grid::thesis_ccpp(dp_setting(&a)?);
            fill_grid(&mut grid, &a)?;
            execute(&grid, &a)
        }
        ExperimentCommand::Frontier(a) => crate::frontier::command::run(a),
        ExperimentCommand::Sparse(c) => crate::sparse::run(c),
        ExperimentCommand::Scalable(c) => crate::scalable::run(c),
        ExperimentCommand::Merge { shards, out } => merge(&shards, &out),
        ExperimentCommand::Report { runs, out } => {
            let mut rows = Vec::new();
            for d in &runs {
                let r = load_runs(d)?;
                if r.is_empty() {
                    anyhow::bail!("{}: no runs.jsonl with runs in it", d.display());
                }
                rows.extend(r);
            }
            std::fs::create_dir_all(&out).with_context(|| format!("cannot create {}", out.display()))?;
            let fails = thesis_report(&out, &rows)?;
            eprintln!(
                "{} party-rows; {} anchor cells outside tolerance; wrote {}",
                rows.len(),
                fails.len(),
                out.join("tables.md").display()
            );
            Ok(())
        }
    }
}

fn floors(json: bool) -> anyhow::Result<()> {
    let rows = floors_table();
    let mut out = Vec::new();
    for row in &rows {
        let cfg = SimConfig { r: row.r, conditional_independence: row.ci, masking: row.masked, ..SimConfig::default() };
        let (mc_ind, mc_joint) = monte_carlo_floor(&cfg, 200_000);
        out.push(json!({"r": row.r, "ci": row.ci, "masked": row.masked, "individual": row.individual,
                        "joint": row.joint, "mc_individual": mc_ind, "mc_joint": mc_joint}));
    }
    if json {
        println!("{}", serde_json::to_string(&out)?);
    } else {
        println!("Tables 4.1/4.2: explainable standard deviation (analytic | Monte Carlo, n = 200,000)");
        println!("{:>5} {:>4} {:>7} {:>18} {:>18}", "r", "CI", "masked", "individual", "joint");
        for o in &out {
            println!(
                "{:>5} {:>4} {:>7} {:>8.3} | {:>7.3} {:>8.3} | {:>7.3}",
                o["r"],
                if o["ci"] == true { "yes" } else { "no" },
                if o["masked"] == true { "yes" } else { "no" },
                o["individual"].as_f64().unwrap_or(f64::NAN),
                o["mc_individual"].as_f64().unwrap_or(f64::NAN),
                o["joint"].as_f64().unwrap_or(f64::NAN),
                o["mc_joint"].as_f64().unwrap_or(f64::NAN)
            );
        }
    }
    Ok(())
}

/// Rows saved in `dir/runs.jsonl` (a torn last line from a crash is skipped).
fn load_runs(dir: &std::path::Path) -> anyhow::Result<Vec<RunRow>> {
    load_jsonl(&dir.join("runs.jsonl"))
}

fn execute(grid: &Grid, a: &GridArgs) -> anyhow::Result<()> {
    let all_keys = job_keys(grid);
    // This invocation's runs: the whole grid, or its shard.
    let keys: std::collections::HashSet<String> = all_keys
        .iter()
        .enumerate()
        .filter(|(j, _)| a.shard.is_none_or(|s| s.contains(*j)))
        .map(|(_, k)| k.clone())
        .collect();
    let mut saved = Vec::new();
    let mut journal = None;
    if let Some(dir) = &a.out {
        std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
        let path = dir.join("runs.jsonl");
        if a.fresh && path.exists() {
            std::fs::remove_file(&path).with_context(|| format!("cannot delete {}", path.display()))?;
        }
        // Settings that change every run's numbers but not its key: a folder holds runs of one.
        let settings = serde_json::to_string_pretty(&GridSettings {
            rounds: grid.rounds,
            refit: grid.refit,
            readings: grid.readings,
        })?;
        let settings_path = dir.join("grid.json");
        if let Ok(old) = std::fs::read_to_string(&settings_path)
            && old != settings
            && path.exists()
        {
            anyhow::bail!(
                "{} holds runs of a grid with other settings ({}) than this one ({}): use --fresh to start over, or another --out",
                dir.display(),
                old.split_whitespace().collect::<Vec<_>>().join(" "),
                settings.split_whitespace().collect::<Vec<_>>().join(" ")
            );
        }
        write_atomic(&settings_path, &settings)?;
        if let Some(shard) = a.shard {
            let tag = ShardTag { shard, runs: keys.len(), grid_runs: all_keys.len(), grid: Some(grid_spec(grid)) };
            write_atomic(&dir.join("shard.json"), &serde_json::to_string_pretty(&tag)?)?;
        }
        saved = load_runs(dir)?.into_iter().filter(|r| keys.contains(&r.key())).collect();
        let f = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&path)
            .with_context(|| format!("cannot open {}", path.display()))?;
        journal = Some(std::sync::Mutex::new(std::io::BufWriter::new(f)));
    }
    let done: std::collections::HashSet<String> = saved.iter().map(|r| r.key()).collect();
    if !done.is_empty() {
        eprintln!("resuming: {} of {} runs already in runs.jsonl", done.len(), keys.len());
    }
    // Runs of other shards are skipped like finished ones.
    let skip: std::collections::HashSet<String> =
        all_keys.iter().filter(|k| done.contains(*k) || !keys.contains(*k)).cloned().collect();
    let total = keys.len();
    let bar = ProgressBar::new(all_keys.len() as u64);
    bar.set_style(
        ProgressStyle::with_template("{elapsed_precise} [{bar:40}] {pos}/{len} runs  ETA {eta}")
            .unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    let start = Instant::now();
    let save = |rows: &[RunRow]| {
        if let Some(j) = &journal
            && let Ok(mut w) = j.lock()
        {
            for r in rows {
                if let Ok(line) = serde_json::to_string(r) {
                    let _ = writeln!(w, "{line}");
                }
            }
            let _ = w.flush();
        }
    };
    let (mut rows, cost) = run_grid_resumable(grid, &skip, &save, &|done, _| bar.set_position(done as u64))?;
    bar.finish_and_clear();
    let secs = start.elapsed().as_secs_f64();
    eprintln!(
        "{} runs in {secs:.1} s on {} threads; {} re-fit objective evaluations",
        total - done.len(),
        rayon::current_num_threads(),
        cost.refit_evaluations
    );
    if !grid.readings.is_default() {
        eprintln!("readings: {}", grid.readings);
    }
    saved.append(&mut rows);
    let mut rows = saved;
    sort_rows(&mut rows);
    let failed = rows.iter().filter(|r| r.error.is_some()).count();
    if failed > 0 {
        eprintln!("warning: {failed} party-rows come from failed runs (see the error column)");
    }
    drop(journal);
    if let Some(dir) = &a.out {
        // The journal has every row in the order runs finished; write_report rewrites it in
        // canonical order so that the folder is the same however the grid was run or sharded.
        write_report(dir, &rows)?;
        if a.shard.is_none() {
            thesis_report(dir, &rows)?;
        }
        eprintln!("report written to {}", dir.display());
    }
    if a.json {
        let mut out = std::io::stdout().lock();
        for r in &rows {
            writeln!(out, "{}", serde_json::to_string(r)?)?;
        }
    } else {
        print!("{}", summary_table(&rows));
    }
    Ok(())
}

/// tables.md and the figures for any set of rows (one or several DP settings and datasets).
fn thesis_report(dir: &std::path::Path, rows: &[RunRow]) -> anyhow::Result<Vec<String>> {
    let mut md = String::from(
        "# dpcotrain vs Thomas 2017

Each cell: our mean ± sd (the thesis's value; our difference). Anchor \
         cells (docs/decisions.md, \"Reproduction anchors\") are marked ✓ when |ours − thesis| ≤ max(0.02, thesis sd), ✗ otherwise.\n\n",
    );
    let mut fails = Vec::new();
    let mut groups: BTreeMap<(String, DpLabel), Vec<RunRow>> = BTreeMap::new();
    for r in rows {
        groups.entry((r.dataset.clone(), r.dp)).or_default().push(r.clone());
    }
    for ((dataset, dp), g) in &groups {
        md += &if dataset == "simulated" { report::simulated_tables(g, &mut fails) } else { report::ccpp_tables(g) };
        let file = format!("rmse_rounds_{dataset}_{}.svg", dp.to_string().replace(['(', ')', ',', '='], "_"));
        write_atomic(
            &dir.join(&file),
            &report::rmse_rounds_svg(g, &format!("Test RMSE per round — {dataset}, DP {dp}")),
        )?;
        md += &format!("![RMSE per round]({file})\n\n");
    }
    for ((dataset, dp), g) in &groups {
        if dataset == "simulated" {
            md += &crate::compare::simulated_comparison(g);
            if *dp == DpLabel::Off {
                md += &crate::compare::c1_comparison(g);
            }
        }
    }
    md += "## The thesis's findings, checked\n\n| finding | holds | evidence |\n|---|---|---|\n";
    for (f, ok, why) in report::orderings(rows) {
        md += &format!("| {f} | {} | {why} |\n", if ok { "yes" } else { "**no**" });
    }
    md += &format!(
        "\nAnchor cells outside tolerance: {}\n",
        if fails.is_empty() { "none".to_string() } else { String::new() }
    );
    for f in &fails {
        md += &format!("- {f}\n");
    }
    if groups.keys().any(|(d, _)| d == "simulated") {
        write_atomic(&dir.join("exchange.svg"), &report::exchange_svg(0, &crate::exchange::exchange_runs(0)?))?;
        md += "\n![One exchange without and with DP](exchange.svg)\n";
    }
    write_atomic(&dir.join("tables.md"), &md)?;
    Ok(fails)
}

/// Mean ± sd of the after-co-training RMSE by combiner × uncertainty (pooling both parties,
/// D14), with the pre-co-training RMSE.
fn summary_table(rows: &[RunRow]) -> String {
    let mut cells: BTreeMap<(&str, &str), Vec<f64>> = BTreeMap::new();
    let mut before = Vec::new();
    for r in rows {
        cells.entry((r.combiner.name(), r.uncertainty.name())).or_default().push(r.rmse_after);
        before.push(r.rmse_before);
    }
    let (bm, bs) = mean_sd(&before);
    let mut s = format!(
        "| combiner | uncertainty | RMSE after (mean ± sd) |\n|---|---|---|\n| (before) | – | {bm:.3} ± {bs:.3} |\n"
    );
    for ((c, u), v) in &cells {
        let (m, sd) = mean_sd(v);
        s += &format!("| {c} | {u} | {m:.3} ± {sd:.3} |\n");
    }
    s
}

/// runs.jsonl (rewritten whole, atomically, in canonical order: see [`sort_rows`]), runs.csv and
/// summary.md of `rows`; everything in them comes from the rows, so a merged sharded grid
/// writes the same files as an unsharded one.
fn write_report(dir: &std::path::Path, rows: &[RunRow]) -> anyhow::Result<()> {
    let mut jsonl = String::new();
    for r in rows {
        jsonl += &serde_json::to_string(r)?;
        jsonl.push('\n');
    }
    write_atomic(&dir.join("runs.jsonl"), &jsonl)?;
    std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    let mut csv = String::from(
        "dataset,r,ci,masking,nobs,seed,combiner,uncertainty,dp,party,view,rmse_before,rmse_after,nlpd_before,nlpd_after,epsilon_spent,error\n",
    );
    let opt = |v: Option<f64>| v.map(|x| x.to_string()).unwrap_or_default();
    for r in rows {
        csv += &format!(
            "{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{}\n",
            r.dataset,
            opt(r.r),
            r.ci.map(|b| if b { "yes" } else { "no" }).unwrap_or(""),
            if r.masking { "yes" } else { "no" },
            r.nobs,
            r.seed,
            r.combiner,
            r.uncertainty,
            r.dp,
            r.party,
            r.view,
            r.rmse_before,
            r.rmse_after,
            r.nlpd_before,
            r.nlpd_after,
            opt(r.epsilon_spent),
            r.error.as_deref().unwrap_or("").replace(',', ";")
        );
    }
    write_atomic(&dir.join("runs.csv"), &csv)?;
    let runs: std::collections::BTreeSet<String> = rows.iter().map(RunRow::key).collect();
    let dps: std::collections::BTreeSet<String> = rows.iter().map(|r| r.dp.to_string()).collect();
    let rounds = rows.iter().map(|r| r.rmse_per_round.len()).max().unwrap_or(0);
    let md = format!(
        "# dpcotrain-lab experiment\n\n- runs: {} ({} party-rows)\n- DP: {}\n- rounds: {rounds}\n\n{}",
        runs.len(),
        rows.len(),
        dps.into_iter().collect::<Vec<_>>().join(", "),
        summary_table(rows)
    );
    write_atomic(&dir.join("summary.md"), &md)?;
    Ok(())
}

/// The grid settings that are not part of a run's key (grid.json in --out).
#[derive(Debug, PartialEq, serde::Serialize, serde::Deserialize)]
struct GridSettings {
    rounds: usize,
    refit: RefitPolicy,
    /// Written only when a reading differs from the default, so folders of earlier grids keep
    /// their grid.json (and resume).
    #[serde(default, skip_serializing_if = "Readings::is_default")]
    readings: Readings,
}

/// What a shard's folder records about its slice (shard.json), checked by `experiment merge`.
#[derive(Debug, serde::Serialize, serde::Deserialize)]
struct ShardTag {
    shard: Shard,
    /// Runs in this shard and in the whole grid.
    runs: usize,
    grid_runs: usize,
    /// Every setting of the grid ([`grid_spec`]): shards whose specs differ in any setting are
    /// not slices of one grid. Absent in shard.json files of earlier versions.
    #[serde(default)]
    grid: Option<BTreeMap<String, String>>,
}

/// Every setting of a grid by name (the flag's name where there is one), as shard.json records
/// it: data set and its levels, seeds, n_obs, masking, combiners, uncertainty modes, the whole
/// DP setting (ε, δ, policy, label range), rounds, re-fit policy and readings.
fn grid_spec(grid: &Grid) -> BTreeMap<String, String> {
    fn list<T: std::fmt::Display>(v: &[T]) -> String {
        v.iter().map(ToString::to_string).collect::<Vec<_>>().join(",")
    }
    let yes_no = |v: &[bool]| v.iter().map(|b| if *b { "yes" } else { "no" }).collect::<Vec<_>>().join(",");
    let mut m = BTreeMap::new();
    let mut put = |k: &str, v: String| {
        m.insert(k.to_string(), v);
    };
    match &grid.dataset {
        Dataset::Simulated { r, ci, n_pool, n_test } => {
            put("dataset", "simulated".into());
            put("r", list(r));
            put("ci", yes_no(ci));
            put("n_pool", n_pool.to_string());
            put("n_test", n_test.to_string());
        }
        Dataset::Ccpp { n_pool, n_test } => {
            put("dataset", "ccpp".into());
            put("n_pool", n_pool.to_string());
            put("n_test", n_test.to_string());
        }
    }
    put("seeds", list(&grid.seeds));
    put("nobs", list(&grid.nobs));
    put("masking", yes_no(&grid.masking));
    put("combiner", grid.combiners.iter().map(|c| c.name()).collect::<Vec<_>>().join(","));
    put("uncertainty", grid.uncertainty.iter().map(|u| u.name()).collect::<Vec<_>>().join(","));
    match &grid.dp {
        DpSetting::Off => put("dp", "off".into()),
        DpSetting::Thesis => put("dp", "thesis".into()),
        DpSetting::Calibrated { epsilon, delta, policy, range } => {
            put("dp", "calibrated".into());
            put("epsilon", epsilon.to_string());
            put("delta", delta.to_string());
            put("policy", policy.name().into());
            put("label_range", format!("{},{}", range.lo, range.hi));
        }
    }
    put("rounds", grid.rounds.to_string());
    put("refit", grid.refit.to_string());
    put("readings", grid.readings.to_string());
    m
}

/// The settings of [`grid_spec`] in the order a difference is reported.
const SPEC_ORDER: [&str; 18] = [
    "dataset",
    "dp",
    "epsilon",
    "delta",
    "policy",
    "label_range",
    "r",
    "ci",
    "n_pool",
    "n_test",
    "seeds",
    "nobs",
    "masking",
    "combiner",
    "uncertainty",
    "rounds",
    "refit",
    "readings",
];

/// How two grid specs differ: the first setting that differs (in [`SPEC_ORDER`]) as "NAME is A
/// in the first but B in the second" (a setting one of them lacks reads "(none)"), and the names
/// of the others that differ. None when they are equal.
fn spec_difference(a: &BTreeMap<String, String>, b: &BTreeMap<String, String>) -> Option<String> {
    let none = "(none)".to_string();
    let mut keys: Vec<&str> = SPEC_ORDER.to_vec();
    for k in a.keys().chain(b.keys()) {
        if !keys.contains(&k.as_str()) {
            keys.push(k);
        }
    }
    let differ: Vec<(&str, &String, &String)> = keys
        .into_iter()
        .map(|k| (k, a.get(k).unwrap_or(&none), b.get(k).unwrap_or(&none)))
        .filter(|(_, x, y)| x != y)
        .collect();
    let (k, x, y) = differ.first()?;
    let mut text = format!("{k} is {x} in the first but {y} in the second");
    if differ.len() > 1 {
        let others: Vec<&str> = differ[1..].iter().map(|d| d.0).collect();
        text += &format!(" (and {} differ)", others.join(", "));
    }
    Some(text)
}

/// The report files of a grid folder (everything [`write_report`] and [`thesis_report`] write,
/// and a shard's shard.json): what `experiment merge` clears from its --out before writing, so
/// no figure of an earlier report stays behind.
fn is_report_file(name: &str) -> bool {
    matches!(name, "runs.jsonl" | "runs.csv" | "summary.md" | "tables.md" | "grid.json" | "shard.json" | "exchange.svg")
        || (name.starts_with("rmse_rounds_") && name.ends_with(".svg"))
}

/// Remove the report files of an earlier report from `dir` (other files are left alone);
/// returns how many were removed.
fn clear_report(dir: &std::path::Path) -> anyhow::Result<usize> {
    let entries = match std::fs::read_dir(dir) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(0),
        Err(e) => anyhow::bail!("cannot read {}: {e}", dir.display()),
    };
    let mut removed = 0;
    for entry in entries {
        let entry = entry.with_context(|| format!("cannot read {}", dir.display()))?;
        let name = entry.file_name();
        if name.to_str().is_some_and(is_report_file) && entry.file_type().is_ok_and(|t| t.is_file()) {
            std::fs::remove_file(entry.path()).with_context(|| format!("cannot delete {}", entry.path().display()))?;
            removed += 1;
        }
    }
    Ok(removed)
}

/// `experiment merge`: every shard 0..N of one grid (the same settings, every one) present
/// exactly once and complete; rows joined in canonical order; the report files of an earlier
/// report in --out removed; runs.jsonl, runs.csv, summary.md, tables.md and figures written as
/// an unsharded run writes them.
fn merge(shards: &[PathBuf], out: &std::path::Path) -> anyhow::Result<()> {
    let mut tags: Vec<(ShardTag, &PathBuf)> = Vec::new();
    for d in shards {
        let path = d.join("shard.json");
        let text = std::fs::read_to_string(&path)
            .with_context(|| format!("{} (is {} the --out of a `--shard K/N` run?)", path.display(), d.display()))?;
        let tag: ShardTag = serde_json::from_str(&text).with_context(|| path.display().to_string())?;
        tags.push((tag, d));
    }
    let n = tags[0].0.shard.count;
    let grid_runs = tags[0].0.grid_runs;
    for (t, d) in &tags {
        if t.shard.count != n || t.grid_runs != grid_runs {
            anyhow::bail!(
                "{} is shard {} of a grid of {} runs, but {} is shard {} of {} runs: not the same sharded grid",
                d.display(),
                t.shard,
                t.grid_runs,
                tags[0].1.display(),
                tags[0].0.shard,
                grid_runs
            );
        }
    }
    // The same grid: every setting equal (the slices of different grids may have the same
    // size, and their runs' keys need not even differ: rounds, δ, the readings…).
    fn spec<'a>((t, d): &'a (ShardTag, &PathBuf)) -> anyhow::Result<&'a BTreeMap<String, String>> {
        t.grid.as_ref().ok_or_else(|| {
            anyhow::anyhow!(
                "{} has no grid settings (written by an earlier version): run that shard's command again \
                 (it resumes from its runs.jsonl and records them) before merging",
                d.join("shard.json").display()
            )
        })
    }
    let first = spec(&tags[0])?;
    for t in &tags[1..] {
        if let Some(how) = spec_difference(first, spec(t)?) {
            anyhow::bail!(
                "{} and {} are shards of different grids: {how}; \
                 merge only the shards of one grid (the same command with --shard 0/N … N-1/N)",
                tags[0].1.display(),
                t.1.display()
            );
        }
    }
    let settings: Vec<String> =
        tags.iter().map(|(_, d)| std::fs::read_to_string(d.join("grid.json")).unwrap_or_default()).collect();
    if let Some(i) = settings.iter().position(|x| *x != settings[0]) {
        anyhow::bail!(
            "{} and {} were run with different grid settings (grid.json): not the same grid",
            tags[0].1.display(),
            tags[i].1.display()
        );
    }
    for k in 0..n {
        match tags.iter().filter(|(t, _)| t.shard.index == k).count() {
            1 => {}
            0 => anyhow::bail!("shard {k}/{n} is missing (give every shard's folder)"),
            _ => anyhow::bail!("shard {k}/{n} is given more than once"),
        }
    }
    let mut rows: Vec<RunRow> = Vec::new();
    let mut seen: std::collections::HashMap<String, &PathBuf> = std::collections::HashMap::new();
    for (t, d) in &tags {
        let r = load_runs(d)?;
        let keys: std::collections::BTreeSet<String> = r.iter().map(RunRow::key).collect();
        if keys.len() != t.runs {
            anyhow::bail!(
                "{}: shard {} has {} of its {} runs; finish it (run the same command again) before merging",
                d.display(),
                t.shard,
                keys.len(),
                t.runs
            );
        }
        for k in keys {
            if let Some(other) = seen.insert(k.clone(), d) {
                anyhow::bail!("run {k} is in both {} and {}", other.display(), d.display());
            }
        }
        rows.extend(r);
    }
    sort_rows(&mut rows);
    // --out must not be a shard's own folder (its runs.jsonl would be replaced), and nothing of
    // an earlier report in it may stay (a figure of another DP setting, say).
    let same = |a: &std::path::Path, b: &std::path::Path| match (a.canonicalize(), b.canonicalize()) {
        (Ok(x), Ok(y)) => x == y,
        _ => false,
    };
    if let Some((_, d)) = tags.iter().find(|(_, d)| same(d, out)) {
        anyhow::bail!("--out {} is the shard folder {}: merge into another folder", out.display(), d.display());
    }
    let stale = clear_report(out)?;
    if stale > 0 {
        eprintln!("removed {stale} files of an earlier report from {}", out.display());
    }
    std::fs::create_dir_all(out).with_context(|| format!("cannot create {}", out.display()))?;
    write_atomic(&out.join("grid.json"), &settings[0])?;
    write_report(out, &rows)?;
    thesis_report(out, &rows)?;
    eprintln!("merged {n} shards: {} runs, {} party-rows into {}", seen.len(), rows.len(), out.display());
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Flags {
        #[command(flatten)]
        grid: GridArgs,
    }

    fn parse(args: &[&str]) -> Result<Readings, String> {
        let all = std::iter::once("t").chain(args.iter().copied());
        Flags::try_parse_from(all).map(|f| readings(&f.grid)).map_err(|e| e.to_string())
    }

    #[test]
    fn reading_preset_and_flags_set_the_readings() {
        assert_eq!(parse(&[]).unwrap(), Readings::default());
        assert_eq!(parse(&["--reading", "thesis"]).unwrap(), Readings::thesis());
        // A single flag overrides the preset's value for its key only.
        let r = parse(&["--reading", "thesis", "--hybrid", "yu", "--fit-starts", "best-of-4"]).unwrap();
        assert_eq!(r, Readings { hybrid: HybridForm::Yu, fit_starts: FitStarts::BestOf(4), ..Readings::thesis() });
        let r = parse(&[
            "--answer-source",
            "private",
            "--blocky-theta",
            "querier",
            "--thesis-noise",
            "fresh-per-query",
            "--shared-variance",
            "y",
            "--selection-variance",
            "raw",
        ])
        .unwrap();
        assert_eq!(
            (r.answer_source, r.blocky_theta, r.thesis_noise, r.shared_variance, r.selection_variance),
            (
                AnswerSource::Private,
                BlockyTheta::Querier,
                ThesisNoise::FreshPerQuery,
                SharedVariance::Y,
                SelectionVariance::Raw
            )
        );
        assert!(parse(&["--hybrid", "yuu"]).unwrap_err().contains("hybrid form"));
        assert!(parse(&["--fit-starts", "best-of-0"]).unwrap_err().contains("single, best-of-K or fixed-K"));
        assert!(parse(&["--reading", "paper"]).unwrap_err().contains("reading preset"));
    }
}
