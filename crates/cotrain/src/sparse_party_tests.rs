//! Large private sets: a VFE local model under the Noisy combiner, its DP sensitivity in the VFE
//! form, and clear refusals where a combiner needs the exact path.

use crate::answer::{Answer, Uncertainty};
use crate::combiner::{CoModel, CombinerKind, LocalModel};
use crate::data::PartyData;
use crate::party::{DpConfig, Party};
use dpcotrain_gp::NoiseVariance;
use dpcotrain_gp::kernels::SquaredExponential;
use nalgebra::{DMatrix, DVector};

fn xy(n: usize) -> (DMatrix<f64>, DVector<f64>) {
    let x = DMatrix::from_fn(n, 1, |i, _| -2.0 + 4.0 * (i as f64 * 0.618).fract());
    let y = DVector::from_fn(n, |i, _| (1.5 * x[(i, 0)]).sin() + 0.1 * ((i * 7919) % 13) as f64 / 13.0);
    (x, y)
}

fn model(kind: CombinerKind, unc: Uncertainty, y: DVector<f64>) -> CoModel {
    let (x, _) = xy(y.len());
    let pool = DMatrix::from_fn(20, 1, |i, _| -2.0 + 0.2 * i as f64);
    CoModel::new(kind, unc, Box::new(SquaredExponential::isotropic(1.0, 1.0)), NoiseVariance::new(0.1), x, y, pool)
        .unwrap()
}

/// A party with `n` private rows of `xy` (pool and test from its first rows), no DP.
fn party(
    n: usize,
    kind: CombinerKind,
    local: LocalModel,
    inducing: Option<usize>,
) -> Result<Party, crate::CotrainError> {
    let (x, y) = xy(n);
    let d = PartyData {
        name: "p".into(),
        columns: vec!["x".into()],
        x_pool: x.rows(0, 10).clone_owned(),
        x_test: x.rows(10, 10).clone_owned(),
        y_test: y.rows(10, 10).clone_owned(),
        x_train: x,
        y_train: y,
    };
    let kernel = Box::new(SquaredExponential::isotropic(1.0, 1.0));
    let (noise, dp) = (NoiseVariance::new(0.1), DpConfig::off());
    Party::with_local_model(
        d,
        kind,
        Uncertainty::Marginal,
        kernel,
        noise,
        dp,
        Some(1),
        Default::default(),
        local,
        inducing,
    )
}

fn answer() -> Answer {
    Answer::marginal("P2", vec![4], vec![0.3], vec![0.05])
}

#[test]
fn sparse_noisy_model_fits_absorbs_and_has_a_vfe_sensitivity() {
    let (_, y) = xy(400);
    let mut m = model(CombinerKind::Noisy, Uncertainty::Marginal, y.clone());
    m.use_sparse(40).unwrap();
    m.fit_private().unwrap();
    assert!(m.is_sparse());
    m.absorb(&answer()).unwrap();
    m.refit().unwrap();
    let xs = DMatrix::from_column_slice(3, 1, &[-1.0, 0.0, 1.0]);
    let p = m.predict(&xs, false).unwrap();
    for (i, x) in [-1.0f64, 0.0, 1.0].iter().enumerate() {
        assert!((p.mean[i] - (1.5 * x).sin()).abs() < 0.2, "{} vs {}", p.mean[i], (1.5 * x).sin());
    }
    let inf = m.label_influence().unwrap();
    assert_eq!(inf.len(), 400, "one norm per private row; the pseudo row is not private");
    assert!(inf.iter().all(|v| v.is_finite() && *v > 0.0));
    // Sensitivity of a sparse model is bounded by 1/σ (d = 1), as for the exact model.
    assert!(inf.max() <= 1.0 / m.noise.variance.sqrt());
}

#[test]
fn combiners_that_need_the_exact_path_refuse_with_the_reason() {
    let (_, y) = xy(50);
    for kind in [CombinerKind::Blocky, CombinerKind::Hybrid] {
        let mut m = model(kind, Uncertainty::Marginal, y.clone());
        let err = m.use_sparse(10).unwrap_err().to_string();
        assert!(err.contains("exact GP path") && err.contains(kind.name()), "{err}");
    }
    let mut m = model(CombinerKind::Noisy, Uncertainty::Full, y);
    assert!(m.use_sparse(10).unwrap_err().to_string().contains("marginal"));
    // A party whose private set exceeds the threshold gets the sparse path automatically and
    // Blocky refuses before any fitting.
    let err = party(3100, CombinerKind::Blocky, LocalModel::Auto, None).unwrap_err().to_string();
    assert!(err.contains("exact GP path"), "{err}");
}

#[test]
fn cached_sparse_posterior_follows_every_model_change() {
    // Predictions come from a posterior cached per (version, parameters): after an absorb, a
    // re-fit or a direct parameter change they must equal those of a model without a cache.
    let (_, y) = xy(400);
    let mut m = model(CombinerKind::Noisy, Uncertainty::Marginal, y);
    m.use_sparse(40).unwrap();
    m.fit_private().unwrap();
    let xs = DMatrix::from_column_slice(3, 1, &[-1.0, 0.0, 1.0]);
    let fresh = |m: &CoModel| {
        let mut c = m.clone();
        c.version += 1_000_000; // a key no cache holds
        c.predict(&xs, true).unwrap()
    };
    let before = m.predict(&xs, true).unwrap();
    assert_eq!(before, fresh(&m));
    m.absorb(&answer()).unwrap();
    let absorbed = m.predict(&xs, true).unwrap();
    assert_ne!(absorbed.mean, before.mean);
    assert_eq!(absorbed, fresh(&m));
    m.refit().unwrap();
    assert_eq!(m.predict(&xs, true).unwrap(), fresh(&m));
    // A direct change of hyperparameters (no version bump) is also seen.
    m.noise.variance *= 2.0;
    let changed = m.predict(&xs, true).unwrap();
    assert_ne!(changed.var, absorbed.var);
    assert_eq!(changed, fresh(&m));
}

/// `local = svgp`: θ and Z come from SVGP's minibatch fit; the model then predicts with the
/// optimal q(u), i.e. as an SVGP whose q(u) is set in closed form — checked against the gp
/// crate's own `Svgp` with the same θ, Z and σ² — and its label influence (the input of the DP
/// sensitivity) equals a brute-force perturbation of each label of that SVGP's mean.
#[test]
fn svgp_local_model_predicts_as_its_optimal_q_and_its_influence_is_brute_force_exact() {
    use crate::combiner::SvgpTraining;
    use dpcotrain_gp::Svgp;
    use dpcotrain_gp::svgp::InMemory;
    let (x, y) = xy(300);
    let mut m = model(CombinerKind::Noisy, Uncertainty::Marginal, y.clone());
    let quick = SvgpTraining { min_steps: 300, ..Default::default() };
    m.use_svgp(25, quick).unwrap();
    assert_eq!(m.local_model(), LocalModel::Svgp);
    let start = m.kernel.params();
    m.fit_private().unwrap();
    assert_ne!(m.kernel.params(), start, "SVGP moved θ");
    // An SVGP with the fitted θ, σ² and Z and its optimal q(u) predicts the same.
    let xs = DMatrix::from_column_slice(4, 1, &[-1.5, -0.2, 0.4, 1.7]);
    let p = m.predict(&xs, true).unwrap();
    let zt = m.sparse_inducing().unwrap().clone();
    let (kernel, noise) = (m.kernel.clone(), m.noise.clone());
    let svgp_for = |y: &DVector<f64>| {
        let mut s = Svgp::new(kernel.clone(), noise.clone(), zt.clone()).unwrap();
        s.set_optimal_q(&mut InMemory::new(x.clone(), y.clone(), 64, 0).unwrap()).unwrap();
        s
    };
    let s = svgp_for(&y);
    let q = s.predict(&xs, true).unwrap();
    assert!((&p.mean - &q.mean).abs().max() < 1e-8, "{} vs {}", p.mean, q.mean);
    assert!((&p.var - &q.var).abs().max() < 1e-8);
    // Brute force: f = k(·, Z) β with β = L⁻ᵀ m (whitened mean m); perturb one label at a time.
    let kuu = kernel.k(zt.as_view(), zt.as_view());
    let chol = dpcotrain_gp::Cholesky::factor(kuu.clone(), "K_uu", s.jitter).unwrap();
    // The influence is measured in K_uu + εI (the jitter the model used): an upper bound on the
    // norm in K_uu itself.
    let gram = chol.l() * chol.l().transpose();
    let beta = |s: &Svgp| {
        let mean = s.q().precision.clone().cholesky().unwrap().solve(&s.q().h);
        chol.solve_lt_vec(&mean)
    };
    let b0 = beta(&s);
    let inf = m.label_influence().unwrap();
    for j in [0usize, 17, 123, 299] {
        let mut yj = y.clone();
        yj[j] += 1.0;
        let db = beta(&svgp_for(&yj)) - &b0;
        let brute = (db.dot(&(&gram * &db))).sqrt();
        assert!((brute - inf[j]).abs() < 1e-6 * brute.max(1e-3), "row {j}: brute {brute} vs {}", inf[j]);
        assert!(
            db.dot(&(&kuu * &db)).sqrt() <= inf[j] * (1.0 + 1e-12),
            "row {j}: the jittered norm bounds the exact one"
        );
    }
    // Answers are folded in and re-fitted on the sparse path.
    m.absorb(&answer()).unwrap();
    m.refit().unwrap();
    assert_ne!(m.predict(&xs, false).unwrap().mean, p.mean);
}

#[test]
fn svgp_local_model_is_chosen_by_party_and_refuses_what_vfe_refuses() {
    use crate::combiner::SvgpTraining;
    let (_, y) = xy(50);
    let mut m = model(CombinerKind::Blocky, Uncertainty::Marginal, y.clone());
    assert!(m.use_svgp(10, SvgpTraining::default()).unwrap_err().to_string().contains("exact GP path"));
    let mut m = model(CombinerKind::Noisy, Uncertainty::Marginal, y);
    let bad = SvgpTraining { natgrad_step: 1.5, ..Default::default() };
    assert!(
        m.use_svgp(10, bad).unwrap_err().to_string().contains("SVGP natural-gradient step must lie in (0, 1], got 1.5")
    );
    assert_eq!("svgp".parse::<LocalModel>().unwrap(), LocalModel::Svgp);
    assert!("svpg".parse::<LocalModel>().unwrap_err().to_string().contains("auto, exact, vfe or svgp"));
    let p = party(400, CombinerKind::Noisy, LocalModel::Svgp, Some(30)).unwrap();
    assert_eq!(p.model().local_model(), LocalModel::Svgp);
    // Greedy variance stops early once the residual variance is exhausted.
    assert!((20..=30).contains(&p.model().inducing_count().unwrap()));
}
