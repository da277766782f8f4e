//! One way to spell a fieldless enum in configs, on the command line and on the wire. Each
//! enum keeps its exhaustive `name()` and lists its variants once with [`named_enum!`](crate::named_enum); parsing
//! (`FromStr`), printing (`Display`) and the error that lists the accepted names all come from
//! that list.

use crate::CotrainError;

/// A spelling that names no variant: the message names what was given and every accepted
/// spelling (the `FromStr` error of every [`Named`] enum, so clap prints it as it is).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{what} {given:?}{} is not {accepted}", if *.cut { "…" } else { "" })]
pub struct UnknownName {
    /// What a value is ("combiner").
    pub what: &'static str,
    /// What was given, cut at 64 characters (`cut` says whether it was).
    pub given: String,
    pub cut: bool,
    /// The accepted spellings, as a list for a reader ("a, b or c").
    pub accepted: String,
}

impl From<UnknownName> for CotrainError {
    fn from(e: UnknownName) -> Self {
        CotrainError::Own(crate::OwnError::Spelling(e))
    }
}

/// A fieldless enum with one spelling per variant.
pub trait Named: Sized + Copy + 'static {
    /// What a value is, for error messages ("combiner").
    const WHAT: &'static str;
    /// Every variant, in the order an error message lists them.
    const ALL: &'static [Self];
    /// The variant's spelling.
    fn spelling(self) -> &'static str;

    /// The variant spelled `s` (surrounding whitespace ignored); otherwise an error that names
    /// what was given (cut at 64 characters: the text may come from a peer) and every accepted
    /// spelling.
    fn from_name(s: &str) -> Result<Self, CotrainError> {
        Ok(Self::parse_name(s)?)
    }

    /// [`Named::from_name`] with the bare [`UnknownName`] as the error (what `FromStr` and
    /// serde report).
    fn parse_name(s: &str) -> Result<Self, UnknownName> {
        let t = s.trim();
        Self::ALL.iter().copied().find(|v| v.spelling() == t).ok_or_else(|| {
            let names: Vec<&str> = Self::ALL.iter().map(|v| v.spelling()).collect();
            let list = match names.split_last() {
                Some((last, rest)) if !rest.is_empty() => format!("{} or {last}", rest.join(", ")),
                _ => names.join(""),
            };
            let given: String = t.chars().take(64).collect();
            UnknownName { what: Self::WHAT, cut: given.len() < t.len(), given, accepted: list }
        })
    }
}

/// `named_enum!(Type, "what", [A, B, C])`: [`Named`] from `Type::name`, plus `FromStr`,
/// `Display` and serde (a string: configs, saved state and reports) through it — so a config
/// with a misspelt value gets the same error, listing the accepted names, as the command line.
#[macro_export]
macro_rules! named_enum {
    ($ty:ident, $what:literal, [$($variant:ident),+ $(,)?]) => {
        impl $crate::named::Named for $ty {
            const WHAT: &'static str = $what;
            const ALL: &'static [Self] = &[$($ty::$variant),+];
            fn spelling(self) -> &'static str {
                self.name()
            }
        }
        impl std::str::FromStr for $ty {
            type Err = $crate::named::UnknownName;
            fn from_str(s: &str) -> Result<Self, $crate::named::UnknownName> {
                <$ty as $crate::named::Named>::parse_name(s)
            }
        }
        impl std::fmt::Display for $ty {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(self.name())
            }
        }
        impl $crate::__serde::Serialize for $ty {
            fn serialize<S: $crate::__serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                s.serialize_str(self.name())
            }
        }
        impl<'de> $crate::__serde::Deserialize<'de> for $ty {
            fn deserialize<D: $crate::__serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                let s = <String as $crate::__serde::Deserialize>::deserialize(d)?;
                <$ty as $crate::named::Named>::parse_name(&s).map_err(<D::Error as $crate::__serde::de::Error>::custom)
            }
        }
    };
}

/// Serde through `Display` and `FromStr` (error: `FromStr`'s message) for types whose text form
/// carries data (`RefitPolicy`'s `every=K`, `DpLabel`'s `calibrated(eps=E,…)`), which
/// [`named_enum!`] — fieldless enums only — cannot spell.
#[macro_export]
macro_rules! serde_via_str {
    ($ty:ty) => {
        impl $crate::__serde::Serialize for $ty {
            fn serialize<S: $crate::__serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                s.collect_str(self)
            }
        }
        impl<'de> $crate::__serde::Deserialize<'de> for $ty {
            fn deserialize<D: $crate::__serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                let s = <String as $crate::__serde::Deserialize>::deserialize(d)?;
                s.parse().map_err(<D::Error as $crate::__serde::de::Error>::custom)
            }
        }
    };
}

#[cfg(test)]
mod tests {
    use super::Named;
    use crate::answer::Uncertainty;
    use crate::combiner::{AnswerForm, AnswerGuard, CombinerKind, RefitTheta, ValueBasis};
    use crate::party::ReleasePolicy;

    fn round_trips<T>()
    where
        T: Named + PartialEq + std::fmt::Debug + std::fmt::Display + serde::Serialize + serde::de::DeserializeOwned,
    {
        for &v in T::ALL {
            assert_eq!(T::from_name(v.spelling()).unwrap(), v);
            assert_eq!(serde_json::from_value::<T>(serde_json::to_value(v).unwrap()).unwrap(), v);
            assert_eq!(T::from_name(&format!("  {} ", v.spelling())).unwrap(), v);
            assert_eq!(v.to_string(), v.spelling());
        }
        let names: std::collections::BTreeSet<&str> = T::ALL.iter().map(|v| v.spelling()).collect();
        assert_eq!(names.len(), T::ALL.len(), "{}: two variants share a spelling", T::WHAT);
        let err = T::from_name("nonsense").unwrap_err().to_string();
        assert!(err.contains("\"nonsense\"") && err.contains(T::WHAT), "{err}");
        for &v in T::ALL {
            assert!(err.contains(v.spelling()), "{err} lacks {}", v.spelling());
        }
    }

    #[test]
    fn every_named_enum_round_trips_and_lists_its_names() {
        round_trips::<CombinerKind>();
        round_trips::<Uncertainty>();
        round_trips::<AnswerForm>();
        round_trips::<AnswerGuard>();
        round_trips::<ReleasePolicy>();
        round_trips::<RefitTheta>();
        round_trips::<ValueBasis>();
        assert_eq!(
            "hybird".parse::<CombinerKind>().unwrap_err().to_string(),
            "combiner \"hybird\" is not blocky, noisy or hybrid"
        );
        // serde (configs, saved state, reports) spells them the same way and refuses the same.
        assert_eq!(serde_json::to_string(&ReleasePolicy::ReleaseOnce).unwrap(), "\"release-once\"");
        assert_eq!(serde_json::from_str::<Uncertainty>("\"full\"").unwrap(), Uncertainty::Full);
        let e = serde_json::from_str::<AnswerGuard>("\"sometimes\"").unwrap_err().to_string();
        assert!(e.contains("answer guard \"sometimes\" is not off, loo or loo-test"), "{e}");
    }
}
