//! Shared helpers for the core's integration tests: seeded problems and a central
//! finite-difference gradient check.
#![allow(dead_code)]

use dpcotrain_gp::Objective;
use dpcotrain_gp::kernels::{Kernel, SquaredExponential};
use nalgebra::{DMatrix, DVector};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

pub fn rng(seed: u64) -> ChaCha8Rng {
    ChaCha8Rng::seed_from_u64(seed)
}

/// N×D inputs uniform in [-2, 2] and a smooth target with noise.
pub fn problem(n: usize, d: usize, seed: u64) -> (DMatrix<f64>, DVector<f64>) {
    let mut r = rng(seed);
    let x: DMatrix<f64> = DMatrix::from_fn(n, d, |_, _| r.random_range(-2.0..2.0));
    let y = DVector::from_fn(n, |i, _| {
        let s: f64 = (0..d).map(|j| (1.3 * x[(i, j)]).sin() + 0.3 * x[(i, j)]).sum();
        s + 0.1 * r.random_range(-1.0..1.0)
    });
    (x, y)
}

pub fn random_rows(m: usize, d: usize, seed: u64) -> DMatrix<f64> {
    let mut r = rng(seed);
    DMatrix::from_fn(m, d, |_, _| r.random_range(-2.0..2.0))
}

pub fn se_ard(d: usize) -> Box<dyn Kernel> {
    Box::new(SquaredExponential::ard(1.3, (0..d).map(|i| 0.7 + 0.3 * i as f64).collect()))
}

/// Central finite differences of `evaluate().value` against `evaluate().grad`.
/// Returns the worst relative error max |g − fd| / (|fd| + scale), scale = 1e-3·(1 + max|fd|).
pub fn fd_error<M: Objective + Clone>(model: &M, h: f64) -> f64 {
    let p0 = model.params();
    let analytic = model.evaluate().expect("evaluate").grad;
    assert_eq!(analytic.len(), p0.len(), "gradient length");
    let mut fds = Vec::new();
    for i in 0..p0.len() {
        let mut m = model.clone();
        let mut p = p0.clone();
        p[i] += h;
        m.set_params(&p);
        let fp = m.evaluate().unwrap().value;
        p[i] -= 2.0 * h;
        m.set_params(&p);
        let fm = m.evaluate().unwrap().value;
        fds.push((fp - fm) / (2.0 * h));
    }
    let scale = 1e-3 * (1.0 + fds.iter().fold(0.0f64, |a, b| a.max(b.abs())));
    let mut worst = 0.0f64;
    for (i, (g, fd)) in analytic.iter().zip(&fds).enumerate() {
        let e = (g - fd).abs() / (fd.abs() + scale);
        if e > 1e-4 {
            eprintln!("param {i} ({}): analytic {g:.10e} fd {fd:.10e}", model.param_names()[i]);
        }
        worst = worst.max(e);
    }
    worst
}
