//! `dpcotrain data split-ccpp`: ready-made party CSVs from the shipped CCPP data.

use anyhow::Context;
use clap::Args;
use dpcotrain_cotrain::ccpp::{CcppConfig, RESPONSE, ccpp};
use dpcotrain_cotrain::table::write_csv;
use nalgebra::DMatrix;
use std::path::{Path, PathBuf};

#[derive(Debug, Args)]
pub struct SplitArgs {
    /// Output folder: writes party-a/, party-b/, … with train.csv, pool.csv, test.csv.
    #[arg(long)]
    pub out: PathBuf,
    /// One party's columns, e.g. `--view AT,V --view AP,RH --view V,RH` (default: the thesis's
    /// two views {AT, V} and {AP, RH}). More than two views need `--masking no`.
    #[arg(long = "view")]
    pub views: Vec<String>,
    /// Labelled rows per party (the demo's 400).
    #[arg(long, default_value_t = 400)]
    pub n_obs: usize,
    /// yes: each party's labelled rows come from one of two k-means clusters (Thomas §4.5);
    /// no: from anywhere.
    #[arg(long, default_value = "yes")]
    pub masking: String,
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// Replace party folders already in --out (otherwise they are refused).
    #[arg(long)]
    pub force: bool,
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
    if !a.force {
        let taken: Vec<String> = dirs.iter().filter(|d| a.out.join(d).exists()).cloned().collect();
        if !taken.is_empty() {
            anyhow::bail!(
                "{} already holds {}: choose another --out, or add --force to replace them",
                a.out.display(),
                taken.join(", ")
            );
        }
    }
    write_views(&sc, &a.out, &dirs.iter().map(String::as_str).collect::<Vec<_>>(), RESPONSE)?;
    eprintln!(
        "wrote {} ({}: {} labelled rows each, pool {}, test {})",
        a.out.display(),
        dirs.join(", "),
        a.n_obs,
        sc.parties[0].x_pool.nrows(),
        sc.parties[0].x_test.nrows()
    );
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
