//! `dpcotrain experiment sparse …`: the sparse-GP papers' experiments reproduced with the
//! numerical core — Bauer, van der Wilk & Rasmussen (2016), Walder, Kim & Schölkopf (2008) and
//! Hughes-Hallett (2022).
//! Each writes JSON (every number), a Markdown table with the papers' numbers beside ours, and
//! SVG figures into `--out`.

mod bauer;
mod init;
mod steps;
mod walder;

use clap::Subcommand;
use dpcotrain_gp::Prediction;
use dpcotrain_gp::kernels::{Kernel, SquaredExponential};
use nalgebra::{DMatrix, DVector};
use std::path::Path;

#[derive(Debug, Subcommand)]
pub enum SparseCommand {
    /// Bauer et al. 2016: FITC vs VFE on Snelson's data (Z = X, Fig 4; M = 15 random starts,
    /// Fig 3) and the 4-D toy against M (Fig 5).
    Bauer(bauer::BauerArgs),
    /// Walder et al. 2008: multiscale vs ordinary inducing features (1-D picture with m = 4,
    /// Fig 1; test error against m on CCPP and a 9-D simulated stand-in).
    Walder(walder::WalderArgs),
    /// Hughes-Hallett 2022 §3.2: the step and step + cubic toys, six kernels, maximum ELBO
    /// against M with reinit-retrain (Figs 3.3–3.6).
    Steps(steps::StepsArgs),
    /// Hughes-Hallett 2022 §3.1: random vs greedy-variance initialisation with Z fixed
    /// (Table 3.1) and the training strategies (Fig 3.2) on Wine and CCPP.
    Init(init::InitArgs),
}

pub fn run(cmd: SparseCommand) -> anyhow::Result<()> {
    match cmd {
        SparseCommand::Bauer(a) => bauer::run(a),
        SparseCommand::Walder(a) => walder::run(a),
        SparseCommand::Steps(a) => steps::run(a),
        SparseCommand::Init(a) => init::run(a),
    }
}

/// Snelson & Ghahramani's (2006) 200-point 1-D data set (data/snelson/README.md).
fn snelson() -> anyhow::Result<(DMatrix<f64>, DVector<f64>)> {
    const CSV: &str = include_str!("../../../data/snelson/snelson.csv");
    let t = dpcotrain_cotrain::table::Table::parse(Path::new("data/snelson/snelson.csv"), CSV.as_bytes())?;
    let s = t.split_target(Some("y"))?;
    Ok((s.0, s.1))
}

/// Training inputs and targets, then test inputs and targets.
type TrainTest = (DMatrix<f64>, DVector<f64>, DMatrix<f64>, DVector<f64>);

/// CCPP's four inputs and its target (unstandardised).
fn ccpp_xy() -> anyhow::Result<(DMatrix<f64>, DVector<f64>)> {
    let (_, raw) = dpcotrain_cotrain::ccpp::ccpp_raw()?;
    let d = raw.ncols() - 1;
    Ok((raw.columns(0, d).clone_owned(), raw.column(d).clone_owned()))
}

/// Test metrics of a predictive on held-out targets (σ² the observation noise).
#[derive(Debug, Clone, Copy, serde::Serialize)]
struct TestMetrics {
    rmse: f64,
    /// Standardised mean squared error: MSE / Var(y_test).
    smse: f64,
    /// Mean negative log predictive density of y*.
    nlpd: f64,
}

fn test_metrics(pred: &Prediction, noise: f64, y: &DVector<f64>) -> TestMetrics {
    let n = y.len() as f64;
    let mse = (&pred.mean - y).norm_squared() / n;
    let my = y.mean();
    let var_y = y.iter().map(|v| (v - my).powi(2)).sum::<f64>() / n;
    let nlpd = pred
        .mean
        .iter()
        .zip(pred.var.iter())
        .zip(y.iter())
        .map(|((m, v), t)| {
            let s2 = v + noise;
            0.5 * ((2.0 * std::f64::consts::PI * s2).ln() + (t - m).powi(2) / s2)
        })
        .sum::<f64>()
        / n;
    TestMetrics { rmse: mse.sqrt(), smse: mse / var_y, nlpd }
}

/// An SE kernel (isotropic or ARD) at the given start.
fn se(variance: f64, lengthscales: Vec<f64>, ard: bool) -> Box<dyn Kernel> {
    if ard {
        Box::new(SquaredExponential::ard(variance, lengthscales))
    } else {
        Box::new(SquaredExponential::isotropic(variance, lengthscales[0]))
    }
}

/// The fitted SE variance and length-scales of a model's kernel.
fn se_params(k: &dyn Kernel) -> (f64, Vec<f64>) {
    let se = k.as_squared_exponential().expect("the sparse experiments use the SE kernel");
    (se.variance(), se.lengthscales().to_vec())
}

/// Number of clusters among the rows of Z when rows closer than `tol` are merged (single
/// linkage): Bauer et al.'s "clumping" made countable.
fn clusters(z: &DMatrix<f64>, tol: f64) -> usize {
    let m = z.nrows();
    let mut parent: Vec<usize> = (0..m).collect();
    fn find(p: &mut [usize], i: usize) -> usize {
        let mut r = i;
        while p[r] != r {
            r = p[r];
        }
        p[i] = r;
        r
    }
    for i in 0..m {
        for j in i + 1..m {
            if (z.row(i) - z.row(j)).norm() < tol {
                let (a, b) = (find(&mut parent, i), find(&mut parent, j));
                parent[a] = b;
            }
        }
    }
    (0..m).filter(|&i| find(&mut parent, i) == i).count()
}

/// Write `name` into `out` durably and say so.
fn write(out: &Path, name: &str, text: &str) -> anyhow::Result<()> {
    crate::cli::experiment::write_atomic(&out.join(name), text)?;
    eprintln!("wrote {}", out.join(name).display());
    Ok(())
}

/// A spinner for long experiment steps (hidden when stderr is not a terminal).
fn progress(total: u64, what: &str) -> indicatif::ProgressBar {
    let bar = indicatif::ProgressBar::new(total);
    bar.set_style(
        indicatif::ProgressStyle::with_template(&format!("{what} {{bar:30}} {{pos}}/{{len}} {{msg}} ({{elapsed}})"))
            .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
    );
    bar
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn snelson_loads_and_clusters_count_clumps() {
        let (x, y) = snelson().unwrap();
        assert_eq!((x.nrows(), x.ncols(), y.len()), (200, 1, 200));
        assert!((x[(0, 0)] - 5.7007757).abs() < 1e-12 && (y[0] + 0.4536778).abs() < 1e-12);
        let z = DMatrix::from_column_slice(5, 1, &[0.0, 1e-6, 1.0, 1.0 + 1e-7, 3.0]);
        assert_eq!(clusters(&z, 1e-3), 3);
        assert_eq!(clusters(&z, 1e-9), 5);
    }

    #[test]
    fn test_metrics_of_a_perfect_and_a_constant_predictor() {
        let y = DVector::from_vec(vec![1.0, -1.0, 2.0, 0.0]);
        let perfect = Prediction::new(y.clone(), DVector::from_element(4, 0.0), None);
        let m = test_metrics(&perfect, 0.5, &y);
        assert!(m.rmse == 0.0 && m.smse == 0.0);
        assert!((m.nlpd - 0.5 * (2.0 * std::f64::consts::PI * 0.5).ln()).abs() < 1e-12);
        let flat = Prediction::new(DVector::from_element(4, y.mean()), DVector::from_element(4, 1.0), None);
        assert!((test_metrics(&flat, 0.0, &y).smse - 1.0).abs() < 1e-12);
    }
}
