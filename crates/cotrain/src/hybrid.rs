//! The Hybrid combiner [Thomas §4.2.2.3, eqs 4.9–4.10] in the closed form of science-notes
//! §1.9.4 (D15), which predicts at arbitrary points without transductive re-inversion.
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
//! Training maximises log N(y_aug | 0, K_aug(θ₁)) with C₂ constant. With W = ααᵀ − K_aug⁻¹ and
//! P = M⁻¹A_{Q,:}, the gradient w.r.t. A is
//! G_A = ½[W − S_Q(W Pᵀ) − S_Q(W Pᵀ)ᵀ + S_QQ(P W Pᵀ)] (S_Q scatters into the Q columns),
//! contracted with ∂K₁/∂θ by the kernel, and ∂/∂σ² = tr G_A.

use dpcotrain_gp::kernels::Kernel;
use dpcotrain_gp::linalg::{Cholesky, JitterPolicy, matmul};
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
    chol_m: Option<Cholesky>,
    /// P = M⁻¹ A_{Q,:} (q × |O|).
    p: DMatrix<f64>,
    chol_aug: Cholesky,
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
        let (k_aug, chol_m, p) = if q == 0 {
            (a, None, DMatrix::zeros(0, n))
        } else {
            let m = a.view((qs, qs), (q, q)) + &self.c2;
            let chol_m = Cholesky::factor(m, "Hybrid M = A_QQ + C₂", JitterPolicy::IF_NEEDED)?;
            let p = chol_m.solve(&a.rows(qs, q).clone_owned());
            let mut k = a.clone();
            // K_aug = A − A_{:,Q} P
            dpcotrain_gp::linalg::gemm(&mut k, -1.0, a.columns(qs, q), false, p.as_view(), false, true);
            // Symmetrise the lower triangle (the only part the factorisation reads).
            for j in 0..n {
                for i in j + 1..n {
                    k[(i, j)] = (k[(i, j)] + k[(j, i)]) * 0.5;
                }
            }
            (k, Some(chol_m), p)
        };
        let chol_aug = Cholesky::factor(k_aug, "Hybrid K_aug", JitterPolicy::IF_NEEDED)?;
        let alpha = chol_aug.solve_vec(&self.y);
        Ok(Parts { k: k1, chol_m, p, chol_aug, alpha })
    }

    /// k_H(xs, O) (|xs| × |O|) and, when asked, k_H(xs, xs).
    fn k_h(&self, parts: &Parts, xs: &DMatrix<f64>, full: bool) -> (DMatrix<f64>, Option<DMatrix<f64>>, DVector<f64>) {
        let n = self.n_o();
        let qs = n - self.q;
        let mut kso = self.kernel.k(xs.as_view(), self.x_o.as_view());
        let mut diag = self.kernel.diag(xs.as_view());
        let mut kss = full.then(|| self.kernel.k(xs.as_view(), xs.as_view()));
        if let Some(chol_m) = &parts.chol_m {
            let ksq = kso.columns(qs, self.q).clone_owned();
            // k₁(x,Q) P
            dpcotrain_gp::linalg::gemm(&mut kso, -1.0, ksq.as_view(), false, parts.p.as_view(), false, true);
            // k₁(x,Q) M⁻¹ k₁(Q,x')
            let mut v = ksq.transpose();
            chol_m.solve_l_in_place(&mut v);
            diag -= dpcotrain_gp::linalg::col_sq_norms(&v);
            if let Some(kss) = kss.as_mut() {
                dpcotrain_gp::linalg::gemm(kss, -1.0, v.as_view(), true, v.as_view(), false, true);
            }
        }
        (kso, kss, diag)
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

    fn predict_with(&self, parts: &Parts, xs: &DMatrix<f64>, full_cov: bool) -> Result<Prediction, GpError> {
        let (kso, kss, diag) = self.k_h(parts, xs, full_cov);
        let mean = &kso * &parts.alpha;
        let mut v = kso.transpose();
        parts.chol_aug.solve_l_in_place(&mut v);
        let var = diag - dpcotrain_gp::linalg::col_sq_norms(&v);
        let cov = kss.map(|mut c| {
            dpcotrain_gp::linalg::gemm(&mut c, -1.0, v.as_view(), true, v.as_view(), false, true);
            c
        });
        Ok(Prediction::new(mean, var, cov))
    }

    /// Rows R = O and the map ∂w/∂y_tr (|O| × n_tr) of f = k₁(·, O) w, w = (I − E_Q P) K_aug⁻¹ y.
    pub fn mean_weights(&self) -> Result<(DMatrix<f64>, DMatrix<f64>), GpError> {
        let parts = self.parts()?;
        let n = self.n_o();
        let ntr = n - self.q;
        let kinv = parts.chol_aug.inverse();
        let mut w = kinv.columns(0, ntr).clone_owned();
        if self.q > 0 {
            let pw = matmul(parts.p.as_view(), false, w.as_view(), false); // q × ntr
            let mut lower = w.rows_mut(ntr, self.q);
            lower -= pw;
        }
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
        let lml = -0.5 * self.y.dot(&parts.alpha) - 0.5 * parts.chol_aug.logdet() - 0.5 * n as f64 * LN_2PI;
        let mut w = parts.chol_aug.inverse();
        w.neg_mut();
        w.ger(1.0, &parts.alpha, &parts.alpha, 1.0);
        // Jitter ε = rel·mean diag K_aug ⇒ shift on the diagonal of ∂/∂K_aug.
        let rel = parts.chol_aug.jitter().relative;
        let shift = rel * w.trace() / n as f64;
        for i in 0..n {
            w[(i, i)] += shift;
        }
        let mut g = w.clone();
        if q > 0 {
            let wpt = matmul(w.as_view(), false, parts.p.as_view(), true); // n × q
            let pwpt = matmul(parts.p.as_view(), false, wpt.as_view(), false); // q × q
            {
                let mut cols = g.columns_mut(qs, q);
                cols -= &wpt;
            }
            {
                let mut rows = g.rows_mut(qs, q);
                rows -= wpt.transpose();
            }
            let mut block = g.view_mut((qs, qs), (q, q));
            block += pwpt;
        }
        g *= 0.5;
        // G is symmetric and the kernel part of A is K₁(O, O): contract it without
        // re-evaluating the kernel.
        let mut grad = self.kernel.vjp_sym_given_k(self.x_o.as_view(), parts.k.as_view(), g.as_view());
        grad.push(self.noise.variance * g.trace());
        Ok(Evaluation { value: lml, grad, jitter: parts.chol_aug.jitter() })
    }
}
