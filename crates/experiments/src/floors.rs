//! The analytic "explainable standard deviation" of Thomas Tables 4.1 and 4.2 (Thomas §4.3.1.2;
//! the formulas below; the published cells in the tests at the end).
//!
//! For unit-variance jointly Gaussian (x, y) the unexplained variance of y is the Schur complement
//! 1 − c_xyᵀ Σ_xx⁻¹ c_xy. For the simulator of [`dpcotrain_cotrain::simulate`] (decision D1) this gives:
//!
//! | Floor | Formula |
//! |---|---|
//! | individual, unmasked (either CI) | √(1 − r²) |
//! | individual, masked (either CI) | √(1 − r²/2): optimal on the party's half, prior mean 0 on the other half where E[y² \| x < 0] = 1 |
//! | joint, CI = yes (any masking) | √((1 − r²)/(1 + r²)), from Σ_xx = [[1, r²], [r², 1]] |
//! | joint, CI = no (any masking) | √(1 − r²), x₁ = x₂ (pseudo-inverse) |
//!
//! The masked individual value is **not** a lower bound for a GP, which extrapolates the linear
//! trend into the unseen half (Thomas 2017 Table C.1).

use rand::SeedableRng;
use rand_chacha::ChaCha20Rng;

use dpcotrain_cotrain::simulate::{SimConfig, sample_joint};

/// The correlation grid of Tables 4.1 and 4.2.
pub(crate) const TABLE_R: [f64; 4] = [0.5, 0.75, 0.9, 0.99];

/// One cell pair of Tables 4.1/4.2: the unexplained sd of y for one (r, CI, masking) setting.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct FloorRow {
    pub r: f64,
    pub ci: bool,
    pub masked: bool,
    /// Table 4.1: best single-view predictor (one party alone).
    pub individual: f64,
    /// Table 4.2: best predictor using both views.
    pub joint: f64,
}

/// Table 4.1: the unexplained sd of y for one party on its own view: √(1 − r²) unmasked,
/// √(1 − r²/2) masked. Independent of CI. Returns NaN unless 0 ≤ r ≤ 1.
pub(crate) fn individual_floor(r: f64, masked: bool) -> f64 {
    if !(0.0..=1.0).contains(&r) {
        return f64::NAN;
    }
    if masked { (1.0 - r * r / 2.0).sqrt() } else { (1.0 - r * r).sqrt() }
}

/// Table 4.2: the unexplained sd of y given both views: √((1 − r²)/(1 + r²)) with CI,
/// √(1 − r²) without (the views are the same variable). Masking does not change it: the two
/// halves together cover the covariate space. Returns NaN unless 0 ≤ r ≤ 1.
pub(crate) fn joint_floor(r: f64, ci: bool) -> f64 {
    if !(0.0..=1.0).contains(&r) {
        return f64::NAN;
    }
    if ci { ((1.0 - r * r) / (1.0 + r * r)).sqrt() } else { (1.0 - r * r).sqrt() }
}

/// All 16 cells of Tables 4.1/4.2: r ∈ {0.5, 0.75, 0.9, 0.99} (outer) × CI ∈ {no, yes} × masking
/// ∈ {no, yes} (inner).
pub(crate) fn floors_table() -> Vec<FloorRow> {
    let mut rows = Vec::with_capacity(16);
    for r in TABLE_R {
        for ci in [false, true] {
            for masked in [false, true] {
                rows.push(FloorRow {
                    r,
                    ci,
                    masked,
                    individual: individual_floor(r, masked),
                    joint: joint_floor(r, ci),
                });
            }
        }
    }
    rows
}

/// Monte Carlo estimate `(individual, joint)` of the floors for `cfg.r`, `cfg.conditional_independence`
/// and `cfg.masking`, from `n` unmasked draws of the simulator's joint distribution (seeded by
/// `cfg.seed`; the sizes in `cfg` are ignored).
///
/// Each floor is the test RMSE of the population-optimal predictor, evaluated on the draws:
/// - individual: party v predicts E[y | x_v] = r·x_v; when masked it does so only on its own half
///   (x₁ > 0 for P1, x₂ < 0 for P2) and predicts the prior mean 0 elsewhere.
///   The two parties' mean squared errors are averaged (they are equal in distribution).
/// - joint: the best linear predictor from both views, r(x₁ + x₂)/(1 + r²) with CI and r·x₁
///   without; masking does not change it.
///
/// Returns NaN for `n == 0` or r outside (0, 1].
pub(crate) fn monte_carlo_floor(cfg: &SimConfig, n: usize) -> (f64, f64) {
    let r = cfg.r;
    if n == 0 || !(r > 0.0 && r <= 1.0) {
        return (f64::NAN, f64::NAN);
    }
    let ci = cfg.conditional_independence;
    let mut rng = ChaCha20Rng::seed_from_u64(cfg.seed);
    let (mut sse_ind, mut sse_joint) = (0.0, 0.0);
    for _ in 0..n {
        let [y, x1, x2] = sample_joint(&mut rng, r, ci);
        let p1 = if !cfg.masking || x1 > 0.0 { r * x1 } else { 0.0 };
        let p2 = if !cfg.masking || x2 < 0.0 { r * x2 } else { 0.0 };
        sse_ind += 0.5 * ((y - p1).powi(2) + (y - p2).powi(2));
        let joint = if ci { r * (x1 + x2) / (1.0 + r * r) } else { r * x1 };
        sse_joint += (y - joint).powi(2);
    }
    ((sse_ind / n as f64).sqrt(), (sse_joint / n as f64).sqrt())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn round3(x: f64) -> f64 {
        (x * 1000.0).round() / 1000.0
    }

    /// The cells of Thomas 2017 Tables 4.1/4.2 that survived extraction of the thesis's text.
    #[test]
    fn published_surviving_cells() {
        // Table 4.1 individual, masked.
        for (r, v) in [(0.5, 0.935), (0.75, 0.848), (0.9, 0.771)] {
            assert_eq!(round3(individual_floor(r, true)), v, "masked individual r = {r}");
        }
        // Table 4.1 individual, unmasked.
        assert_eq!(round3(individual_floor(0.75, false)), 0.661);
        // Table 4.2 joint, CI = no.
        for (r, v) in [(0.5, 0.866), (0.75, 0.661), (0.9, 0.436)] {
            assert_eq!(round3(joint_floor(r, false)), v, "joint no-CI r = {r}");
        }
        // Table 4.2 joint, CI = yes.
        for (r, v) in [(0.5, 0.775), (0.75, 0.529), (0.9, 0.324)] {
            assert_eq!(round3(joint_floor(r, true)), v, "joint CI r = {r}");
        }
    }

    /// The † cells (lost in extraction), rebuilt from the same formulas.
    #[test]
    fn reconstructed_cells() {
        for (r, v) in [(0.5, 0.866), (0.9, 0.436), (0.99, 0.141)] {
            assert_eq!(round3(individual_floor(r, false)), v);
        }
        assert_eq!(round3(individual_floor(0.99, true)), 0.714);
        assert_eq!(round3(joint_floor(0.99, false)), 0.141);
        assert_eq!(round3(joint_floor(0.99, true)), 0.100);
    }

    #[test]
    fn table_layout_and_consistency() {
        let t = floors_table();
        assert_eq!(t.len(), 16);
        for (i, row) in t.iter().enumerate() {
            assert_eq!(row.r, TABLE_R[i / 4]);
            assert_eq!(row.ci, (i / 2) % 2 == 1);
            assert_eq!(row.masked, i % 2 == 1);
            assert_eq!(row.individual, individual_floor(row.r, row.masked));
            assert_eq!(row.joint, joint_floor(row.r, row.ci));
            // Ordering: both views help; masking hurts the individual model only.
            assert!(row.joint <= individual_floor(row.r, false) + 1e-15);
            assert!(individual_floor(row.r, false) < individual_floor(row.r, true));
        }
        // Joint masked equals joint unmasked for each (r, CI).
        for pair in t.chunks(2) {
            assert_eq!(pair[0].joint, pair[1].joint);
        }
    }

    #[test]
    fn edge_values_and_domain() {
        assert_eq!(individual_floor(0.0, false), 1.0);
        assert_eq!(joint_floor(1.0, true), 0.0);
        assert_eq!(individual_floor(1.0, true), 0.5f64.sqrt());
        assert!(individual_floor(1.5, true).is_nan());
        assert!(joint_floor(-0.1, false).is_nan());
        assert!(individual_floor(f64::NAN, false).is_nan());
        let (a, b) = monte_carlo_floor(&SimConfig::default(), 0);
        assert!(a.is_nan() && b.is_nan());
        let (a, b) = monte_carlo_floor(&SimConfig { r: 0.0, ..SimConfig::default() }, 10);
        assert!(a.is_nan() && b.is_nan());
    }

    #[test]
    fn monte_carlo_matches_analytic() {
        for r in [0.5, 0.9, 0.99] {
            for ci in [false, true] {
                for masking in [false, true] {
                    let cfg = SimConfig { r, conditional_independence: ci, masking, seed: 7, ..SimConfig::default() };
                    let (ind, joint) = monte_carlo_floor(&cfg, 200_000);
                    let (ai, aj) = (individual_floor(r, masking), joint_floor(r, ci));
                    assert!((ind - ai).abs() < 0.01, "individual r={r} ci={ci} masked={masking}: MC {ind} vs {ai}");
                    assert!((joint - aj).abs() < 0.01, "joint r={r} ci={ci} masked={masking}: MC {joint} vs {aj}");
                }
            }
        }
    }

    #[test]
    fn monte_carlo_is_deterministic() {
        let cfg = SimConfig { seed: 11, ..SimConfig::default() };
        assert_eq!(monte_carlo_floor(&cfg, 1000), monte_carlo_floor(&cfg, 1000));
        assert_ne!(monte_carlo_floor(&cfg, 1000), monte_carlo_floor(&SimConfig { seed: 12, ..cfg.clone() }, 1000));
    }
}
