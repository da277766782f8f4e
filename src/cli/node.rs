//! `dpcotrain node serve` and `dpcotrain node check`: a party's gRPC node from its config.

use crate::node_config::{
    PartyConfig, SecurityConfig, load, orchestrator_token, pair_token, party_from_config, read_token, rel,
    settings_from_config,
};
use anyhow::Context;
use clap::Args;
use dpcotrain_cotrain::driver::evaluate_with_errors;
use dpcotrain_federation::auth::{Auth, ORCHESTRATOR};
use dpcotrain_federation::store::StateStore;
use dpcotrain_federation::tls::{NodeTls, ensure_dev_pki};
use dpcotrain_federation::{Agreement, GrpcPeer, NodeService, PeerOptions, Retry, serve};
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
pub(crate) fn node_tls(dir: &Path, me: &str) -> NodeTls {
    NodeTls { ca: dir.join("ca.pem"), cert: dir.join(format!("{me}.pem")), key: dir.join(format!("{me}.key")) }
}

pub(crate) fn client_tls(tls: &NodeTls, peer: &str) -> anyhow::Result<ClientTlsConfig> {
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
