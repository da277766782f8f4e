//! Invariants of the code's shape (ARCHITECTURE.md, "Invariants"), checked on the source:
//! no import circle between the files of a crate, the crates' layers with no arrow pointing up,
//! the experiments apart from the product, and the protocol at the top level.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            rust_files(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

/// Module path of a file under `src` ("crate" for lib.rs/main.rs, "a::b" for a/b.rs or a/b/mod.rs).
fn module_of(src: &Path, file: &Path) -> String {
    let rel = file.strip_prefix(src).unwrap().with_extension("");
    let mut parts: Vec<String> = rel.components().map(|c| c.as_os_str().to_string_lossy().into_owned()).collect();
    if parts.last().is_some_and(|l| l == "mod") {
        parts.pop();
    }
    match parts.as_slice() {
        [one] if one == "lib" || one == "main" => "crate".into(),
        _ => parts.join("::"),
    }
}

/// The code of a file without its test module and comments: what it imports to run.
fn code(text: &str) -> String {
    let text = text.split("#[cfg(test)]").next().unwrap_or("");
    text.lines().map(|l| l.split("//").next().unwrap_or("")).collect::<Vec<_>>().join("\n")
}

/// Edges module → module of `crate::a::b…` paths, each to the longest prefix that is a module.
fn edges(src: &Path) -> BTreeMap<String, BTreeSet<String>> {
    let mut files = Vec::new();
    rust_files(src, &mut files);
    let modules: BTreeMap<String, String> =
        files.iter().map(|f| (module_of(src, f), code(&std::fs::read_to_string(f).unwrap()))).collect();
    let mut out = BTreeMap::new();
    for (m, text) in &modules {
        let mut to = BTreeSet::new();
        for (i, _) in text.match_indices("crate::") {
            let rest = &text[i + 7..];
            let path: String =
                rest.chars().take_while(|c| c.is_ascii_alphanumeric() || *c == '_' || *c == ':').collect();
            let parts: Vec<&str> = path.split("::").filter(|p| !p.is_empty()).collect();
            if let Some(target) =
                (1..=parts.len()).rev().map(|k| parts[..k].join("::")).find(|c| modules.contains_key(c) && c != m)
            {
                to.insert(target);
            }
        }
        out.insert(m.clone(), to);
    }
    out
}

/// The strongly connected components with more than one module (Tarjan).
fn circles(e: &BTreeMap<String, BTreeSet<String>>) -> Vec<Vec<String>> {
    struct T<'a> {
        e: &'a BTreeMap<String, BTreeSet<String>>,
        index: BTreeMap<&'a str, usize>,
        low: BTreeMap<&'a str, usize>,
        stack: Vec<&'a str>,
        on: BTreeSet<&'a str>,
        out: Vec<Vec<String>>,
    }
    fn visit<'a>(t: &mut T<'a>, v: &'a str) {
        let i = t.index.len();
        t.index.insert(v, i);
        t.low.insert(v, i);
        t.stack.push(v);
        t.on.insert(v);
        for w in t.e.get(v).into_iter().flatten() {
            if !t.index.contains_key(w.as_str()) {
                visit(t, w);
                let lw = t.low[w.as_str()];
                let lv = t.low.get_mut(v).unwrap();
                *lv = (*lv).min(lw);
            } else if t.on.contains(w.as_str()) {
                let iw = t.index[w.as_str()];
                let lv = t.low.get_mut(v).unwrap();
                *lv = (*lv).min(iw);
            }
        }
        if t.low[v] == t.index[v] {
            let mut comp = Vec::new();
            loop {
                let w = t.stack.pop().unwrap();
                t.on.remove(w);
                comp.push(w.to_string());
                if w == v {
                    break;
                }
            }
            if comp.len() > 1 {
                comp.sort();
                t.out.push(comp);
            }
        }
    }
    let mut t = T { e, index: BTreeMap::new(), low: BTreeMap::new(), stack: vec![], on: BTreeSet::new(), out: vec![] };
    for v in e.keys() {
        if !t.index.contains_key(v.as_str()) {
            visit(&mut t, v);
        }
    }
    t.out
}

#[test]
fn no_import_circle_between_the_files_of_a_crate() {
    let mut found = Vec::new();
    for src in [
        "src",
        "crates/gp/src",
        "crates/privacy/src",
        "crates/cotrain/src",
        "crates/federation/src",
        "crates/report/src",
        "crates/experiments/src",
    ] {
        for c in circles(&edges(&root().join(src))) {
            found.push(format!("{src}: {}", c.join(" ↔ ")));
        }
    }
    assert!(found.is_empty(), "import circles:\n{}", found.join("\n"));
}

#[test]
fn the_circle_check_can_fail() {
    let e: BTreeMap<String, BTreeSet<String>> = [
        ("a".to_string(), BTreeSet::from(["b".to_string()])),
        ("b".to_string(), BTreeSet::from(["c".to_string()])),
        ("c".to_string(), BTreeSet::from(["a".to_string()])),
        ("d".to_string(), BTreeSet::from(["a".to_string()])),
    ]
    .into();
    assert_eq!(circles(&e), vec![vec!["a".to_string(), "b".to_string(), "c".to_string()]]);
    assert_eq!(code("use crate::a; // crate::b\n#[cfg(test)]\nuse crate::c;"), "use crate::a; ");
}

#[test]
fn the_protocol_lives_at_the_top_level() {
    assert!(root().join("proto/dpcotrain/v2/node.proto").is_file());
    assert!(!root().join("crates/federation/proto").exists(), "one copy of the protocol, at proto/");
    let build = std::fs::read_to_string(root().join("crates/federation/build.rs")).unwrap();
    assert!(build.contains("../../proto/dpcotrain/v2/node.proto"), "build.rs compiles the top-level proto/");
}

/// The workspace crates each crate's `Cargo.toml` depends on, as (dependency, features asked for),
/// from its `[dependencies]` table (dev-dependencies are a test's business, not a layer's).
fn workspace_deps(manifest: &str) -> Vec<(String, String)> {
    let text = std::fs::read_to_string(root().join(manifest)).unwrap();
    let mut out = Vec::new();
    let mut in_deps = false;
    for line in text.lines() {
        let t = line.trim();
        if t.starts_with('[') {
            in_deps = t == "[dependencies]";
        } else if in_deps && (t.starts_with("dpcotrain-") || t.starts_with("dpcotrain ")) {
            let name = t.split(['.', ' ', '=']).next().unwrap().to_string();
            out.push((name, t.to_string()));
        }
    }
    out
}

/// The layers of ARCHITECTURE.md ("Dependency rules"), top to bottom: a crate may depend only on
/// crates of a lower layer.
const LAYERS: [(&str, &str, usize); 8] = [
    ("dpcotrain-lab", "crates/lab/Cargo.toml", 6),
    ("dpcotrain", "Cargo.toml", 5),
    ("dpcotrain-experiments", "crates/experiments/Cargo.toml", 4),
    ("dpcotrain-federation", "crates/federation/Cargo.toml", 3),
    ("dpcotrain-report", "crates/report/Cargo.toml", 3),
    ("dpcotrain-cotrain", "crates/cotrain/Cargo.toml", 2),
    ("dpcotrain-privacy", "crates/privacy/Cargo.toml", 1),
    ("dpcotrain-gp", "crates/gp/Cargo.toml", 0),
];

/// A crate, its layer, and its workspace dependencies (name, the manifest's line).
type Crate<'a> = (&'a str, usize, Vec<(String, String)>);

fn layer_violations(deps: &[Crate]) -> Vec<String> {
    let level = |n: &str| deps.iter().find(|(c, _, _)| *c == n).map(|(_, l, _)| *l);
    let mut bad = Vec::new();
    for (c, l, ds) in deps {
        for (d, line) in ds {
            match level(d) {
                Some(dl) if dl < *l => {}
                Some(_) => bad.push(format!("{c} → {d}: not a lower layer")),
                None => bad.push(format!("{c} → {d}: a crate the layers do not name")),
            }
            if line.contains("features") && d == "dpcotrain-cotrain" {
                bad.push(format!("{c} turns on a feature of cotrain (the privacy boundary has none to turn on)"));
            }
        }
    }
    bad
}

#[test]
fn the_crates_form_layers_and_the_experiments_stay_apart() {
    let deps: Vec<Crate> = LAYERS.iter().map(|(c, m, l)| (*c, *l, workspace_deps(m))).collect();
    let members = std::fs::read_to_string(root().join("Cargo.toml")).unwrap();
    for (_, m, _) in LAYERS.iter().filter(|(_, m, _)| *m != "Cargo.toml") {
        let dir = m.trim_end_matches("/Cargo.toml");
        assert!(members.contains(&format!("\"{dir}\"")), "{dir} is a workspace member the layers name");
    }
    let bad = layer_violations(&deps);
    assert!(bad.is_empty(), "{}", bad.join("\n"));
    // The experiments use the co-training layer, only the lab binary uses them, and nothing of
    // the product does (the product binary does not link them: tests/one_build.rs).
    let level = |name: &str| LAYERS.iter().position(|(c, _, _)| *c == name).unwrap();
    assert!(deps[level("dpcotrain-experiments")].2.iter().any(|(d, _)| d == "dpcotrain-cotrain"));
    assert!(deps[level("dpcotrain-lab")].2.iter().any(|(d, _)| d == "dpcotrain-experiments"));
    for (c, _, ds) in &deps {
        if *c != "dpcotrain-lab" {
            assert!(ds.iter().all(|(d, _)| d != "dpcotrain-experiments"), "{c} depends on the experiments");
        }
    }
    // Cotrain has no feature that opens the party (the boundary is its visibility,
    // crates/cotrain/src/boundary.rs).
    let cotrain = std::fs::read_to_string(root().join("crates/cotrain/Cargo.toml")).unwrap();
    assert!(!cotrain.contains("[features]"), "crates/cotrain/Cargo.toml declares features");
    // No experiment is left in the product's crates.
    for gone in [
        "crates/cotrain/src/grid.rs",
        "crates/cotrain/src/frontier.rs",
        "src/cli/sparse",
        "src/cli/experiment.rs",
        "src/cli/bench",
    ] {
        assert!(!root().join(gone).exists(), "{gone} belongs in crates/experiments");
    }
}

#[test]
fn the_layer_check_can_fail() {
    let d = |n: &str, line: &str| (n.to_string(), line.to_string());
    let deps = vec![
        ("dpcotrain-cotrain", 2, vec![d("dpcotrain-report", "dpcotrain-report.workspace = true")]),
        (
            "dpcotrain-report",
            3,
            vec![d("dpcotrain-cotrain", "dpcotrain-cotrain = { workspace = true, features = [\"open\"] }")],
        ),
        ("dpcotrain-gp", 0, vec![d("dpcotrain-nope", "dpcotrain-nope.workspace = true")]),
    ];
    let bad = layer_violations(&deps);
    assert_eq!(bad.len(), 3, "{bad:?}");
    assert!(
        bad[0].contains("not a lower layer") && bad[1].contains("feature of cotrain") && bad[2].contains("do not name")
    );
}

/// Temporary folders come from `tempfile` (removed when dropped, also when a test fails), never
/// as a name under the system's temporary directory: such folders stayed behind after every
/// test run (`/tmp/dpcotrain-stream-*`). Only the `bench` commands, which remove theirs at the
/// end, name one.
#[test]
fn no_test_leaves_a_named_folder_in_the_temporary_directory() {
    let mut files = Vec::new();
    for dir in ["src", "crates", "tests", "examples"] {
        rust_files(&root().join(dir), &mut files);
    }
    let named: Vec<String> = files
        .iter()
        .filter(|f| !f.starts_with(root().join("crates/lab/src/bench")) && !f.ends_with("tests/architecture.rs"))
        .filter(|f| std::fs::read_to_string(f).unwrap().contains("temp_dir()"))
        .map(|f| f.strip_prefix(root()).unwrap().display().to_string())
        .collect();
    assert!(named.is_empty(), "temporary folders named under std::env::temp_dir(): {named:?}");
}

/// One calibration authority (issue 57): outside `crates/privacy/src/calibrate.rs` (and the
/// GDP curve itself, `gaussian.rs`) no library code turns an ε into a μ or a μ into a σ — every
/// release, the θ vote, the thesis's multiplier and every budget check go through
/// `NoiseScale`. Tests may compute references with the primitives.
#[test]
fn epsilon_becomes_sigma_in_one_place() {
    let mut files = Vec::new();
    for dir in ["src", "crates"] {
        rust_files(&root().join(dir), &mut files);
    }
    let allowed = ["crates/privacy/src/calibrate.rs", "crates/privacy/src/gaussian.rs"];
    let mut found = Vec::new();
    for f in &files {
        let rel = f.strip_prefix(root()).unwrap().display().to_string();
        if allowed.contains(&rel.as_str())
            || rel.contains("/tests/")
            || rel.ends_with("_tests.rs")
            || rel.contains("/benches/")
        {
            continue;
        }
        let text = std::fs::read_to_string(f).unwrap();
        // Library code only: a file's unit tests are its `#[cfg(test)] mod tests` block (other
        // `#[cfg(test)]` items, such as test-module declarations, do not end the code).
        let code = text.split("#[cfg(test)]\nmod tests").next().unwrap();
        for (i, line) in code.lines().enumerate() {
            let l = line.trim_start();
            if l.starts_with("//") {
                continue;
            }
            if l.contains("gdp_mu_for(")
                || l.contains("gdp_epsilon(")
                || l.contains("/ mu")
                || l.contains("classic_constant(")
            {
                found.push(format!("{rel}:{}: {}", i + 1, l));
            }
        }
    }
    assert!(found.is_empty(), "ε → μ → σ outside NoiseScale:\n{}", found.join("\n"));
}

/// A line without its `//` comment; a `//` inside a string literal (`"https://…"`) stays.
fn without_comment(line: &str) -> &str {
    let (mut in_string, mut escaped) = (false, false);
    let b = line.as_bytes();
    for k in 0..b.len() {
        match b[k] {
            _ if escaped => escaped = false,
            b'\\' if in_string => escaped = true,
            b'"' => in_string = !in_string,
            b'/' if !in_string && b.get(k + 1) == Some(&b'/') => return &line[..k],
            _ => {}
        }
    }
    line
}

/// A field type that holds text.
fn is_text(t: &str) -> bool {
    let t = t.replace(' ', "");
    ["String", "Box<str>", "Arc<str>", "Rc<str>", "&'staticstr", "Cow<'static,str>", "Cow<'_,str>"]
        .contains(&t.as_str())
}

/// How an error type (a variant of a `thiserror` enum, or a `thiserror` struct) holds text.
#[derive(Debug, PartialEq)]
enum Words {
    /// Nothing but text: `Name(String)`, or text fields that hold prose (a message, a reason).
    Only,
    /// Prose next to typed context: `{ path: PathBuf, message: String }`.
    WithContext,
}

/// The names a field holding prose goes by.
const PROSE: [&str; 10] =
    ["message", "msg", "reason", "why", "detail", "what", "problem", "error", "cause", "description"];

/// How the fields `fields` (the text between a variant's brackets) hold text, if they do.
fn words_in(fields: &str, tuple: bool) -> Option<Words> {
    let fields: Vec<(&str, &str)> = fields
        .split(',')
        .map(str::trim)
        .filter(|f| !f.is_empty())
        .map(|f| {
            let f = f.trim_start_matches("pub ").trim_start_matches("pub(crate) ");
            match f.split_once(':') {
                Some((n, t)) if !tuple => (n.trim(), t.trim()),
                _ => ("", f.trim()),
            }
        })
        .collect();
    // Prose: text in a tuple, or a text field named as prose. A `&'static str` field is a label
    // the code chose from a fixed set ("what": "training rows"), not prose.
    let prose = |(n, t): &(&str, &str)| is_text(t) && (tuple || (PROSE.contains(n) && !t.starts_with('&')));
    let n_prose = fields.iter().filter(|f| prose(f)).count();
    match n_prose {
        0 => None,
        k if k == fields.len() => Some(Words::Only),
        _ => Some(Words::WithContext),
    }
}

/// The line after the attribute that starts at line `i` (one may span lines up to its `]`).
fn past_attribute(lines: &[&str], mut i: usize) -> usize {
    let depth = |l: &str| l.matches('[').count() as i64 - l.matches(']').count() as i64;
    let mut open = depth(lines[i]);
    while open > 0 && i + 1 < lines.len() {
        i += 1;
        open += depth(lines[i]);
    }
    i + 1
}

/// The error types in `text` (Rust source, comments included) that hold prose: each variant of
/// a `thiserror` enum and each `thiserror` struct, as `Type::Variant` or `Type`, with how.
fn words_in_errors(text: &str) -> Vec<(String, Words)> {
    let lines: Vec<&str> = text.lines().map(without_comment).collect();
    let mut out = Vec::new();
    let mut i = 0;
    while i < lines.len() {
        // An error type: a `thiserror` derive, or a derived type whose name ends in `Error`.
        let derive = lines[i].trim_start().starts_with("#[derive(");
        let thiserror = lines[i].contains("thiserror::Error");
        i += 1;
        if !derive {
            continue;
        }
        // Attributes (one may span lines) and blank lines (doc comments, stripped) up to the item.
        while i < lines.len() && (lines[i].trim().is_empty() || lines[i].trim_start().starts_with("#[")) {
            i = past_attribute(&lines, i);
        }
        let Some(item) = lines.get(i).map(|l| l.trim()) else { break };
        let item = item.trim_start_matches("pub(crate) ").trim_start_matches("pub(super) ").trim_start_matches("pub ");
        let indent = lines[i].len() - lines[i].trim_start().len();
        let is_error = |rest: &str| {
            thiserror
                || rest.chars().take_while(|c| c.is_alphanumeric() || *c == '_').collect::<String>().ends_with("Error")
        };
        if let Some(rest) = item.strip_prefix("struct ").filter(|r| is_error(r)) {
            // `struct Name(pub String);` or `struct Name { … }` on one or more lines.
            let name: String = rest.chars().take_while(|c| c.is_alphanumeric() || *c == '_').collect();
            let mut body = rest[name.len()..].to_string();
            let open = |b: &str| b.matches('{').count() > b.matches('}').count();
            while (open(&body) || !(body.trim_end().ends_with(';') || body.trim_end().ends_with('}')))
                && i + 1 < lines.len()
            {
                i += 1;
                body.push(' ');
                body.push_str(lines[i].trim());
            }
            let body = body.trim().trim_end_matches(';');
            let found = match body.chars().next() {
                Some('(') => words_in(&body[1..body.rfind(')').unwrap_or(body.len())], true),
                Some('{') => words_in(&body[1..body.rfind('}').unwrap_or(body.len())], false),
                _ => None,
            };
            out.extend(found.map(|w| (name, w)));
            i += 1;
            continue;
        }
        let Some(rest) = item.strip_prefix("enum ").filter(|r| is_error(r)) else { continue };
        let name: String = rest.chars().take_while(|c| c.is_alphanumeric() || *c == '_').collect();
        // Variants sit one level inside the enum, which ends at a `}` at the enum's indentation.
        let (inner, end) = (" ".repeat(indent + 4), format!("{}}}", " ".repeat(indent)));
        i += 1;
        let mut variant = String::new();
        while i < lines.len() && lines[i].trim_end() != end {
            let l = lines[i];
            let t = l.trim();
            if variant.is_empty() && t.starts_with("#[") {
                i = past_attribute(&lines, i);
                continue;
            }
            let top = l.starts_with(&inner) && !l[inner.len()..].starts_with(' ');
            if variant.is_empty() && top && !t.is_empty() {
                variant = t.to_string();
            } else if !variant.is_empty() && !t.starts_with("#[") {
                variant.push(' ');
                variant.push_str(t);
            }
            let balanced = |o: char, c: char| variant.matches(o).count() == variant.matches(c).count();
            if !variant.is_empty()
                && balanced('{', '}')
                && balanced('(', ')')
                && (variant.ends_with(',') || variant.ends_with('}'))
            {
                let v = variant.trim_end_matches(',');
                let found = match (v.find('('), v.find('{')) {
                    (Some(p), _) if v.ends_with(')') => Some((&v[..p], words_in(&v[p + 1..v.len() - 1], true))),
                    (_, Some(b)) if v.ends_with('}') => Some((&v[..b], words_in(&v[b + 1..v.len() - 1], false))),
                    _ => None,
                };
                if let Some((head, Some(w))) = found {
                    out.push((format!("{name}::{}", head.trim()), w));
                }
                variant.clear();
            }
            i += 1;
        }
    }
    out
}

/// Errors are typed (ARCHITECTURE.md, each crate's `error.rs`). An error that holds prose is
/// one of these, each for a reason; a new one fails here until it is typed or added with its
/// reason, and one that is gone must leave the list.
#[test]
fn errors_are_typed_and_the_ones_with_words_are_known() {
    // Nothing but words: text that comes from outside (a peer's, the optimiser's, the
    // orchestrator's), a name the user gave, or a fixed rule of the config file.
    let only = [
        // A peer node's own words: its reason for refusing the handshake.
        "PeerFault::HandshakeRefused",
        // The wire decoder's account of which field of a peer's answer is malformed.
        "PeerFault::Undecodable",
        // The optimiser's refusal of a starting point, which it gives as text only.
        "GpError::StartRejected",
        // A run that did not reach its round: the orchestrator's message about the nodes.
        "LaunchError::Drive",
        // A node name the user gave (the message says what a name may hold).
        "TlsError::BadName",
        // A fixed rule of the config file (a `&'static str` that names its keys), under the
        // key `ConfigError::Setting` carries.
        "SettingProblem::Rule",
    ];
    // Words next to typed context (the file, the peer's code): the text is a foreign error's
    // or the peer's own.
    let with_context = [
        // The state directory's file and what the OS or the JSON parser said about it.
        "StoreError::Io",
        "StoreError::Corrupt",
        "StoreError::Tampered",
        // The config file, and what the token or orchestrator setup said.
        "LaunchError::Auth",
        "LaunchError::Orchestrator",
        // The config file, its line and column, and the TOML parser's message.
        "ConfigError::Syntax",
        // A PEM or key file and what is wrong with its content; what rcgen could not build.
        "TlsError::BadFile",
        "TlsError::Generate",
        // A CSV row with another number of fields, and the CSV reader's account of it.
        "TableError::RaggedRow",
        // A name or kernel expression the user gave, and what is wrong with it.
        "ConfigError::Name",
        "KernelSpecError::Initial",
        // The peer's status code (typed) and its own message; the transport's account of a
        // channel it could not build.
        "PeerFault::Status",
        "PeerFault::Channel",
    ];
    let mut found = Vec::new();
    for dir in ["crates", "src"] {
        let mut files = Vec::new();
        rust_files(&root().join(dir), &mut files);
        for f in files.iter().filter(|f| !f.components().any(|c| c.as_os_str() == "tests")) {
            let text = std::fs::read_to_string(f).unwrap();
            // Up to the file's inline test module (a `#[cfg(test)]` item may come earlier).
            found.extend(words_in_errors(text.split("\nmod tests {").next().unwrap_or("")));
        }
    }
    found.sort_by(|a, b| a.0.cmp(&b.0));
    for (kind, list) in [(Words::Only, &only[..]), (Words::WithContext, &with_context[..])] {
        let of_kind: Vec<&String> = found.iter().filter(|(_, w)| *w == kind).map(|(n, _)| n).collect();
        let unknown: Vec<&&String> = of_kind.iter().filter(|n| !list.contains(&n.as_str())).collect();
        assert!(
            unknown.is_empty(),
            "{kind:?}: errors that hold words: {unknown:?}; type them, or list one with its reason"
        );
        let stale: Vec<&&str> = list.iter().filter(|a| !of_kind.iter().any(|n| n == *a)).collect();
        assert!(stale.is_empty(), "{kind:?}: listed but no longer found (remove them): {stale:?}");
    }
}

#[test]
fn the_words_check_can_fail() {
    let planted = r#"
#[derive(Debug, thiserror::Error)]
/// A doc line.
pub(crate) enum E {
    #[error("see https://example.org/{0}")]
    Words(String),
    Typed { n: usize },
    Said {
        message: String,
    },
    Boxed(Box<str>),
    Filed { path: PathBuf, msg: String }, // a comment
    Named { column: String },
}

#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct Bare(pub String);
"#;
    let found = words_in_errors(planted);
    let names: Vec<(&str, &Words)> = found.iter().map(|(n, w)| (n.as_str(), w)).collect();
    assert_eq!(
        names,
        [
            ("E::Words", &Words::Only),
            ("E::Said", &Words::Only),
            ("E::Boxed", &Words::Only),
            ("E::Filed", &Words::WithContext),
            ("Bare", &Words::Only)
        ]
    );
}
