//! Who is calling (DESIGN.md §8). A request carries no credential, the owner key
//! (`x-owner-key: …` or `Authorization: Bearer …`), or a wrong one; `authenticate` says which.
//! What each caller may then do is decided by the gate in `dispatch`.

use crate::server::ApiError;
use axum::http::{HeaderMap, StatusCode, header};
use sha2::{Digest, Sha256};

/// The caller of one request, as far as its credential shows.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Caller {
    /// No credential: may ask, read contracts and the site, and confirm receipts.
    Anonymous,
    /// The dispatcher's owner key: may do everything.
    Owner,
}

impl Caller {
    /// The `actor` a receipt names.
    pub fn actor(&self) -> String {
        match self {
            Caller::Anonymous => "anonymous".into(),
            Caller::Owner => "owner".into(),
        }
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
}

/// Who sent `headers`: no credential is `Anonymous`; a credential that is not the owner key
/// is refused with 403.
pub fn authenticate(owner_key: Option<&str>, headers: &HeaderMap) -> Result<Caller, ApiError> {
    let Some(sent) = sent_credential(headers) else {
        return Ok(Caller::Anonymous);
    };
    match owner_key {
        Some(owner) if same_secret(sent, owner) => Ok(Caller::Owner),
        _ => Err(ApiError::new(
            StatusCode::FORBIDDEN,
            "forbidden",
            "the key sent is not the owner key",
            "send the dispatcher's CAPDIR_OWNER_KEY",
        )),
    }
}

/// 401 for a caller that sent nothing where a credential is needed.
pub fn require_owner(caller: &Caller) -> Result<(), ApiError> {
    match caller {
        Caller::Owner => Ok(()),
        Caller::Anonymous => Err(ApiError::new(
            StatusCode::UNAUTHORIZED,
            "unauthorized",
            "this needs the owner key",
            "send it as `x-owner-key: …` or `Authorization: Bearer …`",
        )),
    }
}
