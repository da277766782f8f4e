//! `dpcotrain-lab bench gp`: speed and memory of the numerical core on this machine
//! (`bench node`, the federation's speed, is in `node.rs`; `bench state` in `state.rs`; `bench svgp` in `svgp.rs`).
//!
//! Reports the best of a few repetitions (setup untimed), GFLOP/s estimated from the dominant
//! dense kernels, the machine's GEMM rate as the practical peak to compare with, and its FMA
//! peak ([`peak`]) as the hardware's bound that no product exceeds. The memory
//! benchmark runs a VFE fit in a child process and reads its peak resident set (VmHWM).

pub mod node;
pub mod peak;
pub mod state;
pub mod svgp;

use clap::{Args, Subcommand};
use dpcotrain_gp::kernels::SquaredExponential;
use dpcotrain_gp::linalg::matmul;
use dpcotrain_gp::train::{SgprStrategy, TrainOptions, train_sparse};
use dpcotrain_gp::{ExactGp, InducingFeatures, Multiscale, NoiseModel, Objective, SparseGp, SparseKind};
use nalgebra::{DMatrix, DVector};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde_json::json;
use std::path::PathBuf;
use std::time::Instant;

#[derive(Debug, Subcommand)]
pub enum BenchCommand {
    /// Time VFE ELBO+gradient, exact LML+gradient and GEMM; measure a large VFE fit's memory.
    Gp(GpBenchArgs),
    /// SVGP: one training step (natural gradient + Adam) against GPflow and GPyTorch
    /// (`--vs python`), and one epoch streamed from a CSV on disk (`--stream-rows`).
    Svgp(svgp::SvgpBenchArgs),
    /// Federation speed: a 100k-row VFE node's Predict latency over gRPC+TLS, and the gRPC
    /// overhead per exchange of a two-party 25-round run.
    Node(node::NodeBenchArgs),
    /// Durable state under a flood of the largest answers: save time and bytes, the node's
    /// append-only log against rewriting the whole state.
    State(state::StateBenchArgs),
    /// (internal) One VFE fit, printing its peak memory as JSON; used by `bench gp --memory`.
    #[command(hide = true)]
    GpMemory(MemoryArgs),
    /// (internal) The product's `gp svgp` in a process of its own (its peak memory is that
    /// process's); used by `bench svgp --stream-rows`.
    #[command(hide = true)]
    GpSvgp(dpcotrain::cli::svgp::SvgpArgs),
}

#[derive(Debug, Args)]
pub struct GpBenchArgs {
    /// Smaller sizes only (N ≤ 1e4, n ≤ 2000): a one-minute smoke run.
    #[arg(long)]
    pub quick: bool,
    /// Also measure the peak memory of a VFE fit with N = 1e6, M = 500 (takes a few minutes).
    #[arg(long)]
    pub memory: bool,
    /// Repetitions per case, for ours and GPflow's alike (the best is reported; at most 3 for
    /// the exact GP at n = 5000 and the one-core GEMM, 5 for the multiscale case at N = 10⁵). This
    /// machine is a shared VM whose timings vary by ±15% between runs, hence best-of-many.
    #[arg(long, default_value_t = 10)]
    pub reps: usize,
    /// Also time GPflow's SGPR ELBO + gradient (θ and Z; compiled tf.function) at the VFE
    /// sizes and numpy's GEMM 2000³, when the `--python` interpreter has them. Both sides get
    /// `--reps` repetitions and report their best, on the same data (written to a file that
    /// GPflow reads); the ratio is shown only when the two ELBOs at the start agree.
    #[arg(long, value_name = "python")]
    pub vs: Option<String>,
    /// The Python interpreter for `--vs python` (e.g. a virtualenv's `bin/python` with GPflow).
    #[arg(long, value_name = "PATH", default_value = "python3")]
    pub python: PathBuf,
    #[arg(long)]
    pub json: bool,
}

/// GPflow's SGPR: the collapsed bound and its gradient in θ, σ² and Z, compiled, on the data
/// `bench gp` wrote (`X.txt` with the target in its last column, `Z.txt`): the same numbers as
/// ours, bit for bit. Prints its best time of R and the ELBO at that point.
const GPFLOW_SGPR: &str = r#"
import json, sys, time, numpy as np
import gpflow, tensorflow as tf
path, R = sys.argv[1], int(sys.argv[2])
gpflow.config.set_default_float(np.float64)
data = np.loadtxt(path + "/X.txt", ndmin=2); Z = np.loadtxt(path + "/Z.txt", ndmin=2)
X, Y = data[:, :-1], data[:, -1:]
D = X.shape[1]
m = gpflow.models.SGPR((X, Y), gpflow.kernels.SquaredExponential(variance=1.0, lengthscales=[0.7] * D), inducing_variable=Z, noise_variance=0.1)
@tf.function
def step():
    with tf.GradientTape() as t:
        loss = m.training_loss()
    return loss, t.gradient(loss, m.trainable_variables)
loss, _ = step()
best = float("inf")
for _ in range(R):
    t0 = time.perf_counter(); step(); best = min(best, time.perf_counter() - t0)
print(json.dumps({"lib": "gpflow " + gpflow.__version__, "seconds": best, "elbo": -float(loss)}))
"#;

/// Relative difference of the two sides' objectives at the start above which `bench gp`
/// shows no speed ratio: a faster evaluation of a different objective is no comparison.
const AGREEMENT: f64 = 1e-9;

/// Write `x`, `y` (as the last column) and `z` with every digit (`{:?}` of an f64 reads back
/// to the same number), for the Python side to read: both sides then evaluate the same data.
fn write_shared(dir: &std::path::Path, x: &DMatrix<f64>, y: &DVector<f64>, z: &DMatrix<f64>) -> std::io::Result<()> {
    use std::io::Write as _;
    std::fs::create_dir_all(dir)?;
    let mut w = std::io::BufWriter::new(std::fs::File::create(dir.join("X.txt"))?);
    for i in 0..x.nrows() {
        for j in 0..x.ncols() {
            write!(w, "{:?} ", x[(i, j)])?;
        }
        writeln!(w, "{:?}", y[i])?;
    }
    w.flush()?;
    let mut w = std::io::BufWriter::new(std::fs::File::create(dir.join("Z.txt"))?);
    for i in 0..z.nrows() {
        let row: Vec<String> = (0..z.ncols()).map(|j| format!("{:?}", z[(i, j)])).collect();
        writeln!(w, "{}", row.join(" "))?;
    }
    w.flush()
}

/// numpy's GEMM 2000³ (its BLAS), the reference rate of the python stack.
const NUMPY_GEMM: &str = r#"
import json, sys, time, numpy as np
R = int(sys.argv[1]); n = 2000
rng = np.random.default_rng(1); a = rng.uniform(-1, 1, (n, n)); b = rng.uniform(-1, 1, (n, n))
a @ b
best = float("inf")
for _ in range(R):
    t0 = time.perf_counter(); a @ b; best = min(best, time.perf_counter() - t0)
print(json.dumps({"lib": "numpy " + np.__version__, "gflops": 2 * n**3 / best / 1e9}))
"#;

/// numpy's BLAS on the VFE step's two products, on its block shapes (as `vfe_products`): per
/// block of `len` rows the Gram product K_fu,bᵀK_fu,b (numpy hands `b.T @ b` to SYRK, which
/// fills both triangles) accumulated into an M×M matrix, and P·K_uf,b.
const NUMPY_PRODUCTS: &str = r#"
import json, sys, time, numpy as np
m, n, length, R = (int(v) for v in sys.argv[1:5])
rng = np.random.default_rng(5)
kfu = rng.random((length, m)); kuf = np.ascontiguousarray(kfu.T)
i = np.arange(m); p = 1.0 / (1.0 + np.abs(i[:, None] - i[None, :]))
out = np.empty((m, length))
def gram():
    s = np.zeros((m, m))
    for start in range(0, n, length):
        b = kfu[:min(length, n - start)]; s += b.T @ b
def pk():
    for start in range(0, n, length):
        w = min(length, n - start)
        if w == length: np.matmul(p, kuf, out=out)
        else: p @ kuf[:, :w]
def best(f):
    b = float("inf")
    for _ in range(R):
        t0 = time.perf_counter(); f(); b = min(b, time.perf_counter() - t0)
    return b
print(json.dumps({"lib": "numpy " + np.__version__, "gram_seconds": best(gram), "pk_seconds": best(pk)}))
"#;

/// LAPACK's Cholesky (dpotrf) and inverse from the factor (dpotri: the same 2n³/3 as ours) at one
/// size, one thread, on an SE kernel matrix of the same shape as ours; with numpy's one-core GEMM
/// 2000³ measured in the same process, so each rate is read against its own library's GEMM.
const LAPACK_SMALL: &str = r#"
import os
for v in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"): os.environ[v] = "1"
import json, sys, time, numpy as np, scipy
from scipy.linalg import lapack
n, R, inner = int(sys.argv[1]), int(sys.argv[2]), 200
def best(f, reps, inner):
    b = float("inf")
    for _ in range(reps):
        t0 = time.perf_counter()
        for _ in range(inner): f()
        b = min(b, (time.perf_counter() - t0) / inner)
    return b
rng = np.random.default_rng(9)
g = 2000; a = rng.uniform(-1, 1, (g, g)); b = rng.uniform(-1, 1, (g, g)); a @ b
gemm = 2 * g**3 / best(lambda: a @ b, min(R, 3), 1) / 1e9
x = rng.uniform(-2, 2, (n, 2))
k = np.asfortranarray(np.exp(-0.5 * (((x[:, None, :] - x[None, :, :]) / 0.7)**2).sum(-1)) + 0.1 * np.eye(n))
l = lapack.dpotrf(k, lower=1)[0]
tc = best(lambda: lapack.dpotrf(k, lower=1, overwrite_a=0), R, inner)
ti = best(lambda: lapack.dpotri(l, lower=1, overwrite_c=0), R, inner)
print(json.dumps({"lib": "scipy " + scipy.__version__ + " LAPACK", "gemm_one_core_gflops": gemm,
                  "cholesky_seconds": tc, "inverse_seconds": ti}))
"#;

#[derive(Debug, Args)]
pub struct MemoryArgs {
    #[arg(long, default_value_t = 1_000_000)]
    pub n: usize,
    #[arg(long, default_value_t = 500)]
    pub m: usize,
    #[arg(long, default_value_t = 4)]
    pub d: usize,
    #[arg(long, default_value_t = 5)]
    pub iters: usize,
}

fn data(n: usize, d: usize, seed: u64) -> (DMatrix<f64>, DVector<f64>) {
    let mut r = ChaCha8Rng::seed_from_u64(seed);
    let x: DMatrix<f64> = DMatrix::from_fn(n, d, |_, _| r.random_range(-2.0..2.0));
    let y = DVector::from_fn(n, |i, _| {
        (0..d).map(|j| (1.5 * x[(i, j)]).sin()).sum::<f64>() + 0.1 * r.random_range(-1.0..1.0)
    });
    (x, y)
}

fn best_of<T>(reps: usize, mut f: impl FnMut() -> T) -> (f64, T) {
    let mut best = f64::INFINITY;
    let mut last = None;
    for _ in 0..reps.max(1) {
        let t = Instant::now();
        let out = f();
        best = best.min(t.elapsed().as_secs_f64());
        last = Some(out);
    }
    (best, last.unwrap())
}

/// Where one exact LML + gradient evaluation's time goes (`ExactGp::evaluate`'s steps, each
/// timed alone): the kernel matrix, its Cholesky (n³/3 flops), the inverse the gradient needs
/// (2n³/3) and the gradient contraction, with the factorisations' rates against one core's GEMM.
fn exact_breakdown(
    gp: &ExactGp,
    reps: usize,
    peak1: f64,
    python: Option<&std::path::Path>,
    say: &dyn Fn(String),
) -> anyhow::Result<Vec<serde_json::Value>> {
    use dpcotrain_gp::linalg::{Cholesky, JitterPolicy};
    let (x, n, inner) = (gp.x(), gp.x().nrows(), 200);
    let per = |f: &mut dyn FnMut()| {
        let (t, ()) = best_of(reps, || (0..inner).for_each(|_| f()));
        t / inner as f64
    };
    let t_kernel = per(&mut || drop(std::hint::black_box(gp.kernel.k(x.as_view(), x.as_view()))));
    let k = gp.kernel.k(x.as_view(), x.as_view());
    let mut ky = k.clone();
    gp.noise.add_to(&mut ky);
    let chol = Cholesky::factor_of(&ky, "bench", JitterPolicy::IF_NEEDED)?;
    // The factorisation reads K + σ²I and writes a new factor, as `ExactGp::evaluate`'s does:
    // no copy of the input is timed.
    let t_chol = per(&mut || drop(std::hint::black_box(Cholesky::factor_of(&ky, "bench", JitterPolicy::IF_NEEDED))));
    // faer's factorisation (the default until D34) on a copy, in the same run: the reference.
    let t_faer = per(&mut || {
        std::hint::black_box(dpcotrain_gp::linalg::faer_factor(&ky));
    });
    let t_inv = per(&mut || drop(std::hint::black_box(chol.inverse_lower())));
    // faer's inverse (the default until D35), in the same run: the reference.
    let t_faer_inv = per(&mut || drop(std::hint::black_box(dpcotrain_gp::linalg::faer_inverse(chol.l()))));
    let g = chol.inverse_lower();
    let t_grad =
        per(&mut || drop(std::hint::black_box(gp.kernel.vjp_sym_given_k(x.as_view(), k.as_view(), g.as_view()))));
    let cube = (n as f64).powi(3);
    let (g_chol, g_inv) = (cube / 3.0 / t_chol / 1e9, 2.0 * cube / 3.0 / t_inv / 1e9);
    say(format!(
        "  n={n}: kernel {:.0} µs, Cholesky {:.0} µs ({g_chol:.1} GFLOP/s = {:.0}% of one core's GEMM; \
         {:.2}× faer's {:.0} µs = {:.0}%), inverse {:.0} µs ({g_inv:.1} GFLOP/s = {:.0}%; {:.2}× faer's {:.0} µs), \
         gradient contraction {:.0} µs",
        t_kernel * 1e6,
        t_chol * 1e6,
        100.0 * g_chol / peak1,
        t_faer / t_chol,
        t_faer * 1e6,
        100.0 * cube / 3.0 / t_faer / 1e9 / peak1,
        t_inv * 1e6,
        100.0 * g_inv / peak1,
        t_faer_inv / t_inv,
        t_faer_inv * 1e6,
        t_grad * 1e6
    ));
    let mut rows = vec![
        json!({"case": "exact_breakdown", "n": n, "kernel_seconds": t_kernel, "cholesky_seconds": t_chol,
                   "cholesky_gflops": g_chol, "faer_cholesky_seconds": t_faer, "inverse_seconds": t_inv, "faer_inverse_seconds": t_faer_inv, "inverse_gflops": g_inv,
                   "gradient_seconds": t_grad, "one_core_gemm_gflops": peak1}),
    ];
    // The same two factorisations by LAPACK (numpy's BLAS, one thread): what a tuned library
    // reaches at this size on this machine, each against its own one-core GEMM.
    if let Some(py) = python {
        match svgp::python(py, LAPACK_SMALL, &[n.to_string(), reps.to_string()]) {
            Ok(v) => {
                let lib = v["lib"].as_str().unwrap_or("LAPACK");
                let (tc, ti) = (
                    v["cholesky_seconds"].as_f64().unwrap_or(f64::NAN),
                    v["inverse_seconds"].as_f64().unwrap_or(f64::NAN),
                );
                let g1 = v["gemm_one_core_gflops"].as_f64().unwrap_or(f64::NAN);
                let (lc, li) = (cube / 3.0 / tc / 1e9, 2.0 * cube / 3.0 / ti / 1e9);
                say(format!(
                    "  n={n} by {lib} (one thread): Cholesky {:.0} µs ({lc:.1} GFLOP/s = {:.0}% of its one-core GEMM {g1:.1}), \
                     inverse {:.0} µs ({li:.1} GFLOP/s = {:.0}%); dpcotrain is {:.2}× and {:.2}× as fast",
                    tc * 1e6,
                    100.0 * lc / g1,
                    ti * 1e6,
                    100.0 * li / g1,
                    tc / t_chol,
                    ti / t_inv
                ));
                rows.push(json!({"case": "exact_breakdown", "lib": lib, "n": n, "cholesky_seconds": tc,
                                 "cholesky_gflops": lc, "inverse_seconds": ti, "inverse_gflops": li,
                                 "one_core_gemm_gflops": g1}));
            }
            Err(e) => say(format!("  LAPACK: not measured ({e})")),
        }
    }
    Ok(rows)
}

/// Columns per block of the VFE step's passes over K_uf (`dpcotrain_gp::sparse::block_entries()`
/// entries per block), as the step itself takes them.
fn vfe_block(m: usize, n: usize) -> usize {
    (dpcotrain_gp::sparse::block_entries() / m.max(1)).clamp(1, n.max(1))
}

/// Seconds (best of `reps`) for the VFE step's two O(NM²) products alone, on its block shapes
/// (`dpcotrain_gp::sparse::block_entries()` entries per block): per block the Gram product
/// K_fu,bᵀK_fu,b accumulated into the lower triangle of an M×M matrix (M²·len flops) and
/// P·K_uf,b (2M²·len), on random data, no kernel evaluation and no contraction. Returns the
/// two together, then the Gram products alone and the P·K_uf products alone.
fn vfe_products(m: usize, n: usize, reps: usize) -> (f64, f64, f64) {
    use dpcotrain_gp::linalg::{ata_acc, gemm};
    let len = vfe_block(m, n);
    let mut r = ChaCha8Rng::seed_from_u64(5);
    let kfu = DMatrix::from_fn(len, m, |_, _| r.random_range(0.0..1.0));
    let kuf = kfu.transpose();
    let p = DMatrix::from_fn(m, m, |i, j| 1.0 / (1.0 + i.abs_diff(j) as f64));
    let (mut gram, mut out) = (DMatrix::<f64>::zeros(m, m), DMatrix::<f64>::zeros(m, len));
    let mut pass = |with_gram: bool, with_pk: bool| {
        for (i, start) in (0..n).step_by(len).enumerate() {
            let w = len.min(n - start);
            if with_gram {
                ata_acc(kfu.rows(0, w), &mut gram, 1.0, i > 0);
            }
            if !with_pk {
                continue;
            }
            if w == len {
                gemm(&mut out, 1.0, p.as_view(), false, kuf.as_view(), false, false);
            } else {
                let mut last = DMatrix::<f64>::zeros(m, w);
                gemm(&mut last, 1.0, p.as_view(), false, kuf.columns(0, w), false, false);
                std::hint::black_box(&last);
            }
        }
        std::hint::black_box((&gram, &out));
    };
    let (both, _) = best_of(reps, || pass(true, true));
    let (gram_only, _) = best_of(reps, || pass(true, false));
    let (pk_only, _) = best_of(reps, || pass(false, true));
    (both, gram_only, pk_only)
}

/// Seconds (best of `reps`) to evaluate K(Z, X) once, in the VFE step's column blocks, into a
/// reused buffer.
fn kuf_pass(kernel: &dyn dpcotrain_gp::Kernel, z: &DMatrix<f64>, x: &DMatrix<f64>, reps: usize) -> f64 {
    let (m, n) = (z.nrows(), x.nrows());
    let len = vfe_block(m, n);
    let mut buf = DMatrix::<f64>::zeros(m, len);
    let (t, _) = best_of(reps, || {
        for start in (0..n).step_by(len) {
            let w = len.min(n - start);
            if w == len {
                kernel.k_into(z.as_view(), x.rows(start, w), &mut buf);
            } else {
                std::hint::black_box(kernel.k(z.as_view(), x.rows(start, w)));
            }
            std::hint::black_box(&buf);
        }
    });
    t
}

fn gemm_peak(reps: usize) -> f64 {
    let n = 2000;
    let mut r = ChaCha8Rng::seed_from_u64(1);
    let a = DMatrix::from_fn(n, n, |_, _| r.random_range(-1.0..1.0));
    let b = DMatrix::from_fn(n, n, |_, _| r.random_range(-1.0..1.0));
    let (t, c) = best_of(reps, || matmul(a.as_view(), false, b.as_view(), false));
    std::hint::black_box(c);
    2.0 * (n as f64).powi(3) / t / 1e9
}

pub fn run(cmd: BenchCommand) -> anyhow::Result<()> {
    match cmd {
        BenchCommand::Gp(a) => run_gp(a),
        BenchCommand::GpMemory(a) => run_memory(a),
        BenchCommand::GpSvgp(a) => dpcotrain::cli::svgp::run(a),
        BenchCommand::Svgp(a) => svgp::run(a),
        BenchCommand::State(a) => state::run(a),
        BenchCommand::Node(a) => {
            tokio::runtime::Builder::new_multi_thread().enable_all().build()?.block_on(node::run(a))
        }
    }
}

fn run_gp(a: GpBenchArgs) -> anyhow::Result<()> {
    let mut rows = Vec::new();
    let say = |s: String| {
        if !a.json {
            println!("{s}");
        }
    };
    if let Some(v) = &a.vs
        && v != "python"
    {
        anyhow::bail!("--vs {v:?}: the only comparison is python (GPflow and numpy)");
    }
    let peak = gemm_peak(a.reps);
    say(format!("GEMM 2000³ (faer, all cores): {peak:.1} GFLOP/s  ← the machine's practical peak"));
    rows.push(json!({"case": "gemm", "n": 2000, "gflops": peak}));
    // The best GEMM rate measured in this run (faer's, or numpy's when it is faster): what the
    // VFE step's share is of, and its floor.
    let mut best_gemm = peak;
    if a.vs.is_some() {
        match svgp::python(&a.python, NUMPY_GEMM, &[a.reps.to_string()]) {
            Ok(v) => {
                let g = v["gflops"].as_f64().unwrap_or(0.0);
                say(format!("GEMM 2000³ ({}): {g:.1} GFLOP/s", v["lib"].as_str().unwrap_or("numpy")));
                rows.push(json!({"case": "gemm", "lib": v["lib"], "n": 2000, "gflops": g}));
                best_gemm = best_gemm.max(g);
            }
            Err(e) => say(format!("numpy: not measured ({e})")),
        }
    }

    // The FMA peak: what no product on this machine can exceed, of which the best GEMM is a share.
    let fma = peak::measure(a.reps.min(3));
    match fma {
        Some(p) => {
            say(format!(
                "FMA peak ({}, {} threads): {:.1} GFLOP/s, one core {:.1}  ← the hardware's bound; the best GEMM is {:.0}% of it",
                p.isa,
                p.threads,
                p.gflops,
                p.one_core_gflops,
                100.0 * best_gemm / p.gflops
            ));
            // A busy machine lowers the peak, and every bound drawn from it with it.
            let suspect = best_gemm > p.gflops || (p.threads > 1 && p.gflops < 1.5 * p.one_core_gflops);
            if suspect {
                eprintln!(
                    "warning: the FMA peak reads low (below the best GEMM, or all threads under 1.5× one): \
                     is something else running? Bounds computed from it are too small."
                );
            }
            rows.push(json!({"case": "fma_peak", "isa": p.isa, "threads": p.threads, "gflops": p.gflops,
                             "one_core_gflops": p.one_core_gflops,
                             "best_gemm_share_of_peak": best_gemm / p.gflops, "suspect": suspect}));
        }
        None => say("FMA peak: not measured (no AVX2+FMA or AVX-512F on this CPU)".into()),
    }

    let ns: &[usize] = if a.quick { &[10_000] } else { &[10_000, 100_000] };
    for &n in ns {
        for &m in &[100usize, 500] {
            for &d in &[1usize, 4] {
                let (x, y) = data(n, d, 7);
                let mut r = ChaCha8Rng::seed_from_u64(3);
                let z = DMatrix::from_fn(m, d, |_, _| r.random_range(-2.0..2.0));
                let k = SquaredExponential::ard(1.0, vec![0.7; d]);
                let shared = (a.vs.is_some() && m == 500 && d == 4).then(|| (x.clone(), y.clone(), z.clone()));
                let mut gp = SparseGp::new(SparseKind::Vfe, Box::new(k), NoiseModel::homoscedastic(0.1), x, y, z)?;
                gp.optimize_inducing = true;
                // Every VFE case gets all `--reps`, also the ≈ 1 s N = 10⁵, M = 500 step: on this
                // shared VM a best of 3 varied by ±15% between runs of one binary
                // (docs/results.md "The VFE step").
                let reps = a.reps;
                let (t, e) = best_of(reps, || gp.evaluate());
                let e = e?;
                // Dominant flops (crates/gp/src/sparse/collapsed.rs): the SYRK K_uf K_ufᵀ
                // (lower triangle, M²N) and the GEMM P·K_uf for ∂/∂K_uf (2M²N); no M×N TRSM.
                let flops = 3.0 * (m * m) as f64 * n as f64;
                say(format!(
                    "VFE ELBO+grad (θ and Z)  N={n:>6} M={m:>3} D={d}: {t:>8.3} s  {:>6.1} GFLOP/s = {:>3.0}% of faer's GEMM, {:>3.0}% of the best  (ELBO {:.3})",
                    flops / t / 1e9,
                    100.0 * flops / t / 1e9 / peak,
                    100.0 * flops / t / 1e9 / best_gemm,
                    e.value
                ));
                rows.push(json!({"case": "vfe_elbo_grad", "n": n, "m": m, "d": d, "seconds": t,
                                 "gflops": flops / t / 1e9, "share_of_gemm": flops / t / 1e9 / peak,
                                 "share_of_best_gemm": flops / t / 1e9 / best_gemm}));
                if n == 100_000 && m == 500 && d == 4 {
                    // The step's two O(NM²) products alone, on its own block shapes: the part of
                    // the step no kernel work can shorten.
                    let (tp, t_gram, t_pk) = vfe_products(m, n, reps);
                    // Share of the best GEMM rate of `f` flops in `secs` seconds.
                    let share = |f: f64, secs: f64| f / secs / 1e9 / best_gemm;
                    say(format!(
                        "  its two products alone (Gram K_fuᵀK_fu, P·K_uf; {}-column blocks): {tp:.3} s = {:.0}% of the best GEMM; the rest of the step {:.3} s",
                        vfe_block(m, n),
                        100.0 * share(flops, tp),
                        t - tp
                    ));
                    let (f_gram, f_pk) = (flops / 3.0, 2.0 * flops / 3.0);
                    say(format!(
                        "    the Gram products {t_gram:.3} s ({:.1} GFLOP/s = {:.0}% of the best GEMM), P·K_uf {t_pk:.3} s ({:.1} GFLOP/s = {:.0}%)",
                        f_gram / t_gram / 1e9,
                        100.0 * share(f_gram, t_gram),
                        f_pk / t_pk / 1e9,
                        100.0 * share(f_pk, t_pk)
                    ));
                    if a.vs.is_some() {
                        let len = vfe_block(m, n).to_string();
                        match svgp::python(
                            &a.python,
                            NUMPY_PRODUCTS,
                            &[m.to_string(), n.to_string(), len, reps.to_string()],
                        ) {
                            Ok(v) => {
                                let (g, p) = (
                                    v["gram_seconds"].as_f64().unwrap_or(f64::NAN),
                                    v["pk_seconds"].as_f64().unwrap_or(f64::NAN),
                                );
                                let lib = v["lib"].as_str().unwrap_or("numpy");
                                say(format!(
                                    "    the same by {lib}: the Gram products {g:.3} s ({:.0}% of the best GEMM), P·K_uf {p:.3} s ({:.0}%)",
                                    100.0 * share(f_gram, g),
                                    100.0 * share(f_pk, p)
                                ));
                                rows.push(json!({"case": "vfe_products_alone", "lib": lib, "n": n, "m": m,
                                                 "gram_seconds": g, "pk_seconds": p,
                                                 "gram_share_of_best_gemm": share(f_gram, g),
                                                 "pk_share_of_best_gemm": share(f_pk, p)}));
                            }
                            Err(e) => say(format!("    numpy on these products: not measured ({e})")),
                        }
                    }
                    // One evaluation of K_uf (N·M exponentials), which any step needs at least
                    // once: with the products, a floor for this step on this machine.
                    let tk = kuf_pass(gp.kernel.as_ref(), gp.z(), gp.x(), reps);
                    say(format!(
                        "  one pass evaluating K_uf: {tk:.3} s; products + one pass = {:.3} s = {:.0}% of the best GEMM at most",
                        tp + tk,
                        100.0 * share(flops, tp + tk)
                    ));
                    // What 90% of the best GEMM rate allows the step, and what the step's two
                    // K_uf passes leave of it even if both products ran at that best rate.
                    let budget = flops / (0.9 * best_gemm * 1e9);
                    let ideal = flops / (best_gemm * 1e9);
                    say(format!(
                        "  90% of the best GEMM rate allows the step {budget:.3} s; the products at the best rate take {ideal:.3} s and two K_uf passes {:.3} s, \
                         so a step that evaluates K_uf twice reaches {:.1}% at most, with no time for the contraction and the M×M work",
                        2.0 * tk,
                        100.0 * ideal / (ideal + 2.0 * tk)
                    ));
                    if let Some(p) = fma {
                        say(format!(
                            "  that budget is {:.0}% of the FMA peak for the whole step; the step runs at {:.0}% of it",
                            100.0 * 0.9 * best_gemm / p.gflops,
                            100.0 * flops / t / 1e9 / p.gflops
                        ));
                    }
                    rows.push(json!({"case": "vfe_products_alone", "n": n, "m": m, "seconds": tp,
                                     "gram_seconds": t_gram, "pk_seconds": t_pk,
                                     "gram_share_of_best_gemm": share(f_gram, t_gram),
                                     "pk_share_of_best_gemm": share(f_pk, t_pk),
                                     "share_of_best_gemm": share(flops, tp),
                                     "kuf_pass_seconds": tk,
                                     "floor_share_of_best_gemm": share(flops, tp + tk),
                                     "budget_at_90_seconds": budget,
                                     "two_passes_at_best_gemm_share": ideal / (ideal + 2.0 * tk),
                                     "step_share_of_fma_peak": fma.map(|p| flops / t / 1e9 / p.gflops)}));
                }
                // GPflow on the same data (written to a file it reads), with as many repetitions
                // and the same best-of rule as ours: like with like.
                if let Some((x, y, z)) = shared {
                    let dir = std::env::temp_dir().join(format!("dpcotrain-bench-gp-{}", std::process::id()));
                    write_shared(&dir, &x, &y, &z)?;
                    let r = svgp::python(&a.python, GPFLOW_SGPR, &[dir.display().to_string(), reps.to_string()]);
                    std::fs::remove_dir_all(&dir).ok();
                    match r {
                        Ok(v) => {
                            let theirs = v["seconds"].as_f64().unwrap_or(f64::NAN);
                            let lib = v["lib"].as_str().unwrap_or("gpflow");
                            let elbo = v["elbo"].as_f64().unwrap_or(f64::NAN);
                            let rel = (elbo - e.value).abs() / e.value.abs();
                            say(format!(
                                "  objective at the start: dpcotrain {:.9}, {lib} {elbo:.9}, relative difference {rel:.1e}",
                                e.value
                            ));
                            let agree = rel <= AGREEMENT;
                            // The 3M²N flops at the best GEMM rate measured: no step that does
                            // them is faster, so no ratio to GPflow above this is possible here.
                            let floor = flops / (best_gemm * 1e9);
                            if agree {
                                say(format!(
                                    "VFE ELBO+grad (θ and Z)  N={n:>6} M={m:>3} D={d}: {theirs:>8.3} s  ({lib}; dpcotrain {t:.3} s is {:.2}× faster, best of {reps} each)",
                                    theirs / t
                                ));
                                say(format!(
                                    "  floor: its 3M²N flops at the best GEMM rate take {floor:.3} s, so at most {:.2}× {lib} on this machine",
                                    theirs / floor
                                ));
                                if let Some(p) = fma {
                                    say(format!(
                                        "  and at the FMA peak {:.3} s: no code doing these flops is more than {:.2}× {lib} on this hardware",
                                        flops / (p.gflops * 1e9),
                                        theirs * p.gflops * 1e9 / flops
                                    ));
                                }
                            } else {
                                say(format!(
                                    "VFE ELBO+grad (θ and Z)  N={n:>6} M={m:>3} D={d}: {theirs:>8.3} s  ({lib}; no ratio: the objectives differ by {rel:.1e} > {AGREEMENT:e})"
                                ));
                            }
                            rows.push(json!({"case": "vfe_elbo_grad", "lib": lib, "n": n, "m": m, "d": d,
                                             "seconds": theirs, "reps": reps, "elbo": elbo, "dpcotrain_elbo": e.value,
                                             "relative_difference": rel,
                                             "floor_seconds": floor, "max_ratio_at_best_gemm": theirs / floor,
                                             "max_ratio_at_fma_peak": fma.map(|p| theirs * p.gflops * 1e9 / flops),
                                             "ratio_to_dpcotrain": if agree { json!(theirs / t) } else { json!(null) }}));
                        }
                        Err(e) => say(format!("gpflow: not measured ({e})")),
                    }
                }
            }
        }
    }
    // Walder et al.'s multiscale features against ordinary inducing points, same size, A B A B.
    for &n in ns {
        let (m, d) = (100usize, 4usize);
        let (x, y) = data(n, d, 7);
        let mut r = ChaCha8Rng::seed_from_u64(3);
        let z = DMatrix::from_fn(m, d, |_, _| r.random_range(-2.0..2.0));
        let k = SquaredExponential::ard(1.0, vec![0.7; d]);
        let mut ordinary = SparseGp::new(SparseKind::Vfe, Box::new(k), NoiseModel::homoscedastic(0.1), x, y, z)?;
        ordinary.optimize_inducing = true;
        let mut multiscale = ordinary.clone();
        let widths = DMatrix::from_fn(m, d, |_, _| r.random_range(0.8..2.0));
        multiscale.set_features(InducingFeatures::Multiscale(Multiscale::from_relative(&widths)?))?;
        let reps = if n >= 100_000 { a.reps.min(5) } else { a.reps };
        let (mut ta, mut tb) = (f64::INFINITY, f64::INFINITY);
        for _ in 0..2 {
            ta = ta.min(best_of(reps, || ordinary.evaluate()).0);
            tb = tb.min(best_of(reps, || multiscale.evaluate()).0);
        }
        multiscale.evaluate()?;
        say(format!(
            "VFE ELBO+grad multiscale N={n:>6} M={m:>3} D={d}: {tb:>8.3} s  vs ordinary {ta:.3} s: {:.2}× (A B A B, best of {reps} each)",
            tb / ta
        ));
        rows.push(json!({"case": "vfe_multiscale_vs_ordinary", "n": n, "m": m, "d": d, "seconds": tb, "ordinary_seconds": ta, "ratio": tb / ta}));
    }
    // The co-training grid's re-fits evaluate the exact LML + gradient at n ≈ 25–250, one run
    // per core: compare with one core's GEMM rate.
    let single = rayon::ThreadPoolBuilder::new().num_threads(1).build()?;
    let peak1 = single.install(|| gemm_peak(a.reps.min(3)));
    say(format!(
        "GEMM 2000³ (faer, one core): {peak1:.1} GFLOP/s  ← one core's practical peak{}",
        fma.map_or(String::new(), |p| format!(" ({:.0}% of one core's FMA peak)", 100.0 * peak1 / p.one_core_gflops))
    ));
    rows.push(json!({"case": "gemm_one_core", "n": 2000, "gflops": peak1,
                     "share_of_one_core_fma_peak": fma.map(|p| peak1 / p.one_core_gflops)}));
    for n in [25usize, 100, 225] {
        let (x, y) = data(n, 2, 9);
        let gp =
            ExactGp::new(Box::new(SquaredExponential::ard(1.0, vec![0.7; 2])), NoiseModel::homoscedastic(0.1), x, y)?;
        let inner = 200;
        let (t, r) =
            best_of(a.reps, || (0..inner).try_for_each(|_| gp.evaluate().map(|e| drop(std::hint::black_box(e)))));
        r?;
        let per = t / inner as f64;
        say(format!(
            "exact LML+grad           n={n:>6}            : {:>8.1} µs per evaluation (best of {} × {inner})",
            per * 1e6,
            a.reps
        ));
        rows.push(json!({"case": "exact_lml_grad_small", "n": n, "seconds": per}));
        if n == 225 {
            let python = a.vs.is_some().then_some(a.python.as_path());
            rows.extend(exact_breakdown(&gp, a.reps, peak1, python, &say)?);
        }
    }
    let exact_ns: &[usize] = if a.quick { &[2000] } else { &[2000, 5000] };
    for &n in exact_ns {
        let (x, y) = data(n, 4, 9);
        let gp =
            ExactGp::new(Box::new(SquaredExponential::ard(1.0, vec![0.7; 4])), NoiseModel::homoscedastic(0.1), x, y)?;
        let (t, e) = best_of(if n > 3000 { a.reps.min(3) } else { a.reps }, || gp.evaluate());
        let e = e?;
        // Cholesky n³/3, inverse (TRSM n³/3 + triangular product n³/3).
        let flops = (n as f64).powi(3);
        say(format!(
            "exact LML+grad           n={n:>6}            : {t:>8.3} s  {:>6.1} GFLOP/s  (LML {:.3})",
            flops / t / 1e9,
            e.value
        ));
        rows.push(json!({"case": "exact_lml_grad", "n": n, "seconds": t, "gflops": flops / t / 1e9}));
    }
    // SVGP: one training step at M = 500, minibatch 1,000 (and GPflow's and GPyTorch's with --vs).
    rows.extend(svgp::measure(&svgp::SvgpBenchArgs {
        n: if a.quick { 10_000 } else { 100_000 },
        m: 500,
        batch: 1000,
        d: 4,
        steps: if a.quick { 5 } else { 30 },
        vs: a.vs.clone(),
        python: a.python.clone(),
        stream_rows: None,
        stream_dir: PathBuf::new(),
        stream_m: 100,
        json: a.json,
    })?);
    if a.memory {
        say("VFE fit N=1e6, M=500, D=4 in a child process (a few minutes)…".into());
        let exe = std::env::current_exe()?;
        let out = std::process::Command::new(exe).args(["bench", "gp-memory"]).output()?;
        if !out.status.success() {
            anyhow::bail!("memory benchmark child failed: {}", String::from_utf8_lossy(&out.stderr));
        }
        let v: serde_json::Value = serde_json::from_slice(&out.stdout)?;
        say(format!(
            "VFE fit N=1e6 M=500: peak RSS {:.2} GiB, {:.1} s for {} L-BFGS iterations",
            v["peak_rss_bytes"].as_f64().unwrap_or(0.0) / (1u64 << 30) as f64,
            v["seconds"].as_f64().unwrap_or(0.0),
            v["iterations"]
        ));
        rows.push(v);
    }
    if a.json {
        println!("{}", serde_json::to_string_pretty(&rows)?);
    }
    Ok(())
}

fn run_memory(a: MemoryArgs) -> anyhow::Result<()> {
    let (x, y) = data(a.n, a.d, 11);
    let z = dpcotrain_gp::inducing::random_subset(&x, a.m, 1)?;
    let k = SquaredExponential::ard(1.0, vec![0.7; a.d]);
    let mut gp = SparseGp::new(SparseKind::Vfe, Box::new(k), NoiseModel::homoscedastic(0.1), x, y, z)?;
    let t = Instant::now();
    let opts = TrainOptions { max_iters: a.iters, ..Default::default() };
    let r = train_sparse(&mut gp, SgprStrategy::FixedZ, &opts)?;
    let secs = t.elapsed().as_secs_f64();
    println!(
        "{}",
        json!({"case": "vfe_fit_memory", "n": a.n, "m": a.m, "d": a.d, "iterations": r.iterations,
               "seconds": secs, "objective": r.objective, "peak_rss_bytes": dpcotrain::process::peak_rss_bytes()})
    );
    Ok(())
}
