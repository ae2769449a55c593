//! What the watcher keeps in the ledger: calls waiting for a person (approvals) and the
//! counters of tokens' limits. Both live beside the receipts, so every dispatcher sharing a
//! ledger sees one queue and one set of counters, and a restart loses no pending call.
//!
//! An approval moves once: `pending` → `approved` or `denied`, by a conditional update that
//! only one decider can win (the call then runs exactly once, by the dispatcher that won);
//! a pending approval past its expiry is `expired` to every reader and can no longer be
//! decided. Its result (the run's answer) is written once the run's receipt is durable.

use crate::access::token::Claims;
use crate::access::watch::Counter;
use serde::{Deserialize, Serialize};
use serde_json::Value as Json;
use std::collections::HashMap;
use std::sync::Mutex;

/// What was asked and by whom: fixed when the call was queued.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Pending {
    /// `apr_` and 32 hex digits (122 random bits: knowing one is what lets a caller poll).
    pub id: String,
    pub key: String,
    /// The row's contract fingerprint when the call was asked; a changed row is not run.
    pub fingerprint: String,
    /// SHA-256 of the input exactly as sent.
    pub args_sha256: String,
    /// The input as sent: a JSON object of named arguments, or the `a|b|c` body.
    pub input: String,
    /// Whether `input` is named arguments (`args`) or a body.
    pub named: bool,
    /// The claims of the token that asked (only tokens queue calls).
    pub caller: Claims,
    /// `sensitive` or `token`: why it waits.
    pub needs: String,
    /// The `PENDING_APPROVAL` receipt.
    pub request_receipt: String,
    pub trace_id: String,
    /// Unix seconds.
    pub requested_at: i64,
    pub expires_at: i64,
    /// The failed call this one repairs, when it does.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub repairs: Option<String>,
}

/// A decision on an approval.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Decision {
    /// `approved` or `denied`.
    pub state: String,
    /// The approver's actor (`owner`, `token:tok_…`).
    pub by: String,
    /// Unix seconds.
    pub at: i64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
    /// The decision's receipt.
    pub receipt: String,
}

/// An approval as the ledger holds it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Approval {
    pub pending: Pending,
    /// `pending`, `approved`, `denied` or `expired` (a pending one past its expiry).
    pub state: String,
    pub decision: Option<Decision>,
    /// The run's answer, once it ran.
    pub result: Option<Json>,
}

/// The states an approval can be in.
pub const PENDING: &str = "pending";
pub const APPROVED: &str = "approved";
pub const DENIED: &str = "denied";
pub const EXPIRED: &str = "expired";

impl Approval {
    /// An approval read back: `pending` past `expires_at` reads as `expired`.
    pub fn read(
        pending: Pending,
        state: String,
        decision: Option<String>,
        result: Option<String>,
        now: i64,
    ) -> anyhow::Result<Approval> {
        let state = if state == PENDING && now >= pending.expires_at {
            EXPIRED.to_string()
        } else {
            state
        };
        let id = pending.id.clone();
        let parse = |what: &str, t: Option<String>| -> anyhow::Result<Option<Json>> {
            t.map(|t| serde_json::from_str(&t))
                .transpose()
                .map_err(|e| {
                    anyhow::anyhow!("approval {id}: the stored {what} cannot be read: {e}")
                })
        };
        let decision = parse("decision", decision)?
            .map(serde_json::from_value)
            .transpose()?;
        let result = parse("result", result)?;
        Ok(Approval {
            pending,
            state,
            decision,
            result,
        })
    }
}

/// A new approval id.
pub fn new_approval_id() -> String {
    format!("apr_{}", uuid::Uuid::new_v4().simple())
}

/// Whether `id` has the form of an approval id (checked before any lookup).
pub fn is_approval_id(id: &str) -> bool {
    id.strip_prefix("apr_")
        .is_some_and(|r| r.len() == 32 && r.bytes().all(|b| b.is_ascii_hexdigit()))
}

/// The counters of one process, for a ledger only one dispatcher writes (SQLite): in memory,
/// loaded from the ledger when it opens and written back by its flusher, so a restart keeps
/// them (less what the last second counted). A call that charges counters already there
/// allocates nothing and takes one lock.
#[derive(Default)]
pub struct Counters {
    /// token → counter → its state.
    map: Mutex<HashMap<String, HashMap<String, Count>>>,
}

/// One counter: its count, when its window ends, and whether it changed since the last flush.
#[derive(Debug, Clone, Copy)]
struct Count {
    n: u64,
    expires: i64,
    dirty: bool,
}

impl Counters {
    /// Counters as stored: (token, name, count, expires).
    pub fn load(rows: Vec<(String, String, u64, i64)>) -> Counters {
        let mut map: HashMap<String, HashMap<String, Count>> = HashMap::new();
        for (token, name, n, expires) in rows {
            map.entry(token).or_default().insert(
                name,
                Count {
                    n,
                    expires,
                    dirty: false,
                },
            );
        }
        Counters {
            map: Mutex::new(map),
        }
    }

    /// Charge every counter at once, or none: the index of the first one past its limit.
    pub fn charge(&self, token: &str, counters: &[Counter], now: i64) -> Option<(usize, u64)> {
        let mut map = self.map.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(held) = map.get(token) {
            for (i, c) in counters.iter().enumerate() {
                let n = held
                    .get(c.name.as_str())
                    .filter(|h| h.expires > now)
                    .map_or(0, |h| h.n);
                if c.over(n) {
                    return Some((i, n));
                }
            }
        } else if let Some(i) = counters.iter().position(|c| c.over(0)) {
            return Some((i, 0));
        }
        add_locked(&mut map, token, counters, now);
        None
    }

    /// Add to the counters whatever their limits (what nested calls and models spent).
    pub fn add(&self, token: &str, counters: &[Counter], now: i64) {
        let mut map = self.map.lock().unwrap_or_else(|p| p.into_inner());
        add_locked(&mut map, token, counters, now);
    }

    /// What changed since the last call, to write back: (token, name, count, expires); and
    /// expired counters are forgotten.
    pub fn take_dirty(&self, now: i64) -> Vec<(String, String, u64, i64)> {
        let mut map = self.map.lock().unwrap_or_else(|p| p.into_inner());
        let mut out = Vec::new();
        for (token, held) in map.iter_mut() {
            for (name, c) in held.iter_mut().filter(|(_, c)| c.dirty) {
                c.dirty = false;
                out.push((token.clone(), name.clone(), c.n, c.expires));
            }
            held.retain(|_, c| c.expires > now);
        }
        map.retain(|_, held| !held.is_empty());
        out
    }
}

fn add_locked(
    map: &mut HashMap<String, HashMap<String, Count>>,
    token: &str,
    counters: &[Counter],
    now: i64,
) {
    let held = match map.get_mut(token) {
        Some(held) => held,
        None => map.entry(token.to_string()).or_default(),
    };
    for c in counters.iter().filter(|c| c.add > 0) {
        let slot = match held.get_mut(c.name.as_str()) {
            Some(slot) => slot,
            None => held.entry(c.name.clone()).or_insert(Count {
                n: 0,
                expires: c.expires,
                dirty: true,
            }),
        };
        if slot.expires <= now {
            slot.n = 0;
            slot.expires = c.expires;
        }
        slot.n = slot.n.saturating_add(c.add);
        slot.dirty = true;
    }
}
