//! The doc-number check: every figure README.md, examples/README.md and docs/results.md quote
//! from a cheap command is regenerated here from that command and compared, digit for digit
//! as printed, so a document cannot drift from the code. Each check names the command a reader
//! runs to see the same figures. Figures that depend on the machine (wall times, and the counts
//! docs/results.md marks as machine-dependent) are not compared; the rest are seeded and
//! reproduce on one build.

use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::Command;

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

fn doc(name: &str) -> String {
    std::fs::read_to_string(root().join(name)).unwrap()
}

/// Whitespace runs as single spaces, so that a figure quoted across a line break still matches.
fn norm(s: &str) -> String {
    s.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// `text` (whitespace-normalised) must appear in document `name`.
fn assert_quoted(name: &str, text: &str) {
    assert!(
        norm(&doc(name)).contains(&norm(text)),
        "{name} no longer quotes what the command prints today; expected to find:\n  {text}"
    );
}

thread_local! {
    static TEST_DIR: tempfile::TempDir = tempfile::tempdir().expect("temporary directory");
}

/// `dpcotrain demo ARGS --out TMP`: its stdout and its run.json.
fn demo(args: &[&str]) -> (String, Value) {
    let out = TEST_DIR.with(|d| d.path().join(args.join("_").replace(['-', ','], "")));
    let run =
        Command::new(env!("CARGO_BIN_EXE_dpcotrain")).arg("demo").args(args).arg("--out").arg(&out).output().unwrap();
    assert!(run.status.success(), "demo {args:?}: {}", String::from_utf8_lossy(&run.stderr));
    let json = serde_json::from_str(&std::fs::read_to_string(out.join("run.json")).unwrap()).unwrap();
    (String::from_utf8(run.stdout).unwrap(), json)
}

/// Party `i`'s figure `key` with 3 decimals, as the demo prints it.
fn f3(r: &Value, i: usize, key: &str) -> String {
    dpcotrain_report::numbers::minus(r["parties"][i][key].as_f64().unwrap(), 3)
}

/// Party `i`'s RMSE alone → after co-training, as the README quotes it ("0.476 → 0.292").
fn change(r: &Value, i: usize) -> String {
    format!("{} → {}", f3(r, i, "rmse_before"), f3(r, i, "rmse_after"))
}

/// Party `i`'s share of its non-private gain in whole percent, as the demo prints it.
fn pct(r: &Value, i: usize) -> String {
    dpcotrain_report::numbers::minus(100.0 * r["parties"][i]["gain_recovered"].as_f64().unwrap(), 0)
}

/// The fenced block of `name` whose first line starts with `first`.
fn block(name: &str, first: &str) -> Vec<String> {
    let text = doc(name);
    let mut blocks = text.split("```").skip(1).step_by(2);
    let b = blocks
        .find(|b| b.lines().nth(1).is_some_and(|l| l.starts_with(first)))
        .unwrap_or_else(|| panic!("{name} has no code block starting with {first:?}"));
    b.lines().skip(1).filter(|l| !l.trim().is_empty()).map(str::to_string).collect()
}

fn assert_lines_printed(name: &str, lines: &[String], printed: &str, command: &str) {
    for l in lines {
        assert!(
            printed.lines().any(|p| p.trim_end() == l.trim_end()),
            "{name} shows a line `{command}` no longer prints:\n  {l}\nit prints:\n{printed}"
        );
    }
}

/// README's main job: the demo's per-party lines, and the figures quoted around them and in the
/// tour (`cargo run --release -- demo`, `… --dataset simulated`, `… --policy release-once
/// --rounds 25`).
#[test]
fn readme_quotes_the_demo() {
    let (text, r) = demo(&[]);
    assert_lines_printed("README.md", &block("README.md", "gain recovered"), &text, "dpcotrain demo");
    assert_quoted(
        "README.md",
        &format!(
            "(The table above it shows both parties' RMSE alone, {} and {}, against {} for predicting the public mean.)",
            f3(&r, 0, "rmse_before"),
            f3(&r, 1, "rmse_before"),
            f3(&r, 0, "rmse_mean_baseline")
        ),
    );
    let (_, once) = demo(&["--policy", "release-once", "--rounds", "25"]);
    let (_, extra) = demo(&["--answer-extra-variance", "0"]);
    let (_, sim) = demo(&["--dataset", "simulated"]);
    for quoted in [
        format!(
            "its noise erases the gain — P1 {} and P2 {}, where the honest default reaches {} and {})",
            change(&once, 0),
            change(&once, 1),
            f3(&r, 0, "rmse_after"),
            f3(&r, 1, "rmse_after")
        ),
        format!(
            "as reported, without the default discount `own:30` of `[model] answer_extra_variance`: P1\n   {} and P2 {} —",
            change(&extra, 0),
            change(&extra, 1)
        ),
        format!(
            "`--dataset simulated` (P1 {}, {}% of its non-private gain; P2 {}, {}%)",
            change(&sim, 0),
            pct(&sim, 0),
            change(&sim, 1),
            pct(&sim, 1)
        ),
    ] {
        assert_quoted("README.md", &quoted);
    }
}

/// The compiled example `name` (cargo test builds the examples; built here if it is missing).
fn example(name: &str) -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    let path = exe.parent().unwrap().parent().unwrap().join("examples").join(name);
    if !path.exists() {
        let st = Command::new(env!("CARGO"))
            .args(["build", "--release", "--example", name])
            .current_dir(root())
            .status()
            .unwrap();
        assert!(st.success(), "cargo build --release --example {name}");
    }
    path
}

/// examples/README.md: the two_statisticians table (`cargo run --release --example
/// two_statisticians`), and the shipped two-party data's size.
#[test]
fn examples_readme_quotes_its_examples() {
    let out = Command::new(example("two_statisticians")).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let printed = String::from_utf8(out.stdout).unwrap();
    let table = block("examples/README.md", "party ");
    assert_eq!(table.len(), 3, "{table:?}");
    assert_lines_printed("examples/README.md", &table, &printed, "cargo run --release --example two_statisticians");
    for party in ["party-a", "party-b"] {
        let rows = doc(&format!("examples/two-party/data/{party}/train.csv")).lines().count() - 1;
        assert_quoted("examples/README.md", &format!("masked, {rows} labelled rows each"));
    }
}

/// docs/results.md, Bauer et al. 2016 Fig 1 (`dpcotrain experiment sparse bauer --fig1-only`,
/// under a second): the best NLML and σ_n of each method. The count of starts that reach the
/// best is machine-dependent (marked so in docs/results.md) and is not compared.
#[test]
fn results_quote_bauer_fig1() {
    let out = TEST_DIR.with(|d| d.path().join("bauer"));
    let run = Command::new(env!("CARGO_BIN_EXE_dpcotrain"))
        .args(["experiment", "sparse", "bauer", "--fig1-only", "--out"])
        .arg(&out)
        .output()
        .unwrap();
    assert!(run.status.success(), "{}", String::from_utf8_lossy(&run.stderr));
    let md = std::fs::read_to_string(out.join("bauer-fig1.md")).unwrap();
    let results = doc("docs/results.md");
    for (method, paper) in [("full GP", "34.15, 0.274"), ("FITC", "23.16, 1.93·10⁻⁴"), ("VFE", "38.86, 0.286")] {
        let row = md.lines().find(|l| l.starts_with(&format!("| {method} |"))).unwrap_or_else(|| panic!("{md}"));
        let cells: Vec<&str> = row.split('|').map(str::trim).collect();
        let (best, sigma) = (cells[2], cells[4]);
        let quoted = results
            .lines()
            .find(|l| l.starts_with(&format!("| {method} |")) && l.trim_end().ends_with(&format!("| {paper} |")))
            .unwrap_or_else(|| panic!("docs/results.md has no Fig 1 row for {method}"));
        assert!(quoted.contains(best.trim_matches('*')), "docs/results.md's Fig 1 {method}: {quoted}; today {best}");
        if method != "FITC" {
            assert!(quoted.contains(sigma), "docs/results.md's Fig 1 {method} σ_n: {quoted}; today {sigma}");
        }
    }
}
