//! One build for the demo and the tests (README, "Run the tests"): every crate the binary uses
//! resolves to the same features whether or not the test build's dev-dependencies are in the
//! graph. Otherwise cargo's feature unification gives `cargo test` a different num-traits,
//! serde, regex… and it recompiles the numeric stack and every workspace crate after the demo's
//! `cargo run --release` (the root Cargo.toml declares those features for the binary).

use std::collections::{BTreeMap, BTreeSet};
use std::process::Command;

/// `cargo tree` of the workspace over `edges`: each package (name and version) with its features.
fn features(edges: &str) -> BTreeMap<String, BTreeSet<String>> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let out = Command::new(cargo)
        .args(["tree", "--workspace", "--offline", "--prefix", "none", "-e", edges, "-f", "{p}|{f}"])
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

#[test]
fn the_test_build_compiles_the_binarys_crates_with_the_same_features() {
    // Normal edges only: build-dependencies (prost-build's tempfile and rustix, …) are compiled
    // for the host with features of their own, and listing them would hide a difference in the
    // same crate's target build (bitflags' "std" was one).
    let build = features("normal");
    let test = features("normal,dev");
    assert!(build.len() > 50, "cargo tree listed only {} packages", build.len());
    let differ: Vec<String> = build
        .iter()
        .filter_map(|(pkg, f)| {
            let t = test.get(pkg)?;
            (t != f).then(|| format!("{pkg}: +{:?}", t.difference(f).collect::<Vec<_>>()))
        })
        .collect();
    assert!(
        differ.is_empty(),
        "the test build turns on features the binary's build does not, so `cargo test` would \
         recompile these and everything above them; declare the features in the root Cargo.toml's \
         [dependencies]: {differ:#?}"
    );
}
