//! The two-party example end to end with real processes: two `node serve` processes on loopback
//! and `dpcotrain run --json` driving them (ports moved off the example's defaults).

use serde_json::Value;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

struct Kill(Child);
impl Drop for Kill {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn bin() -> Command {
    Command::new(env!("CARGO_BIN_EXE_dpcotrain"))
}

#[test]
fn two_party_example_runs_over_grpc() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let ex = root.join("examples/two-party");
    let dir = std::env::temp_dir().join(format!("dpcotrain-node-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let base = 41000 + (std::process::id() % 2000) as u16 * 2;
    let (pa, pb) = (base, base + 1);
    for (file, _) in [("party-a.toml", pa), ("party-b.toml", pb)] {
        let text = std::fs::read_to_string(ex.join(file)).unwrap();
        let text = text
            .replace("50051", &pa.to_string())
            .replace("50052", &pb.to_string())
            .replace("\"data/", &format!("\"{}/data/", ex.display()));
        std::fs::write(dir.join(file), text).unwrap();
    }
    let fed = std::fs::read_to_string(ex.join("federation.toml"))
        .unwrap()
        .replace("50051", &pa.to_string())
        .replace("50052", &pb.to_string());
    std::fs::write(dir.join("federation.toml"), fed).unwrap();
    let _a = Kill(
        bin().args(["node", "serve", "--config"]).arg(dir.join("party-a.toml")).stderr(Stdio::null()).spawn().unwrap(),
    );
    let _b = Kill(
        bin().args(["node", "serve", "--config"]).arg(dir.join("party-b.toml")).stderr(Stdio::null()).spawn().unwrap(),
    );
    // Wait for both nodes to answer Status.
    let start = Instant::now();
    for port in [pa, pb] {
        loop {
            let ok = bin()
                .args(["status", "--node", &format!("http://127.0.0.1:{port}")])
                .output()
                .unwrap()
                .status
                .success();
            if ok {
                break;
            }
            assert!(start.elapsed() < Duration::from_secs(60), "node on port {port} did not come up");
            std::thread::sleep(Duration::from_millis(200));
        }
    }
    let out =
        bin().args(["run", "--rounds", "3", "--json", "--config"]).arg(dir.join("federation.toml")).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    let parties = v["parties"].as_array().unwrap();
    assert_eq!(parties.len(), 2);
    for p in parties {
        assert_eq!(p["rounds"], 3);
        assert!(p["rmse_after"].as_f64().unwrap().is_finite());
        let spent = p["privacy_spent"].as_array().unwrap();
        assert_eq!(spent.len(), 1);
        assert!(spent[0]["epsilon"].as_f64().unwrap() <= 1.0 + 1e-9, "budget respected");
    }
    // A bad config is one clear error naming the file.
    std::fs::write(dir.join("bad.toml"), "name = \"A\"\nfederation_id = \"x\"\n").unwrap();
    let out = bin().args(["node", "serve", "--config"]).arg(dir.join("bad.toml")).output().unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("bad.toml") && err.contains("missing field"), "{err}");
}
