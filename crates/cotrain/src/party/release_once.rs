//! Policy release-once (D8 P): the private-only posterior over the whole pool, frozen and
//! noised once at construction; one charge per requester, every later answer post-processing.

use super::*;

impl Party {
    /// Freeze the private-only release over the whole pool (called right after the private
    /// fit, while the model has absorbed nothing; works for the exact and the sparse local
    /// model alike).
    pub(super) fn freeze(&mut self) -> Result<(), CotrainError> {
        let pool = self.data.x_pool.clone();
        if matches!(self.dp.release, ReleaseForm::Finite { .. }) {
            let all: Vec<usize> = (0..pool.nrows()).collect();
            let (plan, rm, range) = self.plan_finite(&all, true)?;
            let mean = plan.hat.mean(&rm.y, range)?;
            let noise = if plan.sigma > 0.0 {
                iid_standard_normal(pool.nrows(), self.seed.map(|s| mix(s, "release-once", 0)))
            } else {
                DVector::zeros(pool.nrows())
            };
            let cov = plan.hat.latent_cov.clone();
            self.frozen = Some(Frozen {
                mean,
                var: cov.diagonal(),
                cov,
                prior: plan.hat.prior.clone(),
                sigma: plan.sigma,
                sensitivity: plan.sensitivity.value,
                noise,
                isotropic: true,
            });
            return Ok(());
        }
        let n = self.data.x_train.nrows();
        // The function-space release: of the private fit (θ̂), or of the release model (public θ).
        let calibrated = matches!(self.dp.mode, DpMode::Calibrated { .. });
        let (p, prior, influence, kernel) = match (&self.dp.theta, &self.release_model) {
            (ThetaPolicy::Public(_) | ThetaPolicy::Selected { .. }, Some(rm)) => {
                let (p, inf) = rm.function_posterior(&pool, calibrated)?;
                (p, rm.kernel.k(pool.as_view(), pool.as_view()), inf, rm.kernel.clone())
            }
            _ => {
                let p = self.model.predict(&pool, true)?;
                let inf = if calibrated { Some(self.model.label_influence()?) } else { None };
                (p, self.model.kernel.k(pool.as_view(), pool.as_view()), inf, self.model.kernel.clone())
            }
        };
        let (sigma, sensitivity) = match &self.dp.mode {
            DpMode::Off => (0.0, 0.0),
            DpMode::Thesis { multiplier } => (NoiseScale::thesis(*multiplier)?.sigma(1.0), 1.0),
            DpMode::Calibrated { range, .. } => {
                let inf = influence.expect("computed under calibrated DP");
                let s = from_influence(&inf, &(0..n).collect::<Vec<_>>(), *range)?;
                (self.dp.mode.calibrated_sigma(s.value)?.ok_or_else(uncalibrated)?, s.value)
            }
        };
        let noise = if sigma > 0.0 {
            let mut path = self.path_with(kernel, "release-once", 0);
            path.sample_at(&pool)?
        } else {
            DVector::zeros(pool.nrows())
        };
        let cov = p.cov.clone().unwrap_or_else(|| DMatrix::from_diagonal(&p.var));
        self.frozen =
            Some(Frozen { mean: p.mean, var: p.var, cov, prior, sigma, sensitivity, noise, isotropic: false });
        Ok(())
    }

    pub(super) fn answer_release_once(&mut self, req: &PredictRequest) -> Result<Answer, CotrainError> {
        self.ledger_for(&req.requester)?;
        let f = self.frozen.clone().ok_or_else(|| CotrainError::from(crate::Invariant::NoFrozenRelease))?;
        let mechanism = self.spend();
        let guaranteed = self.guaranteed();
        let st = self.requesters.get_mut(&req.requester).expect("requester state");
        let mut charge = None;
        if f.sigma > 0.0 {
            let new = match st.ledger.as_mut() {
                Some(l) => l.charge("release-once", f.sensitivity, f.sigma, &mechanism, guaranteed)? == Charge::New,
                None => st.answered.is_empty(),
            };
            charge = Some(ChargeInfo {
                rho: if new { rho_of(f.sensitivity, f.sigma) } else { 0.0 },
                sigma: f.sigma,
                sensitivity: f.sensitivity,
                mechanism,
                guaranteed,
                new_release: new,
            });
        }
        let mean: Vec<f64> =
            req.indices.iter().map(|&i| *st.released.entry(i).or_insert(f.mean[i] + f.sigma * f.noise[i])).collect();
        for &i in &req.indices {
            if !st.answered.contains(&i) {
                st.answered.push(i);
            }
        }
        let answered = st.answered.clone();
        // The released noise's covariance: σ²I for a finite release (always reported), σ²K for
        // the function-space release (D19, when inflate_variance).
        let s2 = f.sigma * f.sigma;
        let noise_cov = |i: usize, j: usize| {
            if f.isotropic {
                if i == j { s2 } else { 0.0 }
            } else if self.dp.inflate_variance {
                s2 * f.prior[(i, j)]
            } else {
                0.0
            }
        };
        let var = (req.uncertainty == Uncertainty::Marginal)
            .then(|| req.indices.iter().map(|&i| f.var[i] + noise_cov(i, i)).collect());
        let cov = (req.uncertainty == Uncertainty::Full).then(|| {
            DMatrix::from_fn(answered.len(), answered.len(), |a, b| {
                let (i, j) = (answered[a], answered[b]);
                f.cov[(i, j)] + noise_cov(i, j)
            })
        });
        let prior_cov = req.want_prior.then(|| f.prior.select_rows(answered.iter()).select_columns(answered.iter()));
        let noise_var = (f.isotropic || self.dp.inflate_variance || f.sigma == 0.0)
            .then(|| req.indices.iter().map(|&i| noise_cov(i, i)).collect());
        let base = answer_to(&self.name, req, st);
        Ok(Answer { mean, var, answered, cov, prior_cov, model_version: 0, charge, noise_var, ..base })
    }
}
