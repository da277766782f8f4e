//! The settings a party runs under, as types: which combiner folds the answers in
//! ([`CombinerKind`]), whether a querier guards its model against them ([`AnswerGuard`]), and
//! how its own answers are privatised ([`DpMode`], [`ReleasePolicy`], [`DpConfig`]), with the
//! checks that refuse combinations that have no meaning or no proof. It imports no model code:
//! the combiner, the readings and the responder all read these types, and none of them is
//! read back from here.

use crate::CotrainError;
use crate::answer::Uncertainty;
use crate::error::Conflict;
use crate::release_model::{DEFAULT_RELEASE_THETA, PublicTheta, QueryPolicy, ReleaseForm, ThetaPolicy};
use dpcotrain_privacy::CapRule;
use dpcotrain_privacy::LabelRange;
use dpcotrain_privacy::NoiseScale;
use dpcotrain_privacy::RankRule;
use dpcotrain_privacy::calibrate::{Mechanism, THESIS_MULTIPLIER, calibrate};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum CombinerKind {
    Blocky,
    Noisy,
    Hybrid,
}

crate::named_enum!(CombinerKind, "combiner", [Blocky, Noisy, Hybrid]);

impl CombinerKind {
    pub fn name(self) -> &'static str {
        match self {
            CombinerKind::Blocky => "blocky",
            CombinerKind::Noisy => "noisy",
            CombinerKind::Hybrid => "hybrid",
        }
    }
    /// Whether the combiner needs the responder's prior covariance rows.
    pub fn needs_prior(self) -> bool {
        !matches!(self, CombinerKind::Noisy)
    }
}

/// Whether a querier checks answers against its own labels before using them
/// ([`CoModel::set_guard`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum AnswerGuard {
    /// Answers are always folded in.
    Off,
    /// After each re-fit, answers are set aside (kept, unused) when they make the private rows'
    /// leave-one-out squared error larger than the private-only model's.
    Loo,
    /// As `Loo`, but answers are set aside only when they make the private rows' leave-one-out
    /// squared error larger beyond two standard errors of the change, paired over the rows: a
    /// change the private rows cannot tell from noise (as where answers fall in regions without
    /// private rows) keeps the answers.
    LooTest,
}

impl AnswerGuard {
    pub fn name(self) -> &'static str {
        match self {
            AnswerGuard::Off => "off",
            AnswerGuard::Loo => "loo",
            AnswerGuard::LooTest => "loo-test",
        }
    }
}

crate::named_enum!(AnswerGuard, "answer guard", [Off, Loo, LooTest]);

/// How answers are privatised.
#[derive(Debug, Clone, PartialEq)]
pub enum DpMode {
    Off,
    /// Thomas 2017 reproduction: σ = multiplier (Δ taken as 1); NO formal guarantee.
    Thesis {
        multiplier: f64,
    },
    /// Calibrated label DP: Δ from the responder's model, σ for (ε, δ) per release, budget
    /// (ε, δ) per requester.
    Calibrated {
        epsilon: f64,
        delta: f64,
        mechanism: Mechanism,
        range: LabelRange,
        budget_epsilon: f64,
    },
}

impl DpMode {
    /// The noise sd σ of one release with L2 sensitivity `sensitivity` at this mode's (ε, δ)
    /// and mechanism: the one place ε turns into σ (Balle & Wang 2018 for the analytic
    /// mechanism). `None` unless the mode is calibrated; σ for Δ = 1 gives the release's GDP
    /// μ = 1/σ₁ and its ρ = μ²/2.
    pub fn calibrated_sigma(&self, sensitivity: f64) -> Result<Option<f64>, CotrainError> {
        match self {
            DpMode::Calibrated { epsilon, delta, mechanism, .. } => {
                Ok(Some(calibrate(*mechanism, *epsilon, *delta, sensitivity)?.sigma))
            }
            DpMode::Off | DpMode::Thesis { .. } => Ok(None),
        }
    }

    /// This mode's noise scale ([`NoiseScale`]: where ε turns into μ and σ); `None` with DP
    /// off. The thesis mode's is its fixed multiplier (no guarantee).
    pub fn noise_scale(&self) -> Result<Option<NoiseScale>, CotrainError> {
        Ok(match self {
            DpMode::Calibrated { epsilon, delta, mechanism, .. } => Some(NoiseScale::of(*mechanism, *epsilon, *delta)?),
            DpMode::Thesis { multiplier } => Some(NoiseScale::thesis(*multiplier)?),
            DpMode::Off => None,
        })
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReleasePolicy {
    /// Answer from the current co-trained model (the thesis, D8 R).
    PerQuery,
    /// The private-only posterior over the whole pool, released once (one charge per requester).
    ReleaseOnce,
    /// The private-only posterior at the indices a requester asks for: every request with new
    /// indices is one finite release (one charge); indices already released are post-processing.
    Batches,
}

crate::named_enum!(ReleasePolicy, "release policy", [Batches, ReleaseOnce, PerQuery]);

impl ReleasePolicy {
    pub fn name(self) -> &'static str {
        match self {
            ReleasePolicy::PerQuery => "per-query",
            ReleasePolicy::ReleaseOnce => "release-once",
            ReleasePolicy::Batches => "batches",
        }
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct DpConfig {
    pub mode: DpMode,
    pub policy: ReleasePolicy,
    /// D19: add σ²·K to the shared (co)variance to account for the DP noise of the function-space
    /// release (a finite release always reports its σ²).
    pub inflate_variance: bool,
    /// Function-space (RKHS) or finite-dimensional release.
    pub release: ReleaseForm,
    /// Where the release's hyperparameters come from.
    pub theta: ThetaPolicy,
    /// How this party chooses what to ask.
    pub queries: QueryPolicy,
}

/// What the (ε, δ) a node reports means under its configuration.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Guarantee {
    /// DP off: nothing is noised and no ε is claimed.
    Off,
    /// A formal (ε, δ) guarantee for everything the node lets out about its labels.
    Formal,
    /// An ε is computed and charged, but it is not a guarantee; [`Guarantee::why_not`] says why.
    ThesisNoise,
    /// Calibrated noise, but the release's θ is the label-fitted θ̂ (uncounted).
    FittedTheta,
    /// Calibrated noise, but the node's queries are chosen from its label-fitted model.
    AdaptiveQueries,
}

impl Guarantee {
    pub fn is_formal(self) -> bool {
        self == Guarantee::Formal
    }

    /// One line for whoever reads an ε this configuration produced; `None` unless the ε is
    /// computed yet not guaranteed.
    pub fn why_not(self) -> Option<&'static str> {
        match self {
            Guarantee::Off | Guarantee::Formal => None,
            Guarantee::ThesisNoise => {
                Some("thesis mode reproduces Thomas 2017's noise scale: the ε is NOT a privacy guarantee")
            }
            Guarantee::FittedTheta => Some(
                "the release uses the label-fitted θ (policy per-query or release-once, or theta = fitted): the ε covers the means given θ only; θ and the released variances leak labels, uncounted: NOT a guarantee",
            ),
            Guarantee::AdaptiveQueries => Some(
                "queries are chosen by uncertainty sampling on the label-fitted model: the indices leak labels, uncounted: the ε is NOT a guarantee",
            ),
        }
    }
}

impl DpConfig {
    /// What this configuration's ε means (see [`Guarantee`]): formal only for calibrated DP
    /// with a counted θ (public or a charged vote) and label-free queries.
    pub fn guarantee(&self) -> Guarantee {
        match self.mode {
            DpMode::Off => Guarantee::Off,
            DpMode::Thesis { .. } => Guarantee::ThesisNoise,
            DpMode::Calibrated { .. } if !self.theta.is_counted() => Guarantee::FittedTheta,
            DpMode::Calibrated { .. } if !matches!(self.queries, QueryPolicy::Public { .. }) => {
                Guarantee::AdaptiveQueries
            }
            DpMode::Calibrated { .. } => Guarantee::Formal,
        }
    }

    pub fn off() -> Self {
        DpConfig {
            mode: DpMode::Off,
            policy: ReleasePolicy::PerQuery,
            inflate_variance: false,
            release: ReleaseForm::Rkhs,
            theta: ThetaPolicy::Fitted,
            queries: QueryPolicy::Adaptive,
        }
    }

    /// Thomas's reproduction mode (Thomas 2017 §4.2.4): each per-query release adds a GP-prior
    /// sample scaled by [`THESIS_MULTIPLIER`] (0.42); no guarantee is claimed.
    pub fn thesis() -> Self {
        DpConfig { mode: DpMode::Thesis { multiplier: THESIS_MULTIPLIER }, ..DpConfig::off() }
    }

    /// Calibrated label DP (analytic Gaussian mechanism) with (ε, δ) per release, an ε budget
    /// per requester, labels clipped to `range`, and the released variance inflated by σ²K (D19):
    /// the function-space release with the responder's fitted θ — the setting of the earlier
    /// results, whose θ and variances leak uncounted (see [`DpConfig::honest`]).
    pub fn calibrated(epsilon: f64, delta: f64, budget_epsilon: f64, range: LabelRange, policy: ReleasePolicy) -> Self {
        DpConfig {
            mode: DpMode::Calibrated { epsilon, delta, mechanism: Mechanism::Analytic, range, budget_epsilon },
            policy,
            inflate_variance: true,
            ..DpConfig::off()
        }
    }

    /// The honest setting (docs/honest-dp.md): public θ, label-free queries (`per_turn` pool
    /// indices per turn, in one request), and a finite release of the capped private-only
    /// posterior at the requested indices, one charge per batch at (ε, δ), within an ε budget
    /// per requester. Nothing released depends on the labels except the noised means.
    pub fn honest(epsilon: f64, delta: f64, budget_epsilon: f64, range: LabelRange, per_turn: usize) -> Self {
        DpConfig {
            mode: DpMode::Calibrated { epsilon, delta, mechanism: Mechanism::Analytic, range, budget_epsilon },
            policy: ReleasePolicy::Batches,
            inflate_variance: true,
            release: ReleaseForm::Finite { cap: CapRule::auto(), rank: RankRule::auto() },
            theta: ThetaPolicy::Public(DEFAULT_RELEASE_THETA),
            queries: QueryPolicy::Public { per_turn, theta: PublicTheta::default() },
        }
    }

    /// The honest protocol with DP off: the same queries and release model, no noise (the
    /// reference for "share of the non-private gain recovered").
    pub fn honest_protocol_without_dp(per_turn: usize) -> Self {
        DpConfig {
            mode: DpMode::Off,
            policy: ReleasePolicy::Batches,
            inflate_variance: false,
            release: ReleaseForm::Finite { cap: CapRule::None, rank: RankRule::Full },
            theta: ThetaPolicy::Public(DEFAULT_RELEASE_THETA),
            queries: QueryPolicy::Public { per_turn, theta: PublicTheta::default() },
        }
    }

    /// Refuse, under calibrated DP, a combiner that does not discount an answer by its noise
    /// ([`discounts_answer_noise`]); DP off and thesis mode accept every combination.
    pub fn check_combiner(&self, kind: CombinerKind, uncertainty: Uncertainty) -> Result<(), CotrainError> {
        match self.mode {
            DpMode::Calibrated { .. } => discounts_answer_noise(kind, uncertainty),
            _ => Ok(()),
        }
    }

    /// Refuse the answer guard where its verdict would leak: it reads the private labels to
    /// choose the co-trained model, so it is allowed only when that model is never released —
    /// DP off, or a release of the private-only posterior (`batches`, `release-once`). Under
    /// `per-query` the co-trained model itself is released with a sensitivity that assumes a
    /// label-free choice of model.
    pub fn check_guard(&self, guard: AnswerGuard) -> Result<(), CotrainError> {
        if guard != AnswerGuard::Off && !matches!(self.mode, DpMode::Off) && self.policy == ReleasePolicy::PerQuery {
            return Err(Conflict::GuardUnderPerQuery.into());
        }
        Ok(())
    }

    /// Refuse combinations that have no meaning or no proof.
    pub fn validate(&self) -> Result<(), CotrainError> {
        match &self.theta {
            ThetaPolicy::Public(t) => t.validate()?,
            ThetaPolicy::Selected { default, mu } => {
                default.validate()?;
                if !(mu.is_finite() && *mu > 0.0) {
                    return Err(CotrainError::setting("θ selection: its GDP μ", *mu, "be positive and finite"));
                }
                if matches!(self.mode, DpMode::Thesis { .. }) {
                    return Err(Conflict::ThetaSelectionUnderThesis.into());
                }
                if let (DpMode::Calibrated { epsilon, delta, budget_epsilon, .. }, Some(scale)) =
                    (&self.mode, self.mode.noise_scale()?)
                {
                    // The vote and at least one release must fit each requester's budget.
                    let mu_release = scale.release_mu();
                    let need = (mu * mu + mu_release * mu_release).sqrt();
                    let have = NoiseScale::mu_for(*budget_epsilon, *delta)?;
                    if need > have * (1.0 + 1e-9) {
                        return Err(Conflict::ThetaVoteOverBudget {
                            mu: *mu,
                            epsilon: *epsilon,
                            need_epsilon: NoiseScale::epsilon_of(need, *delta),
                            delta: *delta,
                            budget_epsilon: *budget_epsilon,
                        }
                        .into());
                    }
                }
            }
            ThetaPolicy::Fitted => {}
        }
        if let QueryPolicy::Public { per_turn, theta } = &self.queries {
            theta.validate()?;
            if *per_turn == 0 {
                return Err(CotrainError::setting("public queries: per_turn", 0.0, "be at least 1"));
            }
        }
        let finite = matches!(self.release, ReleaseForm::Finite { .. });
        match (self.policy, finite) {
            (ReleasePolicy::PerQuery, true) => {
                return Err(Conflict::FiniteReleasePerQuery.into());
            }
            (ReleasePolicy::PerQuery, false) if self.theta.is_counted() => {
                return Err(Conflict::PublicThetaPerQuery.into());
            }
            (ReleasePolicy::Batches, false) => {
                return Err(Conflict::BatchesNeedFinite.into());
            }
            _ => {}
        }
        if finite && matches!(self.mode, DpMode::Thesis { .. }) {
            return Err(Conflict::ThesisWithFinite.into());
        }
        Ok(())
    }
}

/// Whether `kind` with `uncertainty` discounts an answer by its noise, as calibrated DP needs.
///
/// Calibrated noise is large (its sd is often comparable to the label range), and only the
/// Noisy combiner with marginal or full uncertainty reads an answer's variance, which carries
/// the DP noise variance: Blocky and uncertainty `none` ignore it, and Hybrid's predictive mean
/// does not depend on it (docs/results.md). With those the noise enters as if it were data, and
/// a party's test RMSE can grow several-fold (CCPP, 400 rows, release-once at ε = 1: 1.10 → 3.95
/// with Hybrid or `none`). The experiment grids still run them, to reproduce the thesis's
/// tables; a node or the demo refuses them under calibrated DP.
pub fn discounts_answer_noise(kind: CombinerKind, uncertainty: Uncertainty) -> Result<(), CotrainError> {
    let why = match (kind, uncertainty) {
        (CombinerKind::Noisy, Uncertainty::Marginal | Uncertainty::Full) => return Ok(()),
        (CombinerKind::Noisy, _) => "uncertainty none ignores each answer's variance",
        (CombinerKind::Blocky, _) => "the blocky combiner ignores each answer's variance",
        (CombinerKind::Hybrid, _) => "the hybrid combiner's predictive mean does not depend on the answers' variance",
    };
    Err(Conflict::IgnoresAnswerNoise { combiner: kind.name(), uncertainty: uncertainty.name(), why }.into())
}

/// What a querier adds to each received answer's reported variance before folding it in
/// (docs/decisions.md D30). An answer is the peer's estimate of E[y | its view], not of the
/// querier's E[y | own view]; without DP it reports only the peer's own small uncertainty about
/// its function, and the answers of one peer are wrong together (docs/results.md, "The second
/// pass: oracles"). The discount reads each answer as a label with at least the added variance
/// as noise. It is a discount, not a calibrated model of the mismatch.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum AnswerDiscount {
    /// A fixed variance in the labels' public standardisation; 0 reads the answers as reported
    /// (the thesis's reading, and the thesis grids' default).
    Fixed(f64),
    /// K times the querier's own private-only fitted noise variance σ²: an answer then weighs at
    /// most 1/K of one of the querier's own labels at the same entity, however small the
    /// variance it reports. It reads the querier's own labels for its own model only, so it
    /// changes nothing the querier releases.
    OwnNoise(f64),
}

/// A node's discount unless its config says otherwise (D30): an answer weighs at most a
/// thirtieth of one of the party's own labels.
pub const DEFAULT_ANSWER_DISCOUNT: AnswerDiscount = AnswerDiscount::OwnNoise(30.0);

impl AnswerDiscount {
    /// The variance added to every answer, given the querier's private-only fitted noise
    /// variance.
    pub fn variance(self, own_noise_variance: f64) -> f64 {
        match self {
            AnswerDiscount::Fixed(v) => v,
            AnswerDiscount::OwnNoise(k) => k * own_noise_variance,
        }
    }

    /// `Ok` for a finite, non-negative variance or factor; the error names both spellings.
    pub fn validate(self) -> Result<(), CotrainError> {
        let x = match self {
            AnswerDiscount::Fixed(v) | AnswerDiscount::OwnNoise(v) => v,
        };
        if x.is_finite() && x >= 0.0 {
            Ok(())
        } else {
            Err(CotrainError::setting(
                "answer discount",
                x,
                "be a variance ≥ 0, or own:K with K ≥ 0 (K times the party's own noise variance)",
            ))
        }
    }
}

impl std::fmt::Display for AnswerDiscount {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            AnswerDiscount::Fixed(v) => write!(f, "{v}"),
            AnswerDiscount::OwnNoise(k) => write!(f, "own:{k}"),
        }
    }
}

impl std::str::FromStr for AnswerDiscount {
    type Err = String;
    /// `"V"` (a fixed variance) or `"own:K"` (K × the querier's own σ²).
    fn from_str(s: &str) -> Result<Self, String> {
        let bad = || format!("{s:?} is not a variance ≥ 0 or own:K (K ≥ 0 times the party's own noise variance)");
        let d = match s.trim().strip_prefix("own:") {
            Some(k) => AnswerDiscount::OwnNoise(k.trim().parse().map_err(|_| bad())?),
            None => AnswerDiscount::Fixed(s.trim().parse().map_err(|_| bad())?),
        };
        d.validate().map_err(|_| bad())?;
        Ok(d)
    }
}

impl serde::Serialize for AnswerDiscount {
    /// A fixed variance as a number, `own:K` as a string.
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            AnswerDiscount::Fixed(v) => s.serialize_f64(*v),
            AnswerDiscount::OwnNoise(_) => s.collect_str(self),
        }
    }
}

impl<'de> serde::Deserialize<'de> for AnswerDiscount {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(serde::Deserialize)]
        #[serde(untagged)]
        enum Raw {
            Number(f64),
            Text(String),
        }
        let parsed = match Raw::deserialize(d)? {
            Raw::Number(v) => {
                let d = AnswerDiscount::Fixed(v);
                // The same words as a string spelling gets (`FromStr`).
                d.validate().map(|()| d).map_err(|_| {
                    format!("{v} is not a variance ≥ 0 or own:K (K ≥ 0 times the party's own noise variance)")
                })
            }
            Raw::Text(t) => t.parse(),
        };
        parsed.map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sigma_comes_from_one_place_and_only_when_calibrated() {
        let range = LabelRange::new(-3.0, 3.0).unwrap();
        let dp = DpConfig::honest(1.0, 1e-5, 1.0, range, 25);
        let direct = calibrate(Mechanism::Analytic, 1.0, 1e-5, 2.5).unwrap().sigma;
        assert_eq!(dp.mode.calibrated_sigma(2.5).unwrap(), Some(direct));
        assert_eq!(DpConfig::off().mode.calibrated_sigma(2.5).unwrap(), None);
        assert_eq!(DpMode::Thesis { multiplier: 0.42 }.calibrated_sigma(2.5).unwrap(), None);
        // A sensitivity the calibration refuses is an error, not a silent σ.
        assert!(dp.mode.calibrated_sigma(f64::NAN).is_err());
    }

    /// D30's discount: parsed from "V" or "own:K", refused with the spelling it needs, and
    /// turned into a variance by the party's own σ² only for own:K.
    #[test]
    fn answer_discount_parses_validates_and_scales() {
        let d: AnswerDiscount = "own:30".parse().unwrap();
        assert_eq!(d, AnswerDiscount::OwnNoise(30.0));
        assert_eq!(d.variance(0.2), 30.0 * 0.2);
        assert_eq!(d.to_string(), "own:30");
        let f: AnswerDiscount = "3".parse().unwrap();
        assert_eq!((f, f.variance(0.2)), (AnswerDiscount::Fixed(3.0), 3.0));
        assert_eq!(" 0 ".parse::<AnswerDiscount>().unwrap().variance(5.0), 0.0);
        for bad in ["-1", "own:-1", "own:", "own:nan", "inf", "lots", ""] {
            let e = bad.parse::<AnswerDiscount>().unwrap_err();
            assert!(e.contains("own:K") && e.contains(bad.trim()), "{bad}: {e}");
        }
        assert_eq!(DEFAULT_ANSWER_DISCOUNT, AnswerDiscount::OwnNoise(30.0));
    }
}
