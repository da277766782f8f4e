//! Stage timings of one small exact LML+gradient, the co-training re-fit's unit of work
//! (n ≈ 225 rows, D = 1). Usage: eval_parts [n] [d] [reps]
use dpcotrain_gp::kernels::{Kernel, SquaredExponential};
use dpcotrain_gp::linalg::{Cholesky, JitterPolicy};
use dpcotrain_gp::{ExactGp, NoiseModel, Objective};
use nalgebra::{DMatrix, DVector};
use rand::{Rng, SeedableRng};
use std::time::Instant;

/// Best of five batches (the machine may be shared).
fn time<T>(name: &str, reps: usize, mut f: impl FnMut() -> T) -> T {
    let mut out = f();
    let mut best = f64::INFINITY;
    for _ in 0..5 {
        let t = Instant::now();
        for _ in 0..reps.div_ceil(5) {
            out = f();
        }
        best = best.min(t.elapsed().as_secs_f64() / reps.div_ceil(5) as f64);
    }
    println!("{name:<16} {:8.1} µs", best * 1e6);
    out
}

fn main() {
    let arg = |i: usize, d: usize| std::env::args().nth(i).and_then(|s| s.parse().ok()).unwrap_or(d);
    let (n, d, reps) = (arg(1, 225), arg(2, 1), arg(3, 200));
    let mut r = rand_chacha::ChaCha8Rng::seed_from_u64(1);
    let x: DMatrix<f64> = DMatrix::from_fn(n, d, |_, _| r.random_range(-2.0..2.0));
    let y: DVector<f64> = DVector::from_fn(n, |i, _| x[(i, 0)].sin() + 0.1 * r.random_range(-1.0..1.0));
    let k = SquaredExponential::ard(1.0, vec![0.7; d]);
    let kk = time("K", reps, || k.k(x.as_view(), x.as_view()));
    let mut ky = kk.clone();
    for i in 0..n {
        ky[(i, i)] += 0.1;
    }
    let ch = time("chol", reps, || Cholesky::factor_of(&ky, "K", JitterPolicy::IF_NEEDED).unwrap());
    let inv = time("inverse", reps, || ch.inverse());
    time("vjp", reps, || k.vjp(x.as_view(), x.as_view(), inv.as_view(), false));
    time("vjp_given_k", reps, || k.vjp_given_k(x.as_view(), x.as_view(), kk.as_view(), inv.as_view(), false));
    time("vjp_sym_given_k", reps, || k.vjp_sym_given_k(x.as_view(), kk.as_view(), inv.as_view()));
    let gp = ExactGp::new(Box::new(k.clone()), NoiseModel::homoscedastic(0.1), x.clone(), y.clone()).unwrap();
    time("exact evaluate", reps, || gp.evaluate().unwrap());
    let xs: DMatrix<f64> = DMatrix::from_fn(500, d, |_, _| r.random_range(-2.0..2.0));
    time("K(X, X*500)", reps, || k.k(x.as_view(), xs.as_view()));
    let post = gp.posterior().unwrap();
    time("predict 500", reps, || post.predict(&xs, false).unwrap());
}
