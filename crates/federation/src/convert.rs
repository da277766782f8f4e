//! Conversions between the co-training types and their protobuf messages. Doubles travel as
//! IEEE-754 bit patterns, so a gRPC run reproduces an in-process run number for number.
//! Everything arriving from the network is validated: a peer's malformed message becomes an
//! error, never a panic.

use crate::pb;
use dpcotrain_cotrain::{Answer, ChargeInfo, PredictRequest, Receipt, Uncertainty};
use nalgebra::DMatrix;

pub(crate) fn uncertainty_to_pb(u: Uncertainty) -> pb::Uncertainty {
    match u {
        Uncertainty::None => pb::Uncertainty::None,
        Uncertainty::Marginal => pb::Uncertainty::Marginal,
        Uncertainty::Full => pb::Uncertainty::Full,
    }
}

/// The uncertainty mode of a request from the wire: an unspecified or unknown value is refused.
pub(crate) fn uncertainty_from_pb(v: i32) -> Result<Uncertainty, String> {
    match pb::Uncertainty::try_from(v) {
        Ok(pb::Uncertainty::None) => Ok(Uncertainty::None),
        Ok(pb::Uncertainty::Marginal) => Ok(Uncertainty::Marginal),
        Ok(pb::Uncertainty::Full) => Ok(Uncertainty::Full),
        Ok(pb::Uncertainty::Unspecified) => Err("uncertainty is unspecified (none, marginal or full)".into()),
        Err(_) => Err(format!("uncertainty {v} is not a known value (none, marginal or full)")),
    }
}

fn vector_to_pb(v: &Option<Vec<f64>>) -> Option<pb::Vector> {
    v.as_ref().map(|values| pb::Vector { values: values.clone() })
}

pub(crate) fn matrix_to_pb(m: &DMatrix<f64>) -> pb::Matrix {
    pb::Matrix { rows: m.nrows() as u32, cols: m.ncols() as u32, data: m.as_slice().to_vec() }
}

pub(crate) fn matrix_from_pb(m: &pb::Matrix) -> Result<DMatrix<f64>, String> {
    let (r, c) = (m.rows as usize, m.cols as usize);
    if r.checked_mul(c) != Some(m.data.len()) {
        return Err(format!("matrix {r}×{c} carries {} values", m.data.len()));
    }
    if m.data.iter().any(|v| !v.is_finite()) {
        return Err("matrix contains a non-finite value".into());
    }
    Ok(DMatrix::from_column_slice(r, c, &m.data))
}

pub(crate) fn request_to_pb(r: &PredictRequest, federation_id: &str) -> pb::PredictRequest {
    pb::PredictRequest {
        request_id: r.request_id.clone(),
        requester: r.requester.clone(),
        indices: r.indices.iter().map(|&i| i as u64).collect(),
        uncertainty: uncertainty_to_pb(r.uncertainty).into(),
        want_prior: r.want_prior,
        federation_id: federation_id.into(),
        witness: r.witness.as_ref().map(receipt_to_pb),
    }
}

pub(crate) fn receipt_to_pb(r: &Receipt) -> pb::Receipt {
    pb::Receipt { seq: r.seq, releases: r.releases, rho: r.rho, mac: r.mac.clone(), head: r.head.clone() }
}

/// A receipt from the wire: ρ finite and non-negative, the MAC 64 hex digits.
pub(crate) fn receipt_from_pb(r: &pb::Receipt) -> Result<Receipt, String> {
    if r.mac.len() != 64 || !r.mac.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Err("receipt: mac is not 64 hex digits".into());
    }
    if !(r.head.is_empty() || r.head.len() == 32 && r.head.bytes().all(|b| b.is_ascii_hexdigit())) {
        return Err("receipt: head is not 32 hex digits".into());
    }
    let receipt = Receipt { seq: r.seq, head: r.head.clone(), releases: r.releases, rho: r.rho, mac: r.mac.clone() };
    match crate::receipt::implausible(&receipt) {
        Some(why) => Err(format!("receipt: {why}")),
        None => Ok(receipt),
    }
}

/// Largest number of indices one request may carry.
pub(crate) const MAX_INDICES: usize = 10_000;

pub(crate) fn request_from_pb(r: &pb::PredictRequest) -> Result<PredictRequest, String> {
    if r.request_id.is_empty() {
        return Err("request_id is empty".into());
    }
    if r.indices.len() > MAX_INDICES {
        return Err(format!("{} indices in one request (at most {MAX_INDICES})", r.indices.len()));
    }
    let indices = r
        .indices
        .iter()
        .map(|&i| usize::try_from(i).map_err(|_| format!("index {i} too large")))
        .collect::<Result<Vec<_>, _>>()?;
    let uncertainty = uncertainty_from_pb(r.uncertainty)?;
    // The answer's size is known from the request alone: refuse one that could not be sent
    // before anything is computed, charged or saved.
    let k = indices.len() as f64;
    let matrices = f64::from(u8::from(uncertainty == Uncertainty::Full) + u8::from(r.want_prior));
    let bytes = 8.0 * (4.0 * k + matrices * k * k) + 1024.0;
    if bytes > crate::MAX_MESSAGE_BYTES as f64 {
        return Err(format!(
            "the answer to {} indices{}{} would be about {:.0} MiB, above the {} MiB message limit: ask for fewer indices or for marginal uncertainty",
            indices.len(),
            if uncertainty == Uncertainty::Full { " with full covariance" } else { "" },
            if r.want_prior { " and the prior covariance" } else { "" },
            bytes / f64::from(1u32 << 20),
            crate::MAX_MESSAGE_BYTES >> 20
        ));
    }
    Ok(PredictRequest {
        request_id: r.request_id.clone(),
        requester: r.requester.clone(),
        indices,
        uncertainty,
        want_prior: r.want_prior,
        witness: r.witness.as_ref().map(receipt_from_pb).transpose()?,
    })
}

pub fn answer_to_pb(a: &Answer) -> pb::PredictResponse {
    pb::PredictResponse {
        responder: a.responder.clone(),
        indices: a.indices.iter().map(|&i| i as u64).collect(),
        mean: a.mean.clone(),
        var: vector_to_pb(&a.var),
        answered: a.answered.iter().map(|&i| i as u64).collect(),
        cov: a.cov.as_ref().map(matrix_to_pb),
        prior_cov: a.prior_cov.as_ref().map(matrix_to_pb),
        model_version: a.model_version,
        charge: a.charge.as_ref().map(|c| pb::Charge {
            rho: c.rho,
            sigma: c.sigma,
            sensitivity: c.sensitivity,
            mechanism: c.mechanism.to_string(),
            guaranteed: c.guaranteed,
            new_release: c.new_release,
        }),
        budget_rho_left: a.budget_rho_left,
        noise_var: vector_to_pb(&a.noise_var),
        receipt: a.receipt.as_ref().map(receipt_to_pb),
    }
}

pub fn answer_from_pb(r: pb::PredictResponse) -> Result<Answer, String> {
    let idx = |v: &[u64]| {
        v.iter().map(|&i| usize::try_from(i).map_err(|_| format!("index {i} too large"))).collect::<Result<Vec<_>, _>>()
    };
    let indices = idx(&r.indices)?;
    if r.mean.len() != indices.len() {
        return Err(format!("{} means for {} indices", r.mean.len(), indices.len()));
    }
    let (var, noise_var) = (r.var.map(|v| v.values), r.noise_var.map(|v| v.values));
    if let Some(v) = &var
        && v.len() != indices.len()
    {
        return Err(format!("{} variances for {} indices", v.len(), indices.len()));
    }
    if let Some(v) = &noise_var
        && v.len() != indices.len()
    {
        return Err(format!("{} noise variances for {} indices", v.len(), indices.len()));
    }
    Ok(Answer {
        responder: r.responder,
        indices,
        mean: r.mean,
        var,
        answered: idx(&r.answered)?,
        cov: r.cov.as_ref().map(matrix_from_pb).transpose()?,
        prior_cov: r.prior_cov.as_ref().map(matrix_from_pb).transpose()?,
        model_version: r.model_version,
        charge: r
            .charge
            .map(|c| {
                Ok::<_, String>(ChargeInfo {
                    rho: c.rho,
                    sigma: c.sigma,
                    sensitivity: c.sensitivity,
                    mechanism: c.mechanism.parse().map_err(|e| format!("charge: {e}"))?,
                    guaranteed: c.guaranteed,
                    new_release: c.new_release,
                })
            })
            .transpose()?,
        budget_rho_left: r.budget_rho_left,
        noise_var,
        likelihood: None,
        receipt: r.receipt.as_ref().map(receipt_from_pb).transpose()?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn answer() -> Answer {
        Answer {
            responder: "B".into(),
            indices: vec![4, 1],
            mean: vec![0.25, -1.5],
            var: Some(vec![0.7, 0.9]),
            answered: vec![4, 1],
            cov: None,
            prior_cov: None,
            model_version: 3,
            charge: None,
            budget_rho_left: Some(0.01),
            noise_var: Some(vec![0.5, 0.5]),
            likelihood: None,
            receipt: None,
        }
    }

    #[test]
    fn answers_round_trip_bit_for_bit_and_bad_lengths_are_refused() {
        let a = answer();
        assert_eq!(answer_from_pb(answer_to_pb(&a)).unwrap(), a);
        let none = Answer { noise_var: None, ..answer() };
        assert_eq!(answer_from_pb(answer_to_pb(&none)).unwrap(), none);
        let mut bad = answer_to_pb(&a);
        bad.noise_var.as_mut().unwrap().values.pop();
        assert!(answer_from_pb(bad).unwrap_err().contains("noise variances"));
    }

    #[test]
    fn a_charge_label_travels_typed_and_an_unknown_one_is_refused() {
        use dpcotrain_privacy::CapRule;
        use dpcotrain_privacy::RankRule;
        use dpcotrain_privacy::{Calibrator, Spend, ThetaSource};
        let charged = Answer {
            charge: Some(ChargeInfo {
                rho: 0.02,
                sigma: 1.5,
                sensitivity: 0.3,
                mechanism: Spend::Finite {
                    calibrator: Calibrator::Analytic,
                    cap: CapRule::auto(),
                    rank: RankRule::Fixed { k: 5 },
                    theta: ThetaSource::Public,
                },
                guaranteed: true,
                new_release: true,
            }),
            ..answer()
        };
        let wire = answer_to_pb(&charged);
        assert_eq!(wire.charge.as_ref().unwrap().mechanism, "analytic finite+cap(auto)+rank(k=5) θ=public");
        assert_eq!(answer_from_pb(wire.clone()).unwrap(), charged);
        let mut bad = wire;
        bad.charge.as_mut().unwrap().mechanism = "laplace".into();
        let err = answer_from_pb(bad).unwrap_err();
        assert!(err.contains("charge") && err.contains("\"laplace\""), "{err}");
    }

    mod props {
        use super::*;
        use proptest::prelude::*;

        fn matrix() -> impl Strategy<Value = Option<pb::Matrix>> {
            prop::option::of(
                (0u32..5, 0u32..5, prop::collection::vec(any::<f64>(), 0..30))
                    .prop_map(|(rows, cols, data)| pb::Matrix { rows, cols, data }),
            )
        }

        proptest! {
            #![proptest_config(ProptestConfig::with_cases(512))]

            /// Any request from the wire: refused with a reason, or accepted and sent back
            /// unchanged.
            #[test]
            fn any_request_is_refused_or_round_trips(
                request_id in ".{0,12}",
                requester in ".{0,12}",
                indices in prop::collection::vec(prop_oneof![0u64..1000, any::<u64>()], 0..40),
                uncertainty in prop_oneof![1i32..=3, any::<i32>()],
                want_prior in any::<bool>(),
                witness in prop::option::of((any::<u64>(), any::<u64>(), prop_oneof![0.0..10.0, any::<f64>()], "[0-9a-f]{62,66}|.{0,8}", "[0-9a-f]{31,33}|.{0,4}")
                    .prop_map(|(seq, releases, rho, mac, head)| pb::Receipt { seq, releases, rho, mac, head })),
            ) {
                let wire = pb::PredictRequest { request_id, requester, indices, uncertainty, want_prior, federation_id: "f".into(), witness };
                if let Ok(r) = request_from_pb(&wire) {
                    prop_assert_eq!(request_to_pb(&r, "f"), wire);
                }
            }

            /// Any response from the wire: an error, or an answer whose vectors match its
            /// indices and whose matrices match their stated shapes — never a panic.
            #[test]
            fn any_response_is_refused_or_consistent(
                n in 0usize..6,
                extra in 0usize..3,
                mean in prop::collection::vec(any::<f64>(), 0..8),
                has_var in any::<bool>(),
                var in prop::collection::vec(any::<f64>(), 0..8),
                cov in matrix(),
                prior_cov in matrix(),
                has_noise_var in any::<bool>(),
                noise_var in prop::collection::vec(any::<f64>(), 0..8),
                big in any::<u64>(),
                aligned in any::<bool>(),
            ) {
                let (mut mean, mut var, mut noise_var) = (mean, var, noise_var);
                if aligned {
                    // Mostly well-formed answers, so the accepted branch is exercised too.
                    for v in [&mut mean, &mut var, &mut noise_var] {
                        v.resize(n, 0.25);
                    }
                }
                let mut indices: Vec<u64> = (0..n as u64).collect();
                if extra == 2 { indices.push(big); }
                let var = has_var.then_some(pb::Vector { values: var });
                let noise_var = has_noise_var.then_some(pb::Vector { values: noise_var });
                let r = pb::PredictResponse {
                    responder: "B".into(), indices, mean, var, answered: vec![], cov, prior_cov,
                    model_version: 1, charge: None, budget_rho_left: None, noise_var,
                    receipt: None,
                };
                if let Ok(a) = answer_from_pb(r) {
                    prop_assert_eq!(a.mean.len(), a.indices.len());
                    if let Some(v) = &a.var { prop_assert_eq!(v.len(), a.indices.len()); }
                    if let Some(v) = &a.noise_var { prop_assert_eq!(v.len(), a.indices.len()); }
                    // Compared through Debug so that a NaN sent is a NaN received.
                    let back = answer_from_pb(answer_to_pb(&a)).unwrap();
                    prop_assert_eq!(format!("{back:?}"), format!("{a:?}"));
                }
            }
        }
    }
}
