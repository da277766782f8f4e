//! The blocked passes over K_uf give the same objective and gradients whatever the block size.
//! (Own test binary: the block size is process-global.)

mod common;
use common::*;
use dpcotrain_gp::sparse::set_block_entries;
use dpcotrain_gp::{NoiseModel, NoiseVariance, Objective, SparseGp, SparseKind};
use nalgebra::DVector;

/// The block size is process-global and the tests of this binary run in parallel: each test
/// that evaluates a sparse model holds this lock, so none sees another's block size mid-way.
static BLOCK_SIZE: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// A sparse model with an ARD SE kernel whose inducing inputs are learned (so every gradient
/// pass also forms ∂/∂Z).
fn model(
    kind: SparseKind,
    noise: NoiseModel,
    x: &nalgebra::DMatrix<f64>,
    y: &DVector<f64>,
    z: &nalgebra::DMatrix<f64>,
) -> SparseGp {
    let mut gp = SparseGp::new(kind, se_ard(x.ncols()), noise, x.clone(), y.clone(), z.clone()).unwrap();
    gp.optimize_inducing = true;
    gp
}

#[test]
fn block_size_does_not_change_results() {
    let _guard = BLOCK_SIZE.lock().unwrap_or_else(|e| e.into_inner());
    let (x, y) = problem(203, 2, 1);
    let z = random_rows(9, 2, 2);
    let extra = DVector::from_fn(203, |i, _| 0.01 * (i % 7) as f64);
    for kind in [SparseKind::Vfe, SparseKind::Dtc, SparseKind::Fitc] {
        for noise in [
            NoiseModel::homoscedastic(0.1),
            NoiseModel::PerPoint { sigma2: NoiseVariance::new(0.05), extra: extra.clone() },
        ] {
            let gp = model(kind, noise, &x, &y, &z);
            set_block_entries(1 << 22);
            let one = gp.evaluate().unwrap();
            let trace_one = gp.trace_k_minus_q().unwrap();
            set_block_entries(9 * 10); // 10 columns per block: 21 blocks, the last partial
            let many = gp.evaluate().unwrap();
            let trace_many = gp.trace_k_minus_q().unwrap();
            set_block_entries(1 << 22);
            assert!((one.value - many.value).abs() < 1e-10 * one.value.abs(), "{kind:?}");
            assert!((trace_one - trace_many).abs() < 1e-10 * (1.0 + trace_one.abs()));
            for (a, b) in one.grad.iter().zip(&many.grad) {
                assert!((a - b).abs() < 1e-9 * (1.0 + a.abs()), "{kind:?}: {a} vs {b}");
            }
        }
    }
}

/// An evaluation depends only on the model's numbers: a second evaluation, one after changing θ
/// and Z (same shape, new numbers), and a clone's all match fresh models bit for bit.
#[test]
fn evaluations_depend_only_on_the_model() {
    let _guard = BLOCK_SIZE.lock().unwrap_or_else(|e| e.into_inner());
    let (x, y) = problem(157, 3, 4);
    let z = random_rows(11, 3, 5);
    for kind in [SparseKind::Vfe, SparseKind::Fitc] {
        let fresh = |p: &[f64], z: &nalgebra::DMatrix<f64>| {
            let mut gp = model(kind, NoiseModel::homoscedastic(0.1), &x, &y, z);
            gp.kernel.set_params(p);
            gp.evaluate().unwrap()
        };
        let mut gp = model(kind, NoiseModel::homoscedastic(0.1), &x, &y, &z);
        let p0 = gp.kernel.params();
        let first = gp.evaluate().unwrap();
        let again = gp.evaluate().unwrap();
        assert_eq!(first.value.to_bits(), again.value.to_bits());
        assert_eq!(first.grad, again.grad);
        assert_eq!(first.value.to_bits(), fresh(&p0, &z).value.to_bits());
        // New θ and Z, same shapes.
        let p1: Vec<f64> = p0.iter().map(|v| v + 0.3).collect();
        gp.kernel.set_params(&p1);
        let z1 = z.map(|v| v * 0.9 + 0.05);
        gp.set_z(z1.clone()).unwrap();
        let moved = gp.evaluate().unwrap();
        let reference = fresh(&p1, &z1);
        assert_eq!(moved.value.to_bits(), reference.value.to_bits(), "{kind:?}");
        assert_eq!(moved.grad, reference.grad);
        assert_eq!(gp.clone().evaluate().unwrap().value.to_bits(), reference.value.to_bits());
    }
}

/// `k_into` overwrites every entry of a buffer of the right shape (here full of NaN) and
/// resizes one of the wrong shape, giving exactly `k`'s numbers.
#[test]
fn k_into_matches_k() {
    use dpcotrain_gp::kernels::{Kernel, Matern, MaternNu, SquaredExponential};
    let (x, _) = problem(40, 2, 6);
    let z = random_rows(7, 2, 7);
    let kernels: Vec<Box<dyn Kernel>> = vec![
        Box::new(SquaredExponential::ard(1.3, vec![0.6, 1.1])),
        Box::new(Matern::ard(MaternNu::ThreeHalves, 0.8, vec![0.7, 0.9])),
    ];
    for k in &kernels {
        for (a, b) in [(z.as_view(), x.as_view()), (x.as_view(), x.as_view())] {
            let want = k.k(a, b);
            let mut nan = nalgebra::DMatrix::from_element(a.nrows(), b.nrows(), f64::NAN);
            k.k_into(a, b, &mut nan);
            assert_eq!(nan, want);
            let mut wrong = nalgebra::DMatrix::from_element(3, 2, f64::NAN);
            k.k_into(a, b, &mut wrong);
            assert_eq!(wrong, want);
        }
    }
}

/// The blocked passes give the same bits on 1, 2 and 3 threads, at a size where the Gram
/// product, the GEMM and the per-column pass all run in parallel (M²·block ≥ 10⁸ flops).
#[test]
fn evaluations_do_not_depend_on_the_thread_count() {
    let _guard = BLOCK_SIZE.lock().unwrap_or_else(|e| e.into_inner());
    let (x, y) = problem(20_000, 2, 8);
    let z = random_rows(200, 2, 9);
    for kind in [SparseKind::Vfe, SparseKind::Fitc] {
        let gp = model(kind, NoiseModel::homoscedastic(0.1), &x, &y, &z);
        let on = |threads: usize| {
            let pool = rayon::ThreadPoolBuilder::new().num_threads(threads).build().unwrap();
            pool.install(|| gp.evaluate().unwrap())
        };
        let one = on(1);
        for threads in [2, 3] {
            let other = on(threads);
            assert_eq!(one.value.to_bits(), other.value.to_bits(), "{kind:?} on {threads} threads");
            assert_eq!(one.grad, other.grad, "{kind:?} on {threads} threads");
        }
    }
}
