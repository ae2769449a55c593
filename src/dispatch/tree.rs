//! One top-level call's authority over the calls nested in it (a flow's steps, an agent's tool
//! calls, the router tags of a reply): the caller's gate for each, a budget for the whole
//! tree, and a receipt for each node, a child of the call that made it, in the same chain and
//! trace.
//!
//! Why a budget: a flow of flows of fan-outs multiplies. Without one, a row written by a token
//! of one category made a single POST run 31 s, write a million receipts and take gigabytes.
//! The gate refuses a row whose worst case exceeds `row::call::MAX_TREE_CALLS`
//! (`call_budget`); the tree enforces its budget again as it runs, for what the gate cannot
//! bound statically (an agent's tags, a row changed under a running build) and for bytes and
//! time.

use super::Appended;
use crate::access::auth::{self, Caller};
use crate::access::token::{self, Reason, Target};
use crate::check::secrets::{self, Known};
use crate::invoke::authority::{Authority, Node, Via, now_rfc3339};
use crate::invoke::outcome::Status;
use crate::invoke::rowset::Callable;
use crate::ledger::{self, Draft, Ledger};
use crate::row::call;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// What one top-level call may spend on the calls nested in it, its whole tree counted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TreeBudget {
    /// Nested calls admitted (`budget:calls`). A tree writes at most twice this many receipts
    /// plus its own: each admitted call, and at most one refusal per call still running when
    /// the budget ran out (a refused step stops its flow).
    pub calls: u64,
    /// Bytes of input and output the tree's nodes carried so far (`budget:bytes`): what its
    /// held receipts and its flows' bindings can take in memory.
    pub bytes: u64,
    /// Time since the top-level call started after which no nested call starts
    /// (`budget:wall_time`); a call already running ends under its runner's own timeout.
    pub wall: Duration,
}

impl Default for TreeBudget {
    fn default() -> TreeBudget {
        TreeBudget {
            calls: call::MAX_TREE_CALLS,
            bytes: 64 * 1024 * 1024,
            wall: Duration::from_secs(300),
        }
    }
}

/// The receipts of builtin nodes are held and go to the ledger with the top-level call's own,
/// in one append: a tree of builtins is committed whole, in one transaction, or not at all. A
/// node that may have reached outside (http, agent, mcp) is sent at once with those held
/// before it, so a crash cannot lose the receipt of a side effect. Either way the chain holds
/// the tree in the order its calls ended, and the answer waits until every node is durable.
/// What is held is bounded by the budget's calls and bytes.
pub(super) struct Tree {
    /// The receipts of the calls that have ended and are not yet sent, in the order they ended.
    done: Mutex<Vec<Draft>>,
    /// Appends sent ahead of the top-level call's own (see `record`), not yet known durable.
    sent: Mutex<Vec<Appended>>,
    ledger: Arc<dyn Ledger>,
    secrets: Arc<Known>,
    caller: Caller,
    /// The caller as receipts name it.
    actor: String,
    /// The top-level call's receipt id.
    root: String,
    trace_id: String,
    commit: String,
    budget: TreeBudget,
    /// What the tree (and the calls it shares a budget with) spent so far.
    spent: Arc<Spent>,
    /// A person approved the top-level call: the steps its row composes run without the
    /// caller's risk ceiling (a tag a model wrote still needs it).
    approved: bool,
    /// The nested calls that ran, as (key, SHA-256 of the input), for the caller's counters;
    /// kept only when the caller is a token with limits.
    ran: Mutex<Vec<(String, String)>>,
    counting: bool,
}

/// What calls sharing one budget have spent: a tree's own, or every tag of one routed text.
#[derive(Debug)]
pub struct Spent {
    /// Nested calls asked for so far, admitted or not.
    calls: AtomicU64,
    /// Bytes of input and output recorded so far.
    bytes: AtomicU64,
    deadline: Instant,
}

impl Spent {
    /// A budget spent from now, with `budget`'s time.
    pub fn starting(budget: TreeBudget) -> Arc<Spent> {
        Arc::new(Spent {
            calls: AtomicU64::new(0),
            bytes: AtomicU64::new(0),
            deadline: Instant::now() + budget.wall,
        })
    }
}

/// Who asks and under which receipt: what a tree is made of besides its budget.
pub(super) struct Root {
    pub ledger: Arc<dyn Ledger>,
    pub secrets: Arc<Known>,
    pub caller: Caller,
    pub root: String,
    pub trace_id: String,
    pub commit: String,
    /// A person approved the call at the top.
    pub approved: bool,
}

impl Tree {
    pub(super) fn new(root: Root, budget: TreeBudget, spent: Arc<Spent>) -> Tree {
        let counting = matches!(&root.caller, Caller::Token(c) if c.watch.has_limits());
        Tree {
            counting,
            done: Mutex::new(Vec::new()),
            sent: Mutex::new(Vec::new()),
            actor: root.caller.actor(),
            ledger: root.ledger,
            secrets: root.secrets,
            caller: root.caller,
            root: root.root,
            trace_id: root.trace_id,
            commit: root.commit,
            budget,
            spent,
            approved: root.approved,
            ran: Mutex::new(Vec::new()),
        }
    }

    /// What the top-level call's receipt goes after: the receipts still held, and the appends
    /// sent ahead; and the nested calls that ran, for the caller's counters.
    pub(super) fn finish(&self) -> (Vec<Draft>, Vec<Appended>, Vec<(String, String)>) {
        let held = std::mem::take(&mut *self.done.lock().unwrap_or_else(|p| p.into_inner()));
        let sent = std::mem::take(&mut *self.sent.lock().unwrap_or_else(|p| p.into_inner()));
        let ran = std::mem::take(&mut *self.ran.lock().unwrap_or_else(|p| p.into_inner()));
        (held, sent, ran)
    }

    /// The budget's refusal of one more nested call, if it is spent.
    fn over_budget(&self) -> Option<(String, String)> {
        let calls = self.spent.calls.fetch_add(1, Ordering::Relaxed) + 1;
        if calls > self.budget.calls {
            return Some((
                "budget:calls".into(),
                format!(
                    "this call has asked for {calls} nested calls; one call may make at most {}",
                    self.budget.calls
                ),
            ));
        }
        let bytes = self.spent.bytes.load(Ordering::Relaxed);
        if bytes > self.budget.bytes {
            return Some((
                "budget:bytes".into(),
                format!(
                    "this call's nested calls carried {bytes} bytes; one call may carry at most {}",
                    self.budget.bytes
                ),
            ));
        }
        if Instant::now() >= self.spent.deadline {
            return Some((
                "budget:wall_time".into(),
                format!(
                    "this call has run past {} s; no nested call starts after that",
                    self.budget.wall.as_secs()
                ),
            ));
        }
        None
    }
}

/// Whether `caller` may run `step`, reached `via` a tag or a composing row, with `input`.
/// Composed steps follow `auth::step_refusal` (the calling row's scope covers what it names).
/// A tag was written by a model, not declared by any row: for a token it passes the token's
/// own scope, pin, risk ceiling and input rules, as a direct call would.
fn refusal(caller: &Caller, step: &Callable, via: Via, input: &str) -> Option<(String, String)> {
    let Caller::Token(claims) = caller else {
        return auth::step_refusal(caller, &step.row);
    };
    if matches!(via, Via::Composed | Via::Tool) {
        return auth::step_refusal(caller, &step.row);
    }
    if claims.pin.is_some() {
        return Some((
            Reason::Scope.as_str().into(),
            format!(
                "token {} is pinned to one contract; a router tag names {}, which that contract does not compose",
                claims.id, step.row.key
            ),
        ));
    }
    let target = Target {
        key: &step.row.key,
        category: &step.row.category,
        sensitive: step.row.sensitive,
        fingerprint: &step.fingerprint,
    };
    token::check_call(claims, target, Some(input))
        .err()
        .map(|r| (r.reason.as_str().to_string(), r.message))
}

impl Authority for Tree {
    fn admit(&self, step: &Callable, via: Via, input: &str) -> Result<(), (String, String)> {
        if let Some(spent) = self.over_budget() {
            return Err(spent);
        }
        match refusal(&self.caller, step, via, input) {
            // The person who approved the call approved the steps its row composes (a flow's,
            // with inputs made from the approved input), not the tools a model picks.
            Some(refused)
                if self.approved
                    && via == Via::Composed
                    && refused.0 == Reason::RiskCeiling.as_str() =>
            {
                Ok(())
            }
            Some(refused) => Err(refused),
            None => Ok(()),
        }
    }

    fn admit_unknown(&self) -> Result<(), (String, String)> {
        self.over_budget().map_or(Ok(()), Err)
    }

    fn new_id(&self) -> String {
        ledger::new_id()
    }

    fn record(&self, node: Node<'_>) {
        let outcome = node.outcome;
        let carried = (node.input.len() + outcome.output.len()) as u64;
        self.spent.bytes.fetch_add(carried, Ordering::Relaxed);
        let draft = Draft {
            id: node.id.to_string(),
            key: outcome.key.clone(),
            actor: self.actor.clone(),
            runner: outcome.runner.clone(),
            trace_id: self.trace_id.clone(),
            started_at: node.started_at.to_string(),
            finished_at: now_rfc3339(),
            status: outcome.status.as_str().into(),
            error_code: outcome.error_code().map(str::to_string),
            cost_usd: outcome.usage.as_ref().and_then(|u| u.cost_usd),
            input_sha256: ledger::sha256_hex(node.input),
            output_sha256: ledger::sha256_hex(&outcome.output),
            contract_sha256: node
                .callable
                .map(|c| c.fingerprint.clone())
                .unwrap_or_default(),
            catalogue_commit: self.commit.clone(),
            repairs: None,
            parent: Some(node.parent.to_string()),
            root: Some(self.root.clone()),
            input: secrets::redact(node.input, &self.secrets),
            output: secrets::redact(&outcome.output, &self.secrets),
        };
        if self.counting && outcome.status != Status::Refused {
            self.ran
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .push((draft.key.clone(), draft.input_sha256.clone()));
        }
        let mut done = self.done.lock().unwrap_or_else(|p| p.into_inner());
        done.push(draft);
        let ran_outside = outcome.status != Status::Refused
            && node.callable.is_some_and(|c| !call::stays_inside(&c.row));
        if ran_outside {
            // It may have changed something outside: its receipt (and those held before it)
            // go to the ledger now, so a dispatcher that dies before the top-level call ends
            // still leaves it receipted. Queued under the lock, so the chain keeps end order.
            let appended = self.ledger.append_all(std::mem::take(&mut *done));
            self.sent
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .push(appended);
        }
    }
}
