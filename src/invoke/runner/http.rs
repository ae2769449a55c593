//! The `http` runner: one request to the row's `METHOD url`, with its credential applied.
//!
//! The URL is rendered with percent-encoding and its origin checked again after rendering
//! (`target.rs` already refuses slots in the scheme or host; this is defence in depth). The
//! credential is read from the environment at call time, passes the circuit breaker first, and
//! never appears in a result or a log. Redirects are followed only within the same origin, so a
//! header credential cannot be carried to another host. Responses are read up to a size cap.

use super::{
    Call, Environment, Ran, RunFuture, Runner, USER_AGENT, fetch_reason, read_capped, scrub,
    truncate_chars,
};
use crate::invoke::egress::{Egress, Resolver};
use crate::invoke::outcome::Failure;
use crate::invoke::upstream::Upstreams;
use crate::row::args::positional_to_object;
use crate::row::credential::{Credential, expand_env};
use crate::row::expand;
use crate::row::target::HttpTarget;
use crate::row::template::{self, Context, Vars};
use base64::Engine as _;
use reqwest::header::{AUTHORIZATION, CONTENT_TYPE, HeaderMap, HeaderName, HeaderValue};
use reqwest::{Method, Url};
use std::time::Duration;
use tracing::Instrument as _;

/// Limits of one request.
#[derive(Debug, Clone)]
pub struct HttpConfig {
    /// Time to establish the connection.
    pub connect_timeout: Duration,
    /// Time for the whole exchange, body included.
    pub timeout: Duration,
    /// Response bytes read at most; the rest is dropped and the outcome marked truncated.
    pub max_body_bytes: usize,
    /// Characters of a non-2xx body quoted in `ERR:http:<status>:`.
    pub error_body_chars: usize,
}

impl Default for HttpConfig {
    fn default() -> Self {
        HttpConfig {
            connect_timeout: Duration::from_secs(10),
            timeout: Duration::from_secs(30),
            max_body_bytes: 1024 * 1024,
            error_body_chars: 512,
        }
    }
}

pub struct HttpRunner {
    client: reqwest::Client,
    /// For requests that carry a credential: no redirect is followed, so the binding judged
    /// for the first URL is the only one the credential reaches (a hop on the same origin
    /// could leave a path prefix or change the method).
    credentialed: reqwest::Client,
    config: HttpConfig,
    egress: Egress,
    /// The access tokens of `oauth:` credentials.
    oauth: super::oauth::Tokens,
    /// The origins that keep not answering (`upstream.rs`).
    upstreams: Upstreams,
}

/// A client with the shared settings: user agent, timeouts, same-origin redirects only.
pub fn client(connect_timeout: Duration, timeout: Duration) -> Result<reqwest::Client, String> {
    builder(connect_timeout, timeout)
        .build()
        .map_err(|e| format!("cannot build the HTTP client: {e}"))
}

/// `client` for rows' requests: names resolved through the egress policy, so no request of a
/// row connects to an address the operator did not allow.
pub fn row_client(
    connect_timeout: Duration,
    timeout: Duration,
    egress: &Egress,
) -> Result<reqwest::Client, String> {
    builder(connect_timeout, timeout)
        .dns_resolver(Resolver::shared(egress))
        // A proxy from the environment would resolve the target itself, past the resolver.
        .no_proxy()
        .build()
        .map_err(|e| format!("cannot build the HTTP client: {e}"))
}

/// A `reqwest` client builder with TLS ready: rustls on ring, installed once as the process's
/// crypto provider (reqwest is built without a provider of its own, see Cargo.toml). Every
/// HTTP client of capdir starts here.
pub fn client_builder() -> reqwest::ClientBuilder {
    tls_ready();
    reqwest::Client::builder()
}

/// rustls on ring installed as the process's crypto provider, once; any client built after
/// this has TLS (the OTLP exporter's blocking client too).
pub fn tls_ready() {
    static TLS: std::sync::Once = std::sync::Once::new();
    TLS.call_once(|| {
        // Err only when a provider is installed already, which is as good.
        let _ = rustls::crypto::ring::default_provider().install_default();
    });
}

fn builder(connect_timeout: Duration, timeout: Duration) -> reqwest::ClientBuilder {
    let redirects = reqwest::redirect::Policy::custom(|attempt| {
        let same_origin = attempt
            .previous()
            .first()
            .is_some_and(|first| first.origin() == attempt.url().origin());
        if attempt.previous().len() > 5 {
            attempt.error("more than 5 redirects")
        } else if same_origin {
            attempt.follow()
        } else {
            // The 3xx comes back as the result, naming where it wanted to go.
            attempt.stop()
        }
    });
    client_builder()
        .user_agent(USER_AGENT)
        .connect_timeout(connect_timeout)
        .timeout(timeout)
        .redirect(redirects)
}

impl HttpRunner {
    pub fn new(
        config: HttpConfig,
        egress: Egress,
        upstreams: Upstreams,
    ) -> Result<HttpRunner, String> {
        Ok(HttpRunner {
            client: row_client(config.connect_timeout, config.timeout, &egress)?,
            credentialed: builder(config.connect_timeout, config.timeout)
                .redirect(reqwest::redirect::Policy::none())
                .dns_resolver(Resolver::shared(&egress))
                .no_proxy()
                .build()
                .map_err(|e| format!("cannot build the HTTP client: {e}"))?,
            config,
            egress,
            oauth: Default::default(),
            upstreams,
        })
    }
}

impl Runner for HttpRunner {
    fn name(&self) -> &'static str {
        "http"
    }

    fn run<'a>(&'a self, call: Call<'a>) -> RunFuture<'a> {
        Box::pin(async move {
            match self.request(call).await {
                Ok(ran) => ran,
                Err(f) => Ran::fail(f),
            }
        })
    }
}

/// The request as it will be sent, before any I/O.
#[derive(Debug)]
pub struct Prepared {
    pub method: Method,
    pub url: Url,
    pub headers: HeaderMap,
    pub body: Option<String>,
    /// Secret values applied, to scrub from anything returned.
    pub secrets: Vec<String>,
    /// The breaker entry this request counts against.
    pub credential_name: Option<String>,
}

/// Render the URL, check its origin, apply the credential and render the body; an `oauth:`
/// credential applies `access_token`, fetched before.
pub fn prepare(call: &Call<'_>, access_token: Option<&str>) -> Result<Prepared, Failure> {
    let row = &call.callable.row;
    let target = match &call.callable.http_target {
        Some(Ok(t)) => t,
        Some(Err(e)) => return Err(Failure::new("http:bad_target", &e.message)),
        None => {
            return Err(Failure::new(
                "http:bad_target",
                format!("{} is not an http row", row.key),
            ));
        }
    };
    let vars = Vars {
        args: call.args,
        ..Default::default()
    };
    // Named arguments (`{?limit}`, `{form:name}`): the pieces put on `input_schema`'s
    // properties, typed as `invoke::prepare` validated them; an empty piece is absent.
    let named = match &row.input_schema {
        Some(schema) => positional_to_object(schema, call.args),
        None => Default::default(),
    };
    let mut url = render_named_url(target, vars, &named)?;
    let method = Method::from_bytes(target.method.as_bytes())
        .map_err(|_| Failure::new("http:bad_target", &target.method))?;

    let credential = match &call.callable.credential {
        Ok(c) => c.as_ref(),
        Err(e) if e.code == "unknown_auth_prefix" => {
            let prefix = row.auth.trim().split(':').next().unwrap_or_default();
            return Err(Failure::new("auth:unknown_prefix", prefix));
        }
        Err(e) => return Err(Failure::new("auth:bad", &e.message)),
    };
    let mut headers = HeaderMap::new();
    let mut secrets = Vec::new();
    if let Some(c) = credential {
        // Bound first: a credential goes only where the owner bound it, or is never read.
        super::admit_credential(call, c, Some((&url, method.as_str())))?;
        apply_credential(
            c,
            call.invoker.env(),
            access_token,
            &mut url,
            &mut headers,
            &mut secrets,
        )?;
    }

    let payload = row.payload();
    let lines = match expand::lines(payload) {
        Some(Ok(l)) => Some(l),
        Some(Err(e)) => return Err(Failure::new("http:bad_template", e)),
        None => None,
    };
    let body = match &lines {
        Some(lines) => {
            line_headers(lines, &named, &mut headers)?;
            lines_body(lines, &named, &mut headers)?
        }
        None => template_body(payload, vars, &mut headers)?,
    };
    Ok(Prepared {
        method,
        url,
        headers,
        body,
        secrets,
        credential_name: credential.map(Credential::name),
    })
}

/// The headers of the request lines (`{header:…}`), each but the credential's, which an
/// argument never replaces.
fn line_headers(
    lines: &expand::Lines,
    named: &serde_json::Map<String, serde_json::Value>,
    headers: &mut HeaderMap,
) -> Result<(), Failure> {
    for (name, value) in expand::headers(lines, named).map_err(bad_args)? {
        let name = HeaderName::from_bytes(name.as_bytes())
            .map_err(|_| Failure::new("http:bad_template", format!("`{name}`")))?;
        let value = HeaderValue::from_str(&value).map_err(|_| {
            bad_args(format!(
                "{name}: a header value cannot carry these characters"
            ))
        })?;
        if !headers.contains_key(&name) {
            headers.insert(name, value);
        }
    }
    Ok(())
}

/// The body the request lines make (`{json:…}`, `{form:…}`, …), with its content type.
fn lines_body(
    lines: &expand::Lines,
    named: &serde_json::Map<String, serde_json::Value>,
    headers: &mut HeaderMap,
) -> Result<Option<String>, Failure> {
    match expand::body(lines, named).map_err(bad_args)? {
        Some(b) => {
            let ct = HeaderValue::from_str(&b.content_type)
                .map_err(|_| Failure::new("http:bad_template", b.content_type.clone()))?;
            headers.insert(CONTENT_TYPE, ct);
            Ok(Some(b.text))
        }
        None => Ok(None),
    }
}

/// The body a `$N` template renders, JSON when the template is JSON or one slot fills it
/// with a whole JSON document (`$3+`: imported rows take the request body as one argument).
fn template_body(
    payload: &str,
    vars: Vars<'_>,
    headers: &mut HeaderMap,
) -> Result<Option<String>, Failure> {
    if payload.trim().is_empty() {
        return Ok(None);
    }
    let ctx = Context::for_body(payload);
    let body = template::render(payload, ctx, vars).map_err(|m| missing(m.needed, m.got))?;
    if ctx == Context::Json || is_json_document(&body) {
        headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    }
    Ok(Some(body))
}

/// A JSON object or array, whole.
fn is_json_document(body: &str) -> bool {
    let t = body.trim_start();
    (t.starts_with('{') || t.starts_with('['))
        && serde_json::from_str::<serde::de::IgnoredAny>(body).is_ok()
}

fn missing(needed: usize, got: usize) -> Failure {
    Failure::new(
        "missing_args",
        format!("the template needs {needed} arguments, got {got}"),
    )
}

fn bad_args(detail: String) -> Failure {
    Failure::new("bad_args", detail)
}

/// The target URL with its slots filled, refused if the origin moved.
pub fn render_url(target: &HttpTarget, vars: Vars<'_>) -> Result<Url, Failure> {
    render_named_url(target, vars, &Default::default())
}

/// [`render_url`] with the target's expressions (`{?limit}`, `{/id}`) expanded from `named`.
pub fn render_named_url(
    target: &HttpTarget,
    vars: Vars<'_>,
    named: &serde_json::Map<String, serde_json::Value>,
) -> Result<Url, Failure> {
    let text =
        template::render(&target.url, Context::Url, vars).map_err(|m| missing(m.needed, m.got))?;
    // After the slots: a `$N` value is percent-encoded, so it can never open an expression.
    let text = expand::expand_url(&text, named).map_err(bad_args)?;
    let url = Url::parse(&text).map_err(|e| Failure::new("http:bad_url", e.to_string()))?;
    let origin = Url::parse(target.origin())
        .map_err(|e| Failure::new("http:bad_url", format!("{}: {e}", target.origin())))?;
    if !text.starts_with(target.origin()) || url.origin() != origin.origin() {
        return Err(Failure::new(
            "http:origin_changed",
            format!(
                "the rendered URL's origin is {}, the row's is {}",
                url.origin().ascii_serialization(),
                origin.origin().ascii_serialization()
            ),
        ));
    }
    Ok(url)
}

fn header_value(value: &str, env_names: &str) -> Result<HeaderValue, Failure> {
    let mut v = HeaderValue::from_str(value).map_err(|_| {
        Failure::new(
            "auth:bad_value",
            format!("{env_names} holds characters a header cannot carry"),
        )
    })?;
    v.set_sensitive(true);
    Ok(v)
}

/// Apply `credential` to a request (the `mcp` runner applies it to its HTTP sessions too).
pub(super) fn apply_credential(
    credential: &Credential,
    env: &Environment,
    access_token: Option<&str>,
    url: &mut Url,
    headers: &mut HeaderMap,
    secrets: &mut Vec<String>,
) -> Result<(), Failure> {
    match credential {
        Credential::Bearer { env: name } => {
            let token = env.require(name)?;
            headers.insert(
                AUTHORIZATION,
                header_value(&format!("Bearer {token}"), name)?,
            );
            secrets.push(token);
        }
        Credential::Basic { env: name } => {
            let pair = env.require(name)?;
            let encoded = base64::engine::general_purpose::STANDARD.encode(&pair);
            headers.insert(
                AUTHORIZATION,
                header_value(&format!("Basic {encoded}"), name)?,
            );
            secrets.push(encoded);
            secrets.extend(pair.split_once(':').map(|(_, pass)| pass.to_string()));
            secrets.push(pair);
        }
        Credential::Headers { headers: list } => {
            for (name, template) in list {
                // Every referenced variable must be set; report the first missing by name.
                for var in crate::row::credential::env_refs(template) {
                    secrets.push(env.require(&var)?);
                }
                let value = expand_env(template, &|n| env.get(n))
                    .map_err(|missing| Failure::new("auth:missing_env", missing))?;
                let header = HeaderName::from_bytes(name.as_bytes()).map_err(|_| {
                    Failure::new("auth:bad", format!("`{name}` is not a header name"))
                })?;
                headers.insert(header, header_value(&value, &credential.name())?);
            }
        }
        Credential::Query { param, env: name } => {
            let value = env.require(name)?;
            url.query_pairs_mut().append_pair(param, &value);
            secrets.push(value);
        }
        Credential::Env { .. } => {
            return Err(Failure::new(
                "auth:bad",
                "`env:` hands variables to an MCP server started as a command, not to a request",
            ));
        }
        Credential::OAuth(_) => {
            let Some(token) = access_token else {
                return Err(Failure::new(
                    "auth:bad",
                    "`oauth:` credentials are sent by http rows only",
                ));
            };
            headers.insert(
                AUTHORIZATION,
                header_value(&format!("Bearer {token}"), &credential.name())?,
            );
            secrets.push(token.to_string());
        }
    }
    Ok(())
}

impl HttpRunner {
    /// Send a request that carries a credential, following a redirect only within the same
    /// origin and only where the credential's binding admits the next URL with the next
    /// method (a hop could otherwise leave a bound path prefix, or turn a GET into a POST);
    /// any other redirect comes back as the answer. At most 5 hops.
    async fn send_credentialed(
        &self,
        call: &Call<'_>,
        credential: &Credential,
        p: &Prepared,
    ) -> Result<reqwest::Response, reqwest::Error> {
        let (mut method, mut url, mut body) = (p.method.clone(), p.url.clone(), p.body.clone());
        let mut hops = 0;
        loop {
            let mut req = self
                .credentialed
                .request(method.clone(), url.clone())
                .headers(p.headers.clone());
            if let Some(b) = &body {
                req = req.body(b.clone());
            }
            let resp = req.send().await?;
            let status = resp.status();
            let next = resp
                .headers()
                .get(reqwest::header::LOCATION)
                .and_then(|l| l.to_str().ok())
                .and_then(|l| url.join(l).ok())
                .filter(|n| status.is_redirection() && hops < 5 && n.origin() == url.origin());
            let Some(next) = next else {
                return Ok(resp);
            };
            // 307 and 308 keep the method and body; the others become a GET without one.
            if !matches!(status.as_u16(), 307 | 308) {
                method = Method::GET;
                body = None;
            }
            if super::admit_credential(call, credential, Some((&next, method.as_str()))).is_err() {
                return Ok(resp);
            }
            url = next;
            hops += 1;
        }
    }

    /// The access token of an `oauth:` credential, and the secrets it brought.
    async fn oauth_token(
        &self,
        call: &Call<'_>,
        fresh: bool,
    ) -> Result<Option<(String, Vec<String>)>, Failure> {
        match &call.callable.credential {
            Ok(Some(c @ Credential::OAuth(o))) => self
                .oauth
                .access(call, c, o, &self.credentialed, fresh)
                .await
                .map(Some),
            _ => Ok(None),
        }
    }

    async fn request(&self, call: Call<'_>) -> Result<Ran, Failure> {
        let token = self.oauth_token(&call, false).await?;
        let mut p = prepare(&call, token.as_ref().map(|t| t.0.as_str()))?;
        if let Some((_, brought)) = &token {
            p.secrets.extend(brought.iter().cloned());
        }
        self.egress
            .check_url(&p.url)
            .map_err(|why| Failure::new("egress:refused", why))?;
        let pass = self
            .upstreams
            .admit(&p.url.origin().ascii_serialization())?;
        let span = tracing::info_span!(
            "http",
            otel.name = %p.method,
            otel.kind = "client",
            http.request.method = %p.method,
            server.address = p.url.host_str().unwrap_or_default(),
            server.port = p.url.port_or_known_default(),
            http.response.status_code = tracing::field::Empty,
        );
        // The trace goes on only to an origin the owner bound a credential to: a row may name
        // any host, and the trace id would tell it which calls belong together.
        if call.invoker.bindings().names_origin(&p.url) {
            crate::telemetry::propagate(&span, &mut p.headers);
        }
        let exchanged = self.exchange(&call, p, token).instrument(span).await;
        match &exchanged {
            // No answer at all (a timeout, a reset, a refused connection), while sending or
            // while reading the body: the origin counts it.
            Err(f) if f.code == "http:fetch" => pass.failed(),
            Ok(_) => pass.answered(),
            // Refused before anything was sent (egress, the credential's breaker, a token).
            Err(_) => drop(pass),
        }
        exchanged
    }

    /// Send the prepared request (again once with a fresh `oauth:` token when the first is
    /// turned away) and read its answer.
    async fn exchange(
        &self,
        call: &Call<'_>,
        mut p: Prepared,
        token: Option<(String, Vec<String>)>,
    ) -> Result<Ran, Failure> {
        let breaker = call.invoker.breaker();
        let admitted = match &p.credential_name {
            Some(name) => Some((name.as_str(), breaker.admit(name).await?)),
            None => None,
        };
        let credentialed = p.credential_name.is_some();
        let cfg = &self.config;
        let fetch_failed = |e: reqwest::Error| {
            if let Some(why) = crate::invoke::egress::refusal_in(&e) {
                return Failure::new("egress:refused", why);
            }
            Failure::new(
                "http:fetch",
                scrub(
                    fetch_reason(e, cfg.connect_timeout, cfg.timeout),
                    &p.secrets,
                ),
            )
        };
        let credential = match &call.callable.credential {
            Ok(Some(c)) if credentialed => Some(c),
            _ => None,
        };
        let mut resp = if let Some(c) = credential {
            let mut resp = self
                .send_credentialed(call, c, &p)
                .await
                .map_err(fetch_failed)?;
            if resp.status() == reqwest::StatusCode::UNAUTHORIZED && token.is_some() {
                // The access token was revoked or expired early: one fresh token, one more
                // try, before the breaker counts the answer.
                if let Some((fresh, brought)) = self.oauth_token(call, true).await? {
                    let mut again = prepare(call, Some(&fresh))?;
                    again.secrets.extend(brought);
                    resp = self
                        .send_credentialed(call, c, &again)
                        .await
                        .map_err(fetch_failed)?;
                    p.secrets.extend(again.secrets);
                }
            }
            resp
        } else {
            self.send_plain(&p).await.map_err(fetch_failed)?
        };
        let status = resp.status();
        tracing::Span::current().record("http.response.status_code", status.as_u16());
        if let Some((name, before)) = admitted {
            breaker.record(name, status.as_u16(), before).await;
        }
        let (body, truncated) = read_capped(&mut resp, cfg.max_body_bytes)
            .await
            .map_err(|e| {
                Failure::new(
                    "http:fetch",
                    scrub(
                        format!(
                            "reading the {} response: {}",
                            status.as_u16(),
                            fetch_reason(e, cfg.connect_timeout, cfg.timeout)
                        ),
                        &p.secrets,
                    ),
                )
            })?;
        let body = scrub(body, &p.secrets);
        let location = resp.headers().get(reqwest::header::LOCATION);
        Ok(self.answer(status, body, truncated, location, credentialed, &p.secrets))
    }

    /// A request that carries no credential, sent with the runner's plain client.
    async fn send_plain(&self, p: &Prepared) -> reqwest::Result<reqwest::Response> {
        let mut req = self
            .client
            .request(p.method.clone(), p.url.clone())
            .headers(p.headers.clone());
        if let Some(body) = &p.body {
            req = req.body(body.clone());
        }
        req.send().await
    }

    /// The caller's outcome of an answer: `HTTP 200:…` (said when truncated), or a failure
    /// named by the status with the start of the body, or where a redirect not followed went.
    fn answer(
        &self,
        status: reqwest::StatusCode,
        body: String,
        truncated: bool,
        location: Option<&reqwest::header::HeaderValue>,
        credentialed: bool,
        secrets: &[String],
    ) -> Ran {
        let cfg = &self.config;
        if status.is_success() {
            let mut out = format!("HTTP {}:{body}", status.as_u16());
            if truncated {
                out.push_str(&format!(
                    "\n[capdir: response truncated at {} bytes]",
                    cfg.max_body_bytes
                ));
            }
            return Ran {
                result: Ok(out),
                usage: Default::default(),
                truncated,
            };
        }
        let mut detail = truncate_chars(&body, cfg.error_body_chars).to_string();
        if status.is_redirection()
            && let Some(loc) = location
        {
            let why = if credentialed {
                "redirect not followed (another origin, or outside the credential's binding)"
            } else {
                "redirect to another origin not followed"
            };
            detail = format!("{why}: {}", String::from_utf8_lossy(loc.as_bytes()));
        }
        Ran {
            result: Err(Failure::new(
                format!("http:{}", status.as_u16()),
                scrub(detail, secrets),
            )),
            usage: Default::default(),
            truncated,
        }
    }
}
