//! The accept loop `capdir serve` runs instead of `axum::serve`, which has no timeouts: a
//! client that sends nothing, or one header line a second, or half a body, held its
//! connection (and a file descriptor) for as long as it liked, and enough of them made the
//! process refuse every connection with `accept error: Too many open files`.
//!
//! Each connection is served by hyper-util's `auto::Builder` (HTTP/1.1 and HTTP/2, with
//! upgrades, as `axum::serve` did), with these bounds:
//!
//! - **headers**: hyper's HTTP/1 `header_read_timeout`. In hyper 1.12 its timer also starts
//!   when a keep-alive connection goes back to waiting for the next request (`State::idle`
//!   asks for a read, `poll_read_head` arms the timer), so on HTTP/1 the wait for a next
//!   request is bounded by the shorter of the header and idle timeouts. Hyper's timer only
//!   runs once hyper-util has seen the first bytes (it sniffs the HTTP/2 preface first, with
//!   no timeout), so a connection that has not begun a request is also closed here once the
//!   header timeout has passed since it was accepted.
//! - **idle**: a connection with no request in flight for the idle timeout is shut down
//!   gracefully (HTTP/2 gets a GOAWAY), then closed. A request is in flight from its head
//!   until its response body is dropped, so a long response (the `GET /mcp` event stream)
//!   keeps its connection however quiet it is.
//! - **body**: a request body must have arrived whole within the body timeout of its head;
//!   past that the handler's read fails and the request is answered `408` (with
//!   `Connection: close` on HTTP/1), whatever the handler made of the failed read. The
//!   deadline runs over the whole body, not between chunks, so a body trickled a byte at a
//!   time does not keep it open either. Responses have no deadline.
//! - **count**: at most `max_connections` connections are served at once; one more is
//!   answered `503` with `Retry-After: 1`, written straight on the socket, and closed. When
//!   `accept` itself fails (`EMFILE`), the failure is logged once per burst and accepting
//!   pauses briefly instead of spinning.
//!
//! Every request carries `ConnectInfo<SocketAddr>` with its peer's address. Requests built
//! in-process (tests with `oneshot`) have none, so handlers must treat it as optional.

use super::ApiError;
use axum::Router;
use axum::body::Bytes;
use axum::extract::ConnectInfo;
use axum::http::{HeaderValue, Request, Response, StatusCode, Version, header};
use axum::response::IntoResponse;
use hyper::body::{Body as HttpBody, Frame, Incoming, SizeHint};
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto::Builder;
use std::convert::Infallible;
use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{Semaphore, watch};
use tokio::time::{Instant, Sleep};
use tower::ServiceExt;

/// How the dispatcher's connections are bounded.
#[derive(Clone, Copy, Debug)]
pub struct ConnectionLimits {
    /// How long a client may take to send a request's head (and, before its first request,
    /// to start one).
    pub header_timeout: Duration,
    /// How long a request's body may take to arrive whole, from its head.
    pub body_timeout: Duration,
    /// How long a connection may stay open with no request in flight.
    pub idle_timeout: Duration,
    /// Connections served at once; one more is answered 503.
    pub max_connections: usize,
}

/// After a graceful shutdown of an idle connection, how long before it is closed outright.
const CLOSE_GRACE: Duration = Duration::from_secs(1);
/// How long a refused connection is kept to read what its client sent (so closing it does
/// not reset the connection before the client has read the 503).
const REFUSAL_LINGER: Duration = Duration::from_secs(2);
/// How long accepting pauses after `accept` itself failed (out of file descriptors).
const ACCEPT_PAUSE: Duration = Duration::from_millis(100);

/// The soft `RLIMIT_NOFILE` of this process; `None` when it is unlimited or unreadable.
pub fn open_file_limit() -> Option<u64> {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit only writes the struct it is given.
    let ok = unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) } == 0;
    (ok && limit.rlim_cur != libc::RLIM_INFINITY).then_some(limit.rlim_cur)
}

/// The file descriptors kept back from connections under a soft limit of `soft`: for the
/// ledger, the site's files, upstream sockets, MCP servers' pipes and refusals in progress.
/// A quarter of the limit, at least 32 and at most 1024.
fn reserve(soft: u64) -> u64 {
    (soft / 4).clamp(32, 1024)
}

/// The most connections a process with a soft open-file limit of `soft` serves at once: the
/// limit less `reserve` (1024 → 768, 64 → 32), never under 1; 65 536 when unlimited.
pub fn connection_budget(soft: Option<u64>) -> usize {
    match soft {
        None => 65_536,
        Some(soft) => {
            usize::try_from(soft.saturating_sub(reserve(soft)).clamp(1, 1 << 20)).unwrap_or(1 << 20)
        }
    }
}

/// Refused connections kept open at once to linger; past that a refusal is written and the
/// socket closed at once.
fn refusal_slots(max_connections: usize) -> usize {
    (max_connections / 4).clamp(4, 256)
}

/// Serve `app` on `listener` within `limits`, until the process ends.
pub async fn serve(listener: TcpListener, app: Router, limits: ConnectionLimits) -> io::Result<()> {
    let builder = Arc::new(builder(&limits));
    let max = limits.max_connections.max(1);
    let slots = Arc::new(Semaphore::new(max));
    let lingering = Arc::new(Semaphore::new(refusal_slots(max)));
    let refusal = Bytes::from(refusal(max));
    // Accept failures and refusals in the current burst: logged when it starts and ends.
    let mut failures = 0u64;
    let mut refused = 0u64;
    loop {
        let (stream, peer) = match listener.accept().await {
            Ok(accepted) => {
                if failures > 0 {
                    tracing::info!(failures, "accepting connections again");
                    failures = 0;
                }
                accepted
            }
            Err(e) if is_connection_error(&e) => continue,
            Err(e) => {
                if failures == 0 {
                    tracing::error!(
                        error = %e,
                        "accept failed; pausing accepts briefly (repeats are counted, not logged)"
                    );
                }
                failures += 1;
                tokio::time::sleep(ACCEPT_PAUSE).await;
                continue;
            }
        };
        match slots.clone().try_acquire_owned() {
            Ok(slot) => {
                if refused > 0 {
                    tracing::info!(refused, "connections below the limit again");
                    refused = 0;
                }
                let (builder, app) = (builder.clone(), app.clone());
                tokio::spawn(async move {
                    connection(&builder, stream, peer, app, &limits).await;
                    drop(slot);
                });
            }
            Err(_) => {
                if refused == 0 {
                    tracing::warn!(
                        max_connections = max,
                        "connection limit reached; new connections get 503 until some close"
                    );
                }
                refused += 1;
                refuse(stream, &lingering, refusal.clone());
            }
        }
    }
}

fn builder(limits: &ConnectionLimits) -> Builder<TokioExecutor> {
    let mut builder = Builder::new(TokioExecutor::new());
    builder
        .http1()
        .timer(TokioTimer::new())
        .header_read_timeout(limits.header_timeout);
    // As `axum::serve`: the CONNECT protocol HTTP/2 websockets need.
    builder
        .http2()
        .timer(TokioTimer::new())
        .enable_connect_protocol();
    builder
}

/// Errors of one connection that `accept` reports; the next accept goes on as usual.
fn is_connection_error(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::ConnectionRefused
            | io::ErrorKind::ConnectionAborted
            | io::ErrorKind::ConnectionReset
    )
}

/// The whole answer a connection past the limit gets, as ApiError's JSON.
fn refusal(max: usize) -> Vec<u8> {
    let body = ApiError::new(
        StatusCode::SERVICE_UNAVAILABLE,
        "saturated",
        format!("{max} connections are open, the most this dispatcher serves at once"),
        "retry after the pause the Retry-After header gives",
    )
    .to_json()
    .to_string();
    format!(
        "HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\n\
         retry-after: 1\r\nconnection: close\r\ncontent-length: {}\r\n\r\n{body}",
        body.len()
    )
    .into_bytes()
}

/// Answer a connection past the limit with `refusal` and close it. It lingers (in a slot of
/// `lingering`) to read what the client sends until the client closes, so the close does
/// not reset the connection under the answer; with every slot taken, the answer is written
/// without waiting (it fits a fresh socket's buffer) and the socket closed.
fn refuse(stream: TcpStream, lingering: &Arc<Semaphore>, refusal: Bytes) {
    match lingering.clone().try_acquire_owned() {
        Ok(slot) => {
            tokio::spawn(async move {
                let mut stream = stream;
                let _ = tokio::time::timeout(REFUSAL_LINGER, async {
                    stream.write_all(&refusal).await?;
                    stream.shutdown().await?;
                    let mut sink = [0u8; 1024];
                    while stream.read(&mut sink).await? > 0 {}
                    io::Result::Ok(())
                })
                .await;
                drop(slot);
            });
        }
        Err(_) => {
            if let Ok(stream) = stream.into_std() {
                use std::io::Write;
                let _ = (&stream).write(&refusal);
                let _ = stream.shutdown(std::net::Shutdown::Write);
            }
        }
    }
}

/// What the connection loop watches: requests in flight, and how many ever began.
#[derive(Clone, Copy, Default)]
struct Activity {
    in_flight: usize,
    begun: u64,
}

/// Serve one connection until it ends, is idle too long, or never begins a request.
async fn connection(
    builder: &Builder<TokioExecutor>,
    stream: TcpStream,
    peer: SocketAddr,
    app: Router,
    limits: &ConnectionLimits,
) {
    let activity = Arc::new(watch::channel(Activity::default()).0);
    let mut watched = activity.subscribe();
    let service = PerConnection {
        app,
        peer,
        body_timeout: limits.body_timeout,
        activity: activity.clone(),
    };
    let conn = builder.serve_connection_with_upgrades(TokioIo::new(stream), service);
    tokio::pin!(conn);
    // Before the first request, the wait is a header read's; after one, the idle timeout's.
    let mut wait = limits.header_timeout;
    let mut idle_since = Some(Instant::now());
    let mut seen = 0u64;
    let mut closing = false;
    loop {
        let deadline = idle_since.map(|since| since + wait);
        tokio::select! {
            result = conn.as_mut() => {
                if let Err(e) = result {
                    tracing::debug!(%peer, error = %e, "connection ended with an error");
                }
                return;
            }
            Ok(()) = watched.changed() => {
                let now = *watched.borrow_and_update();
                // A request began since the last look (it may be over already).
                let began = now.begun != seen;
                seen = now.begun;
                if began && !closing {
                    wait = limits.idle_timeout;
                }
                idle_since = if now.in_flight > 0 {
                    None
                } else if began || idle_since.is_none() {
                    Some(Instant::now())
                } else {
                    idle_since
                };
            }
            () = tokio::time::sleep_until(deadline.unwrap_or_else(far_future)), if deadline.is_some() => {
                if closing {
                    // Still open a grace after the shutdown, with nothing in flight.
                    return;
                }
                conn.as_mut().graceful_shutdown();
                closing = true;
                wait = CLOSE_GRACE;
                idle_since = Some(Instant::now());
            }
        }
    }
}

fn far_future() -> Instant {
    Instant::now() + Duration::from_secs(86_400 * 365)
}

/// The service for one connection's requests: the router, with the peer's address, the
/// body's deadline and the count of requests in flight.
#[derive(Clone)]
struct PerConnection {
    app: Router,
    peer: SocketAddr,
    body_timeout: Duration,
    activity: Arc<watch::Sender<Activity>>,
}

type ResponseFuture =
    Pin<Box<dyn Future<Output = Result<Response<axum::body::Body>, Infallible>> + Send>>;

impl hyper::service::Service<Request<Incoming>> for PerConnection {
    type Response = Response<axum::body::Body>;
    type Error = Infallible;
    type Future = ResponseFuture;

    fn call(&self, req: Request<Incoming>) -> ResponseFuture {
        let in_flight = InFlight::begin(self.activity.clone());
        let (mut parts, body) = req.into_parts();
        parts.extensions.insert(ConnectInfo(self.peer));
        let version = parts.version;
        let timed_out = Arc::new(AtomicBool::new(false));
        let body = if body.is_end_stream() {
            axum::body::Body::new(body)
        } else {
            axum::body::Body::new(DeadlineBody {
                inner: body,
                deadline: Instant::now() + self.body_timeout,
                sleep: None,
                timed_out: timed_out.clone(),
            })
        };
        let request = Request::from_parts(parts, body);
        let app = self.app.clone();
        let body_timeout = self.body_timeout;
        Box::pin(async move {
            let response = match app.oneshot(request).await {
                Ok(response) => response,
                Err(never) => match never {},
            };
            let response = if timed_out.load(Ordering::Acquire) {
                body_timed_out(body_timeout, version)
            } else {
                response
            };
            Ok(response.map(|body| {
                axum::body::Body::new(Tracked {
                    inner: body,
                    _in_flight: in_flight,
                })
            }))
        })
    }
}

/// The answer to a request whose body did not arrive in time; HTTP/1 closes the connection
/// after it, since the rest of the body may still be on its way.
fn body_timed_out(timeout: Duration, version: Version) -> Response<axum::body::Body> {
    let mut response = ApiError::new(
        StatusCode::REQUEST_TIMEOUT,
        "body_timeout",
        format!(
            "the request body did not arrive within {}s",
            timeout.as_secs()
        ),
        "send the whole body without pausing",
    )
    .into_response();
    if version <= Version::HTTP_11 {
        response
            .headers_mut()
            .insert(header::CONNECTION, HeaderValue::from_static("close"));
    }
    response
}

/// One request in flight on a connection, from its head until its response body is dropped
/// (or the request's future is, when the client goes first).
struct InFlight(Arc<watch::Sender<Activity>>);

impl InFlight {
    fn begin(activity: Arc<watch::Sender<Activity>>) -> InFlight {
        activity.send_modify(|a| {
            a.in_flight += 1;
            a.begun += 1;
        });
        InFlight(activity)
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.send_modify(|a| a.in_flight -= 1);
    }
}

/// A response body that keeps its request counted as in flight while it lives.
struct Tracked {
    inner: axum::body::Body,
    _in_flight: InFlight,
}

impl HttpBody for Tracked {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, axum::Error>>> {
        Pin::new(&mut self.inner).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

/// The request body did not arrive within the body timeout.
#[derive(Debug)]
struct BodyTimedOut;

impl std::fmt::Display for BodyTimedOut {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("the request body did not arrive in time")
    }
}

impl std::error::Error for BodyTimedOut {}

/// A request body that fails once its deadline has passed with the body still arriving;
/// what already arrived is read first.
struct DeadlineBody {
    inner: Incoming,
    deadline: Instant,
    /// Armed the first time the body has nothing to give.
    sleep: Option<Pin<Box<Sleep>>>,
    timed_out: Arc<AtomicBool>,
}

type BoxError = Box<dyn std::error::Error + Send + Sync>;

impl HttpBody for DeadlineBody {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        let this = &mut *self;
        if this.timed_out.load(Ordering::Acquire) {
            return Poll::Ready(Some(Err(BodyTimedOut.into())));
        }
        match Pin::new(&mut this.inner).poll_frame(cx) {
            Poll::Ready(frame) => Poll::Ready(frame.map(|f| f.map_err(Into::into))),
            Poll::Pending => {
                let deadline = this.deadline;
                let sleep = this
                    .sleep
                    .get_or_insert_with(|| Box::pin(tokio::time::sleep_until(deadline)));
                match sleep.as_mut().poll(cx) {
                    Poll::Ready(()) => {
                        this.timed_out.store(true, Ordering::Release);
                        Poll::Ready(Some(Err(BodyTimedOut.into())))
                    }
                    Poll::Pending => Poll::Pending,
                }
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_budget_leaves_room_below_the_file_limit() {
        assert_eq!(connection_budget(Some(64)), 32);
        assert_eq!(connection_budget(Some(1024)), 768);
        assert_eq!(connection_budget(Some(65_536)), 64_512);
        assert_eq!(connection_budget(Some(16)), 1);
        assert_eq!(connection_budget(None), 65_536);
    }

    #[test]
    fn the_refusal_is_a_whole_response() {
        let text = String::from_utf8(refusal(8)).unwrap();
        let (head, body) = text.split_once("\r\n\r\n").unwrap();
        assert!(head.starts_with("HTTP/1.1 503 Service Unavailable\r\n"));
        assert!(head.contains("\r\nretry-after: 1"));
        assert!(head.contains("\r\nconnection: close"));
        assert!(head.contains(&format!("\r\ncontent-length: {}", body.len())));
        let json: serde_json::Value = serde_json::from_str(body).unwrap();
        assert_eq!(json["error"]["code"], "saturated");
    }
}
