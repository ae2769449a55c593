//! Why a dispatch did not end in a successful run: the stable codes of the gate and the
//! runners, with what the caller needs to act on them (did-you-mean, the refusal's receipt).
//! The edges translate it: `serve/` to an HTTP status and a JSON body, MCP to a tool error,
//! the CLI to an exit code. The words (message, how to fix) are the same everywhere.

use super::watcher::{ApprovalRefusal, Ticket};
use crate::access::auth::Denied;
use crate::access::token::Reason;
use crate::access::watch::Limit;
use crate::invoke::rowset::RowSet;
use crate::ledger::Receipt;

/// One dispatch that did not succeed.
#[derive(Debug)]
pub enum DispatchError {
    /// The caller's credential does not allow the call at all.
    Denied(Denied),
    /// More invocations are running than the dispatcher takes at once.
    Saturated { max_inflight: usize },
    /// No row has this key.
    UnknownKey {
        key: String,
        did_you_mean: Vec<String>,
    },
    /// A capability token refused at the gate, with its `REFUSED` receipt.
    Token {
        reason: Reason,
        message: String,
        receipt: Box<Receipt>,
    },
    /// An anonymous caller under `--open` asking for a row it may not run, with its receipt.
    Anonymous {
        message: String,
        receipt: Box<Receipt>,
    },
    /// `repairs` names an invocation that has no receipt.
    RepairsUnknown { repairs: String },
    /// `repairs` names an invocation that did not fail.
    RepairsNotFailed { repairs: String, status: String },
    /// A receipt id that is not of the form `inv_…`.
    BadReceiptId,
    /// No receipt has this id.
    UnknownReceipt,
    /// The row ran, or its runner refused the input, and failed; the receipt is durable.
    Failed {
        kind: Failure,
        /// The output as the caller may see it (secrets redacted).
        output: String,
        /// The runner's error code (`fn:sha256`, `http:fetch`, `missing_args`, …).
        reason: String,
        receipt: Box<Receipt>,
        /// A model's usage up to the failure (an agent stopped by its limits).
        usage: Option<crate::invoke::outcome::Usage>,
    },
    /// The dispatcher could not do its part (the ledger, a site file, the search index); the
    /// detail went to the log when this was made.
    Unavailable { what: &'static str },
    /// The call waits for a person's approval; nothing ran. Its `PENDING_APPROVAL` receipt.
    PendingApproval {
        ticket: Box<Ticket>,
        receipt: Box<Receipt>,
    },
    /// The token is past one of its limits, with the `REFUSED` receipt naming it.
    Limited {
        limit: Limit,
        message: String,
        /// Seconds until the limit's window ends.
        retry_after: u64,
        receipt: Box<Receipt>,
    },
    /// A request about an approval refused (unknown, not an approver, decided already, …).
    Approval(ApprovalRefusal),
    /// This dispatcher signs no checkpoints of its receipt log.
    NoLog,
    /// No checkpoint of this tree size was issued.
    NoCheckpoint(u64),
    /// A consistency proof asked between sizes the log does not have in that order.
    BadTreeSizes { old: u64, new: u64, size: u64 },
}

/// How a row that was dispatched failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Failure {
    /// The credential's circuit breaker is open.
    BreakerOpen,
    /// The input was refused before the runner started (`missing_args`, `bad_args`, …).
    Refused,
    /// The upstream did not answer in time.
    Timeout,
    /// The upstream answered with an error, or could not be reached.
    Upstream,
}

impl DispatchError {
    /// The dispatcher could not do its part: the detail goes to the log, the caller gets the
    /// stable code only.
    pub fn unavailable(what: &'static str, e: anyhow::Error) -> DispatchError {
        tracing::error!(error = %format!("{e:#}"), "{what}");
        DispatchError::Unavailable { what }
    }

    /// No row has `key`: the closest keys of `rows` as suggestions.
    pub fn unknown_key(rows: &RowSet, key: &str) -> DispatchError {
        DispatchError::UnknownKey {
            key: key.to_string(),
            did_you_mean: rows.did_you_mean(key),
        }
    }

    /// The stable code.
    pub fn code(&self) -> &'static str {
        match self {
            DispatchError::Denied(d) => d.code(),
            DispatchError::Saturated { .. } => "saturated",
            DispatchError::UnknownKey { .. } => "unknown_key",
            DispatchError::Token { reason, .. } => reason.as_str(),
            DispatchError::Anonymous { .. } => "unauthorized",
            DispatchError::RepairsUnknown { .. } => "repairs_unknown",
            DispatchError::RepairsNotFailed { .. } => "repairs_not_failed",
            DispatchError::BadReceiptId => "bad_receipt_id",
            DispatchError::UnknownReceipt => "unknown_receipt",
            DispatchError::Failed { kind, .. } => match kind {
                Failure::BreakerOpen => "breaker_open",
                Failure::Refused => "refused",
                Failure::Timeout => "upstream_timeout",
                Failure::Upstream => "upstream_failed",
            },
            DispatchError::Unavailable { .. } => "unavailable",
            DispatchError::PendingApproval { .. } => "pending_approval",
            DispatchError::Limited { limit, .. } => limit.as_str(),
            DispatchError::Approval(r) => r.code,
            DispatchError::NoLog => "no_log",
            DispatchError::NoCheckpoint(_) => "unknown_checkpoint",
            DispatchError::BadTreeSizes { .. } => "bad_tree_sizes",
        }
    }

    /// What went wrong, in a sentence.
    pub fn message(&self) -> String {
        match self {
            DispatchError::Denied(d) => d.message().to_string(),
            DispatchError::Saturated { max_inflight } => format!(
                "{max_inflight} invocations are running, the most this dispatcher takes at once"
            ),
            DispatchError::UnknownKey { key, .. } => format!("no row has the key `{key}`"),
            DispatchError::Token { message, .. } | DispatchError::Anonymous { message, .. } => {
                message.clone()
            }
            DispatchError::RepairsUnknown { repairs } => {
                format!("`repairs` names {repairs}, which has no receipt")
            }
            DispatchError::RepairsNotFailed { repairs, status } => {
                format!("{repairs} did not fail ({status})")
            }
            DispatchError::BadReceiptId => {
                "a receipt id is `inv_` followed by letters and digits".into()
            }
            DispatchError::UnknownReceipt => "no receipt has this id".into(),
            DispatchError::Failed { output, .. } => output.clone(),
            DispatchError::Unavailable { what } => format!("{what}; see the dispatcher's log"),
            DispatchError::PendingApproval { ticket, .. } => format!(
                "{} waits for a person's approval ({}) until {}",
                ticket.key, ticket.approval, ticket.expires_at
            ),
            DispatchError::Limited { message, .. } => message.clone(),
            DispatchError::Approval(r) => r.message.clone(),
            DispatchError::NoLog => "this dispatcher signs no checkpoints of its log".into(),
            DispatchError::NoCheckpoint(size) => {
                format!("no checkpoint of the log at size {size} was issued")
            }
            DispatchError::BadTreeSizes { old, new, size } => format!(
                "a consistency proof goes from a smaller tree to a larger one the log has: {old} to {new} asked, the log has {size}"
            ),
        }
    }

    /// What the caller can do about it.
    pub fn how_to_fix(&self) -> String {
        match self {
            DispatchError::Denied(d) => d.how_to_fix().to_string(),
            DispatchError::Saturated { .. } => {
                "retry after the pause the Retry-After header gives".into()
            }
            DispatchError::UnknownKey { did_you_mean, .. } => {
                if did_you_mean.is_empty() {
                    "ask in plain words with ?ask=… to find the key".into()
                } else {
                    format!("did you mean {}?", did_you_mean.join(", "))
                }
            }
            DispatchError::Token { reason, .. } => reason.how_to_fix().into(),
            DispatchError::Anonymous { .. } => {
                "send the owner key or a capability token that covers this row".into()
            }
            DispatchError::RepairsUnknown { .. } => {
                "name the failed invocation this one corrects".into()
            }
            DispatchError::RepairsNotFailed { .. } => {
                "only a FAILED, REFUSED or RAN_NO_MATERIAL invocation can be repaired".into()
            }
            DispatchError::BadReceiptId => "use the `receipt` field of an invocation's answer".into(),
            DispatchError::UnknownReceipt => "check the id; receipts are never deleted".into(),
            DispatchError::Failed { kind, .. } => match kind {
                Failure::BreakerOpen => {
                    "the upstream (or its credential) is resting after repeated failures; retry after the time it names"
                }
                Failure::Refused => {
                    "read the row's contract (its ARGS line) and send the arguments it needs"
                }
                Failure::Timeout => {
                    "the upstream did not answer in time; retry later, or repair with \"repairs\": this receipt"
                }
                Failure::Upstream => {
                    "the row ran and failed; retry, or repair it with \"repairs\": this receipt"
                }
            }
            .into(),
            DispatchError::Unavailable { .. } => {
                "retry shortly; if it persists, tell the dispatcher's operator".into()
            }
            DispatchError::PendingApproval { ticket, .. } => format!(
                "poll {} (add ?wait=30s to wait) for the result once a person decides",
                ticket.poll_url
            ),
            DispatchError::Limited { limit, .. } => match limit {
                Limit::Rate => "wait for the pause the Retry-After header gives",
                Limit::Budget => "the token's budget is spent; ask its owner for another",
                Limit::Loop => {
                    "the same call was repeated too often; change the arguments, or wait for the pause Retry-After gives"
                }
            }
            .into(),
            DispatchError::Approval(r) => r.how_to_fix().into(),
            DispatchError::NoLog => {
                "ask the dispatcher's operator for its log key (capdir serve signs with one by default)".into()
            }
            DispatchError::NoCheckpoint(_) => {
                "GET /api/ledger/checkpoint for the latest, and prove against that".into()
            }
            DispatchError::BadTreeSizes { .. } => {
                "send ?from=OLD&to=NEW with OLD <= NEW <= the latest checkpoint's size".into()
            }
        }
    }

    /// The receipt the refusal or failure left, if it left one.
    pub fn receipt(&self) -> Option<&Receipt> {
        match self {
            DispatchError::Token { receipt, .. }
            | DispatchError::Anonymous { receipt, .. }
            | DispatchError::Failed { receipt, .. }
            | DispatchError::PendingApproval { receipt, .. }
            | DispatchError::Limited { receipt, .. } => Some(receipt),
            _ => None,
        }
    }

    /// The model usage the failed call had spent, when it called one.
    pub fn usage(&self) -> Option<&crate::invoke::outcome::Usage> {
        match self {
            DispatchError::Failed { usage, .. } => usage.as_ref(),
            _ => None,
        }
    }

    /// The reason a receipt records for it (`scope`, `anonymous`, `http:fetch`, …), when there
    /// is a receipt.
    pub fn reason(&self) -> Option<&str> {
        match self {
            DispatchError::Token { reason, .. } => Some(reason.as_str()),
            DispatchError::Anonymous { .. } => Some("anonymous"),
            DispatchError::Failed { reason, .. } => Some(reason),
            DispatchError::Limited { limit, .. } => Some(limit.as_str()),
            DispatchError::PendingApproval { .. } => Some("pending_approval"),
            _ => None,
        }
    }
}

impl From<Denied> for DispatchError {
    fn from(d: Denied) -> DispatchError {
        DispatchError::Denied(d)
    }
}

impl std::fmt::Display for DispatchError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.code(), self.message())
    }
}

impl std::error::Error for DispatchError {}
