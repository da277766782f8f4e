//! `dpcotrain node serve`, `dpcotrain run`, `dpcotrain status`, and `dpcotrain data split-ccpp`
//! (writes ready-made party CSVs from the shipped CCPP data).

use crate::table::{Table, write_csv};
use anyhow::Context;
use clap::Args;
use dpcotrain_cotrain::answer::Uncertainty;
use dpcotrain_cotrain::ccpp::{CcppConfig, RESPONSE, ccpp};
use dpcotrain_cotrain::combiner::CombinerKind;
use dpcotrain_cotrain::data::PartyData;
use dpcotrain_cotrain::driver::default_kernel;
use dpcotrain_cotrain::responder::{DpConfig, DpMode, Party, ReleasePolicy};
use dpcotrain_federation::pb::node_client::NodeClient;
use dpcotrain_federation::{GrpcPeer, NodeService, pb, serve};
use dpcotrain_privacy::calibrate::{Mechanism, THESIS_MULTIPLIER};
use dpcotrain_privacy::sensitivity::LabelRange;
use nalgebra::DMatrix;
use serde::Deserialize;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

/// A party's node configuration (`party.toml`). Relative paths are relative to the file.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PartyConfig {
    pub name: String,
    pub federation_id: String,
    /// host:port to listen on.
    pub listen: String,
    pub data: DataConfig,
    #[serde(default)]
    pub model: ModelConfig,
    #[serde(default)]
    pub privacy: PrivacyConfig,
    #[serde(default)]
    pub peers: Vec<PeerConfig>,
    #[serde(default)]
    pub seed: Option<u64>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DataConfig {
    /// Private labelled rows: this party's covariate columns plus the target column.
    pub train: PathBuf,
    /// This party's view of the shared pool (row j = pool index j); covariates only.
    pub pool: PathBuf,
    /// This party's view of the shared test entities, with the target (evaluation only).
    pub test: PathBuf,
    pub target: String,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ModelConfig {
    #[serde(default = "noisy")]
    pub combiner: String,
    #[serde(default = "marginal")]
    pub uncertainty: String,
}

fn noisy() -> String {
    "noisy".into()
}
fn marginal() -> String {
    "marginal".into()
}

impl Default for ModelConfig {
    fn default() -> Self {
        ModelConfig { combiner: noisy(), uncertainty: marginal() }
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PrivacyConfig {
    /// off | thesis | calibrated
    #[serde(default = "calibrated")]
    pub mode: String,
    #[serde(default = "one")]
    pub epsilon: f64,
    #[serde(default = "delta")]
    pub delta: f64,
    /// ε budget per requester (default: epsilon).
    pub budget_epsilon: Option<f64>,
    #[serde(default = "range")]
    pub label_range: [f64; 2],
    /// release-once | per-query
    #[serde(default = "release_once")]
    pub policy: String,
}

fn calibrated() -> String {
    "calibrated".into()
}
fn one() -> f64 {
    1.0
}
fn delta() -> f64 {
    1e-5
}
fn range() -> [f64; 2] {
    [-3.0, 3.0]
}
fn release_once() -> String {
    "release-once".into()
}

impl Default for PrivacyConfig {
    fn default() -> Self {
        PrivacyConfig {
            mode: calibrated(),
            epsilon: 1.0,
            delta: 1e-5,
            budget_epsilon: None,
            label_range: range(),
            policy: release_once(),
        }
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PeerConfig {
    pub name: String,
    /// e.g. http://127.0.0.1:50052
    pub address: String,
}

/// The orchestrator's view (`federation.toml`).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FederationConfig {
    pub federation_id: String,
    #[serde(default = "rounds")]
    pub rounds: u32,
    pub nodes: Vec<PeerConfig>,
}

fn rounds() -> u32 {
    25
}

fn load<T: for<'de> Deserialize<'de>>(path: &Path) -> anyhow::Result<T> {
    let text = std::fs::read_to_string(path).with_context(|| format!("cannot read {}", path.display()))?;
    toml::from_str(&text).map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))
}

fn rel(base: &Path, p: &Path) -> PathBuf {
    if p.is_absolute() { p.to_path_buf() } else { base.parent().unwrap_or(Path::new(".")).join(p) }
}

fn party_from_config(cfg: &PartyConfig, path: &Path) -> anyhow::Result<Party> {
    let train = Table::read(&rel(path, &cfg.data.train))?;
    train.require_rows(2, "training data")?;
    let (x_train, y_train, columns, _) = train.split_target(Some(&cfg.data.target))?;
    let pool = Table::read(&rel(path, &cfg.data.pool))?;
    pool.expect_columns(columns.len(), "pool view")?;
    let test = Table::read(&rel(path, &cfg.data.test))?;
    let (x_test, y_test, _, _) = test.split_target(Some(&cfg.data.target))?;
    if x_test.ncols() != columns.len() {
        anyhow::bail!(
            "{}: test view has {} covariate columns, training has {}",
            cfg.data.test.display(),
            x_test.ncols(),
            columns.len()
        );
    }
    let data = PartyData { name: cfg.name.clone(), columns, x_train, y_train, x_pool: pool.data, x_test, y_test };
    let kind = match cfg.model.combiner.as_str() {
        "noisy" => CombinerKind::Noisy,
        "blocky" => CombinerKind::Blocky,
        "hybrid" => CombinerKind::Hybrid,
        o => anyhow::bail!("{}: model.combiner {o:?} is not noisy, blocky or hybrid", path.display()),
    };
    let unc = match cfg.model.uncertainty.as_str() {
        "none" => Uncertainty::None,
        "marginal" => Uncertainty::Marginal,
        "full" => Uncertainty::Full,
        o => anyhow::bail!("{}: model.uncertainty {o:?} is not none, marginal or full", path.display()),
    };
    let pv = &cfg.privacy;
    let policy = match pv.policy.as_str() {
        "release-once" => ReleasePolicy::ReleaseOnce,
        "per-query" => ReleasePolicy::PerQuery,
        o => anyhow::bail!("{}: privacy.policy {o:?} is not release-once or per-query", path.display()),
    };
    for (name, v) in [("epsilon", pv.epsilon), ("delta", pv.delta)] {
        if !v.is_finite() || v <= 0.0 {
            anyhow::bail!("{}: privacy.{name} must be a positive number, got {v}", path.display());
        }
    }
    let mode = match pv.mode.as_str() {
        "off" => DpMode::Off,
        "thesis" => DpMode::Thesis { multiplier: THESIS_MULTIPLIER },
        "calibrated" => DpMode::Calibrated {
            epsilon: pv.epsilon,
            delta: pv.delta,
            mechanism: Mechanism::Analytic,
            range: LabelRange::new(pv.label_range[0], pv.label_range[1])
                .map_err(|e| anyhow::anyhow!("{}: privacy.label_range: {e}", path.display()))?,
            budget_epsilon: pv.budget_epsilon.unwrap_or(pv.epsilon),
        },
        o => anyhow::bail!("{}: privacy.mode {o:?} is not off, thesis or calibrated", path.display()),
    };
    let (k, noise) = default_kernel(&data);
    let dp = DpConfig { mode, policy, inflate_variance: true };
    Ok(Party::new(data, kind, unc, k, noise, dp, cfg.seed)?)
}

#[derive(Debug, Args)]
pub struct ServeArgs {
    #[arg(long)]
    pub config: PathBuf,
}

pub async fn serve_node(a: ServeArgs) -> anyhow::Result<()> {
    let cfg: PartyConfig = load(&a.config)?;
    eprintln!("{}: loading data and fitting the local GP…", cfg.name);
    let party = tokio::task::block_in_place(|| party_from_config(&cfg, &a.config))?;
    let svc = NodeService::new(Arc::new(Mutex::new(party)), &cfg.federation_id);
    let listener =
        tokio::net::TcpListener::bind(&cfg.listen).await.with_context(|| format!("cannot listen on {}", cfg.listen))?;
    eprintln!("{}: serving federation {:?} on {}", cfg.name, cfg.federation_id, listener.local_addr()?);
    // Peers are connected lazily (they may start after us).
    let peers = svc.peers.clone();
    let fed = cfg.federation_id.clone();
    let peer_cfgs: Vec<(String, String)> = cfg.peers.iter().map(|p| (p.name.clone(), p.address.clone())).collect();
    tokio::spawn(async move {
        for (name, addr) in peer_cfgs {
            loop {
                match GrpcPeer::connect(&name, &fed, &addr).await {
                    Ok(p) => {
                        peers.lock().await.push(p);
                        break;
                    }
                    Err(_) => tokio::time::sleep(std::time::Duration::from_millis(300)).await,
                }
            }
        }
    });
    let shutdown = async {
        let ctrl_c = tokio::signal::ctrl_c();
        #[cfg(unix)]
        {
            let mut term =
                tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()).expect("SIGTERM handler");
            tokio::select! { _ = ctrl_c => {}, _ = term.recv() => {} }
        }
        #[cfg(not(unix))]
        {
            let _ = ctrl_c.await;
        }
        eprintln!("shutting down");
    };
    serve(svc, listener, shutdown).await?;
    Ok(())
}

#[derive(Debug, Args)]
pub struct RunArgs {
    #[arg(long)]
    pub config: PathBuf,
    /// Override the number of rounds.
    #[arg(long)]
    pub rounds: Option<u32>,
    #[arg(long)]
    pub json: bool,
}

async fn client(addr: &str) -> anyhow::Result<NodeClient<tonic::transport::Channel>> {
    NodeClient::connect(addr.to_string()).await.with_context(|| format!("cannot reach node at {addr} (is it running?)"))
}

pub async fn run(a: RunArgs) -> anyhow::Result<()> {
    let cfg: FederationConfig = load(&a.config)?;
    let rounds = a.rounds.unwrap_or(cfg.rounds);
    let mut clients = Vec::new();
    let mut before = Vec::new();
    for n in &cfg.nodes {
        let mut c = client(&n.address).await?;
        let st = c.status(pb::StatusRequest {}).await.with_context(|| format!("status of {}", n.name))?.into_inner();
        before.push(st.test_rmse);
        clients.push(c);
    }
    // Wait until every node has connected its peers (they connect lazily at start-up).
    tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    let bar = indicatif::ProgressBar::new(rounds as u64 * clients.len() as u64);
    let mut refusals = Vec::new();
    for round in 0..rounds {
        for (i, c) in clients.iter_mut().enumerate() {
            let r = c
                .run_round(pb::RunRoundRequest { round })
                .await
                .with_context(|| format!("round {round} on {}", cfg.nodes[i].name))?
                .into_inner();
            refusals.extend(r.refused);
            bar.inc(1);
        }
    }
    bar.finish_and_clear();
    let mut rows = Vec::new();
    for (i, c) in clients.iter_mut().enumerate() {
        let st = c.status(pb::StatusRequest {}).await?.into_inner();
        let spent: Vec<serde_json::Value> =
            st.spend.iter().map(|s| serde_json::json!({"peer": s.peer, "rho": s.rho, "epsilon": s.epsilon})).collect();
        rows.push(serde_json::json!({"party": st.party, "rmse_before": before[i], "rmse_after": st.test_rmse,
                                     "rounds": st.rounds_done, "privacy_spent": spent}));
    }
    if a.json {
        println!(
            "{}",
            serde_json::json!({"federation_id": cfg.federation_id, "rounds": rounds, "parties": rows, "refused": refusals})
        );
    } else {
        println!("{:<10} {:>12} {:>12}  privacy spent on its labels", "party", "RMSE alone", "RMSE after");
        for r in &rows {
            println!(
                "{:<10} {:>12.4} {:>12.4}  {}",
                r["party"].as_str().unwrap_or(""),
                r["rmse_before"].as_f64().unwrap_or(f64::NAN),
                r["rmse_after"].as_f64().unwrap_or(f64::NAN),
                r["privacy_spent"]
            );
        }
        for why in &refusals {
            println!("refused: {why}");
        }
    }
    Ok(())
}

#[derive(Debug, Args)]
pub struct StatusArgs {
    /// Node address, e.g. http://127.0.0.1:50051
    #[arg(long)]
    pub node: String,
}

pub async fn status(a: StatusArgs) -> anyhow::Result<()> {
    let st = client(&a.node).await?.status(pb::StatusRequest {}).await?.into_inner();
    println!(
        "{}",
        serde_json::json!({"party": st.party, "model_version": st.model_version, "rounds_done": st.rounds_done,
                           "test_rmse": st.test_rmse,
                           "spend": st.spend.iter().map(|s| serde_json::json!({"peer": s.peer, "rho": s.rho, "epsilon": s.epsilon})).collect::<Vec<_>>()})
    );
    Ok(())
}

#[derive(Debug, Args)]
pub struct SplitArgs {
    /// Output folder: writes party-a/ and party-b/ with train.csv, pool.csv, test.csv.
    #[arg(long)]
    pub out: PathBuf,
    #[arg(long, default_value_t = 25)]
    pub n_obs: usize,
    #[arg(long, default_value = "yes")]
    pub masking: String,
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
}

/// Write each CCPP party's private view (standardised, D18) as CSV files.
pub fn split_ccpp(a: SplitArgs) -> anyhow::Result<()> {
    let sc = ccpp(&CcppConfig { masking: a.masking == "yes", n_obs: a.n_obs, seed: a.seed, ..CcppConfig::default() })?;
    for (p, dir) in sc.parties.iter().zip(["party-a", "party-b"]) {
        let d = a.out.join(dir);
        std::fs::create_dir_all(&d).with_context(|| format!("cannot create {}", d.display()))?;
        let with_y = |x: &DMatrix<f64>, y: &nalgebra::DVector<f64>| {
            let mut m = DMatrix::zeros(x.nrows(), x.ncols() + 1);
            m.columns_mut(0, x.ncols()).copy_from(x);
            m.column_mut(x.ncols()).copy_from(y);
            m
        };
        let mut header = p.columns.clone();
        header.push(RESPONSE.to_string());
        write_csv(&d.join("train.csv"), &header, &with_y(&p.x_train, &p.y_train))?;
        write_csv(&d.join("test.csv"), &header, &with_y(&p.x_test, &p.y_test))?;
        write_csv(&d.join("pool.csv"), &p.columns, &p.x_pool)?;
    }
    eprintln!("wrote {}", a.out.display());
    Ok(())
}
