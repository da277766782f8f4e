//! The shared O(NM²) computation of VFE, DTC and FITC and their analytic gradients
//! (science-notes §1.4.2–1.4.4; derivation in ARCHITECTURE.md "Sparse gradients").
//!
//! With R = K_uu⁻¹K_uf, v = (Q_ff + Λ)⁻¹y, w_u = L_B⁻ᵀc and r = L⁻ᵀw_u (= Rv):
//!
//! ```text
//! ∂/∂K_uf  = r vᵀ + P₁ (A diag s₁) [+ P₂ (A diag s₂)]
//!     VFE:  P₁ = L⁻ᵀ(I − B⁻¹),  s₁ = λ^{-½}
//!     DTC:  P₁ = −L⁻ᵀB⁻¹,       s₁ = λ^{-½}
//!     FITC: as DTC, plus P₂ = −2L⁻ᵀ, s₂ = √λ ∘ g_λ   (through λ_n = k_nn − q_nn + σ_n²)
//! ∂/∂K_uu  = −½ r rᵀ + ½ L⁻ᵀ(I − B⁻¹)L⁻¹
//!     VFE adds −½ L⁻ᵀ AAᵀ L⁻¹;  FITC adds L⁻ᵀ A diag(λ∘g_λ) Aᵀ L⁻¹
//! ∂/∂λ_n   = ½(v_n² − [(Q+Λ)⁻¹]_nn)  [VFE adds ½(k_nn − q_nn)/λ_n²]
//! ∂/∂k_nn  = VFE: −1/(2λ_n);  FITC: ∂/∂λ_n;  DTC: 0
//! ```
//!
//! and the jitter ε = r_ε·mean(diag K_uu) contributes r_ε·tr(∂/∂K_uu)/M on the diagonal.
//! ∂/∂K_uf is formed in column blocks and contracted with the kernel immediately, so the
//! peak memory is one M×N matrix (A) plus a block.

use super::{SparseGp, SparseKind, SparsePosterior};
use crate::linalg::{Cholesky, JitterPolicy, aat, aat_acc, col_sq_norms, gemm, symmetrize_from_lower};
use crate::{GpError, Jitter};
use nalgebra::{DMatrix, DVector};

const LN_2PI: f64 = 1.8378770664093453;
/// Entries per column block of ∂/∂K_uf (≈ 32 MB).
const BLOCK_ENTRIES: usize = 1 << 22;

pub(super) struct Gradients {
    pub kernel: Vec<f64>,
    pub log_sigma2: f64,
    pub z: DMatrix<f64>,
}

pub(super) struct Evaluated {
    pub value: f64,
    pub jitter: Jitter,
    pub trace_k_minus_q: f64,
    pub grad: Option<Gradients>,
}

/// Quantities shared by objective, gradient and posterior.
struct Terms {
    chol_uu: Cholesky,
    /// A = L⁻¹K_uf Λ^{-½}, M×N.
    a: DMatrix<f64>,
    aat: DMatrix<f64>,
    chol_b: Cholesky,
    c: DVector<f64>,
    /// Effective per-point noise λ_n.
    lambda: DVector<f64>,
    /// Λ^{-½} y.
    ytil: DVector<f64>,
    knn: DVector<f64>,
    /// ‖(L⁻¹K_uf)_:n‖² = q_nn.
    qnn: DVector<f64>,
}

fn terms(gp: &SparseGp) -> Result<Terms, GpError> {
    let (x, z, kernel) = (gp.x(), gp.z(), gp.kernel.as_ref());
    let n = x.nrows();
    let chol_uu = Cholesky::factor(kernel.k(z.as_view(), z.as_view()), "K_uu", gp.jitter)?;
    let mut a = kernel.k(z.as_view(), x.as_view());
    chol_uu.solve_l_in_place(&mut a);
    let qnn = col_sq_norms(&a);
    let knn = kernel.diag(x.as_view());
    let base = gp.noise.diagonal(n).expect("sparse models use diagonal noise");
    let lambda = match gp.kind {
        SparseKind::Vfe | SparseKind::Dtc => base,
        SparseKind::Fitc => DVector::from_fn(n, |i, _| knn[i] - qnn[i] + base[i]),
    };
    if let Some(i) = lambda.iter().position(|l| !(l.is_finite() && *l > 0.0)) {
        return Err(GpError::invalid(format!("effective noise of row {i} is {} (must be > 0)", lambda[i])));
    }
    let inv_sqrt: DVector<f64> = lambda.map(|l| 1.0 / l.sqrt());
    for (j, mut col) in a.column_iter_mut().enumerate() {
        col *= inv_sqrt[j];
    }
    let aat = aat(&a);
    let m = z.nrows();
    let b = &aat + DMatrix::<f64>::identity(m, m);
    let chol_b = Cholesky::factor(b, "B = I + AAᵀ", JitterPolicy::IF_NEEDED)?;
    let ytil = gp.y().component_mul(&inv_sqrt);
    let c = chol_b.solve_l_vec(&(&a * &ytil));
    Ok(Terms { chol_uu, a, aat, chol_b, c, lambda, ytil, knn, qnn })
}

/// log N(y | 0, Q + Λ) and, for VFE, minus the trace term.
fn value(gp: &SparseGp, t: &Terms) -> (f64, f64) {
    let n = t.ytil.len() as f64;
    let logdet_b: f64 = t.chol_b.l().diagonal().iter().map(|d| d.ln()).sum();
    let logdet_lambda: f64 = t.lambda.iter().map(|l| l.ln()).sum();
    let fit = -0.5 * (t.ytil.norm_squared() - t.c.norm_squared());
    let mut v = -0.5 * n * LN_2PI - logdet_b - 0.5 * logdet_lambda + fit;
    let trace_kq = t.knn.sum() - t.qnn.sum();
    if gp.kind == SparseKind::Vfe {
        // Σ (k_nn − q_nn)/λ_n
        let tr: f64 = (0..t.knn.len()).map(|i| (t.knn[i] - t.qnn[i]) / t.lambda[i]).sum();
        v -= 0.5 * tr;
    }
    (v, trace_kq)
}

/// L⁻ᵀ X L⁻¹ for symmetric X (M×M).
fn sandwich(chol: &Cholesky, x: &DMatrix<f64>) -> DMatrix<f64> {
    let mut t = x.clone();
    chol.solve_lt_in_place(&mut t);
    let mut t = t.transpose();
    chol.solve_lt_in_place(&mut t);
    // Symmetrise against round-off.
    (&t + t.transpose()) * 0.5
}

pub(super) fn evaluate(gp: &SparseGp, with_grad: bool) -> Result<Evaluated, GpError> {
    let t = terms(gp)?;
    let (value, trace_k_minus_q) = value(gp, &t);
    let jitter = t.chol_uu.jitter();
    let grad = if with_grad { Some(gradients(gp, &t)) } else { None };
    Ok(Evaluated { value, jitter, trace_k_minus_q, grad })
}

pub(super) fn posterior(gp: &SparseGp) -> Result<SparsePosterior, GpError> {
    let t = terms(gp)?;
    let (value, trace) = value(gp, &t);
    Ok(SparsePosterior::new(gp.kernel.clone(), gp.z().clone(), t.chol_uu, t.chol_b, t.c, value, trace))
}

fn gradients(gp: &SparseGp, t: &Terms) -> Gradients {
    let (x, z, kernel) = (gp.x(), gp.z(), gp.kernel.as_ref());
    let (m, n) = (t.a.nrows(), t.a.ncols());
    let kind = gp.kind;

    // w_u = B⁻¹ A ỹ = L_B⁻ᵀ c, r = L⁻ᵀ w_u, v_n = (ỹ_n − (Aᵀw_u)_n)/√λ_n.
    let w_u = t.chol_b.solve_lt_vec(&t.c);
    let r = t.chol_uu.solve_lt_vec(&w_u);
    let atw = t.a.tr_mul(&w_u);
    let v = DVector::from_fn(n, |i, _| (t.ytil[i] - atw[i]) / t.lambda[i].sqrt());
    let b_inv = t.chol_b.inverse();
    let eye = DMatrix::<f64>::identity(m, m);

    // ∂/∂λ_n. Diagonal of (Q+Λ)⁻¹: (1 − ‖L_B⁻¹A_:n‖²)/λ_n.
    let g_lambda_sum;
    let mut g_lambda: Option<DVector<f64>> = None;
    match kind {
        SparseKind::Fitc => {
            let mut lba = t.a.clone();
            t.chol_b.solve_l_in_place(&mut lba);
            let lbn = col_sq_norms(&lba);
            drop(lba);
            let g = DVector::from_fn(n, |i, _| 0.5 * (v[i] * v[i] - (1.0 - lbn[i]) / t.lambda[i]));
            g_lambda_sum = g.sum();
            g_lambda = Some(g);
        }
        SparseKind::Vfe | SparseKind::Dtc => {
            let homo = t.lambda.iter().all(|l| *l == t.lambda[0]);
            // tr(B⁻¹ A Λ⁻¹ Aᵀ)
            let tr_binv_s = if homo {
                b_inv.component_mul(&t.aat).sum() / t.lambda[0]
            } else {
                let mut s = DMatrix::<f64>::zeros(m, m);
                let block = (BLOCK_ENTRIES / m.max(1)).max(1);
                let mut start = 0;
                while start < n {
                    let len = block.min(n - start);
                    let mut ac = t.a.columns(start, len).clone_owned();
                    for (j, mut col) in ac.column_iter_mut().enumerate() {
                        col /= t.lambda[start + j].sqrt();
                    }
                    aat_acc(ac.as_view(), &mut s, 1.0, start > 0);
                    start += len;
                }
                symmetrize_from_lower(&mut s);
                b_inv.component_mul(&s).sum()
            };
            let sum_inv_lambda: f64 = t.lambda.iter().map(|l| 1.0 / l).sum();
            let mut g = 0.5 * (v.norm_squared() - (sum_inv_lambda - tr_binv_s));
            if kind == SparseKind::Vfe {
                // ½ Σ (k_nn − q_nn)/λ_n², q_nn/λ_n² = ‖A_:n‖²/λ_n.
                let s: f64 = (0..n).map(|i| (t.knn[i] - t.qnn[i]) / (t.lambda[i] * t.lambda[i])).sum();
                g += 0.5 * s;
            }
            g_lambda_sum = g;
        }
    }

    // ∂/∂K_uu.
    let mut g_uu = &r * r.transpose() * -0.5 + sandwich(&t.chol_uu, &(&eye - &b_inv)) * 0.5;
    match kind {
        SparseKind::Vfe => g_uu -= sandwich(&t.chol_uu, &t.aat) * 0.5,
        SparseKind::Dtc => {}
        SparseKind::Fitc => {
            let gl = g_lambda.as_ref().unwrap();
            let mut s = DMatrix::<f64>::zeros(m, m);
            let mut aw = t.a.clone();
            for (j, mut col) in aw.column_iter_mut().enumerate() {
                col *= (t.lambda[j] * gl[j]).abs().sqrt();
            }
            // A diag(λ g) Aᵀ = Σ sign_n (√|λ_n g_n| a_n)(…)ᵀ: split positive and negative parts.
            let (pos, neg): (Vec<usize>, Vec<usize>) = (0..n).partition(|&j| gl[j] >= 0.0);
            for (idx, sign) in [(pos, 1.0), (neg, -1.0)] {
                if idx.is_empty() {
                    continue;
                }
                let sub = aw.select_columns(idx.iter());
                aat_acc(sub.as_view(), &mut s, sign, true);
            }
            symmetrize_from_lower(&mut s);
            g_uu += sandwich(&t.chol_uu, &s);
        }
    }
    // Jitter ε = rel·mean(diag K_uu): ∂ε/∂K_uu,ii = rel/M.
    let rel = t.chol_uu.jitter().relative;
    let shift = rel * g_uu.trace() / m as f64;
    for i in 0..m {
        g_uu[(i, i)] += shift;
    }

    // ∂/∂K_uf in column blocks: G = r vᵀ + P₁(A diag s₁) [+ P₂(A diag s₂)].
    let neg_lt_binv = {
        let mut p = -b_inv.clone();
        t.chol_uu.solve_lt_in_place(&mut p);
        p
    };
    let p1 = match kind {
        SparseKind::Vfe => {
            let mut p = &eye - &b_inv;
            t.chol_uu.solve_lt_in_place(&mut p);
            p
        }
        SparseKind::Dtc | SparseKind::Fitc => neg_lt_binv,
    };
    let p2 = if kind == SparseKind::Fitc {
        let mut p = eye.clone() * -2.0;
        t.chol_uu.solve_lt_in_place(&mut p);
        Some(p)
    } else {
        None
    };
    let mut g_theta = vec![0.0; kernel.n_params()];
    let mut g_z = DMatrix::<f64>::zeros(z.nrows(), z.ncols());
    let want_z = gp.optimize_inducing;
    let block = (BLOCK_ENTRIES / m.max(1)).max(1);
    let mut start = 0;
    while start < n {
        let len = block.min(n - start);
        let ac = t.a.columns(start, len);
        let mut scaled = ac.clone_owned();
        for (j, mut col) in scaled.column_iter_mut().enumerate() {
            col /= t.lambda[start + j].sqrt();
        }
        let mut g = DMatrix::<f64>::zeros(m, len);
        gemm(&mut g, 1.0, p1.as_view(), false, scaled.as_view(), false, false);
        if let (Some(p2), Some(gl)) = (&p2, &g_lambda) {
            let mut s2 = ac.clone_owned();
            for (j, mut col) in s2.column_iter_mut().enumerate() {
                let i = start + j;
                col *= t.lambda[i].sqrt() * gl[i];
            }
            gemm(&mut g, 1.0, p2.as_view(), false, s2.as_view(), false, true);
        }
        let vc = v.rows(start, len);
        g.ger(1.0, &r, &vc, 1.0);
        let kg = kernel.vjp(z.as_view(), x.rows(start, len), g.as_view(), want_z);
        for (acc, d) in g_theta.iter_mut().zip(kg.params) {
            *acc += d;
        }
        if let Some(gx) = kg.x1 {
            g_z += gx;
        }
        start += len;
    }
    let kg = kernel.vjp(z.as_view(), z.as_view(), g_uu.as_view(), want_z);
    for (acc, d) in g_theta.iter_mut().zip(kg.params) {
        *acc += d;
    }
    if let Some(gx) = kg.x1 {
        g_z += gx * 2.0;
    }

    // ∂/∂k_nn.
    let g_knn: Option<DVector<f64>> = match kind {
        SparseKind::Vfe => Some(t.lambda.map(|l| -0.5 / l)),
        SparseKind::Fitc => g_lambda.clone(),
        SparseKind::Dtc => None,
    };
    if let Some(gk) = g_knn {
        for (acc, d) in g_theta.iter_mut().zip(kernel.diag_vjp(x.as_view(), gk.as_view())) {
            *acc += d;
        }
    }
    let log_sigma2 = gp.noise.sigma2().variance * g_lambda_sum;
    Gradients { kernel: g_theta, log_sigma2, z: g_z }
}
