//! Finite-difference checks of every objective's analytic gradient, including inducing inputs.

mod common;
use common::*;
use dpcotrain_gp::kernels::{
    ArcCosine, ArcCosineOrder, Constant, Kernel, Linear, Matern, MaternNu, Polynomial, Product, SquaredExponential, Sum,
};
use dpcotrain_gp::{ExactGp, InducingFeatures, Multiscale, NoiseModel, NoiseVariance, SparseGp, SparseKind};
use nalgebra::{DMatrix, DVector};
use rand::Rng;

const TOL: f64 = 1e-5;

fn per_point(n: usize, seed: u64) -> NoiseModel {
    let mut r = rng(seed);
    NoiseModel::PerPoint {
        sigma2: NoiseVariance::new(0.05),
        extra: DVector::from_fn(n, |_, _| r.random_range(0.0..0.3)),
    }
}

#[test]
fn exact_homoscedastic() {
    let (x, y) = problem(25, 2, 1);
    let gp = ExactGp::new(se_ard(2), NoiseModel::homoscedastic(0.1), x, y).unwrap();
    assert!(fd_error(&gp, 1e-5) < TOL);
}

#[test]
fn exact_per_point_matern() {
    let (x, y) = problem(20, 3, 2);
    let k: Box<dyn Kernel> = Box::new(Matern::ard(MaternNu::FiveHalves, 0.9, vec![0.8, 1.1, 1.5]));
    let gp = ExactGp::new(k, per_point(20, 3), x, y).unwrap();
    assert!(fd_error(&gp, 1e-5) < TOL);
}

#[test]
fn exact_dense_block_sum_kernel() {
    let (x, y) = problem(18, 2, 4);
    let k: Box<dyn Kernel> =
        Box::new(Sum::new(Box::new(SquaredExponential::isotropic(1.0, 0.9)), Box::new(Linear::ard(vec![0.2, 0.4]))));
    let rows = vec![3, 7, 11, 15];
    let g = random_rows(4, 6, 5);
    let block = &g * g.transpose() * 0.05;
    let noise = NoiseModel::Block { sigma2: NoiseVariance::new(0.08), rows, block };
    let gp = ExactGp::new(k, noise, x, y).unwrap();
    assert!(fd_error(&gp, 1e-5) < TOL);
}

#[test]
fn exact_product_and_matern_kernels() {
    let (x, y) = problem(15, 2, 6);
    for k in [
        Box::new(Product::new(
            Box::new(Matern::isotropic(MaternNu::ThreeHalves, 1.0, 0.7)),
            Box::new(Constant::new(1.5)),
        )) as Box<dyn Kernel>,
        Box::new(Matern::ard(MaternNu::Half, 1.2, vec![0.9, 1.3])),
    ] {
        let gp = ExactGp::new(k, NoiseModel::homoscedastic(0.2), x.clone(), y.clone()).unwrap();
        assert!(fd_error(&gp, 1e-5) < TOL);
    }
}

fn sparse(kind: SparseKind, noise: NoiseModel, seed: u64) -> SparseGp {
    let (x, y) = problem(60, 2, seed);
    let z = random_rows(8, 2, seed + 100);
    let mut gp = SparseGp::new(kind, se_ard(2), noise, x, y, z).unwrap();
    gp.optimize_inducing = true;
    gp
}

#[test]
fn vfe_hyperparameters_and_inducing_inputs() {
    let gp = sparse(SparseKind::Vfe, NoiseModel::homoscedastic(0.1), 10);
    assert!(fd_error(&gp, 1e-5) < TOL);
}

#[test]
fn vfe_per_point_noise() {
    let gp = sparse(SparseKind::Vfe, per_point(60, 11), 12);
    assert!(fd_error(&gp, 1e-5) < TOL);
}

#[test]
fn dtc_gradients() {
    for noise in [NoiseModel::homoscedastic(0.1), per_point(60, 13)] {
        let gp = sparse(SparseKind::Dtc, noise, 14);
        assert!(fd_error(&gp, 1e-5) < TOL);
    }
}

#[test]
fn fitc_gradients() {
    for noise in [NoiseModel::homoscedastic(0.1), per_point(60, 15)] {
        let gp = sparse(SparseKind::Fitc, noise, 16);
        assert!(fd_error(&gp, 1e-5) < TOL);
    }
}

#[test]
fn vfe_matern_and_sum_kernel_with_inducing_inputs() {
    let (x, y) = problem(50, 3, 20);
    let z = random_rows(6, 3, 21);
    for k in [
        Box::new(Matern::ard(MaternNu::ThreeHalves, 1.1, vec![0.8, 1.0, 1.4])) as Box<dyn Kernel>,
        Box::new(Sum::new(
            Box::new(SquaredExponential::ard(1.0, vec![1.0, 0.9, 1.2])),
            Box::new(Linear::isotropic(0.3)),
        )),
    ] {
        let mut gp =
            SparseGp::new(SparseKind::Vfe, k, NoiseModel::homoscedastic(0.15), x.clone(), y.clone(), z.clone())
                .unwrap();
        gp.optimize_inducing = true;
        assert!(fd_error(&gp, 1e-5) < TOL);
    }
}

/// Hughes-Hallett's kernels (arc-cosine of orders 0 and 1, cubic, and their sum) in the exact
/// LML and in VFE/FITC with inducing-input gradients.
#[test]
fn arc_cosine_and_polynomial_kernels_exact_and_sparse() {
    let (x, y) = problem(40, 2, 30);
    let z = random_rows(6, 2, 31);
    let kernels = || -> Vec<Box<dyn Kernel>> {
        vec![
            Box::new(ArcCosine::ard(ArcCosineOrder::Zero, 1.1, vec![0.7, 1.3], 0.4)),
            Box::new(ArcCosine::isotropic(ArcCosineOrder::One, 0.9, 1.2, 0.6)),
            Box::new(Polynomial::ard(3, vec![0.4, 0.6], 1.0)),
            Box::new(Sum::new(
                Box::new(ArcCosine::isotropic(ArcCosineOrder::Zero, 1.0, 1.0, 0.5)),
                Box::new(Polynomial::isotropic(3, 0.3, 0.8)),
            )),
        ]
    };
    for k in kernels() {
        let name = k.name();
        let gp = ExactGp::new(k, NoiseModel::homoscedastic(0.1), x.clone(), y.clone()).unwrap();
        assert!(fd_error(&gp, 1e-5) < TOL, "exact {name}");
    }
    // Step 1e-4: the arc-cosine kernels compute sin θ from a·a' − u², which loses digits for
    // nearly parallel pairs, so FITC's difference quotient is rounding-limited at 1e-6 (its
    // error grows as the step shrinks: 1.3e-5 at 1e-5, 3.5e-5 at 1e-6), not the gradient.
    for kind in [SparseKind::Vfe, SparseKind::Fitc] {
        for k in kernels() {
            let name = k.name();
            let mut gp =
                SparseGp::new(kind, k, NoiseModel::homoscedastic(0.1), x.clone(), y.clone(), z.clone()).unwrap();
            gp.optimize_inducing = true;
            let e = fd_error(&gp, 1e-4);
            assert!(e < TOL, "{kind:?} {name}: {e}");
        }
    }
}

/// Walder et al.'s multiscale features: gradients in the kernel, σ², the centres Z and the
/// widths ρ, for VFE, DTC and FITC, ARD and isotropic SE, homoscedastic and per-point noise.
#[test]
fn multiscale_features_in_every_sparse_objective() {
    let (x, y) = problem(50, 2, 40);
    let z = random_rows(7, 2, 41);
    let a = DMatrix::from_fn(7, 2, |i, j| 0.75 + 0.35 * ((i * 3 + j * 5) % 7) as f64);
    for kind in [SparseKind::Vfe, SparseKind::Dtc, SparseKind::Fitc] {
        for (k, noise) in [
            (se_ard(2), NoiseModel::homoscedastic(0.1)),
            (Box::new(SquaredExponential::isotropic(0.9, 0.8)) as Box<dyn Kernel>, per_point(50, 42)),
        ] {
            let name = k.name();
            let mut gp = SparseGp::new(kind, k, noise, x.clone(), y.clone(), z.clone()).unwrap();
            gp.set_features(InducingFeatures::Multiscale(Multiscale::from_relative(&a).unwrap())).unwrap();
            gp.optimize_inducing = true;
            let n = dpcotrain_gp::Objective::param_names(&gp);
            assert_eq!(n.len(), gp.kernel.n_params() + 1 + 14 + 14, "{n:?}");
            assert_eq!(n.last().unwrap(), "width_raw[6,1]");
            let e = fd_error(&gp, 1e-5);
            assert!(e < TOL, "{kind:?} {name}: {e}");
        }
    }
}

/// Walder et al.'s "basis" variants: kernel and noise fixed, only centres and widths train.
#[test]
fn inducing_features_alone_with_the_kernel_fixed() {
    let (x, y) = problem(40, 2, 43);
    let z = random_rows(5, 2, 44);
    for multiscale in [false, true] {
        let noise = NoiseModel::Homoscedastic(NoiseVariance::fixed(0.1));
        let mut gp = SparseGp::new(SparseKind::Fitc, se_ard(2), noise, x.clone(), y.clone(), z.clone()).unwrap();
        if multiscale {
            gp.use_multiscale().unwrap();
        }
        gp.optimize_inducing = true;
        gp.optimize_kernel = false;
        let names = dpcotrain_gp::Objective::param_names(&gp);
        assert_eq!(names.len(), if multiscale { 20 } else { 10 }, "{names:?}");
        assert_eq!(names[0], "Z[0,0]");
        let k0 = gp.kernel.params();
        let mut moved = gp.clone();
        let mut p = dpcotrain_gp::Objective::params(&gp);
        p[0] += 0.1;
        dpcotrain_gp::Objective::set_params(&mut moved, &p);
        assert_eq!(moved.kernel.params(), k0, "the kernel must not move");
        assert!(fd_error(&gp, 1e-5) < TOL);
    }
}

#[test]
fn gradient_check_can_fail() {
    // Guard against a vacuous checker: a deliberately wrong gradient is caught.
    #[derive(Clone)]
    struct Wrong;
    impl dpcotrain_gp::Objective for Wrong {
        fn params(&self) -> Vec<f64> {
            vec![0.3]
        }
        fn set_params(&mut self, _: &[f64]) {}
        fn bounds(&self) -> Vec<dpcotrain_gp::Bounds> {
            vec![dpcotrain_gp::Bounds::new(-1.0, 1.0)]
        }
        fn param_names(&self) -> Vec<String> {
            vec!["p".into()]
        }
        fn evaluate(&self) -> Result<dpcotrain_gp::Evaluation, dpcotrain_gp::GpError> {
            Ok(dpcotrain_gp::Evaluation { value: 0.0, grad: vec![1.0], jitter: Default::default() })
        }
    }
    assert!(fd_error(&Wrong, 1e-5) > 1.0);
    let _ = DMatrix::<f64>::zeros(1, 1);
}
