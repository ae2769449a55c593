//! The watcher's side of a token (issue 28): whether its calls wait for a person, whether it
//! may decide other callers' calls, and the limits on how much it may call. Pure: the
//! dispatcher asks these functions which approval a call needs and which counters a call
//! charges; the ledger keeps the counters and the pending calls.
//!
//! A call needs a person's approval when its row is `sensitive` and the token's risk ceiling
//! is below `high` (the person stands in for the ceiling), or when the token was minted with
//! `--approval` (every call waits). The owner key runs at once, as the approver would;
//! anonymous callers never queue a call (a sensitive row is refused to them outright).
//!
//! A token's limits are counters with a window: calls per period (`--rate 10/min`), calls per
//! UTC day (`--daily`), calls per row over the token's life (`--per-row`), the cost of the
//! models it ran in micro-dollars (`--max-cost`), and the loop breaker: the same key with the
//! same arguments more than N times in a window (`--max-repeats`). Each counter is named by
//! what it counts and the window it counts in, so a new window starts a new counter and an
//! old one is dropped once it expires.

use serde::{Deserialize, Serialize};

/// What a token's holder is watched for; signed in the claims (`"watch": {…}`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Watch {
    /// Every call of this token waits for a person's approval.
    #[serde(default, skip_serializing_if = "is_false")]
    pub approval: bool,
    /// The token may see the queue of pending calls and decide them.
    #[serde(default, skip_serializing_if = "is_false")]
    pub approver: bool,
    /// Calls per period.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rate: Option<Rate>,
    /// Calls per UTC day.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub daily: Option<u64>,
    /// Calls of any one row over the token's life.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub per_row: Option<u64>,
    /// The most the models this token runs may cost, in millionths of a US dollar.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_cost_micro_usd: Option<u64>,
    /// The loop breaker: the same key with the same arguments at most this often in a window.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_repeats: Option<Rate>,
}

fn is_false(b: &bool) -> bool {
    !*b
}

/// `calls` per `per_secs` seconds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Rate {
    pub calls: u64,
    pub per_secs: u64,
}

impl Watch {
    /// Nothing watched: the claims leave the field out.
    pub fn is_empty(&self) -> bool {
        *self == Watch::default()
    }

    /// Whether any limit is set (a call by this token charges counters).
    pub fn has_limits(&self) -> bool {
        self.rate.is_some()
            || self.daily.is_some()
            || self.per_row.is_some()
            || self.max_cost_micro_usd.is_some()
            || self.max_repeats.is_some()
    }

    /// One line for `capdir token mint` and `token list`: `approval · rate 10/60s · …`.
    pub fn text(&self) -> String {
        let mut parts = Vec::new();
        if self.approval {
            parts.push("every call waits for approval".to_string());
        }
        if self.approver {
            parts.push("approver".to_string());
        }
        if let Some(r) = self.rate {
            parts.push(format!("rate {}/{}s", r.calls, r.per_secs));
        }
        if let Some(d) = self.daily {
            parts.push(format!("{d} a day"));
        }
        if let Some(p) = self.per_row {
            parts.push(format!("{p} per row"));
        }
        if let Some(c) = self.max_cost_micro_usd {
            parts.push(format!("at most ${:.6}", c as f64 / 1e6));
        }
        if let Some(r) = self.max_repeats {
            parts.push(format!(
                "the same call at most {} times in {}s",
                r.calls, r.per_secs
            ));
        }
        parts.join(" · ")
    }
}

/// `10/min`, `100/h`, `5/s`, `1000/d`, or `N/30s`: calls per period.
pub fn parse_rate(text: &str) -> Result<Rate, String> {
    let (n, per) = text
        .split_once('/')
        .ok_or_else(|| format!("`{text}` is not a rate; write 10/min, 100/h or 5/30s"))?;
    let calls: u64 = n
        .trim()
        .parse()
        .ok()
        .filter(|n| *n > 0)
        .ok_or_else(|| format!("`{n}` is not a number of calls above zero"))?;
    let per = per.trim();
    let per_secs = match per {
        "s" | "sec" | "second" => 1,
        "min" | "minute" => 60,
        "h" | "hour" => 3600,
        "d" | "day" => 86_400,
        other => crate::access::duration::parse_ttl(other)
            .map_err(|e| format!("the period of `{text}`: {e}"))? as u64,
    };
    Ok(Rate { calls, per_secs })
}

/// `0.50` (dollars) as millionths of a dollar.
pub fn parse_usd(text: &str) -> Result<u64, String> {
    let t = text.trim().trim_start_matches('$');
    match t.parse::<f64>() {
        Ok(v) if v.is_finite() && v > 0.0 && v < 1e9 => Ok((v * 1e6).round() as u64),
        _ => Err(format!(
            "`{text}` is not an amount in US dollars above zero (e.g. 0.50)"
        )),
    }
}

/// Why a call waits for a person.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Needs {
    /// The row is sensitive and the token's risk ceiling is below `high`.
    Sensitive,
    /// The token was minted with `--approval`.
    Token,
}

impl Needs {
    pub fn as_str(self) -> &'static str {
        match self {
            Needs::Sensitive => "sensitive",
            Needs::Token => "token",
        }
    }

    pub fn why(self) -> &'static str {
        match self {
            Needs::Sensitive => {
                "the row is sensitive and the token's risk ceiling is low: a person approves the call"
            }
            Needs::Token => "the token was minted so that a person approves every call it makes",
        }
    }
}

/// The literal reasons a limit answers with (429), as codes and in receipts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Limit {
    /// Calls per period, or per day.
    Rate,
    /// Calls of one row, or the cost of the models.
    Budget,
    /// The same call repeated past the loop breaker.
    Loop,
}

impl Limit {
    pub fn as_str(self) -> &'static str {
        match self {
            Limit::Rate => "rate_limited",
            Limit::Budget => "budget_exhausted",
            Limit::Loop => "loop_detected",
        }
    }
}

/// One counter a call charges: `name` (what and which window), how much it adds, the limit it
/// may not pass, and when the window ends (Unix seconds: the counter can be dropped after).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Counter {
    pub name: String,
    pub add: u64,
    pub limit: u64,
    pub expires: i64,
    pub kind: Limit,
    /// What the limit counts, for the refusal's message (made only when refusing).
    pub what: What,
}

/// What a counter counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum What {
    Calls { per_secs: u64 },
    Daily,
    Row,
    Cost,
    Repeats { per_secs: u64 },
}

impl Counter {
    /// Whether charging this counter, now at `current`, passes its limit. A counter that adds
    /// nothing (the cost, known only after the call) is past its limit once it reached it.
    pub fn over(&self, current: u64) -> bool {
        if self.add == 0 {
            current >= self.limit
        } else {
            current.saturating_add(self.add) > self.limit
        }
    }

    /// The limit in words: `2 calls per 60 s`, `$0.800000 of model cost`.
    pub fn describe(&self, key: &str) -> String {
        let l = self.limit;
        match self.what {
            What::Calls { per_secs } => format!("{l} calls per {per_secs} s"),
            What::Daily => format!("{l} calls a day (UTC)"),
            What::Row => format!("{l} calls of {key}"),
            What::Cost => format!("${:.6} of model cost", l as f64 / 1e6),
            What::Repeats { per_secs } => {
                format!("the same call of {key} {l} times in {per_secs} s")
            }
        }
    }

    /// Seconds until the window ends, for `Retry-After` (at least one).
    pub fn retry_after(&self, now: i64) -> u64 {
        self.expires.saturating_sub(now).max(1) as u64
    }
}

/// The counters one call of `key` with arguments hashed to `args_sha256` charges for a token
/// with `watch` limits, at `now`, the token expiring at `token_exp`. Empty without limits.
pub fn counters(
    watch: &Watch,
    key: &str,
    args_sha256: &str,
    now: i64,
    token_exp: i64,
) -> Vec<Counter> {
    let mut out = Vec::new();
    // A window is at most ten years long, so no arithmetic on it overflows.
    let window = |per: u64| {
        let per = per.clamp(1, 10 * 365 * 86_400) as i64;
        let start = now.div_euclid(per).saturating_mul(per);
        (start, start.saturating_add(per))
    };
    if let Some(r) = watch.rate {
        let (start, end) = window(r.per_secs);
        out.push(Counter {
            name: format!("rate:{}:{start}", r.per_secs),
            add: 1,
            limit: r.calls,
            expires: end,
            kind: Limit::Rate,
            what: What::Calls {
                per_secs: r.per_secs,
            },
        });
    }
    if let Some(d) = watch.daily {
        let (start, end) = window(86_400);
        out.push(Counter {
            name: format!("daily:{start}"),
            add: 1,
            limit: d,
            expires: end,
            kind: Limit::Rate,
            what: What::Daily,
        });
    }
    if let Some(p) = watch.per_row {
        out.push(Counter {
            name: format!("row:{key}"),
            add: 1,
            limit: p,
            expires: token_exp,
            kind: Limit::Budget,
            what: What::Row,
        });
    }
    if let Some(c) = watch.max_cost_micro_usd {
        out.push(Counter {
            name: COST.into(),
            add: 0,
            limit: c,
            expires: token_exp,
            kind: Limit::Budget,
            what: What::Cost,
        });
    }
    if let Some(r) = watch.max_repeats {
        let (start, end) = window(r.per_secs);
        let short = args_sha256.get(..16).unwrap_or(args_sha256);
        out.push(Counter {
            name: format!("repeat:{key}:{short}:{}:{start}", r.per_secs),
            add: 1,
            limit: r.calls,
            expires: end,
            kind: Limit::Loop,
            what: What::Repeats {
                per_secs: r.per_secs,
            },
        });
    }
    out
}

/// The counter the cost of a token's models is summed in.
pub const COST: &str = "cost";

/// The counters the calls nested in one call add once it ended (a flow's steps, an agent's
/// tool calls, each `(key, args_sha256)`), and the cost its models ran up: charged
/// afterwards, whatever the limits, so the next call sees them. Only counters whose limit is
/// set are returned.
pub fn nested_counters(
    watch: &Watch,
    nested: &[(String, String)],
    cost_micro_usd: u64,
    now: i64,
    token_exp: i64,
) -> Vec<Counter> {
    let mut out: Vec<Counter> = Vec::new();
    for (key, sha) in nested {
        for c in counters(watch, key, sha, now, token_exp) {
            if c.name == COST {
                continue;
            }
            match out.iter_mut().find(|o| o.name == c.name) {
                Some(o) => o.add += c.add,
                None => out.push(c),
            }
        }
    }
    if cost_micro_usd > 0
        && let Some(limit) = watch.max_cost_micro_usd
    {
        out.push(Counter {
            name: COST.into(),
            add: cost_micro_usd,
            limit,
            expires: token_exp,
            kind: Limit::Budget,
            what: What::Cost,
        });
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    proptest::proptest! {
        /// Whatever a command line or a stored claim says, parsing answers and never panics;
        /// a rate it accepts counts at least one call per at least one second.
        #[test]
        fn parsers_never_panic(text in "\\PC{0,24}", n in 0u64..u64::MAX, per in 0u64..u64::MAX) {
            if let Ok(r) = parse_rate(&text) {
                proptest::prop_assert!(r.calls >= 1 && r.per_secs >= 1);
            }
            if let Ok(c) = parse_usd(&text) {
                proptest::prop_assert!(c >= 1);
            }
            let w = Watch {
                rate: Some(Rate { calls: n, per_secs: per }),
                max_repeats: Some(Rate { calls: n, per_secs: per }),
                daily: Some(n),
                ..Watch::default()
            };
            for c in counters(&w, &text, &text, n as i64, per as i64) {
                let _ = (c.over(n), c.retry_after(per as i64));
            }
        }
    }

    #[test]
    fn rates_parse() {
        assert_eq!(
            parse_rate("10/min"),
            Ok(Rate {
                calls: 10,
                per_secs: 60
            })
        );
        assert_eq!(parse_rate("5/30s").map(|r| r.per_secs), Ok(30));
        assert_eq!(parse_rate("100/h").map(|r| r.per_secs), Ok(3600));
        for bad in ["10", "0/min", "x/min", "10/fortnight", "10/0s"] {
            assert!(parse_rate(bad).is_err(), "{bad}");
        }
        assert_eq!(parse_usd("0.50"), Ok(500_000));
        assert_eq!(parse_usd("$2"), Ok(2_000_000));
        for bad in ["0", "-1", "NaN", "inf", "lots"] {
            assert!(parse_usd(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn windows_start_new_counters_and_say_when_to_retry() {
        let w = Watch {
            rate: Some(Rate {
                calls: 2,
                per_secs: 60,
            }),
            max_repeats: Some(Rate {
                calls: 3,
                per_secs: 600,
            }),
            ..Watch::default()
        };
        let a = counters(&w, "K", "ab", 119, 10_000);
        let b = counters(&w, "K", "ab", 120, 10_000);
        assert_eq!(a.len(), 2);
        assert_ne!(a[0].name, b[0].name, "a new minute is a new counter");
        assert_eq!(a[0].retry_after(119), 1);
        assert_eq!(b[0].retry_after(120), 60);
        assert_eq!(a[1].name, b[1].name, "one loop window holds both");
        assert_ne!(
            counters(&w, "K", "cd", 119, 10_000)[1].name,
            a[1].name,
            "other arguments are another call"
        );
        assert!(!a[0].over(1) && a[0].over(2));
    }

    #[test]
    fn cost_refuses_once_reached_and_nested_calls_add_up() {
        let w = Watch {
            per_row: Some(5),
            max_cost_micro_usd: Some(100),
            ..Watch::default()
        };
        let cost = counters(&w, "K", "", 0, 50)
            .into_iter()
            .find(|c| c.name == COST)
            .expect("cost");
        assert!(!cost.over(99) && cost.over(100));
        let nested = [("A".to_string(), "1".to_string()), ("A".into(), "2".into())];
        let n = nested_counters(&w, &nested, 40, 0, 50);
        assert_eq!(n.len(), 2);
        assert_eq!((n[0].name.as_str(), n[0].add), ("row:A", 2));
        assert_eq!((n[1].name.as_str(), n[1].add), (COST, 40));
        assert!(counters(&Watch::default(), "K", "", 0, 50).is_empty());
    }
}
