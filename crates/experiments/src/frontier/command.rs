//! `dpcotrain-lab experiment frontier`: the privacy–utility frontier of honest co-training
//! (docs/honest-dp.md): test RMSE alone / co-trained without DP / co-trained at each ε for each
//! release mechanism and θ policy, the share of the non-private gain recovered, and a figure.

use crate::files::{load_jsonl, write_atomic};
use crate::frontier::{
    AnswerNoise, FrontierCell, FrontierConfig, FrontierData, FrontierMechanism, FrontierRow, ThetaChoice, TraceOracle,
    run_frontier, summarise, trace_run,
};
use anyhow::Context as _;
use clap::Args;
use dpcotrain_cotrain::PublicTheta;
use dpcotrain_cotrain::Scenario;
use dpcotrain_cotrain::ccpp::RealData;
use dpcotrain_cotrain::combiner::{AnswerForm, AnswerGuard, RefitTheta, ValueBasis};
use dpcotrain_cotrain::release_model::LengthscaleUnit;
use dpcotrain_federation::config::{PartyConfig, data_from_config, load};
use dpcotrain_privacy::CapRule;
use dpcotrain_privacy::LabelRange;
use dpcotrain_privacy::RankRule;
use dpcotrain_report::{LineChart, Marker, Series, minus};
use indicatif::{ProgressBar, ProgressStyle};
use std::collections::{BTreeMap, HashSet};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Instant;

#[derive(Debug, Args)]
pub struct FrontierArgs {
    /// Data sets: sim-masked, sim-unmasked (simulated two views, r = --r), and each shipped real
    /// data set masked or not: ccpp-masked, ccpp-unmasked, bikeshare-masked, bikeshare-unmasked,
    /// wage-masked, wage-unmasked (views and sources in crates/cotrain/data/README.md).
    #[arg(long, value_delimiter = ',', default_value = "sim-masked,sim-unmasked,ccpp-masked")]
    pub data: Vec<String>,
    /// Your own views instead of (or beside) the built-in data: the party configs your nodes
    /// read (party-a.toml,party-b.toml,…), each naming its train, pool and test CSVs. Each seed
    /// draws --nobs of each party's labelled rows; add "views" to --data to mix with the others.
    #[arg(long, value_delimiter = ',')]
    pub views: Vec<PathBuf>,
    /// With --views: a CSV of the pool's true labels (one column, one row per pool row), for
    /// the lab's label-dependent readings only — --trace's true-label floor and oracles. No node
    /// is ever given such a file.
    #[arg(long, value_name = "CSV", requires = "views")]
    pub pool_labels: Option<PathBuf>,
    /// Correlation of the simulated views.
    #[arg(long, default_value_t = 0.9)]
    pub r: f64,
    /// Private labelled rows per party.
    #[arg(long, value_delimiter = ',', default_value = "25,100,400,1600")]
    pub nobs: Vec<usize>,
    /// Number of seeds (0..N): the splits (which rows each party holds).
    #[arg(long, default_value_t = 10)]
    pub seeds: u64,
    /// Node seeds per split (0..N): the same split run again with the nodes' own seeds changed
    /// (their restarts and draws). 1 (the default) runs node seed 0, which is the split seed,
    /// as before node seeds existed. Rows of node seeds above 0 carry `node_seed`.
    #[arg(long, default_value_t = 1, value_name = "N")]
    pub node_seeds: u64,
    /// How each party's private-only fit starts: fixed-K (K − 1 restarts drawn from one fixed
    /// stream: the fit depends on the data alone; the default fixed-4, D38), best-of-K (drawn
    /// from the node's seed: the default before D38) or single.
    #[arg(long, default_value = "fixed-4", value_name = "STARTS")]
    pub fit_starts: dpcotrain_cotrain::readings::FitStarts,
    /// The length-scale of a covariate constant on a party's own rows: drop (held at its upper
    /// bound in the private fit and every re-fit, the covariate dropped; the default, D39), free
    /// (fitted like any other; the default before D39) or median (held at √(2D)).
    #[arg(long, default_value = "drop")]
    pub unseen_covariates: dpcotrain_cotrain::readings::UnseenCovariates,
    /// ε of the one release each party makes to each peer.
    #[arg(long, value_delimiter = ',', default_value = "0.25,0.5,1,2,4,8", value_parser = dpcotrain_privacy::calibrate::parse_epsilon, allow_negative_numbers = true)]
    pub epsilons: Vec<f64>,
    #[arg(long, default_value_t = 1e-5, value_parser = dpcotrain_privacy::calibrate::parse_delta, allow_negative_numbers = true)]
    pub delta: f64,
    /// Release mechanisms: rkhs, finite, finite+cap.
    #[arg(long, value_delimiter = ',', default_value = "rkhs,finite,finite+cap")]
    pub mechanisms: Vec<String>,
    /// θ policies of the release: public, fitted (label-fitted, leaks uncounted), select (DP vote over a public grid, 20% of each cell's ρ)
    #[arg(long, value_delimiter = ',', default_value = "public,fitted")]
    pub thetas: Vec<String>,
    /// Pool indices each party asks about (one request).
    #[arg(long, default_value_t = 25)]
    pub queries: usize,
    /// Label clipping range (standardised labels).
    #[arg(long, value_delimiter = ',', default_value = "-3,3", allow_negative_numbers = true)]
    pub label_range: Vec<f64>,
    /// How queriers read answers: likelihood (the peer's prior removed, point by point), posterior (the thesis), or functionals (each release read as its k linear functionals with their correlated noise: the exact likelihood of the release; docs/honest-dp.md).
    #[arg(long, default_value = "likelihood")]
    pub answers: AnswerForm,
    /// Cap rule of finite+cap: auto (label-free choice of η), auto=X,Y,… (the same choice among
    /// these η), none, or eta=X (σ ≤ X prior sd).
    #[arg(long, default_value = "auto")]
    pub cap: CapRule,
    /// Rank rule of finite+cap: auto (the principal subspace of rank 3, 5 or 10, or the full
    /// release, by the label-free score), auto=K,L,…, k=K, or full (independent noise at every
    /// point, the release before ranks existed).
    #[arg(long, default_value = "auto")]
    pub rank: RankRule,
    /// Whether queriers check answers against their own labels before using them: off, or loo
    /// (set answers aside when they make the private rows' leave-one-out error worse).
    #[arg(long, default_value = "off")]
    pub guard: AnswerGuard,
    /// Whose data a querier's θ is re-fitted to after the answers arrive: augmented (own rows
    /// and answers, D5), own (θ stays the private fit's), augmented-no-shorter (as augmented,
    /// no length-scale shorter than the private fit's), augmented-tested (the free re-fit only
    /// when the length-scales it shortens pass a likelihood-ratio test at 95%),
    /// augmented-amplitude (the length-scales stay the private fit's; the variances are re-fitted)
    /// augmented-within-own (as augmented, kept inside the private rows' 95% likelihood region)
    /// or augmented-hold-constant (as augmented, the length-scales of covariates constant on the
    /// private rows held; what --unseen-covariates drop, the default, already does).
    #[arg(long, default_value = "augmented")]
    pub refit_theta: RefitTheta,
    /// What a querier adds to each answer's reported variance: reported (nothing), own (its own
    /// fitted noise variance), responder (the responder's fitted noise variance: an oracle for
    /// the harm study, not deployable), profile, a number, or own:K (K times the querier's own
    /// fitted noise variance). Default own:30, a node's default (`[model]
    /// answer_extra_variance`, D30); the harm study's cells before D30 used reported.
    #[arg(long, default_value = "own:30")]
    pub answer_noise: AnswerNoise,
    /// The answer check: an answer farther than Z standard deviations from the querier's own
    /// private-only prediction gets its variance raised to that distance (0: off).
    #[arg(long, default_value_t = 0.0)]
    pub answer_check: f64,
    /// Multiply every answer's variance by K ≥ 1 after reading it (each answer keeps 1/K of its
    /// weight): the harm study's tempering switch.
    #[arg(long, default_value_t = 1.0, value_name = "K")]
    pub answer_temper: f64,
    /// Decline a peer's DP answers when the querier's own fitted noise sd is below R times the
    /// answers' DP noise sd (0: off): the sixth pass's switch for a strong party.
    #[arg(long, default_value_t = 0.0, value_name = "R")]
    pub decline_ratio: f64,
    /// Give an answer no weight where the querier's own private-only latent variance is below K
    /// times the answer's variance (discount included), i.e. where it could cut the querier's
    /// own variance there by less than K/(1+K) (0: off): issue 56's per-answer value rule.
    #[arg(long, default_value_t = 0.0, value_name = "K")]
    pub answer_min_value: f64,
    /// Which variance of an answer --answer-min-value weighs: read (the querier's discount
    /// included) or undiscounted (as the reading gives it, the DP noise included, before the
    /// querier's discount and scaling; not with --answers functionals).
    #[arg(long, default_value = "read")]
    pub answer_min_value_basis: ValueBasis,
    /// The public θ of the release model under --thetas public (and the vote's default under
    /// --thetas select), as
    /// SIGNAL_VARIANCE,LENGTHSCALE,NOISE_VARIANCE (standardised scale; queries keep 1,1,0.1).
    #[arg(long, value_delimiter = ',', default_value = "1,1,0.1")]
    pub release_theta: Vec<f64>,
    /// The unit of --release-theta's length-scale: median (a multiple of √(2D) for a party with D
    /// covariates: the root mean squared distance of standardised inputs; the default since
    /// docs/decisions.md D32) or absolute (the default before; queries keep 1,1,0.1 absolute).
    #[arg(long, default_value = "median")]
    pub release_lengthscale: LengthscaleUnit,
    /// A small subset for smoke tests: 2 seeds, n_obs 25 and 100, ε 1 and 8, public θ.
    #[arg(long)]
    pub quick: bool,
    /// Report folder: runs.jsonl (appended per job; an interrupted run resumes from it),
    /// cells.csv, frontier.md, frontier_*.svg.
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// Ignore (delete) runs saved in --out by an earlier invocation.
    #[arg(long)]
    pub fresh: bool,
    /// Print the aggregated cells as JSON lines.
    #[arg(long)]
    pub json: bool,
    /// Instead of the cells, write each run's inside view to FILE (JSON lines: per party, every
    /// test point's label and predictions alone and after, every answer read, the hyperparameters
    /// before and after the re-fit): the harm study's diagnostics. Label-dependent; only for
    /// experiments.
    #[arg(long, value_name = "FILE", conflicts_with_all = ["out", "json"])]
    pub trace: Option<PathBuf>,
    /// With --trace: what the re-read of each run knows from the true pool labels
    /// (answer-error, level or own-calibration), or public-mean (every answer's mean set to the
    /// public mean of y, a counterfactual that needs no labels; docs/results.md).
    #[arg(long, default_value = "answer-error", requires = "trace")]
    pub trace_oracle: TraceOracle,
}

fn config(a: &FrontierArgs) -> anyhow::Result<FrontierConfig> {
    let mut data = Vec::new();
    // --views without --data measures your views alone; with --data, beside those data sets.
    let mut names = a.data.clone();
    if !a.views.is_empty() && !names.iter().any(|d| d.trim() == "views") {
        if names == default_data() {
            names.clear();
        }
        names.push("views".into());
    }
    for d in &names {
        data.push(match d.trim() {
            "views" => FrontierData::Views,
            "sim-masked" => FrontierData::Simulated { r: a.r, masked: true },
            "sim-unmasked" => FrontierData::Simulated { r: a.r, masked: false },
            other => {
                let real = [RealData::Ccpp, RealData::Bikeshare, RealData::Wage];
                let found = other.rsplit_once('-').and_then(|(name, m)| {
                    let data = real.iter().find(|d| d.name() == name)?;
                    let masked = match m {
                        "masked" => true,
                        "unmasked" => false,
                        _ => return None,
                    };
                    Some(FrontierData::Real { data: *data, masked })
                });
                found.ok_or_else(|| {
                    let names: Vec<String> =
                        real.iter().map(|d| format!("{0}-masked, {0}-unmasked", d.name())).collect();
                    anyhow::anyhow!(
                        "--data: unknown data set {other:?} (sim-masked, sim-unmasked, {})",
                        names.join(", ")
                    )
                })?
            }
        });
    }
    if !(a.r > 0.0 && a.r <= 1.0) {
        anyhow::bail!("--r: {} is outside (0, 1]", a.r);
    }
    let mut mechanisms = Vec::new();
    for m in &a.mechanisms {
        mechanisms.push(match m.trim() {
            "rkhs" => FrontierMechanism::Rkhs,
            "finite" => FrontierMechanism::Finite,
            "finite+cap" | "finite-cap" => FrontierMechanism::FiniteCap,
            other => anyhow::bail!("--mechanisms: unknown mechanism {other:?} (rkhs, finite, finite+cap)"),
        });
    }
    let mut thetas = Vec::new();
    for t in &a.thetas {
        thetas.push(match t.trim() {
            "public" => ThetaChoice::Public,
            "fitted" => ThetaChoice::Fitted,
            "select" => ThetaChoice::Select,
            other => anyhow::bail!("--thetas: unknown θ policy {other:?} (public, fitted, select)"),
        });
    }
    if a.label_range.len() != 2 {
        anyhow::bail!("--label-range takes two numbers LO,HI");
    }
    let max_nobs = a.nobs.iter().copied().max().unwrap_or(0);
    let views = if a.views.is_empty() {
        if data.contains(&FrontierData::Views) {
            anyhow::bail!("--data views needs --views party-a.toml,party-b.toml (the configs your nodes read)");
        }
        None
    } else {
        let mut v = user_views(&a.views)?;
        if let Some(path) = &a.pool_labels {
            v.pool_labels = Some(pool_labels(path, v.parties[0].x_pool.nrows())?);
        }
        for (p, path) in v.parties.iter().zip(&a.views) {
            if p.x_train.nrows() < max_nobs {
                anyhow::bail!(
                    "--nobs {max_nobs}: party {} ({}) has only {} labelled rows; each seed draws --nobs of them",
                    p.name,
                    path.display(),
                    p.x_train.nrows()
                );
            }
        }
        Some(v)
    };
    let mut cfg = FrontierConfig {
        data,
        nobs: a.nobs.clone(),
        seeds: (0..a.seeds).collect(),
        node_seeds: (0..a.node_seeds.max(1)).collect(),
        fit_starts: a.fit_starts,
        unseen_covariates: a.unseen_covariates,
        epsilons: a.epsilons.clone(),
        mechanisms,
        thetas,
        queries: a.queries,
        delta: a.delta,
        range: LabelRange::new(a.label_range[0], a.label_range[1])?,
        answers: a.answers,
        cap: a.cap.clone(),
        rank: a.rank.clone(),
        guard: a.guard,
        refit_theta: a.refit_theta,
        answer_noise: a.answer_noise,
        answer_check: (a.answer_check > 0.0).then_some(a.answer_check),
        answer_temper: a.answer_temper,
        decline_ratio: (a.decline_ratio > 0.0).then_some(a.decline_ratio),
        answer_min_value: {
            if !(a.answer_min_value.is_finite() && a.answer_min_value >= 0.0) {
                anyhow::bail!("--answer-min-value {}: must be a finite number ≥ 0 (0: off)", a.answer_min_value);
            }
            (a.answer_min_value > 0.0).then_some(a.answer_min_value)
        },
        answer_min_value_basis: a.answer_min_value_basis,
        views,
        release_theta: match a.release_theta[..] {
            [signal_variance, lengthscale, noise_variance] => {
                let t = PublicTheta { signal_variance, lengthscale, noise_variance, unit: a.release_lengthscale };
                t.validate().map_err(|e| anyhow::anyhow!("--release-theta: {e}"))?;
                t
            }
            _ => anyhow::bail!("--release-theta takes three numbers: signal variance, length-scale, noise variance"),
        },
    };
    // Check what was given before --quick narrows it.
    cfg.validate()?;
    if a.quick {
        cfg.seeds = (0..a.seeds.min(2)).collect();
        cfg.nobs = vec![25, 100];
        cfg.epsilons = vec![1.0, 8.0];
        cfg.thetas = vec![ThetaChoice::Public];
    }
    if let Some(n) = cfg.nobs.iter().find(|n| **n == 0) {
        anyhow::bail!("--nobs: {n} must be at least 1");
    }
    cfg.validate()?;
    Ok(cfg)
}

/// `--trace FILE`: one JSON line per job and cell (no DP, then each mechanism and ε).
fn trace(cfg: &FrontierConfig, path: &Path, oracle: TraceOracle) -> anyhow::Result<()> {
    use rayon::prelude::*;
    let jobs = cfg.jobs();
    let mut cells = vec![None];
    for &m in &cfg.mechanisms {
        for &e in &cfg.epsilons {
            cells.push(Some((e, m)));
        }
    }
    let lines: Vec<String> = jobs
        .par_iter()
        .with_max_len(1)
        .flat_map_iter(|job| {
            cells.iter().map(move |&cell| {
                let v = match trace_run(cfg, job, cell, oracle) {
                    Ok(t) => serde_json::json!({"data": job.data.name(), "nobs": job.nobs, "seed": job.seed,
                        "node_seed": job.node_seed, "epsilon": cell.map(|c| c.0), "mechanism": cell.map(|c| c.1.name()), "oracle": oracle.name(), "parties": t}),
                    Err(e) => serde_json::json!({"data": job.data.name(), "nobs": job.nobs, "seed": job.seed,
                        "node_seed": job.node_seed, "epsilon": cell.map(|c| c.0), "error": e.to_string()}),
                };
                v.to_string()
            })
        })
        .collect();
    write_atomic(path, &(lines.join("\n") + "\n"))?;
    eprintln!("wrote {} traces to {}", lines.len(), path.display());
    Ok(())
}

/// The default of --data.
fn default_data() -> Vec<String> {
    ["sim-masked", "sim-unmasked", "ccpp-masked"].iter().map(|s| (*s).to_string()).collect()
}

/// The user's views: each party config's data files, read exactly as its node reads them (the
/// same columns, target and checks), as one scenario of parties sharing pool and test by index.
fn user_views(configs: &[PathBuf]) -> anyhow::Result<Scenario> {
    if configs.len() < 2 {
        anyhow::bail!("--views needs at least two party configs (one per party)");
    }
    let mut parties = Vec::new();
    for path in configs {
        let cfg: PartyConfig = load(path)?;
        cfg.validate(path)?;
        parties.push(data_from_config(&cfg, path)?);
    }
    let description =
        format!("your views: {}", configs.iter().map(|p| p.display().to_string()).collect::<Vec<_>>().join(", "));
    let sc = Scenario { parties, description, pool_labels: None };
    sc.validate().map_err(|e| anyhow::anyhow!("--views: {e}"))?;
    Ok(sc)
}

/// `--pool-labels`: one finite label per pool row (the file's only column).
fn pool_labels(path: &Path, pool_rows: usize) -> anyhow::Result<nalgebra::DVector<f64>> {
    let t = dpcotrain_cotrain::table::Table::read(path)?;
    if t.columns.len() != 1 {
        anyhow::bail!(
            "--pool-labels {}: {} columns ({}); it needs exactly one, the label",
            path.display(),
            t.columns.len(),
            t.columns.join(",")
        );
    }
    if t.data.nrows() != pool_rows {
        anyhow::bail!("--pool-labels {}: {} rows, but the pool has {pool_rows}", path.display(), t.data.nrows());
    }
    Ok(t.data.column(0).into_owned())
}

/// The settings that change a run's numbers but not its row key (JSON, one line).
fn protocol_settings(cfg: &FrontierConfig) -> String {
    let mut v = serde_json::json!({
        "queries": cfg.queries, "delta": cfg.delta, "label_range": [cfg.range.lo, cfg.range.hi],
        "answers": format!("{:?}", cfg.answers), "cap": cfg.cap.name(), "rank": cfg.rank.name(),
        "guard": cfg.guard.name(), "refit_theta": cfg.refit_theta.name(),
        "answer_noise": cfg.answer_noise.name(), "answer_check": cfg.answer_check,
        "views": cfg.views.as_ref().map(|v| v.description.clone()),
        "release_theta": [cfg.release_theta.signal_variance, cfg.release_theta.lengthscale, cfg.release_theta.noise_variance],
    });
    // Settings added later are recorded only away from their default, so folders made before
    // them still resume.
    if cfg.answer_temper != 1.0 {
        v["answer_temper"] = cfg.answer_temper.into();
    }
    // Recorded away from best-of-4, the default when the key was added (not today's, D38): a
    // folder without it was run with best-of-4, and a default run now records fixed-4.
    if cfg.fit_starts != dpcotrain_cotrain::readings::FitStarts::BestOf(4) {
        v["fit_starts"] = cfg.fit_starts.to_string().into();
    }
    // Recorded away from free, the default when the key was added (not today's, D39): a folder
    // without it was run with free, and a default run now records drop.
    if cfg.unseen_covariates != dpcotrain_cotrain::readings::UnseenCovariates::Free {
        v["unseen_covariates"] = cfg.unseen_covariates.name().into();
    }
    if cfg.release_theta.unit != LengthscaleUnit::Absolute {
        v["release_lengthscale"] = cfg.release_theta.unit.name().into();
    }
    if let Some(r) = cfg.decline_ratio {
        v["decline_ratio"] = r.into();
    }
    if let Some(k) = cfg.answer_min_value {
        v["answer_min_value"] = k.into();
        if cfg.answer_min_value_basis != ValueBasis::Read {
            v["answer_min_value_basis"] = cfg.answer_min_value_basis.name().into();
        }
    }
    v.to_string()
}

pub fn run(a: FrontierArgs) -> anyhow::Result<()> {
    let cfg = config(&a)?;
    if let Some(path) = &a.trace {
        return trace(&cfg, path, a.trace_oracle);
    }
    let keys: HashSet<String> = cfg.jobs().iter().map(|j| j.key()).collect();
    let mut saved = Vec::new();
    let mut journal = None;
    if let Some(dir) = &a.out {
        std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
        let path = dir.join("runs.jsonl");
        if a.fresh && path.exists() {
            std::fs::remove_file(&path).with_context(|| format!("cannot delete {}", path.display()))?;
        }
        // Rows are keyed by data, n_obs, seed, cell and ε, not by the protocol settings: a
        // folder made with other settings is refused rather than silently mixed.
        let settings_path = dir.join("settings.json");
        let settings = protocol_settings(&cfg);
        if path.exists() && settings_path.exists() {
            let before = std::fs::read_to_string(&settings_path)
                .with_context(|| format!("cannot read {}", settings_path.display()))?;
            if before.trim() != settings.trim() {
                anyhow::bail!(
                    "{} holds runs made with other settings ({}) than these ({}): use another --out, or --fresh to replace them",
                    dir.display(),
                    before.trim(),
                    settings.trim()
                );
            }
        }
        write_atomic(&settings_path, &settings)?;
        // A job counts as done only if all of its rows were written (rows of one job are
        // written together, so a torn job is simply re-run).
        let all: Vec<FrontierRow> = load_jsonl(&path)?;
        let mut per_job: BTreeMap<String, usize> = BTreeMap::new();
        for r in &all {
            *per_job.entry(r.job_key()).or_default() += 1;
        }
        let expected: BTreeMap<String, usize> =
            cfg.jobs().iter().map(|j| (j.key(), cfg.rows_per_job(&j.data))).collect();
        saved = all
            .into_iter()
            .filter(|r| {
                expected.get(&r.job_key()).is_some_and(|&e| per_job.get(&r.job_key()).copied().unwrap_or(0) >= e)
            })
            .collect();
        let f = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&path)
            .with_context(|| format!("cannot open {}", path.display()))?;
        journal = Some(std::sync::Mutex::new(std::io::BufWriter::new(f)));
    }
    let done: HashSet<String> = saved.iter().map(|r| r.job_key()).collect();
    if !done.is_empty() {
        eprintln!("resuming: {} of {} jobs already in runs.jsonl", done.len(), keys.len());
    }
    let bar = ProgressBar::new((keys.len() - done.len()) as u64);
    bar.set_style(
        ProgressStyle::with_template("{elapsed_precise} [{bar:40}] {pos}/{len} jobs (data × n_obs × seed)  ETA {eta}")
            .unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    let save = |rows: &[FrontierRow]| {
        if let Some(j) = &journal
            && let Ok(mut w) = j.lock()
        {
            let mut text = String::new();
            for r in rows {
                if let Ok(line) = serde_json::to_string(r) {
                    text += &line;
                    text.push('\n');
                }
            }
            let _ = w.write_all(text.as_bytes());
            let _ = w.flush();
        }
    };
    let start = Instant::now();
    let mut rows = run_frontier(&cfg, &done, &save, &|d, _| bar.set_position(d as u64))?;
    bar.finish_and_clear();
    let secs = start.elapsed().as_secs_f64();
    eprintln!("{} jobs in {secs:.1} s on {} threads", keys.len() - done.len(), rayon::current_num_threads());
    saved.append(&mut rows);
    let rows = saved;
    let failed: Vec<&FrontierRow> = rows.iter().filter(|r| r.error.is_some()).collect();
    for r in failed.iter().take(5) {
        eprintln!(
            "failed: {} n_obs={} seed={} {}: {}",
            r.data,
            r.nobs,
            r.seed,
            r.party,
            r.error.as_deref().unwrap_or("")
        );
    }
    let cells = summarise(&rows);
    if let Some(dir) = &a.out {
        write_report(dir, &cfg, &cells, secs)?;
        eprintln!("report written to {}", dir.display());
    }
    if a.json {
        let mut out = std::io::stdout().lock();
        for c in &cells {
            writeln!(out, "{}", serde_json::to_string(c)?)?;
        }
    } else {
        print!("{}", table(&cells));
    }
    if !failed.is_empty() {
        anyhow::bail!("{} party-rows failed (first errors above)", failed.len());
    }
    Ok(())
}

/// A share in percent with the report's minus sign, "−4%" ("–" where there is no share).
fn pct(v: f64) -> String {
    if v.is_finite() { format!("{}%", minus(100.0 * v, 0)) } else { "–".into() }
}

/// A share with its standard error, "57% ± 10" ("–" where there is no share).
fn pct_se(v: f64, se: f64) -> String {
    if v.is_finite() && se.is_finite() { format!("{} ± {}", pct(v), minus(100.0 * se, 0)) } else { pct(v) }
}

/// Markdown: one table per data set × θ policy, rows n_obs × mechanism, columns ε.
pub fn table(cells: &[FrontierCell]) -> String {
    let mut groups: BTreeMap<(String, String), Vec<&FrontierCell>> = BTreeMap::new();
    for c in cells {
        groups.entry((c.data.clone(), c.theta.clone())).or_default().push(c);
    }
    let mut md = String::new();
    for ((data, theta), g) in &groups {
        let mut eps: Vec<f64> = g.iter().map(|c| c.epsilon).collect();
        eps.sort_by(f64::total_cmp);
        eps.dedup();
        md += &format!(
            "\n### {data}, θ {theta}\n\nEach cell: mean test RMSE over party-runs (share of the no-DP gain recovered, per party and then averaged over the parties with a gain beyond 2 SE, ± its standard error, \"–\" where none has; then the party-runs it hurt: worse than alone by > 1% and > 2 paired SE). \"mean\" predicts the public mean.\n\n| n_obs | mechanism | mean | alone | no DP (hurt) |"
        );
        for e in &eps {
            md += &format!(" ε = {e} |");
        }
        md += "\n|---|---|---|---|---|";
        md += &"---|".repeat(eps.len());
        md += "\n";
        let mut rows: BTreeMap<(usize, String), Vec<&FrontierCell>> = BTreeMap::new();
        for c in g {
            rows.entry((c.nobs, c.mechanism.clone())).or_default().push(c);
        }
        for ((nobs, mech), r) in &rows {
            let first = r[0];
            md += &format!(
                "| {nobs} | {mech} | {:.3} | {:.3} | {:.3} ({}/{}) |",
                first.mean_baseline, first.alone, first.no_dp, first.hurt_no_dp, first.runs
            );
            for e in &eps {
                match r.iter().find(|c| c.epsilon == *e) {
                    Some(c) => {
                        md +=
                            &format!(" {:.3} ({}; {}/{}) |", c.dp, pct_se(c.recovered, c.recovered_se), c.hurt, c.runs);
                    }
                    None => md += " |",
                }
            }
            md += "\n";
        }
    }
    md
}

fn write_report(dir: &Path, cfg: &FrontierConfig, cells: &[FrontierCell], secs: f64) -> anyhow::Result<()> {
    let mut csv = String::from(
        "data,nobs,theta,mechanism,epsilon,runs,mean_baseline,alone,no_dp,dp,se_vs_alone,recovered,worse_than_alone,hurt,hurt_no_dp,failed,recovered_se\n",
    );
    for c in cells {
        csv += &format!(
            "{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{}\n",
            c.data,
            c.nobs,
            c.theta,
            c.mechanism,
            c.epsilon,
            c.runs,
            c.mean_baseline,
            c.alone,
            c.no_dp,
            c.dp,
            c.se_vs_alone,
            c.recovered,
            c.worse_than_alone,
            c.hurt,
            c.hurt_no_dp,
            c.failed,
            c.recovered_se
        );
    }
    write_atomic(&dir.join("cells.csv"), &csv)?;
    let mut md = format!(
        "# Privacy–utility frontier\n\n- data: {}\n- n_obs: {:?}; seeds: {}; ε: {:?}; δ = {:e}; labels clipped to [{}, {}]\n- protocol: label-free public queries ({} pool indices per party, one request), Noisy combiner, marginal uncertainty, one D5 re-fit; answers read as {:?}, cap rule {}, rank rule {}, answer guard {}\n- wall time of this invocation: {secs:.0} s\n",
        cfg.data.iter().map(|d| d.name()).collect::<Vec<_>>().join(", "),
        cfg.nobs,
        cfg.seeds.len(),
        cfg.epsilons,
        cfg.delta,
        cfg.range.lo,
        cfg.range.hi,
        cfg.queries,
        cfg.answers,
        cfg.cap.name(),
        cfg.rank.name(),
        cfg.guard.name(),
    );
    md += &table(cells);
    // One figure per data set × θ × mechanism: share recovered vs ε, a line per n_obs.
    let mut figs: BTreeMap<(String, String, String), Vec<&FrontierCell>> = BTreeMap::new();
    for c in cells {
        figs.entry((c.data.clone(), c.theta.clone(), c.mechanism.clone())).or_default().push(c);
    }
    md += "\n## Figures\n\n";
    for ((data, theta, mech), g) in &figs {
        let mut by_n: BTreeMap<usize, Vec<(f64, f64)>> = BTreeMap::new();
        for c in g {
            // Clipped to [−100%, 120%] so that one ruinous cell does not flatten the rest.
            by_n.entry(c.nobs).or_default().push((c.epsilon.log2(), (100.0 * c.recovered).clamp(-100.0, 120.0)));
        }
        let mut chart = LineChart::new(
            format!("Gain recovered — {data}, {mech}, θ {theta}"),
            "log₂ ε",
            "% of the no-DP gain (clipped to −100…120)",
        )
        .with_ref_line(100.0, "no-DP gain")
        .with_ref_line(0.0, "alone");
        for (k, (n, mut pts)) in by_n.into_iter().enumerate() {
            pts.sort_by(|a, b| a.0.total_cmp(&b.0));
            chart = chart.with_series(Series::new(format!("n_obs = {n}"), pts, k).markers(Marker::Circle));
        }
        let file = format!("frontier_{}_{}_{}.svg", slug(data), slug(theta), slug(mech));
        write_atomic(&dir.join(&file), &chart.to_svg())?;
        md += &format!("![{data}, {mech}, θ {theta}]({file})\n\n");
    }
    write_atomic(&dir.join("frontier.md"), &md)?;
    Ok(())
}

fn slug(s: &str) -> String {
    s.chars().map(|c| if c.is_ascii_alphanumeric() { c } else { '_' }).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use dpcotrain_cotrain::readings::FitStarts;

    /// A folder's settings record the private fit's starts unless they are best-of-4, and the
    /// unseen covariates' treatment unless it is free, the defaults when the keys were added: an
    /// older folder (no key) is not taken for a run at today's defaults (D38, D39), and a default
    /// run says fixed-4 and drop.
    #[test]
    fn the_settings_tell_a_folder_of_the_old_default_from_one_of_today() {
        use dpcotrain_cotrain::readings::UnseenCovariates;
        let mut cfg = FrontierConfig::full();
        assert_eq!(cfg.fit_starts, FitStarts::Fixed(4));
        assert_eq!(cfg.unseen_covariates, UnseenCovariates::Drop);
        let today = protocol_settings(&cfg);
        assert!(today.contains(r#""fit_starts":"fixed-4""#), "{today}");
        assert!(today.contains(r#""unseen_covariates":"drop""#), "{today}");
        cfg.fit_starts = FitStarts::BestOf(4);
        cfg.unseen_covariates = UnseenCovariates::Free;
        let before = protocol_settings(&cfg);
        assert!(!before.contains("fit_starts") && !before.contains("unseen_covariates"), "{before}");
        assert_ne!(today, before);
    }
}
