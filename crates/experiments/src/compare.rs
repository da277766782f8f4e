//! Our runs against the thesis's published cells as a two-sample test rather than a fixed
//! tolerance: per cell our mean (stratified over the n_obs levels present, equal
//! weight per level as in the thesis's balanced design), median, tail fraction (share of runs
//! that end worse than twice their before-co-training RMSE) and Welch's z against the thesis's
//! mean ± sd with its run count; per table Stouffer's combined z; for Table C.1 a sign test.
//!
//! The thesis's run count of a cell is the party-runs of its full design (10 seeds, both parties,
//! every level of the dimensions the cell pools; Thomas 2017 §4.3.1.1), e.g. 2,880 per combiner
//! for Table 4.3.

use crate::grid::{DpLabel, RunRow};
use dpcotrain_cotrain::CombinerKind;
use dpcotrain_cotrain::Uncertainty;
use dpcotrain_privacy::gaussian::phi;
use dpcotrain_report::thesis::{self, Cell};
use std::collections::BTreeMap;
use std::fmt::Write;

/// The statistics of one cell.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct CellStats {
    pub n: usize,
    /// Equal-weight mean of the per-n_obs means.
    pub mean: f64,
    /// Standard error of that mean: √(Σ_l s_l²/n_l)/L.
    pub se: f64,
    pub median: f64,
    /// Share of runs with RMSE after > 2 × RMSE before.
    pub tail: f64,
}

/// [`CellStats`] of `rows` (NaN where no finite value); `value` picks the RMSE compared.
pub(crate) fn cell_stats(rows: &[&RunRow], value: impl Fn(&RunRow) -> f64) -> CellStats {
    let ok: Vec<&RunRow> = rows.iter().copied().filter(|r| value(r).is_finite()).collect();
    let n = ok.len();
    if n == 0 {
        return CellStats { n, mean: f64::NAN, se: f64::NAN, median: f64::NAN, tail: f64::NAN };
    }
    let mut levels: BTreeMap<usize, Vec<f64>> = BTreeMap::new();
    for r in &ok {
        levels.entry(r.nobs).or_default().push(value(r));
    }
    let l = levels.len() as f64;
    let (mut mean, mut var) = (0.0, 0.0);
    for v in levels.values() {
        let k = v.len() as f64;
        let m = v.iter().sum::<f64>() / k;
        let s2 = if v.len() > 1 { v.iter().map(|x| (x - m).powi(2)).sum::<f64>() / (k - 1.0) } else { 0.0 };
        mean += m / l;
        var += s2 / k / (l * l);
    }
    let mut all: Vec<f64> = ok.iter().map(|r| value(r)).collect();
    all.sort_by(f64::total_cmp);
    let median = if n % 2 == 1 { all[n / 2] } else { 0.5 * (all[n / 2 - 1] + all[n / 2]) };
    let tail = ok.iter().filter(|r| r.rmse_after > 2.0 * r.rmse_before).count() as f64 / n as f64;
    CellStats { n, mean, se: var.sqrt(), median, tail }
}

/// Welch's z of our mean against the thesis's mean ± sd over `n_thesis` runs.
pub(crate) fn welch_z(ours: &CellStats, t: Cell, n_thesis: usize) -> f64 {
    (ours.mean - t.0) / (ours.se.powi(2) + t.1.powi(2) / n_thesis as f64).sqrt()
}

/// Stouffer's combination of independent z-scores: (Σz/√k, two-sided p).
pub(crate) fn stouffer(zs: &[f64]) -> (f64, f64) {
    let zs: Vec<f64> = zs.iter().copied().filter(|z| z.is_finite()).collect();
    if zs.is_empty() {
        return (f64::NAN, f64::NAN);
    }
    let z = zs.iter().sum::<f64>() / (zs.len() as f64).sqrt();
    (z, 2.0 * phi(-z.abs()))
}

/// Two-sided exact sign test of `pos` positive among `pos + neg` non-zero differences.
pub(crate) fn sign_test(pos: usize, neg: usize) -> f64 {
    let n = pos + neg;
    let k = pos.min(neg);
    // P(X ≤ k) for X ~ Bin(n, ½), doubled and capped at 1.
    let mut term = 0.5f64.powi(n as i32);
    let mut cdf = term;
    for i in 0..k {
        term *= (n - i) as f64 / (i + 1) as f64;
        cdf += term;
    }
    (2.0 * cdf).min(1.0)
}

const COMBINERS: [CombinerKind; 3] = thesis::COMBINERS;
const UNC: [Uncertainty; 3] = [Uncertainty::None, Uncertainty::Marginal, Uncertainty::Full];

fn row_line(label: &str, s: &CellStats, t: Cell, n_thesis: usize) -> (String, f64) {
    if s.n == 0 {
        return (format!("| {label} | – | – | – | – | {:.3} ± {:.3} | – |\n", t.0, t.1), f64::NAN);
    }
    let z = welch_z(s, t, n_thesis);
    (
        format!(
            "| {label} | {} | {:.3} | {:.3} | {:.1}% | {:.3} ± {:.3} | {} |\n",
            s.n,
            s.mean,
            s.median,
            100.0 * s.tail,
            t.0,
            t.1,
            dpcotrain_report::numbers::signed(z, 2)
        ),
        z,
    )
}

const HEAD: &str = "| cell | runs | mean | median | tail | thesis | Welch z |\n|---|---|---|---|---|---|---|\n";

fn combined(md: &mut String, zs: &[f64]) {
    if !zs.iter().any(|z| z.is_finite()) {
        return;
    }
    let (z, p) = stouffer(zs);
    let _ = writeln!(
        md,
        "\nCombined (Stouffer, {} cells): z = {}, p = {p:.3}.\n",
        zs.iter().filter(|z| z.is_finite()).count(),
        dpcotrain_report::numbers::signed(z, 2)
    );
}

/// The statistical comparison for the simulated rows of one DP setting (off or thesis).
pub(crate) fn simulated_comparison(rows: &[RunRow]) -> String {
    let rows: Vec<&RunRow> = rows.iter().filter(|r| r.dataset == "simulated").collect();
    let Some(dp) = rows.first().map(|r| r.dp) else { return String::new() };
    let (t3, t4, t7, names) = match dp {
        DpLabel::Off => (&thesis::T4_3, &thesis::T4_4, &thesis::T4_7, ["4.3", "4.4", "4.7"]),
        DpLabel::Thesis => (&thesis::T4_8, &thesis::T4_9, &thesis::T4_12, ["4.8", "4.9", "4.12"]),
        DpLabel::Calibrated { .. } => return String::new(),
    };
    let (t5, t6, names_ci) = match dp {
        DpLabel::Off => (&thesis::T4_5, &thesis::T4_6, ["4.5", "4.6"]),
        _ => (&thesis::T4_10, &thesis::T4_11, ["4.10", "4.11"]),
    };
    let nobs: std::collections::BTreeSet<usize> = rows.iter().map(|r| r.nobs).collect();
    let mut md = format!(
        "## Against the thesis as a two-sample test — simulated, DP {dp}\n\nn_obs levels present: {nobs:?} (means \
         weight each level equally). Tail: share of runs ending above 2 × their before-co-training RMSE. Welch z \
         against the thesis's mean ± sd over its full design's party-runs.\n\n### Table {} (by combiner)\n\n{HEAD}",
        names[0]
    );
    let after = |r: &RunRow| r.rmse_after;
    for (k, c) in COMBINERS.iter().enumerate() {
        let s = cell_stats(&rows.iter().copied().filter(|r| r.combiner == *c).collect::<Vec<_>>(), after);
        md += &row_line(c.name(), &s, t3[k], 2880).0;
    }
    let _ = write!(md, "\n### Table {} (masking × r)\n\n", names[1]);
    let present: Vec<(usize, &CombinerKind)> =
        COMBINERS.iter().enumerate().filter(|(_, c)| rows.iter().any(|r| r.combiner == **c)).collect();
    for &(k, c) in &present {
        let _ = write!(md, "{}:\n\n{HEAD}", c.name());
        let mut zs = Vec::new();
        for (m_i, mask) in [false, true].iter().enumerate() {
            for (r_i, r) in thesis::RS.iter().enumerate() {
                let v: Vec<&RunRow> = rows
                    .iter()
                    .copied()
                    .filter(|x| x.combiner == *c && x.masking == *mask && x.r == Some(*r))
                    .collect();
                let (line, z) = row_line(
                    &format!("mask {} r {r}", if *mask { "yes" } else { "no" }),
                    &cell_stats(&v, after),
                    t4[m_i][r_i][k],
                    360,
                );
                md += &line;
                zs.push(z);
            }
        }
        combined(&mut md, &zs);
    }
    // Tables 4.5 / 4.10 (by CI; 1,440 thesis party-runs per cell) and 4.6 / 4.11 (masking × CI,
    // Noisy only: the other columns did not survive extraction; 720 per cell).
    let _ = write!(md, "### Table {} (conditional independence)\n\n", names_ci[0]);
    for &(k, c) in &present {
        let _ = write!(md, "{}:\n\n{HEAD}", c.name());
        let mut zs = Vec::new();
        for (ci_i, ci) in [false, true].iter().enumerate() {
            let v: Vec<&RunRow> = rows.iter().copied().filter(|x| x.combiner == *c && x.ci == Some(*ci)).collect();
            let label = format!("CI {}", if *ci { "yes" } else { "no" });
            let (line, z) = row_line(&label, &cell_stats(&v, after), t5[ci_i][k], 1440);
            md += &line;
            zs.push(z);
        }
        combined(&mut md, &zs);
    }
    if present.iter().any(|(_, c)| **c == CombinerKind::Noisy) {
        let _ = write!(md, "### Table {} (masking × CI, Noisy)\n\n{HEAD}", names_ci[1]);
        let mut zs = Vec::new();
        for (m_i, mask) in [false, true].iter().enumerate() {
            for (ci_i, ci) in [false, true].iter().enumerate() {
                let v: Vec<&RunRow> = rows
                    .iter()
                    .copied()
                    .filter(|x| x.combiner == CombinerKind::Noisy && x.masking == *mask && x.ci == Some(*ci))
                    .collect();
                let label = format!("mask {} CI {}", if *mask { "yes" } else { "no" }, if *ci { "yes" } else { "no" });
                let (line, z) = row_line(&label, &cell_stats(&v, after), t6[m_i][ci_i], 720);
                md += &line;
                zs.push(z);
            }
        }
        combined(&mut md, &zs);
    }
    let _ = write!(md, "### Table {} (masking × uncertainty)\n\n", names[2]);
    for &(k, c) in &present {
        let _ = write!(md, "{}:\n\n{HEAD}", c.name());
        let mut zs = Vec::new();
        for (m_i, mask) in [false, true].iter().enumerate() {
            for (u_i, u) in UNC.iter().enumerate() {
                let v: Vec<&RunRow> = rows
                    .iter()
                    .copied()
                    .filter(|x| x.combiner == *c && x.masking == *mask && x.uncertainty == *u)
                    .collect();
                let label = format!("mask {} {}", if *mask { "yes" } else { "no" }, u.name());
                let (line, z) = row_line(&label, &cell_stats(&v, after), t7[m_i][u_i][k], 480);
                md += &line;
                zs.push(z);
            }
        }
        combined(&mut md, &zs);
    }
    md
}

/// Table C.1 (before co-training) as a two-sample test: per cell Welch z, Stouffer's combined
/// z, and the sign test of our differences from the thesis.
pub(crate) fn c1_comparison(rows: &[RunRow]) -> String {
    let rows: Vec<&RunRow> = rows.iter().filter(|r| r.dataset == "simulated" && r.dp == DpLabel::Off).collect();
    let Some(first) = rows.first() else { return String::new() };
    // One row per run and party: the before RMSE does not depend on the method.
    let one: Vec<&RunRow> =
        rows.iter().copied().filter(|r| r.combiner == first.combiner && r.uncertainty == first.uncertainty).collect();
    let mut md = format!("## Table C.1 as a two-sample test (before co-training)\n\n{HEAD}");
    let mut zs = Vec::new();
    // (above, below) the thesis: every cell, and the unmasked anchor rows.
    let (mut all, mut unmasked) = ((0, 0), (0, 0));
    for (ci_i, ci) in [false, true].iter().enumerate() {
        for (m_i, mask) in [false, true].iter().enumerate() {
            for (r_i, r) in thesis::RS.iter().enumerate() {
                for (n_i, n) in thesis::NOBS.iter().enumerate() {
                    let v: Vec<&RunRow> = one
                        .iter()
                        .copied()
                        .filter(|x| x.ci == Some(*ci) && x.masking == *mask && x.r == Some(*r) && x.nobs == *n)
                        .collect();
                    let s = cell_stats(&v, |x| x.rmse_before);
                    if s.n == 0 {
                        continue;
                    }
                    let t = thesis::C1[ci_i][m_i][r_i][n_i];
                    let label = format!(
                        "CI {} mask {} r {r} n {n}",
                        if *ci { "yes" } else { "no" },
                        if *mask { "yes" } else { "no" }
                    );
                    let (line, z) = row_line(&label, &s, t, 20);
                    md += &line;
                    zs.push(z);
                    let d = (s.mean * 1000.0).round() - (t.0 * 1000.0).round();
                    for (count, counted) in [(&mut all, true), (&mut unmasked, !*mask)] {
                        if counted && d > 0.0 {
                            count.0 += 1;
                        } else if counted && d < 0.0 {
                            count.1 += 1;
                        }
                    }
                }
            }
        }
    }
    combined(&mut md, &zs);
    let _ = writeln!(
        md,
        "Sign test (differences at the thesis's 3 decimals; ties dropped): every cell {} above, {} below the thesis, \
         p = {:.3}; unmasked (anchor) rows {} above, {} below, p = {:.3}.\n",
        all.0,
        all.1,
        sign_test(all.0, all.1),
        unmasked.0,
        unmasked.1,
        sign_test(unmasked.0, unmasked.1)
    );
    md
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tests_give_textbook_values() {
        // 19 of 22 positive (Table C.1's count in docs/results.md): two-sided p = 2·P(X ≤ 3 | n = 22) = 0.00086.
        assert!((sign_test(19, 3) - 0.000_858).abs() < 1e-5, "{}", sign_test(19, 3));
        assert_eq!(sign_test(5, 5), 1.0);
        let (z, p) = stouffer(&[1.0, 1.0, 1.0, 1.0]);
        assert!((z - 2.0).abs() < 1e-12 && (p - 0.0455).abs() < 1e-4);
        let s = CellStats { n: 10, mean: 1.0, se: 0.1, median: 1.0, tail: 0.0 };
        let z = welch_z(&s, (0.8, 0.3, false), 9);
        assert!((z - 0.2 / (0.01f64 + 0.01).sqrt()).abs() < 1e-12);
    }

    fn row(ci: bool, masking: bool, seed: u64, after: f64) -> RunRow {
        RunRow {
            dataset: "simulated".into(),
            r: Some(0.9),
            ci: Some(ci),
            masking,
            nobs: 25,
            seed,
            combiner: CombinerKind::Noisy,
            uncertainty: Uncertainty::None,
            dp: DpLabel::Off,
            party: "P1".into(),
            view: "x1".into(),
            rmse_before: 0.5,
            rmse_after: after,
            nlpd_before: 1.0,
            nlpd_after: 1.0,
            epsilon_spent: Some(0.0),
            rmse_per_round: vec![after],
            error: None,
        }
    }

    #[test]
    fn ci_tables_are_compared_cell_by_cell() {
        // CI no runs at 0.4 / 0.6 (mean 0.5), CI yes at 0.7 / 0.9 (mean 0.8): a comparison that
        // pooled the CI levels would put 0.65 in both rows.
        let mut rows = Vec::new();
        for (seed, (ci, after)) in [(false, 0.4), (false, 0.6), (true, 0.7), (true, 0.9)].into_iter().enumerate() {
            rows.push(row(ci, false, seed as u64, after));
        }
        let md = simulated_comparison(&rows);
        let v: Vec<&RunRow> = rows.iter().filter(|r| r.ci == Some(false)).collect();
        let z_no = welch_z(&cell_stats(&v, |r| r.rmse_after), thesis::T4_5[0][1], 1440);
        assert!(md.contains("### Table 4.5 (conditional independence)"), "{md}");
        assert!(
            md.contains(&format!(
                "| CI no | 2 | 0.500 | 0.500 | 0.0% | 0.562 ± 0.280 | {} |",
                dpcotrain_report::numbers::signed(z_no, 2)
            )),
            "{md}"
        );
        assert!(z_no < 0.0 && md.contains("| −"), "a negative z prints with U+2212: {md}");
        assert!(md.contains("| CI yes | 2 | 0.800 |"), "{md}");
        assert!(md.contains("### Table 4.6 (masking × CI, Noisy)"), "{md}");
        assert!(md.contains("| mask no CI yes | 2 | 0.800 | 0.800 | 0.0% | 0.557 ± 0.288 |"), "{md}");
        assert!(md.contains("| mask yes CI no | – |"), "{md}");
        // Under the thesis's DP the same rows are compared with Tables 4.10 and 4.11.
        let dp: Vec<RunRow> = rows.into_iter().map(|r| RunRow { dp: DpLabel::Thesis, ..r }).collect();
        let md = simulated_comparison(&dp);
        assert!(md.contains("### Table 4.10 (conditional independence)") && md.contains("0.663 ± 0.251"), "{md}");
        assert!(md.contains("### Table 4.11 (masking × CI, Noisy)") && md.contains("0.639 ± 0.236"), "{md}");
    }
}
