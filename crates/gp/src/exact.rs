//! Exact GP regression [Thomas 2017 eqs 1.17–1.18; Rasmussen & Williams 2006, Algorithm 2.1 and eq 5.9].
//!
//! ```text
//! K_y = K_ff + Σ_noise (+ εI from the jitter ladder, if needed)
//! log p(y) = −½ yᵀα − Σ log L_ii − (N/2) log 2π,   L = chol(K_y), α = K_y⁻¹y
//! ∂/∂θ = ½ tr((ααᵀ − K_y⁻¹) ∂K_y/∂θ)
//! μ* = K_*f α,  Σ* = K_** − vᵀv,  v = L⁻¹K_f*
//! ```
//!
//! Parameter vector: the kernel's log-parameters, then log σ² if the noise is learnable.

use crate::kernels::{Bounds, Kernel};
use crate::linalg::{Cholesky, JitterPolicy, col_sq_norms};
use crate::noise::NoiseModel;
use crate::{Evaluation, GpError, Objective, Prediction, validate_data, validate_inputs};
use nalgebra::{DMatrix, DVector};

const LN_2PI: f64 = 1.8378770664093453;

#[derive(Debug, Clone)]
pub struct ExactGp {
    pub kernel: Box<dyn Kernel>,
    pub noise: NoiseModel,
    x: DMatrix<f64>,
    y: DVector<f64>,
}

/// The fitted posterior: L = chol(K_y) and α = K_y⁻¹y, cached for prediction.
#[derive(Debug, Clone)]
pub struct ExactPosterior {
    kernel: Box<dyn Kernel>,
    x: DMatrix<f64>,
    chol: Cholesky,
    alpha: DVector<f64>,
    lml: f64,
}

impl ExactGp {
    /// A new exact GP on rows `x` (N×D) with targets `y`. Validates shapes and finiteness.
    pub fn new(kernel: Box<dyn Kernel>, noise: NoiseModel, x: DMatrix<f64>, y: DVector<f64>) -> Result<Self, GpError> {
        validate_data(&x, &y, kernel.as_ref())?;
        noise.validate(x.nrows())?;
        Ok(ExactGp { kernel, noise, x, y })
    }

    pub fn x(&self) -> &DMatrix<f64> {
        &self.x
    }
    pub fn y(&self) -> &DVector<f64> {
        &self.y
    }

    /// Factorise K_y and cache what prediction needs.
    pub fn posterior(&self) -> Result<ExactPosterior, GpError> {
        self.posterior_from_k(self.kernel.k(self.x.as_view(), self.x.as_view()))
    }

    fn posterior_from_k(&self, k: DMatrix<f64>) -> Result<ExactPosterior, GpError> {
        let mut ky = k;
        self.noise.add_to(&mut ky);
        let chol = Cholesky::factor(ky, "K_ff + noise", JitterPolicy::IF_NEEDED)?;
        let alpha = chol.solve_vec(&self.y);
        let lml = -0.5 * self.y.dot(&alpha) - 0.5 * chol.logdet() - 0.5 * self.y.len() as f64 * LN_2PI;
        Ok(ExactPosterior { kernel: self.kernel.clone(), x: self.x.clone(), chol, alpha, lml })
    }

    /// Log marginal likelihood only.
    pub fn log_marginal_likelihood(&self) -> Result<f64, GpError> {
        Ok(self.posterior()?.lml)
    }
}

impl Objective for ExactGp {
    fn params(&self) -> Vec<f64> {
        let mut p = self.kernel.params();
        let s = self.noise.sigma2();
        if s.learn {
            p.push(s.variance.ln());
        }
        p
    }

    fn set_params(&mut self, p: &[f64]) {
        let nk = self.kernel.n_params();
        self.kernel.set_params(&p[..nk]);
        let s = self.noise.sigma2_mut();
        if s.learn {
            s.variance = p[nk].exp();
        }
    }

    fn bounds(&self) -> Vec<Bounds> {
        let mut b = self.kernel.bounds();
        let s = self.noise.sigma2();
        if s.learn {
            b.push(s.bounds);
        }
        b
    }

    fn param_names(&self) -> Vec<String> {
        let mut n = self.kernel.param_names();
        if self.noise.sigma2().learn {
            n.push("noise_variance".into());
        }
        n
    }

    /// LML and its gradient. With jitter ε = r·mean(diag K_y) the gradient includes ε's
    /// dependence on θ, so it is exact for the objective actually evaluated.
    fn evaluate(&self) -> Result<Evaluation, GpError> {
        let k = self.kernel.k(self.x.as_view(), self.x.as_view());
        let mut ky = k.clone();
        self.noise.add_to(&mut ky);
        let chol = Cholesky::factor(ky, "K_ff + noise", JitterPolicy::IF_NEEDED)?;
        let alpha = chol.solve_vec(&self.y);
        let n = self.y.len();
        let lml = -0.5 * self.y.dot(&alpha) - 0.5 * chol.logdet() - 0.5 * n as f64 * LN_2PI;
        // W = ααᵀ − K_y⁻¹, ∂LML/∂K_y = G = ½W, formed on the lower triangle only (the
        // symmetric kernel contraction reads nothing else).
        let mut g = chol.inverse_lower();
        let mut tr_w = 0.0;
        {
            let a = alpha.as_slice();
            let data = g.as_mut_slice();
            for j in 0..n {
                let col = &mut data[j * n + j..(j + 1) * n];
                let aj = a[j];
                for (gij, &ai) in col.iter_mut().zip(&a[j..]) {
                    *gij = ai * aj - *gij;
                }
                tr_w += col[0];
                col.iter_mut().for_each(|v| *v *= 0.5);
            }
        }
        let rel = chol.jitter_slope();
        // ε = rel·(Σ_i K_ii + Σ_i noise_ii)/N ⇒ ∂ε/∂K_ii = rel/N and ∂ε/∂σ² = rel.
        for i in 0..n {
            g[(i, i)] += 0.5 * rel * tr_w / n as f64;
        }
        let mut grad = self.kernel.vjp_sym_given_k(self.x.as_view(), k.as_view(), g.as_view());
        let s = self.noise.sigma2();
        if s.learn {
            grad.push(s.variance * 0.5 * tr_w * (1.0 + rel));
        }
        Ok(Evaluation { value: lml, grad, jitter: chol.jitter() })
    }
}

impl ExactPosterior {
    pub fn log_marginal_likelihood(&self) -> f64 {
        self.lml
    }

    pub fn jitter(&self) -> crate::Jitter {
        self.chol.jitter()
    }

    /// α = K_y⁻¹y.
    pub fn alpha(&self) -> &DVector<f64> {
        &self.alpha
    }

    pub fn cholesky(&self) -> &Cholesky {
        &self.chol
    }

    /// Latent predictive mean K_*f α at `xs` (rows) alone: no triangular solve, so O(N·M)
    /// instead of [`Self::predict`]'s O(N²·M); the same numbers as `predict(xs, _).mean`.
    pub fn predict_mean(&self, xs: &DMatrix<f64>) -> Result<DVector<f64>, GpError> {
        self.check_test_inputs(xs)?;
        Ok(self.kernel.k(self.x.as_view(), xs.as_view()).tr_mul(&self.alpha))
    }

    fn check_test_inputs(&self, xs: &DMatrix<f64>) -> Result<(), GpError> {
        validate_inputs(xs, self.kernel.as_ref(), "test inputs")?;
        if xs.ncols() != self.x.ncols() {
            return Err(GpError::shape("test inputs", xs.ncols(), "columns", self.x.ncols(), "training-input columns"));
        }
        Ok(())
    }

    /// Latent predictive at `xs` (rows): mean K_*f α, variance diag(K_**) − colsum(v²),
    /// and with `full_cov` the covariance K_** − vᵀv, v = L⁻¹K_f*.
    pub fn predict(&self, xs: &DMatrix<f64>, full_cov: bool) -> Result<Prediction, GpError> {
        self.check_test_inputs(xs)?;
        let kfs = self.kernel.k(self.x.as_view(), xs.as_view());
        let mean = kfs.tr_mul(&self.alpha);
        let mut v = kfs;
        self.chol.solve_l_in_place(&mut v);
        let kss_diag = self.kernel.diag(xs.as_view());
        let var = &kss_diag - col_sq_norms(&v);
        let cov = if full_cov {
            let mut c = self.kernel.k(xs.as_view(), xs.as_view());
            crate::linalg::gemm(&mut c, -1.0, v.as_view(), true, v.as_view(), false, true);
            Some(c)
        } else {
            None
        };
        Ok(Prediction::new(mean, var, cov))
    }
}
