//! Inducing features: what the sparse models condition on. `Points` are ordinary inducing
//! inputs, u_i = f(z_i), with K_uu = k(Z, Z) and K_uf = k(Z, X). `Multiscale` are Walder,
//! Kim & Schölkopf's (2008) Gaussian basis functions with their own per-dimension widths, for
//! the squared-exponential kernel. Both supply K_uu, K_uf and their vector–Jacobian products,
//! so the collapsed bound (`sparse::collapsed`) serves both unchanged.
//!
//! ## Multiscale features (Walder et al. 2008 eqs 12–17, Lemma 3.1)
//!
//! Feature i has centre v_i (the row z_i of Z) and widths L_id. In the scaled form (features
//! multiplied by a constant, which leaves Q_ff = K_fu K_uu⁻¹ K_uf unchanged), with the SE
//! kernel k = s² exp(−½ Σ_d (x_d − x'_d)²/ℓ_d²):
//!
//! ```text
//! K̃_uf[i, n] = s² Π_d (ℓ_d/L_id) · exp(−½ Σ_d (x_nd − v_id)²/L_id²)
//! K̃_uu[i, j] = s² Π_d (ℓ_d²/S_ijd)^½ · exp(−½ Σ_d (v_id − v_jd)²/S_ijd),  S_ijd = L_id² + L_jd² − ℓ_d²
//! ```
//!
//! A feature is in the RKHS only if L_id > ℓ_d/√2 (Lemma 3.1: σ_i > σ/2 in variances). The
//! parametrisation enforces it for every ℓ: L_id = ℓ_d·a_id with a_id = 1/√2 + softplus(ρ_id),
//! so S_ijd = ℓ_d²(a_id² + a_jd² − 1) > 0 always. At a = 1 (L = ℓ) the features are exactly
//! ordinary inducing points: K̃_uf = k(Z, X), K̃_uu = k(Z, Z).

use crate::kernels::{Kernel, SquaredExponential};
use crate::{GpError, Unsupported};
use nalgebra::{DMatrix, DMatrixView};
use rayon::prelude::*;
use std::f64::consts::FRAC_1_SQRT_2;

/// Columns of K_uf per parallel task (fixed, so the reduction order never depends on threads).
const COLS_PER_TASK: usize = 256;

/// What the sparse models condition on.
#[derive(Debug, Clone, PartialEq)]
pub enum InducingFeatures {
    /// Ordinary inducing points u_i = f(z_i).
    Points,
    /// Walder et al.'s multiscale Gaussian features (SE kernel only).
    Multiscale(Multiscale),
}

/// The widths of M multiscale features in D dimensions, as the unconstrained ρ of
/// L_id = ℓ_d (1/√2 + softplus(ρ_id)).
#[derive(Debug, Clone, PartialEq)]
pub struct Multiscale {
    raw: DMatrix<f64>,
}

/// ∂L/∂(kernel log-parameters), ∂L/∂Z and, for multiscale features, ∂L/∂ρ.
#[derive(Debug, Clone)]
pub(crate) struct FeatureGrad {
    pub kernel: Vec<f64>,
    pub z: Option<DMatrix<f64>>,
    pub widths: Option<DMatrix<f64>>,
}

fn softplus(x: f64) -> f64 {
    if x > 30.0 { x } else { x.exp().ln_1p() }
}

fn softplus_inv(y: f64) -> f64 {
    if y > 30.0 { y + (-(-y).exp()).ln_1p() } else { y.exp_m1().ln() }
}

fn sigmoid(x: f64) -> f64 {
    1.0 / (1.0 + (-x).exp())
}

impl Multiscale {
    /// M features whose widths equal the kernel's length-scales (a = 1): exactly ordinary
    /// inducing points, the start of Walder et al.'s "ordinary first, then multiscale".
    pub fn ordinary(m: usize, d: usize) -> Self {
        Multiscale { raw: DMatrix::from_element(m, d, softplus_inv(1.0 - FRAC_1_SQRT_2)) }
    }
    /// From relative widths a_id = L_id/ℓ_d, each > 1/√2.
    pub fn from_relative(a: &DMatrix<f64>) -> Result<Self, GpError> {
        if let Some(bad) = a.iter().find(|v| !(v.is_finite() && **v > FRAC_1_SQRT_2)) {
            let bound = "exceed 1/√2 (widths must exceed ℓ/√2: Walder et al. 2008, Lemma 3.1)";
            return Err(GpError::parameter("multiscale relative width", *bad, bound));
        }
        Ok(Multiscale { raw: a.map(|v| softplus_inv(v - FRAC_1_SQRT_2)) })
    }
    /// The unconstrained parameters ρ (M×D).
    pub fn raw(&self) -> &DMatrix<f64> {
        &self.raw
    }
    pub(crate) fn raw_mut(&mut self) -> &mut DMatrix<f64> {
        &mut self.raw
    }
    /// Relative widths a_id = L_id/ℓ_d = 1/√2 + softplus(ρ_id).
    pub fn relative(&self) -> DMatrix<f64> {
        self.raw.map(|r| FRAC_1_SQRT_2 + softplus(r))
    }
    /// Widths L_id = ℓ_d a_id for the kernel's length-scales.
    pub fn widths(&self, kernel: &SquaredExponential) -> DMatrix<f64> {
        let ls = per_dim(kernel, self.raw.ncols());
        let mut l = self.relative();
        for (d, mut col) in l.column_iter_mut().enumerate() {
            col *= ls[d];
        }
        l
    }
}

/// The SE kernel's length-scales, one per dimension.
fn per_dim(se: &SquaredExponential, d: usize) -> Vec<f64> {
    let ls = se.lengthscales();
    if ls.len() == d { ls.to_vec() } else { vec![ls[0]; d] }
}

/// Kernel log-parameter gradient [log s², log ℓ…] from per-dimension parts.
fn kernel_grad(se: &SquaredExponential, g_s2: f64, g_logl: Vec<f64>) -> Vec<f64> {
    let mut out = vec![g_s2];
    if se.input_dim().is_some() {
        out.extend(g_logl);
    } else {
        out.push(g_logl.iter().sum());
    }
    out
}

impl InducingFeatures {
    /// Check that these features fit Z (M×D) and the kernel.
    pub fn check(&self, z: &DMatrix<f64>, kernel: &dyn Kernel) -> Result<(), GpError> {
        let InducingFeatures::Multiscale(ms) = self else { return Ok(()) };
        if kernel.as_squared_exponential().is_none() {
            return Err(GpError::Unsupported(Unsupported::MultiscaleKernel { kernel: kernel.name() }));
        }
        if ms.raw.nrows() != z.nrows() {
            return Err(GpError::shape("multiscale widths", ms.raw.nrows(), "rows", z.nrows(), "inducing points"));
        }
        if ms.raw.ncols() != z.ncols() {
            return Err(GpError::shape("multiscale widths", ms.raw.ncols(), "columns", z.ncols(), "columns of Z"));
        }
        Ok(())
    }

    fn multiscale<'a>(&'a self, kernel: &'a dyn Kernel) -> Option<(&'a Multiscale, &'a SquaredExponential)> {
        match self {
            InducingFeatures::Points => None,
            InducingFeatures::Multiscale(ms) => {
                Some((ms, kernel.as_squared_exponential().expect("checked when the features were set")))
            }
        }
    }

    /// K_uu (M×M).
    pub fn kuu(&self, kernel: &dyn Kernel, z: &DMatrix<f64>) -> DMatrix<f64> {
        let Some((ms, se)) = self.multiscale(kernel) else { return kernel.k(z.as_view(), z.as_view()) };
        let (m, d) = z.shape();
        let (s2, ls, a) = (se.variance(), per_dim(se, d), ms.relative());
        let mut out = DMatrix::zeros(m, m);
        for j in 0..m {
            for i in j..m {
                let (mut log_pref, mut e) = (0.0, 0.0);
                for dd in 0..d {
                    let s = a[(i, dd)].powi(2) + a[(j, dd)].powi(2) - 1.0;
                    let delta = z[(i, dd)] - z[(j, dd)];
                    log_pref -= 0.5 * s.ln();
                    e += delta * delta / (ls[dd] * ls[dd] * s);
                }
                let v = s2 * (log_pref - 0.5 * e).exp();
                out[(i, j)] = v;
                out[(j, i)] = v;
            }
        }
        out
    }

    /// K_uf (M×N) written into `out`. Per column: the exponent −½Σ_d (x_d − v_id)²/L_id² plus
    /// the log prefactor, accumulated over d with i innermost (contiguous, vectorised), then
    /// one vectorised exp per column.
    pub fn kuf_into(&self, kernel: &dyn Kernel, z: &DMatrix<f64>, x: DMatrixView<'_, f64>, out: &mut DMatrix<f64>) {
        let Some((ms, se)) = self.multiscale(kernel) else {
            kernel.k_into(z.as_view(), x, out);
            return;
        };
        let (m, d) = z.shape();
        let n = x.nrows();
        let (inv, pref) = uf_factors(ms, se, d);
        let log_pref: Vec<f64> = pref.iter().map(|p| p.ln()).collect();
        let (zs, invs) = (z.as_slice(), inv.as_slice());
        if out.shape() != (m, n) {
            *out = DMatrix::zeros(m, n);
        }
        out.as_mut_slice().par_chunks_mut(m * COLS_PER_TASK).enumerate().for_each(|(c, block)| {
            for (k, col) in block.chunks_exact_mut(m).enumerate() {
                let nn = c * COLS_PER_TASK + k;
                col.copy_from_slice(&log_pref);
                for dd in 0..d {
                    let xv = x[(nn, dd)];
                    let (zc, ic) = (&zs[dd * m..(dd + 1) * m], &invs[dd * m..(dd + 1) * m]);
                    for ((o, zv), iv) in col.iter_mut().zip(zc).zip(ic) {
                        let t = xv - zv;
                        *o -= 0.5 * t * t * iv;
                    }
                }
                crate::kernels::vexp::exp_in_place(col);
            }
        });
    }

    /// K_fu = K_ufᵀ (N×M) written into `out`: for inducing points the kernel at (X, Z) (every
    /// kernel here is symmetric), for multiscale features the transpose of [`Self::kuf_into`].
    /// A contiguous K_fu block is what the Gram product K_uf K_ufᵀ runs fastest on
    /// ([`crate::linalg::ata_acc`]).
    pub fn kfu_into(&self, kernel: &dyn Kernel, z: &DMatrix<f64>, x: DMatrixView<'_, f64>, out: &mut DMatrix<f64>) {
        if self.multiscale(kernel).is_none() {
            kernel.k_into(x, z.as_view(), out);
        } else {
            *out = self.kuf(kernel, z, x).transpose();
        }
    }

    /// K_uf (M×N).
    pub fn kuf(&self, kernel: &dyn Kernel, z: &DMatrix<f64>, x: DMatrixView<'_, f64>) -> DMatrix<f64> {
        let mut out = DMatrix::zeros(0, 0);
        self.kuf_into(kernel, z, x, &mut out);
        out
    }

    /// The vjp of ⟨G, K_uf⟩ for the K_uf = `kuf` of rows `x`.
    pub(crate) fn vjp_kuf(
        &self,
        kernel: &dyn Kernel,
        z: &DMatrix<f64>,
        x: DMatrixView<'_, f64>,
        kuf: DMatrixView<'_, f64>,
        g: DMatrixView<'_, f64>,
        want_z: bool,
    ) -> FeatureGrad {
        let Some((ms, se)) = self.multiscale(kernel) else {
            let kg = kernel.vjp_given_k(z.as_view(), x, kuf, g, want_z);
            return FeatureGrad { kernel: kg.params, z: kg.x1, widths: None };
        };
        let (m, d) = z.shape();
        let n = x.nrows();
        let (inv, _) = uf_factors(ms, se, d);
        let a = ms.relative();
        let (zs, invs) = (z.as_slice(), inv.as_slice());
        // Per fixed column chunk, folded in chunk order: Σ_n w_in (M), Σ_n w_in t_ind (∂/∂v,
        // M×D) and Σ_n w_in δ_ind t_ind (M×D), with w = G∘K, δ = x_nd − v_id, t = δ/L_id².
        let part = |c: usize| {
            let (mut wsum, mut gv, mut gq) = (vec![0.0; m], vec![0.0; m * d], vec![0.0; m * d]);
            let mut w = vec![0.0; m];
            for nn in c * COLS_PER_TASK..((c + 1) * COLS_PER_TASK).min(n) {
                let (gc, kc) = (g.column(nn), kuf.column(nn));
                for (i, wi) in w.iter_mut().enumerate() {
                    *wi = gc[i] * kc[i];
                    wsum[i] += *wi;
                }
                for dd in 0..d {
                    let xv = x[(nn, dd)];
                    let r = dd * m..(dd + 1) * m;
                    let (zc, ic) = (&zs[r.clone()], &invs[r.clone()]);
                    let (gvc, gqc) = (&mut gv[r.clone()], &mut gq[r]);
                    for i in 0..m {
                        let delta = xv - zc[i];
                        let wt = w[i] * delta * ic[i];
                        gvc[i] += wt;
                        gqc[i] += wt * delta;
                    }
                }
            }
            (wsum, gv, gq)
        };
        let parts: Vec<_> = (0..n.div_ceil(COLS_PER_TASK)).into_par_iter().map(part).collect();
        let (mut wsum, mut gv, mut gq) = (vec![0.0; m], vec![0.0; m * d], vec![0.0; m * d]);
        for (ws, v, q) in parts {
            wsum.iter_mut().zip(ws).for_each(|(acc, x)| *acc += x);
            gv.iter_mut().zip(v).for_each(|(acc, x)| *acc += x);
            gq.iter_mut().zip(q).for_each(|(acc, x)| *acc += x);
        }
        let gs2: f64 = wsum.iter().sum();
        let gl: Vec<f64> = (0..d).map(|dd| gq[dd * m..(dd + 1) * m].iter().sum()).collect();
        // ∂ log K_uf/∂a_id = (δ²/L² − 1)/a_id, through a = 1/√2 + softplus(ρ).
        let ga = DMatrix::from_fn(m, d, |i, dd| (gq[dd * m + i] - wsum[i]) / a[(i, dd)] * sigmoid(ms.raw[(i, dd)]));
        FeatureGrad {
            kernel: kernel_grad(se, gs2, gl),
            z: want_z.then(|| DMatrix::from_column_slice(m, d, &gv)),
            widths: want_z.then_some(ga),
        }
    }

    /// The vjp of ⟨G, K_uu⟩ through both of K_uu's arguments (G symmetric). `kuu`, when the
    /// caller still holds K_uu = [`Self::kuu`] (no jitter), lets inducing points use
    /// [`Kernel::vjp_given_k`] (for the squared exponential: no exponentials); multiscale
    /// features ignore it.
    pub(crate) fn vjp_kuu(
        &self,
        kernel: &dyn Kernel,
        z: &DMatrix<f64>,
        kuu: Option<DMatrixView<'_, f64>>,
        g: DMatrixView<'_, f64>,
        want_z: bool,
    ) -> FeatureGrad {
        let Some((ms, se)) = self.multiscale(kernel) else {
            let kg = match kuu {
                Some(k) => kernel.vjp_given_k(z.as_view(), z.as_view(), k, g, want_z),
                None => kernel.vjp(z.as_view(), z.as_view(), g, want_z),
            };
            return FeatureGrad { kernel: kg.params, z: kg.x1.map(|gz| gz * 2.0), widths: None };
        };
        let (m, d) = z.shape();
        let (ls, a) = (per_dim(se, d), ms.relative());
        let kuu = self.kuu(kernel, z);
        let (mut gs2, mut gl, mut gv, mut ga) = (0.0, vec![0.0; d], DMatrix::zeros(m, d), DMatrix::zeros(m, d));
        for j in 0..m {
            for i in 0..m {
                let w = g[(i, j)] * kuu[(i, j)];
                gs2 += w;
                for dd in 0..d {
                    let s = a[(i, dd)].powi(2) + a[(j, dd)].powi(2) - 1.0;
                    let l2s = ls[dd] * ls[dd] * s;
                    let delta = z[(i, dd)] - z[(j, dd)];
                    let q = delta * delta / l2s;
                    gl[dd] += w * q;
                    gv[(i, dd)] -= w * delta / l2s;
                    gv[(j, dd)] += w * delta / l2s;
                    // ∂ log K/∂s = (q − 1)/(2s), ∂s/∂a = 2a (both ends of the pair).
                    let ds = w * (q - 1.0) / (2.0 * s);
                    ga[(i, dd)] += ds * 2.0 * a[(i, dd)];
                    ga[(j, dd)] += ds * 2.0 * a[(j, dd)];
                }
            }
        }
        FeatureGrad {
            kernel: kernel_grad(se, gs2, gl),
            z: want_z.then_some(gv),
            widths: want_z.then(|| ga.zip_map(&ms.raw, |g: f64, r| g * sigmoid(r))),
        }
    }
}

/// 1/(ℓ_d² a_id²) and the prefactors s² Π_d 1/a_id of K̃_uf.
fn uf_factors(ms: &Multiscale, se: &SquaredExponential, d: usize) -> (DMatrix<f64>, Vec<f64>) {
    let (ls, a) = (per_dim(se, d), ms.relative());
    let inv = DMatrix::from_fn(a.nrows(), d, |i, dd| 1.0 / (ls[dd] * a[(i, dd)]).powi(2));
    let pref = (0..a.nrows()).map(|i| se.variance() * a.row(i).iter().map(|v| 1.0 / v).product::<f64>()).collect();
    (inv, pref)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernels::Matern;

    fn data() -> (DMatrix<f64>, DMatrix<f64>) {
        let x = DMatrix::from_fn(9, 2, |i, j| ((i * 5 + j * 3) % 7) as f64 * 0.4 - 1.2);
        let z = DMatrix::from_fn(4, 2, |i, j| i as f64 * 0.6 - 0.9 + j as f64 * 0.2);
        (x, z)
    }

    #[test]
    fn at_unit_relative_width_multiscale_features_are_inducing_points() {
        let (x, z) = data();
        let k = SquaredExponential::ard(1.3, vec![0.7, 1.4]);
        let ms = InducingFeatures::Multiscale(Multiscale::ordinary(4, 2));
        let pts = InducingFeatures::Points;
        assert!((ms.kuu(&k, &z) - pts.kuu(&k, &z)).abs().max() < 1e-12);
        assert!((ms.kuf(&k, &z, x.as_view()) - pts.kuf(&k, &z, x.as_view())).abs().max() < 1e-12);
        let InducingFeatures::Multiscale(m) = &ms else { unreachable!() };
        assert!((m.widths(&k).column(1).add_scalar(-1.4)).abs().max() < 1e-12);
    }

    /// K_fu is K_uf transposed, for inducing points (two kernels) and multiscale features, and
    /// a buffer of the wrong shape is resized.
    #[test]
    fn kfu_is_kuf_transposed() {
        let (x, z) = data();
        let a = DMatrix::from_fn(4, 2, |i, j| 0.8 + 0.3 * i as f64 + 0.25 * j as f64);
        let cases: Vec<(Box<dyn Kernel>, InducingFeatures)> = vec![
            (Box::new(SquaredExponential::ard(1.3, vec![0.7, 1.4])), InducingFeatures::Points),
            (
                Box::new(Matern::ard(crate::kernels::MaternNu::FiveHalves, 0.9, vec![0.8, 1.1])),
                InducingFeatures::Points,
            ),
            (
                Box::new(SquaredExponential::ard(1.3, vec![0.7, 1.4])),
                InducingFeatures::Multiscale(Multiscale::from_relative(&a).unwrap()),
            ),
        ];
        for (k, f) in &cases {
            let kuf = f.kuf(k.as_ref(), &z, x.as_view());
            let mut kfu = DMatrix::from_element(2, 3, f64::NAN);
            f.kfu_into(k.as_ref(), &z, x.as_view(), &mut kfu);
            assert_eq!(kfu.shape(), (9, 4));
            assert!((kfu - kuf.transpose()).abs().max() < 1e-15, "{f:?}");
        }
    }

    /// The vjps equal central differences of ⟨G, K⟩ in s², ℓ, Z and ρ.
    #[test]
    fn multiscale_vjps_match_finite_differences() {
        let (x, z) = data();
        let a = DMatrix::from_fn(4, 2, |i, j| 0.8 + 0.3 * i as f64 + 0.25 * j as f64);
        let ms = Multiscale::from_relative(&a).unwrap();
        let gf = DMatrix::from_fn(4, 9, |i, j| ((i * 3 + j * 7) % 5) as f64 * 0.3 - 0.6);
        let gu0 = DMatrix::from_fn(4, 4, |i, j| ((i + 2 * j) % 3) as f64 * 0.4 - 0.4);
        let gu = (&gu0 + gu0.transpose()) * 0.5;
        let h = 1e-6;
        for k in [SquaredExponential::ard(1.3, vec![0.7, 1.4]), SquaredExponential::isotropic(0.8, 1.1)] {
            let f = |k: &SquaredExponential, z: &DMatrix<f64>, ms: &Multiscale| {
                let feats = InducingFeatures::Multiscale(ms.clone());
                gf.dot(&feats.kuf(k, z, x.as_view())) + gu.dot(&feats.kuu(k, z))
            };
            let feats = InducingFeatures::Multiscale(ms.clone());
            let kuf = feats.kuf(&k, &z, x.as_view());
            let a1 = feats.vjp_kuf(&k, &z, x.as_view(), kuf.as_view(), gf.as_view(), true);
            let a2 = feats.vjp_kuu(&k, &z, None, gu.as_view(), true);
            let close = |an: f64, fd: f64, what: &str| {
                assert!((an - fd).abs() < 1e-6 * (1.0 + fd.abs()), "{what}: {an} vs {fd}")
            };
            let p0 = k.params();
            for p in 0..p0.len() {
                let shift = |s: f64| {
                    let mut kk = k.clone();
                    let mut q = p0.clone();
                    q[p] += s;
                    kk.set_params(&q);
                    f(&kk, &z, &ms)
                };
                close(a1.kernel[p] + a2.kernel[p], (shift(h) - shift(-h)) / (2.0 * h), &format!("{} θ[{p}]", k.name()));
            }
            for idx in 0..z.len() {
                let shift = |s: f64| {
                    let mut zz = z.clone();
                    zz[idx] += s;
                    f(&k, &zz, &ms)
                };
                let an = a1.z.as_ref().unwrap()[idx] + a2.z.as_ref().unwrap()[idx];
                close(an, (shift(h) - shift(-h)) / (2.0 * h), &format!("Z[{idx}]"));
                let shift = |s: f64| {
                    let mut m2 = ms.clone();
                    m2.raw[idx] += s;
                    f(&k, &z, &m2)
                };
                let an = a1.widths.as_ref().unwrap()[idx] + a2.widths.as_ref().unwrap()[idx];
                close(an, (shift(h) - shift(-h)) / (2.0 * h), &format!("ρ[{idx}]"));
            }
        }
    }

    #[test]
    fn widths_are_constrained_and_kernels_checked() {
        let (_, z) = data();
        assert!(Multiscale::from_relative(&DMatrix::from_element(4, 2, 0.7)).is_err());
        assert!(Multiscale::from_relative(&DMatrix::from_element(4, 2, f64::NAN)).is_err());
        // Any ρ gives widths above ℓ/√2, so K_uu stays positive definite.
        let mut ms = Multiscale::ordinary(4, 2);
        ms.raw_mut().fill(-12.0);
        assert!(ms.relative().iter().all(|a| *a > FRAC_1_SQRT_2));
        let k = SquaredExponential::ard(1.0, vec![0.5, 0.5]);
        let kuu = InducingFeatures::Multiscale(ms).kuu(&k, &z);
        assert!(nalgebra::Cholesky::new(kuu).is_some());
        let feats = InducingFeatures::Multiscale(Multiscale::ordinary(4, 2));
        let matern = Matern::ard(crate::kernels::MaternNu::ThreeHalves, 1.0, vec![1.0, 1.0]);
        assert!(feats.check(&z, &matern).unwrap_err().to_string().contains("squared-exponential"));
        let e = feats.check(&DMatrix::zeros(3, 2), &k).unwrap_err();
        assert_eq!(e, GpError::shape("multiscale widths", 4, "rows", 3, "inducing points"));
        assert_eq!(e.to_string(), "invalid input: multiscale widths: 4 rows for 3 inducing points");
        assert!(feats.check(&z, &k).is_ok());
    }
}
