//! `dpcotrain privacy calibrate | compose` against the notes' test vectors.

use serde_json::Value;
use std::process::Command;

fn run(args: &[&str]) -> (bool, Value, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_dpcotrain")).args(args).output().unwrap();
    let v = serde_json::from_slice(&out.stdout).unwrap_or(Value::Null);
    (out.status.success(), v, String::from_utf8_lossy(&out.stderr).into_owned())
}

#[test]
fn calibrate_prints_sigma() {
    let (ok, v, _) =
        run(&["privacy", "calibrate", "--epsilon", "1", "--delta", "1e-5", "--sensitivity", "1", "--json"]);
    assert!(ok);
    assert!((v["sigma"].as_f64().unwrap() - 3.73).abs() < 0.005);
    assert_eq!(v["guaranteed"], true);
    let (_, c, _) = run(&[
        "privacy",
        "calibrate",
        "--epsilon",
        "1",
        "--delta",
        "1e-5",
        "--sensitivity",
        "1",
        "--mechanism",
        "classic",
        "--json",
    ]);
    assert!((c["sigma"].as_f64().unwrap() - 4.84).abs() < 0.005);
    let (_, t, _) = run(&[
        "privacy",
        "calibrate",
        "--epsilon",
        "1",
        "--delta",
        "0.00625",
        "--sensitivity",
        "1",
        "--mechanism",
        "thesis",
        "--json",
    ]);
    assert_eq!(t["sigma"].as_f64().unwrap(), 0.42);
    assert_eq!(t["guaranteed"], false);
    assert!(t["warning"].as_str().unwrap().contains("NO formal"));
    let (ok, _, err) = run(&[
        "privacy",
        "calibrate",
        "--epsilon",
        "2",
        "--delta",
        "1e-5",
        "--sensitivity",
        "1",
        "--mechanism",
        "classic",
    ]);
    assert!(!ok && err.contains("ε ≤ 1"));
}

#[test]
fn compose_prints_rho_and_epsilon() {
    // 10 releases at σ = 4Δ: ρ = 10/(2·16) = 0.3125, exact ε = 3.3414, CKS 3.6170 (δ = 1e-5).
    let (ok, v, _) = run(&[
        "privacy",
        "compose",
        "--releases",
        "10",
        "--sigma",
        "4",
        "--sensitivity",
        "1",
        "--delta",
        "1e-5",
        "--json",
    ]);
    assert!(ok);
    assert!((v["rho"].as_f64().unwrap() - 0.3125).abs() < 1e-12);
    assert!((v["epsilon"].as_f64().unwrap() - 3.3414).abs() < 2e-4);
    assert!((v["epsilon_cks"].as_f64().unwrap() - 3.6170).abs() < 2e-4);
    let (ok, _, err) =
        run(&["privacy", "compose", "--releases", "1", "--sigma", "0", "--sensitivity", "1", "--delta", "1e-5"]);
    assert!(!ok && err.contains("--sigma"));
}
