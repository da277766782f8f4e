//! Experiment reports against the thesis: tables laid out like Thomas 2017's Tables C.1,
//! 4.3–4.12 (simulated) and 4.13–4.15 (CCPP), each cell "ours (thesis; difference)"; the
//! thesis's qualitative orderings checked; SVG figures (RMSE per round per party; the
//! Fig 4.3/4.4-style picture of one exchange without and with DP).
//!
//! Cells pool both parties' rows (docs/decisions.md D14). An anchor cell (Table C.1 unmasked rows;
//! Table 4.4 Noisy/Hybrid unmasked rows, §3.8) passes when |ours − thesis| ≤ max(0.02, thesis sd).

use crate::exchange::ExchangeRun;
use crate::grid::{DpLabel, RunRow};
use dpcotrain_cotrain::CombinerKind;
use dpcotrain_cotrain::Uncertainty;
use dpcotrain_report::svg::{ExchangePanel, Figure, LineChart, Marker, Series};
use dpcotrain_report::thesis::{self, Cell};
use std::fmt::Write;

fn mean_sd(v: &[f64]) -> (f64, f64, usize) {
    let v: Vec<f64> = v.iter().copied().filter(|x| x.is_finite()).collect();
    let n = v.len();
    if n == 0 {
        return (f64::NAN, f64::NAN, 0);
    }
    let m = v.iter().sum::<f64>() / n as f64;
    let s = if n > 1 { (v.iter().map(|x| (x - m).powi(2)).sum::<f64>() / (n - 1) as f64).sqrt() } else { 0.0 };
    (m, s, n)
}

/// Pass/fail of an anchor cell.
pub fn within(ours: f64, t: Cell) -> bool {
    (ours - t.0).abs() <= 0.02f64.max(t.1)
}

/// One table cell: "ours ± sd (thesis; Δ)", with ✓/✗ for anchors. Empty selections say "–".
fn cell(v: &[f64], t: Option<Cell>, anchor: bool, fails: &mut Vec<String>, label: &str) -> String {
    let (m, s, n) = mean_sd(v);
    if n == 0 {
        return "–".into();
    }
    let mut out = format!("{m:.3} ± {s:.3}");
    if let Some(t) = t {
        let dag = if t.2 { "†" } else { "" };
        let _ = write!(out, " ({:.3}{dag}; {})", t.0, dpcotrain_report::numbers::signed(m - t.0, 3));
        if anchor {
            if within(m, t) {
                out += " ✓";
            } else {
                out += " ✗";
                fails.push(format!("{label}: ours {m:.3} vs thesis {:.3} ± {:.3}", t.0, t.1));
            }
        }
    }
    out
}

fn sel(rows: &[RunRow], f: impl Fn(&RunRow) -> bool) -> Vec<&RunRow> {
    rows.iter().filter(|r| f(r)).collect()
}

fn after(rows: &[&RunRow]) -> Vec<f64> {
    rows.iter().map(|r| r.rmse_after).collect()
}

fn before(rows: &[&RunRow]) -> Vec<f64> {
    rows.iter().map(|r| r.rmse_before).collect()
}

fn yes(b: bool) -> &'static str {
    if b { "Yes" } else { "No" }
}

const UNC: [Uncertainty; 3] = [Uncertainty::None, Uncertainty::Marginal, Uncertainty::Full];

/// The simulated-grid tables for rows of one DP setting (`dp`: "off", "thesis", or a
/// calibrated name). Appends failed anchors to `fails`.
pub(crate) fn simulated_tables(rows: &[RunRow], fails: &mut Vec<String>) -> String {
    let rows: Vec<RunRow> = rows.iter().filter(|r| r.dataset == "simulated").cloned().collect();
    let Some(dp) = rows.first().map(|r| r.dp) else { return String::new() };
    let nodp = dp == DpLabel::Off;
    let thesis_dp = dp == DpLabel::Thesis;
    let against = if nodp { "the thesis without DP" } else { "the thesis's DP mode (σ = 0.42·s, no guarantee)" };
    let (t3, t4, t5, t6, t7) = if nodp {
        (&thesis::T4_3, &thesis::T4_4, &thesis::T4_5, &thesis::T4_6, &thesis::T4_7)
    } else {
        (&thesis::T4_8, &thesis::T4_9, &thesis::T4_10, &thesis::T4_11, &thesis::T4_12)
    };
    let names = if nodp { ["4.3", "4.4", "4.5", "4.6", "4.7"] } else { ["4.8", "4.9", "4.10", "4.11", "4.12"] };
    let seeds: std::collections::BTreeSet<u64> = rows.iter().map(|r| r.seed).collect();
    let mut md = format!(
        "## Simulated grid, DP: {dp}\n\n{} party-rows, {} seeds. Each cell: our mean ± sd over runs and both parties \
         (in brackets {against}; our difference).{}\n\n",
        rows.len(),
        seeds.len(),
        if nodp || thesis_dp {
            ""
        } else {
            " Calibrated DP has no thesis counterpart: the bracket is the thesis's DP mode."
        }
    );
    let all: Vec<&RunRow> = rows.iter().collect();
    // Table C.1 (pre-co-training; the same for every DP setting with our seeded fits).
    if nodp {
        md += "### Table C.1 — before co-training (anchors: unmasked rows)\n\n| CI | Mask | r | n = 25 | n = 50 | n = 200 |\n|---|---|---|---|---|---|\n";
        for (ci_i, ci) in [false, true].iter().enumerate() {
            for (m_i, mask) in [false, true].iter().enumerate() {
                for (r_i, r) in thesis::RS.iter().enumerate() {
                    let mut line = format!("| {} | {} | {r} |", yes(*ci), yes(*mask));
                    for (n_i, n) in thesis::NOBS.iter().enumerate() {
                        // Before co-training does not depend on the combiner: one row per run and party.
                        let v = sel(&rows, |x| {
                            x.ci == Some(*ci)
                                && x.masking == *mask
                                && x.r == Some(*r)
                                && x.nobs == *n
                                && x.combiner == rows[0].combiner
                                && x.uncertainty == rows[0].uncertainty
                        });
                        let label = format!("C.1 CI {} mask {} r {r} n {n}", yes(*ci), yes(*mask));
                        let _ = write!(
                            line,
                            " {} |",
                            cell(&before(&v), Some(thesis::C1[ci_i][m_i][r_i][n_i]), !mask, fails, &label)
                        );
                    }
                    md += &line;
                    md += "\n";
                }
            }
        }
        md += "\n";
    }
    let comb_cols = |md: &mut String| {
        *md += "Blocky | Noisy | Hybrid |";
    };
    // Table 4.3 / 4.8: by combiner.
    let _ = write!(md, "### Table {} — after co-training, by combiner\n\n", names[0]);
    md += "| ";
    comb_cols(&mut md);
    md += "\n|---|---|---|\n|";
    for (k, c) in thesis::COMBINERS.iter().enumerate() {
        let v = sel(&rows, |x| x.combiner == *c);
        let _ = write!(md, " {} |", cell(&after(&v), Some(t3[k]), false, fails, ""));
    }
    let (bm, bs, _) = mean_sd(&before(&all));
    let _ = write!(md, "\n\nBefore co-training (all rows): {bm:.3} ± {bs:.3}.\n\n");
    // Table 4.4 / 4.9: masking × r.
    let _ = write!(
        md,
        "### Table {} — masking × r{}\n\n| Mask | r | ",
        names[1],
        if nodp { " (anchors: Noisy and Hybrid, unmasked)" } else { "" }
    );
    comb_cols(&mut md);
    md += "\n|---|---|---|---|---|\n";
    for (m_i, mask) in [false, true].iter().enumerate() {
        for (r_i, r) in thesis::RS.iter().enumerate() {
            let _ = write!(md, "| {} | {r} |", yes(*mask));
            for (k, c) in thesis::COMBINERS.iter().enumerate() {
                let v = sel(&rows, |x| x.masking == *mask && x.r == Some(*r) && x.combiner == *c);
                let anchor = nodp && !mask && k > 0;
                let label = format!("{} mask {} r {r} {c}", names[1], yes(*mask));
                let _ = write!(md, " {} |", cell(&after(&v), Some(t4[m_i][r_i][k]), anchor, fails, &label));
            }
            md += "\n";
        }
    }
    // Table 4.5 / 4.10: CI.
    let _ = write!(md, "\n### Table {} — conditional independence\n\n| CI | ", names[2]);
    comb_cols(&mut md);
    md += "\n|---|---|---|---|\n";
    for (ci_i, ci) in [false, true].iter().enumerate() {
        let _ = write!(md, "| {} |", yes(*ci));
        for (k, c) in thesis::COMBINERS.iter().enumerate() {
            let v = sel(&rows, |x| x.ci == Some(*ci) && x.combiner == *c);
            let _ = write!(md, " {} |", cell(&after(&v), Some(t5[ci_i][k]), false, fails, ""));
        }
        md += "\n";
    }
    // Table 4.6 / 4.11: masking × CI (the thesis kept only Noisy).
    let _ = write!(md, "\n### Table {} — masking × CI\n\n| Mask | CI | ", names[3]);
    comb_cols(&mut md);
    md += "\n|---|---|---|---|---|\n";
    for (m_i, mask) in [false, true].iter().enumerate() {
        for (ci_i, ci) in [false, true].iter().enumerate() {
            let _ = write!(md, "| {} | {} |", yes(*mask), yes(*ci));
            for c in thesis::COMBINERS {
                let v = sel(&rows, |x| x.masking == *mask && x.ci == Some(*ci) && x.combiner == c);
                let t = (c == CombinerKind::Noisy).then_some(t6[m_i][ci_i]);
                let _ = write!(md, " {} |", cell(&after(&v), t, false, fails, ""));
            }
            md += "\n";
        }
    }
    // Table 4.7 / 4.12: masking × uncertainty.
    let _ = write!(md, "\n### Table {} — masking × uncertainty\n\n| Mask | Uncertainty | ", names[4]);
    comb_cols(&mut md);
    md += "\n|---|---|---|---|---|\n";
    for (m_i, mask) in [false, true].iter().enumerate() {
        for (u_i, u) in UNC.iter().enumerate() {
            let _ = write!(md, "| {} | {u} |", yes(*mask));
            for (k, c) in thesis::COMBINERS.iter().enumerate() {
                let v = sel(&rows, |x| x.masking == *mask && x.uncertainty == *u && x.combiner == *c);
                let _ = write!(md, " {} |", cell(&after(&v), Some(t7[m_i][u_i][k]), false, fails, ""));
            }
            md += "\n";
        }
    }
    md += "\n";
    md
}

/// The CCPP tables (4.13 before; 4.14 no DP / 4.15 with DP, full covariance as in the thesis).
pub(crate) fn ccpp_tables(rows: &[RunRow]) -> String {
    let rows: Vec<RunRow> = rows.iter().filter(|r| r.dataset == "ccpp").cloned().collect();
    let Some(dp) = rows.first().map(|r| r.dp) else { return String::new() };
    let pair = |v: &[&RunRow], f: fn(&RunRow) -> f64| -> (f64, f64) {
        let p = |name: &str| mean_sd(&v.iter().filter(|r| r.party == name).map(|r| f(r)).collect::<Vec<_>>()).0;
        (p("P1"), p("P2"))
    };
    let fmt = |ours: (f64, f64), t: (f64, f64)| {
        if ours.0.is_nan() {
            return "–".to_string();
        }
        format!("{:.3}, {:.3} ({:.3}, {:.3})", ours.0, ours.1, t.0, t.1)
    };
    let mut md = format!(
        "## CCPP, DP: {dp}\n\nEach cell: our (view 1, view 2) mean over seeds (in brackets the thesis's single run).\n\n\
         ### Table 4.13 — before co-training\n\n| Mask | n = 25 | n = 50 | n = 100 | n = 200 |\n|---|---|---|---|---|\n"
    );
    for (m_i, mask) in [false, true].iter().enumerate() {
        let _ = write!(md, "| {} |", yes(*mask));
        for (n_i, n) in thesis::CCPP_NOBS.iter().enumerate() {
            let v = sel(&rows, |x| {
                x.masking == *mask
                    && x.nobs == *n
                    && x.combiner == rows[0].combiner
                    && x.uncertainty == rows[0].uncertainty
            });
            let _ = write!(md, " {} |", fmt(pair(&v, |r| r.rmse_before), thesis::T4_13[m_i][n_i]));
        }
        md += "\n";
    }
    let (name, t) = if dp == DpLabel::Off { ("4.14", &thesis::T4_14) } else { ("4.15", &thesis::T4_15) };
    let _ = write!(
        md,
        "\n### Table {name} — after co-training, full covariance{}\n\n| Mask | n | Blocky | Noisy | Hybrid |\n|---|---|---|---|---|\n",
        if matches!(dp, DpLabel::Off | DpLabel::Thesis) { "" } else { " (bracket: the thesis's DP mode)" }
    );
    for (m_i, mask) in [false, true].iter().enumerate() {
        for (n_i, n) in thesis::CCPP_NOBS.iter().enumerate() {
            let _ = write!(md, "| {} | {n} |", yes(*mask));
            for (k, c) in thesis::COMBINERS.iter().enumerate() {
                let v = sel(&rows, |x| {
                    x.masking == *mask && x.nobs == *n && x.combiner == *c && x.uncertainty == Uncertainty::Full
                });
                let _ = write!(md, " {} |", fmt(pair(&v, |r| r.rmse_after), t[m_i][n_i][k]));
            }
            md += "\n";
        }
    }
    md += "\n";
    md
}

/// The thesis's qualitative findings, checked on our rows: (finding, holds, evidence).
pub(crate) fn orderings(rows: &[RunRow]) -> Vec<(String, bool, String)> {
    let mut out = Vec::new();
    let m = |f: &dyn Fn(&RunRow) -> bool| {
        mean_sd(&rows.iter().filter(|r| f(r)).map(|r| r.rmse_after).collect::<Vec<_>>()).0
    };
    let dps: std::collections::BTreeSet<DpLabel> = rows.iter().map(|r| r.dp).collect();
    for dp in &dps {
        let of = |c: CombinerKind| m(&|r| r.dp == *dp && r.combiner == c);
        let (b, n, h) = (of(CombinerKind::Blocky), of(CombinerKind::Noisy), of(CombinerKind::Hybrid));
        if b.is_finite() && n.is_finite() && h.is_finite() {
            out.push((
                format!("DP {dp}: Blocky far worse than Noisy and Hybrid"),
                b > 1.5 * n.max(h),
                format!("Blocky {b:.3}, Noisy {n:.3}, Hybrid {h:.3}"),
            ));
        }
        if *dp != DpLabel::Off && n.is_finite() && h.is_finite() {
            out.push((format!("DP {dp}: Noisy better than Hybrid"), n < h, format!("Noisy {n:.3}, Hybrid {h:.3}")));
        }
        for c in [CombinerKind::Noisy, CombinerKind::Hybrid] {
            let u = |x: Uncertainty| m(&|r| r.dp == *dp && r.combiner == c && r.masking && r.uncertainty == x);
            let (un, um, uf) = (u(Uncertainty::None), u(Uncertainty::Marginal), u(Uncertainty::Full));
            if un.is_finite() && um.is_finite() && uf.is_finite() {
                out.push((
                    format!("DP {dp}, masked, {c}: sharing more uncertainty helps (none ≥ marginal ≥ full)"),
                    un >= um && um >= uf,
                    format!("none {un:.3}, marginal {um:.3}, full {uf:.3}"),
                ));
            }
            if *dp == DpLabel::Off {
                let sel: Vec<&RunRow> = rows.iter().filter(|r| r.dp == *dp && r.combiner == c).collect();
                let (bf, af) = (mean_sd(&before(&sel)).0, mean_sd(&after(&sel)).0);
                if bf.is_finite() {
                    out.push((
                        format!("no DP, {c}: co-training improves on before"),
                        af < bf,
                        format!("before {bf:.3}, after {af:.3}"),
                    ));
                }
            }
        }
    }
    out
}

/// Test RMSE per round (mean over the rows of each combiner; round 0 = before): one panel per
/// party, each with its own y-range (the parties' RMSEs differ by far more than co-training
/// moves either), one colour and marker per combiner so overlapping lines stay apart.
pub(crate) fn rmse_rounds_svg(rows: &[RunRow], title: &str) -> String {
    let markers = [Marker::Circle, Marker::Square, Marker::Cross];
    let mut fig = Figure::new(title);
    for party in ["P1", "P2"] {
        let mut chart = LineChart::new(format!("party {party}"), "round", "test RMSE (mean over runs)");
        for (k, c) in thesis::COMBINERS.iter().enumerate() {
            let v: Vec<&RunRow> =
                rows.iter().filter(|r| r.combiner == *c && r.party == party && r.error.is_none()).collect();
            if v.is_empty() {
                continue;
            }
            let rounds = v.iter().map(|r| r.rmse_per_round.len()).min().unwrap_or(0);
            let mut pts = vec![(0.0, mean_sd(&before(&v)).0)];
            for j in 0..rounds {
                pts.push(((j + 1) as f64, mean_sd(&v.iter().map(|r| r.rmse_per_round[j]).collect::<Vec<_>>()).0));
            }
            let mut s = Series::new(c.to_string(), pts, k).markers(markers[k % markers.len()]);
            if k % 2 == 1 {
                s = s.dashed();
            }
            chart = chart.with_series(s);
        }
        if !chart.series.is_empty() {
            fig = fig.with_panel(chart);
        }
    }
    fig.to_svg()
}

/// The Fig 4.3/4.4-style picture of one simulated co-training (party P1): one panel per run of
/// [`crate::exchange::exchange_runs`] — its private points, the pool points it asked
/// about (at the answers' means), its posterior mean and 95% band after co-training, and the
/// generator's true regression line.
pub(crate) fn exchange_svg(seed: u64, runs: &[ExchangeRun]) -> String {
    let mut fig = Figure::new(format!("One co-training run, party P1 (r = 0.9, masked, n_obs = 25, seed {seed})"));
    for run in runs {
        fig = fig.with_panel(ExchangePanel {
            train: run.train.clone(),
            queried: run.queried.clone(),
            mean: run.mean.clone(),
            lower: run.lower.clone(),
            upper: run.upper.clone(),
            truth: Some(run.truth.clone()),
            grid: run.grid.clone(),
            x_label: "x₁ (P1's covariate)".into(),
            ..ExchangePanel::new(&run.title)
        });
    }
    fig.to_svg()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(combiner: &str, unc: &str, masking: bool, r: f64, before: f64, after: f64) -> RunRow {
        RunRow {
            dataset: "simulated".into(),
            r: Some(r),
            ci: Some(false),
            masking,
            nobs: 25,
            seed: 0,
            combiner: combiner.parse().unwrap(),
            uncertainty: unc.parse().unwrap(),
            dp: DpLabel::Off,
            party: "P1".into(),
            view: "x1".into(),
            rmse_before: before,
            rmse_after: after,
            nlpd_before: 0.0,
            nlpd_after: 0.0,
            epsilon_spent: None,
            rmse_per_round: vec![after; 3],
            error: None,
        }
    }

    #[test]
    fn cells_compare_with_the_thesis_and_flag_anchors() {
        let mut fails = Vec::new();
        // Thesis 0.458 ± 0.034: 0.47 passes, 0.52 fails.
        let ok = cell(&[0.47], Some(thesis::T4_4[0][2][1]), true, &mut fails, "a");
        assert!(ok.contains("0.470") && ok.contains("(0.458; +0.012)") && ok.ends_with('✓'), "{ok}");
        let bad = cell(&[0.52], Some(thesis::T4_4[0][2][1]), true, &mut fails, "b");
        assert!(bad.ends_with('✗') && fails == ["b: ours 0.520 vs thesis 0.458 ± 0.034"], "{bad} {fails:?}");
        assert_eq!(cell(&[], None, false, &mut fails, ""), "–");
        assert!(within(0.15, (0.147, 0.0134, false)) && !within(0.2, (0.147, 0.0134, false)));
    }

    #[test]
    fn orderings_are_checked_on_the_rows() {
        let rows = vec![
            row("blocky", "none", true, 0.9, 0.6, 3.0),
            row("noisy", "none", true, 0.9, 0.6, 0.55),
            row("noisy", "marginal", true, 0.9, 0.6, 0.5),
            row("noisy", "full", true, 0.9, 0.6, 0.52),
            row("hybrid", "none", true, 0.9, 0.6, 0.65),
        ];
        let o = orderings(&rows);
        let find = |s: &str| o.iter().find(|(f, _, _)| f.contains(s)).unwrap_or_else(|| panic!("{s}: {o:?}"));
        assert!(find("Blocky far worse").1);
        assert!(!find("masked, noisy: sharing").1, "marginal < full breaks none ≥ marginal ≥ full");
        assert!(find("no DP, noisy: co-training improves").1);
        assert!(!find("no DP, hybrid: co-training improves").1);
        let tables = simulated_tables(&rows, &mut Vec::new());
        assert!(tables.contains("### Table C.1") && tables.contains("### Table 4.4"));
        let svg = rmse_rounds_svg(&rows, "t");
        assert!(svg.contains(">party P1</text>") && svg.contains(">noisy</text>") && !svg.contains("NaN"));
    }
}
