//! `dpcotrain privacy calibrate | compose`: the Gaussian-mechanism arithmetic from the command
//! line (Balle & Wang 2018; Dwork & Roth 2014, Thm A.1).

use clap::{Args, Subcommand, ValueEnum};
use dpcotrain_privacy::accountant::{epsilon_cks, epsilon_exact, rho_of};
use dpcotrain_privacy::calibrate::{Mechanism, THESIS_MULTIPLIER, calibrate};
use serde::Serialize;

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

/// `privacy calibrate`: the noise scale of one Gaussian release.
#[derive(Debug, Clone, Serialize)]
pub struct Calibration {
    pub sigma: f64,
    pub mechanism: &'static str,
    pub epsilon: f64,
    pub delta: f64,
    pub sensitivity: f64,
    /// Whether σ carries a formal (ε, δ) guarantee (the thesis mode's does not).
    pub guaranteed: bool,
    pub warning: Option<&'static str>,
}

impl std::fmt::Display for Calibration {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        writeln!(f, "sigma {}  ({} mechanism)", self.sigma, self.mechanism)?;
        if let Some(w) = self.warning {
            writeln!(f, "WARNING: {w}")?;
        }
        Ok(())
    }
}

/// `privacy compose`: what `releases` releases of sensitivity Δ at noise σ spend together.
#[derive(Debug, Clone, Serialize)]
pub struct Composition {
    pub rho: f64,
    pub mu: f64,
    pub epsilon: f64,
    pub epsilon_cks: f64,
    pub delta: f64,
    pub releases: u64,
}

impl std::fmt::Display for Composition {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        writeln!(f, "rho {}  (zCDP)", self.rho)?;
        writeln!(f, "epsilon {}  (exact Gaussian-DP conversion, delta {})", self.epsilon, self.delta)?;
        writeln!(f, "epsilon_cks {}  (Canonne-Kamath-Steinke cross-check)", self.epsilon_cks)
    }
}

/// `privacy calibrate` as a library function.
pub fn calibration(a: &CalibrateArgs) -> anyhow::Result<Calibration> {
    let mech = match a.mechanism {
        MechanismArg::Analytic => Mechanism::Analytic,
        MechanismArg::Classic => Mechanism::Classic,
        MechanismArg::Thesis => Mechanism::Thesis { multiplier: a.multiplier },
    };
    let c = calibrate(mech, a.epsilon, a.delta, a.sensitivity)?;
    Ok(Calibration {
        sigma: c.sigma,
        mechanism: mech.name(),
        epsilon: a.epsilon,
        delta: a.delta,
        sensitivity: a.sensitivity,
        guaranteed: c.guaranteed,
        warning: (!c.guaranteed)
            .then_some("thesis reproduction mode: this sigma gives NO formal (epsilon, delta) guarantee"),
    })
}

/// `privacy compose` as a library function.
pub fn composition(a: &ComposeArgs) -> anyhow::Result<Composition> {
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
    Ok(Composition {
        rho,
        mu: (2.0 * rho).sqrt(),
        epsilon: epsilon_exact(rho, a.delta),
        epsilon_cks: epsilon_cks(rho, a.delta),
        delta: a.delta,
        releases: a.releases,
    })
}

pub fn run(cmd: PrivacyCommand) -> anyhow::Result<()> {
    match cmd {
        PrivacyCommand::Calibrate(a) => super::print_report(&calibration(&a)?, super::Output::json_if(a.json)),
        PrivacyCommand::Compose(a) => super::print_report(&composition(&a)?, super::Output::json_if(a.json)),
    }
}
