//! One span and one log line per RPC, as a tower layer beside [`crate::auth::AuthLayer`] (the
//! shape of tonic's examples: cross-cutting concerns as layers, handlers left to the protocol).
//!
//! [`TraceLayer`] sits outside the authentication layer, so every call is seen, refused or not:
//! it opens a span `rpc{rpc = METHOD}` around the call (events a handler logs carry it), and
//! when the call ends it logs one structured line — method, the caller's claimed name and the
//! request id (both clipped), the outcome's code and the latency — and counts the call in
//! [`Metrics`]. The caller and request id live in the message, which only the handler decodes:
//! the layer puts an [`RpcNote`] in the request's extensions, and the handler writes them there.
//!
//! **Invariant (nothing private in a log line):** a line carries only the method, the caller's
//! name, the request id, the gRPC code with its message, the latency and a refused handshake's
//! reason — never a label, covariate or released value. The messages of the codes a node returns
//! are built from counts, indices and configuration (`crate::error`).

use crate::layer::{Around, Body, BoxFuture, Served, Wrapped};
use crate::metrics::Metrics;
use std::sync::{Arc, Mutex};
use std::time::Instant;
use tonic::{Code, Request, Status};
use tracing::Instrument;

/// What a handler learnt from the message, for the call's log line: the caller's claimed name,
/// the request id and, for a handshake that was answered but not accepted, the reason. A handler
/// reached without [`TraceLayer`] (a unit test) writes to a note nobody reads.
#[derive(Clone, Default, Debug)]
pub(crate) struct RpcNote(Arc<Mutex<NoteFields>>);

#[derive(Default, Debug)]
struct NoteFields {
    caller: Option<String>,
    request: Option<String>,
    refused: Option<String>,
}

impl RpcNote {
    /// The note [`TraceLayer`] attached to this call (a detached one without the layer).
    pub fn of<T>(req: &Request<T>) -> RpcNote {
        req.extensions().get::<RpcNote>().cloned().unwrap_or_default()
    }

    fn with(&self, f: impl FnOnce(&mut NoteFields)) {
        // A poisoned note only loses a log field.
        if let Ok(mut g) = self.0.lock() {
            f(&mut g);
        }
    }

    /// The caller's claimed name (clipped: it comes from the wire).
    pub fn caller(&self, name: &str) {
        let name = crate::clip(name);
        self.with(|n| n.caller = Some(name));
    }

    /// The request id or round (clipped).
    pub fn request(&self, id: &str) {
        let id = crate::clip(id);
        self.with(|n| n.request = Some(id));
    }

    /// The call succeeded at the gRPC level but refused what was asked (a handshake).
    pub fn refused(&self, reason: &str) {
        let reason = crate::clip(reason);
        self.with(|n| n.refused = Some(reason));
    }

    fn take(&self) -> NoteFields {
        self.0.lock().map(|mut g| std::mem::take(&mut *g)).unwrap_or_default()
    }
}

/// The tower layer that traces, logs and counts every call (module documentation).
#[derive(Clone)]
pub(crate) struct TraceLayer {
    metrics: Arc<Metrics>,
}

impl TraceLayer {
    pub fn new(metrics: Arc<Metrics>) -> Self {
        TraceLayer { metrics }
    }
}

impl<S> tower_layer::Layer<S> for TraceLayer {
    type Service = Wrapped<TraceLayer, S>;

    fn layer(&self, inner: S) -> Self::Service {
        Wrapped::new(self.clone(), inner)
    }
}

impl Around for TraceLayer {
    fn around<S: Served<B>, B: Send + 'static>(
        &self,
        mut inner: S,
        mut req: http::Request<B>,
    ) -> BoxFuture<http::Response<Body>, S::Error> {
        let started = Instant::now();
        let method = method_name(req.uri().path());
        let note = RpcNote::default();
        req.extensions_mut().insert(note.clone());
        let metrics = self.metrics.clone();
        let span = tracing::info_span!("rpc", rpc = method);
        Box::pin(
            async move {
                let res = inner.call(req).await;
                if let Ok(r) = &res {
                    // A unary call that fails is a trailers-only response: its status is in
                    // the headers. No status there is OK (its trailers say so).
                    let status = Status::from_header_map(r.headers()).filter(|s| s.code() != Code::Ok);
                    log_rpc(&metrics, method, &note.take(), started, status.as_ref());
                }
                res
            }
            .instrument(span),
        )
    }
}

/// The method a path names, as the metrics and logs spell it: one of the node's RPCs, or
/// `unknown` — the path comes from an unauthenticated caller, and a metrics label must not take
/// whatever it sends (the series would grow without bound).
pub(crate) const METHODS: [&str; 4] = ["Handshake", "Predict", "Status", "RunRound"];

pub(crate) fn method_name(path: &str) -> &'static str {
    let method = path.rsplit('/').next().unwrap_or_default();
    METHODS.into_iter().find(|m| *m == method).unwrap_or("unknown")
}

/// The call's one line, and its count. Refusals (authentication, permission, budget, a refused
/// handshake) are warnings, internal failures (a failed save) errors, the rest info.
fn log_rpc(metrics: &Metrics, method: &str, note: &NoteFields, started: Instant, failed: Option<&Status>) {
    let seconds = started.elapsed().as_secs_f64();
    metrics.record_rpc(method, failed.map_or(Code::Ok, |s| s.code()), seconds);
    let ms = seconds * 1e3;
    let caller = note.caller.as_deref().unwrap_or("-");
    let request = note.request.as_deref().unwrap_or("-");
    match (failed, &note.refused) {
        (None, None) => tracing::info!(rpc = method, caller, request, code = "OK", ms, "rpc"),
        (None, Some(reason)) => tracing::warn!(rpc = method, caller, request, code = "OK", ms, %reason, "rpc refused"),
        (Some(s), _) => {
            let code = format!("{:?}", s.code());
            let reason = crate::clip(s.message());
            match s.code() {
                Code::Internal | Code::Unknown | Code::DataLoss => {
                    tracing::error!(rpc = method, caller, request, code, ms, %reason, "rpc failed")
                }
                Code::Unauthenticated | Code::PermissionDenied | Code::ResourceExhausted => {
                    tracing::warn!(rpc = method, caller, request, code, ms, %reason, "rpc refused")
                }
                _ => tracing::info!(rpc = method, caller, request, code, ms, %reason, "rpc"),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::task::{Context, Poll};
    use tower_layer::Layer;
    use tower_service::Service;

    /// Answers with a fixed status (None: OK) after writing the note, as a handler does.
    #[derive(Clone)]
    struct Handler(Option<Code>);

    impl Service<http::Request<()>> for Handler {
        type Response = http::Response<tonic::body::Body>;
        type Error = std::convert::Infallible;
        type Future = std::future::Ready<Result<Self::Response, Self::Error>>;

        fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
            Poll::Ready(Ok(()))
        }

        fn call(&mut self, req: http::Request<()>) -> Self::Future {
            let note = req.extensions().get::<RpcNote>().cloned().expect("the layer attaches a note");
            note.caller("B");
            note.request("round 1");
            let resp = match self.0 {
                None => http::Response::new(tonic::body::Body::default()),
                Some(code) => Status::new(code, "spent").into_http(),
            };
            std::future::ready(Ok(resp))
        }
    }

    /// Every call is counted under its method and code (from the trailers-only headers of a
    /// failure; OK otherwise), with the note the handler wrote reaching the layer.
    #[test]
    fn the_layer_counts_each_call_by_method_and_code() {
        let metrics = Arc::new(Metrics::default());
        let rt = tokio::runtime::Builder::new_current_thread().build().unwrap();
        for (code, path) in [
            (None, "/dpcotrain.v2.Node/Predict"),
            (Some(Code::ResourceExhausted), "/dpcotrain.v2.Node/Predict"),
            (Some(Code::ResourceExhausted), "/dpcotrain.v2.Node/Predict"),
            (Some(Code::InvalidArgument), "/elsewhere/Bogus"),
        ] {
            let mut svc = TraceLayer::new(metrics.clone()).layer(Handler(code));
            let req = http::Request::builder().uri(path).body(()).unwrap();
            rt.block_on(svc.call(req)).unwrap();
        }
        let text = metrics.encode();
        let count = |method: &str, code: &str| {
            text.lines()
                .find(|l| l.contains(&format!("method=\"{method}\"")) && l.contains(&format!("code=\"{code}\"")))
                .and_then(|l| l.rsplit(' ').next())
                .map(|v| v.to_string())
        };
        assert_eq!(count("Predict", "Ok").as_deref(), Some("1"), "{text}");
        assert_eq!(count("Predict", "ResourceExhausted").as_deref(), Some("2"), "{text}");
        assert_eq!(count("unknown", "InvalidArgument").as_deref(), Some("1"), "{text}");
        assert_eq!(method_name("/dpcotrain.v2.Node/RunRound"), "RunRound");
        assert_eq!(method_name(&format!("/x/{}", "A".repeat(10_000))), "unknown");
    }

    /// A handler reached without the layer writes to a detached note, and nothing fails; what
    /// comes from the wire is kept escaped and clipped (no line breaks or escapes reach a log).
    #[test]
    fn a_note_without_the_layer_is_detached_and_clips_what_it_keeps() {
        let note = RpcNote::of(&Request::new(()));
        note.caller("B\n\u{1b}[31m");
        note.request(&"r".repeat(500));
        note.refused("no");
        let f = note.take();
        assert_eq!(f.caller.as_deref(), Some(r#""B\n\u{1b}[31m""#));
        assert!(f.request.as_deref().is_some_and(|r| r.len() < 100 && r.ends_with("(500 bytes)")), "{f:?}");
        assert_eq!(f.refused.as_deref(), Some("\"no\""));
        assert!(note.take().caller.is_none(), "a note is taken once");
    }
}
