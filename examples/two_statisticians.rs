//! Two statisticians in one process, through the library API (no network):
//!
//!     cargo run --release --example two_statisticians
//!
//! Each holds a different covariate of the same entities and 25 private labels (Thomas 2017
//! §4.3.1, r = 0.9, masked). They co-train for 25 rounds with Noisy + marginal and calibrated
//! label DP (ε = 1 per release, δ = 1e-5, release-once), and print their test RMSE before and
//! after and the privacy each party's labels spent.

use dpcotrain_cotrain::answer::Uncertainty;
use dpcotrain_cotrain::combiner::CombinerKind;
use dpcotrain_cotrain::driver::{block_on, build_parties, run_in_process};
use dpcotrain_cotrain::responder::{DpConfig, DpMode, ReleasePolicy};
use dpcotrain_cotrain::simulate::{SimConfig, simulate};
use dpcotrain_privacy::calibrate::Mechanism;
use dpcotrain_privacy::sensitivity::LabelRange;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    // The data: two views of the same entities; each party's labelled rows are its own.
    let scenario = simulate(&SimConfig { r: 0.9, masking: true, n_obs: 25, seed: 7, ..SimConfig::default() })?;
    // The privacy each party grants its peers.
    let dp = DpConfig {
        mode: DpMode::Calibrated {
            epsilon: 1.0,
            delta: 1e-5,
            mechanism: Mechanism::Analytic,
            range: LabelRange::new(-3.0, 3.0)?,
            budget_epsilon: 1.0,
        },
        policy: ReleasePolicy::ReleaseOnce,
        inflate_variance: true,
        ..DpConfig::off()
    };
    // Each party fits its private GP; then 25 rounds of uncertainty sampling and answers.
    let parties = build_parties(&scenario, CombinerKind::Noisy, Uncertainty::Marginal, &dp, 7)?;
    let report = block_on(run_in_process(&parties, 25))?;
    println!("{:<8} {:>12} {:>12}  ε spent on its labels", "party", "RMSE alone", "RMSE after");
    for p in &report.parties {
        let spent: Vec<String> = p.epsilon_released.iter().map(|(to, e)| format!("{e:.3} to {to}")).collect();
        println!("{:<8} {:>12.4} {:>12.4}  {}", p.name, p.before.rmse, p.after.rmse, spent.join(", "));
    }
    Ok(())
}
