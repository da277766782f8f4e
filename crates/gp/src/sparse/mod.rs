//! Sparse GP regression with inducing inputs Z: the collapsed Titsias bound (SGPR/VFE) and the
//! DTC and FITC approximate marginal likelihoods [Bauer, van der Wilk & Rasmussen 2016 §2.3 eqs 5–7; Titsias 2009; Snelson & Ghahramani 2006].
//!
//! All three share one O(NM²) computation (`collapsed.rs`): with L = chol(K_uu + εI) and
//! Λ the (effective) per-point noise,
//!
//! ```text
//! A = L⁻¹ K_uf Λ^{-½},   B = I + AAᵀ,   L_B = chol(B),   c = L_B⁻¹ A Λ^{-½} y
//! log N(y | 0, Q_ff + Λ) = −(N/2) log 2π − Σ log L_B,ii − ½ Σ log λ_n − ½(‖Λ^{-½}y‖² − ‖c‖²)
//! ```
//!
//! - VFE: Λ = Σ_noise, objective = the above − ½ Σ (k_nn − q_nn)/λ_n (trace term).
//! - DTC: Λ = Σ_noise, objective = the above.
//! - FITC: Λ = diag(K_ff − Q_ff) + Σ_noise, objective = the above.
//!
//! The inducing features are ordinary points (u = f(Z)) or Walder et al.'s (2008) multiscale
//! features (see [`crate::features`]); the collapsed code sees only K_uu, K_uf and their vjps.
//!
//! Parameter vector: kernel log-parameters (unless `optimize_kernel` is off), then log σ² (if
//! learnable), then Z (column-major,
//! natural scale) when `optimize_inducing` is set, then, for multiscale features, their
//! unconstrained widths ρ (column-major).

mod collapsed;
mod posterior;

pub use collapsed::{block_entries, set_block_entries};
pub use posterior::SparsePosterior;

use crate::features::{InducingFeatures, Multiscale};
use crate::kernels::{Bounds, Kernel};
use crate::noise::NoiseModel;
use crate::{Evaluation, GpError, Objective, Unsupported, validate_data, validate_inputs};
use nalgebra::{DMatrix, DVector};

/// Which sparse approximation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum SparseKind {
    /// Titsias's collapsed variational bound (SGPR).
    Vfe,
    /// Deterministic training conditional (VFE without the trace term).
    Dtc,
    /// Fully independent training conditional.
    Fitc,
}

impl SparseKind {
    pub fn name(self) -> &'static str {
        match self {
            SparseKind::Vfe => "vfe",
            SparseKind::Dtc => "dtc",
            SparseKind::Fitc => "fitc",
        }
    }
}

/// The terms of a sparse objective, the diagnostics of Bauer, van der Wilk & Rasmussen (2016,
/// eqs 8–10): objective = `constant` + `complexity` + `data_fit` + `trace`.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct ObjectiveTerms {
    /// −(N/2) log 2π.
    pub constant: f64,
    /// −½ log |Q_ff + Λ| (the complexity penalty).
    pub complexity: f64,
    /// −½ yᵀ(Q_ff + Λ)⁻¹ y (the data fit).
    pub data_fit: f64,
    /// VFE: −½ Σ_n (k_nn − q_nn)/λ_n (the trace term, ≤ 0); 0 for DTC and FITC.
    pub trace: f64,
    /// FITC: Σ_n (k_nn − q_nn), the input-dependent noise FITC adds to Λ (Bauer et al. §3.1:
    /// FITC can explain data by this heteroscedastic noise and under-estimate σ²); 0 otherwise.
    pub fitc_noise: f64,
}

#[derive(Debug, Clone)]
pub struct SparseGp {
    pub kind: SparseKind,
    pub kernel: Box<dyn Kernel>,
    pub noise: NoiseModel,
    x: DMatrix<f64>,
    y: DVector<f64>,
    z: DMatrix<f64>,
    /// Ordinary inducing points or multiscale features centred on Z.
    features: InducingFeatures,
    /// Whether Z (and multiscale widths) are part of the parameter vector (joint optimisation).
    pub optimize_inducing: bool,
    /// Whether the kernel's parameters are part of the parameter vector (default true). With
    /// false and a fixed noise, training moves only the inducing features: Walder et al.'s
    /// (2008) "basis" variants, whose hyperparameters come from a GP on a subset.
    pub optimize_kernel: bool,
    /// Jitter ladder for K_uu (default: always 1e-6·mean diag, ×10 up to 5 tries;
    /// [`crate::KuuJitter::policy`] gives GPflow's fixed 10⁻⁶ and other user choices).
    pub jitter: crate::JitterPolicy,
}

impl SparseGp {
    /// A new sparse GP. `noise` must be homoscedastic or per-point (the dense block is
    /// exact-GP only). Z is M×D with the same D as X.
    pub fn new(
        kind: SparseKind,
        kernel: Box<dyn Kernel>,
        noise: NoiseModel,
        x: DMatrix<f64>,
        y: DVector<f64>,
        z: DMatrix<f64>,
    ) -> Result<Self, GpError> {
        validate_data(&x, &y, kernel.as_ref())?;
        noise.validate(x.nrows())?;
        if matches!(noise, NoiseModel::Block { .. }) {
            return Err(GpError::Unsupported(Unsupported::BlockNoiseInSparseModel));
        }
        Self::check_z(&z, &x, kernel.as_ref())?;
        Ok(SparseGp {
            kind,
            kernel,
            noise,
            x,
            y,
            z,
            features: InducingFeatures::Points,
            optimize_inducing: false,
            optimize_kernel: true,
            jitter: crate::JitterPolicy::ALWAYS,
        })
    }

    fn check_z(z: &DMatrix<f64>, x: &DMatrix<f64>, kernel: &dyn Kernel) -> Result<(), GpError> {
        if z.nrows() == 0 {
            return Err(GpError::Empty { what: "inducing points" });
        }
        if z.ncols() != x.ncols() {
            return Err(GpError::shape("inducing points", z.ncols(), "columns", x.ncols(), "training-input columns"));
        }
        validate_inputs(z, kernel, "Z")
    }

    pub fn x(&self) -> &DMatrix<f64> {
        &self.x
    }
    pub fn y(&self) -> &DVector<f64> {
        &self.y
    }
    pub fn z(&self) -> &DMatrix<f64> {
        &self.z
    }

    /// Replace the inducing inputs. Multiscale features keep their widths if Z keeps its
    /// shape; otherwise they restart at the kernel's length-scales (ordinary points).
    pub fn set_z(&mut self, z: DMatrix<f64>) -> Result<(), GpError> {
        Self::check_z(&z, &self.x, self.kernel.as_ref())?;
        if let InducingFeatures::Multiscale(ms) = &mut self.features
            && ms.raw().shape() != z.shape()
        {
            *ms = Multiscale::ordinary(z.nrows(), z.ncols());
        }
        self.z = z;
        Ok(())
    }

    /// The inducing features (ordinary points or multiscale).
    pub fn features(&self) -> &InducingFeatures {
        &self.features
    }

    /// Replace the inducing features; multiscale features need the SE kernel and one width
    /// per entry of Z.
    pub fn set_features(&mut self, features: InducingFeatures) -> Result<(), GpError> {
        features.check(&self.z, self.kernel.as_ref())?;
        self.features = features;
        Ok(())
    }

    /// Switch to multiscale features with widths equal to the kernel's length-scales: the
    /// same model as now (Walder et al.'s "ordinary first, then multiscale").
    pub fn use_multiscale(&mut self) -> Result<(), GpError> {
        self.set_features(InducingFeatures::Multiscale(Multiscale::ordinary(self.z.nrows(), self.z.ncols())))
    }

    fn multiscale_widths(&self) -> Option<&Multiscale> {
        match &self.features {
            InducingFeatures::Multiscale(ms) if self.optimize_inducing => Some(ms),
            _ => None,
        }
    }

    /// The objective (ELBO for VFE; approximate LML for DTC/FITC) without gradient.
    pub fn objective_value(&self) -> Result<f64, GpError> {
        Ok(collapsed::evaluate(self, false)?.value)
    }

    /// The objective split into its terms (see [`ObjectiveTerms`]); they sum to
    /// [`SparseGp::objective_value`].
    pub fn objective_terms(&self) -> Result<ObjectiveTerms, GpError> {
        collapsed::objective_terms(self)
    }

    /// tr(K_ff − Q_ff) at the current parameters (the numerator of the VFE trace term).
    pub fn trace_k_minus_q(&self) -> Result<f64, GpError> {
        collapsed::trace_only(self)
    }

    /// Factorise once and cache what prediction needs.
    pub fn posterior(&self) -> Result<SparsePosterior, GpError> {
        collapsed::posterior(self)
    }
}

impl Objective for SparseGp {
    fn params(&self) -> Vec<f64> {
        let mut p = if self.optimize_kernel { self.kernel.params() } else { vec![] };
        let s = self.noise.sigma2();
        if s.learn {
            p.push(s.variance.ln());
        }
        if self.optimize_inducing {
            p.extend_from_slice(self.z.as_slice());
        }
        if let Some(ms) = self.multiscale_widths() {
            p.extend_from_slice(ms.raw().as_slice());
        }
        p
    }

    fn set_params(&mut self, p: &[f64]) {
        let nk = if self.optimize_kernel { self.kernel.n_params() } else { 0 };
        if self.optimize_kernel {
            self.kernel.set_params(&p[..nk]);
        }
        let mut i = nk;
        let s = self.noise.sigma2_mut();
        if s.learn {
            s.variance = p[i].exp();
            i += 1;
        }
        if self.optimize_inducing {
            let len = self.z.len();
            self.z.as_mut_slice().copy_from_slice(&p[i..i + len]);
            i += len;
            if let InducingFeatures::Multiscale(ms) = &mut self.features {
                let raw = ms.raw_mut();
                let len = raw.len();
                raw.as_mut_slice().copy_from_slice(&p[i..i + len]);
            }
        }
    }

    fn bounds(&self) -> Vec<Bounds> {
        let mut b = if self.optimize_kernel { self.kernel.bounds() } else { vec![] };
        let s = self.noise.sigma2();
        if s.learn {
            b.push(s.bounds);
        }
        if self.optimize_inducing {
            b.extend(std::iter::repeat_n(Bounds::new(f64::NEG_INFINITY, f64::INFINITY), self.z.len()));
        }
        if let Some(ms) = self.multiscale_widths() {
            // ρ = ±20: relative widths from 1/√2 + 2e-9 to 20.7.
            b.extend(std::iter::repeat_n(Bounds::new(-20.0, 20.0), ms.raw().len()));
        }
        b
    }

    fn param_names(&self) -> Vec<String> {
        let mut n = if self.optimize_kernel { self.kernel.param_names() } else { vec![] };
        if self.noise.sigma2().learn {
            n.push("noise_variance".into());
        }
        if self.optimize_inducing {
            for d in 0..self.z.ncols() {
                for m in 0..self.z.nrows() {
                    n.push(format!("Z[{m},{d}]"));
                }
            }
        }
        if self.multiscale_widths().is_some() {
            for d in 0..self.z.ncols() {
                for m in 0..self.z.nrows() {
                    n.push(format!("width_raw[{m},{d}]"));
                }
            }
        }
        n
    }

    fn evaluate(&self) -> Result<Evaluation, GpError> {
        let t = collapsed::evaluate(self, true)?;
        let g = t.grad.expect("gradient requested");
        let mut grad = if self.optimize_kernel { g.kernel } else { vec![] };
        if self.noise.sigma2().learn {
            grad.push(g.log_sigma2);
        }
        if self.optimize_inducing {
            grad.extend_from_slice(g.z.as_slice());
        }
        if self.multiscale_widths().is_some() {
            grad.extend_from_slice(g.widths.as_ref().expect("multiscale gradient").as_slice());
        }
        Ok(Evaluation { value: t.value, grad, jitter: t.jitter })
    }
}
