//! Noise calibration for the Gaussian mechanism: how large σ must be for (ε, δ)-DP given an
//! L2 (or RKHS / Mahalanobis) sensitivity Δ.
//!
//! - [`Mechanism::Analytic`] (default): the smallest σ with δ(ε; σ, Δ) ≤ δ on the exact privacy
//!   curve (Balle & Wang 2018, Thm 8), valid for every ε > 0.
//! - [`Mechanism::Classic`]: σ = c(δ)Δ/ε with c(δ) = √(2 ln(1.25/δ)) (Dwork & Roth Thm A.1),
//!   proven only for ε ≤ 1, so larger ε is refused.
//! - [`Mechanism::Thesis`]: the reproduction mode of Thomas 2017 §4.4 — a fixed noise
//!   multiplier (default 0.42, in units of Δ). It gives **no formal guarantee**: the thesis's
//!   stated (1, 0.00625) would need c(δ) = 3.26, not 0.42 (Dwork & Roth 2014, Thm A.1).

use crate::PrivacyError;
use crate::gaussian::gdp_mu_for;
use serde::{Deserialize, Serialize};

/// The thesis's effective noise multiplier.
pub const THESIS_MULTIPLIER: f64 = 0.42;

#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(tag = "mechanism", rename_all = "lowercase")]
pub enum Mechanism {
    Analytic,
    Classic,
    /// Fixed σ = multiplier·Δ; no (ε, δ) guarantee.
    Thesis {
        multiplier: f64,
    },
}

impl Mechanism {
    pub fn name(&self) -> &'static str {
        match self {
            Mechanism::Analytic => "analytic",
            Mechanism::Classic => "classic",
            Mechanism::Thesis { .. } => "thesis",
        }
    }
}

/// A calibrated noise scale.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Calibration {
    pub sigma: f64,
    pub mechanism: Mechanism,
    pub epsilon: f64,
    pub delta: f64,
    pub sensitivity: f64,
    /// False for the thesis reproduction mode: the (ε, δ) above is then *not* guaranteed.
    pub guaranteed: bool,
}

/// √(2 ln(1.25/δ)).
pub(crate) fn classic_constant(delta: f64) -> f64 {
    (2.0 * (1.25 / delta).ln()).sqrt()
}

/// ε as a privacy parameter: a positive finite number.
pub fn check_epsilon(epsilon: f64) -> Result<f64, PrivacyError> {
    if epsilon.is_finite() && epsilon > 0.0 {
        Ok(epsilon)
    } else {
        Err(PrivacyError::parameter("epsilon", epsilon, "be a positive finite number"))
    }
}

/// δ as a privacy parameter: strictly between 0 and 1.
pub fn check_delta(delta: f64) -> Result<f64, PrivacyError> {
    if delta > 0.0 && delta < 1.0 {
        Ok(delta)
    } else {
        Err(PrivacyError::parameter("delta", delta, "lie strictly between 0 and 1"))
    }
}

/// A command-line ε (`--epsilon 1`), refused at parse time unless [`check_epsilon`] accepts it:
/// a grid given `--epsilon 0` must stop before its first run, not record a failure per run.
pub fn parse_epsilon(text: &str) -> Result<f64, String> {
    let v: f64 = text.trim().parse().map_err(|_| format!("{text:?} is not a number"))?;
    check_epsilon(v).map_err(|e| e.to_string())
}

/// A command-line δ, refused at parse time unless [`check_delta`] accepts it.
pub fn parse_delta(text: &str) -> Result<f64, String> {
    let v: f64 = text.trim().parse().map_err(|_| format!("{text:?} is not a number"))?;
    check_delta(v).map_err(|e| e.to_string())
}

fn check(epsilon: f64, delta: f64, sensitivity: f64) -> Result<(), PrivacyError> {
    check_epsilon(epsilon)?;
    check_delta(delta)?;
    if !(sensitivity.is_finite() && sensitivity >= 0.0) {
        return Err(PrivacyError::parameter("sensitivity", sensitivity, "be finite and ≥ 0"));
    }
    Ok(())
}

/// The noise scale of a Gaussian mechanism: **the one place an ε becomes a μ and a μ or an ε
/// becomes a σ.** Every release (finite, RKHS, per query), the θ vote, the thesis's multiplier
/// and every budget check (the ledger's, the config's, the frontier's split of a cell's budget)
/// go through it, so what a node charges is what its noise was calibrated to.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum NoiseScale {
    /// μ-GDP (Dong, Roth & Su 2019): σ = Δ/μ, and ρ = μ²/2 for the ledger. The analytic
    /// mechanism's (ε, δ) is exactly μ-GDP at μ = [`NoiseScale::mu_for`] (Balle & Wang 2018).
    Gdp { mu: f64 },
    /// σ = c(δ)·Δ/ε with c(δ) = √(2 ln(1.25/δ)) (Dwork & Roth 2014, Thm A.1; ε ≤ 1).
    Classic { epsilon: f64, delta: f64 },
    /// Thomas 2017 §4.4's σ = multiplier·Δ: **no** formal guarantee.
    Thesis { multiplier: f64 },
}

impl NoiseScale {
    /// The largest μ whose Gaussian mechanism is (ε, δ)-DP (bisection on the exact curve): an
    /// (ε, δ) budget, or a vote's ε, as GDP μ.
    pub fn mu_for(epsilon: f64, delta: f64) -> Result<f64, PrivacyError> {
        check_epsilon(epsilon)?;
        check_delta(delta)?;
        Ok(gdp_mu_for(epsilon, delta))
    }

    /// The exact ε of μ-GDP at δ (the inverse of [`NoiseScale::mu_for`]).
    pub fn epsilon_of(mu: f64, delta: f64) -> f64 {
        crate::gaussian::gdp_epsilon(mu, delta)
    }

    /// The scale of one release at (ε, δ) under `mechanism`; checks ε, δ and the mechanism's
    /// own limits (classic: ε ≤ 1; thesis: a positive multiplier).
    pub fn of(mechanism: Mechanism, epsilon: f64, delta: f64) -> Result<NoiseScale, PrivacyError> {
        check_epsilon(epsilon)?;
        check_delta(delta)?;
        match mechanism {
            Mechanism::Analytic => Ok(NoiseScale::Gdp { mu: gdp_mu_for(epsilon, delta) }),
            Mechanism::Classic => {
                if epsilon > 1.0 {
                    return Err(PrivacyError::parameter(
                        "ε of the classic Gaussian mechanism",
                        epsilon,
                        "satisfy ε ≤ 1, where its constant √(2 ln(1.25/δ)) is proven; use the analytic mechanism",
                    ));
                }
                Ok(NoiseScale::Classic { epsilon, delta })
            }
            Mechanism::Thesis { multiplier } => NoiseScale::thesis(multiplier),
        }
    }

    /// The thesis's fixed multiplier (no guarantee).
    pub fn thesis(multiplier: f64) -> Result<NoiseScale, PrivacyError> {
        if !(multiplier.is_finite() && multiplier > 0.0) {
            return Err(PrivacyError::parameter("thesis multiplier", multiplier, "be positive"));
        }
        Ok(NoiseScale::Thesis { multiplier })
    }

    /// σ for L2 sensitivity Δ: the one ε → σ site.
    pub fn sigma(&self, sensitivity: f64) -> f64 {
        match *self {
            NoiseScale::Gdp { mu } => {
                if sensitivity == 0.0 {
                    0.0
                } else {
                    sensitivity / mu
                }
            }
            NoiseScale::Classic { epsilon, delta } => classic_constant(delta) * sensitivity / epsilon,
            NoiseScale::Thesis { multiplier } => multiplier * sensitivity,
        }
    }

    /// The GDP μ of one release at unit sensitivity, 1/σ(1): the finite release's μ and the
    /// ledger's ρ = μ²/2 per release.
    pub fn release_mu(&self) -> f64 {
        1.0 / self.sigma(1.0)
    }

    /// The ρ of one release at unit sensitivity, 1/(2σ(1)²): what the ledger charges for it.
    pub fn release_rho(&self) -> f64 {
        let unit = self.sigma(1.0);
        0.5 / (unit * unit)
    }

    /// Whether the scale carries its (ε, δ) guarantee (the thesis's does not).
    pub fn guaranteed(&self) -> bool {
        !matches!(self, NoiseScale::Thesis { .. })
    }
}

/// σ for (ε, δ) and sensitivity Δ under `mechanism` ([`NoiseScale`]).
pub fn calibrate(
    mechanism: Mechanism,
    epsilon: f64,
    delta: f64,
    sensitivity: f64,
) -> Result<Calibration, PrivacyError> {
    check(epsilon, delta, sensitivity)?;
    let scale = NoiseScale::of(mechanism, epsilon, delta)?;
    Ok(Calibration {
        sigma: scale.sigma(sensitivity),
        mechanism,
        epsilon,
        delta,
        sensitivity,
        guaranteed: scale.guaranteed(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A bad ε, δ or multiplier is a typed error that names the parameter, its value and its
    /// bound — and reads as the one line a user sees.
    #[test]
    fn bad_parameters_are_typed_errors_naming_the_bound() {
        let e = check_epsilon(-1.0).unwrap_err();
        assert_eq!(e, PrivacyError::Parameter { name: "epsilon", value: -1.0, bound: "be a positive finite number" });
        assert_eq!(e.to_string(), "invalid privacy parameter: epsilon must be a positive finite number, got -1");
        let PrivacyError::Parameter { name, value, .. } = check_delta(2.0).unwrap_err() else { panic!("typed") };
        assert_eq!((name, value), ("delta", 2.0));
        assert!(matches!(NoiseScale::thesis(0.0), Err(PrivacyError::Parameter { name: "thesis multiplier", .. })));
    }

    #[test]
    fn command_line_epsilon_and_delta_are_refused_unless_valid() {
        for bad in ["-1", "0", "nan", "NaN", "inf", "-inf", "x", ""] {
            assert!(parse_epsilon(bad).is_err(), "epsilon {bad:?}");
        }
        for bad in ["0", "1", "2", "-0.1", "nan", "inf", "y"] {
            assert!(parse_delta(bad).is_err(), "delta {bad:?}");
        }
        assert_eq!(parse_epsilon(" 0.5").unwrap(), 0.5);
        assert_eq!(parse_delta("1e-5").unwrap(), 1e-5);
        assert!(parse_epsilon("nan").unwrap_err().contains("positive finite"));
    }
    use crate::gaussian::gdp_delta;

    #[test]
    fn analytic_and_classic_test_vectors() {
        // ε = 1, δ = 1e-5, Δ = 1 ⇒ analytic σ ≈ 3.73 (Balle & Wang 2018), classic ≈ 4.84 (√(2 ln(1.25/δ))).
        let a = calibrate(Mechanism::Analytic, 1.0, 1e-5, 1.0).unwrap();
        assert!((a.sigma - 3.73).abs() < 0.005, "{}", a.sigma);
        let c = calibrate(Mechanism::Classic, 1.0, 1e-5, 1.0).unwrap();
        assert!((c.sigma - 4.84).abs() < 0.005, "{}", c.sigma);
        // The analytic σ is tight: δ(σ) ≤ δ and a 0.1% smaller σ violates it.
        assert!(gdp_delta(1.0 / a.sigma, 1.0) <= 1e-5);
        assert!(gdp_delta(1.0 / (a.sigma * 0.999), 1.0) > 1e-5);
        // σ(ε=4) = 1.0812 (the analytic Gaussian mechanism of Balle & Wang 2018 at ε = 4, δ = 1e-5).
        let s4 = calibrate(Mechanism::Analytic, 4.0, 1e-5, 1.0).unwrap().sigma;
        assert!((s4 - 1.0812).abs() < 5e-4, "{s4}");
        // Linear in Δ.
        let a2 = calibrate(Mechanism::Analytic, 1.0, 1e-5, 2.5).unwrap();
        assert!((a2.sigma - 2.5 * a.sigma).abs() < 1e-9);
    }

    /// The one authority gives the numbers the mechanisms were calibrated with before it
    /// existed, bit for bit (σ = Δ/μ, c(δ)Δ/ε, multiplier·Δ; μ = 1/σ(1); ρ = 1/(2σ(1)²)), and
    /// refuses what they refused.
    #[test]
    fn the_noise_scale_is_each_mechanisms_formula() {
        for (eps, delta) in [(0.25, 1e-5), (1.0, 1e-5), (4.0, 1e-6), (8.0, 1e-3)] {
            let mu = gdp_mu_for(eps, delta);
            let s = NoiseScale::of(Mechanism::Analytic, eps, delta).unwrap();
            assert_eq!(s, NoiseScale::Gdp { mu });
            assert_eq!(NoiseScale::mu_for(eps, delta).unwrap(), mu);
            for d in [0.0, 0.3, 1.0, 2.5] {
                assert_eq!(s.sigma(d).to_bits(), (if d == 0.0 { 0.0 } else { d / mu }).to_bits());
            }
            assert_eq!(s.release_mu(), 1.0 / (1.0 / mu));
            assert_eq!(s.release_rho(), 0.5 / ((1.0 / mu) * (1.0 / mu)));
            assert!((NoiseScale::epsilon_of(mu, delta) - eps).abs() < 1e-9 * eps.max(1.0));
            assert!(s.guaranteed());
        }
        let c = NoiseScale::of(Mechanism::Classic, 0.5, 1e-5).unwrap();
        assert_eq!(c.sigma(2.0).to_bits(), (classic_constant(1e-5) * 2.0 / 0.5).to_bits());
        assert!(NoiseScale::of(Mechanism::Classic, 1.5, 1e-5).is_err());
        let t = NoiseScale::thesis(THESIS_MULTIPLIER).unwrap();
        assert_eq!((t.sigma(1.0), t.guaranteed()), (THESIS_MULTIPLIER, false));
        assert!(NoiseScale::thesis(0.0).is_err() && NoiseScale::thesis(f64::NAN).is_err());
        for (eps, delta) in [(0.0, 1e-5), (f64::INFINITY, 1e-5), (1.0, 0.0), (1.0, 1.0), (f64::NAN, 1e-5)] {
            assert!(NoiseScale::mu_for(eps, delta).is_err(), "({eps}, {delta})");
            assert!(NoiseScale::of(Mechanism::Analytic, eps, delta).is_err(), "({eps}, {delta})");
        }
    }

    #[test]
    fn thesis_mode_is_labelled_and_classic_refuses_large_epsilon() {
        let t = calibrate(Mechanism::Thesis { multiplier: THESIS_MULTIPLIER }, 1.0, 0.00625, 1.0).unwrap();
        assert_eq!(t.sigma, 0.42);
        assert!(!t.guaranteed);
        // What the thesis's stated parameters would really need:
        assert!((classic_constant(0.00625) - 3.2552).abs() < 1e-4);
        assert!(calibrate(Mechanism::Classic, 1.5, 1e-5, 1.0).is_err());
        assert!(calibrate(Mechanism::Analytic, 0.0, 1e-5, 1.0).is_err());
        assert!(calibrate(Mechanism::Analytic, 1.0, 1.0, 1.0).is_err());
        assert!(calibrate(Mechanism::Analytic, 1.0, 1e-5, f64::NAN).is_err());
    }
}
