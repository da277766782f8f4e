//! deploy/: the Dockerfile, the compose file and the Kubernetes manifests parse, and agree with
//! the node's own config schema — every party config they carry passes `dpcotrain node check`,
//! and the ports, paths, secrets, peers and network policies line up with what it resolves to.

use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;
use yaml_rust2::{Yaml, YamlLoader};

/// A compose service's volumes, by mount point: target → source.
fn mounts_of(service: &Yaml) -> BTreeMap<String, String> {
    list(&service["volumes"])
        .iter()
        .map(|v| {
            let parts: Vec<&str> = v.as_str().unwrap().split(':').collect();
            (parts[1].to_string(), parts[0].to_string())
        })
        .collect()
}

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn docs(path: &Path) -> Vec<Yaml> {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    YamlLoader::load_from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// The lab binary (`dpcotrain-lab`, crates/lab), built beside the product's by `cargo test
/// --workspace`; the experiment grids the Slurm and Kubernetes paths run are its commands.
fn lab_bin() -> PathBuf {
    let p = Path::new(env!("CARGO_BIN_EXE_dpcotrain")).with_file_name("dpcotrain-lab");
    assert!(
        p.exists(),
        "{} is missing: run the workspace's tests (cargo test --release --workspace) or cargo build -p dpcotrain-lab",
        p.display()
    );
    p
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
    // The image carries the lab too (the Kubernetes grid Jobs run it).
    assert!(text.contains("-p dpcotrain -p dpcotrain-lab") && text.contains("release/dpcotrain-lab /usr/local/bin/"));
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
        let mounts: BTreeMap<String, String> = mounts_of(&svc);
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
    let mounts: BTreeMap<String, String> = mounts_of(&orch);
    let cmd: Vec<String> = list(&orch["command"]).iter().map(s).collect();
    let config = &cmd[cmd.iter().position(|a| a == "--config").expect("run --config") + 1];
    let fed: toml::Value = toml::from_str(&std::fs::read_to_string(dir.join(&mounts[config])).unwrap()).unwrap();
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
    let mut files: Vec<PathBuf> = list(&kust["resources"]).iter().map(|r| dir.join(s(r))).collect();
    files.push(dir.join("orchestrator-job.yaml"));
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
    // The command itself, after nothing but environment settings (`NAME=value`).
    let runs_it = |l: &str| {
        let mut rest = l.trim();
        while let Some((word, tail)) = rest.split_once(' ') {
            if rest == *test || !word.contains('=') || word.starts_with('-') {
                break;
            }
            rest = tail.trim_start();
        }
        rest == *test
    };
    assert!(ci.lines().filter(|l| !l.trim().starts_with('#')).any(runs_it), ".ci/run must run {test:?}: {ci}");
    assert!(ci.contains("DPCOTRAIN_SLURM_TEST=${DPCOTRAIN_SLURM_TEST:-1}"), "CI asks for the real Slurm test: {ci}");
}

/// Every manifest file of deploy/k8s (the kustomization's resources and the files applied on
/// their own), in name order.
fn k8s_files() -> Vec<PathBuf> {
    let dir = root().join("deploy/k8s");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "yaml") && !p.ends_with("kustomization.yaml"))
        .collect();
    files.sort();
    files
}

/// The pod spec of a workload (StatefulSet, Deployment, Job), or None for other kinds.
fn pod_spec(kind: &str, o: &Yaml) -> Option<Yaml> {
    matches!(kind, "StatefulSet" | "Job" | "Deployment").then(|| o["spec"]["template"]["spec"].clone())
}

/// A pod's containers, init containers included.
fn all_containers(spec: &Yaml) -> Vec<Yaml> {
    [list(&spec["initContainers"]), list(&spec["containers"])].concat()
}

/// Every pod in the Kubernetes manifests can start and write where it writes: each volume it
/// references exists (a ConfigMap or PersistentVolumeClaim among the manifests, a Secret from
/// the generator, or a claim template of its StatefulSet); the container user can read every
/// Secret file it mounts (world-readable, or group-readable with `fsGroup` set); every claim it
/// mounts read-write is writable by its non-root user (`fsGroup`: the experiment Jobs had none,
/// so uid 10001 could not create /results/shard-0 on a root-owned volume); and the orchestrator's
/// config sits in a writable claim, where `run` keeps orchestrator-receipts.json beside it (a
/// ConfigMap folder is read-only: the orchestrator failed writing its first receipt).
#[test]
fn kubernetes_pods_can_read_write_and_find_everything_they_mount() {
    let dir = root().join("deploy/k8s");
    let kust = &docs(&dir.join("kustomization.yaml"))[0];
    let obj = objects(&k8s_files());
    let generated: BTreeSet<String> = list(&kust["secretGenerator"]).iter().map(|g| s(&g["name"])).collect();
    let mut pods = BTreeSet::new();
    for ((kind, name), o) in &obj {
        let Some(spec) = pod_spec(kind, o) else { continue };
        pods.insert(format!("{kind}/{name}"));
        let templates: BTreeSet<String> =
            list(&o["spec"]["volumeClaimTemplates"]).iter().map(|t| s(&t["metadata"]["name"])).collect();
        let sc = &spec["securityContext"];
        let uid = sc["runAsUser"].as_i64();
        let fs_group = sc["fsGroup"].as_i64();
        assert!(uid.is_some_and(|u| u != 0), "{kind}/{name}: runs as a fixed non-root uid");
        let volumes: BTreeMap<String, Yaml> =
            list(&spec["volumes"]).iter().map(|v| (s(&v["name"]), v.clone())).collect();
        // mount path → (volume kind, writable)
        let mut mounted: BTreeMap<String, (&str, bool)> = BTreeMap::new();
        for c in all_containers(&spec) {
            let cname = s(&c["name"]);
            for m in list(&c["volumeMounts"]) {
                let vname = s(&m["name"]);
                let writable = m["readOnly"].as_bool() != Some(true);
                let path = s(&m["mountPath"]);
                if templates.contains(&vname) {
                    assert!(fs_group.is_some(), "{kind}/{name}: claim template {vname} is not writable by uid {uid:?}");
                    mounted.insert(path, ("claim", writable));
                    continue;
                }
                let v = volumes.get(&vname).unwrap_or_else(|| panic!("{kind}/{name}: volume {vname} is not declared"));
                if !v["configMap"].is_badvalue() {
                    let cm = s(&v["configMap"]["name"]);
                    assert!(
                        obj.contains_key(&("ConfigMap".into(), cm.clone())),
                        "{kind}/{name}: ConfigMap {cm} missing"
                    );
                    mounted.insert(path, ("configMap", false));
                } else if !v["persistentVolumeClaim"].is_badvalue() {
                    let claim = s(&v["persistentVolumeClaim"]["claimName"]);
                    assert!(
                        obj.contains_key(&("PersistentVolumeClaim".into(), claim.clone())),
                        "{kind}/{name}: PersistentVolumeClaim {claim} is referenced but never created"
                    );
                    let writable = writable && v["persistentVolumeClaim"]["readOnly"].as_bool() != Some(true);
                    if writable {
                        assert!(
                            fs_group.is_some(),
                            "{kind}/{name} ({cname}): uid {uid:?} cannot write claim {claim} at {path}: no fsGroup"
                        );
                    }
                    mounted.insert(path, ("claim", writable));
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
                    mounted.insert(path, ("secret", false));
                } else {
                    panic!("{kind}/{name}: volume {vname} of an unexpected kind");
                }
            }
        }
        // The orchestrator writes its receipts beside its --config.
        for c in list(&spec["containers"]) {
            let args: Vec<String> = list(&c["args"]).iter().map(s).collect();
            if args.first().map(String::as_str) != Some("run") {
                continue;
            }
            let config = &args[args.iter().position(|a| a == "--config").expect("run --config") + 1];
            let folder = parent(config);
            assert_eq!(
                mounted.get(&folder),
                Some(&("claim", true)),
                "{kind}/{name}: {folder} (beside {config}, where run writes orchestrator-receipts.json) must be a writable claim"
            );
            assert!(mounted.contains_key(config.as_str()), "{kind}/{name}: {config} is mounted");
        }
    }
    let want: BTreeSet<String> = [
        "Job/experiment-grid",
        "Job/experiment-merge",
        "Job/orchestrator",
        "StatefulSet/party-a",
        "StatefulSet/party-b",
    ]
    .map(String::from)
    .into();
    assert_eq!(pods, want);
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
    let merge_container = &merge_docs[0]["spec"]["template"]["spec"]["containers"][0];
    let merge_cmd: Vec<String> = list(&merge_container["command"]).iter().map(s).collect();
    assert_eq!(merge_cmd, ["dpcotrain-lab"], "the merge runs the lab binary (the image's entry point is the node's)");
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
        assert_eq!(words[..2], ["exec".to_string(), "dpcotrain-lab".to_string()]);
        let out = Command::new(lab_bin()).args(&words[2..]).args(small).output().unwrap();
        assert!(out.status.success(), "shard {k}: {}", String::from_utf8_lossy(&out.stderr));
    }
    let args: Vec<String> = merge_args.iter().map(|a| a.replace(&mount, results)).collect();
    let out = Command::new(lab_bin()).args(&args).output().unwrap();
    assert!(out.status.success(), "merge: {}", String::from_utf8_lossy(&out.stderr));
    assert!(tmp.path().join("merged/tables.md").exists());
}

/// One recorded `sbatch` call of the stand-in below: its options, the script and the script's
/// arguments.
#[derive(Debug)]
struct Sbatch {
    opts: Vec<String>,
    script: PathBuf,
    args: Vec<String>,
}

impl Sbatch {
    fn opt(&self, name: &str) -> Option<&str> {
        self.opts.iter().find_map(|o| o.strip_prefix(&format!("{name}=")))
    }
}

/// A folder with a stand-in `sbatch` that records its arguments and prints a job id (101, 102,
/// …), so that deploy/slurm/submit.sh runs unchanged and the test then runs the jobs it queued.
struct FakeSlurm {
    dir: tempfile::TempDir,
}

impl FakeSlurm {
    fn new() -> Self {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("bin")).unwrap();
        std::fs::create_dir_all(dir.path().join("calls")).unwrap();
        let sbatch = dir.path().join("bin/sbatch");
        let calls = dir.path().join("calls");
        std::fs::write(
            &sbatch,
            format!(
                "#!/bin/bash\nn=$(( $(ls '{0}' | wc -l) + 1 ))\nprintf '%s\\0' \"$@\" > '{0}'/$n\necho $((100 + n))\n",
                calls.display()
            ),
        )
        .unwrap();
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&sbatch, std::fs::Permissions::from_mode(0o755)).unwrap();
        FakeSlurm { dir }
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    /// PATH with the stand-in sbatch, the system's tools and (if `with_bin`) dpcotrain-lab.
    fn search_path(&self, with_bin: bool) -> String {
        let mut p = vec![self.path("bin").display().to_string()];
        if with_bin {
            p.push(lab_bin().parent().unwrap().display().to_string());
        }
        p.extend(["/usr/local/bin", "/usr/bin", "/bin"].map(String::from));
        p.join(":")
    }

    /// deploy/slurm/submit.sh ARGS, from this folder, with `env` set.
    fn submit(&self, args: &[&str], with_bin: bool, env: &[(&str, &str)]) -> std::process::Output {
        let mut c = Command::new("bash");
        c.arg(root().join("deploy/slurm/submit.sh"))
            .args(args)
            .current_dir(self.dir.path())
            .env_remove("DPCOTRAIN_LAB")
            .env_remove("RESULTS")
            .env("PATH", self.search_path(with_bin));
        for (k, v) in env {
            c.env(k, v);
        }
        c.output().unwrap()
    }

    /// The sbatch calls so far, in order.
    fn calls(&self) -> Vec<Sbatch> {
        let mut files: Vec<(usize, PathBuf)> = std::fs::read_dir(self.path("calls"))
            .unwrap()
            .map(|e| {
                let p = e.unwrap().path();
                (p.file_name().unwrap().to_str().unwrap().parse().unwrap(), p)
            })
            .collect();
        files.sort();
        files
            .into_iter()
            .map(|(_, p)| {
                let raw = std::fs::read(p).unwrap();
                let words: Vec<String> = raw
                    .split(|b| *b == 0)
                    .filter(|w| !w.is_empty())
                    .map(|w| String::from_utf8_lossy(w).into())
                    .collect();
                let i = words.iter().position(|w| !w.starts_with('-')).expect("a script");
                Sbatch { opts: words[..i].to_vec(), script: PathBuf::from(&words[i]), args: words[i + 1..].to_vec() }
            })
            .collect()
    }

    /// Run a queued job's script as Slurm would (task `task` of array job `job`, if given).
    fn run(&self, call: &Sbatch, job: u32, task: Option<usize>) -> std::process::Output {
        let mut c = Command::new("bash");
        c.arg(&call.script).args(&call.args).env("PATH", self.search_path(false)).env("SLURM_JOB_ID", job.to_string());
        if let Some(k) = task {
            c.env("SLURM_ARRAY_TASK_ID", k.to_string()).env("SLURM_ARRAY_JOB_ID", job.to_string());
        }
        if let Some(cpus) = call.opt("--cpus-per-task") {
            c.env("SLURM_CPUS_PER_TASK", cpus);
        }
        c.output().unwrap()
    }
}

fn text(o: &std::process::Output) -> String {
    format!("{}{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr))
}

/// Two folders hold the same files with the same bytes.
fn same_files(a: &Path, b: &Path) {
    let names = |d: &Path| {
        let mut v: Vec<String> =
            std::fs::read_dir(d).unwrap().map(|e| e.unwrap().file_name().into_string().unwrap()).collect();
        v.sort();
        v
    };
    assert_eq!(names(a), names(b), "{} and {}", a.display(), b.display());
    for f in names(a) {
        assert!(std::fs::read(a.join(&f)).unwrap() == std::fs::read(b.join(&f)).unwrap(), "{f} differs");
    }
}

/// The unsharded run of a grid into `out`.
fn unsharded(args: &[&str], out: &Path) {
    let o = Command::new(lab_bin()).arg("experiment").args(args).arg("--out").arg(out).output().unwrap();
    assert!(o.status.success(), "{args:?}: {}", text(&o));
}

/// deploy/slurm/submit.sh, as documented, with sbatch standing in: the user's grid flags reach
/// the tasks once each (the script's defaults only where the user gave none: `--dp calibrated`
/// collided with a hard-coded `--dp thesis` before), every task succeeds, and the merge job —
/// queued `afterany` on the whole array — gives the unsharded run's folder byte for byte. The
/// second form: the ccpp grid, a shard count, and resources, partition, account and QOS.
#[test]
fn slurm_submit_takes_the_users_grid_flags_and_merges_to_the_unsharded_run() {
    for (form, expect_tasks, grid_args) in [
        (
            vec!["--dp", "calibrated", "--epsilon", "1", "--quick"],
            4,
            vec!["simulated", "--dp", "calibrated", "--epsilon", "1", "--quick", "--seeds", "10"],
        ),
        (
            vec![
                "--shards",
                "3",
                "--cpus",
                "1",
                "--mem=1G",
                "--time",
                "10:00",
                "--partition",
                "short",
                "--account",
                "lab",
                "--qos=low",
                "ccpp",
                "--quick",
                "--seeds",
                "3",
                "--dp",
                "thesis",
            ],
            3,
            vec!["ccpp", "--quick", "--seeds", "3", "--dp", "thesis"],
        ),
    ] {
        let slurm = FakeSlurm::new();
        let out = slurm.submit(&form, true, &[]);
        assert!(out.status.success(), "{form:?}: {}", text(&out));
        assert!(text(&out).contains(&format!("({expect_tasks} tasks,")), "{form:?}: {}", text(&out));
        let calls = slurm.calls();
        assert_eq!(calls.len(), 2, "the array and the merge");
        let (array, merge) = (&calls[0], &calls[1]);
        assert_eq!(array.opt("--array"), Some(format!("0-{}", expect_tasks - 1).as_str()));
        // The merge waits for every task however it ends: afterok would wait forever after one failure.
        assert_eq!(merge.opt("--dependency"), Some("afterany:101"));
        let results = slurm.path("results");
        assert_eq!(
            array.args[1..4],
            [results.display().to_string(), expect_tasks.to_string(), grid_args[0].to_string()]
        );
        assert!(Path::new(&array.args[0]).is_absolute(), "the binary by its absolute path: {:?}", array.args);
        assert_eq!(array.args[4..], grid_args[1..], "the grid's flags, each once");
        if form.contains(&"ccpp") {
            for (k, v) in [
                ("--cpus-per-task", "1"),
                ("--mem", "1G"),
                ("--time", "10:00"),
                ("--partition", "short"),
                ("--account", "lab"),
                ("--qos", "low"),
            ] {
                assert_eq!(array.opt(k), Some(v), "{k}");
            }
            for k in ["--partition", "--account", "--qos"] {
                assert_eq!(merge.opt(k), array.opt(k), "the merge job runs in the same place: {k}");
            }
        }
        for k in 0..expect_tasks {
            let o = slurm.run(array, 101, Some(k));
            assert!(o.status.success(), "{form:?} task {k}: {}", text(&o));
        }
        let o = slurm.run(merge, 102, None);
        assert!(o.status.success(), "{form:?} merge: {}", text(&o));
        unsharded(&grid_args, &slurm.path("whole"));
        same_files(&results.join("merged"), &slurm.path("whole"));
    }
}

/// A task that fails or never finishes: the merge job (which Slurm starts once every task has
/// ended) names each such task with its log and fails instead of merging or waiting; submitting
/// the same command again completes the grid (finished shards end at once).
#[test]
fn slurm_merge_names_the_tasks_that_failed() {
    let slurm = FakeSlurm::new();
    let form = ["--shards", "3", "--quick", "--r", "0.9", "--ci", "no", "--masking", "yes"];
    assert!(slurm.submit(&form, true, &[]).status.success());
    let calls = slurm.calls();
    let results = slurm.path("results");
    assert!(slurm.run(&calls[0], 101, Some(0)).status.success());
    std::fs::write(results.join("shard-1"), "in the way").unwrap(); // task 1 cannot create its folder
    assert!(!slurm.run(&calls[0], 101, Some(1)).status.success());
    // Task 2 never ran (cancelled, say).
    let o = slurm.run(&calls[1], 102, None);
    let t = text(&o);
    assert!(!o.status.success(), "{t}");
    assert!(t.contains("task 1 of job 101 failed with exit code 1") && t.contains("grid-101_1.out"), "{t}");
    assert!(t.contains("task 2 of job 101 did not finish"), "{t}");
    assert!(!t.contains("task 0"), "{t}");
    assert!(!results.join("merged").exists(), "nothing merged");
    // The same command again (jobs 103 and 104).
    std::fs::remove_file(results.join("shard-1")).unwrap();
    assert!(slurm.submit(&form, true, &[]).status.success());
    let calls = slurm.calls();
    for k in 0..3 {
        assert!(slurm.run(&calls[2], 103, Some(k)).status.success());
    }
    let o = slurm.run(&calls[3], 104, None);
    assert!(o.status.success(), "{}", text(&o));
    assert!(results.join("merged/tables.md").exists());
}

/// submit.sh refuses, before queueing anything and in one message: no dpcotrain-lab (neither on
/// PATH nor DPCOTRAIN_LAB), a grid flag the CLI refuses, flags the script sets itself, a grid it
/// does not shard, a bad shard count; a task whose node lacks the binary says so and records it.
#[test]
fn slurm_submit_refuses_before_queueing() {
    let slurm = FakeSlurm::new();
    let refused = |o: std::process::Output, what: &[&str]| {
        let t = text(&o);
        assert_eq!(o.status.code(), Some(2), "{what:?}: {t}");
        assert!(what.iter().all(|w| t.contains(w)), "{what:?} not in: {t}");
        assert!(slurm.calls().is_empty(), "nothing queued: {t}");
    };
    refused(slurm.submit(&["--quick"], false, &[]), &["dpcotrain-lab is not on PATH", "DPCOTRAIN_LAB="]);
    refused(
        slurm.submit(&["--quick"], false, &[("DPCOTRAIN_LAB", "/nonexistent/dpcotrain-lab")]),
        &["DPCOTRAIN_LAB=/nonexistent/dpcotrain-lab is not"],
    );
    refused(slurm.submit(&["--quick", "--dpp", "off"], true, &[]), &["grid options are refused", "--dpp"]);
    refused(slurm.submit(&["--quick", "--r", "2"], true, &[]), &["grid options are refused", "--r"]);
    refused(slurm.submit(&["--quick", "--shard", "0/2"], true, &[]), &["--shard is not a grid option here"]);
    refused(slurm.submit(&["--quick", "--out=x"], true, &[]), &["--out is not a grid option here"]);
    refused(slurm.submit(&["--fresh"], true, &[]), &["--fresh is not a grid option here"]);
    refused(slurm.submit(&["frontier", "--quick"], true, &[]), &["'frontier' is not a grid"]);
    refused(slurm.submit(&["--shards", "0", "--quick"], true, &[]), &["--shards must be"]);
    refused(slurm.submit(&["--partition"], true, &[]), &["--partition needs a value"]);
    // Privacy parameters no run could use are refused by the binary's parser, before anything
    // is queued (they used to pass the check, fail every run and leave tasks that "succeeded").
    for (flag, value, why) in [
        ("--epsilon", "-1", "epsilon must be a positive finite number, got -1"),
        ("--epsilon", "0", "epsilon must be a positive finite number, got 0"),
        ("--epsilon", "nan", "epsilon must be a positive finite number, got NaN"),
        ("--epsilon", "inf", "epsilon must be a positive finite number, got inf"),
        ("--delta", "0", "delta must lie strictly between 0 and 1, got 0"),
        ("--delta", "2", "delta must lie strictly between 0 and 1, got 2"),
    ] {
        let form = ["--quick", "--dp", "calibrated", flag, value];
        refused(slurm.submit(&form, true, &[]), &["grid options are refused", flag, why]);
        let o = Command::new(lab_bin())
            .args(["experiment", "simulated", "--quick", "--dp", "calibrated", flag, value, "--out"])
            .arg(slurm.path("direct"))
            .output()
            .unwrap();
        assert_eq!(o.status.code(), Some(2), "{flag} {value}: {}", text(&o));
        assert!(text(&o).contains(why) && !slurm.path("direct").exists(), "{flag} {value}: {}", text(&o));
    }
    let o = Command::new(lab_bin())
        .args(["experiment", "frontier", "--quick", "--epsilons", "1,0", "--out"])
        .arg(slurm.path("frontier"))
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(text(&o).contains("epsilon must be a positive finite number, got 0"), "{}", text(&o));
    // A task bigger than every node would wait in the queue forever: with sinfo listing the
    // partition's nodes (two with 2 CPUs and 8 GB here), it is refused before anything is queued.
    let sinfo = slurm.path("bin/sinfo");
    std::fs::write(&sinfo, "#!/bin/bash\nprintf 'small* 2 8192\\nsmall* 2 8000+\\nbig 64 512000\\nbig 3 8000\\n'\n")
        .unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&sinfo, std::fs::Permissions::from_mode(0o755)).unwrap();
    refused(
        slurm.submit(&["--cpus", "64", "--quick"], true, &[]),
        &["--cpus 64", "the largest have 2 CPUs", "wait forever"],
    );
    refused(slurm.submit(&["--mem", "100G", "--quick"], true, &[]), &["--mem 100G", "8192M", "wait forever"]);
    refused(slurm.submit(&["--partition", "big", "--cpus", "65", "--quick"], true, &[]), &["in partition big"]);
    refused(
        slurm.submit(&["--partition", "none", "--quick"], true, &[]),
        &["--partition none: sinfo lists no node in it"],
    );
    refused(slurm.submit(&["--mem", "lots", "--quick"], true, &[]), &["--mem must be a size"]);
    // The default partition only: a bigger node elsewhere does not make the task fit.
    refused(slurm.submit(&["--cpus", "3", "--quick"], true, &[]), &["the largest have 2 CPUs"]);
    assert!(slurm.submit(&["--cpus", "2", "--mem", "8000M", "--quick"], true, &[]).status.success());
    assert!(slurm.submit(&["--partition", "big", "--cpus", "64", "--quick"], true, &[]).status.success());
    // On a node without the binary, the task says so and records it for the merge.
    let o = Command::new("bash")
        .arg(root().join("deploy/slurm/experiment.sbatch"))
        .args(["/nowhere/dpcotrain-lab", slurm.path("r").to_str().unwrap(), "2", "simulated", "--quick"])
        .env("SLURM_ARRAY_TASK_ID", "1")
        .env("SLURM_ARRAY_JOB_ID", "7")
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(127));
    assert!(text(&o).contains("dpcotrain-lab not found on"), "{}", text(&o));
    assert_eq!(std::fs::read_to_string(slurm.path("r/status/task-1")).unwrap(), "7 127\n");
}

/// deploy/slurm/test-local.sh: a real one-node Slurm cluster (Debian's slurm-wlm and munge,
/// installed by the script when missing and it runs as root with apt-get) runs the documented
/// forms of submit.sh, and each merged folder equals the unsharded run byte for byte; a failed
/// task makes the merge job fail naming it. About a minute (with the install).
///
/// It changes the machine while it runs, so it is opt-in: it runs only with
/// DPCOTRAIN_SLURM_TEST=1 (which `.ci/run` sets), and then a skip fails. Whatever the script
/// installed is taken back on exit: the installed packages, users, groups and service links
/// are the same after the test as before, which the test checks.
#[test]
fn slurm_one_node_cluster_runs_the_documented_forms() {
    let mode = std::env::var("DPCOTRAIN_SLURM_TEST").unwrap_or_default();
    if mode != "1" {
        eprintln!(
            "SKIPPED: slurm_one_node_cluster_runs_the_documented_forms (opt-in: DPCOTRAIN_SLURM_TEST=1 installs slurm-wlm and munge as root and takes them back)"
        );
        return;
    }
    let before = machine_state();
    let out = Command::new("bash")
        .arg(root().join("deploy/slurm/test-local.sh"))
        .env("DPCOTRAIN_LAB", lab_bin())
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap();
    let t = text(&out);
    match out.status.code() {
        Some(0) => eprintln!("{t}"),
        code => panic!("deploy/slurm/test-local.sh exited {code:?}:\n{t}"),
    }
    let after = machine_state();
    for (what, b) in &before {
        let a = &after[what];
        let added: Vec<&String> = a.difference(b).collect();
        let removed: Vec<&String> = b.difference(a).collect();
        assert!(added.is_empty() && removed.is_empty(), "{what} changed: added {added:?}, removed {removed:?}");
    }
}

/// What an install can leave behind: installed packages, users, groups, links under systemd's
/// folders (enabled services), munge's key, and the script's own temporary files.
fn machine_state() -> BTreeMap<&'static str, BTreeSet<String>> {
    let lines = |cmd: &str| -> BTreeSet<String> {
        let o = Command::new("bash").args(["-c", cmd]).output().unwrap();
        String::from_utf8_lossy(&o.stdout).lines().map(String::from).collect()
    };
    BTreeMap::from([
        (
            "packages",
            lines(r#"dpkg-query -W -f='${db:Status-Abbrev} ${Package}\n' 2>/dev/null | awk '$1 == "ii" {print $2}'"#),
        ),
        ("users", lines("cut -d: -f1 /etc/passwd")),
        ("groups", lines("cut -d: -f1 /etc/group")),
        ("service links", lines("find /etc/systemd /lib/systemd/system /usr/lib/systemd/system -type l 2>/dev/null")),
        ("munge key", lines("ls /etc/munge/munge.key 2>/dev/null")),
        ("temporary files", lines(r#"ls -d "${TMPDIR:-/tmp}"/dpcotrain-* 2>/dev/null"#)),
    ])
}

/// YAML as JSON, for the schema validators (keys as strings, as Kubernetes and Compose read
/// them).
fn to_json(y: &Yaml) -> Value {
    match y {
        Yaml::Real(r) => serde_json::json!(r.parse::<f64>().unwrap_or_else(|_| panic!("number {r}"))),
        Yaml::Integer(i) => serde_json::json!(i),
        Yaml::String(t) => Value::String(t.clone()),
        Yaml::Boolean(b) => Value::Bool(*b),
        Yaml::Array(a) => Value::Array(a.iter().map(to_json).collect()),
        Yaml::Hash(h) => Value::Object(h.iter().map(|(k, v)| (s(k), to_json(v))).collect()),
        Yaml::Null => Value::Null,
        other => panic!("not plain data: {other:?}"),
    }
}

/// The Kubernetes API schemas shipped in tests/data/k8s-schema (strict: unknown fields are
/// errors), one validator per kind, and the version they are of.
struct K8sSchemas {
    version: String,
    validators: BTreeMap<String, jsonschema::Validator>,
}

impl K8sSchemas {
    fn load() -> Self {
        let dir = root().join("tests/data/k8s-schema");
        let file = std::fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().path())
            .find(|p| p.extension().is_some_and(|e| e == "json"))
            .expect("a schema file");
        let version =
            file.file_name().unwrap().to_str().unwrap().split('-').next().unwrap().trim_start_matches('v').to_string();
        let all: Value = serde_json::from_slice(&std::fs::read(&file).unwrap()).unwrap();
        let mut validators = BTreeMap::new();
        for (kind, def) in all["kinds"].as_object().unwrap() {
            let schema = serde_json::json!({
                "$schema": all["$schema"],
                "$defs": all["$defs"],
                "$ref": format!("#/$defs/{}", def.as_str().unwrap()),
            });
            let v = jsonschema::validator_for(&schema).unwrap_or_else(|e| panic!("{kind}: {e}"));
            validators.insert(kind.clone(), v);
        }
        K8sSchemas { version, validators }
    }

    /// Why `doc` is not a valid object of its kind (empty when it is).
    fn errors(&self, doc: &Value) -> Vec<String> {
        let kind = doc["kind"].as_str().unwrap_or("(no kind)");
        let Some(v) = self.validators.get(kind) else {
            return vec![format!("no schema for kind {kind}")];
        };
        v.iter_errors(doc).map(|e| format!("{}: {e}", e.instance_path())).collect()
    }
}

/// Every object of every manifest in deploy/k8s is valid against the Kubernetes API's schema
/// of the stated minimum version (tests/data/k8s-schema, strict), and so is what kustomize
/// renders from the kustomization (with its generated Secrets), when kubectl is there to render
/// it. The validator is shown to refuse an unknown field and a wrongly typed one.
#[test]
fn kubernetes_manifests_validate_against_the_api_schemas() {
    let schemas = K8sSchemas::load();
    let readme = std::fs::read_to_string(root().join("deploy/README.md")).unwrap();
    let minor = schemas.version.rsplit_once('.').unwrap().0.to_string();
    assert!(readme.contains(&format!("Kubernetes {minor} or later")), "deploy/README.md states the minimum, {minor}");
    let mut errors = Vec::new();
    let mut seen = BTreeSet::new();
    for f in k8s_files() {
        for d in docs(&f) {
            let j = to_json(&d);
            seen.insert(j["kind"].as_str().unwrap().to_string());
            for e in schemas.errors(&j) {
                errors.push(format!("{} {} {}: {e}", f.display(), j["kind"], j["metadata"]["name"]));
            }
        }
    }
    assert!(errors.is_empty(), "against the {} schemas:\n{}", schemas.version, errors.join("\n"));
    assert!(seen.contains("Job") && seen.contains("StatefulSet") && seen.contains("NetworkPolicy"), "{seen:?}");
    // The validator bites: an unknown field, a string where a number goes.
    let job = docs(&root().join("deploy/k8s/experiment-job.yaml"))
        .into_iter()
        .map(|d| to_json(&d))
        .find(|d| d["kind"] == "Job")
        .unwrap();
    let mut typo = job.clone();
    typo["spec"]["template"]["spec"]["securityContex"] = serde_json::json!({});
    assert!(schemas.errors(&typo).iter().any(|e| e.contains("securityContex")), "{:?}", schemas.errors(&typo));
    let mut wrong = job;
    wrong["spec"]["backoffLimitPerIndex"] = serde_json::json!("three");
    assert!(!schemas.errors(&wrong).is_empty());

    // What `kubectl apply -k deploy/k8s` sends: kustomize's rendering, Secrets included.
    let Some(kubectl) =
        ["/usr/bin/kubectl", "/usr/local/bin/kubectl"].into_iter().map(PathBuf::from).find(|p| p.exists())
    else {
        eprintln!("SKIPPED: kubectl kustomize (no kubectl here); the manifest files were validated");
        return;
    };
    let tmp = tempfile::tempdir().unwrap();
    for f in std::fs::read_dir(root().join("deploy/k8s")).unwrap() {
        let p = f.unwrap().path();
        if p.is_file() {
            std::fs::copy(&p, tmp.path().join(p.file_name().unwrap())).unwrap();
        }
    }
    let certs = Command::new(env!("CARGO_BIN_EXE_dpcotrain"))
        .args(["certs", "--out"])
        .arg(tmp.path().join("secrets"))
        .args([
            "--parties",
            "A,B",
            "--hosts",
            "party-a.dpcotrain.svc.cluster.local,party-b.dpcotrain.svc.cluster.local",
        ])
        .output()
        .unwrap();
    assert!(certs.status.success(), "{}", text(&certs));
    let out = Command::new(kubectl).arg("kustomize").arg(tmp.path()).output().unwrap();
    assert!(out.status.success(), "kubectl kustomize: {}", text(&out));
    let rendered = YamlLoader::load_from_str(&String::from_utf8(out.stdout).unwrap()).unwrap();
    let mut kinds = BTreeMap::new();
    for d in &rendered {
        let j = to_json(d);
        *kinds.entry(j["kind"].as_str().unwrap().to_string()).or_insert(0) += 1;
        let errors = schemas.errors(&j);
        assert!(errors.is_empty(), "rendered {} {}: {errors:?}", j["kind"], j["metadata"]["name"]);
        if j["kind"] != "Namespace" {
            assert_eq!(j["metadata"]["namespace"], "dpcotrain", "{} {}", j["kind"], j["metadata"]["name"]);
        }
    }
    assert_eq!(kinds.get("Secret"), Some(&3), "{kinds:?}");
    assert_eq!(
        kinds.get("Job"),
        None,
        "the orchestrator Job is applied on its own, once the nodes are ready: {kinds:?}"
    );
}

/// What Pod Security "restricted" (Kubernetes 1.29; the baseline rules included) refuses in a
/// pod spec, as messages; empty when the pod is admitted.
fn restricted_violations(spec: &Value) -> Vec<String> {
    let mut v = Vec::new();
    for k in ["hostNetwork", "hostPID", "hostIPC"] {
        if spec[k] == true {
            v.push(format!("{k}: true"));
        }
    }
    let allowed =
        ["configMap", "csi", "downwardAPI", "emptyDir", "ephemeral", "persistentVolumeClaim", "projected", "secret"];
    for vol in spec["volumes"].as_array().into_iter().flatten() {
        for k in vol.as_object().unwrap().keys().filter(|k| *k != "name") {
            if !allowed.contains(&k.as_str()) {
                v.push(format!("volume {}: type {k}", vol["name"]));
            }
        }
    }
    let psc = &spec["securityContext"];
    if psc["sysctls"].as_array().is_some_and(|a| !a.is_empty()) || !psc["seLinuxOptions"].is_null() {
        v.push("pod sysctls or seLinuxOptions".into());
    }
    let containers = ["initContainers", "containers", "ephemeralContainers"]
        .iter()
        .flat_map(|k| spec[*k].as_array().cloned().unwrap_or_default())
        .collect::<Vec<_>>();
    for c in &containers {
        let name = c["name"].as_str().unwrap_or("?");
        let sc = &c["securityContext"];
        if sc["privileged"] == true {
            v.push(format!("{name}: privileged"));
        }
        if sc["allowPrivilegeEscalation"] != false {
            v.push(format!("{name}: allowPrivilegeEscalation is not false"));
        }
        let non_root = sc["runAsNonRoot"] == true || (psc["runAsNonRoot"] == true && sc["runAsNonRoot"] != false);
        if !non_root {
            v.push(format!("{name}: runAsNonRoot is not true"));
        }
        if sc["runAsUser"] == 0 || (sc["runAsUser"].is_null() && psc["runAsUser"] == 0) {
            v.push(format!("{name}: runAsUser 0"));
        }
        let seccomp = if sc["seccompProfile"]["type"].is_null() {
            &psc["seccompProfile"]["type"]
        } else {
            &sc["seccompProfile"]["type"]
        };
        if seccomp != "RuntimeDefault" && seccomp != "Localhost" {
            v.push(format!("{name}: seccompProfile.type is {seccomp}, not RuntimeDefault or Localhost"));
        }
        let caps = &sc["capabilities"];
        if !caps["drop"].as_array().is_some_and(|d| d.iter().any(|x| x == "ALL")) {
            v.push(format!("{name}: capabilities.drop lacks ALL"));
        }
        for a in caps["add"].as_array().into_iter().flatten() {
            if a != "NET_BIND_SERVICE" {
                v.push(format!("{name}: capabilities.add {a}"));
            }
        }
        for p in c["ports"].as_array().into_iter().flatten() {
            if p["hostPort"].as_i64().is_some_and(|h| h != 0) {
                v.push(format!("{name}: hostPort"));
            }
        }
        if !sc["procMount"].is_null() && sc["procMount"] != "Default" || !sc["seLinuxOptions"].is_null() {
            v.push(format!("{name}: procMount or seLinuxOptions"));
        }
        if sc["windowsOptions"]["hostProcess"] == true {
            v.push(format!("{name}: hostProcess"));
        }
    }
    v
}

/// Every pod of every manifest passes Pod Security "restricted", which the namespace enforces;
/// the check is shown to refuse a pod without container security contexts (as every pod was).
/// Images built locally (`:latest`) are not pulled when present (imagePullPolicy IfNotPresent:
/// for `:latest` the default is Always, which fails for an image no registry has).
#[test]
fn kubernetes_pods_meet_pod_security_restricted() {
    let ns = docs(&root().join("deploy/k8s/namespace.yaml"));
    let enforce = ns[0]["metadata"]["labels"]["pod-security.kubernetes.io/enforce"].as_str();
    assert_eq!(enforce, Some("restricted"), "namespace.yaml: the namespace enforces Pod Security restricted");
    let mut pods = 0;
    for f in k8s_files() {
        for d in docs(&f) {
            let kind = s(&d["kind"]);
            let Some(spec) = pod_spec(&kind, &d) else { continue };
            let name = s(&d["metadata"]["name"]);
            pods += 1;
            let spec = to_json(&spec);
            let v = restricted_violations(&spec);
            assert!(v.is_empty(), "{} {kind}/{name}: {v:?}", f.display());
            for c in
                ["initContainers", "containers"].iter().flat_map(|k| spec[*k].as_array().cloned().unwrap_or_default())
            {
                let image = c["image"].as_str().unwrap();
                if image.ends_with(":latest") || !image.contains(':') {
                    assert_eq!(c["imagePullPolicy"], "IfNotPresent", "{kind}/{name} {}: {image}", c["name"]);
                }
            }
            // Without its containers' security contexts the pod is refused.
            let mut bare = spec.clone();
            for k in ["initContainers", "containers"] {
                for c in bare[k].as_array_mut().into_iter().flatten() {
                    c.as_object_mut().unwrap().remove("securityContext");
                }
            }
            let v = restricted_violations(&bare);
            assert!(
                v.iter().any(|m| m.contains("allowPrivilegeEscalation"))
                    && v.iter().any(|m| m.contains("drop lacks ALL")),
                "{v:?}"
            );
        }
    }
    assert_eq!(pods, 5);
}

/// The fenced blocks of deploy/README.md's section `heading` (up to the next `## `).
fn readme_blocks(heading: &str) -> Vec<String> {
    let readme = std::fs::read_to_string(root().join("deploy/README.md")).unwrap();
    let start = readme.find(&format!("\n## {heading}")).unwrap_or_else(|| panic!("no section {heading}"));
    let rest = &readme[start + 1..];
    let section = &rest[..rest[3..].find("\n## ").map_or(rest.len(), |i| i + 3)];
    section.split("```").skip(1).step_by(2).map(|b| b.trim().to_string()).collect()
}

/// Each documented block of kubectl commands applies what it needs in order: every namespaced
/// object comes after the Namespace it lives in (experiment-job.yaml alone failed without
/// namespace.yaml); every manifest is applied by some documented command; the orchestrator Job
/// is not in the kustomization (it failed after its retries, applied before the data was in)
/// and the docs say how to run it once the nodes are ready and how to run it again.
#[test]
fn kubernetes_documented_commands_apply_what_they_need() {
    let dir = root().join("deploy/k8s");
    let kust = &docs(&dir.join("kustomization.yaml"))[0];
    let kust_files: Vec<String> = list(&kust["resources"]).iter().map(s).collect();
    let mut applied = BTreeSet::new();
    let blocks = [readme_blocks("Kubernetes"), readme_blocks("Sharded experiment grids")].concat();
    for block in &blocks {
        let mut namespaces = BTreeSet::new();
        for line in block.lines().map(|l| l.split('#').next().unwrap().trim()) {
            if !line.starts_with("kubectl apply") {
                continue;
            }
            let words: Vec<&str> = line.split_whitespace().collect();
            let mut files = Vec::new();
            for (i, w) in words.iter().enumerate() {
                match *w {
                    "-k" => {
                        assert_eq!(words[i + 1], "deploy/k8s");
                        files.extend(kust_files.iter().map(|f| dir.join(f)));
                        namespaces.insert(s(&kust["namespace"]));
                    }
                    "-f" => files.push(root().join(words[i + 1])),
                    _ => {}
                }
            }
            for f in &files {
                applied.insert(f.file_name().unwrap().to_str().unwrap().to_string());
                for d in docs(f) {
                    if s(&d["kind"]) == "Namespace" {
                        namespaces.insert(s(&d["metadata"]["name"]));
                    } else if let Some(ns) = d["metadata"]["namespace"].as_str() {
                        assert!(
                            namespaces.contains(ns),
                            "`{line}`: {} {} needs namespace {ns} first",
                            s(&d["kind"]),
                            s(&d["metadata"]["name"])
                        );
                    }
                }
            }
        }
    }
    for f in k8s_files() {
        let name = f.file_name().unwrap().to_str().unwrap().to_string();
        assert!(applied.contains(&name), "deploy/README.md applies {name} nowhere");
    }
    for f in &kust_files {
        assert!(docs(&dir.join(f)).iter().all(|d| s(&d["kind"]) != "Job"), "{f}: a Job in the kustomization");
    }
    let all = blocks.join("\n");
    for step in [
        "wait --for=condition=Ready pod -l role=node",
        "apply -f deploy/k8s/orchestrator-job.yaml",
        "delete job orchestrator",
        "-c wait-for-data",
    ] {
        assert!(all.contains(step), "deploy/README.md's Kubernetes commands lack `{step}`");
    }
}

/// The compose file is valid for Compose v1 (Debian 12's docker-compose 1.29.2), whose schema
/// (tests/data/compose) has no top-level `name:` (v1 refused the file), and — where
/// docker-compose is installed — `docker-compose config` accepts it. The documented
/// `docker run … certs` creates ./secrets as the user first (docker would create it as root,
/// where a non-root container cannot write), and the orchestrator's config sits in its own
/// writable volume (`run` writes its receipts beside it).
#[test]
fn compose_file_runs_on_compose_v1_and_v2() {
    let dir = root().join("deploy/compose");
    let compose = &docs(&dir.join("compose.yaml"))[0];
    // YAML merge keys resolved, as docker-compose's YAML loader does.
    let mut j = to_json(compose);
    if let Some(services) = compose["services"].as_hash() {
        for (k, v) in services {
            j["services"][s(k)] = to_json(&merged(v));
        }
    }
    let schema: Value =
        serde_json::from_slice(&std::fs::read(root().join("tests/data/compose/compose_spec-1.29.2.json")).unwrap())
            .unwrap();
    let v = jsonschema::options().with_draft(jsonschema::Draft::Draft4).build(&schema).unwrap();
    let errors: Vec<String> = v.iter_errors(&j).map(|e| format!("{}: {e}", e.instance_path())).collect();
    assert!(errors.is_empty(), "compose.yaml under Compose v1's schema: {errors:?}");
    let mut named = j.clone();
    named["name"] = Value::String("dpcotrain".into());
    assert!(!v.is_valid(&named), "v1's schema refuses a top-level name");
    let env = std::fs::read_to_string(dir.join(".env")).unwrap();
    assert!(env.lines().any(|l| l.trim() == "COMPOSE_PROJECT_NAME=dpcotrain"), "the project name, for v1 and v2");
    if let Some(v1) =
        ["/usr/bin/docker-compose", "/usr/local/bin/docker-compose"].into_iter().find(|p| Path::new(p).exists())
    {
        let out = Command::new(v1).args(["-f", "compose.yaml", "config", "-q"]).current_dir(&dir).output().unwrap();
        assert!(out.status.success(), "docker-compose config: {}", text(&out));
    } else {
        eprintln!("SKIPPED: docker-compose config (no docker-compose here); validated against its schema");
    }
    // The orchestrator's config is in its own named volume.
    let orch = merged(&compose["services"]["orchestrator"]);
    let cmd: Vec<String> = list(&orch["command"]).iter().map(s).collect();
    let config = &cmd[cmd.iter().position(|a| a == "--config").unwrap() + 1];
    let mounts: BTreeMap<String, String> = mounts_of(&orch);
    let volume = &mounts[&parent(config)];
    assert!(
        compose["volumes"].as_hash().unwrap().contains_key(&Yaml::String(volume.clone())),
        "{volume} is a named volume"
    );
    assert!(mounts.contains_key(config.as_str()));
    let dockerfile = std::fs::read_to_string(root().join("deploy/Dockerfile")).unwrap();
    assert!(
        dockerfile.contains(&format!("chown 10001:0 /state {}", parent(config))),
        "the image makes {} writable by group 0",
        parent(config)
    );
    // docker run … certs: ./secrets made by the user before docker would make it as root.
    let block = readme_blocks("Docker Compose").join("\n");
    let lines: Vec<&str> = block.lines().map(|l| l.split("  #").next().unwrap().trim()).collect();
    let run =
        lines.iter().position(|l| l.starts_with("docker run") && l.contains("certs")).expect("docker run … certs");
    assert!(lines[..run].iter().any(|l| l.starts_with("mkdir -p secrets")), "{block}");
    assert!(lines[run].contains(r#"-u "$(id -u):$(id -g)""#), "{}", lines[run]);
}
