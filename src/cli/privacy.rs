//! `dpcotrain privacy calibrate | compose`: the Gaussian-mechanism arithmetic from the command
//! line (Balle & Wang 2018; Dwork & Roth 2014, Thm A.1).

use clap::{Args, Subcommand, ValueEnum};
use dpcotrain_privacy::accountant::{epsilon_cks, epsilon_exact, rho_of};
use dpcotrain_privacy::calibrate::{Mechanism, THESIS_MULTIPLIER, calibrate};
use serde_json::json;

#[derive(Debug, Subcommand)]
pub enum PrivacyCommand {
    /// Noise scale σ for a target (ε, δ) and sensitivity Δ.
    Calibrate(CalibrateArgs),
    /// Privacy spent by K Gaussian releases with noise σ and sensitivity Δ.
    Compose(ComposeArgs),
}

#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum MechanismArg {
    /// Exact Gaussian privacy curve (Balle & Wang 2018); any ε.
    Analytic,
    /// σ = √(2 ln(1.25/δ))·Δ/ε; proven only for ε ≤ 1.
    Classic,
    /// Thomas 2017 reproduction: σ = multiplier·Δ; NO formal guarantee.
    Thesis,
}

#[derive(Debug, Args)]
pub struct CalibrateArgs {
    #[arg(long, value_parser = dpcotrain_privacy::calibrate::parse_epsilon, allow_negative_numbers = true)]
    pub epsilon: f64,
    #[arg(long, value_parser = dpcotrain_privacy::calibrate::parse_delta, allow_negative_numbers = true)]
    pub delta: f64,
    #[arg(long)]
    pub sensitivity: f64,
    #[arg(long, value_enum, default_value = "analytic")]
    pub mechanism: MechanismArg,
    /// Noise multiplier of the thesis mode.
    #[arg(long, default_value_t = THESIS_MULTIPLIER)]
    pub multiplier: f64,
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub struct ComposeArgs {
    /// Number of releases K.
    #[arg(long)]
    pub releases: u64,
    /// Noise standard deviation σ of each release.
    #[arg(long)]
    pub sigma: f64,
    /// Sensitivity Δ of each release.
    #[arg(long)]
    pub sensitivity: f64,
    #[arg(long, value_parser = dpcotrain_privacy::calibrate::parse_delta, allow_negative_numbers = true)]
    pub delta: f64,
    #[arg(long)]
    pub json: bool,
}

pub fn run(cmd: PrivacyCommand) -> anyhow::Result<()> {
    match cmd {
        PrivacyCommand::Calibrate(a) => {
            let mech = match a.mechanism {
                MechanismArg::Analytic => Mechanism::Analytic,
                MechanismArg::Classic => Mechanism::Classic,
                MechanismArg::Thesis => Mechanism::Thesis { multiplier: a.multiplier },
            };
            let c = calibrate(mech, a.epsilon, a.delta, a.sensitivity)?;
            let warning = (!c.guaranteed)
                .then_some("thesis reproduction mode: this sigma gives NO formal (epsilon, delta) guarantee");
            if a.json {
                println!(
                    "{}",
                    json!({"sigma": c.sigma, "mechanism": mech.name(), "epsilon": a.epsilon, "delta": a.delta,
                           "sensitivity": a.sensitivity, "guaranteed": c.guaranteed, "warning": warning})
                );
            } else {
                println!("sigma {}  ({} mechanism)", c.sigma, mech.name());
                if let Some(w) = warning {
                    println!("WARNING: {w}");
                }
            }
        }
        PrivacyCommand::Compose(a) => {
            if !(a.sigma.is_finite() && a.sigma > 0.0) {
                anyhow::bail!("--sigma must be a positive finite number, got {}", a.sigma);
            }
            if !(a.sensitivity.is_finite() && a.sensitivity >= 0.0) {
                anyhow::bail!("--sensitivity must be finite and ≥ 0, got {}", a.sensitivity);
            }
            if !(a.delta > 0.0 && a.delta < 1.0) {
                anyhow::bail!("--delta must lie strictly between 0 and 1, got {}", a.delta);
            }
            let rho = a.releases as f64 * rho_of(a.sensitivity, a.sigma);
            let eps = epsilon_exact(rho, a.delta);
            let eps_cks = epsilon_cks(rho, a.delta);
            if a.json {
                println!(
                    "{}",
                    json!({"rho": rho, "mu": (2.0 * rho).sqrt(), "epsilon": eps, "epsilon_cks": eps_cks,
                           "delta": a.delta, "releases": a.releases})
                );
            } else {
                println!("rho {rho}  (zCDP)");
                println!("epsilon {eps}  (exact Gaussian-DP conversion, delta {})", a.delta);
                println!("epsilon_cks {eps_cks}  (Canonne-Kamath-Steinke cross-check)");
            }
        }
    }
    Ok(())
}
