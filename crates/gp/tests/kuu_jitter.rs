//! The K_uu jitter conventions (docs/decisions.md D29, `gp fit --kuu-jitter`): the default adds
//! r·mean(diag K_uu), `KuuJitter::Absolute(ε)` adds a fixed ε as GPflow does. Each sparse
//! objective equals a dense computation of its formula with its own ε; the two conventions
//! agree where mean(diag K_uu) = 1 and differ elsewhere; the absolute jitter's gradient has no
//! jitter term (finite differences).

mod common;
use common::*;
use dpcotrain_gp::kernels::{Kernel, SquaredExponential};
use dpcotrain_gp::{JitterPolicy, KuuJitter, NoiseModel, NoiseVariance, Objective, SparseGp, SparseKind};
use nalgebra::{DMatrix, DVector};

const KINDS: [SparseKind; 3] = [SparseKind::Vfe, SparseKind::Dtc, SparseKind::Fitc];

/// 40 rows in 2-D and 7 inducing inputs, two of them 0.05 apart, so that K_uu's smallest
/// eigenvalue (≈ 10⁻³·variance) is within reach of the jitter and the convention shows.
fn fixture() -> (DMatrix<f64>, DVector<f64>, DMatrix<f64>) {
    let (x, y) = problem(40, 2, 11);
    let mut z = random_rows(7, 2, 12);
    z[(6, 0)] = z[(5, 0)] + 0.05;
    z[(6, 1)] = z[(5, 1)];
    (x, y, z)
}

fn model(kind: SparseKind, variance: f64, jitter: KuuJitter) -> SparseGp {
    let (x, y, z) = fixture();
    let k = SquaredExponential::ard(variance, vec![0.8, 1.1]);
    let mut gp = SparseGp::new(kind, Box::new(k), NoiseModel::homoscedastic(0.05), x, y, z).unwrap();
    gp.jitter = jitter.policy();
    gp
}

/// The objective from its formula, densely, with K_uu + εI for a given ε:
/// Q = K_fu(K_uu + εI)⁻¹K_uf; log N(y | 0, Q + Λ) with Λ = σ²I (VFE, DTC) or
/// diag(K_ff − Q) + σ²I (FITC), and VFE's −tr(K_ff − Q)/(2σ²).
fn dense(kind: SparseKind, variance: f64, eps: f64) -> f64 {
    let (x, y, z) = fixture();
    let k = SquaredExponential::ard(variance, vec![0.8, 1.1]);
    let (n, m, s2) = (x.nrows(), z.nrows(), 0.05);
    let kuu = k.k(z.as_view(), z.as_view()) + DMatrix::identity(m, m) * eps;
    let kuf = k.k(z.as_view(), x.as_view());
    let kff = k.k(x.as_view(), x.as_view());
    let q = kuf.transpose() * kuu.cholesky().unwrap().solve(&kuf);
    let mut cov = q.clone();
    for i in 0..n {
        cov[(i, i)] += s2 + if kind == SparseKind::Fitc { kff[(i, i)] - q[(i, i)] } else { 0.0 };
    }
    let ch = cov.cholesky().unwrap();
    let logdet = 2.0 * ch.l().diagonal().map(f64::ln).sum();
    let lml = -0.5 * y.dot(&ch.solve(&y)) - 0.5 * logdet - 0.5 * n as f64 * (2.0 * std::f64::consts::PI).ln();
    if kind == SparseKind::Vfe { lml - (kff.trace() - q.trace()) / (2.0 * s2) } else { lml }
}

/// With variance 9 (mean diag K_uu = 9) the absolute jitter ε gives the objective with K_uu + εI
/// — GPflow's for ε = 10⁻⁶ — and the relative jitter r gives the one with K_uu + 9r·I; the two
/// are far apart, so the comparison can tell them apart.
#[test]
fn absolute_jitter_is_the_objective_with_a_fixed_epsilon() {
    for kind in KINDS {
        for eps in [1e-6, 1e-3] {
            let abs = model(kind, 9.0, KuuJitter::Absolute(eps));
            let e = abs.evaluate().unwrap();
            assert_eq!(e.jitter.absolute, eps, "{kind:?}: the ladder records the jitter it used");
            assert!((e.jitter.relative - eps / 9.0).abs() < 1e-15 * eps, "{kind:?}: {:?}", e.jitter);
            let rel = model(kind, 9.0, KuuJitter::Relative(eps)).evaluate().unwrap();
            assert!((rel.jitter.absolute - 9.0 * eps).abs() < 1e-12 * eps, "{kind:?}: {:?}", rel.jitter);
            let (want_abs, want_rel) = (dense(kind, 9.0, eps), dense(kind, 9.0, 9.0 * eps));
            let tol = 1e-9 * want_abs.abs().max(1.0);
            assert!((e.value - want_abs).abs() < tol, "{kind:?} ε={eps}: {} vs dense {want_abs}", e.value);
            assert!((rel.value - want_rel).abs() < tol, "{kind:?} r={eps}: {} vs dense {want_rel}", rel.value);
            assert!(
                (want_abs - want_rel).abs() > 1e3 * tol,
                "{kind:?} ε={eps}: the fixture does not separate the conventions ({want_abs} vs {want_rel})"
            );
        }
    }
}

/// Where mean(diag K_uu) = 1 (variance 1) the conventions are the same objective: the start of
/// docs/results.md "gp fit against GPflow", where ours and GPflow's agreed to 2·10⁻¹⁶.
#[test]
fn at_unit_variance_the_conventions_agree() {
    for kind in KINDS {
        let a = model(kind, 1.0, KuuJitter::GPFLOW).evaluate().unwrap();
        let r = model(kind, 1.0, KuuJitter::default()).evaluate().unwrap();
        assert!((a.value - r.value).abs() <= 1e-12 * a.value.abs(), "{kind:?}: {} vs {}", a.value, r.value);
        assert!((a.jitter.absolute - r.jitter.absolute).abs() <= 1e-20, "{kind:?}: {:?} {:?}", a.jitter, r.jitter);
    }
}

/// The default is the ladder every sparse model had before the option existed (bit for bit:
/// the same policy), and `Relative(1e-6)` is that default.
#[test]
fn the_default_is_the_relative_ladder_of_before() {
    assert_eq!(KuuJitter::default().policy(), JitterPolicy::ALWAYS);
    assert_eq!(KuuJitter::Relative(1e-6), KuuJitter::default());
    let gp = model(SparseKind::Vfe, 9.0, KuuJitter::default());
    let (x, y, z) = fixture();
    let k = SquaredExponential::ard(9.0, vec![0.8, 1.1]);
    let plain = SparseGp::new(SparseKind::Vfe, Box::new(k), NoiseModel::homoscedastic(0.05), x, y, z).unwrap();
    let (a, b) = (gp.evaluate().unwrap(), plain.evaluate().unwrap());
    assert_eq!(a.value.to_bits(), b.value.to_bits());
    assert!(a.grad.iter().zip(&b.grad).all(|(u, v)| u.to_bits() == v.to_bits()));
}

/// With an absolute jitter ε is a constant, and the objective is formed through A = L⁻¹K_uf
/// (the solved form of `sparse/collapsed.rs`): the analytic gradient (kernel, noise, Z, and
/// multiscale widths) equals central differences, with homoscedastic and per-point noise. A
/// gradient that kept the relative jitter's term r·tr(∂/∂K_uu)/M would fail here (ε = 10⁻²,
/// variance 9: the term is above the tolerance).
#[test]
fn absolute_jitter_gradients_match_finite_differences() {
    let per_point = NoiseModel::PerPoint {
        sigma2: NoiseVariance::new(0.05),
        extra: DVector::from_fn(40, |i, _| 0.3 * ((i * 7 % 11) as f64) / 11.0),
    };
    for kind in KINDS {
        for noise in [None, Some(per_point.clone())] {
            for multiscale in [false, true] {
                let mut gp = model(kind, 9.0, KuuJitter::Absolute(1e-2));
                if let Some(n) = &noise {
                    gp.noise = n.clone();
                }
                if multiscale {
                    gp.use_multiscale().unwrap();
                }
                gp.optimize_inducing = true;
                let err = fd_error(&gp, 1e-5);
                assert!(err < 1e-5, "{kind:?} per-point {} multiscale {multiscale}: {err:.2e}", noise.is_some());
            }
        }
    }
}

/// The same ε through both forms: `Relative(r)` (the Gram form) and `Absolute(ε)` with ε the
/// jitter the relative ladder used (the solved form, A = L⁻¹K_uf first) are the same objective,
/// so on a well-conditioned fixture they agree to round-off in value and tr(K − Q), for every
/// kind, both noise models and multiscale features; and in gradient, up to the relative
/// jitter's own term r·tr(∂/∂K_uu)/M, made negligible here by r = 10⁻¹².
#[test]
fn the_solved_form_equals_the_gram_form_at_the_same_jitter() {
    let per_point = NoiseModel::PerPoint {
        sigma2: NoiseVariance::new(0.05),
        extra: DVector::from_fn(40, |i, _| 0.3 * ((i * 5 % 13) as f64) / 13.0),
    };
    for kind in KINDS {
        for noise in [None, Some(per_point.clone())] {
            for multiscale in [false, true] {
                let build = |jitter: KuuJitter| {
                    let mut gp = model(kind, 9.0, jitter);
                    if let Some(n) = &noise {
                        gp.noise = n.clone();
                    }
                    if multiscale {
                        gp.use_multiscale().unwrap();
                    }
                    gp.optimize_inducing = true;
                    gp
                };
                let gram = build(KuuJitter::Relative(1e-12));
                let g = gram.evaluate().unwrap();
                let solved = build(KuuJitter::Absolute(g.jitter.absolute));
                let s = solved.evaluate().unwrap();
                let what = format!("{kind:?} per-point {} multiscale {multiscale}", noise.is_some());
                assert_eq!(s.jitter.absolute, g.jitter.absolute, "{what}");
                assert!((s.value - g.value).abs() < 1e-10 * g.value.abs(), "{what}: {} vs {}", s.value, g.value);
                let scale = g.grad.iter().fold(1.0f64, |a, b| a.max(b.abs()));
                for (i, (a, b)) in s.grad.iter().zip(&g.grad).enumerate() {
                    assert!((a - b).abs() < 1e-8 * scale, "{what}: gradient {i}: {a} vs {b}");
                }
                let (ts, tg) = (solved.trace_k_minus_q().unwrap(), gram.trace_k_minus_q().unwrap());
                assert!((ts - tg).abs() < 1e-9 * tg.abs().max(1.0), "{what}: tr(K − Q) {ts} vs {tg}");
            }
        }
    }
}
