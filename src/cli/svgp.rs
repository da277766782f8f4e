//! `dpcotrain gp svgp`: a stochastic variational GP (Hensman et al. 2013) trained on a CSV
//! streamed from disk — memory is one chunk of rows and the M×M variational parameters,
//! whatever the file's length — with a progress bar and a checkpoint a restarted fit resumes
//! from (`--checkpoint FILE --resume`).

use anyhow::Context;
use clap::Args;
use dpcotrain_cotrain::Table;
use dpcotrain_cotrain::table_stream::CsvStream;
use dpcotrain_federation::durable::{Access, write_atomic};
use dpcotrain_gp::inducing::kmeans;
use dpcotrain_gp::kernels::{KernelInit, KernelSpec};
use dpcotrain_gp::optimize::adam::AdamOptions;
use dpcotrain_gp::standardize::Standardizer;
use dpcotrain_gp::svgp::{MinibatchSource, SvgpCheckpoint, SvgpEvent, SvgpOptions, SvgpReport, fit_svgp};
use dpcotrain_gp::{GpError, NoiseVariance, SourceError, Svgp};
use indicatif::{ProgressBar, ProgressStyle};
use nalgebra::{DMatrix, DVector};
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};
use std::time::Instant;

/// Rows sampled (evenly through the file) for the k-means start of Z.
const Z_SAMPLE_ROWS: usize = 20_000;
const CHECKPOINT_FORMAT: &str = "dpcotrain-svgp-checkpoint/1";

#[derive(Debug, Args)]
pub struct SvgpArgs {
    /// Training CSV with a header row, streamed (never loaded whole).
    #[arg(long, value_name = "FILE.csv")]
    pub train: PathBuf,
    /// Target column, by name.
    #[arg(long, value_name = "NAME")]
    pub target: String,
    /// Input columns by name (default: every column but the target, in file order).
    #[arg(long, value_name = "A,B,...", value_delimiter = ',')]
    pub inputs: Option<Vec<String>>,
    #[arg(long, default_value = "se-ard", value_name = "EXPR")]
    pub kernel: KernelSpec,
    /// Number of inducing inputs M (k-means on an even sample of the inputs).
    #[arg(long, default_value_t = 200)]
    pub inducing: usize,
    /// Keep Z where k-means put it (learn hyperparameters and q(u) only).
    #[arg(long)]
    pub fix_inducing: bool,
    /// Minibatch rows.
    #[arg(long, default_value_t = 1000)]
    pub batch: usize,
    /// Passes over the data (ignored when --steps is given).
    #[arg(long, default_value_t = 1.0)]
    pub epochs: f64,
    /// Total optimisation steps (minibatches).
    #[arg(long)]
    pub steps: Option<u64>,
    /// Adam's step size for the hyperparameters and Z.
    #[arg(long, default_value_t = 0.01)]
    pub lr: f64,
    /// Natural-gradient step γ on q(u), in (0, 1].
    #[arg(long, default_value_t = 0.1)]
    pub natgrad: f64,
    /// Rows read from disk at a time (each chunk is shuffled; chunks are visited in a random
    /// order every epoch). A minibatch comes from one chunk: for a file sorted by time or by
    /// target, larger chunks make each step's sample closer to the whole file's.
    #[arg(long, default_value_t = 65_536)]
    pub chunk_rows: usize,
    /// Train on the raw columns instead of standardised ones (predictions are in data units
    /// either way).
    #[arg(long)]
    pub no_standardize: bool,
    /// Checkpoint file (JSON), written atomically every --checkpoint-every steps and at the end.
    #[arg(long, value_name = "FILE.json")]
    pub checkpoint: Option<PathBuf>,
    #[arg(long, default_value_t = 500)]
    pub checkpoint_every: u64,
    /// Continue from --checkpoint if it exists (refused if it was written for another file or
    /// with other model settings; the step sizes and --steps/--epochs may change).
    #[arg(long, requires = "checkpoint")]
    pub resume: bool,
    /// After the stochastic fit, one more streamed pass sets q(u) to its optimum for the
    /// learned θ and Z (the model then equals SGPR/VFE with those θ and Z).
    #[arg(long)]
    pub optimal_q: bool,
    /// Test CSV holding the inputs and the target by name: reports RMSE and NLPD.
    #[arg(long, value_name = "TEST.csv")]
    pub test: Option<PathBuf>,
    /// CSV of inputs (by name) to predict at.
    #[arg(long, value_name = "X.csv")]
    pub predict: Option<PathBuf>,
    /// Write the predictions (columns mean, var) here.
    #[arg(long, value_name = "OUT.csv", requires = "predict")]
    pub output: Option<PathBuf>,
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// Print one JSON object.
    #[arg(long)]
    pub json: bool,
    /// No progress bar.
    #[arg(long)]
    pub quiet: bool,
}

/// Everything the numbers of a fit depend on; a checkpoint resumes only under the same.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct Settings {
    /// The file's canonical path, its length and the opening pass's column statistics: a file
    /// changed since the checkpoint (even to the same number of rows) is refused.
    train: String,
    bytes: u64,
    stats: String,
    rows: usize,
    target: String,
    inputs: Vec<String>,
    kernel: String,
    inducing: usize,
    fix_inducing: bool,
    batch: usize,
    chunk_rows: usize,
    standardize: bool,
    seed: u64,
}

#[derive(Debug, Serialize, Deserialize)]
struct CheckpointFile {
    format: String,
    settings: Settings,
    checkpoint: SvgpCheckpoint,
}

fn first_difference(a: &Settings, b: &Settings) -> String {
    let (va, vb) = (serde_json::to_value(a).unwrap_or_default(), serde_json::to_value(b).unwrap_or_default());
    if let (Some(ma), Some(mb)) = (va.as_object(), vb.as_object()) {
        for (k, x) in ma {
            if mb.get(k) != Some(x) {
                return format!("{k}: checkpoint {}, now {}", mb.get(k).cloned().unwrap_or_default(), x);
            }
        }
    }
    "settings differ".into()
}

/// An even sample of at most `max` input rows (every k-th row of the file).
fn sample_inputs(src: &mut CsvStream, max: usize) -> anyhow::Result<DMatrix<f64>> {
    let step = src.n_rows().div_ceil(max).max(1);
    let (d, mut vals, mut i) = (src.dim(), Vec::new(), 0usize);
    src.for_each_block(&mut |x, _| {
        for r in 0..x.nrows() {
            if i % step == 0 {
                vals.extend(x.row(r).iter().copied());
            }
            i += 1;
        }
        Ok(())
    })?;
    Ok(DMatrix::from_row_slice(vals.len() / d, d, &vals))
}

/// What `gp svgp` found: the fit's account (steps, epochs, the bound per row), its
/// hyperparameters, the test fit if asked, and the run's time and memory.
#[derive(Debug, Clone, Serialize)]
pub struct SvgpFitReport {
    pub model: &'static str,
    pub rows: usize,
    pub inputs: Vec<String>,
    pub target: String,
    pub inducing: usize,
    pub steps: u64,
    pub resumed_at: Option<u64>,
    pub epochs_completed: u64,
    /// The bound per row at the final state, over every row (one more streamed pass).
    pub bound_per_row: f64,
    /// The training's moving average of minibatch estimates.
    pub bound_per_row_moving_average: Option<f64>,
    pub standardized: bool,
    pub kernel: std::collections::BTreeMap<String, f64>,
    pub noise: f64,
    pub optimal_q: bool,
    pub test: Option<TestFit>,
    pub fit_seconds: f64,
    pub peak_rss_bytes: Option<u64>,
    pub seconds: f64,
    pub trace: Vec<(u64, f64)>,
}

/// A fit's accuracy on a labelled file.
#[derive(Debug, Clone, Serialize)]
pub struct TestFit {
    pub file: String,
    pub rows: usize,
    pub rmse: f64,
    pub nlpd: f64,
}

impl std::fmt::Display for SvgpFitReport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        writeln!(
            f,
            "SVGP on {} rows × {} inputs, M = {}: {} steps ({} epochs completed) in {:.1} s{}",
            self.rows,
            self.inputs.len(),
            self.inducing,
            self.steps,
            self.epochs_completed,
            self.fit_seconds,
            self.resumed_at.map(|s| format!(", resumed at step {s}")).unwrap_or_default()
        )?;
        writeln!(
            f,
            "bound / N at the final state, over every row ({} units): {:.5}{}",
            if self.standardized { "standardised" } else { "data" },
            self.bound_per_row,
            self.bound_per_row_moving_average
                .map(|b| format!(" (the training's moving average: {b:.5})"))
                .unwrap_or_default()
        )?;
        writeln!(f, "noise variance {:.5}; kernel {}", self.noise, serde_json::json!(self.kernel))?;
        if let Some(t) = &self.test {
            writeln!(f, "test ({} rows): RMSE {:.5}, NLPD {:.5}", t.rows, t.rmse, t.nlpd)?;
        }
        Ok(())
    }
}

/// `gp svgp`: fit, then print the report (pretty JSON with `--json`).
pub fn run(args: SvgpArgs) -> anyhow::Result<()> {
    let out = if args.json { super::Output::PrettyJson } else { super::Output::Human };
    super::print_report(&svgp_fit(args)?, out)
}

/// `gp svgp` as a library function (the checkpoint and the `--output` predictions are written
/// here too).
pub fn svgp_fit(args: SvgpArgs) -> anyhow::Result<SvgpFitReport> {
    for (name, v) in [("lr", args.lr), ("epochs", args.epochs)] {
        if !(v.is_finite() && v > 0.0) {
            anyhow::bail!("--{name} must be a positive finite number, got {v}");
        }
    }
    if !(args.natgrad > 0.0 && args.natgrad <= 1.0) {
        anyhow::bail!("--natgrad must be in (0, 1], got {}", args.natgrad);
    }
    if args.inducing == 0 {
        anyhow::bail!("--inducing must be at least 1");
    }
    let t0 = Instant::now();
    let spinner = (!args.quiet && !args.json).then(|| {
        let s = ProgressBar::new_spinner();
        s.set_message(format!("reading {} (validating every row)", args.train.display()));
        s.enable_steady_tick(std::time::Duration::from_millis(200));
        s
    });
    let mut src =
        CsvStream::open(&args.train, &args.target, args.inputs.as_deref(), args.batch, args.chunk_rows, args.seed)?;
    let standardize = !args.no_standardize;
    let stats = if standardize { src.stats().clone() } else { Standardizer::identity(src.dim()) };
    src.set_standardize(standardize);
    let n = src.n_rows();
    if args.inducing > n {
        anyhow::bail!("--inducing {} is more than the {n} rows of {}", args.inducing, args.train.display());
    }
    let canonical = std::fs::canonicalize(&args.train).unwrap_or_else(|_| args.train.clone());
    let bytes = std::fs::metadata(&args.train).map(|m| m.len()).unwrap_or(0);
    let st = src.stats();
    let fingerprint = format!("{:?} {:?} {:?} {:?}", st.x_mean, st.x_scale, st.y_mean, st.y_scale);
    let settings = Settings {
        train: canonical.display().to_string(),
        bytes,
        stats: fingerprint,
        rows: n,
        target: args.target.clone(),
        inputs: src.input_names(),
        kernel: args.kernel.to_string(),
        inducing: args.inducing,
        fix_inducing: args.fix_inducing,
        batch: args.batch,
        chunk_rows: src.chunk_rows(),
        standardize,
        seed: args.seed,
    };
    if let Some(s) = &spinner {
        s.set_message(format!("{n} rows; choosing {} inducing inputs (k-means)", args.inducing));
    }
    let sample = sample_inputs(&mut src, Z_SAMPLE_ROWS.max(args.inducing))?;
    let z = kmeans(&sample, args.inducing, 25, args.seed)?;
    let (variance, lengthscales) = if standardize {
        (1.0, vec![1.0; src.dim()])
    } else {
        (src.stats().y_scale.powi(2), src.stats().x_scale.clone())
    };
    let kernel = args.kernel.build(&KernelInit { variance, lengthscales })?;
    let mut noise = NoiseVariance::new(0.1 * variance);
    // The default bounds [1e-6, 1e3] suit standardised targets; on raw ones they scale with Var(y).
    noise.bounds = dpcotrain_gp::Bounds::new((1e-6 * variance).ln(), (1e3 * variance).ln());
    let mut model = Svgp::new(kernel, noise, z)?;
    model.optimize_inducing = !args.fix_inducing;
    if let Some(s) = spinner {
        s.finish_and_clear();
    }

    let resume = match (&args.checkpoint, args.resume) {
        (Some(p), true) if p.exists() => {
            let text = std::fs::read_to_string(p).with_context(|| format!("reading checkpoint {}", p.display()))?;
            let file: CheckpointFile =
                serde_json::from_str(&text).with_context(|| format!("{}: not an SVGP checkpoint", p.display()))?;
            if file.format != CHECKPOINT_FORMAT {
                anyhow::bail!("{}: format {:?}, expected {CHECKPOINT_FORMAT:?}", p.display(), file.format);
            }
            if file.settings != settings {
                anyhow::bail!(
                    "{}: written with other settings ({}); remove it or run with the same settings",
                    p.display(),
                    first_difference(&settings, &file.settings)
                );
            }
            Some(file.checkpoint)
        }
        (Some(p), true) => {
            // Resume-if-present (a requeued job's first run has none yet), but never silently.
            eprintln!("no checkpoint at {} yet: starting from step 0 (it will be written there)", p.display());
            None
        }
        _ => None,
    };
    let steps = args.steps.unwrap_or(((args.epochs * n as f64) / args.batch as f64).ceil() as u64).max(1);
    let opts = SvgpOptions {
        steps,
        adam: AdamOptions { learning_rate: args.lr, ..Default::default() },
        natgrad_step: args.natgrad,
        checkpoint_every: if args.checkpoint.is_some() { args.checkpoint_every.max(1) } else { 0 },
        // At most ~200 progress reports (the bar and the JSON trace).
        progress_every: (steps / 200).clamp(1, 50),
    };
    let resumed_at = resume.as_ref().map(|c| c.step);
    let bar = (!args.quiet && !args.json).then(|| {
        let b = ProgressBar::new(steps);
        b.set_style(
            ProgressStyle::with_template("{elapsed_precise} [{bar:40}] {pos}/{len} steps  {msg}  ETA {eta}")
                .unwrap_or_else(|_| ProgressStyle::default_bar()),
        );
        if let Some(s) = resumed_at {
            b.set_position(s);
            b.reset_eta();
        }
        b
    });
    let fit_start = Instant::now();
    let report: SvgpReport = fit_svgp(&mut model, &mut src, &opts, resume, &mut |e| {
        match e {
            SvgpEvent::Progress(p) => {
                if let Some(b) = &bar {
                    b.set_position(p.step);
                    b.set_message(format!("epoch {}  bound/N {:.4}", p.epoch, p.bound_per_row));
                }
            }
            SvgpEvent::Checkpoint(cp) => {
                if let Some(path) = &args.checkpoint {
                    let file = CheckpointFile {
                        format: CHECKPOINT_FORMAT.into(),
                        settings: settings.clone(),
                        checkpoint: cp.clone(),
                    };
                    let failed = |source| GpError::CheckpointWrite { path: path.clone(), source };
                    let bytes = serde_json::to_vec(&file).map_err(|e| failed(SourceError::new(e)))?;
                    // Z and q(u) are functions of the private rows: owner-only, as keys are.
                    write_atomic(path, &bytes, Access::Secret).map_err(|e| failed(SourceError::new(e)))?;
                }
            }
        }
        Ok(())
    })?;
    if let Some(b) = bar {
        b.finish_and_clear();
    }
    let fit_secs = fit_start.elapsed().as_secs_f64();
    if args.optimal_q {
        model.set_optimal_q(&mut src)?;
    }
    // The bound at the final state, over every row (one more streamed pass): the training's
    // own figure is a moving average of minibatch estimates along the way.
    let final_bound = model.full_bound_per_row(&mut src)?;

    let evaluate = |path: &Path, with_target: bool| -> anyhow::Result<(DMatrix<f64>, Option<DVector<f64>>)> {
        let table = Table::read(path)?;
        let names = src.input_names();
        if with_target {
            let (x, y) = table.split_target_named(&args.target, &names, "test data", "the training inputs")?;
            Ok((x, Some(y)))
        } else {
            Ok((table.select_columns(&names, "prediction inputs", "the training inputs")?, None))
        }
    };
    let predict = |x: &DMatrix<f64>| -> anyhow::Result<(DVector<f64>, DVector<f64>)> {
        let p = model.predict(&stats.transform_x(x)?, false)?;
        Ok((stats.inverse_mean(&p.mean), stats.inverse_var(&p.var_y(model.noise.variance))))
    };
    let test = match &args.test {
        Some(path) => {
            let (x, y) = evaluate(path, true)?;
            let y = y.expect("asked with target");
            let (mean, var) = predict(&x)?;
            let rmse = ((&mean - &y).norm_squared() / y.len() as f64).sqrt();
            let nlpd = mean
                .iter()
                .zip(var.iter())
                .zip(y.iter())
                .map(|((m, v), t)| 0.5 * (2.0 * std::f64::consts::PI * v).ln() + (t - m).powi(2) / (2.0 * v))
                .sum::<f64>()
                / y.len() as f64;
            Some(TestFit { file: path.display().to_string(), rows: y.len(), rmse, nlpd })
        }
        None => None,
    };
    if let Some(path) = &args.predict {
        let (x, _) = evaluate(path, false)?;
        let (mean, var) = predict(&x)?;
        if let Some(out) = &args.output {
            let data = DMatrix::from_fn(mean.len(), 2, |i, j| if j == 0 { mean[i] } else { var[i] });
            dpcotrain_cotrain::table::write_csv(out, &["mean".into(), "var".into()], &data)?;
        }
    }
    let names = model.kernel.param_names();
    Ok(SvgpFitReport {
        model: "svgp",
        rows: n,
        inputs: src.input_names(),
        target: args.target.clone(),
        inducing: args.inducing,
        steps: report.steps,
        resumed_at,
        epochs_completed: report.epochs_completed,
        bound_per_row: final_bound,
        bound_per_row_moving_average: report.bound_per_row,
        standardized: standardize,
        kernel: names.iter().cloned().zip(model.kernel.params().iter().map(|v| v.exp())).collect(),
        noise: model.noise.variance,
        optimal_q: args.optimal_q,
        test,
        fit_seconds: fit_secs,
        peak_rss_bytes: crate::process::peak_rss_bytes(),
        seconds: t0.elapsed().as_secs_f64(),
        trace: report.trace,
    })
}
