//! What two nodes must agree on before any release (the handshake): protocol version,
//! federation id, the shared pool (a hash of its index list), the public standardisation of y
//! (docs/decisions.md D18) and the privacy policy (privacy mode, release policy, the release
//! terms, ε, δ, label range).

use crate::pb;
use dpcotrain_cotrain::{DpConfig, DpMode, Party, ReleasePolicy};
use dpcotrain_cotrain::{QueryPolicy, ReleaseForm, ThetaPolicy};

#[derive(Debug, Clone, PartialEq)]
pub struct Agreement {
    pub federation_id: String,
    pub pool_hash: String,
    /// Public standardisation of y: y_std = (y − y_mean) / y_scale.
    pub y_mean: f64,
    pub y_scale: f64,
    pub privacy_mode: pb::PrivacyMode,
    pub release_policy: pb::ReleasePolicy,
    /// The release form, θ policy and query policy in canonical form ("" for the thesis-era
    /// function-space release with fitted θ and adaptive queries).
    pub release_terms: String,
    /// Per-release ε and δ (0 when DP is off; ε = the multiplier in thesis mode).
    pub epsilon: f64,
    pub delta: f64,
    pub label_lo: f64,
    pub label_hi: f64,
}

/// FNV-1a (64 bit) of the pool's index list `0\n1\n…(n−1)\n`.
pub fn pool_hash(n: usize) -> String {
    let mut h: u64 = 0xcbf29ce484222325;
    for i in 0..n {
        for b in i.to_string().bytes().chain(std::iter::once(b'\n')) {
            h = (h ^ b as u64).wrapping_mul(0x100000001b3);
        }
    }
    format!("fnv1a64:{h:016x}:{n}")
}

/// "" for the thesis-era settings (function-space release, fitted θ, adaptive queries), else
/// `form/theta=…/queries=…`.
fn release_terms(dp: &DpConfig) -> String {
    let legacy =
        dp.release == ReleaseForm::Rkhs && dp.theta == ThetaPolicy::Fitted && dp.queries == QueryPolicy::Adaptive;
    if legacy {
        return String::new();
    }
    let theta = match &dp.theta {
        ThetaPolicy::Fitted => "fitted".to_string(),
        ThetaPolicy::Public(t) => format!("public({})", t.terms()),
        ThetaPolicy::Selected { default: t, mu } => format!("select({};mu={mu})", t.terms()),
    };
    format!("{}/theta={theta}/queries={}", dp.release.name(), dp.queries.name())
}

fn release_policy_to_pb(p: ReleasePolicy) -> pb::ReleasePolicy {
    match p {
        ReleasePolicy::Batches => pb::ReleasePolicy::Batches,
        ReleasePolicy::ReleaseOnce => pb::ReleasePolicy::ReleaseOnce,
        ReleasePolicy::PerQuery => pb::ReleasePolicy::PerQuery,
    }
}

/// An enum field's name for a message, or its raw value when it is not one this node knows.
fn enum_name<E: TryFrom<i32>>(v: i32, name: impl Fn(E) -> &'static str) -> String {
    E::try_from(v).map_or_else(|_| format!("unknown ({v})"), |e| name(e).to_string())
}

impl Agreement {
    /// The agreement a party's configuration implies.
    pub fn of(party: &Party, federation_id: &str, y_mean: f64, y_scale: f64) -> Self {
        let (mode, epsilon, delta, lo, hi) = match &party.dp().mode {
            DpMode::Off => (pb::PrivacyMode::Off, 0.0, 0.0, 0.0, 0.0),
            DpMode::Thesis { multiplier } => (pb::PrivacyMode::Thesis, *multiplier, 0.0, 0.0, 0.0),
            DpMode::Calibrated { epsilon, delta, range, .. } => {
                (pb::PrivacyMode::Calibrated, *epsilon, *delta, range.lo, range.hi)
            }
        };
        Agreement {
            federation_id: federation_id.into(),
            pool_hash: pool_hash(party.pool_size()),
            y_mean,
            y_scale,
            privacy_mode: mode,
            release_policy: release_policy_to_pb(party.dp().policy),
            release_terms: release_terms(party.dp()),
            epsilon,
            delta,
            label_lo: lo,
            label_hi: hi,
        }
    }

    pub fn to_pb(&self, party: &str) -> pb::HandshakeRequest {
        pb::HandshakeRequest {
            protocol_version: crate::PROTOCOL_VERSION.into(),
            federation_id: self.federation_id.clone(),
            party: party.into(),
            pool_hash: self.pool_hash.clone(),
            y_mean: self.y_mean,
            y_scale: self.y_scale,
            privacy_mode: self.privacy_mode.into(),
            release_policy: self.release_policy.into(),
            release_terms: self.release_terms.clone(),
            epsilon: self.epsilon,
            delta: self.delta,
            label_lo: self.label_lo,
            label_hi: self.label_hi,
        }
    }

    /// Why a peer's handshake disagrees with ours (the first difference), if it does.
    pub fn check(&self, r: &pb::HandshakeRequest) -> Result<(), String> {
        if r.protocol_version != crate::PROTOCOL_VERSION {
            return Err(format!("protocol {} is not {:?}", crate::clip(&r.protocol_version), crate::PROTOCOL_VERSION));
        }
        if r.federation_id != self.federation_id {
            return Err(format!("federation {} is not {:?}", crate::clip(&r.federation_id), self.federation_id));
        }
        if r.pool_hash != self.pool_hash {
            // The hash ends in the pool's size: say that in rows where it is the difference.
            let rows = |h: &str| h.rsplit_once(':').and_then(|(_, n)| n.parse::<usize>().ok());
            return Err(match (rows(&r.pool_hash), rows(&self.pool_hash)) {
                (Some(there), Some(here)) if there != here => format!(
                    "the pool has {there} rows there and {here} here: every party's pool.csv must list the same entities in the same order"
                ),
                _ => format!("pool {} is not ours ({})", crate::clip(&r.pool_hash), self.pool_hash),
            });
        }
        let same = |a: f64, b: f64| a == b || (a - b).abs() <= 1e-12 * a.abs().max(b.abs());
        if !same(r.y_mean, self.y_mean) || !same(r.y_scale, self.y_scale) {
            return Err(format!(
                "y standardisation (mean {}, scale {}) is not ours (mean {}, scale {})",
                r.y_mean, r.y_scale, self.y_mean, self.y_scale
            ));
        }
        if r.privacy_mode != i32::from(self.privacy_mode)
            || r.release_policy != i32::from(self.release_policy)
            || r.release_terms != self.release_terms
            || !same(r.epsilon, self.epsilon)
            || !same(r.delta, self.delta)
            || !same(r.label_lo, self.label_lo)
            || !same(r.label_hi, self.label_hi)
        {
            return Err(format!(
                "privacy policy {}/{} {} ε={} δ={} labels [{}, {}] is not ours ({}/{} {:?} ε={} δ={} labels [{}, {}])",
                enum_name(r.privacy_mode, |e: pb::PrivacyMode| e.as_str_name()),
                enum_name(r.release_policy, |e: pb::ReleasePolicy| e.as_str_name()),
                crate::clip(&r.release_terms),
                r.epsilon,
                r.delta,
                r.label_lo,
                r.label_hi,
                self.privacy_mode.as_str_name(),
                self.release_policy.as_str_name(),
                self.release_terms,
                self.epsilon,
                self.delta,
                self.label_lo,
                self.label_hi
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn a() -> Agreement {
        Agreement {
            federation_id: "f".into(),
            pool_hash: pool_hash(250),
            y_mean: 0.0,
            y_scale: 1.0,
            privacy_mode: pb::PrivacyMode::Calibrated,
            release_policy: pb::ReleasePolicy::ReleaseOnce,
            release_terms: String::new(),
            epsilon: 1.0,
            delta: 1e-5,
            label_lo: -3.0,
            label_hi: 3.0,
        }
    }

    #[test]
    fn every_field_is_checked() {
        let ours = a();
        assert!(ours.check(&ours.to_pb("B")).is_ok());
        assert_ne!(pool_hash(250), pool_hash(251));
        type Change = Box<dyn Fn(&mut pb::HandshakeRequest)>;
        let cases: Vec<(Change, &str)> = vec![
            (Box::new(|r| r.protocol_version = "dpcotrain.v0".into()), "protocol"),
            (Box::new(|r| r.federation_id = "g".into()), "federation"),
            (Box::new(|r| r.pool_hash = pool_hash(10)), "pool"),
            (Box::new(|r| r.y_scale = 2.0), "standardisation"),
            (Box::new(|r| r.release_policy = pb::ReleasePolicy::PerQuery.into()), "RELEASE_POLICY_PER_QUERY"),
            (Box::new(|r| r.release_policy = 99), "unknown (99)"),
            (Box::new(|r| r.privacy_mode = pb::PrivacyMode::Off.into()), "PRIVACY_MODE_OFF"),
            (Box::new(|r| r.release_terms = "finite/theta=public(1,1,0.1)/queries=public".into()), "privacy"),
            (Box::new(|r| r.epsilon = 4.0), "privacy"),
            (Box::new(|r| r.label_hi = 5.0), "privacy"),
        ];
        for (change, what) in cases {
            let mut r = ours.to_pb("B");
            change(&mut r);
            let e = ours.check(&r).unwrap_err();
            assert!(e.contains(what), "{e}");
        }
    }

    #[test]
    fn a_pool_of_another_size_is_named_in_rows() {
        let ours = a();
        let mut r = ours.to_pb("B");
        r.pool_hash = pool_hash(240);
        let e = ours.check(&r).unwrap_err();
        assert!(e.contains("240 rows there and 250 here") && e.contains("pool.csv") && !e.contains("fnv1a64"), "{e}");
        // The same size but another index list (not one this version makes): the hashes.
        r.pool_hash = "fnv1a64:0000000000000000:250".into();
        assert!(ours.check(&r).unwrap_err().contains("is not ours"));
    }
}
