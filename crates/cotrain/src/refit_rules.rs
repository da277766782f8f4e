//! The harm study's rules for the D5 re-fit (docs/results.md, "The twelfth pass" and "The
//! thirteenth pass"): which of a querier's hyperparameters the answers may move, [`RefitTheta`]'s
//! lab switches beyond `Augmented` and `Own`, and [`UnseenCovariates`] (whose `Drop` is the
//! product's default, D39). Each either holds length-scales through their
//! bounds for one fit and puts the bounds back, or compares fits by the private rows' own
//! evidence (Wilks 1938).

use crate::combiner::{CoModel, RefitTheta};
use crate::error::CotrainError;
use crate::readings::UnseenCovariates;
use dpcotrain_gp::Objective;

/// The χ² distribution's 95% quantile with `dof` ≥ 1 degrees of freedom: the table to 10, then
/// the Wilson–Hilferty (1931) approximation (within 0.2% above 10).
pub(crate) fn chi2_95(dof: usize) -> f64 {
    const TABLE: [f64; 10] = [3.841, 5.991, 7.815, 9.488, 11.070, 12.592, 14.067, 15.507, 16.919, 18.307];
    match dof {
        0 => 0.0,
        1..=10 => TABLE[dof - 1],
        _ => {
            let k = dof as f64;
            let c = 2.0 / (9.0 * k);
            k * (1.0 - c + 1.644_853_6 * c.sqrt()).powi(3)
        }
    }
}

impl CoModel {
    /// [`RefitTheta::AugmentedWithinOwn`] after the free re-fit: if the private rows' own log
    /// marginal likelihood at the re-fitted θ is below its value at θ̂ by more than
    /// χ²₉₅(p)/2 (p hyperparameters), bisect the segment θ̂ → θ for its last point inside.
    /// Returns the augmented objective at the θ kept.
    pub(crate) fn within_own_region(&mut self) -> Result<f64, CotrainError> {
        let (Some(pre), false) = (self.pre_params.clone(), self.is_sparse()) else {
            return self.objective();
        };
        let own = |m: &Self, p: &[f64]| -> Result<f64, CotrainError> {
            let (mut k, mut s) = (m.kernel.clone(), m.noise.clone());
            crate::set_kernel_noise_params(&mut k, &mut s, p);
            Ok(m.private_gp(k, s)?.evaluate()?.value)
        };
        let free = self.params();
        // One degree of freedom per hyperparameter the re-fit could move (not those held by
        // `UnseenCovariates::Median` or `Drop`).
        let held = match self.readings.unseen_covariates {
            UnseenCovariates::Median | UnseenCovariates::Drop => {
                self.constant_covariates().iter().filter(|c| **c).count()
            }
            UnseenCovariates::Free => 0,
        };
        let allowed = 0.5 * chi2_95(free.len().saturating_sub(held).max(1));
        let best = own(self, &pre)?;
        // A θ on the segment whose own evidence cannot be evaluated counts as outside.
        let inside = |m: &Self, t: f64| -> bool {
            let p: Vec<f64> = pre.iter().zip(&free).map(|(a, b)| a + t * (b - a)).collect();
            own(m, &p).is_ok_and(|v| v.is_finite() && best - v <= allowed)
        };
        if inside(self, 1.0) {
            return self.objective();
        }
        let (mut lo, mut hi) = (0.0, 1.0);
        for _ in 0..30 {
            let mid = 0.5 * (lo + hi);
            if inside(self, mid) {
                lo = mid;
            } else {
                hi = mid;
            }
        }
        let kept: Vec<f64> = pre.iter().zip(&free).map(|(a, b)| a + lo * (b - a)).collect();
        self.set_params(&kept);
        self.version += 1;
        self.check_answers()?;
        self.objective()
    }

    /// Whether each covariate is constant on the private rows.
    pub(crate) fn constant_covariates(&self) -> Vec<bool> {
        crate::data::constant_columns(&self.x_tr)
    }

    /// Hold the length-scales that `which` selects (given the covariate j of a name
    /// `lengthscale[j]`, None for a length-scale shared by all covariates): at parameter position
    /// i, `at(i)` gives the value and whether both bounds are pinned there (else the lower bound
    /// only), clamped into the old bounds; the parameter is moved inside. Returns the old bounds
    /// to put back, None when nothing is held.
    pub(crate) fn hold_lengthscales(
        &mut self,
        which: impl Fn(Option<usize>) -> bool,
        at: impl Fn(usize) -> (f64, bool),
    ) -> Option<Vec<dpcotrain_gp::Bounds>> {
        let saved = self.kernel.bounds();
        let mut bounds = saved.clone();
        let mut params = self.kernel.params();
        let mut any = false;
        for (i, name) in self.kernel.param_names().iter().enumerate() {
            let last = name.rsplit('.').next().unwrap_or(name);
            if !last.starts_with("lengthscale") {
                continue;
            }
            let j = last.strip_prefix("lengthscale[").and_then(|r| r.strip_suffix(']')).and_then(|j| j.parse().ok());
            if !which(j) {
                continue;
            }
            let (value, both) = at(i);
            let value = value.clamp(saved[i].lower, saved[i].upper);
            bounds[i].lower = value;
            if both {
                bounds[i].upper = value;
            }
            params[i] = bounds[i].clamp(params[i]);
            any = true;
        }
        if !any {
            return None;
        }
        self.kernel.set_bounds(&bounds);
        self.kernel.set_params(&params);
        Some(saved)
    }

    /// Pin both bounds of the length-scales of covariates constant on the private rows at `at(i)`.
    fn hold_constant(&mut self, at: impl Fn(usize) -> f64) -> Option<Vec<dpcotrain_gp::Bounds>> {
        let constant = self.constant_covariates();
        self.hold_lengthscales(|j| j.is_some_and(|j| constant.get(j).copied().unwrap_or(false)), |i| (at(i), true))
    }

    /// [`UnseenCovariates::Median`] and [`UnseenCovariates::Drop`]: hold the length-scales of
    /// covariates constant on the private rows at √(2D), or at their upper bound.
    pub(crate) fn hold_unseen(&mut self) -> Option<Vec<dpcotrain_gp::Bounds>> {
        match self.readings.unseen_covariates {
            UnseenCovariates::Free => None,
            UnseenCovariates::Median => {
                let median = (2.0 * self.x_tr.ncols() as f64).sqrt().ln();
                self.hold_constant(|_| median)
            }
            // Each length-scale's upper bound (ln 10³ for the standardised covariates of
            // `default_kernel`); ln 10⁶ where a bound is infinite, since an infinite ℓ is no number.
            UnseenCovariates::Drop => {
                let bounds = self.kernel.bounds();
                self.hold_constant(|i| if bounds[i].upper.is_finite() { bounds[i].upper } else { 1e6f64.ln() })
            }
        }
    }

    /// The holds of one D5 re-fit, returned as the bounds to put back (first the rule's, then the
    /// unseen covariates'): `UnseenCovariates::Median` and `Drop` hold the constant covariates'
    /// length-scales at their private value (√(2D), the upper bound) under every rule; on top of
    /// it `AugmentedNoShorter` raises every length-scale's lower bound to the private fit's value,
    /// `AugmentedAmplitude` pins both bounds there, `AugmentedHoldConstant` pins those of the
    /// constant covariates (already held under `Drop`, the default, where it changes nothing).
    pub(crate) fn hold_for_refit(&mut self) -> (Option<Vec<dpcotrain_gp::Bounds>>, Option<Vec<dpcotrain_gp::Bounds>>) {
        let unseen = self.hold_unseen();
        let Some(pre) = self.pre_params.clone() else {
            return (unseen, None);
        };
        let rule = match self.refit_theta {
            RefitTheta::AugmentedNoShorter => self.hold_lengthscales(|_| true, |i| (pre[i], false)),
            RefitTheta::AugmentedAmplitude => self.hold_lengthscales(|_| true, |i| (pre[i], true)),
            RefitTheta::AugmentedHoldConstant => self.hold_constant(|i| pre[i]),
            _ => None,
        };
        (unseen, rule)
    }

    /// [`RefitTheta::AugmentedTested`]: the free and the constrained re-fit from the same state,
    /// and the likelihood-ratio test between them.
    pub(crate) fn refit_tested(&mut self) -> Result<f64, CotrainError> {
        let run = |model: &Self, how: RefitTheta| -> Result<(Self, f64), CotrainError> {
            let mut m = model.clone();
            m.refit_theta = how;
            let objective = m.refit()?;
            m.refit_theta = RefitTheta::AugmentedTested;
            Ok((m, objective))
        };
        // Either fit alone when the other fails; both failing fails the re-fit (the free one's
        // error).
        let (free, free_objective, tied, tied_objective) =
            match (run(self, RefitTheta::Augmented), run(self, RefitTheta::AugmentedNoShorter)) {
                (Ok((f, fo)), Ok((t, to))) => (f, fo, t, to),
                (Ok((f, fo)), Err(_)) => {
                    *self = f;
                    return Ok(fo);
                }
                (Err(_), Ok((t, to))) => {
                    *self = t;
                    return Ok(to);
                }
                (Err(e), Err(_)) => return Err(e),
            };
        let shortened = match &self.pre_params {
            Some(pre) => {
                let names = free.kernel.param_names();
                let params = free.kernel.params();
                names
                    .iter()
                    .enumerate()
                    .filter(|(i, name)| {
                        name.rsplit('.').next().unwrap_or(name).starts_with("lengthscale")
                            && params[*i] < pre[*i] - 1e-6
                    })
                    .count()
            }
            None => 0,
        };
        let threshold = chi2_95(shortened.max(1));
        let keep_free = shortened == 0 || 2.0 * (free_objective - tied_objective) > threshold;
        // Both fits' evaluations are spent (each clone counted from this model's total).
        let spent = free.refit_evaluations + tied.refit_evaluations - self.refit_evaluations;
        let (mut kept, objective) = if keep_free { (free, free_objective) } else { (tied, tied_objective) };
        kept.refit_evaluations = spent;
        *self = kept;
        Ok(objective)
    }
}
