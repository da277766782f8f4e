//! One build for the demo and the tests (README, "Run the tests"): every crate the binary uses
//! resolves to the same features whether or not the test build's dev-dependencies are in the
//! graph. Otherwise cargo's feature unification gives `cargo test` a different num-traits,
//! serde, regex… and it recompiles the numeric stack and every workspace crate after the demo's
//! `cargo run --release` (the root Cargo.toml declares those features for the binary).

use std::collections::{BTreeMap, BTreeSet};
use std::process::Command;

/// `cargo tree` of `packages` (`--workspace`, or `-p NAME`) over `edges`: each package (name and
/// version) with its features.
fn features_of(packages: &[&str], edges: &str) -> BTreeMap<String, BTreeSet<String>> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let out = Command::new(cargo)
        .arg("tree")
        .args(packages)
        .args(["--offline", "--prefix", "none", "-e", edges, "-f", "{p}|{f}"])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .expect("cargo runs");
    assert!(out.status.success(), "cargo tree -e {edges}: {}", String::from_utf8_lossy(&out.stderr));
    let mut map: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for line in String::from_utf8_lossy(&out.stdout).lines() {
        let Some((pkg, feats)) = line.split_once('|') else { continue };
        // "name v1.2.3 (path)" → "name v1.2.3"; "(*)" marks a repeat.
        let key: String = pkg.split_whitespace().take(2).collect::<Vec<_>>().join(" ");
        let feats = feats.trim_end_matches(" (*)").trim();
        map.entry(key).or_default().extend(feats.split(',').filter(|f| !f.is_empty()).map(str::to_string));
    }
    map
}

/// The workspace's packages over `edges`.
fn features(edges: &str) -> BTreeMap<String, BTreeSet<String>> {
    features_of(&["--workspace"], edges)
}

/// Packages whose features differ between `build` and `test`, with what `test` adds.
fn differences(build: &BTreeMap<String, BTreeSet<String>>, test: &BTreeMap<String, BTreeSet<String>>) -> Vec<String> {
    build
        .iter()
        .filter_map(|(pkg, f)| {
            let t = test.get(pkg)?;
            (t != f).then(|| format!("{pkg}: +{:?}", t.difference(f).collect::<Vec<_>>()))
        })
        .collect()
}

#[test]
fn the_test_build_compiles_the_binarys_crates_with_the_same_features() {
    // Normal edges only: build-dependencies (prost-build's tempfile and rustix, …) are compiled
    // for the host with features of their own, and listing them would hide a difference in the
    // same crate's target build (bitflags' "std" was one).
    let build = features("normal");
    let test = features("normal,dev");
    assert!(build.len() > 50, "cargo tree listed only {} packages", build.len());
    let differ = differences(&build, &test);
    assert!(
        differ.is_empty(),
        "the test build turns on features the binary's build does not, so `cargo test` would \
         recompile these and everything above them; declare the features in the root Cargo.toml's \
         [dependencies]: {differ:#?}"
    );
}

/// The demo's build (`cargo run --release -- demo` builds the `dpcotrain` package alone) and the
/// tests' (`cargo test --release --workspace`, the lab and the experiments included) compile
/// every crate of the demo's build with the same features, so the tests reuse the demo's
/// artifacts and only add the lab's crates.
#[test]
fn the_workspace_tests_reuse_the_demos_build() {
    let demo = features_of(&["-p", "dpcotrain"], "normal");
    let test = features("normal,dev");
    assert!(demo.len() > 50, "cargo tree listed only {} packages", demo.len());
    let differ = differences(&demo, &test);
    assert!(differ.is_empty(), "the workspace's test build compiles the demo's crates differently: {differ:#?}");
}

/// The product binary does not link the lab: no experiments crate in its build.
#[test]
fn the_product_binary_does_not_link_the_lab() {
    let demo = features_of(&["-p", "dpcotrain"], "normal");
    let lab: Vec<&String> =
        demo.keys().filter(|p| p.starts_with("dpcotrain-experiments ") || p.starts_with("dpcotrain-lab ")).collect();
    assert!(lab.is_empty(), "dpcotrain's build links {lab:?}");
    assert!(demo.keys().any(|p| p.starts_with("dpcotrain-federation ")), "the product links the node: {demo:?}");
    // And the lab does link them (so the check above is not vacuous).
    let lab_build = features_of(&["-p", "dpcotrain-lab"], "normal");
    assert!(lab_build.keys().any(|p| p.starts_with("dpcotrain-experiments ")));
}
