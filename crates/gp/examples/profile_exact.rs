//! Stage timings of one exact LML+gradient (n = 2000, D = 4).
use dpcotrain_gp::kernels::{Kernel, SquaredExponential};
use dpcotrain_gp::linalg::{Cholesky, JitterPolicy};
use nalgebra::DMatrix;
use rand::{Rng, SeedableRng};
use std::time::Instant;

fn main() {
    let n = 2000;
    let mut r = rand_chacha::ChaCha8Rng::seed_from_u64(1);
    let x: DMatrix<f64> = DMatrix::from_fn(n, 4, |_, _| r.random_range(-2.0..2.0));
    let k = SquaredExponential::ard(1.0, vec![0.7; 4]);
    let t = Instant::now();
    let kk = k.k(x.as_view(), x.as_view());
    println!("K          {:.3}", t.elapsed().as_secs_f64());
    let mut ky = kk.clone();
    for i in 0..n {
        ky[(i, i)] += 0.1;
    }
    let t = Instant::now();
    let ch = Cholesky::factor(ky, "K", JitterPolicy::IF_NEEDED).unwrap();
    println!("chol       {:.3}", t.elapsed().as_secs_f64());
    let t = Instant::now();
    let inv = ch.inverse();
    println!("inverse    {:.3}", t.elapsed().as_secs_f64());
    let t = Instant::now();
    let a = k.vjp(x.as_view(), x.as_view(), inv.as_view(), false);
    println!("vjp        {:.3}", t.elapsed().as_secs_f64());
    let t = Instant::now();
    let b = k.vjp_given_k(x.as_view(), x.as_view(), kk.as_view(), inv.as_view(), false);
    println!("vjp_given  {:.3} ({:?} {:?})", t.elapsed().as_secs_f64(), a.params[0], b.params[0]);
}
