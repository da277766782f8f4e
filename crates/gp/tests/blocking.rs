//! The blocked passes over K_uf give the same objective and gradients whatever the block size.
//! (Own test binary: the block size is process-global.)

mod common;
use common::*;
use dpcotrain_gp::sparse::set_block_entries;
use dpcotrain_gp::{NoiseModel, NoiseVariance, Objective, SparseGp, SparseKind};
use nalgebra::DVector;

#[test]
fn block_size_does_not_change_results() {
    let (x, y) = problem(203, 2, 1);
    let z = random_rows(9, 2, 2);
    let extra = DVector::from_fn(203, |i, _| 0.01 * (i % 7) as f64);
    for kind in [SparseKind::Vfe, SparseKind::Dtc, SparseKind::Fitc] {
        for noise in [
            NoiseModel::homoscedastic(0.1),
            NoiseModel::PerPoint { sigma2: NoiseVariance::new(0.05), extra: extra.clone() },
        ] {
            let mut gp = SparseGp::new(kind, se_ard(2), noise, x.clone(), y.clone(), z.clone()).unwrap();
            gp.optimize_inducing = true;
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
