//! Who is calling (DESIGN.md §8). A request carries no credential, the owner key, a capability
//! token, or something that is neither; `authenticate` says which. It is the one place that
//! tells credentials apart, so the HTTP API and MCP tell callers apart alike (the edge only
//! finds the credential in its request). What each caller may then do is decided by the gate
//! in `dispatch`.
//!
//! A credential that starts with `cdt1.` is a capability token, anything else is compared with
//! the owner key. A run-now URL carries a token in its `share` parameter instead
//! (`authenticate_share`).

use crate::access::token::{self, Claims, TokenKey};
use sha2::{Digest, Sha256};

/// The caller of one request, as far as its credential shows.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Caller {
    /// No credential: may ask, read contracts and the site, and confirm receipts; invoke only
    /// under `capdir serve --open`, and only rows that are not sensitive and use no credential.
    Anonymous,
    /// The dispatcher's owner key: may do everything.
    Owner,
    /// A capability token whose signature verified; the gate checks its claims per call.
    Token(Box<Claims>),
}

impl Caller {
    /// The `actor` a receipt names: `anonymous`, `owner` or `token:tok_…` (never the token).
    pub fn actor(&self) -> String {
        match self {
            Caller::Anonymous => "anonymous".into(),
            Caller::Owner => "owner".into(),
            // A share is receipted as the caller it was derived from.
            Caller::Token(c) => match c.parent.as_deref() {
                Some(crate::access::token::OWNER_PARENT) => "owner".into(),
                Some(parent) => format!("token:{parent}"),
                None => format!("token:{}", c.id),
            },
        }
    }

    /// The kind of credential, as contracts and errors name it.
    pub fn kind(&self) -> &'static str {
        match self {
            Caller::Anonymous => "anonymous",
            Caller::Owner => "owner_key",
            Caller::Token(_) => "capability_token",
        }
    }
}

/// The secrets a dispatcher checks credentials against. `Debug` shows neither.
#[derive(Clone, Default)]
pub struct Keys {
    /// `CAPDIR_OWNER_KEY`; without it nobody is the owner.
    pub owner: Option<String>,
    /// The key capability tokens are signed with; without it every token is refused.
    pub token: Option<TokenKey>,
}

impl std::fmt::Debug for Keys {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Keys")
            .field("owner", &self.owner.as_ref().map(|_| "…"))
            .field("token", &self.token)
            .finish()
    }
}

impl Keys {
    /// The secret values, to redact wherever a response or a receipt might echo them.
    pub fn secret_values(&self) -> Vec<String> {
        self.owner
            .iter()
            .cloned()
            .chain(self.token.as_ref().map(TokenKey::text))
            .collect()
    }
}

/// Compare two secrets in time that does not depend on where they differ.
pub fn same_secret(a: &str, b: &str) -> bool {
    let (x, y) = (Sha256::digest(a.as_bytes()), Sha256::digest(b.as_bytes()));
    x.iter()
        .zip(y.iter())
        .fold(0u8, |acc, (p, q)| acc | (p ^ q))
        == 0
}

/// Who sent the credential `sent`: none is `Anonymous`; a verified token is `Token`; a
/// credential that is neither the owner key nor a token of this dispatcher is `Forbidden`.
pub fn authenticate(keys: &Keys, sent: Option<&str>) -> Result<Caller, Denied> {
    let Some(sent) = sent else {
        return Ok(Caller::Anonymous);
    };
    if sent.starts_with(token::PREFIX) {
        return authenticate_share(keys, sent);
    }
    match &keys.owner {
        Some(owner) if same_secret(sent, owner) => Ok(Caller::Owner),
        _ => Err(Denied::forbidden(
            "the key sent is not the owner key",
            "send the dispatcher's CAPDIR_OWNER_KEY, or a capability token (cdt1.…)",
        )),
    }
}

/// The caller a capability token makes (a run-now URL's `share`, or a bearer token). Only
/// the signature is checked here; expiry, audience, scope and the rest are the gate's.
pub fn authenticate_share(keys: &Keys, sent: &str) -> Result<Caller, Denied> {
    let Some(key) = &keys.token else {
        return Err(Denied::forbidden(
            "this dispatcher accepts no capability tokens (it has no token key)",
            "use the owner key, or start the dispatcher with CAPDIR_TOKEN_KEY",
        ));
    };
    key.verify(sent.trim())
        .map(|claims| Caller::Token(Box::new(claims)))
        .map_err(|e| {
            Denied::forbidden(
                e.to_string(),
                "use the token exactly as `capdir token mint` printed it, on the dispatcher it was minted for",
            )
        })
}

/// Why a caller may not do what it asked, before anything ran.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Denied {
    /// Nothing was sent where a credential is needed (HTTP 401 `unauthorized`).
    NoCredential,
    /// Nothing was sent where the owner key is needed (HTTP 401 `unauthorized`).
    NoOwnerKey,
    /// A credential that does not count here: not the owner key, a token that does not verify,
    /// or a token where the owner key is needed (HTTP 403 `forbidden`).
    Forbidden {
        message: String,
        how_to_fix: &'static str,
    },
}

impl Denied {
    fn forbidden(message: impl Into<String>, how_to_fix: &'static str) -> Denied {
        Denied::Forbidden {
            message: message.into(),
            how_to_fix,
        }
    }

    /// The stable code.
    pub fn code(&self) -> &'static str {
        match self {
            Denied::NoCredential | Denied::NoOwnerKey => "unauthorized",
            Denied::Forbidden { .. } => "forbidden",
        }
    }

    pub fn message(&self) -> &str {
        match self {
            Denied::NoCredential => "this needs a credential: the owner key or a capability token",
            Denied::NoOwnerKey => "this needs the owner key",
            Denied::Forbidden { message, .. } => message,
        }
    }

    pub fn how_to_fix(&self) -> &str {
        match self {
            Denied::NoCredential | Denied::NoOwnerKey => {
                "send it as `x-owner-key: …` or `Authorization: Bearer …`"
            }
            Denied::Forbidden { how_to_fix, .. } => how_to_fix,
        }
    }
}

/// `NoCredential` for a caller that sent nothing where a credential is needed.
pub fn require_credential(caller: &Caller) -> Result<(), Denied> {
    match caller {
        Caller::Anonymous => Err(Denied::NoCredential),
        _ => Ok(()),
    }
}

/// `NoOwnerKey` for a caller that sent nothing where the owner key is needed; `Forbidden` for
/// a token.
pub fn require_owner(caller: &Caller) -> Result<(), Denied> {
    match caller {
        Caller::Owner => Ok(()),
        Caller::Anonymous => Err(Denied::NoOwnerKey),
        Caller::Token(_) => Err(Denied::forbidden(
            "a capability token may not do this; it needs the owner key",
            "send the dispatcher's CAPDIR_OWNER_KEY",
        )),
    }
}

/// Why an anonymous caller may not run `row` under `--open`, if it may not. `--open` is for
/// what costs the operator nothing: a row that would spend a credential never runs for an
/// anonymous caller, be it the row's own (`auth`) or the model provider's key an agent row
/// sends implicitly.
pub fn open_refusal(row: &crate::row::Row) -> Option<&'static str> {
    if row.sensitive {
        Some("the row is sensitive")
    } else if !row.auth.trim().is_empty() {
        Some("the row uses a credential")
    } else if row.kind == crate::row::RowType::Agent {
        Some("the row calls a model with the operator's provider key")
    } else {
        None
    }
}

/// Whether `caller`, allowed to make a call, may run `step` inside it (a flow's step). The
/// scope of a call covers the rows it composes: a token that may run a flow may run the steps
/// that flow names (and a pinned token pinned their fingerprints with the flow's). Nothing
/// lifts the risk ceiling or the `--open` rules: a sensitive step needs a high-risk token, and
/// an anonymous caller may run only steps that are not sensitive and use no credential.
/// `Some((reason, message))` refuses the step with the gate's literal reason.
pub fn step_refusal(caller: &Caller, step: &crate::row::Row) -> Option<(String, String)> {
    match caller {
        Caller::Owner => None,
        Caller::Anonymous => open_refusal(step).map(|why| {
            (
                "anonymous".to_string(),
                format!(
                    "{why}: without a credential, --open allows only steps that are not sensitive and use no credential"
                ),
            )
        }),
        Caller::Token(claims) => (step.sensitive && claims.risk != crate::access::token::Risk::High)
            .then(|| {
                (
                    crate::access::token::Reason::RiskCeiling.as_str().to_string(),
                    format!(
                        "step {} is sensitive; token {} has risk ceiling low",
                        step.key, claims.id
                    ),
                )
            }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::access::token::{Claims, Risk};

    fn row(text: &str) -> crate::row::Row {
        crate::row::parse_row(std::path::Path::new("STEP.yaml"), text.as_bytes())
            .row
            .expect("a row")
    }

    fn token(risk: Risk) -> Caller {
        Caller::Token(Box::new(Claims {
            id: "tok_t".into(),
            iat: 0,
            exp: 1,
            aud: "a".into(),
            keys: vec!["FLOW".into()],
            categories: vec![],
            write: vec![],
            risk,
            pin: None,
            body: None,
            max_payload: None,
            credentials: vec![],
            watch: Default::default(),
            parent: None,
        }))
    }

    #[test]
    fn steps_keep_the_risk_ceiling_and_the_open_rules() {
        let plain = row("key: STEP\ntype: fn\ntarget: echo\ncontent: |\n  # WHAT: x\n  [\"$1\"]\n");
        let sensitive = row(
            "key: STEP\ntype: http\ntarget: GET https://x.example/$1\nauth: bearer:X_TOKEN\nsensitive: true\ncontent: |\n  # WHAT: x\n",
        );
        let credentialed = row(
            "key: STEP\ntype: http\ntarget: GET https://x.example/$1\nauth: bearer:X_TOKEN\ncontent: |\n  # WHAT: x\n",
        );
        // A token scoped to the flow alone still runs a plain step: the scope covers it.
        assert_eq!(step_refusal(&token(Risk::Low), &plain), None);
        assert_eq!(step_refusal(&token(Risk::Low), &credentialed), None);
        let refused = step_refusal(&token(Risk::Low), &sensitive).expect("refused");
        assert_eq!(refused.0, "risk_ceiling:low");
        assert_eq!(step_refusal(&token(Risk::High), &sensitive), None);
        assert_eq!(step_refusal(&Caller::Owner, &sensitive), None);
        assert_eq!(step_refusal(&Caller::Anonymous, &plain), None);
        assert_eq!(
            step_refusal(&Caller::Anonymous, &credentialed).map(|r| r.0),
            Some("anonymous".into())
        );
        assert_eq!(
            step_refusal(&Caller::Anonymous, &sensitive).map(|r| r.0),
            Some("anonymous".into())
        );
        // An agent row spends the provider's key though it names no `auth`.
        let agent = row(
            "key: STEP\ntype: agent\ntarget: gw:openai/gpt-4o-mini\ncontent: |\n  # WHAT: x\n  Answer.\n",
        );
        assert!(open_refusal(&agent).is_some_and(|why| why.contains("provider key")));
        assert_eq!(
            step_refusal(&Caller::Anonymous, &agent).map(|r| r.0),
            Some("anonymous".into())
        );
        assert_eq!(step_refusal(&token(Risk::Low), &agent), None);
    }
}
