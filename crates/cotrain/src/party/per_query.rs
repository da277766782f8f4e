//! Policy per-query (the thesis, D8 R): answers from the current augmented model, noised with
//! a GP-prior path of the responder's kernel, one mechanism per (requester, model version).

use super::*;

impl Party {
    /// (σ, Δ, guaranteed) of a per-query release from the current model (cached per version).
    pub(super) fn calibrate(&mut self) -> Result<(f64, f64, bool), CotrainError> {
        match &self.dp.mode {
            DpMode::Off => Ok((0.0, 0.0, true)),
            DpMode::Thesis { multiplier } => Ok((NoiseScale::thesis(*multiplier)?.sigma(1.0), 1.0, false)),
            DpMode::Calibrated { range, .. } => {
                let version = self.model.version;
                if let Some((v, sigma, sens)) = self.calibration
                    && v == version
                {
                    return Ok((sigma, sens, self.guaranteed()));
                }
                let range = *range;
                let inf = self.model.label_influence()?;
                let s = from_influence(&inf, &(0..self.model.n_private()).collect::<Vec<_>>(), range)?;
                let sigma = self.dp.mode.calibrated_sigma(s.value)?.ok_or_else(uncalibrated)?;
                self.calibration = Some((version, sigma, s.value));
                Ok((sigma, s.value, self.guaranteed()))
            }
        }
    }

    pub(super) fn answer_per_query(&mut self, req: &PredictRequest) -> Result<Answer, CotrainError> {
        self.ledger_for(&req.requester)?;
        let version = self.model.version;
        let x_pool = self.data.x_pool.clone();
        let st = self.requesters.get(&req.requester).cloned().unwrap_or_default();
        let new_idx: Vec<usize> = req.indices.iter().copied().filter(|i| !st.released.contains_key(i)).collect();
        let mut answered = st.answered.clone();
        for &i in &req.indices {
            if !answered.contains(&i) {
                answered.push(i);
            }
        }
        // Predict at every answered index (for the matrices) with the current model, or under
        // `answer_source = private` with the private-only model (its kernel for the prior and the
        // noise path too).
        let xa = x_pool.select_rows(answered.iter());
        let readings = self.model.readings();
        let private = readings.answer_source == AnswerSource::Private;
        let full = req.uncertainty == Uncertainty::Full;
        let (pred, kernel, noise_var) = if private {
            (self.model.predict_private(&xa, full)?, self.model.private_kernel(), self.model.private_noise_variance())
        } else {
            (self.model.predict(&xa, full)?, self.model.kernel.clone(), self.model.noise.variance)
        };
        let pos = |i: usize| answered.iter().position(|&a| a == i).expect("answered");
        // Noise scale and charge for a new mean function.
        let mechanism = self.spend();
        let (sigma, sensitivity, guaranteed) = self.calibrate()?;
        let mut st = st;
        let mut charge = None;
        let mut new_values: Vec<(usize, f64)> = Vec::new();
        if !new_idx.is_empty() {
            let fresh = readings.thesis_noise == ThesisNoise::FreshPerQuery;
            let need_new_path = match (&self.dp.mode, &st.path) {
                (DpMode::Off, _) => false,
                // `thesis_noise = fresh-per-query`: an independent draw for every request.
                (DpMode::Thesis { .. }, Some(_)) if fresh => true,
                (DpMode::Thesis { .. }, Some(_)) => false, // D9 R: one path per requester
                (_, Some(p)) => p.version != version,
                (_, None) => true,
            };
            let mut new_release = false;
            if need_new_path {
                if let Some(l) = st.ledger.as_mut() {
                    let id = format!("{}@v{version}", req.requester);
                    new_release = l.charge(&id, sensitivity, sigma, &mechanism, guaranteed)? == Charge::New;
                } else {
                    new_release = true;
                }
                // A fresh draw per request is seeded by how many indices were answered before
                // it, so every request's draw is its own and a replay draws the same.
                let stream = if fresh && matches!(self.dp.mode, DpMode::Thesis { .. }) {
                    format!("{}\u{0}fresh{}", req.requester, st.answered.len())
                } else {
                    req.requester.clone()
                };
                st.path = Some(QueryPath { version, path: self.path_with(kernel.clone(), &stream, version), sigma });
            }
            let xn = x_pool.select_rows(new_idx.iter());
            let g = match st.path.as_mut() {
                Some(p) => p.path.sample_at(&xn)?,
                None => DVector::zeros(new_idx.len()),
            };
            let s = st.path.as_ref().map_or(0.0, |p| p.sigma);
            for (k, &i) in new_idx.iter().enumerate() {
                new_values.push((i, pred.mean[pos(i)] + s * g[k]));
            }
            if !matches!(self.dp.mode, DpMode::Off) {
                charge = Some(ChargeInfo {
                    rho: if new_release { rho_of(sensitivity, sigma) } else { 0.0 },
                    sigma: s,
                    sensitivity,
                    mechanism,
                    guaranteed,
                    new_release,
                });
            }
        }
        for (i, m) in new_values {
            st.released.insert(i, m);
        }
        st.answered = answered.clone();
        let mean: Vec<f64> = req.indices.iter().map(|i| st.released[i]).collect();
        let inflate = if self.dp.inflate_variance { sigma * sigma } else { 0.0 };
        let prior_all = kernel.k(xa.as_view(), xa.as_view());
        // `shared_variance = y`: the predictive variance of y₂ (latent + σ₂²).
        let y_var = if readings.shared_variance == SharedVariance::Y { noise_var } else { 0.0 };
        let var = (req.uncertainty == Uncertainty::Marginal).then(|| {
            req.indices.iter().map(|&i| pred.var[pos(i)] + inflate * prior_all[(pos(i), pos(i))] + y_var).collect()
        });
        let cov = pred.cov.as_ref().map(|c| {
            let mut c = c + &prior_all * inflate;
            for i in 0..c.nrows() {
                c[(i, i)] += y_var;
            }
            c
        });
        // `blocky_theta = querier`: the prior block with the requester's θ₁ on this view.
        let prior_cov = match (req.want_prior, self.requester_theta.get(&req.requester)) {
            (false, _) => None,
            (true, Some(theta)) if readings.blocky_theta == BlockyTheta::Querier => {
                let mut k = kernel.clone();
                k.set_params(theta);
                Some(k.k(xa.as_view(), xa.as_view()))
            }
            (true, _) => Some(prior_all.clone()),
        };
        let noise_var = (self.dp.inflate_variance || sigma == 0.0)
            .then(|| req.indices.iter().map(|&i| inflate * prior_all[(pos(i), pos(i))]).collect());
        let base = answer_to(&self.name, req, &st);
        self.requesters.insert(req.requester.clone(), st);
        Ok(Answer { mean, var, answered, cov, prior_cov, model_version: version, charge, noise_var, ..base })
    }
}
