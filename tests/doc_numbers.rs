//! The doc-number check: every figure README.md, examples/README.md and docs/results.md quote
//! from a cheap command is regenerated here from that command and compared, digit for digit
//! as printed, so a document cannot drift from the code. Each check names the command a reader
//! runs to see the same figures. Figures that depend on the machine (wall times, and the counts
//! docs/results.md marks as machine-dependent) are not regenerated; the rest are seeded and
//! reproduce on one build. docs/lab.md's speed table is compared with the committed `bench gp` run it
//! links instead.

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
            "its noise erases most of P1's gain — P1 {} and P2 {}, where the honest default reaches {} and {})",
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

/// docs/lab.md's speed table ("Now") quotes the `bench gp --vs python --json` run it links, figure for
/// figure as printed there. The times are this machine's and are not regenerated here; this
/// keeps the table from drifting from its source file (`dpcotrain-lab bench gp --vs python --python
/// VENV/bin/python --json` writes such a file).
#[test]
fn readme_speed_table_quotes_its_bench_json() {
    let readme = doc("docs/lab.md");
    let start = readme.find("**Now** (").expect("docs/lab.md has a \"Now\" speed table");
    let end = start + readme[start..].find("Issue 38's targets").expect("the table ends before the targets");
    let now = &readme[start..end];
    // The link's target, relative to docs/.
    let link = now.split('(').find_map(|s| s.strip_prefix("results/speed/")).expect("the table links its JSON");
    let file = format!("docs/results/speed/{}", &link[..link.find(')').unwrap()]);
    let rows: Vec<Value> = serde_json::from_str(&doc(&file)).unwrap();
    fn find<'a>(rows: &'a [Value], file: &str, case: &str, pred: &dyn Fn(&Value) -> bool) -> &'a Value {
        rows.iter().find(|r| r["case"] == case && pred(r)).unwrap_or_else(|| panic!("{file} has no {case} row"))
    }
    let row = |case: &str, pred: &dyn Fn(&Value) -> bool| find(&rows, &file, case, pred);
    let f = |r: &Value, k: &str| r[k].as_f64().unwrap_or_else(|| panic!("{file}: no {k}"));
    let ours = |r: &&Value| r.get("lib").is_none();
    let vfe = |n: u64| move |r: &Value| r["n"] == n && r["m"] == 500 && r["d"] == 4;

    let gemm = row("gemm", &|r| ours(&r));
    let numpy = row("gemm", &|r| !ours(&r));
    let step = row("vfe_elbo_grad", &|r| vfe(100_000)(r) && ours(&r));
    let gpflow = row("vfe_elbo_grad", &|r| vfe(100_000)(r) && !ours(&r));
    let small = row("vfe_elbo_grad", &|r| vfe(10_000)(r) && ours(&r));
    let small_gpflow = row("vfe_elbo_grad", &|r| vfe(10_000)(r) && !ours(&r));
    let products = row("vfe_products_alone", &|r| ours(&r));
    let np_products = row("vfe_products_alone", &|r| !ours(&r));
    let svgp = row("svgp_step", &|r| r["lib"] == "dpcotrain");
    let svgp_gpflow = row("svgp_step", &|r| r["lib"].as_str().is_some_and(|l| l.starts_with("gpflow")));
    let svgp_torch = row("svgp_step", &|r| r["lib"].as_str().is_some_and(|l| l.starts_with("gpytorch")));
    let exact = row("exact_breakdown", &|r| ours(&r));
    let lapack = row("exact_breakdown", &|r| !ours(&r));
    let lml = |n: u64| 1e6 * f(row("exact_lml_grad_small", &|r| r["n"] == n), "seconds");
    let pct = |x: f64| format!("{:.0}%", 100.0 * x);
    let (tc, ti) = (f(exact, "cholesky_seconds"), f(exact, "inverse_seconds"));
    let one_core = f(exact, "one_core_gemm_gflops");
    let fma = row("fma_peak", &|_| true);

    let expected = [
        format!(
            "| {:.1} GFLOP/s both cores, {:.1} one core | — | — | the best GEMM is {} of it |",
            f(fma, "gflops"),
            f(fma, "one_core_gflops"),
            pct(f(fma, "best_gemm_share_of_peak"))
        ),
        format!("faer {:.1} GFLOP/s", f(gemm, "gflops")),
        format!("numpy {:.1} GFLOP/s", f(numpy, "gflops")),
        format!("| {:.3} s ({:.1} GFLOP/s) |", f(step, "seconds"), f(step, "gflops")),
        format!("{} ({} of faer's)", pct(f(step, "share_of_best_gemm")), pct(f(step, "share_of_gemm"))),
        format!("| {:.3} s | {:.2}× |", f(gpflow, "seconds"), f(gpflow, "ratio_to_dpcotrain")),
        format!("| {:.3} / {:.3} s (", f(products, "gram_seconds"), f(products, "pk_seconds")),
        format!("numpy's: {:.3} / {:.3} s", f(np_products, "gram_seconds"), f(np_products, "pk_seconds")),
        format!(
            "{} / {} (numpy's: {} / {})",
            pct(f(products, "gram_share_of_best_gemm")),
            pct(f(products, "pk_share_of_best_gemm")),
            pct(f(np_products, "gram_share_of_best_gemm")),
            pct(f(np_products, "pk_share_of_best_gemm"))
        ),
        format!("| {:.3} s |", f(products, "kuf_pass_seconds")),
        format!("as measured + one pass: {:.1}%", 100.0 * f(products, "floor_share_of_best_gemm")),
        format!(
            "| {:.3} s | {:.3} s | {:.2}× | {} |",
            f(small, "seconds"),
            f(small_gpflow, "seconds"),
            f(small_gpflow, "ratio_to_dpcotrain"),
            pct(f(small, "share_of_best_gemm"))
        ),
        format!("| {:.1} ms |", 1e3 * f(svgp, "seconds_per_step")),
        format!("| {:.1} ms (GPyTorch", 1e3 * f(svgp_gpflow, "seconds_per_step")),
        format!("{:.1} ms)", 1e3 * f(svgp_torch, "seconds_per_step")),
        format!("**{:.2}×** ({:.2}×)", f(svgp_gpflow, "ratio_to_dpcotrain"), f(svgp_torch, "ratio_to_dpcotrain")),
        format!(
            "{:.1} / {:.1} µs = {:.1} / {:.1} GFLOP/s",
            1e6 * tc,
            1e6 * ti,
            f(exact, "cholesky_gflops"),
            f(exact, "inverse_gflops")
        ),
        format!(
            "{:.2}× / {:.2}× slower",
            f(exact, "faer_cholesky_seconds") / tc,
            f(exact, "faer_inverse_seconds") / ti
        ),
        format!(
            "{:.1} / {:.1} GFLOP/s | {:.2}× / {:.2}×",
            f(lapack, "cholesky_gflops"),
            f(lapack, "inverse_gflops"),
            f(lapack, "cholesky_seconds") / tc,
            f(lapack, "inverse_seconds") / ti
        ),
        format!(
            "{} / {} of one core's GEMM ({:.1}",
            pct(f(exact, "cholesky_gflops") / one_core),
            pct(f(exact, "inverse_gflops") / one_core),
            one_core
        ),
        format!("| {:.1} / {:.1} / {:.1} µs |", lml(25), lml(100), lml(225)),
    ];
    for e in &expected {
        assert!(norm(now).contains(&norm(e)), "docs/lab.md's \"Now\" table does not quote {file} as printed:\n  {e}");
    }
    // The paragraph after the table: the hardware's bound on the ratio to GPflow, from the same run.
    let targets = &readme[end..end + readme[end..].find("has the measurements").expect("the targets paragraph ends")];
    let peak_seconds = f(gpflow, "seconds") / f(gpflow, "max_ratio_at_fma_peak");
    for e in [
        format!("take {peak_seconds:.3} s"),
        format!("more than {:.2}× GPflow's {:.3} s", f(gpflow, "max_ratio_at_fma_peak"), f(gpflow, "seconds")),
        format!("(at the best GEMM rate: {:.2}×", f(gpflow, "max_ratio_at_best_gemm")),
        format!("allows {:.3} s here", f(products, "budget_at_90_seconds")),
        format!("reaches {}", pct(f(products, "two_passes_at_best_gemm_share"))),
        // The rest of the step: its time less the products and the two K_uf passes.
        format!("({:.2} s now)", f(step, "seconds") - f(products, "seconds") - 2.0 * f(products, "kuf_pass_seconds")),
    ] {
        assert!(norm(targets).contains(&norm(&e)), "docs/lab.md's targets paragraph does not quote {file}:\n  {e}");
    }
}
