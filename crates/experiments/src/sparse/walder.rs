//! Walder, Kim & Schölkopf (2008), "Sparse multiscale Gaussian process regression": inducing
//! features with their own widths (`dpcotrain_gp::features::Multiscale`) against ordinary
//! inducing points.
//!
//! - **1-D picture** (their Fig 1: n = 200, m = 4): spgp-full (FITC, ordinary points) and
//!   vsgp-full (FITC, multiscale: the same fit continued with free widths), and the same two
//!   with VFE; how close each predictive comes to the full GP's.
//! - **Test error against m** (their Figs 2–3): kin-40k (Seeger et al. 2003; 8 inputs, the
//!   paper's 10,000 / 30,000 sizes with `--n-train 10000`, a seeded split), CCPP (Tüfekci 2014;
//!   4 inputs) and a 9-D simulated stand-in (a GP draw with nine ARD length-scales), for
//!   spgp-full/basis, vsgp-full/basis (basis: the hyperparameters of a full GP on 1,000 rows,
//!   fixed; only centres and widths train) and the VFE counterparts of the full variants.
//!   Variants as in the paper: centres by k-means; the multiscale model continues from the
//!   ordinary fit ("2000 SPGP iterations, then 2000 VSGP iterations", here `--max-iters` each).

use super::{TestMetrics, TrainTest, progress, se, se_params, snelson, split_standardised, test_metrics, write};
use clap::Args;
use dpcotrain_gp::inducing::kmeans;
use dpcotrain_gp::standardize::Standardizer;
use dpcotrain_gp::train::{SgprStrategy, TrainOptions, train, train_multiscale, train_sparse};
use dpcotrain_gp::{ExactGp, InducingFeatures, NoiseModel, NoiseVariance, SparseGp, SparseKind};
use dpcotrain_report::{Figure, LineChart, Marker, Series};
use nalgebra::{DMatrix, DVector};
use rand::SeedableRng;
use rand::seq::SliceRandom;
use rand_chacha::ChaCha8Rng;
use serde::Serialize;
use serde_json::json;
use std::path::PathBuf;

#[derive(Debug, Args)]
pub struct WalderArgs {
    /// Output folder (walder.json, walder.md, walder-fig1.svg, walder-m.svg).
    #[arg(long)]
    pub out: PathBuf,
    /// Numbers of basis functions m for the test-error curves.
    #[arg(long, value_delimiter = ',', default_value = "4,8,16,32,64,128")]
    pub m: Vec<usize>,
    /// Training rows of the test-error data sets (the rest of CCPP, or 2,000 simulated rows, are
    /// the test set).
    #[arg(long, default_value_t = 4000)]
    pub n_train: usize,
    /// Data sets for the test-error curves: ccpp, kin40k (the paper's; data/uci/), sim9.
    #[arg(long, value_delimiter = ',', default_value = "ccpp,sim9")]
    pub data: Vec<String>,
    /// Seeds (train/test splits and k-means starts) of the test-error curves.
    #[arg(long, default_value_t = 1)]
    pub seeds: u64,
    /// L-BFGS iterations per phase (ordinary, then multiscale).
    #[arg(long, default_value_t = 500)]
    pub max_iters: usize,
}

/// A variant of the comparison: name, objective, multiscale features, and whether the
/// hyperparameters come from a full GP on a subset and stay fixed (the paper's "basis").
type Variant = (&'static str, SparseKind, bool, bool);

/// The paper's four variants (FITC = SPGP) plus the VFE counterparts of the full ones.
const VARIANTS: [Variant; 6] = [
    ("spgp-full", SparseKind::Fitc, false, false),
    ("vsgp-full", SparseKind::Fitc, true, false),
    ("spgp-basis", SparseKind::Fitc, false, true),
    ("vsgp-basis", SparseKind::Fitc, true, true),
    ("vfe", SparseKind::Vfe, false, false),
    ("vfe-multiscale", SparseKind::Vfe, true, false),
];

/// Rows of the full GP whose hyperparameters the basis variants keep (Walder et al. used 2,000
/// of kin-40k's 10,000 and 1,024 of pumadyn's 7,168).
const BASIS_SUBSET: usize = 1000;

/// The basis variants' fixed hyperparameters: an exact GP (SE-ARD) fitted on a random subset.
fn subset_gp(x: &DMatrix<f64>, y: &DVector<f64>, seed: u64) -> anyhow::Result<(Box<dyn dpcotrain_gp::Kernel>, f64)> {
    let mut idx: Vec<usize> = (0..x.nrows()).collect();
    idx.shuffle(&mut ChaCha8Rng::seed_from_u64(seed ^ 0xBA_5E5));
    idx.truncate(BASIS_SUBSET.min(x.nrows()));
    let d = x.ncols();
    let mut gp = ExactGp::new(
        se(1.0, vec![1.0; d], d > 1),
        NoiseModel::homoscedastic(0.1),
        x.select_rows(&idx),
        y.select_rows(&idx),
    )?;
    train(&mut gp, &TrainOptions { seed, ..Default::default() })?;
    Ok((gp.kernel.clone(), gp.noise.sigma2().variance))
}

#[derive(Debug, Clone, Serialize)]
struct Fit {
    variant: &'static str,
    m: usize,
    nlml: f64,
    sigma_n: f64,
    lengthscales: Vec<f64>,
    /// Mean of (L_id/ℓ_d − 1)²: how far the widths moved from ordinary points (Walder's "mean
    /// squared deviation of σ_i from σ", in relative width units).
    width_deviation: f64,
    test: Option<TestMetrics>,
    #[serde(skip)]
    model: Option<SparseGp>,
}

fn fit_variant(
    variant: Variant,
    (x, y): (&DMatrix<f64>, &DVector<f64>),
    basis: &(Box<dyn dpcotrain_gp::Kernel>, f64),
    m: usize,
    seed: u64,
    max_iters: usize,
    test: Option<(&DMatrix<f64>, &DVector<f64>)>,
) -> anyhow::Result<Fit> {
    let (name, kind, multiscale, fixed) = variant;
    let d = x.ncols();
    let z = kmeans(x, m, 100, seed)?;
    let (kernel, noise) = if fixed {
        (basis.0.clone(), NoiseModel::Homoscedastic(NoiseVariance::fixed(basis.1)))
    } else {
        (se(1.0, vec![1.0; d], d > 1), NoiseModel::homoscedastic(0.1))
    };
    let mut gp = SparseGp::new(kind, kernel, noise, x.clone(), y.clone(), z)?;
    gp.optimize_kernel = !fixed;
    let opts = TrainOptions { max_iters, seed, ftol: 1e-12, pgtol: 1e-7, ..Default::default() };
    let objective = if multiscale {
        train_multiscale(&mut gp, SgprStrategy::Joint, &opts)?.multiscale.objective
    } else {
        train_sparse(&mut gp, SgprStrategy::Joint, &opts)?.objective
    };
    let (_, ls) = se_params(gp.kernel.as_ref());
    let width_deviation = match gp.features() {
        InducingFeatures::Multiscale(ms) => {
            let a = ms.relative();
            a.iter().map(|v| (v - 1.0).powi(2)).sum::<f64>() / a.len() as f64
        }
        InducingFeatures::Points => 0.0,
    };
    let sigma2 = gp.noise.sigma2().variance;
    let test = match test {
        Some((xs, ys)) => Some(test_metrics(&gp.posterior()?.predict(xs, false)?, sigma2, ys)),
        None => None,
    };
    Ok(Fit {
        variant: name,
        m,
        nlml: -objective,
        sigma_n: sigma2.sqrt(),
        lengthscales: ls,
        width_deviation,
        test,
        model: Some(gp),
    })
}

pub fn run(a: WalderArgs) -> anyhow::Result<()> {
    std::fs::create_dir_all(&a.out)?;
    for d in &a.data {
        if !["ccpp", "kin40k", "sim9"].contains(&d.as_str()) {
            anyhow::bail!("--data {d:?}: expected ccpp, kin40k or sim9");
        }
    }
    let jobs = (VARIANTS.len() + 1) as u64 + a.data.len() as u64 * a.seeds * (a.m.len() * VARIANTS.len()) as u64;
    let bar = progress(jobs, "walder");

    // Fig 1: Snelson's 200 points (standardised), m = 4.
    let (x_raw, y_raw) = snelson()?;
    let st = Standardizer::fit(&x_raw, &y_raw)?;
    let (x, y) = (st.transform_x(&x_raw)?, st.transform_y(&y_raw));
    let mut full = ExactGp::new(se(1.0, vec![1.0], false), NoiseModel::homoscedastic(0.1), x.clone(), y.clone())?;
    train(&mut full, &TrainOptions { restarts: 3, ..Default::default() })?;
    bar.inc(1);
    let grid = DMatrix::from_fn(300, 1, |i, _| -2.2 + 4.4 * i as f64 / 299.0);
    let full_pred = full.posterior()?.predict(&grid, false)?;
    let full_s2 = full.noise.sigma2().variance;
    let mut toy = vec![];
    let toy_basis = (full.kernel.clone(), full.noise.sigma2().variance);
    for v in VARIANTS {
        bar.set_message(format!("1-D {}", v.0));
        let f = fit_variant(v, (&x, &y), &toy_basis, 4, 0, a.max_iters * 4, None)?;
        let gp = f.model.as_ref().expect("kept");
        let p = gp.posterior()?.predict(&grid, false)?;
        let s2 = gp.noise.sigma2().variance;
        let n = grid.nrows() as f64;
        let mean_rms = ((&p.mean - &full_pred.mean).norm_squared() / n).sqrt();
        let sd_rms = (p
            .var
            .iter()
            .zip(full_pred.var.iter())
            .map(|(a, b)| ((a + s2).sqrt() - (b + full_s2).sqrt()).powi(2))
            .sum::<f64>()
            / n)
            .sqrt();
        toy.push((f, p, mean_rms, sd_rms));
        bar.inc(1);
    }
    let fig1 = fig1_svg(&x, &y, &grid, &full_pred, full_s2, &toy);

    // Test error against m.
    let mut curves = vec![];
    for data in &a.data {
        for seed in 0..a.seeds {
            let (xtr, ytr, xte, yte) = dataset(data, a.n_train, seed)?;
            let basis = subset_gp(&xtr, &ytr, seed)?;
            for &m in &a.m {
                for v in VARIANTS {
                    bar.set_message(format!("{data} seed {seed} m = {m} {}", v.0));
                    let test = Some((&xte, &yte));
                    let mut f = fit_variant(v, (&xtr, &ytr), &basis, m.min(xtr.nrows()), seed, a.max_iters, test)?;
                    f.model = None;
                    curves.push(json!({"data": data, "seed": seed, "fit": f}));
                    bar.inc(1);
                }
            }
        }
    }
    bar.finish_and_clear();
    let fig_m = fig_m_svg(&a.data, &curves);
    let out = json!({
        "toy_1d": {
            "full_gp": { "nlml": -full.log_marginal_likelihood()?, "sigma_n": full_s2.sqrt() },
            "fits": toy.iter().map(|(f, _, mr, sr)| json!({"fit": f, "mean_rms_vs_full": mr, "sd_rms_vs_full": sr,
                "centres": f.model.as_ref().map(|g| g.z().as_slice().to_vec()),
                "relative_widths": f.model.as_ref().and_then(|g| match g.features() {
                    InducingFeatures::Multiscale(ms) => Some(ms.relative().as_slice().to_vec()), _ => None })})).collect::<Vec<_>>(),
        },
        "test_error": curves,
        "settings": { "n_train": a.n_train, "seeds": a.seeds, "max_iters": a.max_iters },
    });
    write(&a.out, "walder.json", &serde_json::to_string_pretty(&out)?)?;
    write(&a.out, "walder.md", &markdown(-full.log_marginal_likelihood()?, &toy, &a.data, &a.m, &curves))?;
    write(&a.out, "walder-fig1.svg", &fig1)?;
    write(&a.out, "walder-m.svg", &fig_m)?;
    Ok(())
}

/// Standardised train/test split of CCPP, kin-40k (the paper's data set; the rows not trained on
/// are the test set, 30,000 with `--n-train 10000` as in the paper) or the 9-D simulated stand-in.
fn dataset(name: &str, n_train: usize, seed: u64) -> anyhow::Result<TrainTest> {
    let mut rng = ChaCha8Rng::seed_from_u64(seed ^ 0x003A_1DE4);
    let (x, y) = match name {
        "ccpp" => super::ccpp_xy()?,
        "kin40k" => super::uci_gz("kin40k")?,
        _ => {
            use rand::Rng;
            use rand_distr::StandardNormal;
            let n = n_train + 2000;
            let x = DMatrix::from_fn(n, 9, |_, _| rng.random_range(-1.0..1.0));
            let ls = vec![0.4, 0.5, 0.6, 0.8, 1.0, 1.5, 2.0, 3.0, 5.0];
            let k = dpcotrain_gp::kernels::SquaredExponential::ard(1.0, ls);
            let f = dpcotrain_gp::sampling::prior(&k, &x, 1, &mut rng)?.paths.column(0).clone_owned();
            let y = DVector::from_fn(n, |i, _| f[i] + 0.1 * rng.sample::<f64, _>(StandardNormal));
            (x, y)
        }
    };
    split_standardised(&x, &y, n_train, None, &mut rng, name)
}

type ToyFit = (Fit, dpcotrain_gp::Prediction, f64, f64);

fn markdown(full_nlml: f64, toy: &[ToyFit], data: &[String], ms: &[usize], curves: &[serde_json::Value]) -> String {
    let mut s = String::from("# Walder, Kim & Schölkopf (2008), reproduced\n\n");
    s += "## 1-D, m = 4 (paper Fig 1; Snelson's 200 points, standardised)\n\n";
    s += &format!("Full GP NLML {full_nlml:.3}.\n\n");
    s += "| variant | NLML | σ_n | ℓ | mean (L/ℓ − 1)² | RMS of mean − full GP mean | RMS of sd − full GP sd |\n|---|---|---|---|---|---|---|\n";
    for (f, _, mr, sr) in toy {
        s += &format!(
            "| {} | {:.3} | {:.4} | {:.3} | {:.3} | {mr:.4} | {sr:.4} |\n",
            f.variant, f.nlml, f.sigma_n, f.lengthscales[0], f.width_deviation
        );
    }
    for d in data {
        s += &format!("\n## Test SMSE against m: {d} (mean over seeds; NLPD in brackets)\n\n| m |");
        for v in VARIANTS {
            s += &format!(" {} |", v.0);
        }
        s += "\n|---|";
        s += &"---|".repeat(VARIANTS.len());
        s += "\n";
        for &m in ms {
            s += &format!("| {m} |");
            for v in VARIANTS {
                let rows: Vec<&serde_json::Value> = curves
                    .iter()
                    .filter(|c| c["data"] == d.as_str() && c["fit"]["variant"] == v.0 && c["fit"]["m"] == m)
                    .collect();
                let avg = |k: &str| {
                    rows.iter().filter_map(|c| c["fit"]["test"][k].as_f64()).sum::<f64>() / rows.len().max(1) as f64
                };
                s += &format!(" {:.4} ({:.3}) |", avg("smse"), avg("nlpd"));
            }
            s += "\n";
        }
    }
    s
}

fn fig1_svg(
    x: &DMatrix<f64>,
    y: &DVector<f64>,
    grid: &DMatrix<f64>,
    full: &dpcotrain_gp::Prediction,
    full_s2: f64,
    toy: &[ToyFit],
) -> String {
    let gx: Vec<f64> = grid.iter().copied().collect();
    let data: Vec<(f64, f64)> = x.iter().copied().zip(y.iter().copied()).collect();
    let curve = |v: Vec<f64>| -> Vec<(f64, f64)> { gx.iter().copied().zip(v).collect() };
    let mut fig = Figure::new("m = 4 basis functions on Snelson's data (Walder et al. 2008, Fig 1)");
    for (f, p, _, _) in toy {
        let Some(gp) = &f.model else { continue };
        let s2 = gp.noise.sigma2().variance;
        let band = |sign: f64, p: &dpcotrain_gp::Prediction, s2: f64| -> Vec<f64> {
            p.mean.iter().zip(p.var.iter()).map(|(m, v)| m + sign * 2.0 * (v + s2).sqrt()).collect()
        };
        let bottom = y.min() - 0.6;
        // Each basis function drawn as its centre ± width on a line under the data.
        let mut bases: Vec<(f64, f64)> = vec![];
        let widths = match (gp.features(), gp.kernel.as_squared_exponential()) {
            (InducingFeatures::Multiscale(ms), Some(se)) => ms.widths(se).column(0).iter().copied().collect(),
            _ => vec![f.lengthscales[0]; gp.z().nrows()],
        };
        for (i, c) in gp.z().column(0).iter().enumerate() {
            let level = bottom - 0.15 * i as f64;
            bases.extend([(c - widths[i], level), (c + widths[i], level), (f64::NAN, f64::NAN)]);
        }
        let mut c = LineChart::new(format!("{} (NLML {:.2})", f.variant, f.nlml), "x (standardised)", "y")
            .with_series(Series::new("data", data.clone(), 6).scatter(Marker::Circle))
            .with_series(Series::new("full GP ± 2 sd", curve(band(2.0, full, full_s2)), 2).dashed())
            .with_series(Series::new("", curve(band(-2.0, full, full_s2)), 2).dashed())
            .with_series(Series::new("mean", curve(p.mean.iter().copied().collect()), 0))
            .with_series(Series::new("± 2 sd", curve(band(2.0, p, s2)), 5))
            .with_series(Series::new("", curve(band(-2.0, p, s2)), 5))
            .with_series(Series::new("centre ± width", bases, 3).markers(Marker::Cross));
        c.width = 460.0;
        c.height = 360.0;
        fig = fig.with_panel(c);
    }
    fig.to_svg()
}

fn fig_m_svg(data: &[String], curves: &[serde_json::Value]) -> String {
    let mut fig = Figure::new("Test SMSE against m (Walder et al. 2008, Figs 2–3 style)");
    for d in data {
        let mut c = LineChart::new(d.as_str(), "log₂ m", "test SMSE");
        for (i, v) in VARIANTS.iter().enumerate() {
            let mut ms: Vec<usize> = curves
                .iter()
                .filter(|r| r["data"] == d.as_str() && r["fit"]["variant"] == v.0)
                .filter_map(|r| r["fit"]["m"].as_u64().map(|m| m as usize))
                .collect();
            ms.sort_unstable();
            ms.dedup();
            let pts = ms
                .iter()
                .map(|&m| {
                    let vals: Vec<f64> = curves
                        .iter()
                        .filter(|r| r["data"] == d.as_str() && r["fit"]["variant"] == v.0 && r["fit"]["m"] == m)
                        .filter_map(|r| r["fit"]["test"]["smse"].as_f64())
                        .collect();
                    ((m as f64).log2(), vals.iter().sum::<f64>() / vals.len().max(1) as f64)
                })
                .collect();
            let s = Series::new(v.0, pts, i).markers(Marker::Circle);
            c = c.with_series(if v.2 { s } else { s.dashed() });
        }
        c.width = 520.0;
        fig = fig.with_panel(c);
    }
    fig.to_svg()
}
