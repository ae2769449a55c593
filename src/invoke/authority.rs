//! The authority a call's nested invocations answer to. A flow's steps run under the caller
//! of the flow: each one passes the same gate a top-level call would (risk ceiling,
//! `sensitive`, the `--open` rules) and gets a receipt of its own, a child of the call that
//! made it. `invoke/` owns this trait and calls it; the dispatcher (`dispatch/`) implements it
//! for one caller and one receipt tree. A call with no authority (`capdir invoke`, the local
//! owner; tests) runs its steps as itself and writes no receipts.

use crate::invoke::outcome::Outcome;
use crate::invoke::rowset::Callable;
use std::sync::Arc;

/// The gate and the receipt writer for every nested call under one top-level call.
pub trait Authority: Send + Sync {
    /// May `step` run inside this call with `input`, reached `via` what? `Err((reason,
    /// message))` refuses it, `reason` being the gate's literal reason (`risk_ceiling:low`,
    /// `anonymous`, `budget:calls`, …).
    fn admit(&self, step: &Callable, via: Via, input: &str) -> Result<(), (String, String)>;
    /// May a nested call of a key no row has be attempted (it fails as `unknown_key`)? Only
    /// the budget is asked: a model naming keys that do not exist still spends it.
    fn admit_unknown(&self) -> Result<(), (String, String)> {
        Ok(())
    }
    /// A fresh receipt id for a nested call about to run (its children name it as parent).
    fn new_id(&self) -> String;
    /// Keep a nested call's receipt, in the order the calls end; the top-level call's own
    /// follows them into the ledger, and it answers only once all are durable.
    fn record(&self, node: Node<'_>);
}

/// How a nested call was reached: what decides whether the caller's scope covers it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Via {
    /// The calling row names it: a flow's step, or a tool among an agent's declared categories.
    /// The calling row's contract (and a pin of it) covers it.
    Composed,
    /// A router tag in a text a model wrote: no row declared it, so the caller's own scope,
    /// ceiling and pin must allow it as if the caller had called it directly.
    Tag,
    /// A tool an agent's model chose among the row's declared categories: covered by the
    /// calling row's contract like a flow's step, but with arguments a model picked, so a
    /// person's approval of the agent's call never stands in for the risk ceiling here.
    Tool,
}

impl Via {
    /// Its name in a trace (`capdir.via`).
    pub fn as_str(self) -> &'static str {
        match self {
            Via::Composed => "composed",
            Via::Tag => "tag",
            Via::Tool => "tool",
        }
    }
}

/// One nested call, finished or refused, as its receipt records it.
pub struct Node<'a> {
    pub id: &'a str,
    /// The receipt id of the call that made this one.
    pub parent: &'a str,
    pub callable: Option<&'a Callable>,
    /// The input as the step rendered it.
    pub input: &'a str,
    pub outcome: &'a Outcome,
    /// RFC 3339 with microseconds.
    pub started_at: &'a str,
}

/// Where a call runs: inside which flows (outermost first), under which authority, below
/// which receipt.
#[derive(Clone, Default)]
pub struct CallContext {
    pub stack: Vec<String>,
    pub authority: Option<Arc<dyn Authority>>,
    /// The receipt id of the enclosing call, when there is an authority.
    pub parent: Option<String>,
}

impl CallContext {
    /// A top-level call under `authority`, whose own receipt will be `id`.
    pub fn under(authority: Arc<dyn Authority>, id: &str) -> CallContext {
        CallContext {
            stack: Vec::new(),
            authority: Some(authority),
            parent: Some(id.to_string()),
        }
    }
}

/// Now, as receipts write it.
pub fn now_rfc3339() -> String {
    chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Micros, true)
}
