//! The watcher (issue 28): calls that wait for a person, the decision, the run that follows
//! it exactly once, and tokens' limits.
//!
//! A token's call that needs approval (`access::watch::needs_approval`) is queued in the
//! ledger, bound to the row's key and contract fingerprint, the SHA-256 of the exact input,
//! the caller and an expiry, and answered `PENDING_APPROVAL` with its own receipt. The owner
//! or an approver token decides it (`decide`): only the decider that moves it out of
//! `pending` runs it, through the same gate and runner as any call, as the caller, with the
//! decision's receipt as its parent. Nobody decides their own call.

use super::gate::Gate;
use super::{Approved, DispatchError, Dispatcher, InvokeRequest, Invoked};
use crate::access::auth::Caller;
use crate::access::token::{self, Claims};
use crate::access::watch::{self as rules, Counter, Needs};
use crate::check::secrets;
use crate::invoke::authority::now_rfc3339;
use crate::invoke::rowset::Callable;
use crate::invoke::{self, Input};
use crate::ledger::watch::{self, Approval, Decision, Pending};
use crate::ledger::{self, Draft};
use serde::Serialize;
use serde_json::{Value as Json, json};

/// The receipt status of a call waiting for a person, and of the decisions on it.
pub const PENDING_APPROVAL: &str = "PENDING_APPROVAL";
pub const APPROVED: &str = "APPROVED";
pub const DENIED: &str = "DENIED";

/// What a caller whose call waits is told (`202`).
#[derive(Debug, Clone, Serialize)]
pub struct Ticket {
    pub status: &'static str,
    pub approval: String,
    /// The page where a person decides it.
    pub approval_url: String,
    /// Where the caller reads the result (`?wait=30s` to wait for it).
    pub poll_url: String,
    /// RFC 3339.
    pub expires_at: String,
    pub receipt: String,
    pub key: String,
    /// `sensitive` or `token`: why it waits.
    pub needs: &'static str,
    pub why: &'static str,
}

/// A pending (or decided) call as an approver sees it.
#[derive(Debug, Clone, Serialize)]
pub struct View {
    pub approval: String,
    pub state: String,
    pub key: String,
    /// What the row does (its WHAT line), from the live build.
    pub what: String,
    /// The arguments as the runner will receive them, secrets redacted.
    pub arguments: Vec<String>,
    /// The input exactly as sent, secrets redacted.
    pub input: String,
    pub args_sha256: String,
    pub caller: String,
    pub fingerprint: String,
    /// Whether the row's contract is still the one the call was asked against.
    pub contract_current: bool,
    pub needs: String,
    pub requested_at: String,
    pub age_secs: i64,
    pub expires_at: String,
    pub receipt: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub decision: Option<Decision>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub result: Option<Json>,
}

/// Why a request about an approval was refused; `code` is stable.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApprovalRefusal {
    pub code: &'static str,
    pub message: String,
}

impl ApprovalRefusal {
    fn refuse(code: &'static str, message: impl Into<String>) -> DispatchError {
        DispatchError::Approval(ApprovalRefusal {
            code,
            message: message.into(),
        })
    }

    pub fn how_to_fix(&self) -> &'static str {
        match self.code {
            "bad_approval_id" => {
                "an approval id is apr_ and 32 hex digits, as the 202 answer gave it"
            }
            "unknown_approval" => "check the id; GET /api/approvals lists the pending ones",
            "not_approver" => {
                "send the owner key, or a token minted with --approver (capdir token mint --approver)"
            }
            "self_approval" => "another person must decide a call you asked for",
            "already_decided" => "it was decided already; GET /api/approvals/ID shows how",
            "approval_expired" => {
                "ask for the call again; it waits for a decision for a limited time"
            }
            "contract_changed" => {
                "the row changed since the call was asked; deny it, and let the caller ask again against the new contract"
            }
            "approval_denied" => "a person denied this call; see the note in its decision",
            _ => "see the message",
        }
    }
}

/// What polling an approval answers.
#[derive(Debug)]
pub enum Poll {
    /// Still waiting (for a decision, or for the approved run to finish).
    Waiting(Box<View>),
    /// The approved run's answer.
    Ran(Json),
}

impl Dispatcher {
    /// Queue `callable`'s call for a person: answer `PENDING_APPROVAL` with its receipt.
    #[allow(clippy::too_many_arguments)]
    pub(super) async fn queue_for_approval(
        &self,
        gate: &Gate<'_>,
        callable: &Callable,
        claims: &Claims,
        needs: Needs,
        input_text: &str,
        input: &Input,
        repairs: Option<String>,
    ) -> DispatchError {
        // What the person approves is what will run: a call that could not run is refused now.
        if let Err(failure) = invoke::prepare(callable, input.clone()) {
            return self
                .refuse_input(gate, callable, &failure.code, failure.render())
                .await;
        }
        // The ledger keeps the input to run it later; it keeps no secret of the dispatcher's.
        if secrets::redact(input_text, &self.secrets) != input_text {
            let message = "ERR:secret_in_input:the input carries a secret of this dispatcher's; a call waiting for approval keeps its input in the ledger, which never holds one".to_string();
            return self
                .refuse_input(gate, callable, "secret_in_input", message)
                .await;
        }
        let now = chrono::Utc::now().timestamp();
        let id = watch::new_approval_id();
        let receipt_id = ledger::new_id();
        let trace_id = super::trace_id_here();
        let pending = Pending {
            id: id.clone(),
            key: callable.row.key.clone(),
            fingerprint: callable.fingerprint.clone(),
            args_sha256: ledger::sha256_hex(input_text),
            input: input_text.to_string(),
            named: matches!(input, Input::Args(_)),
            caller: claims.clone(),
            needs: needs.as_str().into(),
            request_receipt: receipt_id.clone(),
            trace_id: trace_id.clone(),
            requested_at: now,
            expires_at: now + self.approval_ttl.as_secs() as i64,
            repairs,
        };
        if let Err(e) = self.ledger.queue_approval(&pending).await {
            return DispatchError::unavailable("the approval could not be queued", e);
        }
        let output = format!(
            "{PENDING_APPROVAL}:{id}: waiting for a person's approval until {}",
            token::rfc3339(pending.expires_at)
        );
        let stamp = now_rfc3339();
        let draft = Draft {
            id: receipt_id,
            key: callable.row.key.clone(),
            actor: gate.caller.actor(),
            runner: callable.row.runner_name().to_string(),
            trace_id,
            started_at: stamp.clone(),
            finished_at: stamp,
            status: PENDING_APPROVAL.into(),
            error_code: None,
            cost_usd: None,
            input_sha256: pending.args_sha256.clone(),
            output_sha256: ledger::sha256_hex(&output),
            contract_sha256: callable.fingerprint.clone(),
            catalogue_commit: gate.live.info.commit.clone(),
            repairs: None,
            parent: None,
            root: None,
            input: input_text.to_string(),
            output,
        };
        match self.append(vec![draft]).await {
            Ok(receipt) => DispatchError::PendingApproval {
                ticket: Box::new(self.ticket(&pending, needs)),
                receipt: Box::new(receipt),
            },
            Err(e) => e,
        }
    }

    /// An input refused before it could wait for anyone, with its `REFUSED` receipt.
    async fn refuse_input(
        &self,
        gate: &Gate<'_>,
        callable: &Callable,
        code: &str,
        message: String,
    ) -> DispatchError {
        let detail = message
            .strip_prefix(&format!("ERR:{code}:"))
            .unwrap_or(&message)
            .to_string();
        match gate.receipt(Some(callable), code, &detail).await {
            Ok(receipt) => DispatchError::Failed {
                kind: super::Failure::Refused,
                output: secrets::redact(&message, &self.secrets),
                reason: code.to_string(),
                receipt: Box::new(receipt),
                usage: None,
            },
            Err(e) => e,
        }
    }

    fn ticket(&self, p: &Pending, needs: Needs) -> Ticket {
        let base = self.audience.trim_end_matches('/');
        Ticket {
            status: PENDING_APPROVAL,
            approval: p.id.clone(),
            approval_url: format!("{base}/approvals#{}", p.id),
            poll_url: format!("{base}/api/approvals/{}/result", p.id),
            expires_at: token::rfc3339(p.expires_at),
            receipt: p.request_receipt.clone(),
            key: p.key.clone(),
            needs: needs.as_str(),
            why: needs.why(),
        }
    }

    /// Whether `caller` may decide `p`: an approver token with keys or categories decides the
    /// calls of those rows only (one without decides any); the owner any.
    fn approver_covers(caller: &Caller, p: &Pending, category: &str) -> bool {
        match caller {
            Caller::Token(c) if !c.keys.is_empty() || !c.categories.is_empty() => {
                c.covers(&p.key, category)
            }
            _ => true,
        }
    }

    /// Whether `caller` may see the queue and decide: the owner, or an approver token that is
    /// neither revoked nor expired.
    async fn check_approver(&self, caller: &Caller) -> Result<(), DispatchError> {
        match caller {
            Caller::Owner => Ok(()),
            Caller::Token(claims) if claims.watch.approver => {
                match self.holder_refusal(claims).await? {
                    Some(r) => Err(ApprovalRefusal::refuse("not_approver", r.message)),
                    None => Ok(()),
                }
            }
            Caller::Token(claims) => Err(ApprovalRefusal::refuse(
                "not_approver",
                format!("token {} may not decide calls", claims.id),
            )),
            Caller::Anonymous => Err(ApprovalRefusal::refuse(
                "not_approver",
                "deciding calls needs the owner key or an approver token",
            )),
        }
    }

    /// The calls waiting for a person, oldest first (the owner and approvers only).
    pub async fn pending_approvals(&self, caller: &Caller) -> Result<Vec<View>, DispatchError> {
        self.check_approver(caller).await?;
        let now = chrono::Utc::now().timestamp();
        let pending = self
            .ledger
            .pending_approvals(now)
            .await
            .map_err(|e| DispatchError::unavailable("the approvals could not be read", e))?;
        let live = self.live();
        Ok(pending
            .iter()
            .filter(|a| {
                let category = live
                    .invoker
                    .rows()
                    .get(&a.pending.key)
                    .map(|c| c.row.category.as_str())
                    .unwrap_or_default();
                Self::approver_covers(caller, &a.pending, category)
            })
            .map(|a| self.view(a, now))
            .collect())
    }

    /// One approval, for the owner, an approver, or the caller who asked for it.
    pub async fn approval(&self, caller: &Caller, id: &str) -> Result<View, DispatchError> {
        let now = chrono::Utc::now().timestamp();
        let found = self.find_approval(id, now).await?;
        if !self.may_read(caller, &found).await {
            // A caller who did not ask for it learns nothing of it, not even that it exists.
            return Err(ApprovalRefusal::refuse(
                "unknown_approval",
                format!("no approval {id} of yours"),
            ));
        }
        Ok(self.view(&found, now))
    }

    /// Poll an approval as its caller: waiting, or the run's answer; a denied or expired
    /// call answers its reason. `wait` long-polls up to that long for a change.
    pub async fn poll_approval(
        &self,
        caller: &Caller,
        id: &str,
        wait: std::time::Duration,
    ) -> Result<Poll, DispatchError> {
        let deadline = tokio::time::Instant::now() + wait;
        // Who may read it is asked once; the wait reads only the approval again.
        let mut found = self
            .find_approval(id, chrono::Utc::now().timestamp())
            .await?;
        if !self.may_read(caller, &found).await {
            return Err(ApprovalRefusal::refuse(
                "unknown_approval",
                format!("no approval {id} of yours"),
            ));
        }
        loop {
            let now = chrono::Utc::now().timestamp();
            match found.state.as_str() {
                watch::DENIED => {
                    let note = found
                        .decision
                        .as_ref()
                        .and_then(|d| d.note.clone())
                        .map(|n| format!(": {n}"))
                        .unwrap_or_default();
                    return Err(ApprovalRefusal::refuse(
                        "approval_denied",
                        format!("a person denied the call {id}{note}"),
                    ));
                }
                watch::EXPIRED => {
                    return Err(ApprovalRefusal::refuse(
                        "approval_expired",
                        format!(
                            "nobody decided the call {id} before {}",
                            token::rfc3339(found.pending.expires_at)
                        ),
                    ));
                }
                _ => {}
            }
            if let Some(result) = found.result {
                return Ok(Poll::Ran(result));
            }
            if tokio::time::Instant::now() >= deadline {
                return Ok(Poll::Waiting(Box::new(self.view(&found, now))));
            }
            tokio::time::sleep(std::time::Duration::from_millis(200)).await;
            found = self
                .find_approval(id, chrono::Utc::now().timestamp())
                .await?;
        }
    }

    /// Who may read an approval: the very token that asked, the token a share that asked was
    /// derived from (not another share of it), or an approver; a token that no longer holds
    /// (revoked, expired) reads nothing.
    async fn may_read(&self, caller: &Caller, a: &Approval) -> bool {
        if let Caller::Token(claims) = caller {
            if !matches!(self.holder_refusal(claims).await, Ok(None)) {
                return false;
            }
            if claims.id == a.pending.caller.id
                || (claims.parent.is_none() && caller.actor() == requester(&a.pending))
            {
                return true;
            }
        }
        self.check_approver(caller).await.is_ok()
    }

    async fn find_approval(&self, id: &str, now: i64) -> Result<Approval, DispatchError> {
        if !watch::is_approval_id(id) {
            return Err(ApprovalRefusal::refuse(
                "bad_approval_id",
                format!("`{id}` is not an approval id"),
            ));
        }
        self.ledger
            .approval(id, now)
            .await
            .map_err(|e| DispatchError::unavailable("the approval could not be read", e))?
            .ok_or_else(|| ApprovalRefusal::refuse("unknown_approval", format!("no approval {id}")))
    }

    fn view(&self, a: &Approval, now: i64) -> View {
        let p = &a.pending;
        let live = self.live();
        let callable = live.invoker.rows().get(&p.key);
        let arguments = callable
            .and_then(|c| invoke::prepare(c, pending_input(p).ok()?).ok())
            .unwrap_or_default()
            .iter()
            .map(|a| secrets::redact(a, &self.secrets))
            .collect();
        View {
            approval: p.id.clone(),
            state: a.state.clone(),
            key: p.key.clone(),
            what: callable
                .map(|c| c.row.what().to_string())
                .unwrap_or_default(),
            arguments,
            input: secrets::redact(&p.input, &self.secrets),
            args_sha256: p.args_sha256.clone(),
            caller: requester(p),
            fingerprint: p.fingerprint.clone(),
            contract_current: callable.is_some_and(|c| c.fingerprint == p.fingerprint),
            needs: p.needs.clone(),
            requested_at: token::rfc3339(p.requested_at),
            age_secs: now - p.requested_at,
            expires_at: token::rfc3339(p.expires_at),
            receipt: p.request_receipt.clone(),
            decision: a.decision.clone(),
            result: a.result.clone(),
        }
    }

    /// Decide an approval: deny it, or approve it and run the call (once, here), answering
    /// the approval as it then stands. Deciding twice, after the expiry, one's own call, or a
    /// call whose row changed since it was asked is refused.
    pub async fn decide(
        &self,
        decider: &Caller,
        id: &str,
        approve: bool,
        note: Option<String>,
    ) -> Result<View, DispatchError> {
        self.check_approver(decider).await?;
        let now = chrono::Utc::now().timestamp();
        let found = self.find_approval(id, now).await?;
        let p = &found.pending;
        if decider.actor() == requester(p) {
            return Err(ApprovalRefusal::refuse(
                "self_approval",
                format!(
                    "{} asked for {id}; nobody decides their own call",
                    decider.actor()
                ),
            ));
        }
        check_undecided(&found)?;
        let live = self.live();
        may_decide(&live, decider, p, id, approve)?;
        let decision = Decision {
            state: if approve {
                watch::APPROVED
            } else {
                watch::DENIED
            }
            .into(),
            by: decider.actor(),
            at: now,
            note: note
                .map(|n| secrets::redact(n.trim(), &self.secrets))
                .filter(|n| !n.is_empty())
                .map(|n| n.chars().take(2000).collect::<String>()),
            receipt: ledger::new_id(),
        };
        let won = self
            .ledger
            .decide(id, &decision, now)
            .await
            .map_err(|e| DispatchError::unavailable("the decision could not be recorded", e))?;
        if !won {
            // Another decider got there first, or it expired meanwhile.
            let again = self.find_approval(id, now).await?;
            check_undecided(&again)?;
            return Err(ApprovalRefusal::refuse(
                "already_decided",
                format!("{id} was decided meanwhile"),
            ));
        }
        let draft = decision_receipt(&live, decider, p, id, approve, &decision);
        self.append(vec![draft]).await?;
        if approve {
            let ran = self.run_approved(p, &decision.receipt).await;
            let answer = self.answer_json(&ran);
            if let Err(e) = self.ledger.record_result(id, &answer).await {
                tracing::error!(error = %format!("{e:#}"), approval = id, "the run's answer could not be recorded");
            }
        }
        let now = chrono::Utc::now().timestamp();
        Ok(self.view(&self.find_approval(id, now).await?, now))
    }

    /// Run an approved call as its caller, through the gate and the runner, below the
    /// decision's receipt.
    async fn run_approved(
        &self,
        p: &Pending,
        decision_receipt: &str,
    ) -> Result<Invoked, DispatchError> {
        let (body, args) = match pending_input(p) {
            Ok(Input::Args(args)) => (None, Some(args)),
            Ok(Input::Body(body)) => (Some(body), None),
            Err(e) => return Err(e),
        };
        let request = InvokeRequest {
            key: p.key.clone(),
            body,
            args,
            repairs: p.repairs.clone(),
        };
        let approved = Approved {
            parent: decision_receipt.to_string(),
            root: p.request_receipt.clone(),
            fingerprint: p.fingerprint.clone(),
            trace_id: p.trace_id.clone(),
        };
        let caller = Caller::Token(Box::new(p.caller.clone()));
        Box::pin(self.dispatch_spending(&caller, request, None, Some(&approved))).await
    }

    /// Charge `claims`' limits for one call of `callable` with input hashed to `args_sha256`;
    /// past a limit, a `REFUSED` receipt naming it and `429`.
    pub(super) async fn charge(
        &self,
        gate: &Gate<'_>,
        callable: &Callable,
        claims: &Claims,
        args_sha256: &str,
    ) -> Result<(), DispatchError> {
        let now = chrono::Utc::now().timestamp();
        let counters = rules::counters(
            &claims.watch,
            &callable.row.key,
            args_sha256,
            now,
            lifetime_end(claims),
        );
        let over = self
            .ledger
            .charge(claims.accountable_id(), &counters, now)
            .await
            .map_err(|e| DispatchError::unavailable("the token's counters could not be read", e))?;
        let Some((i, count)) = over else {
            return Ok(());
        };
        let c: &Counter = &counters[i];
        let message = format!(
            "token {} is past its limit of {} ({} so far)",
            claims.id,
            c.describe(&callable.row.key),
            count
        );
        match gate
            .receipt(Some(callable), c.kind.as_str(), &message)
            .await
        {
            Ok(receipt) => Err(DispatchError::Limited {
                limit: c.kind,
                message,
                retry_after: c.retry_after(now),
                receipt: Box::new(receipt),
            }),
            Err(e) => Err(e),
        }
    }

    /// Add what a finished call's nested calls and models spent to the caller's counters.
    pub(super) async fn charge_after(
        &self,
        claims: &Claims,
        nested: &[(String, String)],
        cost_usd: Option<f64>,
    ) {
        let now = chrono::Utc::now().timestamp();
        let cost = cost_usd.map_or(0, |c| (c.max(0.0) * 1e6).round() as u64);
        let counters =
            rules::nested_counters(&claims.watch, nested, cost, now, lifetime_end(claims));
        if counters.is_empty() {
            return;
        }
        if let Err(e) = self
            .ledger
            .add_to_counters(claims.accountable_id(), &counters, now)
            .await
        {
            tracing::error!(error = %format!("{e:#}"), token = %claims.id, "the token's counters could not be charged");
        }
    }
}

/// When a token's lifetime counters (calls per row, cost) may be forgotten: at its expiry; for
/// a share, whose own life is minutes, never (they are its parent's counters).
fn lifetime_end(claims: &Claims) -> i64 {
    match claims.parent {
        Some(_) => i64::MAX / 4,
        None => claims.exp,
    }
}

/// Who asked for the call, as receipts name callers (a share as the caller it came from).
fn requester(p: &Pending) -> String {
    Caller::Token(Box::new(p.caller.clone())).actor()
}

/// Refused when the approval is no longer pending.
fn check_undecided(a: &Approval) -> Result<(), DispatchError> {
    let id = &a.pending.id;
    match a.state.as_str() {
        watch::PENDING => Ok(()),
        watch::EXPIRED => Err(ApprovalRefusal::refuse(
            "approval_expired",
            format!("{id} expired at {}", token::rfc3339(a.pending.expires_at)),
        )),
        state => Err(ApprovalRefusal::refuse(
            "already_decided",
            format!(
                "{id} was {state} by {}",
                a.decision.as_ref().map_or("someone", |d| d.by.as_str())
            ),
        )),
    }
}

/// The stored input back as the runner takes it.
fn pending_input(p: &Pending) -> Result<Input, DispatchError> {
    if !p.named {
        return Ok(Input::Body(p.input.clone()));
    }
    match serde_json::from_str::<Json>(&p.input) {
        Ok(Json::Object(args)) => Ok(Input::Args(args)),
        _ => Err(DispatchError::unavailable(
            "a stored approval's arguments cannot be read",
            anyhow::anyhow!("approval {}: args are not a JSON object", p.id),
        )),
    }
}

fn short(fingerprint: &str) -> &str {
    fingerprint.get(..12).unwrap_or(fingerprint)
}

impl Dispatcher {
    /// An invocation's answer as JSON, the same fields `POST /api/dispatch` answers (its
    /// `proof` included): what an approved run leaves for its caller to poll, and what an MCP
    /// tool call answers.
    pub fn answer_json(&self, ran: &Result<Invoked, DispatchError>) -> Json {
        let mut v = match ran {
            Ok(done) => {
                let r = &done.receipt.draft;
                let mut v = json!({
                    "receipt": r.id,
                    "status": r.status,
                    "key": r.key,
                    "output": done.output,
                    "catalogue_commit": r.catalogue_commit,
                    "duration_ms": done.duration.as_secs_f64() * 1000.0,
                    "truncated": done.truncated,
                });
                if let Some(u) = &done.usage {
                    v["usage"] = json!(u);
                }
                v
            }
            Err(e) => {
                let mut v = json!({
                    "error": e.code(),
                    "message": e.message(),
                    "how_to_fix": e.how_to_fix(),
                });
                if let Some(r) = e.receipt() {
                    v["receipt"] = json!(r.draft.id);
                    v["status"] = json!(r.draft.status);
                    v["key"] = json!(r.draft.key);
                }
                if let Some(reason) = e.reason() {
                    v["reason"] = json!(reason);
                }
                v
            }
        };
        let receipt = match ran {
            Ok(done) => Some(&done.receipt),
            Err(e) => e.receipt(),
        };
        if let Some(r) = receipt {
            v["proof"] = json!(self.proof(r));
        }
        v
    }
}
/// Whether `decider` may decide the call `p` now: an approver of its row, and, to approve
/// it, the row still the contract that was asked for.
fn may_decide(
    live: &super::Live,
    decider: &Caller,
    p: &Pending,
    id: &str,
    approve: bool,
) -> Result<(), DispatchError> {
    let callable = live.invoker.rows().get(&p.key);
    let category = callable.map(|c| c.row.category.clone()).unwrap_or_default();
    if !Dispatcher::approver_covers(decider, p, &category) {
        return Err(ApprovalRefusal::refuse(
            "not_approver",
            format!(
                "{} may decide calls of its own rows, not {}",
                decider.actor(),
                p.key
            ),
        ));
    }
    let current = callable.map(|c| c.fingerprint.clone());
    if approve && current.as_deref() != Some(p.fingerprint.as_str()) {
        return Err(ApprovalRefusal::refuse(
            "contract_changed",
            format!(
                "{} changed since {id} was asked (fingerprint {} → {}); it is not run",
                p.key,
                short(&p.fingerprint),
                current.as_deref().map_or("removed", short)
            ),
        ));
    }
    Ok(())
}

/// The decision's receipt, below the request's.
fn decision_receipt(
    live: &super::Live,
    decider: &Caller,
    p: &Pending,
    id: &str,
    approve: bool,
    decision: &Decision,
) -> Draft {
    let note = decision.note.as_deref();
    let output = format!(
        "{}:{id}: {} for {}{}",
        if approve { APPROVED } else { DENIED },
        decider.actor(),
        requester(p),
        note.map(|n| format!(": {n}")).unwrap_or_default()
    );
    let stamp = now_rfc3339();
    Draft {
        id: decision.receipt.clone(),
        key: p.key.clone(),
        actor: decider.actor(),
        runner: "watcher".into(),
        trace_id: p.trace_id.clone(),
        started_at: stamp.clone(),
        finished_at: stamp,
        status: if approve { APPROVED } else { DENIED }.into(),
        error_code: None,
        cost_usd: None,
        input_sha256: p.args_sha256.clone(),
        output_sha256: ledger::sha256_hex(&output),
        contract_sha256: p.fingerprint.clone(),
        catalogue_commit: live.info.commit.clone(),
        repairs: None,
        parent: Some(p.request_receipt.clone()),
        root: Some(p.request_receipt.clone()),
        input: note.unwrap_or_default().to_string(),
        output,
    }
}
