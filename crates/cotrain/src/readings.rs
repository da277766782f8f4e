//! Readings of the protocol choices that Thomas 2017 ch. 4 leaves ambiguous (docs/decisions.md
//! D25; docs/results.md, "Readings of the protocol"). Each is a switch whose default is the
//! project's reading (for `fit_starts` and `unseen_covariates` since D38 and D39); [`Readings::thesis`] is the combination that reproduces
//! the thesis's tables best (the `--reading thesis` preset of `dpcotrain-lab experiment`).
//!
//! | key | default | other reading | where it acts |
//! |---|---|---|---|
//! | `answer_source` | `cotrained` | `private` | what a responder answers from (per-query) |
//! | `blocky_theta` | `responder` | `querier` | whose θ the Blocky query block K₂^q uses (eq 4.6) |
//! | `thesis_noise` | `per-requester-path` | `fresh-per-query` | the thesis DP noise (§4.4.1) |
//! | `hybrid` | `joint` | `yu` | where Hybrid puts the noise (eqs 4.9–4.10; Yu et al. 2007) |
//! | `shared_variance` | `latent` | `y` | which variance an answer carries (§4.2.3) |
//! | `fit_starts` | `fixed-4` (D38) | `single`, `best-of-K` | starts of the private-only fit (App. C) |
//! | `selection_variance` | `clamped` | `raw` | the variance uncertainty sampling ranks (§4.2.1) |
//! | `unseen_covariates` | `drop` (D39) | `free`, `median` | a covariate constant on the labelled rows |

use crate::CotrainError;
use crate::error::Conflict;
use crate::settings::{CombinerKind, DpConfig, DpMode, ReleasePolicy};
use serde::{Deserialize, Serialize};

/// Which model a responder answers a per-query request from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum AnswerSource {
    /// The responder's current co-trained (augmented) model (D8 R; default). With Blocky, a
    /// model that has absorbed the querier's earlier answers feeds them back.
    #[default]
    Cotrained,
    /// The responder's private-only model (its private rows, its private fit's θ): Thomas 2017
    /// §4.2.1 has each party answer "with its GP", which we read as the model of its own data.
    Private,
}

impl AnswerSource {
    pub fn name(self) -> &'static str {
        match self {
            AnswerSource::Cotrained => "cotrained",
            AnswerSource::Private => "private",
        }
    }
}

crate::named_enum!(AnswerSource, "answer source", [Cotrained, Private]);

/// Whose hyperparameters the Blocky query block K₂(X₂^q, X₂^q; θ) is evaluated with.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum BlockyTheta {
    /// The responder's own θ₂ (the block is the responder's reported prior covariance; default).
    #[default]
    Responder,
    /// The querier's θ₁, as Thomas 2017 eq 4.6 is printed: K₂(X₂^q, X₂^q; θ₁). The responder
    /// evaluates its kernel on its own covariates with the querier's θ₁ at the time of asking,
    /// which needs both views to have the same number of kernel parameters (same dimension).
    /// The wire protocol does not carry θ₁, so only the in-process driver supports it.
    Querier,
}

impl BlockyTheta {
    pub fn name(self) -> &'static str {
        match self {
            BlockyTheta::Responder => "responder",
            BlockyTheta::Querier => "querier",
        }
    }
}

crate::named_enum!(BlockyTheta, "blocky theta", [Responder, Querier]);

/// How the thesis DP mode (σ = 0.42·s, no guarantee) draws its noise.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum ThesisNoise {
    /// One GP-prior noise path per requester, read off at every released index (D9 R; default):
    /// later answers are correlated with earlier ones through the path.
    #[default]
    PerRequesterPath,
    /// An independent draw per request, with the same sd (Thomas 2017 §4.4.1: "scaled samples
    /// … added to the communicated predictive mean").
    FreshPerQuery,
}

impl ThesisNoise {
    pub fn name(self) -> &'static str {
        match self {
            ThesisNoise::PerRequesterPath => "per-requester-path",
            ThesisNoise::FreshPerQuery => "fresh-per-query",
        }
    }
}

crate::named_enum!(ThesisNoise, "thesis noise", [PerRequesterPath, FreshPerQuery]);

/// Where the Hybrid combiner puts the noise (docs/hybrid-yu.md).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum HybridForm {
    /// All noise inside the augmented precision: K_aug⁻¹ = (K₁ + σ₁²I)⁻¹ + E_Q C₂⁻¹ E_Qᵀ
    /// (Thomas 2017 eq 4.9 with the noise in K₁'s block; default). C₂ then cancels from the
    /// predictive at new points.
    #[default]
    Joint,
    /// Yu et al. 2007's placement: view covariances combined inside the inverse, the output
    /// noise Ψ(y, f_c) = N(y | f_c, σ₁²I) outside: K_aug = (K₁⁻¹ + E_Q C₂⁻¹ E_Qᵀ)⁻¹ + σ₁²I.
    Yu,
}

impl HybridForm {
    pub fn name(self) -> &'static str {
        match self {
            HybridForm::Joint => "joint",
            HybridForm::Yu => "yu",
        }
    }
}

crate::named_enum!(HybridForm, "hybrid form", [Joint, Yu]);

/// Which variance a responder shares (marginal and full uncertainty).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum SharedVariance {
    /// The latent predictive (co)variance of f₂ (default).
    #[default]
    Latent,
    /// The predictive (co)variance of y₂ (latent plus the responder's noise variance σ₂²):
    /// Thomas 2017 §4.2.3 writes Var(y₂^pred).
    Y,
}

impl SharedVariance {
    pub fn name(self) -> &'static str {
        match self {
            SharedVariance::Latent => "latent",
            SharedVariance::Y => "y",
        }
    }
}

crate::named_enum!(SharedVariance, "shared variance", [Latent, Y]);

/// Which variance uncertainty sampling ranks the pool by.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum SelectionVariance {
    /// The clamped predictive variance (default). Blocky's variance is often negative (its
    /// train- and test-time kernels differ), and every clamped zero ties, so the choice falls
    /// to the lowest pool index.
    #[default]
    Clamped,
    /// The raw (unclamped) variance: among negative variances the least negative wins.
    Raw,
}

impl SelectionVariance {
    pub fn name(self) -> &'static str {
        match self {
            SelectionVariance::Clamped => "clamped",
            SelectionVariance::Raw => "raw",
        }
    }
}

crate::named_enum!(SelectionVariance, "selection variance", [Clamped, Raw]);

/// The length-scale of a covariate that is constant on the party's own labelled rows (a masked
/// party that has seen one value of a category). Those rows cannot tell how fast the function
/// varies along it: fitted freely, the private fit leaves it wherever its winning start put it,
/// and the D5 re-fit sets it from the answers alone, though a peer that does not see the
/// covariate answers flat along it whatever the truth (docs/results.md, "The twelfth pass").
/// Dropped (the default since the thirteenth pass, D39), co-training cannot move it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum UnseenCovariates {
    /// Fitted like any other (the default before D39).
    Free,
    /// Held, in the private fit and in every re-fit, at the median-heuristic length-scale √(2D)
    /// for a view of D standardised covariates (the release's public unit, D32).
    Median,
    /// Held, in the private fit and in every re-fit, at the length-scale's upper bound: the
    /// covariate is dropped, as a zero-variance column is dropped before any fit (Kuhn & Johnson
    /// 2013, §3.5), and a value the party has never seen is read as the one it has (default, D39).
    #[default]
    Drop,
}

impl UnseenCovariates {
    /// What this setting does with such a covariate, for a node's warning about one.
    pub fn effect(self) -> &'static str {
        match self {
            UnseenCovariates::Drop => {
                "model.readings.unseen_covariates = \"drop\" (the default) reads every value as the one seen, and co-training cannot change that"
            }
            UnseenCovariates::Free => {
                "model.readings.unseen_covariates = \"free\": peers' answers set how much it matters (docs/decisions.md D39)"
            }
            UnseenCovariates::Median => {
                "model.readings.unseen_covariates = \"median\" holds its length-scale at the median heuristic's"
            }
        }
    }

    pub fn is_default(&self) -> bool {
        *self == UnseenCovariates::default()
    }

    pub fn name(self) -> &'static str {
        match self {
            UnseenCovariates::Free => "free",
            UnseenCovariates::Median => "median",
            UnseenCovariates::Drop => "drop",
        }
    }
}

crate::named_enum!(UnseenCovariates, "unseen covariates", [Free, Median, Drop]);

/// How the private-only fit starts (the "before" model of Thomas 2017 App. C, Table C.1).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum FitStarts {
    /// One L-BFGS run from the GPy default start s² = ℓ = σ² = 1.
    Single,
    /// The best of K runs: the default start (s² = Var(y), ℓ = 1, σ² = 0.1·Var(y); D17) and K − 1
    /// seeded random restarts. The restarts are drawn from the party's seed, so the private fit
    /// (every "alone" figure) depends on it: the default until D38.
    BestOf(usize),
    /// The best of K runs from the default start and K − 1 restarts drawn from one fixed stream
    /// ([`PRIVATE_FIT_SEED`]), whatever the party's seed: the private fit depends on the data
    /// alone. Default K = 4 (D38).
    Fixed(usize),
}

/// The stream the restarts of a [`FitStarts::Fixed`] private fit are drawn from.
pub const PRIVATE_FIT_SEED: u64 = 0x5EED_A10E;

impl Default for FitStarts {
    /// Four starts, the restarts from the fixed stream (D38): a party's "alone" baseline is the
    /// same whatever its seed.
    fn default() -> Self {
        FitStarts::Fixed(4)
    }
}

impl FitStarts {
    /// Extra random restarts of the private fit (0 for a single start).
    pub fn restarts(self) -> usize {
        match self {
            FitStarts::Single => 0,
            FitStarts::BestOf(k) | FitStarts::Fixed(k) => k - 1,
        }
    }

    /// The seed of the restarts: the party's, or the fixed stream.
    pub fn seed(self, party_seed: u64) -> u64 {
        match self {
            FitStarts::Fixed(_) => PRIVATE_FIT_SEED,
            FitStarts::Single | FitStarts::BestOf(_) => party_seed,
        }
    }
}

impl std::fmt::Display for FitStarts {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            FitStarts::Single => f.write_str("single"),
            FitStarts::BestOf(k) => write!(f, "best-of-{k}"),
            FitStarts::Fixed(k) => write!(f, "fixed-{k}"),
        }
    }
}

impl std::str::FromStr for FitStarts {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s.trim() {
            "single" => Ok(FitStarts::Single),
            other => match (
                other.strip_prefix("best-of-").map(str::parse::<usize>),
                other.strip_prefix("fixed-").map(str::parse::<usize>),
            ) {
                (Some(Ok(k)), _) if k >= 1 => Ok(FitStarts::BestOf(k)),
                (_, Some(Ok(k))) if k >= 1 => Ok(FitStarts::Fixed(k)),
                _ => Err(format!("fit starts {s:?} is not single, best-of-K or fixed-K with K ≥ 1")),
            },
        }
    }
}

crate::serde_via_str!(FitStarts);

/// The named combinations of readings (`--reading`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum ReadingPreset {
    /// Every switch at its default (the project's reading).
    #[default]
    Default,
    /// [`Readings::thesis`].
    Thesis,
}

impl ReadingPreset {
    pub fn name(self) -> &'static str {
        match self {
            ReadingPreset::Default => "default",
            ReadingPreset::Thesis => "thesis",
        }
    }

    pub fn readings(self) -> Readings {
        match self {
            ReadingPreset::Default => Readings::default(),
            ReadingPreset::Thesis => Readings::thesis(),
        }
    }
}

crate::named_enum!(ReadingPreset, "reading preset", [Default, Thesis]);

/// One value per ambiguous protocol choice. Serialised as a table of the keys above; a missing
/// key takes its default, an unknown key is refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Readings {
    pub answer_source: AnswerSource,
    pub blocky_theta: BlockyTheta,
    pub thesis_noise: ThesisNoise,
    pub hybrid: HybridForm,
    pub shared_variance: SharedVariance,
    pub fit_starts: FitStarts,
    pub selection_variance: SelectionVariance,
    /// Written only when not the default (`drop`), so every grid.json and config written before
    /// the key existed is reproduced byte for byte and reads as `drop`. Those files were run with
    /// `free`, which gives the same numbers unless a covariate is constant on a party's rows (the
    /// grids' simulated and CCPP views have none).
    #[serde(skip_serializing_if = "UnseenCovariates::is_default")]
    pub unseen_covariates: UnseenCovariates,
}

impl Readings {
    /// The combination that reproduces Thomas 2017's tables best on our re-runs
    /// (docs/results.md, "Readings of the protocol"): answers from the private model, a fresh
    /// noise draw per query, the y-variance shared, a single GPy-style start and the raw variance
    /// for uncertainty sampling. Two readings stay at their defaults because the re-runs favour
    /// them: `blocky_theta = responder` (with θ₁ in K₂, Blocky's mean falls to about half the
    /// thesis's) and `hybrid = joint` (Yu et al.'s placement moves Hybrid away from Tables 4.3 and
    /// 4.8 and makes it beat Noisy under DP, against the thesis).
    pub fn thesis() -> Self {
        Readings {
            answer_source: AnswerSource::Private,
            blocky_theta: BlockyTheta::Responder,
            thesis_noise: ThesisNoise::FreshPerQuery,
            hybrid: HybridForm::Joint,
            shared_variance: SharedVariance::Y,
            fit_starts: FitStarts::Single,
            selection_variance: SelectionVariance::Raw,
            // The product's value: the thesis's views have no covariate constant on a party's
            // rows, where `free` and `drop` agree, and the preset's files stay as they were.
            unseen_covariates: UnseenCovariates::Drop,
        }
    }

    /// Whether every switch is at its default.
    pub fn is_default(&self) -> bool {
        *self == Readings::default()
    }

    /// Refuse readings that do not apply to this DP setting, naming the key.
    ///
    /// - `thesis_noise = fresh-per-query` changes the thesis mode only: under calibrated DP each
    ///   new path is a charged release, and the accounting stays as it is.
    /// - `answer_source = private` and `shared_variance = y` act on per-query answers (release-once
    ///   and batches already release the private-only posterior with its own variances); under
    ///   calibrated DP the per-query sensitivity is of the co-trained model, so `private` is
    ///   refused there.
    pub fn check(&self, dp: &DpConfig) -> Result<(), CotrainError> {
        let calibrated = matches!(dp.mode, DpMode::Calibrated { .. });
        if let FitStarts::BestOf(0) | FitStarts::Fixed(0) = self.fit_starts {
            return Err(CotrainError::setting("readings.fit_starts: K of best-of-K and fixed-K", 0.0, "be at least 1"));
        }
        if self.thesis_noise == ThesisNoise::FreshPerQuery && calibrated {
            return Err(Conflict::FreshNoiseUnderCalibrated.into());
        }
        if self.answer_source == AnswerSource::Private && calibrated && dp.policy == ReleasePolicy::PerQuery {
            return Err(Conflict::PrivateSourceUnderPerQuery.into());
        }
        if (self.answer_source != AnswerSource::Cotrained || self.shared_variance != SharedVariance::Latent)
            && dp.policy != ReleasePolicy::PerQuery
        {
            return Err(Conflict::ReadingsNeedPerQuery { policy: dp.policy.name() }.into());
        }
        Ok(())
    }

    /// Refuse `blocky_theta = querier` where the views' kernels have different numbers of
    /// parameters (θ₁ cannot be evaluated on the responder's covariates).
    pub fn check_views(&self, kind: CombinerKind, dims: &[usize]) -> Result<(), CotrainError> {
        if self.blocky_theta == BlockyTheta::Querier
            && kind == CombinerKind::Blocky
            && let Some((&first, rest)) = dims.split_first()
            && let Some(other) = rest.iter().find(|&&d| d != first)
        {
            return Err(Conflict::QuerierThetaDims { first, other: *other }.into());
        }
        Ok(())
    }
}

impl std::fmt::Display for Readings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "answer_source={} blocky_theta={} thesis_noise={} hybrid={} shared_variance={} fit_starts={} selection_variance={}",
            self.answer_source,
            self.blocky_theta,
            self.thesis_noise,
            self.hybrid,
            self.shared_variance,
            self.fit_starts,
            self.selection_variance
        )?;
        if !self.unseen_covariates.is_default() {
            write!(f, " unseen_covariates={}", self.unseen_covariates)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn readings_parse_round_trip_and_refuse_unknown_keys() {
        let r = Readings::thesis();
        let json = serde_json::to_string(&r).unwrap();
        assert_eq!(serde_json::from_str::<Readings>(&json).unwrap(), r);
        assert_eq!(serde_json::from_str::<Readings>("{}").unwrap(), Readings::default());
        let err = serde_json::from_str::<Readings>(r#"{"hybrid": "yuu"}"#).unwrap_err().to_string();
        assert!(err.contains("hybrid form") && err.contains("yuu"), "{err}");
        let err = serde_json::from_str::<Readings>(r#"{"hybird": "yu"}"#).unwrap_err().to_string();
        assert!(err.contains("hybird"), "{err}");
        for (s, want) in
            [("single", FitStarts::Single), ("best-of-4", FitStarts::BestOf(4)), ("fixed-8", FitStarts::Fixed(8))]
        {
            assert_eq!(s.parse::<FitStarts>().unwrap(), want);
            assert_eq!(want.to_string(), s);
        }
        for bad in ["best-of-0", "best-of-x", "two", "fixed-0", "fixed-"] {
            assert!(bad.parse::<FitStarts>().unwrap_err().contains("single, best-of-K or fixed-K"), "{bad}");
        }
        assert_eq!(FitStarts::default().restarts(), 3, "the default is the D17 private fit: 3 restarts");
        assert_eq!(
            FitStarts::default().seed(7),
            PRIVATE_FIT_SEED,
            "D38: the restarts do not come from the party's seed"
        );
        assert!(Readings::default().is_default() && !Readings::thesis().is_default());
    }

    #[test]
    fn readings_that_do_not_apply_are_refused_naming_the_key() {
        let cal = DpConfig::calibrated(
            1.0,
            1e-5,
            1.0,
            dpcotrain_privacy::sensitivity::LabelRange::new(-3.0, 3.0).unwrap(),
            ReleasePolicy::PerQuery,
        );
        let fresh = Readings { thesis_noise: ThesisNoise::FreshPerQuery, ..Readings::default() };
        assert!(fresh.check(&cal).unwrap_err().to_string().contains("readings.thesis_noise"));
        assert!(fresh.check(&DpConfig::off()).is_ok());
        let private = Readings { answer_source: AnswerSource::Private, ..Readings::default() };
        assert!(private.check(&cal).unwrap_err().to_string().contains("readings.answer_source"));
        let once = DpConfig { policy: ReleasePolicy::ReleaseOnce, ..DpConfig::off() };
        assert!(private.check(&once).unwrap_err().to_string().contains("release-once"));
        let q = Readings { blocky_theta: BlockyTheta::Querier, ..Readings::default() };
        assert!(q.check_views(CombinerKind::Blocky, &[1, 1]).is_ok());
        assert!(q.check_views(CombinerKind::Noisy, &[2, 1]).is_ok());
        let err = q.check_views(CombinerKind::Blocky, &[2, 1]).unwrap_err().to_string();
        assert!(err.contains("readings.blocky_theta") && err.contains("2 and 1"), "{err}");
    }
}
