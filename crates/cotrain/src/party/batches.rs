//! Policy batches (the honest default, docs/honest-dp.md): the new indices of each request are
//! one finite release of the capped, low-rank private-only posterior, charged once.

use super::*;

impl Party {
    /// Policy batches: the new indices of a request are one finite release of the private-only
    /// (capped) posterior, charged once; indices released before are post-processing.
    pub(super) fn answer_batches(&mut self, req: &PredictRequest) -> Result<Answer, CotrainError> {
        self.ledger_for(&req.requester)?;
        let mechanism = self.spend();
        let guaranteed = self.guaranteed();
        let mut st = self.requesters.get(&req.requester).cloned().unwrap_or_default();
        let new_idx: Vec<usize> = req.indices.iter().copied().filter(|i| !st.released.contains_key(i)).collect();
        let mut charge = None;
        let mut likelihood = None;
        if !new_idx.is_empty() {
            let (plan, rm, range) = self.plan_finite(&new_idx, false)?;
            let k = st.batches.len();
            let mut new_release = false;
            if plan.sigma > 0.0 {
                if let Some(l) = st.ledger.as_mut() {
                    let id = format!("{}#batch{k}", req.requester);
                    new_release =
                        l.charge(&id, plan.sensitivity.value, plan.sigma, &mechanism, guaranteed)? == Charge::New;
                }
                charge = Some(ChargeInfo {
                    rho: if new_release { rho_of(plan.sensitivity.value, plan.sigma) } else { 0.0 },
                    sigma: plan.sigma,
                    sensitivity: plan.sensitivity.value,
                    mechanism: mechanism.clone(),
                    guaranteed,
                    new_release,
                });
            }
            let z = if plan.sigma > 0.0 {
                iid_standard_normal(new_idx.len(), self.seed.map(|s| mix(s, &req.requester, 1 << 40 | k as u64)))
            } else {
                DVector::zeros(new_idx.len())
            };
            let released = plan.release(&rm.y, range, &z)?;
            if self.send_likelihood {
                let xq = self.data.x_pool.select_rows(new_idx.iter());
                let release = plan.likelihood(rm.kernel.as_ref(), &rm.x, &xq)?;
                likelihood = Some(BatchLikelihood { indices: new_idx.clone(), release });
            }
            for (t, &i) in new_idx.iter().enumerate() {
                st.released.insert(i, released[t]);
                st.answered.push(i);
            }
            st.batches.push(BatchRelease {
                indices: new_idx.clone(),
                sigma: plan.sigma,
                sensitivity: plan.sensitivity.value,
                eta: plan.eta,
                var: plan.released_var().iter().copied().collect(),
                cov: plan.released_cov(),
            });
        }
        let answered = st.answered.clone();
        let mean: Vec<f64> = req.indices.iter().map(|i| st.released[i]).collect();
        // (batch, position) of every answered index.
        let mut at: HashMap<usize, (usize, usize)> = HashMap::new();
        for (b, batch) in st.batches.iter().enumerate() {
            for (p, &i) in batch.indices.iter().enumerate() {
                at.insert(i, (b, p));
            }
        }
        let var = (req.uncertainty == Uncertainty::Marginal).then(|| {
            req.indices
                .iter()
                .map(|i| {
                    let (b, p) = at[i];
                    st.batches[b].var[p]
                })
                .collect()
        });
        // Full: block-diagonal over batches (each block PSD; the small positive correlation of
        // two batches' estimation errors is not reported, see docs/honest-dp.md).
        let cov = (req.uncertainty == Uncertainty::Full).then(|| {
            DMatrix::from_fn(answered.len(), answered.len(), |a, c| {
                let ((b1, p1), (b2, p2)) = (at[&answered[a]], at[&answered[c]]);
                if b1 == b2 { st.batches[b1].cov[(p1, p2)] } else { 0.0 }
            })
        });
        let prior_cov = if req.want_prior {
            let rm = self.release_model.as_ref().ok_or_else(|| CotrainError::from(crate::Invariant::NoReleaseModel))?;
            let xa = self.data.x_pool.select_rows(answered.iter());
            Some(rm.kernel.k(xa.as_view(), xa.as_view()))
        } else {
            None
        };
        let noise_var: Vec<f64> = req
            .indices
            .iter()
            .map(|i| {
                let (b, _) = at[i];
                st.batches[b].sigma.powi(2)
            })
            .collect();
        let base = answer_to(&self.name, req, &st);
        self.requesters.insert(req.requester.clone(), st);
        Ok(Answer {
            mean,
            var,
            answered,
            cov,
            prior_cov,
            model_version: 0,
            charge,
            noise_var: Some(noise_var),
            likelihood,
            ..base
        })
    }
}
