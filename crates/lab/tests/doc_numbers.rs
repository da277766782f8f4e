//! The lab's figures quoted in docs/ come from the lab's commands run here (the product's are
//! checked in the root package's tests/doc_numbers.rs).

use std::path::Path;
use std::process::Command;

fn doc(name: &str) -> String {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..").join(name);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// docs/results.md, Bauer et al. 2016 Fig 1 (`dpcotrain-lab experiment sparse bauer --fig1-only`,
/// under a second): the best NLML and σ_n of each method. The count of starts that reach the
/// best is machine-dependent (marked so in docs/results.md) and is not compared.
#[test]
fn results_quote_bauer_fig1() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("bauer");
    let run = Command::new(env!("CARGO_BIN_EXE_dpcotrain-lab"))
        .current_dir(concat!(env!("CARGO_MANIFEST_DIR"), "/../.."))
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
