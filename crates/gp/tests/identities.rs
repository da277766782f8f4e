//! Properties P1–P6 of sparse GP approximations (Bauer, van der Wilk & Rasmussen 2016 §3;
//! Titsias 2009), the exact-GP hand-computed case, prediction identities at Z = X, and jitter behaviour.

mod common;
use common::*;
use dpcotrain_gp::inducing::greedy_variance;
use dpcotrain_gp::kernels::{Kernel, SquaredExponential};
use dpcotrain_gp::linalg::Cholesky;
use dpcotrain_gp::{ExactGp, InducingFeatures, JitterPolicy, Multiscale, NoiseModel, Objective, SparseGp, SparseKind};
use nalgebra::{DMatrix, DVector};
use rand::Rng;

const TINY_JITTER: JitterPolicy = JitterPolicy { start: 1e-12, ..JitterPolicy::ALWAYS };

fn sparse(
    kind: SparseKind,
    k: &dyn Kernel,
    noise: f64,
    x: &DMatrix<f64>,
    y: &DVector<f64>,
    z: &DMatrix<f64>,
) -> SparseGp {
    SparseGp::new(kind, k.clone_box(), NoiseModel::homoscedastic(noise), x.clone(), y.clone(), z.clone()).unwrap()
}

fn exact_lml(k: &dyn Kernel, noise: f64, x: &DMatrix<f64>, y: &DVector<f64>) -> f64 {
    ExactGp::new(k.clone_box(), NoiseModel::homoscedastic(noise), x.clone(), y.clone())
        .unwrap()
        .log_marginal_likelihood()
        .unwrap()
}

#[test]
fn p1_vfe_never_exceeds_exact_lml() {
    let mut r = rng(7);
    for trial in 0..20 {
        let d = 1 + trial % 3;
        let (x, y) = problem(40, d, trial as u64);
        let k = SquaredExponential::ard(r.random_range(0.3..3.0), (0..d).map(|_| r.random_range(0.2..2.0)).collect());
        let noise = r.random_range(0.01..0.5);
        let z = random_rows(1 + trial % 10, d, 1000 + trial as u64);
        let vfe = sparse(SparseKind::Vfe, &k, noise, &x, &y, &z).objective_value().unwrap();
        let exact = exact_lml(&k, noise, &x, &y);
        assert!(vfe <= exact + 1e-9 * exact.abs(), "trial {trial}: VFE {vfe} > exact {exact}");
    }
}

#[test]
fn p2_all_approximations_equal_exact_when_z_is_x() {
    // Well-separated inputs keep K_uu well conditioned so a 1e-12 jitter suffices.
    let x = DMatrix::from_fn(12, 1, |i, _| -3.0 + 0.55 * i as f64);
    let y = DVector::from_fn(12, |i, _| (0.7 * i as f64).sin());
    let k = SquaredExponential::isotropic(1.2, 0.6);
    let exact = exact_lml(&k, 0.1, &x, &y);
    for kind in [SparseKind::Vfe, SparseKind::Dtc, SparseKind::Fitc] {
        let mut gp = sparse(kind, &k, 0.1, &x, &y, &x);
        gp.jitter = TINY_JITTER;
        let v = gp.objective_value().unwrap();
        assert!((v - exact).abs() < 1e-8, "{kind:?}: {v} vs exact {exact}");
    }
}

#[test]
fn p2_with_default_jitter_matches_dense_computation_of_q() {
    // With the default relative jitter ε, VFE equals log N(y|0, Q+σ²I) − tr(K−Q)/(2σ²) with
    // Q = K(K+εI)⁻¹K computed densely: the jitter accounted for exactly.
    let (x, y) = problem(15, 2, 3);
    let k = SquaredExponential::ard(1.0, vec![0.8, 1.2]);
    let gp = sparse(SparseKind::Vfe, &k, 0.2, &x, &y, &x);
    let eps = gp.evaluate().unwrap().jitter.absolute;
    assert!(eps > 0.0);
    let kff = k.k(x.as_view(), x.as_view());
    let kuu = &kff + DMatrix::identity(15, 15) * eps;
    let q = &kff * kuu.clone().cholesky().unwrap().solve(&kff);
    let sy = &q + DMatrix::identity(15, 15) * 0.2;
    let ch = sy.clone().cholesky().unwrap();
    let logdet = 2.0 * ch.l().diagonal().map(|v| v.ln()).sum();
    let quad = y.dot(&ch.solve(&y));
    let dense = -0.5 * quad - 0.5 * logdet - 7.5 * (2.0 * std::f64::consts::PI).ln() - (kff.trace() - q.trace()) / 0.4;
    let v = gp.objective_value().unwrap();
    assert!((v - dense).abs() < 1e-8, "{v} vs {dense}");
    // And it is within O(ε) of the exact LML.
    assert!((v - exact_lml(&k, 0.2, &x, &y)).abs() < 1e-3);
}

#[test]
fn p3_dtc_minus_vfe_is_the_trace_term() {
    for seed in 0..5 {
        let (x, y) = problem(50, 2, seed);
        let k = SquaredExponential::ard(1.1, vec![0.7, 1.3]);
        let z = random_rows(6, 2, 50 + seed);
        let vfe = sparse(SparseKind::Vfe, &k, 0.15, &x, &y, &z);
        let dtc = sparse(SparseKind::Dtc, &k, 0.15, &x, &y, &z);
        let gap = dtc.objective_value().unwrap() - vfe.objective_value().unwrap();
        let tr = vfe.trace_k_minus_q().unwrap();
        assert!(tr > 0.0);
        assert!((gap - tr / 0.3).abs() < 1e-9 * (1.0 + gap.abs()), "seed {seed}: {gap} vs {}", tr / 0.3);
    }
}

#[test]
fn p4_adding_an_inducing_point_never_lowers_vfe() {
    let (x, y) = problem(60, 2, 9);
    let k = SquaredExponential::ard(1.0, vec![0.6, 0.9]);
    let mut z = random_rows(2, 2, 10);
    let mut r = rng(11);
    let mut prev = sparse(SparseKind::Vfe, &k, 0.1, &x, &y, &z).objective_value().unwrap();
    for step in 0..15 {
        let new = DMatrix::from_fn(1, 2, |_, _| r.random_range(-2.5..2.5));
        z = DMatrix::from_fn(z.nrows() + 1, 2, |i, j| if i < z.nrows() { z[(i, j)] } else { new[(0, j)] });
        let v = sparse(SparseKind::Vfe, &k, 0.1, &x, &y, &z).objective_value().unwrap();
        assert!(v >= prev - 1e-6 * prev.abs(), "step {step}: {v} < {prev}");
        prev = v;
    }
}

#[test]
fn p5_duplicating_an_inducing_point_changes_nothing() {
    let (x, y) = problem(50, 1, 12);
    let k = SquaredExponential::isotropic(1.0, 0.7);
    let z = random_rows(5, 1, 13);
    let zd = DMatrix::from_fn(6, 1, |i, _| z[(i.min(4), 0)]);
    for kind in [SparseKind::Vfe, SparseKind::Fitc] {
        let a = sparse(kind, &k, 0.1, &x, &y, &z).objective_value().unwrap();
        let b = sparse(kind, &k, 0.1, &x, &y, &zd).objective_value().unwrap();
        assert!((a - b).abs() < 1e-4 * (1.0 + a.abs()), "{kind:?}: {a} vs {b}");
    }
}

#[test]
fn p6_greedy_residuals_sum_to_the_trace_term() {
    let (x, y) = problem(80, 2, 14);
    let k = SquaredExponential::ard(1.3, vec![0.5, 0.8]);
    for m in [1, 5, 20] {
        let sel = greedy_variance(&k, &x, m, 0.0, 3).unwrap();
        assert_eq!(sel.indices.len(), m);
        let mut gp = sparse(SparseKind::Vfe, &k, 0.1, &x, &y, &sel.z);
        gp.jitter = TINY_JITTER;
        let tr = gp.trace_k_minus_q().unwrap();
        assert!((sel.trace() - tr).abs() < 1e-7 * (1.0 + tr), "M={m}: {} vs {tr}", sel.trace());
    }
}

#[test]
fn greedy_is_seeded_and_incremental() {
    let (x, _) = problem(100, 3, 15);
    let k = SquaredExponential::ard(1.0, vec![0.7, 0.9, 1.1]);
    let a = greedy_variance(&k, &x, 30, 0.0, 42).unwrap();
    let b = greedy_variance(&k, &x, 30, 0.0, 42).unwrap();
    assert_eq!(a, b);
    let c = greedy_variance(&k, &x, 20, 0.0, 42).unwrap();
    assert_eq!(&a.indices[..20], &c.indices[..]);
    // Residuals are non-increasing in M and stop at tolerance.
    assert!(a.trace() <= c.trace());
    let t = greedy_variance(&k, &x, 100, 0.5, 42).unwrap();
    assert!(t.indices.len() < 100);
    assert!(t.residuals.max() <= 0.5 + 1e-12);
    assert!(greedy_variance(&k, &x, 101, 0.0, 1).is_err());
}

#[test]
fn exact_gp_matches_hand_computed_three_point_case() {
    // X = [0,1,2], y = [1,−1,0.5], SE s² = 1.3, ℓ = 0.8, σ² = 0.1: the LML and predictive at
    // x* = 0.5 computed independently with a 3×3 adjugate inverse (no Cholesky).
    let x = DMatrix::from_column_slice(3, 1, &[0.0, 1.0, 2.0]);
    let y = DVector::from_vec(vec![1.0, -1.0, 0.5]);
    let gp =
        ExactGp::new(Box::new(SquaredExponential::isotropic(1.3, 0.8)), NoiseModel::homoscedastic(0.1), x, y).unwrap();
    let post = gp.posterior().unwrap();
    assert!((post.log_marginal_likelihood() - (-4.903053364518043)).abs() < 1e-12);
    let p = post.predict(&DMatrix::from_element(1, 1, 0.5), true).unwrap();
    assert!((p.mean[0] - (-0.13166621464890824)).abs() < 1e-12);
    assert!((p.var[0] - 0.13959172558082145).abs() < 1e-12);
    assert!((p.cov.unwrap()[(0, 0)] - 0.13959172558082145).abs() < 1e-12);
    assert_eq!(post.jitter().absolute, 0.0);
}

#[test]
fn vfe_predictions_at_z_equal_x_match_exact() {
    let (x, y) = problem(20, 1, 16);
    let x = x.map(|v| v * 2.0); // spread out to keep K well conditioned
    let k = SquaredExponential::isotropic(1.0, 0.5);
    let mut gp = sparse(SparseKind::Vfe, &k, 0.05, &x, &y, &x);
    gp.jitter = TINY_JITTER;
    let xs = random_rows(30, 1, 17);
    let ps = gp.posterior().unwrap().predict(&xs, true).unwrap();
    let pe = ExactGp::new(k.clone_box(), NoiseModel::homoscedastic(0.05), x, y)
        .unwrap()
        .posterior()
        .unwrap()
        .predict(&xs, true)
        .unwrap();
    assert!((&ps.mean - &pe.mean).abs().max() < 1e-6);
    assert!((&ps.var - &pe.var).abs().max() < 1e-6);
    assert!((ps.cov.unwrap() - pe.cov.unwrap()).abs().max() < 1e-6);
}

#[test]
fn fitc_and_dtc_predictives_are_consistent() {
    // DTC's predictive is VFE's; FITC's differs but its variances stay non-negative.
    let (x, y) = problem(60, 2, 18);
    let k = SquaredExponential::ard(1.0, vec![0.8, 0.8]);
    let z = random_rows(7, 2, 19);
    let xs = random_rows(25, 2, 20);
    let pv = sparse(SparseKind::Vfe, &k, 0.1, &x, &y, &z).posterior().unwrap().predict(&xs, false).unwrap();
    let pd = sparse(SparseKind::Dtc, &k, 0.1, &x, &y, &z).posterior().unwrap().predict(&xs, false).unwrap();
    let pf = sparse(SparseKind::Fitc, &k, 0.1, &x, &y, &z).posterior().unwrap().predict(&xs, true).unwrap();
    assert_eq!(pv.mean, pd.mean);
    assert_eq!(pv.var, pd.var);
    assert!((&pv.mean - &pf.mean).abs().max() > 1e-6);
    assert!(pf.var.iter().all(|v| *v >= 0.0));
    let cov = pf.cov.unwrap();
    assert!((cov.diagonal() - &pf.var).abs().max() < 1e-10);
}

#[test]
fn optimal_qu_reproduces_the_predictive_mean() {
    let (x, y) = problem(40, 1, 21);
    let k = SquaredExponential::isotropic(1.0, 0.7);
    let z = random_rows(6, 1, 22);
    let post = sparse(SparseKind::Vfe, &k, 0.1, &x, &y, &z).posterior().unwrap();
    let (m_u, s_u) = post.q_u();
    // Predicting at Z itself gives the mean of q(u).
    // At Z the predictive is K_zz K̃⁻¹ m_u and K_zz − K_zz K̃⁻¹K_zz + K_zz K̃⁻¹ S_u K̃⁻¹ K_zz with
    // K̃ = K_zz + εI: q(u) pushed through the (jittered) conditional, exactly.
    let p = post.predict(&z, true).unwrap();
    let kzz = k.k(z.as_view(), z.as_view());
    let kt = &kzz + DMatrix::identity(6, 6) * post.jitter().absolute;
    let proj = kt.clone().cholesky().unwrap().solve(&kzz); // K̃⁻¹ K_zz
    assert!((&p.mean - proj.transpose() * &m_u).abs().max() < 1e-8);
    let cov = &kzz - &kzz * &proj + proj.transpose() * &s_u * &proj;
    assert!((p.cov.unwrap() - cov).abs().max() < 1e-8);
    // S_u is a covariance: symmetric PSD.
    assert!((&s_u - s_u.transpose()).abs().max() < 1e-12);
    assert!(s_u.clone().symmetric_eigen().eigenvalues.min() > -1e-10);
}

#[test]
fn duplicated_inputs_with_tiny_noise_do_not_crash_and_report_jitter() {
    let x = DMatrix::from_column_slice(6, 1, &[0.0, 0.0, 1.0, 1.0, 2.0, 2.0]);
    let y = DVector::from_vec(vec![0.1, 0.1, 0.5, 0.5, -0.2, -0.2]);
    let gp = ExactGp::new(
        Box::new(SquaredExponential::isotropic(1.0, 1.0)),
        NoiseModel::homoscedastic(1e-12),
        x.clone(),
        y.clone(),
    )
    .unwrap();
    let e = gp.evaluate().unwrap();
    assert!(e.value.is_finite());
    assert!(e.grad.iter().all(|g| g.is_finite()));
    // The recorded jitter is zero exactly when plain Cholesky of K + σ²I succeeds.
    let mut ky = SquaredExponential::isotropic(1.0, 1.0).k(x.as_view(), x.as_view());
    for i in 0..6 {
        ky[(i, i)] += 1e-12;
    }
    assert_eq!(e.jitter.absolute > 0.0, ky.cholesky().is_none());
    // Zero noise is refused up front with a clear error rather than left to the ladder.
    let err = ExactGp::new(
        Box::new(SquaredExponential::isotropic(1.0, 1.0)),
        NoiseModel::homoscedastic(0.0),
        x.clone(),
        y.clone(),
    );
    assert!(err.is_err(), "zero noise variance is rejected with a clear error");
    let p = gp.posterior().unwrap().predict(&x, false).unwrap();
    assert!(p.mean.iter().all(|v| v.is_finite()));
    // Sparse model with duplicated inducing points.
    let vfe = SparseGp::new(
        SparseKind::Vfe,
        Box::new(SquaredExponential::isotropic(1.0, 1.0)),
        NoiseModel::homoscedastic(1e-6),
        x.clone(),
        y,
        x,
    )
    .unwrap();
    let e = vfe.evaluate().unwrap();
    assert!(e.value.is_finite() && e.jitter.relative >= 1e-6);
}

#[test]
fn cholesky_failure_is_a_typed_error_not_a_panic() {
    let a = DMatrix::from_row_slice(2, 2, &[1.0, 2.0, 2.0, 1.0]);
    let err = Cholesky::factor(a, "K_test", JitterPolicy::IF_NEEDED).unwrap_err();
    assert!(err.to_string().contains("K_test"));
}

/// Bauer et al.'s diagnostics: the terms sum to the objective; VFE's trace term is ≤ 0 and the
/// only difference from DTC; at Z = X the trace term and FITC's extra noise vanish and every
/// term equals the exact GP's (data fit −½yᵀK_y⁻¹y, complexity −½log|K_y|).
#[test]
fn objective_terms_sum_to_the_objective_and_vanish_at_z_equals_x() {
    let (x, y) = problem(30, 2, 5);
    let k = SquaredExponential::ard(1.1, vec![0.7, 1.3]);
    let z = random_rows(5, 2, 6);
    let terms = |kind| {
        let gp = sparse(kind, &k, 0.1, &x, &y, &z);
        (gp.objective_terms().unwrap(), gp.objective_value().unwrap())
    };
    for kind in [SparseKind::Vfe, SparseKind::Dtc, SparseKind::Fitc] {
        let (t, v) = terms(kind);
        let sum = t.constant + t.complexity + t.data_fit + t.trace;
        assert!((sum - v).abs() < 1e-10 * v.abs().max(1.0), "{kind:?}: {sum} vs {v}");
        assert_eq!(t.trace != 0.0, kind == SparseKind::Vfe, "{kind:?}");
        assert_eq!(t.fitc_noise > 0.0, kind == SparseKind::Fitc, "{kind:?}");
    }
    let ((vfe, _), (dtc, _)) = (terms(SparseKind::Vfe), terms(SparseKind::Dtc));
    assert!(vfe.trace < 0.0);
    assert_eq!((vfe.complexity, vfe.data_fit), (dtc.complexity, dtc.data_fit));

    // Z = X on well-separated inputs: the exact GP's own terms.
    let x = DMatrix::from_fn(12, 1, |i, _| -3.0 + 0.55 * i as f64);
    let y = DVector::from_fn(12, |i, _| (0.7 * i as f64).sin());
    let k = SquaredExponential::isotropic(1.2, 0.6);
    let ky = k.k(x.as_view(), x.as_view()) + DMatrix::identity(12, 12) * 0.1;
    let chol = Cholesky::factor(ky, "K_y", TINY_JITTER).unwrap();
    let data_fit = -0.5 * y.dot(&chol.solve_vec(&y));
    let complexity = -chol.l().diagonal().iter().map(|d| d.ln()).sum::<f64>();
    for kind in [SparseKind::Vfe, SparseKind::Dtc, SparseKind::Fitc] {
        let mut gp = sparse(kind, &k, 0.1, &x, &y, &x);
        gp.jitter = TINY_JITTER;
        let t = gp.objective_terms().unwrap();
        assert!((t.data_fit - data_fit).abs() < 1e-8, "{kind:?}: {} vs {data_fit}", t.data_fit);
        assert!((t.complexity - complexity).abs() < 1e-8, "{kind:?}: {} vs {complexity}", t.complexity);
        assert!(t.trace.abs() < 1e-8 && t.fitc_noise.abs() < 1e-8, "{kind:?}: {t:?}");
    }
}

/// Multiscale features whose widths equal the length-scales are ordinary inducing points
/// (Walder et al. 2008): same objective, gradient (kernel, σ², Z) and predictive to 1e-12.
#[test]
fn multiscale_at_the_kernel_lengthscales_equals_inducing_points() {
    let (x, y) = problem(80, 2, 50);
    let z = random_rows(9, 2, 51);
    let xs = random_rows(6, 2, 52);
    let k = SquaredExponential::ard(1.4, vec![0.6, 1.1]);
    for kind in [SparseKind::Vfe, SparseKind::Dtc, SparseKind::Fitc] {
        let mut pts = sparse(kind, &k, 0.1, &x, &y, &z);
        pts.optimize_inducing = true;
        let mut ms = pts.clone();
        ms.use_multiscale().unwrap();
        let (ep, em) = (pts.evaluate().unwrap(), ms.evaluate().unwrap());
        assert!(
            (ep.value - em.value).abs() < 1e-12 * ep.value.abs().max(1.0),
            "{kind:?}: {} vs {}",
            ep.value,
            em.value
        );
        assert_eq!(em.grad.len(), ep.grad.len() + z.len());
        for (i, (a, b)) in ep.grad.iter().zip(&em.grad).enumerate() {
            assert!((a - b).abs() < 1e-12 * a.abs().max(1.0), "{kind:?} grad {i}: {a} vs {b}");
        }
        let (pp, pm) = (pts.posterior().unwrap(), ms.posterior().unwrap());
        let (a, b) = (pp.predict(&xs, true).unwrap(), pm.predict(&xs, true).unwrap());
        assert!((a.mean - b.mean).abs().max() < 1e-12);
        assert!((a.var - b.var).abs().max() < 1e-12);
        // And they really differ once the widths move.
        let wider = Multiscale::from_relative(&DMatrix::from_element(9, 2, 1.5)).unwrap();
        ms.set_features(InducingFeatures::Multiscale(wider)).unwrap();
        assert!((ms.objective_value().unwrap() - ep.value).abs() > 1e-3);
    }
}

/// The multiscale features lie in the RKHS (widths > ℓ/√2), so VFE stays a lower bound on
/// the exact log marginal likelihood for any widths (Titsias 2009; Walder et al. 2008 Lemma 3.1).
#[test]
fn multiscale_vfe_never_exceeds_exact_lml() {
    let mut r = rng(60);
    for trial in 0..20 {
        let d = 1 + trial % 3;
        let (x, y) = problem(40, d, 60 + trial as u64);
        let k = SquaredExponential::ard(r.random_range(0.3..3.0), (0..d).map(|_| r.random_range(0.2..2.0)).collect());
        let noise = r.random_range(0.01..0.5);
        let m = 1 + trial % 8;
        let z = random_rows(m, d, 2000 + trial as u64);
        let a = DMatrix::from_fn(m, d, |_, _| r.random_range(0.71..4.0));
        let mut gp = sparse(SparseKind::Vfe, &k, noise, &x, &y, &z);
        gp.set_features(InducingFeatures::Multiscale(Multiscale::from_relative(&a).unwrap())).unwrap();
        let vfe = gp.objective_value().unwrap();
        let exact = exact_lml(&k, noise, &x, &y);
        assert!(vfe <= exact + 1e-9 * exact.abs(), "trial {trial}: VFE {vfe} > exact {exact}");
    }
}
