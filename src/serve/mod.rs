//! The dispatcher over HTTP (DESIGN.md §6): one front for asking, reading contracts, invoking
//! with a durable receipt, confirming a receipt, the counts, MCP (`/mcp`, in `mcp::http`) and
//! the static site. This is the only folder that speaks HTTP: the work is `dispatch`'s, and
//! here its answers and errors become statuses, headers and JSON bodies.
//!
//! `app(state)` builds the whole router so tests drive it in-process with `oneshot`. The rows
//! and the search index live in the `Dispatcher` behind an `ArcSwap`: a poller notices a new
//! build and swaps them in whole, so every request sees one catalogue from start to end and
//! none fails during the swap. Files of the site are opened by path on every request, because
//! a build replaces the site directory by exchanging it.

mod api;
mod approvals;
mod directory;
mod error;
mod files;
mod ledger;
mod limit;
pub mod listen;
pub mod mcp;
mod metrics;
pub mod openapi;
mod receipt;
mod share;

pub use api::MAX_ASK_LIMIT;
pub use error::{ApiError, ErrorBody};
pub use files::{data_outside_site, ledger_outside_site};

use crate::access::auth::{self, Caller, Keys};
use crate::access::token::TokenKey;
use crate::dispatch::{self, Dispatcher, Live};
use crate::invoke::InvokerConfig;
use crate::ledger::Ledger;
use axum::Router;
use axum::extract::{Request, State};
use axum::http::{HeaderMap, header};
use axum::routing::{MethodRouter, get, post};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;
use tokio::sync::watch;

/// The largest request body accepted by default.
pub const DEFAULT_BODY_LIMIT: usize = 256 * 1024;

/// Everything a handler needs; cloning clones an `Arc`.
#[derive(Clone)]
pub struct AppState {
    pub(crate) inner: Arc<Shared>,
}

pub(crate) struct Shared {
    pub(crate) dispatcher: Arc<Dispatcher>,
    /// The dispatcher's public URL (no trailing slash): links in answers, tokens' audience.
    pub(crate) base: String,
    pub(crate) body_limit: usize,
    /// HTTP requests received, for `/metrics`.
    pub(crate) requests: AtomicU64,
    pub(crate) mcp: mcp::Endpoint,
    /// The write API (`--write`), when on.
    pub(crate) writer: Option<Arc<crate::write::Writer>>,
    /// `--public-metrics`: `/metrics` answers without the owner key.
    pub(crate) public_metrics: bool,
    /// Keyless confirms per peer address.
    pub(crate) confirms: limit::PerAddress,
}

/// How a dispatcher is set up.
pub struct Settings {
    pub site: PathBuf,
    pub ledger: Arc<dyn Ledger>,
    /// `CAPDIR_OWNER_KEY`; without it nobody is the owner.
    pub owner_key: Option<String>,
    /// The key capability tokens are signed with; without it every token is refused.
    pub token_key: Option<TokenKey>,
    /// `capdir serve --open`: anonymous callers may invoke rows that are not sensitive and
    /// use no credential (for local use).
    pub open: bool,
    /// The dispatcher's public URL: links in answers, and the audience tokens must name.
    pub base_url: String,
    pub config: InvokerConfig,
    pub body_limit: usize,
    /// Invocations running at once before new ones get 503.
    pub max_inflight: usize,
    /// What one call may spend on the calls nested in it (steps, tool calls, tags).
    pub tree_budget: dispatch::TreeBudget,
    /// How long a call waits for a person's approval (`--approval-ttl`).
    pub approval_ttl: Duration,
    /// What `/mcp` lists: one tool per row, or the ask/contract/invoke trio.
    pub mcp: mcp::Options,
    /// `--catalogue DIR --write direct|propose`: the site opened for writes; none keeps the
    /// write API off.
    pub write: Option<crate::write::Ready>,
    /// `/metrics` without the owner key (for a scraper that cannot send one).
    pub public_metrics: bool,
    /// Keyless confirms one peer address may ask per minute.
    pub confirms_per_minute: u32,
}

impl Settings {
    pub fn new(site: impl Into<PathBuf>, ledger: Arc<dyn Ledger>) -> Settings {
        Settings {
            site: site.into(),
            ledger,
            owner_key: None,
            token_key: None,
            open: false,
            base_url: "http://127.0.0.1:8080".into(),
            config: InvokerConfig::default(),
            body_limit: DEFAULT_BODY_LIMIT,
            max_inflight: 1024,
            tree_budget: dispatch::TreeBudget::default(),
            approval_ttl: dispatch::DEFAULT_APPROVAL_TTL,
            mcp: mcp::Options::default(),
            write: None,
            public_metrics: false,
            confirms_per_minute: 600,
        }
    }
}

impl AppState {
    pub fn new(settings: Settings) -> anyhow::Result<AppState> {
        let base = settings.base_url.trim_end_matches('/').to_string();
        let dispatcher = Dispatcher::new(dispatch::Settings {
            site: settings.site,
            ledger: settings.ledger,
            keys: Keys {
                owner: settings.owner_key.filter(|k| !k.is_empty()),
                token: settings.token_key,
            },
            open: settings.open,
            audience: base.clone(),
            config: settings.config,
            max_inflight: settings.max_inflight,
            tree_budget: settings.tree_budget,
            approval_ttl: settings.approval_ttl,
        })?;
        let dispatcher = Arc::new(dispatcher);
        let writer = match settings.write {
            Some(ready) => Some(Arc::new(ready.writer(dispatcher.clone())?)),
            None => None,
        };
        Ok(AppState {
            inner: Arc::new(Shared {
                dispatcher,
                base,
                body_limit: settings.body_limit,
                requests: AtomicU64::new(0),
                mcp: mcp::Endpoint::new(settings.mcp),
                writer,
                public_metrics: settings.public_metrics,
                confirms: limit::PerAddress::new(
                    settings.confirms_per_minute,
                    Duration::from_secs(60),
                ),
            }),
        })
    }

    /// The core every invocation goes through.
    pub fn dispatcher(&self) -> &Arc<Dispatcher> {
        &self.inner.dispatcher
    }

    /// What credentials are checked against (for `auth::authenticate`).
    pub fn keys(&self) -> &Keys {
        self.inner.dispatcher.keys()
    }

    /// Whether anonymous callers may invoke rows that are not sensitive and use no credential.
    pub fn is_open(&self) -> bool {
        self.inner.dispatcher.is_open()
    }

    /// The ledger receipts and token revocations live in.
    pub fn ledger(&self) -> &Arc<dyn Ledger> {
        self.inner.dispatcher.ledger()
    }

    /// The catalogue requests see now.
    pub fn live(&self) -> Arc<Live> {
        self.inner.dispatcher.live()
    }

    /// The write API, when this dispatcher takes writes.
    pub fn writer(&self) -> Option<&Arc<crate::write::Writer>> {
        self.inner.writer.as_ref()
    }

    /// The site directory the static files are served from.
    pub(crate) fn site(&self) -> &Path {
        self.inner.dispatcher.site()
    }

    /// Reload when `catalogue.sqlite` changed; true when a new build was swapped in.
    pub fn reload_if_changed(&self) -> bool {
        self.inner.dispatcher.reload_if_changed()
    }

    /// A receiver that changes after every reload.
    pub fn subscribe_reloads(&self) -> watch::Receiver<u64> {
        self.inner.dispatcher.subscribe_reloads()
    }

    /// Poll the site every `every` for a new build, until the runtime stops.
    pub fn spawn_reloader(&self, every: Duration) {
        self.inner.dispatcher.spawn_reloader(every);
    }
}

/// Every route besides the static site: its path, its methods, its handlers. The router is
/// built from this table, and `/openapi.json` documents exactly its paths and methods
/// (`tests/openapi.rs` checks the document against `routes()` and probes the router for
/// every method, so the three cannot drift apart).
fn table() -> [(
    &'static str,
    &'static [&'static str],
    MethodRouter<AppState>,
); 17] {
    [
        (
            "/api/dispatch",
            &["get", "post"],
            get(api::dispatch_get).post(api::dispatch_post),
        ),
        (
            "/receipt/{id}",
            &["get", "post"],
            get(receipt::receipt).post(receipt::receipt_form),
        ),
        ("/api/route", &["post"], post(api::route_post)),
        (
            "/api/directory/{key}",
            &["get", "put", "patch", "delete"],
            get(directory::get_row)
                .put(directory::put)
                .patch(directory::patch)
                .delete(directory::delete),
        ),
        ("/api/directory", &["get"], get(directory::fields)),
        ("/metrics", &["get"], get(metrics::metrics)),
        (
            "/mcp",
            &["get", "post", "delete"],
            get(mcp::http::open_stream)
                .post(mcp::http::post)
                .delete(mcp::http::end_session),
        ),
        ("/openapi.json", &["get"], get(api::openapi)),
        ("/api/ledger/checkpoint", &["get"], get(ledger::checkpoint)),
        ("/api/ledger/key", &["get"], get(ledger::key)),
        (
            "/api/ledger/consistency",
            &["get"],
            get(ledger::consistency),
        ),
        ("/api/approvals", &["get"], get(approvals::list)),
        (
            "/api/approvals/{id}",
            &["get", "post"],
            get(approvals::show).post(approvals::decide),
        ),
        (
            "/api/approvals/{id}/result",
            &["get"],
            get(approvals::result),
        ),
        ("/approvals", &["get"], get(approvals::page)),
        ("/approvals.js", &["get"], get(approvals::script)),
        ("/approvals.css", &["get"], get(approvals::style)),
    ]
}

/// The routes the dispatcher answers besides the static site, with their methods.
pub fn routes() -> Vec<(&'static str, &'static [&'static str])> {
    table().into_iter().map(|(p, m, _)| (p, m)).collect()
}

/// The dispatcher's routes.
pub fn app(state: AppState) -> Router {
    table()
        .into_iter()
        .fold(Router::new(), |router, (path, _, handlers)| {
            router.route(path, handlers)
        })
        .fallback(get(files::static_file))
        .layer(axum::middleware::from_fn_with_state(state.clone(), traced))
        .with_state(state)
}

/// Every request counted for `/metrics` and run in a span of its own (`METHOD /route`, an
/// OpenTelemetry server span), a child of the caller's trace when its `traceparent` names
/// one: the calls it makes, their receipts and the requests they send are in that trace.
async fn traced(
    State(state): State<AppState>,
    req: Request,
    next: axum::middleware::Next,
) -> axum::response::Response {
    use tracing::Instrument as _;
    state.inner.requests.fetch_add(1, Ordering::Relaxed);
    let route = req
        .extensions()
        .get::<axum::extract::MatchedPath>()
        .map(|p| p.as_str().to_string());
    let method = req.method().as_str().to_string();
    let name = match &route {
        Some(route) => format!("{method} {route}"),
        None => method.clone(),
    };
    let span = tracing::info_span!(
        "request",
        otel.name = %name,
        otel.kind = "server",
        http.request.method = %method,
        http.route = route.as_deref(),
        http.response.status_code = tracing::field::Empty,
    );
    crate::telemetry::adopt(&span, req.headers());
    let response = next.run(req).instrument(span.clone()).await;
    span.record("http.response.status_code", response.status().as_u16());
    response
}

/// The address a request came from, when it came over a socket (the listener puts it in
/// the request's extensions; requests driven in-process have none).
pub(crate) fn peer(extensions: &axum::http::Extensions) -> Option<std::net::IpAddr> {
    extensions
        .get::<axum::extract::ConnectInfo<std::net::SocketAddr>>()
        .map(|c| c.0.ip())
}

/// The credential a request sends, if any: `x-owner-key: …`, else `Authorization: Bearer …`.
pub fn sent_credential(headers: &HeaderMap) -> Option<&str> {
    headers
        .get("x-owner-key")
        .and_then(|v| v.to_str().ok())
        .or_else(|| {
            headers
                .get(header::AUTHORIZATION)
                .and_then(|v| v.to_str().ok())
                .and_then(|v| v.strip_prefix("Bearer "))
        })
        .map(str::trim)
        .filter(|v| !v.is_empty())
}

/// Who sent `headers` (`auth::authenticate` on the credential they carry).
pub fn authenticate(keys: &Keys, headers: &HeaderMap) -> Result<Caller, ApiError> {
    Ok(auth::authenticate(keys, sent_credential(headers))?)
}
