//! The shared O(NM²) computation of VFE, DTC and FITC and their analytic gradients
//! (Titsias 2009; Bauer, van der Wilk & Rasmussen 2016 eqs 5–7; GPflow's SGPR/GPRFITC for the stable O(NM²) form; derivation in ARCHITECTURE.md "Sparse gradients").
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
//!
//! Implementation: K_uf itself is kept (not A), because every M×M quantity follows from Gram
//! matrices S_w = K_uf diag(w) K_ufᵀ (one SYRK) and M×M triangular solves, e.g.
//! AAᵀ = L⁻¹ S_{1/λ} L⁻ᵀ; this saves the M×N triangular solve, and the kernel's
//! `vjp_given_k` reuses K_uf instead of re-evaluating it. Since A Λ^{-½} = L⁻¹K_uf Λ⁻¹,
//! ∂/∂K_uf = r vᵀ + (P₁L⁻¹) K_uf Λ⁻¹ [− 2K_uu⁻¹ K_uf diag(g_λ)], formed in column blocks and
//! contracted with the kernel at once: peak memory is K_uf (M×N) plus one block.

use super::{ObjectiveTerms, SparseGp, SparseKind, SparsePosterior};
use crate::linalg::{Cholesky, JitterPolicy, aat, aat_acc, col_sq_norms, gemm, symmetrize_from_lower};
use crate::{GpError, Jitter};
use nalgebra::{DMatrix, DVector};
use std::sync::atomic::{AtomicUsize, Ordering};

const LN_2PI: f64 = 1.8378770664093453;
/// Entries per column block of ∂/∂K_uf (default 2²⁰ ≈ 8 MB: the block stays in L3 between the
/// GEMM that forms it and the kernel contraction that reads it; 2²² ran the GEMM at 40 GFLOP/s
/// instead of 58 on this machine).
static BLOCK_ENTRIES: AtomicUsize = AtomicUsize::new(1 << 20);

/// Change the column-block size (entries) of the blocked passes over K_uf. Results do not
/// depend on it beyond round-off; exposed so tests can exercise many blocks on small problems.
#[doc(hidden)]
pub fn set_block_entries(entries: usize) {
    BLOCK_ENTRIES.store(entries.max(1), Ordering::Relaxed);
}

pub(super) struct Gradients {
    pub kernel: Vec<f64>,
    pub log_sigma2: f64,
    pub z: DMatrix<f64>,
    /// ∂/∂ρ of multiscale feature widths (when Z is optimised).
    pub widths: Option<DMatrix<f64>>,
}

pub(super) struct Evaluated {
    pub value: f64,
    pub jitter: Jitter,
    pub grad: Option<Gradients>,
}

/// Quantities shared by objective, gradient and posterior.
struct Terms {
    chol_uu: Cholesky,
    kuf: DMatrix<f64>,
    /// AAᵀ = L⁻¹ K_uf Λ⁻¹ K_ufᵀ L⁻ᵀ.
    aat: DMatrix<f64>,
    chol_b: Cholesky,
    c: DVector<f64>,
    /// Effective per-point noise λ_n.
    lambda: DVector<f64>,
    /// All λ_n equal (homoscedastic VFE/DTC): Gram matrices are rescalings of one SYRK.
    homo: bool,
    /// K_uf K_ufᵀ when `homo`.
    s0: Option<DMatrix<f64>>,
    knn: DVector<f64>,
    /// q_nn = ‖L⁻¹k_n‖² (FITC only).
    qnn: Option<DVector<f64>>,
    /// Σ y_n²/λ_n.
    quad_y: f64,
}

/// Column blocks of an M×N matrix of about BLOCK_ENTRIES entries.
fn blocks(m: usize, n: usize) -> impl Iterator<Item = (usize, usize)> {
    let block = (BLOCK_ENTRIES.load(Ordering::Relaxed) / m.max(1)).max(1);
    (0..n).step_by(block).map(move |s| (s, block.min(n - s)))
}

/// S_w = K diag(w) Kᵀ (M×M); `None` means w = 1. Signed weights are allowed.
fn gram(kuf: &DMatrix<f64>, w: Option<&DVector<f64>>) -> DMatrix<f64> {
    let m = kuf.nrows();
    let Some(w) = w else { return aat(kuf) };
    let mut s = DMatrix::<f64>::zeros(m, m);
    let nonneg = w.iter().all(|v| *v >= 0.0);
    for (i, (start, len)) in blocks(m, kuf.ncols()).enumerate() {
        let mut kc = kuf.columns(start, len).clone_owned();
        if nonneg {
            for (j, mut col) in kc.column_iter_mut().enumerate() {
                col *= w[start + j].sqrt();
            }
            aat_acc(kc.as_view(), &mut s, 1.0, i > 0);
        } else {
            let orig = kuf.columns(start, len);
            for (j, mut col) in kc.column_iter_mut().enumerate() {
                col *= w[start + j];
            }
            gemm(&mut s, 1.0, kc.as_view(), false, orig, true, i > 0);
        }
    }
    if nonneg {
        symmetrize_from_lower(&mut s);
    } else {
        s = (&s + s.transpose()) * 0.5;
    }
    s
}

/// L⁻¹ S L⁻ᵀ for symmetric S.
fn inner(chol: &Cholesky, s: &DMatrix<f64>) -> DMatrix<f64> {
    let mut t = s.clone();
    chol.solve_l_in_place(&mut t);
    let mut t = t.transpose();
    chol.solve_l_in_place(&mut t);
    (&t + t.transpose()) * 0.5
}

/// L⁻ᵀ X L⁻¹ for symmetric X.
fn sandwich(chol: &Cholesky, x: &DMatrix<f64>) -> DMatrix<f64> {
    let mut t = x.clone();
    chol.solve_lt_in_place(&mut t);
    let mut t = t.transpose();
    chol.solve_lt_in_place(&mut t);
    (&t + t.transpose()) * 0.5
}

/// Per column n of K_uf: ‖L⁻¹k_n‖² and, with `lb`, ‖L_B⁻¹L⁻¹k_n‖².
fn column_norms(chol_uu: &Cholesky, lb: Option<&Cholesky>, kuf: &DMatrix<f64>) -> DVector<f64> {
    let mut out = DVector::<f64>::zeros(kuf.ncols());
    for (start, len) in blocks(kuf.nrows(), kuf.ncols()) {
        let mut v = kuf.columns(start, len).clone_owned();
        chol_uu.solve_l_in_place(&mut v);
        if let Some(lb) = lb {
            lb.solve_l_in_place(&mut v);
        }
        out.rows_mut(start, len).copy_from(&col_sq_norms(&v));
    }
    out
}

fn terms(gp: &SparseGp) -> Result<Terms, GpError> {
    let (x, z, kernel, features) = (gp.x(), gp.z(), gp.kernel.as_ref(), gp.features());
    let n = x.nrows();
    let chol_uu = Cholesky::factor(features.kuu(kernel, z), "K_uu", gp.jitter)?;
    let mut kuf = gp.workspace.take();
    features.kuf_into(kernel, z, x.as_view(), &mut kuf);
    let knn = kernel.diag(x.as_view());
    let base = gp.noise.diagonal(n).expect("sparse models use diagonal noise");
    let (lambda, qnn) = match gp.kind {
        SparseKind::Vfe | SparseKind::Dtc => (base, None),
        SparseKind::Fitc => {
            let q = column_norms(&chol_uu, None, &kuf);
            (DVector::from_fn(n, |i, _| knn[i] - q[i] + base[i]), Some(q))
        }
    };
    if let Some(i) = lambda.iter().position(|l| !(l.is_finite() && *l > 0.0)) {
        return Err(GpError::invalid(format!("effective noise of row {i} is {} (must be > 0)", lambda[i])));
    }
    let homo = lambda.iter().all(|l| *l == lambda[0]);
    let (s1, s0) = if homo {
        let s0 = gram(&kuf, None);
        (&s0 / lambda[0], Some(s0))
    } else {
        (gram(&kuf, Some(&lambda.map(|l| 1.0 / l))), None)
    };
    let aat = inner(&chol_uu, &s1);
    let m = z.nrows();
    let chol_b = Cholesky::factor(&aat + DMatrix::<f64>::identity(m, m), "B = I + AAᵀ", JitterPolicy::IF_NEEDED)?;
    let y_over = gp.y().component_div(&lambda);
    let c = chol_b.solve_l_vec(&chol_uu.solve_l_vec(&(&kuf * &y_over)));
    let quad_y = gp.y().dot(&y_over);
    Ok(Terms { chol_uu, kuf, aat, chol_b, c, lambda, homo, s0, knn, qnn, quad_y })
}

/// log N(y | 0, Q + Λ) and, for VFE, minus the trace term.
fn value(gp: &SparseGp, t: &Terms) -> f64 {
    let parts = parts(gp, t);
    parts.constant + parts.complexity + parts.data_fit + parts.trace
}

/// The objective's terms (Bauer, van der Wilk & Rasmussen 2016 eqs 8–10), summed by `value`.
fn parts(gp: &SparseGp, t: &Terms) -> ObjectiveTerms {
    let n = t.lambda.len() as f64;
    let logdet_b: f64 = t.chol_b.l().diagonal().iter().map(|d| d.ln()).sum();
    let logdet_lambda: f64 = t.lambda.iter().map(|l| l.ln()).sum();
    let trace = if gp.kind == SparseKind::Vfe {
        // Σ (k_nn − q_nn)/λ_n = Σ k_nn/λ_n − tr(AAᵀ).
        let k_over: f64 = t.knn.iter().zip(&t.lambda).map(|(k, l)| k / l).sum();
        -0.5 * (k_over - t.aat.trace())
    } else {
        0.0
    };
    let fitc_noise = match &t.qnn {
        Some(q) if gp.kind == SparseKind::Fitc => t.knn.iter().zip(q).map(|(k, q)| (k - q).max(0.0)).sum(),
        _ => 0.0,
    };
    ObjectiveTerms {
        constant: -0.5 * n * LN_2PI,
        complexity: -logdet_b - 0.5 * logdet_lambda,
        data_fit: -0.5 * (t.quad_y - t.c.norm_squared()),
        trace,
        fitc_noise,
    }
}

pub(super) fn objective_terms(gp: &SparseGp) -> Result<ObjectiveTerms, GpError> {
    let t = terms(gp)?;
    let parts = parts(gp, &t);
    gp.workspace.give_back(t.kuf);
    Ok(parts)
}

/// tr(K_ff − Q_ff) = Σ k_nn − tr(L⁻¹ K_uf K_ufᵀ L⁻ᵀ).
fn trace_k_minus_q(t: &Terms) -> f64 {
    let sum_q = match (&t.qnn, &t.s0) {
        (Some(q), _) => q.sum(),
        (None, Some(s0)) => inner(&t.chol_uu, s0).trace(),
        (None, None) => inner(&t.chol_uu, &gram(&t.kuf, None)).trace(),
    };
    t.knn.sum() - sum_q
}

pub(super) fn evaluate(gp: &SparseGp, with_grad: bool) -> Result<Evaluated, GpError> {
    let t = terms(gp)?;
    let value = value(gp, &t);
    let jitter = t.chol_uu.jitter();
    let grad = if with_grad { Some(gradients(gp, &t)) } else { None };
    gp.workspace.give_back(t.kuf);
    Ok(Evaluated { value, jitter, grad })
}

pub(super) fn trace_only(gp: &SparseGp) -> Result<f64, GpError> {
    let t = terms(gp)?;
    let trace = trace_k_minus_q(&t);
    gp.workspace.give_back(t.kuf);
    Ok(trace)
}

pub(super) fn posterior(gp: &SparseGp) -> Result<SparsePosterior, GpError> {
    let t = terms(gp)?;
    let value = value(gp, &t);
    let trace = trace_k_minus_q(&t);
    gp.workspace.give_back(t.kuf);
    Ok(SparsePosterior::new(gp, t.chol_uu, t.chol_b, t.c, value, trace))
}

fn gradients(gp: &SparseGp, t: &Terms) -> Gradients {
    let (x, z, kernel, features) = (gp.x(), gp.z(), gp.kernel.as_ref(), gp.features());
    let (m, n) = (t.kuf.nrows(), t.kuf.ncols());
    let kind = gp.kind;

    // w_u = L_B⁻ᵀc, r = L⁻ᵀw_u (= K_uu⁻¹K_uf v), v_n = (y_n − (K_ufᵀr)_n)/λ_n.
    let w_u = t.chol_b.solve_lt_vec(&t.c);
    let r = t.chol_uu.solve_lt_vec(&w_u);
    let ktr = t.kuf.tr_mul(&r);
    let v = DVector::from_fn(n, |i, _| (gp.y()[i] - ktr[i]) / t.lambda[i]);
    let b_inv = t.chol_b.inverse();
    let eye = DMatrix::<f64>::identity(m, m);

    // ∂/∂λ_n: per point for FITC, summed otherwise.
    let (g_lambda_sum, g_lambda) = match kind {
        SparseKind::Fitc => {
            let lbn = column_norms(&t.chol_uu, Some(&t.chol_b), &t.kuf);
            let g = DVector::from_fn(n, |i, _| {
                let l = t.lambda[i];
                0.5 * (v[i] * v[i] - (1.0 - lbn[i] / l) / l)
            });
            (g.sum(), Some(g))
        }
        SparseKind::Vfe | SparseKind::Dtc => {
            // A Λ⁻¹ Aᵀ = L⁻¹ K_uf Λ⁻² K_ufᵀ L⁻ᵀ.
            let m2 = if t.homo {
                &t.aat / t.lambda[0]
            } else {
                inner(&t.chol_uu, &gram(&t.kuf, Some(&t.lambda.map(|l| 1.0 / (l * l)))))
            };
            let tr_binv_m2 = b_inv.component_mul(&m2).sum();
            let sum_inv_lambda: f64 = t.lambda.iter().map(|l| 1.0 / l).sum();
            let mut g = 0.5 * (v.norm_squared() - (sum_inv_lambda - tr_binv_m2));
            if kind == SparseKind::Vfe {
                // ½ Σ (k_nn − q_nn)/λ_n², with Σ q_nn/λ_n² = tr(AΛ⁻¹Aᵀ).
                let k_over: f64 = t.knn.iter().zip(&t.lambda).map(|(k, l)| k / (l * l)).sum();
                g += 0.5 * (k_over - m2.trace());
            }
            (g, None)
        }
    };

    // ∂/∂K_uu.
    let mut g_uu = &r * r.transpose() * -0.5 + sandwich(&t.chol_uu, &(&eye - &b_inv)) * 0.5;
    match kind {
        SparseKind::Vfe => g_uu -= sandwich(&t.chol_uu, &t.aat) * 0.5,
        SparseKind::Dtc => {}
        SparseKind::Fitc => {
            let gl = g_lambda.as_ref().unwrap();
            g_uu += sandwich(&t.chol_uu, &inner(&t.chol_uu, &gram(&t.kuf, Some(gl))));
        }
    }
    // Jitter ε = rel·mean(diag K_uu): ∂ε/∂K_uu,ii = rel/M.
    let rel = t.chol_uu.jitter().relative;
    let shift = rel * g_uu.trace() / m as f64;
    for i in 0..m {
        g_uu[(i, i)] += shift;
    }

    // ∂/∂K_uf = r vᵀ + P K_uf Λ⁻¹ [+ P₂ K_uf diag(g_λ)], in column blocks.
    let p = match kind {
        SparseKind::Vfe => sandwich(&t.chol_uu, &(&eye - &b_inv)),
        SparseKind::Dtc | SparseKind::Fitc => -sandwich(&t.chol_uu, &b_inv),
    };
    let p2 = (kind == SparseKind::Fitc).then(|| sandwich(&t.chol_uu, &eye) * -2.0);
    let mut g_theta = vec![0.0; kernel.n_params()];
    let mut g_z = DMatrix::<f64>::zeros(z.nrows(), z.ncols());
    let mut g_widths: Option<DMatrix<f64>> = None;
    let want_z = gp.optimize_inducing;
    let mut add = |fg: crate::features::FeatureGrad| {
        for (acc, d) in g_theta.iter_mut().zip(fg.kernel) {
            *acc += d;
        }
        if let Some(gx) = fg.z {
            g_z += gx;
        }
        if let Some(gw) = fg.widths {
            match &mut g_widths {
                Some(acc) => *acc += gw,
                None => g_widths = Some(gw),
            }
        }
    };
    // One block buffer for all full-width blocks (a fresh M×block allocation per block cost
    // page faults and a memset each time); the GEMM overwrites it.
    let full = blocks(m, n).next().map_or(0, |(_, len)| len);
    let mut g_full = DMatrix::<f64>::zeros(m, full);
    for (start, len) in blocks(m, n) {
        let kc = t.kuf.columns(start, len);
        // P K_uf Λ⁻¹ = (P K_uf) Λ⁻¹: multiply, then scale the columns.
        let mut g_last;
        let g = if len == full {
            &mut g_full
        } else {
            g_last = DMatrix::<f64>::zeros(m, len);
            &mut g_last
        };
        gemm(g, 1.0, p.as_view(), false, kc, false, false);
        for (j, mut col) in g.column_iter_mut().enumerate() {
            col /= t.lambda[start + j];
        }
        if let (Some(p2), Some(gl)) = (&p2, &g_lambda) {
            let mut s2 = kc.clone_owned();
            for (j, mut col) in s2.column_iter_mut().enumerate() {
                col *= gl[start + j];
            }
            gemm(g, 1.0, p2.as_view(), false, s2.as_view(), false, true);
        }
        g.ger(1.0, &r, &v.rows(start, len), 1.0);
        add(features.vjp_kuf(kernel, z, x.rows(start, len), kc, g.as_view(), want_z));
    }
    add(features.vjp_kuu(kernel, z, g_uu.as_view(), want_z));

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
    Gradients { kernel: g_theta, log_sigma2, z: g_z, widths: g_widths }
}
