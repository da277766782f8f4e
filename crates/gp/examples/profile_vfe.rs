//! Stage timings of one VFE ELBO+gradient (N = 1e5, M = 500, D = 4): where the time goes.
use dpcotrain_gp::kernels::{Kernel, SquaredExponential};
use dpcotrain_gp::linalg::{Cholesky, JitterPolicy, aat, matmul};
use nalgebra::DMatrix;
use rand::{Rng, SeedableRng};
use std::time::Instant;

fn main() {
    let (n, m, d) = (100_000usize, 500usize, 4usize);
    let mut r = rand_chacha::ChaCha8Rng::seed_from_u64(1);
    let x: DMatrix<f64> = DMatrix::from_fn(n, d, |_, _| r.random_range(-2.0..2.0));
    let z: DMatrix<f64> = DMatrix::from_fn(m, d, |_, _| r.random_range(-2.0..2.0));
    let k = SquaredExponential::ard(1.0, vec![0.7; d]);
    let t = Instant::now();
    let kuu = k.k(z.as_view(), z.as_view());
    let ch = Cholesky::factor(kuu, "K_uu", JitterPolicy::ALWAYS).unwrap();
    println!("Kuu + chol      {:.3}", t.elapsed().as_secs_f64());
    let t = Instant::now();
    let mut a = k.k(z.as_view(), x.as_view());
    println!("Kuf             {:.3}", t.elapsed().as_secs_f64());
    let t = Instant::now();
    ch.solve_l_in_place(&mut a);
    println!("TRSM            {:.3}", t.elapsed().as_secs_f64());
    let t = Instant::now();
    let g = aat(&a);
    println!("SYRK            {:.3}", t.elapsed().as_secs_f64());
    let t = Instant::now();
    let p = g.clone();
    let blk = a.columns(0, 8388).clone_owned();
    let mut tot = 0.0f64;
    for _ in 0..12 {
        let q = matmul(p.as_view(), false, blk.as_view(), false);
        tot += q[(0, 0)];
    }
    println!("GEMM blocks     {:.3} ({tot:.1})", t.elapsed().as_secs_f64());
    let t = Instant::now();
    for s in 0..12 {
        let xs = x.rows(s * 8333, 8333);
        let gb = DMatrix::from_element(m, 8333, 1e-3);
        let kb = k.k(z.as_view(), xs);
        let kg = k.vjp_given_k(z.as_view(), xs, kb.as_view(), gb.as_view(), true);
        tot += kg.params[0];
    }
    println!("k+vjp_given_k   {:.3} ({tot:.1})", t.elapsed().as_secs_f64());
    let y = nalgebra::DVector::from_fn(n, |i, _| x[(i, 0)].sin());
    let mut gp = dpcotrain_gp::SparseGp::new(
        dpcotrain_gp::SparseKind::Vfe,
        Box::new(k.clone()),
        dpcotrain_gp::NoiseModel::homoscedastic(0.1),
        x.clone(),
        y,
        z.clone(),
    )
    .unwrap();
    gp.optimize_inducing = true;
    for _ in 0..2 {
        let t = Instant::now();
        let e = dpcotrain_gp::Objective::evaluate(&gp).unwrap();
        println!("VFE ELBO+grad   {:.3} ({:.3})", t.elapsed().as_secs_f64(), e.value);
    }
    let t = Instant::now();
    let big = DMatrix::from_fn(2000, 2000, |i, j| ((i * 7 + j) % 13) as f64);
    let c = matmul(big.as_view(), false, big.as_view(), false);
    let s = t.elapsed().as_secs_f64();
    println!("GEMM 2000^3     {:.3} = {:.1} GFLOP/s ({})", s, 16e9 / s / 1e9, c[(0, 0)]);
}
