//! The Blocky combiner [Thomas §4.2.2.1, eqs 4.5–4.6; docs/decisions.md D13, D15]:
//!
//! ```text
//! K_aug = [ K₁(X_tr) + σ₁²I        0
//!           0                 K₂^q + σ₁²I + V₂ ]
//! ```
//!
//! The query block is the responder's *reported* prior covariance at the queried entities. The
//! objective is the sum of the private LML and log N(μ₂ | 0, K₂^q + σ₁²I + V₂); the query block
//! depends on θ₁ only through σ₁² (D5). Prediction uses party 1's own kernel for the cross
//! covariances, k₁(x*, [X_tr; X₁^q]); train- and test-time kernels are inconsistent, so the
//! variance can go negative and is clamped (the clamp count is reported in the prediction).

use dpcotrain_gp::kernels::Kernel;
use dpcotrain_gp::linalg::{Cholesky, JitterPolicy, col_sq_norms, gemm};
use dpcotrain_gp::{Evaluation, ExactGp, GpError, NoiseModel, NoiseVariance, Objective, Prediction};
use nalgebra::{DMatrix, DVector};

const LN_2PI: f64 = 1.8378770664093453;

#[derive(Debug, Clone)]
pub struct BlockyModel {
    pub kernel: Box<dyn Kernel>,
    pub noise: NoiseVariance,
    x_tr: DMatrix<f64>,
    y_tr: DVector<f64>,
    /// Party 1's own covariates of the queried entities (q × d).
    x_q: DMatrix<f64>,
    mu_q: DVector<f64>,
    /// K₂^q + V₂ (q × q), already PSD-projected.
    block: DMatrix<f64>,
}

impl BlockyModel {
    pub fn new(
        kernel: Box<dyn Kernel>,
        noise: NoiseVariance,
        x_tr: DMatrix<f64>,
        y_tr: DVector<f64>,
        x_q: DMatrix<f64>,
        mu_q: DVector<f64>,
        block: DMatrix<f64>,
    ) -> Self {
        BlockyModel { kernel, noise, x_tr, y_tr, x_q, mu_q, block }
    }

    fn private(&self) -> Result<ExactGp, GpError> {
        let noise = NoiseVariance { learn: true, ..self.noise.clone() };
        ExactGp::new(self.kernel.clone(), NoiseModel::Homoscedastic(noise), self.x_tr.clone(), self.y_tr.clone())
    }

    fn query_chol(&self) -> Result<Option<Cholesky>, GpError> {
        if self.mu_q.is_empty() {
            return Ok(None);
        }
        let mut c = self.block.clone();
        for i in 0..c.nrows() {
            c[(i, i)] += self.noise.variance;
        }
        Ok(Some(Cholesky::factor(c, "Blocky query block", JitterPolicy::IF_NEEDED)?))
    }

    /// Latent predictive with k₁ cross-covariances.
    pub fn predict(&self, xs: &DMatrix<f64>, full_cov: bool) -> Result<Prediction, GpError> {
        self.clone().into_predictor()?.predict(xs, full_cov)
    }

    /// The factorisations every prediction needs, computed once.
    pub fn into_predictor(self) -> Result<BlockyPredictor, GpError> {
        let post = self.private()?.posterior()?;
        let query = match self.query_chol()? {
            Some(chol_q) => {
                let alpha_q = chol_q.solve_vec(&self.mu_q);
                Some((chol_q, alpha_q))
            }
            None => None,
        };
        Ok(BlockyPredictor { model: self, post, query })
    }
}

/// A [`BlockyModel`] with its private posterior and query-block factorisation.
#[derive(Debug, Clone)]
pub struct BlockyPredictor {
    model: BlockyModel,
    post: dpcotrain_gp::exact::ExactPosterior,
    /// chol(K₂^q + σ₁²I + V₂) and its solve against μ₂ (None without queried rows).
    query: Option<(Cholesky, DVector<f64>)>,
}

impl BlockyPredictor {
    /// The raw (unclamped) latent variances at `xs` (uncertainty sampling under
    /// `selection_variance = raw`).
    pub fn raw_variance(&self, xs: &DMatrix<f64>) -> Result<DVector<f64>, GpError> {
        Ok(self.raw(xs, false)?.1)
    }

    /// Latent predictive with k₁ cross-covariances.
    pub fn predict(&self, xs: &DMatrix<f64>, full_cov: bool) -> Result<Prediction, GpError> {
        if self.query.is_none() {
            return self.post.predict(xs, full_cov);
        }
        let (mean, raw, cov) = self.raw(xs, full_cov)?;
        Ok(Prediction::new(mean, raw, cov))
    }

    /// The predictive mean at `xs` alone (no triangular solves): `predict(xs, _).mean`.
    pub fn predict_mean(&self, xs: &DMatrix<f64>) -> Result<DVector<f64>, GpError> {
        let private = self.post.predict_mean(xs)?;
        Ok(match &self.query {
            None => private,
            Some((_, alpha_q)) => {
                &private + self.model.kernel.k(self.model.x_q.as_view(), xs.as_view()).tr_mul(alpha_q)
            }
        })
    }

    /// Mean, raw (unclamped) variance and, if asked, covariance of the predictive at `xs`.
    fn raw(&self, xs: &DMatrix<f64>, full_cov: bool) -> Result<RawPredictive, GpError> {
        let (m, post) = (&self.model, &self.post);
        let p_tr = post.predict(xs, full_cov)?;
        let Some((chol_q, alpha_q)) = &self.query else {
            let raw = m.kernel.diag(xs.as_view()) - m.private_explained(xs, post)?;
            return Ok((p_tr.mean, raw, p_tr.cov));
        };
        let kqs = m.kernel.k(m.x_q.as_view(), xs.as_view());
        let mean = &p_tr.mean + kqs.tr_mul(alpha_q);
        let mut v = kqs;
        chol_q.solve_l_in_place(&mut v);
        // Undo the private clamp: recompute raw variances.
        let raw = m.kernel.diag(xs.as_view()) - m.private_explained(xs, post)? - col_sq_norms(&v);
        let cov = match p_tr.cov {
            Some(mut c) => {
                gemm(&mut c, -1.0, v.as_view(), true, v.as_view(), false, true);
                Some(c)
            }
            None => None,
        };
        Ok((mean, raw, cov))
    }
}

/// Mean, raw variance and optional covariance of a Blocky predictive.
type RawPredictive = (DVector<f64>, DVector<f64>, Option<DMatrix<f64>>);

impl BlockyModel {
    fn private_explained(
        &self,
        xs: &DMatrix<f64>,
        post: &dpcotrain_gp::exact::ExactPosterior,
    ) -> Result<DVector<f64>, GpError> {
        let mut v = self.kernel.k(self.x_tr.as_view(), xs.as_view());
        post.cholesky().solve_l_in_place(&mut v);
        Ok(col_sq_norms(&v))
    }

    /// Rows R and weights map ∂w/∂y_tr (|R| × n) of the posterior mean f = k₁(·, R) w.
    pub fn mean_weights(&self) -> Result<(DMatrix<f64>, DMatrix<f64>), GpError> {
        let post = self.private()?.posterior()?;
        let n = self.x_tr.nrows();
        let q = self.x_q.nrows();
        let c = post.cholesky().inverse();
        let mut w = DMatrix::zeros(n + q, n);
        w.rows_mut(0, n).copy_from(&c);
        let mut rows = DMatrix::zeros(n + q, self.x_tr.ncols());
        rows.rows_mut(0, n).copy_from(&self.x_tr);
        rows.rows_mut(n, q).copy_from(&self.x_q);
        Ok((rows, w))
    }
}

impl Objective for BlockyModel {
    crate::kernel_noise_params!();
    fn evaluate(&self) -> Result<Evaluation, GpError> {
        let mut e = self.private()?.evaluate()?;
        if let Some(chol_q) = self.query_chol()? {
            let alpha = chol_q.solve_vec(&self.mu_q);
            let q = self.mu_q.len() as f64;
            e.value += -0.5 * self.mu_q.dot(&alpha) - 0.5 * chol_q.logdet() - 0.5 * q * LN_2PI;
            let tr_w = alpha.norm_squared() - chol_q.inverse().trace();
            let rel = chol_q.jitter_slope();
            let last = e.grad.len() - 1;
            e.grad[last] += self.noise.variance * 0.5 * tr_w * (1.0 + rel);
        }
        Ok(e)
    }
}
