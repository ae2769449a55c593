//! Who is calling (DESIGN.md §8). A request carries no credential, the owner key, a capability
//! token, or something that is neither; `authenticate` says which. It is the one place that
//! reads credentials from a request, so the HTTP API and MCP tell callers apart alike. What
//! each caller may then do is decided by the gate in `dispatch`.
//!
//! A credential goes in `x-owner-key: …` or `Authorization: Bearer …`; one that starts with
//! `cdt1.` is a capability token, anything else is compared with the owner key. A run-now URL
//! carries a token in its `share` parameter instead (`authenticate_share`).

use crate::server::ApiError;
use crate::token::{self, Claims, TokenKey};
use axum::http::{HeaderMap, StatusCode, header};
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
            Caller::Token(c) => format!("token:{}", c.id),
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

/// The credential a request sends, if any.
pub fn sent_credential(headers: &HeaderMap) -> Option<&str> {
    headers
        .get("x-owner-key")
        .and_then(|v| v.to_str().ok())
        .or_else(|| {
            headers
                .get(header::AUTHORIZATION)
                .and_then(|v| v.to_str().ok())
                .and_then(|v| v.strip_prefix("Bearer "))
        })
        .map(str::trim)
        .filter(|v| !v.is_empty())
}

fn forbidden(message: impl Into<String>, fix: &str) -> ApiError {
    ApiError::new(StatusCode::FORBIDDEN, "forbidden", message, fix)
}

/// Who sent `headers`: no credential is `Anonymous`; a verified token is `Token`; a credential
/// that is neither the owner key nor a token of this dispatcher is refused with 403.
pub fn authenticate(keys: &Keys, headers: &HeaderMap) -> Result<Caller, ApiError> {
    let Some(sent) = sent_credential(headers) else {
        return Ok(Caller::Anonymous);
    };
    if sent.starts_with(token::PREFIX) {
        return authenticate_share(keys, sent);
    }
    match &keys.owner {
        Some(owner) if same_secret(sent, owner) => Ok(Caller::Owner),
        _ => Err(forbidden(
            "the key sent is not the owner key",
            "send the dispatcher's CAPDIR_OWNER_KEY, or a capability token (cdt1.…)",
        )),
    }
}

/// The caller a capability token makes (a run-now URL's `share`, or a bearer token). Only
/// the signature is checked here; expiry, audience, scope and the rest are the gate's.
pub fn authenticate_share(keys: &Keys, sent: &str) -> Result<Caller, ApiError> {
    let Some(key) = &keys.token else {
        return Err(forbidden(
            "this dispatcher accepts no capability tokens (it has no token key)",
            "use the owner key, or start the dispatcher with CAPDIR_TOKEN_KEY",
        ));
    };
    key.verify(sent.trim())
        .map(|claims| Caller::Token(Box::new(claims)))
        .map_err(|e| {
            forbidden(
                e.to_string(),
                "use the token exactly as `capdir token mint` printed it, on the dispatcher it was minted for",
            )
        })
}

/// 401 for a caller that sent nothing where a credential is needed.
pub fn require_credential(caller: &Caller) -> Result<(), ApiError> {
    match caller {
        Caller::Anonymous => Err(ApiError::new(
            StatusCode::UNAUTHORIZED,
            "unauthorized",
            "this needs a credential: the owner key or a capability token",
            "send it as `x-owner-key: …` or `Authorization: Bearer …`",
        )),
        _ => Ok(()),
    }
}

/// 401 for a caller that sent nothing where the owner key is needed; 403 for a token.
pub fn require_owner(caller: &Caller) -> Result<(), ApiError> {
    match caller {
        Caller::Owner => Ok(()),
        Caller::Anonymous => Err(ApiError::new(
            StatusCode::UNAUTHORIZED,
            "unauthorized",
            "this needs the owner key",
            "send it as `x-owner-key: …` or `Authorization: Bearer …`",
        )),
        Caller::Token(_) => Err(forbidden(
            "a capability token may not do this; it needs the owner key",
            "send the dispatcher's CAPDIR_OWNER_KEY",
        )),
    }
}
