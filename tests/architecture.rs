//! Invariants of the code's shape (ARCHITECTURE.md, "Invariants"), checked on the source:
//! no import circle between the files of a crate, and the protocol at the top level.

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
