//! Shared by the federation's integration tests.

use dpcotrain_cotrain::responder::Party;
use dpcotrain_federation::{NodeService, serve};
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
