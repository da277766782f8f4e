//! Two simulated statisticians in-process (r = 0.9, n_obs = 25, masked; Thomas §4.3.1): without
//! DP, Noisy and Hybrid improve on the pre-co-training RMSE, Blocky is worse than both, and a
//! repeated run is bit-identical.

use dpcotrain_cotrain::answer::Uncertainty;
use dpcotrain_cotrain::combiner::CombinerKind;
use dpcotrain_cotrain::driver::{RunReport, block_on, build_parties, run_in_process};
use dpcotrain_cotrain::party::DpConfig;
use dpcotrain_cotrain::simulate::{SimConfig, simulate};

fn run(kind: CombinerKind, seed: u64) -> RunReport {
    let cfg =
        SimConfig { r: 0.9, conditional_independence: true, masking: true, n_obs: 25, seed, ..SimConfig::default() };
    let sc = simulate(&cfg).unwrap();
    let parties = build_parties(&sc, kind, Uncertainty::Marginal, &DpConfig::off(), seed).unwrap();
    block_on(run_in_process(&parties, 25)).unwrap()
}

fn mean_rmse(r: &RunReport, after: bool) -> f64 {
    r.parties.iter().map(|p| if after { p.after.rmse } else { p.before.rmse }).sum::<f64>() / r.parties.len() as f64
}

#[test]
fn two_statisticians_cotrain_without_dp() {
    let mut before = 0.0;
    let mut after = std::collections::HashMap::new();
    let seeds = [1u64, 2, 3];
    for &seed in &seeds {
        for kind in [CombinerKind::Noisy, CombinerKind::Hybrid, CombinerKind::Blocky] {
            let r = run(kind, seed);
            assert_eq!(r.parties.len(), 2);
            for p in &r.parties {
                assert_eq!(p.queries, 25, "{kind:?}");
            }
            if kind == CombinerKind::Noisy {
                before += mean_rmse(&r, false) / seeds.len() as f64;
            }
            *after.entry(kind.name()).or_insert(0.0) += mean_rmse(&r, true) / seeds.len() as f64;
            eprintln!("seed {seed} {kind:?}: before {:.4} after {:.4}", mean_rmse(&r, false), mean_rmse(&r, true));
        }
    }
    let (noisy, hybrid, blocky) = (after["noisy"], after["hybrid"], after["blocky"]);
    eprintln!("before {before:.4}  noisy {noisy:.4}  hybrid {hybrid:.4}  blocky {blocky:.4}");
    assert!(noisy < before, "Noisy {noisy} should improve on {before}");
    assert!(hybrid < before, "Hybrid {hybrid} should improve on {before}");
    assert!(
        blocky > noisy && blocky > hybrid,
        "Blocky {blocky} should be worse than Noisy {noisy} and Hybrid {hybrid}"
    );
}

#[test]
fn repeated_runs_are_bit_identical() {
    let a = run(CombinerKind::Hybrid, 11);
    let b = run(CombinerKind::Hybrid, 11);
    assert_eq!(a, b);
    for (p, q) in a.parties.iter().zip(&b.parties) {
        assert_eq!(p.after.rmse.to_bits(), q.after.rmse.to_bits());
    }
}

#[test]
fn three_parties_and_the_oracle() {
    use dpcotrain_cotrain::baseline::yu_oracle;
    // Three views of the same entities: split the simulated pair and add a third noisy view.
    let cfg = SimConfig { r: 0.9, masking: false, n_obs: 20, n_pool: 60, n_test: 80, seed: 4, ..SimConfig::default() };
    let mut sc = simulate(&cfg).unwrap();
    let mut third = sc.parties[0].clone();
    third.name = "P3".into();
    third.x_train = third.x_train.map(|v| 0.5 * v);
    third.x_pool = third.x_pool.map(|v| 0.5 * v);
    third.x_test = third.x_test.map(|v| 0.5 * v);
    sc.parties.push(third);
    let parties = build_parties(&sc, CombinerKind::Noisy, Uncertainty::Marginal, &DpConfig::off(), 4).unwrap();
    let r = block_on(run_in_process(&parties, 5)).unwrap();
    assert_eq!(r.parties.len(), 3);
    // Each turn asks both other parties (D16).
    assert!(r.turns.iter().all(|t| t.answered_by.len() == 2));
    let guards: Vec<_> = parties.iter().map(|p| p.lock().unwrap()).collect();
    assert_eq!(guards[0].model().n_pseudo(), 10);
    let refs: Vec<&dpcotrain_cotrain::party::Party> = guards.iter().map(|g| &**g).collect();
    let oracle = yu_oracle(&refs).unwrap();
    assert!(oracle.rmse.is_finite() && oracle.rmse < 1.0, "{}", oracle.rmse);
}

#[test]
fn calibrated_dp_run_reports_privacy_and_respects_budgets() {
    use dpcotrain_cotrain::party::{DpMode, ReleasePolicy};
    use dpcotrain_privacy::LabelRange;
    use dpcotrain_privacy::Mechanism;
    let cfg = SimConfig { r: 0.9, n_obs: 25, seed: 5, ..SimConfig::default() };
    let sc = simulate(&cfg).unwrap();
    let dp = DpConfig {
        mode: DpMode::Calibrated {
            epsilon: 1.0,
            delta: 1e-5,
            mechanism: Mechanism::Analytic,
            range: LabelRange::new(-3.0, 3.0).unwrap(),
            budget_epsilon: 5.0,
        },
        policy: ReleasePolicy::PerQuery,
        inflate_variance: true,
        ..DpConfig::off()
    };
    let parties = build_parties(&sc, CombinerKind::Noisy, Uncertainty::Marginal, &dp, 5).unwrap();
    let r = block_on(run_in_process(&parties, 25)).unwrap();
    for p in &r.parties {
        let (_, eps) = &p.epsilon_released[0];
        assert!(*eps <= 5.0 + 1e-6, "{} spent ε = {eps}", p.name);
        assert!(*eps > 1.0, "several releases composed");
    }
    // Per-query releases exhaust the budget: later requests are refused, and said so.
    assert!(r.turns.iter().any(|t| {
        t.refused
            .iter()
            .any(|r| r.code == dpcotrain_cotrain::RemoteCode::BudgetExhausted && r.message.contains("budget"))
    }));
}
