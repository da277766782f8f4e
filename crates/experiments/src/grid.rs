//! The experiment grids of Thomas 2017 §4.3 and §4.5 (docs/decisions.md D1–D4, D7, D14): every data
//! configuration × method × seed is one independent, seeded co-training run. Runs are executed
//! in parallel (rayon); each run's numbers depend only on its own seed, so the grid is
//! deterministic whatever the thread count.

use dpcotrain_cotrain::CotrainError;
use dpcotrain_cotrain::Scenario;
use dpcotrain_cotrain::Uncertainty;
use dpcotrain_cotrain::ccpp::{CcppConfig, ccpp};
use dpcotrain_cotrain::driver::{RunReport, block_on, build_parties_with, run_in_process};
use dpcotrain_cotrain::readings::Readings;
use dpcotrain_cotrain::{CombinerKind, RefitPolicy};
use dpcotrain_cotrain::{DpConfig, ReleasePolicy};
use dpcotrain_cotrain::{SimConfig, simulate};
use dpcotrain_privacy::LabelRange;
use rayon::prelude::*;
use serde::Serialize;
use std::collections::HashSet;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

/// The privacy setting of a grid.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum DpSetting {
    Off,
    /// Thomas's reproduction mode: multiplier 0.42, per-query releases, no guarantee.
    Thesis,
    /// Calibrated label DP (analytic Gaussian) with a per-requester budget of ε.
    Calibrated {
        epsilon: f64,
        delta: f64,
        policy: ReleasePolicy,
        range: LabelRange,
    },
}

/// The DP setting a run was made under, as reports group and compare it. Written in JSON and
/// CSV as `off`, `thesis` or `calibrated(eps=E,POLICY)` (the spelling of earlier versions, so
/// saved runs.jsonl files still load).
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum DpLabel {
    Off,
    Thesis,
    Calibrated { epsilon: f64, policy: ReleasePolicy },
}

impl std::fmt::Display for DpLabel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            DpLabel::Off => f.write_str("off"),
            DpLabel::Thesis => f.write_str("thesis"),
            DpLabel::Calibrated { epsilon, policy } => write!(f, "calibrated(eps={epsilon},{})", policy.name()),
        }
    }
}

impl std::str::FromStr for DpLabel {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        let bad = || format!("{s:?} is not a DP setting (off, thesis or calibrated(eps=E,POLICY))");
        Ok(match s {
            "off" => DpLabel::Off,
            "thesis" => DpLabel::Thesis,
            _ => {
                let inner = s.strip_prefix("calibrated(eps=").and_then(|r| r.strip_suffix(')')).ok_or_else(bad)?;
                let (eps, policy) = inner.split_once(',').ok_or_else(bad)?;
                let epsilon: f64 = eps.parse().map_err(|_| bad())?;
                let policy: ReleasePolicy = policy.parse().map_err(|_| bad())?;
                if !(epsilon.is_finite() && epsilon > 0.0) {
                    return Err(bad());
                }
                DpLabel::Calibrated { epsilon, policy }
            }
        })
    }
}

impl Eq for DpLabel {}

/// Ordered by spelling (calibrated… < off < thesis), the order reports have always used.
impl Ord for DpLabel {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.to_string().cmp(&other.to_string())
    }
}

impl PartialOrd for DpLabel {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

dpcotrain_cotrain::serde_via_str!(DpLabel);

impl DpSetting {
    /// How run rows record this setting.
    pub fn label(&self) -> DpLabel {
        match self {
            DpSetting::Off => DpLabel::Off,
            DpSetting::Thesis => DpLabel::Thesis,
            DpSetting::Calibrated { epsilon, policy, .. } => DpLabel::Calibrated { epsilon: *epsilon, policy: *policy },
        }
    }

    pub fn name(&self) -> String {
        self.label().to_string()
    }

    pub fn config(&self) -> DpConfig {
        match self {
            DpSetting::Off => DpConfig::off(),
            DpSetting::Thesis => DpConfig::thesis(),
            DpSetting::Calibrated { epsilon, delta, policy, range } => {
                DpConfig::calibrated(*epsilon, *delta, *epsilon, *range, *policy)
            }
        }
    }
}

/// Which data a grid runs on.
#[derive(Debug, Clone, PartialEq)]
pub enum Dataset {
    Simulated { r: Vec<f64>, ci: Vec<bool>, n_pool: usize, n_test: usize },
    Ccpp { n_pool: usize, n_test: usize },
}

#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Grid {
    pub dataset: Dataset,
    pub seeds: Vec<u64>,
    pub nobs: Vec<usize>,
    pub masking: Vec<bool>,
    pub combiners: Vec<CombinerKind>,
    pub uncertainty: Vec<Uncertainty>,
    pub dp: DpSetting,
    pub rounds: usize,
    /// Where every party's D5 re-fits start.
    pub refit: RefitPolicy,
    /// The readings of the ambiguous protocol choices (every party, every run).
    pub readings: Readings,
}

impl Grid {
    /// The thesis's full simulated grid (§2.1): r × CI × masking × n_obs × 10 seeds, 3 combiners
    /// × 3 uncertainty modes, 500 test, 500 pool, 25 rounds.
    pub fn thesis_simulated(dp: DpSetting) -> Self {
        Grid {
            dataset: Dataset::Simulated {
                r: vec![0.5, 0.75, 0.9, 0.99],
                ci: vec![false, true],
                n_pool: 500,
                n_test: 500,
            },
            seeds: (0..10).collect(),
            nobs: vec![25, 50, 200],
            masking: vec![false, true],
            combiners: vec![CombinerKind::Blocky, CombinerKind::Noisy, CombinerKind::Hybrid],
            uncertainty: vec![Uncertainty::None, Uncertainty::Marginal, Uncertainty::Full],
            dp,
            rounds: 25,
            refit: RefitPolicy::Warm,
            readings: Readings::default(),
        }
    }

    /// The thesis's CCPP grid (§2.3): n_obs 25/50/100/200, masking, 250 test, 250 pool.
    pub fn thesis_ccpp(dp: DpSetting) -> Self {
        Grid {
            dataset: Dataset::Ccpp { n_pool: 250, n_test: 250 },
            seeds: (0..10).collect(),
            nobs: vec![25, 50, 100, 200],
            masking: vec![false, true],
            combiners: vec![CombinerKind::Blocky, CombinerKind::Noisy, CombinerKind::Hybrid],
            uncertainty: vec![Uncertainty::None, Uncertainty::Marginal, Uncertainty::Full],
            dp,
            rounds: 25,
            refit: RefitPolicy::Warm,
            readings: Readings::default(),
        }
    }

    /// Data configurations (one scenario each) and methods.
    fn data_configs(&self) -> Vec<DataConfig> {
        let mut out = Vec::new();
        let (rs, cis): (Vec<Option<f64>>, Vec<Option<bool>>) = match &self.dataset {
            Dataset::Simulated { r, ci, .. } => {
                (r.iter().map(|v| Some(*v)).collect(), ci.iter().map(|v| Some(*v)).collect())
            }
            Dataset::Ccpp { .. } => (vec![None], vec![None]),
        };
        for &r in &rs {
            for &ci in &cis {
                for &masking in &self.masking {
                    for &nobs in &self.nobs {
                        for &seed in &self.seeds {
                            out.push(DataConfig { r, ci, masking, nobs, seed });
                        }
                    }
                }
            }
        }
        out
    }

    fn scenario(&self, dc: &DataConfig) -> Result<Scenario, CotrainError> {
        match &self.dataset {
            Dataset::Simulated { n_pool, n_test, .. } => simulate(&SimConfig {
                r: dc.r.unwrap_or(0.9),
                conditional_independence: dc.ci.unwrap_or(true),
                masking: dc.masking,
                n_obs: dc.nobs,
                n_pool: *n_pool,
                n_test: *n_test,
                seed: dc.seed,
            }),
            Dataset::Ccpp { n_pool, n_test } => ccpp(&CcppConfig {
                masking: dc.masking,
                n_obs: dc.nobs,
                n_pool: *n_pool,
                n_test: *n_test,
                seed: dc.seed,
                ..CcppConfig::default()
            }),
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq)]
struct DataConfig {
    r: Option<f64>,
    ci: Option<bool>,
    masking: bool,
    nobs: usize,
    seed: u64,
}

/// One row per run and party (the `--json` / CSV schema of `dpcotrain-lab experiment`).
#[derive(Debug, Clone, PartialEq, Serialize, serde::Deserialize)]
pub(crate) struct RunRow {
    pub dataset: String,
    pub r: Option<f64>,
    pub ci: Option<bool>,
    pub masking: bool,
    pub nobs: usize,
    pub seed: u64,
    pub combiner: CombinerKind,
    pub uncertainty: Uncertainty,
    pub dp: DpLabel,
    pub party: String,
    /// The party's view (column names).
    pub view: String,
    #[serde(deserialize_with = "nan_if_null")]
    pub rmse_before: f64,
    #[serde(deserialize_with = "nan_if_null")]
    pub rmse_after: f64,
    #[serde(deserialize_with = "nan_if_null")]
    pub nlpd_before: f64,
    #[serde(deserialize_with = "nan_if_null")]
    pub nlpd_after: f64,
    /// ε spent on this party's labels by its releases (exact Gaussian-DP, at δ); 0 without
    /// calibrated DP. `None` for the thesis mode, whose releases carry no guarantee.
    pub epsilon_spent: Option<f64>,
    /// Test RMSE after each round (after both parties' turns), for the per-round plots.
    pub rmse_per_round: Vec<f64>,
    /// Error message if the run failed (the numbers are then NaN).
    pub error: Option<String>,
}

/// JSON has no NaN (serde_json writes null): read null back as NaN.
fn nan_if_null<'de, D: serde::Deserializer<'de>>(d: D) -> Result<f64, D::Error> {
    Ok(<Option<f64> as serde::Deserialize>::deserialize(d)?.unwrap_or(f64::NAN))
}

fn rows_of(
    grid: &Grid,
    dc: &DataConfig,
    sc: &Scenario,
    kind: CombinerKind,
    unc: Uncertainty,
    rep: Result<RunReport, CotrainError>,
) -> Vec<RunRow> {
    let base = |party: &str, view: &str| RunRow {
        dataset: match grid.dataset {
            Dataset::Simulated { .. } => "simulated".into(),
            Dataset::Ccpp { .. } => "ccpp".into(),
        },
        r: dc.r,
        ci: dc.ci,
        masking: dc.masking,
        nobs: dc.nobs,
        seed: dc.seed,
        combiner: kind,
        uncertainty: unc,
        dp: grid.dp.label(),
        party: party.into(),
        view: view.into(),
        rmse_before: f64::NAN,
        rmse_after: f64::NAN,
        nlpd_before: f64::NAN,
        nlpd_after: f64::NAN,
        epsilon_spent: None,
        rmse_per_round: vec![],
        error: None,
    };
    match rep {
        Ok(rep) => rep
            .parties
            .iter()
            .zip(&sc.parties)
            .map(|(p, d)| {
                let mut row = base(&p.name, &d.columns.join("+"));
                row.rmse_before = p.before.rmse;
                row.rmse_after = p.after.rmse;
                row.nlpd_before = p.before.nlpd;
                row.nlpd_after = p.after.nlpd;
                row.epsilon_spent = match grid.dp {
                    DpSetting::Thesis => None,
                    _ => Some(p.epsilon_released.iter().map(|(_, e)| *e).fold(0.0, f64::max)),
                };
                row.rmse_per_round = p.rmse_per_round.clone();
                row
            })
            .collect(),
        Err(e) => sc
            .parties
            .iter()
            .map(|d| {
                let mut row = base(&d.name, &d.columns.join("+"));
                row.error = Some(e.to_string());
                row
            })
            .collect(),
    }
}

/// The identity of one run (everything but the party): equal for a job and its rows.
#[allow(clippy::too_many_arguments)] // the flat identity of one run
pub(crate) fn run_key(
    dataset: &str,
    r: Option<f64>,
    ci: Option<bool>,
    masking: bool,
    nobs: usize,
    seed: u64,
    combiner: &str,
    uncertainty: &str,
    dp: &str,
) -> String {
    format!("{dataset}|{r:?}|{ci:?}|{masking}|{nobs}|{seed}|{combiner}|{uncertainty}|{dp}")
}

impl RunRow {
    /// [`run_key`] of the run this row belongs to.
    pub fn key(&self) -> String {
        run_key(
            &self.dataset,
            self.r,
            self.ci,
            self.masking,
            self.nobs,
            self.seed,
            self.combiner.name(),
            self.uncertainty.name(),
            &self.dp.to_string(),
        )
    }
}

/// The [`run_key`] of every run of `grid`.
pub(crate) fn job_keys(grid: &Grid) -> Vec<String> {
    let dataset = match grid.dataset {
        Dataset::Simulated { .. } => "simulated",
        Dataset::Ccpp { .. } => "ccpp",
    };
    let dp = grid.dp.name();
    let mut out = Vec::new();
    for dc in grid.data_configs() {
        for &kind in &grid.combiners {
            for &unc in &grid.uncertainty {
                out.push(run_key(dataset, dc.r, dc.ci, dc.masking, dc.nobs, dc.seed, kind.name(), unc.name(), &dp));
            }
        }
    }
    out
}

/// What a grid invocation cost, beyond wall time: the objective evaluations of every party's
/// D5 re-fits (deterministic per run, so a change to the optimiser is measured without noise).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct GridCost {
    /// Re-fit objective evaluations, summed over runs and parties.
    pub refit_evaluations: u64,
}

/// Run the whole grid in parallel, skipping the runs whose [`run_key`] is in `done` (rows saved by an earlier,
/// interrupted invocation) and hands each finished run's rows to `on_run` as soon as it
/// completes (to be saved), so a long grid loses nothing on a crash. Returns the new rows;
/// `progress` counts skipped runs as done.
pub(crate) fn run_grid_resumable(
    grid: &Grid,
    done: &HashSet<String>,
    on_run: &(dyn Fn(&[RunRow]) + Sync),
    progress: &(dyn Fn(usize, usize) + Sync),
) -> Result<(Vec<RunRow>, GridCost), CotrainError> {
    let dataset = match grid.dataset {
        Dataset::Simulated { .. } => "simulated",
        Dataset::Ccpp { .. } => "ccpp",
    };
    let dp_name = grid.dp.name();
    let dcs = grid.data_configs();
    let mut jobs = Vec::new();
    let mut skipped = 0;
    for dc in &dcs {
        for &kind in &grid.combiners {
            for &unc in &grid.uncertainty {
                let key =
                    run_key(dataset, dc.r, dc.ci, dc.masking, dc.nobs, dc.seed, kind.name(), unc.name(), &dp_name);
                if done.contains(&key) {
                    skipped += 1;
                } else {
                    jobs.push((*dc, kind, unc));
                }
            }
        }
    }
    // Longest runs first (cost grows with n_obs), so the last runs to finish are short ones and
    // neither core idles at the end; results are per-run deterministic, so the order changes no
    // number (callers order rows with `sort_rows`).
    jobs.sort_by_key(|(dc, _, _)| std::cmp::Reverse(dc.nobs));
    let total = jobs.len() + skipped;
    let finished = AtomicUsize::new(skipped);
    let evaluations = AtomicU64::new(0);
    let dp = grid.dp.config();
    let results: Vec<Result<Vec<RunRow>, CotrainError>> = jobs
        .par_iter()
        .map(|(dc, kind, unc)| {
            let sc = grid.scenario(dc)?;
            let rep = build_parties_with(&sc, *kind, *unc, &dp, dc.seed, grid.readings).and_then(|ps| {
                for p in &ps {
                    dpcotrain_cotrain::party::lock_party(p)?.set_refit_policy(grid.refit);
                }
                block_on(run_in_process(&ps, grid.rounds))
            });
            if let Ok(rep) = &rep {
                let spent: usize = rep.parties.iter().map(|p| p.refit_evaluations).sum();
                evaluations.fetch_add(spent as u64, Ordering::Relaxed);
            }
            let rows = rows_of(grid, dc, &sc, *kind, *unc, rep);
            on_run(&rows);
            progress(finished.fetch_add(1, Ordering::Relaxed) + 1, total);
            Ok(rows)
        })
        .collect();
    let cost = GridCost { refit_evaluations: evaluations.into_inner() };
    let mut out = Vec::new();
    for r in results {
        out.extend(r?);
    }
    Ok((out, cost))
}

/// The K-th of N deterministic slices of a grid (`--shard K/N`, K in 0..N): run j of
/// [`job_keys`] belongs to shard j mod N, which deals the n_obs levels (the runs' main cost)
/// round-robin so shards take about equally long. The slices are disjoint and cover the grid.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct Shard {
    pub index: usize,
    pub count: usize,
}

impl Shard {
    /// Whether run `j` (its position in [`job_keys`]) is in this shard.
    pub fn contains(self, j: usize) -> bool {
        j % self.count == self.index
    }
}

impl std::fmt::Display for Shard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.index, self.count)
    }
}

impl std::str::FromStr for Shard {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        let bad = || format!("{s:?} is not a shard K/N with 0 ≤ K < N (e.g. 0/4 … 3/4)");
        let (k, n) = s.split_once('/').ok_or_else(bad)?;
        let (index, count): (usize, usize) =
            (k.trim().parse().map_err(|_| bad())?, n.trim().parse().map_err(|_| bad())?);
        if count == 0 || index >= count {
            return Err(bad());
        }
        Ok(Shard { index, count })
    }
}

/// Rows in one canonical order, whatever order runs finished or shards were merged in: by
/// dataset, r, CI, masking, n_obs, seed, combiner, uncertainty, DP setting and party. Tables
/// built from rows in this order are identical bit for bit however the grid was run.
pub(crate) fn sort_rows(rows: &mut [RunRow]) {
    rows.sort_by(|a, b| {
        let r = |x: &RunRow| x.r.unwrap_or(f64::NEG_INFINITY);
        a.dataset
            .cmp(&b.dataset)
            .then(r(a).total_cmp(&r(b)))
            .then(a.ci.cmp(&b.ci))
            .then(a.masking.cmp(&b.masking))
            .then(a.nobs.cmp(&b.nobs))
            .then(a.seed.cmp(&b.seed))
            .then(a.combiner.name().cmp(b.combiner.name()))
            .then(a.uncertainty.name().cmp(b.uncertainty.name()))
            .then(a.dp.cmp(&b.dp))
            .then(a.party.cmp(&b.party))
    });
}

#[cfg(test)]
mod shard_tests {
    use super::*;

    #[test]
    fn refit_policies_parse_and_choose_their_restarts() {
        for (text, want) in [
            ("warm", RefitPolicy::Warm),
            ("warm+restart", RefitPolicy::WarmRestart),
            ("every=3", RefitPolicy::RestartEvery(3)),
        ] {
            let p: RefitPolicy = text.parse().unwrap();
            assert_eq!((p, p.to_string()), (want, text.to_string()));
        }
        for bad in ["every=0", "every=x", "cold", ""] {
            assert!(bad.parse::<RefitPolicy>().unwrap_err().contains("warm, warm+restart or every=K"), "{bad}");
        }
        let pattern = |p: RefitPolicy| (0..6).map(|n| p.restarts(n)).collect::<Vec<_>>();
        assert_eq!(pattern(RefitPolicy::Warm), vec![false; 6]);
        assert_eq!(pattern(RefitPolicy::WarmRestart), vec![true; 6]);
        assert_eq!(pattern(RefitPolicy::RestartEvery(3)), vec![false, false, true, false, false, true]);
    }

    #[test]
    fn dp_labels_keep_their_spelling() {
        for text in ["off", "thesis", "calibrated(eps=1,release-once)", "calibrated(eps=0.25,per-query)"] {
            let l: DpLabel = text.parse().unwrap();
            assert_eq!(l.to_string(), text);
            assert_eq!(serde_json::to_string(&l).unwrap(), format!("\"{text}\""));
            assert_eq!(serde_json::from_str::<DpLabel>(&format!("\"{text}\"")).unwrap(), l);
        }
        for bad in
            ["on", "calibrated(eps=x,release-once)", "calibrated(eps=1,sometimes)", "calibrated(eps=-1,per-query)"]
        {
            assert!(bad.parse::<DpLabel>().is_err(), "{bad}");
        }
        let cal = DpSetting::Calibrated {
            epsilon: 1.0,
            delta: 1e-5,
            policy: ReleasePolicy::PerQuery,
            range: LabelRange::new(-3.0, 3.0).unwrap(),
        };
        assert_eq!(cal.name(), "calibrated(eps=1,per-query)");
        assert!(DpLabel::Calibrated { epsilon: 4.0, policy: ReleasePolicy::ReleaseOnce } < DpLabel::Off);
    }

    #[test]
    fn shards_parse_and_partition_the_runs() {
        let s: Shard = "2/4".parse().unwrap();
        assert_eq!((s.index, s.count, s.to_string()), (2, 4, "2/4".to_string()));
        for bad in ["4/4", "1/0", "x/2", "3", "-1/2"] {
            assert!(bad.parse::<Shard>().unwrap_err().contains("0 ≤ K < N"), "{bad}");
        }
        for j in 0..50 {
            let owners = (0..4).filter(|&k| Shard { index: k, count: 4 }.contains(j)).count();
            assert_eq!(owners, 1, "run {j}");
        }
    }
}
