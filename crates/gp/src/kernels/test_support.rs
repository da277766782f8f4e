//! Test harness shared by every kernel's tests: finite-difference checks of the gradients and
//! the properties every kernel must have.

use super::{Kernel, KernelGrad};
use nalgebra::{DMatrix, DVector, SymmetricEigen};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

/// Step of the central differences (log-parameters and inputs).
const H: f64 = 1e-6;
const RTOL: f64 = 1e-6;

pub fn rng(seed: u64) -> ChaCha8Rng {
    ChaCha8Rng::seed_from_u64(seed)
}

pub fn uniform(rng: &mut ChaCha8Rng, r: usize, c: usize, lo: f64, hi: f64) -> DMatrix<f64> {
    DMatrix::from_fn(r, c, |_, _| rng.random_range(lo..hi))
}

/// |a − b| ≤ RTOL·max(|a|, |b|) + atol.
pub(crate) fn assert_close(a: f64, b: f64, atol: f64, what: &str) {
    assert!(a.is_finite() && b.is_finite(), "{what}: non-finite {a} vs {b}");
    let tol = RTOL * a.abs().max(b.abs()) + atol;
    assert!((a - b).abs() <= tol, "{what}: {a} vs {b} (|diff| {} > {tol})", (a - b).abs());
}

/// ⟨G, K(X1, X2)⟩ and Σ|G∘K| (the scale of its rounding error).
fn inner(k: &dyn Kernel, x1: &DMatrix<f64>, x2: &DMatrix<f64>, g: &DMatrix<f64>) -> (f64, f64) {
    let kk = k.k(x1.as_view(), x2.as_view());
    (g.dot(&kk), g.component_mul(&kk).abs().sum())
}

fn with_params(k: &dyn Kernel, p: &[f64]) -> Box<dyn Kernel> {
    let mut k = k.clone_box();
    k.set_params(p);
    k
}

/// (a) vjp(...).params = d/dθ ⟨G, K(θ)⟩.
pub(crate) fn check_param_grad(k: &dyn Kernel, x1: &DMatrix<f64>, x2: &DMatrix<f64>, g: &DMatrix<f64>) {
    let an = k.vjp(x1.as_view(), x2.as_view(), g.as_view(), false);
    assert!(an.x1.is_none());
    assert_eq!(an.params.len(), k.n_params());
    let p0 = k.params();
    let atol = 1e-8 * (1.0 + inner(k, x1, x2, g).1);
    for (i, &a) in an.params.iter().enumerate() {
        let (mut pp, mut pm) = (p0.clone(), p0.clone());
        pp[i] += H;
        pm[i] -= H;
        let fp = inner(&*with_params(k, &pp), x1, x2, g).0;
        let fm = inner(&*with_params(k, &pm), x1, x2, g).0;
        assert_close(a, (fp - fm) / (2.0 * H), atol, &format!("{} dθ[{i}]", k.name()));
    }
}

/// (b) vjp(...).x1 = d/dX1 ⟨G, K(X1, X2)⟩ (and the params agree with the want_x1 = false call).
pub(crate) fn check_x1_grad(k: &dyn Kernel, x1: &DMatrix<f64>, x2: &DMatrix<f64>, g: &DMatrix<f64>) {
    let an = k.vjp(x1.as_view(), x2.as_view(), g.as_view(), true);
    let plain = k.vjp(x1.as_view(), x2.as_view(), g.as_view(), false);
    assert_eq!(an.params, plain.params, "{}: params depend on want_x1", k.name());
    let gx = an.x1.expect("x1 gradient requested");
    assert_eq!(gx.shape(), x1.shape());
    let atol = 1e-8 * (1.0 + inner(k, x1, x2, g).1);
    for i in 0..x1.nrows() {
        for d in 0..x1.ncols() {
            let (mut xp, mut xm) = (x1.clone(), x1.clone());
            xp[(i, d)] += H;
            xm[(i, d)] -= H;
            let fd = (inner(k, &xp, x2, g).0 - inner(k, &xm, x2, g).0) / (2.0 * H);
            assert_close(gx[(i, d)], fd, atol, &format!("{} dX1[{i},{d}]", k.name()));
        }
    }
}

/// (c) diag_vjp = d/dθ ⟨g, diag K(θ)⟩.
pub(crate) fn check_diag_vjp(k: &dyn Kernel, x: &DMatrix<f64>, g: &DVector<f64>) {
    let an = k.diag_vjp(x.as_view(), g.as_view());
    assert_eq!(an.len(), k.n_params());
    let p0 = k.params();
    let atol = 1e-8 * (1.0 + g.component_mul(&k.diag(x.as_view())).abs().sum());
    for (i, &a) in an.iter().enumerate() {
        let (mut pp, mut pm) = (p0.clone(), p0.clone());
        pp[i] += H;
        pm[i] -= H;
        let fp = g.dot(&with_params(k, &pp).diag(x.as_view()));
        let fm = g.dot(&with_params(k, &pm).diag(x.as_view()));
        assert_close(a, (fp - fm) / (2.0 * H), atol, &format!("{} diag dθ[{i}]", k.name()));
    }
}

/// (d) diag(X) = diag K(X, X).
pub(crate) fn check_diag(k: &dyn Kernel, x: &DMatrix<f64>) {
    let full = k.k(x.as_view(), x.as_view());
    let d = k.diag(x.as_view());
    assert_eq!(d.len(), x.nrows());
    for i in 0..x.nrows() {
        assert_close(d[i], full[(i, i)], 1e-14, &format!("{} diag[{i}]", k.name()));
    }
}

/// (e) K(X, X) is symmetric and positive semidefinite.
pub(crate) fn check_psd(k: &dyn Kernel, x: &DMatrix<f64>) {
    let kk = k.k(x.as_view(), x.as_view());
    let scale = kk.abs().max();
    for i in 0..kk.nrows() {
        for j in 0..i {
            let (a, b) = (kk[(i, j)], kk[(j, i)]);
            assert!((a - b).abs() <= 1e-14 * scale, "{} not symmetric", k.name());
        }
    }
    let min = SymmetricEigen::new(kk.clone()).eigenvalues.min();
    assert!(min >= -1e-10 * kk.trace(), "{}: eigenvalue {min}", k.name());
}

/// (g) set_params(params()) round-trips; names, bounds and params agree in length.
pub(crate) fn check_roundtrip(k: &dyn Kernel, x: &DMatrix<f64>) {
    let p = k.params();
    assert_eq!(p.len(), k.n_params());
    assert_eq!(k.param_names().len(), k.n_params());
    assert_eq!(k.bounds().len(), k.n_params());
    let k2 = with_params(k, &p);
    assert_eq!(k2.name(), k.name());
    for (a, b) in k2.params().iter().zip(&p) {
        assert!((a - b).abs() <= 1e-15 * (1.0 + b.abs()), "{}: {a} vs {b}", k.name());
    }
    let (ka, kb) = (k.k(x.as_view(), x.as_view()), k2.k(x.as_view(), x.as_view()));
    assert!((&ka - kb).abs().max() <= 1e-14, "{}: K changed", k.name());
    // Set values are really used.
    let shifted: Vec<f64> = p.iter().map(|v| v + 0.25).collect();
    assert_eq!(with_params(k, &shifted).params().len(), p.len());
    assert_ne!(with_params(k, &shifted).k(x.as_view(), x.as_view()), ka);
}

/// (a)–(e) and (g) on random, well-conditioned inputs of dimension `d`.
pub(crate) fn check_all(k: &dyn Kernel, d: usize, seed: u64) {
    let mut r = rng(seed);
    let x1 = uniform(&mut r, 5, d, -1.0, 1.0);
    let x2 = uniform(&mut r, 7, d, -1.0, 1.0);
    let g = uniform(&mut r, 5, 7, -1.0, 1.0);
    let gd = DVector::from_fn(5, |_, _| r.random_range(-1.0..1.0));
    check_param_grad(k, &x1, &x2, &g);
    check_x1_grad(k, &x1, &x2, &g);
    check_diag_vjp(k, &x1, &gd);
    check_diag(k, &x1);
    let x = uniform(&mut r, 12, d, -1.0, 1.0);
    check_psd(k, &x);
    check_roundtrip(k, &x);
}

fn max_rel_diff(a: &DMatrix<f64>, b: &DMatrix<f64>) -> f64 {
    (a - b).abs().max() / b.abs().max().max(1e-300)
}

/// Σ of the vjps over `parts` slices of X2's rows (G's columns): params summed, and the
/// X1 gradients summed.
fn sliced_vjp(k: &dyn Kernel, x1: &DMatrix<f64>, x2: &DMatrix<f64>, g: &DMatrix<f64>) -> KernelGrad {
    let (n2, w) = (x2.nrows(), x2.nrows() / 4);
    let mut sum = KernelGrad { params: vec![0.0; k.n_params()], x1: Some(DMatrix::zeros(x1.nrows(), x1.ncols())) };
    for c0 in (0..n2).step_by(w) {
        let part = k.vjp(x1.as_view(), x2.rows(c0, w), g.columns(c0, w), true);
        sum.params.iter_mut().zip(&part.params).for_each(|(p, q)| *p += q);
        *sum.x1.as_mut().unwrap() += part.x1.unwrap();
    }
    sum
}

/// vjp == sliced_vjp up to rounding (scale: Σ|G∘K|).
fn assert_vjp_close(k: &dyn Kernel, a: &KernelGrad, b: &KernelGrad, scale: f64, what: &str) {
    for (i, (p, q)) in a.params.iter().zip(&b.params).enumerate() {
        assert!((p - q).abs() <= 1e-10 * scale, "{} {what}: dθ[{i}] {p} vs {q}", k.name());
    }
    let (ax, bx) = (a.x1.as_ref().unwrap(), b.x1.as_ref().unwrap());
    if ax.abs().max() > 0.0 {
        assert!(max_rel_diff(ax, bx) <= 1e-10, "{} {what}: dX1", k.name());
    }
}

/// (h) A parallel-size case (300×2000, and its transpose 2000×300 whose rows span several
/// row tiles): K and the vjp are bit-identical across calls and thread counts, K equals a
/// naive per-entry evaluation, and the vjp equals the sum of vjps over column slices (which
/// exercises the ordered merge of many blocks).
pub(crate) fn check_parallel(k: &dyn Kernel, d: usize, naive: impl Fn(&[f64], &[f64]) -> f64) {
    let mut r = rng(99);
    let x1 = uniform(&mut r, 300, d, -1.0, 1.0);
    let x2 = uniform(&mut r, 2000, d, -1.0, 1.0);
    let g = uniform(&mut r, 300, 2000, -1.0, 1.0);
    let one_thread = rayon::ThreadPoolBuilder::new().num_threads(1).build().unwrap();
    let row = |m: &DMatrix<f64>, i: usize| m.row(i).iter().copied().collect::<Vec<_>>();
    let r1: Vec<_> = (0..300).map(|i| row(&x1, i)).collect();
    let r2: Vec<_> = (0..2000).map(|j| row(&x2, j)).collect();
    let nv = DMatrix::from_fn(300, 2000, |i, j| naive(&r1[i], &r2[j]));
    let scale = g.component_mul(&nv).abs().sum();

    // ⟨G, K(X1, X2)⟩ = ⟨Gᵀ, K(X2, X1)⟩: both orientations give the same dθ.
    let mut dtheta: Vec<Vec<f64>> = Vec::new();
    for (x1, x2, g, nv) in [(&x1, &x2, g.clone(), nv.clone()), (&x2, &x1, g.transpose(), nv.transpose())] {
        let what = format!("{}×{}", x1.nrows(), x2.nrows());
        let eval = || k.k(x1.as_view(), x2.as_view());
        let kk = eval();
        assert_eq!(kk, eval(), "{} {what}: K not repeatable", k.name());
        assert_eq!(kk, one_thread.install(eval), "{} {what}: K depends on threads", k.name());
        assert!(max_rel_diff(&kk, &nv) <= 1e-12, "{} {what}: K vs naive", k.name());

        let vjp = || k.vjp(x1.as_view(), x2.as_view(), g.as_view(), true);
        let a = vjp();
        assert_eq!(a, vjp(), "{} {what}: vjp not repeatable", k.name());
        assert_eq!(a, one_thread.install(vjp), "{} {what}: vjp depends on threads", k.name());
        assert_vjp_close(k, &a, &sliced_vjp(k, x1, x2, &g), scale, &what);
        if let Some(first) = dtheta.first() {
            for (p, q) in a.params.iter().zip(first) {
                assert!((p - q).abs() <= 1e-10 * scale, "{}: dθ of K(X2, X1)", k.name());
            }
        }
        dtheta.push(a.params.clone());
        // Row slices (strided views, each within one row tile) give the same dX1 rows.
        let (ax, h) = (a.x1.as_ref().unwrap(), x1.nrows() / 5);
        for r0 in (0..x1.nrows()).step_by(h) {
            let part = k.vjp(x1.rows(r0, h), x2.as_view(), g.rows(r0, h), true);
            let (px, rows) = (part.x1.unwrap(), ax.rows(r0, h).clone_owned());
            let err = (&px - &rows).abs().max();
            assert!(err <= 1e-10 * ax.abs().max(), "{} {what}: dX1 rows {r0}..", k.name());
        }
    }
}
