//! Shared by the federation's integration tests.

use dpcotrain_cotrain::Party;
use dpcotrain_federation::{Agreement, GrpcPeer, NodeService, PeerOptions, Retry, serve};
use std::sync::{Arc, Mutex};
use tokio::net::TcpListener;

/// Serve `party` as an open node of federation `fed` on a free loopback port; returns its
/// address and the sender that stops it.
#[allow(dead_code)] // not every test crate that shares this module uses it
pub async fn start(party: Arc<Mutex<Party>>, fed: &str) -> (String, tokio::sync::oneshot::Sender<()>) {
    start_service(NodeService::new(party, fed)).await
}

/// Serve `svc` (open, loopback, free port); returns its address and the stop sender.
#[allow(dead_code)] // not every test crate that shares this module uses it
pub async fn start_service(svc: NodeService) -> (String, tokio::sync::oneshot::Sender<()>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = format!("http://{}", listener.local_addr().unwrap());
    let (tx, rx) = tokio::sync::oneshot::channel::<()>();
    tokio::spawn(async move {
        serve(svc, listener, None, async {
            let _ = rx.await;
        })
        .await
        .unwrap();
    });
    (addr, tx)
}

/// `me`'s gRPC peer `name` at `addr` in federation `fed` (no TLS, no token: these nodes run
/// open), calling with `retry`.
#[allow(dead_code)] // not every test crate that shares this module uses it
pub fn peer(me: &Arc<Mutex<Party>>, fed: &str, name: &str, addr: &str, retry: Retry) -> GrpcPeer {
    let p = me.lock().unwrap();
    GrpcPeer::new(PeerOptions {
        me: p.name().to_string(),
        name: name.into(),
        address: addr.into(),
        agreement: Agreement::of(&p, fed, 0.0, 1.0),
        token: None,
        tls: None,
        retry,
    })
    .unwrap()
}
