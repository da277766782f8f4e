//! `dpcotrain demo`: two real TLS nodes on loopback, the report folder, options and errors.

use serde_json::Value;
use std::process::Command;

fn bin() -> Command {
    Command::new(env!("CARGO_BIN_EXE_dpcotrain"))
}

thread_local! {
    /// This test's own temporary directory (each test runs on its own thread), removed when
    /// the test's thread ends.
    static TEST_DIR: tempfile::TempDir = tempfile::tempdir().expect("temporary directory");
}

/// A fresh path `name` inside this test's own temporary directory.
fn test_dir(name: &str) -> std::path::PathBuf {
    TEST_DIR.with(|d| d.path().join(name))
}

fn tmp(tag: &str) -> std::path::PathBuf {
    test_dir(&format!("demo-{tag}"))
}

#[test]
fn demo_runs_a_private_federation_and_writes_a_report() {
    let out = tmp("ccpp");
    // The honest default (public θ, label-free batch of 25 queries, capped finite release);
    // two rounds: the second asks nothing new because each peer's budget is spent.
    let run = bin().args(["demo", "--rounds", "2", "--n-obs", "100", "--out"]).arg(&out).output().unwrap();
    assert!(run.status.success(), "{}", String::from_utf8_lossy(&run.stderr));
    let table = String::from_utf8_lossy(&run.stdout);
    assert!(table.contains("RMSE alone") && table.contains("P1") && table.contains("P2"), "{table}");
    assert!(table.contains("gain recovered at ε = 1") && table.contains("mean only"), "{table}");
    // The share of the gain is per party (or "no gain to recover"), never one pooled figure.
    for p in ["  P1: ", "  P2: "] {
        let line = table.lines().find(|l| l.starts_with(p)).unwrap_or_else(|| panic!("no share for {p}: {table}"));
        assert!(line.contains("of its non-private gain") || line.contains("no gain to recover"), "{line}");
    }
    assert!(table.contains("labels clipped by the releases"), "{table}");
    // A verdict per party, judged against the paired standard error of the change.
    for p in ["P1: ", "P2: "] {
        let line = table.lines().find(|l| l.starts_with(p)).unwrap_or_else(|| panic!("no verdict for {p}: {table}"));
        assert!(
            ["helped", "HURT", "no clear change"].iter().any(|v| line.contains(v)) && line.contains("2 SE"),
            "{line}"
        );
    }
    assert!(table.contains("DP noise: sd up to") && table.contains("label range"), "{table}");
    for f in [
        "report.md",
        "rmse.svg",
        "queried.svg",
        "run.json",
        "federation/secrets/ca.pem",
        "federation/state/P1/state.json",
    ] {
        assert!(out.join(f).exists(), "{f} missing");
    }
    // The configs it wrote (serialised from the config structs) pass `node check` and state
    // every setting, defaults included.
    for name in ["P1", "P2"] {
        let cfg = out.join(format!("federation/{name}.toml"));
        let check = bin().args(["node", "check", "--offline", "--config"]).arg(&cfg).output().unwrap();
        assert!(check.status.success(), "{}", String::from_utf8_lossy(&check.stderr));
        let text = std::fs::read_to_string(&cfg).unwrap();
        for setting in ["policy = \"batches\"", "cap = \"auto\"", "public_theta = [", "guard = \"off\"", "[[peers]]"] {
            assert!(text.contains(setting), "{name}.toml lacks {setting}:\n{text}");
        }
    }
    let r: Value = serde_json::from_str(&std::fs::read_to_string(out.join("run.json")).unwrap()).unwrap();
    assert_eq!(r["dp"], "calibrated");
    assert_eq!(r["policy"], "batches");
    assert_eq!(r["guaranteed"], true);
    assert!(r["gain_recovered"].is_null(), "no pooled share: {}", r["gain_recovered"]);
    let oracle = r["oracle_rmse"].as_f64().unwrap();
    for p in r["parties"].as_array().unwrap() {
        assert_eq!(p["rounds"], 2);
        assert_eq!(p["rmse_per_round"].as_array().unwrap().len(), 2);
        // One batch of 25 indices, asked once.
        assert_eq!(p["queried"].as_array().unwrap().len(), 25);
        let spent = &p["privacy_spent"][0];
        assert_eq!(spent["releases"], 1, "one batch, one release");
        assert!((spent["epsilon"].as_f64().unwrap() - 1.0).abs() < 1e-6);
        assert!(p["rmse_no_dp"].as_f64().unwrap().is_finite());
        assert!(p["rmse_no_dp_change_se"].as_f64().unwrap() > 0.0);
        // The constant baseline (predicting the public mean) beside alone; the clipped count.
        let y_sd = p["rmse_mean_baseline"].as_f64().unwrap();
        assert!(y_sd > 0.5 && y_sd < 2.0, "{p}");
        assert!(p["labels_clipped"].as_u64().is_some(), "{p}");
        // A share is given only where the no-DP gain is beyond 2 SE, and is then finite.
        let gain = p["rmse_before"].as_f64().unwrap() - p["rmse_no_dp"].as_f64().unwrap();
        let beyond = gain > 2.0 * p["rmse_no_dp_change_se"].as_f64().unwrap();
        assert_eq!(p["gain_recovered"].as_f64().is_some_and(f64::is_finite), beyond, "{p}");
        // The ledger's breakdown names the mechanism; the total over requesters is reported.
        let log = &spent["release_log"][0];
        assert!(log["mechanism"].as_str().unwrap().contains("finite+cap"), "{log}");
        assert!((log["rho"].as_f64().unwrap() - spent["rho"].as_f64().unwrap()).abs() < 1e-12);
        assert!((p["privacy_spent_total"]["epsilon"].as_f64().unwrap() - 1.0).abs() < 1e-6);
        // Pooling every label and column beats each party alone.
        assert!(oracle < p["rmse_before"].as_f64().unwrap());
    }
    let md = std::fs::read_to_string(out.join("report.md")).unwrap();
    assert!(md.contains("| P1 |") && md.contains("rmse.svg") && md.contains("gain recovered"));
    assert!(md.contains("predict the public mean"), "{md}");
    let svg = std::fs::read_to_string(out.join("rmse.svg")).unwrap();
    assert!(svg.starts_with("<svg") && svg.contains("party P1") && !svg.contains("NaN"));
    // Same seed, same numbers (the demo's noise is seeded; nodes restart from scratch).
    let again = bin().args(["demo", "--rounds", "2", "--n-obs", "100", "--json", "--out"]).arg(&out).output().unwrap();
    let r2: Value = serde_json::from_slice(&again.stdout).unwrap();
    for (a, b) in r["parties"].as_array().unwrap().iter().zip(r2["parties"].as_array().unwrap()) {
        assert_eq!(a["rmse_after"], b["rmse_after"]);
    }
    let _ = std::fs::remove_dir_all(&out);
    // The earlier setting is still available: release-once, one index per round.
    let out = tmp("legacy");
    let run = bin()
        .args(["demo", "--policy", "release-once", "--rounds", "4", "--n-obs", "25", "--json", "--out"])
        .arg(&out)
        .output()
        .unwrap();
    assert!(run.status.success(), "{}", String::from_utf8_lossy(&run.stderr));
    let r: Value = serde_json::from_slice(&run.stdout).unwrap();
    for p in r["parties"].as_array().unwrap() {
        assert_eq!(p["queried"].as_array().unwrap().len(), 4);
        assert_eq!(p["privacy_spent"][0]["releases"], 1, "release-once");
    }
    let _ = std::fs::remove_dir_all(&out);
}

/// The demo's default setting shows what the product is for: with the views {AT, RH} | {V, AP}
/// every party beats the predict-the-mean baseline alone and is helped beyond its paired noise,
/// under DP; the thesis's split is still available, and a bad --views is refused by name.
#[test]
fn the_default_demo_shows_parties_helped_beyond_the_mean() {
    let out = tmp("default");
    let run = bin().args(["demo", "--json", "--out"]).arg(&out).output().unwrap();
    assert!(run.status.success(), "{}", String::from_utf8_lossy(&run.stderr));
    let r: Value = serde_json::from_slice(&run.stdout).unwrap();
    for p in r["parties"].as_array().unwrap() {
        let (mean, alone, after) = (
            p["rmse_mean_baseline"].as_f64().unwrap(),
            p["rmse_before"].as_f64().unwrap(),
            p["rmse_after"].as_f64().unwrap(),
        );
        assert!(alone < mean && after < alone, "{p}");
        assert!(p["verdict"].as_str().unwrap().starts_with("helped"), "{p}");
        assert!(p["gain_recovered"].as_f64().is_some_and(|s| s > 0.0), "{p}");
    }
    let thesis =
        bin().args(["demo", "--views", "AT,V/AP,RH", "--n-obs", "50", "--json", "--out"]).arg(&out).output().unwrap();
    assert!(thesis.status.success(), "{}", String::from_utf8_lossy(&thesis.stderr));
    let r: Value = serde_json::from_slice(&thesis.stdout).unwrap();
    assert_eq!(r["parties"][0]["queried"].as_array().unwrap().len(), 25);
    for (bad, needle) in [("AT,XX/V,AP", "XX"), ("AT,RH", "slash")] {
        let run = bin().args(["demo", "--views", bad, "--out"]).arg(&out).output().unwrap();
        let err = String::from_utf8_lossy(&run.stderr);
        assert!(!run.status.success() && err.contains(needle), "{bad}: {err}");
    }
    let _ = std::fs::remove_dir_all(&out);
}

/// One round, read as a statistician would: "1 round", one minus sign
/// (U+2212) throughout, both oracles explained, and a plot whose x axis counts rounds (0 and 1,
/// never 0.5) with the ±2 SE bar of the change at the last round.
#[test]
fn one_round_report_reads_right() {
    let out = tmp("one-round");
    let run = bin().args(["demo", "--rounds", "1", "--n-obs", "100", "--out"]).arg(&out).output().unwrap();
    let (stdout, stderr) = (String::from_utf8_lossy(&run.stdout), String::from_utf8_lossy(&run.stderr));
    assert!(run.status.success(), "{stderr}");
    let md = std::fs::read_to_string(out.join("report.md")).unwrap();
    assert!(md.contains("**1 round**") && !md.contains("1 rounds"), "{md}");
    assert!(!stderr.contains("1 rounds") && !stdout.contains("1 rounds"), "{stderr}");
    // A hyphen-minus before a digit (" -0.011", "(-3") would sit beside "−0.079".
    let ascii_minus = |t: &str| {
        t.as_bytes()
            .windows(3)
            .any(|w| matches!(w[0], b' ' | b'(' | b'[' | b'|') && w[1] == b'-' && w[2].is_ascii_digit())
    };
    assert!(!ascii_minus(&md) && !ascii_minus(&stdout), "{md}\n{stdout}");
    assert!(
        md.contains("**Centralised oracle**") && md.contains("**Yu oracle**") && md.contains("Yu et al. 2008"),
        "{md}"
    );
    let svg = std::fs::read_to_string(out.join("rmse.svg")).unwrap();
    let x_tick = |t: &str| svg.contains(&format!(r#"text-anchor="middle">{t}</text>"#));
    assert!(x_tick("0") && x_tick("1") && !x_tick("0.5"), "x ticks must be whole rounds");
    assert!(svg.contains("±2 SE of the change from alone"), "the error bar is named");
    let _ = std::fs::remove_dir_all(&out);
}

#[test]
fn demo_options_and_errors() {
    let out = tmp("sim");
    let run = bin()
        .args(["demo", "--dataset", "simulated", "--dp", "thesis", "--combiner", "hybrid", "--uncertainty", "full"])
        .args(["--rounds", "2", "--n-obs", "25", "--json", "--out"])
        .arg(&out)
        .output()
        .unwrap();
    assert!(run.status.success(), "{}", String::from_utf8_lossy(&run.stderr));
    assert!(String::from_utf8_lossy(&run.stderr).contains("NO formal privacy guarantee"));
    let r: Value = serde_json::from_slice(&run.stdout).unwrap();
    assert_eq!(r["guaranteed"], false);
    assert_eq!(r["combiner"], "hybrid");
    for p in r["parties"].as_array().unwrap() {
        assert!(p["rmse_change_se"].as_f64().is_some_and(|se| se > 0.0), "{p}");
    }
    // Thesis mode's warning comes before the table, and its table never shows "ε spent 0".
    let run = bin()
        .args(["demo", "--dataset", "simulated", "--dp", "thesis", "--n-obs", "25", "--out"])
        .arg(&out)
        .output()
        .unwrap();
    let (stdout, stderr) = (String::from_utf8_lossy(&run.stdout), String::from_utf8_lossy(&run.stderr));
    assert!(
        stderr.contains("NO formal privacy guarantee") && stdout.contains("no guarantee (thesis mode)"),
        "{stdout}"
    );
    // With DP off, the footer says so (no "ε = 1 per release").
    let run = bin()
        .args(["demo", "--dataset", "simulated", "--dp", "off", "--n-obs", "25", "--out"])
        .arg(&out)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&run.stdout);
    assert!(run.status.success(), "{}", String::from_utf8_lossy(&run.stderr));
    assert!(stdout.contains("no privacy (DP off)") && !stdout.contains("per release"), "{stdout}");
    let _ = std::fs::remove_dir_all(&out);
    for (args, needle) in [
        (vec!["--epsilon", "0"], "--epsilon"),
        (vec!["--dataset", "mnist"], "mnist"),
        (vec!["--rounds", "0"], "--rounds"),
        (vec!["--answer-extra-variance", "-1"], "--answer-extra-variance"),
        (vec!["--queries", "0"], "--queries"),
        // A negative value reaches our validation instead of clap's "unexpected argument".
        (vec!["--epsilon", "-1"], "epsilon must be a positive finite number, got -1"),
        // Ruinous settings are refused, saying why and what to use.
        (vec!["--combiner", "hybrid"], "use combiner noisy with uncertainty marginal"),
        (vec!["--combiner", "blocky"], "ignores each answer's variance"),
        (vec!["--uncertainty", "none"], "uncertainty none ignores each answer's variance"),
        (vec!["--policy", "release-once", "--combiner", "hybrid", "--uncertainty", "full"], "under calibrated DP"),
        // Settings that would do nothing.
        (vec!["--budget-epsilon", "0.5"], "every release would be refused"),
        (vec!["--queries", "100000"], "the pool holds"),
        (vec!["--policy", "per-query", "--rounds", "100000"], "the pool holds"),
    ] {
        let run = bin().arg("demo").args(&args).args(["--out"]).arg(tmp("bad")).output().unwrap();
        // 1: our validation (one line); 2: clap's usage errors.
        let err = String::from_utf8_lossy(&run.stderr);
        assert!(matches!(run.status.code(), Some(1 | 2)), "{args:?}: {err}");
        assert!(err.contains(needle), "{args:?}: {err}");
        if run.status.code() == Some(1) {
            assert!(err.trim().lines().last().is_some_and(|l| l.starts_with("error: ")), "{args:?}: {err}");
        }
    }
}

/// `data split-ccpp`: the demo's 400 rows by default, party folders already there refused
/// (named) unless --force, and the three-party example's data regenerate byte for byte from
/// the command its configs document.
#[test]
fn split_ccpp_writes_views_and_refuses_to_overwrite() {
    let out = tmp("split");
    let split = |extra: &[&str]| bin().args(["data", "split-ccpp", "--out"]).arg(&out).args(extra).output().unwrap();
    let first = split(&[]);
    assert!(first.status.success(), "{}", String::from_utf8_lossy(&first.stderr));
    let train = std::fs::read_to_string(out.join("party-a/train.csv")).unwrap();
    assert_eq!(train.lines().count(), 401, "a header and the demo's 400 rows");
    let again = split(&["--seed", "1"]);
    let err = String::from_utf8_lossy(&again.stderr);
    assert_eq!(again.status.code(), Some(1), "{err}");
    assert!(err.contains("party-a, party-b") && err.contains("--force") && err.trim().lines().count() == 1, "{err}");
    assert_eq!(std::fs::read_to_string(out.join("party-a/train.csv")).unwrap(), train, "nothing was overwritten");
    let forced = split(&["--seed", "1", "--force"]);
    assert!(forced.status.success());
    assert_ne!(std::fs::read_to_string(out.join("party-a/train.csv")).unwrap(), train);

    // The three-party example, as its party configs say it was written.
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let doc = std::fs::read_to_string(root.join("examples/three-party/party-a.toml")).unwrap();
    let cmd: String = doc.lines().take(3).map(|l| l.trim_start_matches('#').trim()).collect::<Vec<_>>().join(" ");
    let args = cmd.split("`dpcotrain ").nth(1).and_then(|c| c.split('`').next()).expect("the documented command");
    let three = tmp("three");
    let args: Vec<&str> = args.split_whitespace().collect();
    let out_at = args.iter().position(|a| *a == "--out").unwrap();
    let mut args: Vec<std::ffi::OsString> = args.iter().map(Into::into).collect();
    args[out_at + 1] = three.clone().into();
    let made = bin().args(&args).output().unwrap();
    assert!(made.status.success(), "{}", String::from_utf8_lossy(&made.stderr));
    for party in ["party-a", "party-b", "party-c"] {
        for file in ["train.csv", "pool.csv", "test.csv"] {
            let shipped = std::fs::read(root.join("examples/three-party/data").join(party).join(file)).unwrap();
            assert!(std::fs::read(three.join(party).join(file)).unwrap() == shipped, "{party}/{file} differs");
        }
    }
}
