//! What a ledger entry paid for: the typed label of a release.
//!
//! Ledgers on disk and the protocol carry the label as text (`"analytic finite+cap(auto)
//! θ=public"`, `"gaussian vote θ-selection"`, …); in memory it is a [`Spend`]. The text is its
//! [`Display`](std::fmt::Display) form, read back by [`FromStr`](std::str::FromStr), so ledgers
//! written before the type existed load unchanged and a label a peer sends that is not one of
//! these is refused by name.

use crate::PrivacyError;
use crate::calibrate::Mechanism;
use crate::finite::CapRule;
use crate::low_rank::RankRule;
use std::fmt;
use std::str::FromStr;

/// How σ was set from (ε, δ, Δ): [`Mechanism`] without its parameters.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Calibrator {
    Analytic,
    Classic,
    /// σ = multiplier·Δ, no guarantee.
    Thesis,
}

impl Calibrator {
    pub fn name(self) -> &'static str {
        match self {
            Calibrator::Analytic => "analytic",
            Calibrator::Classic => "classic",
            Calibrator::Thesis => "thesis",
        }
    }
}

impl From<Mechanism> for Calibrator {
    fn from(m: Mechanism) -> Self {
        match m {
            Mechanism::Analytic => Calibrator::Analytic,
            Mechanism::Classic => Calibrator::Classic,
            Mechanism::Thesis { .. } => Calibrator::Thesis,
        }
    }
}

/// Where the hyperparameters θ of a finite release came from (the release's θ policy, by name).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ThetaSource {
    /// The responder's label-fitted θ̂ (uncounted).
    Fitted,
    /// Public constants.
    Public,
    /// Chosen by a charged μ-GDP vote ([`crate::select`]).
    Select,
}

impl ThetaSource {
    pub fn name(self) -> &'static str {
        match self {
            ThetaSource::Fitted => "fitted",
            ThetaSource::Public => "public",
            ThetaSource::Select => "select",
        }
    }
}

/// What one release (a ledger entry, or an answer's charge) was. Serialised as its text label.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(into = "String", try_from = "String")]
pub enum Spend {
    /// DP off: nothing calibrated, nothing charged.
    None,
    /// The thesis's reproduction mode: a prior-sample path with σ = multiplier·Δ, no guarantee.
    Thesis,
    /// The RKHS release (Hall, Rinaldo & Wasserman 2013), σ set by `calibrator`. One with the
    /// thesis's multiplier is recorded as [`Spend::Thesis`] (the two read the same, `thesis`).
    Rkhs { calibrator: Calibrator },
    /// The finite release at the asked points (docs/honest-dp.md) with its cap and rank rules.
    Finite { calibrator: Calibrator, cap: CapRule, rank: RankRule, theta: ThetaSource },
    /// The μ-GDP vote that chose θ from the public grid ([`crate::select`]).
    ThetaVote,
    /// ρ a receipt proves was spent before the node's state was rolled back
    /// ([`crate::accountant::Ledger::record_missing`]).
    Restored,
}

const THETA_VOTE: &str = "gaussian vote θ-selection";
const RESTORED: &str = "spend restored from a receipt";

/// The name of a finite release form: `finite`, then `+cap(…)` unless uncapped, then `+rank(…)`
/// unless full.
pub fn finite_form_name(cap: &CapRule, rank: &RankRule) -> String {
    let mut s = "finite".to_string();
    if *cap != CapRule::None {
        s += &format!("+cap({})", cap.name());
    }
    if *rank != RankRule::Full {
        s += &format!("+rank({})", rank.name());
    }
    s
}

impl fmt::Display for Spend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Spend::None => f.write_str("none"),
            Spend::Thesis => f.write_str("thesis"),
            Spend::Rkhs { calibrator } => f.write_str(calibrator.name()),
            Spend::Finite { calibrator, cap, rank, theta } => {
                write!(f, "{} {} θ={}", calibrator.name(), finite_form_name(cap, rank), theta.name())
            }
            Spend::ThetaVote => f.write_str(THETA_VOTE),
            Spend::Restored => f.write_str(RESTORED),
        }
    }
}

/// `(inner)` at the start of `s`: the inner text and the rest.
fn parenthesised(s: &str) -> Option<(&str, &str)> {
    let s = s.strip_prefix('(')?;
    let end = s.find(')')?;
    Some((&s[..end], &s[end + 1..]))
}

fn calibrator(s: &str) -> Option<Calibrator> {
    [Calibrator::Analytic, Calibrator::Classic, Calibrator::Thesis].into_iter().find(|c| c.name() == s)
}

/// A finite-release label, or which part of it could not be read (what it should have been).
fn finite(s: &str) -> Result<Spend, &'static str> {
    let mut words = s.split(' ');
    let (Some(cal), Some(form), Some(theta), None) = (words.next(), words.next(), words.next(), words.next()) else {
        return Err("`<calibrator> finite… θ=<source>`");
    };
    let calibrator = calibrator(cal).ok_or("a calibrator (analytic, classic or thesis) first")?;
    let theta = theta
        .strip_prefix("θ=")
        .and_then(|t| {
            [ThetaSource::Fitted, ThetaSource::Public, ThetaSource::Select].into_iter().find(|s| s.name() == t)
        })
        .ok_or("θ=fitted, θ=public or θ=select last")?;
    let mut rest = form.strip_prefix("finite").ok_or("a release form finite…")?;
    let (mut cap, mut rank) = (CapRule::None, RankRule::Full);
    if let Some(r) = rest.strip_prefix("+cap") {
        let (inner, r) = parenthesised(r).ok_or("a closed +cap(…)")?;
        cap = inner.parse().map_err(|_| "a cap rule inside +cap(…)")?;
        rest = r;
    }
    if let Some(r) = rest.strip_prefix("+rank") {
        let (inner, r) = parenthesised(r).ok_or("a closed +rank(…)")?;
        rank = inner.parse().map_err(|_| "a rank rule inside +rank(…)")?;
        rest = r;
    }
    if !rest.is_empty() {
        return Err("nothing after the release form's +cap(…) and +rank(…)");
    }
    Ok(Spend::Finite { calibrator, cap, rank, theta })
}

impl FromStr for Spend {
    type Err = PrivacyError;
    fn from_str(s: &str) -> Result<Self, PrivacyError> {
        match s {
            "none" => Ok(Spend::None),
            "thesis" => Ok(Spend::Thesis),
            THETA_VOTE => Ok(Spend::ThetaVote),
            RESTORED => Ok(Spend::Restored),
            other => match calibrator(other) {
                Some(c) => Ok(Spend::Rkhs { calibrator: c }),
                None => finite(other).map_err(|why| PrivacyError::Spelling {
                    what: "release label",
                    text: other.to_string(),
                    expected: why,
                }),
            },
        }
    }
}

impl From<Spend> for String {
    fn from(s: Spend) -> String {
        s.to_string()
    }
}

impl TryFrom<String> for Spend {
    type Error = PrivacyError;
    fn try_from(s: String) -> Result<Self, PrivacyError> {
        s.parse()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn all() -> Vec<Spend> {
        let mut v = vec![
            Spend::None,
            Spend::Thesis,
            Spend::ThetaVote,
            Spend::Restored,
            Spend::Rkhs { calibrator: Calibrator::Analytic },
            Spend::Rkhs { calibrator: Calibrator::Classic },
        ];
        for calibrator in [Calibrator::Analytic, Calibrator::Classic, Calibrator::Thesis] {
            for cap in
                [CapRule::None, CapRule::auto(), CapRule::Fixed { eta: 0.5 }, CapRule::Auto { etas: vec![2.0, 0.25] }]
            {
                for rank in
                    [RankRule::Full, RankRule::auto(), RankRule::Fixed { k: 3 }, RankRule::Auto { ks: vec![2, 7] }]
                {
                    for theta in [ThetaSource::Fitted, ThetaSource::Public, ThetaSource::Select] {
                        v.push(Spend::Finite { calibrator, cap: cap.clone(), rank: rank.clone(), theta });
                    }
                }
            }
        }
        v
    }

    #[test]
    fn every_label_reads_back_as_itself() {
        for s in all() {
            let text = s.to_string();
            assert_eq!(text.parse::<Spend>().unwrap(), s, "{text}");
            let json = serde_json::to_string(&s).unwrap();
            assert_eq!(json, format!("{text:?}"));
            assert_eq!(serde_json::from_str::<Spend>(&json).unwrap(), s);
        }
    }

    #[test]
    fn labels_of_earlier_ledgers_load() {
        // Exactly as earlier versions wrote them.
        assert_eq!(
            "analytic finite+cap(auto) θ=public".parse::<Spend>().unwrap(),
            Spend::Finite {
                calibrator: Calibrator::Analytic,
                cap: CapRule::auto(),
                rank: RankRule::Full,
                theta: ThetaSource::Public
            }
        );
        assert_eq!(
            "analytic finite+cap(eta=0.25)+rank(k=5) θ=select".parse::<Spend>().unwrap(),
            Spend::Finite {
                calibrator: Calibrator::Analytic,
                cap: CapRule::Fixed { eta: 0.25 },
                rank: RankRule::Fixed { k: 5 },
                theta: ThetaSource::Select
            }
        );
        assert_eq!("analytic".parse::<Spend>().unwrap(), Spend::Rkhs { calibrator: Calibrator::Analytic });
        assert_eq!("gaussian vote θ-selection".parse::<Spend>().unwrap(), Spend::ThetaVote);
        assert_eq!("spend restored from a receipt".parse::<Spend>().unwrap(), Spend::Restored);
    }

    #[test]
    fn anything_else_is_refused_by_name() {
        for bad in [
            "",
            "laplace",
            "analytic finite θ=secret",
            "analytic finite+cap(auto θ=public",
            "analytic finite+cap(bogus) θ=public",
            "analytic finite+rank(k=0) θ=public",
            "analytic finite+cap(auto)x θ=public",
            "analytic rkhs θ=public",
            "analytic finite θ=public extra",
        ] {
            let err = bad.parse::<Spend>().unwrap_err();
            assert!(
                matches!(&err, PrivacyError::Spelling { what: "release label", text, .. } if text == bad),
                "{bad:?}: {err}"
            );
        }
        assert!(serde_json::from_str::<Spend>("\"laplace\"").is_err());
    }
}
