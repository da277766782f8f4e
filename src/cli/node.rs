//! `dpcotrain node serve`, `node check` and `node repair`: a party's gRPC node from its config.

use anyhow::Context;
use clap::Args;
use dpcotrain_federation::config::{
    PartyConfig, load, orchestrator_token, pair_token, party_from_config, rel, settings_from_config,
};
use dpcotrain_federation::launch::launch;
use dpcotrain_federation::serve;
use dpcotrain_federation::tls::NodeTls;
use std::path::PathBuf;

#[derive(Debug, Args)]
pub struct ServeArgs {
    #[arg(long)]
    pub config: PathBuf,
}

pub async fn serve_node(a: ServeArgs) -> anyhow::Result<()> {
    let cfg: PartyConfig = load(&a.config)?;
    if let Some(why) = settings_from_config(&cfg, &a.config)?.dp.guarantee().why_not() {
        eprintln!("warning: {}: {why}", cfg.name);
    }
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

/// What a party config resolves to: its listen port, state and secrets folders, the files it
/// needs, its peers, and (when its data were read) how many labels its releases clip.
#[derive(Debug, Clone, serde::Serialize)]
pub struct NodeCheck {
    pub name: String,
    pub federation_id: String,
    pub listen_host: String,
    pub listen_port: u16,
    pub ops_port: Option<u16>,
    pub state_dir: String,
    pub security_dir: Option<String>,
    pub secret_files: Vec<String>,
    pub data_files: Vec<String>,
    pub peers: Vec<PeerAddress>,
    /// For this party's operator only (label-dependent, never sent to a peer); none offline.
    pub labels: Option<LabelCount>,
    /// For this party's operator only: covariates constant on its labelled rows (label-free);
    /// none offline.
    pub constant_covariates: Option<Vec<dpcotrain_cotrain::data::ConstantCovariate>>,
    /// Whether the settings carry a formal (ε, δ) guarantee, and if not, why.
    pub guaranteed: bool,
    pub guarantee_warning: Option<String>,
}

/// A peer's address as `node check` reads it.
#[derive(Debug, Clone, serde::Serialize)]
pub struct PeerAddress {
    pub name: String,
    pub host: String,
    pub port: u16,
}

/// A party's labels, and how many of them its releases clip to `privacy.label_range`.
#[derive(Debug, Clone, serde::Serialize)]
pub struct LabelCount {
    pub rows: usize,
    pub clipped_by_release: usize,
}

/// `dpcotrain node check`: validate a party config without serving, and print what it
/// resolves to as JSON ([`NodeCheck`]).
pub fn check(a: CheckArgs) -> anyhow::Result<()> {
    println!("{}", serde_json::to_value(node_check(&a)?)?);
    Ok(())
}

/// `node check` as a library function: the config validated (and, unless `offline`, its files,
/// secrets and data read and its local GP fitted, as `node serve` would).
pub fn node_check(a: &CheckArgs) -> anyhow::Result<NodeCheck> {
    let cfg: PartyConfig = load(&a.config)?;
    cfg.validate(&a.config)?;
    let guarantee = settings_from_config(&cfg, &a.config)?.dp.guarantee();
    let f = a.config.display();
    if let Some(why) = guarantee.why_not() {
        eprintln!("warning: {f}: {why}");
    }
    let ignored = dpcotrain_federation::config::ignored_privacy_settings_at(&a.config);
    if !ignored.is_empty() {
        eprintln!("warning: {f}: privacy.mode = \"off\" ignores {}", ignored.join(", "));
    }
    let port_of = |addr: &str, what: &str| -> anyhow::Result<(String, u16)> {
        let hp = addr.split("://").last().unwrap_or(addr);
        let (h, p) = hp.rsplit_once(':').ok_or_else(|| anyhow::anyhow!("{f}: {what} {addr:?} has no :port"))?;
        let port = p.trim_end_matches('/').parse().map_err(|_| anyhow::anyhow!("{f}: {what} {addr:?}: bad port"))?;
        Ok((h.to_string(), port))
    };
    let (listen_host, listen_port) = (cfg.listen.host.clone(), cfg.listen.port);
    let ops_port = cfg.ops_listen.as_ref().map(|o| o.port);
    let data: Vec<PathBuf> =
        [&cfg.data.train, &cfg.data.pool, &cfg.data.test].iter().map(|p| rel(&a.config, p)).collect();
    let mut secrets = Vec::new();
    if let Some(sec) = &cfg.security {
        let dir = rel(&a.config, &sec.dir);
        let t = NodeTls::dev(&dir, &cfg.name);
        secrets.extend([t.ca, t.cert, t.key, orchestrator_token(&dir, &cfg.name)]);
        secrets.extend(cfg.peers.iter().map(|p| pair_token(&dir, &cfg.name, &p.name)));
    }
    let mut labels = None;
    let mut constant = None;
    let mut peers = Vec::new();
    for p in &cfg.peers {
        let (host, port) = port_of(&p.address, &format!("peer {} address", p.name))?;
        peers.push(PeerAddress { name: p.name.clone(), host, port });
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
            NodeTls::dev(&rel(&a.config, &sec.dir), &cfg.name).load().with_context(|| format!("{f}"))?;
        }
        // The same path `node serve` takes: read the data by column name, build the party, fit
        // its local GP, and resume its ledger if there is one.
        let mut party = party_from_config(&cfg, &a.config)?;
        // Before the restore, which a state saved before D39 can refuse for such a covariate.
        let c = party.constant_covariates();
        let how = cfg.model.readings.unseen_covariates;
        for cov in &c {
            eprintln!("warning: {f}: {cov}; {}", how.effect());
        }
        constant = Some(c);
        let state_dir = cfg.state_dir(&a.config);
        if let Some(st) = dpcotrain_federation::store::peek(&state_dir)? {
            party
                .restore(&st)
                .with_context(|| format!("cannot resume from {}", state_dir.join("state.json").display()))?;
        }
        // For this party's operator (label-dependent, never sent to a peer): how many labels the
        // release clips to the declared range; the party's own model fits them as they are.
        let clipped = party.labels_clipped();
        labels = Some(LabelCount { rows: party.n_labels(), clipped_by_release: clipped });
        if clipped > 0 {
            eprintln!(
                "{f}: {clipped} of {} training labels lie outside privacy.label_range: its releases clip them (its own model does not)",
                party.n_labels()
            );
        }
    }
    let s = |p: &PathBuf| p.display().to_string();
    Ok(NodeCheck {
        name: cfg.name.clone(),
        federation_id: cfg.federation_id.clone(),
        listen_host,
        listen_port,
        ops_port,
        state_dir: s(&cfg.state_dir(&a.config)),
        security_dir: cfg.security.as_ref().map(|x| s(&rel(&a.config, &x.dir))),
        secret_files: secrets.iter().map(s).collect(),
        data_files: data.iter().map(s).collect(),
        peers,
        labels,
        constant_covariates: constant,
        guaranteed: guarantee.is_formal(),
        guarantee_warning: guarantee.why_not().map(|w| w.to_string()),
    })
}

#[derive(Debug, Args)]
pub struct RepairArgs {
    /// The party's config (its `state_dir` is repaired).
    #[arg(long, required_unless_present = "state", conflicts_with = "state")]
    pub config: Option<PathBuf>,
    /// The state directory itself.
    #[arg(long)]
    pub state: Option<PathBuf>,
    /// Copy the files into `repair-<time>/` inside the directory, then rewrite it as one
    /// snapshot of the proven state. Without it nothing changes.
    #[arg(long)]
    pub write: bool,
    /// Print the report as JSON.
    #[arg(long)]
    pub json: bool,
    /// Charge each requester's ledger the spend that the receipts it showed prove (the node
    /// refused them because its state was behind; noted in the state), and number the state after
    /// them, so that those requesters are answered again. Needs --config (the ledger's budget);
    /// with --write it is saved.
    #[arg(long, requires = "config")]
    pub adopt_witnessed: bool,
    /// Also adopt receipts this node cannot verify (its ledger key changed: the state directory
    /// was replaced or lost). Such a receipt may be forged: adopting it charges the spend it
    /// claims (never less than was spent) and numbers the state after it. Without this flag
    /// only receipts the node itself signed are adopted.
    #[arg(long, requires = "adopt_witnessed")]
    pub adopt_unverified: bool,
}

/// `dpcotrain node repair`: what the state directory's MAC chain proves, and (with `--write`)
/// keep exactly that.
pub fn repair(a: RepairArgs) -> anyhow::Result<()> {
    let dir = match (&a.config, &a.state) {
        (_, Some(d)) => d.clone(),
        (Some(c), None) => load::<PartyConfig>(c)?.state_dir(c),
        (None, None) => anyhow::bail!("give --config or --state"),
    };
    if a.adopt_witnessed && !dir.join("state.json").exists() {
        // A state directory lost whole: nothing to check, only receipts to adopt.
        if let Some(config) = &a.config {
            adopt_witnessed(config, &dir, a.write, a.adopt_unverified)?;
        }
        return Ok(());
    }
    let r = dpcotrain_federation::store::repair(&dir, a.write)?;
    if a.json {
        println!("{}", serde_json::to_string(&r)?);
        return Ok(());
    }
    let d = dir.display();
    println!("{d}: snapshot at entry {}; the chain proves entries up to {}", r.snapshot_seq, r.proven_seq);
    println!("  {} log entries proven", r.kept_entries);
    for (line, bytes) in &r.fragments {
        println!(
            "  line {line}: a fragment of {bytes} bytes from a failed append, followed by the next entry of the chain: nothing was lost"
        );
    }
    if r.torn_tail_bytes > 0 {
        println!(
            "  {} bytes after the last line: an append torn by a crash (it never returned; ignored)",
            r.torn_tail_bytes
        );
    }
    if let Some((line, why)) = &r.problem {
        println!(
            "  line {line}: not proven ({why}); it and the {} line(s) after it would be dropped",
            r.dropped_lines - 1
        );
    }
    for (name, releases, rho, eps, guaranteed) in &r.ledgers {
        println!(
            "  ledger kept for {name}: {releases} releases, rho {rho:.6}, epsilon {eps:.4}{}",
            crate::cli::party_figures::epsilon_mark([*guaranteed])
        );
    }
    if r.clean() {
        println!("nothing to repair");
    } else if r.written {
        println!(
            "rewritten as the proven state; the original files are in {}",
            r.backup.as_ref().map(|b| b.display().to_string()).unwrap_or_default()
        );
    } else {
        println!("nothing changed; run again with --write to keep the proven state (the files are backed up first)");
    }
    if r.may_roll_back() {
        println!(
            "WARNING: the dropped lines may record releases. Kept alone, the ledger can count less than was released; a requester that holds a receipt for a later release is refused until this node's ledger reaches it (see docs/operations.md, A restored snapshot)."
        );
    }
    if a.adopt_witnessed
        && let Some(config) = &a.config
    {
        adopt_witnessed(config, &dir, a.write, a.adopt_unverified)?;
    }
    Ok(())
}

/// `node repair --adopt-witnessed`: charge what the receipts noted in the state prove (`receipt::adopt_noted`).
fn adopt_witnessed(
    config: &std::path::Path,
    dir: &std::path::Path,
    write: bool,
    unverified: bool,
) -> anyhow::Result<()> {
    use dpcotrain_federation::receipt::{Adoption, EVERY_REQUESTER, adopt_noted};
    use dpcotrain_federation::store::StateStore;
    let cfg: PartyConfig = load(config)?;
    let store = StateStore::open(dir)?;
    if store.noted()?.is_empty() {
        println!("no receipts noted in {}: nothing to adopt", dir.display());
        return Ok(());
    }
    let mut party = party_from_config(&cfg, config)?;
    if let Some(st) = store.load()? {
        party.restore(&st).with_context(|| format!("cannot resume from {}", dir.join("state.json").display()))?;
    }
    let peers: Vec<String> = cfg.peers.iter().map(|p| p.name.clone()).collect();
    let done = adopt_noted(&store, &cfg.federation_id, &mut party, &peers, unverified)?;
    let (mut adopted, mut trusted, mut refused, mut floor) = (Vec::new(), Vec::new(), 0, 0);
    let fork_note = |forked: bool| {
        if forked {
            " (this node's chain has another entry there: the state was restored and went on, so the receipt's spend is charged on top)"
        } else {
            ""
        }
    };
    for (a, signed) in &done {
        let (name, r) = match a {
            Adoption::Charged { requester, receipt: r, rho_to, added, forked } => {
                println!(
                    "  {requester}: the receipt proves rho {:.6} over {} releases (entry {}){}; the ledger now charges {added:.6} more (rho {rho_to:.6})",
                    r.rho,
                    r.releases,
                    r.seq,
                    fork_note(*forked)
                );
                (requester.as_str(), r)
            }
            Adoption::Total { receipt: r, gap, forked } => {
                println!(
                    "  the orchestrator's receipt proves rho {:.6} in total over {} releases (entry {}){}; each configured peer's ledger is charged the gap {gap:.6}",
                    r.rho,
                    r.releases,
                    r.seq,
                    fork_note(*forked)
                );
                (EVERY_REQUESTER, r)
            }
            Adoption::Refused { requester, why } => {
                println!("  {requester}: not adopted (it stays noted): {why}");
                refused += 1;
                continue;
            }
        };
        adopted.push(name.to_string());
        floor = floor.max(r.seq);
        if *signed {
            trusted.push(r.clone());
        }
    }
    if write && !adopted.is_empty() {
        let names: Vec<&str> = adopted.iter().map(String::as_str).collect();
        store.adopt(&party.state(), &names, &trusted.iter().collect::<Vec<_>>())?;
        println!("adopted: the state now counts that spend and is numbered at or after entry {floor}");
    } else if !adopted.is_empty() {
        println!("nothing changed; run again with --write to adopt");
    }
    if refused > 0 {
        anyhow::bail!(
            "{refused} of {} noted receipts were not adopted (above); they stay noted and the node keeps refusing their holders. Put back the newest copy of the state directory, or adopt them as described",
            done.len()
        );
    }
    Ok(())
}
