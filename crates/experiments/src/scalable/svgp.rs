//! `experiment scalable svgp`: SVGP (Hensman et al. 2013; Thomas 2017 §1.3.2, its "SVIGP")
//! against SGPR (Titsias 2009's collapsed bound, L-BFGS) on CCPP (90/10 split, standardised —
//! Thomas 2017 §2.5's protocol; its best SVIGP: test RMSE 0.269 ± 0.00175 with m = 200,
//! b = 100) and on Snelson-style 1-D data at N = 10⁵: test RMSE, NLPD and wall time per seed.

use crate::sparse::{TestMetrics, ccpp_xy, progress, split_standardised, test_metrics, write};
use clap::Args;
use dpcotrain_gp::inducing::kmeans;
use dpcotrain_gp::kernels::SquaredExponential;
use dpcotrain_gp::optimize::adam::AdamOptions;
use dpcotrain_gp::svgp::{InMemory, SvgpOptions, fit_svgp};
use dpcotrain_gp::train::{SgprStrategy, TrainOptions, train_sparse};
use dpcotrain_gp::{NoiseModel, NoiseVariance, SparseGp, SparseKind, Svgp};
use nalgebra::{DMatrix, DVector};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde::Serialize;
use serde_json::json;
use std::path::PathBuf;
use std::time::Instant;

#[derive(Debug, Args)]
pub struct SvgpCompareArgs {
    /// Output folder (svgp.json, svgp.md).
    #[arg(long)]
    pub out: PathBuf,
    /// Data sets: ccpp (9,568 rows), boston (506 rows; ISLP), both 90/10 splits, and snelson-1e5
    /// (synthetic 1-D, N = 10⁵ + 10⁴ test).
    #[arg(long, value_delimiter = ',', default_value = "ccpp,boston,snelson-1e5")]
    pub data: Vec<String>,
    /// Seeds (splits and initialisations) 0..N.
    #[arg(long, default_value_t = 3)]
    pub seeds: u64,
    /// Inducing inputs M (the thesis's best SVIGP on CCPP used 200).
    #[arg(long, default_value_t = 200)]
    pub m: usize,
    /// SVGP minibatch on CCPP and Boston (the thesis: 100) and on the large set.
    #[arg(long, default_value_t = 100)]
    pub batch_ccpp: usize,
    #[arg(long, default_value_t = 1000)]
    pub batch_large: usize,
    /// SVGP passes over the training data.
    #[arg(long, default_value_t = 20.0)]
    pub epochs: f64,
    /// Adam's step size and the natural-gradient step.
    #[arg(long, default_value_t = 0.01)]
    pub lr: f64,
    #[arg(long, default_value_t = 0.1)]
    pub natgrad: f64,
    /// Rows of the synthetic large set (tests use fewer).
    #[arg(long, default_value_t = 100_000)]
    pub large_n: usize,
    /// L-BFGS iterations of SGPR.
    #[arg(long, default_value_t = 200)]
    pub max_iters: usize,
}

#[derive(Debug, Clone, Serialize)]
struct Row {
    data: String,
    method: &'static str,
    seed: u64,
    n_train: usize,
    m: usize,
    #[serde(flatten)]
    test: TestMetrics,
    noise: f64,
    seconds: f64,
    /// Optimisation steps (SVGP minibatches) or L-BFGS iterations (SGPR).
    steps: usize,
}

/// Snelson-like 1-D data at scale: x ~ U(0, 6), f(x) = sin(2x) + 0.5 sin(5x + 1) + 0.3x, noise
/// sd 0.3 (the shape of Snelson & Ghahramani's 2006 toy, which has only 200 points).
fn snelson_large(n: usize, seed: u64) -> (DMatrix<f64>, DVector<f64>) {
    let mut rng = ChaCha8Rng::seed_from_u64(0x5e1_5017 ^ seed);
    let x = DMatrix::from_fn(n, 1, |_, _| rng.random_range(0.0..6.0));
    let normal = rand_distr::Normal::new(0.0, 0.3).expect("valid sd");
    let y = DVector::from_fn(n, |i, _| {
        let v: f64 = x[(i, 0)];
        (2.0 * v).sin() + 0.5 * (5.0 * v + 1.0).sin() + 0.3 * v + rng.sample(normal)
    });
    (x, y)
}

fn data_set(name: &str, a: &SvgpCompareArgs, seed: u64) -> anyhow::Result<crate::sparse::TrainTest> {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    match name {
        "ccpp" => {
            let (x, y) = ccpp_xy()?;
            super::split_90_10(&x, &y, seed, "CCPP")
        }
        "boston" => {
            let (x, y) = super::boston()?;
            super::split_90_10(&x, &y, seed, "Boston")
        }
        "snelson-1e5" => {
            let n_test = (a.large_n / 10).max(1);
            let (x, y) = snelson_large(a.large_n + n_test, seed);
            split_standardised(&x, &y, a.large_n, Some(n_test), &mut rng, "snelson-1e5")
        }
        other => anyhow::bail!("--data {other:?}: expected ccpp, boston or snelson-1e5"),
    }
}

pub fn run(a: SvgpCompareArgs) -> anyhow::Result<()> {
    if a.seeds == 0 || a.m == 0 {
        anyhow::bail!("--seeds and --m must be at least 1");
    }
    std::fs::create_dir_all(&a.out)?;
    let mut rows = Vec::new();
    let bar = progress(a.data.len() as u64 * a.seeds * 2, "svgp vs sgpr");
    for name in &a.data {
        for seed in 0..a.seeds {
            let (xtr, ytr, xte, yte) = data_set(name, &a, seed)?;
            let (n, d) = xtr.shape();
            if a.m > n {
                anyhow::bail!("--m {} is more than the {n} training rows of {name}", a.m);
            }
            let z0 = kmeans(&xtr, a.m, 25, seed)?;
            let kernel = || Box::new(SquaredExponential::ard(1.0, vec![1.0; d]));
            // SVGP.
            bar.set_message(format!("{name} seed {seed}: svgp"));
            let batch = if name == "snelson-1e5" { a.batch_large } else { a.batch_ccpp };
            let t = Instant::now();
            let mut model = Svgp::new(kernel(), NoiseVariance::new(0.1), z0.clone())?;
            let mut src = InMemory::new(xtr.clone(), ytr.clone(), batch, seed)?;
            let steps = (a.epochs * n as f64 / batch as f64).ceil() as u64;
            let opts = SvgpOptions {
                steps,
                adam: AdamOptions { learning_rate: a.lr, ..Default::default() },
                natgrad_step: a.natgrad,
                checkpoint_every: 0,
                progress_every: 0,
            };
            fit_svgp(&mut model, &mut src, &opts, None, &mut |_| Ok(()))?;
            let pred = model.predict(&xte, false)?;
            rows.push(Row {
                data: name.clone(),
                method: "svgp",
                seed,
                n_train: n,
                m: a.m,
                test: test_metrics(&pred, model.noise.variance, &yte),
                noise: model.noise.variance,
                seconds: t.elapsed().as_secs_f64(),
                steps: steps as usize,
            });
            bar.inc(1);
            // SGPR, from the same start, Z and hyperparameters jointly.
            bar.set_message(format!("{name} seed {seed}: sgpr"));
            let t = Instant::now();
            let mut gp = SparseGp::new(SparseKind::Vfe, kernel(), NoiseModel::homoscedastic(0.1), xtr, ytr, z0)?;
            let opts = TrainOptions { max_iters: a.max_iters, seed, ..TrainOptions::default() };
            let r = train_sparse(&mut gp, SgprStrategy::Joint, &opts)?;
            let pred = gp.posterior()?.predict(&xte, false)?;
            rows.push(Row {
                data: name.clone(),
                method: "sgpr",
                seed,
                n_train: n,
                m: a.m,
                test: test_metrics(&pred, gp.noise.sigma2().variance, &yte),
                noise: gp.noise.sigma2().variance,
                seconds: t.elapsed().as_secs_f64(),
                steps: r.iterations,
            });
            bar.inc(1);
        }
    }
    bar.finish_and_clear();
    let mut md = String::from(
        "# SVGP against SGPR\n\nTest RMSE and NLPD in standardised units (mean ± sd over seeds), wall time per fit on this machine.\n\n| data | method | N | M | RMSE | NLPD | noise σ² | seconds | thesis (Thomas 2017 §2.5) |\n|---|---|---|---|---|---|---|---|---|\n",
    );
    for name in &a.data {
        for method in ["svgp", "sgpr"] {
            let sel: Vec<&Row> = rows.iter().filter(|r| &r.data == name && r.method == method).collect();
            let ms = |f: &dyn Fn(&Row) -> f64| {
                let v: Vec<f64> = sel.iter().map(|r| f(r)).collect();
                let mean = v.iter().sum::<f64>() / v.len() as f64;
                let sd = (v.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / (v.len().max(2) - 1) as f64).sqrt();
                (mean, sd)
            };
            let (rm, rs) = ms(&|r| r.test.rmse);
            let (nm, ns) = ms(&|r| r.test.nlpd);
            let (sm, _) = ms(&|r| r.noise);
            let (tm, _) = ms(&|r| r.seconds);
            let thesis = match (name.as_str(), method) {
                ("ccpp", "svgp") => "SVIGP 0.269 ± 0.00175 (m = 200, b = 100)",
                ("boston", "svgp") => "SVIGP 0.299; best RNVGP 0.327 ± 0.0056",
                _ => "—",
            };
            md += &format!(
                "| {name} | {method} | {} | {} | {rm:.4} ± {rs:.4} | {nm:.4} ± {ns:.4} | {sm:.4} | {tm:.1} | {thesis} |\n",
                sel.first().map_or(0, |r| r.n_train),
                a.m
            );
        }
    }
    write(&a.out, "svgp.md", &md)?;
    let out = json!({ "settings": format!("{a:?}"), "rows": rows });
    write(&a.out, "svgp.json", &serde_json::to_string_pretty(&out)?)?;
    print!("{md}");
    Ok(())
}
