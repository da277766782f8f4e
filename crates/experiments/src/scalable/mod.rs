//! `dpcotrain-lab experiment scalable …`: the scalable variational GPs of Thomas 2017 (thesis,
//! chapters 1–3) on the thesis's data sets: SVGP against SGPR (`svgp.rs`), the Kronecker/Tucker
//! VGP and the RNVGP (`ch23.rs`). Each subcommand writes JSON (every run) and a
//! Markdown table with the thesis's numbers beside ours into `--out`.
//!
//! Protocol (thesis §2.5.1.1, §3.3.1.1): a seeded 90/10 train/test split per seed, inputs and
//! target standardised with the training rows, test RMSE on the standardised target.

mod ch23;
mod svgp;

use crate::sparse::{TrainTest, split_standardised};
use clap::Subcommand;
use nalgebra::{DMatrix, DVector};
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use std::path::Path;

#[derive(Debug, Subcommand)]
pub enum ScalableCommand {
    /// SVGP (natural gradients + Adam) against SGPR on CCPP and Boston (90/10, standardised)
    /// and on Snelson-style 1-D data at N = 10⁵: test RMSE, NLPD and wall time.
    Svgp(svgp::SvgpCompareArgs),
    /// Thomas 2017 Table 2.1: the sum-of-Kronecker-products variational mean on Boston,
    /// K = 1..5 components (gridded inducing points, Adagrad).
    KronBoston(ch23::KronBostonArgs),
    /// Thomas 2017 §2.5.4.5: the best Tucker VGP condition on CCPP (m0 = 5, q0 = 3, b = 10).
    TvgpCcpp(ch23::TvgpCcppArgs),
    /// Thomas 2017 Table 3.9: the best RNVGP condition on Boston (m = 455, b = 100, d = 5,
    /// ε_L = 1e-3, ε = 1e-6).
    RnvgpBoston(ch23::RnvgpBostonArgs),
}

pub fn run(cmd: ScalableCommand) -> anyhow::Result<()> {
    match cmd {
        ScalableCommand::Svgp(a) => svgp::run(a),
        ScalableCommand::KronBoston(a) => ch23::kron_boston(a),
        ScalableCommand::TvgpCcpp(a) => ch23::tvgp_ccpp(a),
        ScalableCommand::RnvgpBoston(a) => ch23::rnvgp_boston(a),
    }
}

/// Boston housing (Harrison & Rubinfeld 1978) as shipped in ISLP 0.6.0 (data/islp/README.md):
/// 506 rows, 12 covariates (ISLP drops the original's `B` column), target `medv`.
pub(crate) fn boston() -> anyhow::Result<(DMatrix<f64>, DVector<f64>)> {
    const CSV: &str = include_str!("../../../../data/islp/boston.csv");
    let t = dpcotrain_cotrain::table::Table::parse(Path::new("data/islp/boston.csv"), CSV.as_bytes())?;
    let (x, y, _, _) = t.split_target(Some("medv"))?;
    Ok((x, y))
}

/// The thesis's 90/10 split of seed `seed`, standardised with the training rows.
pub(crate) fn split_90_10(x: &DMatrix<f64>, y: &DVector<f64>, seed: u64, name: &str) -> anyhow::Result<TrainTest> {
    let n_train = (0.9 * x.nrows() as f64).round() as usize;
    split_standardised(x, y, n_train, None, &mut ChaCha8Rng::seed_from_u64(seed), name)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn boston_loads_with_its_shape_and_first_row() {
        let (x, y) = boston().unwrap();
        assert_eq!((x.nrows(), x.ncols(), y.len()), (506, 12, 506));
        assert!(
            (x[(0, 0)] - 0.00632).abs() < 1e-12 && (x[(0, 11)] - 4.98).abs() < 1e-12 && (y[0] - 24.0).abs() < 1e-12
        );
        let (xtr, _, xte, _) = split_90_10(&x, &y, 0, "boston").unwrap();
        assert_eq!((xtr.nrows(), xte.nrows()), (455, 51));
    }
}
