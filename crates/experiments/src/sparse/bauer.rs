//! Bauer, van der Wilk & Rasmussen (2016), "Understanding probabilistic sparse Gaussian process
//! approximations": FITC and VFE behave differently with the same inducing-point budget.
//!
//! - **M = 8 on 100 points** (their Fig 1): the best FITC and VFE fits found from many random
//!   starts of Z, standing in for the paper's exhaustive search for FITC's optimum. FITC's
//!   best optimum has a far lower NLML than the exact GP, with σ_n pinched towards 0; VFE's
//!   stays above the exact GP's (its bound), with σ_n over-estimated.
//! - **Z = X** (their Fig 4 table): from the exact GP's optimum with Z = X, FITC moves to a lower
//!   NLML than the exact GP (33.8923 → 28.3869 in the paper) by clumping inducing inputs; VFE
//!   stays at the exact value.
//! - **M = 15 random starts** (Fig 3): FITC clumps inducing inputs and shrinks σ_n; VFE
//!   spreads them out.
//! - **4-D toy** (Fig 5): NLML, optimised σ_n, NLPD and SMSE against M for GP, FITC and VFE;
//!   VFE approaches the GP monotonically (over-estimating σ_n at small M), FITC over-estimates
//!   the marginal likelihood with σ_n far too small at intermediate M.

use super::{TestMetrics, TrainTest, clusters, progress, se, se_params, snelson, test_metrics, write};
use crate::summary::{mean_sd, median};
use clap::Args;
use dpcotrain_gp::inducing::random_subset;
use dpcotrain_gp::kernels::Bounds;
use dpcotrain_gp::train::{SgprStrategy, TrainOptions, train, train_sparse};
use dpcotrain_gp::{ExactGp, JitterPolicy, NoiseModel, NoiseVariance, SparseGp, SparseKind};
use dpcotrain_report::{Figure, LineChart, Marker, Series};
use nalgebra::{DMatrix, DVector};
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use serde::Serialize;
use serde_json::json;
use std::path::PathBuf;

#[derive(Debug, Args)]
pub struct BauerArgs {
    /// Output folder (bauer.json, bauer.md, bauer-fig2.svg, bauer-fig3.svg, bauer-fig5.svg;
    /// bauer-fig1.json, bauer-fig1.md, bauer-fig1.svg).
    #[arg(long)]
    pub out: PathBuf,
    /// Random starts of Z per method for the M = 8 search of Fig 1 (0 skips Fig 1).
    #[arg(long, default_value_t = 50)]
    pub fig1_starts: u64,
    /// Run only Fig 1 (writes only the bauer-fig1.* files).
    #[arg(long)]
    pub fig1_only: bool,
    /// Inducing-point counts of the 4-D toy (Fig 5).
    #[arg(long, value_delimiter = ',', default_value = "16,32,64,128,256,512,1024")]
    pub m: Vec<usize>,
    /// Random starts of the M = 15 experiment (Fig 3).
    #[arg(long, default_value_t = 10)]
    pub starts: u64,
    /// L-BFGS iterations per sparse fit.
    #[arg(long, default_value_t = 1000)]
    pub max_iters: usize,
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
}

/// One sparse fit's result.
#[derive(Debug, Clone, Serialize)]
struct SparseFit {
    kind: &'static str,
    m: usize,
    /// Relative jitter on K_uu (× mean diag).
    jitter: f64,
    nlml_initial: f64,
    nlml: f64,
    sigma_n: f64,
    variance: f64,
    lengthscale: f64,
    /// Distinct inducing inputs after merging those closer than 1e-3·ℓ.
    clusters: usize,
    iterations: usize,
    termination: String,
    test: Option<TestMetrics>,
    #[serde(skip)]
    z: DMatrix<f64>,
}

impl SparseFit {
    fn sparse_kind(&self) -> SparseKind {
        if self.kind == "vfe" { SparseKind::Vfe } else { SparseKind::Fitc }
    }
}

fn opts(max_iters: usize, seed: u64) -> TrainOptions {
    TrainOptions { max_iters, seed, ftol: 1e-12, pgtol: 1e-7, ..Default::default() }
}

/// Train the exact GP (SE iso) from s² = 1, ℓ = 1, σ² = 0.1 with restarts; zero prior mean on
/// the raw targets, as in the paper (GPflow's default).
fn exact_fit(x: &DMatrix<f64>, y: &DVector<f64>, seed: u64) -> anyhow::Result<ExactGp> {
    let mut gp = ExactGp::new(se(1.0, vec![1.0], false), NoiseModel::homoscedastic(0.1), x.clone(), y.clone())?;
    train(&mut gp, &TrainOptions { restarts: 5, ..opts(1000, seed) })?;
    Ok(gp)
}

/// Train a sparse model jointly in θ and Z from the given start.
fn sparse_fit(
    kind: SparseKind,
    start: (f64, f64, f64),
    (x, y): (&DMatrix<f64>, &DVector<f64>),
    z: DMatrix<f64>,
    numerics: Numerics,
    max_iters: usize,
    test: Option<(&DMatrix<f64>, &DVector<f64>)>,
) -> anyhow::Result<SparseFit> {
    let (s2, l, noise) = start;
    let mut gp =
        SparseGp::new(kind, se(s2, vec![l], false), NoiseModel::homoscedastic(noise), x.clone(), y.clone(), z)?;
    gp.jitter = numerics.jitter;
    if let NoiseModel::Homoscedastic(s) = &mut gp.noise {
        s.bounds = Bounds::new(numerics.noise_floor.ln(), s.bounds.upper);
    }
    let nlml_initial = -gp.objective_value()?;
    let r = train_sparse(&mut gp, SgprStrategy::Joint, &opts(max_iters, 0))?;
    let (variance, ls) = se_params(gp.kernel.as_ref());
    let sigma2 = gp.noise.sigma2().variance;
    let test = match test {
        Some((xs, ys)) => Some(test_metrics(&gp.posterior()?.predict(xs, false)?, sigma2, ys)),
        None => None,
    };
    Ok(SparseFit {
        kind: kind.name(),
        m: gp.z().nrows(),
        jitter: numerics.jitter.start,
        nlml_initial,
        nlml: -r.objective,
        sigma_n: sigma2.sqrt(),
        variance,
        lengthscale: ls[0],
        clusters: clusters(gp.z(), 1e-3 * ls[0]),
        iterations: r.iterations,
        termination: r.termination.clone(),
        test,
        z: gp.z().clone(),
    })
}

fn exact_start(gp: &ExactGp) -> (f64, f64, f64) {
    let (v, l) = se_params(gp.kernel.as_ref());
    (v, l[0], gp.noise.sigma2().variance)
}

/// Numerical settings of a sparse fit: the jitter policy on K_uu and the lower bound on σ².
#[derive(Debug, Clone, Copy)]
struct Numerics {
    jitter: JitterPolicy,
    noise_floor: f64,
}

/// The core's defaults: jitter 1e-6 × mean diag K_uu, σ² ≥ 1e-6.
const DEFAULT: Numerics = Numerics { jitter: JitterPolicy::ALWAYS, noise_floor: 1e-6 };

/// Fig 1: σ² ≥ 1e-12. The paper's FITC optimum has σ_n = 1.93·10⁻⁴ (σ² ≈ 3.7·10⁻⁸), below the
/// default floor, which FITC otherwise ends on.
const FIG1: Numerics = Numerics { noise_floor: 1e-12, ..DEFAULT };

/// Relative jitter 1e-4 on K_uu: with Z = X (100 inputs, some 1e-3 apart, ℓ ≈ 0.6) the FITC
/// objective at the default 1e-6 is noisy at ~5e-7 (the finite-difference error grows as 1/h)
/// while its gradient is ~3e-2, so L-BFGS's line search stalls at the start; 1e-4 lets it move.
const ZX_JITTER: JitterPolicy = JitterPolicy { start: 1e-4, ..JitterPolicy::ALWAYS };

pub fn run(a: BauerArgs) -> anyhow::Result<()> {
    std::fs::create_dir_all(&a.out)?;
    let (x_all, y_all) = snelson()?;
    // Fig 4: a 100-point subset (the paper does not say which; we take every other row).
    let idx: Vec<usize> = (0..x_all.nrows()).step_by(2).collect();
    let x100 = x_all.select_rows(&idx);
    let y100 = y_all.select_rows(&idx);
    if a.fig1_only && a.fig1_starts == 0 {
        anyhow::bail!("--fig1-only needs --fig1-starts of at least 1");
    }
    let rest = if a.fig1_only { 0 } else { 4 + 1 + 2 * a.starts + 2 + 1 + 2 * a.m.len() as u64 };
    let bar = progress(1 + 2 * a.fig1_starts + rest, "bauer");
    let exact100 = exact_fit(&x100, &y100, a.seed)?;
    let exact100_nlml = -exact100.log_marginal_likelihood()?;
    bar.inc(1);

    // Fig 1: the same subset, M = 8; the best of `fig1_starts` random starts per method stands
    // in for the paper's exhaustive search for FITC's optimum.
    if a.fig1_starts > 0 {
        let mut fig1 = vec![];
        for s in 0..a.fig1_starts {
            let z0 = random_subset(&x100, FIG1_M, a.seed + 2000 + s)?;
            for kind in [SparseKind::Vfe, SparseKind::Fitc] {
                bar.set_message(format!("Fig 1 {} start {s}", kind.name()));
                let f = sparse_fit(kind, exact_start(&exact100), (&x100, &y100), z0.clone(), FIG1, a.max_iters, None)?;
                fig1.push((s, f));
                bar.inc(1);
            }
        }
        write_fig1(&a, &exact100, &fig1)?;
    }
    if a.fig1_only {
        bar.finish_and_clear();
        return Ok(());
    }
    let mut zx = vec![];
    for jitter in [JitterPolicy::ALWAYS, ZX_JITTER] {
        let numerics = Numerics { jitter, ..DEFAULT };
        for kind in [SparseKind::Vfe, SparseKind::Fitc] {
            let iters = a.max_iters.max(5000);
            zx.push(sparse_fit(kind, exact_start(&exact100), (&x100, &y100), x100.clone(), numerics, iters, None)?);
            bar.inc(1);
        }
    }

    // Fig 3: all 200 points, M = 15 random starting positions, hyperparameters from the
    // exact solution; one fit per method per start.
    let exact200 = exact_fit(&x_all, &y_all, a.seed)?;
    let exact200_nlml = -exact200.log_marginal_likelihood()?;
    bar.inc(1);
    let mut m15 = vec![];
    for s in 0..a.starts {
        let z0 = random_subset(&x_all, 15, a.seed + s)?;
        for kind in [SparseKind::Vfe, SparseKind::Fitc] {
            let f = sparse_fit(kind, exact_start(&exact200), (&x_all, &y_all), z0.clone(), DEFAULT, a.max_iters, None)?;
            m15.push((s, f));
            bar.inc(1);
        }
    }
    let fig3 = fig3_svg(&exact200, &m15)?;

    // Fig 2: the change of each objective, and of its terms, when one inducing input is added
    // at x (θ and the other inputs fixed), for the M = 7 fits from the first random start.
    let z7 = random_subset(&x_all, 7, a.seed)?;
    let mut fig2 = vec![];
    for kind in [SparseKind::Vfe, SparseKind::Fitc] {
        let f = sparse_fit(kind, exact_start(&exact200), (&x_all, &y_all), z7.clone(), DEFAULT, a.max_iters, None)?;
        fig2.push(add_one_scan(&f, &x_all, &y_all)?);
        bar.inc(1);
    }
    let fig2_svg = fig2_svg(&fig2);

    // Fig 5: the 4-D toy. 2,048 inputs ~ N(0, I₄), f from a GP with isotropic SE (ℓ = 1.5,
    // s_f = 1), y = f + N(0, 0.01); 1,024 train and 1,024 test.
    let (xtr, ytr, xte, yte) = toy4d(a.seed)?;
    let mut g = ExactGp::new(se(1.0, vec![1.0], false), NoiseModel::homoscedastic(0.1), xtr.clone(), ytr.clone())?;
    train(&mut g, &TrainOptions { restarts: 2, ..opts(1000, a.seed) })?;
    let gs2 = g.noise.sigma2().variance;
    let exact4 = json!({
        "nlml": -g.log_marginal_likelihood()?,
        "sigma_n": gs2.sqrt(),
        "test": test_metrics(&g.posterior()?.predict(&xte, false)?, gs2, &yte),
    });
    bar.inc(1);
    let mut toy = vec![];
    for &m in &a.m {
        let m = m.min(xtr.nrows());
        let z0 = random_subset(&xtr, m, a.seed + 1000 + m as u64)?;
        for kind in [SparseKind::Vfe, SparseKind::Fitc] {
            bar.set_message(format!("4-D toy {} M = {m}", kind.name()));
            let f =
                sparse_fit(kind, (1.0, 1.0, 0.1), (&xtr, &ytr), z0.clone(), DEFAULT, a.max_iters, Some((&xte, &yte)))?;
            toy.push(f);
            bar.inc(1);
        }
    }
    bar.finish_and_clear();
    let fig5 = fig5_svg(&exact4, &toy);

    let out = json!({
        "snelson_z_equals_x": { "exact_nlml": exact100_nlml, "exact_sigma_n": exact_start(&exact100).2.sqrt(), "fits": zx },
        "snelson_m15": { "exact_nlml": exact200_nlml, "exact_sigma_n": exact_start(&exact200).2.sqrt(),
            "fits": starts_json(&m15) },
        "toy4d": { "exact": exact4, "fits": toy },
        "snelson_m7_add_one": fig2,
        "settings": { "max_iters": a.max_iters, "starts": a.starts, "seed": a.seed },
    });
    write(&a.out, "bauer.json", &serde_json::to_string_pretty(&out)?)?;
    let mut md = markdown(exact100_nlml, &zx, exact200_nlml, &m15, &exact4, &toy);
    md += &fig2_markdown(&fig2);
    write(&a.out, "bauer.md", &md)?;
    write(&a.out, "bauer-fig3.svg", &fig3)?;
    write(&a.out, "bauer-fig5.svg", &fig5)?;
    write(&a.out, "bauer-fig2.svg", &fig2_svg)?;
    Ok(())
}

/// Inducing inputs of Bauer et al.'s Fig 1.
const FIG1_M: usize = 8;

/// Fits from random starts with their start index and final Z.
fn starts_json(fits: &[(u64, SparseFit)]) -> Vec<serde_json::Value> {
    fits.iter().map(|(s, f)| json!({"start": s, "fit": f, "z": f.z.as_slice()})).collect()
}

/// The lowest-NLML fit of a method among random starts, and the median NLML over the starts.
fn best_of(fits: &[(u64, SparseFit)], kind: SparseKind) -> Option<(&SparseFit, f64)> {
    let fs: Vec<&SparseFit> = fits.iter().map(|(_, f)| f).filter(|f| f.kind == kind.name()).collect();
    let best = fs.iter().copied().filter(|f| f.nlml.is_finite()).min_by(|a, b| a.nlml.total_cmp(&b.nlml))?;
    Some((best, median(&fs.iter().map(|f| f.nlml).collect::<Vec<_>>())))
}

/// σ_n to four decimals, or in e-notation when FITC has pinched it below 0.01.
fn sigma_text(sigma_n: f64) -> String {
    if sigma_n < 0.01 { format!("{sigma_n:.1e}") } else { format!("{sigma_n:.4}") }
}

/// Bauer et al. (2016) Fig 1: JSON, a Markdown table beside the paper's numbers, and the two
/// best fits drawn like the paper's panels.
fn write_fig1(a: &BauerArgs, exact: &ExactGp, fits: &[(u64, SparseFit)]) -> anyhow::Result<()> {
    let exact_nlml = -exact.log_marginal_likelihood()?;
    let exact_sigma_n = exact_start(exact).2.sqrt();
    let out = json!({
        "exact_nlml": exact_nlml,
        "exact_sigma_n": exact_sigma_n,
        "m": FIG1_M,
        "fits": starts_json(fits),
        "settings": { "max_iters": a.max_iters, "fig1_starts": a.fig1_starts, "seed": a.seed },
    });
    write(&a.out, "bauer-fig1.json", &serde_json::to_string_pretty(&out)?)?;
    let mut s = String::from("# Bauer, van der Wilk & Rasmussen (2016) Fig 1, reproduced\n\n");
    s += &format!(
        "100-point Snelson subset (every other row), M = {FIG1_M}; per method the best of {} random \
         starts of Z (a random subset of the inputs), θ and σ_n from the exact GP's optimum, Z, θ \
         and σ_n trained jointly ({} L-BFGS iterations at most).\n\n",
        a.fig1_starts, a.max_iters
    );
    s += "| method | best NLML | median NLML | σ_n (best) | distinct Z (best) | starts within 0.01 of best | starts below the exact NLML / clumped / σ_n < 0.01 | paper: NLML, σ_n |\n|---|---|---|---|---|---|---|---|\n";
    s += &format!("| full GP | {exact_nlml:.4} | | {exact_sigma_n:.4} | | | | 34.15, 0.274 (Fig 4: 33.8923) |\n");
    let mut best = vec![];
    for (kind, paper) in
        [(SparseKind::Fitc, "23.16, 1.93·10⁻⁴ (panel label)"), (SparseKind::Vfe, "38.86, 0.286 (panel label)")]
    {
        let Some((f, med)) = best_of(fits, kind) else { continue };
        let count = |p: &dyn Fn(&SparseFit) -> bool| fits.iter().filter(|(_, g)| g.kind == f.kind && p(g)).count();
        let near = count(&|g| g.nlml <= f.nlml + 0.01);
        let below = count(&|g| g.nlml < exact_nlml);
        let clumped = count(&|g| g.clusters < g.m);
        let pinched = count(&|g| g.sigma_n < 0.01);
        let sigma = sigma_text(f.sigma_n);
        s += &format!(
            "| {} | {:.4} | {med:.4} | {sigma} | {} of {} | {near} of {} | {below} / {clumped} / {pinched} | {paper} |\n",
            kind.name().to_uppercase(),
            f.nlml,
            f.clusters,
            f.m,
            a.fig1_starts
        );
        best.push(f);
    }
    write(&a.out, "bauer-fig1.md", &s)?;
    let title = format!(
        "Snelson subset (100 points), M = {FIG1_M}, best of {} starts (Bauer et al. 2016, Fig 1)",
        a.fig1_starts
    );
    write(&a.out, "bauer-fig1.svg", &fits_svg(&title, exact, &best)?)?;
    Ok(())
}

/// The 4-D toy of Bauer et al. Fig 5.
fn toy4d(seed: u64) -> anyhow::Result<TrainTest> {
    use rand::Rng;
    use rand_distr::StandardNormal;
    let mut rng = ChaCha8Rng::seed_from_u64(seed ^ 0xB4_0E4D);
    let n = 2048;
    let x = DMatrix::from_fn(n, 4, |_, _| rng.sample::<f64, _>(StandardNormal));
    let k = dpcotrain_gp::kernels::SquaredExponential::isotropic(1.0, 1.5);
    let f = dpcotrain_gp::sampling::prior(&k, &x, 1, &mut rng)?.paths.column(0).clone_owned();
    let y = DVector::from_fn(n, |i, _| f[i] + 0.1 * rng.sample::<f64, _>(StandardNormal));
    let tr: Vec<usize> = (0..n / 2).collect();
    let te: Vec<usize> = (n / 2..n).collect();
    Ok((x.select_rows(&tr), y.select_rows(&tr), x.select_rows(&te), y.select_rows(&te)))
}

fn markdown(
    exact100: f64,
    zx: &[SparseFit],
    exact200: f64,
    m15: &[(u64, SparseFit)],
    exact4: &serde_json::Value,
    toy: &[SparseFit],
) -> String {
    let mut s = String::from("# Bauer, van der Wilk & Rasmussen (2016), reproduced\n\n");
    s += "## Z = X on a 100-point Snelson subset (paper Fig 4)\n\n";
    s += "| method | K_uu jitter (× mean diag) | NLML initial | NLML optimised | σ_n | distinct Z | iterations | paper: initial → optimised |\n|---|---|---|---|---|---|---|---|\n";
    s += &format!("| full GP | – | – | {exact100:.4} | | | | – → 33.8923 |\n");
    for f in zx {
        let paper = if f.kind == "vfe" { "33.8923 → 33.8923" } else { "33.8923 → 28.3869" };
        s += &format!(
            "| {} | {:.0e} | {:.4} | {:.4} | {:.4} | {} of {} | {} ({}) | {paper} |\n",
            f.kind.to_uppercase(),
            f.jitter,
            f.nlml_initial,
            f.nlml,
            f.sigma_n,
            f.clusters,
            f.m,
            f.iterations,
            f.termination
        );
    }
    s += "\n## M = 15 from random starts on all 200 points (paper Fig 3)\n\n";
    s += &format!("Full GP NLML {exact200:.4}.\n\n");
    s += "| method | NLML mean ± sd | best NLML | σ_n mean | distinct Z mean (of 15) |\n|---|---|---|---|---|\n";
    for kind in ["vfe", "fitc"] {
        let fs: Vec<&SparseFit> = m15.iter().map(|(_, f)| f).filter(|f| f.kind == kind).collect();
        let (nm, nsd) = mean_sd(&fs.iter().map(|f| f.nlml).collect::<Vec<_>>());
        let best = fs.iter().map(|f| f.nlml).fold(f64::INFINITY, f64::min);
        let (sm, _) = mean_sd(&fs.iter().map(|f| f.sigma_n).collect::<Vec<_>>());
        let (cm, _) = mean_sd(&fs.iter().map(|f| f.clusters as f64).collect::<Vec<_>>());
        s += &format!("| {} | {nm:.3} ± {nsd:.3} | {best:.3} | {sm:.4} | {cm:.1} |\n", kind.to_uppercase());
    }
    s += "\n## 4-D toy against M (paper Fig 5)\n\n";
    let t = &exact4["test"];
    s += &format!(
        "Full GP: NLML {:.2}, σ_n {:.4}, NLPD {:.4}, SMSE {:.4}.\n\n",
        exact4["nlml"].as_f64().unwrap_or(f64::NAN),
        exact4["sigma_n"].as_f64().unwrap_or(f64::NAN),
        t["nlpd"].as_f64().unwrap_or(f64::NAN),
        t["smse"].as_f64().unwrap_or(f64::NAN)
    );
    s += "| M | VFE NLML | FITC NLML | VFE σ_n | FITC σ_n | VFE NLPD | FITC NLPD | VFE SMSE | FITC SMSE |\n|---|---|---|---|---|---|---|---|---|\n";
    let ms: Vec<usize> = toy.iter().filter(|f| f.kind == "vfe").map(|f| f.m).collect();
    for m in ms {
        let get = |k: &str| toy.iter().find(|f| f.kind == k && f.m == m);
        if let (Some(v), Some(f)) = (get("vfe"), get("fitc")) {
            let (vt, ft) = (v.test.unwrap(), f.test.unwrap());
            s += &format!(
                "| {m} | {:.2} | {:.2} | {:.4} | {:.4} | {:.4} | {:.4} | {:.4} | {:.4} |\n",
                v.nlml, f.nlml, v.sigma_n, f.sigma_n, vt.nlpd, ft.nlpd, vt.smse, ft.smse
            );
        }
    }
    s
}

/// Fig 3: the two methods' predictives (M = 15, first start) with their inducing inputs.
fn fig3_svg(exact: &ExactGp, m15: &[(u64, SparseFit)]) -> anyhow::Result<String> {
    let first: Vec<&SparseFit> = [SparseKind::Vfe, SparseKind::Fitc]
        .iter()
        .filter_map(|k| m15.iter().find(|(s, f)| *s == 0 && f.kind == k.name()).map(|(_, f)| f))
        .collect();
    fits_svg("Snelson data, M = 15 from the same random start (Bauer et al. 2016, Fig 3)", exact, &first)
}

/// One panel per fit: its predictive (mean ± 2 sd of y) and inducing inputs over the data and
/// the exact GP's mean, as in Bauer et al.'s Figs 1 and 3.
fn fits_svg(title: &str, exact: &ExactGp, fits: &[&SparseFit]) -> anyhow::Result<String> {
    let (x, y) = (exact.x(), exact.y());
    let grid = DMatrix::from_fn(200, 1, |i, _| -1.0 + 8.0 * i as f64 / 199.0);
    let gx: Vec<f64> = grid.iter().copied().collect();
    let ex = exact.posterior()?.predict(&grid, false)?;
    let data: Vec<(f64, f64)> = x.iter().copied().zip(y.iter().copied()).collect();
    let mut fig = Figure::new(title);
    for f in fits {
        let kind = f.sparse_kind();
        let mut gp = SparseGp::new(
            kind,
            se(f.variance, vec![f.lengthscale], false),
            NoiseModel::Homoscedastic(NoiseVariance::fixed(f.sigma_n.powi(2))),
            x.clone(),
            y.clone(),
            f.z.clone(),
        )?;
        gp.jitter = JitterPolicy::ALWAYS;
        let p = gp.posterior()?.predict(&grid, false)?;
        let s2 = f.sigma_n.powi(2);
        let band = |sign: f64| -> Vec<(f64, f64)> {
            gx.iter().enumerate().map(|(i, &g)| (g, p.mean[i] + sign * 2.0 * (p.var[i] + s2).sqrt())).collect()
        };
        let bottom = y.min() - 0.5;
        let chart = LineChart::new(
            format!(
                "{} (NLML {:.2}, σ_n {}, {} distinct Z)",
                kind.name().to_uppercase(),
                f.nlml,
                sigma_text(f.sigma_n),
                f.clusters
            ),
            "x",
            "y",
        )
        .with_series(Series::new("data", data.clone(), 6).scatter(Marker::Circle))
        .with_series(Series::new("full GP mean", gx.iter().copied().zip(ex.mean.iter().copied()).collect(), 2).dashed())
        .with_series(Series::new("mean", gx.iter().copied().zip(p.mean.iter().copied()).collect(), 0))
        .with_series(Series::new("mean + 2 sd (y)", band(2.0), 5))
        .with_series(Series::new("mean − 2 sd (y)", band(-2.0), 5))
        .with_series(
            Series::new("inducing inputs", f.z.iter().map(|&z| (z, bottom)).collect(), 3).scatter(Marker::Cross),
        );
        fig = fig.with_panel(chart);
    }
    Ok(fig.to_svg())
}

/// Fig 5 style: NLML, σ_n, NLPD and SMSE against log₂ M.
fn fig5_svg(exact: &serde_json::Value, toy: &[SparseFit]) -> String {
    let mut fig = Figure::new("4-D toy: FITC and VFE against M (Bauer et al. 2016, Fig 5)");
    type Metric = fn(&SparseFit) -> f64;
    let panels: [(&str, Metric, f64); 4] = [
        ("NLML", |f| f.nlml, exact["nlml"].as_f64().unwrap_or(f64::NAN)),
        ("σ_n", |f| f.sigma_n, exact["sigma_n"].as_f64().unwrap_or(f64::NAN)),
        ("test NLPD", |f| f.test.map_or(f64::NAN, |t| t.nlpd), exact["test"]["nlpd"].as_f64().unwrap_or(f64::NAN)),
        ("test SMSE", |f| f.test.map_or(f64::NAN, |t| t.smse), exact["test"]["smse"].as_f64().unwrap_or(f64::NAN)),
    ];
    for (name, metric, gp) in panels {
        let mut c = LineChart::new(name, "log₂ M", name).with_ref_line(gp, format!("full GP {gp:.3}"));
        for (i, kind) in ["vfe", "fitc"].iter().enumerate() {
            let pts = toy.iter().filter(|f| f.kind == *kind).map(|f| ((f.m as f64).log2(), metric(f))).collect();
            c = c.with_series(Series::new(kind.to_uppercase(), pts, i).markers(Marker::Circle));
        }
        c.width = 420.0;
        c.height = 320.0;
        fig = fig.with_panel(c);
    }
    fig.to_svg()
}

/// Bauer et al. Fig 2: for a fitted M = 7 model, the change of the objective and of its terms
/// (`SparseGp::objective_terms`) when one inducing input is added at each x of a grid.
#[derive(Debug, Clone, Serialize)]
struct AddOne {
    kind: &'static str,
    nlml: f64,
    x: Vec<f64>,
    objective: Vec<f64>,
    data_fit: Vec<f64>,
    complexity: Vec<f64>,
    trace: Vec<f64>,
    z: Vec<f64>,
}

fn add_one_scan(f: &SparseFit, x: &DMatrix<f64>, y: &DVector<f64>) -> anyhow::Result<AddOne> {
    let kind = f.sparse_kind();
    let model = |z: DMatrix<f64>| -> anyhow::Result<SparseGp> {
        let noise = NoiseModel::Homoscedastic(NoiseVariance::fixed(f.sigma_n.powi(2)));
        let mut gp = SparseGp::new(kind, se(f.variance, vec![f.lengthscale], false), noise, x.clone(), y.clone(), z)?;
        gp.jitter = JitterPolicy::ALWAYS;
        Ok(gp)
    };
    let base = model(f.z.clone())?.objective_terms()?;
    let grid: Vec<f64> = (0..161).map(|i| -1.0 + 8.0 * i as f64 / 160.0).collect();
    let mut out = AddOne {
        kind: f.kind,
        nlml: f.nlml,
        x: grid.clone(),
        objective: vec![],
        data_fit: vec![],
        complexity: vec![],
        trace: vec![],
        z: f.z.iter().copied().collect(),
    };
    for g in grid {
        let mut z = f.z.clone().insert_row(f.z.nrows(), 0.0);
        z[(f.z.nrows(), 0)] = g;
        let t = model(z)?.objective_terms()?;
        let total = |t: &dpcotrain_gp::ObjectiveTerms| t.constant + t.complexity + t.data_fit + t.trace;
        out.objective.push(total(&t) - total(&base));
        out.data_fit.push(t.data_fit - base.data_fit);
        out.complexity.push(t.complexity - base.complexity);
        out.trace.push(t.trace - base.trace);
    }
    Ok(out)
}

fn fig2_markdown(scans: &[AddOne]) -> String {
    let mut s = String::from("\n## Adding one inducing input anywhere (paper Fig 2; all 200 points, M = 7)\n\n");
    s += "Change of the objective (higher is better) when an 8th inducing input is added at x ∈ [−1, 7], θ fixed.\n\n";
    s += "| method | NLML (M = 7) | min Δ objective | at x | max Δ objective | Δ < 0 at |\n|---|---|---|---|---|---|\n";
    for a in scans {
        let (imin, min) = a
            .objective
            .iter()
            .copied()
            .enumerate()
            .fold((0, f64::INFINITY), |b, (i, v)| if v < b.1 { (i, v) } else { b });
        let max = a.objective.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        let neg = a.objective.iter().filter(|v| **v < -1e-9).count();
        s += &format!(
            "| {} | {:.3} | {min:.4} | {:.2} | {max:.4} | {neg} of {} grid points |\n",
            a.kind.to_uppercase(),
            a.nlml,
            a.x[imin],
            a.x.len()
        );
    }
    s
}

fn fig2_svg(scans: &[AddOne]) -> String {
    let mut fig = Figure::new(
        "Change of the objective and its terms when one inducing input is added (Bauer et al. 2016, Fig 2)",
    );
    for a in scans {
        let pts = |v: &[f64]| a.x.iter().copied().zip(v.iter().copied()).collect::<Vec<_>>();
        let mut c = LineChart::new(
            format!("{} (M = 7, NLML {:.2})", a.kind.to_uppercase(), a.nlml),
            "x of the added input",
            "Δ",
        )
        .with_series(Series::new("Δ objective", pts(&a.objective), 0))
        .with_series(Series::new("Δ data fit", pts(&a.data_fit), 1).dashed())
        .with_series(Series::new("Δ complexity", pts(&a.complexity), 2).dashed())
        .with_series(Series::new("Δ trace", pts(&a.trace), 3).dashed())
        .with_series(Series::new("inducing inputs", a.z.iter().map(|&z| (z, 0.0)).collect(), 6).scatter(Marker::Cross))
        .with_ref_line(0.0, "0");
        c.width = 600.0;
        fig = fig.with_panel(c);
    }
    fig.to_svg()
}
