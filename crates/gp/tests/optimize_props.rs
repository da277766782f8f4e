//! Property test of the bound-constrained L-BFGS: on random strictly convex quadratics in a
//! random box (some sides unbounded), the returned point satisfies the KKT conditions — a
//! free coordinate has zero gradient, a coordinate at its lower bound a non-negative one, at
//! its upper bound a non-positive one — which for a convex problem means it is the minimum.

use dpcotrain_gp::optimize::{LbfgsOptions, Termination, minimize};
use proptest::prelude::*;

/// A box-constrained quadratic: (A row-major, b, lower, upper, x0, n).
type Problem = (Vec<f64>, Vec<f64>, Vec<f64>, Vec<f64>, Vec<f64>, usize);

/// (A = MᵀM + λI, b, lower, upper, x0) with n ≤ 6.
fn problem() -> impl Strategy<Value = Problem> {
    (1usize..=6).prop_flat_map(|n| {
        (
            prop::collection::vec(-1.0f64..1.0, n * n),
            0.05f64..1.0,
            prop::collection::vec(-3.0f64..3.0, n),
            prop::collection::vec((-2.0f64..0.0, 0.2f64..3.0, 0u8..4), n),
            prop::collection::vec(0.0f64..1.0, n),
        )
            .prop_map(move |(m, lambda, b, bounds, t)| {
                let mut a = vec![0.0; n * n];
                for i in 0..n {
                    for j in 0..n {
                        a[i * n + j] = (0..n).map(|k| m[k * n + i] * m[k * n + j]).sum::<f64>();
                    }
                    a[i * n + i] += lambda;
                }
                // kind 0: both bounds, 1: no lower, 2: no upper, 3: free.
                let lower: Vec<f64> =
                    bounds.iter().map(|&(l, _, k)| if k == 1 || k == 3 { f64::NEG_INFINITY } else { l }).collect();
                let upper: Vec<f64> =
                    bounds.iter().map(|&(l, w, k)| if k == 2 || k == 3 { f64::INFINITY } else { l + w }).collect();
                let x0: Vec<f64> = bounds.iter().zip(&t).map(|(&(l, w, _), &t)| l + t * w).collect();
                (a, b, lower, upper, x0, n)
            })
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn bounded_quadratics_end_at_a_kkt_point((a, b, lower, upper, x0, n) in problem()) {
        let f = |x: &[f64]| {
            let ax: Vec<f64> = (0..n).map(|i| (0..n).map(|j| a[i * n + j] * x[j]).sum()).collect();
            let v = 0.5 * x.iter().zip(&ax).map(|(x, a)| x * a).sum::<f64>() - x.iter().zip(&b).map(|(x, b)| x * b).sum::<f64>();
            let g: Vec<f64> = ax.iter().zip(&b).map(|(a, b)| a - b).collect();
            Ok((v, g))
        };
        // Only the projected-gradient test may stop it (no relative-reduction exit).
        let opts = LbfgsOptions { max_iters: 2000, pgtol: 1e-9, ftol: 0.0, ..LbfgsOptions::default() };
        let r = minimize(f, &x0, &lower, &upper, &opts).unwrap();
        prop_assert!(
            r.termination.is_converged() || r.termination == Termination::LineSearchFailed,
            "{:?}", r.termination
        );
        let tol = 1e-6;
        for i in 0..n {
            prop_assert!(r.x[i] >= lower[i] && r.x[i] <= upper[i], "x[{}] = {} outside [{}, {}]", i, r.x[i], lower[i], upper[i]);
            let g = r.grad[i];
            let at_lower = r.x[i] <= lower[i] + 1e-9;
            let at_upper = r.x[i] >= upper[i] - 1e-9;
            if at_lower && !at_upper {
                prop_assert!(g >= -tol, "x[{}] at its lower bound with gradient {}", i, g);
            } else if at_upper && !at_lower {
                prop_assert!(g <= tol, "x[{}] at its upper bound with gradient {}", i, g);
            } else if !at_lower && !at_upper {
                prop_assert!(g.abs() <= tol, "free x[{}] with gradient {}", i, g);
            }
        }
    }
}
