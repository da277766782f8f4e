//! The two-party example end to end with real processes: `node serve` processes on loopback
//! with mutual TLS and tokens (secrets generated on first start), `dpcotrain run --json`
//! driving them; a node killed in the middle of a run and restarted; bad configs.

use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

struct Kill(Child);
impl Drop for Kill {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
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

fn bin() -> Command {
    Command::new(env!("CARGO_BIN_EXE_dpcotrain"))
}

/// A copy of examples/two-party in a fresh folder, on ports `pa`, `pb`, with `edit` applied
/// to each party config.
fn setup(tag: &str, pa: u16, pb: u16, edit: impl Fn(String) -> String) -> PathBuf {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let ex = root.join("examples/two-party");
    let dir = test_dir(&format!("node-{tag}"));
    std::fs::create_dir_all(&dir).unwrap();
    let ports = |t: String| t.replace("50051", &pa.to_string()).replace("50052", &pb.to_string());
    for file in ["party-a.toml", "party-b.toml"] {
        let text = std::fs::read_to_string(ex.join(file)).unwrap();
        let text = ports(text).replace("\"data/", &format!("\"{}/data/", ex.display()));
        std::fs::write(dir.join(file), edit(text)).unwrap();
    }
    std::fs::write(dir.join("federation.toml"), ports(std::fs::read_to_string(ex.join("federation.toml")).unwrap()))
        .unwrap();
    dir
}

fn node(dir: &Path, file: &str) -> Kill {
    Kill(bin().args(["node", "serve", "--config"]).arg(dir.join(file)).stderr(Stdio::null()).spawn().unwrap())
}

fn wait_up(dir: &Path, names: &[&str]) {
    let start = Instant::now();
    for name in names {
        loop {
            let out =
                bin().args(["status", "--node", name, "--config"]).arg(dir.join("federation.toml")).output().unwrap();
            if out.status.success() {
                break;
            }
            assert!(start.elapsed() < Duration::from_secs(60), "node {name} did not come up");
            std::thread::sleep(Duration::from_millis(200));
        }
    }
}

fn run(dir: &Path, rounds: u32) -> Output {
    bin()
        .args(["run", "--rounds", &rounds.to_string(), "--json", "--config"])
        .arg(dir.join("federation.toml"))
        .output()
        .unwrap()
}

fn json(out: &Output) -> Value {
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout).unwrap()
}

/// Two ports for test `k` (0 ≤ k < 14) of this test process: 28 per process in 20000–31759,
/// below Linux's ephemeral range (32768–60999), so that no outgoing connection of a parallel
/// test can be holding one when a node binds it.
fn ports(k: u16) -> (u16, u16) {
    assert!(k < 14, "at most 14 port pairs per test process");
    let base = 20000 + (std::process::id() % 420) as u16 * 28 + 2 * k;
    (base, base + 1)
}

#[test]
fn two_party_example_runs_over_mutual_tls() {
    let (pa, pb) = ports(0);
    let dir = setup("example", pa, pb, |t| t);
    let _a = node(&dir, "party-a.toml");
    let _b = node(&dir, "party-b.toml");
    wait_up(&dir, &["A", "B"]);
    // The secrets were generated on first start, keys private to their owner.
    for f in
        ["ca.pem", "A.pem", "A.key", "B.key", "orchestrator.pem", "tokens/A-B.token", "tokens/orchestrator-A.token"]
    {
        assert!(dir.join("secrets").join(f).exists(), "{f}");
    }
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(dir.join("secrets/A.key")).unwrap().permissions().mode();
        assert_eq!(mode & 0o077, 0, "private key readable by others: {mode:o}");
        for token in ["tokens/A-B.token", "tokens/orchestrator-A.token"] {
            let mode = std::fs::metadata(dir.join("secrets").join(token)).unwrap().permissions().mode();
            assert_eq!(mode & 0o077, 0, "{token} readable by others: {mode:o}");
        }
    }
    let v = json(&run(&dir, 3));
    let parties = v["parties"].as_array().unwrap();
    assert_eq!(parties.len(), 2);
    for p in parties {
        assert_eq!(p["rounds"], 3);
        assert!(p["rmse_after"].as_f64().unwrap().is_finite());
        assert!(p["rmse_before"].as_f64().unwrap().is_finite());
        let spent = p["privacy_spent"].as_array().unwrap();
        assert_eq!(spent.len(), 1);
        assert_eq!(spent[0]["releases"], 1, "batches: one release of 25 entities per requester");
        assert!(spent[0]["epsilon"].as_f64().unwrap() <= 1.0 + 1e-9, "budget respected");
    }
    // Running again to the same total is a no-op that reports the same result, with the RMSE
    // of every round (kept in the node's state).
    let again = json(&run(&dir, 3));
    assert_eq!(again["parties"], v["parties"]);
    assert_eq!(again["rounds_run"], 0);
    assert_eq!(again["position_before"], serde_json::json!([3, 3]), "the nodes' true position");
    let human = bin().args(["run", "--rounds", "3", "--config"]).arg(dir.join("federation.toml")).output().unwrap();
    let text = String::from_utf8_lossy(&human.stdout);
    assert!(text.contains("nothing to do: every node had done 3 rounds (target 3)"), "{text}");
    for p in v["parties"].as_array().unwrap() {
        let per_round = p["rmse_per_round"].as_array().unwrap();
        assert_eq!(per_round.len(), 3);
        assert_eq!(per_round[2], p["rmse_after"], "the last round's RMSE is the current one");
    }
    // `status` prints a table for people and JSON with --json.
    let st = bin().args(["status", "--node", "A", "--config"]).arg(dir.join("federation.toml")).output().unwrap();
    let table = String::from_utf8_lossy(&st.stdout);
    assert!(st.status.success());
    assert!(table.contains("party A") && table.contains("RMSE per round") && table.contains("requester"), "{table}");
    assert_eq!(status_json(&dir, "A")["rmse_per_round"], v["parties"][0]["rmse_per_round"]);
    // The protocol is language-neutral: a Python grpcio client built from the .proto alone.
    python_client(&dir);
    // Without the orchestrator's token and certificate a node refuses to talk.
    let out = bin().args(["status", "--node", &format!("https://127.0.0.1:{pa}")]).output().unwrap();
    assert!(!out.status.success());
    let out = bin().args(["status", "--node", &format!("http://127.0.0.1:{pa}")]).output().unwrap();
    assert!(!out.status.success());

    // A bad config is one clear error naming the file.
    std::fs::write(dir.join("bad.toml"), "name = \"A\"\nfederation_id = \"x\"\n").unwrap();
    let out = bin().args(["node", "serve", "--config"]).arg(dir.join("bad.toml")).output().unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("bad.toml") && err.contains("missing field"), "{err}");
    // NaN in a config is refused by name.
    let text = std::fs::read_to_string(dir.join("party-a.toml")).unwrap().replace("epsilon = 1.0", "epsilon = nan");
    std::fs::write(dir.join("nan.toml"), text).unwrap();
    let out = bin().args(["node", "serve", "--config"]).arg(dir.join("nan.toml")).output().unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("nan.toml") && err.contains("privacy.epsilon"), "{err}");
    // The honest-release settings are checked by name too.
    for (from, to, needle) in [
        ("policy = \"batches\"", "policy = \"batches\"\ncap = \"eta=-1\"", "privacy.cap"),
        ("policy = \"batches\"", "policy = \"batches\"\ntheta = \"secret\"", "privacy.theta"),
        ("policy = \"batches\"", "policy = \"batches\"\ntheta = \"select\"", "privacy.theta_epsilon"),
        ("policy = \"batches\"", "policy = \"batches\"\ntheta_epsilon = 0.5", "privacy.theta_epsilon"),
        // The vote and one release at ε = 1 do not fit a budget of ε = 1.
        ("policy = \"batches\"", "policy = \"batches\"\ntheta = \"select\"\ntheta_epsilon = 0.5", "budget_epsilon"),
        ("queries_per_turn = 25", "queries_per_turn = 0", "privacy.queries_per_turn"),
        ("policy = \"batches\"", "policy = \"batches\"\npublic_theta = [1.0, -1.0, 0.1]", "privacy.public_theta"),
        ("policy = \"batches\"", "policy = \"per-query\"\nrelease = \"finite\"", "per-query"),
        ("uncertainty = \"marginal\"", "uncertainty = \"full\"\nanswers = \"likelihood\"", "model.answers"),
        // The functional reading needs what the wire does not carry.
        ("uncertainty = \"marginal\"", "uncertainty = \"marginal\"\nanswers = \"functionals\"", "wire protocol"),
        (
            "uncertainty = \"marginal\"",
            "uncertainty = \"marginal\"\nguard = \"sometimes\"",
            "answer guard \"sometimes\" is not off, loo or loo-test",
        ),
        // Enum settings are checked where the file is parsed: file, line, column and the names.
        ("combiner = \"noisy\"", "combiner = \"noisey\"", "combiner \"noisey\" is not blocky, noisy or hybrid"),
        (
            "mode = \"calibrated\"",
            "mode = \"calibrate\"",
            "privacy.mode \"calibrate\" is not calibrated, thesis or off",
        ),
        // The answer guard reads the labels to choose the model, and per-query releases it.
        (
            "policy = \"batches\"",
            "policy = \"per-query\"\nrelease = \"rkhs\"\ntheta = \"fitted\"\nqueries = \"adaptive\"",
            "model.guard",
        ),
    ] {
        let mut text = std::fs::read_to_string(dir.join("party-a.toml"))
            .unwrap()
            .replace(from, to)
            .replace("state_dir = \"state/A\"", "state_dir = \"state/bad\"");
        if to.contains("per-query") && needle == "model.guard" {
            text = text.replace("uncertainty = \"marginal\"", "uncertainty = \"marginal\"\nguard = \"loo\"");
        }
        std::fs::write(dir.join("honest.toml"), &text).unwrap();
        let out = bin().args(["node", "serve", "--config"]).arg(dir.join("honest.toml")).output().unwrap();
        assert!(!out.status.success(), "{to}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains("honest.toml") && err.contains(needle), "{to}: {err}");
    }
    // Under batches the guard is accepted (the co-trained model is never released).
    let text = std::fs::read_to_string(dir.join("party-a.toml"))
        .unwrap()
        .replace("uncertainty = \"marginal\"", "uncertainty = \"marginal\"\nguard = \"loo\"")
        .replace("state_dir = \"state/A\"", "state_dir = \"state/guard\"");
    assert!(text.contains("guard = \"loo\"") && text.contains("policy = \"batches\""));
    std::fs::write(dir.join("guard.toml"), &text).unwrap();
    let out = bin().args(["node", "check", "--config"]).arg(dir.join("guard.toml")).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    // A second node on the same state directory is refused (one ledger, one owner).
    let out = bin().args(["node", "serve", "--config"]).arg(dir.join("party-a.toml")).output().unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("in use by another running node"), "{err}");
    // Its port, with a state directory of its own: refused with the address (bound before the
    // private fit, so a large view does not make the user wait for this error).
    let text = std::fs::read_to_string(dir.join("party-a.toml"))
        .unwrap()
        .replace("state_dir = \"state/A\"", "state_dir = \"state/port\"");
    std::fs::write(dir.join("port.toml"), &text).unwrap();
    let out = bin().args(["node", "serve", "--config"]).arg(dir.join("port.toml")).output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("cannot listen on 127.0.0.1:") && err.to_lowercase().contains("in use"), "{err}");
    // SIGTERM: the node shuts down gracefully (exit status 0) and its state is on disk.
    #[cfg(unix)]
    {
        let mut a = _a;
        let pid = a.0.id().to_string();
        assert!(Command::new("kill").args(["-TERM", &pid]).status().unwrap().success());
        let start = Instant::now();
        loop {
            if let Some(st) = a.0.try_wait().unwrap() {
                assert!(st.success(), "exit status after SIGTERM: {st}");
                break;
            }
            assert!(start.elapsed() < Duration::from_secs(20), "node did not stop on SIGTERM");
            std::thread::sleep(Duration::from_millis(50));
        }
        assert!(dir.join("state/A/state.json").exists());
    }
}

#[test]
fn a_node_killed_mid_run_resumes_and_the_ledger_shows_each_release_once() {
    // Per-query releases (a new charge whenever a peer's model changed) make the ledger long.
    let per_query = |t: String| {
        t.replace("policy = \"batches\"", "policy = \"per-query\"")
            .replace("epsilon = 1.0\n", "epsilon = 1.0\nbudget_epsilon = 40.0\n")
    };
    let rounds = 10;
    // Reference: an uninterrupted run.
    let (pa, pb) = ports(1);
    let dir = setup("reference", pa, pb, per_query);
    let reference = {
        let _a = node(&dir, "party-a.toml");
        let log = std::fs::File::create(dir.join("b.stderr")).unwrap();
        let _b =
            Kill(bin().args(["node", "serve", "--config"]).arg(dir.join("party-b.toml")).stderr(log).spawn().unwrap());
        wait_up(&dir, &["A", "B"]);
        let reference = json(&run(&dir, rounds));
        // Per-query releases use the label-fitted θ: their ε is not a guarantee, and every
        // place that shows it says so (it was a plain "ε 6.873" outside `status --json`).
        let guaranteed = &reference["parties"][0]["privacy_spent"][0]["release_log"][0]["guaranteed"];
        assert_eq!(guaranteed, false, "{reference}");
        let text = |args: &[&str]| {
            let o = bin().args(args).arg("--config").arg(dir.join("federation.toml")).output().unwrap();
            assert!(o.status.success(), "{args:?}: {}", String::from_utf8_lossy(&o.stderr));
            String::from_utf8_lossy(&o.stdout).into_owned()
        };
        let rerun = text(&["run", "--rounds", &(rounds + 1).to_string()]);
        let status = text(&["status", "--node", "B"]);
        // Rounds are counted from 1 in both (`run` said "ran rounds 10 to 10" after 10 done).
        assert!(rerun.contains("continued an earlier run: every node had done 10 rounds; ran round 11"), "{rerun}");
        assert!(status.contains("rounds done     11 "), "{status}");
        for (what, out) in [("run", &rerun), ("status", &status)] {
            assert!(out.contains("(NOT guaranteed)") && out.contains("NOT guaranteed: some releases"), "{what}: {out}");
            // Each party's row (run) and the requester's row and the total (status).
            let rows: Vec<&str> = out
                .lines()
                .filter(|l| {
                    l.starts_with("A ")
                        || l.starts_with("B ")
                        || l.trim_start().starts_with("A ")
                        || l.contains("together: ε")
                })
                .collect();
            assert!(rows.len() >= 2, "{what}: {out}");
            for line in rows {
                assert!(line.contains("(NOT guaranteed)"), "{what}: an ε without its warning: {line}");
            }
        }
        let serve_log = std::fs::read_to_string(dir.join("b.stderr")).unwrap();
        assert!(serve_log.contains("warning: B: the release uses the label-fitted θ"), "{serve_log}");
        reference
    };
    // `node repair` shows the ledgers it keeps with the same mark.
    let repair = bin().args(["node", "repair", "--config"]).arg(dir.join("party-b.toml")).output().unwrap();
    let said = String::from_utf8_lossy(&repair.stdout);
    assert!(repair.status.success(), "{said}{}", String::from_utf8_lossy(&repair.stderr));
    assert!(said.lines().any(|l| l.contains("ledger kept for A") && l.contains("(NOT guaranteed)")), "{said}");
    // `node check` says it too, on stderr and in its JSON; the default (batches) is a guarantee.
    let check = |file: &Path| {
        let o = bin().args(["node", "check", "--offline", "--config"]).arg(file).output().unwrap();
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        (json(&o), String::from_utf8_lossy(&o.stderr).into_owned())
    };
    let (c, err) = check(&dir.join("party-a.toml"));
    assert_eq!(c["guaranteed"], false);
    assert!(
        err.contains("NOT a guarantee") && c["guarantee_warning"].as_str().unwrap().contains("label-fitted θ"),
        "{err}"
    );
    let (c, err) = check(&Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/two-party/party-a.toml"));
    assert_eq!(c["guaranteed"], true);
    assert!(c["guarantee_warning"].is_null() && !err.contains("NOT"), "{err}");

    // The same federation; B is killed (SIGKILL) after round 4, the orchestrator is started
    // while B is down (so A's turn and B's turn wait on it), and B comes back 1.5 s later.
    let (pa, pb) = ports(2);
    let dir = setup("killed", pa, pb, per_query);
    let _a = node(&dir, "party-a.toml");
    let mut b = node(&dir, "party-b.toml");
    wait_up(&dir, &["A", "B"]);
    json(&run(&dir, 4));
    let _ = b.0.kill();
    let _ = b.0.wait();
    let orchestrator = bin()
        .args(["run", "--rounds", &rounds.to_string(), "--json", "--config"])
        .arg(dir.join("federation.toml"))
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(1500));
    let _b = node(&dir, "party-b.toml");
    let out = orchestrator.wait_with_output().unwrap();
    let resumed = json(&out);
    assert_eq!(resumed["started_at_round"], 4);
    let (r, s) = (&reference["parties"], &resumed["parties"]);
    for i in 0..2 {
        assert_eq!(s[i]["rounds"], rounds);
        assert_eq!(s[i]["rmse_after"], r[i]["rmse_after"], "party {i}: same numbers as the uninterrupted run");
        assert_eq!(s[i]["model_version"], r[i]["model_version"]);
        // Every release is in the ledger exactly once: the same charges as without the crash.
        assert_eq!(s[i]["privacy_spent"], r[i]["privacy_spent"], "party {i}");
        let spent = &s[i]["privacy_spent"][0];
        assert!(spent["releases"].as_u64().unwrap() > 1);
        assert!(spent["rho"].as_f64().unwrap() <= spent["rho_budget"].as_f64().unwrap());
    }
    // The ledger on disk lists distinct release ids.
    let saved = dpcotrain_federation::store::peek(&dir.join("state/B")).unwrap().unwrap();
    let releases = &saved.requesters["A"].ledger.as_ref().unwrap().releases;
    let mut ids: Vec<&str> = releases.iter().map(|r| r.id.as_str()).collect();
    let n = ids.len();
    ids.sort();
    ids.dedup();
    assert_eq!(ids.len(), n, "no release recorded twice");
}

#[test]
fn three_party_example_completes_a_run() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let ex = root.join("examples/three-party");
    let dir = test_dir("node-three");
    std::fs::create_dir_all(&dir).unwrap();
    let base = ports(9).0; // and the next two ports (ports(9).1, ports(10).0)
    let ports = |t: String| {
        t.replace("50061", &base.to_string())
            .replace("50062", &(base + 1).to_string())
            .replace("50063", &(base + 2).to_string())
            .replace("\"data/", &format!("\"{}/data/", ex.display()))
    };
    for f in ["party-a.toml", "party-b.toml", "party-c.toml", "federation.toml"] {
        std::fs::write(dir.join(f), ports(std::fs::read_to_string(ex.join(f)).unwrap())).unwrap();
    }
    let _nodes: Vec<Kill> = ["party-a.toml", "party-b.toml", "party-c.toml"].iter().map(|f| node(&dir, f)).collect();
    wait_up(&dir, &["A", "B", "C"]);
    let v = json(&run(&dir, 3));
    let parties = v["parties"].as_array().unwrap();
    assert_eq!(parties.len(), 3);
    for p in parties {
        assert_eq!(p["rounds"], 3);
        let spent = p["privacy_spent"].as_array().unwrap();
        assert_eq!(spent.len(), 2, "answered both peers");
        for s in spent {
            assert_eq!(s["releases"], 1);
            assert!(s["epsilon"].as_f64().unwrap() <= 1.0 + 1e-9);
        }
    }
    assert!(v["refused"].as_array().unwrap().is_empty(), "{}", v["refused"]);
    // Under batches each party asks each peer once (round 1); rounds 2 and 3 send nothing new
    // because every peer's budget for it is spent: 3 parties × 2 peers × 2 rounds skips.
    let skipped = v["skipped"].as_array().unwrap();
    assert_eq!(skipped.len(), 12, "{skipped:?}");
    assert!(skipped.iter().all(|s| s.as_str().unwrap().contains("budget")));
    // The same figures as text, as a statistician reads them: one verdict per party (helped,
    // HURT or no clear change, against 2 paired SE), the ε of all requesters together, and a
    // line for every party no better than predicting the public mean.
    let out = bin().args(["run", "--rounds", "3", "--config"]).arg(dir.join("federation.toml")).output().unwrap();
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(out.status.success(), "{text}{}", String::from_utf8_lossy(&out.stderr));
    for p in parties {
        let name = p["party"].as_str().unwrap();
        let verdict = text.lines().find(|l| l.starts_with(&format!("{name}: "))).unwrap_or_else(|| panic!("{text}"));
        let (alone, after) = (p["rmse_before"].as_f64().unwrap(), p["rmse_after"].as_f64().unwrap());
        let two_se = 2.0 * p["rmse_change_se"].as_f64().unwrap();
        let expect = if after - alone > two_se {
            "HURT"
        } else if alone - after > two_se {
            "helped"
        } else {
            "no clear change"
        };
        assert!(verdict.contains(expect), "{name}: {verdict}");
        assert!(!verdict.contains('-'), "one minus sign (U+2212): {verdict}");
        let row = text.lines().find(|l| l.starts_with(&format!("{name} "))).unwrap();
        let together = p["privacy_spent_total"]["epsilon"].as_f64().unwrap();
        assert!(together > 1.0 && row.contains(&format!("together {together:.3}")), "{row}");
        let baseline = p["rmse_mean_baseline"].as_f64().unwrap();
        let flagged = text.lines().any(|l| l.starts_with(&format!("{name}: alone")));
        assert_eq!(flagged, alone >= baseline, "{name}: alone {alone} vs mean {baseline}\n{text}");
    }

    // Replay across requesters: C, with its own certificate and its A–C token, asks A under the
    // request id of B's answer. It must not receive B's answer (nor be charged for it).
    let saved = dpcotrain_federation::store::peek(&dir.join("state/A")).unwrap().unwrap();
    let (key, b_answer) = saved.answers.iter().find(|(k, _)| k.starts_with("B\u{1f}")).expect("A answered B");
    let b_id = key.split('\u{1f}').nth(1).unwrap().to_string();
    let secrets = dir.join("secrets");
    let token = std::fs::read_to_string(secrets.join("tokens/A-C.token")).unwrap().trim().to_string();
    let tls = dpcotrain_federation::tls::NodeTls::dev(&secrets, "C").client_config("A").unwrap();
    let addr = format!("https://127.0.0.1:{base}");
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let asked = rt.block_on(async {
        let ch =
            dpcotrain_federation::peer::channel(&addr, Some(&tls), &dpcotrain_federation::Retry::default()).unwrap();
        let mut c = dpcotrain_federation::pb::node_client::NodeClient::new(ch);
        let msg = dpcotrain_federation::pb::PredictRequest {
            request_id: b_id.clone(),
            requester: "C".into(),
            indices: b_answer.indices.iter().map(|&i| i as u64).collect(),
            uncertainty: dpcotrain_federation::pb::Uncertainty::Marginal.into(),
            want_prior: true,
            federation_id: "ccpp-three-party".into(),
            witness: None,
        };
        let req = dpcotrain_federation::auth::request(msg, Some(&token), Duration::from_secs(30)).unwrap();
        c.predict(req).await
    });
    match asked {
        // C's budget at A is spent: a request for indices it was not given is refused.
        Err(status) => assert!(status.message().contains("budget"), "{status:?}"),
        Ok(resp) => assert_ne!(resp.into_inner().mean, b_answer.mean, "C received B's answer"),
    }
    let after = dpcotrain_federation::store::peek(&dir.join("state/A")).unwrap().unwrap();
    assert_eq!(after.requesters["C"].ledger, saved.requesters["C"].ledger, "nothing charged to C");
}

/// Run examples/python/client.py against node A (status as the orchestrator, predict as B),
/// where Python's grpcio and grpcio-tools are installed.
fn python_client(dir: &Path) {
    let has = Command::new("python3").args(["-c", "import grpc, grpc_tools"]).output().map(|o| o.status.success());
    if !matches!(has, Ok(true)) {
        eprintln!("skipped the Python client: `pip install grpcio grpcio-tools` to run it");
        return;
    }
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/python/client.py");
    // Its own TMPDIR, which must be empty again after every call (the stubs' folder used to stay).
    let tmp = tempfile::tempdir().unwrap();
    let python = || {
        let mut c = Command::new("python3");
        c.env("TMPDIR", tmp.path());
        c
    };
    let left_behind = || std::fs::read_dir(tmp.path()).unwrap().count();
    let out = python().arg(&script).arg("--config").arg(dir.join("party-a.toml")).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let st: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(st["party"], "A");
    assert_eq!(st["rounds_done"], 3);
    assert_eq!(left_behind(), 0, "the client left files in TMPDIR");
    // Ask (as B) for three entities A already released to B during the run.
    let saved = dpcotrain_federation::store::peek(&dir.join("state/A")).unwrap().unwrap();
    let released: Vec<String> = saved.requesters["B"].answered[..3].iter().map(|v| v.to_string()).collect();
    let out = python()
        .arg(&script)
        .args(["--as", "B", "--indices", &released.join(","), "--config"])
        .arg(dir.join("party-a.toml"))
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let ans: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(ans["responder"], "A");
    assert_eq!(ans["mean"].as_array().unwrap().len(), 3);
    // B's one release happened during the run; this answer is post-processing.
    assert_eq!(ans["new_release"], false);
    // An index never released to B needs a new release, which B's spent budget refuses: one
    // line naming the code and the node's reason, exit status 1 (not a traceback).
    let fresh = (0..250).find(|i| !saved.requesters["B"].answered.contains(i)).unwrap();
    let out = python()
        .arg(&script)
        .args(["--as", "B", "--indices", &fresh.to_string(), "--config"])
        .arg(dir.join("party-a.toml"))
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.starts_with("error: ") && err.trim().lines().count() == 1, "{err}");
    assert_eq!(left_behind(), 0, "the client left files in TMPDIR after an error");
}

/// `node check` runs every validation `node serve` runs (one code path), except binding the
/// port and contacting peers: typos in strings, a missing target column, a NaN in the data and
/// a test view whose columns are not the training columns are refused by both.
#[test]
fn node_check_refuses_what_serve_refuses() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let data = root.join("examples/two-party/data/party-a");
    let read = |f: &str| std::fs::read_to_string(data.join(f)).unwrap();
    let base = setup("check", 1, 2, |t| t);
    let write = |name: &str, text: String| -> PathBuf {
        let p = base.join(name);
        std::fs::write(&p, text).unwrap();
        p
    };
    let cfg = std::fs::read_to_string(base.join("party-a.toml")).unwrap();
    let train_ok = data.join("train.csv").display().to_string();
    let test_ok = data.join("test.csv").display().to_string();
    // A test view with the training columns in another order is fine (reordered by name).
    let test = read("test.csv");
    let swapped: String = test
        .lines()
        .map(|l| {
            let f: Vec<&str> = l.split(',').collect();
            format!("{},{},{}\n", f[1], f[0], f[2])
        })
        .collect();
    let swapped = write("test-swapped.csv", swapped);
    let renamed = write("test-renamed.csv", test.replacen("AT,V,PE", "AT,RH,PE", 1));
    let mut train = read("train.csv");
    let second_line_end = train.match_indices('\n').nth(1).unwrap().0;
    let third = train[second_line_end + 1..].find(',').unwrap() + second_line_end + 1;
    train.replace_range(second_line_end + 1..third, "NaN");
    let nan = write("train-nan.csv", train);
    let ok = |text: String| write("ok.toml", text);
    let bad = |text: String| write("bad.toml", text);
    let check = |p: &Path| bin().args(["node", "check", "--config"]).arg(p).output().unwrap();

    let out = check(&ok(cfg.clone()));
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let out = check(&ok(cfg.replace(&test_ok, &swapped.display().to_string())));
    assert!(out.status.success(), "reordered test columns: {}", String::from_utf8_lossy(&out.stderr));

    let cases: Vec<(String, &str)> = vec![
        (cfg.replace("combiner = \"noisy\"", "combiner = \"noisey\""), "\"noisey\""),
        (cfg.replace("uncertainty = \"marginal\"", "uncertainty = \"marginall\""), "\"marginall\""),
        (cfg.replace("mode = \"calibrated\"", "mode = \"calibratd\""), "\"calibratd\""),
        (cfg.replace("policy = \"batches\"", "policy = \"once\""), "\"once\""),
        (cfg.replace("combiner = \"noisy\"", "combiner = \"hybrid\""), "under calibrated DP"),
        (
            cfg.replace("budget_epsilon", "x").replace("epsilon = 1.0", "epsilon = 1.0\nbudget_epsilon = 0.5"),
            "every release would be refused",
        ),
        (cfg.replace("target = \"PE\"", "target = \"PX\""), "[data] target = \"PX\": "),
        (cfg.replace("target = \"PE\"", "target = \"PX\""), "no column named \"PX\""),
        (cfg.replace(&train_ok, &nan.display().to_string()), "line 3, column \"AT\" (1)"),
        (cfg.replace(&test_ok, &renamed.display().to_string()), "missing \"V\"; unexpected \"RH\""),
        (cfg.replace("listen = \"127.0.0.1:", "listen = \"127.0.0.1 "), "listen"),
        (
            cfg.replacen("\nlisten = ", "\nops_listen = \"0.0.0.0\"\nlisten = ", 1),
            "ops_listen = \"0.0.0.0\" is not host:port",
        ),
    ];
    for (text, needle) in cases {
        let p = bad(text);
        for cmd in ["check", "serve"] {
            let mut child = bin()
                .args(["node", cmd, "--config"])
                .arg(&p)
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap();
            let start = Instant::now();
            let status = loop {
                if let Some(s) = child.try_wait().unwrap() {
                    break s;
                }
                if start.elapsed() > Duration::from_secs(60) {
                    let _ = child.kill();
                    panic!("node {cmd} accepted a config that should fail ({needle})");
                }
                std::thread::sleep(Duration::from_millis(50));
            };
            let out = child.wait_with_output().unwrap();
            let err = String::from_utf8_lossy(&out.stderr);
            assert_eq!(status.code(), Some(1), "node {cmd} ({needle}): {err}");
            let last = err.trim().lines().last().unwrap_or("");
            assert!(last.starts_with("error: ") && last.contains(needle), "node {cmd}: {err:?} lacks {needle:?}");
        }
    }
}

fn status_json(dir: &Path, name: &str) -> Value {
    let out =
        bin().args(["status", "--json", "--node", name, "--config"]).arg(dir.join("federation.toml")).output().unwrap();
    json(&out)
}

/// A turn in which no peer could be reached (here: B refuses A's handshake because A's pool
/// differs) did not happen: `run` exits 1 naming it, the node records nothing, and once the
/// cause is fixed the same round runs (it was not consumed).
#[test]
fn a_turn_that_did_not_happen_fails_the_run_and_is_not_consumed() {
    let (pa, pb) = ports(3);
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let pool = root.join("examples/two-party/data/party-a/pool.csv");
    let dir = setup("notaken", pa, pb, |t| t);
    let text = std::fs::read_to_string(&pool).unwrap();
    let short: String = text.lines().take(text.lines().count() - 1).map(|l| format!("{l}\n")).collect();
    std::fs::write(dir.join("pool-short.csv"), short).unwrap();
    let good = std::fs::read_to_string(dir.join("party-a.toml")).unwrap();
    let bad = good.replace(&pool.display().to_string(), &dir.join("pool-short.csv").display().to_string());
    assert_ne!(bad, good);
    std::fs::write(dir.join("party-a.toml"), &bad).unwrap();
    let a = node(&dir, "party-a.toml");
    let _b = node(&dir, "party-b.toml");
    wait_up(&dir, &["A", "B"]);
    let out = run(&dir, 1);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("round 0: A's turn did not happen (nothing recorded)"), "{err}");
    // A disagreement in the configurations: running again cannot help until it is fixed.
    assert!(err.contains("the pool has 249 rows there and 250 here"), "{err}");
    assert!(err.contains("running again will not help until the configurations agree"), "{err}");
    assert!(!err.contains("run again to retry"), "{err}");
    assert_eq!(status_json(&dir, "A")["rounds"], 0, "the failed round is not recorded as done");
    // Fix A's pool and restart it: the same round now runs.
    drop(a);
    std::fs::write(dir.join("party-a.toml"), &good).unwrap();
    let _a = node(&dir, "party-a.toml");
    wait_up(&dir, &["A"]);
    let v = json(&run(&dir, 1));
    assert_eq!(v["rounds_run"], 1);
    for p in v["parties"].as_array().unwrap() {
        assert_eq!(p["rounds"], 1);
    }
}

/// `run` refuses to drive a node that serves another federation, and records nothing.
#[test]
fn run_refuses_a_node_of_another_federation() {
    let (pa, pb) = ports(4);
    let dir = setup("otherfed", pa, pb, |t| t);
    let a_cfg = std::fs::read_to_string(dir.join("party-a.toml")).unwrap();
    std::fs::write(dir.join("party-a.toml"), a_cfg.replace("\"ccpp-two-party\"", "\"another-federation\"")).unwrap();
    let _a = node(&dir, "party-a.toml");
    let _b = node(&dir, "party-b.toml");
    wait_up(&dir, &["B"]);
    // A is up once `status` gets far enough to see its federation.
    let start = Instant::now();
    while !String::from_utf8_lossy(
        &bin().args(["status", "--node", "A", "--config"]).arg(dir.join("federation.toml")).output().unwrap().stderr,
    )
    .contains("serves federation")
    {
        assert!(start.elapsed() < Duration::from_secs(60), "node A did not come up");
        std::thread::sleep(Duration::from_millis(200));
    }
    let out = run(&dir, 1);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("serves federation \"another-federation\""), "{err}");
    assert_eq!(err.trim().lines().count(), 1, "one line: {err}");
    // `status` with this federation.toml refuses A the same way (exit 1, one line).
    let out =
        bin().args(["status", "--json", "--node", "A", "--config"]).arg(dir.join("federation.toml")).output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("serves federation \"another-federation\"") && err.trim().lines().count() == 1, "{err}");
    assert_eq!(status_json(&dir, "B")["rounds"], 0);
}

/// A node that is down is waited for with logged retries (also when stderr is not a terminal),
/// and then `run` fails with one error line naming it; nothing is recorded.
#[test]
fn run_logs_retries_for_a_dead_node_and_fails() {
    let (pa, pb) = ports(5);
    let dir = setup("deadnode", pa, pb, |t| t);
    let fed = std::fs::read_to_string(dir.join("federation.toml")).unwrap();
    std::fs::write(dir.join("federation.toml"), fed.replacen("rounds = 1", "rounds = 1\nwait_seconds = 2", 1)).unwrap();
    let _a = node(&dir, "party-a.toml");
    wait_up(&dir, &["A"]);
    let start = Instant::now();
    let out = run(&dir, 1);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    // A hang guard fifteen times the configured wait (wait_seconds = 2), not a speed target.
    assert!(start.elapsed() < Duration::from_secs(30), "waited {:?}", start.elapsed());
    assert!(err.contains("waiting for node B"), "{err}");
    assert!(err.contains("status of B") && err.contains("retrying"), "retries are logged: {err}");
    let last = err.trim().lines().last().unwrap_or("");
    assert!(last.starts_with("error: ") && last.contains("B"), "{last}");
    assert_eq!(status_json(&dir, "A")["rounds"], 0);
}

/// A ledger edited on disk while the node is down (its last release dropped, so ε spent would
/// read 0) is refused at start with one error line naming the file.
#[test]
fn a_node_refuses_a_ledger_edited_on_disk() {
    let (pa, pb) = ports(6);
    let dir = setup("tamper", pa, pb, |t| t);
    let a = node(&dir, "party-a.toml");
    let _b = node(&dir, "party-b.toml");
    wait_up(&dir, &["A", "B"]);
    json(&run(&dir, 1));
    drop(a);
    std::thread::sleep(Duration::from_millis(300));
    let saved = dpcotrain_federation::store::peek(&dir.join("state/A")).unwrap().unwrap();
    assert_eq!(saved.requesters["B"].ledger.as_ref().unwrap().releases.len(), 1);
    // Drop the release in the files' own bytes (a release entry holds no array): its latest
    // record is in the log when one was appended after the snapshot, else in the snapshot.
    let log = dir.join("state/A/state.log");
    let path = if std::fs::read_to_string(&log).is_ok_and(|t| t.contains("\"releases\":[{")) {
        log
    } else {
        dir.join("state/A/state.json")
    };
    let text = std::fs::read_to_string(&path).unwrap();
    let i = text.rfind("\"releases\":[{").unwrap() + "\"releases\":[".len();
    let j = i + text[i..].find(']').unwrap();
    let edited = format!("{}{}", &text[..i], &text[j..]);
    std::fs::write(&path, edited).unwrap();
    let out = bin().args(["node", "serve", "--config"]).arg(dir.join("party-a.toml")).output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    let last = err.trim().lines().last().unwrap_or("");
    assert!(last.contains("state/A/state.") && last.contains("does not match its MAC"), "{err}");
    // node check reports the same.
    let out = bin().args(["node", "check", "--config"]).arg(dir.join("party-a.toml")).output().unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("does not match its MAC"));
}

/// A serving node logs one structured line per RPC (JSON with `--log-format json`): method,
/// caller, request id, code and latency, refusals as warnings — and never a label value.
#[test]
fn a_node_logs_one_line_per_rpc() {
    let (pa, pb) = ports(7);
    let (ops, _) = ports(8);
    // A also serves its operations endpoint (metrics and gRPC health, plaintext).
    let dir = setup("logs", pa, pb, |t| {
        if t.contains(&format!("\nlisten = \"127.0.0.1:{pa}\"")) {
            t.replacen("\nlisten = ", &format!("\nops_listen = \"127.0.0.1:{ops}\"\nlisten = "), 1)
        } else {
            t
        }
    });
    let log = std::fs::File::create(dir.join("a.log")).unwrap();
    let _a = Kill(
        bin()
            .args(["node", "serve", "--log-format", "json", "--config"])
            .arg(dir.join("party-a.toml"))
            .env_remove("RUST_LOG")
            .stderr(log)
            .spawn()
            .unwrap(),
    );
    let _b = node(&dir, "party-b.toml");
    wait_up(&dir, &["A", "B"]);
    json(&run(&dir, 1));
    // A forged token over a valid certificate: refused, and logged as a refusal.
    let secrets = dir.join("secrets");
    let tls = dpcotrain_federation::tls::NodeTls::dev(&secrets, "B").client_config("A").unwrap();
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let forged = rt.block_on(async {
        let addr = format!("https://127.0.0.1:{pa}");
        let ch =
            dpcotrain_federation::peer::channel(&addr, Some(&tls), &dpcotrain_federation::Retry::default()).unwrap();
        let mut c = dpcotrain_federation::pb::node_client::NodeClient::new(ch);
        let token = "f".repeat(64);
        let req = dpcotrain_federation::auth::request(
            dpcotrain_federation::pb::StatusRequest::default(),
            Some(&token),
            Duration::from_secs(10),
        );
        c.status(req.unwrap()).await
    });
    assert_eq!(forged.unwrap_err().code(), tonic::Code::Unauthenticated);
    std::thread::sleep(Duration::from_millis(300));
    let text = std::fs::read_to_string(dir.join("a.log")).unwrap();
    let lines: Vec<Value> = text.lines().filter_map(|l| serde_json::from_str(l).ok()).collect();
    let rpc = |method: &str| -> Vec<&Value> { lines.iter().filter(|l| l["fields"]["rpc"] == method).collect() };
    let predict = rpc("Predict");
    assert!(!predict.is_empty(), "{text}");
    for l in &predict {
        assert_eq!(l["level"], "INFO");
        assert_eq!(l["fields"]["code"], "OK");
        assert!(l["fields"]["caller"].as_str().unwrap().contains('B'));
        assert!(l["fields"]["request"].as_str().unwrap().contains("round"));
        assert!(l["fields"]["ms"].as_f64().unwrap() >= 0.0);
    }
    assert!(!rpc("RunRound").is_empty() && !rpc("Handshake").is_empty(), "{text}");
    assert!(rpc("Status").iter().any(|l| l["level"] == "WARN" && l["fields"]["code"] == "Unauthenticated"), "{text}");
    // No label value of A's training file appears in its log.
    let train = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/two-party/data/party-a/train.csv"),
    )
    .unwrap();
    let labels: Vec<&str> =
        train.lines().skip(1).filter_map(|l| l.rsplit(',').next()).filter(|v| v.len() > 6).collect();
    assert!(!labels.is_empty());
    assert!(labels.iter().all(|v| !text.contains(v)), "a label value in the log");
    // The metrics endpoint counted the same RPCs and shows B's spend on A's labels.
    let metrics = {
        use std::io::{Read, Write};
        let mut s = std::net::TcpStream::connect(("127.0.0.1", ops)).unwrap();
        s.write_all(b"GET /metrics HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n").unwrap();
        let mut raw = String::new();
        s.read_to_string(&mut raw).unwrap();
        raw
    };
    assert!(metrics.starts_with("HTTP/1.1 200"), "{metrics}");
    let value = |series: &str| -> f64 {
        metrics
            .lines()
            .find_map(|l| l.strip_prefix(series).and_then(|v| v.trim().parse().ok()))
            .unwrap_or_else(|| panic!("no {series} in\n{metrics}"))
    };
    assert_eq!(value(r#"dpcotrain_rpc_total{method="Predict",code="Ok"}"#), predict.len() as f64);
    assert!(metrics.lines().any(|l| l.contains("rpc_duration") && l.contains(r#"method="Predict""#)));
    assert_eq!(value(r#"dpcotrain_rpc_total{method="Status",code="Unauthenticated"}"#), 1.0);
    assert!(value(r#"dpcotrain_epsilon_spent{requester="B"}"#) > 0.0);
    assert!(labels.iter().all(|v| !metrics.contains(v)), "a label value in the metrics");
    // A turn's latency (its re-fit depends on the labels) is counted, never timed, here.
    assert!(value(r#"dpcotrain_rpc_total{method="RunRound",code="Ok"}"#) >= 1.0);
    assert!(
        !metrics.lines().any(|l| l.contains("rpc_duration") && l.contains(r#"method="RunRound""#)),
        "RunRound's label-dependent latency is published:\n{metrics}"
    );
}

/// `node check` tells the party's operator how many of its labels the release clips to the
/// declared range (its own model fits them as they are): here a narrow range clips most.
#[test]
fn node_check_counts_the_labels_the_release_clips() {
    let (pa, pb) = ports(11);
    let dir = setup("clip", pa, pb, |t| t.replace("label_range = [-3.0, 3.0]", "label_range = [-0.5, 0.5]"));
    let out = bin().args(["node", "check", "--config"]).arg(dir.join("party-a.toml")).output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    let (rows, clipped) = (v["labels"]["rows"].as_u64().unwrap(), v["labels"]["clipped_by_release"].as_u64().unwrap());
    assert!(clipped > 0 && clipped < rows, "{v}");
    assert!(err.contains(&format!("{clipped} of {rows} training labels lie outside privacy.label_range")), "{err}");
}

/// `node check` names a covariate that takes one value on every labelled row, with the pool
/// entities at another (label-free, for the operator): here party A's V is set to 0.25 on its
/// training rows; party B has none. The warning says what the setting does with it (`node serve`
/// logs the same at start).
#[test]
fn node_check_names_a_covariate_constant_on_the_labelled_rows() {
    let (pa, pb) = ports(11); // `node check` binds nothing: shared with the test above
    let dir = setup("constant", pa, pb, |t| t);
    let ex = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/two-party/data/party-a/train.csv");
    let text = std::fs::read_to_string(ex).unwrap();
    let mut lines = text.lines();
    let mut out = format!("{}\n", lines.next().unwrap());
    for l in lines {
        let f: Vec<&str> = l.split(',').collect();
        out.push_str(&format!("{},0.25,{}\n", f[0], f[2]));
    }
    std::fs::write(dir.join("train-a.csv"), out).unwrap();
    let a = std::fs::read_to_string(dir.join("party-a.toml")).unwrap();
    let a =
        a.lines().map(|l| if l.starts_with("train = ") { "train = \"train-a.csv\"" } else { l }).collect::<Vec<_>>();
    std::fs::write(dir.join("party-a.toml"), a.join("\n")).unwrap();
    let check = |file: &str| {
        let out = bin().args(["node", "check", "--config"]).arg(dir.join(file)).output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr).to_string();
        assert!(out.status.success(), "{err}");
        (serde_json::from_slice::<Value>(&out.stdout).unwrap(), err)
    };
    let (v, err) = check("party-a.toml");
    assert_eq!(
        v["constant_covariates"],
        serde_json::json!([{"column": "V", "pool_rows_elsewhere": 250, "pool_rows": 250}])
    );
    assert!(
        err.contains("covariate \"V\" takes one value on every labelled row and another at 250 of 250 pool entities"),
        "{err}"
    );
    assert!(err.contains("unseen_covariates = \"drop\" (the default) reads every value as the one seen"), "{err}");
    let (v, err) = check("party-b.toml");
    assert_eq!(v["constant_covariates"], serde_json::json!([]));
    assert!(!err.contains("takes one value"), "{err}");
}

/// 1,020 connections that never start their TLS handshake, from 16 addresses (127.0.0.2–17,
/// under the per-address cap of 64 each), against a node whose open-files limit is 1,024 (soft
/// and hard, so it cannot raise it): silent connections may hold at most 896 descriptors, a new
/// one evicts the oldest, and the rest close after the first-bytes deadline, so `status` from
/// another address answers within 5 s, `/metrics` too, and a round runs. (From one address the
/// per-address cap sufficed; from 16 the flood took every descriptor and `status` timed out.)
#[cfg(target_os = "linux")]
#[test]
fn a_half_open_flood_at_ulimit_1024_leaves_the_node_serving() {
    use std::io::{Read, Write};
    use std::os::unix::process::CommandExt;
    let (pa, pb) = ports(9);
    let (ops, _) = ports(12);
    let dir = setup("flood", pa, pb, |t| {
        if t.contains(&format!("\nlisten = \"127.0.0.1:{pa}\"")) {
            t.replacen("\nlisten = ", &format!("\nops_listen = \"127.0.0.1:{ops}\"\nlisten = "), 1)
        } else {
            t
        }
    });
    let mut cmd = bin();
    cmd.args(["node", "serve", "--config"]).arg(dir.join("party-a.toml")).stderr(Stdio::null());
    // SAFETY: between fork and exec the closure only calls setrlimit (async-signal-safe) on a
    // struct it owns.
    unsafe {
        cmd.pre_exec(|| {
            let lim = libc::rlimit { rlim_cur: 1024, rlim_max: 1024 };
            if libc::setrlimit(libc::RLIMIT_NOFILE, &raw const lim) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let _a = Kill(cmd.spawn().unwrap());
    let _b = node(&dir, "party-b.toml");
    wait_up(&dir, &["A", "B"]);
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let flood: Vec<tokio::net::TcpStream> = rt.block_on(async {
        let mut held = Vec::new();
        for i in 0..1020 {
            let s = tokio::net::TcpSocket::new_v4().unwrap();
            s.bind(format!("127.0.0.{}:0", 2 + i % 16).parse().unwrap()).unwrap();
            if let Ok(Ok(c)) =
                tokio::time::timeout(Duration::from_secs(2), s.connect(format!("127.0.0.1:{pa}").parse().unwrap()))
                    .await
            {
                held.push(c);
            }
        }
        held
    });
    assert!(flood.len() >= 1000, "the flood opened only {} connections", flood.len());
    // Served under the flood: `status` succeeds (its own call deadlines bound it), and the
    // operations port answers before a generous hang guard (not a speed target).
    let out = bin().args(["status", "--node", "A", "--config"]).arg(dir.join("federation.toml")).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let mut m = std::net::TcpStream::connect(("127.0.0.1", ops)).unwrap();
    m.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
    m.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").unwrap();
    let mut body = String::new();
    m.read_to_string(&mut body).unwrap();
    assert!(body.starts_with("HTTP/1.1 200") && body.contains("dpcotrain_"), "{body}");
    json(&run(&dir, 1));
    drop(flood);
}

/// A node whose state went back (its log lost its last entry, as a restore of an older copy
/// does) starts, but the orchestrator's head receipt stops it: `status` and `run` fail with
/// DATA_LOSS and say how to recover. `node repair --adopt-witnessed --write` charges the spend
/// the receipt proves; then the node serves again, its ledger counting at least what was spent.
#[test]
fn a_rolled_back_node_is_stopped_by_the_orchestrators_receipt_until_the_spend_is_adopted() {
    let (pa, pb) = ports(13);
    let dir = setup("rollback", pa, pb, |t| t);
    let a = node(&dir, "party-a.toml");
    let _b = node(&dir, "party-b.toml");
    wait_up(&dir, &["A", "B"]);
    json(&run(&dir, 1));
    let spent = status_json(&dir, "A")["privacy_spent_total"]["rho"].as_f64().unwrap();
    assert!(spent > 0.0);
    assert!(dir.join("orchestrator-receipts.json").exists());
    drop(a);
    std::thread::sleep(Duration::from_millis(300));
    // The last entry of A's log (its release to B) is lost.
    let log = dir.join("state/A/state.log");
    let text = std::fs::read_to_string(&log).unwrap();
    let cut = text[..text.len() - 1].rfind('\n').map_or(0, |i| i + 1);
    std::fs::write(&log, &text[..cut]).unwrap();
    let a = node(&dir, "party-a.toml");
    let status =
        || bin().args(["status", "--node", "A", "--config"]).arg(dir.join("federation.toml")).output().unwrap();
    let start = Instant::now();
    let out = loop {
        let out = status();
        let err = String::from_utf8_lossy(&out.stderr).to_string();
        if out.status.success() || err.contains("DataLoss") {
            break out;
        }
        assert!(start.elapsed() < Duration::from_secs(60), "A did not come up: {err}");
        std::thread::sleep(Duration::from_millis(200));
    };
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "a rolled-back node passed the orchestrator's check: {err}");
    assert!(err.contains("behind a receipt it signed") && err.contains("node repair"), "{err}");
    let out = run(&dir, 2);
    assert_eq!(out.status.code(), Some(1));
    drop(a);
    std::thread::sleep(Duration::from_millis(300));
    let repair = bin()
        .args(["node", "repair", "--adopt-witnessed", "--write", "--config"])
        .arg(dir.join("party-a.toml"))
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&repair.stdout);
    assert!(repair.status.success(), "{said}{}", String::from_utf8_lossy(&repair.stderr));
    assert!(said.contains("adopted"), "{said}");
    let _a = node(&dir, "party-a.toml");
    let start = Instant::now();
    loop {
        let out = status();
        if out.status.success() {
            break;
        }
        let err = String::from_utf8_lossy(&out.stderr).to_string();
        assert!(start.elapsed() < Duration::from_secs(60), "A did not come up after the repair ({said}): {err}");
        std::thread::sleep(Duration::from_millis(200));
    }
    json(&run(&dir, 2));
    let now = status_json(&dir, "A")["privacy_spent_total"]["rho"].as_f64().unwrap();
    // `run`'s table shows each node's ε per requester and all requesters together.
    let out = bin().args(["run", "--rounds", "2", "--config"]).arg(dir.join("federation.toml")).output().unwrap();
    let table = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success() && table.lines().any(|l| l.starts_with("A ") && l.contains("; together ")), "{table}");
    assert!(now >= spent * (1.0 - 1e-12), "the ledger counts {now}, less than the {spent} spent");
}

/// `node repair --adopt-witnessed` adopts only receipts the node signed: a forged one (noted
/// because it claimed more than the ledger counts) used to be adopted unchecked, and one at
/// entry 2^64 − 1 wrapped the entry numbering to 0, after which the node refused every peer.
/// A receipt no chain can reach is refused even with --adopt-unverified; an unverifiable but
/// plausible one only with it.
#[test]
fn node_repair_adopts_only_receipts_the_node_can_trust() {
    let dir = setup("forged", 1, 2, |t| t);
    let state = dir.join("state/A");
    std::fs::create_dir_all(&state).unwrap();
    let note = |seq: u64| {
        let w = serde_json::json!({"B": {"seq": seq, "releases": 1, "rho": 0.25, "mac": "00".repeat(32)}});
        std::fs::write(state.join("witnessed.json"), w.to_string()).unwrap();
    };
    let repair = |extra: &[&str]| {
        let o = bin()
            .args(["node", "repair", "--adopt-witnessed", "--write"])
            .args(extra)
            .arg("--config")
            .arg(dir.join("party-a.toml"))
            .output()
            .unwrap();
        (o.status.code(), format!("{}{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr)))
    };
    note(u64::MAX);
    for extra in [&[][..], &["--adopt-unverified"][..]] {
        let (code, said) = repair(extra);
        assert_eq!(code, Some(1), "{extra:?}: {said}");
        assert!(said.contains("beyond the largest a chain may reach") && said.contains("stay noted"), "{said}");
        assert!(!state.join("state.json").exists(), "{extra:?}: a state was written: {said}");
    }
    note(7);
    let (code, said) = repair(&[]);
    assert_eq!(code, Some(1), "{said}");
    assert!(said.contains("cannot verify the receipt") && said.contains("--adopt-unverified"), "{said}");
    assert!(!state.join("state.json").exists());
    let (code, said) = repair(&["--adopt-unverified"]);
    assert_eq!(code, Some(0), "{said}");
    let saved = dpcotrain_federation::store::peek(&state).unwrap().unwrap();
    let rho: f64 = saved.requesters["B"].ledger.as_ref().unwrap().rho_spent();
    assert!(rho >= 0.25 * (1.0 - 1e-12), "the claimed spend is charged: {rho}");
    let envelope: Value = serde_json::from_slice(&std::fs::read(state.join("state.json")).unwrap()).unwrap();
    assert_eq!(envelope["seq"], 8, "numbered after the receipt, not wrapped");
}
