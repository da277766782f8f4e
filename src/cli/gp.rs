//! `dpcotrain gp fit`: the numerical core from the command line. Scripts depend on these flags
//! and on the JSON keys; keep them stable.

use clap::{Args, ValueEnum};
use dpcotrain_cotrain::Table;
use dpcotrain_gp::inducing::{greedy_variance, kmeans, random_subset};
use dpcotrain_gp::kernels::{Kernel, KernelInit, KernelSpec};
use dpcotrain_gp::standardize::Standardizer;
use dpcotrain_gp::train::{
    ProgressHook, SgprStrategy, TrainOptions, TrainProgress, TrainReport, train, train_multiscale, train_sparse,
};
use dpcotrain_gp::{
    ExactGp, InducingFeatures, KuuJitter, NoiseModel, NoiseVariance, ObjectiveTerms, Prediction, SparseGp, SparseKind,
};
use nalgebra::{DMatrix, DVector};
use serde::Serialize;
use std::collections::BTreeMap;
use std::path::PathBuf;

/// Above this many rows `gp fit` warns that the exact model is slow and memory-hungry.
const EXACT_WARN_ROWS: usize = 3000;

/// SciPy's L-BFGS-B defaults, which GPflow's `Scipy` optimiser keeps: `maxiter` 15,000 and
/// `ftol` = factr·ε = 10⁷ × 2.22·10⁻¹⁶. `gp fit` keeps the re-fits' 200 and 10⁻¹⁰ by default (a
/// node's private model is exactly `gp fit --model exact …`); these are what the help names for
/// a fit on GPflow's terms (docs/results.md "gp fit against GPflow").
const SCIPY_MAX_ITERS: usize = 15_000;
const SCIPY_FTOL: f64 = 2.220446049250313e-9;

#[derive(Debug, Clone, Copy, ValueEnum, PartialEq)]
pub enum ModelArg {
    Exact,
    Vfe,
    Fitc,
    Dtc,
}

#[derive(Debug, Clone, Copy, ValueEnum, PartialEq)]
pub enum StrategyArg {
    /// Hyperparameters only, Z fixed (same as --fix-inducing).
    Fixed,
    /// Hyperparameters and Z jointly.
    Joint,
    /// Greedy re-selection of Z every 25 iterations (Burt et al.).
    Reinit,
    /// As reinit, switching to joint optimisation when re-selection stops helping.
    ReinitRetrain,
}

#[derive(Debug, Args)]
pub struct FitArgs {
    /// Training CSV with a header row.
    #[arg(long, value_name = "FILE.csv")]
    pub train: PathBuf,
    /// Target column (name or 0-based index); default: the last column.
    #[arg(long, value_name = "COL")]
    pub target: Option<String>,
    #[arg(long, value_enum, default_value = "exact")]
    pub model: ModelArg,
    /// Kernel expression: se, se-ard, matern12 (exponential), matern32, matern52, linear,
    /// constant, arccos0, arccos1, polyP (P ≥ 1), combined with '+' and '*' and parentheses,
    /// e.g. "arccos0+poly3". Sums split the initial variance equally among their terms.
    #[arg(long, default_value = "se-ard", value_name = "EXPR")]
    pub kernel: KernelSpec,
    /// Inducing inputs for sparse models: greedy:M, kmeans:M, random:M or file:Z.csv; or
    /// multiscale:M, Walder et al.'s (2008) features with their own widths (SE kernels): M
    /// greedy centres trained as ordinary points with --strategy, then centres, widths and
    /// hyperparameters jointly.
    #[arg(long, value_name = "SPEC")]
    pub inducing: Option<String>,
    /// Initial (or, with --fixed, the) kernel variance s². Default: the variance of y.
    #[arg(long, value_name = "V", allow_negative_numbers = true)]
    pub variance: Option<f64>,
    /// Length-scale(s): one value, or one per input column for ARD kernels. Default: the
    /// standard deviation of each input column.
    #[arg(long, value_name = "L[,L2,...]", value_delimiter = ',', allow_negative_numbers = true)]
    pub lengthscale: Option<Vec<f64>>,
    /// Initial (or fixed) noise variance σ². Default: 10% of the variance of y.
    #[arg(long, value_name = "S2", allow_negative_numbers = true)]
    pub noise: Option<f64>,
    /// Evaluate at the given hyperparameters; no training.
    #[arg(long)]
    pub fixed: bool,
    /// Train hyperparameters only; keep the inducing inputs where --inducing put them.
    #[arg(long)]
    pub fix_inducing: bool,
    /// Training strategy for sparse models (default reinit-retrain; --fix-inducing means fixed).
    #[arg(long, value_enum)]
    pub strategy: Option<StrategyArg>,
    /// Jitter added to K_uu (sparse models): `relative` (the default, 1e-6·mean of K_uu's
    /// diagonal: scale-free), `relative:R`, or `absolute:E`, a fixed E whatever the kernel's
    /// variance; `absolute:1e-6` is GPflow's SGPR objective. Either way a failed Cholesky
    /// retries with ×10 the jitter (up to 5 tries), and the jitter used is reported.
    #[arg(long, value_name = "relative|relative:R|absolute:E", value_parser = parse_kuu_jitter)]
    pub kuu_jitter: Option<KuuJitter>,
    /// Standardise inputs and target before fitting (hyperparameters are then reported in
    /// standardised units; predictions are mapped back to data units).
    #[arg(long)]
    pub standardize: bool,
    /// The GP's constant prior mean: `train` (default: the training labels' mean) or a number,
    /// e.g. `0` for files already in a public standardisation of y, as a node's are: its
    /// private fit reverts to the public mean far from its labelled rows, where the training
    /// mean of a masked (regional) sample can be far off.
    #[arg(long, value_name = "train|VALUE", default_value = "train", value_parser = parse_prior_mean)]
    pub prior_mean: PriorMean,
    /// Random restarts of the optimiser in addition to the warm start.
    #[arg(long, default_value_t = 0)]
    pub restarts: usize,
    /// L-BFGS iterations per run (the reinit strategies: of the re-selection phase, and
    /// max(100, N/2) for their final phase). The default is co-training's re-fits'; SciPy's
    /// L-BFGS-B (GPflow's `Scipy`) allows 15000.
    #[arg(long, default_value_t = TrainOptions::default().max_iters)]
    pub max_iters: usize,
    /// Stop when an accepted step lowers the objective by at most FTOL·max(|f|, 1) (SciPy's
    /// factr·ε test). The default is co-training's re-fits'; SciPy's L-BFGS-B (GPflow's
    /// `Scipy`) uses 2.22e-9. Non-negative and finite.
    #[arg(long, default_value_t = TrainOptions::default().ftol, value_parser = parse_ftol)]
    pub ftol: f64,
    /// CSV of test inputs (every column is an input).
    #[arg(long, value_name = "TEST.csv")]
    pub predict: Option<PathBuf>,
    /// Write the predictions (columns mean, var) to this CSV file.
    #[arg(long, value_name = "OUT.csv", requires = "predict")]
    pub output: Option<PathBuf>,
    /// Also return the full latent predictive covariance.
    #[arg(long)]
    pub full_cov: bool,
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// Print one JSON object.
    #[arg(long)]
    pub json: bool,
}

fn positive(name: &str, v: f64) -> anyhow::Result<f64> {
    if v.is_finite() && v > 0.0 { Ok(v) } else { anyhow::bail!("--{name} must be a positive finite number, got {v}") }
}

enum InducingSpec {
    Greedy(usize),
    Multiscale(usize),
    Kmeans(usize),
    Random(usize),
    File(PathBuf),
}

fn parse_inducing(s: &str) -> anyhow::Result<InducingSpec> {
    let (kind, arg) = s.split_once(':').ok_or_else(|| {
        anyhow::anyhow!("--inducing {s:?}: expected greedy:M, kmeans:M, random:M, multiscale:M or file:Z.csv")
    })?;
    let m = || -> anyhow::Result<usize> {
        let m: usize = arg
            .trim()
            .parse()
            .map_err(|_| anyhow::anyhow!("--inducing {s:?}: {arg:?} is not a whole number of inducing points"))?;
        if m == 0 {
            anyhow::bail!("--inducing {s:?}: the number of inducing points must be at least 1");
        }
        Ok(m)
    };
    Ok(match kind {
        "greedy" => InducingSpec::Greedy(m()?),
        "multiscale" => InducingSpec::Multiscale(m()?),
        "kmeans" => InducingSpec::Kmeans(m()?),
        "random" => InducingSpec::Random(m()?),
        "file" => InducingSpec::File(PathBuf::from(arg)),
        _ => anyhow::bail!("--inducing {s:?}: unknown method {kind:?} (greedy, kmeans, random, multiscale or file)"),
    })
}

fn column_sd(x: &DMatrix<f64>) -> Vec<f64> {
    let n = x.nrows() as f64;
    x.column_iter()
        .map(|c| {
            let m = c.mean();
            let v = c.iter().map(|a| (a - m).powi(2)).sum::<f64>() / (n - 1.0).max(1.0);
            if v > 0.0 { v.sqrt() } else { 1.0 }
        })
        .collect()
}

fn build_kernel(args: &FitArgs, x: &DMatrix<f64>, y: &DVector<f64>) -> anyhow::Result<Box<dyn Kernel>> {
    let d = x.ncols();
    let yv = {
        let m = y.mean();
        y.iter().map(|a| (a - m).powi(2)).sum::<f64>() / (y.len() as f64 - 1.0).max(1.0)
    };
    let variance = positive("variance", args.variance.unwrap_or(if yv > 0.0 { yv } else { 1.0 }))?;
    let lengthscales: Vec<f64> = match &args.lengthscale {
        Some(l) => {
            for v in l {
                positive("lengthscale", *v)?;
            }
            let iso = args.kernel.has_isotropic();
            match l.len() {
                1 => vec![l[0]; d],
                k if k == d && !iso => l.clone(),
                k => anyhow::bail!(
                    "--lengthscale has {k} values; the kernel {} on {d} input columns takes {}",
                    args.kernel,
                    if iso { "1 (the isotropic se has one length-scale)".to_string() } else { format!("1 or {d}") }
                ),
            }
        }
        None => column_sd(x),
    };
    Ok(args.kernel.build(&KernelInit { variance, lengthscales })?)
}

/// The fitted hyperparameters: the noise, every kernel parameter by name (natural scale), and
/// for a single stationary kernel its `variance` and `lengthscales` (the keys scripts read).
/// A model's hyperparameters in the units the kernel uses (the kernel's own parameters by name,
/// and for a stationary kernel its variance and length-scales again, as GPflow reports them).
#[derive(Debug, Clone, Serialize)]
pub struct Hyperparameters {
    pub noise: f64,
    pub kernel: BTreeMap<String, f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub variance: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub lengthscales: Option<Vec<f64>>,
}

impl Hyperparameters {
    fn of(kernel: &dyn Kernel, noise: f64) -> Self {
        let names = kernel.param_names();
        let values: Vec<f64> = kernel.params().iter().map(|v| v.exp()).collect();
        let stationary = names.first().is_some_and(|n| n == "variance")
            && names.len() > 1
            && names[1..].iter().all(|n| n.starts_with("lengthscale"));
        Hyperparameters {
            noise,
            kernel: names.iter().cloned().zip(values.iter().copied()).collect(),
            variance: stationary.then(|| values[0]),
            lengthscales: stationary.then(|| values[1..].to_vec()),
        }
    }
}

/// The training's account, with why it stopped in words.
#[derive(Debug, Clone, Serialize)]
pub struct Training {
    #[serde(flatten)]
    pub report: TrainReport,
    pub stop: &'static str,
}

/// What `gp fit` found, in data units: the model, its hyperparameters, the training's account,
/// the inducing inputs and any predictions. `--json` prints it as JSON; otherwise its
/// `Display` is the summary a reader sees.
#[derive(Debug, Clone, Serialize)]
pub struct FitReport {
    pub model: &'static str,
    pub kernel: String,
    pub objective: f64,
    pub hyperparameters: Hyperparameters,
    pub jitter: f64,
    pub inducing: Option<Vec<Vec<f64>>>,
    pub n_train: usize,
    pub inputs: Vec<String>,
    pub target: String,
    pub standardized: bool,
    pub y_mean: f64,
    pub y_scale: f64,
    /// Only when `--kuu-jitter` was given.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub kuu_jitter: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub training: Option<Training>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub terms: Option<ObjectiveTerms>,
    /// `points` or `multiscale` for a sparse model; none for the exact one.
    pub features: Option<&'static str>,
    /// Multiscale features' widths (data units) and the ordinary phase's training.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub widths: Option<Vec<Vec<f64>>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub training_ordinary: Option<TrainReport>,
    /// Predictions at `--predict`'s rows (data units).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mean: Option<Vec<f64>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub var: Option<Vec<f64>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cov: Option<Vec<Vec<f64>>>,
}

fn rows_json(m: &DMatrix<f64>) -> Vec<Vec<f64>> {
    (0..m.nrows()).map(|i| m.row(i).iter().copied().collect()).collect()
}

/// What a fit produced, in model units.
struct Fitted {
    objective: f64,
    report: Option<TrainReport>,
    jitter: f64,
    kernel: Box<dyn Kernel>,
    noise: f64,
    z: Option<DMatrix<f64>>,
    pred: Option<Prediction>,
    /// The sparse objective's terms (Bauer et al. 2016's diagnostics).
    terms: Option<ObjectiveTerms>,
    /// Multiscale features: their widths L (M×D, model units) and the ordinary phase's report.
    multiscale: Option<(DMatrix<f64>, Option<TrainReport>)>,
}

/// `--prior-mean`: the training labels' mean, or a given constant.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum PriorMean {
    Train,
    Value(f64),
}

fn parse_ftol(s: &str) -> Result<f64, String> {
    match s.trim().parse::<f64>() {
        Ok(v) if v.is_finite() && v >= 0.0 => Ok(v),
        _ => Err(format!("{s:?} is not a non-negative finite number (SciPy's L-BFGS-B uses {SCIPY_FTOL:e})")),
    }
}

fn parse_kuu_jitter(s: &str) -> Result<KuuJitter, String> {
    s.parse()
}

fn parse_prior_mean(s: &str) -> Result<PriorMean, String> {
    if s.eq_ignore_ascii_case("train") {
        return Ok(PriorMean::Train);
    }
    match s.parse::<f64>() {
        Ok(v) if v.is_finite() => Ok(PriorMean::Value(v)),
        _ => Err(format!("{s:?} is neither `train` nor a finite number")),
    }
}

/// `gp fit`: fit, then print the report (JSON with `--json`).
pub fn run(args: FitArgs) -> anyhow::Result<()> {
    let out = super::Output::json_if(args.json);
    super::print_report(&fit(args)?, out)
}

/// `gp fit` as a library function: the fitted model's [`FitReport`] (the `--output` CSV of
/// predictions is written here too).
pub fn fit(args: FitArgs) -> anyhow::Result<FitReport> {
    let table = Table::read(&args.train)?;
    table.require_rows(2, "training data")?;
    let (x_raw, y_raw, input_names, target_name) = table.split_target(args.target.as_deref())?;
    let n = x_raw.nrows();
    let mut std = if args.standardize {
        Standardizer::fit(&x_raw, &y_raw)?
    } else {
        // Centre y only: the GP has a zero prior mean.
        Standardizer { y_mean: y_raw.mean(), ..Standardizer::identity(x_raw.ncols()) }
    };
    if let PriorMean::Value(m) = args.prior_mean {
        std.y_mean = m;
    }
    let x = std.transform_x(&x_raw)?;
    let y = std.transform_y(&y_raw);
    let kernel = build_kernel(&args, &x, &y)?;
    let yv = y.iter().map(|a| a * a).sum::<f64>() / (n as f64 - 1.0);
    let noise_v = positive("noise", args.noise.unwrap_or(if yv > 0.0 { 0.1 * yv } else { 0.1 }))?;
    let noise =
        NoiseModel::Homoscedastic(if args.fixed { NoiseVariance::fixed(noise_v) } else { NoiseVariance::new(noise_v) });
    let test = match &args.predict {
        Some(p) => {
            let t = Table::read(p)?;
            Some(std.transform_x(&t.select_columns(&input_names, "--predict file", "the training inputs")?)?)
        }
        None => None,
    };
    if args.model == ModelArg::Exact && n > EXACT_WARN_ROWS {
        let gib = 3.0 * (n as f64).powi(2) * 8.0 / (1u64 << 30) as f64;
        eprintln!(
            "warning: an exact GP on {n} rows of {} costs O(n³) = {:.1e} flops per evaluation and about {gib:.1} GiB; \
             a sparse model is usually as good and far faster: --model vfe --inducing greedy:500",
            args.train.display(),
            (n as f64).powi(3)
        );
    }
    // Progress on stderr (a spinner on a terminal; hidden otherwise).
    let bar = indicatif::ProgressBar::new_spinner();
    bar.set_style(
        indicatif::ProgressStyle::with_template("{spinner} fitting: iteration {pos}, objective {msg} ({elapsed})")
            .unwrap_or_else(|_| indicatif::ProgressStyle::default_spinner()),
    );
    let hook_bar = bar.clone();
    let progress = ProgressHook(std::sync::Arc::new(move |p: TrainProgress| {
        hook_bar.set_position(p.iteration as u64);
        hook_bar.set_message(format!("{:.6}", p.objective));
    }));
    let opts = TrainOptions {
        max_iters: args.max_iters,
        ftol: args.ftol,
        restarts: args.restarts,
        seed: args.seed,
        progress: Some(progress),
        ..Default::default()
    };

    let Fitted { objective, report, jitter, kernel: kernel_out, noise: noise_out, z: z_out, pred, terms, multiscale } =
        if args.model == ModelArg::Exact {
            if args.inducing.is_some() {
                anyhow::bail!("--inducing applies to sparse models (--model vfe, fitc or dtc), not to exact");
            }
            if let Some(j) = args.kuu_jitter {
                anyhow::bail!(
                    "--kuu-jitter {j} applies to sparse models (--model vfe, fitc or dtc); the exact model has no K_uu"
                );
            }
            let mut gp = ExactGp::new(kernel, noise, x, y)?;
            let report = if args.fixed { None } else { Some(train(&mut gp, &opts)?) };
            let post = gp.posterior()?;
            let pred = match &test {
                Some(t) => Some(post.predict(t, args.full_cov)?),
                None => None,
            };
            Fitted {
                objective: post.log_marginal_likelihood(),
                report,
                jitter: post.jitter().absolute,
                kernel: gp.kernel.clone(),
                noise: gp.noise.sigma2().variance,
                z: None,
                pred,
                terms: None,
                multiscale: None,
            }
        } else {
            let kind = match args.model {
                ModelArg::Vfe => SparseKind::Vfe,
                ModelArg::Fitc => SparseKind::Fitc,
                _ => SparseKind::Dtc,
            };
            let spec = parse_inducing(args.inducing.as_deref().ok_or_else(|| {
                anyhow::anyhow!(
                    "--model {} needs --inducing (greedy:M, kmeans:M, random:M, multiscale:M or file:Z.csv)",
                    kind.name()
                )
            })?)?;
            let m_of = |m: usize| -> anyhow::Result<usize> {
                if m > n {
                    anyhow::bail!(
                        "--inducing asks for {m} inducing points but {} has only {n} rows (M must be ≤ N)",
                        args.train.display()
                    );
                }
                Ok(m)
            };
            let multiscale = matches!(spec, InducingSpec::Multiscale(_));
            if multiscale && !args.kernel.is_squared_exponential() {
                anyhow::bail!(
                    "--inducing multiscale:M needs a squared-exponential kernel (--kernel se or se-ard), not {}",
                    args.kernel
                );
            }
            let z = match spec {
                InducingSpec::Greedy(m) | InducingSpec::Multiscale(m) => {
                    greedy_variance(kernel.as_ref(), &x, m_of(m)?, 1e-12, args.seed)?.z
                }
                InducingSpec::Kmeans(m) => kmeans(&x, m_of(m)?, 100, args.seed)?,
                InducingSpec::Random(m) => random_subset(&x, m_of(m)?, args.seed)?,
                InducingSpec::File(p) => {
                    let t = Table::read(&p)?;
                    std.transform_x(&t.select_columns(&input_names, "inducing inputs", "the training inputs")?)?
                }
            };
            let mut gp = SparseGp::new(kind, kernel, noise, x, y, z)?;
            if let Some(j) = args.kuu_jitter {
                gp.jitter = j.policy();
            }
            let strategy = match (args.fix_inducing, args.strategy) {
                (true, _) | (_, Some(StrategyArg::Fixed)) => SgprStrategy::FixedZ,
                (_, Some(StrategyArg::Joint)) => SgprStrategy::Joint,
                // The final phase gets max(100, --max-iters/2) iterations, so raising
                // --max-iters beyond the default 200 gives it room too.
                (_, Some(StrategyArg::Reinit)) => match SgprStrategy::REINIT {
                    SgprStrategy::Reinit { every, max_worse, tail } => {
                        SgprStrategy::Reinit { every, max_worse, tail: tail.max(args.max_iters / 2) }
                    }
                    other => other,
                },
                (_, Some(StrategyArg::ReinitRetrain)) | (_, None) => match SgprStrategy::REINIT_RETRAIN {
                    SgprStrategy::ReinitRetrain { every, max_worse, tail } => {
                        SgprStrategy::ReinitRetrain { every, max_worse, tail: tail.max(args.max_iters / 2) }
                    }
                    other => other,
                },
            };
            let (report, ordinary) = match (args.fixed, multiscale) {
                (true, ms) => {
                    if ms {
                        gp.use_multiscale()?;
                    }
                    (None, None)
                }
                (false, false) => (Some(train_sparse(&mut gp, strategy, &opts)?), None),
                (false, true) => {
                    let r = train_multiscale(&mut gp, strategy, &opts)?;
                    (Some(r.multiscale), Some(r.ordinary))
                }
            };
            let post = gp.posterior()?;
            let pred = match &test {
                Some(t) => Some(post.predict(t, args.full_cov)?),
                None => None,
            };
            Fitted {
                objective: post.objective(),
                report,
                jitter: post.jitter().absolute,
                kernel: gp.kernel.clone(),
                noise: gp.noise.sigma2().variance,
                z: Some(gp.z().clone()),
                pred,
                terms: Some(gp.objective_terms()?),
                multiscale: match (gp.features(), gp.kernel.as_squared_exponential()) {
                    (InducingFeatures::Multiscale(ms), Some(se)) => Some((ms.widths(se), ordinary)),
                    _ => None,
                },
            }
        };

    // Map back to data units.
    let z_data = z_out.map(|z| {
        let mut z = z;
        for (j, mut col) in z.column_iter_mut().enumerate() {
            col *= std.x_scale[j];
            col.add_scalar_mut(std.x_mean[j]);
        }
        z
    });
    bar.finish_and_clear();
    if let Some(r) = &report
        && r.termination == "LineSearchFailed"
    {
        eprintln!(
            "warning: training stopped after {} iterations because no step decreased the objective (projected gradient {:.2e}); the fit may not be at an optimum",
            r.iterations, r.projected_gradient_norm
        );
    }
    if let Some(r) = &report
        && r.termination == "MaxIterations"
    {
        eprintln!(
            "warning: training stopped after {} iterations without converging (raise --max-iters; the fit may not be at an optimum; SciPy's L-BFGS-B, as GPflow uses it, allows --max-iters {SCIPY_MAX_ITERS} --ftol {SCIPY_FTOL:e})",
            r.iterations
        );
    }
    let model_name = match args.model {
        ModelArg::Exact => "exact",
        ModelArg::Vfe => "vfe",
        ModelArg::Fitc => "fitc",
        ModelArg::Dtc => "dtc",
    };
    let (mut mean, mut var, mut cov) = (None, None, None);
    if let Some(p) = &pred {
        mean = Some(std.inverse_mean(&p.mean).as_slice().to_vec());
        var = Some(std.inverse_var(&p.var).as_slice().to_vec());
        cov = p.cov.as_ref().map(|c| rows_json(&std.inverse_cov(c)));
    }
    let (widths, training_ordinary) = match &multiscale {
        Some((widths, ordinary)) => {
            let mut w = widths.clone();
            for (j, mut col) in w.column_iter_mut().enumerate() {
                col *= std.x_scale[j];
            }
            (Some(rows_json(&w)), ordinary.clone())
        }
        None => (None, None),
    };
    if let (Some(path), Some(m), Some(v)) = (&args.output, &mean, &var) {
        let data = DMatrix::from_fn(m.len(), 2, |i, j| if j == 0 { m[i] } else { v[i] });
        dpcotrain_cotrain::table::write_csv(path, &["mean".to_string(), "var".to_string()], &data)?;
    }
    Ok(FitReport {
        model: model_name,
        kernel: args.kernel.to_string(),
        objective,
        hyperparameters: Hyperparameters::of(kernel_out.as_ref(), noise_out),
        jitter,
        features: match (&z_data, &multiscale) {
            (None, _) => None,
            (Some(_), None) => Some("points"),
            (Some(_), Some(_)) => Some("multiscale"),
        },
        inducing: z_data.as_ref().map(rows_json),
        n_train: n,
        inputs: input_names,
        target: target_name,
        standardized: args.standardize,
        y_mean: std.y_mean,
        y_scale: std.y_scale,
        // Only when given, so that the default output stays as it was.
        kuu_jitter: args.kuu_jitter.map(|j| j.to_string()),
        training: report.map(|r| Training { stop: stop_reason(&r.termination), report: r }),
        terms,
        widths,
        training_ordinary,
        mean,
        var,
        cov,
    })
}

impl std::fmt::Display for FitReport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        writeln!(f, "model       {}  (kernel {})", self.model, self.kernel)?;
        writeln!(f, "objective   {:.6}  (higher is better)", self.objective)?;
        for (name, v) in &self.hyperparameters.kernel {
            writeln!(f, "  {name:<26} {v:.6}")?;
        }
        writeln!(f, "noise       {:.6}", self.hyperparameters.noise)?;
        match &self.kuu_jitter {
            Some(j) => writeln!(f, "jitter      {:.3e}  (--kuu-jitter {j})", self.jitter)?,
            None => writeln!(f, "jitter      {:.3e}", self.jitter)?,
        }
        if let Some(t) = &self.terms {
            writeln!(
                f,
                "terms       data fit {:.4}, complexity {:.4}, trace {:.4}, constant {:.4}; FITC's extra noise Σ(k−q) {:.4}",
                t.data_fit, t.complexity, t.trace, t.constant, t.fitc_noise
            )?;
        }
        if let Some(z) = &self.inducing {
            match &self.widths {
                Some(_) => {
                    writeln!(f, "inducing    {} multiscale features (centres and widths in the JSON output)", z.len())?
                }
                None => writeln!(f, "inducing    {} points", z.len())?,
            }
        }
        if let Some(o) = &self.training_ordinary {
            writeln!(f, "ordinary    objective {:.6} before the multiscale phase", o.objective)?;
        }
        if let Some(t) = &self.training {
            let r = &t.report;
            writeln!(
                f,
                "training    {} iterations, {} evaluations, stopped: {} ({}), projected gradient {:.2e}{}",
                r.iterations,
                r.evaluations,
                t.stop,
                r.termination,
                r.projected_gradient_norm,
                if r.approximate_steps > 0 {
                    format!(", {} approximate-Wolfe steps", r.approximate_steps)
                } else {
                    String::new()
                }
            )?;
        }
        if let (Some(m), Some(v)) = (&self.mean, &self.var) {
            writeln!(f, "mean,var")?;
            for (a, b) in m.iter().zip(v) {
                writeln!(f, "{},{}", super::json_number(*a), super::json_number(*b))?;
            }
        }
        Ok(())
    }
}

/// Why training stopped, in words, from [`TrainReport::termination`] (the optimiser's
/// `Termination` as Debug text).
pub(crate) fn stop_reason(termination: &str) -> &'static str {
    match termination {
        "Converged(ProjectedGradient)" => "converged, projected gradient within pgtol",
        "Converged(RelativeReduction)" => "converged, relative reduction of the objective within ftol",
        "MaxIterations" => "iteration limit (--max-iters)",
        "LineSearchFailed" => "line search failed, no step decreased the objective",
        "StoppedByCallback" => "stopped by its caller",
        "" => "no optimiser run",
        _ => "optimiser error",
    }
}
