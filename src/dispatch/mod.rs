//! One invocation through the gate (DESIGN.md §6–§8): who may run what, the runner, and the
//! receipt written before anyone hears the answer. `POST /api/dispatch`, the run-now GET and
//! MCP `tools/call` all come here, so they refuse alike and write the same receipts.
//!
//! A `Dispatcher` is the part of a dispatcher that does not speak HTTP: the live build of the
//! site (swapped whole when a new build lands), the ledger, the keys credentials are checked
//! against, and the gate. It answers in domain terms (`Invoked`, `DispatchError`); each edge
//! translates.

mod error;
pub mod follow;
mod gate;
mod live;
pub mod log;
pub mod metrics;
mod tree;
mod watcher;

pub use error::{DispatchError, Failure};
pub use follow::{FollowStatus, Follower, TrustConfig};
use gate::Gate;
pub use live::Live;
pub use tree::TreeBudget;
pub use watcher::{APPROVED, ApprovalRefusal, DENIED, PENDING_APPROVAL, Poll, Ticket, View};

use crate::access::affordance::{self, Affordances, Here};
use crate::access::auth::{self, Caller, Keys};
use crate::access::token::{self, Reason};
use crate::check::secrets::{self, Known};
use crate::invoke::authority::{CallContext, now_rfc3339};
use crate::invoke::outcome::{Outcome, Status};
use crate::invoke::rowset::Callable;
use crate::invoke::{Input, InvokerConfig};
use crate::ledger::{self, Draft, Ledger, Receipt};
use crate::row::call;
use arc_swap::ArcSwap;
use serde::Deserialize;
use serde_json::Value as Json;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::{Semaphore, watch};
use tracing::Instrument as _;

/// A finished invocation whose receipt is durable.
#[derive(Debug)]
pub struct Invoked {
    pub receipt: Receipt,
    /// The output as the caller may see it (secrets redacted).
    pub output: String,
    pub duration: Duration,
    pub truncated: bool,
    /// A model's tokens (and price), summed over every turn; none for rows that call none.
    pub usage: Option<crate::invoke::outcome::Usage>,
}

/// Where a receipt can be checked and what to send to repair its call: every invocation
/// answer carries one (`proof`), so a caller that only follows URLs can confirm and repair.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Proof {
    /// The full receipt (a credential reads it: the owner, or the token that made it).
    pub receipt_url: String,
    /// The keyless confirmation: status and hashes, for anyone who knows the id.
    pub confirm_url: String,
    /// The receipt as a page (for a browser; keyless it shows the confirmation).
    pub page_url: String,
    /// The call that would repair this one: the same key, corrected input, `repairs` naming
    /// this receipt.
    pub repair: Repair,
    pub trace_id: String,
}

/// A POST that repairs a call.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Repair {
    pub method: &'static str,
    pub url: String,
    pub body: Json,
}

/// A text whose router tags ran: each tag replaced by its output, or by its refusal.
#[derive(Debug, serde::Serialize)]
pub struct Routed {
    pub text: String,
    pub tags: Vec<RoutedTag>,
}

/// One tag of a routed text, as it ran.
#[derive(Debug, serde::Serialize)]
pub struct RoutedTag {
    pub key: String,
    /// Its receipt; none when it was refused before one could be written (an unknown key).
    pub receipt: Option<String>,
    pub status: String,
    /// What replaced the tag in the text.
    pub output: String,
    /// The stable code, when it did not succeed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<&'static str>,
}

/// One invocation as a caller asks for it (the body of `POST /api/dispatch`).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct InvokeRequest {
    pub key: String,
    pub body: Option<String>,
    pub args: Option<serde_json::Map<String, Json>>,
    pub repairs: Option<String>,
}

/// How a dispatcher is set up.
pub struct Settings {
    /// The built site the rows and the index are loaded from.
    pub site: PathBuf,
    pub ledger: Arc<dyn Ledger>,
    /// The owner key and the token key credentials are checked against.
    pub keys: Keys,
    /// `--open`: anonymous callers may invoke rows that are not sensitive and use no
    /// credential.
    pub open: bool,
    /// The dispatcher's public URL: the audience its tokens must name.
    pub audience: String,
    pub config: InvokerConfig,
    /// Invocations running at once before new ones are refused as `saturated`.
    pub max_inflight: usize,
    /// What one call may spend on the calls nested in it.
    pub tree_budget: TreeBudget,
    /// How long a call waits for a person's approval before it expires.
    pub approval_ttl: Duration,
}

/// The default time a call waits for a person's approval.
pub const DEFAULT_APPROVAL_TTL: Duration = Duration::from_secs(15 * 60);

/// An approved call being run: where its receipt goes in the approval's tree, and the
/// contract the person approved.
pub(crate) struct Approved {
    /// The decision's receipt: the run's parent.
    pub parent: String,
    /// The request's receipt: the root of the whole tree.
    pub root: String,
    pub fingerprint: String,
    pub trace_id: String,
}

/// The dispatcher's core: the live build, the ledger, the keys and the gate.
pub struct Dispatcher {
    site: PathBuf,
    live: ArcSwap<Live>,
    config: InvokerConfig,
    ledger: Arc<dyn Ledger>,
    keys: Keys,
    /// `keys.secret_values()`, taken once: every receipt and answer is redacted with them.
    secrets: Arc<Known>,
    open: bool,
    audience: String,
    max_inflight: usize,
    inflight: Semaphore,
    tree_budget: TreeBudget,
    approval_ttl: Duration,
    /// Calls by status and runner, counted and timed, for `/metrics`.
    metrics: metrics::CallMetrics,
    /// New builds swapped in so far: bumped after every reload, so MCP streams can tell their
    /// clients the tools changed and `/metrics` can count them.
    reloads: watch::Sender<u64>,
    /// The published site this dispatcher follows (`serve --follow`), if any.
    follower: std::sync::OnceLock<Arc<Follower>>,
    /// The key its receipt log's checkpoints are signed with, if it signs them.
    log: std::sync::OnceLock<Arc<log::Log>>,
    /// Held while a build changed in place is put live (`update`): the reloader, which would
    /// load the same change again from disk, skips its turn meanwhile.
    swapping: Mutex<()>,
}

impl Dispatcher {
    /// Load the site's current build and start dispatching against it.
    pub fn new(settings: Settings) -> anyhow::Result<Dispatcher> {
        let live = Live::load(&settings.site, &settings.config)?;
        Ok(Dispatcher {
            secrets: Arc::new(Known::new(settings.keys.secret_values())),
            site: settings.site,
            live: ArcSwap::from_pointee(live),
            config: settings.config,
            ledger: settings.ledger,
            keys: settings.keys,
            open: settings.open,
            audience: settings.audience,
            max_inflight: settings.max_inflight,
            inflight: Semaphore::new(settings.max_inflight),
            tree_budget: settings.tree_budget,
            approval_ttl: settings.approval_ttl,
            metrics: metrics::CallMetrics::default(),
            reloads: watch::Sender::new(0),
            follower: std::sync::OnceLock::new(),
            log: std::sync::OnceLock::new(),
            swapping: Mutex::new(()),
        })
    }

    /// What credentials are checked against (for `auth::authenticate`).
    pub fn keys(&self) -> &Keys {
        &self.keys
    }

    /// The secret values every answer and receipt is redacted of.
    pub fn secrets(&self) -> &Known {
        &self.secrets
    }

    /// Whether anonymous callers may invoke rows that are not sensitive and use no credential.
    pub fn is_open(&self) -> bool {
        self.open
    }

    /// The ledger receipts and token revocations live in.
    pub fn ledger(&self) -> &Arc<dyn Ledger> {
        &self.ledger
    }

    /// The site directory builds are read from.
    pub fn site(&self) -> &Path {
        &self.site
    }

    /// The dispatcher's public URL: the audience its tokens must name.
    pub fn audience(&self) -> &str {
        &self.audience
    }

    /// The addresses that prove and repair the call `r` records.
    pub fn proof(&self, r: &Receipt) -> Proof {
        let base = self.audience.trim_end_matches('/');
        let id = &r.draft.id;
        Proof {
            receipt_url: format!("{base}/receipt/{id}"),
            confirm_url: format!("{base}/api/dispatch?confirm={id}"),
            page_url: format!("{base}/receipt/{id}"),
            repair: Repair {
                method: "POST",
                url: format!("{base}/api/dispatch"),
                body: serde_json::json!({
                    "key": r.draft.key,
                    "body": "the corrected arguments, a|b",
                    "repairs": id,
                }),
            },
            trace_id: r.draft.trace_id.clone(),
        }
    }

    /// The site's current build, loaded from disk (what a reload would swap in).
    pub fn load_live(&self) -> anyhow::Result<Live> {
        Live::load(&self.site, &self.config)
    }

    /// The catalogue requests see now.
    pub fn live(&self) -> Arc<Live> {
        self.live.load_full()
    }

    /// The calls counted and timed so far, by status and runner.
    pub fn call_metrics(&self) -> &metrics::CallMetrics {
        &self.metrics
    }

    /// New builds swapped in so far.
    pub fn reload_count(&self) -> u64 {
        *self.reloads.borrow()
    }

    /// Reload when `catalogue.sqlite` changed; true when a new build was swapped in. A build
    /// that cannot be read yet keeps the old one serving; the next poll tries again.
    pub fn reload_if_changed(&self) -> bool {
        let Ok(_swapping) = self.swapping.try_lock() else {
            return false;
        };
        let path = self.site.join("catalogue.sqlite");
        let now = live::stamp(&path);
        if now.is_none() || now == self.live.load().stamp {
            return false;
        }
        match Live::load(&self.site, &self.config) {
            Ok(live) => {
                tracing::info!(
                    commit = %live.info.commit,
                    rows = live.invoker.rows().len(),
                    "reloaded the site"
                );
                self.live.store(Arc::new(live));
                self.reloads.send_modify(|n| *n += 1);
                true
            }
            Err(e) => {
                tracing::warn!(error = %format!("{e:#}"), "new site not readable yet");
                false
            }
        }
    }

    /// Change the site and put the change live in one step: `change` gets the live build,
    /// changes the site on disk and makes the next build from the live one (`Live::changed`),
    /// which then serves every request that starts after this returns. The reloader waits
    /// meanwhile, so it never loads the same change from disk. Nothing changes when `change`
    /// fails.
    pub fn update<T, E>(&self, change: impl FnOnce(&Live) -> Result<(Live, T), E>) -> Result<T, E> {
        let _swapping = self.swapping.lock().unwrap_or_else(|p| p.into_inner());
        let (next, out) = change(&self.live())?;
        tracing::info!(
            commit = %next.info.commit,
            rows = next.invoker.rows().len(),
            "a change made in place is live"
        );
        self.live.store(Arc::new(next));
        self.reloads.send_modify(|n| *n += 1);
        Ok(out)
    }

    /// A receiver that changes after every reload.
    pub fn subscribe_reloads(&self) -> watch::Receiver<u64> {
        self.reloads.subscribe()
    }

    /// Poll the site every `every` for a new build, until the runtime stops.
    pub fn spawn_reloader(self: &Arc<Self>, every: Duration) {
        let dispatcher = self.clone();
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(every);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tick.tick().await;
                let d = dispatcher.clone();
                let _ = tokio::task::spawn_blocking(move || d.reload_if_changed()).await;
            }
        });
    }

    /// Poll `follower` every `every` until the runtime stops; each build it swaps into the site
    /// is served by the reloader (`spawn_reloader`) like any other. The first poll is after one
    /// interval: start from a synced site. A dispatcher follows one site, once.
    pub fn follow(&self, follower: Arc<Follower>, every: Duration) {
        if self.follower.set(follower.clone()).is_err() {
            return;
        }
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(every);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            tick.tick().await;
            loop {
                tick.tick().await;
                // The outcome is in the follower's status and log.
                let _ = follower.poll().await;
            }
        });
    }

    /// What the follower has done, when this dispatcher follows a published site.
    pub fn follow_status(&self) -> Option<FollowStatus> {
        self.follower.get().map(|f| f.status())
    }

    /// One receipt by id, checked for form first.
    pub async fn find_receipt(&self, id: &str) -> Result<Receipt, DispatchError> {
        let id = checked_receipt_id(id)?;
        let found = self
            .ledger
            .get(id)
            .await
            .map_err(|e| DispatchError::unavailable("ledger read failed", e))?;
        found.ok_or(DispatchError::UnknownReceipt)
    }

    /// `r` with the receipts of the calls it made below it (a flow's steps, theirs…).
    pub async fn receipt_tree(&self, r: Receipt) -> Result<ledger::Node, DispatchError> {
        let root = r.draft.root.clone().unwrap_or_else(|| r.draft.id.clone());
        let below = self
            .ledger
            .tree(&root)
            .await
            .map_err(|e| DispatchError::unavailable("ledger read failed", e))?;
        let repaired_by = self
            .ledger
            .repaired_by(&r.draft.id)
            .await
            .map_err(|e| DispatchError::unavailable("ledger read failed", e))?;
        Ok(ledger::Node {
            repaired_by,
            ..ledger::nest(r, &below)
        })
    }

    /// What `caller` may do with `row` here, now: the gate's checks, run without running.
    pub async fn affordances(
        &self,
        caller: &Caller,
        callable: &Callable,
        body_limit: usize,
    ) -> Result<Affordances, DispatchError> {
        let revoked = match caller {
            Caller::Token(claims) => self.revoked(claims).await?,
            _ => false,
        };
        let here = Here {
            open: self.open,
            audience: &self.audience,
            body_limit: body_limit as u64,
            now: chrono::Utc::now().timestamp(),
        };
        Ok(affordance::of(
            caller,
            &callable.row,
            &callable.fingerprint,
            here,
            revoked,
        ))
    }

    /// Why a token may do nothing here now, if so: revoked, expired, or minted for another
    /// dispatcher. Invocations check this at their gate (with a receipt); reads that show what
    /// a token did (its receipts) check it too, so a revoked token reads nothing.
    pub async fn holder_refusal(
        &self,
        claims: &token::Claims,
    ) -> Result<Option<token::TokenRefusal>, DispatchError> {
        if self.revoked(claims).await? {
            return Ok(Some(token::TokenRefusal {
                reason: Reason::Revoked,
                message: format!("token {} was revoked", claims.id),
            }));
        }
        Ok(token::check_holder(claims, chrono::Utc::now().timestamp(), &self.audience).err())
    }

    /// Whether the token, or the token a share of it was derived from, was revoked.
    async fn revoked(&self, claims: &token::Claims) -> Result<bool, DispatchError> {
        let read = |id: String| async move {
            self.ledger
                .is_revoked(&id)
                .await
                .map_err(|e| DispatchError::unavailable("the revocation list could not be read", e))
        };
        if read(claims.id.clone()).await? {
            return Ok(true);
        }
        match claims.accountable_id() {
            parent if parent != claims.id => read(parent.to_string()).await,
            _ => Ok(false),
        }
    }

    /// A share token for one row, derived from `caller`, for the links of an answer: none
    /// for anonymous callers, for a token that does not cover the row, or when this
    /// dispatcher signs no tokens. `body` becomes the share's only body (a run-now link of an
    /// example).
    pub fn share_token(
        &self,
        caller: &Caller,
        key: &str,
        category: &str,
        body: Option<&str>,
    ) -> Option<String> {
        let signer = self.keys.token.as_ref()?;
        let now = chrono::Utc::now().timestamp();
        let claims = match caller {
            Caller::Anonymous => return None,
            Caller::Owner => token::Claims::owner_share(&self.audience, key, body, now),
            Caller::Token(c) if c.covers(key, category) && c.exp > now => {
                c.share(key, body, now)?
            }
            Caller::Token(_) => return None,
        };
        Some(signer.sign(&claims))
    }

    /// Run one invocation for `caller`: the gate, the runner, the receipt (durable before this
    /// returns), the metrics. A refusal or a runner failure names its receipt.
    ///
    /// The gate runs before any runner, in this order: a credential at all (anonymous callers
    /// only under `--open`), capacity (`saturated`), then for a capability token: revoked,
    /// expired, audience, the row (`unknown_key`), scope, contract_changed, risk_ceiling:low,
    /// fixed_body, payload_ceiling. Each token refusal answers its literal reason as the code
    /// and writes a `REFUSED` receipt.
    pub async fn dispatch(
        &self,
        caller: &Caller,
        request: InvokeRequest,
    ) -> Result<Invoked, DispatchError> {
        self.dispatch_spending(caller, request, None, None).await
    }

    /// `dispatch`, its nested calls spending `shared` when given (every tag of one routed
    /// text spends one budget), else a budget of its own; `approved` when a person approved
    /// the call (it runs, below the decision's receipt, and is neither queued nor charged
    /// again).
    async fn dispatch_spending(
        &self,
        caller: &Caller,
        mut request: InvokeRequest,
        shared: Option<Arc<tree::Spent>>,
        approved: Option<&Approved>,
    ) -> Result<Invoked, DispatchError> {
        self.admit(caller)?;
        let Ok(_permit) = self.inflight.try_acquire() else {
            return Err(DispatchError::Saturated {
                max_inflight: self.max_inflight,
            });
        };
        // One catalogue for the whole call, even if a reload lands meanwhile.
        let live = self.live();
        let sent_input = sent_input(&request);
        let gate = Gate {
            dispatcher: self,
            live: &live,
            caller,
            key: &request.key,
            input: sent_input.as_deref().unwrap_or_default(),
        };
        gate.holder().await?;
        let callable = gate.row()?;
        gate.still_approved(callable, approved).await?;
        let needs = gate
            .call_allowed(callable, approved, sent_input.as_deref())
            .await?;
        if let Caller::Token(claims) = caller
            && sent_input.is_none()
        {
            // A token with a fixed body runs it when the caller sends none.
            request.body = claims.body.clone();
        }
        self.repairable(request.repairs.as_deref()).await?;
        // What runs: what the caller sent, or the token's fixed body put in its place above.
        let input_text = sent_input
            .clone()
            .or_else(|| request.body.clone())
            .unwrap_or_default();
        let input = match request.args {
            Some(args) => Input::Args(args),
            None => Input::Body(request.body.unwrap_or_default()),
        };
        let limited = match caller {
            Caller::Token(claims) if claims.watch.has_limits() => Some(claims),
            _ => None,
        };
        if let Some(claims) = limited
            && approved.is_none()
        {
            self.charge_before(&gate, callable, claims, &input_text)
                .await?;
        }
        if let (Some(needs), Caller::Token(claims)) = (needs, caller) {
            return Err(self
                .queue_for_approval(
                    &gate,
                    callable,
                    claims,
                    needs,
                    &input_text,
                    &input,
                    request.repairs,
                )
                .await);
        }
        let run = Run {
            live: &live,
            caller,
            callable,
            input_text: &input_text,
            repairs: request.repairs,
            approved,
        };
        let ran = self.run(run, input, shared).await?;
        if let Some(claims) = limited {
            // What the call's steps and models spent counts for the next call.
            let cost = ran.outcome.usage.as_ref().and_then(|u| u.cost_usd);
            self.charge_after(claims, &ran.nested, cost).await;
        }
        ran.answer()
    }

    /// A credential at all: anonymous callers only under `--open`.
    fn admit(&self, caller: &Caller) -> Result<(), DispatchError> {
        if *caller == Caller::Anonymous && !self.open {
            auth::require_credential(caller)?;
        }
        Ok(())
    }

    /// A call that repairs an earlier one names a receipt that failed, was refused, or ran and
    /// produced nothing.
    async fn repairable(&self, repairs: Option<&str>) -> Result<(), DispatchError> {
        let Some(repairs) = repairs else {
            return Ok(());
        };
        let earlier = self.find_receipt(repairs).await.map_err(|e| match e {
            DispatchError::UnknownReceipt => DispatchError::RepairsUnknown {
                repairs: repairs.to_string(),
            },
            e => e,
        })?;
        let repairable = matches!(
            Status::parse(&earlier.draft.status),
            Some(Status::Failed | Status::Refused | Status::RanNoMaterial)
        );
        if repairable {
            Ok(())
        } else {
            Err(DispatchError::RepairsNotFailed {
                repairs: repairs.to_string(),
                status: earlier.draft.status,
            })
        }
    }

    /// A token's limits, charged when the call is asked: a call waiting for approval counts,
    /// so no queue floods. The input's digest only for the loop breaker, the one counter
    /// that names it.
    async fn charge_before(
        &self,
        gate: &Gate<'_>,
        callable: &Callable,
        claims: &token::Claims,
        input_text: &str,
    ) -> Result<(), DispatchError> {
        let sha = match claims.watch.max_repeats {
            Some(_) => ledger::sha256_hex(input_text),
            None => String::new(),
        };
        self.charge(gate, callable, claims, &sha).await
    }

    /// Run the call past its gate: its receipt id and trace fixed first (its steps' receipts
    /// name them), the runner, then its receipt durable after its steps'. An approved call's
    /// tree is the approval's: request → decision → run → its steps.
    async fn run(
        &self,
        run: Run<'_>,
        input: Input,
        shared: Option<Arc<tree::Spent>>,
    ) -> Result<Ran, DispatchError> {
        let id = ledger::new_id();
        let key = &run.callable.row.key;
        let span = tracing::info_span!(
            "call",
            otel.name = %format!("call {key}"),
            capdir.key = %key,
            capdir.receipt = %id,
            capdir.runner = run.callable.row.runner_name(),
            capdir.status = tracing::field::Empty,
        );
        // The span's trace is the receipt's (the caller's, when it named one); an approved
        // call stays in the trace of the request that asked for it.
        let trace_id = match run.approved {
            Some(a) => a.trace_id.clone(),
            None => trace_id_of(&span),
        };
        let tree = self.tree_for(&run, &id, &trace_id, shared);
        let context = match &tree {
            Some(tree) => CallContext::under(tree.clone(), &id),
            None => CallContext::default(),
        };
        let started_at = now_rfc3339();
        let outcome = run
            .live
            .invoker
            .invoke_in(key, input, &context)
            .instrument(span.clone())
            .await;
        span.record("capdir.status", outcome.status.as_str());
        // Redacted once: the receipt stores it and the caller is answered with it.
        let output = secrets::redact(&outcome.output, &self.secrets);
        let draft = run.draft(&outcome, &output, id, trace_id, started_at, &self.secrets);
        // The call's receipt goes to the ledger after its steps' that are still held, in one
        // append (a tree of builtins: one message and one transaction, whole or not at all),
        // and the answer waits for every node of the tree, so no acknowledged call lacks one.
        let (mut drafts, queued, nested) = tree.map(|t| t.finish()).unwrap_or_default();
        drafts.push(draft);
        let receipt = self.append_after(queued, drafts).await?;
        Ok(Ran {
            outcome,
            output,
            receipt,
            nested,
        })
    }

    /// The authority over a call's nested calls, for a row that makes any (a call tree).
    fn tree_for(
        &self,
        run: &Run<'_>,
        id: &str,
        trace_id: &str,
        shared: Option<Arc<tree::Spent>>,
    ) -> Option<Arc<tree::Tree>> {
        if !call::makes_nested_calls(&run.callable.row) {
            return None;
        }
        let root = tree::Root {
            ledger: self.ledger.clone(),
            secrets: self.secrets.clone(),
            caller: run.caller.clone(),
            root: run
                .approved
                .map_or_else(|| id.to_string(), |a| a.root.clone()),
            trace_id: trace_id.to_string(),
            commit: run.live.info.commit.clone(),
            approved: run.approved.is_some(),
        };
        let spent = shared.unwrap_or_else(|| tree::Spent::starting(self.tree_budget));
        Some(Arc::new(tree::Tree::new(root, self.tree_budget, spent)))
    }

    /// Run the router tags of `text` (`[KEY]args[/KEY]`) in the order they appear, each as a
    /// call of its own by `caller` through the gate, with its own receipt; answer the text with
    /// each tag replaced by its output or its refusal. What a tag's output says is never run.
    /// Only the dispatcher failing its part (the ledger) stops the text.
    pub async fn route(&self, caller: &Caller, text: &str) -> Result<Routed, DispatchError> {
        let found = crate::invoke::runner::router_tags(text).await;
        let mut tags = Vec::with_capacity(found.len());
        // The tags of one text share one budget: 32 tags may not make 32 budgets' work.
        let spent = tree::Spent::starting(self.tree_budget);
        for tag in &found {
            let request = InvokeRequest {
                key: tag.key.to_string(),
                body: Some(tag.args.to_string()),
                args: None,
                repairs: None,
            };
            let ran = match self
                .dispatch_spending(caller, request, Some(spent.clone()), None)
                .await
            {
                Ok(done) => RoutedTag {
                    key: tag.key.to_string(),
                    receipt: Some(done.receipt.draft.id.clone()),
                    status: done.receipt.draft.status.clone(),
                    output: done.output,
                    error: None,
                },
                Err(e @ (DispatchError::Unavailable { .. } | DispatchError::Saturated { .. })) => {
                    return Err(e);
                }
                Err(e) => {
                    let message = e.message();
                    RoutedTag {
                        key: tag.key.to_string(),
                        receipt: e.receipt().map(|r| r.draft.id.clone()),
                        status: e
                            .receipt()
                            .map_or(Status::Refused.as_str().to_string(), |r| {
                                r.draft.status.clone()
                            }),
                        output: if message.starts_with("ERR:") {
                            message
                        } else {
                            format!("ERR:{}:{message}", e.code())
                        },
                        error: Some(e.code()),
                    }
                }
            };
            tags.push(ran);
        }
        let outputs: Vec<String> = tags.iter().map(|t| t.output.clone()).collect();
        Ok(Routed {
            text: crate::row::route::replace(text, &found, &outputs),
            tags,
        })
    }

    /// Make receipts durable, one after another in the chain, and count them; answers the
    /// last one's receipt (a call's own, after the calls it made).
    async fn append(&self, drafts: Vec<Draft>) -> Result<Receipt, DispatchError> {
        self.append_after(Vec::new(), drafts).await
    }

    /// `append`, once the appends `queued` before (a tree's receipts sent ahead) are durable
    /// too; they are counted and logged with the rest.
    async fn append_after(
        &self,
        queued: Vec<Appended>,
        drafts: Vec<Draft>,
    ) -> Result<Receipt, DispatchError> {
        let unavailable = |e| DispatchError::unavailable("the receipt could not be written", e);
        let last = self.ledger.append_all(drafts);
        let (earlier, last) =
            futures_util::future::join(futures_util::future::join_all(queued), last).await;
        let mut receipts = Vec::new();
        for appended in earlier {
            receipts.extend(appended.map_err(unavailable)?);
        }
        let mut last = last.map_err(unavailable)?;
        for receipt in receipts.iter().chain(&last) {
            self.metrics.record(receipt);
            logged(receipt);
        }
        last.pop()
            .ok_or_else(|| unavailable(anyhow::anyhow!("the ledger answered no receipt")))
    }
}

/// The trace id of a receipt written under `span`: its OpenTelemetry trace's, else one of
/// its own (no telemetry layer installed).
fn trace_id_of(span: &tracing::Span) -> String {
    crate::telemetry::trace_id(span).unwrap_or_else(|| uuid::Uuid::new_v4().simple().to_string())
}

/// The trace id of a receipt written in the span in place (a refusal, a call queued for a
/// person): the request's trace.
fn trace_id_here() -> String {
    trace_id_of(&tracing::Span::current())
}

/// A receipt id as the ledger writes them: `inv_` and up to 64 letters and digits.
pub fn checked_receipt_id(id: &str) -> Result<&str, DispatchError> {
    let ok = id.strip_prefix("inv_").is_some_and(|rest| {
        !rest.is_empty() && rest.len() <= 64 && rest.bytes().all(|b| b.is_ascii_alphanumeric())
    });
    if ok {
        Ok(id)
    } else {
        Err(DispatchError::BadReceiptId)
    }
}

/// What the caller sent as the call's input: its named arguments as JSON, or its body.
fn sent_input(request: &InvokeRequest) -> Option<String> {
    match (&request.body, &request.args) {
        (_, Some(args)) => Some(Json::Object(args.clone()).to_string()),
        (Some(body), None) => Some(body.clone()),
        (None, None) => None,
    }
}

/// One call that passed its gate, as its receipt records it.
struct Run<'a> {
    live: &'a Live,
    caller: &'a Caller,
    callable: &'a Callable,
    input_text: &'a str,
    repairs: Option<String>,
    approved: Option<&'a Approved>,
}

impl Run<'_> {
    /// The call's receipt, its input and output redacted.
    fn draft(
        &self,
        outcome: &Outcome,
        output: &str,
        id: String,
        trace_id: String,
        started_at: String,
        known: &Known,
    ) -> Draft {
        Draft {
            id,
            key: outcome.key.clone(),
            actor: self.caller.actor(),
            runner: outcome.runner.clone(),
            trace_id,
            started_at,
            finished_at: now_rfc3339(),
            status: outcome.status.as_str().into(),
            error_code: outcome.error_code().map(str::to_string),
            cost_usd: outcome.usage.as_ref().and_then(|u| u.cost_usd),
            input_sha256: ledger::sha256_hex(self.input_text),
            output_sha256: ledger::sha256_hex(&outcome.output),
            contract_sha256: self.callable.fingerprint.clone(),
            catalogue_commit: self.live.info.commit.clone(),
            repairs: self.repairs.clone(),
            parent: self.approved.map(|a| a.parent.clone()),
            root: self.approved.map(|a| a.root.clone()),
            input: secrets::redact(self.input_text, known),
            output: output.to_string(),
        }
    }
}

/// A call that ran: its outcome, its output as redacted, its durable receipt, and the nested
/// calls it made (key, status) for its token's counters.
struct Ran {
    outcome: Outcome,
    output: String,
    receipt: Receipt,
    nested: Vec<(String, String)>,
}

impl Ran {
    /// The caller's answer: the output, or the runner's failure by kind, naming the receipt.
    fn answer(self) -> Result<Invoked, DispatchError> {
        let Ran {
            outcome,
            output,
            receipt,
            ..
        } = self;
        if let Some(failure) = &outcome.error {
            let kind = match outcome.status {
                Status::Refused if failure.code.starts_with("breaker") => Failure::BreakerOpen,
                Status::Refused => Failure::Refused,
                _ if is_timeout(failure) => Failure::Timeout,
                _ => Failure::Upstream,
            };
            return Err(DispatchError::Failed {
                kind,
                output,
                reason: failure.code.clone(),
                receipt: Box::new(receipt),
                usage: outcome.usage,
            });
        }
        Ok(Invoked {
            receipt,
            output,
            duration: outcome.duration,
            truncated: outcome.truncated,
            usage: outcome.usage,
        })
    }
}

/// An upstream that did not answer within the runner's timeout (`ERR:http:fetch:timed out…`,
/// `ERR:mcp:timeout:…`), its headers or the rest of its body (`reading the 200 response:
/// timed out…`: one that trickles its answer).
fn is_timeout(failure: &crate::invoke::outcome::Failure) -> bool {
    let detail = failure.detail.as_str();
    let detail = match detail.strip_prefix("reading the ") {
        Some(rest) => rest
            .split_once(" response: ")
            .map_or(detail, |(_, why)| why),
        None => detail,
    };
    failure.code == "mcp:timeout"
        || (failure.code.ends_with(":fetch")
            && (detail.starts_with("timed out") || detail.starts_with("connect timed out")))
}

/// Count and log a durable receipt: at debug level when the call ran as asked (its receipt is
/// the record, and `/metrics` counts it), at info when it did not (refused, failed, waiting
/// for or decided by a person): a line for every call is a real share of the dispatcher's
/// CPU under load (`bench/dispatch.sh`), and the default log still names every call that
/// went wrong.
fn logged(receipt: &Receipt) {
    let d = &receipt.draft;
    macro_rules! invoked {
        ($level:expr) => {
            tracing::event!(
                $level,
                receipt = %d.id,
                seq = receipt.seq,
                key = %d.key,
                runner = %d.runner,
                actor = %d.actor,
                status = %d.status,
                error = d.error_code.as_deref().unwrap_or(""),
                parent = d.parent.as_deref().unwrap_or(""),
                commit = %d.catalogue_commit,
                "invoked"
            )
        };
    }
    if Status::parse(&d.status).is_some_and(Status::is_success) {
        invoked!(tracing::Level::DEBUG);
    } else {
        invoked!(tracing::Level::INFO);
    }
}

/// An append sent to the ledger, resolving once it is durable.
type Appended = futures_util::future::BoxFuture<'static, anyhow::Result<Vec<Receipt>>>;

#[cfg(test)]
mod tests {
    use super::is_timeout;
    use crate::invoke::outcome::Failure;

    #[test]
    fn a_trickled_body_cut_by_the_timeout_is_a_timeout() {
        let timeout = |code, detail| is_timeout(&Failure::new(code, detail));
        assert!(timeout("http:fetch", "timed out after 2000 ms"));
        assert!(timeout("http:fetch", "connect timed out after 10000 ms"));
        assert!(timeout(
            "http:fetch",
            "reading the 200 response: timed out after 2000 ms"
        ));
        assert!(timeout("mcp:timeout", ""));
        assert!(!timeout("http:fetch", "connection reset by peer"));
        assert!(!timeout(
            "http:fetch",
            "reading the 200 response: connection reset by peer"
        ));
        assert!(!timeout("http:500", "timed out after 2000 ms"));
    }
}
