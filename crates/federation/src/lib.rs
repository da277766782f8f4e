//! # dpcotrain-federation — gRPC nodes
//!
//! The protocol (`proto/dpcotrain/v2/node.proto` at the repository's top level, compiled in `build.rs` with protox), a node
//! server that exposes a [`Party`](dpcotrain_cotrain::party::Party)'s release path over
//! gRPC, and [`GrpcPeer`], the gRPC implementation of the co-training
//! [`Peer`](dpcotrain_cotrain::peer::Peer) trait — so the round logic of `dpcotrain-cotrain` is
//! written once and runs in-process or across the network with the same numbers.
//!
//! | module | holds |
//! |---|---|
//! | [`agreement`] | what the handshake checks (pool hash, y standardisation, privacy policy) |
//! | [`auth`] | per-peer bearer tokens bound to the mTLS identity; who may call what |
//! | [`tls`] | mutual TLS configs, the dev PKI generator, the caller's certificate identity |
//! | [`store`] | crash-safe state file (ledger, releases, noise paths, model history) |
//! | [`server`] | the node service |
//! | [`peer`] | [`GrpcPeer`]: handshake, retries with backoff, deadlines |
//! | [`orchestrator`] | drives rounds across running nodes (retries; idempotent by round) |
//! | [`convert`] | validated protobuf ⇄ co-training conversions |

pub mod agreement;
pub mod auth;
pub mod codec;
pub mod config;
pub mod conn_limits;
pub mod convert;
pub mod durable;
pub mod error;
pub mod launch;
pub mod layer;
pub mod metrics;
pub mod ops;
pub mod orchestrator;
pub mod peer;
pub mod receipt;
pub mod server;
pub mod store;
pub mod tls;
pub mod trace;

/// The generated protobuf and gRPC code (not held to the workspace's lints).
#[allow(unused_qualifications)]
pub mod pb {
    tonic::include_proto!("dpcotrain.v2");
}

pub use agreement::Agreement;
pub use peer::{GrpcPeer, PeerOptions, Retry};
pub use server::{NodeService, serve};

/// Protocol version spoken by this build.
pub(crate) const PROTOCOL_VERSION: &str = "dpcotrain.v2";

/// Largest gRPC message a node or client accepts (bytes).
pub const MAX_MESSAGE_BYTES: usize = 16 << 20;

/// At most this many distinct requester names are accepted by a node's handshake (in
/// insecure mode anyone may handshake under any name; each name holds a ledger).
pub const MAX_REQUESTERS: usize = 64;

/// A caller-supplied string as error messages quote it: `{:?}`, cut to 64 characters with its
/// length noted, so an attacker's megabyte name never comes back in a `grpc-message`.
pub fn clip(s: &str) -> String {
    const MAX: usize = 64;
    match s.char_indices().nth(MAX) {
        Some((cut, _)) => format!("{:?}… ({} bytes)", &s[..cut], s.len()),
        None => format!("{s:?}"),
    }
}
