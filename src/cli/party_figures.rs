//! Each party's figures as a statistician reads them, shared by `run`, `status` and `demo`:
//! a node's status as JSON, the verdict on its change in test RMSE (against two paired
//! standard errors), and where a model is no better than predicting the public mean.

use dpcotrain_federation::pb;
use dpcotrain_report::signed;
use serde_json::Value;

/// A node's status as JSON (what `status --json` and `run --json` print per party).
pub fn party_json(st: &pb::StatusResponse) -> Value {
    let spent: Vec<Value> = st
        .spend
        .iter()
        .map(|s| {
            let log: Vec<Value> = s
                .release_log
                .iter()
                .map(|r| {
                    serde_json::json!({"id": r.id, "mechanism": r.mechanism, "sigma": r.sigma,
                                       "sensitivity": r.sensitivity, "rho": r.rho, "guaranteed": r.guaranteed})
                })
                .collect();
            serde_json::json!({"peer": s.peer, "rho": s.rho, "epsilon": s.epsilon, "releases": s.releases,
                                    "rho_budget": s.rho_budget, "release_log": log})
        })
        .collect();
    serde_json::json!({"party": st.party, "rmse_before": st.test_rmse_alone, "rmse_after": st.test_rmse,
                       "rmse_change_se": st.rmse_change_se,
                       "rmse_mean_baseline": st.test_rmse_mean_baseline, "labels_clipped": st.labels_clipped,
                       "rounds": st.rounds_done, "model_version": st.model_version,
                       "rmse_per_round": st.rmse_per_round, "privacy_spent": spent,
                       "answers_set_aside": st.answers_set_aside,
                       "restricted": st.restricted, "federation_id": st.federation_id,
                       "privacy_spent_total": {"rho": st.rho_total, "epsilon": st.epsilon_total}})
}

/// The mark an ε carries where it is shown: empty when every release behind it is a formal
/// guarantee, else a warning that names it as not one (thesis noise, or the label-fitted θ or
/// adaptive queries of the earlier policies; `status --json` has `guaranteed` per release).
pub fn epsilon_mark(release_guaranteed: impl IntoIterator<Item = bool>) -> &'static str {
    if release_guaranteed.into_iter().all(|g| g) { "" } else { " (NOT guaranteed)" }
}

/// The line that explains [`epsilon_mark`] once, below a table that used it.
pub const NOT_GUARANTEED_NOTE: &str = "(NOT guaranteed: some releases were made in thesis mode, or with the label-fitted θ or label-chosen queries of the per-query and release-once policies; their ε is computed and charged but is not a privacy guarantee. The default policy, batches, gives one.)";

/// Whether co-training changed a party's test RMSE by more than the test set's noise: two
/// standard errors of the change, paired over the same test points (the node computes it by
/// the delta method from per-point errors; `Status.rmse_change_se`). A ±0.015 change that is
/// within that is not a result.
pub fn verdict(alone: f64, after: f64, se: Option<f64>, n_test: Option<usize>) -> String {
    let d = after - alone;
    let over = n_test.map(|n| format!(" over {n} test points")).unwrap_or_default();
    let Some(se) = se.filter(|s| s.is_finite() && *s > 0.0) else {
        return format!("{alone:.3} → {after:.3} (no standard error available)");
    };
    if !d.is_finite() {
        return "no verdict (RMSE not finite)".into();
    }
    let two = 2.0 * se;
    if d < -two {
        format!("helped: {alone:.3} → {after:.3} ({}; 2 SE = {two:.3}{over})", signed(d, 3))
    } else if d > two {
        format!("HURT: {alone:.3} → {after:.3} ({}; 2 SE = {two:.3}{over})", signed(d, 3))
    } else {
        format!("no clear change: {} is within 2 SE = {two:.3}{over}", signed(d, 3))
    }
}

/// Where a party's model, alone or after co-training, is no better than predicting the public
/// mean (the constant that needs no label): a gain over a useless model is no gain.
pub fn baseline_lines(parties: &[Value]) -> Vec<String> {
    let mut out = Vec::new();
    for p in parties {
        let name = p["party"].as_str().unwrap_or("?");
        let Some(b) = p["rmse_mean_baseline"].as_f64() else { continue };
        let alone = p["rmse_before"].as_f64().unwrap_or(f64::NAN);
        let after = p["rmse_after"].as_f64().unwrap_or(f64::NAN);
        match (alone >= b, after >= b) {
            (true, true) => out.push(format!(
                "{name}: alone ({alone:.3}) and after co-training ({after:.3}) no better than predicting the public mean ({b:.3})"
            )),
            (true, false) => out.push(format!(
                "{name}: alone ({alone:.3}) no better than predicting the public mean ({b:.3}); after co-training {after:.3} beats it"
            )),
            (false, true) => out.push(format!(
                "{name}: after co-training ({after:.3}) no better than predicting the public mean ({b:.3}), though alone ({alone:.3}) beat it"
            )),
            (false, false) => {}
        }
    }
    out
}
