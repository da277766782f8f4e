//! `dpcotrain-lab experiment sparse …` end to end on small settings: the papers' qualitative
//! findings must hold and every output file must be written.

use serde_json::Value;
use std::process::Command;

fn run(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_dpcotrain-lab"))
        .current_dir(concat!(env!("CARGO_MANIFEST_DIR"), "/../.."))
        .args(args)
        .output()
        .expect("run dpcotrain")
}

fn load(dir: &std::path::Path, name: &str) -> Value {
    serde_json::from_str(&std::fs::read_to_string(dir.join(name)).expect(name)).expect("json")
}

/// Bauer et al. 2016 on Snelson's data: the exact GP's optimum on the 100-point subset is the
/// paper's 33.8923; with Z = X, VFE stays there while FITC (jitter 1e-4) falls by nats and
/// under-estimates σ_n; on the 4-D toy VFE's NLML never drops below the exact GP's.
#[test]
fn bauer_reproduces_the_z_equals_x_table() {
    let dir = tempfile::tempdir().unwrap();
    let out = run(&[
        "experiment",
        "sparse",
        "bauer",
        "--out",
        dir.path().to_str().unwrap(),
        "--m",
        "16",
        "--starts",
        "1",
        "--max-iters",
        "200",
    ]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    for f in ["bauer.json", "bauer.md", "bauer-fig2.svg", "bauer-fig3.svg", "bauer-fig5.svg"] {
        assert!(dir.path().join(f).exists(), "{f}");
    }
    let v = load(dir.path(), "bauer.json");
    let zx = &v["snelson_z_equals_x"];
    let exact = zx["exact_nlml"].as_f64().unwrap();
    assert!((exact - 33.8923).abs() < 1e-3, "exact NLML {exact}");
    let fit = |kind: &str, jitter: f64| {
        zx["fits"]
            .as_array()
            .unwrap()
            .iter()
            .find(|f| f["kind"] == kind && f["jitter"].as_f64() == Some(jitter))
            .unwrap()
            .clone()
    };
    let (vfe, fitc) = (fit("vfe", 1e-4), fit("fitc", 1e-4));
    assert!((vfe["nlml"].as_f64().unwrap() - exact).abs() < 0.01, "VFE moved: {vfe}");
    assert!(fitc["nlml"].as_f64().unwrap() < exact - 3.0, "FITC did not over-fit: {fitc}");
    assert!(fitc["sigma_n"].as_f64().unwrap() < vfe["sigma_n"].as_f64().unwrap());
    // Fig 2 / Remark 3: adding an inducing input anywhere never lowers VFE's objective; FITC's
    // it can.
    let scans = v["snelson_m7_add_one"].as_array().unwrap();
    let deltas = |kind: &str| -> Vec<f64> {
        let s = scans.iter().find(|s| s["kind"] == kind).unwrap();
        s["objective"].as_array().unwrap().iter().map(|d| d.as_f64().unwrap()).collect()
    };
    assert!(deltas("vfe").iter().all(|d| *d >= -1e-6), "VFE fell when an input was added");
    assert!(deltas("fitc").iter().any(|d| *d < -1e-3), "FITC never fell");
    let toy = &v["toy4d"];
    let exact4 = toy["exact"]["nlml"].as_f64().unwrap();
    for f in toy["fits"].as_array().unwrap() {
        if f["kind"] == "vfe" {
            assert!(f["nlml"].as_f64().unwrap() >= exact4 - 1e-6, "VFE below exact: {f}");
        }
    }
}

/// Bauer et al. 2016 Fig 1 (small setting: 10 random starts, M = 8 on the 100-point subset):
/// FITC's best NLML is far below the exact GP's, VFE's never below it (its bound); only the
/// Fig 1 files are written with `--fig1-only`, which refuses zero starts.
#[test]
fn bauer_fig1_fitc_best_below_the_exact_gp_vfe_not() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().to_str().unwrap();
    let out =
        run(&["experiment", "sparse", "bauer", "--out", d, "--fig1-only", "--fig1-starts", "10", "--max-iters", "300"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    for f in ["bauer-fig1.json", "bauer-fig1.md", "bauer-fig1.svg"] {
        assert!(dir.path().join(f).exists(), "{f}");
    }
    assert!(!dir.path().join("bauer.json").exists(), "--fig1-only ran the other figures");
    let v = load(dir.path(), "bauer-fig1.json");
    let exact = v["exact_nlml"].as_f64().unwrap();
    assert!((exact - 33.8923).abs() < 1e-3, "exact NLML {exact}");
    let nlml = |kind: &str| -> Vec<f64> {
        let fits = v["fits"].as_array().unwrap();
        fits.iter().filter(|f| f["fit"]["kind"] == kind).map(|f| f["fit"]["nlml"].as_f64().unwrap()).collect()
    };
    let (fitc, vfe) = (nlml("fitc"), nlml("vfe"));
    assert_eq!((fitc.len(), vfe.len()), (10, 10));
    let best = |v: &[f64]| v.iter().copied().fold(f64::INFINITY, f64::min);
    assert!(best(&fitc) < exact - 3.0, "FITC's best {} not below the exact {exact}", best(&fitc));
    assert!(best(&vfe) >= exact - 1e-6, "VFE's best {} below the exact {exact}", best(&vfe));
    let bad = run(&["experiment", "sparse", "bauer", "--out", d, "--fig1-only", "--fig1-starts", "0"]);
    assert!(!bad.status.success() && String::from_utf8_lossy(&bad.stderr).contains("--fig1-starts"));
}

/// Walder et al. 2008: continuing from the ordinary fit, multiscale features never end with a
/// worse objective than the ordinary fit they started from, on the 1-D toy and on both data sets.
#[test]
fn walder_multiscale_never_ends_worse_than_its_ordinary_start() {
    let dir = tempfile::tempdir().unwrap();
    let out = run(&[
        "experiment",
        "sparse",
        "walder",
        "--out",
        dir.path().to_str().unwrap(),
        "--m",
        "4,8",
        "--n-train",
        "300",
        "--max-iters",
        "60",
    ]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    for f in ["walder.json", "walder.md", "walder-fig1.svg", "walder-m.svg"] {
        assert!(dir.path().join(f).exists(), "{f}");
    }
    let v = load(dir.path(), "walder.json");
    let nlml = |fits: &[Value], variant: &str| {
        fits.iter().find(|f| f["variant"] == variant).unwrap()["nlml"].as_f64().unwrap()
    };
    let toy: Vec<Value> = v["toy_1d"]["fits"].as_array().unwrap().iter().map(|f| f["fit"].clone()).collect();
    assert!(nlml(&toy, "vsgp-full") <= nlml(&toy, "spgp-full") + 1e-9);
    assert!(nlml(&toy, "vfe-multiscale") <= nlml(&toy, "vfe") + 1e-9);
    let curves = v["test_error"].as_array().unwrap();
    assert_eq!(curves.len(), 2 * 2 * 6);
    for data in ["ccpp", "sim9"] {
        for m in [4, 8] {
            let fits: Vec<Value> =
                curves.iter().filter(|c| c["data"] == data && c["fit"]["m"] == m).map(|c| c["fit"].clone()).collect();
            assert!(nlml(&fits, "vsgp-full") <= nlml(&fits, "spgp-full") + 1e-9, "{data} m = {m}");
            assert!(nlml(&fits, "vfe-multiscale") <= nlml(&fits, "vfe") + 1e-9, "{data} m = {m}");
            assert!(nlml(&fits, "vsgp-basis") <= nlml(&fits, "spgp-basis") + 1e-9, "{data} m = {m}");
        }
    }
    let bad = run(&["experiment", "sparse", "walder", "--out", dir.path().to_str().unwrap(), "--data", "kin8nm"]);
    assert!(!bad.status.success() && String::from_utf8_lossy(&bad.stderr).contains("expected ccpp, kin40k or sim9"));
}

/// Hughes-Hallett 2022 §3.2: with two inducing points the arc-cosine kernel models the step
/// far better than the SE kernel, and a cubic plus arc-cosine kernel the step + cubic toy.
#[test]
fn steps_non_stationary_kernels_need_few_inducing_points() {
    let dir = tempfile::tempdir().unwrap();
    let out = run(&[
        "experiment",
        "sparse",
        "steps",
        "--out",
        dir.path().to_str().unwrap(),
        "--n",
        "400",
        "--m",
        "2,10",
        "--max-iters",
        "60",
    ]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    for f in ["steps.json", "steps.md", "steps-elbo.svg", "steps-fit.svg"] {
        assert!(dir.path().join(f).exists(), "{f}");
    }
    let v = load(dir.path(), "steps.json");
    let elbo = |toy: &str, kernel: &str, m: u64| {
        v["fits"].as_array().unwrap().iter().find(|f| f["toy"] == toy && f["kernel"] == kernel && f["m"] == m).unwrap()
            ["elbo_per_point"]
            .as_f64()
            .unwrap()
    };
    assert!(elbo("step", "arccos0", 2) > elbo("step", "se", 2) + 0.2);
    assert!(elbo("step-cubic", "arccos0+poly3", 2) > elbo("step-cubic", "se", 2) + 0.5);
    let bad = run(&["experiment", "sparse", "steps", "--out", dir.path().to_str().unwrap(), "--n", "10", "--m", "20"]);
    assert!(!bad.status.success() && String::from_utf8_lossy(&bad.stderr).contains("--m 20"));
}

/// Hughes-Hallett 2022 Table 3.1 on the red Wine Quality data: with Z fixed after
/// initialisation, greedy-variance inducing inputs end with a higher ELBO than a random subset.
#[test]
fn init_greedy_beats_random_with_z_fixed() {
    let dir = tempfile::tempdir().unwrap();
    let out = run(&[
        "experiment",
        "sparse",
        "init",
        "--out",
        dir.path().to_str().unwrap(),
        "--data",
        "wine",
        "--m",
        "40",
        "--seeds",
        "2",
        "--max-iters",
        "60",
    ]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    for f in ["init.json", "init.md", "init.svg"] {
        assert!(dir.path().join(f).exists(), "{f}");
    }
    let v = load(dir.path(), "init.json");
    let fits = v["fits"].as_array().unwrap();
    assert_eq!(fits.len(), 2 * 5);
    for seed in 0..2u64 {
        let elbo =
            |s: &str| fits.iter().find(|f| f["strategy"] == s && f["seed"] == seed).unwrap()["elbo"].as_f64().unwrap();
        assert!(elbo("fixed-greedy") > elbo("fixed-random"), "seed {seed}");
    }
    assert_eq!(v["settings"]["rows"][0]["n"], 1599);
}

/// Bauer et al. 2016 Table 1 on pumadyn32nm (small setting): VFE from the common start stays at
/// the all-noise solution (NLML/N = ½ ln 2π + ½, σ_n = 1, Remark 8), while VFE started from
/// FITC's solution, and VFE trained on Z first from longer length-scales, end far below it.
#[test]
fn bauer_pumadyn_vfe_from_the_start_explains_everything_as_noise() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().to_str().unwrap();
    let args = ["--seeds", "1", "--m", "40", "--sod", "200", "--max-iters", "300", "--exact-iters", "20"];
    let out = run(&[&["experiment", "sparse", "bauer-pumadyn", "--out", d][..], &args[..]].concat());
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    for f in ["table1.json", "table1.md", "table1.svg"] {
        assert!(dir.path().join(f).exists(), "{f}");
    }
    let v = load(dir.path(), "table1.json");
    let rows = v["rows"].as_array().unwrap();
    let get = |m: &str| rows.iter().find(|r| r["method"] == m).unwrap().clone();
    let (vfe, from_fitc) = (get("VFE"), get("VFE (init FITC)"));
    let all_noise = 0.5 * (2.0 * std::f64::consts::PI).ln() + 0.5;
    assert!((vfe["nlml_per_n"].as_f64().unwrap() - all_noise).abs() < 0.01, "{vfe}");
    assert!((vfe["sigma_n"].as_f64().unwrap() - 1.0).abs() < 0.01, "{vfe}");
    assert!(from_fitc["nlml_per_n"].as_f64().unwrap() < all_noise - 0.5, "{from_fitc}");
    assert!(from_fitc["test"]["rmse"].as_f64().unwrap() < 0.5, "{from_fitc}");
    let frozen = get("VFE (frozen, ℓ₀ = √D)");
    assert!(frozen["nlml_per_n"].as_f64().unwrap() < all_noise - 0.5, "{frozen}");
}

/// Hughes-Hallett 2022 Fig 3.7 (small setting): on airfoil the maximum ELBO rises with M and
/// stays below the exact GP's log marginal likelihood.
#[test]
fn elbo_m_rises_with_m_below_the_exact_gp() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().to_str().unwrap();
    let out =
        run(&["experiment", "sparse", "elbo-m", "--out", d, "--data", "airfoil", "--m", "10,50", "--max-iters", "30"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    for f in ["elbo-m.json", "elbo-m.md", "elbo-m.svg"] {
        assert!(dir.path().join(f).exists(), "{f}");
    }
    let v = load(dir.path(), "elbo-m.json");
    let elbo: Vec<f64> = v["points"].as_array().unwrap().iter().map(|p| p["elbo"].as_f64().unwrap()).collect();
    let exact = v["exact"][0]["lml"].as_f64().unwrap();
    assert_eq!(elbo.len(), 2);
    assert!(elbo[1] > elbo[0] && elbo[1] < exact, "{elbo:?} against {exact}");
    let bad = run(&["experiment", "sparse", "elbo-m", "--out", d, "--data", "kin8nm"]);
    assert!(!bad.status.success() && String::from_utf8_lossy(&bad.stderr).contains("kin8nm"));
}

/// `experiment scalable svgp` on small settings: both methods on both data sets, every file
/// written, and on the synthetic set (noise sd 0.3 in raw units) both reach a test RMSE near
/// the noise floor while SVGP's noise estimate is close to SGPR's.
#[test]
fn scalable_svgp_compares_svgp_with_sgpr() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().to_str().unwrap();
    let out = run(&[
        "experiment",
        "scalable",
        "svgp",
        "--out",
        d,
        "--seeds",
        "1",
        "--m",
        "15",
        "--large-n",
        "3000",
        "--epochs",
        "20",
        "--batch-large",
        "200",
        "--batch-ccpp",
        "500",
        "--lr",
        "0.03",
        "--max-iters",
        "40",
    ]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    for f in ["svgp.json", "svgp.md"] {
        assert!(dir.path().join(f).exists(), "{f}");
    }
    let v = load(dir.path(), "svgp.json");
    let rows = v["rows"].as_array().unwrap();
    assert_eq!(rows.len(), 6, "svgp and sgpr on ccpp, boston and the large set");
    let get = |data: &str, method: &str, key: &str| {
        rows.iter().find(|r| r["data"] == data && r["method"] == method).unwrap()[key].as_f64().unwrap()
    };
    let (svgp, sgpr) = (get("snelson-1e5", "svgp", "rmse"), get("snelson-1e5", "sgpr", "rmse"));
    assert!(svgp < 1.1 * sgpr, "svgp {svgp} vs sgpr {sgpr}");
    assert!(get("ccpp", "svgp", "rmse") < 0.35, "CCPP standardised RMSE (thesis SVIGP 0.269)");
    let bad = run(&["experiment", "scalable", "svgp", "--out", d, "--data", "boston2"]);
    assert!(!bad.status.success() && String::from_utf8_lossy(&bad.stderr).contains("boston2"));
}

/// `bench svgp --vs python` with an interpreter that cannot run says so and names `--python`,
/// the way to point it at one that has GPflow.
#[test]
fn bench_without_the_python_libraries_says_how_to_point_at_them() {
    let out = run(&[
        "bench",
        "svgp",
        "--n",
        "500",
        "--m",
        "10",
        "--batch",
        "50",
        "--steps",
        "2",
        "--vs",
        "python",
        "--python",
        "/nonexistent/bin/python",
    ]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("gpflow: not measured (/nonexistent/bin/python not runnable"), "{text}");
    assert!(text.contains("pass --python PATH"), "{text}");
}

/// `bench svgp` times a step and streams an epoch of a CSV it writes, reporting peak memory.
#[test]
fn bench_svgp_times_a_step_and_streams_an_epoch() {
    let dir = tempfile::tempdir().unwrap();
    let out = run(&[
        "bench",
        "svgp",
        "--n",
        "2000",
        "--m",
        "20",
        "--batch",
        "100",
        "--steps",
        "3",
        "--stream-rows",
        "5000",
        "--stream-m",
        "10",
        "--stream-dir",
        dir.path().to_str().unwrap(),
        "--json",
    ]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    let rows = v.as_array().unwrap();
    assert!(rows[0]["seconds_per_step"].as_f64().unwrap() > 0.0);
    let stream = rows.iter().find(|r| r["case"] == "svgp_stream_epoch").unwrap();
    assert_eq!(stream["result"]["rows"], 5000);
    assert_eq!(stream["result"]["steps"], 50);
    assert_eq!(stream["result"]["epochs_completed"], 1, "exactly one pass");
    assert!(stream["result"]["peak_rss_bytes"].as_u64().unwrap() > 0);
}
