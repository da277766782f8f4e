//! `dpcotrain-lab bench node`: the speed of the federation on this machine: a Predict
//! answer and a whole round, against the in-process work they wrap.
//!
//! 1. A node whose private view has `--rows` rows (VFE local model) answers Predict for 25
//!    indices with full covariance and prior rows, over loopback gRPC with mutual TLS, and with
//!    its state saved (fsync) before each answer — the real node path. Each repetition asks
//!    for 25 new indices in the name of a fresh requester, so every answer is a first release
//!    (a new noise path, 25 × 25 matrices). The in-process `Party::answer` on a copy of the
//!    same party is timed alongside: the difference is the node's overhead.
//! 2. Thesis sizes: a two-party 25-round run (simulated, n_obs = 25, and CCPP, masked,
//!    n_obs = 25), in-process and over loopback gRPC with TLS; the per-exchange overhead is
//!    the time difference over the number of exchanges.

use anyhow::Context as _;
use clap::Args;
use dpcotrain_cotrain::CombinerKind;
use dpcotrain_cotrain::Scenario;
use dpcotrain_cotrain::ccpp::{CcppConfig, ccpp};
use dpcotrain_cotrain::driver::{build_parties, default_kernel, query_turn, run_in_process};
use dpcotrain_cotrain::{DpConfig, Party, ReleasePolicy};
use dpcotrain_cotrain::{PredictRequest, Uncertainty};
use dpcotrain_cotrain::{SimConfig, simulate};
use dpcotrain_federation::auth::request;
use dpcotrain_federation::pb::node_client::NodeClient;
use dpcotrain_federation::store::StateStore;
use dpcotrain_federation::tls::{NodeTls, ensure_dev_pki};
use dpcotrain_federation::{Agreement, GrpcPeer, NodeService, PeerOptions, Retry, pb, serve};
use dpcotrain_privacy::LabelRange;
use serde_json::json;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

#[derive(Debug, Args)]
pub struct NodeBenchArgs {
    /// Rows of the large node's private view.
    #[arg(long, default_value_t = 100_000)]
    pub rows: usize,
    /// Predict calls timed (each 25 new indices from a fresh requester).
    #[arg(long, default_value_t = 15)]
    pub reps: usize,
    #[arg(long)]
    pub json: bool,
}

fn dp(policy: ReleasePolicy) -> DpConfig {
    DpConfig::calibrated(1.0, 1e-5, 1.0, LabelRange { lo: -3.0, hi: 3.0 }, policy)
}

fn scratch(tag: &str) -> anyhow::Result<PathBuf> {
    let d = std::env::temp_dir().join(format!("dpcotrain-bench-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d)?;
    Ok(d)
}

/// Dev PKI for `names` under `dir`; TLS material of each.
fn pki(dir: &Path, names: &[&str]) -> anyhow::Result<Vec<NodeTls>> {
    let names: Vec<String> = names.iter().map(|s| s.to_string()).collect();
    ensure_dev_pki(dir, &names, &["localhost".into(), "127.0.0.1".into()])?;
    Ok(names
        .iter()
        .map(|n| NodeTls {
            ca: dir.join("ca.pem"),
            cert: dir.join(format!("{n}.pem")),
            key: dir.join(format!("{n}.key")),
        })
        .collect())
}

async fn start(svc: NodeService, tls: &NodeTls) -> anyhow::Result<(String, tokio::sync::oneshot::Sender<()>)> {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let addr = format!("https://{}", listener.local_addr()?);
    let server_tls = tls.server_config()?;
    let (tx, rx) = tokio::sync::oneshot::channel::<()>();
    tokio::spawn(serve(svc, listener, Some(server_tls), async {
        let _ = rx.await;
    }));
    Ok((addr, tx))
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

async fn large_node(a: &NodeBenchArgs) -> anyhow::Result<serde_json::Value> {
    eprintln!("large node: {} private rows, fitting the VFE local model…", a.rows);
    let sc = simulate(&SimConfig {
        n_obs: a.rows,
        n_pool: 25 * a.reps,
        n_test: 10,
        masking: false,
        seed: 1,
        ..SimConfig::default()
    })?;
    let data = sc.parties[0].clone();
    let (k, noise) = default_kernel(&data);
    let t = Instant::now();
    // The node's own model absorbs marginal answers (a VFE model takes no dense block); what it
    // *answers* is per request: here full covariance.
    let party = Party::new(
        data,
        CombinerKind::Noisy,
        Uncertainty::Marginal,
        k,
        noise,
        dp(ReleasePolicy::PerQuery),
        Some(1),
        Default::default(),
    )?;
    let fit = t.elapsed().as_secs_f64();
    let mut local = party.clone();
    let dir = scratch("large")?;
    let tls = pki(&dir.join("secrets"), &["P1", "client"])?;
    let agreement = Agreement::of(&party, "bench", 0.0, 1.0);
    let svc = NodeService::new(Arc::new(Mutex::new(party)), "bench").with_store(StateStore::open(&dir.join("state"))?);
    let (addr, stop) = start(svc, &tls[0]).await?;
    let ch = dpcotrain_federation::peer::channel(&addr, Some(&tls[1].client_config("P1")?), &Retry::default())
        .map_err(anyhow::Error::msg)?;
    let mut c = NodeClient::new(ch).max_decoding_message_size(dpcotrain_federation::MAX_MESSAGE_BYTES);
    let mut grpc = Vec::new();
    let mut inproc = Vec::new();
    let timeout = Duration::from_secs(60);
    for rep in 0..a.reps {
        let who = format!("R{rep}");
        let hs = c.handshake(request(agreement.to_pb(&who), None, timeout).map_err(anyhow::Error::msg)?).await?;
        anyhow::ensure!(hs.into_inner().accepted, "handshake refused");
        let indices: Vec<usize> = (25 * rep..25 * rep + 25).collect();
        let msg = pb::PredictRequest {
            request_id: format!("bench-{rep}"),
            requester: who.clone(),
            indices: indices.iter().map(|&i| i as u64).collect(),
            uncertainty: pb::Uncertainty::Full.into(),
            want_prior: true,
            federation_id: "bench".into(),
            witness: None,
        };
        let t = Instant::now();
        let resp = c.predict(request(msg, None, timeout).map_err(anyhow::Error::msg)?).await?.into_inner();
        grpc.push(t.elapsed().as_secs_f64());
        anyhow::ensure!(resp.cov.as_ref().map(|m| m.rows) == Some(25), "expected a 25 × 25 covariance");
        let req = PredictRequest {
            request_id: format!("bench-{rep}"),
            requester: who,
            indices,
            uncertainty: Uncertainty::Full,
            want_prior: true,
            witness: None,
        };
        let t = Instant::now();
        local.answer(&req)?;
        inproc.push(t.elapsed().as_secs_f64());
    }
    let _ = stop.send(());
    let _ = std::fs::remove_dir_all(&dir);
    Ok(json!({"rows": a.rows, "inducing": dpcotrain_cotrain::party::DEFAULT_INDUCING, "fit_seconds": fit,
              "predict_grpc_ms_median": 1e3 * median(grpc.clone()), "predict_grpc_ms_max": 1e3 * grpc.iter().cloned().fold(0.0, f64::max),
              "predict_in_process_ms_median": 1e3 * median(inproc), "reps": a.reps, "target_ms": 50.0}))
}

/// A two-party 25-round run in-process and over loopback gRPC (TLS), same numbers; the best
/// of three of each.
async fn thesis_run(label: &str, sc: &Scenario) -> anyhow::Result<serde_json::Value> {
    let mut best = (f64::INFINITY, f64::INFINITY);
    let mut same = true;
    for _ in 0..3 {
        let (t_in, t_grpc, s) = thesis_run_once(label, sc).await?;
        best = (best.0.min(t_in), best.1.min(t_grpc));
        same &= s;
    }
    let (t_in, t_grpc) = best;
    let rounds = 25;
    let exchanges = 2 * rounds;
    Ok(json!({"scenario": label, "rounds": rounds, "exchanges": exchanges, "in_process_seconds": t_in,
              "grpc_tls_seconds": t_grpc, "overhead_ms_per_exchange": 1e3 * (t_grpc - t_in) / exchanges as f64,
              "same_numbers": same, "target_ms_per_exchange": 2.0}))
}

async fn thesis_run_once(label: &str, sc: &Scenario) -> anyhow::Result<(f64, f64, bool)> {
    let rounds = 25;
    let make = || build_parties(sc, CombinerKind::Noisy, Uncertainty::Marginal, &dp(ReleasePolicy::ReleaseOnce), 1);
    let local = make()?;
    let t = Instant::now();
    let reference = run_in_process(&local, rounds).await?;
    let t_in = t.elapsed().as_secs_f64();

    let remote = make()?;
    let names: Vec<String> =
        remote.iter().map(|p| p.lock().map(|p| p.name().to_string()).unwrap_or_default()).collect();
    let dir = scratch(label)?;
    let tls = pki(&dir, &[&names[0], &names[1]])?;
    let mut addrs = Vec::new();
    let mut stops = Vec::new();
    for (i, p) in remote.iter().enumerate() {
        let (addr, stop) = start(NodeService::new(p.clone(), "bench"), &tls[i]).await?;
        addrs.push(addr);
        stops.push(stop);
    }
    let peer = |i: usize, j: usize| -> anyhow::Result<GrpcPeer> {
        let p = remote[i].lock().map_err(|_| anyhow::anyhow!("lock"))?;
        Ok(GrpcPeer::new(PeerOptions {
            me: names[i].clone(),
            name: names[j].clone(),
            address: addrs[j].clone(),
            agreement: Agreement::of(&p, "bench", 0.0, 1.0),
            token: None,
            tls: Some(tls[i].client_config(&names[j])?),
            retry: Retry::default(),
        })?)
    };
    let peers = [vec![peer(0, 1)?], vec![peer(1, 0)?]];
    // Connect and handshake outside the timed loop (a node does this once).
    for (i, ps) in peers.iter().enumerate() {
        ps[0].handshake().await.with_context(|| format!("party {i}"))?;
    }
    let t = Instant::now();
    for round in 0..rounds {
        for i in 0..2 {
            query_turn(&remote[i], &peers[i], round).await?;
        }
    }
    let t_grpc = t.elapsed().as_secs_f64();
    for s in stops {
        let _ = s.send(());
    }
    let _ = std::fs::remove_dir_all(&dir);
    let same = remote.iter().zip(&reference.parties).all(|(p, r)| {
        p.lock().ok().and_then(|mut g| dpcotrain_cotrain::driver::evaluate(&mut g).ok()).map(|m| m.rmse.to_bits())
            == Some(r.after.rmse.to_bits())
    });
    Ok((t_in, t_grpc, same))
}

pub async fn run(a: NodeBenchArgs) -> anyhow::Result<()> {
    if a.rows < 10 || a.reps == 0 {
        anyhow::bail!("--rows must be at least 10 and --reps at least 1");
    }
    let sim = simulate(&SimConfig { n_obs: 25, seed: 1, ..SimConfig::default() })?;
    let cc = ccpp(&CcppConfig { seed: 1, ..CcppConfig::default() })?;
    let runs = vec![thesis_run("simulated", &sim).await?, thesis_run("ccpp", &cc).await?];
    let large = tokio::task::block_in_place(|| tokio::runtime::Handle::current().block_on(large_node(&a)))?;
    let out = json!({"large_node": large, "two_party_runs": runs});
    if a.json {
        println!("{out}");
        return Ok(());
    }
    for r in &runs {
        println!(
            "{:<10} 25 rounds, 2 parties: in-process {:.3} s, gRPC+TLS {:.3} s → {:.2} ms overhead per exchange (target < 2 ms); same numbers: {}",
            r["scenario"].as_str().unwrap_or(""),
            r["in_process_seconds"].as_f64().unwrap_or(0.0),
            r["grpc_tls_seconds"].as_f64().unwrap_or(0.0),
            r["overhead_ms_per_exchange"].as_f64().unwrap_or(0.0),
            r["same_numbers"]
        );
    }
    println!(
        "node with {} rows (VFE, M = {}): fitted in {:.1} s; Predict 25 indices + full cov + prior over gRPC+TLS with fsync'd state: median {:.1} ms, max {:.1} ms (target < 50 ms); in-process {:.1} ms",
        large["rows"],
        large["inducing"],
        large["fit_seconds"].as_f64().unwrap_or(0.0),
        large["predict_grpc_ms_median"].as_f64().unwrap_or(0.0),
        large["predict_grpc_ms_max"].as_f64().unwrap_or(0.0),
        large["predict_in_process_ms_median"].as_f64().unwrap_or(0.0)
    );
    Ok(())
}
