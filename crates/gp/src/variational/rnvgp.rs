//! The randomised-numerics variational GP (RNVGP) of Thomas 2017 ch. 3.
//!
//! q(u) = N(K_uu μ, (K_uu⁻¹ + Σ⁻¹)⁻¹) with μ ∈ ℝᵐ and diagonal Σ > 0 (eqs 3.8–3.9; 2m variational
//! parameters). Writing A = K_uu + Σ, the uncollapsed bound (eq. 3.15, minibatch B of b rows of n)
//!
//!   F = (n/b) Σ_{i∈B} [ log N(y_i | k_iᵀμ, σ²) − (k_ii − k_iᵀA⁻¹k_i)/(2σ²) ]
//!       − ½ μᵀK_uu μ + ½ tr(A⁻¹K_uu) + ½ log|Σ| − ½ log|A|
//!
//! needs no factorisation of K_uu. Its gradient (eq. 3.16, with the Σ derivatives added)
//!
//!   ∂F/∂K_uu = A⁻¹ B A⁻¹ − ½ μμᵀ,  B = −(n/b) K_ub K_bu/(2σ²) − ½ K_uu,
//!   ∂F/∂Σ    = diag(A⁻¹ B A⁻¹) − ½ diag(A⁻¹) + ½ Σ⁻¹,
//!   ∂F/∂K_ub = (n/b)(μ rᵀ + A⁻¹K_ub)/σ²,  r = y_B − K_buμ,
//!
//! is linear in A⁻¹ and in A⁻¹(·)A⁻¹, so with probes R (E[R Rᵀ]/d = I, `hutchinson`) and
//! unbiased solves X = A⁻¹R, Y = A⁻¹BR (`cg`, independent randomness per solve):
//! A⁻¹BA⁻¹ ≈ X Yᵀ/d, diag A⁻¹ ≈ Σ_j r_j ⊙ x_j / d and A⁻¹K_ub ≈ X (RᵀK_ub)/d — unbiased
//! estimates at O(m²) per CG iteration, 2d solves per step (Filippone & Engler 2015). With
//! R = I and Cholesky solves the same code gives the exact gradient (`Numerics::Exact`).

use super::adagrad::StochasticObjective;
use super::cg::{self, CgOptions};
use super::hutchinson::{ProbeKind, Probes};
use crate::kernels::Kernel;
use crate::linalg::{Cholesky, JitterPolicy};
use crate::{GpError, Place, Prediction};
use nalgebra::{DMatrix, DVector};
use rand_chacha::ChaCha8Rng;

/// How A⁻¹ is applied and traces are taken.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Numerics {
    /// Cholesky solves and exact traces (R = I): O(m³); the reference.
    Exact,
    /// d random probes and randomised-truncation CG: unbiased, O(m²) per CG iteration.
    Randomised { cg: CgOptions, probes: usize, kind: ProbeKind },
}

/// The RNVGP model: fixed inducing inputs Z, a kernel, μ, log Σ and the log noise variance.
#[derive(Debug, Clone)]
pub struct Rnvgp {
    z: DMatrix<f64>,
    kernel: Box<dyn Kernel>,
    mu: DVector<f64>,
    log_sigma: DVector<f64>,
    log_noise: f64,
    numerics: Numerics,
}

impl Rnvgp {
    /// μ = 0 and Σ = I at the start (q(u) = N(0, (K⁻¹ + I)⁻¹)).
    pub fn new(z: DMatrix<f64>, kernel: Box<dyn Kernel>, noise: f64, numerics: Numerics) -> Result<Self, GpError> {
        if z.nrows() == 0 {
            return Err(GpError::Empty { what: "inducing inputs" });
        }
        crate::validate_inputs(&z, kernel.as_ref(), "Z")?;
        if !(noise > 0.0 && noise.is_finite()) {
            return Err(GpError::parameter("noise variance", noise, "be positive and finite"));
        }
        if let Numerics::Randomised { probes: 0, .. } = numerics {
            return Err(GpError::parameter("number of probe vectors", 0.0, "be at least 1"));
        }
        let m = z.nrows();
        Ok(Rnvgp { z, kernel, mu: DVector::zeros(m), log_sigma: DVector::zeros(m), log_noise: noise.ln(), numerics })
    }

    pub fn kernel(&self) -> &dyn Kernel {
        self.kernel.as_ref()
    }
    pub fn noise(&self) -> f64 {
        self.log_noise.exp()
    }
    pub fn numerics(&self) -> Numerics {
        self.numerics
    }
    pub fn set_numerics(&mut self, n: Numerics) {
        self.numerics = n;
    }
    pub fn n_params(&self) -> usize {
        2 * self.z.nrows() + self.kernel.n_params() + 1
    }
    /// Index of the kernel's first parameter in `params()` (the kernel's log variance for SE).
    pub fn kernel_offset(&self) -> usize {
        2 * self.z.nrows()
    }

    fn a_matrix(&self, kuu: &DMatrix<f64>) -> (DMatrix<f64>, DVector<f64>) {
        let sigma = self.log_sigma.map(f64::exp);
        let mut a = kuu.clone();
        for i in 0..a.nrows() {
            a[(i, i)] += sigma[i];
        }
        (a, sigma)
    }

    fn check(&self, x: &DMatrix<f64>, y: &DVector<f64>, rows: &[usize]) -> Result<(), GpError> {
        crate::validate_data(x, y, self.kernel.as_ref())?;
        super::adagrad::check_minibatch(rows, x.nrows())?;
        if x.ncols() != self.z.ncols() {
            return Err(GpError::shape("X", x.ncols(), "columns", self.z.ncols(), "columns of Z"));
        }
        Ok(())
    }

    /// The bound on every row, computed exactly (Cholesky of A = K_uu + Σ; eq. 3.15).
    pub fn bound(&self, x: &DMatrix<f64>, y: &DVector<f64>) -> Result<f64, GpError> {
        let rows: Vec<usize> = (0..x.nrows()).collect();
        self.check(x, y, &rows)?;
        let kuu = self.kernel.k(self.z.as_view(), self.z.as_view());
        let (a, sigma) = self.a_matrix(&kuu);
        let ch = Cholesky::factor(a, "K_uu + Σ", JitterPolicy::IF_NEEDED)?;
        let kuf = self.kernel.k(self.z.as_view(), x.as_view());
        let kff = self.kernel.diag(x.as_view());
        let noise = self.noise();
        let f = kuf.transpose() * &self.mu;
        let mut v = kuf.clone();
        ch.solve_l_in_place(&mut v);
        let mut value = 0.0;
        for i in 0..x.nrows() {
            let q = v.column(i).norm_squared();
            value += -0.5 * (2.0 * std::f64::consts::PI * noise).ln()
                - (y[i] - f[i]).powi(2) / (2.0 * noise)
                - (kff[i] - q) / (2.0 * noise);
        }
        let mut ls = DMatrix::from_diagonal(&sigma.map(f64::sqrt));
        ch.solve_l_in_place(&mut ls);
        let m = self.z.nrows() as f64;
        value += -0.5 * self.mu.dot(&(&kuu * &self.mu)) + 0.5 * (m - ls.norm_squared()) + 0.5 * self.log_sigma.sum()
            - 0.5 * ch.logdet();
        if !value.is_finite() {
            return Err(GpError::Diverged { what: "the RNVGP bound", at: None, value });
        }
        Ok(value)
    }

    /// The gradient of the bound from the rows `rows` scaled to `n_total` rows, in `params()`
    /// order, with the model's numerics (unbiased when randomised).
    pub fn gradient(
        &self,
        x: &DMatrix<f64>,
        y: &DVector<f64>,
        rows: &[usize],
        n_total: usize,
        rng: &mut ChaCha8Rng,
    ) -> Result<Vec<f64>, GpError> {
        self.check(x, y, rows)?;
        let m = self.z.nrows();
        let s = n_total as f64 / rows.len() as f64;
        let noise = self.noise();
        let xb = x.select_rows(rows);
        let yb = DVector::from_fn(rows.len(), |i, _| y[rows[i]]);
        let kuu = self.kernel.k(self.z.as_view(), self.z.as_view());
        let kub = self.kernel.k(self.z.as_view(), xb.as_view());
        let (a, sigma) = self.a_matrix(&kuu);
        let r = &yb - kub.transpose() * &self.mu;
        let (probes, chol) = match self.numerics {
            Numerics::Exact => (Probes::exact(m), Some(Cholesky::factor_of(&a, "K_uu + Σ", JitterPolicy::IF_NEEDED)?)),
            Numerics::Randomised { probes, kind, .. } => (Probes::random(m, probes, kind, rng), None),
        };
        let mut solve_cols = |rhs: &DMatrix<f64>| -> Result<DMatrix<f64>, GpError> {
            match (&chol, self.numerics) {
                (Some(ch), _) => Ok(ch.solve(rhs)),
                (None, Numerics::Randomised { cg: opts, .. }) => Ok(cg::solve_many(&a, rhs, &opts, rng)?.0),
                _ => unreachable!("exact numerics always carry a factor"),
            }
        };
        // X = A⁻¹R and Y = A⁻¹BR with B = −s K_ub K_bu/(2σ²) − ½ K_uu.
        let xr = solve_cols(&probes.r)?;
        let br = -(s / (2.0 * noise)) * (&kub * (kub.transpose() * &probes.r)) - 0.5 * (&kuu * &probes.r);
        let yr = solve_cols(&br)?;
        let mut e = probes.scale * &xr * yr.transpose(); // ≈ A⁻¹BA⁻¹
        let diag_ainv = probes.diagonal(&xr);
        let sigma_bar = DVector::from_fn(m, |i, _| e[(i, i)] - 0.5 * diag_ainv[i] + 0.5 / sigma[i]);
        // ∂F/∂K_uu, symmetrised (K_uu is symmetric, so only the symmetric part contributes).
        e = 0.5 * (&e + e.transpose()) - 0.5 * &self.mu * self.mu.transpose();
        let ainv_kub = probes.scale * &xr * (probes.r.transpose() * &kub);
        let kub_bar = (s / noise) * (&self.mu * r.transpose() + &ainv_kub);
        let mu_bar = (s / noise) * (&kub * &r) - &kuu * &self.mu;
        // k_iᵀA⁻¹k_i (for the noise gradient) = column sums of K_ub ∘ A⁻¹K_ub.
        let kff = self.kernel.diag(xb.as_view());
        let mut g_noise = 0.0;
        for i in 0..rows.len() {
            let q = kub.column(i).dot(&ainv_kub.column(i));
            g_noise += s * (-0.5 + (r[i].powi(2) + kff[i] - q) / (2.0 * noise));
        }
        let gk_uu =
            self.kernel.vjp_given_k(self.z.as_view(), self.z.as_view(), kuu.as_view(), e.as_view(), false).params;
        let gk_ub =
            self.kernel.vjp_given_k(self.z.as_view(), xb.as_view(), kub.as_view(), kub_bar.as_view(), false).params;
        let gk_ff = self.kernel.diag_vjp(xb.as_view(), DVector::from_element(rows.len(), -s / (2.0 * noise)).as_view());
        let mut grad = Vec::with_capacity(self.n_params());
        grad.extend_from_slice(mu_bar.as_slice());
        grad.extend(sigma_bar.iter().zip(sigma.iter()).map(|(g, s)| g * s));
        grad.extend((0..self.kernel.n_params()).map(|j| gk_uu[j] + gk_ub[j] + gk_ff[j]));
        grad.push(g_noise);
        if let Some(i) = grad.iter().position(|g| !g.is_finite()) {
            return Err(GpError::Diverged {
                what: "the RNVGP gradient",
                at: Some(Place::Parameter(i)),
                value: grad[i],
            });
        }
        Ok(grad)
    }

    /// Predictive mean k_{*u}μ and latent variance k_** − k_{*u}A⁻¹k_{u*} (exact solves).
    pub fn predict(&self, x: &DMatrix<f64>) -> Result<Prediction, GpError> {
        crate::validate_inputs(x, self.kernel.as_ref(), "test X")?;
        let kuu = self.kernel.k(self.z.as_view(), self.z.as_view());
        let (a, _) = self.a_matrix(&kuu);
        let ch = Cholesky::factor(a, "K_uu + Σ", JitterPolicy::IF_NEEDED)?;
        let kus = self.kernel.k(self.z.as_view(), x.as_view());
        let mut v = kus.clone();
        ch.solve_l_in_place(&mut v);
        let var = self.kernel.diag(x.as_view()) - DVector::from_fn(x.nrows(), |i, _| v.column(i).norm_squared());
        Ok(Prediction::new(kus.transpose() * &self.mu, var, None))
    }
}

impl StochasticObjective for Rnvgp {
    fn params(&self) -> Vec<f64> {
        let mut p = self.mu.as_slice().to_vec();
        p.extend_from_slice(self.log_sigma.as_slice());
        p.extend(self.kernel.params());
        p.push(self.log_noise);
        p
    }

    fn set_params(&mut self, p: &[f64]) -> Result<(), GpError> {
        super::adagrad::check_params(p, self.n_params(), "RNVGP")?;
        let m = self.z.nrows();
        self.mu.copy_from_slice(&p[..m]);
        self.log_sigma.copy_from_slice(&p[m..2 * m]);
        let nk = self.kernel.n_params();
        self.kernel.set_params(&p[2 * m..2 * m + nk]);
        self.log_noise = p[2 * m + nk];
        Ok(())
    }

    fn stochastic_gradient(
        &self,
        x: &DMatrix<f64>,
        y: &DVector<f64>,
        rows: &[usize],
        rng: &mut ChaCha8Rng,
    ) -> Result<Vec<f64>, GpError> {
        self.gradient(x, y, rows, x.nrows(), rng)
    }
}

#[cfg(test)]
mod tests {
    use super::super::test_support::mean_se;
    use super::*;
    use crate::kernels::SquaredExponential;
    use rand::{Rng, SeedableRng};

    fn setup(numerics: Numerics) -> (Rnvgp, DMatrix<f64>, DVector<f64>) {
        let mut rng = ChaCha8Rng::seed_from_u64(1);
        let x: DMatrix<f64> = DMatrix::from_fn(20, 2, |_, _| rng.random_range(-2.0..2.0));
        let y = DVector::from_fn(20, |i, _| x[(i, 0)].sin() + 0.5 * x[(i, 1)] + 0.1 * rng.random_range(-1.0..1.0));
        let z = x.rows(0, 8).clone_owned();
        let mut m = Rnvgp::new(z, Box::new(SquaredExponential::ard(1.2, vec![0.9, 1.4])), 0.15, numerics).unwrap();
        let p: Vec<f64> = m.params().iter().map(|v| v + 0.4 * rng.random_range(-1.0..1.0)).collect();
        m.set_params(&p).unwrap();
        (m, x, y)
    }

    #[test]
    fn exact_gradient_matches_finite_differences_of_the_bound() {
        let (m, x, y) = setup(Numerics::Exact);
        let rows: Vec<usize> = (0..20).collect();
        let g = m.gradient(&x, &y, &rows, 20, &mut ChaCha8Rng::seed_from_u64(0)).unwrap();
        super::super::test_support::assert_fd_gradient(&m, &g, |mm: &Rnvgp| mm.bound(&x, &y).unwrap(), "RNVGP");
    }

    #[test]
    fn bound_equals_the_dense_uncollapsed_bound_of_its_q() {
        // Eq. 1.34 with m = K μ and S = K − K (K + Σ)⁻¹ K, computed densely.
        let (m, x, y) = setup(Numerics::Exact);
        let p = m.params();
        let mm = 8;
        let mu = DVector::from_column_slice(&p[..mm]);
        let sigma = DVector::from_iterator(mm, p[mm..2 * mm].iter().map(|v| v.exp()));
        let k = m.kernel().k(m.z.as_view(), m.z.as_view());
        let kinv = k.clone().cholesky().unwrap().inverse();
        let s = &k - &k * (&k + DMatrix::from_diagonal(&sigma)).cholesky().unwrap().inverse() * &k;
        let mean_u = &k * &mu;
        let kuf = m.kernel().k(m.z.as_view(), x.as_view());
        let noise = m.noise();
        let mut f = 0.0;
        for i in 0..20 {
            let ki = kuf.column(i);
            let mu_i = ki.dot(&(&kinv * &mean_u));
            f += -0.5 * (2.0 * std::f64::consts::PI * noise).ln() - (y[i] - mu_i).powi(2) / (2.0 * noise);
            f -= (m.kernel().diag(x.rows(i, 1)).sum() - ki.dot(&(&kinv * ki))) / (2.0 * noise);
            f -= ki.dot(&(&kinv * &s * &kinv * ki)) / (2.0 * noise);
        }
        let ld = |a: &DMatrix<f64>| a.clone().cholesky().unwrap().l().diagonal().map(|d| 2.0 * d.ln()).sum();
        f -= 0.5 * ((&kinv * &s).trace() + mean_u.dot(&(&kinv * &mean_u)) - mm as f64 + ld(&k) - ld(&s));
        let b = m.bound(&x, &y).unwrap();
        assert!((b - f).abs() < 1e-9 * f.abs(), "structured {b} vs dense {f}");
    }

    #[test]
    fn randomised_gradient_is_unbiased_for_the_exact_gradient() {
        let cg = CgOptions { eps_l: 1e-1, eps: 1e-12, beta: 0.3, ..CgOptions::thesis() };
        let (m, x, y) = setup(Numerics::Randomised { cg, probes: 2, kind: ProbeKind::Rademacher });
        let rows: Vec<usize> = (0..20).collect();
        let mut exact_model = m.clone();
        exact_model.set_numerics(Numerics::Exact);
        let exact = exact_model.gradient(&x, &y, &rows, 20, &mut ChaCha8Rng::seed_from_u64(0)).unwrap();
        let n = 3000;
        let draws: Vec<Vec<f64>> =
            (0..n).map(|s| m.gradient(&x, &y, &rows, 20, &mut ChaCha8Rng::seed_from_u64(s)).unwrap()).collect();
        let mut random_coords = 0;
        for j in 0..exact.len() {
            let (mean, se) = mean_se(&draws.iter().map(|d| d[j]).collect::<Vec<_>>());
            if se > 1e-12 {
                random_coords += 1;
            }
            assert!(
                (mean - exact[j]).abs() <= 3.0 * se + 1e-9 * (1.0 + exact[j].abs()),
                "coordinate {j}: mean {mean} ± {se} vs exact {}",
                exact[j]
            );
        }
        assert!(random_coords > 8, "only {random_coords} coordinates are random");
        // Plain truncation at ε_L = 0.1 is biased for some coordinate.
        let plain = CgOptions { truncation: cg::Truncation::Plain, ..cg };
        let mut mp = m.clone();
        mp.set_numerics(Numerics::Randomised { cg: plain, probes: 2, kind: ProbeKind::Rademacher });
        let draws: Vec<Vec<f64>> =
            (0..n).map(|s| mp.gradient(&x, &y, &rows, 20, &mut ChaCha8Rng::seed_from_u64(s)).unwrap()).collect();
        let biased = (0..exact.len()).any(|j| {
            let (mean, se) = mean_se(&draws.iter().map(|d| d[j]).collect::<Vec<_>>());
            (mean - exact[j]).abs() > 3.0 * se + 1e-9 * (1.0 + exact[j].abs())
        });
        assert!(biased, "plain truncation should fail the unbiasedness check");
    }

    #[test]
    fn bad_inputs_are_errors() {
        let z = DMatrix::zeros(0, 2);
        assert!(Rnvgp::new(z, Box::new(SquaredExponential::ard(1.0, vec![1.0, 1.0])), 0.1, Numerics::Exact).is_err());
        let (mut m, x, y) = setup(Numerics::Exact);
        assert!(m.gradient(&x, &y, &[], 20, &mut ChaCha8Rng::seed_from_u64(0)).is_err());
        assert!(m.gradient(&x, &y, &[25], 20, &mut ChaCha8Rng::seed_from_u64(0)).is_err());
        assert!(m.set_params(&[1.0]).is_err());
        assert!(m.predict(&DMatrix::zeros(2, 3)).is_err());
        let bad = Numerics::Randomised { cg: CgOptions::thesis(), probes: 0, kind: ProbeKind::Gaussian };
        assert!(Rnvgp::new(DMatrix::zeros(2, 2), Box::new(SquaredExponential::isotropic(1.0, 1.0)), 0.1, bad).is_err());
    }
}
