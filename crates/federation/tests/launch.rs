//! A node started from its `party.toml` without the binary ([`launch`]): it serves, charges its
//! ledger, and a second launch from the same config resumes the saved state; a bad config is a
//! typed error naming the file and field.

use dpcotrain_cotrain::table::write_csv;
use dpcotrain_cotrain::{SimConfig, simulate};
use dpcotrain_federation::config::{ConfigError, DataConfig, PartyConfig, PeerConfig, load, to_toml};
use dpcotrain_federation::launch::{LaunchError, launch};
use dpcotrain_federation::pb::node_client::NodeClient;
use dpcotrain_federation::{Agreement, pb, serve};
use nalgebra::DMatrix;
use std::path::{Path, PathBuf};

/// Party A's view of a small simulated scenario as CSV files, and its config (insecure,
/// loopback, free port) written as TOML; returns the config's path.
fn write_node(dir: &Path) -> PathBuf {
    let sc = simulate(&SimConfig { n_obs: 30, n_pool: 40, n_test: 20, seed: 9, ..SimConfig::default() }).unwrap();
    let a = &sc.parties[0];
    let with_y = |x: &DMatrix<f64>, y: &nalgebra::DVector<f64>| {
        let mut m = DMatrix::zeros(x.nrows(), x.ncols() + 1);
        m.columns_mut(0, x.ncols()).copy_from(x);
        m.column_mut(x.ncols()).copy_from(y);
        m
    };
    let mut header = a.columns.clone();
    header.push("y".into());
    write_csv(&dir.join("train.csv"), &header, &with_y(&a.x_train, &a.y_train)).unwrap();
    write_csv(&dir.join("test.csv"), &header, &with_y(&a.x_test, &a.y_test)).unwrap();
    write_csv(&dir.join("pool.csv"), &a.columns, &a.x_pool).unwrap();
    let cfg = PartyConfig {
        name: a.name.clone(),
        federation_id: "launch-test".into(),
        listen: "127.0.0.1:0".parse().unwrap(),
        ops_listen: None,
        data: DataConfig {
            train: "train.csv".into(),
            pool: "pool.csv".into(),
            test: "test.csv".into(),
            target: "y".into(),
            y_mean: 0.0,
            y_scale: 1.0,
        },
        model: Default::default(),
        privacy: Default::default(),
        peers: vec![PeerConfig { name: "B".into(), address: "http://127.0.0.1:9".into() }],
        seed: Some(9),
        state_dir: None,
        security: None,
        insecure: true,
    };
    let path = dir.join("party.toml");
    std::fs::write(&path, to_toml("party A (test)", &cfg).unwrap()).unwrap();
    path
}

/// Launch from the config, serve, and return (address, agreement, stop sender, server task).
async fn start(path: &Path) -> (String, Agreement, tokio::sync::oneshot::Sender<()>, tokio::task::JoinHandle<()>) {
    let cfg: PartyConfig = load(path).unwrap();
    let node = launch(&cfg, path).await.unwrap();
    let addr = format!("http://{}", node.listener.local_addr().unwrap());
    let agreement = node.service.agreement.clone();
    assert_eq!(agreement, Agreement::of(&node.service.party.lock().unwrap(), &cfg.federation_id, 0.0, 1.0));
    let (tx, rx) = tokio::sync::oneshot::channel::<()>();
    let task = tokio::spawn(async move {
        serve(node.service, node.listener, node.tls, async {
            let _ = rx.await;
        })
        .await
        .unwrap();
    });
    (addr, agreement, tx, task)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_launched_from_its_config_serves_and_resumes_its_ledger() {
    let dir = tempfile::tempdir().unwrap();
    let path = write_node(dir.path());
    let (addr, agreement, stop, task) = start(&path).await;
    let mut c = NodeClient::connect(addr).await.unwrap();
    assert!(c.handshake(agreement.to_pb("B")).await.unwrap().into_inner().accepted);
    let ask = pb::PredictRequest {
        request_id: "r1".into(),
        requester: "B".into(),
        indices: vec![1, 2, 3],
        uncertainty: pb::Uncertainty::Marginal.into(),
        want_prior: true,
        federation_id: "launch-test".into(),
        witness: None,
    };
    let first = c.predict(ask.clone()).await.unwrap().into_inner();
    let spent = c.status(pb::StatusRequest::default()).await.unwrap().into_inner().spend;
    assert_eq!(spent.len(), 1);
    assert!((spent[0].epsilon - 1.0).abs() < 1e-6, "the default honest release spends ε = 1: {}", spent[0].epsilon);
    let _ = stop.send(());
    task.await.unwrap();

    // Launched again from the same config: the state directory brings back the ledger and the
    // released answer (a retry gets the same bytes, nothing is charged again).
    let (addr, agreement, stop, task) = start(&path).await;
    let mut c = NodeClient::connect(addr).await.unwrap();
    assert!(c.handshake(agreement.to_pb("B")).await.unwrap().into_inner().accepted);
    let again = c.predict(ask).await.unwrap().into_inner();
    assert_eq!(again.mean, first.mean);
    let spent2 = c.status(pb::StatusRequest::default()).await.unwrap().into_inner().spend;
    assert_eq!(spent2[0].release_log.len(), spent[0].release_log.len());
    assert_eq!(spent2[0].rho.to_bits(), spent[0].rho.to_bits());
    let _ = stop.send(());
    task.await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_configs_are_typed_errors_that_name_the_file_and_field() {
    let dir = tempfile::tempdir().unwrap();
    let path = write_node(dir.path());
    let text = std::fs::read_to_string(&path).unwrap();

    // A schema error: file, line and column.
    let bad = dir.path().join("syntax.toml");
    std::fs::write(&bad, text.replace("insecure = true", "insecure = \"yes\"")).unwrap();
    match load::<PartyConfig>(&bad) {
        Err(e @ ConfigError::Syntax { position: Some(_), .. }) => {
            // The key as well as its place: a wrong type used to name only line and column.
            assert!(e.to_string().contains("syntax.toml: line"), "{e}");
            assert!(e.to_string().contains(": insecure: invalid type"), "{e}");
        }
        other => panic!("expected a syntax error, got {other:?}"),
    }
    let bad = dir.path().join("epsilon.toml");
    let at = text.find("\nepsilon = ").expect("the config sets privacy.epsilon");
    let end = at + 1 + text[at + 1..].find('\n').unwrap();
    std::fs::write(&bad, format!("{}\nepsilon = \"one\"{}", &text[..at], &text[end..])).unwrap();
    let e = load::<PartyConfig>(&bad).unwrap_err().to_string();
    assert!(e.contains("epsilon.toml: line") && e.contains("privacy.epsilon: invalid type"), "{e}");
    // A value the node cannot use: file and field.
    let bad = dir.path().join("theta.toml");
    std::fs::write(&bad, text.replace("[privacy]", "[privacy]\ntheta = \"select\"")).unwrap();
    let cfg: PartyConfig = load(&bad).unwrap();
    match launch(&cfg, &bad).await {
        Err(LaunchError::Config(e @ ConfigError::Setting { key: Some("privacy.theta_epsilon"), .. })) => {
            let m = e.to_string();
            assert!(m.contains("theta.toml") && m.contains("privacy.theta_epsilon"), "{m}");
        }
        Err(e) => panic!("expected an invalid-setting error, got {e}"),
        Ok(_) => panic!("a config without theta_epsilon was launched"),
    }
    // A missing data file: config, field and resolved path.
    let bad = dir.path().join("nodata.toml");
    std::fs::write(&bad, text.replace("train.csv", "missing.csv")).unwrap();
    let cfg: PartyConfig = load(&bad).unwrap();
    match launch(&cfg, &bad).await {
        Err(e @ LaunchError::MissingData { .. }) => {
            let m = e.to_string();
            assert!(m.contains("nodata.toml") && m.contains("data.train") && m.contains("missing.csv"), "{m}");
        }
        Err(e) => panic!("expected a missing-data error, got {e}"),
        Ok(_) => panic!("a config with a missing file was launched"),
    }
}

/// `[model] local = "svgp"` gives the node an SVGP-trained sparse local model with the M asked
/// for; a misspelt model or `inducing` with the exact model is refused, naming file and field.
#[test]
fn model_local_svgp_builds_a_sparse_party_and_bad_values_are_refused() {
    use dpcotrain_cotrain::combiner::LocalModel;
    use dpcotrain_federation::config::party_from_config;
    let dir = tempfile::tempdir().unwrap();
    let path = write_node(dir.path());
    let text = std::fs::read_to_string(&path).unwrap();
    assert!(text.contains("local = \"auto\""), "the default is written out");
    let svgp = dir.path().join("svgp.toml");
    std::fs::write(&svgp, text.replace("local = \"auto\"", "local = \"svgp\"\ninducing = 10")).unwrap();
    let cfg: PartyConfig = load(&svgp).unwrap();
    let party = party_from_config(&cfg, &svgp).unwrap();
    assert_eq!(party.model().local_model(), LocalModel::Svgp);
    assert!(party.model().inducing_count().unwrap() <= 10);
    let bad = dir.path().join("typo.toml");
    std::fs::write(&bad, text.replace("local = \"auto\"", "local = \"svpg\"")).unwrap();
    let e = load::<PartyConfig>(&bad).unwrap_err().to_string();
    assert!(e.contains("typo.toml") && e.contains("model.local") && e.contains("svgp"), "{e}");
    let bad = dir.path().join("exact.toml");
    std::fs::write(&bad, text.replace("local = \"auto\"", "local = \"exact\"\ninducing = 10")).unwrap();
    let cfg: PartyConfig = load(&bad).unwrap();
    let e = party_from_config(&cfg, &bad).err().unwrap().to_string();
    assert!(e.contains("exact.toml") && e.contains("model.inducing"), "{e}");
}
