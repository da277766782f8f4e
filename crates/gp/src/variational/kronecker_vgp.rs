//! The gridded variational GP of Thomas 2017 ch. 2: inducing points on the full grid
//! z⁽¹⁾ × … × z⁽ᵖ⁾ (m = Π m_l points), the SE-ARD kernel (which factorises over dimensions, so
//! K_uu = ⊗ K_uu⁽ˡ⁾ and k_{f_i u} = ⊗ k_{f_i u}⁽ˡ⁾, eq. 2.13), and
//!
//!   q(u) = N(K_uu α, (1/C) Σ_c ⊗_l (K⁽ˡ⁾ − K⁽ˡ⁾ (K⁽ˡ⁾ + Σ_c⁽ˡ⁾)⁻¹ K⁽ˡ⁾))      (eqs 2.14, 2.16, 2.18)
//!
//! with α a sum of Kronecker products (C = K components, §2.3.1) or a Tucker tensor (C = 1,
//! §2.4) and diagonal positive Σ_c⁽ˡ⁾. The uncollapsed bound (Hensman et al. 2013; Thomas eq. 1.34)
//! then needs only per-dimension m_l × m_l algebra (eqs 2.15, 2.17, 2.19):
//!
//!   F = (n/b) Σ_{i∈B} [ log N(y_i | μ_i, σ²) − (k_ii − Π_l a_il)/(2σ²) − (1/C) Σ_c Π_l d_cil/(2σ²) ]
//!       − ½ αᵀK_uu α − (1/2C) Σ_c Π_l t_cl + m/2 + (1/2C) Σ_c Σ_l (m/m_l)(log|Σ_c⁽ˡ⁾| − log|K⁽ˡ⁾ + Σ_c⁽ˡ⁾|)
//!
//! with a_il = k⁽ˡ⁾ᵀ K⁽ˡ⁾⁻¹ k⁽ˡ⁾, d_cil = a_il − k⁽ˡ⁾ᵀ(K⁽ˡ⁾ + Σ_c⁽ˡ⁾)⁻¹k⁽ˡ⁾, t_cl = tr((K⁽ˡ⁾ + Σ_c⁽ˡ⁾)⁻¹Σ_c⁽ˡ⁾)
//! (= m_l − tr((K + Σ)⁻¹K), the thesis's form) and μ_i = k_{f_i u} α from `MeanStructure`.
//! For C = 1 this is exactly eq. 1.34 for that q(u). For C > 1, log|S| of a sum of Kronecker
//! products has no per-dimension form; like the thesis (eq. 2.17) we use its Jensen lower bound
//! log|(1/C)Σ_c S_c| ≥ (1/C)Σ_c log|S_c|, so F stays a lower bound. The mean term αᵀK_uu α is
//! exact (with the cross terms the thesis drops).
//!
//! Gradients are analytic (reverse mode through the per-dimension matrices, then the 1-D SE
//! kernels' vector–Jacobian products); `tests` checks them by finite differences and the bound
//! against the dense m × m computation of eq. 1.34.

use super::adagrad::StochasticObjective;
use super::mean_tensor::{MeanStructure, product_except};
use crate::kernels::{Kernel, SquaredExponential};
use crate::linalg::{Cholesky, Jitter, JitterPolicy};
use crate::{GpError, Place, Prediction};
use nalgebra::{DMatrix, DVector};
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use rand_distr::{Distribution, StandardNormal};

/// Largest core tensor (q₀ᵖ entries) we accept.
const MAX_CORE: usize = 1 << 22;
// `new`'s refusal of a larger core spells the limit out as 2^22.
const _: () = assert!(MAX_CORE == 1 << 22);

/// A Kronecker- or Tucker-structured variational GP on gridded inducing points.
#[derive(Debug, Clone)]
pub struct KroneckerVgp {
    grid: Vec<DVector<f64>>,
    structure: MeanStructure,
    u: Vec<DMatrix<f64>>,
    core: Vec<f64>,
    /// log diag Σ_c⁽ˡ⁾, indexed [c][l].
    log_sigma: Vec<Vec<DVector<f64>>>,
    log_variance: f64,
    log_lengthscales: Vec<f64>,
    log_noise: f64,
}

/// Per-dimension matrices of one evaluation.
struct DimTerms {
    z: DMatrix<f64>,
    kuu: DMatrix<f64>,
    chol: Cholesky,
    kx: DMatrix<f64>,
    /// K⁽ˡ⁾⁻¹ k_{u f_i} as columns (m_l × b).
    p: DMatrix<f64>,
    a: DVector<f64>,
    comps: Vec<CompTerms>,
    v: DMatrix<f64>,
    g: DMatrix<f64>,
}

struct CompTerms {
    sigma: DVector<f64>,
    chol: Cholesky,
    /// (K + Σ)⁻¹ (m_l × m_l; m_l is the per-dimension grid size, the thesis's O(p m₀³)).
    inv: DMatrix<f64>,
    r: DMatrix<f64>,
    d: DVector<f64>,
    t: f64,
}

/// The bound, its gradient, and the jitter of each K_uu⁽ˡ⁾.
#[derive(Debug, Clone, PartialEq)]
pub struct GridEvaluation {
    pub value: f64,
    pub grad: Vec<f64>,
    pub jitter: Vec<Jitter>,
}

impl KroneckerVgp {
    /// A model with `m0` grid points per dimension, evenly spaced over each column's training
    /// range, SE-ARD hyperparameters (variance, length-scales, noise variance) as given, and a
    /// seeded random start of the variational parameters (Σ = I).
    pub fn new(
        x: &DMatrix<f64>,
        m0: usize,
        structure: MeanStructure,
        variance: f64,
        lengthscale: f64,
        noise: f64,
        seed: u64,
    ) -> Result<Self, GpError> {
        let p = x.ncols();
        if x.nrows() == 0 {
            return Err(GpError::Empty { what: "training rows" });
        }
        if p == 0 {
            return Err(GpError::Empty { what: "input columns" });
        }
        if let Some(i) = x.iter().position(|v| !v.is_finite()) {
            return Err(GpError::non_finite("X", Place::column_major(i, x.nrows()), x[i]));
        }
        if m0 < 2 {
            return Err(GpError::parameter("m0 (grid points per dimension)", m0 as f64, "be at least 2"));
        }
        let q = structure.q();
        if q == 0 || q > m0 {
            return Err(GpError::parameter("the mean structure's q", q as f64, "be between 1 and m0"));
        }
        let core = (q as f64).powi(p as i32);
        if matches!(structure, MeanStructure::Tucker { .. }) && core > MAX_CORE as f64 {
            return Err(GpError::parameter("Tucker core size q0^p", core, "not exceed 2^22 entries"));
        }
        for (name, v) in [("variance", variance), ("length-scale", lengthscale), ("noise variance", noise)] {
            if !(v > 0.0 && v.is_finite()) {
                return Err(GpError::parameter(name, v, "be positive and finite"));
            }
        }
        let grid: Vec<DVector<f64>> = (0..p)
            .map(|l| {
                let c = x.column(l);
                let (lo, hi) = (c.min(), c.max());
                let (lo, hi) = if hi > lo { (lo, hi) } else { (lo - 1.0, hi + 1.0) };
                DVector::from_fn(m0, |j, _| lo + (hi - lo) * j as f64 / (m0 - 1) as f64)
            })
            .collect();
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let mut normal = || -> f64 { StandardNormal.sample(&mut rng) };
        // Start near a constant mean: column 0 of every factor but the first ≈ 1/m0 (so the
        // product over dimensions stays O(1) in high p), the rest small.
        let u: Vec<DMatrix<f64>> = (0..p)
            .map(|l| {
                DMatrix::from_fn(m0, q, |_, k| {
                    if l > 0 && k == 0 { (1.0 + 0.1 * normal()) / m0 as f64 } else { 0.1 * normal() / m0 as f64 }
                })
            })
            .collect();
        let core: Vec<f64> = (0..structure.core_len(p)).map(|j| if j == 0 { 1.0 } else { 0.1 * normal() }).collect();
        let comps = match structure {
            MeanStructure::SumOfKronecker { rank } => rank,
            MeanStructure::Tucker { .. } => 1,
        };
        Ok(KroneckerVgp {
            grid,
            structure,
            u,
            core,
            log_sigma: vec![vec![DVector::zeros(m0); p]; comps],
            log_variance: variance.ln(),
            log_lengthscales: vec![lengthscale.ln(); p],
            log_noise: noise.ln(),
        })
    }

    /// Set every diag Σ_c⁽ˡ⁾ to `value` (a large value starts q(u)'s covariance at the prior).
    pub fn with_sigma(mut self, value: f64) -> Result<Self, GpError> {
        if !(value > 0.0 && value.is_finite()) {
            return Err(GpError::parameter("Σ", value, "be positive and finite"));
        }
        for s in self.log_sigma.iter_mut().flatten() {
            s.fill(value.ln());
        }
        Ok(self)
    }

    pub fn dims(&self) -> usize {
        self.grid.len()
    }
    pub fn grid(&self) -> &[DVector<f64>] {
        &self.grid
    }
    pub fn structure(&self) -> MeanStructure {
        self.structure
    }
    pub fn factors(&self) -> &[DMatrix<f64>] {
        &self.u
    }
    pub fn core(&self) -> &[f64] {
        &self.core
    }
    pub fn noise(&self) -> f64 {
        self.log_noise.exp()
    }
    pub fn variance(&self) -> f64 {
        self.log_variance.exp()
    }
    pub fn lengthscales(&self) -> Vec<f64> {
        self.log_lengthscales.iter().map(|v| v.exp()).collect()
    }
    /// diag Σ_c⁽ˡ⁾.
    pub fn sigma(&self, c: usize, l: usize) -> DVector<f64> {
        self.log_sigma[c][l].map(f64::exp)
    }
    /// Number of Kronecker covariance components C.
    pub fn components(&self) -> usize {
        self.log_sigma.len()
    }
    /// Total number of inducing points m = Π m_l (as f64: it may exceed usize for large p).
    pub fn inducing_count(&self) -> f64 {
        self.grid.iter().map(|z| z.len() as f64).product()
    }

    /// The 1-D SE kernel of dimension l (the SE-ARD kernel's variance sits on dimension 0).
    pub fn dim_kernel(&self, l: usize) -> SquaredExponential {
        let var = if l == 0 { self.log_variance.exp() } else { 1.0 };
        SquaredExponential::isotropic(var, self.log_lengthscales[l].exp())
    }

    /// Index of the log kernel variance in the parameter vector; the p log length-scales and
    /// the log noise variance follow it.
    pub fn hyper_offset(&self) -> usize {
        self.n_params() - self.dims() - 2
    }

    pub fn n_params(&self) -> usize {
        let u: usize = self.u.iter().map(|m| m.len()).sum();
        let s: usize = self.log_sigma.iter().flatten().map(|v| v.len()).sum();
        u + self.core.len() + s + self.dims() + 2
    }

    fn dim_terms(&self, x: &DMatrix<f64>, rows: &[usize]) -> Result<Vec<DimTerms>, GpError> {
        let p = self.dims();
        let mut out = Vec::with_capacity(p);
        for l in 0..p {
            let kl = self.dim_kernel(l);
            let z = DMatrix::from_column_slice(self.grid[l].len(), 1, self.grid[l].as_slice());
            let kuu0 = kl.k(z.as_view(), z.as_view());
            let chol = Cholesky::factor_of(&kuu0, "K_uu⁽ˡ⁾ (one grid dimension)", JitterPolicy::ALWAYS)?;
            let mut kuu = kuu0;
            for i in 0..kuu.nrows() {
                kuu[(i, i)] += chol.jitter().absolute;
            }
            let xl = DMatrix::from_fn(rows.len(), 1, |i, _| x[(rows[i], l)]);
            let kx = kl.k(xl.as_view(), z.as_view());
            let kxt = kx.transpose();
            let pm = chol.solve(&kxt);
            let a = DVector::from_fn(rows.len(), |i, _| kxt.column(i).dot(&pm.column(i)));
            let mut comps = Vec::with_capacity(self.components());
            for c in 0..self.components() {
                let sigma = self.sigma(c, l);
                let mut am = kuu.clone();
                for i in 0..am.nrows() {
                    am[(i, i)] += sigma[i];
                }
                let ch = Cholesky::factor(am, "K_uu⁽ˡ⁾ + Σ⁽ˡ⁾", JitterPolicy::IF_NEEDED)?;
                let inv = ch.inverse();
                let r = ch.solve(&kxt);
                let d = DVector::from_fn(rows.len(), |i, _| a[i] - kxt.column(i).dot(&r.column(i)));
                let t = (0..sigma.len()).map(|j| inv[(j, j)] * sigma[j]).sum();
                comps.push(CompTerms { sigma, chol: ch, inv, r, d, t });
            }
            let v = &kx * &self.u[l];
            let g = self.u[l].transpose() * &kuu * &self.u[l];
            out.push(DimTerms { z, kuu, chol, kx, p: pm, a, comps, v, g });
        }
        Ok(out)
    }

    /// The bound on the rows `rows` scaled to `n_total` rows (the full-data bound when `rows`
    /// is every row), and its analytic gradient in `params()` order.
    pub fn evaluate(
        &self,
        x: &DMatrix<f64>,
        y: &DVector<f64>,
        rows: &[usize],
        n_total: usize,
    ) -> Result<GridEvaluation, GpError> {
        self.check_data(x, y, rows)?;
        let p = self.dims();
        let b = rows.len();
        let scale = n_total as f64 / b as f64;
        let cc = self.components();
        let cf = cc as f64;
        let noise = self.log_noise.exp();
        let var = self.log_variance.exp();
        let m_total = self.inducing_count();
        let dt = self.dim_terms(x, rows)?;
        let vs = |i: usize| -> Vec<DVector<f64>> { dt.iter().map(|d| d.v.row(i).transpose()).collect() };

        let q = self.structure.q();
        let mut v_bar: Vec<DMatrix<f64>> = (0..p).map(|_| DMatrix::zeros(b, q)).collect();
        let mut core_bar = vec![0.0; self.core.len()];
        let mut a_bar: Vec<DVector<f64>> = vec![DVector::zeros(b); p];
        let mut c_bar: Vec<Vec<DVector<f64>>> = vec![vec![DVector::zeros(b); p]; cc];
        let (mut value, mut g_noise) = (0.0, 0.0);
        let half_log_2pi_s2 = 0.5 * (2.0 * std::f64::consts::PI * noise).ln();
        for (i, &row) in rows.iter().enumerate() {
            let v = vs(i);
            let mu = self.structure.value(&self.core, &v);
            let r = y[row] - mu;
            let af: Vec<f64> = dt.iter().map(|d| d.a[i]).collect();
            let dfs: Vec<Vec<f64>> = (0..cc).map(|c| dt.iter().map(|d| d.comps[c].d[i]).collect()).collect();
            let pa: f64 = af.iter().product();
            let pd: f64 = dfs.iter().map(|f| f.iter().product::<f64>()).sum::<f64>() / cf;
            let resid = r * r + var - pa + pd;
            value += scale * (-half_log_2pi_s2 - resid / (2.0 * noise));
            g_noise += scale * (-0.5 + resid / (2.0 * noise));
            let mut vb: Vec<DVector<f64>> = vec![DVector::zeros(q); p];
            self.structure.value_grad(&self.core, &v, scale * r / noise, &mut vb, &mut core_bar);
            for l in 0..p {
                v_bar[l].set_row(i, &vb[l].transpose());
                let mut ab = scale / (2.0 * noise) * product_except(&af, l);
                for (c, f) in dfs.iter().enumerate() {
                    let w = scale / (2.0 * noise * cf) * product_except(f, l);
                    ab -= w;
                    c_bar[c][l][i] = w;
                }
                a_bar[l][i] = ab;
            }
        }
        // k_ii = variance for every row.
        let mut g_logvar = -scale * b as f64 / (2.0 * noise) * var;

        // KL part.
        let gs: Vec<DMatrix<f64>> = dt.iter().map(|d| d.g.clone()).collect();
        value -= 0.5 * self.structure.quad(&self.core, &gs);
        let mut g_bar: Vec<DMatrix<f64>> = (0..p).map(|_| DMatrix::zeros(q, q)).collect();
        self.structure.quad_grad(&self.core, &gs, -0.5, &mut g_bar, &mut core_bar);
        value += 0.5 * m_total;
        let mut t_bar: Vec<Vec<f64>> = vec![vec![0.0; p]; cc];
        for (c, tb) in t_bar.iter_mut().enumerate() {
            let ts: Vec<f64> = dt.iter().map(|d| d.comps[c].t).collect();
            value -= ts.iter().product::<f64>() / (2.0 * cf);
            for l in 0..p {
                tb[l] = -product_except(&ts, l) / (2.0 * cf);
                let d = &dt[l].comps[c];
                let w = m_total / self.grid[l].len() as f64 / (2.0 * cf);
                let logdet_sigma: f64 = self.log_sigma[c][l].sum();
                value += w * (logdet_sigma - d.chol.logdet());
            }
        }

        // Reverse pass per dimension.
        let mut grad = Vec::with_capacity(self.n_params());
        let mut u_grads = Vec::with_capacity(p);
        let mut sigma_grads: Vec<Vec<DVector<f64>>> = vec![Vec::with_capacity(p); cc];
        let mut g_ls = vec![0.0; p];
        for l in 0..p {
            let d = &dt[l];
            let ml = self.grid[l].len();
            let mut kx_bar = DMatrix::<f64>::zeros(b, ml);
            let mut kuu_bar = DMatrix::<f64>::zeros(ml, ml);
            // a_il = kᵀK⁻¹k.
            for i in 0..b {
                let pc = d.p.column(i);
                for j in 0..ml {
                    kx_bar[(i, j)] += 2.0 * a_bar[l][i] * pc[j];
                }
                kuu_bar -= a_bar[l][i] * pc * pc.transpose();
            }
            for c in 0..cc {
                let ct = &d.comps[c];
                let mut abar = DMatrix::<f64>::zeros(ml, ml);
                for i in 0..b {
                    let rc = ct.r.column(i);
                    for j in 0..ml {
                        kx_bar[(i, j)] += 2.0 * c_bar[c][l][i] * rc[j];
                    }
                    abar -= c_bar[c][l][i] * rc * rc.transpose();
                }
                // t = tr(A⁻¹Σ): ∂/∂A = −A⁻¹ΣA⁻¹, ∂/∂Σ_jj (direct) = (A⁻¹)_jj.
                let inv_sigma_inv = &ct.inv * DMatrix::from_diagonal(&ct.sigma) * &ct.inv;
                abar -= t_bar[c][l] * &inv_sigma_inv;
                let w = m_total / ml as f64 / (2.0 * cf);
                abar -= w * &ct.inv;
                let sbar = DVector::from_fn(ml, |j, _| abar[(j, j)] + t_bar[c][l] * ct.inv[(j, j)] + w / ct.sigma[j]);
                sigma_grads[c].push(sbar.component_mul(&ct.sigma));
                kuu_bar += abar;
            }
            // G = UᵀKU.
            let gb = &g_bar[l];
            let ku = &d.kuu * &self.u[l];
            let mut ub = &ku * (gb + gb.transpose());
            kuu_bar += &self.u[l] * gb * self.u[l].transpose();
            // v = Uᵀk.
            ub += d.kx.transpose() * &v_bar[l];
            kx_bar += &v_bar[l] * self.u[l].transpose();
            u_grads.push(ub);
            // Kernel hyperparameters of dimension l.
            let kl = self.dim_kernel(l);
            let xl = DMatrix::from_fn(b, 1, |i, _| x[(rows[i], l)]);
            let gz = kl.vjp(d.z.as_view(), d.z.as_view(), kuu_bar.as_view(), false).params;
            let gx = kl.vjp(xl.as_view(), d.z.as_view(), kx_bar.as_view(), false).params;
            if l == 0 {
                // The jitter ε = rel·variance scales with the variance too.
                g_logvar += gz[0] + gx[0] + d.chol.jitter().absolute * kuu_bar.trace();
            }
            g_ls[l] = gz[1] + gx[1];
        }
        for ub in &u_grads {
            grad.extend_from_slice(ub.as_slice());
        }
        grad.extend_from_slice(&core_bar);
        for sg in &sigma_grads {
            for s in sg {
                grad.extend_from_slice(s.as_slice());
            }
        }
        grad.push(g_logvar);
        grad.extend_from_slice(&g_ls);
        grad.push(g_noise);
        if !value.is_finite() {
            return Err(GpError::Diverged { what: "the gridded VGP bound", at: None, value });
        }
        if let Some(i) = grad.iter().position(|g| !g.is_finite()) {
            let at = Some(Place::Parameter(i));
            return Err(GpError::Diverged { what: "the gridded VGP gradient", at, value: grad[i] });
        }
        Ok(GridEvaluation { value, grad, jitter: dt.iter().map(|d| d.chol.jitter()).collect() })
    }

    /// Predictive mean k_{*u} α and latent variance k_** − Π_l a_l + (1/C)Σ_c Π_l d_cl.
    pub fn predict(&self, x: &DMatrix<f64>) -> Result<Prediction, GpError> {
        if x.ncols() != self.dims() {
            return Err(GpError::shape("test X", x.ncols(), "columns", self.dims(), "model dimensions"));
        }
        if let Some(i) = x.iter().position(|v| !v.is_finite()) {
            return Err(GpError::non_finite("test X", Place::column_major(i, x.nrows()), x[i]));
        }
        let rows: Vec<usize> = (0..x.nrows()).collect();
        let dt = self.dim_terms(x, &rows)?;
        let var = self.log_variance.exp();
        let mut mean = DVector::zeros(x.nrows());
        let mut lat = DVector::zeros(x.nrows());
        for i in 0..x.nrows() {
            let v: Vec<DVector<f64>> = dt.iter().map(|d| d.v.row(i).transpose()).collect();
            mean[i] = self.structure.value(&self.core, &v);
            let pa: f64 = dt.iter().map(|d| d.a[i]).product();
            let pd: f64 =
                (0..self.components()).map(|c| dt.iter().map(|d| d.comps[c].d[i]).product::<f64>()).sum::<f64>()
                    / self.components() as f64;
            lat[i] = var - pa + pd;
        }
        Ok(Prediction::new(mean, lat, None))
    }

    fn check_data(&self, x: &DMatrix<f64>, y: &DVector<f64>, rows: &[usize]) -> Result<(), GpError> {
        if x.ncols() != self.dims() {
            return Err(GpError::shape("X", x.ncols(), "columns", self.dims(), "model dimensions"));
        }
        if x.nrows() != y.len() {
            return Err(GpError::shape("training data", y.len(), "targets", x.nrows(), "rows of X"));
        }
        super::adagrad::check_minibatch(rows, x.nrows())?;
        for &r in rows {
            if !y[r].is_finite() {
                return Err(GpError::non_finite("target", Place::Row(r), y[r]));
            }
            if let Some(j) = x.row(r).iter().position(|v| !v.is_finite()) {
                return Err(GpError::non_finite("X", Place::Cell { row: r, column: j }, x[(r, j)]));
            }
        }
        Ok(())
    }

    /// Which parameters the thesis kept fixed for the TVGP (§2.5.1.1: kernel variance 1.0 and
    /// noise variance 0.1 "as allowing them to vary made the optimisation much less stable").
    pub fn frozen_variance_and_noise(&self) -> Vec<bool> {
        let mut f = vec![false; self.n_params()];
        let h = self.hyper_offset();
        f[h] = true;
        f[h + self.dims() + 1] = true;
        f
    }
}

impl StochasticObjective for KroneckerVgp {
    fn params(&self) -> Vec<f64> {
        let mut out = Vec::with_capacity(self.n_params());
        for u in &self.u {
            out.extend_from_slice(u.as_slice());
        }
        out.extend_from_slice(&self.core);
        for s in self.log_sigma.iter().flatten() {
            out.extend_from_slice(s.as_slice());
        }
        out.push(self.log_variance);
        out.extend_from_slice(&self.log_lengthscales);
        out.push(self.log_noise);
        out
    }

    fn set_params(&mut self, p: &[f64]) -> Result<(), GpError> {
        super::adagrad::check_params(p, self.n_params(), "gridded VGP")?;
        let mut k = 0;
        let mut take = |n: usize| {
            let s = &p[k..k + n];
            k += n;
            s
        };
        for u in &mut self.u {
            let n = u.len();
            u.as_mut_slice().copy_from_slice(take(n));
        }
        let nc = self.core.len();
        self.core.copy_from_slice(take(nc));
        for s in self.log_sigma.iter_mut().flatten() {
            let n = s.len();
            s.as_mut_slice().copy_from_slice(take(n));
        }
        self.log_variance = take(1)[0];
        let pd = self.log_lengthscales.len();
        self.log_lengthscales.copy_from_slice(take(pd));
        self.log_noise = take(1)[0];
        Ok(())
    }

    fn stochastic_gradient(
        &self,
        x: &DMatrix<f64>,
        y: &DVector<f64>,
        rows: &[usize],
        _: &mut ChaCha8Rng,
    ) -> Result<Vec<f64>, GpError> {
        Ok(self.evaluate(x, y, rows, x.nrows())?.grad)
    }
}

#[cfg(test)]
mod tests {
    use super::super::kron::kron_dense;
    use super::*;
    use rand::Rng;

    fn data(n: usize, p: usize, seed: u64) -> (DMatrix<f64>, DVector<f64>) {
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let x: DMatrix<f64> = DMatrix::from_fn(n, p, |_, _| rng.random_range(-1.5..1.5));
        let y = DVector::from_fn(n, |i, _| x.row(i).sum().sin() + 0.1 * rng.random_range(-1.0..1.0));
        (x, y)
    }

    /// A model with every parameter moved off its start (so no term is trivially zero).
    fn perturbed(x: &DMatrix<f64>, m0: usize, s: MeanStructure, seed: u64) -> KroneckerVgp {
        let mut m = KroneckerVgp::new(x, m0, s, 1.3, 0.8, 0.2, seed).unwrap();
        let mut rng = ChaCha8Rng::seed_from_u64(seed + 100);
        let p: Vec<f64> = m.params().iter().map(|v| v + 0.3 * rng.random_range(-1.0..1.0)).collect();
        m.set_params(&p).unwrap();
        m
    }

    /// Eq. 1.34 computed with dense m × m matrices: K_uu = ⊗(K⁽ˡ⁾ + ε_l I), m = K_uu α,
    /// S = (1/C)Σ_c ⊗ S_c⁽ˡ⁾. Returns (exact bound, bound with log|S| replaced by (1/C)Σ log|S_c|).
    fn dense_bound(m: &KroneckerVgp, x: &DMatrix<f64>, y: &DVector<f64>) -> (f64, f64) {
        let p = m.dims();
        let mut kls = Vec::new();
        let mut kx_dims = Vec::new();
        for l in 0..p {
            let kl = m.dim_kernel(l);
            let z = DMatrix::from_column_slice(m.grid()[l].len(), 1, m.grid()[l].as_slice());
            let mut k = kl.k(z.as_view(), z.as_view());
            let eps = Cholesky::factor_of(&k, "t", JitterPolicy::ALWAYS).unwrap().jitter().absolute;
            for i in 0..k.nrows() {
                k[(i, i)] += eps;
            }
            kls.push(k);
            let xl = DMatrix::from_column_slice(x.nrows(), 1, x.column(l).as_slice());
            kx_dims.push(kl.k(xl.as_view(), z.as_view()));
        }
        let kuu = kron_dense(&kls.iter().collect::<Vec<_>>());
        let mm = kuu.nrows();
        let alpha = m.structure().dense_alpha(m.core(), m.factors());
        let mean_u = &kuu * &alpha;
        let cc = m.components();
        let mut s_dense = DMatrix::zeros(mm, mm);
        let mut mean_logdet_s = 0.0;
        for c in 0..cc {
            let sc: Vec<DMatrix<f64>> = (0..p)
                .map(|l| {
                    let a = &kls[l] + DMatrix::from_diagonal(&m.sigma(c, l));
                    &kls[l] - &kls[l] * a.clone().cholesky().unwrap().inverse() * &kls[l]
                })
                .collect();
            let sk = kron_dense(&sc.iter().collect::<Vec<_>>());
            mean_logdet_s += sk.clone().cholesky().unwrap().l().diagonal().map(|d| 2.0 * d.ln()).sum() / cc as f64;
            s_dense += sk / cc as f64;
        }
        let kinv = kuu.clone().cholesky().unwrap().inverse();
        let noise = m.noise();
        let mut data = 0.0;
        for i in 0..x.nrows() {
            let rows: Vec<DMatrix<f64>> = kx_dims.iter().map(|k| k.rows(i, 1).clone_owned()).collect();
            let ki = kron_dense(&rows.iter().collect::<Vec<_>>()).transpose(); // m × 1
            let mu = (ki.transpose() * &kinv * &mean_u)[0];
            let qii = (ki.transpose() * &kinv * &ki)[0];
            let tr = (ki.transpose() * &kinv * &s_dense * &kinv * &ki)[0];
            data += -0.5 * (2.0 * std::f64::consts::PI * noise).ln() - (y[i] - mu).powi(2) / (2.0 * noise);
            data -= (m.variance() - qii) / (2.0 * noise) + tr / (2.0 * noise);
        }
        let logdet_k = kuu.clone().cholesky().unwrap().l().diagonal().map(|d| 2.0 * d.ln()).sum();
        let logdet_s = s_dense.clone().cholesky().unwrap().l().diagonal().map(|d| 2.0 * d.ln()).sum();
        let kl_rest = 0.5 * ((&kinv * &s_dense).trace() + mean_u.dot(&(&kinv * &mean_u)) - mm as f64 + logdet_k);
        (data - kl_rest + 0.5 * logdet_s, data - kl_rest + 0.5 * mean_logdet_s)
    }

    #[test]
    fn structured_bound_equals_the_dense_uncollapsed_bound() {
        let (x, y) = data(12, 2, 1);
        let rows: Vec<usize> = (0..12).collect();
        for (s, m0) in [
            (MeanStructure::SumOfKronecker { rank: 1 }, 3),
            (MeanStructure::Tucker { q0: 2 }, 3),
            (MeanStructure::Tucker { q0: 3 }, 4),
        ] {
            let m = perturbed(&x, m0, s, 2);
            let f = m.evaluate(&x, &y, &rows, 12).unwrap().value;
            let (exact, _) = dense_bound(&m, &x, &y);
            assert!((f - exact).abs() < 1e-10 * exact.abs().max(1.0), "{s:?}: structured {f} vs dense {exact}");
        }
        // Three dimensions, Tucker.
        let (x, y) = data(8, 3, 5);
        let m = perturbed(&x, 3, MeanStructure::Tucker { q0: 2 }, 3);
        let f = m.evaluate(&x, &y, &(0..8).collect::<Vec<_>>(), 8).unwrap().value;
        let (exact, _) = dense_bound(&m, &x, &y);
        assert!((f - exact).abs() < 1e-10 * exact.abs().max(1.0), "p = 3: {f} vs {exact}");
    }

    #[test]
    fn sum_of_kronecker_bound_is_the_jensen_form_and_below_the_dense_bound() {
        let (x, y) = data(10, 2, 7);
        let m = perturbed(&x, 3, MeanStructure::SumOfKronecker { rank: 3 }, 4);
        let f = m.evaluate(&x, &y, &(0..10).collect::<Vec<_>>(), 10).unwrap().value;
        let (exact, jensen) = dense_bound(&m, &x, &y);
        assert!((f - jensen).abs() < 1e-10 * jensen.abs().max(1.0), "{f} vs {jensen}");
        assert!(f < exact - 1e-6, "Jensen bound {f} should be strictly below the exact {exact}");
    }

    #[test]
    fn minibatch_bound_is_unbiased_for_the_full_bound() {
        let (x, y) = data(6, 2, 9);
        let m = perturbed(&x, 3, MeanStructure::Tucker { q0: 2 }, 5);
        let full = m.evaluate(&x, &y, &(0..6).collect::<Vec<_>>(), 6).unwrap();
        // The average over all batches of size 2 that partition the rows is the full bound.
        let parts: Vec<GridEvaluation> =
            [[0, 1], [2, 3], [4, 5]].iter().map(|r| m.evaluate(&x, &y, r, 6).unwrap()).collect();
        let v = parts.iter().map(|e| e.value).sum::<f64>() / 3.0;
        assert!((v - full.value).abs() < 1e-9 * full.value.abs(), "{v} vs {}", full.value);
        for j in 0..full.grad.len() {
            let g = parts.iter().map(|e| e.grad[j]).sum::<f64>() / 3.0;
            assert!((g - full.grad[j]).abs() < 1e-9 * (1.0 + full.grad[j].abs()), "coordinate {j}");
        }
    }

    fn fd_check(m: &KroneckerVgp, x: &DMatrix<f64>, y: &DVector<f64>) {
        let rows: Vec<usize> = (0..x.nrows()).collect();
        let g = m.evaluate(x, y, &rows, x.nrows()).unwrap().grad;
        let value = |mm: &KroneckerVgp| mm.evaluate(x, y, &rows, x.nrows()).unwrap().value;
        super::super::test_support::assert_fd_gradient(m, &g, value, &format!("{:?}", m.structure()));
    }

    #[test]
    fn gradient_matches_finite_differences() {
        let (x, y) = data(9, 3, 11);
        fd_check(&perturbed(&x, 3, MeanStructure::Tucker { q0: 2 }, 6), &x, &y);
        fd_check(&perturbed(&x, 3, MeanStructure::SumOfKronecker { rank: 2 }, 7), &x, &y);
        let (x, y) = data(7, 2, 12);
        fd_check(&perturbed(&x, 4, MeanStructure::SumOfKronecker { rank: 1 }, 8), &x, &y);
    }

    #[test]
    fn bad_inputs_are_errors_not_panics() {
        let (x, y) = data(5, 2, 1);
        assert!(KroneckerVgp::new(&x, 1, MeanStructure::Tucker { q0: 1 }, 1.0, 1.0, 0.1, 0).is_err());
        assert!(KroneckerVgp::new(&x, 3, MeanStructure::Tucker { q0: 4 }, 1.0, 1.0, 0.1, 0).is_err());
        assert!(KroneckerVgp::new(&x, 3, MeanStructure::Tucker { q0: 2 }, -1.0, 1.0, 0.1, 0).is_err());
        let big = DMatrix::zeros(3, 30);
        assert!(KroneckerVgp::new(&big, 5, MeanStructure::Tucker { q0: 3 }, 1.0, 1.0, 0.1, 0).is_err());
        let mut m = KroneckerVgp::new(&x, 3, MeanStructure::Tucker { q0: 2 }, 1.0, 1.0, 0.1, 0).unwrap();
        assert!(m.evaluate(&x, &y, &[], 5).is_err());
        assert!(m.evaluate(&x, &y, &[7], 5).is_err());
        let mut ybad = y.clone();
        ybad[1] = f64::NAN;
        assert!(m.evaluate(&x, &ybad, &[1], 5).is_err());
        assert!(m.set_params(&[0.0]).is_err());
        assert!(m.predict(&DMatrix::zeros(2, 3)).is_err());
    }
}
