//! Runners: the four ways a row executes (DESIGN.md §3), and the `mcp` runner a row may name
//! in `runner:`, behind one trait.
//!
//! The invoker does everything that is the same for every row — find it, map and validate the
//! arguments, time it, classify the result — and hands a runner only the row and its positional
//! pieces. A runner answers text or a named `Failure`; it never panics on input and never puts a
//! secret in what it returns.

pub mod agent;
pub mod flow;
pub mod fn_runner;
pub mod http;
pub mod mcp;
pub mod oauth;

use crate::invoke::Input;
use crate::invoke::Invoker;
use crate::invoke::authority::{CallContext, Node, Via, now_rfc3339};
use crate::invoke::outcome::{Failure, Usage};
use crate::invoke::outcome::{Outcome, Status};
use crate::invoke::rowset::Callable;
use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;
use tracing::Instrument as _;

/// What a runner is handed.
#[derive(Clone, Copy)]
pub struct Call<'a> {
    pub callable: &'a Callable,
    /// The positional pieces `$1`, `$2`, … refer to, already validated.
    pub args: &'a [String],
    /// For runners that call other rows (flows) and for shared state (credentials, breaker).
    pub invoker: &'a Invoker,
    /// Where it runs: inside which flows, under which authority, below which receipt.
    pub context: &'a CallContext,
}

/// What a runner answers: the result, and what it used on the way (also on failure: a flow
/// that fails at step 3 has still paid for steps 1 and 2).
#[derive(Debug, Clone, PartialEq)]
pub struct Ran {
    pub result: Result<String, Failure>,
    pub usage: Usage,
    /// A response was cut at the size cap.
    pub truncated: bool,
}

impl Ran {
    pub fn ok(output: impl Into<String>) -> Ran {
        Ran {
            result: Ok(output.into()),
            usage: Usage::default(),
            truncated: false,
        }
    }

    pub fn fail(failure: Failure) -> Ran {
        Ran {
            result: Err(failure),
            usage: Usage::default(),
            truncated: false,
        }
    }
}

impl From<Result<String, Failure>> for Ran {
    fn from(result: Result<String, Failure>) -> Ran {
        Ran {
            result,
            usage: Usage::default(),
            truncated: false,
        }
    }
}

/// Boxed so runners can be held as trait objects and flows can recurse.
pub type RunFuture<'a> = Pin<Box<dyn Future<Output = Ran> + Send + 'a>>;

/// Run one nested call (a flow's step, an agent's tool call) in `context` (its caller's, one
/// level deeper); `shown` is its input as its receipt records it. Under an authority the step
/// is admitted first, runs below a receipt id of its own, and its receipt is queued; a
/// refusal is a failure (`flow:step_refused`) that stops the flow.
pub async fn run_nested(
    invoker: &Invoker,
    context: &CallContext,
    via: Via,
    key: &str,
    input: Input,
    shown: &str,
) -> Outcome {
    let Some(authority) = &context.authority else {
        return invoker.invoke_in(key, input, context).await;
    };
    let parent = context.parent.clone().unwrap_or_default();
    let callable = invoker.rows().get(key);
    let id = authority.new_id();
    // A span for every node with a receipt, refused ones too: the trace's tree is the
    // receipts' tree (each span names its receipt and its parent's).
    let span = tracing::info_span!(
        "call",
        otel.name = %format!("call {key}"),
        capdir.key = %key,
        capdir.receipt = %id,
        capdir.parent = %parent,
        capdir.via = via.as_str(),
        capdir.status = tracing::field::Empty,
    );
    let started_at = now_rfc3339();
    let started = std::time::Instant::now();
    let admitted = match callable {
        Some(c) => authority.admit(c, via, shown),
        None => authority.admit_unknown(),
    };
    let refused = admitted.is_err();
    let outcome = match admitted {
        Ok(()) => {
            let below = CallContext {
                stack: context.stack.clone(),
                authority: Some(authority.clone()),
                parent: Some(id.clone()),
            };
            invoker
                .invoke_in(key, input, &below)
                .instrument(span.clone())
                .await
        }
        Err((reason, message)) => {
            let runner = callable.map_or("none", |c| c.row.runner_name());
            let mut refused = Outcome::new(
                key,
                runner,
                Err(Failure::new(reason, message)),
                started.elapsed(),
                Usage::default(),
                false,
            );
            refused.status = Status::Refused;
            refused
        }
    };
    let node = Node {
        id: &id,
        parent: &parent,
        callable,
        input: shown,
        outcome: &outcome,
        started_at: &started_at,
    };
    span.record("capdir.status", outcome.status.as_str());
    authority.record(node);
    if !refused {
        return outcome;
    }
    // The authority refused it: the caller's flow stops here, naming the step and the reason.
    let failure = Failure::new(
        "flow:step_refused",
        format!("{key}:{}", outcome.output.trim_start_matches("ERR:")),
    );
    let mut o = outcome;
    o.status = Status::Failed;
    o.output = failure.render();
    o.error = Some(failure);
    o
}

/// Refuse a call before any secret is read unless every variable `credential` names is bound
/// to where the row would send it: `to` the URL and method of a request, or none for a
/// process the row starts (`env:`). `ERR:auth:CODE:ENV` names the refusal and the variable.
pub fn admit_credential(
    call: &Call<'_>,
    credential: &crate::row::credential::Credential,
    to: Option<(&url::Url, &str)>,
) -> Result<(), Failure> {
    let row = &call.callable.row;
    let bindings = call.invoker.bindings();
    for env in credential.envs() {
        let judged = match to {
            Some((url, method)) => bindings.admit(&env, url, method, &row.key, &row.category),
            None => bindings.admit_stdio(&env, &row.key, &row.category),
        };
        judged.map_err(|r| {
            Failure::new(format!("auth:{}", r.code), format!("{env}:{}", r.message))
        })?;
    }
    Ok(())
}

/// Texts longer than this have their router tags found on a blocking thread, not on an
/// async worker: a reply or a routed text may be megabytes, and the scan, linear as it is,
/// should not hold up other requests meanwhile.
pub const TAGS_INLINE_BYTES: usize = 64 * 1024;

/// The router tags of `text` (`row::route::tags`), found off the async workers when the text
/// is large.
pub async fn router_tags(text: &str) -> Vec<crate::row::route::Tag<'_>> {
    if text.len() <= TAGS_INLINE_BYTES {
        return crate::row::route::tags(text);
    }
    let owned: Arc<str> = Arc::from(text);
    let scanned = owned.clone();
    let spans = tokio::task::spawn_blocking(move || {
        crate::row::route::tags(&scanned)
            .iter()
            .map(|t| (t.start, t.end, t.key.len()))
            .collect::<Vec<_>>()
    })
    .await
    .unwrap_or_default();
    // The same tags, borrowed from `text` again: `[KEY]args[/KEY]` from start to end.
    spans
        .into_iter()
        .map(|(start, end, key_len)| crate::row::route::Tag {
            start,
            end,
            key: &text[start + 1..start + 1 + key_len],
            args: &text[start + 2 + key_len..end - key_len - 3],
        })
        .collect()
}

/// One way of executing a row.
pub trait Runner: Send + Sync {
    /// The name rows select it by (`type`, or `runner` when set).
    fn name(&self) -> &'static str;
    fn run<'a>(&'a self, call: Call<'a>) -> RunFuture<'a>;
}

/// Where credentials are read from, at call time. Tests use `Fixed` so they need not touch
/// the process environment, which is shared by every test thread.
#[derive(Clone, Debug, Default)]
pub enum Environment {
    #[default]
    Process,
    Fixed(Arc<HashMap<String, String>>),
}

impl Environment {
    pub fn fixed<K: Into<String>, V: Into<String>>(
        vars: impl IntoIterator<Item = (K, V)>,
    ) -> Environment {
        Environment::Fixed(Arc::new(
            vars.into_iter()
                .map(|(k, v)| (k.into(), v.into()))
                .collect(),
        ))
    }

    pub fn get(&self, name: &str) -> Option<String> {
        match self {
            Environment::Process => std::env::var(name).ok(),
            Environment::Fixed(map) => map.get(name).cloned(),
        }
    }

    /// The variable's value, or `ERR:auth:missing_env:<NAME>` (never the value).
    pub fn require(&self, name: &str) -> Result<String, Failure> {
        self.get(name)
            .filter(|v| !v.is_empty())
            .ok_or_else(|| Failure::new("auth:missing_env", name))
    }
}

/// At most `n` characters of `s`.
pub fn truncate_chars(s: &str, n: usize) -> &str {
    match s.char_indices().nth(n) {
        Some((i, _)) => &s[..i],
        None => s,
    }
}

/// Read a response body, stopping at `cap` bytes. True when more was there.
pub async fn read_capped(
    resp: &mut reqwest::Response,
    cap: usize,
) -> Result<(String, bool), reqwest::Error> {
    let mut buf: Vec<u8> = Vec::new();
    let mut truncated = false;
    while let Some(chunk) = resp.chunk().await? {
        let room = cap - buf.len();
        if chunk.len() > room {
            buf.extend_from_slice(&chunk[..room]);
            truncated = true;
            break;
        }
        buf.extend_from_slice(&chunk);
    }
    Ok((String::from_utf8_lossy(&buf).into_owned(), truncated))
}

/// Why a request failed, without the URL (a `query:` credential lives in it) and with each
/// cause once.
pub fn fetch_reason(e: reqwest::Error, connect_timeout: Duration, timeout: Duration) -> String {
    if e.is_timeout() {
        return if e.is_connect() {
            format!("connect timed out after {} ms", connect_timeout.as_millis())
        } else {
            format!("timed out after {} ms", timeout.as_millis())
        };
    }
    let e = e.without_url();
    let mut parts: Vec<String> = Vec::new();
    let mut source: Option<&dyn std::error::Error> = Some(&e);
    while let Some(s) = source {
        let text = s.to_string();
        if !parts.iter().any(|p| p.contains(&text)) {
            parts.push(text);
        }
        source = s.source();
    }
    parts.join(": ")
}

/// Replace every secret value in `text` (a server may echo a key back in an error body).
/// Only the values themselves: a shape scan would also cut legitimate response data.
pub fn scrub(mut text: String, secrets: &[String]) -> String {
    for s in secrets.iter().filter(|s| s.len() >= 4) {
        if text.contains(s.as_str()) {
            text = text.replace(s.as_str(), "[REDACTED]");
        }
    }
    text
}

/// The user agent every outgoing request carries.
pub const USER_AGENT: &str = concat!("capdir/", env!("CARGO_PKG_VERSION"));

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn truncates_on_char_boundaries() {
        assert_eq!(truncate_chars("héllo", 2), "hé");
        assert_eq!(truncate_chars("hi", 5), "hi");
    }

    #[test]
    fn missing_env_names_the_variable_only() {
        let env = Environment::fixed([("A", "secret-value")]);
        assert_eq!(env.require("A").unwrap(), "secret-value");
        assert_eq!(
            env.require("B").unwrap_err().render(),
            "ERR:auth:missing_env:B"
        );
    }
}

#[cfg(test)]
mod router_tag_tests {
    /// Found on a blocking thread or inline, the tags of a text are the same, borrowed from it.
    #[tokio::test]
    async fn a_large_text_has_the_tags_an_inline_scan_finds() {
        let unit = "x [SHA256]a|b[/SHA256] [ECHO_1]é[/ECHO_1] [NOPE] [AB]open ";
        let text = unit.repeat(super::TAGS_INLINE_BYTES / unit.len() + 10);
        assert!(text.len() > super::TAGS_INLINE_BYTES);
        let off = super::router_tags(&text).await;
        assert_eq!(off, crate::row::route::tags(&text));
        assert_eq!(off.len(), crate::row::route::MAX_TAGS);
        assert_eq!((off[1].key, off[1].args), ("ECHO_1", "é"));
    }
}
