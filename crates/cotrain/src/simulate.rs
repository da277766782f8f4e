//! Simulated two-statistician data of Thomas §4.3.1.1 (docs/decisions.md D1 and D2).
//!
//! The response and the two one-covariate views are jointly Gaussian with unit variances, so the
//! true model is linear. The constructive generator of decision D1 is
//!
//! ```text
//! y ~ N(0, 1)
//! CI = yes:  x_v = r·y + √(1−r²)·ε_v,  ε_1 ⫫ ε_2 ~ N(0, 1)   corr(x_v, y) = r, corr(x_1, x_2) = r²
//! CI = no :  x_1 = x_2 = r·y + √(1−r²)·ε                    corr(x_1, x_2) = 1
//! ```
//!
//! The singular CI = no covariance is never factorised; the data are built as above.
//!
//! Masking (decision D2): party 1's private labelled rows satisfy x₁ > 0 and party 2's satisfy
//! x₂ < 0, obtained by rejection sampling. The parties' labelled rows are independent draws
//! (different entities). The shared unlabelled pool and the test set are drawn **unmasked** from the
//! joint distribution and shared by index: both parties see their own covariate of the same
//! entities (Thomas 2017 §4.2.1). Following D1, nothing is re-standardised: y already has unit
//! variance.

use nalgebra::{DMatrix, DVector};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha20Rng;
use rand_distr::StandardNormal;

use crate::CotrainError;
use crate::data::{PartyData, Scenario};

/// Rejection-sampling budget per requested labelled row. Masking accepts a draw with probability
/// 1/2 whatever r is (x_v is standard normal), so this budget is never reached in practice; it only
/// guarantees termination.
const ATTEMPTS_PER_ROW: usize = 1_000;

/// Configuration of one simulated data set (Thomas 2017 §4.3.1.1).
#[derive(Debug, Clone, PartialEq)]
pub struct SimConfig {
    /// Correlation r between each covariate and y (equal for both views); thesis grid
    /// {0.5, 0.75, 0.9, 0.99}. Must satisfy 0 < r ≤ 1.
    pub r: f64,
    /// Whether x₁ and x₂ are conditionally independent given y (CI = yes) or identical (CI = no).
    pub conditional_independence: bool,
    /// Whether the private labelled rows are masked (party 1: x₁ > 0, party 2: x₂ < 0; D2).
    pub masking: bool,
    /// Private labelled rows per party; thesis grid {25, 50, 200}.
    pub n_obs: usize,
    /// Shared unlabelled pool size (thesis: 500).
    pub n_pool: usize,
    /// Shared test-set size (thesis: 500).
    pub n_test: usize,
    /// Seed of the ChaCha20 generator; the scenario is a deterministic function of the config.
    pub seed: u64,
}

impl Default for SimConfig {
    /// The configuration of Thomas's Figs 4.3/4.4: r = 0.9, CI, masked, n_obs = 25, 500 pool and
    /// 500 test points, seed 0.
    fn default() -> Self {
        SimConfig {
            r: 0.9,
            conditional_independence: true,
            masking: true,
            n_obs: 25,
            n_pool: 500,
            n_test: 500,
            seed: 0,
        }
    }
}

impl SimConfig {
    /// Check the configuration: 0 < r ≤ 1 (r = 1 gives x_v = y exactly) and all sizes ≥ 1.
    /// The true regression line of y on either covariate, E[y | x_v] = r·x_v (jointly Gaussian,
    /// unit variances: the generator above).
    pub fn regression_of_y(&self, x: f64) -> f64 {
        self.r * x
    }

    pub fn validate(&self) -> Result<(), CotrainError> {
        if !(self.r.is_finite() && self.r > 0.0 && self.r <= 1.0) {
            return Err(CotrainError::setting("correlation r", self.r, "satisfy 0 < r ≤ 1"));
        }
        for (value, what) in
            [(self.n_obs, "n_obs (private labelled rows per party)"), (self.n_pool, "n_pool"), (self.n_test, "n_test")]
        {
            if value == 0 {
                return Err(CotrainError::setting(what, 0.0, "be at least 1"));
            }
        }
        Ok(())
    }
}

/// One draw `[y, x₁, x₂]` from the joint distribution of decision D1.
///
/// With `conditional_independence` the two covariates get independent noises ε₁, ε₂; without it
/// they share one noise ε, so x₁ = x₂. The caller is responsible for 0 ≤ r ≤ 1.
pub fn sample_joint<R: Rng + ?Sized>(rng: &mut R, r: f64, conditional_independence: bool) -> [f64; 3] {
    let s = (1.0 - r * r).max(0.0).sqrt();
    let y: f64 = rng.sample(StandardNormal);
    let e1: f64 = rng.sample(StandardNormal);
    let x1 = r * y + s * e1;
    let x2 = if conditional_independence {
        let e2: f64 = rng.sample(StandardNormal);
        r * y + s * e2
    } else {
        x1
    };
    [y, x1, x2]
}

/// Generate the two-party scenario of Thomas §4.3.1.1.
///
/// Party "P1" holds column "x1" and party "P2" holds column "x2". Random numbers are consumed in a
/// fixed order (P1's labelled rows, P2's labelled rows, pool, test) from one `ChaCha20Rng` seeded
/// with `cfg.seed`, so equal configs give identical scenarios.
pub fn simulate(cfg: &SimConfig) -> Result<Scenario, CotrainError> {
    cfg.validate()?;
    let mut rng = ChaCha20Rng::seed_from_u64(cfg.seed);
    let max_attempts = ATTEMPTS_PER_ROW.saturating_mul(cfg.n_obs).saturating_add(ATTEMPTS_PER_ROW);
    let (x1_train, y1_train) = draw_private(&mut rng, cfg, 0, max_attempts)?;
    let (x2_train, y2_train) = draw_private(&mut rng, cfg, 1, max_attempts)?;
    let pool = draw_shared(&mut rng, cfg, cfg.n_pool);
    let test = draw_shared(&mut rng, cfg, cfg.n_test);

    let column = |rows: &[[f64; 3]], k: usize| DMatrix::from_iterator(rows.len(), 1, rows.iter().map(|row| row[k]));
    let y_test = DVector::from_iterator(test.len(), test.iter().map(|row| row[0]));
    let party = |name: &str, col: &str, k: usize, x_train: Vec<f64>, y_train: Vec<f64>| PartyData {
        name: name.to_string(),
        columns: vec![col.to_string()],
        x_train: DMatrix::from_vec(x_train.len(), 1, x_train),
        y_train: DVector::from_vec(y_train),
        x_pool: column(&pool, k),
        x_test: column(&test, k),
        y_test: y_test.clone(),
    };
    let parties = vec![party("P1", "x1", 1, x1_train, y1_train), party("P2", "x2", 2, x2_train, y2_train)];
    let description = format!(
        "simulated two-statistician data (Thomas §4.3.1.1): r = {}, CI = {}, masking = {}, n_obs = {}, \
         pool = {}, test = {}, seed = {}",
        cfg.r,
        if cfg.conditional_independence { "yes" } else { "no" },
        if cfg.masking { "yes (P1: x1 > 0, P2: x2 < 0)" } else { "no" },
        cfg.n_obs,
        cfg.n_pool,
        cfg.n_test,
        cfg.seed
    );
    let pool_labels = Some(DVector::from_iterator(pool.len(), pool.iter().map(|row| row[0])));
    let scenario = Scenario { parties, description, pool_labels };
    scenario.validate()?;
    Ok(scenario)
}

/// Whether party `party` (0 = P1, 1 = P2) may keep a draw under the masking of decision D2.
fn accepted(draw: &[f64; 3], party: usize, masking: bool) -> bool {
    !masking || if party == 0 { draw[1] > 0.0 } else { draw[2] < 0.0 }
}

/// `cfg.n_obs` private labelled rows (own covariate, label) for one party, by rejection sampling
/// when masked; fails after `max_attempts` draws.
fn draw_private(
    rng: &mut ChaCha20Rng,
    cfg: &SimConfig,
    party: usize,
    max_attempts: usize,
) -> Result<(Vec<f64>, Vec<f64>), CotrainError> {
    let mut x = Vec::with_capacity(cfg.n_obs);
    let mut y = Vec::with_capacity(cfg.n_obs);
    let mut attempts = 0usize;
    while x.len() < cfg.n_obs {
        if attempts >= max_attempts {
            return Err(crate::error::DataError::RejectionSampling {
                party: party + 1,
                accepted: x.len(),
                needed: cfg.n_obs,
                draws: max_attempts,
                r: cfg.r,
            }
            .into());
        }
        attempts += 1;
        let draw = sample_joint(rng, cfg.r, cfg.conditional_independence);
        if accepted(&draw, party, cfg.masking) {
            x.push(draw[1 + party]);
            y.push(draw[0]);
        }
    }
    Ok((x, y))
}

/// `n` unmasked shared draws `[y, x₁, x₂]` (pool or test entities).
fn draw_shared(rng: &mut ChaCha20Rng, cfg: &SimConfig, n: usize) -> Vec<[f64; 3]> {
    (0..n).map(|_| sample_joint(rng, cfg.r, cfg.conditional_independence)).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn corr(a: &[f64], b: &[f64]) -> f64 {
        let n = a.len() as f64;
        let (ma, mb) = (a.iter().sum::<f64>() / n, b.iter().sum::<f64>() / n);
        let cov: f64 = a.iter().zip(b).map(|(u, v)| (u - ma) * (v - mb)).sum();
        let va: f64 = a.iter().map(|u| (u - ma).powi(2)).sum();
        let vb: f64 = b.iter().map(|v| (v - mb).powi(2)).sum();
        cov / (va * vb).sqrt()
    }

    fn big(r: f64, ci: bool) -> Scenario {
        simulate(&SimConfig { r, conditional_independence: ci, n_test: 40_000, ..SimConfig::default() }).unwrap()
    }

    #[test]
    fn default_matches_thesis_figure_settings() {
        let c = SimConfig::default();
        assert_eq!((c.r, c.conditional_independence, c.masking), (0.9, true, true));
        assert_eq!((c.n_obs, c.n_pool, c.n_test, c.seed), (25, 500, 500, 0));
    }

    #[test]
    fn shapes_names_and_validate() {
        let s = simulate(&SimConfig::default()).unwrap();
        s.validate().unwrap();
        assert_eq!(s.parties.len(), 2);
        let names: Vec<_> = s.parties.iter().map(|p| (p.name.as_str(), p.columns.clone())).collect();
        assert_eq!(names, vec![("P1", vec!["x1".to_string()]), ("P2", vec!["x2".to_string()])]);
        for p in &s.parties {
            assert_eq!(p.x_train.shape(), (25, 1));
            assert_eq!(p.y_train.len(), 25);
            assert_eq!(p.x_pool.shape(), (500, 1));
            assert_eq!(p.x_test.shape(), (500, 1));
            assert_eq!(p.y_test.len(), 500);
        }
        assert_eq!(s.parties[0].y_test, s.parties[1].y_test);
        assert!(s.description.contains("r = 0.9"));
    }

    #[test]
    fn correlations_with_conditional_independence() {
        let r = 0.75;
        let s = big(r, true);
        let (x1, x2, y) =
            (s.parties[0].x_test.as_slice(), s.parties[1].x_test.as_slice(), s.parties[0].y_test.as_slice());
        // sd of a sample correlation is about (1 − ρ²)/√n ≈ 0.005 here.
        assert!((corr(x1, y) - r).abs() < 0.02, "corr(x1,y) = {}", corr(x1, y));
        assert!((corr(x2, y) - r).abs() < 0.02, "corr(x2,y) = {}", corr(x2, y));
        assert!((corr(x1, x2) - r * r).abs() < 0.02, "corr(x1,x2) = {}", corr(x1, x2));
        // Unit variances (D1: no re-standardisation needed).
        for v in [x1, x2, y] {
            let var = v.iter().map(|a| a * a).sum::<f64>() / v.len() as f64;
            assert!((var - 1.0).abs() < 0.03, "variance {var}");
        }
        // The pool comes from the same joint distribution.
        let (p1, p2) = (s.parties[0].x_pool.as_slice(), s.parties[1].x_pool.as_slice());
        assert!((corr(p1, p2) - r * r).abs() < 0.15);
    }

    #[test]
    fn correlations_without_conditional_independence() {
        let r = 0.5;
        let s = big(r, false);
        let (x1, x2, y) =
            (s.parties[0].x_test.as_slice(), s.parties[1].x_test.as_slice(), s.parties[0].y_test.as_slice());
        assert_eq!(x1, x2, "CI = no makes the two covariates the same variable");
        assert_eq!(s.parties[0].x_pool, s.parties[1].x_pool);
        assert!((corr(x1, y) - r).abs() < 0.02);
        assert!((corr(x1, x2) - 1.0).abs() < 1e-12);
    }

    #[test]
    fn masking_is_respected_and_rows_differ() {
        for ci in [true, false] {
            let cfg = SimConfig { conditional_independence: ci, n_obs: 200, seed: 3, ..SimConfig::default() };
            let s = simulate(&cfg).unwrap();
            assert!(s.parties[0].x_train.iter().all(|&x| x > 0.0), "P1 must only see x1 > 0");
            assert!(s.parties[1].x_train.iter().all(|&x| x < 0.0), "P2 must only see x2 < 0");
            // Independent draws: the labels of the two private sets are different entities.
            assert_ne!(s.parties[0].y_train, s.parties[1].y_train);
            // Masking on x shifts the labels: E[y | x1 > 0] = r·√(2/π) > 0.
            let m1 = s.parties[0].y_train.mean();
            let m2 = s.parties[1].y_train.mean();
            assert!(m1 > 0.4 && m2 < -0.4, "label means {m1}, {m2}");
            // Pool and test are not masked.
            for p in &s.parties {
                assert!(p.x_test.iter().any(|&x| x > 0.0) && p.x_test.iter().any(|&x| x < 0.0));
                assert!(p.x_pool.iter().any(|&x| x > 0.0) && p.x_pool.iter().any(|&x| x < 0.0));
            }
        }
    }

    #[test]
    fn unmasked_training_rows_cover_both_signs() {
        let s = simulate(&SimConfig { masking: false, n_obs: 200, ..SimConfig::default() }).unwrap();
        for p in &s.parties {
            assert!(p.x_train.iter().any(|&x| x > 0.0) && p.x_train.iter().any(|&x| x < 0.0));
        }
        assert!(!s.description.contains("x1 > 0"));
    }

    #[test]
    fn deterministic_in_the_seed() {
        let cfg = SimConfig { seed: 42, ..SimConfig::default() };
        assert_eq!(simulate(&cfg).unwrap(), simulate(&cfg).unwrap());
        let other = simulate(&SimConfig { seed: 43, ..cfg.clone() }).unwrap();
        let base = simulate(&cfg).unwrap();
        for (a, b) in base.parties.iter().zip(&other.parties) {
            assert_ne!(a.x_train, b.x_train);
            assert_ne!(a.x_pool, b.x_pool);
            assert_ne!(a.y_test, b.y_test);
        }
    }

    #[test]
    fn r_equal_one_is_allowed() {
        let s = simulate(&SimConfig { r: 1.0, ..SimConfig::default() }).unwrap();
        assert_eq!(s.parties[0].x_test.as_slice(), s.parties[0].y_test.as_slice());
        assert_eq!(s.parties[1].x_train.as_slice(), s.parties[1].y_train.as_slice());
    }

    #[test]
    fn invalid_configs_are_rejected() {
        let base = SimConfig::default();
        for r in [0.0, -0.5, 1.0 + 1e-12, 2.0, f64::NAN, f64::INFINITY] {
            let err = simulate(&SimConfig { r, ..base.clone() }).unwrap_err();
            assert!(err.to_string().contains("0 < r ≤ 1"), "{err}");
        }
        let zero_sizes = [
            SimConfig { n_obs: 0, ..base.clone() },
            SimConfig { n_pool: 0, ..base.clone() },
            SimConfig { n_test: 0, ..base },
        ];
        for cfg in zero_sizes {
            let err = simulate(&cfg).unwrap_err();
            assert!(err.to_string().contains("at least 1"), "{err}");
        }
    }

    #[test]
    fn rejection_sampling_gives_up_with_an_error() {
        let cfg = SimConfig { n_obs: 10, ..SimConfig::default() };
        let mut rng = ChaCha20Rng::seed_from_u64(0);
        // Fewer attempts than rows can never succeed.
        let err = draw_private(&mut rng, &cfg, 0, 9).unwrap_err();
        assert!(err.to_string().contains("rejection sampling"), "{err}");
        let mut rng = ChaCha20Rng::seed_from_u64(0);
        let (x, y) = draw_private(&mut rng, &cfg, 1, 10_000).unwrap();
        assert_eq!((x.len(), y.len()), (10, 10));
    }
}
