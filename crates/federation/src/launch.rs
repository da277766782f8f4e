//! Node assembly: everything between a `party.toml` and a node ready to serve, and between a
//! `federation.toml` and an orchestrator driving rounds — so that a test (or another binary)
//! starts a node from its config without the CLI. [`launch`] validates the config, makes or
//! loads the secrets, locks the state directory, fits the private model, resumes from saved
//! state and binds; [`orchestrator`] and [`drive`] bring every node to a target round.

use crate::auth::{Auth, ORCHESTRATOR};
use crate::config::{
    ConfigError, FederationConfig, PartyConfig, SecurityConfig, check_name, orchestrator_token, pair_token,
    party_from_config, read_token, rel, settings_from_config,
};
use crate::orchestrator::{Orchestrator, orchestrator_retry};
use crate::store::{StateStore, StoreError};
use crate::tls::{NodeTls, TlsError, ensure_dev_pki};
use crate::{Agreement, GrpcPeer, NodeService, PeerOptions, Retry, pb};
use dpcotrain_cotrain::CotrainError;
use dpcotrain_cotrain::driver::evaluate_with_errors;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use tonic::transport::{ClientTlsConfig, ServerTlsConfig};

/// Why a node could not be launched, or an orchestrator built or run.
#[derive(Debug, thiserror::Error)]
pub enum LaunchError {
    #[error(transparent)]
    Config(#[from] ConfigError),
    #[error(transparent)]
    Tls(#[from] TlsError),
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error(transparent)]
    Node(#[from] crate::error::NodeError),
    #[error("cannot {what} {}: {source}", path.display())]
    Io { what: &'static str, path: PathBuf, source: std::io::Error },
    #[error("{}: {field} = {:?}: no such file ({})", config.display(), given.display(), resolved.display())]
    MissingData { config: PathBuf, field: &'static str, given: PathBuf, resolved: PathBuf },
    #[error("{}: {message}", config.display())]
    Auth { config: PathBuf, message: String },
    /// Fitting or evaluating the private model, or building a peer client.
    #[error(transparent)]
    Party(#[from] CotrainError),
    #[error("cannot resume from {}: {source}", state.display())]
    Resume { state: PathBuf, source: Box<CotrainError> },
    #[error("cannot listen on {addr}{}: {source}", if *ops { " (ops_listen)" } else { "" })]
    Bind { addr: String, ops: bool, source: std::io::Error },
    #[error("{}: {message}", config.display())]
    Orchestrator { config: PathBuf, message: String },
    /// A round could not be driven (the message says which and how to retry).
    #[error("{0}")]
    Drive(String),
}

/// Make the dev secrets (CA, certificates, tokens) for `names` in `dir` if they are missing.
/// Safe when several nodes start at once on the same folder.
pub fn ensure_dev_secrets(dir: &Path, names: &[String], hosts: &[String]) -> Result<(), LaunchError> {
    ensure_dev_pki(dir, names, hosts)?;
    let tokens = dir.join("tokens");
    std::fs::create_dir_all(&tokens).map_err(|source| LaunchError::Io {
        what: "create",
        path: tokens.clone(),
        source,
    })?;
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
        let write_err = |source| LaunchError::Io { what: "write", path: tmp.clone(), source };
        let mut file = opts.open(&tmp).map_err(write_err)?;
        std::io::Write::write_all(&mut file, format!("{tok}\n").as_bytes())
            .and_then(|()| file.sync_all())
            .map_err(write_err)?;
        // hard_link never replaces: if another node won the race, keep its token.
        let _ = std::fs::hard_link(&tmp, &f);
        let _ = std::fs::remove_file(&tmp);
    }
    Ok(())
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
/// lock the state directory, bind, fit the private model, resume from saved state.
pub async fn launch(cfg: &PartyConfig, path: &Path) -> Result<Launched, LaunchError> {
    cfg.validate(path)?;
    match crate::conn_limits::raise_open_files_limit() {
        Ok((before, after)) if after > before => {
            tracing::info!("{}: open-files limit raised from {before} to {after}", cfg.name);
        }
        Ok(_) => {}
        Err(e) => tracing::warn!("{}: could not raise the open-files limit: {e}", cfg.name),
    }
    for (field, p) in [("data.train", &cfg.data.train), ("data.pool", &cfg.data.pool), ("data.test", &cfg.data.test)] {
        let full = rel(path, p);
        if !full.is_file() {
            return Err(LaunchError::MissingData {
                config: path.to_path_buf(),
                field,
                given: p.clone(),
                resolved: full,
            });
        }
    }
    // The settings' own checks (privacy, combiner, guard) need no data: before the port.
    settings_from_config(cfg, path)?;
    let ignored = crate::config::ignored_privacy_settings_at(path);
    if !ignored.is_empty() {
        tracing::warn!("{}: privacy.mode = \"off\" ignores {}", path.display(), ignored.join(", "));
    }
    let store = StateStore::open(&cfg.state_dir(path))?;
    // Bind before the private fit (which can take minutes on a large view): a port in use is
    // reported at once. Connections wait in the backlog until the node serves.
    let listener = tokio::net::TcpListener::bind(cfg.listen.to_string()).await.map_err(|source| LaunchError::Bind {
        addr: cfg.listen.to_string(),
        ops: false,
        source,
    })?;
    let ops = match &cfg.ops_listen {
        Some(addr) => {
            Some(tokio::net::TcpListener::bind(addr.to_string()).await.map_err(|source| LaunchError::Bind {
                addr: addr.to_string(),
                ops: true,
                source,
            })?)
        }
        None => None,
    };
    let mut auth = Auth::open();
    let mut server_tls = None;
    let mut peer_sec: Vec<(Option<String>, Option<ClientTlsConfig>)> = vec![(None, None); cfg.peers.len()];
    if let Some(SecurityConfig { dir, generate_dev, hosts }) = &cfg.security {
        let dir = rel(path, dir);
        if *generate_dev {
            ensure_dev_secrets(&dir, &cfg.principals(), hosts)?;
        }
        let tls = NodeTls::dev(&dir, &cfg.name);
        server_tls = Some(tls.server_config()?);
        let mut tokens = vec![(read_token(&orchestrator_token(&dir, &cfg.name))?, ORCHESTRATOR.to_string())];
        for (k, p) in cfg.peers.iter().enumerate() {
            let t = read_token(&pair_token(&dir, &cfg.name, &p.name))?;
            tokens.push((t.clone(), p.name.clone()));
            peer_sec[k] = (Some(t), Some(tls.client_config(&p.name)?));
        }
        auth =
            Auth::tokens(tokens, true).map_err(|message| LaunchError::Auth { config: path.to_path_buf(), message })?;
    }
    let cfg_path = path.to_path_buf();
    let (party, alone, resumed) = tokio::task::block_in_place(|| -> Result<_, LaunchError> {
        let mut party = party_from_config(cfg, &cfg_path)?;
        for c in party.constant_covariates() {
            tracing::warn!("{}: {c}; {}", cfg.name, cfg.model.readings.unseen_covariates.effect());
        }
        let (_, alone) = evaluate_with_errors(&mut party)?;
        let resumed = match store.load()? {
            Some(st) => {
                party
                    .restore(&st)
                    .map_err(|source| LaunchError::Resume { state: store.path().clone(), source: Box::new(source) })?;
                Some((st.turns.len(), st.rho_spent()))
            }
            None => None,
        };
        Ok((party, alone, resumed))
    })?;
    if let Some((turns, rho)) = resumed {
        tracing::info!("{}: resumed from {} ({turns} turns, ρ spent {rho:.4})", cfg.name, store.path().display());
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
        .with_alone_errors(alone)
        .with_shared_test_metrics(cfg.privacy.share_test_metrics);
    // A head receipt the orchestrator showed before a restart, still ahead: keep not releasing.
    service.halt_if_behind_noted()?;
    if let Some(w) = crate::store::witnessed(&cfg.state_dir(path))?.keys().next() {
        tracing::warn!(
            "{}: receipts showing this node's state is behind are noted in its state (first: {w}); see `dpcotrain node repair --adopt-witnessed`",
            cfg.name
        );
    }
    Ok(Launched { service, listener, tls: server_tls, ops })
}

/// The file beside `federation.toml` where the orchestrator keeps every node's head receipt.
pub(crate) const ORCHESTRATOR_RECEIPTS: &str = "orchestrator-receipts.json";

/// The orchestrator of a federation config.
pub fn orchestrator(cfg: &FederationConfig, path: &Path) -> Result<Orchestrator, LaunchError> {
    let mut nodes = Vec::new();
    let mut tls = None;
    for n in &cfg.nodes {
        check_name(&n.name, &format!("{}: nodes.name", path.display()))?;
        let (token, t) = match &cfg.security {
            Some(sec) => {
                let dir = rel(path, &sec.dir);
                let t = tls.get_or_insert_with(|| NodeTls::dev(&dir, ORCHESTRATOR));
                (Some(read_token(&orchestrator_token(&dir, &n.name))?), Some(t.client_config(&n.name)?))
            }
            None => (None, None),
        };
        nodes.push((n.name.clone(), n.address.clone(), token, t));
    }
    let mut retry = orchestrator_retry();
    retry.give_up_after = std::time::Duration::from_secs(cfg.wait_seconds);
    let receipts = path.parent().unwrap_or(Path::new(".")).join(ORCHESTRATOR_RECEIPTS);
    let mut orch = Orchestrator::new(nodes, retry)
        .and_then(|o| o.with_receipts_file(&receipts))
        .map_err(|message| LaunchError::Orchestrator { config: path.to_path_buf(), message })?;
    orch.federation_id = Some(cfg.federation_id.clone());
    Ok(orch)
}

/// What [`drive`] did.
pub struct Drove {
    /// Rounds each node had done when the run began (node order).
    pub position: Vec<u32>,
    /// The first round run (the lowest position, at most the target).
    pub start: u32,
    /// Test RMSE of each node after each of its turns in this run (NaN where the node does not
    /// share its test metrics).
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
) -> Result<Drove, LaunchError> {
    for (i, n) in orch.nodes.iter().enumerate() {
        if !orch.reachable(i).await {
            tracing::warn!(
                "waiting for node {} at {} (up to {} s; is it running?)…",
                n.name,
                n.address,
                orch.retry.give_up_after.as_secs()
            );
        }
    }
    let mut position = Vec::new();
    for i in 0..orch.nodes.len() {
        position.push(orch.status(i).await.map_err(LaunchError::Drive)?.rounds_done);
    }
    let start = position.iter().copied().min().unwrap_or(0).min(target);
    let mut per_round = vec![Vec::new(); orch.nodes.len()];
    let mut failures = Vec::new();
    for round in start..target {
        for (i, rmse) in per_round.iter_mut().enumerate() {
            let r = orch.run_round(i, round).await.map_err(|e| {
                let failed =
                    if failures.is_empty() { String::new() } else { format!(" ({} exchanges failed)", failures.len()) };
                LaunchError::Drive(if e.is_transient() {
                    format!("{e}. Rounds before {round} are done{failed}; run again to retry round {round}")
                } else {
                    format!(
                        "{e}. Rounds before {round} are done{failed}; running again will not help until the configurations agree"
                    )
                })
            })?;
            on_turn(round, i, &r);
            rmse.push(r.test_rmse.unwrap_or(f64::NAN));
            failures.extend(r.refused.iter().map(|why| format!("round {round}, {} ← {why}", r.querier)));
        }
    }
    Ok(Drove { position, start, per_round, failures })
}
