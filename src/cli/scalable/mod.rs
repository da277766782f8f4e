//! `dpcotrain experiment scalable …`: the scalable variational GPs of Thomas 2017 ch. 1–3 —
//! SVGP against SGPR (`svgp`).

mod svgp;

use clap::Subcommand;

#[derive(Debug, Subcommand)]
pub enum ScalableCommand {
    /// SVGP (natural gradients + Adam) against SGPR on CCPP (90/10, standardised) and on
    /// Snelson-style 1-D data at N = 10⁵: test RMSE, NLPD and wall time.
    Svgp(svgp::SvgpCompareArgs),
}

pub fn run(cmd: ScalableCommand) -> anyhow::Result<()> {
    match cmd {
        ScalableCommand::Svgp(a) => svgp::run(a),
    }
}
