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

/// The keys of the example config at `file` (as serialised: every field, defaults included)
/// that README.md does not name.
fn undocumented_keys<T: serde::de::DeserializeOwned + serde::Serialize>(file: &str) -> Vec<String> {
    let cfg: T = load(&Path::new(env!("CARGO_MANIFEST_DIR")).join(file)).unwrap();
    undocumented(&toml::Value::try_from(&cfg).unwrap())
}

/// README.md is a user's page: what, the two commands, the tour, using your own data, the
/// privacy model in brief, the CLI and configuration references and links; the research history
/// and the benchmarks live in docs/ (issue 57).
#[test]
fn the_readme_is_a_users_page() {
    let text = readme();
    let lines = text.lines().count();
    assert!(lines <= 300, "README.md has {lines} lines; keep it at most 300 (move detail to docs/)");
    for section in ["## On a fresh machine", "## Using your own data", "## Configuration reference", "## CLI reference"]
    {
        assert!(text.contains(section), "README.md has no {section:?}");
    }
    // Every relative link points at a file of the repository.
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    for doc in ["README.md", "docs/cli.md", "docs/lab.md", "docs/privacy-model.md", "docs/operations.md"] {
        let text = std::fs::read_to_string(root.join(doc)).unwrap();
        let base = root.join(doc).parent().unwrap().to_path_buf();
        for piece in text.split("](").skip(1) {
            let target = piece.split(')').next().unwrap().split('#').next().unwrap();
            if target.is_empty() || target.starts_with("http") {
                continue;
            }
            assert!(base.join(target).exists(), "{doc} links to {target}, which does not exist");
        }
    }
}

#[test]
fn every_federation_setting_is_in_the_readme() {
    let missing = undocumented_keys::<FederationConfig>("examples/two-party/federation.toml");
    assert!(missing.is_empty(), "federation.toml keys missing from README.md: {missing:?}");
}

#[test]
fn every_party_setting_is_in_the_readme() {
    let missing = undocumented_keys::<PartyConfig>("examples/two-party/party-a.toml");
    assert!(missing.is_empty(), "party.toml keys missing from README.md: {missing:?}");
}

/// Papers cited by author and year carry the same year everywhere (code comments and docs):
/// one paper each of these authors is cited, so another year is a mistake.
#[test]
fn each_cited_paper_has_one_year() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let papers = [("Hughes-Hallett", "2022"), ("Titsias", "2009"), ("Walder", "2008"), ("Bauer", "2016")];
    let mut files = Vec::new();
    let mut stack = vec![root.join("crates"), root.join("src"), root.join("docs")];
    files.extend(["README.md", "ARCHITECTURE.md"].map(|f| root.join(f)));
    while let Some(dir) = stack.pop() {
        for e in std::fs::read_dir(&dir).unwrap().flatten() {
            let p = e.path();
            if p.is_dir() {
                stack.push(p);
            } else if p.extension().is_some_and(|x| x == "rs" || x == "md") {
                files.push(p);
            }
        }
    }
    let mut wrong = Vec::new();
    for f in &files {
        let text = std::fs::read_to_string(f).unwrap_or_default();
        for (author, year) in papers {
            for (at, _) in text.match_indices(author) {
                // The first year within the next 30 characters ("Walder, Kim & Schölkopf 2008").
                // (up to the next ';', '|' or line end: another citation may follow)
                let after: String =
                    text[at + author.len()..].chars().take_while(|c| !matches!(c, ';' | '|' | '\n')).take(30).collect();
                let found = after.as_bytes().windows(4).map(|w| String::from_utf8_lossy(w).into_owned()).find(|w| {
                    w.len() == 4
                        && (w.starts_with("19") || w.starts_with("20"))
                        && w.chars().all(|c| c.is_ascii_digit())
                });
                if let Some(y) = found
                    && y != year
                {
                    wrong.push(format!(
                        "{}: {author} {y} (the paper is {year})",
                        f.strip_prefix(root).unwrap().display()
                    ));
                }
            }
        }
    }
    assert!(wrong.is_empty(), "{wrong:#?}");
}
