//! The privacy accountant: every release is a Gaussian mechanism with zCDP cost
//! ρ = Δ²/(2σ²) (Bun & Steinke 2016); costs add under (adaptive) composition; the total is
//! μ-GDP with μ = √(2ρ) (Dong, Roth & Su 2019), converted to (ε, δ) exactly. The
//! Canonne–Kamath–Steinke (2020) zCDP conversion is reported beside it as a cross-check
//! (it is always ≥ the exact value).
//!
//! The ledger refuses a release **before** it would push the total past the budget. Budgets are
//! compared in ρ with an explicit relative tolerance of 1e-9, so that, e.g., ten releases of a
//! tenth of the budget each are all accepted despite floating-point summation
//! (docs/honest-dp.md, "Batches compose"). A retried request (same id) is not charged twice.

use crate::PrivacyError;
use crate::spend::Spend;
use serde::{Deserialize, Serialize};

/// Relative slack when comparing spent ρ with the budget.
pub(crate) const BUDGET_TOLERANCE: f64 = 1e-9;

/// One recorded release.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Release {
    /// Client-chosen request id; a retry with the same id is not charged again.
    pub id: String,
    pub sensitivity: f64,
    pub sigma: f64,
    /// ρ = Δ²/(2σ²).
    pub rho: f64,
    /// What was released (stored as its text label).
    pub mechanism: Spend,
    /// False when σ came from the thesis reproduction mode (no formal guarantee).
    pub guaranteed: bool,
}

/// What a charge did.
#[derive(Debug, Clone, PartialEq)]
pub enum Charge {
    /// A new release, recorded.
    New,
    /// A retry of an already recorded request id: nothing spent.
    Replayed,
}

/// A privacy budget (ε, δ) for the releases about one set of private labels.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Ledger {
    pub epsilon: f64,
    pub delta: f64,
    /// ρ that the budget allows: μ_max²/2 with μ_max the largest GDP μ meeting (ε, δ).
    pub rho_budget: f64,
    pub releases: Vec<Release>,
}

/// ρ of one Gaussian release.
pub fn rho_of(sensitivity: f64, sigma: f64) -> f64 {
    if sensitivity == 0.0 { 0.0 } else { sensitivity * sensitivity / (2.0 * sigma * sigma) }
}

/// Exact (ε) for total zCDP ρ of purely Gaussian releases.
pub fn epsilon_exact(rho: f64, delta: f64) -> f64 {
    crate::NoiseScale::epsilon_of((2.0 * rho).sqrt(), delta)
}

/// δ(ε) from ρ-zCDP via Canonne, Kamath & Steinke 2020 (§2.3):
/// δ = min_{α>1} exp((α−1)(αρ − ε) + α ln(1 − 1/α))/(α − 1). The minimiser solves
/// (2α−1)ρ − ε + ln(1 − 1/α) = 0 (bisection, as OpenDP's `cdp_delta`).
pub(crate) fn cks_delta(rho: f64, epsilon: f64) -> f64 {
    if rho <= 0.0 {
        return 0.0;
    }
    let deriv = |a: f64| (2.0 * a - 1.0) * rho - epsilon + (1.0 - 1.0 / a).ln();
    let (mut lo, mut hi) = (1.01f64, (epsilon + 1.0) / (2.0 * rho) + 2.0);
    if deriv(lo) >= 0.0 {
        hi = lo;
    } else {
        for _ in 0..200 {
            let mid = 0.5 * (lo + hi);
            if deriv(mid) < 0.0 { lo = mid } else { hi = mid }
        }
    }
    let a = hi;
    let log_d = (a - 1.0) * (a * rho - epsilon) + a * (1.0 - 1.0 / a).ln() - (a - 1.0).ln();
    log_d.exp().min(1.0)
}

/// ε from ρ-zCDP with the CKS conversion (bisection on ε, upper end).
pub fn epsilon_cks(rho: f64, delta: f64) -> f64 {
    if rho <= 0.0 {
        return 0.0;
    }
    let mut hi = 1.0;
    while cks_delta(rho, hi) > delta {
        hi *= 2.0;
    }
    let mut lo = 0.0;
    for _ in 0..200 {
        let mid = 0.5 * (lo + hi);
        if cks_delta(rho, mid) > delta { lo = mid } else { hi = mid }
    }
    hi
}

impl Ledger {
    pub fn new(epsilon: f64, delta: f64) -> Result<Self, PrivacyError> {
        if !(epsilon.is_finite() && epsilon > 0.0) {
            return Err(PrivacyError::parameter("budget epsilon", epsilon, "be positive and finite"));
        }
        if !(delta > 0.0 && delta < 1.0) {
            return Err(PrivacyError::parameter("budget delta", delta, "lie strictly between 0 and 1"));
        }
        let mu = crate::NoiseScale::mu_for(epsilon, delta)?;
        Ok(Ledger { epsilon, delta, rho_budget: mu * mu / 2.0, releases: Vec::new() })
    }

    /// Total ρ spent.
    pub fn rho_spent(&self) -> f64 {
        self.releases.iter().map(|r| r.rho).sum()
    }

    pub fn rho_remaining(&self) -> f64 {
        (self.rho_budget - self.rho_spent()).max(0.0)
    }

    /// The exact ε of everything released so far, at the budget's δ.
    pub fn epsilon_spent(&self) -> f64 {
        epsilon_exact(self.rho_spent(), self.delta)
    }

    /// True if any release came from the thesis reproduction mode.
    pub fn has_unguaranteed(&self) -> bool {
        self.releases.iter().any(|r| !r.guaranteed)
    }

    pub fn find(&self, id: &str) -> Option<&Release> {
        self.releases.iter().find(|r| r.id == id)
    }

    /// Would a release of cost `rho` fit? Errors with the numbers if not.
    pub fn check(&self, rho: f64) -> Result<(), PrivacyError> {
        let spent = self.rho_spent();
        if spent + rho > self.rho_budget * (1.0 + BUDGET_TOLERANCE) {
            return Err(crate::BudgetExceeded {
                cost: rho,
                remaining: self.rho_remaining(),
                budget: self.rho_budget,
                epsilon: self.epsilon,
                delta: self.delta,
            }
            .into());
        }
        Ok(())
    }

    /// Record a release, refusing it first if it would exceed the budget. A request id seen
    /// before returns [`Charge::Replayed`] and spends nothing.
    pub fn charge(
        &mut self,
        id: &str,
        sensitivity: f64,
        sigma: f64,
        mechanism: &Spend,
        guaranteed: bool,
    ) -> Result<Charge, PrivacyError> {
        if self.find(id).is_some() {
            return Ok(Charge::Replayed);
        }
        if !(sensitivity.is_finite() && sensitivity >= 0.0) {
            return Err(PrivacyError::parameter("a release's sensitivity Δ", sensitivity, "be finite and ≥ 0"));
        }
        if !(sigma.is_finite() && sigma > 0.0) {
            return Err(PrivacyError::parameter("a release's noise scale σ", sigma, "be finite and positive"));
        }
        let rho = rho_of(sensitivity, sigma);
        self.check(rho)?;
        self.releases.push(Release {
            id: id.to_string(),
            sensitivity,
            sigma,
            rho,
            mechanism: mechanism.clone(),
            guaranteed,
        });
        Ok(Charge::New)
    }

    /// Record ρ that was spent but is missing from this ledger (releases a receipt proves were
    /// made before the node's state was rolled back), without the budget check: it is a fact,
    /// not a request. Recorded as a release with Δ = 1 and σ = 1/√(2ρ), so ρ = Δ²/(2σ²) holds
    /// like every other entry. A repeated id records nothing.
    pub fn record_missing(&mut self, id: &str, rho: f64) -> Result<Charge, PrivacyError> {
        if self.find(id).is_some() {
            return Ok(Charge::Replayed);
        }
        if !(rho.is_finite() && rho > 0.0) {
            return Err(PrivacyError::parameter("missing spend ρ", rho, "be finite and positive"));
        }
        let sigma = (0.5 / rho).sqrt();
        self.releases.push(Release {
            id: id.to_string(),
            sensitivity: 1.0,
            sigma,
            rho: rho_of(1.0, sigma),
            mechanism: Spend::Restored,
            guaranteed: true,
        });
        Ok(Charge::New)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const ANALYTIC: Spend = Spend::Rkhs { calibrator: crate::spend::Calibrator::Analytic };

    #[test]
    fn a_ledger_written_with_text_labels_loads_typed_and_writes_the_same_text() {
        let text = r#"{"epsilon":1.0,"delta":0.00001,"rho_budget":0.01,"releases":[{"id":"theta-selection","sensitivity":1.4142135623730951,"sigma":20.0,"rho":0.0025,"mechanism":"gaussian vote θ-selection","guaranteed":true},{"id":"q1","sensitivity":0.5,"sigma":5.0,"rho":0.005,"mechanism":"analytic finite+cap(auto)+rank(auto) θ=select","guaranteed":true}]}"#;
        let l: Ledger = serde_json::from_str(text).unwrap();
        assert_eq!(l.releases[0].mechanism, Spend::ThetaVote);
        assert!(matches!(l.releases[1].mechanism, Spend::Finite { theta: crate::spend::ThetaSource::Select, .. }));
        assert_eq!(serde_json::to_string(&l).unwrap(), text);
        let unknown = text.replace("gaussian vote", "laplace vote");
        assert!(serde_json::from_str::<Ledger>(&unknown).unwrap_err().to_string().contains("laplace vote"));
    }

    #[test]
    fn conversions_match_the_notes_table() {
        // Reference values (δ = 1e-5): ρ → (CKS ε, exact ε) (Canonne, Kamath & Steinke 2020; Dong, Roth & Su 2019).
        for (rho, cks, exact) in [
            (0.5, 4.7284, 4.3772),
            (0.03125, 1.0123, 0.9263),
            (0.3125, 3.6170, 3.3414),
            (0.05, 1.3081, 1.1994),
            (0.05556, 1.3857, 1.2711),
        ] {
            let e = epsilon_exact(rho, 1e-5);
            let c = epsilon_cks(rho, 1e-5);
            assert!((e - exact).abs() < 2e-4, "ρ={rho}: exact {e} vs {exact}");
            assert!((c - cks).abs() < 2e-4, "ρ={rho}: CKS {c} vs {cks}");
            assert!(c >= e);
        }
    }

    #[test]
    fn ledger_refuses_before_overspending_and_tolerates_rounding() {
        let mut l = Ledger::new(1.0, 1e-5).unwrap();
        // Ten releases of exactly a tenth of the budget are all accepted...
        let sigma = (10.0 / (2.0 * l.rho_budget)).sqrt(); // ρ = 1/(2σ²) = budget/10 with Δ = 1
        for i in 0..10 {
            assert_eq!(l.charge(&format!("q{i}"), 1.0, sigma, &ANALYTIC, true).unwrap(), Charge::New);
        }
        assert!((l.epsilon_spent() - 1.0).abs() < 1e-6, "{}", l.epsilon_spent());
        // ...and the eleventh is refused, leaving the ledger unchanged.
        let err = l.charge("q10", 1.0, sigma, &ANALYTIC, true).unwrap_err();
        assert!(matches!(err, PrivacyError::BudgetExceeded(_)));
        assert_eq!(l.releases.len(), 10);
        // A retry of a recorded id spends nothing, even with the budget exhausted.
        assert_eq!(l.charge("q3", 1.0, sigma, &ANALYTIC, true).unwrap(), Charge::Replayed);
        assert_eq!(l.releases.len(), 10);
        assert!(l.charge("bad", 1.0, 0.0, &ANALYTIC, true).is_err());
        assert!(Ledger::new(0.0, 1e-5).is_err());
    }

    #[test]
    fn single_release_at_the_analytic_sigma_costs_the_whole_budget() {
        let c = crate::calibrate::calibrate(crate::calibrate::Mechanism::Analytic, 1.0, 1e-5, 2.0).unwrap();
        let mut l = Ledger::new(1.0, 1e-5).unwrap();
        l.charge("a", 2.0, c.sigma, &ANALYTIC, true).unwrap();
        assert!(l.epsilon_spent() <= 1.0 + 1e-9);
        assert!(l.epsilon_spent() > 0.999);
        assert!(l.charge("b", 2.0, 1e3, &ANALYTIC, true).is_err());
    }
}
