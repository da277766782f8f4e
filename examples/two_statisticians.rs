//! Two statisticians in one process, through the library API (no network):
//!
//!     cargo run --release --example two_statisticians
//!
//! Each holds a different covariate of the same entities and 400 private labels (Thomas 2017
//! §4.3.1's generator, r = 0.9, masked: each party's labelled rows come from a different
//! region). They co-train with the honest protocol: public θ, 25 pool entities chosen without
//! looking at the labels, one calibrated, influence-capped release per peer (ε = 1, δ = 1e-5),
//! Noisy + marginal with answers read as likelihood messages, each discounted as a node does by
//! default (docs/decisions.md D30). It prints each party's test RMSE
//! alone, after co-training, and after the same protocol without DP, and the ε each party's
//! labels spent.

use dpcotrain_cotrain::DpConfig;
use dpcotrain_cotrain::Uncertainty;
use dpcotrain_cotrain::combiner::{AnswerForm, CombinerKind};
use dpcotrain_cotrain::settings::DEFAULT_ANSWER_DISCOUNT;
use dpcotrain_cotrain::{SimConfig, simulate};
use dpcotrain_cotrain::{block_on, build_parties, run_in_process};
use dpcotrain_privacy::LabelRange;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    // The data: two views of the same entities; each party's labelled rows are its own.
    let scenario = simulate(&SimConfig { r: 0.9, masking: true, n_obs: 400, seed: 7, ..SimConfig::default() })?;
    let (kind, uncertainty) = (CombinerKind::Noisy, Uncertainty::Marginal);
    // The privacy each party grants its peers: ε = 1 per release, a budget of one release.
    let private = DpConfig::honest(1.0, 1e-5, 1.0, LabelRange::new(-3.0, 3.0)?, 25);
    private.check_combiner(kind, uncertainty)?;
    // The same protocol without DP: the gain privacy is measured against.
    let open = DpConfig::honest_protocol_without_dp(25);
    let mut results = Vec::new();
    for dp in [&private, &open] {
        let parties = build_parties(&scenario, kind, uncertainty, dp, 7)?;
        for p in &parties {
            let mut p = p.lock().map_err(|_| "lock poisoned")?;
            p.set_answer_form(AnswerForm::Likelihood)?;
            // A node's default (D30): each answer weighs at most a thirtieth of one own label.
            p.set_answer_discount(DEFAULT_ANSWER_DISCOUNT)?;
        }
        // One round: each party asks its 25 entities in one request; its peer releases once.
        results.push(block_on(run_in_process(&parties, 1))?);
    }
    println!("{:<8} {:>12} {:>12} {:>12}  ε spent on its labels", "party", "RMSE alone", "RMSE after", "without DP");
    for (p, q) in results[0].parties.iter().zip(&results[1].parties) {
        let spent: Vec<String> = p.epsilon_released.iter().map(|(to, e)| format!("{e:.3} to {to}")).collect();
        println!(
            "{:<8} {:>12.4} {:>12.4} {:>12.4}  {}",
            p.name,
            p.before.rmse,
            p.after.rmse,
            q.after.rmse,
            spent.join(", ")
        );
    }
    Ok(())
}
