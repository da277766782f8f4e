//! `dpcotrain-lab experiment sparse …`: the sparse-GP papers' experiments reproduced with the
//! numerical core — Bauer, van der Wilk & Rasmussen (2016), Walder, Kim & Schölkopf (2008) and
//! Hughes-Hallett (2022).
//! Each writes JSON (every number), a Markdown table with the papers' numbers beside ours, and
//! SVG figures into `--out`.

mod bauer;
mod bauer_table1;
mod elbo_m;
mod init;
mod steps;
mod walder;

use anyhow::Context as _;
use clap::Subcommand;
use dpcotrain_gp::Prediction;
use dpcotrain_gp::kernels::{Kernel, SquaredExponential};
use dpcotrain_gp::standardize::Standardizer;
use nalgebra::{DMatrix, DVector};
use rand::seq::SliceRandom;
use rand_chacha::ChaCha8Rng;
use std::path::Path;

#[derive(Debug, Subcommand)]
pub enum SparseCommand {
    /// Bauer et al. 2016: FITC vs VFE on Snelson's data (M = 8 best of random starts, Fig 1;
    /// Z = X, Fig 4; M = 15 random starts, Fig 3; one input added, Fig 2) and the 4-D toy
    /// against M (Fig 5).
    Bauer(bauer::BauerArgs),
    /// Bauer et al. 2016 Table 1: GP on a subset, FITC, VFE, VFE with hyperparameters frozen
    /// first and VFE initialised from FITC on pumadyn32nm (SE-ARD, M = 40).
    BauerPumadyn(bauer_table1::Table1Args),
    /// Walder et al. 2008: multiscale vs ordinary inducing features (1-D picture with m = 4,
    /// Fig 1; test error against m on CCPP and a 9-D simulated stand-in).
    Walder(walder::WalderArgs),
    /// Hughes-Hallett 2022 §3.2: the step and step + cubic toys, six kernels, maximum ELBO
    /// against M with reinit-retrain (Figs 3.3–3.6).
    Steps(steps::StepsArgs),
    /// Hughes-Hallett 2022 §3.1: random vs greedy-variance initialisation with Z fixed
    /// (Table 3.1) and the training strategies (Fig 3.2) on Wine and CCPP.
    Init(init::InitArgs),
    /// Hughes-Hallett 2022 Fig 3.7: maximum ELBO against M with reinit-retrain on airfoil and
    /// kin40k subsampled to 5,000 rows (SE-ARD), against the exact GP.
    ElboM(elbo_m::ElboMArgs),
}

pub fn run(cmd: SparseCommand) -> anyhow::Result<()> {
    match cmd {
        SparseCommand::Bauer(a) => bauer::run(a),
        SparseCommand::BauerPumadyn(a) => bauer_table1::run(a),
        SparseCommand::Walder(a) => walder::run(a),
        SparseCommand::Steps(a) => steps::run(a),
        SparseCommand::Init(a) => init::run(a),
        SparseCommand::ElboM(a) => elbo_m::run(a),
    }
}

/// Snelson & Ghahramani's (2006) 200-point 1-D data set (data/snelson/README.md).
fn snelson() -> anyhow::Result<(DMatrix<f64>, DVector<f64>)> {
    const CSV: &str = include_str!("../../../../data/snelson/snelson.csv");
    let t = dpcotrain_cotrain::table::Table::parse(Path::new("data/snelson/snelson.csv"), CSV.as_bytes())?;
    let s = t.split_target(Some("y"))?;
    Ok((s.0, s.1))
}

/// Training inputs and targets, then test inputs and targets.
pub(crate) type TrainTest = (DMatrix<f64>, DVector<f64>, DMatrix<f64>, DVector<f64>);

/// CCPP's four inputs and its target (unstandardised).
pub(crate) fn ccpp_xy() -> anyhow::Result<(DMatrix<f64>, DVector<f64>)> {
    let (_, raw) = dpcotrain_cotrain::ccpp::ccpp_raw()?;
    let d = raw.ncols() - 1;
    Ok((raw.columns(0, d).clone_owned(), raw.column(d).clone_owned()))
}

/// The gzipped sets of Evans's `uci_datasets` (data/uci/README.md), byte-identical to their
/// source: `pumadyn32nm` (8,192 × 32) and `kin40k` (40,000 × 8); headerless CSV, target last.
/// Returns the inputs and the target, unstandardised.
fn uci_gz(name: &str) -> anyhow::Result<(DMatrix<f64>, DVector<f64>)> {
    let (file, bytes): (&str, &[u8]) = match name {
        "pumadyn32nm" => ("data/uci/pumadyn32nm.csv.gz", include_bytes!("../../../../data/uci/pumadyn32nm.csv.gz")),
        "kin40k" => ("data/uci/kin40k.csv.gz", include_bytes!("../../../../data/uci/kin40k.csv.gz")),
        other => anyhow::bail!("no gzipped data set {other:?}: expected pumadyn32nm or kin40k"),
    };
    headerless_gz_csv(Path::new(file), bytes)
}

/// Decompress a headerless numeric CSV and read it with the project's table reader (whose errors
/// name the file, line and column), the last column being the target.
fn headerless_gz_csv(path: &Path, gz: &[u8]) -> anyhow::Result<(DMatrix<f64>, DVector<f64>)> {
    use std::io::Read;
    let mut text = String::new();
    flate2::read::GzDecoder::new(gz)
        .read_to_string(&mut text)
        .with_context(|| format!("{}: cannot decompress as gzipped UTF-8 text", path.display()))?;
    let Some(first) = text.lines().find(|l| !l.trim().is_empty()) else {
        anyhow::bail!("{}: no data rows after decompressing", path.display());
    };
    let d = first.split(',').count();
    if d < 2 {
        anyhow::bail!("{}: the first row has {d} field; expected inputs and a target", path.display());
    }
    let mut header: Vec<String> = (1..d).map(|i| format!("x{i}")).collect();
    header.push("y".into());
    let csv = format!("{}\n{text}", header.join(","));
    // The hint goes after the reader's own message (file, line, column), which it explains.
    let t = dpcotrain_cotrain::table::Table::parse(path, csv.as_bytes()).map_err(|e| {
        anyhow::anyhow!(
            "{e} (the file has no header: line 1 is the header x1,…,y added on reading, line n is row n − 1)"
        )
    })?;
    let (x, y, _, _) = t.split_target(Some("y"))?;
    Ok((x, y))
}

/// A seeded random split into `n_train` training and `n_test` test rows (all the others when
/// `None`), standardised with the training rows' means and sds.
pub(crate) fn split_standardised(
    x: &DMatrix<f64>,
    y: &DVector<f64>,
    n_train: usize,
    n_test: Option<usize>,
    rng: &mut ChaCha8Rng,
    name: &str,
) -> anyhow::Result<TrainTest> {
    let mut idx: Vec<usize> = (0..x.nrows()).collect();
    idx.shuffle(rng);
    let n_test = n_test.unwrap_or(idx.len().saturating_sub(n_train));
    if n_train < 2 || n_test == 0 || n_train + n_test > idx.len() {
        anyhow::bail!("{name} has {} rows: cannot split off {n_train} training and {n_test} test rows", idx.len());
    }
    let (tr, rest) = idx.split_at(n_train);
    let te = &rest[..n_test];
    let st = Standardizer::fit(&x.select_rows(tr), &y.select_rows(tr))?;
    Ok((
        st.transform_x(&x.select_rows(tr))?,
        st.transform_y(&y.select_rows(tr)),
        st.transform_x(&x.select_rows(te))?,
        st.transform_y(&y.select_rows(te)),
    ))
}

/// Test metrics of a predictive on held-out targets (σ² the observation noise).
#[derive(Debug, Clone, Copy, serde::Serialize)]
pub(crate) struct TestMetrics {
    pub rmse: f64,
    /// Standardised mean squared error: MSE / Var(y_test).
    pub smse: f64,
    /// Mean negative log predictive density of y*.
    pub nlpd: f64,
}

pub(crate) fn test_metrics(pred: &Prediction, noise: f64, y: &DVector<f64>) -> TestMetrics {
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
pub(crate) fn write(out: &Path, name: &str, text: &str) -> anyhow::Result<()> {
    crate::files::write_atomic(&out.join(name), text)?;
    eprintln!("wrote {}", out.join(name).display());
    Ok(())
}

/// A spinner for long experiment steps (hidden when stderr is not a terminal).
pub(crate) fn progress(total: u64, what: &str) -> indicatif::ProgressBar {
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
    fn the_gzipped_uci_sets_load_with_their_shapes_and_first_values() {
        let (x, y) = uci_gz("pumadyn32nm").unwrap();
        assert_eq!((x.nrows(), x.ncols(), y.len()), (8192, 32, 8192));
        assert!((x[(0, 0)] + 0.85451).abs() < 1e-12 && (x[(1, 1)] - 0.4017).abs() < 1e-12);
        let (x, y) = uci_gz("kin40k").unwrap();
        assert_eq!((x.nrows(), x.ncols(), y.len()), (40000, 8, 40000));
        assert!((x[(0, 0)] + 1.7034).abs() < 1e-12 && (y[0] - 1.4012).abs() < 1e-12);
        assert!(uci_gz("kin8nm").is_err());
    }

    #[test]
    fn bad_gzipped_input_is_an_error_naming_the_file_and_line() {
        use std::io::Write;
        let gz = |text: &str| {
            let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
            e.write_all(text.as_bytes()).unwrap();
            e.finish().unwrap()
        };
        let p = Path::new("bad.csv.gz");
        let (x, y) = headerless_gz_csv(p, &gz("1,2,3\n4,5,6\n")).unwrap();
        assert_eq!((x.nrows(), x.ncols(), y[1]), (2, 2, 6.0));
        let e = headerless_gz_csv(p, &gz("1,2,3\n4,oops,6\n")).unwrap_err().to_string();
        assert!(e.contains("bad.csv.gz") && e.contains("line 3") && e.contains("oops"), "{e}");
        let e = headerless_gz_csv(p, b"not gzip").unwrap_err().to_string();
        assert!(e.contains("bad.csv.gz") && e.contains("decompress"), "{e}");
        assert!(headerless_gz_csv(p, &gz("\n")).is_err());
    }

    #[test]
    fn seeded_split_sizes_and_train_standardisation() {
        use rand::SeedableRng;
        let x = DMatrix::from_fn(50, 2, |i, j| (i * (j + 1)) as f64);
        let y = DVector::from_fn(50, |i, _| i as f64);
        let (xtr, ytr, xte, _) =
            split_standardised(&x, &y, 30, Some(10), &mut ChaCha8Rng::seed_from_u64(1), "t").unwrap();
        assert_eq!((xtr.nrows(), xte.nrows()), (30, 10));
        assert!(ytr.mean().abs() < 1e-12 && xtr.column(1).mean().abs() < 1e-12);
        assert!(split_standardised(&x, &y, 45, Some(10), &mut ChaCha8Rng::seed_from_u64(1), "t").is_err());
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
