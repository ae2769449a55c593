//! What the presented credential may do with one row (DESIGN.md §5, "what the presented
//! credential may do"): may it invoke, with which body, up to what size, until when. Computed
//! per request by the same checks the gate runs, so a contract never promises what the gate
//! would refuse.

use crate::access::auth::{Caller, open_refusal};
use crate::access::token::{self, Reason, Target};
use crate::row::Row;
use serde::Serialize;
use std::fmt::Write as _;

/// Why the gate would refuse this caller this row.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct Refused {
    /// The literal reason the gate would answer (`scope`, `expired`, …).
    pub reason: String,
    pub message: String,
}

/// One credential's affordances for one row.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct Affordances {
    /// `owner_key`, `capability_token` or `anonymous`.
    pub credential: &'static str,
    /// The token's id, for a capability token.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub token: Option<String>,
    pub may_invoke: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub refused: Option<Refused>,
    /// `any`, or `fixed` when only `fixed_body` may be sent.
    pub body: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fixed_body: Option<String>,
    /// The largest input accepted, in bytes (the dispatcher's body limit at most).
    pub max_payload_bytes: u64,
    /// RFC 3339; none for a credential that does not expire.
    pub until: Option<String>,
    /// The highest risk this credential may take on: `high` may run sensitive rows.
    pub risk_ceiling: &'static str,
    /// Why a call waits for a person's approval before it runs (`sensitive`, `token`); none
    /// when it runs at once.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub needs_approval: Option<&'static str>,
}

/// The dispatcher's side of the question: what it allows whoever asks.
#[derive(Debug, Clone, Copy)]
pub struct Here<'a> {
    /// `capdir serve --open`: anonymous callers may run rows that are not sensitive and use
    /// no credential.
    pub open: bool,
    /// The dispatcher's URL, the audience its tokens must name.
    pub audience: &'a str,
    /// The largest request body it reads, in bytes.
    pub body_limit: u64,
    /// Now, in Unix seconds.
    pub now: i64,
}

/// What `caller` may do with `row` (whose contract fingerprint is `fp`) on the dispatcher
/// `here`; `revoked` says whether the caller's token (if it is one) is on the ledger's
/// revocation list.
pub fn of(caller: &Caller, row: &Row, fp: &str, here: Here<'_>, revoked: bool) -> Affordances {
    let body_limit = here.body_limit;
    let mut a = Affordances {
        credential: caller.kind(),
        token: None,
        may_invoke: true,
        refused: None,
        body: "any",
        fixed_body: None,
        max_payload_bytes: body_limit,
        until: None,
        risk_ceiling: "high",
        needs_approval: None,
    };
    match caller {
        Caller::Owner => {}
        Caller::Anonymous => {
            a.risk_ceiling = "low";
            let why = if !here.open {
                Some("the dispatcher runs without --open")
            } else {
                open_refusal(row)
            };
            if let Some(why) = why {
                a.may_invoke = false;
                a.refused = Some(Refused {
                    reason: "anonymous".into(),
                    message: why.into(),
                });
            }
        }
        Caller::Token(claims) => {
            a.token = Some(claims.id.clone());
            a.until = Some(claims.expires_at());
            a.risk_ceiling = claims.risk.as_str();
            if let Some(body) = &claims.body {
                a.body = "fixed";
                a.fixed_body = Some(body.clone());
            }
            if let Some(max) = claims.max_payload {
                a.max_payload_bytes = max.min(body_limit);
            }
            let verdict = if revoked {
                Err(token::TokenRefusal {
                    reason: Reason::Revoked,
                    message: format!("token {} was revoked", claims.id),
                })
            } else {
                token::check_holder(claims, here.now, here.audience).and_then(|()| {
                    let target = Target {
                        key: &row.key,
                        category: &row.category,
                        sensitive: row.sensitive,
                        fingerprint: fp,
                    };
                    let needs = crate::access::token::needs_approval(claims, row.sensitive);
                    a.needs_approval = needs.map(|n| n.as_str());
                    token::check_call_approved(claims, target, None, needs.is_some())
                })
            };
            if let Err(r) = verdict {
                a.may_invoke = false;
                a.refused = Some(Refused {
                    reason: r.reason.as_str().into(),
                    message: r.message,
                });
            }
        }
    }
    a
}

impl Affordances {
    /// The section appended to a markdown contract fetched with a credential.
    pub fn markdown(&self) -> String {
        let mut s = String::from("\n## What your credential may do\n\n");
        let who = match (&self.token, self.credential) {
            (Some(id), _) => format!("capability token `{id}`"),
            (None, "owner_key") => "the owner key".to_string(),
            (None, other) => other.to_string(),
        };
        let _ = writeln!(
            s,
            "- Credential: {who} (risk ceiling `{}`)",
            self.risk_ceiling
        );
        match &self.refused {
            None => match self.needs_approval {
                Some(why) => {
                    let _ = writeln!(
                        s,
                        "- May invoke: yes, once a person approves the call (`{why}`): the call answers 202 PENDING_APPROVAL with a poll_url"
                    );
                }
                None => s.push_str("- May invoke: yes\n"),
            },
            Some(r) => {
                let _ = writeln!(s, "- May invoke: no — `{}`: {}", r.reason, r.message);
            }
        }
        match &self.fixed_body {
            Some(b) => {
                let _ = writeln!(s, "- Body: only `{b}` (send it, or no body)");
            }
            None => {
                let _ = writeln!(s, "- Body: any, at most {} bytes", self.max_payload_bytes);
            }
        }
        let _ = writeln!(
            s,
            "- Until: {}",
            self.until.as_deref().unwrap_or("no expiry")
        );
        s
    }
}
