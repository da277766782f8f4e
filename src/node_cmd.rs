//! `dpcotrain node serve`, `dpcotrain run`, `dpcotrain status`, `dpcotrain certs` and
//! `dpcotrain data split-ccpp` (writes ready-made party CSVs from the shipped CCPP data).

use crate::node_config::{
    FederationConfig, PartyConfig, SecurityConfig, check_name, load, orchestrator_token, pair_token, party_from_config,
    read_token, rel, settings_from_config,
};
use crate::table::write_csv;
use anyhow::Context;
use clap::Args;
use dpcotrain_cotrain::ccpp::{CcppConfig, RESPONSE, ccpp};
use dpcotrain_cotrain::driver::evaluate_with_errors;
use dpcotrain_federation::auth::{Auth, ORCHESTRATOR};
use dpcotrain_federation::orchestrator::{Orchestrator, orchestrator_retry};
use dpcotrain_federation::store::StateStore;
use dpcotrain_federation::tls::{NodeTls, ensure_dev_pki};
use dpcotrain_federation::{Agreement, GrpcPeer, NodeService, PeerOptions, Retry, pb, serve};
use nalgebra::DMatrix;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use tonic::transport::{ClientTlsConfig, ServerTlsConfig};

#[derive(Debug, Args)]
pub struct ServeArgs {
    #[arg(long)]
    pub config: PathBuf,
}

/// Make the dev secrets (CA, certificates, tokens) for `names` in `dir` if they are missing.
/// Safe when several nodes start at once on the same folder.
pub fn ensure_dev_secrets(dir: &Path, names: &[String], hosts: &[String]) -> anyhow::Result<()> {
    ensure_dev_pki(dir, names, hosts).map_err(|e| anyhow::anyhow!("{e}"))?;
    let tokens = dir.join("tokens");
    std::fs::create_dir_all(&tokens).with_context(|| format!("cannot create {}", tokens.display()))?;
    let parties: Vec<&String> = names.iter().filter(|n| *n != ORCHESTRATOR).collect();
    let mut files = Vec::new();
    for (i, a) in parties.iter().enumerate() {
        for b in &parties[i + 1..] {
            files.push(pair_token(dir, a, b));
        }
        files.push(orchestrator_token(dir, a));
    }
    for f in files {
        if f.exists() {
            continue;
        }
        let tok: String = (0..32).map(|_| format!("{:02x}", rand::random::<u8>())).collect();
        let tmp = f.with_extension(format!("tmp{}", std::process::id()));
        // Created 0600 (never readable by others, not even for a moment), then linked into place.
        let _ = std::fs::remove_file(&tmp); // a stale one from a crash: its mode is unknown
        let mut opts = std::fs::OpenOptions::new();
        opts.write(true).create_new(true);
        #[cfg(unix)]
        std::os::unix::fs::OpenOptionsExt::mode(&mut opts, 0o600);
        let mut file = opts.open(&tmp).with_context(|| format!("cannot write {}", tmp.display()))?;
        std::io::Write::write_all(&mut file, format!("{tok}\n").as_bytes())
            .and_then(|()| file.sync_all())
            .with_context(|| format!("cannot write {}", tmp.display()))?;
        // hard_link never replaces: if another node won the race, keep its token.
        let _ = std::fs::hard_link(&tmp, &f);
        let _ = std::fs::remove_file(&tmp);
    }
    Ok(())
}

/// TLS material of principal `me` in a secrets folder.
fn node_tls(dir: &Path, me: &str) -> NodeTls {
    NodeTls { ca: dir.join("ca.pem"), cert: dir.join(format!("{me}.pem")), key: dir.join(format!("{me}.key")) }
}

fn client_tls(tls: &NodeTls, peer: &str) -> anyhow::Result<ClientTlsConfig> {
    tls.client_config(peer).map_err(|e| anyhow::anyhow!("{e}"))
}

/// A node ready to serve: its service (party fitted, state restored, peers set) and listener.
pub struct Launched {
    pub service: NodeService,
    pub listener: tokio::net::TcpListener,
    pub tls: Option<ServerTlsConfig>,
    /// The operations endpoint's listener (`ops_listen`), if configured.
    pub ops: Option<tokio::net::TcpListener>,
}

/// Everything `node serve` does before serving: validate the config, make or load secrets,
/// lock the state directory, fit the private model, resume from saved state, bind.
pub async fn launch(cfg: &PartyConfig, path: &Path) -> anyhow::Result<Launched> {
    cfg.validate(path)?;
    for (field, p) in [("data.train", &cfg.data.train), ("data.pool", &cfg.data.pool), ("data.test", &cfg.data.test)] {
        let full = rel(path, p);
        if !full.is_file() {
            anyhow::bail!("{}: {field} = {:?}: no such file ({})", path.display(), p.display(), full.display());
        }
    }
    let store = StateStore::open(&cfg.state_dir(path)).map_err(|e| anyhow::anyhow!("{e}"))?;
    let mut auth = Auth::open();
    let mut server_tls = None;
    let mut peer_sec: Vec<(Option<String>, Option<ClientTlsConfig>)> = vec![(None, None); cfg.peers.len()];
    if let Some(SecurityConfig { dir, generate_dev, hosts }) = &cfg.security {
        let dir = rel(path, dir);
        if *generate_dev {
            ensure_dev_secrets(&dir, &cfg.principals(), hosts)?;
        }
        let tls = node_tls(&dir, &cfg.name);
        server_tls = Some(tls.server_config().map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))?);
        let mut tokens = vec![(read_token(&orchestrator_token(&dir, &cfg.name))?, ORCHESTRATOR.to_string())];
        for (k, p) in cfg.peers.iter().enumerate() {
            let t = read_token(&pair_token(&dir, &cfg.name, &p.name))?;
            tokens.push((t.clone(), p.name.clone()));
            peer_sec[k] = (Some(t), Some(client_tls(&tls, &p.name)?));
        }
        auth = Auth::tokens(tokens, true).map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))?;
    }
    let cfg_path = path.to_path_buf();
    let (party, alone, resumed) = tokio::task::block_in_place(|| -> anyhow::Result<_> {
        let mut party = party_from_config(cfg, &cfg_path)?;
        let (_, alone) = evaluate_with_errors(&mut party)?;
        let resumed = match store.load().map_err(|e| anyhow::anyhow!("{e}"))? {
            Some(st) => {
                party.restore(&st).with_context(|| format!("cannot resume from {}", store.path().display()))?;
                Some((st.turns.len(), st.rho_spent()))
            }
            None => None,
        };
        Ok((party, alone, resumed))
    })?;
    if let Some((turns, rho)) = resumed {
        eprintln!("{}: resumed from {} ({turns} turns, ρ spent {rho:.4})", cfg.name, store.path().display());
    }
    let agreement = Agreement::of(&party, &cfg.federation_id, cfg.data.y_mean, cfg.data.y_scale);
    let mut peers = Vec::new();
    for (p, (token, tls)) in cfg.peers.iter().zip(peer_sec) {
        peers.push(GrpcPeer::new(PeerOptions {
            me: cfg.name.clone(),
            name: p.name.clone(),
            address: p.address.clone(),
            agreement: agreement.clone(),
            token,
            tls,
            retry: Retry::default(),
        })?);
    }
    let service = NodeService::new(Arc::new(Mutex::new(party)), &cfg.federation_id)
        .with_agreement(agreement)
        .with_auth(auth)
        .with_peers(peers)
        .with_store(store)
        .with_alone_errors(alone);
    let listener =
        tokio::net::TcpListener::bind(&cfg.listen).await.with_context(|| format!("cannot listen on {}", cfg.listen))?;
    let ops = match &cfg.ops_listen {
        Some(addr) => Some(
            tokio::net::TcpListener::bind(addr)
                .await
                .with_context(|| format!("cannot listen on {addr} (ops_listen)"))?,
        ),
        None => None,
    };
    Ok(Launched { service, listener, tls: server_tls, ops })
}

pub async fn serve_node(a: ServeArgs) -> anyhow::Result<()> {
    let cfg: PartyConfig = load(&a.config)?;
    eprintln!("{}: loading data and fitting the local GP…", cfg.name);
    let node = launch(&cfg, &a.config).await?;
    eprintln!(
        "{}: serving federation {:?} on {} ({})",
        cfg.name,
        cfg.federation_id,
        node.listener.local_addr()?,
        if node.tls.is_some() { "mutual TLS + tokens" } else { "INSECURE: plaintext, no authentication" }
    );
    if let Some(ops) = &node.ops {
        eprintln!("{}: metrics and gRPC health on {} (plaintext, no private data)", cfg.name, ops.local_addr()?);
    }
    let shutdown = async {
        let ctrl_c = tokio::signal::ctrl_c();
        #[cfg(unix)]
        {
            match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
                Ok(mut term) => tokio::select! { _ = ctrl_c => {}, _ = term.recv() => {} },
                Err(_) => {
                    let _ = ctrl_c.await;
                }
            }
        }
        #[cfg(not(unix))]
        {
            let _ = ctrl_c.await;
        }
        eprintln!("shutting down (in-flight calls finish; state is already on disk)");
    };
    // One signal stops both servers.
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let stopped = |mut rx: tokio::sync::watch::Receiver<bool>| async move {
        let _ = rx.wait_for(|s| *s).await;
    };
    let ops = node.ops.map(|l| {
        let svc = node.service.clone();
        tokio::spawn(dpcotrain_federation::ops::serve_ops(svc, l, stopped(stop_rx.clone())))
    });
    tokio::spawn(async move {
        shutdown.await;
        let _ = stop_tx.send(true);
    });
    serve(node.service, node.listener, node.tls, stopped(stop_rx)).await?;
    if let Some(h) = ops {
        h.await.context("operations endpoint task")?.context("operations endpoint")?;
    }
    Ok(())
}

#[derive(Debug, Args)]
pub struct CheckArgs {
    #[arg(long)]
    pub config: PathBuf,
    /// Check the file's schema and values only, not the files it names (e.g. a config meant
    /// for a container, whose paths exist only there).
    #[arg(long)]
    pub offline: bool,
}

/// `dpcotrain node check`: validate a party config without serving, and print what it
/// resolves to (listen port, state and secrets folders, the files it needs, peers) as JSON.
pub fn check(a: CheckArgs) -> anyhow::Result<()> {
    let cfg: PartyConfig = load(&a.config)?;
    cfg.validate(&a.config)?;
    settings_from_config(&cfg, &a.config)?;
    let f = a.config.display();
    let port_of = |addr: &str, what: &str| -> anyhow::Result<(String, u16)> {
        let hp = addr.split("://").last().unwrap_or(addr);
        let (h, p) = hp.rsplit_once(':').ok_or_else(|| anyhow::anyhow!("{f}: {what} {addr:?} has no :port"))?;
        let port = p.trim_end_matches('/').parse().map_err(|_| anyhow::anyhow!("{f}: {what} {addr:?}: bad port"))?;
        Ok((h.to_string(), port))
    };
    let (listen_host, listen_port) = port_of(&cfg.listen, "listen")?;
    let ops_port = cfg.ops_listen.as_deref().map(|o| port_of(o, "ops_listen")).transpose()?.map(|(_, p)| p);
    let data: Vec<PathBuf> =
        [&cfg.data.train, &cfg.data.pool, &cfg.data.test].iter().map(|p| rel(&a.config, p)).collect();
    let mut secrets = Vec::new();
    if let Some(sec) = &cfg.security {
        let dir = rel(&a.config, &sec.dir);
        let t = node_tls(&dir, &cfg.name);
        secrets.extend([t.ca, t.cert, t.key, orchestrator_token(&dir, &cfg.name)]);
        secrets.extend(cfg.peers.iter().map(|p| pair_token(&dir, &cfg.name, &p.name)));
    }
    let mut peers = Vec::new();
    for p in &cfg.peers {
        let (host, port) = port_of(&p.address, &format!("peer {} address", p.name))?;
        peers.push(serde_json::json!({"name": p.name, "host": host, "port": port}));
    }
    if !a.offline {
        for p in data.iter().chain(if cfg.security.as_ref().is_some_and(|s| s.generate_dev) {
            [].iter()
        } else {
            secrets.iter()
        }) {
            if !p.exists() {
                anyhow::bail!("{f}: {} does not exist", p.display());
            }
        }
        if let Some(sec) = &cfg.security
            && !sec.generate_dev
        {
            node_tls(&rel(&a.config, &sec.dir), &cfg.name).load().map_err(|e| anyhow::anyhow!("{f}: {e}"))?;
        }
        // The same path `node serve` takes: read the data by column name, build the party, fit
        // its local GP, and resume its ledger if there is one.
        let mut party = party_from_config(&cfg, &a.config)?;
        let state_dir = cfg.state_dir(&a.config);
        if let Some(st) = dpcotrain_federation::store::peek(&state_dir).map_err(|e| anyhow::anyhow!("{e}"))? {
            party
                .restore(&st)
                .with_context(|| format!("cannot resume from {}", state_dir.join("state.json").display()))?;
        }
    }
    let s = |p: &PathBuf| p.display().to_string();
    println!(
        "{}",
        serde_json::json!({"name": cfg.name, "federation_id": cfg.federation_id, "listen_host": listen_host,
            "listen_port": listen_port, "ops_port": ops_port, "state_dir": s(&cfg.state_dir(&a.config)),
            "security_dir": cfg.security.as_ref().map(|x| s(&rel(&a.config, &x.dir))),
            "secret_files": secrets.iter().map(s).collect::<Vec<_>>(),
            "data_files": data.iter().map(s).collect::<Vec<_>>(), "peers": peers})
    );
    Ok(())
}

#[derive(Debug, Args)]
pub struct RunArgs {
    #[arg(long)]
    pub config: PathBuf,
    /// Total number of rounds to reach (default: the config's `rounds`). A federation that
    /// was interrupted continues where it stopped.
    #[arg(long)]
    pub rounds: Option<u32>,
    #[arg(long)]
    pub json: bool,
}

/// The orchestrator of a federation config.
pub fn orchestrator(cfg: &FederationConfig, path: &Path) -> anyhow::Result<Orchestrator> {
    let mut nodes = Vec::new();
    let mut tls = None;
    for n in &cfg.nodes {
        check_name(&n.name, &format!("{}: nodes.name", path.display()))?;
        let (token, t) = match &cfg.security {
            Some(sec) => {
                let dir = rel(path, &sec.dir);
                let t = tls.get_or_insert_with(|| node_tls(&dir, ORCHESTRATOR));
                (Some(read_token(&orchestrator_token(&dir, &n.name))?), Some(client_tls(t, &n.name)?))
            }
            None => (None, None),
        };
        nodes.push((n.name.clone(), n.address.clone(), token, t));
    }
    let mut retry = orchestrator_retry();
    retry.give_up_after = std::time::Duration::from_secs(cfg.wait_seconds);
    let mut orch = Orchestrator::new(nodes, retry).map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))?;
    orch.federation_id = Some(cfg.federation_id.clone());
    Ok(orch)
}

/// A node's status as JSON (what `status --json` and `run --json` print per party).
pub fn party_json(st: &pb::StatusResponse) -> serde_json::Value {
    let spent: Vec<serde_json::Value> = st
        .spend
        .iter()
        .map(|s| {
            let log: Vec<serde_json::Value> = s
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
                       "rounds": st.rounds_done, "model_version": st.model_version,
                       "rmse_per_round": st.rmse_per_round, "privacy_spent": spent,
                       "answers_set_aside": st.answers_set_aside,
                       "restricted": st.restricted, "federation_id": st.federation_id,
                       "privacy_spent_total": {"rho": st.rho_total, "epsilon": st.epsilon_total}})
}

/// What [`drive`] did.
pub struct Drove {
    /// Rounds each node had done when the run began (node order).
    pub position: Vec<u32>,
    /// The first round run (the lowest position, at most the target).
    pub start: u32,
    /// Test RMSE of each node after each of its turns in this run.
    pub per_round: Vec<Vec<f64>>,
    /// Exchanges that failed or were refused in turns that happened (`"round 3, A ← B: …"`).
    pub failures: Vec<String>,
}

/// Bring every node to `target` rounds (continuing an interrupted run), reporting each turn.
/// A turn that did not happen (no peer answered; one was unreachable or refused the handshake)
/// stops the run with an error; the node recorded nothing, so running again retries it.
pub async fn drive(
    orch: &Orchestrator,
    target: u32,
    mut on_turn: impl FnMut(u32, usize, &pb::RunRoundResponse),
) -> anyhow::Result<Drove> {
    for (i, n) in orch.nodes.iter().enumerate() {
        if !orch.reachable(i).await {
            eprintln!(
                "waiting for node {} at {} (up to {} s; is it running?)…",
                n.name,
                n.address,
                orch.retry.give_up_after.as_secs()
            );
        }
    }
    let mut position = Vec::new();
    for i in 0..orch.nodes.len() {
        position.push(orch.status(i).await.map_err(anyhow::Error::msg)?.rounds_done);
    }
    let start = position.iter().copied().min().unwrap_or(0).min(target);
    let mut per_round = vec![Vec::new(); orch.nodes.len()];
    let mut failures = Vec::new();
    for round in start..target {
        for (i, rmse) in per_round.iter_mut().enumerate() {
            let r = orch.run_round(i, round).await.map_err(|e| {
                anyhow::anyhow!(
                    "{e}. Rounds before {round} are done{}; run again to retry round {round}",
                    if failures.is_empty() { String::new() } else { format!(" ({} exchanges failed)", failures.len()) }
                )
            })?;
            on_turn(round, i, &r);
            rmse.push(r.test_rmse);
            failures.extend(r.refused.iter().map(|why| format!("round {round}, {} ← {why}", r.querier)));
        }
    }
    Ok(Drove { position, start, per_round, failures })
}

/// "A at round 3, B at 4" (or "both at round 3").
fn positions(orch: &Orchestrator, position: &[u32]) -> String {
    if position.windows(2).all(|w| w[0] == w[1]) {
        return format!("every node at round {}", position.first().copied().unwrap_or(0));
    }
    orch.nodes.iter().zip(position).map(|(n, r)| format!("{} at round {r}", n.name)).collect::<Vec<_>>().join(", ")
}

pub async fn run(a: RunArgs) -> anyhow::Result<()> {
    let cfg: FederationConfig = load(&a.config)?;
    let target = a.rounds.unwrap_or(cfg.rounds);
    let orch = orchestrator(&cfg, &a.config)?;
    let bar = indicatif::ProgressBar::new(0);
    bar.set_style(
        indicatif::ProgressStyle::with_template("{bar:30} round {msg} ({pos}/{len} turns, eta {eta})")
            .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
    );
    let n = orch.nodes.len() as u64;
    let mut first = true;
    let mut skipped: Vec<String> = Vec::new();
    let drove = drive(&orch, target, |round, i, r| {
        skipped.extend(r.skipped.iter().cloned());
        if first {
            bar.set_length((target - round) as u64 * n);
            first = false;
        }
        bar.set_message(format!("{}/{target}", round + 1));
        if i + 1 == n as usize {
            bar.inc(0);
        }
        bar.inc(1);
    })
    .await?;
    bar.finish_and_clear();
    let Drove { position, start, per_round, failures } = drove;
    let mut rows = Vec::new();
    for i in 0..per_round.len() {
        rows.push(party_json(&orch.status(i).await.map_err(anyhow::Error::msg)?));
    }
    let ran = per_round.first().map_or(0, Vec::len);
    if a.json {
        println!(
            "{}",
            serde_json::json!({"federation_id": cfg.federation_id, "rounds": target, "started_at_round": start,
                               "position_before": position, "rounds_run": ran,
                               "parties": rows, "refused": failures, "skipped": skipped})
        );
    } else {
        if ran == 0 {
            println!("nothing to do: {} (target {target})", positions(&orch, &position));
        } else if position.iter().any(|&r| r > 0) {
            println!("continued an earlier run: {}; ran rounds {start} to {}", positions(&orch, &position), target - 1);
        }
        println!(
            "{:<10} {:>12} {:>12}  privacy spent on its labels (ε per requester)",
            "party", "RMSE alone", "RMSE after"
        );
        for r in &rows {
            let spent: Vec<String> = r["privacy_spent"]
                .as_array()
                .map(|v| {
                    v.iter()
                        .map(|s| {
                            format!(
                                "{}: {:.3}",
                                s["peer"].as_str().unwrap_or("?"),
                                s["epsilon"].as_f64().unwrap_or(0.0)
                            )
                        })
                        .collect()
                })
                .unwrap_or_default();
            println!(
                "{:<10} {:>12.4} {:>12.4}  {}",
                r["party"].as_str().unwrap_or(""),
                r["rmse_before"].as_f64().unwrap_or(f64::NAN),
                r["rmse_after"].as_f64().unwrap_or(f64::NAN),
                if spent.is_empty() { "none".to_string() } else { spent.join(", ") }
            );
        }
        if !skipped.is_empty() {
            println!(
                "{} peer requests not sent: each peer's budget for the querier was already spent (its one release was made)",
                skipped.len()
            );
        }
    }
    if !failures.is_empty() {
        for why in &failures {
            eprintln!("failed: {why}");
        }
        anyhow::bail!("{} of the run's exchanges failed or were refused (listed above)", failures.len());
    }
    Ok(())
}

#[derive(Debug, Args)]
pub struct StatusArgs {
    /// Node name (with --config) or address, e.g. http://127.0.0.1:50051
    #[arg(long)]
    pub node: String,
    /// The federation config, for the node's address, certificate and token.
    #[arg(long)]
    pub config: Option<PathBuf>,
    /// Print JSON (for scripts) instead of the table.
    #[arg(long)]
    pub json: bool,
}

/// A node's status for a person: position, RMSE with the paired SE of the change, RMSE per
/// round, and the privacy spent per requester with its releases.
fn status_table(st: &pb::StatusResponse) -> String {
    use std::fmt::Write as _;
    let mut o = String::new();
    let _ = writeln!(o, "party {} (federation {:?})", st.party, st.federation_id);
    let _ = writeln!(o, "  rounds done     {}   (model version {})", st.rounds_done, st.model_version);
    if st.restricted {
        let _ = writeln!(o, "  (restricted view: you are a peer; you see your own spend only)");
    } else {
        let _ = writeln!(
            o,
            "  test RMSE       {:.4} alone → {:.4} now  (change {:+.4}, SE {:.4})",
            st.test_rmse_alone,
            st.test_rmse,
            st.test_rmse - st.test_rmse_alone,
            st.rmse_change_se
        );
        if !st.rmse_per_round.is_empty() {
            let v: Vec<String> = st.rmse_per_round.iter().map(|r| format!("{r:.4}")).collect();
            let _ = writeln!(o, "  RMSE per round  {}", v.join(" "));
        }
        if st.answers_set_aside {
            let _ = writeln!(
                o,
                "  answers         set aside by the guard (they made its own rows' leave-one-out error worse): the model is the private-only one"
            );
        }
    }
    if st.spend.is_empty() {
        let _ = writeln!(o, "  privacy spent   nothing released");
    } else {
        let _ = writeln!(o, "  privacy spent on its labels:");
        let _ = writeln!(o, "    {:<12} {:>8} {:>10} {:>10} {:>9}", "requester", "ε", "ρ", "ρ budget", "releases");
        for s in &st.spend {
            let _ = writeln!(
                o,
                "    {:<12} {:>8.4} {:>10.3e} {:>10.3e} {:>9}",
                s.peer, s.epsilon, s.rho, s.rho_budget, s.releases
            );
        }
        let _ = writeln!(o, "    all requesters together: ε {:.4} (ρ {:.3e})", st.epsilon_total, st.rho_total);
        // The DP θ vote (theta = "select") is one entry of every requester's ledger.
        if let Some(r) = st
            .spend
            .iter()
            .flat_map(|s| &s.release_log)
            .find(|r| r.id == dpcotrain_cotrain::responder::THETA_SELECTION_ID)
        {
            let _ = writeln!(
                o,
                "    of which the θ vote (theta = select): ρ {:.3e} per requester (σ {:.2} votes)",
                r.rho, r.sigma
            );
        }
    }
    o
}

pub async fn status(a: StatusArgs) -> anyhow::Result<()> {
    let (orch, i) = match &a.config {
        Some(p) => {
            let cfg: FederationConfig = load(p)?;
            let i = cfg
                .nodes
                .iter()
                .position(|n| n.name == a.node || n.address == a.node)
                .ok_or_else(|| anyhow::anyhow!("{}: no node named or at {:?}", p.display(), a.node))?;
            (orchestrator(&cfg, p)?, i)
        }
        None => {
            let mut retry = orchestrator_retry();
            retry.give_up_after = std::time::Duration::from_secs(2);
            let o =
                Orchestrator::new(vec![("?".into(), a.node.clone(), None, None)], retry).map_err(anyhow::Error::msg)?;
            (o, 0)
        }
    };
    let mut orch = orch;
    orch.retry.give_up_after = std::time::Duration::from_secs(2);
    let st = orch.status_unchecked(i).await.map_err(anyhow::Error::msg)?;
    if a.json {
        println!("{}", party_json(&st));
    } else {
        print!("{}", status_table(&st));
    }
    Ok(())
}

#[derive(Debug, Args)]
pub struct CertsArgs {
    /// Secrets folder to create (ca.pem, NAME.pem/.key, tokens/).
    #[arg(long)]
    pub out: PathBuf,
    /// Party names (comma-separated); the orchestrator is always included.
    #[arg(long, value_delimiter = ',', required = true)]
    pub parties: Vec<String>,
    /// Host names / IPs the certificates are valid for.
    #[arg(long, value_delimiter = ',', default_value = "localhost,127.0.0.1")]
    pub hosts: Vec<String>,
}

/// `dpcotrain certs`: throw-away development secrets for a federation.
pub fn certs(a: CertsArgs) -> anyhow::Result<()> {
    let mut names = Vec::new();
    for p in &a.parties {
        check_name(p, "--parties")?;
        names.push(p.clone());
    }
    names.push(ORCHESTRATOR.into());
    ensure_dev_secrets(&a.out, &names, &a.hosts)?;
    eprintln!("development secrets for {} in {} (do not use them in production)", names.join(", "), a.out.display());
    Ok(())
}

#[derive(Debug, Args)]
pub struct SplitArgs {
    /// Output folder: writes party-a/, party-b/, … with train.csv, pool.csv, test.csv.
    #[arg(long)]
    pub out: PathBuf,
    /// One party's columns, e.g. `--view AT,V --view AP,RH --view V,RH` (default: the thesis's
    /// two views {AT, V} and {AP, RH}). More than two views need `--masking no`.
    #[arg(long = "view")]
    pub views: Vec<String>,
    #[arg(long, default_value_t = 25)]
    pub n_obs: usize,
    #[arg(long, default_value = "yes")]
    pub masking: String,
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
}

/// Write each CCPP party's private view (standardised, D18) as CSV files.
pub fn split_ccpp(a: SplitArgs) -> anyhow::Result<()> {
    let masking = match a.masking.as_str() {
        "yes" => true,
        "no" => false,
        o => anyhow::bail!("--masking {o:?}: use yes or no"),
    };
    let views: Vec<Vec<String>> =
        a.views.iter().map(|v| v.split(',').map(|c| c.trim().to_string()).collect()).collect();
    let sc = if views.len() > 2 {
        if masking {
            anyhow::bail!("--masking yes splits by two k-means clusters: use --masking no with {} views", views.len());
        }
        let d = CcppConfig::default();
        dpcotrain_cotrain::ccpp::ccpp_views(&views, a.n_obs, d.n_pool, d.n_test, a.seed)?
    } else {
        let mut cfg = CcppConfig { masking, n_obs: a.n_obs, seed: a.seed, ..CcppConfig::default() };
        if let [v1, v2] = views.as_slice() {
            (cfg.view1, cfg.view2) = (v1.clone(), v2.clone());
        } else if !views.is_empty() {
            anyhow::bail!("give two or more --view (or none for the thesis's {{AT, V}} and {{AP, RH}})");
        }
        ccpp(&cfg)?
    };
    if sc.parties.len() > 26 {
        anyhow::bail!("at most 26 views (party-a … party-z)");
    }
    let dirs: Vec<String> = (0..sc.parties.len()).map(|i| format!("party-{}", (b'a' + i as u8) as char)).collect();
    write_views(&sc, &a.out, &dirs.iter().map(String::as_str).collect::<Vec<_>>(), RESPONSE)?;
    eprintln!("wrote {}", a.out.display());
    Ok(())
}

/// Write every party's view of a scenario as `DIR/{train,test,pool}.csv` (train and test with
/// the `target` column last).
pub fn write_views(
    sc: &dpcotrain_cotrain::data::Scenario,
    out: &Path,
    dirs: &[&str],
    target: &str,
) -> anyhow::Result<()> {
    for (p, dir) in sc.parties.iter().zip(dirs) {
        let d = out.join(dir);
        std::fs::create_dir_all(&d).with_context(|| format!("cannot create {}", d.display()))?;
        let with_y = |x: &DMatrix<f64>, y: &nalgebra::DVector<f64>| {
            let mut m = DMatrix::zeros(x.nrows(), x.ncols() + 1);
            m.columns_mut(0, x.ncols()).copy_from(x);
            m.column_mut(x.ncols()).copy_from(y);
            m
        };
        let mut header = p.columns.clone();
        header.push(target.to_string());
        write_csv(&d.join("train.csv"), &header, &with_y(&p.x_train, &p.y_train))?;
        write_csv(&d.join("test.csv"), &header, &with_y(&p.x_test, &p.y_test))?;
        write_csv(&d.join("pool.csv"), &p.columns, &p.x_pool)?;
    }
    Ok(())
}
