//! `dpcotrain certs`: throw-away development secrets (CA, certificates, tokens).

use clap::Args;
use dpcotrain_federation::auth::ORCHESTRATOR;
use dpcotrain_federation::config::check_name;
use dpcotrain_federation::launch::ensure_dev_secrets;
use std::path::PathBuf;

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
