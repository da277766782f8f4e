//! One simulated co-training seen from party P1 (the Fig 4.3/4.4-style picture of Thomas 2017
//! §4.3.2): r = 0.9, conditionally independent views, masked, n_obs = 25, Noisy + marginal, 25
//! rounds — without DP, with the thesis's DP, and with calibrated DP (ε = 1, release-once).
//! This module runs the experiments and returns the numbers; `dpcotrain-report` draws them.

use crate::grid::DpSetting;
use dpcotrain_cotrain::CombinerKind;
use dpcotrain_cotrain::CotrainError;
use dpcotrain_cotrain::ReleasePolicy;
use dpcotrain_cotrain::Uncertainty;
use dpcotrain_cotrain::{SimConfig, simulate};
use dpcotrain_cotrain::{block_on, build_parties, run_in_process};
use dpcotrain_privacy::LabelRange;
use nalgebra::DMatrix;

/// What P1 ends one run with, on a grid of x₁.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct ExchangeRun {
    pub title: String,
    /// P1's private (x₁, y).
    pub train: Vec<(f64, f64)>,
    /// The pool points P1 asked about: (x₁, the first answer's mean).
    pub queried: Vec<(f64, f64)>,
    pub grid: Vec<f64>,
    /// Posterior mean and 95% band after co-training, at `grid`.
    pub mean: Vec<f64>,
    pub lower: Vec<f64>,
    pub upper: Vec<f64>,
    /// The generator's true regression line E[y | x₁] at `grid`.
    pub truth: Vec<f64>,
}

/// The three runs (no DP, thesis DP, calibrated DP at ε = 1) of seed `seed`.
pub(crate) fn exchange_runs(seed: u64) -> Result<Vec<ExchangeRun>, CotrainError> {
    let cfg =
        SimConfig { r: 0.9, conditional_independence: true, masking: true, n_obs: 25, seed, ..SimConfig::default() };
    let sc = simulate(&cfg)?;
    let grid: Vec<f64> = (0..=120).map(|i| -3.0 + 6.0 * i as f64 / 120.0).collect();
    let xs = DMatrix::from_column_slice(grid.len(), 1, &grid);
    let truth: Vec<f64> = grid.iter().map(|&x| cfg.regression_of_y(x)).collect();
    let settings = [
        ("without DP", DpSetting::Off),
        ("thesis DP (σ = 0.42, no guarantee)", DpSetting::Thesis),
        (
            "calibrated DP (ε = 1, release-once)",
            DpSetting::Calibrated {
                epsilon: 1.0,
                delta: 1e-5,
                policy: ReleasePolicy::ReleaseOnce,
                range: LabelRange::new(-3.0, 3.0)?,
            },
        ),
    ];
    let mut runs = Vec::new();
    for (title, dp) in settings {
        let parties = build_parties(&sc, CombinerKind::Noisy, Uncertainty::Marginal, &dp.config(), seed)?;
        block_on(run_in_process(&parties, 25))?;
        let mut p = dpcotrain_cotrain::party::lock_party(&parties[0])?;
        let pred = p.predict(&xs, false)?;
        let data = &sc.parties[0];
        // The labels the party's own model fits (clipped where that model is released).
        let y_fit = dpcotrain_cotrain::party::labels_the_model_fits(&dp.config(), &data.y_train);
        let sd: Vec<f64> = pred.var.iter().map(|v| v.max(0.0).sqrt()).collect();
        let train = (0..data.x_train.nrows()).map(|i| (data.x_train[(i, 0)], y_fit[i])).collect();
        let queried = p
            .turns()
            .iter()
            .filter_map(|t| Some((t.index?, t.answers.first()?.mean.first().copied()?)))
            .map(|(i, m)| (data.x_pool[(i, 0)], m))
            .collect();
        runs.push(ExchangeRun {
            title: title.into(),
            train,
            queried,
            mean: pred.mean.iter().copied().collect(),
            lower: pred.mean.iter().zip(&sd).map(|(m, s)| m - 1.96 * s).collect(),
            upper: pred.mean.iter().zip(&sd).map(|(m, s)| m + 1.96 * s).collect(),
            truth: truth.clone(),
            grid: grid.clone(),
        });
    }
    Ok(runs)
}
