//! The Hybrid combiner [Thomas 2017 §4.2.2.3, eqs 4.9–4.10] in closed form (docs/decisions.md
//! D15): it predicts at arbitrary points without transductive re-inversion.
//!
//! Observed rows O = [X_tr; X₁^q] (the last q are the queried entities Q, observed through the
//! peer's means μ₂), A = K₁(O,O) + σ₁²I, C₂ = K₂^q + V₂, M = A_QQ + C₂:
//!
//! ```text
//! K_aug⁻¹ = A⁻¹ + E_Q C₂⁻¹ E_Qᵀ   ⇔   K_aug = A − A_{:,Q} M⁻¹ A_{Q,:}        (Woodbury)
//! k_H(x,x') = k₁(x,x') − k₁(x,Q) M⁻¹ k₁(Q,x')           (x, x' ∉ O)
//! k_H(x,O)  = k₁(x,O) − k₁(x,Q) M⁻¹ A_{Q,:}
//! ```
//!
//! **Stable evaluation.** Writing A⁻¹ + E_Q C₂⁻¹ E_Qᵀ for K_aug⁻¹ gives, exactly,
//!
//! ```text
//! y_augᵀ K_aug⁻¹ y_aug = y_augᵀ A⁻¹ y_aug + μ₂ᵀ C₂⁻¹ μ₂
//! log|K_aug|           = log|A| + log|C₂| − log|M|                   (determinant lemma)
//! K_aug⁻¹ k_H(O, x)     = A⁻¹ k₁(O, x)       (x ∉ O; the M⁻¹ terms cancel)
//! ```
//!
//! so the log marginal likelihood is log N(y_aug | 0, A) + ½ log|M| − ½ μ₂ᵀC₂⁻¹μ₂ − ½ log|C₂|
//! (the last two do not depend on θ₁, and the training objective leaves them out: see
//! [`HybridModel::log_marginal_likelihood`]), and the predictive at x ∉ O is the plain GP posterior
//! k₁(x,O)A⁻¹y_aug, k₁(x,x') − k₁(x,O)A⁻¹k₁(O,x'): C₂ acts on the Hybrid model only through
//! the ½ log|M| term of training. Every θ-dependent quantity is a factorisation of A or M, which
//! carry σ₁² on the diagonal. The earlier evaluation formed K_aug = A − A_{:,Q}M⁻¹A_{Q,:}, a
//! difference that is nearly singular when C₂ is (e.g. K₂^q of close queried points with no
//! shared variance); its θ-scaled jitter then made the objective rough and the refit escape to
//! the bounds (docs/results.md, "Hybrid instability").
//!
//! Gradient: G_A = ½(ααᵀ − A⁻¹) + ½ S_QQ(M⁻¹) with α = A⁻¹y_aug (S_QQ places a q×q block in
//! the Q rows and columns), contracted with ∂K₁/∂θ by the kernel; ∂/∂log σ₁² = σ₁² tr G_A.
//!
//! **Yu et al.'s noise placement** ([`HybridForm::Yu`], docs/hybrid-yu.md). Yu et al. 2007
//! (Bayesian co-training, eq 4.4 of Thomas 2017) combine the *view* covariances inside the
//! inverse and add the output noise Ψ(y, f_c) = N(y | f_c, σ₁²I) outside. With view 1 the latent
//! K₁ over O and view 2 reaching only the queried rows through C₂:
//!
//! ```text
//! K_c   = (K₁⁻¹ + E_Q C₂⁻¹ E_Qᵀ)⁻¹ = K₁ − K₁(O,Q) M'⁻¹ K₁(Q,O),   M' = K₁(Q,Q) + C₂   (Woodbury)
//! K_aug = K_c + σ₁²I
//! k_c(x,x') = k₁(x,x') − k₁(x,Q) M'⁻¹ k₁(Q,x'),   k_c(x,O) = k₁(x,O) R,   R = I − E_Q M'⁻¹ K₁(Q,O)
//! ```
//!
//! The predictive of f_c at x ∉ O is k_c(x,O)K_aug⁻¹y_aug and k_c(x,x) − k_c(x,O)K_aug⁻¹k_c(O,x):
//! C₂ no longer cancels, so the shared uncertainty moves the mean. Gradient: ∂K_c = Rᵀ ∂K₁ R
//! (the ∂M'⁻¹ terms combine), so ∂LML/∂θ = tr(R G Rᵀ ∂K₁) with G = ½(ααᵀ − K_aug⁻¹).

use crate::readings::HybridForm;
use dpcotrain_gp::kernels::Kernel;
use dpcotrain_gp::linalg::{Cholesky, JitterPolicy};
use dpcotrain_gp::{Evaluation, GpError, NoiseVariance, Objective, Prediction};
use nalgebra::{DMatrix, DVector};

const LN_2PI: f64 = 1.8378770664093453;

#[derive(Debug, Clone)]
pub struct HybridModel {
    pub kernel: Box<dyn Kernel>,
    pub noise: NoiseVariance,
    /// O = [X_tr; X₁^q].
    x_o: DMatrix<f64>,
    /// y_aug = [y_tr; μ₂].
    y: DVector<f64>,
    /// Number of queried rows q (the last q rows of O).
    q: usize,
    /// C₂ = K₂^q + V₂ (q × q), PSD-projected.
    c2: DMatrix<f64>,
    /// Where the noise goes (joint, the default; or Yu et al.'s placement).
    form: HybridForm,
}

/// The factorisations of the Yu form (module docs): K_aug = K_c + σ₁²I and M' = K₁(Q,Q) + C₂.
#[derive(Debug, Clone)]
struct YuParts {
    /// K₁(O, O) without the noise.
    k: DMatrix<f64>,
    /// P = M'⁻¹ K₁(Q, O) (q × n), so that R = I − E_Q P.
    p: DMatrix<f64>,
    chol_m: Option<Cholesky>,
    /// K_aug = K₁ − K₁(O,Q) P + σ₁²I.
    chol_aug: Cholesky,
    /// K_aug⁻¹ y_aug.
    alpha: DVector<f64>,
}

/// Factorisations shared by objective, gradient and prediction.
#[derive(Debug, Clone)]
struct Parts {
    /// K₁(O, O) (without the noise), for the gradient contraction.
    k: DMatrix<f64>,
    /// A = K₁(O, O) + σ₁²I.
    chol_a: Cholesky,
    /// M = A_QQ + C₂ (none when q = 0).
    chol_m: Option<Cholesky>,
    /// α = A⁻¹ y_aug.
    alpha: DVector<f64>,
}

impl HybridModel {
    pub fn new(
        kernel: Box<dyn Kernel>,
        noise: NoiseVariance,
        x_o: DMatrix<f64>,
        y: DVector<f64>,
        q: usize,
        c2: DMatrix<f64>,
    ) -> Self {
        HybridModel { kernel, noise, x_o, y, q, c2, form: HybridForm::Joint }
    }

    /// The same model with the noise placed as `form` says.
    pub fn with_form(mut self, form: HybridForm) -> Self {
        self.form = form;
        self
    }

    /// R v = v − E_Q P v (R = I − E_Q M'⁻¹ K₁(Q,O); module docs), column by column.
    fn apply_r(&self, yu: &YuParts, v: &DMatrix<f64>) -> DMatrix<f64> {
        let qs = self.n_o() - self.q;
        let mut out = v.clone();
        if self.q > 0 {
            let pv = &yu.p * v;
            let mut rows = out.rows_mut(qs, self.q);
            rows -= pv;
        }
        out
    }

    /// Rᵀ v = v − Pᵀ v_Q.
    fn apply_rt(&self, yu: &YuParts, v: &DMatrix<f64>) -> DMatrix<f64> {
        let qs = self.n_o() - self.q;
        if self.q == 0 {
            return v.clone();
        }
        v - yu.p.tr_mul(&v.rows(qs, self.q))
    }

    fn yu_parts(&self) -> Result<YuParts, GpError> {
        let n = self.n_o();
        let q = self.q;
        let qs = n - q;
        let k = self.kernel.k(self.x_o.as_view(), self.x_o.as_view());
        let (p, chol_m) = if q == 0 {
            (DMatrix::zeros(0, n), None)
        } else {
            let m = k.view((qs, qs), (q, q)) + &self.c2;
            let chol = Cholesky::factor(m, "Hybrid (Yu) M' = K₁(Q,Q) + C₂", JitterPolicy::IF_NEEDED)?;
            (chol.solve(&k.rows(qs, q).clone_owned()), Some(chol))
        };
        let mut aug = &k - k.columns(qs, q) * &p;
        // Symmetrise the difference (round-off), then add the output noise.
        aug = (&aug + aug.transpose()) * 0.5;
        for i in 0..n {
            aug[(i, i)] += self.noise.variance;
        }
        let chol_aug = Cholesky::factor(aug, "Hybrid (Yu) K_c + σ₁²I", JitterPolicy::IF_NEEDED)?;
        let alpha = chol_aug.solve_vec(&self.y);
        Ok(YuParts { k, p, chol_m, chol_aug, alpha })
    }

    fn yu_predict(&self, yu: &YuParts, xs: &DMatrix<f64>, full_cov: bool) -> Result<Prediction, GpError> {
        let qs = self.n_o() - self.q;
        let kos = self.kernel.k(self.x_o.as_view(), xs.as_view());
        // k_c(O, x) = Rᵀ k₁(O, x).
        let kc = self.apply_rt(yu, &kos);
        let mean = kc.tr_mul(&yu.alpha);
        // Prior of f_c at x: k₁(x,x') − k₁(x,Q) M'⁻¹ k₁(Q,x').
        let mut w = kos.rows(qs, self.q).clone_owned();
        if let Some(c) = &yu.chol_m {
            c.solve_l_in_place(&mut w);
        }
        let mut v = kc;
        yu.chol_aug.solve_l_in_place(&mut v);
        let var = self.kernel.diag(xs.as_view())
            - dpcotrain_gp::linalg::col_sq_norms(&w)
            - dpcotrain_gp::linalg::col_sq_norms(&v);
        let cov = full_cov.then(|| {
            let mut c = self.kernel.k(xs.as_view(), xs.as_view());
            dpcotrain_gp::linalg::gemm(&mut c, -1.0, w.as_view(), true, w.as_view(), false, true);
            dpcotrain_gp::linalg::gemm(&mut c, -1.0, v.as_view(), true, v.as_view(), false, true);
            c
        });
        Ok(Prediction::new(mean, var, cov))
    }

    fn yu_evaluate(&self) -> Result<Evaluation, GpError> {
        let yu = self.yu_parts()?;
        let n = self.n_o();
        let lml = -0.5 * self.y.dot(&yu.alpha) - 0.5 * yu.chol_aug.logdet() - 0.5 * n as f64 * LN_2PI;
        let mut g = lml_weight(&yu.chol_aug, &yu.alpha);
        g *= 0.5;
        let noise_grad = self.noise.variance * g.trace();
        // ∂K_c = Rᵀ ∂K₁ R, so the kernel sees R G Rᵀ.
        let rg = self.apply_r(&yu, &g);
        let rgrt = self.apply_r(&yu, &rg.transpose());
        let sym = (&rgrt + rgrt.transpose()) * 0.5;
        let mut grad = self.kernel.vjp_sym_given_k(self.x_o.as_view(), yu.k.as_view(), sym.as_view());
        grad.push(noise_grad);
        Ok(Evaluation { value: lml, grad, jitter: yu.chol_aug.jitter() })
    }

    fn n_o(&self) -> usize {
        self.x_o.nrows()
    }

    fn parts(&self) -> Result<Parts, GpError> {
        let n = self.n_o();
        let q = self.q;
        let qs = n - q;
        let k1 = self.kernel.k(self.x_o.as_view(), self.x_o.as_view());
        let mut a = k1.clone();
        for i in 0..n {
            a[(i, i)] += self.noise.variance;
        }
        let chol_m = if q == 0 {
            None
        } else {
            let m = a.view((qs, qs), (q, q)) + &self.c2;
            Some(Cholesky::factor(m, "Hybrid M = A_QQ + C₂", JitterPolicy::IF_NEEDED)?)
        };
        let chol_a = Cholesky::factor(a, "Hybrid A = K₁(O,O) + σ₁²I", JitterPolicy::IF_NEEDED)?;
        let alpha = chol_a.solve_vec(&self.y);
        Ok(Parts { k: k1, chol_a, chol_m, alpha })
    }

    /// log N(y_aug | 0, K_aug): the training objective ([`Objective::evaluate`]) plus its
    /// θ-independent part −½μ₂ᵀC₂⁻¹μ₂ − ½log|C₂|. The objective leaves that part out because
    /// it does not move the optimum and, when C₂ is nearly singular (K₂^q of close queried
    /// points, no shared variance), it is of order 1e13 and would swamp the optimiser's
    /// relative convergence test and the objective's round-off.
    pub fn log_marginal_likelihood(&self) -> Result<f64, GpError> {
        if self.form == HybridForm::Yu {
            return Ok(self.evaluate()?.value);
        }
        Ok(self.evaluate()?.value + self.peer_constant()?)
    }

    /// −½ μ₂ᵀC₂⁻¹μ₂ − ½ log|C₂|: the θ-independent part of the augmented likelihood.
    fn peer_constant(&self) -> Result<f64, GpError> {
        if self.q == 0 {
            return Ok(0.0);
        }
        let chol_c = Cholesky::factor_of(&self.c2, "Hybrid C₂ = K₂^q + V₂", JitterPolicy::IF_NEEDED)?;
        let mu = self.y.rows(self.n_o() - self.q, self.q).clone_owned();
        let w = chol_c.solve_l_vec(&mu);
        Ok(-0.5 * w.norm_squared() - 0.5 * chol_c.logdet())
    }

    /// Latent predictive at arbitrary points (not among the queried entities).
    pub fn predict(&self, xs: &DMatrix<f64>, full_cov: bool) -> Result<Prediction, GpError> {
        self.clone().into_predictor()?.predict(xs, full_cov)
    }

    /// The factorisations every prediction needs, computed once.
    pub fn into_predictor(self) -> Result<HybridPredictor, GpError> {
        let parts = match self.form {
            HybridForm::Joint => Factored::Joint(self.parts()?),
            HybridForm::Yu => Factored::Yu(self.yu_parts()?),
        };
        Ok(HybridPredictor { model: self, parts })
    }

    /// At x ∉ O: k₁(x,O)α and k₁(x,x') − k₁(x,O)A⁻¹k₁(O,x') (module docs).
    fn predict_with(&self, parts: &Parts, xs: &DMatrix<f64>, full_cov: bool) -> Result<Prediction, GpError> {
        let kso = self.kernel.k(xs.as_view(), self.x_o.as_view());
        let mean = &kso * &parts.alpha;
        let mut v = kso.transpose();
        parts.chol_a.solve_l_in_place(&mut v);
        let var = self.kernel.diag(xs.as_view()) - dpcotrain_gp::linalg::col_sq_norms(&v);
        let cov = full_cov.then(|| {
            let mut c = self.kernel.k(xs.as_view(), xs.as_view());
            dpcotrain_gp::linalg::gemm(&mut c, -1.0, v.as_view(), true, v.as_view(), false, true);
            c
        });
        Ok(Prediction::new(mean, var, cov))
    }

    /// Rows R = O and the map ∂w/∂y_tr (|O| × n_tr) of f = k₁(·, O) w, w = A⁻¹ y_aug.
    /// Under the Yu form f = k₁(·, O) R K_aug⁻¹ y_aug, so the map is R K_aug⁻¹ restricted to the
    /// private columns.
    pub fn mean_weights(&self) -> Result<(DMatrix<f64>, DMatrix<f64>), GpError> {
        let n = self.n_o();
        let ntr = n - self.q;
        let w = match self.form {
            HybridForm::Joint => self.parts()?.chol_a.solve(&DMatrix::<f64>::identity(n, ntr)),
            HybridForm::Yu => {
                let yu = self.yu_parts()?;
                self.apply_r(&yu, &yu.chol_aug.solve(&DMatrix::<f64>::identity(n, ntr)))
            }
        };
        Ok((self.x_o.clone(), w))
    }
}

/// ααᵀ − A⁻¹ for A = chol, α = A⁻¹y (twice the weight that ∂log N(y | 0, A)/∂A contracts), with
/// the jitter ε = rel·mean diag(A) shifting the diagonal by rel·tr(·)/dim.
fn lml_weight(chol: &Cholesky, alpha: &DVector<f64>) -> DMatrix<f64> {
    let mut g = chol.inverse();
    g.neg_mut();
    g.ger(1.0, alpha, alpha, 1.0);
    let n = g.nrows();
    let shift = chol.jitter_slope() * g.trace() / n as f64;
    for i in 0..n {
        g[(i, i)] += shift;
    }
    g
}

/// The factorisations of either form.
#[derive(Debug, Clone)]
enum Factored {
    Joint(Parts),
    Yu(YuParts),
}

/// A [`HybridModel`] with its factorisations for repeated prediction.
#[derive(Debug, Clone)]
pub struct HybridPredictor {
    model: HybridModel,
    parts: Factored,
}

impl HybridPredictor {
    /// The predictive mean alone: `predict(xs, _).mean`, without the triangular solve under
    /// the joint form (Yu's form computes the whole predictive).
    pub fn predict_mean(&self, xs: &DMatrix<f64>) -> Result<DVector<f64>, GpError> {
        match &self.parts {
            Factored::Joint(p) => Ok(&self.model.kernel.k(xs.as_view(), self.model.x_o.as_view()) * &p.alpha),
            Factored::Yu(p) => Ok(self.model.yu_predict(p, xs, false)?.mean),
        }
    }

    /// Latent predictive at arbitrary points (not among the queried entities).
    pub fn predict(&self, xs: &DMatrix<f64>, full_cov: bool) -> Result<Prediction, GpError> {
        match &self.parts {
            Factored::Joint(p) => self.model.predict_with(p, xs, full_cov),
            Factored::Yu(p) => self.model.yu_predict(p, xs, full_cov),
        }
    }
}

impl Objective for HybridModel {
    crate::kernel_noise_params!();
    fn evaluate(&self) -> Result<Evaluation, GpError> {
        if self.form == HybridForm::Yu {
            return self.yu_evaluate();
        }
        let parts = self.parts()?;
        let n = self.n_o();
        let q = self.q;
        let qs = n - q;
        let logdet_m = parts.chol_m.as_ref().map_or(0.0, |c| c.logdet());
        // The θ-independent −½μ₂ᵀC₂⁻¹μ₂ − ½log|C₂| is left out (see `log_marginal_likelihood`).
        let lml =
            -0.5 * self.y.dot(&parts.alpha) - 0.5 * parts.chol_a.logdet() + 0.5 * logdet_m - 0.5 * n as f64 * LN_2PI;
        // G_A = ½(ααᵀ − A⁻¹) + ½ S_QQ(M⁻¹), with each jitter ε = rel·mean diag(·) shifting the
        // diagonal of its own block by rel·tr(∂/∂·)/dim.
        let mut g = lml_weight(&parts.chol_a, &parts.alpha);
        if let Some(chol_m) = &parts.chol_m {
            let m_inv = chol_m.inverse();
            let shift_m = chol_m.jitter_slope() * m_inv.trace() / q as f64;
            let mut block = g.view_mut((qs, qs), (q, q));
            block += m_inv;
            for i in 0..q {
                block[(i, i)] += shift_m;
            }
        }
        g *= 0.5;
        // G is symmetric and the kernel part of A is K₁(O, O): contract it without
        // re-evaluating the kernel.
        let mut grad = self.kernel.vjp_sym_given_k(self.x_o.as_view(), parts.k.as_view(), g.as_view());
        grad.push(self.noise.variance * g.trace());
        Ok(Evaluation { value: lml, grad, jitter: parts.chol_a.jitter() })
    }
}
