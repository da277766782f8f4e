//! `dpcotrain gp fit` end to end: JSON contract, agreement with the library, and errors that
//! name the file, row and column.

use dpcotrain_gp::kernels::SquaredExponential;
use dpcotrain_gp::{ExactGp, NoiseModel, SparseGp, SparseKind};
use nalgebra::{DMatrix, DVector};
use serde_json::Value;
use std::path::PathBuf;
use std::process::{Command, Output};

fn bin() -> Command {
    Command::new(env!("CARGO_BIN_EXE_dpcotrain"))
}

thread_local! {
    /// This test's own temporary directory (each test runs on its own thread), removed when
    /// the test's thread ends.
    static TEST_DIR: tempfile::TempDir = tempfile::tempdir().expect("temporary directory");
}

/// A fresh path `name` inside this test's own temporary directory.
fn test_dir(name: &str) -> PathBuf {
    TEST_DIR.with(|d| d.path().join(name))
}

fn tmp(name: &str, contents: &str) -> PathBuf {
    let p = test_dir(name);
    std::fs::write(&p, contents).unwrap();
    p
}

/// 30 rows of a smooth 2-D function.
fn train_csv() -> (PathBuf, DMatrix<f64>, DVector<f64>) {
    let mut s = String::from("a,b,y\n");
    let x = DMatrix::from_fn(30, 2, |i, j| ((i * 7 + j * 3) % 11) as f64 / 3.0 - 1.5 + 0.01 * i as f64);
    let y = DVector::from_fn(30, |i, _| (x[(i, 0)]).sin() + 0.5 * x[(i, 1)]);
    for i in 0..30 {
        s += &format!("{},{},{}\n", x[(i, 0)], x[(i, 1)], y[i]);
    }
    (tmp("train.csv", &s), x, y)
}

fn run(args: &[&str]) -> Output {
    bin().args(args).output().expect("run dpcotrain")
}

fn json_of(out: &Output) -> Value {
    assert!(out.status.success(), "stderr: {}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout).expect("one JSON object")
}

fn stderr(out: &Output) -> String {
    assert!(!out.status.success(), "expected failure");
    String::from_utf8_lossy(&out.stderr).into_owned()
}

#[test]
fn fixed_exact_objective_equals_the_library_lml() {
    let (train, x, y) = train_csv();
    let out = run(&[
        "gp",
        "fit",
        "--train",
        train.to_str().unwrap(),
        "--fixed",
        "--variance",
        "1.5",
        "--lengthscale",
        "0.8,1.2",
        "--noise",
        "0.1",
        "--json",
    ]);
    let v = json_of(&out);
    assert_eq!(v["model"], "exact");
    // The CLI centres y (zero prior mean): reproduce that here.
    let yc = y.add_scalar(-y.mean());
    let gp =
        ExactGp::new(Box::new(SquaredExponential::ard(1.5, vec![0.8, 1.2])), NoiseModel::homoscedastic(0.1), x, yc)
            .unwrap();
    let lml = gp.log_marginal_likelihood().unwrap();
    assert!((v["objective"].as_f64().unwrap() - lml).abs() < 1e-10);
    assert_eq!(v["hyperparameters"]["lengthscales"].as_array().unwrap().len(), 2);
    assert!((v["hyperparameters"]["noise"].as_f64().unwrap() - 0.1).abs() < 1e-12);
    assert!(v.get("training").is_none());
}

/// A kernel expression (`arccos0+poly3`, Hughes-Hallett's step-function kernel) is built with
/// the documented initial values, its LML equals the library's, and every parameter is reported
/// by name.
#[test]
fn kernel_expressions_fit_and_report_every_parameter() {
    use dpcotrain_gp::kernels::{ArcCosine, ArcCosineOrder, Kernel, Polynomial, Sum};
    let (train, x, y) = train_csv();
    let args = ["gp", "fit", "--train", train.to_str().unwrap(), "--kernel", "arccos0 + poly3", "--lengthscale", "1"];
    let fixed: Vec<&str> =
        args.iter().copied().chain(["--fixed", "--variance", "2", "--noise", "0.1", "--json"]).collect();
    let v = json_of(&run(&fixed));
    assert_eq!(v["kernel"], "arccos0+poly3");
    // A sum splits the variance; weights 1/(D ℓ²) = 0.5, bias and offset 1.
    let k: Box<dyn Kernel> = Box::new(Sum::new(
        Box::new(ArcCosine::ard(ArcCosineOrder::Zero, 1.0, vec![0.5, 0.5], 1.0)),
        Box::new(Polynomial::ard(3, vec![0.5, 0.5], 1.0)),
    ));
    let names = k.param_names();
    let yc = y.add_scalar(-y.mean());
    let lml = ExactGp::new(k, NoiseModel::homoscedastic(0.1), x, yc).unwrap().log_marginal_likelihood().unwrap();
    assert!((v["objective"].as_f64().unwrap() - lml).abs() < 1e-10, "{} vs {lml}", v["objective"]);
    let params = v["hyperparameters"]["kernel"].as_object().unwrap();
    assert_eq!(params.len(), names.len());
    for n in &names {
        assert!(params.contains_key(n), "{n} missing from {params:?}");
    }
    assert!((params["arccos0.variance"].as_f64().unwrap() - 1.0).abs() < 1e-12);
    assert!(v["hyperparameters"].get("lengthscales").is_none());
    // Trained: the objective does not fall, and the report stays finite.
    let trained: Vec<&str> = args.iter().copied().chain(["--json"]).collect();
    let t = json_of(&run(&trained));
    assert!(t["objective"].as_f64().unwrap().is_finite());
    let fixed_default: Vec<&str> = args.iter().copied().chain(["--fixed", "--json"]).collect();
    assert!(t["objective"].as_f64().unwrap() >= json_of(&run(&fixed_default))["objective"].as_f64().unwrap() - 1e-9);
}

#[test]
fn fixed_vfe_with_file_inducing_points_equals_the_library_elbo() {
    let (train, x, y) = train_csv();
    let z = tmp("z.csv", "a,b\n-1,0\n0,0.5\n1,-0.5\n0.3,1\n");
    let out = run(&[
        "gp",
        "fit",
        "--train",
        train.to_str().unwrap(),
        "--model",
        "vfe",
        "--inducing",
        &format!("file:{}", z.display()),
        "--fixed",
        "--variance",
        "1.2",
        "--lengthscale",
        "0.9",
        "--noise",
        "0.2",
        "--json",
    ]);
    let v = json_of(&out);
    let zm = DMatrix::from_row_slice(4, 2, &[-1.0, 0.0, 0.0, 0.5, 1.0, -0.5, 0.3, 1.0]);
    let yc = y.add_scalar(-y.mean());
    let gp = SparseGp::new(
        SparseKind::Vfe,
        Box::new(SquaredExponential::ard(1.2, vec![0.9, 0.9])),
        NoiseModel::homoscedastic(0.2),
        x,
        yc,
        zm,
    )
    .unwrap();
    assert!((v["objective"].as_f64().unwrap() - gp.objective_value().unwrap()).abs() < 1e-10);
    // Bauer et al.'s diagnostics: the library's terms, which sum to the objective.
    let terms = gp.objective_terms().unwrap();
    for (key, want) in [
        ("data_fit", terms.data_fit),
        ("complexity", terms.complexity),
        ("trace", terms.trace),
        ("constant", terms.constant),
    ] {
        assert!((v["terms"][key].as_f64().unwrap() - want).abs() < 1e-10, "{key}: {} vs {want}", v["terms"][key]);
    }
    assert!(terms.trace < 0.0 && v["terms"]["fitc_noise"] == 0.0);
    assert_eq!(v["inducing"].as_array().unwrap().len(), 4);
    assert!(v["jitter"].as_f64().unwrap() > 0.0);
}

/// `--kuu-jitter absolute:E` fits the objective with a fixed E added to K_uu (GPflow's for
/// E = 10⁻⁶): the library's objective under that policy, with the jitter reported. The default
/// and an explicit `relative` are the same computation (only the explicit flag adds the
/// `kuu_jitter` key); bad values, and the flag on the exact model, are refused naming the flag
/// (docs/decisions.md D29).
#[test]
fn kuu_jitter_option_fits_a_fixed_jitter_and_is_validated() {
    use dpcotrain_gp::KuuJitter;
    let (train, x, y) = train_csv();
    let t = train.to_str().unwrap();
    // Two inducing inputs 0.02 apart: K_uu's smallest eigenvalue is small enough for the
    // jitter to show in the objective.
    let z = tmp("z.csv", "a,b\n-1,0\n0,0.5\n1,-0.5\n0.3,1\n0.32,1\n");
    let zarg = format!("file:{}", z.display());
    let base =
        ["gp", "fit", "--train", t, "--model", "vfe", "--inducing", &zarg, "--variance", "4", "--lengthscale", "0.9"];
    let fixed: Vec<&str> = base.iter().copied().chain(["--noise", "0.2", "--fixed", "--json"]).collect();
    let fit = |extra: &[&str]| json_of(&run(&[&fixed[..], extra].concat()));
    let (default, relative, absolute) =
        (fit(&[]), fit(&["--kuu-jitter", "relative"]), fit(&["--kuu-jitter", "absolute:1e-2"]));
    assert!(default.get("kuu_jitter").is_none(), "{default}");
    assert_eq!(relative["kuu_jitter"], "relative:1e-6");
    assert_eq!(absolute["kuu_jitter"], "absolute:1e-2");
    assert_eq!(default["objective"], relative["objective"]);
    assert_eq!(default["jitter"], relative["jitter"]);
    // Relative: 10⁻⁶ × mean diag K_uu = 10⁻⁶ × 4; absolute: the given 10⁻².
    assert!((default["jitter"].as_f64().unwrap() - 4e-6).abs() < 1e-18, "{}", default["jitter"]);
    assert_eq!(absolute["jitter"], 1e-2);
    let library = |jitter: KuuJitter| {
        let zm = DMatrix::from_row_slice(5, 2, &[-1.0, 0.0, 0.0, 0.5, 1.0, -0.5, 0.3, 1.0, 0.32, 1.0]);
        let mut gp = SparseGp::new(
            SparseKind::Vfe,
            Box::new(SquaredExponential::ard(4.0, vec![0.9, 0.9])),
            NoiseModel::homoscedastic(0.2),
            x.clone(),
            y.add_scalar(-y.mean()),
            zm,
        )
        .unwrap();
        gp.jitter = jitter.policy();
        gp.objective_value().unwrap()
    };
    let (lib_abs, lib_rel) = (library(KuuJitter::Absolute(1e-2)), library(KuuJitter::default()));
    let (cli_abs, cli_rel) = (absolute["objective"].as_f64().unwrap(), default["objective"].as_f64().unwrap());
    assert!(
        (cli_abs - lib_abs).abs() < 1e-10 && (cli_rel - lib_rel).abs() < 1e-10,
        "{cli_abs} {lib_abs} {cli_rel} {lib_rel}"
    );
    assert!((cli_abs - cli_rel).abs() > 1e-4, "the conventions should differ here: {cli_abs} vs {cli_rel}");
    // Training with GPflow's jitter reports it and why it stopped.
    let trained: Vec<&str> = base
        .iter()
        .copied()
        .chain(["--noise", "0.2", "--strategy", "joint", "--kuu-jitter", "absolute", "--json"])
        .collect();
    let v = json_of(&run(&trained));
    assert_eq!(v["kuu_jitter"], "absolute:1e-6");
    assert!(v["training"]["stop"].as_str().is_some_and(|s| !s.is_empty() && s != "optimiser error"), "{v}");
    // Bad values: a usage error (exit 2) on one line that names the flag.
    for bad in ["absolute:-1", "absolute:0", "absolute:x", "absolute:inf", "bogus", "relative:"] {
        let out = run(&[&fixed[..], &["--kuu-jitter", bad]].concat());
        assert_eq!(out.status.code(), Some(2), "{bad}");
        let err = stderr(&out);
        assert!(err.contains("--kuu-jitter") && !err.contains("panicked"), "{bad}: {err}");
        assert_eq!(err.trim().lines().count(), 1, "{bad}: {err}");
    }
    // The exact model has no K_uu.
    let out = run(&["gp", "fit", "--train", t, "--kuu-jitter", "absolute:1e-6"]);
    assert_eq!(out.status.code(), Some(1));
    let err = stderr(&out);
    assert!(err.contains("--kuu-jitter") && err.contains("sparse models"), "{err}");
    let help = String::from_utf8_lossy(&run(&["gp", "fit", "--help"]).stdout).into_owned();
    assert!(help.contains("--kuu-jitter"), "{help}");
    // `gp fit`'s limits are the re-fits' by default (a node's private model is exactly
    // `gp fit --model exact …`); --ftol takes SciPy's, and is validated.
    assert!(help.contains("--max-iters <MAX_ITERS>") && help.contains("[default: 200]"), "{help}");
    assert!(help.contains("--ftol <FTOL>") && help.contains("[default: 0.0000000001]"), "{help}");
    for bad in ["-1", "nan", "inf", "x"] {
        let out = run(&["gp", "fit", "--train", t, "--ftol", bad]);
        assert_eq!(out.status.code(), Some(2), "{bad}");
        let err = stderr(&out);
        assert!(err.contains("--ftol") && err.contains("non-negative finite"), "{bad}: {err}");
    }
}

#[test]
fn trains_predicts_and_is_deterministic() {
    let (train, _, _) = train_csv();
    let test = tmp("test.csv", "a,b\n0.1,0.2\n-0.4,0.9\n1.0,-1.0\n");
    for model in ["exact", "vfe", "fitc", "dtc"] {
        let mut args = vec![
            "gp",
            "fit",
            "--train",
            train.to_str().unwrap(),
            "--model",
            model,
            "--predict",
            test.to_str().unwrap(),
            "--full-cov",
            "--seed",
            "3",
            "--json",
        ];
        if model != "exact" {
            args.extend(["--inducing", "greedy:8"]);
        }
        let a = json_of(&run(&args));
        let b = json_of(&run(&args));
        assert_eq!(a, b, "{model}: same seed must give identical output");
        assert_eq!(a["model"], model);
        assert_eq!(a["mean"].as_array().unwrap().len(), 3);
        assert_eq!(a["var"].as_array().unwrap().len(), 3);
        let cov = a["cov"].as_array().unwrap();
        assert_eq!(cov.len(), 3);
        for i in 0..3 {
            let d = cov[i][i].as_f64().unwrap();
            assert!((d - a["var"][i].as_f64().unwrap()).abs() < 1e-8);
        }
        assert!(a["objective"].as_f64().unwrap().is_finite());
        if model != "exact" {
            assert_eq!(a["inducing"].as_array().unwrap().len(), 8);
        }
        // The fitted function is close to the truth at a training-like point.
        let truth = (0.1f64).sin() + 0.1;
        let m0 = a["mean"][0].as_f64().unwrap();
        assert!((m0 - truth).abs() < 0.3, "{model}: {m0} vs {truth}");
    }
}

/// Columns are matched by name (issue: a reordered or renamed header used to give the same
/// predictions, because columns were taken by position).
#[test]
fn predict_columns_are_matched_by_name() {
    let (train, _, _) = train_csv();
    let t = train.to_str().unwrap();
    let same = tmp("same.csv", "a,b\n0.1,0.2\n-0.4,0.9\n");
    let swapped = tmp("swapped.csv", "b,a\n0.2,0.1\n0.9,-0.4\n");
    let renamed = tmp("renamed.csv", "foo,bar\n0.1,0.2\n-0.4,0.9\n");
    let fit = |p: &PathBuf| run(&["gp", "fit", "--train", t, "--predict", p.to_str().unwrap(), "--json"]);
    let a = json_of(&fit(&same));
    let b = json_of(&fit(&swapped));
    assert_eq!(a["mean"], b["mean"], "a reordered header must be reordered, not read by position");
    assert_eq!(a["var"], b["var"]);
    // Swapping the values without the names changes the answer (the test can fail).
    let naive = tmp("naive.csv", "a,b\n0.2,0.1\n0.9,-0.4\n");
    assert_ne!(a["mean"], json_of(&fit(&naive))["mean"]);
    let err = stderr(&fit(&renamed));
    assert!(err.contains("renamed.csv (--predict file): columns do not match the training inputs"), "{err}");
    assert!(err.contains("missing \"a\", \"b\"; unexpected \"foo\", \"bar\""), "{err}");
    assert_eq!(err.trim().lines().count(), 1, "one-line error: {err}");
}

#[test]
fn errors_name_file_row_and_column() {
    let (train, _, _) = train_csv();
    let t = train.to_str().unwrap();
    let cases: Vec<(Vec<String>, Vec<&str>)> = vec![
        (vec!["--train".into(), "/nonexistent/nope.csv".into()], vec!["nope.csv: cannot read file: No such file"]),
        (
            vec!["--train".into(), tmp("ragged.csv", "a,b,y\n1,2,3\n4,5\n").display().to_string()],
            vec!["ragged.csv", "line 3"],
        ),
        (
            vec!["--train".into(), tmp("text.csv", "a,b,y\n1,2,3\n4,abc,6\n").display().to_string()],
            vec!["text.csv", "line 3", "\"b\"", "abc"],
        ),
        (
            vec!["--train".into(), tmp("nan.csv", "a,b,y\n1,2,3\n4,5,NaN\n").display().to_string()],
            vec!["nan.csv", "line 3", "\"y\""],
        ),
        (vec!["--train".into(), tmp("one.csv", "a,b,y\n1,2,3\n").display().to_string()], vec!["one.csv", "at least 2"]),
        (
            vec!["--train".into(), t.into(), "--model".into(), "vfe".into(), "--inducing".into(), "greedy:31".into()],
            vec!["31", "M must be ≤ N"],
        ),
        (vec!["--train".into(), t.into(), "--lengthscale".into(), "-1".into()], vec!["--lengthscale", "positive"]),
        (vec!["--train".into(), t.into(), "--noise".into(), "0".into()], vec!["--noise", "positive"]),
        (vec!["--train".into(), t.into(), "--variance".into(), "inf".into()], vec!["--variance"]),
        (vec!["--train".into(), t.into(), "--target".into(), "zz".into()], vec!["zz", "available"]),
        (vec!["--train".into(), t.into(), "--model".into(), "vfe".into()], vec!["--inducing"]),
        (
            vec!["--train".into(), t.into(), "--model".into(), "vfe".into(), "--inducing".into(), "magic:3".into()],
            vec!["magic"],
        ),
        (
            vec![
                "--train".into(),
                t.into(),
                "--predict".into(),
                tmp("wide.csv", "a,b,c\n1,2,3\n").display().to_string(),
            ],
            vec!["wide.csv", "--predict file", "unexpected \"c\""],
        ),
        (vec!["--train".into(), t.into(), "--lengthscale".into(), "1,2,3".into()], vec!["3 values"]),
        (
            vec!["--train".into(), t.into(), "--kernel".into(), "se".into(), "--lengthscale".into(), "1,2".into()],
            vec!["2 values", "isotropic se"],
        ),
    ];
    for (args, needles) in cases {
        let mut full = vec!["gp".to_string(), "fit".to_string()];
        full.extend(args.iter().cloned());
        let out = bin().args(&full).output().unwrap();
        let err = stderr(&out);
        for n in needles {
            assert!(err.contains(n), "args {args:?}: stderr {err:?} lacks {n:?}");
        }
        assert!(!err.contains("panicked"), "args {args:?} panicked: {err}");
        // One line, and no cause repeated (e.g. the OS error text twice).
        assert_eq!(err.trim().lines().count(), 1, "args {args:?}: {err}");
        assert!(err.matches("(os error").count() <= 1, "args {args:?}: {err}");
    }
}

/// A bad kernel expression is a usage error (exit 2) that says where and why.
#[test]
fn bad_kernel_expressions_are_usage_errors() {
    let (train, _, _) = train_csv();
    for (expr, needle) in
        [("se+rbf", "unknown kernel \"rbf\" at character 4"), ("(se+linear", "expected ')'"), ("", "empty")]
    {
        let out = run(&["gp", "fit", "--train", train.to_str().unwrap(), "--kernel", expr]);
        assert_eq!(out.status.code(), Some(2), "{expr}");
        let err = stderr(&out);
        assert!(err.contains(needle) && !err.contains("panicked"), "{expr}: {err}");
        assert_eq!(err.trim().lines().count(), 1, "{expr}: {err}");
    }
    // A missing required option: one line that names it, exit 2.
    let out = run(&["gp", "svgp", "--train", train.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2));
    let err = stderr(&out);
    assert!(err.contains("--target") && err.trim().lines().count() == 1, "{err}");
    // Help still prints in full and succeeds.
    let out = run(&["gp", "fit", "--help"]);
    assert!(out.status.success() && String::from_utf8_lossy(&out.stdout).lines().count() > 5);
}

/// A fit that stops on its iteration limit says so; an exact fit on a large file warns and
/// names the sparse alternative before it starts.
#[test]
fn long_or_unconverged_fits_are_not_silent() {
    let (train, _, _) = train_csv();
    let out = run(&["gp", "fit", "--train", train.to_str().unwrap(), "--max-iters", "1", "--json"]);
    let v = json_of(&out);
    assert_eq!(v["training"]["termination"], "MaxIterations");
    // The stop reason in words and the projected gradient reached (D29).
    assert_eq!(v["training"]["stop"], "iteration limit (--max-iters)");
    assert!(v["training"]["projected_gradient_norm"].as_f64().is_some_and(|p| p.is_finite() && p > 0.0), "{v}");
    assert_eq!(v["training"]["approximate_steps"], 0);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("stopped after 1 iterations without converging"), "{err}");
    // Converged fits print no such warning, and say which test they met.
    let out = run(&["gp", "fit", "--train", train.to_str().unwrap(), "--json"]);
    assert!(!String::from_utf8_lossy(&out.stderr).contains("without converging"));
    let stop = json_of(&out)["training"]["stop"].as_str().unwrap().to_string();
    assert!(stop.starts_with("converged"), "{stop}");

    // The default sparse strategy (reinit-retrain) ends in a final joint phase; raising
    // --max-iters gives that phase room too, so the advice in the warning is worth following
    // (1,500 CCPP rows, 60 greedy points: the final phase stops on its limit at 200 and 400).
    let ccpp = std::fs::read_to_string(PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("crates/cotrain/data/ccpp.csv"))
        .unwrap();
    let small = test_dir("ccpp1500.csv");
    std::fs::write(&small, ccpp.lines().take(1501).collect::<Vec<_>>().join("\n") + "\n").unwrap();
    let fit = |n: &str| {
        let out = run(&[
            "gp",
            "fit",
            "--train",
            small.to_str().unwrap(),
            "--model",
            "vfe",
            "--inducing",
            "greedy:60",
            "--max-iters",
            n,
            "--json",
        ]);
        let v = json_of(&out);
        (
            v["training"]["iterations"].as_u64().unwrap(),
            v["objective"].as_f64().unwrap(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let ((i200, o200, w200), (i400, o400, _)) = (fit("200"), fit("400"));
    assert!(w200.contains("raise --max-iters"), "{w200}");
    assert!(
        i400 >= i200 + 50 && o400 > o200,
        "--max-iters 400 gave {i400} iterations ({o400}) against {i200} ({o200})"
    );

    let mut big = String::from("a,y\n");
    for i in 0..3001 {
        let x = i as f64 / 300.0;
        big += &format!("{x},{}\n", x.sin());
    }
    let big = tmp("big.csv", &big);
    let out = run(&[
        "gp",
        "fit",
        "--train",
        big.to_str().unwrap(),
        "--fixed",
        "--variance",
        "1",
        "--lengthscale",
        "1",
        "--noise",
        "0.1",
        "--json",
    ]);
    json_of(&out);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("exact GP on 3001 rows") && err.contains("--model vfe --inducing greedy:500"), "{err}");
}

/// `--inducing multiscale:M` trains ordinary points first, then Walder et al.'s multiscale
/// features from there: the objective never falls at the switch, the widths are reported in
/// data units and respect L > ℓ/√2, `--fixed` evaluates the ordinary model (widths = ℓ), and
/// a non-SE kernel is refused by name.
#[test]
fn multiscale_features_train_from_the_ordinary_fit() {
    let (train, _, _) = train_csv();
    let t = train.to_str().unwrap();
    let args = ["gp", "fit", "--train", t, "--model", "vfe", "--kernel", "se-ard", "--standardize", "--json"];
    let out = run(&[&args[..], &["--inducing", "multiscale:5"]].concat());
    let v = json_of(&out);
    assert_eq!(v["features"], "multiscale");
    let (obj, ord) = (v["objective"].as_f64().unwrap(), v["training_ordinary"]["objective"].as_f64().unwrap());
    assert!(obj >= ord - 1e-9, "multiscale {obj} < ordinary {ord}");
    let widths = v["widths"].as_array().unwrap();
    assert_eq!(widths.len(), 5);
    let ls: Vec<f64> =
        v["hyperparameters"]["lengthscales"].as_array().unwrap().iter().map(|x| x.as_f64().unwrap()).collect();
    // Widths are in data units and ℓ in standardised units: compare through the column sd.
    let (_, x, _) = train_csv();
    for (d, l) in ls.iter().enumerate() {
        let c = x.column(d);
        let sd = (c.iter().map(|a| (a - c.mean()).powi(2)).sum::<f64>() / (c.len() as f64 - 1.0)).sqrt();
        for w in widths {
            let w = w[d].as_f64().unwrap();
            assert!(w > l * sd / 2f64.sqrt(), "width {w} ≤ ℓ/√2 = {}", l * sd / 2f64.sqrt());
        }
    }
    // --fixed: multiscale features at widths ℓ are the ordinary model, to round-off.
    let fixed = |ind: &str| {
        json_of(&run(&[&args[..], &["--fixed", "--inducing", ind]].concat()))["objective"].as_f64().unwrap()
    };
    let (a, b) = (fixed("greedy:5"), fixed("multiscale:5"));
    assert!((a - b).abs() < 1e-9 * a.abs(), "{a} vs {b}");
    // Only the SE kernel has multiscale features.
    let out = run(&["gp", "fit", "--train", t, "--model", "vfe", "--kernel", "matern52", "--inducing", "multiscale:5"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(stderr(&out).contains("needs a squared-exponential kernel") && stderr(&out).contains("matern52"));
}

/// 400 rows of a smooth 2-D function with the target in the middle column.
fn svgp_csv() -> PathBuf {
    let mut s = String::from("a,y,b\n");
    for i in 0..400 {
        let (a, b) = (((i * 37) % 101) as f64 / 25.0 - 2.0, ((i * 53) % 97) as f64 / 24.0 - 2.0);
        s += &format!("{a},{},{b}\n", (1.3 * a).sin() + 0.4 * b + 0.05 * ((i * 7 % 13) as f64 / 6.0 - 1.0));
    }
    tmp("svgp.csv", &s)
}

/// `gp svgp` streams the file, checkpoints, and a run stopped half-way and resumed gives the
/// same JSON numbers as one that never stopped; a checkpoint of other settings is refused.
#[test]
fn svgp_resumes_from_its_checkpoint_bit_identically() {
    let train = svgp_csv();
    let common = |cp: &str, steps: &str| {
        let cp = test_dir(cp).display().to_string();
        vec![
            "gp",
            "svgp",
            "--train",
            train.to_str().unwrap(),
            "--target",
            "y",
            "--inducing",
            "12",
            "--batch",
            "32",
            "--chunk-rows",
            "100",
            "--checkpoint",
            &cp,
            "--checkpoint-every",
            "5",
            "--resume",
            "--steps",
            steps,
            "--json",
        ]
        .into_iter()
        .map(String::from)
        .collect::<Vec<_>>()
    };
    let run_s = |a: Vec<String>| json_of(&bin().args(&a).output().unwrap());
    // --resume with no checkpoint there yet starts from step 0, and says so.
    let first = bin().args(common("a.json", "40")).output().unwrap();
    let said = String::from_utf8_lossy(&first.stderr);
    assert!(said.contains("no checkpoint at") && said.contains("starting from step 0"), "{said}");
    let straight = json_of(&first);
    assert!(straight["resumed_at"].is_null());
    // The bound at the final state over every row, beside the training's moving average.
    assert!(straight["bound_per_row"].as_f64().is_some_and(f64::is_finite), "{straight}");
    assert!(straight["bound_per_row_moving_average"].is_f64(), "{straight}");
    assert_ne!(straight["bound_per_row"], straight["bound_per_row_moving_average"]);
    let half = run_s(common("b.json", "20"));
    assert_eq!(half["steps"], 20);
    let rest = run_s(common("b.json", "40"));
    assert_eq!(rest["resumed_at"], 20);
    for key in ["noise", "kernel", "bound_per_row", "epochs_completed"] {
        assert_eq!(straight[key], rest[key], "{key}");
    }
    assert!(straight["epochs_completed"].as_u64().unwrap() >= 3, "the run crossed epochs");
    // The same file changed in place (same number of rows) is refused too.
    let text = std::fs::read_to_string(&train).unwrap();
    std::fs::write(&train, text.replacen("\n0,", "\n0.5,", 1)).unwrap();
    let e = stderr(&bin().args(common("b.json", "40")).output().unwrap());
    assert!(e.contains("other settings"), "{e}");
    std::fs::write(&train, text).unwrap();
    let mut other = common("b.json", "40");
    other[9] = "10".into(); // --batch
    let out = bin().args(&other).output().unwrap();
    let e = stderr(&out);
    assert!(e.contains("other settings") && e.contains("batch"), "{e}");
}

/// `gp svgp --test` reports the RMSE of a good fit in data units, with the inputs matched by
/// name; unknown columns, unparsable cells and bad settings are refused with the reason.
#[test]
fn svgp_reports_test_rmse_and_refuses_bad_columns() {
    let train = svgp_csv();
    let out = json_of(&run(&[
        "gp",
        "svgp",
        "--train",
        train.to_str().unwrap(),
        "--target",
        "y",
        "--inducing",
        "20",
        "--batch",
        "50",
        "--epochs",
        "30",
        "--lr",
        "0.03",
        "--natgrad",
        "0.3",
        "--optimal-q",
        "--test",
        train.to_str().unwrap(),
        "--json",
    ]));
    let rmse = out["test"]["rmse"].as_f64().unwrap();
    assert!(rmse < 0.1, "training-set RMSE of a smooth function with noise sd ≈ 0.03: {rmse}");
    assert_eq!(out["inputs"], serde_json::json!(["a", "b"]));
    let e = stderr(&run(&["gp", "svgp", "--train", train.to_str().unwrap(), "--target", "z"]));
    assert!(e.contains("no column named \"z\""), "{e}");
    let bad = tmp("bad.csv", "a,y\n1,2\n3,oops\n");
    let e = stderr(&run(&["gp", "svgp", "--train", bad.to_str().unwrap(), "--target", "y", "--inducing", "1"]));
    assert!(e.contains("bad.csv") && e.contains("line 3"), "{e}");
    let e = stderr(&run(&["gp", "svgp", "--train", train.to_str().unwrap(), "--target", "y", "--natgrad", "2"]));
    assert!(e.contains("--natgrad"), "{e}");
}

/// One fitting path: a node's private-only model ("alone") is `gp fit
/// --model exact --restarts 3 --seed 1592631566 --prior-mean 0` on its train.csv (the seed of
/// the fixed stream its restarts come from, D38). The node's files are in the
/// public standardisation of y, so its GP's prior mean is the public mean (0); `gp fit`'s
/// default centres y at the training mean, which on a masked (regional) sample such as party
/// A's is far from the test set's, so far from its rows the two predictions differ.
#[test]
fn gp_fit_with_prior_mean_zero_is_the_nodes_private_fit() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let cfg_path = root.join("examples/two-party/party-a.toml");
    let cfg: dpcotrain_federation::config::PartyConfig = dpcotrain_federation::config::load(&cfg_path).unwrap();
    let mut party = dpcotrain_federation::config::party_from_config(&cfg, &cfg_path).unwrap();
    let node_alone = dpcotrain_cotrain::driver::evaluate(&mut party).unwrap().rmse;

    let data = root.join("examples/two-party/data/party-a");
    let test = std::fs::read_to_string(data.join("test.csv")).unwrap();
    let mut lines = test.lines();
    let header: Vec<&str> = lines.next().unwrap().split(',').collect();
    let target = header.iter().position(|h| *h == "PE").unwrap();
    let (mut inputs, mut y) = (String::new(), Vec::new());
    inputs += &header.iter().enumerate().filter(|(j, _)| *j != target).map(|(_, h)| *h).collect::<Vec<_>>().join(",");
    inputs.push('\n');
    for l in lines {
        let v: Vec<&str> = l.split(',').collect();
        y.push(v[target].parse::<f64>().unwrap());
        inputs += &v.iter().enumerate().filter(|(j, _)| *j != target).map(|(_, s)| *s).collect::<Vec<_>>().join(",");
        inputs.push('\n');
    }
    let inputs = tmp("test-inputs.csv", &inputs);
    let rmse = |prior_mean: &str| {
        let out_csv = test_dir(&format!("pred-{prior_mean}.csv"));
        let train = data.join("train.csv");
        let out = run(&[
            "gp",
            "fit",
            "--train",
            train.to_str().unwrap(),
            "--target",
            "PE",
            "--restarts",
            "3",
            "--seed",
            &dpcotrain_cotrain::readings::PRIVATE_FIT_SEED.to_string(),
            "--prior-mean",
            prior_mean,
            "--predict",
            inputs.to_str().unwrap(),
            "--output",
            out_csv.to_str().unwrap(),
            "--json",
        ]);
        let fit = json_of(&out);
        let pred = std::fs::read_to_string(&out_csv).unwrap();
        let means: Vec<f64> = pred.lines().skip(1).map(|l| l.split(',').next().unwrap().parse().unwrap()).collect();
        assert_eq!(means.len(), y.len());
        let mse = means.iter().zip(&y).map(|(m, t)| (m - t).powi(2)).sum::<f64>() / y.len() as f64;
        (mse.sqrt(), fit["y_mean"].as_f64().unwrap())
    };
    let (zero, m0) = rmse("0");
    assert_eq!(m0, 0.0);
    assert!((zero - node_alone).abs() < 1e-3, "gp fit --prior-mean 0: {zero}, the node's alone: {node_alone}");
    let (train_mean, m) = rmse("train");
    assert!(m > 0.5, "party A's labelled rows sit high: training mean {m}");
    assert!(train_mean > node_alone + 0.2, "centred at the training mean: {train_mean} against {node_alone}");
    // docs/cli.md quotes these figures (the doc-number check for this paragraph).
    let readme =
        std::fs::read_to_string(root.join("docs/cli.md")).unwrap().split_whitespace().collect::<Vec<_>>().join(" ");
    let quoted = format!(
        "training mean of {m:.2} against the test set's −{:.2}, and `gp fit` alone predicts its test set with RMSE {train_mean:.3}, `--prior-mean 0` with {zero:.3}, the node's figure",
        -(y.iter().sum::<f64>() / y.len() as f64)
    );
    assert!(readme.contains(&quoted), "docs/cli.md should say: {quoted}");
    let bad = run(&["gp", "fit", "--train", "x.csv", "--prior-mean", "middle"]);
    assert!(stderr(&bad).contains("neither `train` nor a finite number"), "{}", stderr(&bad));
}
