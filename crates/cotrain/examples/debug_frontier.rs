use dpcotrain_cotrain::answer::Uncertainty;
use dpcotrain_cotrain::combiner::CombinerKind;
use dpcotrain_cotrain::driver::{block_on, build_parties, run_in_process, evaluate};
use dpcotrain_cotrain::frontier::{FrontierConfig, FrontierMechanism, ThetaChoice};
use dpcotrain_cotrain::simulate::{SimConfig, simulate};

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let seed: u64 = args.get(1).map(|s| s.parse().unwrap()).unwrap_or(2);
    let nobs: usize = args.get(2).map(|s| s.parse().unwrap()).unwrap_or(25);
    let mech = match args.get(3).map(|s| s.as_str()).unwrap_or("rkhs") { "rkhs" => FrontierMechanism::Rkhs, "finite" => FrontierMechanism::Finite, _ => FrontierMechanism::FiniteCap };
    let eps: f64 = args.get(4).map(|s| s.parse().unwrap()).unwrap_or(1.0);
    let sc = simulate(&SimConfig { r: 0.9, masking: true, n_obs: nobs, seed, ..SimConfig::default() }).unwrap();
    let cfg = FrontierConfig::full();
    let dp = if eps > 0.0 { cfg.dp(Some((eps, mech)), ThetaChoice::Public) } else { cfg.dp(None, ThetaChoice::Public) };
    let parties = build_parties(&sc, CombinerKind::Noisy, Uncertainty::Marginal, &dp, seed).unwrap();
    let form = if std::env::var("POSTERIOR").is_ok() { dpcotrain_cotrain::combiner::AnswerForm::Posterior } else { dpcotrain_cotrain::combiner::AnswerForm::Likelihood };
    for p in &parties { let mut g = p.lock().unwrap(); g.model.answer_form = form; if std::env::var("NOREFIT").is_ok() { g.model.train.max_iters = 0; } }
    for p in &parties { let g = p.lock().unwrap(); println!("{} params before {:?} noise {}", g.name, g.model.kernel.params().iter().map(|v| v.exp()).collect::<Vec<_>>(), g.model.noise.variance); }
    let rep = block_on(run_in_process(&parties, 1)).unwrap();
    for (i, p) in parties.iter().enumerate() {
        let mut g = p.lock().unwrap();
        let o = &rep.parties[i];
        println!("{}: before {:.3} after {:.3}", o.name, o.before.rmse, o.after.rmse);
        println!("  params after {:?} noise {}", g.model.kernel.params().iter().map(|v| v.exp()).collect::<Vec<_>>(), g.model.noise.variance);
        for b in &g.model.blocks { 
            let n = b.means.len();
            println!("  from {}: {} answers; means[..5] {:?}; vars[..5] {:?}", b.peer, n, &b.means[..5.min(n)], &b.vars[..5.min(n)]);
        }
        let _ = evaluate(&mut g);
    }
    for t in &rep.turns { println!("{} asked {:?} refused {:?} obj {:?}", t.querier, t.indices, t.refused, t.objective); }
}
