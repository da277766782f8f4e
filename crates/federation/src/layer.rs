//! The one shape of the node's tower layers ([`crate::trace::TraceLayer`] outside,
//! [`crate::auth::AuthLayer`] inside, as tonic's examples stack them): a layer is a small value
//! cloned into every service it wraps ([`Wrapped`]), and says what happens around each call
//! ([`Around`]). The tower plumbing — readiness, handing the ready clone to the call, boxing
//! the future — lives here once.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

/// The response body of every gRPC service the node serves.
pub(crate) type Body = tonic::body::Body;

/// A boxed, sendable future: what a layer's call returns.
pub(crate) type BoxFuture<T, E> = Pin<Box<dyn Future<Output = Result<T, E>> + Send>>;

/// A service a layer can wrap: it answers an HTTP request with a gRPC response body.
pub(crate) trait Served<B>:
    tower_service::Service<http::Request<B>, Response = http::Response<Body>, Future: Send + 'static> + Send + 'static
{
}

impl<T, B> Served<B> for T where
    T: tower_service::Service<http::Request<B>, Response = http::Response<Body>, Future: Send + 'static>
        + Send
        + 'static
{
}

/// What a layer does around one call; `inner` has been polled ready.
pub(crate) trait Around: Clone + Send + Sync + 'static {
    fn around<S: Served<B>, B: Send + 'static>(
        &self,
        inner: S,
        req: http::Request<B>,
    ) -> BoxFuture<http::Response<Body>, S::Error>;
}

/// A service wrapped by the layer `L`.
#[derive(Clone)]
pub(crate) struct Wrapped<L, S> {
    layer: L,
    inner: S,
}

impl<L, S> Wrapped<L, S> {
    pub fn new(layer: L, inner: S) -> Self {
        Wrapped { layer, inner }
    }
}

impl<L: Around, S: Served<B> + Clone, B: Send + 'static> tower_service::Service<http::Request<B>> for Wrapped<L, S> {
    type Response = http::Response<Body>;
    type Error = S::Error;
    type Future = BoxFuture<Self::Response, Self::Error>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: http::Request<B>) -> Self::Future {
        // The clone that was polled ready is the one that serves this call.
        let clone = self.inner.clone();
        let inner = std::mem::replace(&mut self.inner, clone);
        self.layer.around(inner, req)
    }
}
