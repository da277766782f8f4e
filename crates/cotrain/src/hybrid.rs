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
        HybridModel { kernel, noise, x_o, y, q, c2 }
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
        Ok(self.evaluate()?.value + self.peer_constant()?)
    }

    /// −½ μ₂ᵀC₂⁻¹μ₂ − ½ log|C₂|: the θ-independent part of the augmented likelihood.
    fn peer_constant(&self) -> Result<f64, GpError> {
        if self.q == 0 {
            return Ok(0.0);
        }
        let chol_c = Cholesky::factor(self.c2.clone(), "Hybrid C₂ = K₂^q + V₂", JitterPolicy::IF_NEEDED)?;
        let mu = self.y.rows(self.n_o() - self.q, self.q).clone_owned();
        let w = chol_c.solve_l_vec(&mu);
        Ok(-0.5 * w.norm_squared() - 0.5 * chol_c.logdet())
    }

    /// Latent predictive at arbitrary points (not among the queried entities).
    pub fn predict(&self, xs: &DMatrix<f64>, full_cov: bool) -> Result<Prediction, GpError> {
        let parts = self.parts()?;
        self.predict_with(&parts, xs, full_cov)
    }

    /// The factorisations every prediction needs, computed once.
    pub fn into_predictor(self) -> Result<HybridPredictor, GpError> {
        let parts = self.parts()?;
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
    pub fn mean_weights(&self) -> Result<(DMatrix<f64>, DMatrix<f64>), GpError> {
        let parts = self.parts()?;
        let n = self.n_o();
        let ntr = n - self.q;
        let w = parts.chol_a.solve(&DMatrix::<f64>::identity(n, ntr));
        Ok((self.x_o.clone(), w))
    }
}

/// A [`HybridModel`] with its factorisations (K_aug, M) for repeated prediction.
#[derive(Debug, Clone)]
pub struct HybridPredictor {
    model: HybridModel,
    parts: Parts,
}

impl HybridPredictor {
    /// Latent predictive at arbitrary points (not among the queried entities).
    pub fn predict(&self, xs: &DMatrix<f64>, full_cov: bool) -> Result<Prediction, GpError> {
        self.model.predict_with(&self.parts, xs, full_cov)
    }
}

impl Objective for HybridModel {
    crate::kernel_noise_params!();
    fn evaluate(&self) -> Result<Evaluation, GpError> {
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
        let mut g = parts.chol_a.inverse();
        g.neg_mut();
        g.ger(1.0, &parts.alpha, &parts.alpha, 1.0);
        let shift_a = parts.chol_a.jitter().relative * g.trace() / n as f64;
        for i in 0..n {
            g[(i, i)] += shift_a;
        }
        if let Some(chol_m) = &parts.chol_m {
            let m_inv = chol_m.inverse();
            let shift_m = chol_m.jitter().relative * m_inv.trace() / q as f64;
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
