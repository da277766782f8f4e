//! Connection limits on both of a node's ports, so that connections that never authenticate
//! cannot hold the node: a cap on open connections per peer address, a deadline for a new
//! connection's first bytes (a TLS ClientHello, an HTTP request line), an idle timeout (live
//! HTTP/2 connections exchange keepalive pings every 30 s, so they never reach it), and for the
//! operations port a bound on a connection's lifetime (scrapes and health checks reconnect).
//! The TLS handshake itself has tonic's own deadline (`ServerTlsConfig::timeout`, set by
//! [`crate::server::serve`]).
//!
//! At start the node also raises its open-files soft limit to the hard limit
//! ([`raise_open_files_limit`]): a common default of 1,024 is a few hundred peers' worth.
//!
//! **A reserve for peers that speak.** The per-address cap does not stop a flood from many
//! addresses (16 loopback addresses × 64 held 1,020 descriptors of 1,024). So every
//! connection that has sent nothing yet is *silent*, and silent connections together (on both
//! ports: descriptors are the process's) may hold at most the open-files limit less a reserve
//! (an eighth of it, at least 64; [`SilentPool`]). A new connection over that evicts the oldest
//! silent one. A real peer sends its TLS ClientHello at once and stops being silent within
//! milliseconds, so it is never the oldest; a half-open flood only evicts itself, and the
//! reserve stays free for connections that speak.

use futures_util::task::AtomicWaker;
use std::collections::{HashMap, VecDeque};
use std::future::Future;
use std::io;
use std::net::{IpAddr, SocketAddr};
use std::pin::Pin;
use std::sync::atomic::{AtomicU8, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::sync::{OnceLock, Weak};
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::time::{Instant, Sleep};

/// The limits of one port.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ConnLimits {
    /// Open connections from one peer address; more are closed as soon as they are accepted.
    pub per_address: usize,
    /// A new connection that sends nothing for this long is closed.
    pub first_bytes: Duration,
    /// A connection that sends nothing for this long is closed.
    pub idle: Duration,
    /// Every connection is closed after this long (None: no bound).
    pub lifetime: Option<Duration>,
}

impl ConnLimits {
    /// The gRPC port: peers and the orchestrator keep one long-lived HTTP/2 connection each.
    pub const GRPC: ConnLimits = ConnLimits {
        per_address: 64,
        first_bytes: Duration::from_secs(10),
        idle: Duration::from_secs(120),
        lifetime: None,
    };
    /// The operations port: short scrapes and health checks.
    pub const OPS: ConnLimits = ConnLimits {
        per_address: 64,
        first_bytes: Duration::from_secs(10),
        idle: Duration::from_secs(30),
        lifetime: Some(Duration::from_secs(120)),
    };
}

/// Open connections per peer address.
type Table = Arc<Mutex<HashMap<IpAddr, usize>>>;

const SILENT: u8 = 0;
const SPOKE: u8 = 1;
const EVICTED: u8 = 2;
const GONE: u8 = 3;

/// One connection's place among the silent ones.
#[derive(Debug, Default)]
struct Ticket {
    state: AtomicU8,
    waker: AtomicWaker,
}

/// The connections that have sent nothing yet, oldest first, and how many of them may be
/// open at once (module docs).
#[derive(Debug)]
pub(crate) struct SilentPool {
    cap: usize,
    queue: Mutex<VecDeque<Weak<Ticket>>>,
    silent: AtomicUsize,
}

impl SilentPool {
    pub fn new(cap: usize) -> Arc<Self> {
        Arc::new(SilentPool { cap: cap.max(1), queue: Mutex::default(), silent: AtomicUsize::new(0) })
    }

    /// The process's pool: the open-files limit (as raised at start) less a reserve of an
    /// eighth of it, at least 64.
    pub fn global() -> Arc<Self> {
        static POOL: OnceLock<Arc<SilentPool>> = OnceLock::new();
        POOL.get_or_init(|| {
            // An unlimited (RLIM_INFINITY) or huge limit: a million is room enough.
            let limit = open_files_limit().unwrap_or(1024).min(1 << 20) as usize;
            SilentPool::new(limit.saturating_sub((limit / 8).max(64)))
        })
        .clone()
    }

    /// Silent connections open now.
    #[cfg(test)]
    pub fn silent(&self) -> usize {
        self.silent.load(Ordering::SeqCst)
    }

    /// A ticket for a new connection; at the cap, the oldest silent connection is evicted.
    fn admit(self: &Arc<Self>) -> SilentTicket {
        let mut queue = self.queue.lock().unwrap_or_else(|e| e.into_inner());
        while self.silent.load(Ordering::SeqCst) >= self.cap {
            let Some(oldest) = queue.pop_front() else { break };
            if let Some(t) = oldest.upgrade()
                && t.state.compare_exchange(SILENT, EVICTED, Ordering::SeqCst, Ordering::SeqCst).is_ok()
            {
                self.silent.fetch_sub(1, Ordering::SeqCst);
                t.waker.wake();
                tracing::debug!("{} silent connections open, the most allowed: the oldest closed", self.cap);
            }
        }
        // Entries of connections that spoke or ended are dropped as they reach the front.
        while queue.front().is_some_and(|w| w.upgrade().is_none_or(|t| t.state.load(Ordering::SeqCst) != SILENT)) {
            queue.pop_front();
        }
        let ticket = Arc::new(Ticket::default());
        queue.push_back(Arc::downgrade(&ticket));
        self.silent.fetch_add(1, Ordering::SeqCst);
        SilentTicket { pool: self.clone(), ticket }
    }
}

/// A connection's ticket: it leaves the silent ones when the connection first sends bytes,
/// or ends.
struct SilentTicket {
    pool: Arc<SilentPool>,
    ticket: Arc<Ticket>,
}

impl SilentTicket {
    fn leave(&self, to: u8) {
        if self.ticket.state.compare_exchange(SILENT, to, Ordering::SeqCst, Ordering::SeqCst).is_ok() {
            self.pool.silent.fetch_sub(1, Ordering::SeqCst);
        }
    }

    /// The connection sent bytes: it leaves the silent ones (also if it was evicted just now,
    /// between the check and the read: its bytes are served, not cut off).
    fn spoke(&self) {
        match self.ticket.state.compare_exchange(SILENT, SPOKE, Ordering::SeqCst, Ordering::SeqCst) {
            Ok(_) => {
                self.pool.silent.fetch_sub(1, Ordering::SeqCst);
            }
            Err(EVICTED) => self.ticket.state.store(SPOKE, Ordering::SeqCst),
            Err(_) => {}
        }
    }

    fn evicted(&self) -> bool {
        self.ticket.state.load(Ordering::SeqCst) == EVICTED
    }
}

impl Drop for SilentTicket {
    fn drop(&mut self) {
        self.leave(GONE);
    }
}

/// A listener that applies [`ConnLimits`] to what it accepts.
pub(crate) struct GuardedListener {
    listener: TcpListener,
    limits: ConnLimits,
    open: Table,
    silent: Arc<SilentPool>,
}

impl GuardedListener {
    pub fn new(listener: TcpListener, limits: ConnLimits) -> Self {
        Self::with_pool(listener, limits, SilentPool::global())
    }

    pub fn with_pool(listener: TcpListener, limits: ConnLimits, silent: Arc<SilentPool>) -> Self {
        GuardedListener { listener, limits, open: Table::default(), silent }
    }

    /// The next connection within the limits. Connections over an address's cap are closed
    /// at once; accept errors (e.g. out of file descriptors) are logged and retried after a
    /// pause, never returned.
    pub async fn accept(&mut self) -> (Guarded, SocketAddr) {
        loop {
            let (stream, addr) = match self.listener.accept().await {
                Ok(x) => x,
                Err(e) => {
                    tracing::warn!("accept failed ({e}); retrying in 100 ms");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            };
            let ip = addr.ip();
            {
                let mut open = self.open.lock().unwrap_or_else(|e| e.into_inner());
                let n = open.entry(ip).or_insert(0);
                if *n >= self.limits.per_address {
                    tracing::debug!("{ip}: {} connections open, the most one address may hold: closed", *n);
                    drop(stream);
                    continue;
                }
                *n += 1;
                if *n == self.limits.per_address {
                    tracing::warn!(
                        "{ip} holds {n} connections, the most one address may: further ones are closed until some end"
                    );
                }
            }
            let _ = stream.set_nodelay(true);
            let start = Instant::now();
            let end = self.limits.lifetime.map(|l| start + l);
            let first = start + self.limits.first_bytes;
            let guarded = Guarded {
                inner: stream,
                slot: Slot { table: self.open.clone(), ip },
                ticket: self.silent.admit(),
                deadline: Box::pin(tokio::time::sleep_until(end.map_or(first, |e| first.min(e)))),
                idle: self.limits.idle,
                end,
            };
            return (guarded, addr);
        }
    }

    /// The connections as a stream (what tonic's `serve_with_incoming` takes).
    pub fn into_stream(self) -> impl futures_core::Stream<Item = io::Result<Guarded>> + Send + 'static {
        futures_util::stream::unfold(self, |mut l| async move {
            let (io, _) = l.accept().await;
            Some((Ok(io), l))
        })
    }
}

impl axum::serve::Listener for GuardedListener {
    type Io = Guarded;
    type Addr = SocketAddr;

    fn accept(&mut self) -> impl Future<Output = (Guarded, SocketAddr)> + Send {
        GuardedListener::accept(self)
    }

    fn local_addr(&self) -> io::Result<SocketAddr> {
        self.listener.local_addr()
    }
}

/// One connection's place in its address's count; given back when the connection ends.
struct Slot {
    table: Table,
    ip: IpAddr,
}

impl Drop for Slot {
    fn drop(&mut self) {
        let mut open = self.table.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(n) = open.get_mut(&self.ip) {
            *n -= 1;
            if *n == 0 {
                open.remove(&self.ip);
            }
        }
    }
}

/// An accepted connection under its limits: reading fails with `TimedOut` once the peer has
/// sent nothing before the deadline (first bytes, then idle), or the lifetime is over.
pub(crate) struct Guarded {
    inner: TcpStream,
    #[allow(dead_code)] // held for its Drop
    slot: Slot,
    ticket: SilentTicket,
    deadline: Pin<Box<Sleep>>,
    idle: Duration,
    end: Option<Instant>,
}

impl AsyncRead for Guarded {
    fn poll_read(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        let this = &mut *self;
        this.ticket.ticket.waker.register(cx.waker());
        if this.ticket.evicted() {
            return Poll::Ready(Err(io::Error::new(
                io::ErrorKind::ConnectionAborted,
                "connection closed: it had sent nothing, and the node needed room for connections that do",
            )));
        }
        let before = buf.filled().len();
        match Pin::new(&mut this.inner).poll_read(cx, buf) {
            Poll::Ready(Ok(())) => {
                if buf.filled().len() > before {
                    this.ticket.spoke();
                    let next = Instant::now() + this.idle;
                    this.deadline.as_mut().reset(this.end.map_or(next, |e| next.min(e)));
                }
                Poll::Ready(Ok(()))
            }
            Poll::Ready(Err(e)) => Poll::Ready(Err(e)),
            Poll::Pending => match this.deadline.as_mut().poll(cx) {
                Poll::Ready(()) => Poll::Ready(Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    "connection closed: nothing received in time, or its lifetime is over",
                ))),
                Poll::Pending => Poll::Pending,
            },
        }
    }
}

impl AsyncWrite for Guarded {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }
    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }
    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write_vectored(cx, bufs)
    }
    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }
}

impl tonic::transport::server::Connected for Guarded {
    type ConnectInfo = tonic::transport::server::TcpConnectInfo;
    fn connect_info(&self) -> Self::ConnectInfo {
        self.inner.connect_info()
    }
}

/// The open-files soft limit (Unix).
#[cfg(unix)]
fn open_files_limit() -> Option<u64> {
    let mut lim = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
    // SAFETY: getrlimit writes one rlimit into the struct we own; RLIMIT_NOFILE is a valid resource.
    (unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &raw mut lim) } == 0).then_some(lim.rlim_cur)
}

#[cfg(not(unix))]
fn open_files_limit() -> Option<u64> {
    None
}

/// Raise the open-files soft limit to the hard limit (Unix); returns (before, after). A node
/// holds a descriptor per connection, per state file and per TLS file; 1,024 (a common default)
/// is too few under a flood.
#[cfg(unix)]
pub(crate) fn raise_open_files_limit() -> io::Result<(u64, u64)> {
    let mut lim = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
    // SAFETY: getrlimit writes one rlimit into the struct we own; RLIMIT_NOFILE is a valid resource.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &raw mut lim) } != 0 {
        return Err(io::Error::last_os_error());
    }
    let before = lim.rlim_cur;
    if lim.rlim_cur < lim.rlim_max {
        lim.rlim_cur = lim.rlim_max;
        // SAFETY: setrlimit reads the struct we own; raising the soft limit up to the hard one is
        // always permitted.
        if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &raw const lim) } != 0 {
            return Err(io::Error::last_os_error());
        }
    }
    Ok((before, lim.rlim_cur))
}

/// Elsewhere there is nothing to raise.
#[cfg(not(unix))]
pub(crate) fn raise_open_files_limit() -> io::Result<(u64, u64)> {
    Ok((0, 0))
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    /// A server on `l` that echoes every connection until its peer closes or the limits close it.
    fn echo_server(mut l: GuardedListener) -> tokio::task::JoinHandle<()> {
        tokio::spawn(async move {
            loop {
                let (mut io, _) = l.accept().await;
                tokio::spawn(async move {
                    let mut b = [0u8; 16];
                    while let Ok(n) = io.read(&mut b).await {
                        if n == 0 || io.write_all(&b[..n]).await.is_err() {
                            break;
                        }
                    }
                });
            }
        })
    }

    /// The cap per address closes extra connections at once (another address is unaffected);
    /// a silent connection is closed after the first-bytes deadline; one that talks stays.
    #[tokio::test]
    async fn caps_per_address_and_closes_silent_connections() {
        let limits = ConnLimits {
            per_address: 3,
            first_bytes: Duration::from_millis(300),
            idle: Duration::from_secs(5),
            lifetime: None,
        };
        let l = GuardedListener::new(TcpListener::bind("127.0.0.1:0").await.unwrap(), limits);
        let addr = axum::serve::Listener::local_addr(&l).unwrap();
        let server = echo_server(l);
        let from = |ip: &str| {
            let ip: IpAddr = ip.parse().unwrap();
            async move {
                let s = tokio::net::TcpSocket::new_v4().unwrap();
                s.bind(SocketAddr::new(ip, 0)).unwrap();
                s.connect(addr).await.unwrap()
            }
        };
        // Reads of a connection the server closed see EOF (or a reset).
        async fn closed(c: &mut TcpStream, within: Duration) -> bool {
            let mut b = [0u8; 4];
            matches!(tokio::time::timeout(within, c.read(&mut b)).await, Ok(Ok(0) | Err(_)))
        }
        let mut held = Vec::new();
        for _ in 0..3 {
            held.push(from("127.0.0.2").await);
        }
        let mut extra = from("127.0.0.2").await;
        assert!(closed(&mut extra, Duration::from_secs(2)).await, "a fourth connection from one address was kept");
        // Another address still gets in, and a connection that talks is served.
        let mut other = from("127.0.0.3").await;
        other.write_all(b"ping").await.unwrap();
        let mut b = [0u8; 4];
        other.read_exact(&mut b).await.unwrap();
        assert_eq!(&b, b"ping");
        // The three silent ones are closed after the first-bytes deadline, freeing the address.
        for c in &mut held {
            assert!(closed(c, Duration::from_secs(3)).await, "a silent connection was held");
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
        let mut again = from("127.0.0.2").await;
        again.write_all(b"pong").await.unwrap();
        again.read_exact(&mut b).await.unwrap();
        assert_eq!(&b, b"pong");
        server.abort();
    }

    /// Silent connections from many addresses (each under its per-address cap) hold at most
    /// the pool's cap: a new one evicts the oldest silent one, never one that has spoken, so a
    /// peer that talks is served through a flood that used to take every descriptor.
    #[tokio::test]
    async fn a_flood_from_many_addresses_evicts_only_silent_connections() {
        let limits = ConnLimits {
            per_address: 64,
            first_bytes: Duration::from_secs(30),
            idle: Duration::from_secs(30),
            lifetime: None,
        };
        let pool = SilentPool::new(8);
        let l = GuardedListener::with_pool(TcpListener::bind("127.0.0.1:0").await.unwrap(), limits, pool.clone());
        let addr = axum::serve::Listener::local_addr(&l).unwrap();
        let server = echo_server(l);
        let from = |k: u8| async move {
            let s = tokio::net::TcpSocket::new_v4().unwrap();
            s.bind(SocketAddr::new(IpAddr::from([127, 0, 0, 2 + k % 16]), 0)).unwrap();
            s.connect(addr).await.unwrap()
        };
        async fn echo(c: &mut TcpStream) -> bool {
            c.write_all(b"ping").await.unwrap();
            let mut b = [0u8; 4];
            tokio::time::timeout(Duration::from_secs(2), c.read_exact(&mut b)).await.is_ok_and(|r| r.is_ok())
        }
        // A peer that talks, then 64 silent connections from 16 addresses.
        let mut peer = from(0).await;
        assert!(echo(&mut peer).await);
        let mut flood = Vec::new();
        for k in 0..64 {
            flood.push(from(k).await);
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
        assert!(pool.silent() <= 8, "{} silent connections held", pool.silent());
        // The peer is still served, and a new peer gets in and is served.
        assert!(echo(&mut peer).await, "the talking peer was evicted");
        let mut late = from(5).await;
        assert!(echo(&mut late).await, "a new peer was not served through the flood");
        // The oldest silent ones were closed; the newest are held.
        let mut closed = 0;
        for c in &mut flood {
            let mut b = [0u8; 1];
            if matches!(tokio::time::timeout(Duration::from_millis(50), c.read(&mut b)).await, Ok(Ok(0) | Err(_))) {
                closed += 1;
            }
        }
        assert!(closed >= 64 - 8, "only {closed} of 64 silent connections were closed");
        server.abort();
    }

    #[cfg(unix)]
    #[test]
    fn the_open_files_soft_limit_is_raised_to_the_hard_limit() {
        let (before, after) = raise_open_files_limit().unwrap();
        assert!(after >= before);
        let mut lim = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
        // SAFETY: as in raise_open_files_limit.
        assert_eq!(unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &raw mut lim) }, 0);
        assert_eq!(lim.rlim_cur, lim.rlim_max);
    }
}
