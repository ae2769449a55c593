//! The gate a call passes before any runner, one function per check in the order
//! [`Dispatcher::dispatch`] gives; a refusal writes its receipt.

use super::DispatchError;
use super::{Approved, Dispatcher, Live};
use crate::access::auth::{Caller, open_refusal};
use crate::access::token::{self, Reason, Target};
use crate::access::watch::Needs;
use crate::check::secrets;
use crate::invoke::authority::now_rfc3339;
use crate::invoke::outcome::Status;
use crate::invoke::rowset::Callable;
use crate::ledger::{self, Draft, Receipt};

/// One call at the gate: what a refusal's receipt is made of.
pub(super) struct Gate<'a> {
    pub(super) dispatcher: &'a Dispatcher,
    pub(super) live: &'a Live,
    pub(super) caller: &'a Caller,
    pub(super) key: &'a str,
    pub(super) input: &'a str,
}

impl<'a> Gate<'a> {
    /// For a capability token: revoked, expired, minted for another dispatcher (audience).
    pub(super) async fn holder(&self) -> Result<(), DispatchError> {
        let Caller::Token(claims) = self.caller else {
            return Ok(());
        };
        if self.dispatcher.revoked(claims).await? {
            let message = format!("token {} was revoked", claims.accountable_id());
            return Err(self.refuse(None, Reason::Revoked, message).await);
        }
        if let Err(r) = token::check_holder(
            claims,
            chrono::Utc::now().timestamp(),
            &self.dispatcher.audience,
        ) {
            return Err(self.refuse(None, r.reason, r.message).await);
        }
        Ok(())
    }

    /// The row asked for (`unknown_key`).
    pub(super) fn row(&self) -> Result<&'a Callable, DispatchError> {
        let rows = self.live.invoker.rows();
        rows.get(self.key)
            .ok_or_else(|| DispatchError::unknown_key(rows, self.key))
    }

    /// An approved call runs the contract the person approved: a build that landed since
    /// must not run another row.
    pub(super) async fn still_approved(
        &self,
        callable: &Callable,
        approved: Option<&Approved>,
    ) -> Result<(), DispatchError> {
        match approved {
            Some(a) if a.fingerprint != callable.fingerprint => {
                let message = format!(
                    "{} changed after its call was approved; the approved contract is not the one live",
                    callable.row.key
                );
                Err(self
                    .refuse(Some(callable), Reason::ContractChanged, message)
                    .await)
            }
            _ => Ok(()),
        }
    }

    /// What the caller may run: for a token its scope, contract, risk ceiling, fixed body and
    /// payload ceiling (and whether a person must approve the call first); for an anonymous
    /// caller under `--open`, only rows that are not sensitive and use no credential.
    pub(super) async fn call_allowed(
        &self,
        callable: &Callable,
        approved: Option<&Approved>,
        sent_input: Option<&str>,
    ) -> Result<Option<Needs>, DispatchError> {
        match self.caller {
            Caller::Owner => Ok(None),
            Caller::Token(claims) => {
                let target = Target {
                    key: &callable.row.key,
                    category: &callable.row.category,
                    sensitive: callable.row.sensitive,
                    fingerprint: &callable.fingerprint,
                };
                let needs = match approved {
                    None => token::needs_approval(claims, callable.row.sensitive),
                    Some(_) => None,
                };
                // A person stands in for the risk ceiling: one who approved, or who will be asked.
                let by_person = approved.is_some() || needs.is_some();
                match token::check_call_approved(claims, target, sent_input, by_person) {
                    Ok(()) => Ok(needs),
                    Err(r) => Err(self.refuse(Some(callable), r.reason, r.message).await),
                }
            }
            Caller::Anonymous => match open_refusal(&callable.row) {
                Some(why) => Err(self.refuse_anonymous(callable, why).await),
                None => Ok(None),
            },
        }
    }

    /// The receipt of a refusal: nothing ran, the reason is its error code.
    pub(super) async fn receipt(
        &self,
        callable: Option<&Callable>,
        code: &str,
        message: &str,
    ) -> Result<Receipt, DispatchError> {
        let known = &self.dispatcher.secrets;
        let output = format!("ERR:{code}:{message}");
        let now = now_rfc3339();
        let draft = Draft {
            id: ledger::new_id(),
            key: self.key.to_string(),
            actor: self.caller.actor(),
            runner: callable.map_or("none", |c| c.row.runner_name()).to_string(),
            trace_id: super::trace_id_here(),
            started_at: now.clone(),
            finished_at: now,
            status: Status::Refused.as_str().into(),
            error_code: Some(code.to_string()),
            cost_usd: None,
            input_sha256: ledger::sha256_hex(self.input),
            output_sha256: ledger::sha256_hex(&output),
            contract_sha256: callable.map(|c| c.fingerprint.clone()).unwrap_or_default(),
            catalogue_commit: self.live.info.commit.clone(),
            repairs: None,
            parent: None,
            root: None,
            input: secrets::redact(self.input, known),
            output: secrets::redact(&output, known),
        };
        self.dispatcher.append(vec![draft]).await
    }

    /// A token refused at the gate: the literal reason as the code, with its receipt.
    pub(super) async fn refuse(
        &self,
        callable: Option<&Callable>,
        reason: Reason,
        message: String,
    ) -> DispatchError {
        match self.receipt(callable, reason.as_str(), &message).await {
            Ok(receipt) => DispatchError::Token {
                reason,
                message,
                receipt: Box::new(receipt),
            },
            Err(e) => e,
        }
    }

    /// An anonymous caller under `--open` asking for a row it may not run.
    pub(super) async fn refuse_anonymous(&self, callable: &Callable, why: &str) -> DispatchError {
        let message = format!(
            "{why}: without a credential, --open allows only rows that are not sensitive and use no credential"
        );
        match self.receipt(Some(callable), "anonymous", &message).await {
            Ok(receipt) => DispatchError::Anonymous {
                message,
                receipt: Box::new(receipt),
            },
            Err(e) => e,
        }
    }
}
