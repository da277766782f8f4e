//! Each party's figures as a statistician reads them, shared by `run`, `status` and `demo`:
//! a node's status as a typed report, the verdict on its change in test RMSE (against two
//! paired standard errors), and where a model is no better than predicting the public mean.

use dpcotrain_federation::pb;
use dpcotrain_report::signed;
use serde::Serialize;

/// One release charged to a requester, as its ledger records it.
#[derive(Debug, Clone, Default, Serialize)]
pub struct ReleaseFigures {
    pub id: String,
    /// The release's label, as in the ledger's charge.
    pub mechanism: String,
    pub sigma: f64,
    pub sensitivity: f64,
    pub rho: f64,
    /// Whether the release is a formal guarantee (see [`epsilon_mark`]).
    pub guaranteed: bool,
}

/// The privacy one requester spent on a party's labels: ρ and its ε at the ledger's δ, the
/// number of distinct releases, the ρ budget, and every release in order.
#[derive(Debug, Clone, Default, Serialize)]
pub struct SpendFigures {
    pub peer: String,
    pub rho: f64,
    pub epsilon: f64,
    pub releases: u32,
    pub rho_budget: f64,
    pub release_log: Vec<ReleaseFigures>,
}

impl SpendFigures {
    /// [`epsilon_mark`] of this requester's releases.
    pub fn mark(&self) -> &'static str {
        epsilon_mark(self.release_log.iter().map(|r| r.guaranteed))
    }
}

/// ρ charged over all requesters together, and its ε (what colluding requesters could learn
/// together).
#[derive(Debug, Clone, Copy, Default, Serialize)]
pub struct SpendTotal {
    pub rho: f64,
    pub epsilon: f64,
}

/// A node's status (what `status --json` prints, and `run --json` per party). The test
/// figures are absent (`null`) for a peer, and for the orchestrator unless the node shares
/// them: they are computed on its private labels.
#[derive(Debug, Clone, Default, Serialize)]
pub struct PartyFigures {
    pub party: String,
    /// Test RMSE of the private-only model (before co-training).
    pub rmse_before: Option<f64>,
    /// Test RMSE of the current model.
    pub rmse_after: Option<f64>,
    /// Standard error of `rmse_after − rmse_before`, paired over the test points.
    pub rmse_change_se: Option<f64>,
    /// Test RMSE of predicting the public mean of y: the baseline that needs no label.
    pub rmse_mean_baseline: Option<f64>,
    /// Training labels its releases clip to the declared label range (calibrated DP).
    pub labels_clipped: Option<u32>,
    /// Rounds done.
    pub rounds: u32,
    pub model_version: u64,
    /// Test RMSE after each round so far, oldest first.
    pub rmse_per_round: Vec<f64>,
    /// Per requester.
    pub privacy_spent: Vec<SpendFigures>,
    /// The answer guard set the received answers aside: the model is the private-only one.
    pub answers_set_aside: bool,
    /// The caller is a peer: it sees its own spend only, and no test figures.
    pub restricted: bool,
    pub federation_id: String,
    pub privacy_spent_total: SpendTotal,
}

impl PartyFigures {
    /// [`epsilon_mark`] of every release to every requester (the mark of the total).
    pub fn mark(&self) -> &'static str {
        epsilon_mark(self.releases().map(|r| r.guaranteed))
    }

    /// Every release to every requester, requester by requester.
    pub fn releases(&self) -> impl Iterator<Item = &ReleaseFigures> {
        self.privacy_spent.iter().flat_map(|s| &s.release_log)
    }
}

impl From<&pb::StatusResponse> for PartyFigures {
    fn from(st: &pb::StatusResponse) -> Self {
        let release = |r: &pb::LedgerRelease| ReleaseFigures {
            id: r.id.clone(),
            mechanism: r.mechanism.clone(),
            sigma: r.sigma,
            sensitivity: r.sensitivity,
            rho: r.rho,
            guaranteed: r.guaranteed,
        };
        let spend = |s: &pb::PeerSpend| SpendFigures {
            peer: s.peer.clone(),
            rho: s.rho,
            epsilon: s.epsilon,
            releases: s.releases,
            rho_budget: s.rho_budget,
            release_log: s.release_log.iter().map(release).collect(),
        };
        PartyFigures {
            party: st.party.clone(),
            rmse_before: st.test_rmse_alone,
            rmse_after: st.test_rmse,
            rmse_change_se: st.rmse_change_se,
            rmse_mean_baseline: st.test_rmse_mean_baseline,
            labels_clipped: st.labels_clipped,
            rounds: st.rounds_done,
            model_version: st.model_version,
            rmse_per_round: st.rmse_per_round.clone(),
            privacy_spent: st.spend.iter().map(spend).collect(),
            answers_set_aside: st.answers_set_aside,
            restricted: st.restricted,
            federation_id: st.federation_id.clone(),
            privacy_spent_total: SpendTotal { rho: st.rho_total, epsilon: st.epsilon_total },
        }
    }
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
pub fn baseline_lines<'a>(parties: impl IntoIterator<Item = &'a PartyFigures>) -> Vec<String> {
    let mut out = Vec::new();
    for p in parties {
        let name = &p.party;
        let Some(b) = p.rmse_mean_baseline else { continue };
        let alone = p.rmse_before.unwrap_or(f64::NAN);
        let after = p.rmse_after.unwrap_or(f64::NAN);
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

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// The wire format of `status --json` (and of each party in `run --json` and run.json):
    /// the keys and JSON types `party_json` printed before the figures were typed.
    #[test]
    fn party_figures_keep_the_status_json() {
        let st = pb::StatusResponse {
            party: "A".into(),
            model_version: 7,
            rounds_done: 3,
            spend: vec![pb::PeerSpend {
                peer: "B".into(),
                rho: 0.0125,
                epsilon: 0.98,
                releases: 2,
                rho_budget: 0.02,
                release_log: vec![
                    pb::LedgerRelease {
                        id: "theta-selection".into(),
                        mechanism: "vote".into(),
                        sigma: 4.5,
                        sensitivity: 1.0,
                        rho: 0.0025,
                        guaranteed: true,
                    },
                    pb::LedgerRelease {
                        id: "batch-1".into(),
                        mechanism: "gaussian".into(),
                        sigma: 0.5,
                        sensitivity: 0.1,
                        rho: 0.01,
                        guaranteed: false,
                    },
                ],
            }],
            test_rmse: Some(0.25),
            test_rmse_alone: Some(0.3),
            rho_total: 0.0125,
            epsilon_total: 0.98,
            restricted: false,
            federation_id: "demo".into(),
            rmse_change_se: None,
            rmse_per_round: vec![0.28, f64::NAN, 0.25],
            answers_set_aside: true,
            test_rmse_mean_baseline: Some(1.0),
            labels_clipped: Some(4),
            head: None,
        };
        let want = json!({"party": "A", "rmse_before": 0.3, "rmse_after": 0.25, "rmse_change_se": null,
            "rmse_mean_baseline": 1.0, "labels_clipped": 4, "rounds": 3, "model_version": 7,
            "rmse_per_round": [0.28, null, 0.25],
            "privacy_spent": [{"peer": "B", "rho": 0.0125, "epsilon": 0.98, "releases": 2, "rho_budget": 0.02,
                "release_log": [
                    {"id": "theta-selection", "mechanism": "vote", "sigma": 4.5, "sensitivity": 1.0,
                     "rho": 0.0025, "guaranteed": true},
                    {"id": "batch-1", "mechanism": "gaussian", "sigma": 0.5, "sensitivity": 0.1,
                     "rho": 0.01, "guaranteed": false}]}],
            "answers_set_aside": true, "restricted": false, "federation_id": "demo",
            "privacy_spent_total": {"rho": 0.0125, "epsilon": 0.98}});
        let got = serde_json::to_value(PartyFigures::from(&st)).unwrap();
        assert_eq!(got, want);
        // The same text, key order and number spellings included (integers stay integers).
        assert_eq!(got.to_string(), want.to_string());
        let text = got.to_string();
        assert!(text.contains(r#""labels_clipped":4,"#) && text.ends_with(r#""rounds":3}"#), "{text}");
        let figures = PartyFigures::from(&st);
        assert_eq!(figures.mark(), " (NOT guaranteed)");
        assert_eq!(figures.privacy_spent[0].mark(), " (NOT guaranteed)");
    }
}
