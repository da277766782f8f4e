//! Time one simulated co-training run per combiner: where the grid's time goes.
//! Usage: profile_run [n_obs] [max_iters] [ftol] [pgtol]
use dpcotrain_cotrain::answer::Uncertainty;
use dpcotrain_cotrain::combiner::CombinerKind;
use dpcotrain_cotrain::driver::{block_on, build_parties, run_in_process};
use dpcotrain_cotrain::party::DpConfig;
use dpcotrain_cotrain::simulate::{SimConfig, simulate};
use dpcotrain_gp::train::TrainOptions;
use std::time::Instant;

fn main() {
    let nobs: usize = std::env::args().nth(1).and_then(|s| s.parse().ok()).unwrap_or(200);
    let iters: usize = std::env::args().nth(2).and_then(|s| s.parse().ok()).unwrap_or(200);
    let ftol: f64 = std::env::args().nth(3).and_then(|s| s.parse().ok()).unwrap_or(1e-10);
    let pgtol: f64 = std::env::args().nth(4).and_then(|s| s.parse().ok()).unwrap_or(1e-6);
    for kind in [CombinerKind::Noisy, CombinerKind::Hybrid, CombinerKind::Blocky] {
        let sc = simulate(&SimConfig { n_obs: nobs, seed: 1, ..SimConfig::default() }).unwrap();
        let t = Instant::now();
        let ps = build_parties(&sc, kind, Uncertainty::Marginal, &DpConfig::off(), 1).unwrap();
        for p in &ps {
            let mut g = p.lock().unwrap();
            let train = g.model().refit_training();
            g.set_refit_training(TrainOptions { max_iters: iters, ftol, pgtol, ..train });
        }
        let t_build = t.elapsed().as_secs_f64();
        let r = block_on(run_in_process(&ps, 25)).unwrap();
        println!(
            "{kind:?}: build {t_build:.2}s total {:.2}s  rmse {:.4} -> {:.4}  (after, full precision: p1 {:.15e} p2 {:.15e})",
            t.elapsed().as_secs_f64(),
            r.parties[0].before.rmse,
            r.parties[0].after.rmse,
            r.parties[0].after.rmse,
            r.parties[1].after.rmse
        );
    }
}
