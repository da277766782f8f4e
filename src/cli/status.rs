//! `dpcotrain status`: a running node's model version, rounds and privacy spent.

use crate::cli::party_figures::{NOT_GUARANTEED_NOTE, PartyFigures};
use clap::Args;
use dpcotrain_federation::config::{FederationConfig, load};
use dpcotrain_federation::launch::orchestrator;
use dpcotrain_federation::orchestrator::{Orchestrator, orchestrator_retry};
use std::path::PathBuf;

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

/// A warning when the model alone or now is no better than the constant baseline `b`.
fn below_baseline(p: &PartyFigures, b: f64) -> String {
    match (p.rmse_before, p.rmse_after) {
        (Some(a), Some(n)) if a >= b && n >= b => " — alone and now no better than this constant".into(),
        (Some(a), _) if a >= b => " — alone no better than this constant".into(),
        (_, Some(n)) if n >= b => " — now no better than this constant".into(),
        _ => String::new(),
    }
}

/// A node's status for a person: position, RMSE with the paired SE of the change, RMSE per
/// round, and the privacy spent per requester with its releases.
impl std::fmt::Display for PartyFigures {
    fn fmt(&self, o: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        writeln!(o, "party {} (federation {:?})", self.party, self.federation_id)?;
        writeln!(o, "  rounds done     {}   (model version {})", self.rounds, self.model_version)?;
        if self.restricted {
            writeln!(o, "  (restricted view: you are a peer; you see your own spend only)")?;
        } else {
            let num = |v: Option<f64>, signed: bool| match v {
                Some(x) if signed => dpcotrain_report::numbers::signed(x, 4),
                Some(x) => format!("{x:.4}"),
                None => "—".to_string(),
            };
            let change = self.rmse_after.zip(self.rmse_before).map(|(now, alone)| now - alone);
            if self.rmse_after.is_none() {
                writeln!(
                    o,
                    "  test figures    not shared: they are computed on the node's private labels (its party.toml shares them with privacy.share_test_metrics = true)"
                )?;
            }
            writeln!(
                o,
                "  test RMSE       {} alone → {} now  (change {}, SE {})",
                num(self.rmse_before, false),
                num(self.rmse_after, false),
                num(change, true),
                num(self.rmse_change_se, false)
            )?;
            if let Some(b) = self.rmse_mean_baseline {
                writeln!(
                    o,
                    "  mean baseline   {b:.4}  (predicting the public mean of y: no label needed){}",
                    below_baseline(self, b)
                )?;
            }
            if let Some(c) = self.labels_clipped {
                writeln!(
                    o,
                    "  labels clipped  {c} by the release (to the declared label range; its own model fits them as they are)"
                )?;
            }
            if !self.rmse_per_round.is_empty() {
                let v: Vec<String> = self.rmse_per_round.iter().map(|r| format!("{r:.4}")).collect();
                writeln!(o, "  RMSE per round  {}", v.join(" "))?;
            }
            if self.answers_set_aside {
                writeln!(
                    o,
                    "  answers         set aside by the guard (they made its own rows' leave-one-out error worse): the model is the private-only one"
                )?;
            }
        }
        if self.privacy_spent.is_empty() {
            writeln!(o, "  privacy spent   nothing released")?;
        } else {
            writeln!(o, "  privacy spent on its labels:")?;
            writeln!(o, "    {:<12} {:>8} {:>10} {:>10} {:>9}", "requester", "ε", "ρ", "ρ budget", "releases")?;
            for s in &self.privacy_spent {
                writeln!(
                    o,
                    "    {:<12} {:>8.4} {:>10.3e} {:>10.3e} {:>9}{}",
                    s.peer,
                    s.epsilon,
                    s.rho,
                    s.rho_budget,
                    s.releases,
                    s.mark()
                )?;
            }
            let all = self.mark();
            let total = &self.privacy_spent_total;
            writeln!(o, "    all requesters together: ε {:.4} (ρ {:.3e}){all}", total.epsilon, total.rho)?;
            if !all.is_empty() {
                writeln!(o, "    {NOT_GUARANTEED_NOTE}")?;
            }
            // The DP θ vote (theta = "select") is one entry of every requester's ledger.
            if let Some(r) = self.releases().find(|r| r.id == dpcotrain_cotrain::party::THETA_SELECTION_ID) {
                writeln!(
                    o,
                    "    of which the θ vote (theta = select): ρ {:.3e} per requester (σ {:.2} votes)",
                    r.rho, r.sigma
                )?;
            }
        }
        Ok(())
    }
}

/// The node's status, checked against the federation.toml when one is given.
pub async fn party_status(a: &StatusArgs) -> anyhow::Result<PartyFigures> {
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
    // With a federation.toml, the node must be that federation's party of that name.
    if let (Some(p), Some(f)) = (&a.config, &orch.federation_id) {
        if &st.federation_id != f {
            anyhow::bail!(
                "{} serves federation {:?}, not {f:?} of {}: wrong federation.toml, or the wrong address",
                a.node,
                st.federation_id,
                p.display()
            );
        }
        if st.party != orch.nodes[i].name {
            anyhow::bail!(
                "the node at {} is party {:?}, not {:?}",
                orch.nodes[i].address,
                st.party,
                orch.nodes[i].name
            );
        }
    }
    Ok(PartyFigures::from(&st))
}

pub async fn status(a: StatusArgs) -> anyhow::Result<()> {
    super::print_report(&party_status(&a).await?, super::Output::json_if(a.json))
}
