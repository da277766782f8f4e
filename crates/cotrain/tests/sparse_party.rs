//! Large private sets: a VFE local model under the Noisy combiner, its DP sensitivity in the VFE
//! form, and clear refusals where a combiner needs the exact path.

use dpcotrain_cotrain::answer::{Answer, Uncertainty};
use dpcotrain_cotrain::combiner::{CoModel, CombinerKind};
use dpcotrain_cotrain::data::PartyData;
use dpcotrain_cotrain::responder::{DpConfig, Party};
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
    let (x, y) = xy(3100);
    let d = PartyData {
        name: "big".into(),
        columns: vec!["x".into()],
        x_pool: x.rows(0, 10).clone_owned(),
        x_test: x.rows(10, 10).clone_owned(),
        y_test: y.rows(10, 10).clone_owned(),
        x_train: x,
        y_train: y,
    };
    let err = Party::new(
        d,
        CombinerKind::Blocky,
        Uncertainty::Marginal,
        Box::new(SquaredExponential::isotropic(1.0, 1.0)),
        NoiseVariance::new(0.1),
        DpConfig::off(),
        Some(1),
        Default::default(),
    )
    .unwrap_err()
    .to_string();
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
