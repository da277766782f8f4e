//! Training SVGP: per minibatch, one natural-gradient step on q(v), then one Adam step on the
//! hyperparameters and Z (GPflow's `NaturalGradient` + `Adam` recipe; Salimbeni et al. 2018).
//!
//! Everything a run depends on — hyperparameters, q(v), Adam's moments and the source's
//! position — is in an [`SvgpCheckpoint`], handed to the caller every `checkpoint_every` steps;
//! a fit resumed from one produces the same numbers, bit for bit, as one that never stopped.

use super::{MinibatchSource, SourcePosition, Svgp, WhitenedQ};
use crate::optimize::adam::{Adam, AdamOptions};
use crate::{CheckpointMismatch, GpError, Place};
use serde::{Deserialize, Serialize};

/// Settings of an SVGP fit.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SvgpOptions {
    /// Total optimisation steps (minibatches), counting those of a resumed checkpoint.
    pub steps: u64,
    pub adam: AdamOptions,
    /// Natural-gradient step γ ∈ (0, 1] on q(v) per minibatch.
    pub natgrad_step: f64,
    /// Hand a checkpoint to the caller every this many steps (0: never).
    pub checkpoint_every: u64,
    /// Report progress every this many steps (0: never).
    pub progress_every: u64,
}

impl Default for SvgpOptions {
    fn default() -> Self {
        SvgpOptions {
            steps: 1000,
            adam: AdamOptions::default(),
            natgrad_step: 0.1,
            checkpoint_every: 0,
            progress_every: 50,
        }
    }
}

/// The state of a fit after `step` steps.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SvgpCheckpoint {
    pub step: u64,
    /// [`Svgp::param_names`], to refuse a checkpoint of another model.
    pub param_names: Vec<String>,
    pub params: Vec<f64>,
    pub q: WhitenedQ,
    pub adam: Adam,
    pub position: SourcePosition,
    /// Moving average of the minibatch bound per row (for progress reports).
    pub bound_ema: Option<f64>,
}

/// A progress report.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SvgpProgress {
    pub step: u64,
    pub steps: u64,
    pub epoch: u64,
    /// Exponential moving average (weight 0.05) of the minibatch estimate of L₃ / N.
    pub bound_per_row: f64,
}

/// What the caller is told during a fit.
pub enum SvgpEvent<'a> {
    Progress(SvgpProgress),
    Checkpoint(&'a SvgpCheckpoint),
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SvgpReport {
    pub steps: u64,
    pub epochs_completed: u64,
    /// Final moving average of L₃ / N (none if no step was taken).
    pub bound_per_row: Option<f64>,
    /// (step, moving average of L₃ / N) at each progress report.
    pub trace: Vec<(u64, f64)>,
}

/// Fit `model` on `source`, from the start or from `resume`. `on_event` receives progress and
/// checkpoints; an error it returns (e.g. a checkpoint that could not be written) stops the fit.
pub fn fit_svgp(
    model: &mut Svgp,
    source: &mut dyn MinibatchSource,
    opts: &SvgpOptions,
    resume: Option<SvgpCheckpoint>,
    on_event: &mut dyn FnMut(SvgpEvent<'_>) -> Result<(), GpError>,
) -> Result<SvgpReport, GpError> {
    if !(opts.natgrad_step > 0.0 && opts.natgrad_step <= 1.0) {
        return Err(GpError::parameter("natural-gradient step", opts.natgrad_step, "be in (0, 1]"));
    }
    if !(opts.adam.learning_rate.is_finite() && opts.adam.learning_rate > 0.0) {
        return Err(GpError::parameter("Adam learning rate", opts.adam.learning_rate, "be positive and finite"));
    }
    if source.dim() != model.input_dim() {
        return Err(GpError::shape("the data", source.dim(), "input columns", model.input_dim(), "columns of Z"));
    }
    let n_total = source.n_rows();
    let names = model.param_names();
    let (mut step, mut adam, mut ema) = match resume {
        Some(cp) => {
            if cp.param_names != names {
                let mismatch = CheckpointMismatch::Model { checkpoint: cp.param_names, model: names };
                return Err(GpError::Checkpoint(mismatch));
            }
            let n = names.len();
            if cp.params.len() != n || cp.adam.m.len() != n || cp.adam.v.len() != n {
                let (params, adam_m, adam_v) = (cp.params.len(), cp.adam.m.len(), cp.adam.v.len());
                return Err(GpError::Checkpoint(CheckpointMismatch::Lengths { params, adam_m, adam_v, model: n }));
            }
            let values = || cp.params.iter().chain(&cp.adam.m).chain(&cp.adam.v);
            if let Some(i) = values().position(|v| !v.is_finite()) {
                let value = *values().nth(i).expect("i < len");
                return Err(GpError::non_finite("the checkpoint", Place::Entry(i), value));
            }
            if cp.step > opts.steps {
                return Err(GpError::Checkpoint(CheckpointMismatch::PastSteps { step: cp.step, steps: opts.steps }));
            }
            model.set_params(&cp.params);
            model.set_q(cp.q)?;
            source.seek(&cp.position)?;
            (cp.step, cp.adam, cp.bound_ema)
        }
        None => (0, Adam::new(names.len(), opts.adam), None),
    };
    adam.options = opts.adam;
    let bounds = model.bounds();
    // A start outside the bounds would be clamped by the first step without a word.
    if let Some(i) = model.params().iter().zip(&bounds).position(|(p, b)| !b.contains(*p)) {
        return Err(GpError::OutsideBounds {
            name: names[i].clone(),
            value: model.params()[i],
            lower: bounds[i].lower,
            upper: bounds[i].upper,
        });
    }
    let mut trace = Vec::new();
    while step < opts.steps {
        let (x, y) = source.next_batch()?;
        let at = |e: GpError| GpError::AtStep { step: step + 1, source: Box::new(e) };
        let b = model.natgrad_then_bound(x.as_view(), y.as_view(), n_total, opts.natgrad_step).map_err(at)?;
        let mut p = model.params();
        let grad = b.grad.as_ref().expect("asked for the gradient");
        adam.ascend(&mut p, grad, &bounds).map_err(|i| {
            at(GpError::Diverged { what: "the SVGP gradient", at: Some(Place::Parameter(i)), value: grad[i] })
        })?;
        model.set_params(&p);
        step += 1;
        let per_row = b.value / n_total as f64;
        ema = Some(ema.map_or(per_row, |e| 0.95 * e + 0.05 * per_row));
        let pos = source.position();
        if opts.progress_every > 0 && (step % opts.progress_every == 0 || step == opts.steps) {
            let bound_per_row = ema.unwrap_or(per_row);
            trace.push((step, bound_per_row));
            on_event(SvgpEvent::Progress(SvgpProgress { step, steps: opts.steps, epoch: pos.epoch, bound_per_row }))?;
        }
        if opts.checkpoint_every > 0 && (step % opts.checkpoint_every == 0 || step == opts.steps) {
            let cp = SvgpCheckpoint {
                step,
                param_names: names.clone(),
                params: model.params(),
                q: model.q().clone(),
                adam: adam.clone(),
                position: pos,
                bound_ema: ema,
            };
            on_event(SvgpEvent::Checkpoint(&cp))?;
        }
    }
    let end = source.position();
    // A source that has just served an epoch's last row has completed that epoch.
    let epochs_completed = end.epoch + u64::from(end.row >= n_total as u64);
    Ok(SvgpReport { steps: step, epochs_completed, bound_per_row: ema, trace })
}
