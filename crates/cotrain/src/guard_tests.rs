//! The leave-one-out answer guard (`AnswerGuard::Loo`): answers that agree with the private
//! labels are used, answers that contradict them are set aside (and the model is then exactly
//! the private-only one), a new answer is judged afresh, the verdict is recorded in the turn,
//! and the guard is refused where it is not defined; its paired-test form (`LooTest`), and the
//! harm study's reading switches (tempered answers, a shared level).

use crate::answer::{Answer, Uncertainty};
use crate::combiner::{AnswerGuard, CoModel, CombinerKind};
use dpcotrain_gp::kernels::{Kernel, SquaredExponential};
use dpcotrain_gp::{ExactGp, NoiseModel, NoiseVariance};
use nalgebra::{DMatrix, DVector};

fn truth(x: f64) -> f64 {
    (1.3 * x).sin()
}

/// 40 private rows on [−3, 3] with small deterministic "noise"; a pool of 30 points inside the
/// same range (so the private rows see every answer).
fn data() -> (DMatrix<f64>, DVector<f64>, DMatrix<f64>) {
    let n = 40;
    let x = DMatrix::from_fn(n, 1, |i, _| -3.0 + 6.0 * (i as f64 + 0.5) / n as f64);
    let y = DVector::from_fn(n, |i, _| truth(x[(i, 0)]) + 0.15 * ((i * 7 % 5) as f64 - 2.0) / 2.0);
    let pool = DMatrix::from_fn(30, 1, |i, _| -2.9 + 5.8 * i as f64 / 29.0);
    (x, y, pool)
}

fn model(guard: AnswerGuard) -> CoModel {
    let (x, y, pool) = data();
    let k: Box<dyn Kernel> = Box::new(SquaredExponential::isotropic(1.0, 1.0));
    let mut m =
        CoModel::new(CombinerKind::Noisy, Uncertainty::Marginal, k, NoiseVariance::new(0.05), x, y, pool).unwrap();
    m.set_guard(guard).unwrap();
    m.fit_private().unwrap();
    m
}

/// An answer at `indices` of the pool whose means are the truth plus `offset`, stated with a
/// small variance.
fn answer(indices: Vec<usize>, offset: f64) -> Answer {
    let (_, _, pool) = data();
    let mean = indices.iter().map(|&i| truth(pool[(i, 0)]) + offset).collect();
    let n = indices.len();
    Answer::marginal("B", indices, mean, vec![0.01; n])
}

fn private_only_prediction(m: &CoModel, xs: &DMatrix<f64>) -> DVector<f64> {
    // The private-only model at the private fit's θ (the model the guard falls back to).
    let (x, y, _) = data();
    let gp = ExactGp::new(m.kernel.clone(), NoiseModel::Homoscedastic(m.noise.clone()), x, y).unwrap();
    gp.posterior().unwrap().predict(xs, false).unwrap().mean
}

#[test]
fn consistent_answers_are_used() {
    let mut m = model(AnswerGuard::Loo);
    m.absorb(&answer((0..30).step_by(2).collect(), 0.0)).unwrap();
    m.refit().unwrap();
    let c = m.loo_check().expect("the guard ran");
    assert!(c.used && m.answers_used(), "{c:?}");
    assert!(c.with_answers <= c.alone, "{c:?}");
    assert!(c.alone > 0.0 && c.with_answers.is_finite());
}

#[test]
fn contradicting_answers_are_set_aside_then_judged_afresh() {
    let mut m = model(AnswerGuard::Loo);
    let (_, _, pool) = data();
    let private_theta = (m.kernel.params(), m.noise.variance);
    // Answers 1.5 above the truth, stated as nearly exact: they pull the model away from the
    // private labels, and the private rows' leave-one-out error shows it.
    m.absorb(&answer((0..30).step_by(2).collect(), 1.5)).unwrap();
    m.refit().unwrap();
    let c = m.loo_check().expect("the guard ran");
    assert!(!c.used && !m.answers_used(), "{c:?}");
    assert!(c.with_answers > c.alone, "{c:?}");
    assert_eq!(m.n_pseudo(), 15, "answers are kept (persisted), not dropped");
    // The model is then exactly the private-only one, at the private fit's θ.
    assert_eq!((m.kernel.params(), m.noise.variance), private_theta);
    let got = m.predict(&pool, false).unwrap().mean;
    let want = private_only_prediction(&m, &pool);
    assert!((&got - want).amax() < 1e-12);
    // The same model without the guard uses the bad answers and predicts worse at the pool.
    let mut off = model(AnswerGuard::Off);
    off.absorb(&answer((0..30).step_by(2).collect(), 1.5)).unwrap();
    off.refit().unwrap();
    assert!(off.loo_check().is_none() && off.answers_used());
    let err = |p: &DVector<f64>| (0..30).map(|i| (p[i] - truth(pool[(i, 0)])).powi(2)).sum::<f64>();
    assert!(err(&off.predict(&pool, false).unwrap().mean) > 2.0 * err(&got));
    // A new answer is judged afresh: until the next re-fit the answers are in use again.
    m.absorb(&answer(vec![1, 3], 1.5)).unwrap();
    assert!(m.loo_check().is_none() && m.answers_used());
    m.refit().unwrap();
    assert!(!m.answers_used());
}

#[test]
fn guard_is_refused_where_it_is_not_defined() {
    let (x, y, pool) = data();
    let k = || -> Box<dyn Kernel> { Box::new(SquaredExponential::isotropic(1.0, 1.0)) };
    let mut blocky = CoModel::new(
        CombinerKind::Blocky,
        Uncertainty::Marginal,
        k(),
        NoiseVariance::new(0.05),
        x.clone(),
        y.clone(),
        pool.clone(),
    )
    .unwrap();
    let e = blocky.set_guard(AnswerGuard::Loo).unwrap_err().to_string();
    assert!(e.contains("noisy combiner"), "{e}");
    let mut sparse =
        CoModel::new(CombinerKind::Noisy, Uncertainty::Marginal, k(), NoiseVariance::new(0.05), x, y, pool).unwrap();
    sparse.use_sparse(10).unwrap();
    let e = sparse.set_guard(AnswerGuard::Loo).unwrap_err().to_string();
    assert!(e.contains("exact local model"), "{e}");
    assert!("sometimes".parse::<AnswerGuard>().is_err());
    assert_eq!("loo".parse::<AnswerGuard>().unwrap(), AnswerGuard::Loo);
}

/// A pool of 30 points on [4, 7], beyond every private row: answers there move the model only
/// where the private rows cannot see.
fn model_with_far_pool(guard: AnswerGuard) -> CoModel {
    let (x, y, _) = data();
    let pool = DMatrix::from_fn(30, 1, |i, _| 4.0 + 3.0 * i as f64 / 29.0);
    let k: Box<dyn Kernel> = Box::new(SquaredExponential::isotropic(1.0, 1.0));
    let mut m =
        CoModel::new(CombinerKind::Noisy, Uncertainty::Marginal, k, NoiseVariance::new(0.05), x, y, pool).unwrap();
    m.set_guard(guard).unwrap();
    m.fit_private().unwrap();
    m
}

fn far_answer(offset: f64) -> Answer {
    let pool: Vec<f64> = (0..30).map(|i| 4.0 + 3.0 * i as f64 / 29.0).collect();
    let idx: Vec<usize> = (0..30).step_by(3).collect();
    let mean = idx.iter().map(|&i| truth(pool[i]) + offset).collect();
    Answer::marginal("B", idx, mean, vec![0.01; 10])
}

#[test]
fn the_loo_test_sets_aside_only_what_the_private_rows_can_tell_from_noise() {
    // Contradicting answers inside the private rows' range: a change far beyond its paired
    // standard error, set aside like `Loo` does.
    let mut m = model(AnswerGuard::LooTest);
    m.absorb(&answer((0..30).step_by(2).collect(), 1.5)).unwrap();
    m.refit().unwrap();
    let c = m.loo_check().expect("the guard ran");
    assert!(!c.used && c.with_answers - c.alone > 2.0 * c.se, "{c:?}");
    // Answers where the private rows have nothing to say: whatever the sign of the tiny change
    // in their leave-one-out error, it is within its standard error and the answers are used.
    let mut t = model_with_far_pool(AnswerGuard::LooTest);
    t.absorb(&far_answer(0.0)).unwrap();
    t.refit().unwrap();
    let c = t.loo_check().expect("the guard ran");
    assert!(c.used && c.se > 0.0 && (c.with_answers - c.alone) <= 2.0 * c.se, "{c:?}");
    assert_eq!("loo-test".parse::<AnswerGuard>().unwrap(), AnswerGuard::LooTest);
}

#[test]
fn tempered_answers_keep_their_shape_and_lose_their_weight() {
    let pool = DMatrix::from_fn(30, 1, |i, _| 4.0 + 3.0 * i as f64 / 29.0);
    let fit = |scale: f64| {
        let mut m = model_with_far_pool(AnswerGuard::Off);
        m.refit_theta = crate::combiner::RefitTheta::Own;
        m.answer_var_scale = scale;
        m.absorb(&far_answer(0.0)).unwrap();
        m.refit().unwrap();
        m.predict(&pool, false).unwrap().mean
    };
    let private = private_only_prediction(&model_with_far_pool(AnswerGuard::Off), &pool);
    let err = |p: &DVector<f64>| (0..30).map(|i| (p[i] - truth(pool[(i, 0)])).powi(2)).sum::<f64>();
    let (full, tempered, gone) = (fit(1.0), fit(10.0), fit(1e12));
    // Exact answers where the private model knows nothing: full weight helps most, a tempered
    // reading less, a weightless one not at all (the private-only model to round-off).
    assert!(
        err(&full) < err(&tempered) && err(&tempered) < err(&private),
        "{} {} {}",
        err(&full),
        err(&tempered),
        err(&private)
    );
    assert!((&gone - &private).amax() < 1e-6, "{}", (&gone - &private).amax());
}

#[test]
fn a_shared_level_counts_once() {
    // Answers all 0.5 above the truth: read as independent they pull the whole region up by
    // nearly 0.5; with a shared bias of variance 1 their common level counts as one noisy
    // observation, so the pull falls, while their shape (the differences) is kept.
    let pool = DMatrix::from_fn(30, 1, |i, _| 4.0 + 3.0 * i as f64 / 29.0);
    let fit = |level: f64| {
        let mut m = model_with_far_pool(AnswerGuard::Off);
        m.refit_theta = crate::combiner::RefitTheta::Own;
        m.answer_level_var = level;
        m.absorb(&far_answer(0.5)).unwrap();
        m.refit().unwrap();
        m.predict(&pool, false).unwrap().mean
    };
    let (independent, shared) = (fit(0.0), fit(1.0));
    let idx: Vec<usize> = (0..30).step_by(3).collect();
    let bias = |p: &DVector<f64>| idx.iter().map(|&i| p[i] - truth(pool[(i, 0)])).sum::<f64>() / idx.len() as f64;
    assert!(bias(&independent) > 0.4, "{}", bias(&independent));
    assert!(bias(&shared).abs() < 0.5 * bias(&independent), "{} {}", bias(&shared), bias(&independent));
}

/// The sixth pass's switch: a DP answer whose noise sd is far above this party's own fitted
/// noise sd is declined (counted, nothing else changes); a precise one, an answer without DP
/// noise, and every answer with the switch off are absorbed; a malformed noise variance is
/// refused as the peer's fault.
#[test]
fn dp_answers_far_noisier_than_the_own_error_are_declined() {
    let noisy = |sd: f64| {
        let mut a = answer((0..30).step_by(3).collect(), 0.0);
        a.noise_var = Some(vec![sd * sd; a.indices.len()]);
        a
    };
    let mut m = model(AnswerGuard::Off);
    let own_sd = m.private_noise_variance().sqrt();
    assert!(own_sd < 0.5, "the private fit's noise sd is small: {own_sd}");
    m.decline_noise_ratio = Some(0.5);
    let (_, _, pool) = data();
    let before = m.predict(&pool, false).unwrap().mean;
    m.absorb(&noisy(4.0 * own_sd / 0.5)).unwrap();
    assert_eq!((m.n_pseudo(), m.declined_answers), (0, 1));
    assert_eq!(m.predict(&pool, false).unwrap().mean, before, "a declined answer changes nothing");
    m.absorb(&noisy(0.25 * own_sd / 0.5)).unwrap();
    assert_eq!((m.n_pseudo(), m.declined_answers), (10, 1), "an answer precise enough is used");
    let mut m = model(AnswerGuard::Off);
    m.decline_noise_ratio = Some(0.5);
    m.absorb(&answer((0..30).step_by(3).collect(), 0.0)).unwrap();
    assert_eq!((m.n_pseudo(), m.declined_answers), (10, 0), "no DP noise: nothing to decline");
    let mut bad = noisy(1.0);
    bad.noise_var.as_mut().unwrap()[2] = f64::NAN;
    assert!(matches!(m.absorb(&bad), Err(crate::CotrainError::Peer { .. })));
    let mut short = noisy(1.0);
    short.noise_var.as_mut().unwrap().pop();
    assert!(matches!(m.absorb(&short), Err(crate::CotrainError::Peer { .. })), "a length mismatch, not a panic");
    let mut m = model(AnswerGuard::Off);
    m.absorb(&noisy(100.0)).unwrap();
    assert_eq!((m.n_pseudo(), m.declined_answers), (10, 0), "switch off: every answer is absorbed");
}

/// Issue 56's per-answer value rule (`answer_min_value`): an answer whose variance is more than
/// 1/K of the querier's own private-only latent variance at its entity weighs nothing, so with
/// every answer below the bar the model is the private-only one at the re-fitted θ; with K = 0
/// every answer counts; in between, the answers where the querier is already sure are the
/// ones dropped.
#[test]
fn the_value_rule_gives_no_weight_where_the_querier_is_already_sure() {
    let (_, _, pool) = data();
    let fitted = |k: Option<f64>, offset: f64| {
        let mut m = model(AnswerGuard::Off);
        m.answer_min_value = k;
        m.refit_theta = crate::combiner::RefitTheta::Own;
        m.absorb(&answer((0..30).step_by(2).collect(), offset)).unwrap();
        m.refit().unwrap();
        m.predict(&pool, false).unwrap().mean
    };
    let private = {
        let m = model(AnswerGuard::Off);
        private_only_prediction(&m, &pool)
    };
    // Answers 0.5 off the truth: they move the model when they count.
    let all = fitted(Some(0.0), 0.5);
    let none = fitted(Some(1e12), 0.5);
    let off = fitted(None, 0.5);
    assert_eq!(all, off, "K = 0 is the rule switched off");
    assert!((&all - &private).amax() > 0.05, "answers that count move the model");
    assert!((&none - &private).amax() < 1e-6, "weightless answers leave the private-only model");
    // In between: the own latent variance at the answered entities decides which count.
    let m = model(AnswerGuard::Off);
    let xq = DMatrix::from_fn(15, 1, |i, _| pool[(2 * i, 0)]);
    let own = m.clone().predict_private(&xq, false).unwrap().var;
    let k = 0.5 * (own.max() + own.min()) / 0.01;
    let some = fitted(Some(k), 0.5);
    assert!((&some - &private).amax() > 1e-6 && (&some - &all).amax() > 1e-6, "K = {k}: some answers count");
}

/// The value rule's basis (`ValueBasis`): with a discount of 1 on top of every answer, a K at
/// which the discounted ("read") variance sets every answer aside keeps them when the rule
/// weighs the variance before the discount (the answer's own 0.01 here), and the two bases
/// agree when the discount is zero.
#[test]
fn the_value_rule_weighs_the_undiscounted_variance_when_asked() {
    use crate::combiner::{RefitTheta, ValueBasis};
    const K: f64 = 0.05;
    let (_, _, pool) = data();
    let fitted = |basis: ValueBasis, extra: f64| {
        let mut m = model(AnswerGuard::Off);
        m.answer_min_value = Some(K);
        m.answer_min_value_basis = basis;
        m.answer_extra_var = extra;
        m.refit_theta = RefitTheta::Own;
        m.absorb(&answer((0..30).step_by(2).collect(), 0.5)).unwrap();
        m.refit().unwrap();
        m.predict(&pool, false).unwrap().mean
    };
    let private = private_only_prediction(&model(AnswerGuard::Off), &pool);
    // The own latent variance at the answered entities lies below K × (0.01 + 1), above K × 0.01.
    let xq = DMatrix::from_fn(15, 1, |i, _| pool[(2 * i, 0)]);
    let own = model(AnswerGuard::Off).predict_private(&xq, false).unwrap().var;
    assert!(own.max() < K * 1.01 && own.min() > K * 0.01, "{own}");
    let read = fitted(ValueBasis::Read, 1.0);
    let undiscounted = fitted(ValueBasis::Undiscounted, 1.0);
    assert!((&read - &private).amax() < 1e-6, "read: the discount sets every answer aside");
    assert!((&undiscounted - &private).amax() > 1e-4, "undiscounted: the answers count (at the discounted weight)");
    assert_eq!(fitted(ValueBasis::Read, 0.0), fitted(ValueBasis::Undiscounted, 0.0), "no discount: the same rule");
}
