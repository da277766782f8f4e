//! deploy/: the Dockerfile, the compose file and the Kubernetes manifests parse, and agree with
//! the node's own config schema — every party config they carry passes `dpcotrain node check`,
//! and the ports, paths, secrets, peers and network policies line up with what it resolves to.

use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;
use yaml_rust2::{Yaml, YamlLoader};

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn docs(path: &Path) -> Vec<Yaml> {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    YamlLoader::load_from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// `dpcotrain node check --offline` of a party config (a file, or TOML text).
fn node_check(config: &Path) -> Value {
    let out = Command::new(env!("CARGO_BIN_EXE_dpcotrain"))
        .args(["node", "check", "--offline", "--config"])
        .arg(config)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}: {}", config.display(), String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout).unwrap()
}

fn node_check_text(text: &str, tag: &str) -> Value {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join(format!("{tag}.toml"));
    std::fs::write(&p, text).unwrap();
    node_check(&p)
}

fn s(y: &Yaml) -> String {
    match y {
        Yaml::String(s) => s.clone(),
        Yaml::Integer(i) => i.to_string(),
        other => panic!("expected a scalar, got {other:?}"),
    }
}

fn list(y: &Yaml) -> Vec<Yaml> {
    y.as_vec().cloned().unwrap_or_default()
}

/// Resolve YAML merge keys (`<<: *anchor`) one level deep (yaml-rust2 keeps them as keys).
fn merged(y: &Yaml) -> Yaml {
    let mut out = yaml_rust2::yaml::Hash::new();
    if let Some(h) = y.as_hash() {
        if let Some(Yaml::Hash(base)) = h.get(&Yaml::String("<<".into())) {
            for (k, v) in base {
                out.insert(k.clone(), v.clone());
            }
        }
        for (k, v) in h {
            if s(k) != "<<" {
                out.insert(k.clone(), v.clone());
            }
        }
    }
    Yaml::Hash(out)
}

fn strings(v: &Value) -> Vec<String> {
    v.as_array().unwrap().iter().map(|x| x.as_str().unwrap().to_string()).collect()
}

fn parent(p: &str) -> String {
    Path::new(p).parent().unwrap().display().to_string()
}

#[test]
fn dockerfile_is_multi_stage_and_runs_the_node() {
    let text = std::fs::read_to_string(root().join("deploy/Dockerfile")).unwrap();
    let froms: Vec<&str> = text.lines().filter(|l| l.starts_with("FROM ")).collect();
    assert!(froms.len() >= 2, "multi-stage: {froms:?}");
    assert!(text.contains("cargo build --release --locked"), "reproducible build from Cargo.lock");
    assert!(text.contains("COPY --from=build"));
    assert!(text.contains(r#"ENTRYPOINT ["dpcotrain"]"#));
    assert!(text.contains(r#"CMD ["node", "serve", "--config", "/config/party.toml"]"#));
    assert!(text.contains("EXPOSE 50051") && text.contains(r#"VOLUME ["/state"]"#));
    assert!(text.lines().any(|l| l.starts_with("USER ") && !l.contains("root")), "runs unprivileged");
}

#[test]
fn compose_file_agrees_with_the_node_configs() {
    let dir = root().join("deploy/compose");
    let compose = &docs(&dir.join("compose.yaml"))[0];
    let services = compose["services"].as_hash().unwrap();
    let named_volumes: BTreeSet<String> = compose["volumes"].as_hash().unwrap().keys().map(s).collect();
    // Each party service: its config (checked by the node itself) and what is mounted.
    let mut parties: BTreeMap<String, (String, Value)> = BTreeMap::new(); // service → (party, check)
    let mut state_volumes = BTreeSet::new();
    for (name, svc) in services {
        let svc = merged(svc);
        let cmd: Vec<String> = list(&svc["command"]).iter().map(s).collect();
        if cmd.first().map(String::as_str) != Some("node") {
            continue;
        }
        assert_eq!(cmd, ["node", "serve", "--config", "/config/party.toml"]);
        assert_eq!(s(&svc["build"]["dockerfile"]), "deploy/Dockerfile");
        let mounts: BTreeMap<String, String> = list(&svc["volumes"])
            .iter()
            .map(|v| {
                let parts: Vec<&str> = v.as_str().unwrap().split(':').collect();
                (parts[1].to_string(), parts[0].to_string())
            })
            .collect();
        let cfg = dir.join(&mounts["/config/party.toml"]);
        let c = node_check(&cfg);
        let port = c["listen_port"].as_u64().unwrap();
        assert!(list(&svc["expose"]).iter().any(|p| s(p) == port.to_string()), "{}: exposes {port}", s(name));
        // The ledger lives in the party's own named volume.
        let state = c["state_dir"].as_str().unwrap();
        assert!(named_volumes.contains(&mounts[state]), "{}: {state} is a named volume", s(name));
        state_volumes.insert(mounts[state].clone());
        // Exactly the secrets the config needs, from the secrets folder, and no other key.
        for f in strings(&c["secret_files"]) {
            assert!(mounts.get(&f).is_some_and(|src| src.starts_with("./secrets/")), "{}: {f} mounted", s(name));
        }
        let keys: Vec<&String> = mounts.keys().filter(|t| t.ends_with(".key")).collect();
        assert_eq!(keys.len(), 1, "{}: only its own private key: {keys:?}", s(name));
        for f in strings(&c["data_files"]) {
            assert!(mounts.contains_key(&parent(&f)), "{}: data folder of {f} mounted", s(name));
        }
        parties.insert(s(name), (c["name"].as_str().unwrap().to_string(), c));
    }
    assert_eq!(parties.len(), 2, "two parties");
    assert_eq!(state_volumes.len(), parties.len(), "each party has its own ledger volume");
    // Peers are reached by service name on the port that service listens on.
    for (svc, (party, c)) in &parties {
        for p in c["peers"].as_array().unwrap() {
            let host = p["host"].as_str().unwrap();
            let (peer, pc) = parties.get(host).unwrap_or_else(|| panic!("{svc}: peer host {host} is no service"));
            assert_eq!(peer, p["name"].as_str().unwrap(), "{svc} ({party}): {host} runs {peer}");
            assert_eq!(p["port"], pc["listen_port"]);
        }
    }
    // The orchestrator: every node, by service and port, with its certificate and tokens.
    let orch = merged(&compose["services"]["orchestrator"]);
    let mounts: BTreeMap<String, String> = list(&orch["volumes"])
        .iter()
        .map(|v| {
            let parts: Vec<&str> = v.as_str().unwrap().split(':').collect();
            (parts[1].to_string(), parts[0].to_string())
        })
        .collect();
    let fed: toml::Value =
        toml::from_str(&std::fs::read_to_string(dir.join(&mounts["/config/federation.toml"])).unwrap()).unwrap();
    let sec = fed["security"]["dir"].as_str().unwrap();
    for f in ["ca.pem", "orchestrator.pem", "orchestrator.key"] {
        assert!(mounts.contains_key(&format!("{sec}/{f}")), "orchestrator {f}");
    }
    let nodes = fed["nodes"].as_array().unwrap();
    assert_eq!(nodes.len(), parties.len());
    for n in nodes {
        let name = n["name"].as_str().unwrap();
        let addr = n["address"].as_str().unwrap();
        let (svc, (_, c)) = parties.iter().find(|(_, (p, _))| p == name).unwrap();
        assert_eq!(addr, format!("https://{svc}:{}", c["listen_port"]));
        assert!(mounts.contains_key(&format!("{sec}/tokens/orchestrator-{name}.token")));
    }
}

/// The objects of a list of manifest files, by (kind, name).
fn objects(files: &[PathBuf]) -> BTreeMap<(String, String), Yaml> {
    let mut out = BTreeMap::new();
    for f in files {
        for d in docs(f) {
            if d.is_badvalue() || d.is_null() {
                continue;
            }
            out.insert((s(&d["kind"]), s(&d["metadata"]["name"])), d);
        }
    }
    out
}

fn labels(y: &Yaml) -> BTreeMap<String, String> {
    y.as_hash().map(|h| h.iter().map(|(k, v)| (s(k), s(v))).collect()).unwrap_or_default()
}

fn selects(selector: &BTreeMap<String, String>, pod: &BTreeMap<String, String>) -> bool {
    selector.iter().all(|(k, v)| pod.get(k) == Some(v))
}

#[test]
fn kubernetes_manifests_agree_with_the_node_configs() {
    let dir = root().join("deploy/k8s");
    let kust = &docs(&dir.join("kustomization.yaml"))[0];
    let files: Vec<PathBuf> = list(&kust["resources"]).iter().map(|r| dir.join(s(r))).collect();
    let obj = objects(&files);
    // Secrets come from the kustomize generator: name → keys.
    let generated: BTreeMap<String, BTreeSet<String>> = list(&kust["secretGenerator"])
        .iter()
        .map(|g| {
            let keys = list(&g["files"]).iter().map(|f| s(f).split('=').next().unwrap().to_string()).collect();
            (s(&g["name"]), keys)
        })
        .collect();
    let ns = s(&kust["namespace"]);
    let sets: Vec<&Yaml> = obj.iter().filter(|((k, _), _)| k == "StatefulSet").map(|(_, v)| v).collect();
    assert_eq!(sets.len(), 2, "one StatefulSet per party");
    // party name → (pod labels, check, service name)
    let mut parties: BTreeMap<String, (BTreeMap<String, String>, Value, String)> = BTreeMap::new();
    for st in sets {
        let spec = &st["spec"]["template"]["spec"];
        let pod = labels(&st["spec"]["template"]["metadata"]["labels"]);
        assert_eq!(st["spec"]["replicas"].as_i64(), Some(1), "one node per party (one ledger owner)");
        let c0 = &list(&spec["containers"])[0];
        let args: Vec<String> = list(&c0["args"]).iter().map(s).collect();
        assert_eq!(args, ["node", "serve", "--config", "/config/party.toml"]);
        let mounts: BTreeMap<String, String> =
            list(&c0["volumeMounts"]).iter().map(|m| (s(&m["mountPath"]), s(&m["name"]))).collect();
        let volumes: BTreeMap<String, Yaml> =
            list(&spec["volumes"]).iter().map(|v| (s(&v["name"]), v.clone())).collect();
        let cm = s(&volumes[&mounts["/config"]]["configMap"]["name"]);
        let text = obj[&("ConfigMap".to_string(), cm.clone())]["data"]["party.toml"].as_str().unwrap().to_string();
        let c = node_check_text(&text, &cm);
        let name = c["name"].as_str().unwrap().to_string();
        let port = c["listen_port"].as_i64().unwrap();
        assert_eq!(list(&c0["ports"])[0]["containerPort"].as_i64(), Some(port), "{name}: container port");
        // The plaintext ops port: declared, probed with the gRPC health service, scraped.
        let ops = c["ops_port"].as_i64().unwrap_or_else(|| panic!("{name}: no ops_listen"));
        assert!(list(&c0["ports"]).iter().any(|p| p["containerPort"].as_i64() == Some(ops)), "{name}: ops port");
        for probe in ["readinessProbe", "livenessProbe"] {
            assert_eq!(c0[probe]["grpc"]["port"].as_i64(), Some(ops), "{name}: {probe} on the ops port");
        }
        let ann = &st["spec"]["template"]["metadata"]["annotations"];
        assert_eq!(s(&ann["prometheus.io/port"]), ops.to_string(), "{name}: scrape port");
        // The ledger on a persistent volume claim template.
        let state = c["state_dir"].as_str().unwrap();
        let claims: Vec<String> =
            list(&st["spec"]["volumeClaimTemplates"]).iter().map(|t| s(&t["metadata"]["name"])).collect();
        assert!(claims.contains(&mounts[state]), "{name}: {state} on a persistent volume");
        // Secrets: the mounted items are exactly the files the config needs, all generated.
        let sec_dir = c["security_dir"].as_str().unwrap();
        let secret = &volumes[&mounts[sec_dir]]["secret"];
        let items: BTreeMap<String, String> =
            list(&secret["items"]).iter().map(|i| (format!("{sec_dir}/{}", s(&i["path"])), s(&i["key"]))).collect();
        let needed: BTreeSet<String> = strings(&c["secret_files"]).into_iter().collect();
        assert_eq!(items.keys().cloned().collect::<BTreeSet<_>>(), needed, "{name}: secret items");
        let gen_keys = &generated[&s(&secret["secretName"])];
        for k in items.values() {
            assert!(gen_keys.contains(k), "{name}: secret key {k} is generated");
        }
        for f in strings(&c["data_files"]) {
            assert!(mounts.contains_key(&parent(&f)), "{name}: data folder of {f}");
        }
        // A Service in front of it on the same port.
        let svc = obj
            .iter()
            .filter(|((k, _), _)| k == "Service")
            .find(|(_, v)| selects(&labels(&v["spec"]["selector"]), &pod))
            .unwrap_or_else(|| panic!("{name}: no Service selects it"));
        assert_eq!(list(&svc.1["spec"]["ports"])[0]["port"].as_i64(), Some(port));
        parties.insert(name, (pod, c, svc.0.1.clone()));
    }
    for (name, (pod, c, _)) in &parties {
        // Peers by Service DNS name and port.
        let mut peer_pods = Vec::new();
        for p in c["peers"].as_array().unwrap() {
            let pn = p["name"].as_str().unwrap();
            let (ppod, pc, psvc) = &parties[pn];
            assert_eq!(p["host"].as_str().unwrap(), format!("{psvc}.{ns}.svc.cluster.local"), "{name} → {pn}");
            assert_eq!(p["port"], pc["listen_port"]);
            peer_pods.push(ppod.clone());
        }
        // The NetworkPolicy admits exactly the named peers and the orchestrator.
        let np = obj
            .iter()
            .filter(|((k, _), _)| k == "NetworkPolicy")
            .find(|(_, v)| {
                labels(&v["spec"]["podSelector"]["matchLabels"]) == {
                    let mut l = pod.clone();
                    l.remove("role");
                    l
                }
            })
            .unwrap_or_else(|| panic!("{name}: no NetworkPolicy"))
            .1;
        let rules = list(&np["spec"]["ingress"]);
        assert_eq!(rules.len(), 2, "{name}: the node's port, and the ops port for monitoring");
        assert_eq!(list(&rules[1]["ports"])[0]["port"].as_i64(), c["ops_port"].as_i64());
        assert!(
            list(&rules[1]["from"]).iter().all(|f| f["podSelector"].is_badvalue()),
            "{name}: ops rule admits no pods of the federation"
        );
        let from: Vec<BTreeMap<String, String>> =
            list(&rules[0]["from"]).iter().map(|f| labels(&f["podSelector"]["matchLabels"])).collect();
        for other in parties.values().map(|(p, _, _)| p) {
            let admitted = from.iter().any(|sel| selects(sel, other));
            assert_eq!(admitted, peer_pods.contains(other), "{name}: admits {other:?}?");
        }
        assert!(from.iter().any(|sel| sel.get("role").map(String::as_str) == Some("orchestrator")));
        assert_eq!(list(&rules[0]["ports"])[0]["port"].as_i64(), c["listen_port"].as_i64());
    }
    // The orchestrator Job reaches every node by Service and carries a token for each.
    let cm = &obj[&("ConfigMap".to_string(), "orchestrator-config".to_string())];
    let fed: toml::Value = toml::from_str(cm["data"]["federation.toml"].as_str().unwrap()).unwrap();
    let job = &obj[&("Job".to_string(), "orchestrator".to_string())];
    let jl = labels(&job["spec"]["template"]["metadata"]["labels"]);
    assert_eq!(jl.get("role").map(String::as_str), Some("orchestrator"));
    let secret =
        list(&job["spec"]["template"]["spec"]["volumes"]).into_iter().find(|v| !v["secret"].is_badvalue()).unwrap();
    let paths: BTreeSet<String> = list(&secret["secret"]["items"]).iter().map(|i| s(&i["path"])).collect();
    for n in fed["nodes"].as_array().unwrap() {
        let name = n["name"].as_str().unwrap();
        let (_, c, svc) = &parties[name];
        assert_eq!(
            n["address"].as_str().unwrap(),
            format!("https://{svc}.{ns}.svc.cluster.local:{}", c["listen_port"])
        );
        assert!(paths.contains(&format!("tokens/orchestrator-{name}.token")));
    }
}

/// The network-namespace federation script (needs root and iproute2; it changes the host's
/// network configuration while it runs, so it is not part of the default test run):
///     CARGO_TARGET_X86_64_UNKNOWN_LINUX_GNU_RUNNER='sudo -E' cargo test --release --test deploy -- --ignored
#[test]
#[ignore]
fn federation_across_network_namespaces() {
    let out = Command::new("bash")
        .arg(root().join("deploy/netns/federation.sh"))
        .args(["3", "--json"])
        .env("DPCOTRAIN_BIN", env!("CARGO_BIN_EXE_dpcotrain"))
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    for p in v["parties"].as_array().unwrap() {
        assert_eq!(p["rounds"], 3);
        assert!(p["privacy_spent"][0]["epsilon"].as_f64().unwrap() <= 1.0 + 1e-9);
    }
}

/// The netns script runs as root: it must never compile (a root-owned target/ breaks the user's
/// next build) — it runs a binary built beforehand.
#[test]
fn netns_script_never_builds_as_root() {
    let script = std::fs::read_to_string(root().join("deploy/netns/federation.sh")).unwrap();
    // Lines that run something (comments and messages may mention cargo).
    let code: Vec<&str> = script.lines().filter(|l| !l.trim_start().starts_with('#') && !l.contains("echo ")).collect();
    assert!(!code.iter().any(|l| l.contains("cargo ")), "the script runs cargo: {code:?}");
    assert!(script.contains("DPCOTRAIN_BIN"));
}

#[test]
fn docker_build_context_excludes_build_output_and_secrets() {
    let ignore = std::fs::read_to_string(root().join(".dockerignore")).unwrap();
    for p in ["target/", "**/secrets/", "**/state/"] {
        assert!(ignore.lines().any(|l| l.trim() == p), ".dockerignore lacks {p}");
    }
    // The image's toolchain is the workspace's minimum Rust version.
    let docker = std::fs::read_to_string(root().join("deploy/Dockerfile")).unwrap();
    let cargo = std::fs::read_to_string(root().join("Cargo.toml")).unwrap();
    let msrv = cargo.lines().find_map(|l| l.strip_prefix("rust-version = ")).unwrap().trim_matches('"');
    assert!(docker.contains(&format!("FROM rust:{msrv}-")), "Dockerfile builds with rust {msrv}");
}

/// CI runs exactly the README's test command, and that command shares the demo's release build
/// (one full build for both README commands).
#[test]
fn ci_runs_the_readme_test_command_on_the_release_build() {
    let readme = std::fs::read_to_string(root().join("README.md")).unwrap();
    let ci = std::fs::read_to_string(root().join(".ci/run")).unwrap();
    let blocks: Vec<&str> = readme.split("```").skip(1).step_by(2).map(str::trim).collect();
    let demo = blocks.iter().find(|b| b.starts_with("cargo run") && b.ends_with("-- demo")).expect("demo command");
    let test = blocks.iter().find(|b| b.starts_with("cargo test")).expect("test command");
    assert!(demo.contains("--release") && test.contains("--release"), "{demo:?} and {test:?} must share a profile");
    let ci_lines: Vec<&str> = ci.lines().map(str::trim).filter(|l| !l.starts_with('#')).collect();
    assert!(ci_lines.contains(test), ".ci/run must run {test:?}: {ci}");
}

/// Every pod in the Kubernetes manifests can start: each volume it references exists (a
/// ConfigMap or PersistentVolumeClaim among the manifests, a Secret from the generator, or a
/// claim template of its StatefulSet), and the container user can read every Secret file
/// it mounts (world-readable, or group-readable with `fsGroup` set, or owner-readable as root).
#[test]
fn kubernetes_pods_can_read_and_find_everything_they_mount() {
    let dir = root().join("deploy/k8s");
    let kust = &docs(&dir.join("kustomization.yaml"))[0];
    let files: Vec<PathBuf> = list(&kust["resources"]).iter().map(|r| dir.join(s(r))).collect();
    let obj = objects(&files);
    let generated: BTreeSet<String> = list(&kust["secretGenerator"]).iter().map(|g| s(&g["name"])).collect();
    let mut pods = 0;
    for ((kind, name), o) in &obj {
        let spec = match kind.as_str() {
            "StatefulSet" | "Job" | "Deployment" => &o["spec"]["template"]["spec"],
            _ => continue,
        };
        pods += 1;
        let templates: BTreeSet<String> =
            list(&o["spec"]["volumeClaimTemplates"]).iter().map(|t| s(&t["metadata"]["name"])).collect();
        let sc = &spec["securityContext"];
        let uid = sc["runAsUser"].as_i64();
        let fs_group = sc["fsGroup"].as_i64();
        assert!(uid.is_some_and(|u| u != 0), "{kind}/{name}: runs as a fixed non-root uid");
        let volumes: BTreeMap<String, Yaml> =
            list(&spec["volumes"]).iter().map(|v| (s(&v["name"]), v.clone())).collect();
        for c in list(&spec["containers"]) {
            for m in list(&c["volumeMounts"]) {
                let vname = s(&m["name"]);
                if templates.contains(&vname) {
                    continue;
                }
                let v = volumes.get(&vname).unwrap_or_else(|| panic!("{kind}/{name}: volume {vname} is not declared"));
                if !v["configMap"].is_badvalue() {
                    let cm = s(&v["configMap"]["name"]);
                    assert!(
                        obj.contains_key(&("ConfigMap".into(), cm.clone())),
                        "{kind}/{name}: ConfigMap {cm} missing"
                    );
                } else if !v["persistentVolumeClaim"].is_badvalue() {
                    let claim = s(&v["persistentVolumeClaim"]["claimName"]);
                    assert!(
                        obj.contains_key(&("PersistentVolumeClaim".into(), claim.clone())),
                        "{kind}/{name}: PersistentVolumeClaim {claim} is referenced but never created"
                    );
                } else if !v["secret"].is_badvalue() {
                    let sec = s(&v["secret"]["secretName"]);
                    assert!(generated.contains(&sec), "{kind}/{name}: Secret {sec} is not generated");
                    // Kubernetes' default mode is 0644; files are owned by root and by the
                    // fsGroup when one is set.
                    let mode = v["secret"]["defaultMode"].as_i64().unwrap_or(0o644);
                    let readable = mode & 0o004 != 0 || (mode & 0o040 != 0 && fs_group.is_some());
                    assert!(
                        readable,
                        "{kind}/{name}: uid {uid:?} cannot read Secret {sec} (mode {mode:o}, fsGroup {fs_group:?})"
                    );
                } else {
                    panic!("{kind}/{name}: volume {vname} of an unexpected kind");
                }
            }
        }
    }
    assert_eq!(pods, 3, "two party StatefulSets and the orchestrator Job");
}

/// The compose services run as the host user (so they can read the host's 0600 secret files)
/// in group 0, and the image makes /state writable by group 0: the ledger volume is writable
/// whatever uid runs it (the convention OpenShift uses for arbitrary uids).
#[test]
fn compose_user_can_write_the_ledger_volume() {
    let dockerfile = std::fs::read_to_string(root().join("deploy/Dockerfile")).unwrap();
    assert!(dockerfile.contains("chown 10001:0 /state") && dockerfile.contains("chmod 0770 /state"), "{dockerfile}");
    let compose = &docs(&root().join("deploy/compose/compose.yaml"))[0];
    for (name, svc) in compose["services"].as_hash().unwrap() {
        let user = s(&merged(svc)["user"]);
        assert!(user.ends_with(":0"), "{}: user {user:?} must be in group 0 to write /state", s(name));
    }
}

/// The sharded grid's Kubernetes Indexed Job and its merge Job: N = completions = parallelism
/// shards, each pod's command runs shard $(JOB_COMPLETION_INDEX)/N into the shared volume, the
/// merge Job lists exactly shards 0..N−1 — and the commands themselves, run here on a small grid
/// with the volume replaced by a temporary folder, shard and merge.
#[test]
fn kubernetes_indexed_job_shards_and_merges_the_grid() {
    let job_docs = docs(&root().join("deploy/k8s/experiment-job.yaml"));
    let job = job_docs.iter().find(|d| s(&d["kind"]) == "Job").expect("a Job");
    let pvc = job_docs.iter().find(|d| s(&d["kind"]) == "PersistentVolumeClaim").expect("a claim");
    let spec = &job["spec"];
    assert_eq!(s(&spec["completionMode"]), "Indexed");
    let n: usize = s(&spec["completions"]).parse().unwrap();
    assert_eq!(s(&spec["parallelism"]), n.to_string());
    let pod = &spec["template"]["spec"];
    let c = &list(&pod["containers"])[0];
    let mount = s(&list(&c["volumeMounts"])[0]["mountPath"]);
    assert_eq!(s(&list(&pod["volumes"])[0]["persistentVolumeClaim"]["claimName"]), s(&pvc["metadata"]["name"]));
    let script = s(&list(&c["args"])[0]);
    assert!(script.contains(&format!("--shard \"${{JOB_COMPLETION_INDEX}}/{n}\"")), "{script}");
    let merge_docs = docs(&root().join("deploy/k8s/experiment-merge.yaml"));
    let merge_args: Vec<String> =
        list(&merge_docs[0]["spec"]["template"]["spec"]["containers"][0]["args"]).iter().map(s).collect();
    let shard_dirs: Vec<String> = (0..n).map(|k| format!("{mount}/shard-{k}")).collect();
    assert_eq!(merge_args[merge_args.len() - n..], shard_dirs[..]);

    // Run the pods' commands on a small grid.
    let tmp = tempfile::tempdir().unwrap();
    let results = tmp.path().to_str().unwrap();
    let small = ["--quick", "--r", "0.9", "--ci", "no", "--masking", "yes", "--combiner", "noisy", "--rounds", "1"];
    for k in 0..n {
        let line = script.replace("${JOB_COMPLETION_INDEX}", &k.to_string()).replace(&mount, results);
        let words: Vec<String> = line.split_whitespace().map(|w| w.trim_matches('"').to_string()).collect();
        assert_eq!(words[..2], ["exec".to_string(), "dpcotrain".to_string()]);
        let out = Command::new(env!("CARGO_BIN_EXE_dpcotrain")).args(&words[2..]).args(small).output().unwrap();
        assert!(out.status.success(), "shard {k}: {}", String::from_utf8_lossy(&out.stderr));
    }
    let args: Vec<String> = merge_args.iter().map(|a| a.replace(&mount, results)).collect();
    let out = Command::new(env!("CARGO_BIN_EXE_dpcotrain")).args(&args).output().unwrap();
    assert!(out.status.success(), "merge: {}", String::from_utf8_lossy(&out.stderr));
    assert!(tmp.path().join("merged/tables.md").exists());
}

/// The Slurm job array and its merge: --array=0-(N−1) matches SHARDS in both scripts, and the
/// scripts themselves, run with bash here (SLURM_ARRAY_TASK_ID set by hand, dpcotrain on the
/// PATH), shard a small grid and merge it.
#[test]
fn slurm_job_array_shards_and_merges_the_grid() {
    let dir = root().join("deploy/slurm");
    let grid = std::fs::read_to_string(dir.join("experiment.sbatch")).unwrap();
    let merge = std::fs::read_to_string(dir.join("merge.sbatch")).unwrap();
    let array = grid.lines().find_map(|l| l.strip_prefix("#SBATCH --array=0-")).expect("#SBATCH --array=0-K");
    let n: usize = array.trim().parse::<usize>().unwrap() + 1;
    for text in [&grid, &merge] {
        assert!(text.lines().any(|l| l.trim() == format!("SHARDS={n}")), "SHARDS={n} in both scripts");
    }
    assert!(std::fs::read_to_string(dir.join("submit.sh")).unwrap().contains("--dependency=\"afterok:${array}\""));
    let tmp = tempfile::tempdir().unwrap();
    let bin_dir = Path::new(env!("CARGO_BIN_EXE_dpcotrain")).parent().unwrap().to_path_buf();
    let path = format!("{}:{}", bin_dir.display(), std::env::var("PATH").unwrap_or_default());
    let small = ["--quick", "--r", "0.9", "--ci", "no", "--masking", "yes", "--combiner", "noisy", "--rounds", "1"];
    for k in 0..n {
        let out = Command::new("bash")
            .arg(dir.join("experiment.sbatch"))
            .args(small)
            .env("SLURM_ARRAY_TASK_ID", k.to_string())
            .env("RESULTS", tmp.path())
            .env("PATH", &path)
            .output()
            .unwrap();
        assert!(out.status.success(), "task {k}: {}", String::from_utf8_lossy(&out.stderr));
    }
    let out = Command::new("bash")
        .arg(dir.join("merge.sbatch"))
        .env("RESULTS", tmp.path())
        .env("PATH", &path)
        .output()
        .unwrap();
    assert!(out.status.success(), "merge: {}", String::from_utf8_lossy(&out.stderr));
    assert!(tmp.path().join("merged/runs.jsonl").exists());
}
