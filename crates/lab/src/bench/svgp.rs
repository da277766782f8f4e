//! `dpcotrain-lab bench svgp`: the time of one SVGP training step (a natural-gradient step on q(u)
//! and an Adam step on θ and Z from one minibatch) and, with `--vs python`, GPflow's and
//! GPyTorch's time for the same step on the same data size, measured in the same run (A B A B:
//! ours, theirs, ours, theirs — this machine is shared and noisy, so the ratio is what counts).
//! With `--stream-rows N` it also streams one epoch of an N-row CSV from disk through
//! `gp svgp` in a child process and reports its wall time and peak memory.

use anyhow::Context as _;
use clap::Args;
use dpcotrain_gp::kernels::SquaredExponential;
use dpcotrain_gp::optimize::adam::AdamOptions;
use dpcotrain_gp::svgp::{InMemory, SvgpOptions, fit_svgp};
use dpcotrain_gp::{NoiseVariance, Svgp};
use nalgebra::DMatrix;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde_json::{Value, json};
use std::io::Write as _;
use std::path::PathBuf;
use std::time::Instant;

#[derive(Debug, Args)]
pub struct SvgpBenchArgs {
    #[arg(long, default_value_t = 100_000)]
    pub n: usize,
    #[arg(long, default_value_t = 500)]
    pub m: usize,
    #[arg(long, default_value_t = 1000)]
    pub batch: usize,
    #[arg(long, default_value_t = 4)]
    pub d: usize,
    /// Timed steps per measurement (after warm-up steps).
    #[arg(long, default_value_t = 30)]
    pub steps: u64,
    /// Measure GPflow (SVGP + NaturalGradient + Adam) and GPyTorch (NGD + Adam) too, when
    /// the `--python` interpreter has them installed.
    #[arg(long, value_name = "python")]
    pub vs: Option<String>,
    /// The Python interpreter for `--vs python` (e.g. a virtualenv's `bin/python` with GPflow).
    #[arg(long, value_name = "PATH", default_value = "python3")]
    pub python: PathBuf,
    /// Also stream one epoch of a CSV with this many rows (D = 4; written to --stream-dir if
    /// absent) through `gp svgp` in a child process: wall time and peak RSS.
    #[arg(long)]
    pub stream_rows: Option<usize>,
    #[arg(long, default_value = "target/bench-svgp")]
    pub stream_dir: PathBuf,
    /// Inducing inputs of the streamed epoch.
    #[arg(long, default_value_t = 100)]
    pub stream_m: usize,
    #[arg(long)]
    pub json: bool,
}

/// GPflow: SVGP (whitened), NaturalGradient(γ = 0.1) on q(u), Adam(0.01) on the rest; both in
/// one compiled tf.function, as GPflow's documentation recommends.
const GPFLOW: &str = r#"
import json, sys, time, numpy as np
import gpflow, tensorflow as tf, tf_keras
N, M, B, D, S = map(int, sys.argv[1:6])
gpflow.config.set_default_float(np.float64)
rng = np.random.default_rng(7)
X = rng.uniform(-2, 2, (N, D)); Y = np.sin(1.5 * X).sum(1, keepdims=True) + 0.1 * rng.uniform(-1, 1, (N, 1))
Z = X[rng.choice(N, M, replace=False)].copy()
model = gpflow.models.SVGP(gpflow.kernels.SquaredExponential(lengthscales=[0.7] * D), gpflow.likelihoods.Gaussian(0.1), Z, num_data=N, whiten=True)
gpflow.set_trainable(model.q_mu, False); gpflow.set_trainable(model.q_sqrt, False)
natgrad = gpflow.optimizers.NaturalGradient(gamma=0.1); adam = tf_keras.optimizers.Adam(0.01)
it = iter(tf.data.Dataset.from_tensor_slices((X, Y)).repeat().shuffle(10000, seed=1).batch(B, drop_remainder=True))
loss = model.training_loss_closure(it, compile=True)
@tf.function
def step():
    natgrad.minimize(loss, [(model.q_mu, model.q_sqrt)])
    adam.minimize(loss, model.trainable_variables)
for _ in range(3): step()
t = time.perf_counter()
for _ in range(S): step()
print(json.dumps({"lib": "gpflow " + gpflow.__version__, "seconds_per_step": (time.perf_counter() - t) / S}))
"#;

/// GPyTorch: ApproximateGP with NaturalVariationalDistribution and a whitened
/// VariationalStrategy, NGD(lr = 0.1) on q(u), Adam(0.01) on θ, Z and the noise.
const GPYTORCH: &str = r#"
import json, sys, time, numpy as np, torch, gpytorch
N, M, B, D, S = map(int, sys.argv[1:6])
torch.set_default_dtype(torch.float64)
rng = np.random.default_rng(7)
X = rng.uniform(-2, 2, (N, D)); Y = np.sin(1.5 * X).sum(1) + 0.1 * rng.uniform(-1, 1, N)
X = torch.tensor(X); Y = torch.tensor(Y); Z = X[torch.tensor(rng.choice(N, M, replace=False))].clone()
class Model(gpytorch.models.ApproximateGP):
    def __init__(self, Z):
        vd = gpytorch.variational.NaturalVariationalDistribution(Z.size(0))
        super().__init__(gpytorch.variational.VariationalStrategy(self, Z, vd, learn_inducing_locations=True))
        self.mean_module = gpytorch.means.ZeroMean()
        self.covar_module = gpytorch.kernels.ScaleKernel(gpytorch.kernels.RBFKernel(ard_num_dims=D))
    def forward(self, x):
        return gpytorch.distributions.MultivariateNormal(self.mean_module(x), self.covar_module(x))
model = Model(Z); lik = gpytorch.likelihoods.GaussianLikelihood()
mll = gpytorch.mlls.VariationalELBO(lik, model, num_data=N)
ngd = gpytorch.optim.NGD(model.variational_parameters(), num_data=N, lr=0.1)
adam = torch.optim.Adam([{"params": model.hyperparameters()}, {"params": lik.parameters()}], lr=0.01)
gen = torch.Generator().manual_seed(1)
def step():
    idx = torch.randint(0, N, (B,), generator=gen)
    ngd.zero_grad(); adam.zero_grad()
    loss = -mll(model(X[idx]), Y[idx]); loss.backward(); ngd.step(); adam.step()
for _ in range(3): step()
t = time.perf_counter()
for _ in range(S): step()
print(json.dumps({"lib": "gpytorch " + gpytorch.__version__ + " (torch " + torch.__version__ + ")", "seconds_per_step": (time.perf_counter() - t) / S}))
"#;

fn data(n: usize, d: usize) -> (DMatrix<f64>, nalgebra::DVector<f64>) {
    let mut r = ChaCha8Rng::seed_from_u64(7);
    let x: DMatrix<f64> = DMatrix::from_fn(n, d, |_, _| r.random_range(-2.0..2.0));
    let y = nalgebra::DVector::from_fn(n, |i, _| {
        (0..d).map(|j| (1.5 * x[(i, j)]).sin()).sum::<f64>() + 0.1 * r.random_range(-1.0..1.0)
    });
    (x, y)
}

/// Our seconds per step: `steps` steps after 3 warm-up steps.
fn ours(a: &SvgpBenchArgs, x: &DMatrix<f64>, y: &nalgebra::DVector<f64>) -> anyhow::Result<f64> {
    let z = dpcotrain_gp::inducing::random_subset(x, a.m, 1)?;
    let mut model = Svgp::new(Box::new(SquaredExponential::ard(1.0, vec![0.7; a.d])), NoiseVariance::new(0.1), z)?;
    let mut src = InMemory::new(x.clone(), y.clone(), a.batch, 1)?;
    let opts = |steps| SvgpOptions {
        steps,
        adam: AdamOptions::default(),
        natgrad_step: 0.1,
        checkpoint_every: 0,
        progress_every: 0,
    };
    fit_svgp(&mut model, &mut src, &opts(3), None, &mut |_| Ok(()))?;
    // The timed run continues where the warm-up stopped (no new allocations of note).
    let t = Instant::now();
    let mut fresh = model.clone();
    let mut src2 = src.clone();
    fit_svgp(&mut fresh, &mut src2, &opts(a.steps), None, &mut |_| Ok(()))?;
    Ok(t.elapsed().as_secs_f64() / a.steps as f64)
}

/// Run a Python benchmark script with `args` under the interpreter `interp`; its last line is
/// one JSON object. The reason, when python or the library is missing or the script fails; a
/// missing module names `--python`, the way to point the benchmark at an interpreter that has it.
pub(crate) fn python(interp: &std::path::Path, script: &str, args: &[String]) -> Result<Value, String> {
    let shown = interp.display();
    let out = std::process::Command::new(interp)
        .arg("-c")
        .arg(script)
        .args(args)
        .env("TF_CPP_MIN_LOG_LEVEL", "3")
        .output()
        .map_err(|e| format!("{shown} not runnable: {e}; pass --python PATH to use another interpreter"))?;
    if !out.status.success() {
        let err = String::from_utf8_lossy(&out.stderr);
        let last = err.lines().rev().find(|l| !l.trim().is_empty()).unwrap_or("failed");
        if last.contains("ModuleNotFoundError") || last.contains("ImportError") {
            return Err(format!(
                "{shown}: {last}; pass --python PATH to an interpreter that has it (e.g. a virtualenv's bin/python)"
            ));
        }
        return Err(format!("{shown}: {last}"));
    }
    let text = String::from_utf8_lossy(&out.stdout);
    let line = text.lines().rev().find(|l| l.starts_with('{')).ok_or("no JSON line in its output")?;
    serde_json::from_str(line).map_err(|e| e.to_string())
}

pub fn run(a: SvgpBenchArgs) -> anyhow::Result<()> {
    let rows = measure(&a)?;
    if a.json {
        println!("{}", serde_json::to_string_pretty(&rows)?);
    }
    Ok(())
}

/// The measurements of [`run`] as JSON rows, printing a line per case unless `a.json` (also
/// called by `bench gp`, which prints its own rows).
pub(crate) fn measure(a: &SvgpBenchArgs) -> anyhow::Result<Vec<Value>> {
    if a.m == 0 || a.batch == 0 || a.m > a.n || a.steps == 0 {
        anyhow::bail!("need 1 ≤ M ≤ N, a batch ≥ 1 and ≥ 1 step");
    }
    if let Some(v) = &a.vs
        && v != "python"
    {
        anyhow::bail!("--vs {v:?}: the only comparison is python (GPflow and GPyTorch)");
    }
    let say = |s: String| {
        if !a.json {
            println!("{s}");
        }
    };
    let (x, y) = data(a.n, a.d);
    let mut rows = Vec::new();
    let case = format!("N={} M={} batch={} D={}", a.n, a.m, a.batch, a.d);
    // A B A B: ours, each library, ours, each library; the best of the two of each is kept.
    let rounds = if a.vs.is_some() { 2 } else { 1 };
    let mut best_ours = f64::INFINITY;
    // (library, seconds per step or why it was not measured)
    let mut theirs: Vec<(String, Result<f64, String>)> = vec![];
    for round in 0..rounds {
        best_ours = best_ours.min(ours(a, &x, &y)?);
        if a.vs.is_some() {
            for (k, script) in [GPFLOW, GPYTORCH].iter().enumerate() {
                let args = [a.n, a.m, a.batch, a.d, a.steps as usize].map(|v| v.to_string());
                let r = python(&a.python, script, &args);
                let name = match &r {
                    Ok(v) => v["lib"].as_str().unwrap_or("?").to_string(),
                    Err(_) => ["gpflow", "gpytorch"][k].to_string(),
                };
                let secs = r.and_then(|v| v["seconds_per_step"].as_f64().ok_or_else(|| "no timing".to_string()));
                if round == 0 {
                    theirs.push((name, secs));
                } else if let (Ok(new), Ok(old)) = (&secs, &theirs[k].1) {
                    theirs[k].1 = Ok(new.min(*old));
                }
            }
        }
    }
    say(format!("SVGP step (natgrad on q(u) + Adam on θ, Z)  {case}: {:.2} ms  (dpcotrain)", best_ours * 1e3));
    rows.push(json!({"case": "svgp_step", "lib": "dpcotrain", "n": a.n, "m": a.m, "batch": a.batch, "d": a.d, "seconds_per_step": best_ours}));
    for (lib, r) in &theirs {
        match r {
            Ok(t) => {
                say(format!(
                    "SVGP step                                  {case}: {:.2} ms  ({lib}; dpcotrain is {:.2}× faster)",
                    t * 1e3,
                    t / best_ours
                ));
                rows.push(json!({"case": "svgp_step", "lib": lib, "seconds_per_step": t, "ratio_to_dpcotrain": t / best_ours}));
            }
            Err(e) => say(format!("{lib}: not measured ({e})")),
        }
    }
    if let Some(n) = a.stream_rows {
        let v = stream_epoch(a, n)?;
        say(format!(
            "SVGP one epoch streamed from disk, {n} rows × 4 inputs, M = {}, batch {}: {:.1} s ({} steps), peak RSS {:.2} GiB",
            a.stream_m,
            a.batch,
            v["fit_seconds"].as_f64().unwrap_or(0.0),
            v["steps"],
            v["peak_rss_bytes"].as_f64().unwrap_or(0.0) / (1u64 << 30) as f64
        ));
        rows.push(json!({"case": "svgp_stream_epoch", "rows": n, "m": a.stream_m, "batch": a.batch, "result": v}));
    }
    Ok(rows)
}

/// Write (once) an `n`-row CSV and stream one epoch of it through `gp svgp` in a child process.
fn stream_epoch(a: &SvgpBenchArgs, n: usize) -> anyhow::Result<Value> {
    std::fs::create_dir_all(&a.stream_dir)?;
    let path = a.stream_dir.join(format!("svgp-{n}.csv"));
    if !path.exists() {
        eprintln!("writing {} ({n} rows)…", path.display());
        let tmp = path.with_extension("csv.partial");
        let mut w = std::io::BufWriter::new(std::fs::File::create(&tmp)?);
        writeln!(w, "x1,x2,x3,x4,y")?;
        let mut r = ChaCha8Rng::seed_from_u64(11);
        for _ in 0..n {
            let x: [f64; 4] = std::array::from_fn(|_| r.random_range(-2.0..2.0));
            let y = x.iter().map(|v| (1.5 * v).sin()).sum::<f64>() + 0.1 * r.random_range(-1.0..1.0);
            writeln!(w, "{:.6},{:.6},{:.6},{:.6},{:.6}", x[0], x[1], x[2], x[3], y)?;
        }
        w.flush()?;
        drop(w);
        std::fs::rename(&tmp, &path)?;
    }
    // The product's `gp svgp`, linked into this binary, in a child process of its own.
    let out = std::process::Command::new(std::env::current_exe()?)
        .args(["bench", "gp-svgp", "--train"])
        .arg(&path)
        .args(["--target", "y", "--epochs", "1", "--json", "--quiet"])
        .args(["--inducing", &a.stream_m.to_string(), "--batch", &a.batch.to_string()])
        .output()
        .context("running gp svgp")?;
    if !out.status.success() {
        anyhow::bail!("gp svgp failed: {}", String::from_utf8_lossy(&out.stderr));
    }
    Ok(serde_json::from_slice(&out.stdout)?)
}
