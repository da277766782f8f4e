//! `dpcotrain-lab experiment`: floors exact to 3 decimals; a --quick grid runs and emits the
//! documented row schema.

use serde_json::Value;
use std::process::Command;

/// The lab binary, run from the repository root (where the documented commands run).
fn bin() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_dpcotrain-lab"));
    c.current_dir(concat!(env!("CARGO_MANIFEST_DIR"), "/../.."));
    c
}

#[test]
fn floors_match_tables_4_1_and_4_2() {
    let out = bin().args(["experiment", "floors", "--json"]).output().unwrap();
    assert!(out.status.success());
    let rows: Vec<Value> = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(rows.len(), 16);
    let find = |r: f64, ci: bool, masked: bool| {
        rows.iter().find(|x| x["r"].as_f64() == Some(r) && x["ci"] == ci && x["masked"] == masked).unwrap().clone()
    };
    // Surviving cells of Table 4.1 (masked individual) and the joint CI floor.
    for (r, v) in [(0.5, 0.935), (0.75, 0.848), (0.9, 0.771)] {
        let row = find(r, true, true);
        assert!((row["individual"].as_f64().unwrap() - v).abs() < 5e-4);
        assert!((row["mc_individual"].as_f64().unwrap() - v).abs() < 0.01);
    }
    let j = find(0.9, true, false)["joint"].as_f64().unwrap();
    assert!((j - ((1.0 - 0.81) / (1.0 + 0.81f64)).sqrt()).abs() < 1e-12);
}

const QUICK: [&str; 14] = [
    "experiment",
    "simulated",
    "--quick",
    "--r",
    "0.9",
    "--ci",
    "yes",
    "--masking",
    "yes",
    "--combiner",
    "noisy,hybrid",
    "--uncertainty",
    "marginal",
    "--json",
];

#[test]
fn quick_simulated_grid_emits_rows() {
    let out = bin().args(QUICK).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let rows: Vec<Value> =
        String::from_utf8(out.stdout).unwrap().lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    // 2 seeds × 2 combiners × 2 parties.
    assert_eq!(rows.len(), 8);
    for r in &rows {
        for key in [
            "r",
            "ci",
            "masking",
            "nobs",
            "seed",
            "combiner",
            "uncertainty",
            "dp",
            "party",
            "rmse_before",
            "rmse_after",
            "epsilon_spent",
        ] {
            assert!(r.get(key).is_some(), "missing {key}");
        }
        assert!(r["rmse_after"].as_f64().unwrap().is_finite());
        assert_eq!(r["rmse_per_round"].as_array().unwrap().len(), 5);
    }
    // Deterministic whatever the thread count.
    let again = bin().env("RAYON_NUM_THREADS", "1").args(QUICK).output().unwrap();
    let rows2: Vec<Value> =
        String::from_utf8(again.stdout).unwrap().lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    assert_eq!(rows, rows2);
}

#[test]
fn bad_grid_arguments_are_one_clear_line() {
    let out = bin().args(["experiment", "simulated", "--combiner", "magic"]).output().unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    // clap's usage error: the first line names the option, the value and every accepted name.
    let first = err.lines().next().unwrap_or("");
    assert!(first.contains("--combiner") && first.contains("\"magic\" is not blocky, noisy or hybrid"), "{err}");
}

/// `experiment frontier --quick`: every cell spends exactly its ε, the report files exist, an
/// interrupted run resumes (a second invocation reruns nothing), and bad arguments are one line.
#[test]
fn quick_frontier_runs_resumes_and_reports() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("frontier");
    let args =
        ["experiment", "frontier", "--quick", "--data", "sim-masked", "--mechanisms", "finite+cap,rkhs", "--json"];
    let run = bin().args(args).arg("--out").arg(&out).output().unwrap();
    assert!(run.status.success(), "{}", String::from_utf8_lossy(&run.stderr));
    let cells: Vec<Value> =
        String::from_utf8_lossy(&run.stdout).lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    // 2 n_obs × 2 mechanisms × 2 ε, public θ.
    assert_eq!(cells.len(), 8);
    for c in &cells {
        assert_eq!(c["runs"], 4, "2 seeds × 2 parties: {c}");
        assert_eq!(c["failed"], 0);
        assert!(c["alone"].as_f64().unwrap().is_finite() && c["dp"].as_f64().unwrap().is_finite());
    }
    let rows: Vec<Value> = std::fs::read_to_string(out.join("runs.jsonl"))
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    for r in rows.iter().filter(|r| r["cell"] == "dp") {
        let eps = r["epsilon"].as_f64().unwrap();
        assert!((r["epsilon_spent"].as_f64().unwrap() - eps).abs() < 1e-6 * eps, "{r}");
    }
    for f in ["cells.csv", "frontier.md", "frontier_simulated_r_0_9_masked_public_finite_cap.svg"] {
        assert!(out.join(f).exists(), "{f} missing");
    }
    let again = bin().args(args).arg("--out").arg(&out).output().unwrap();
    assert!(again.status.success());
    assert!(String::from_utf8_lossy(&again.stderr).contains("resuming: 4 of 4 jobs"));
    let again_cells: Vec<Value> =
        String::from_utf8_lossy(&again.stdout).lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    assert_eq!(again_cells, cells);
    let _ = std::fs::remove_dir_all(&out);
    for (bad, needle) in [
        (vec!["--data", "mnist"], "mnist"),
        (vec!["--mechanisms", "laplace"], "laplace"),
        (vec!["--epsilons", "0"], "epsilon must be a positive finite number, got 0"),
        (vec!["--cap", "eta=-1"], "--cap"),
    ] {
        let run = bin().args(["experiment", "frontier", "--quick"]).args(&bad).output().unwrap();
        assert!(!run.status.success());
        let err = String::from_utf8_lossy(&run.stderr);
        assert!(err.contains(needle), "{bad:?}: {err}");
    }
}

/// `experiment frontier --views`: the frontier on a user's own view files (here the shipped
/// two-party example, 25 labelled rows per party), each seed drawing --nobs of each party's
/// rows; the per-party share and the hurt counts are reported, and a --nobs above a party's rows
/// is refused naming its config.
#[test]
fn frontier_runs_on_the_users_own_views() {
    let views = "examples/two-party/party-a.toml,examples/two-party/party-b.toml";
    let args = ["experiment", "frontier", "--views", views, "--seeds", "2", "--epsilons", "1"];
    let run = bin()
        .args(args)
        .args(["--nobs", "20", "--mechanisms", "finite+cap", "--thetas", "public", "--json"])
        .output()
        .unwrap();
    assert!(run.status.success(), "{}", String::from_utf8_lossy(&run.stderr));
    let cells: Vec<Value> =
        String::from_utf8_lossy(&run.stdout).lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    assert_eq!(cells.len(), 1, "{cells:?}");
    let c = &cells[0];
    assert_eq!((c["data"].as_str(), c["runs"].as_u64(), c["failed"].as_u64()), (Some("views"), Some(4), Some(0)));
    assert!(c["mean_baseline"].as_f64().unwrap() > 0.5 && c["hurt"].as_u64().is_some(), "{c}");
    assert_eq!(c["per_party"].as_array().unwrap().len(), 2, "{c}");
    let too_many = bin().args(args).args(["--nobs", "100"]).output().unwrap();
    let err = String::from_utf8_lossy(&too_many.stderr);
    assert!(
        !too_many.status.success() && err.contains("party-a.toml") && err.contains("only 25 labelled rows"),
        "{err}"
    );
    let missing = bin().args(["experiment", "frontier", "--quick", "--data", "views"]).output().unwrap();
    assert!(String::from_utf8_lossy(&missing.stderr).contains("--data views needs --views"));
}

/// `--shard K/N` and `experiment merge`: four shards of a grid, merged, give the same
/// runs.jsonl, runs.csv, summary.md and tables.md as the unsharded run, bit for bit; a missing,
/// repeated or unfinished shard is refused by name.
#[test]
fn sharded_grid_merges_to_the_unsharded_result_bit_for_bit() {
    let dir = tempfile::tempdir().unwrap();
    let grid = [
        "experiment",
        "simulated",
        "--quick",
        "--r",
        "0.9",
        "--ci",
        "no",
        "--masking",
        "yes,no",
        "--combiner",
        "noisy",
        "--uncertainty",
        "none,full",
        "--rounds",
        "2",
    ];
    let path = |name: &str| dir.path().join(name);
    let run = |extra: &[&str]| {
        let out = bin().args(grid).args(extra).output().unwrap();
        assert!(out.status.success(), "{extra:?}: {}", String::from_utf8_lossy(&out.stderr));
    };
    run(&["--out", path("whole").to_str().unwrap()]);
    for k in 0..4 {
        run(&["--shard", &format!("{k}/4"), "--out", path(&format!("s{k}")).to_str().unwrap()]);
    }
    // 2 seeds × 2 maskings × 2 uncertainty modes = 8 runs, 2 per shard.
    let shard0 = std::fs::read_to_string(path("s0").join("runs.jsonl")).unwrap();
    assert_eq!(shard0.lines().count(), 2 * 2);
    let shards: Vec<String> = (0..4).map(|k| path(&format!("s{k}")).to_str().unwrap().to_string()).collect();
    let merge = |dirs: &[String], out: &str| {
        bin().args(["experiment", "merge", "--out", path(out).to_str().unwrap()]).args(dirs).output().unwrap()
    };
    let out = merge(&shards, "merged");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    for f in ["runs.jsonl", "runs.csv", "summary.md", "tables.md"] {
        let (a, b) = (std::fs::read(path("whole").join(f)).unwrap(), std::fs::read(path("merged").join(f)).unwrap());
        assert!(a == b, "{f} differs between the unsharded and the merged run");
    }
    let err = |o: std::process::Output| {
        assert!(!o.status.success());
        String::from_utf8_lossy(&o.stderr).to_string()
    };
    assert!(err(merge(&shards[..3], "bad1")).contains("shard 3/4 is missing"));
    let twice = [shards.clone(), vec![shards[1].clone()]].concat();
    assert!(err(merge(&twice, "bad2")).contains("shard 1/4 is given more than once"));
    // An unfinished shard (a run missing from its journal) is refused.
    let trimmed: String = shard0.lines().skip(2).map(|l| format!("{l}\n")).collect();
    std::fs::write(path("s0").join("runs.jsonl"), trimmed).unwrap();
    assert!(err(merge(&shards, "bad3")).contains("has 1 of its 2 runs"));
    let bad = bin().args(grid).args(["--shard", "4/4", "--out", path("x").to_str().unwrap()]).output().unwrap();
    assert!(String::from_utf8_lossy(&bad.stderr).contains("0 ≤ K < N"));
}

/// A folder holds runs of one grid: resuming it with settings that change every run's numbers
/// but not its key (rounds, the re-fit policy) is refused unless --fresh; a bad policy is one line.
#[test]
fn resuming_with_other_grid_settings_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("g");
    let grid = [
        "experiment",
        "simulated",
        "--quick",
        "--r",
        "0.9",
        "--ci",
        "no",
        "--masking",
        "yes",
        "--combiner",
        "noisy",
        "--uncertainty",
        "none",
    ];
    let run = |extra: &[&str]| bin().args(grid).args(["--out", out.to_str().unwrap()]).args(extra).output().unwrap();
    assert!(run(&["--rounds", "2"]).status.success());
    let again = run(&["--rounds", "2", "--refit", "warm+restart"]);
    assert!(!again.status.success());
    let err = String::from_utf8_lossy(&again.stderr);
    assert!(err.contains("other settings") && err.contains("warm+restart") && err.contains("--fresh"), "{err}");
    assert!(run(&["--rounds", "2", "--refit", "warm+restart", "--fresh"]).status.success());
    let bad = run(&["--refit", "every=0"]);
    assert!(String::from_utf8_lossy(&bad.stderr).contains("every=K with K ≥ 1"));
}

/// `experiment merge` joins only the shards of one grid: shards that differ in any setting —
/// the DP setting, r, a setting that is not part of a run's key (δ) — are refused naming the
/// setting, as is a shard.json without the grid's settings; a merge into a used folder leaves
/// none of the earlier report's files (a figure of another DP setting) and equals the unsharded
/// folder file for file; --out may not be a shard's own folder.
#[test]
fn merge_refuses_shards_of_different_grids_and_clears_an_earlier_report() {
    let dir = tempfile::tempdir().unwrap();
    let path = |name: &str| dir.path().join(name);
    let grid = |extra: &[&str], out: &str| {
        let mut a = vec!["experiment", "simulated", "--quick", "--ci", "no", "--masking", "yes", "--combiner", "noisy"];
        a.extend(["--uncertainty", "none,full", "--rounds", "2"]);
        a.extend(extra);
        let o = bin().args(a).args(["--out", path(out).to_str().unwrap()]).output().unwrap();
        assert!(o.status.success(), "{extra:?}: {}", String::from_utf8_lossy(&o.stderr));
    };
    let merge = |dirs: &[&str], out: &str| {
        let dirs: Vec<_> = dirs.iter().map(|d| path(d)).collect();
        bin().args(["experiment", "merge", "--out", path(out).to_str().unwrap()]).args(dirs).output().unwrap()
    };
    let refused = |o: std::process::Output, what: &[&str]| {
        let err = String::from_utf8_lossy(&o.stderr).to_string();
        assert!(!o.status.success(), "accepted; wanted {what:?}");
        assert!(what.iter().all(|w| err.contains(w)), "{what:?} not in: {err}");
        assert_eq!(err.lines().count(), 1, "one line: {err}");
    };
    let cal = ["--r", "0.9", "--dp", "calibrated", "--epsilon", "1"];
    grid(&[&cal[..], &["--shard", "0/2"]].concat(), "s0");
    grid(&[&cal[..], &["--shard", "1/2"]].concat(), "s1");
    // Same size, another DP setting / another r / another δ (the runs' keys are the same).
    grid(&["--r", "0.9", "--dp", "off", "--shard", "1/2"], "dp");
    grid(&["--r", "0.5", "--dp", "calibrated", "--epsilon", "1", "--shard", "1/2"], "r");
    grid(&[&cal[..], &["--delta", "1e-6", "--shard", "1/2"]].concat(), "delta");
    refused(merge(&["s0", "dp"], "m"), &["different grids", "dp is calibrated", "but off"]);
    refused(merge(&["s0", "r"], "m"), &["different grids", "r is 0.9", "but 0.5"]);
    refused(merge(&["s0", "delta"], "m"), &["different grids", "delta is 0.00001", "but 0.000001"]);
    // A shard.json of an earlier version (no settings) is refused with what to do.
    let tag = std::fs::read_to_string(path("s1").join("shard.json")).unwrap();
    let mut old: Value = serde_json::from_str(&tag).unwrap();
    old.as_object_mut().unwrap().remove("grid");
    std::fs::write(path("dp").join("shard.json"), old.to_string()).unwrap();
    refused(merge(&["s0", "dp"], "m"), &["no grid settings", "run that shard's command again"]);
    // A used folder: the earlier report's files go, other files stay.
    std::fs::create_dir_all(path("m")).unwrap();
    std::fs::write(path("m").join("rmse_rounds_simulated_thesis.svg"), "stale").unwrap();
    std::fs::write(path("m").join("notes.txt"), "mine").unwrap();
    let o = merge(&["s0", "s1"], "m");
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(!path("m").join("rmse_rounds_simulated_thesis.svg").exists(), "stale figure kept");
    assert!(path("m").join("notes.txt").exists());
    std::fs::remove_file(path("m").join("notes.txt")).unwrap();
    grid(&cal, "whole");
    let names = |d: &str| {
        let mut v: Vec<String> =
            std::fs::read_dir(path(d)).unwrap().map(|e| e.unwrap().file_name().into_string().unwrap()).collect();
        v.sort();
        v
    };
    assert_eq!(names("m"), names("whole"));
    for f in names("whole") {
        assert!(std::fs::read(path("m").join(&f)).unwrap() == std::fs::read(path("whole").join(&f)).unwrap(), "{f}");
    }
    refused(merge(&["s0", "s1"], "s1"), &["is the shard folder"]);
}

/// `experiment frontier --pool-labels` hands the pool's true labels to the trace only: the
/// true-label refit (each test point's sixth figure) is computed with them and is NaN without
/// them; a file whose rows do not match the pool is refused naming it.
#[test]
fn the_trace_reads_pool_labels_given_to_the_lab() {
    let dir = tempfile::tempdir().unwrap();
    let views = "examples/two-party/party-a.toml,examples/two-party/party-b.toml";
    let pool_rows =
        std::fs::read_to_string("../../examples/two-party/data/party-a/pool.csv").unwrap().lines().count() - 1;
    let labels = dir.path().join("pool-labels.csv");
    let body: String = (0..pool_rows).map(|i| format!("{}\n", (i as f64 * 0.37).sin())).collect();
    std::fs::write(&labels, format!("y\n{body}")).unwrap();
    let trace = |pool_labels: Option<&std::path::Path>, out: &str| {
        let mut c = bin();
        c.args(["experiment", "frontier", "--views", views, "--nobs", "20", "--seeds", "1", "--epsilons", "1"])
            .args(["--mechanisms", "finite+cap", "--thetas", "public", "--trace"])
            .arg(dir.path().join(out));
        if let Some(p) = pool_labels {
            c.arg("--pool-labels").arg(p);
        }
        c.output().unwrap()
    };
    let sixth = |out: &str| -> Vec<f64> {
        let text = std::fs::read_to_string(dir.path().join(out)).unwrap();
        let first: Value = serde_json::from_str(text.lines().next().unwrap()).unwrap();
        first["parties"][0]["test"].as_array().unwrap().iter().map(|t| t[5].as_f64().unwrap_or(f64::NAN)).collect()
    };
    let o = trace(Some(&labels), "with.jsonl");
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(sixth("with.jsonl").iter().all(|v| v.is_finite()), "the true-label refit ran");
    let o = trace(None, "without.jsonl");
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(sixth("without.jsonl").iter().all(|v| v.is_nan()), "no pool labels, no true-label refit");
    std::fs::write(&labels, "y\n1.0\n2.0\n").unwrap();
    let o = trace(Some(&labels), "bad.jsonl");
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success() && err.contains("pool-labels.csv") && err.contains("but the pool has"), "{err}");
}
