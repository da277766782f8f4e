//! Who is calling: per-peer bearer tokens, bound to the mutual-TLS certificate when TLS is on.
//!
//! Every pair of parties shares one secret token (presented in both directions), and the
//! orchestrator has its own. A call is accepted when its `authorization: Bearer …` token is
//! one this node knows; the token names the principal. With TLS, the client certificate's
//! common name must name the same principal — a stolen token alone is not enough, and a
//! certificate alone is not enough. Only peers named in the node's configuration have tokens,
//! so a node answers nobody else.
//!
//! Authentication is a tower layer ([`AuthLayer`]) in front of every service the node serves,
//! as in tonic's examples: it runs before any message is decoded, refuses an unauthenticated
//! call itself (logged and counted by [`crate::trace::TraceLayer`], outside it, like every other
//! RPC), and puts the authenticated
//! [`Principal`] into the request's extensions, where a handler reads it with [`principal`]. A
//! new RPC therefore cannot forget to authenticate, and a handler reached without the layer
//! fails closed (`INTERNAL`), never open.

use crate::layer::{Around, Body, BoxFuture, Served, Wrapped};
use std::sync::Arc;
use tonic::metadata::MetadataValue;
use tonic::{Request, Status};

/// The principal name of the orchestrator (`dpcotrain run`).
pub const ORCHESTRATOR: &str = "orchestrator";

/// Who a call comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Principal {
    /// Authentication is off (library tests, `insecure` development nodes).
    Anyone,
    Peer(String),
    Orchestrator,
}

/// The node's access list.
#[derive(Debug, Clone, Default)]
pub struct Auth {
    /// (token, principal name); empty means authentication is off.
    tokens: Vec<(String, String)>,
    /// Require the client certificate's CN to equal the token's principal.
    bind_tls: bool,
}

/// Smallest accepted token length (characters).
pub(crate) const MIN_TOKEN_LEN: usize = 16;

fn ct_eq(a: &[u8], b: &[u8]) -> bool {
    // Constant-time for equal lengths; lengths are not secret.
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

impl Auth {
    /// No authentication (every call is [`Principal::Anyone`]).
    pub fn open() -> Self {
        Auth::default()
    }

    /// Tokens per principal (peer names, or [`ORCHESTRATOR`]).
    pub fn tokens(tokens: Vec<(String, String)>, bind_tls: bool) -> Result<Self, String> {
        for (tok, who) in &tokens {
            if tok.len() < MIN_TOKEN_LEN {
                return Err(format!("the token for {who:?} is shorter than {MIN_TOKEN_LEN} characters"));
            }
        }
        for (i, (a, who)) in tokens.iter().enumerate() {
            if let Some((_, other)) = tokens[i + 1..].iter().find(|(b, _)| b == a) {
                return Err(format!("{who:?} and {other:?} share a token: every principal needs its own"));
            }
        }
        Ok(Auth { tokens, bind_tls })
    }

    /// Authenticate from the `authorization` header's value and the request's extensions (where
    /// the TLS layer puts the verified client certificate).
    pub fn authenticate(
        &self,
        authorization: Option<&str>,
        extensions: &http::Extensions,
    ) -> Result<Principal, Status> {
        if self.tokens.is_empty() {
            return Ok(Principal::Anyone);
        }
        let presented = authorization
            .and_then(|v| v.strip_prefix("Bearer "))
            .ok_or_else(|| Status::unauthenticated("missing bearer token (authorization: Bearer …)"))?;
        let mut found: Option<&str> = None;
        for (tok, who) in &self.tokens {
            if ct_eq(tok.as_bytes(), presented.as_bytes()) {
                found = Some(who);
            }
        }
        let who = found.ok_or_else(|| Status::unauthenticated("unknown bearer token: this node does not know you"))?;
        if self.bind_tls {
            match crate::tls::peer_identity(extensions) {
                Some(cn) if cn == who => {}
                Some(cn) => {
                    return Err(Status::unauthenticated(format!(
                        "client certificate is for {cn:?} but the token is {who:?}'s"
                    )));
                }
                None => return Err(Status::unauthenticated("no verified client certificate")),
            }
        }
        Ok(if who == ORCHESTRATOR { Principal::Orchestrator } else { Principal::Peer(who.to_string()) })
    }
}

/// The principal [`AuthLayer`] authenticated for this call. Missing only when a handler is
/// reached without the layer (a wiring error): refused as `INTERNAL`, never treated as open.
pub fn principal<T>(req: &Request<T>) -> Result<Principal, Status> {
    req.extensions().get::<Principal>().cloned().ok_or_else(|| {
        Status::internal("no authenticated caller: this node was served without its authentication layer")
    })
}

/// The tower layer that authenticates every call before its message is decoded (see the
/// module documentation). Its refusals are logged and counted by the trace layer around it.
#[derive(Clone)]
pub(crate) struct AuthLayer {
    auth: Arc<Auth>,
}

impl AuthLayer {
    pub fn new(auth: Arc<Auth>) -> Self {
        AuthLayer { auth }
    }
}

impl<S> tower_layer::Layer<S> for AuthLayer {
    type Service = Wrapped<AuthLayer, S>;

    fn layer(&self, inner: S) -> Self::Service {
        Wrapped::new(self.clone(), inner)
    }
}

impl Around for AuthLayer {
    fn around<S: Served<B>, B: Send + 'static>(
        &self,
        mut inner: S,
        mut req: http::Request<B>,
    ) -> BoxFuture<http::Response<Body>, S::Error> {
        let header = req.headers().get(http::header::AUTHORIZATION).and_then(|v| v.to_str().ok());
        match self.auth.authenticate(header, req.extensions()) {
            Ok(who) => {
                req.extensions_mut().insert(who);
                Box::pin(inner.call(req))
            }
            Err(status) => Box::pin(async move { Ok(status.into_http()) }),
        }
    }
}

/// Attach a bearer token and a deadline to an outgoing request.
pub fn request<T>(msg: T, token: Option<&str>, timeout: std::time::Duration) -> Result<Request<T>, String> {
    let mut r = Request::new(msg);
    if let Some(t) = token {
        let v: MetadataValue<_> = format!("Bearer {t}")
            .parse()
            .map_err(|_| "token contains characters not allowed in a header".to_string())?;
        r.metadata_mut().insert("authorization", v);
    }
    r.set_timeout(timeout);
    Ok(r)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::task::{Context, Poll};

    #[test]
    fn tokens_name_principals() {
        let a = Auth::tokens(vec![("b".repeat(20), "B".into()), ("o".repeat(20), ORCHESTRATOR.into())], false).unwrap();
        // What request() attaches is what the layer reads.
        let d = std::time::Duration::from_secs(1);
        let check = |token: Option<&str>| {
            let r = request((), token, d).unwrap();
            let header = r.metadata().get("authorization").and_then(|v| v.to_str().ok());
            a.authenticate(header, r.extensions())
        };
        assert_eq!(check(Some(&"b".repeat(20))).unwrap(), Principal::Peer("B".into()));
        assert_eq!(check(Some(&"o".repeat(20))).unwrap(), Principal::Orchestrator);
        assert_eq!(check(Some(&"x".repeat(20))).unwrap_err().code(), tonic::Code::Unauthenticated);
        assert_eq!(check(None).unwrap_err().code(), tonic::Code::Unauthenticated);
        assert!(Auth::tokens(vec![("short".into(), "B".into())], false).is_err());
        assert!(Auth::tokens(vec![("t".repeat(20), "B".into()), ("t".repeat(20), "C".into())], false).is_err());
        assert_eq!(Auth::open().authenticate(None, &http::Extensions::new()).unwrap(), Principal::Anyone);
    }

    /// Records the principal the layer handed on, if the call got through.
    #[derive(Clone, Default)]
    struct Inner(Arc<std::sync::Mutex<Vec<Option<Principal>>>>);

    impl tower_service::Service<http::Request<()>> for Inner {
        type Response = http::Response<tonic::body::Body>;
        type Error = std::convert::Infallible;
        type Future = std::future::Ready<Result<Self::Response, Self::Error>>;

        fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
            Poll::Ready(Ok(()))
        }

        fn call(&mut self, req: http::Request<()>) -> Self::Future {
            self.0.lock().unwrap().push(req.extensions().get::<Principal>().cloned());
            std::future::ready(Ok(http::Response::new(tonic::body::Body::default())))
        }
    }

    fn call(svc: &mut Wrapped<AuthLayer, Inner>, token: Option<&str>) -> http::Response<tonic::body::Body> {
        use tower_service::Service;
        let mut b = http::Request::builder().uri("/dpcotrain.v2.Node/Predict");
        if let Some(t) = token {
            b = b.header("authorization", format!("Bearer {t}"));
        }
        let rt = tokio::runtime::Builder::new_current_thread().build().unwrap();
        rt.block_on(svc.call(b.body(()).unwrap())).unwrap()
    }

    #[test]
    fn the_layer_refuses_before_the_service_and_hands_on_the_principal() {
        use tower_layer::Layer;
        let auth = Auth::tokens(vec![("b".repeat(20), "B".into())], false).unwrap();
        let inner = Inner::default();
        let mut svc = AuthLayer::new(Arc::new(auth)).layer(inner.clone());
        // No token, and a wrong one: refused by the layer (UNAUTHENTICATED = 16), and the
        // service never runs.
        for token in [None, Some("x".repeat(20))] {
            let r = call(&mut svc, token.as_deref());
            assert_eq!(r.headers().get("grpc-status").and_then(|v| v.to_str().ok()), Some("16"));
        }
        assert!(inner.0.lock().unwrap().is_empty());
        // The right token: the service runs with the principal in its extensions.
        let r = call(&mut svc, Some(&"b".repeat(20)));
        assert!(r.headers().get("grpc-status").is_none());
        assert_eq!(*inner.0.lock().unwrap(), vec![Some(Principal::Peer("B".into()))]);
        // Open authentication hands on Anyone; a handler reached without the layer fails closed.
        let mut open = AuthLayer::new(Arc::new(Auth::open())).layer(inner.clone());
        call(&mut open, None);
        assert_eq!(inner.0.lock().unwrap().last().cloned().flatten(), Some(Principal::Anyone));
        assert_eq!(principal(&Request::new(())).unwrap_err().code(), tonic::Code::Internal);
    }

    #[test]
    fn every_rpc_of_the_proto_has_its_own_metrics_name() {
        let proto = include_str!("../../../proto/dpcotrain/v2/node.proto");
        let mut rpcs: Vec<&str> = proto
            .lines()
            .filter_map(|l| l.trim().strip_prefix("rpc "))
            .map(|l| l.split('(').next().unwrap_or_default().trim())
            .collect();
        rpcs.sort_unstable();
        let mut ours = crate::trace::METHODS.to_vec();
        ours.sort_unstable();
        assert_eq!(rpcs, ours, "a new RPC needs its name in trace::METHODS");
    }
}
