//! `/metrics`: the Prometheus project's client (`prometheus-client`) encodes what the
//! dispatcher counts as OpenMetrics text: requests, reloads, calls by status and runner (a
//! counter and a histogram of their duration), the ledger's commits, and what a follower of
//! a published site last saw. Label values are escaped by the encoder, whatever a followed
//! URL holds.

use super::{AppState, authenticate};
use crate::access::auth;
use axum::extract::State;
use axum::http::{HeaderMap, header};
use axum::response::{IntoResponse, Response};
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, NoLabelSet};
use prometheus_client::metrics::MetricType;
use prometheus_client::registry::{Registry, Unit};
use std::fmt;
use std::sync::atomic::Ordering;

/// OpenMetrics, which Prometheus asks for and reads.
const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

pub(super) async fn metrics(State(state): State<AppState>, headers: HeaderMap) -> Response {
    // What the dispatcher runs and how busy it is is the operator's to read.
    if !state.inner.public_metrics
        && let Err(e) = authenticate(state.keys(), &headers)
            .and_then(|c| auth::require_owner(&c).map_err(super::ApiError::from))
    {
        return e.into_response();
    }
    let calls = state.dispatcher().call_metrics().clone();
    let mut registry = Registry::default();
    registry.register(
        "capdir_invocations",
        "Invocations by status and runner",
        calls.invocations,
    );
    registry.register_with_unit(
        "capdir_invocation_duration",
        "How long calls took, by status and runner: from the start to the end their receipts record",
        Unit::Seconds,
        calls.seconds,
    );
    registry.register_collector(Box::new(Scrape(state)));
    let mut out = String::new();
    match prometheus_client::encoding::text::encode(&mut out, &registry) {
        Ok(()) => ([(header::CONTENT_TYPE, CONTENT_TYPE)], out).into_response(),
        Err(_) => axum::http::StatusCode::INTERNAL_SERVER_ERROR.into_response(),
    }
}

/// What is read off the dispatcher at each scrape.
struct Scrape(AppState);

impl fmt::Debug for Scrape {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Scrape")
    }
}

fn counter(e: &mut DescriptorEncoder, name: &str, help: &str, v: u64) -> fmt::Result {
    e.encode_descriptor(name, help, None, MetricType::Counter)?
        .encode_counter::<NoLabelSet, _, u64>(&v, None)
}

fn gauge(e: &mut DescriptorEncoder, name: &str, help: &str, v: i64) -> fmt::Result {
    e.encode_descriptor(name, help, None, MetricType::Gauge)?
        .encode_gauge(&v)
}

/// A gauge of 1 whose labels say what is so (`…_info`).
fn info(e: &mut DescriptorEncoder, name: &str, help: &str, labels: &[(&str, &str)]) -> fmt::Result {
    e.encode_descriptor(name, help, None, MetricType::Gauge)?
        .encode_family(&labels)?
        .encode_gauge(&1i64)
}

/// One labelled series per `(label value, value)` of a gauge or counter named `name`.
fn family(
    e: &mut DescriptorEncoder,
    (name, help, kind): (&str, &str, MetricType),
    label: &str,
    series: &[(&str, u64)],
) -> fmt::Result {
    let mut m = e.encode_descriptor(name, help, None, kind)?;
    for (value, n) in series {
        let labels = [(label, *value)];
        let mut one = m.encode_family(&labels)?;
        match kind {
            MetricType::Counter => one.encode_counter::<NoLabelSet, _, u64>(n, None)?,
            _ => one.encode_gauge(n)?,
        }
    }
    Ok(())
}

impl Collector for Scrape {
    fn encode(&self, mut e: DescriptorEncoder) -> fmt::Result {
        let state = &self.0;
        let dispatcher = state.dispatcher();
        counter(
            &mut e,
            "capdir_requests",
            "HTTP requests received",
            state.inner.requests.load(Ordering::Relaxed),
        )?;
        counter(
            &mut e,
            "capdir_reloads",
            "New builds swapped in",
            dispatcher.reload_count(),
        )?;
        let (commits, seconds) = dispatcher.ledger().commit_stats();
        // The ledger keeps a sum and a count: a histogram of the one bucket every commit is in.
        e.encode_descriptor(
            "capdir_ledger_commit_seconds",
            "Time spent committing receipt batches",
            None,
            MetricType::Histogram,
        )?
        .encode_histogram::<NoLabelSet>(
            seconds,
            commits,
            &[(f64::INFINITY, commits)],
            None,
        )?;
        if let Some(durability) = dispatcher.ledger().durability() {
            info(
                &mut e,
                "capdir_ledger_durability_info",
                "How the ledger's writer connection commits, read back from it",
                &[("setting", &durability)],
            )?;
        }
        if let Some(f) = dispatcher.follow_status() {
            follow(&mut e, &f)?;
        }
        Ok(())
    }
}

/// What a follower of a published site (`serve --follow`) last saw.
fn follow(e: &mut DescriptorEncoder, f: &crate::dispatch::follow::FollowStatus) -> fmt::Result {
    info(
        e,
        "capdir_follow_info",
        "The published site followed and the commit of the build in place",
        &[("url", &f.url), ("commit", &f.commit)],
    )?;
    gauge(
        e,
        "capdir_follow_last_poll_timestamp_seconds",
        "When the followed site was last polled",
        f.last_poll.unwrap_or(0),
    )?;
    let outcomes =
        ["none", "unchanged", "updated", "failed"].map(|o| (o, u64::from(f.last_outcome == o)));
    family(
        e,
        (
            "capdir_follow_last_outcome",
            "The last poll's outcome (1 for the one that happened)",
            MetricType::Gauge,
        ),
        "outcome",
        &outcomes,
    )?;
    family(
        e,
        (
            "capdir_follow_polls",
            "Polls of the followed site, by result",
            MetricType::Counter,
        ),
        "result",
        &[
            ("updated", f.updates),
            ("failed", f.failures),
            ("any", f.polls),
        ],
    )?;
    info(
        e,
        "capdir_follow_verification_info",
        "How followed builds are checked: signed (a trusted key) or integrity-only (digests)",
        &[("mode", f.verification)],
    )?;
    let refusals = [
        "unsigned",
        "bad_signature",
        "unnumbered",
        "rollback",
        "expired",
    ]
    .map(|r| (r, f.refusals.get(r).copied().unwrap_or(0)));
    family(
        e,
        (
            "capdir_follow_refusals",
            "Published builds refused for who published them, by reason",
            MetricType::Counter,
        ),
        "reason",
        &refusals,
    )?;
    if let Some(n) = f.number {
        gauge(
            e,
            "capdir_follow_build_number",
            "The signed build number in place",
            i64::try_from(n).unwrap_or(i64::MAX),
        )?;
    }
    Ok(())
}
