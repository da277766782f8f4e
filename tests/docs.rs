//! README documents every setting a user can write: each key of `federation.toml` and of a
//! party's `party.toml` (top-level and per section) appears in README.md as `key`.

use dpcotrain_federation::config::{FederationConfig, PartyConfig, load};
use std::path::Path;

fn readme() -> String {
    std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("README.md")).unwrap()
}

/// Every key of `value` (tables recursively, arrays of tables by their first element).
fn keys(value: &toml::Value, out: &mut Vec<String>) {
    match value {
        toml::Value::Table(t) => {
            for (k, v) in t {
                out.push(k.clone());
                keys(v, out);
            }
        }
        toml::Value::Array(a) => {
            if let Some(first) = a.first() {
                keys(first, out);
            }
        }
        _ => {}
    }
}

fn undocumented(value: &toml::Value) -> Vec<String> {
    let text = readme();
    let mut all = Vec::new();
    keys(value, &mut all);
    all.sort();
    all.dedup();
    // A key is documented as `key`, or after its section as `[section] key`; a section as
    // `[section]` or `[[section]]`.
    let named = |k: &str| {
        text.contains(&format!("`{k}`")) || text.contains(&format!("] {k}`")) || text.contains(&format!("[{k}]"))
    };
    all.into_iter().filter(|k| !named(k)).collect()
}

#[test]
fn every_federation_setting_is_in_the_readme() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let cfg: FederationConfig = load(&root.join("examples/two-party/federation.toml")).unwrap();
    // Serialised, the config lists every field, defaults included.
    let value = toml::Value::try_from(&cfg).unwrap();
    let missing = undocumented(&value);
    assert!(missing.is_empty(), "federation.toml keys missing from README.md: {missing:?}");
}

#[test]
fn every_party_setting_is_in_the_readme() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let cfg: PartyConfig = load(&root.join("examples/two-party/party-a.toml")).unwrap();
    let value = toml::Value::try_from(&cfg).unwrap();
    let missing = undocumented(&value);
    assert!(missing.is_empty(), "party.toml keys missing from README.md: {missing:?}");
}
