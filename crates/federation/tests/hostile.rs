//! Hostile input to an open (insecure, loopback) node: bytes that are not a protobuf message
//! are INVALID_ARGUMENT (not INTERNAL); caller-supplied strings are never echoed whole; the set
//! of requester names a node accepts is bounded; a flood of the largest answers leaves the node
//! responsive and its saved state bounded.

mod common;

use bytes::{Buf, BufMut};
use dpcotrain_cotrain::CombinerKind;
use dpcotrain_cotrain::Uncertainty;
use dpcotrain_cotrain::build_parties;
use dpcotrain_cotrain::{DpConfig, Party};
use dpcotrain_cotrain::{SimConfig, simulate};
use dpcotrain_federation::pb::node_client::NodeClient;
use dpcotrain_federation::{Agreement, MAX_REQUESTERS, pb};
use std::sync::{Arc, Mutex};
use tonic::Code;
use tonic::codec::{Codec, DecodeBuf, Decoder, EncodeBuf, Encoder};

const FED: &str = "hostile";

fn party() -> Arc<Mutex<Party>> {
    let sc = simulate(&SimConfig { n_obs: 20, n_pool: 40, n_test: 20, seed: 2, ..SimConfig::default() }).unwrap();
    build_parties(&sc, CombinerKind::Noisy, Uncertainty::Marginal, &DpConfig::off(), 2).unwrap().remove(0)
}

async fn start(party: Arc<Mutex<Party>>) -> (String, tokio::sync::oneshot::Sender<()>) {
    common::start(party, FED).await
}

/// Sends raw bytes as the request message; reads the reply as raw bytes.
#[derive(Default, Clone)]
struct Raw;
struct RawEnc;
struct RawDec;

impl Encoder for RawEnc {
    type Item = Vec<u8>;
    type Error = tonic::Status;
    fn encode(&mut self, item: Vec<u8>, buf: &mut EncodeBuf<'_>) -> Result<(), tonic::Status> {
        buf.put_slice(&item);
        Ok(())
    }
}

impl Decoder for RawDec {
    type Item = Vec<u8>;
    type Error = tonic::Status;
    fn decode(&mut self, buf: &mut DecodeBuf<'_>) -> Result<Option<Vec<u8>>, tonic::Status> {
        let mut v = vec![0; buf.remaining()];
        buf.copy_to_slice(&mut v);
        Ok(Some(v))
    }
}

impl Codec for Raw {
    type Encode = Vec<u8>;
    type Decode = Vec<u8>;
    type Encoder = RawEnc;
    type Decoder = RawDec;
    fn encoder(&mut self) -> RawEnc {
        RawEnc
    }
    fn decoder(&mut self) -> RawDec {
        RawDec
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_messages_long_strings_and_name_floods_are_refused_cleanly() {
    let p = party();
    let agreement = Agreement::of(&p.lock().unwrap(), FED, 0.0, 1.0);
    let (addr, stop) = start(p).await;
    let channel = tonic::transport::Endpoint::from_shared(addr.clone()).unwrap().connect().await.unwrap();

    // Not a protobuf message: a truncated varint, a bad wire type, a length past the end.
    for junk in [vec![0x08u8, 0xff], vec![0x0f, 0x00], vec![0x0a, 0x7f, 0x01]] {
        for method in ["Predict", "Handshake", "Status", "RunRound"] {
            let mut g = tonic::client::Grpc::new(channel.clone());
            g.ready().await.unwrap();
            let path = http::uri::PathAndQuery::from_maybe_shared(format!("/dpcotrain.v2.Node/{method}")).unwrap();
            let err = g.unary(tonic::Request::new(junk.clone()), path, Raw).await.unwrap_err();
            assert_eq!(err.code(), Code::InvalidArgument, "{method} {junk:?}: {err:?}");
            assert!(err.message().contains("malformed protobuf"), "{}", err.message());
        }
    }

    // A megabyte of name comes back cut to a few dozen characters.
    let mut c = NodeClient::new(channel.clone());
    let huge = "x".repeat(1 << 20);
    let req = pb::PredictRequest {
        request_id: "r".into(),
        requester: "P2".into(),
        indices: vec![0],
        uncertainty: pb::Uncertainty::Marginal.into(),
        want_prior: false,
        federation_id: huge.clone(),
        witness: None,
    };
    let err = c.predict(req).await.unwrap_err();
    assert_eq!(err.code(), Code::PermissionDenied);
    assert!(
        err.message().len() < 200 && err.message().contains("(1048576 bytes)"),
        "{}",
        &err.message()[..200.min(err.message().len())]
    );
    let mut hs = agreement.to_pb("P2");
    hs.federation_id = huge;
    let r = c.handshake(hs).await.unwrap().into_inner();
    assert!(!r.accepted && r.reason.len() < 200, "{}", &r.reason[..200.min(r.reason.len())]);

    // A request whose answer could not be sent (2,000 indices with two 2,000² matrices, ~61 MiB)
    // is refused before anything is computed or charged.
    assert!(c.handshake(agreement.to_pb("P2")).await.unwrap().into_inner().accepted);
    let big = pb::PredictRequest {
        request_id: "big".into(),
        requester: "P2".into(),
        indices: (0..2000).map(|i| i % 40).collect(),
        uncertainty: pb::Uncertainty::Full.into(),
        want_prior: true,
        federation_id: FED.into(),
        witness: None,
    };
    let err = c.predict(big).await.unwrap_err();
    assert_eq!(err.code(), Code::InvalidArgument);
    assert!(err.message().contains("above the 16 MiB message limit"), "{}", err.message());

    // A retried id returns the same answer; the same id asking for something else is refused.
    let ask = |indices: Vec<u64>| pb::PredictRequest {
        request_id: "once".into(),
        requester: "P2".into(),
        indices,
        uncertainty: pb::Uncertainty::Marginal.into(),
        want_prior: false,
        federation_id: FED.into(),
        witness: None,
    };
    let first = c.predict(ask(vec![1, 2])).await.unwrap().into_inner();
    assert_eq!(c.predict(ask(vec![1, 2])).await.unwrap().into_inner(), first);
    let err = c.predict(ask(vec![3])).await.unwrap_err();
    assert_eq!(err.code(), Code::InvalidArgument, "{err:?}");
    assert!(err.message().contains("already used for a different request"), "{}", err.message());

    // Anyone may handshake with an open node under any name, but only so many names.
    for k in 0..MAX_REQUESTERS - 1 {
        let r = c.handshake(agreement.to_pb(&format!("name{k}"))).await.unwrap().into_inner();
        assert!(r.accepted, "{k}: {}", r.reason);
    }
    let r = c.handshake(agreement.to_pb("one-too-many")).await.unwrap().into_inner();
    assert!(!r.accepted && r.reason.contains("already knows"), "{}", r.reason);
    // A name it knows may handshake again.
    assert!(c.handshake(agreement.to_pb("name0")).await.unwrap().into_inner().accepted);
    let _ = stop.send(());
}

/// Handshake and an unauthenticated call never wait for the party's lock: while another thread
/// holds it (as a long re-fit does), they answer at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn calls_that_need_no_model_answer_while_the_model_is_busy() {
    let p = party();
    let agreement = Agreement::of(&p.lock().unwrap(), FED, 0.0, 1.0);
    let (addr, stop) = start(p.clone()).await;
    let mut c = NodeClient::connect(addr).await.unwrap();
    // Hold the party lock on a plain thread, as a re-fit on a blocking thread does, until the
    // probes are done: a call that needed the lock could not return while it is held, so it
    // would run into the (deadlock-only) 60 s timeout. No wall-clock bound on a loaded machine.
    let (held_tx, held_rx) = std::sync::mpsc::channel();
    let (release_tx, release_rx) = std::sync::mpsc::channel::<()>();
    let holder = std::thread::spawn(move || {
        let _g = p.lock().unwrap();
        held_tx.send(()).unwrap();
        let _ = release_rx.recv();
    });
    held_rx.recv().unwrap();
    let deadlock = std::time::Duration::from_secs(60);
    for k in 0..4 {
        let r = tokio::time::timeout(deadlock, c.handshake(agreement.to_pb(&format!("Q{k}"))))
            .await
            .expect("a handshake waited for the party lock")
            .unwrap();
        assert!(r.into_inner().accepted);
    }
    assert!(!holder.is_finished(), "the lock was held throughout");
    release_tx.send(()).unwrap();
    holder.join().unwrap();
    let _ = stop.send(());
}

/// Four clients flood a node (with its durable store) with whole-pool Predicts carrying full
/// covariance and prior rows, fresh ids each. Meanwhile Handshake and Status answer within 1 s.
/// Then one requester goes past its cache bound: its cached answers stay at the bound and the
/// state on disk stops growing (only the log's compaction slack remains).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flood_of_the_largest_answers_keeps_the_node_responsive_and_its_state_bounded() {
    use dpcotrain_cotrain::answer_cache::{MAX_ANSWERS_PER_REQUESTER, MAX_BYTES_PER_REQUESTER};
    use dpcotrain_federation::store::StateStore;
    let p = party();
    let agreement = Agreement::of(&p.lock().unwrap(), FED, 0.0, 1.0);
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("flood");
    let svc = dpcotrain_federation::NodeService::new(p.clone(), FED).with_store(StateStore::open(&dir).unwrap());
    let (addr, stop) = common::start_service(svc).await;
    let mut c = NodeClient::connect(addr.clone()).await.unwrap();
    let names: Vec<String> = (0..4).map(|k| format!("F{k}")).collect();
    for n in &names {
        assert!(c.handshake(agreement.to_pb(n)).await.unwrap().into_inner().accepted);
    }
    let disk = || -> u64 {
        ["state.json", "state.log"].iter().filter_map(|f| std::fs::metadata(dir.join(f)).ok()).map(|m| m.len()).sum()
    };
    let flood = |names: &[String], from: usize, to: usize| {
        names
            .iter()
            .map(|n| {
                let (n, addr) = (n.clone(), addr.clone());
                tokio::spawn(async move {
                    let mut c = NodeClient::connect(addr).await.unwrap();
                    for k in from..to {
                        let req = pb::PredictRequest {
                            request_id: format!("flood-{k}"),
                            requester: n.clone(),
                            indices: (0..40).collect(),
                            uncertainty: pb::Uncertainty::Full.into(),
                            want_prior: true,
                            federation_id: FED.into(),
                            witness: None,
                        };
                        c.predict(req).await.unwrap();
                    }
                })
            })
            .collect::<Vec<_>>()
    };
    // Handshake and Status keep answering during the flood (that a handshake never waits for the
    // party lock is checked without timing in `calls_that_need_no_model_answer_while_the_model_is_busy`;
    // Status reads the party between Predicts); the 60 s timeout only stops a deadlock, so a
    // loaded CI box cannot fail this.
    let tasks = flood(&names, 0, 40);
    while !tasks.iter().all(|t| t.is_finished()) {
        let deadlock = std::time::Duration::from_secs(60);
        tokio::time::timeout(deadlock, c.handshake(agreement.to_pb("F0"))).await.expect("handshake waited").unwrap();
        tokio::time::timeout(deadlock, c.status(pb::StatusRequest::default())).await.expect("status waited").unwrap();
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    for t in tasks {
        t.await.unwrap();
    }
    // Past the cache bound (256 per requester) the state stops growing.
    let one = &names[..1];
    for t in flood(one, 40, 300) {
        t.await.unwrap();
    }
    let full = disk();
    for t in flood(one, 300, 450) {
        t.await.unwrap();
    }
    let later = disk();
    let state = dpcotrain_federation::store::peek(&dir).unwrap().unwrap();
    let kept = |n: &str| state.answers.keys().filter(|k| k.starts_with(&format!("{n}\u{1f}"))).count();
    assert_eq!(kept("F0"), MAX_ANSWERS_PER_REQUESTER);
    assert_eq!(kept("F1"), 40);
    let cached: usize = state.answers.values().map(dpcotrain_cotrain::answer_cache::answer_bytes).sum();
    assert!(cached <= names.len() * MAX_BYTES_PER_REQUESTER);
    // JSON text of the cached numbers, and at most a snapshot's worth of log beside it.
    assert!(later <= 2 * full + (1 << 20), "state grew from {full} to {later} bytes with full caches");
    let _ = stop.send(());
    let _ = std::fs::remove_dir_all(&dir);
}
