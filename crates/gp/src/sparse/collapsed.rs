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
//! and the jitter ε = r_ε·mean(diag K_uu) contributes r_ε·tr(∂/∂K_uu)/M on the diagonal (an
//! absolute jitter, [`crate::KuuJitter::Absolute`], is a constant and contributes nothing).
//!
//! Implementation: every M×M quantity follows from Gram matrices S_w = K_uf diag(w) K_ufᵀ and
//! M×M triangular solves, e.g. AAᵀ = L⁻¹ S_{1/λ} L⁻ᵀ, which saves the M×N triangular solve. Since
//! A Λ^{-½} = L⁻¹K_uf Λ⁻¹, ∂/∂K_uf = r vᵀ + (P₁L⁻¹) K_uf Λ⁻¹ [− 2K_uu⁻¹ K_uf diag(g_λ)], formed
//! in column blocks and contracted with the kernel at once. K_uf is never stored: each pass
//! evaluates its column block (or, for the Gram products, its K_fu = K_ufᵀ row block) into a
//! cache-resident buffer, so memory is O(M² + M·block + N) rather than O(MN), and the two
//! O(NM²) products read their operand from cache. The kernel is evaluated twice per
//! objective+gradient (three times for FITC and for heteroscedastic noise), which costs less than
//! the memory traffic it saves (docs/results.md "Speed").

use super::{ObjectiveTerms, SparseGp, SparseKind, SparsePosterior};
use crate::linalg::{Cholesky, JitterPolicy, JitterScale, aat_acc, ata_acc, col_sq_norms, gemm, symmetrize_from_lower};
use crate::{GpError, Jitter, Place};
use nalgebra::{DMatrix, DVector};
use rayon::prelude::*;
use std::sync::atomic::{AtomicUsize, Ordering};

const LN_2PI: f64 = 1.8378770664093453;
/// Entries per block of the passes over K_uf (default 2²⁰ ≈ 8 MB: K_uf's block, evaluated into
/// a buffer, and ∂/∂K_uf's block stay in cache between the kernel, the GEMM and the contraction;
/// 2²² ran the GEMM at 40 GFLOP/s instead of 58 on a 2-core AMD EPYC without AVX-512).
static BLOCK_ENTRIES: AtomicUsize = AtomicUsize::new(1 << 20);

/// Change the column-block size (entries) of the blocked passes over K_uf. Results do not
/// depend on it beyond round-off; exposed so tests can exercise many blocks on small problems.
#[doc(hidden)]
pub fn set_block_entries(entries: usize) {
    BLOCK_ENTRIES.store(entries.max(1), Ordering::Relaxed);
}

/// The column-block size (entries) of the blocked passes over K_uf, as set.
#[doc(hidden)]
pub fn block_entries() -> usize {
    BLOCK_ENTRIES.load(Ordering::Relaxed)
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
    /// Formed through A = L⁻¹K_uf ([`solved`]), as with an absolute jitter.
    solved: bool,
}

/// Column blocks of an M×N matrix of about BLOCK_ENTRIES entries.
fn blocks(m: usize, n: usize) -> impl Iterator<Item = (usize, usize)> {
    let block = (BLOCK_ENTRIES.load(Ordering::Relaxed) / m.max(1)).max(1);
    (0..n).step_by(block).map(move |s| (s, block.min(n - s)))
}

/// S_w = K_uf diag(w) K_ufᵀ (M×M; `None` means w = 1; signed weights are allowed) and, with
/// `project`, K_uf·project (M) from the same pass.
///
/// Formed as Σ over row blocks of K_fu = K_ufᵀ, each evaluated into one block buffer
/// ([`crate::features::InducingFeatures::kfu_into`]): with the summed index contiguous, faer runs
/// the product 1.3–1.5× faster than A Aᵀ on a stored M×N K_uf.
fn gram(
    gp: &SparseGp,
    w: Option<&DVector<f64>>,
    project: Option<&DVector<f64>>,
) -> (DMatrix<f64>, Option<DVector<f64>>) {
    let (x, z, kernel, features) = (gp.x(), gp.z(), gp.kernel.as_ref(), gp.features());
    let (m, n) = (z.nrows(), x.nrows());
    let mut s = DMatrix::<f64>::zeros(m, m);
    let mut proj = project.map(|_| DVector::<f64>::zeros(m));
    let nonneg = w.is_none_or(|w| w.iter().all(|v| *v >= 0.0));
    let mut kb = DMatrix::<f64>::zeros(0, 0);
    for (i, (start, len)) in blocks(m, n).enumerate() {
        features.kfu_into(kernel, z, x.rows(start, len), &mut kb);
        if let (Some(acc), Some(y)) = (&mut proj, project) {
            acc.gemv_tr(1.0, &kb, &y.rows(start, len), 1.0);
        }
        match w {
            None => ata_acc(kb.as_view(), &mut s, 1.0, i > 0),
            Some(w) if nonneg => {
                for (j, mut row) in kb.row_iter_mut().enumerate() {
                    row *= w[start + j].sqrt();
                }
                ata_acc(kb.as_view(), &mut s, 1.0, i > 0);
            }
            Some(w) => {
                let orig = kb.clone();
                for (j, mut row) in kb.row_iter_mut().enumerate() {
                    row *= w[start + j];
                }
                gemm(&mut s, 1.0, kb.as_view(), true, orig.as_view(), false, i > 0);
            }
        }
    }
    if nonneg {
        symmetrize_from_lower(&mut s);
    } else {
        s = (&s + s.transpose()) * 0.5;
    }
    (s, proj)
}

/// The solved form (GPflow's order of operations): L⁻¹K_uf diag(w) K_ufᵀL⁻ᵀ (M×M; w > 0) as
/// Σ over column blocks of A_b A_bᵀ with A_b = L⁻¹K_uf,b diag(w)^½, and, with `project`,
/// K_uf·project from the same pass.
///
/// [`inner`] of the Gram matrix S_w is the same matrix for an extra M×N triangular solve less,
/// but its round-off grows with cond(K_uu), that of this form with cond(L) = cond(K_uu)^½. The
/// default relative jitter caps cond(K_uu) near 10⁶·M whatever the kernel's variance, and D29
/// measured what that leaves; an absolute jitter caps nothing as the variance grows (through
/// the Gram form, the joint fit of docs/results.md "gp fit against GPflow" with GPflow's jitter
/// stopped after 17 iterations on a failed line search, 96 nats short), so with it every M×M
/// product of K_uf goes through A (`Terms::solved`).
fn solved_gram(
    gp: &SparseGp,
    chol_uu: &Cholesky,
    w: &DVector<f64>,
    project: Option<&DVector<f64>>,
) -> (DMatrix<f64>, Option<DVector<f64>>) {
    let (m, n) = (gp.z().nrows(), gp.x().nrows());
    let mut s = DMatrix::<f64>::zeros(m, m);
    let mut proj = project.map(|_| DVector::<f64>::zeros(m));
    let mut kb = DMatrix::<f64>::zeros(0, 0);
    for (i, (start, len)) in blocks(m, n).enumerate() {
        kuf_block(gp, start, len, &mut kb);
        if let (Some(acc), Some(y)) = (&mut proj, project) {
            acc.gemv(1.0, &kb, &y.rows(start, len), 1.0);
        }
        chol_uu.solve_l_in_place(&mut kb);
        for (j, mut col) in kb.column_iter_mut().enumerate() {
            col *= w[start + j].sqrt();
        }
        aat_acc(kb.as_view(), &mut s, 1.0, i > 0);
    }
    symmetrize_from_lower(&mut s);
    (s, proj)
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

/// K_uf's column block [start, start + len) into `out`.
fn kuf_block(gp: &SparseGp, start: usize, len: usize, out: &mut DMatrix<f64>) {
    gp.features().kuf_into(gp.kernel.as_ref(), gp.z(), gp.x().rows(start, len), out);
}

/// Per column n of the block `kb` of K_uf: ‖L⁻¹k_n‖² and, with `lb`, ‖L_B⁻¹L⁻¹k_n‖²
/// (overwrites `kb`).
fn column_norms(chol_uu: &Cholesky, lb: Option<&Cholesky>, kb: &mut DMatrix<f64>) -> DVector<f64> {
    chol_uu.solve_l_in_place(kb);
    if let Some(lb) = lb {
        lb.solve_l_in_place(kb);
    }
    col_sq_norms(kb)
}

fn terms(gp: &SparseGp) -> Result<Terms, GpError> {
    let (x, z, kernel, features) = (gp.x(), gp.z(), gp.kernel.as_ref(), gp.features());
    let n = x.nrows();
    let chol_uu = Cholesky::factor(features.kuu(kernel, z), "K_uu", gp.jitter)?;
    let knn = kernel.diag(x.as_view());
    let base = gp.noise.diagonal(n).expect("sparse models use diagonal noise");
    let (lambda, qnn) = match gp.kind {
        SparseKind::Vfe | SparseKind::Dtc => (base, None),
        SparseKind::Fitc => {
            let mut q = DVector::<f64>::zeros(n);
            let mut kb = DMatrix::<f64>::zeros(0, 0);
            for (start, len) in blocks(z.nrows(), n) {
                kuf_block(gp, start, len, &mut kb);
                q.rows_mut(start, len).copy_from(&column_norms(&chol_uu, None, &mut kb));
            }
            (DVector::from_fn(n, |i, _| knn[i] - q[i] + base[i]), Some(q))
        }
    };
    if let Some(i) = lambda.iter().position(|l| !(l.is_finite() && *l > 0.0)) {
        let (at, value) = (Place::Row(i), lambda[i]);
        return Err(GpError::OutOfDomain { what: "effective noise", at, value, bound: "be positive and finite" });
    }
    let homo = lambda.iter().all(|l| *l == lambda[0]);
    let y_over = gp.y().component_div(&lambda);
    let solved = gp.jitter.scale == JitterScale::Absolute;
    let (aat, s0, kuf_y) = if solved {
        let (aat, kuf_y) = solved_gram(gp, &chol_uu, &lambda.map(|l| 1.0 / l), Some(&y_over));
        (aat, None, kuf_y)
    } else {
        let (s1, s0, kuf_y) = if homo {
            let (s0, kuf_y) = gram(gp, None, Some(&y_over));
            (&s0 / lambda[0], Some(s0), kuf_y)
        } else {
            let (s1, kuf_y) = gram(gp, Some(&lambda.map(|l| 1.0 / l)), Some(&y_over));
            (s1, None, kuf_y)
        };
        (inner(&chol_uu, &s1), s0, kuf_y)
    };
    let kuf_y = kuf_y.expect("gram projects when asked");
    let m = z.nrows();
    let chol_b = Cholesky::factor(&aat + DMatrix::<f64>::identity(m, m), "B = I + AAᵀ", JitterPolicy::IF_NEEDED)?;
    let c = chol_b.solve_l_vec(&chol_uu.solve_l_vec(&kuf_y));
    let quad_y = gp.y().dot(&y_over);
    Ok(Terms { chol_uu, aat, chol_b, c, lambda, homo, s0, knn, qnn, quad_y, solved })
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
    Ok(parts)
}

/// tr(K_ff − Q_ff) = Σ k_nn − tr(L⁻¹ K_uf K_ufᵀ L⁻ᵀ).
fn trace_k_minus_q(gp: &SparseGp, t: &Terms) -> f64 {
    let sum_q = match (&t.qnn, &t.s0) {
        (Some(q), _) => q.sum(),
        (None, Some(s0)) => inner(&t.chol_uu, s0).trace(),
        (None, None) if t.solved && t.homo => t.aat.trace() * t.lambda[0],
        (None, None) if t.solved => {
            solved_gram(gp, &t.chol_uu, &DVector::from_element(t.lambda.len(), 1.0), None).0.trace()
        }
        (None, None) => inner(&t.chol_uu, &gram(gp, None, None).0).trace(),
    };
    t.knn.sum() - sum_q
}

pub(super) fn evaluate(gp: &SparseGp, with_grad: bool) -> Result<Evaluated, GpError> {
    let t = terms(gp)?;
    let value = value(gp, &t);
    let jitter = t.chol_uu.jitter();
    let grad = if with_grad { Some(gradients(gp, &t)) } else { None };
    Ok(Evaluated { value, jitter, grad })
}

pub(super) fn trace_only(gp: &SparseGp) -> Result<f64, GpError> {
    let t = terms(gp)?;
    let trace = trace_k_minus_q(gp, &t);
    Ok(trace)
}

pub(super) fn posterior(gp: &SparseGp) -> Result<SparsePosterior, GpError> {
    let t = terms(gp)?;
    let value = value(gp, &t);
    let trace = trace_k_minus_q(gp, &t);
    Ok(SparsePosterior::new(gp, t.chol_uu, t.chol_b, t.c, value, trace))
}

/// Columns whose k_jᵀr [`dots`] forms together.
const DOT_COLUMNS: usize = 8;

/// k_jᵀr for the first Q columns of `kb` (column-major, r.len() rows). Each dot product is a
/// serial sum in the order of a one-column `Iterator::sum` (which starts from −0.0); Q columns
/// at once give Q independent add chains instead of one latency-bound chain, and the bits do not
/// depend on Q.
#[inline(always)]
fn dots<const Q: usize>(kb: &[f64], r: &[f64]) -> [f64; Q] {
    let m = r.len();
    let k: [&[f64]; Q] = std::array::from_fn(|c| &kb[c * m..(c + 1) * m]);
    let mut acc = [-0.0; Q];
    for (i, ri) in r.iter().enumerate() {
        for c in 0..Q {
            acc[c] += k[c][i] * ri;
        }
    }
    acc
}

fn gradients(gp: &SparseGp, t: &Terms) -> Gradients {
    let (x, z, kernel, features) = (gp.x(), gp.z(), gp.kernel.as_ref(), gp.features());
    let (m, n) = (z.nrows(), x.nrows());
    let kind = gp.kind;

    // w_u = L_B⁻ᵀc, r = L⁻ᵀw_u (= K_uu⁻¹K_uf v); per block below, v_n = (y_n − (K_ufᵀr)_n)/λ_n.
    let w_u = t.chol_b.solve_lt_vec(&t.c);
    let r = t.chol_uu.solve_lt_vec(&w_u);
    let b_inv = t.chol_b.inverse();
    let eye = DMatrix::<f64>::identity(m, m);
    // The solved form (`Terms::solved`) keeps P = L⁻ᵀP̃L⁻¹ unsandwiched and applies L⁻¹ and
    // L⁻ᵀ to each block of K_uf instead; it needs none of the sandwiches below.
    let p_tilde = t.solved.then(|| match kind {
        SparseKind::Vfe => &eye - &b_inv,
        SparseKind::Dtc | SparseKind::Fitc => -&b_inv,
    });
    let empty = || DMatrix::<f64>::zeros(0, 0);
    // L⁻ᵀ(I − B⁻¹)L⁻¹: VFE's P and a term of ∂/∂K_uu.
    let s_ib = if t.solved { empty() } else { sandwich(&t.chol_uu, &(&eye - &b_inv)) };

    // ∂/∂K_uf = r vᵀ + P K_uf Λ⁻¹ [+ P₂ K_uf diag(g_λ)], in column blocks.
    let p = match kind {
        _ if t.solved => empty(),
        SparseKind::Vfe => s_ib.clone(),
        SparseKind::Dtc | SparseKind::Fitc => -sandwich(&t.chol_uu, &b_inv),
    };
    let p2 = (kind == SparseKind::Fitc && !t.solved).then(|| sandwich(&t.chol_uu, &eye) * -2.0);
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
    // Σ v_n², and for FITC the per-point ∂/∂λ_n with its Gram K_uf diag(g_λ) K_ufᵀ.
    let mut v_sq = 0.0;
    let fitc = kind == SparseKind::Fitc;
    let mut g_lambda = DVector::<f64>::zeros(if fitc { n } else { 0 });
    let mut s_gl = DMatrix::<f64>::zeros(if fitc { m } else { 0 }, if fitc { m } else { 0 });
    // One buffer each for K_uf's block and ∂/∂K_uf's block (a fresh M×block allocation per
    // block cost page faults and a memset each time); the kernel and the GEMM overwrite them.
    let (mut kb, mut g) = (DMatrix::<f64>::zeros(0, 0), DMatrix::<f64>::zeros(0, 0));
    for (i, (start, len)) in blocks(m, n).enumerate() {
        kuf_block(gp, start, len, &mut kb);
        let lam = t.lambda.rows(start, len);
        if g.shape() != (m, len) {
            g = DMatrix::zeros(m, len);
        }
        if let Some(pt) = &p_tilde {
            // Solved form: with A_b = L⁻¹K_uf,b and v_j = (y_j − a_jᵀw_u)/λ_j,
            // ∂/∂K_uf,b = L⁻ᵀ[P̃ A_b Λ⁻¹ + w_u vᵀ (FITC: − 2 A_b diag(g_λ))].
            let mut a = kb.clone();
            t.chol_uu.solve_l_in_place(&mut a);
            let y = gp.y().rows(start, len);
            let v = DVector::from_fn(len, |j, _| (y[j] - a.column(j).dot(&w_u)) / lam[j]);
            gemm(&mut g, 1.0, pt.as_view(), false, a.as_view(), false, false);
            for (j, mut col) in g.column_iter_mut().enumerate() {
                col *= 1.0 / lam[j];
                col.axpy(v[j], &w_u, 1.0);
            }
            v_sq += v.norm_squared();
            if fitc {
                let mut ab = a.clone();
                t.chol_b.solve_l_in_place(&mut ab);
                let lbn = col_sq_norms(&ab);
                let gl = DVector::from_fn(len, |j, _| 0.5 * (v[j] * v[j] - (1.0 - lbn[j] / lam[j]) / lam[j]));
                g_lambda.rows_mut(start, len).copy_from(&gl);
                let mut s2 = a.clone();
                for (j, mut col) in s2.column_iter_mut().enumerate() {
                    col *= gl[j];
                }
                // Here s_gl accumulates L⁻¹ K_uf diag(g_λ) K_ufᵀ L⁻ᵀ.
                gemm(&mut s_gl, 1.0, s2.as_view(), false, a.as_view(), true, i > 0);
                g -= s2 * 2.0;
            }
            t.chol_uu.solve_lt_in_place(&mut g);
            add(features.vjp_kuf(kernel, z, x.rows(start, len), kb.as_view(), g.as_view(), want_z));
            continue;
        }
        gemm(&mut g, 1.0, p.as_view(), false, kb.as_view(), false, false);
        // Column j, in one parallel pass over the cache-resident block (DOT_COLUMNS columns per
        // task): v_j = (y_j − k_jᵀr)/λ_j, then ∂/∂K_uf column = (P K_uf)_j / λ_j + r v_j.
        let mut v = DVector::<f64>::zeros(len);
        let (y, rs) = (gp.y().rows(start, len), r.as_slice());
        g.as_mut_slice()
            .par_chunks_mut(m * DOT_COLUMNS)
            .zip(kb.as_slice().par_chunks(m * DOT_COLUMNS))
            .zip(v.as_mut_slice().par_chunks_mut(DOT_COLUMNS))
            .enumerate()
            .for_each(|(q, ((gq, kq), vq))| {
                let ktr: [f64; DOT_COLUMNS] = if vq.len() == DOT_COLUMNS {
                    dots(kq, rs)
                } else {
                    std::array::from_fn(|c| if c < vq.len() { dots::<1>(&kq[c * m..], rs)[0] } else { 0.0 })
                };
                for (c, (gc, vj)) in gq.chunks_exact_mut(m).zip(vq.iter_mut()).enumerate() {
                    let j = q * DOT_COLUMNS + c;
                    *vj = (y[j] - ktr[c]) / lam[j];
                    let (inv, vv) = (1.0 / lam[j], *vj);
                    for (gi, ri) in gc.iter_mut().zip(rs) {
                        *gi = *gi * inv + ri * vv;
                    }
                }
            });
        v_sq += v.norm_squared();
        if let Some(p2) = &p2 {
            let lbn = column_norms(&t.chol_uu, Some(&t.chol_b), &mut kb.clone());
            let gl = DVector::from_fn(len, |j, _| 0.5 * (v[j] * v[j] - (1.0 - lbn[j] / lam[j]) / lam[j]));
            g_lambda.rows_mut(start, len).copy_from(&gl);
            let mut s2 = kb.clone();
            for (j, mut col) in s2.column_iter_mut().enumerate() {
                col *= gl[j];
            }
            gemm(&mut s_gl, 1.0, s2.as_view(), false, kb.as_view(), true, i > 0);
            gemm(&mut g, 1.0, p2.as_view(), false, s2.as_view(), false, true);
        }
        add(features.vjp_kuf(kernel, z, x.rows(start, len), kb.as_view(), g.as_view(), want_z));
    }

    // ∂/∂λ_n summed (the noise variance's gradient).
    let g_lambda_sum = if fitc {
        g_lambda.sum()
    } else {
        // A Λ⁻¹ Aᵀ = L⁻¹ K_uf Λ⁻² K_ufᵀ L⁻ᵀ.
        let m2 = if t.homo {
            &t.aat / t.lambda[0]
        } else if t.solved {
            solved_gram(gp, &t.chol_uu, &t.lambda.map(|l| 1.0 / (l * l)), None).0
        } else {
            inner(&t.chol_uu, &gram(gp, Some(&t.lambda.map(|l| 1.0 / (l * l))), None).0)
        };
        let tr_binv_m2 = b_inv.component_mul(&m2).sum();
        let sum_inv_lambda: f64 = t.lambda.iter().map(|l| 1.0 / l).sum();
        let mut g = 0.5 * (v_sq - (sum_inv_lambda - tr_binv_m2));
        if kind == SparseKind::Vfe {
            // ½ Σ (k_nn − q_nn)/λ_n², with Σ q_nn/λ_n² = tr(AΛ⁻¹Aᵀ).
            let k_over: f64 = t.knn.iter().zip(&t.lambda).map(|(k, l)| k / (l * l)).sum();
            g += 0.5 * (k_over - m2.trace());
        }
        g
    };

    // ∂/∂K_uu.
    let mut g_uu = if t.solved {
        // L⁻ᵀ[−½ w_u w_uᵀ + ½(I − B⁻¹) (VFE: − ½AAᵀ; FITC: + the solved s_gl)]L⁻¹, one sandwich.
        let mut core = &w_u * w_u.transpose() * -0.5 + (&eye - &b_inv) * 0.5;
        match kind {
            SparseKind::Vfe => core -= &t.aat * 0.5,
            SparseKind::Dtc => {}
            SparseKind::Fitc => core += (&s_gl + s_gl.transpose()) * 0.5,
        }
        sandwich(&t.chol_uu, &core)
    } else {
        let mut g_uu = &r * r.transpose() * -0.5 + s_ib * 0.5;
        match kind {
            SparseKind::Vfe => g_uu -= sandwich(&t.chol_uu, &t.aat) * 0.5,
            SparseKind::Dtc => {}
            SparseKind::Fitc => g_uu += sandwich(&t.chol_uu, &inner(&t.chol_uu, &((&s_gl + s_gl.transpose()) * 0.5))),
        }
        g_uu
    };
    // Jitter ε = rel·mean(diag K_uu): ∂ε/∂K_uu,ii = rel/M (0 for an absolute jitter).
    let rel = t.chol_uu.jitter_slope();
    let shift = rel * g_uu.trace() / m as f64;
    for i in 0..m {
        g_uu[(i, i)] += shift;
    }
    add(features.vjp_kuu(kernel, z, None, g_uu.as_view(), want_z));

    // ∂/∂k_nn.
    let g_knn: Option<DVector<f64>> = match kind {
        SparseKind::Vfe => Some(t.lambda.map(|l| -0.5 / l)),
        SparseKind::Fitc => Some(g_lambda),
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

#[cfg(test)]
mod tests {
    use super::*;

    /// `dots` gives, bit for bit, what one `Iterator::sum` per column gives (the promise that
    /// the gradient pass's results do not depend on how many columns it forms at once), also
    /// when every product is −0.0 (the sum's starting value decides the sign).
    #[test]
    fn dots_match_one_sum_per_column() {
        let m = 37;
        let r: Vec<f64> = (0..m).map(|i| ((i * 7919) % 97) as f64 / 13.0 - 3.1).collect();
        let mut kb: Vec<f64> = (0..m * DOT_COLUMNS).map(|i| ((i * 104_729) % 101) as f64 * 1e-3 + 1e-17).collect();
        // Column 3: products of mixed signs that cancel in floating point.
        for i in 0..m {
            kb[3 * m + i] = if i % 2 == 0 { 1e16 } else { -1e16 } / r[i];
        }
        // Column 5: every product is −0.0.
        for i in 0..m {
            kb[5 * m + i] = if r[i] > 0.0 { -0.0 } else { 0.0 };
        }
        let one = |c: usize| -> f64 { kb[c * m..(c + 1) * m].iter().zip(&r).map(|(k, r)| k * r).sum() };
        let grouped: [f64; DOT_COLUMNS] = dots(&kb, &r);
        for (c, g) in grouped.iter().enumerate() {
            assert_eq!(g.to_bits(), one(c).to_bits(), "column {c}: {g} vs {}", one(c));
            assert_eq!(dots::<1>(&kb[c * m..], &r)[0].to_bits(), one(c).to_bits(), "column {c} alone");
        }
        assert!(grouped[5] == 0.0 && grouped[5].is_sign_negative(), "all −0.0 products sum to −0.0");
    }
}
