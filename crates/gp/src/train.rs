//! Hyperparameter learning: bounded L-BFGS on the log-parameters (maximising the objective),
//! with warm start and seeded random restarts; and the SGPR strategies of Hughes-Hallett §3.1.2
//! (Hughes-Hallett 2022 §3.1.2; docs/decisions.md D22): fixed Z, joint, reinitialise, reinitialise-retrain.
//!
//! A failed evaluation (e.g. a Cholesky failure after the whole jitter ladder) is treated by the
//! optimiser as "step too long"; if the starting point itself fails, sparse models re-select Z
//! by greedy variance and retry (RobustGP's remedy), and otherwise a typed error is returned.

use crate::inducing::greedy_variance;
use crate::optimize::{Curvature, LbfgsOptions, Termination, minimize_from};
use crate::sparse::SparseGp;
use crate::{GpError, Jitter, Objective};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha20Rng;

/// Options for [`train`].
#[derive(Debug, Clone)]
pub struct TrainOptions {
    /// L-BFGS iterations per run.
    pub max_iters: usize,
    /// Extra runs from random starting points (0 = only the warm start).
    pub restarts: usize,
    /// Seed for restarts and inducing re-selection.
    pub seed: u64,
    /// Half-width (in log units) of the box around the warm start from which restarts draw.
    pub restart_spread: f64,
    /// L-BFGS stopping tolerances: relative objective reduction and projected-gradient norm.
    pub ftol: f64,
    pub pgtol: f64,
    /// Called after every accepted optimiser iteration (e.g. to show progress on long fits).
    pub progress: Option<ProgressHook>,
}

impl Default for TrainOptions {
    fn default() -> Self {
        TrainOptions {
            max_iters: 200,
            restarts: 0,
            seed: 0,
            restart_spread: 1.5,
            ftol: 1e-10,
            pgtol: 1e-6,
            progress: None,
        }
    }
}

/// Where training stands after an accepted L-BFGS iteration.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct TrainProgress {
    /// Iteration within the current optimiser run (1-based).
    pub iteration: usize,
    /// Objective at the current point (higher is better).
    pub objective: f64,
}

/// A progress callback shared by clones of [`TrainOptions`].
#[derive(Clone)]
pub struct ProgressHook(pub std::sync::Arc<dyn Fn(TrainProgress) + Send + Sync>);

impl std::fmt::Debug for ProgressHook {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ProgressHook")
    }
}

/// What training did.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct TrainReport {
    /// Objective at the returned parameters (higher is better).
    pub objective: f64,
    pub iterations: usize,
    pub evaluations: usize,
    pub failed_evaluations: usize,
    /// How the winning optimiser run ended (`Converged(ProjectedGradient)`,
    /// `Converged(RelativeReduction)`, `MaxIterations`, `LineSearchFailed`, …).
    pub termination: String,
    /// `‖P(x − g) − x‖∞` of the winning run at its returned point, in the optimiser's
    /// (log-)parameters: how close to a KKT point it stopped.
    pub projected_gradient_norm: f64,
    /// Steps the winning run accepted under Hager & Zhang's approximate Wolfe conditions
    /// (`optimize` module docs, step 4): nonzero when f's round-off hid its decrease.
    pub approximate_steps: usize,
    /// Objective of each run (warm start first), for restarts.
    pub run_objectives: Vec<f64>,
    /// Inducing re-selections accepted / rejected (sparse strategies only).
    pub reinit_accepted: usize,
    pub reinit_rejected: usize,
    #[serde(skip)]
    pub jitter: Jitter,
    /// The L-BFGS curvature the winning run ended with: pass it to [`train_from`] when the
    /// same model is re-fitted after a small change to its data.
    #[serde(skip)]
    pub curvature: Curvature,
}

struct RunOutcome {
    x: Vec<f64>,
    f: f64,
    /// Jitter of the evaluation at `x` (the optimiser returns an evaluated point).
    jitter: Option<Jitter>,
    iterations: usize,
    evaluations: usize,
    failed: usize,
    termination: String,
    projected_gradient_norm: f64,
    approximate_steps: usize,
    curvature: Curvature,
}

/// One bounded L-BFGS run from the model's current parameters; leaves the best point found in
/// the model.
fn run_once<M: Objective>(
    model: &mut M,
    max_iters: usize,
    tol: (f64, f64),
    progress: Option<&ProgressHook>,
    curvature: &Curvature,
) -> Result<RunOutcome, GpError> {
    let x0 = model.params();
    let bounds = model.bounds();
    let lower: Vec<f64> = bounds.iter().map(|b| b.lower).collect();
    let upper: Vec<f64> = bounds.iter().map(|b| b.upper).collect();
    let opts = LbfgsOptions { max_iters, ftol: tol.0, pgtol: tol.1, ..LbfgsOptions::default() };
    // The jitter of every successful evaluation, so that the caller need not re-evaluate the
    // returned point (which is always one of them) to learn it.
    let mut jitters: Vec<(Vec<f64>, Jitter)> = Vec::new();
    // The model's own error of the first failed evaluation (the optimiser keeps only its text).
    let mut first_failure: Option<GpError> = None;
    let res = {
        let f = |p: &[f64]| {
            model.set_params(p);
            match model.evaluate() {
                Ok(e) => {
                    jitters.push((p.to_vec(), e.jitter));
                    Ok((-e.value, e.grad.iter().map(|g| -g).collect()))
                }
                Err(err) => {
                    let text = err.to_string();
                    first_failure.get_or_insert(err);
                    Err(text)
                }
            }
        };
        minimize_from(f, &x0, &lower, &upper, &opts, curvature, |iteration, _, f| {
            if let Some(h) = progress {
                (h.0)(TrainProgress { iteration, objective: -f });
            }
            true
        })
    };
    let res = res?;
    if let Termination::InitialEvaluationFailed(msg) = &res.termination {
        model.set_params(&x0);
        return Err(match first_failure {
            Some(e) => GpError::StartFailed(Box::new(e)),
            // The optimiser refused the point itself; its termination says why only in words.
            None => GpError::StartRejected { reason: msg.clone() },
        });
    }
    model.set_params(&res.x);
    let jitter = jitters.iter().rev().find(|(p, _)| *p == res.x).map(|(_, j)| *j);
    Ok(RunOutcome {
        jitter,
        x: res.x,
        f: -res.f,
        iterations: res.iterations,
        evaluations: res.evaluations,
        failed: res.failed_evaluations,
        termination: format!("{:?}", res.termination),
        projected_gradient_norm: res.projected_gradient_norm,
        approximate_steps: res.approximate_steps,
        curvature: res.curvature,
    })
}

/// Maximise the model's objective: a warm-start run from the current parameters, then
/// `restarts` runs from seeded random points around it; the best run wins.
pub fn train<M: Objective>(model: &mut M, opts: &TrainOptions) -> Result<TrainReport, GpError> {
    train_from(model, opts, &Curvature::default())
}

/// [`train`] whose warm-start run begins with the L-BFGS curvature of an earlier fit
/// ([`TrainReport::curvature`]) instead of an empty memory: for re-fits after a small change
/// to the data (co-training's D5 re-fit after each answer), where the previous inverse-Hessian
/// model makes the first step a quasi-Newton step (`optimize` module docs, "Warm starts").
/// Random restarts start with an empty memory, as in [`train`].
pub fn train_from<M: Objective>(
    model: &mut M,
    opts: &TrainOptions,
    curvature: &Curvature,
) -> Result<TrainReport, GpError> {
    let start = model.params();
    let bounds = model.bounds();
    let mut rng = ChaCha20Rng::seed_from_u64(opts.seed);
    let mut best: Option<RunOutcome> = None;
    let mut runs = Vec::new();
    let mut totals = (0usize, 0usize, 0usize);
    let mut first_err = None;
    for r in 0..=opts.restarts {
        let x0: Vec<f64> = if r == 0 {
            start.clone()
        } else {
            start
                .iter()
                .zip(&bounds)
                .map(|(x, b)| {
                    if b.lower.is_finite() || b.upper.is_finite() {
                        let lo = (x - opts.restart_spread).max(b.lower);
                        let hi = (x + opts.restart_spread).min(b.upper);
                        if hi > lo { rng.random_range(lo..hi) } else { *x }
                    } else {
                        *x // unbounded coordinates (inducing inputs) keep the warm start
                    }
                })
                .collect()
        };
        model.set_params(&x0);
        let memory = if r == 0 { curvature.clone() } else { Curvature::default() };
        match run_once(model, opts.max_iters, (opts.ftol, opts.pgtol), opts.progress.as_ref(), &memory) {
            Ok(out) => {
                totals.0 += out.iterations;
                totals.1 += out.evaluations;
                totals.2 += out.failed;
                runs.push(out.f);
                if best.as_ref().is_none_or(|b| out.f > b.f) {
                    best = Some(out);
                }
            }
            Err(e) => {
                runs.push(f64::NAN);
                first_err.get_or_insert(e);
            }
        }
    }
    let best = match best {
        Some(b) => b,
        None => {
            model.set_params(&start);
            return Err(first_err.unwrap_or(GpError::NoRunSucceeded));
        }
    };
    model.set_params(&best.x);
    // The best point was evaluated during its run: its value is `best.f` (the optimiser only
    // negated it) and its jitter was recorded, so no re-evaluation is needed.
    let (objective, jitter) = match best.jitter {
        Some(j) => (best.f, j),
        None => {
            let eval = model.evaluate()?;
            (eval.value, eval.jitter)
        }
    };
    Ok(TrainReport {
        objective,
        iterations: totals.0,
        evaluations: totals.1,
        failed_evaluations: totals.2,
        termination: best.termination,
        projected_gradient_norm: best.projected_gradient_norm,
        approximate_steps: best.approximate_steps,
        run_objectives: runs,
        reinit_accepted: 0,
        reinit_rejected: 0,
        jitter,
        curvature: best.curvature,
    })
}

/// How to treat the inducing inputs while training a sparse model [Hughes-Hallett §3.1.2].
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum SgprStrategy {
    /// Train hyperparameters only; Z stays where it is.
    FixedZ,
    /// Optimise hyperparameters and Z together.
    Joint,
    /// Train hyperparameters, re-select Z by greedy variance every `every` iterations; a
    /// re-selection that lowers the objective is undone; after `max_worse` such, run `tail`
    /// more iterations and stop.
    Reinit { every: usize, max_worse: usize, tail: usize },
    /// As `Reinit`, but the first worse re-selection switches to joint optimisation of θ and Z
    /// for the tail (best overall in Hughes-Hallett).
    ReinitRetrain { every: usize, max_worse: usize, tail: usize },
}

impl SgprStrategy {
    pub const REINIT: SgprStrategy = SgprStrategy::Reinit { every: 25, max_worse: 10, tail: 100 };
    pub const REINIT_RETRAIN: SgprStrategy = SgprStrategy::ReinitRetrain { every: 25, max_worse: 10, tail: 100 };
}

/// Re-select Z by greedy variance with the model's current kernel, keeping M.
fn reselect(gp: &mut SparseGp, seed: u64) -> Result<(), GpError> {
    let m = gp.z().nrows();
    let sel = greedy_variance(gp.kernel.as_ref(), gp.x(), m, 0.0, seed)?;
    // Greedy may stop early when residuals vanish (M close to N); keep the old Z then.
    if sel.indices.len() == m {
        gp.set_z(sel.z)?;
    }
    Ok(())
}

/// Train a sparse model with an inducing-input strategy. `opts.max_iters` bounds the total
/// number of hyperparameter iterations of the reinitialisation phase.
pub fn train_sparse(gp: &mut SparseGp, strategy: SgprStrategy, opts: &TrainOptions) -> Result<TrainReport, GpError> {
    // Recover from a failing starting point by re-selecting Z once.
    if gp.evaluate().is_err() {
        reselect(gp, opts.seed)?;
        gp.evaluate()?;
    }
    match strategy {
        SgprStrategy::FixedZ => {
            gp.optimize_inducing = false;
            train(gp, opts)
        }
        SgprStrategy::Joint => {
            gp.optimize_inducing = true;
            let r = train(gp, opts);
            gp.optimize_inducing = false;
            r
        }
        SgprStrategy::Reinit { every, max_worse, tail } => reinit(gp, opts, every, max_worse, tail, false),
        SgprStrategy::ReinitRetrain { every, max_worse, tail } => reinit(gp, opts, every, max_worse, tail, true),
    }
}

fn reinit(
    gp: &mut SparseGp,
    opts: &TrainOptions,
    every: usize,
    max_worse: usize,
    tail: usize,
    retrain: bool,
) -> Result<TrainReport, GpError> {
    gp.optimize_inducing = false;
    let every = every.max(1);
    let (mut iters, mut evals, mut failed) = (0usize, 0usize, 0usize);
    let (mut accepted, mut rejected) = (0usize, 0usize);
    let mut seed = opts.seed;
    let mut termination = String::new();
    let mut switch_to_joint = false;
    while iters < opts.max_iters && rejected < max_worse {
        let out = run_once(
            gp,
            every.min(opts.max_iters - iters),
            (opts.ftol, opts.pgtol),
            opts.progress.as_ref(),
            &Curvature::default(),
        )?;
        iters += out.iterations.max(1);
        evals += out.evaluations;
        failed += out.failed;
        termination = out.termination;
        let before = out.f;
        let old_z = gp.z().clone();
        seed = seed.wrapping_add(1);
        let after = reselect(gp, seed).and_then(|_| gp.objective_value()).unwrap_or(f64::NEG_INFINITY);
        if after >= before {
            accepted += 1;
            if gp.z() == &old_z && out.iterations < every {
                // Converged and the selection is a fixed point: nothing left to do here.
                break;
            }
        } else {
            rejected += 1;
            gp.set_z(old_z)?;
            if retrain {
                switch_to_joint = true;
                break;
            }
        }
    }
    gp.optimize_inducing = switch_to_joint;
    let out = run_once(gp, tail.max(1), (opts.ftol, opts.pgtol), opts.progress.as_ref(), &Curvature::default());
    gp.optimize_inducing = false;
    let out = out?;
    let eval = gp.evaluate()?;
    Ok(TrainReport {
        objective: eval.value,
        iterations: iters + out.iterations,
        evaluations: evals + out.evaluations,
        failed_evaluations: failed + out.failed,
        termination: if out.termination.is_empty() { termination } else { out.termination },
        projected_gradient_norm: out.projected_gradient_norm,
        approximate_steps: out.approximate_steps,
        run_objectives: vec![eval.value],
        reinit_accepted: accepted,
        reinit_rejected: rejected,
        jitter: eval.jitter,
        curvature: out.curvature,
    })
}

/// The result of [`train_multiscale`]: the ordinary phase's report and the multiscale phase's.
#[derive(Debug, Clone)]
pub struct MultiscaleReport {
    /// Training with ordinary inducing points (the given strategy).
    pub ordinary: TrainReport,
    /// Joint training of θ, σ², centres and widths from the ordinary optimum.
    pub multiscale: TrainReport,
}

/// Walder, Kim & Schölkopf's (2008 §4) "ordinary first, then multiscale": train with ordinary
/// inducing points using `strategy`, switch to multiscale features whose widths equal the
/// fitted length-scales (the same model, so the objective is continuous at the switch), then
/// optimise hyperparameters, centres and widths jointly from there (warm start only: random
/// restarts would throw the ordinary solution away). The model ends with multiscale features.
pub fn train_multiscale(
    gp: &mut SparseGp,
    strategy: SgprStrategy,
    opts: &TrainOptions,
) -> Result<MultiscaleReport, GpError> {
    let ordinary = train_sparse(gp, strategy, opts)?;
    gp.use_multiscale()?;
    let warm = TrainOptions { restarts: 0, ..opts.clone() };
    let multiscale = train_sparse(gp, SgprStrategy::Joint, &warm)?;
    Ok(MultiscaleReport { ordinary, multiscale })
}
