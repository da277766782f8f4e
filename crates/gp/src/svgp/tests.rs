use super::*;
use crate::kernels::SquaredExponential;
use crate::noise::NoiseModel;
use crate::optimize::adam::AdamOptions;
use crate::{SparseGp, SparseKind};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

fn data(n: usize, seed: u64) -> (DMatrix<f64>, DVector<f64>) {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let x = DMatrix::from_fn(n, 2, |_, _| rng.random_range(-2.0..2.0));
    let y =
        DVector::from_fn(n, |i, _| (1.3f64 * x[(i, 0)]).sin() + 0.5 * x[(i, 1)] + 0.1 * rng.random_range(-1.0f64..1.0));
    (x, y)
}

fn model(x: &DMatrix<f64>, m: usize) -> Svgp {
    let z = DMatrix::from_fn(m, x.ncols(), |i, j| x[(i * 3 % x.nrows(), j)] + 0.05);
    Svgp::new(Box::new(SquaredExponential::ard(1.2, vec![0.8, 1.5])), NoiseVariance::new(0.05), z).unwrap()
}

/// The analytic gradient of the minibatch bound equals central differences in every kernel
/// parameter, log σ² and every entry of Z, at a non-trivial q(v).
#[test]
fn minibatch_bound_gradient_matches_finite_differences() {
    let (x, y) = data(40, 1);
    let mut gp = model(&x, 6);
    gp.natural_gradient_step(x.as_view(), y.as_view(), 40, 0.7).unwrap();
    // Perturb q away from any optimum so every term of ∂/∂A matters.
    let mut q = gp.q().clone();
    q.h[0] += 0.3;
    q.precision[(1, 2)] += 0.2;
    q.precision[(2, 1)] += 0.2;
    gp.set_q(q).unwrap();
    // A large jitter (1e-2 of the mean diagonal) so that its term in ∂/∂K_uu is above the
    // finite-difference tolerance.
    gp.jitter = JitterPolicy { start: 1e-2, tries: 1, ..JitterPolicy::ALWAYS };
    let (xb, yb) = (x.rows(5, 15), y.rows(5, 15));
    let b = gp.batch_bound(xb, yb, 40, true).unwrap();
    assert_eq!(b.grad.as_ref().map(Vec::len), Some(3 + 1 + 12));
    assert_bound_gradient_is_central_differences(&gp, xb, yb);
}

/// The minibatch bound's analytic gradient (rows `xb`, `yb` of N = 40) against central
/// differences in every parameter.
fn assert_bound_gradient_is_central_differences(gp: &Svgp, xb: DMatrixView<'_, f64>, yb: DVectorView<'_, f64>) {
    let grad = gp.batch_bound(xb, yb, 40, true).unwrap().grad.unwrap();
    let p0 = gp.params();
    let h = 1e-6;
    for i in 0..p0.len() {
        let at = |s: f64| {
            let mut g2 = gp.clone();
            let mut p = p0.clone();
            p[i] += s;
            g2.set_params(&p);
            g2.batch_bound(xb, yb, 40, false).unwrap().value
        };
        let fd = (at(h) - at(-h)) / (2.0 * h);
        assert!(
            (grad[i] - fd).abs() < 2e-6 * (1.0 + fd.abs()),
            "{}: analytic {} vs fd {fd}",
            gp.param_names()[i],
            grad[i]
        );
    }
}

/// The same with GPflow's convention, an absolute jitter (docs/decisions.md D29): ε is a
/// constant, so ∂/∂K_uu has no jitter term (at variance 1.2 and ε = 10⁻², the relative
/// jitter's term would be above the tolerance).
#[test]
fn minibatch_bound_gradient_with_an_absolute_jitter_matches_finite_differences() {
    let (x, y) = data(40, 1);
    let mut gp = model(&x, 6);
    gp.natural_gradient_step(x.as_view(), y.as_view(), 40, 0.7).unwrap();
    gp.jitter = JitterPolicy { tries: 1, ..crate::KuuJitter::Absolute(1e-2).policy() };
    let (xb, yb) = (x.rows(5, 15), y.rows(5, 15));
    assert_eq!(gp.batch_bound(xb, yb, 40, false).unwrap().jitter.absolute, 1e-2);
    assert_bound_gradient_is_central_differences(&gp, xb, yb);
}

/// Hensman et al. (2013): at the optimal q(u) with the full batch the uncollapsed bound equals
/// Titsias's collapsed bound, and the predictive equals the SGPR posterior's.
#[test]
fn at_the_optimal_q_the_svgp_bound_is_the_collapsed_vfe_bound() {
    let (x, y) = data(80, 2);
    let mut gp = model(&x, 10);
    gp.natural_gradient_step(x.as_view(), y.as_view(), 80, 1.0).unwrap();
    let svgp = gp.batch_bound(x.as_view(), y.as_view(), 80, false).unwrap().value;
    let vfe = SparseGp::new(
        SparseKind::Vfe,
        gp.kernel.clone(),
        NoiseModel::homoscedastic(gp.noise.variance),
        x.clone(),
        y.clone(),
        gp.z().clone(),
    )
    .unwrap();
    let collapsed = vfe.objective_value().unwrap();
    assert!((svgp - collapsed).abs() < 1e-8 * collapsed.abs().max(1.0), "svgp {svgp} vs vfe {collapsed}");
    let xs = data(7, 3).0;
    let (a, b) = (gp.predict(&xs, true).unwrap(), vfe.posterior().unwrap().predict(&xs, true).unwrap());
    assert!((a.mean - b.mean).abs().max() < 1e-8);
    assert!((a.var - b.var).abs().max() < 1e-8);
    assert!((a.cov.unwrap() - b.cov.unwrap()).abs().max() < 1e-8);
    // The streamed closed form gives the same q, and any other q has a lower bound.
    let mut streamed = model(&x, 10);
    streamed.set_optimal_q(&mut InMemory::new(x.clone(), y.clone(), 13, 0).unwrap()).unwrap();
    assert!((&streamed.q().h - &gp.q().h).abs().max() < 1e-9);
    assert!((&streamed.q().precision - &gp.q().precision).abs().max() < 1e-9);
    let mut worse = gp.clone();
    let mut q = worse.q().clone();
    q.h[3] += 0.05;
    worse.set_q(q).unwrap();
    assert!(worse.batch_bound(x.as_view(), y.as_view(), 80, false).unwrap().value < svgp);
    // The streamed bound at the final state is the full-batch bound (here the collapsed one),
    // per row — also over several blocks (9,000 rows: three blocks of at most 4,096).
    let full = gp.full_bound_per_row(&mut InMemory::new(x.clone(), y.clone(), 13, 0).unwrap()).unwrap();
    assert!((full - collapsed / 80.0).abs() < 1e-10, "{full} vs {}", collapsed / 80.0);
    let (xl, yl) = data(9000, 4);
    let whole = gp.batch_bound(xl.as_view(), yl.as_view(), 9000, false).unwrap().value / 9000.0;
    let streamed = gp.full_bound_per_row(&mut InMemory::new(xl, yl, 64, 1).unwrap()).unwrap();
    assert!((streamed - whole).abs() < 1e-10 * whole.abs().max(1.0), "{streamed} vs {whole}");
}

/// Minibatches scaled by N/|B| are unbiased: over a partition of the rows their mean
/// expected log-likelihood is the full batch's.
#[test]
fn minibatch_estimates_average_to_the_full_bound() {
    let (x, y) = data(60, 4);
    let mut gp = model(&x, 7);
    gp.natural_gradient_step(x.rows(0, 20), y.rows(0, 20), 60, 0.5).unwrap();
    let full = gp.batch_bound(x.as_view(), y.as_view(), 60, true).unwrap();
    let parts: Vec<BatchBound> =
        (0..4).map(|k| gp.batch_bound(x.rows(15 * k, 15), y.rows(15 * k, 15), 60, true).unwrap()).collect();
    let mean = parts.iter().map(|b| b.value).sum::<f64>() / 4.0;
    assert!((mean - full.value).abs() < 1e-9 * full.value.abs());
    let g_full = full.grad.unwrap();
    for (i, g) in g_full.iter().enumerate() {
        let g_mean = parts.iter().map(|b| b.grad.as_ref().unwrap()[i]).sum::<f64>() / 4.0;
        assert!((g_mean - g).abs() < 1e-8 * (1.0 + g.abs()));
    }
    // A single batch is not the full bound (the test above could not pass trivially).
    assert!((parts[0].value - full.value).abs() > 1e-3);
}

fn fit(gp: &mut Svgp, src: &mut InMemory, steps: u64, resume: Option<SvgpCheckpoint>) -> Vec<SvgpCheckpoint> {
    let opts = SvgpOptions {
        steps,
        adam: AdamOptions { learning_rate: 0.02, ..Default::default() },
        natgrad_step: 0.2,
        checkpoint_every: 10,
        progress_every: 10,
    };
    let mut cps = vec![];
    fit_svgp(gp, src, &opts, resume, &mut |e| {
        if let SvgpEvent::Checkpoint(c) = e {
            cps.push(c.clone());
        }
        Ok(())
    })
    .unwrap();
    cps
}

/// A fit stopped at a checkpoint and resumed in a fresh model and source gives the same
/// numbers, bit for bit, as one that never stopped.
#[test]
fn resumed_fit_is_bit_identical() {
    let (x, y) = data(90, 5);
    let mut a = model(&x, 8);
    let mut sa = InMemory::new(x.clone(), y.clone(), 16, 3).unwrap();
    let straight = fit(&mut a, &mut sa, 40, None);
    let mut b = model(&x, 8);
    let mut sb = InMemory::new(x.clone(), y.clone(), 16, 3).unwrap();
    let first = fit(&mut b, &mut sb, 20, None);
    let mut c = model(&x, 8);
    let mut sc = InMemory::new(x.clone(), y.clone(), 16, 3).unwrap();
    let rest = fit(&mut c, &mut sc, 40, Some(first.last().unwrap().clone()));
    assert_eq!(straight.last(), rest.last());
    assert_eq!(a.params(), c.params());
    assert_eq!(a.q(), c.q());
    assert!(straight[1].position.epoch >= 1, "the run crossed an epoch boundary");
    // A damaged checkpoint is refused, not a panic.
    let mut damaged = first[0].clone();
    damaged.adam.m.pop();
    let err = fit_svgp(&mut model(&x, 8), &mut sc, &SvgpOptions::default(), Some(damaged), &mut |_| Ok(()))
        .unwrap_err()
        .to_string();
    assert!(err.contains("Adam moments"), "{err}");
    // A start outside the bounds is refused rather than clamped without a word.
    let mut far = model(&x, 8);
    far.noise.variance = 1e4;
    let err = fit_svgp(&mut far, &mut sc, &SvgpOptions::default(), None, &mut |_| Ok(())).unwrap_err().to_string();
    assert!(err.contains("noise_variance") && err.contains("outside its bounds"), "{err}");
    // A checkpoint of another model is refused.
    let mut other = model(&x, 5);
    let err = fit_svgp(&mut other, &mut sc, &SvgpOptions::default(), Some(first[0].clone()), &mut |_| Ok(()))
        .unwrap_err()
        .to_string();
    assert!(err.contains("checkpoint"), "{err}");
    // A checkpoint past the steps asked for is refused (it would report a fit never run).
    let short = SvgpOptions { steps: 5, ..SvgpOptions::default() };
    let err =
        fit_svgp(&mut model(&x, 8), &mut sc, &short, Some(first[0].clone()), &mut |_| Ok(())).unwrap_err().to_string();
    assert!(err.contains("step 10") && err.contains("past the 5 steps"), "{err}");
    // A q(u) no fit can write (an all-zero or asymmetric precision) is refused, not predicted with.
    for bad in [DMatrix::zeros(8, 8), {
        let mut p = DMatrix::identity(8, 8) * 2.0;
        p[(0, 1)] = 0.5;
        p
    }] {
        let mut cp = first[0].clone();
        cp.q.precision = bad;
        let err = fit_svgp(&mut model(&x, 8), &mut sc, &SvgpOptions::default(), Some(cp), &mut |_| Ok(()))
            .unwrap_err()
            .to_string();
        assert!(err.contains("precision"), "{err}");
    }
}

/// Stochastic training reaches the collapsed bound's neighbourhood: after the fit, with q set
/// to its optimum, the bound is within 1% of the SGPR optimum from the same start, and the
/// stochastic q(v) is within 1.5% of the optimal one.
#[test]
fn svgp_training_approaches_the_sgpr_optimum() {
    let (x, y) = data(300, 6);
    let mut gp = model(&x, 12);
    let mut src = InMemory::new(x.clone(), y.clone(), 50, 1).unwrap();
    let before = gp.clone();
    // 8,000 steps at α = 0.03, γ = 0.3, then 2,000 at α = 0.005, γ = 0.05 (a resumed fit may
    // change its step sizes).
    let mut last = None;
    for (steps, lr, gamma) in [(8000, 0.03, 0.3), (10000, 0.005, 0.05)] {
        let opts = SvgpOptions {
            steps,
            adam: AdamOptions { learning_rate: lr, ..Default::default() },
            natgrad_step: gamma,
            checkpoint_every: steps,
            ..Default::default()
        };
        let mut cp = None;
        let report = fit_svgp(&mut gp, &mut src, &opts, last.take(), &mut |e| {
            if let SvgpEvent::Checkpoint(c) = e {
                cp = Some(c.clone());
            }
            Ok(())
        })
        .unwrap();
        assert_eq!(report.steps, steps);
        last = cp;
    }
    let stochastic = gp.batch_bound(x.as_view(), y.as_view(), 300, false).unwrap().value;
    let mut tuned = gp.clone();
    tuned.set_optimal_q(&mut src).unwrap();
    let optimal_q = tuned.batch_bound(x.as_view(), y.as_view(), 300, false).unwrap().value;
    assert!(stochastic <= optimal_q + 1e-9);
    // σ² ≈ 0.003 here, so q's precision is ~10⁵ and small errors in m cost nats.
    assert!(optimal_q - stochastic < 0.015 * optimal_q.abs(), "stochastic q {stochastic} vs optimal {optimal_q}");
    let mut sgpr = SparseGp::new(
        SparseKind::Vfe,
        before.kernel.clone(),
        NoiseModel::homoscedastic(before.noise.variance),
        x.clone(),
        y.clone(),
        before.z().clone(),
    )
    .unwrap();
    sgpr.optimize_inducing = true;
    crate::train::train(&mut sgpr, &crate::train::TrainOptions::default()).unwrap();
    let best = sgpr.objective_value().unwrap();
    let start = {
        let mut s = before.clone();
        s.set_optimal_q(&mut src).unwrap();
        s.batch_bound(x.as_view(), y.as_view(), 300, false).unwrap().value
    };
    assert!(optimal_q > start, "training improved the bound: {start} → {optimal_q}");
    assert!((best - optimal_q).abs() < 0.01 * best.abs(), "SGPR optimum {best}, SVGP {optimal_q}");
}

#[test]
fn bad_input_is_refused_with_a_reason() {
    let (x, y) = data(20, 7);
    let mut gp = model(&x, 4);
    let mut bad = x.clone();
    bad[(3, 1)] = f64::NAN;
    let e = gp.batch_bound(bad.as_view(), y.as_view(), 20, false).unwrap_err().to_string();
    assert!(e.contains("row 3, column 1"), "{e}");
    let e = gp.natural_gradient_step(x.as_view(), y.as_view(), 20, 1.5).unwrap_err().to_string();
    assert!(e.contains("(0, 1]"), "{e}");
    let e = gp.batch_bound(x.as_view(), y.as_view(), 10, false).unwrap_err().to_string();
    assert!(e.contains("cannot select 20 minibatch rows from 10 rows in the data set"), "{e}");
    assert!(
        Svgp::new(Box::new(SquaredExponential::isotropic(1.0, 1.0)), NoiseVariance::new(0.0), x.rows(0, 3).into())
            .is_err()
    );
    assert!(gp.set_q(WhitenedQ::prior(3)).is_err());
    let three = DMatrix::from_element(2, 3, 0.0);
    assert!(gp.predict(&three, false).unwrap_err().to_string().contains("columns"));
}
