//! What two nodes must agree on before any release (the handshake): protocol version,
//! federation id, the shared pool (a hash of its index list), the public standardisation of y
//! (docs/decisions.md D18) and the privacy policy (release policy, ε, δ, label range).

use crate::pb;
use dpcotrain_cotrain::release_model::{QueryPolicy, ReleaseForm, ThetaPolicy};
use dpcotrain_cotrain::responder::{DpConfig, DpMode, Party};

#[derive(Debug, Clone, PartialEq)]
pub struct Agreement {
    pub federation_id: String,
    pub pool_hash: String,
    /// Public standardisation of y: y_std = (y − y_mean) / y_scale.
    pub y_mean: f64,
    pub y_scale: f64,
    pub release_policy: String,
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

/// `mode/policy` for the thesis-era settings (function-space release, fitted θ, adaptive
/// queries), then `/form/theta=…/queries=…` whenever any of those differs.
fn policy_name(mode: &str, policy: &str, dp: &DpConfig) -> String {
    let legacy =
        dp.release == ReleaseForm::Rkhs && dp.theta == ThetaPolicy::Fitted && dp.queries == QueryPolicy::Adaptive;
    if legacy {
        return format!("{mode}/{policy}");
    }
    let theta = match &dp.theta {
        ThetaPolicy::Fitted => "fitted".to_string(),
        ThetaPolicy::Public(t) => format!("public({},{},{})", t.signal_variance, t.lengthscale, t.noise_variance),
        ThetaPolicy::Selected { default: t, mu } => {
            format!("select({},{},{};mu={mu})", t.signal_variance, t.lengthscale, t.noise_variance)
        }
    };
    format!("{mode}/{policy}/{}/theta={theta}/queries={}", dp.release.name(), dp.queries.name())
}

impl Agreement {
    /// The agreement a party's configuration implies.
    pub fn of(party: &Party, federation_id: &str, y_mean: f64, y_scale: f64) -> Self {
        let policy = party.dp.policy.name();
        let (mode, epsilon, delta, lo, hi) = match &party.dp.mode {
            DpMode::Off => ("off", 0.0, 0.0, 0.0, 0.0),
            DpMode::Thesis { multiplier } => ("thesis", *multiplier, 0.0, 0.0, 0.0),
            DpMode::Calibrated { epsilon, delta, range, .. } => ("calibrated", *epsilon, *delta, range.lo, range.hi),
        };
        Agreement {
            federation_id: federation_id.into(),
            pool_hash: pool_hash(party.data.pool_size()),
            y_mean,
            y_scale,
            release_policy: policy_name(mode, policy, &party.dp),
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
            release_policy: self.release_policy.clone(),
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
            return Err(format!("pool {} is not ours ({})", crate::clip(&r.pool_hash), self.pool_hash));
        }
        let same = |a: f64, b: f64| a == b || (a - b).abs() <= 1e-12 * a.abs().max(b.abs());
        if !same(r.y_mean, self.y_mean) || !same(r.y_scale, self.y_scale) {
            return Err(format!(
                "y standardisation (mean {}, scale {}) is not ours (mean {}, scale {})",
                r.y_mean, r.y_scale, self.y_mean, self.y_scale
            ));
        }
        if r.release_policy != self.release_policy
            || !same(r.epsilon, self.epsilon)
            || !same(r.delta, self.delta)
            || !same(r.label_lo, self.label_lo)
            || !same(r.label_hi, self.label_hi)
        {
            return Err(format!(
                "privacy policy {} ε={} δ={} labels [{}, {}] is not ours ({} ε={} δ={} labels [{}, {}])",
                crate::clip(&r.release_policy),
                r.epsilon,
                r.delta,
                r.label_lo,
                r.label_hi,
                self.release_policy,
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
            release_policy: "calibrated/release-once".into(),
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
            (Box::new(|r| r.release_policy = "calibrated/per-query".into()), "privacy"),
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
}
