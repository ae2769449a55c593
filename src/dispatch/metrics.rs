//! What `/metrics` counts of the calls a dispatcher ran: every receipt made durable, by its
//! status and runner (the row's type, `mcp` for an http row that forwards to an MCP server),
//! as a counter and as a histogram of its duration, from the Prometheus project's client
//! (`prometheus-client`). `serve/` encodes them; a family is shared by cloning it.

use crate::ledger::Receipt;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};

/// A receipt's status and runner.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct Labels {
    pub status: String,
    pub runner: String,
}

/// The buckets of a call's duration: 0.5 ms doubling up to 16 s (and +Inf): a builtin is
/// under the first, an upstream's timeout in the last.
fn duration_histogram() -> Histogram {
    Histogram::new(exponential_buckets(0.0005, 2.0, 16))
}

type Durations = Family<Labels, Histogram, fn() -> Histogram>;

/// The call metrics of one dispatcher (and of the trees of its calls).
#[derive(Debug, Clone)]
pub struct CallMetrics {
    pub invocations: Family<Labels, Counter>,
    pub seconds: Durations,
}

impl Default for CallMetrics {
    fn default() -> CallMetrics {
        CallMetrics {
            invocations: Family::default(),
            seconds: Family::new_with_constructor(duration_histogram),
        }
    }
}

impl CallMetrics {
    /// Count a durable receipt and observe how long its call took (from its start to its
    /// end as the receipt records them; 0 for a refusal at the gate).
    pub fn record(&self, receipt: &Receipt) {
        let d = &receipt.draft;
        let labels = Labels {
            status: d.status.clone(),
            runner: d.runner.clone(),
        };
        self.invocations.get_or_create(&labels).inc();
        self.seconds
            .get_or_create(&labels)
            .observe(seconds_between(&d.started_at, &d.finished_at));
    }
}

/// Seconds from `start` to `end` (RFC 3339 times); 0 when either does not read or the clock
/// went back.
fn seconds_between(start: &str, end: &str) -> f64 {
    let parse = |t: &str| chrono::DateTime::parse_from_rfc3339(t).ok();
    match (parse(start), parse(end)) {
        (Some(s), Some(e)) => (e - s)
            .num_microseconds()
            .map_or(0.0, |us| us.max(0) as f64 / 1e6),
        _ => 0.0,
    }
}

#[cfg(test)]
mod tests {
    use super::seconds_between;

    #[test]
    fn a_calls_seconds_come_from_its_receipts_times() {
        let s = seconds_between("2026-12-07T10:00:00.000250Z", "2026-12-07T10:00:01.500250Z");
        assert!((s - 1.5).abs() < 1e-9, "{s}");
        assert_eq!(
            seconds_between("2026-12-07T10:00:01Z", "2026-12-07T10:00:00Z"),
            0.0
        );
        assert_eq!(seconds_between("junk", "2026-12-07T10:00:00Z"), 0.0);
    }
}
