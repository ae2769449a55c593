//! Capability tokens (DESIGN.md §8): a signed, scoped permission to invoke some rows of one
//! dispatcher, handed to an agent instead of the owner key.
//!
//! A token is `cdt1.<claims>.<mac>`: the claims as JSON in URL-safe base64, then an
//! HMAC-SHA256 over `cdt1.<claims>` with the dispatcher's token key. HMAC rather than a
//! signature pair because the minter and the verifier are the same party (the operator's
//! `capdir token mint` and their own `capdir serve`), and several dispatchers share one key
//! through `CAPDIR_TOKEN_KEY` as they share the ledger. The token is a bearer secret: it is
//! never stored (the ledger keeps its claims, under its id), and `secrets::scan` knows its
//! shape so it is redacted wherever it turns up.
//!
//! The gate is pure and ordered: `check_holder` (expired, audience — revocation is asked of
//! the ledger first) and `check_call` (scope, contract_changed, risk ceiling, fixed body,
//! payload ceiling). The dispatcher runs both before any runner and writes a `REFUSED`
//! receipt naming the literal reason; contracts use the same checks to tell a caller what
//! its credential may do.

use anyhow::{Context as _, Result, bail};
use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use hmac::{Hmac, KeyInit, Mac};
use serde::{Deserialize, Serialize};
use sha2::Sha256;
use std::path::{Path, PathBuf};

use crate::access::watch::{Needs, Watch};

/// What every token starts with; also how `authenticate` tells a token from the owner key.
pub const PREFIX: &str = "cdt1.";

/// The environment variable that holds the token key.
pub const KEY_ENV: &str = "CAPDIR_TOKEN_KEY";

/// A token key shorter than this is refused: HMAC-SHA256 wants at least 256 bits.
pub const MIN_KEY_LEN: usize = 32;

type HmacSha256 = Hmac<Sha256>;

/// The highest risk a token may take on. A `sensitive` row needs `High`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, PartialOrd, Ord)]
#[serde(rename_all = "lowercase")]
pub enum Risk {
    Low,
    High,
}

impl Risk {
    pub fn as_str(self) -> &'static str {
        match self {
            Risk::Low => "low",
            Risk::High => "high",
        }
    }

    pub fn parse(s: &str) -> Option<Risk> {
        match s {
            "low" => Some(Risk::Low),
            "high" => Some(Risk::High),
            _ => None,
        }
    }
}

/// What a token allows; signed as a whole, so no field can be changed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Claims {
    /// `tok_` and 32 hex digits; what `revoke` and receipts name.
    pub id: String,
    /// Minted at, Unix seconds.
    pub iat: i64,
    /// Expires at, Unix seconds.
    pub exp: i64,
    /// The dispatcher's base URL; another dispatcher refuses the token.
    pub aud: String,
    /// Keys the token may invoke.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub keys: Vec<String>,
    /// Categories whose rows the token may invoke.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub categories: Vec<String>,
    /// Keys and categories whose rows the token may write through the write API (create,
    /// change, remove); a key and a category are told apart by their form (`SHA256`, `text`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub write: Vec<String>,
    pub risk: Risk,
    /// The contract fingerprint the token was minted against (one key only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pin: Option<String>,
    /// The only body the token may send.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub body: Option<String>,
    /// The largest input the token may send, in bytes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_payload: Option<u64>,
    /// Credentials (environment-variable names) the token's writes may bring into a row,
    /// change a row to, or keep while changing where the row sends them. Without one named
    /// here, a write scope never decides where a secret goes.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub credentials: Vec<String>,
    /// Whether a person approves its calls, whether it may approve others', and its limits.
    #[serde(default, skip_serializing_if = "Watch::is_empty")]
    pub watch: Watch,
    /// A share token's caller: the token it was derived from (`tok_…`), or `owner`. A share
    /// is revoked with that token, counts against its limits and is receipted as it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parent: Option<String>,
}

/// The `parent` of a share derived from the owner key.
pub const OWNER_PARENT: &str = "owner";

/// How long a share token derived for a link lives, at most.
pub const SHARE_TTL_SECS: i64 = 600;

impl Claims {
    /// The token whose limits and revocation this one answers to: its parent's, for a share
    /// of a token; its own otherwise (a share of the owner key has no such token).
    pub fn accountable_id(&self) -> &str {
        match self.parent.as_deref() {
            Some(p) if p != OWNER_PARENT => p,
            _ => &self.id,
        }
    }

    /// Whether the token covers the row `key` of `category` (its keys or categories).
    pub fn covers(&self, key: &str, category: &str) -> bool {
        self.keys.iter().any(|k| k == key)
            || (!category.is_empty() && self.categories.iter().any(|c| c == category))
    }

    /// A share of this token for one row: at most ten minutes (never past this token), risk
    /// low (a sensitive call through a link waits for a person), the row alone, `body` as its
    /// only body when given, this token's pin, payload ceiling and limits, and none of its
    /// writes or approvals. None when this token may send one body only and `body` is another.
    pub fn share(&self, key: &str, body: Option<&str>, now: i64) -> Option<Claims> {
        if let (Some(fixed), Some(b)) = (&self.body, body)
            && fixed != b
        {
            return None;
        }
        Some(Claims {
            id: new_id(),
            iat: now,
            exp: self.exp.min(now + SHARE_TTL_SECS),
            aud: self.aud.clone(),
            keys: vec![key.to_string()],
            categories: Vec::new(),
            write: Vec::new(),
            risk: Risk::Low,
            pin: self.pin.clone(),
            body: body.map(str::to_string).or_else(|| self.body.clone()),
            max_payload: self.max_payload,
            credentials: Vec::new(),
            watch: Watch {
                approver: false,
                ..self.watch.clone()
            },
            parent: Some(self.parent.clone().unwrap_or_else(|| self.id.clone())),
        })
    }

    /// A share of the owner key for one row (see `share`).
    pub fn owner_share(aud: &str, key: &str, body: Option<&str>, now: i64) -> Claims {
        Claims {
            id: new_id(),
            iat: now,
            exp: now + SHARE_TTL_SECS,
            aud: aud.to_string(),
            keys: vec![key.to_string()],
            categories: Vec::new(),
            write: Vec::new(),
            risk: Risk::Low,
            pin: None,
            body: body.map(str::to_string),
            max_payload: None,
            credentials: Vec::new(),
            watch: Watch::default(),
            parent: Some(OWNER_PARENT.to_string()),
        }
    }

    /// The scope as one line: `KEY_A, KEY_B, category:x, write:KEY_C, write:category:y`.
    pub fn scope_text(&self) -> String {
        self.keys
            .iter()
            .cloned()
            .chain(self.categories.iter().map(|c| format!("category:{c}")))
            .chain(self.write.iter().map(|w| {
                if crate::row::is_valid_key(w) {
                    format!("write:{w}")
                } else {
                    format!("write:category:{w}")
                }
            }))
            .collect::<Vec<_>>()
            .join(", ")
    }

    /// Expiry as RFC 3339.
    pub fn expires_at(&self) -> String {
        rfc3339(self.exp)
    }
}

/// Unix seconds as RFC 3339 (UTC).
pub fn rfc3339(secs: i64) -> String {
    chrono::DateTime::from_timestamp(secs, 0)
        .map(|t| t.to_rfc3339_opts(chrono::SecondsFormat::Secs, true))
        .unwrap_or_else(|| secs.to_string())
}

/// A new token id.
pub fn new_id() -> String {
    format!("tok_{}", uuid::Uuid::new_v4().simple())
}

/// Why a presented token is not a token of this dispatcher. Never quotes the token.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TokenError {
    #[error("the token is not of the form cdt1.<claims>.<mac>")]
    Malformed,
    #[error("the token's signature does not verify: it was changed, or signed with another key")]
    BadSignature,
    #[error("the token's claims cannot be read")]
    BadClaims,
}

/// The key tokens are signed with. Its `Debug` never shows the key.
#[derive(Clone)]
pub struct TokenKey {
    bytes: Vec<u8>,
}

impl std::fmt::Debug for TokenKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("TokenKey(…)")
    }
}

impl TokenKey {
    /// A key from its text (`CAPDIR_TOKEN_KEY`, or the key file): at least 32 bytes.
    pub fn from_text(text: &str) -> Result<TokenKey> {
        let text = text.trim();
        if text.len() < MIN_KEY_LEN {
            bail!(
                "the token key is {} bytes; it needs at least {MIN_KEY_LEN} (e.g. `openssl rand -hex 32`)",
                text.len()
            );
        }
        Ok(TokenKey {
            bytes: text.as_bytes().to_vec(),
        })
    }

    /// The key text, for redacting it wherever it might be echoed.
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.bytes).into_owned()
    }

    /// Where a dispatcher's key comes from: `CAPDIR_TOKEN_KEY` when set, else
    /// `<data>/token.key`, created with 32 random bytes (hex, mode 0600) at first use.
    pub fn load(data_dir: &Path) -> Result<(TokenKey, KeySource)> {
        if let Ok(text) = std::env::var(KEY_ENV)
            && !text.is_empty()
        {
            return Ok((
                TokenKey::from_text(&text).with_context(|| format!("{KEY_ENV} is too short"))?,
                KeySource::Env,
            ));
        }
        let path = data_dir.join("token.key");
        if !path.exists() {
            create_key_file(&path)?;
        }
        let text = std::fs::read_to_string(&path)
            .with_context(|| format!("reading the token key {}", path.display()))?;
        let key = TokenKey::from_text(&text)
            .with_context(|| format!("the token key in {}", path.display()))?;
        Ok((key, KeySource::File(path)))
    }

    fn mac(&self, message: &str) -> HmacSha256 {
        let mut mac =
            HmacSha256::new_from_slice(&self.bytes).expect("HMAC takes a key of any length");
        mac.update(message.as_bytes());
        mac
    }

    /// The token for `claims`.
    pub fn sign(&self, claims: &Claims) -> String {
        let json = serde_json::to_vec(claims).expect("claims serialise");
        let signed = format!("{PREFIX}{}", URL_SAFE_NO_PAD.encode(json));
        let tag = self.mac(&signed).finalize().into_bytes();
        format!("{signed}.{}", URL_SAFE_NO_PAD.encode(tag))
    }

    /// The claims of a token signed with this key. The MAC is checked (in constant time)
    /// before the claims are read.
    pub fn verify(&self, token: &str) -> Result<Claims, TokenError> {
        let rest = token.strip_prefix(PREFIX).ok_or(TokenError::Malformed)?;
        let (claims_b64, tag_b64) = rest.split_once('.').ok_or(TokenError::Malformed)?;
        let tag = URL_SAFE_NO_PAD
            .decode(tag_b64)
            .map_err(|_| TokenError::Malformed)?;
        let signed = &token[..PREFIX.len() + claims_b64.len()];
        self.mac(signed)
            .verify_slice(&tag)
            .map_err(|_| TokenError::BadSignature)?;
        let json = URL_SAFE_NO_PAD
            .decode(claims_b64)
            .map_err(|_| TokenError::BadClaims)?;
        serde_json::from_slice(&json).map_err(|_| TokenError::BadClaims)
    }
}

/// Where the token key was found, for the log line at start (never the key itself).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KeySource {
    Env,
    File(PathBuf),
}

impl std::fmt::Display for KeySource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            KeySource::Env => write!(f, "${KEY_ENV}"),
            KeySource::File(p) => write!(f, "{}", p.display()),
        }
    }
}

fn create_key_file(path: &Path) -> Result<()> {
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir)
            .with_context(|| format!("creating the data directory {}", dir.display()))?;
    }
    let mut raw = [0u8; 32];
    getrandom::fill(&mut raw).map_err(|e| anyhow::anyhow!("no randomness for a key: {e}"))?;
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create_new(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
    match options.open(path) {
        Ok(mut file) => {
            use std::io::Write as _;
            file.write_all(format!("{}\n", hex::encode(raw)).as_bytes())
                .with_context(|| format!("writing the token key {}", path.display()))
        }
        // Another process created it meanwhile: use theirs.
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Ok(()),
        Err(e) => Err(e).with_context(|| format!("creating the token key {}", path.display())),
    }
}

/// Whether a token's call of a row (sensitive or not) waits for a person.
pub fn needs_approval(claims: &Claims, sensitive: bool) -> Option<Needs> {
    if claims.watch.approval {
        Some(Needs::Token)
    } else if sensitive && claims.risk < Risk::High {
        Some(Needs::Sensitive)
    } else {
        None
    }
}

/// The gate's literal reasons, in the order the gate checks them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reason {
    Revoked,
    Expired,
    Audience,
    Scope,
    ContractChanged,
    RiskCeiling,
    FixedBody,
    PayloadCeiling,
}

impl Reason {
    /// The literal reason: the error code of the answer and of the receipt.
    pub fn as_str(self) -> &'static str {
        match self {
            Reason::Revoked => "revoked",
            Reason::Expired => "expired",
            Reason::Audience => "audience",
            Reason::Scope => "scope",
            Reason::ContractChanged => "contract_changed",
            Reason::RiskCeiling => "risk_ceiling:low",
            Reason::FixedBody => "fixed_body",
            Reason::PayloadCeiling => "payload_ceiling",
        }
    }

    pub fn how_to_fix(self) -> &'static str {
        match self {
            Reason::Revoked => {
                "this token was revoked; ask the dispatcher's operator for a new one"
            }
            Reason::Expired => "this token has expired; ask for a new one (capdir token mint)",
            Reason::Audience => {
                "this token was minted for another dispatcher; use it there, or mint one with --audience set to this dispatcher's URL"
            }
            Reason::Scope => {
                "the token does not cover this row; mint one whose --keys or --categories include it"
            }
            Reason::ContractChanged => {
                "the row changed since the token was pinned to it; read the new contract, then mint a new pinned token"
            }
            Reason::RiskCeiling => "the row is sensitive; it needs a token minted with --risk high",
            Reason::FixedBody => {
                "this token may send only its fixed body; send exactly that, or no body"
            }
            Reason::PayloadCeiling => "send less input; the token's --max-payload caps it",
        }
    }
}

/// One refusal by the gate.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TokenRefusal {
    pub reason: Reason,
    pub message: String,
}

fn refuse(reason: Reason, message: impl Into<String>) -> Result<(), TokenRefusal> {
    Err(TokenRefusal {
        reason,
        message: message.into(),
    })
}

/// The row a token wants to invoke, as far as the gate needs it.
#[derive(Debug, Clone, Copy)]
pub struct Target<'a> {
    pub key: &'a str,
    pub category: &'a str,
    pub sensitive: bool,
    /// The row's contract fingerprint now.
    pub fingerprint: &'a str,
}

/// The checks about the token alone, after revocation: expired, then audience.
pub fn check_holder(claims: &Claims, now: i64, audience: &str) -> Result<(), TokenRefusal> {
    if now >= claims.exp {
        return refuse(
            Reason::Expired,
            format!("token {} expired at {}", claims.id, claims.expires_at()),
        );
    }
    if claims.aud.trim_end_matches('/') != audience.trim_end_matches('/') {
        return refuse(
            Reason::Audience,
            format!(
                "token {} is for {}, not this dispatcher ({audience})",
                claims.id, claims.aud
            ),
        );
    }
    Ok(())
}

/// The checks about this call: scope, contract_changed, risk ceiling, then the input
/// (`None` when the caller sent no body and no args).
pub fn check_call(
    claims: &Claims,
    target: Target<'_>,
    input: Option<&str>,
) -> Result<(), TokenRefusal> {
    check_call_approved(claims, target, input, false)
}

/// `check_call`, where `approved` says a person approved the call (or is about to be asked):
/// the person stands in for the risk ceiling, nothing else.
pub fn check_call_approved(
    claims: &Claims,
    target: Target<'_>,
    input: Option<&str>,
    approved: bool,
) -> Result<(), TokenRefusal> {
    let in_scope = claims.covers(target.key, target.category);
    if !in_scope {
        return refuse(
            Reason::Scope,
            format!(
                "token {} covers {}, not {}{}",
                claims.id,
                claims.scope_text(),
                target.key,
                if target.category.is_empty() {
                    String::new()
                } else {
                    format!(" (category {})", target.category)
                }
            ),
        );
    }
    if let Some(pin) = &claims.pin
        && pin != target.fingerprint
    {
        return refuse(
            Reason::ContractChanged,
            format!(
                "{} changed since token {} was pinned to it (fingerprint {} → {})",
                target.key,
                claims.id,
                short(pin),
                short(target.fingerprint)
            ),
        );
    }
    if target.sensitive && claims.risk < Risk::High && !approved {
        return refuse(
            Reason::RiskCeiling,
            format!(
                "{} is sensitive and token {} has risk ceiling low",
                target.key, claims.id
            ),
        );
    }
    if let (Some(fixed), Some(sent)) = (&claims.body, input)
        && fixed != sent
    {
        return refuse(
            Reason::FixedBody,
            format!(
                "token {} may send only its fixed body ({} bytes); this input differs",
                claims.id,
                fixed.len()
            ),
        );
    }
    let size = input.or(claims.body.as_deref()).map_or(0, str::len) as u64;
    if let Some(max) = claims.max_payload
        && size > max
    {
        return refuse(
            Reason::PayloadCeiling,
            format!(
                "the input is {size} bytes; token {} allows {max}",
                claims.id
            ),
        );
    }
    Ok(())
}

/// A row a token wants to write, as far as the gate needs it.
#[derive(Debug, Clone)]
pub struct WriteTarget<'a> {
    pub key: &'a str,
    /// The row's category before the write (none for a new row) and after it (none for a
    /// removal).
    pub categories: [Option<&'a str>; 2],
    /// Whether the row is sensitive before or after the write.
    pub sensitive: bool,
    /// Whether the row after the write starts a command on the dispatcher's machine (an MCP
    /// server over stdio): only the owner may write such a row.
    pub runs_command: bool,
    /// The credential the row sends, and where, before the write and after it.
    pub sends: [Option<Sends>; 2],
}

/// A row's credential as far as a write may change it: the variables it names and where it
/// sends them (an origin, `stdio:COMMAND`, or `model:TARGET`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Sends {
    pub envs: Vec<String>,
    pub to: String,
}

/// Whether `claims` allow writing a row: its key is in the token's write scope, or its
/// category is, before and after the write (a token scoped to a category can neither bring
/// a row in from another category nor send one out, and a row without a category needs its
/// key named). A row sensitive before or after needs a token with risk ceiling high: writing
/// it decides what a sensitive call does, or whether the call is sensitive at all.
pub fn check_write(claims: &Claims, target: &WriteTarget) -> Result<(), TokenRefusal> {
    let by_key = claims.write.iter().any(|w| w == target.key);
    let categories: Vec<&str> = target.categories.iter().flatten().copied().collect();
    let by_category = !categories.is_empty()
        && categories
            .iter()
            .all(|c| !c.is_empty() && claims.write.iter().any(|w| w == c));
    if !by_key && !by_category {
        let held = if claims.write.is_empty() {
            "no writes".to_string()
        } else {
            claims.write.join(", ")
        };
        let cats = categories
            .iter()
            .filter(|c| !c.is_empty())
            .map(|c| format!("category {c}"))
            .collect::<Vec<_>>();
        return refuse(
            Reason::Scope,
            format!(
                "token {} may write {held}, not {}{}",
                claims.id,
                target.key,
                if cats.is_empty() {
                    String::new()
                } else {
                    format!(" ({})", cats.join(" → "))
                }
            ),
        );
    }
    if target.runs_command {
        return refuse(
            Reason::Scope,
            format!(
                "{} starts a command on the dispatcher's machine (mcp+stdio:); only the owner key may write it",
                target.key
            ),
        );
    }
    if target.sensitive && claims.risk < Risk::High {
        return refuse(
            Reason::RiskCeiling,
            format!(
                "{} is sensitive and token {} has risk ceiling low",
                target.key, claims.id
            ),
        );
    }
    // Where a secret goes is the owner's to decide: a write that brings a credential in,
    // swaps it, or moves where it goes needs the credential named in the token.
    if let [before, Some(after)] = &target.sends
        && before.as_ref() != Some(after)
    {
        let missing: Vec<&str> = after
            .envs
            .iter()
            .filter(|e| !claims.credentials.contains(e))
            .map(String::as_str)
            .collect();
        if !missing.is_empty() {
            return refuse(
                Reason::Scope,
                format!(
                    "token {} may not decide where {} goes ({} → {}): a write that brings in a credential, changes it or changes where it is sent needs a token minted with --credentials {}",
                    claims.id,
                    missing.join(", "),
                    before.as_ref().map_or("none", |b| b.to.as_str()),
                    after.to,
                    missing.join(",")
                ),
            );
        }
    }
    Ok(())
}

fn short(fingerprint: &str) -> &str {
    fingerprint.get(..12).unwrap_or(fingerprint)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key() -> TokenKey {
        TokenKey::from_text("k".repeat(40).as_str()).expect("key")
    }

    fn claims() -> Claims {
        Claims {
            id: new_id(),
            iat: 100,
            exp: 200,
            aud: "http://d.example".into(),
            keys: vec!["A".into()],
            categories: vec!["text".into()],
            write: vec![],
            risk: Risk::Low,
            pin: None,
            body: None,
            max_payload: None,
            credentials: vec![],
            watch: Watch::default(),
            parent: None,
        }
    }

    #[test]
    fn round_trips_and_refuses_changes() {
        let c = claims();
        let t = key().sign(&c);
        assert!(t.starts_with(PREFIX));
        assert_eq!(key().verify(&t), Ok(c));
        let other = TokenKey::from_text(&"j".repeat(40)).expect("key");
        assert_eq!(other.verify(&t), Err(TokenError::BadSignature));
        assert_eq!(key().verify("cdt1.abc"), Err(TokenError::Malformed));
        assert_eq!(key().verify("nope"), Err(TokenError::Malformed));
    }

    #[test]
    fn short_keys_are_refused() {
        assert!(TokenKey::from_text("short").is_err());
        assert!(!format!("{:?}", key()).contains("kkkk"));
    }

    #[test]
    fn write_scope_by_key_or_by_every_category_involved() {
        let c = Claims {
            write: vec!["KEEP".into(), "text".into()],
            ..claims()
        };
        let target = |key, before, after, sensitive| WriteTarget {
            sends: [None, None],
            runs_command: false,
            key,
            categories: [before, after],
            sensitive,
        };
        assert!(check_write(&c, &target("KEEP", None, Some("other"), false)).is_ok());
        // A row that starts a command on the dispatcher's machine: the owner's alone.
        let stdio = WriteTarget {
            sends: [None, None],
            runs_command: true,
            ..target("KEEP", None, Some("text"), false)
        };
        assert!(check_write(&c, &stdio).is_err());
        assert!(check_write(&c, &target("NEW_ONE", None, Some("text"), false)).is_ok());
        assert!(check_write(&c, &target("X", Some("text"), Some("text"), false)).is_ok());
        for (t, why) in [
            (
                target("X", Some("other"), Some("text"), false),
                "brought in",
            ),
            (target("X", Some("text"), Some("other"), false), "sent out"),
            (target("X", None, Some(""), false), "no category"),
            (target("X", Some("text"), None, true), "sensitive"),
        ] {
            let r = check_write(&c, &t).expect_err(why);
            let want = if why == "sensitive" {
                Reason::RiskCeiling
            } else {
                Reason::Scope
            };
            assert_eq!(r.reason, want, "{why}");
        }
        let invoke_only = claims();
        let r = check_write(
            &invoke_only,
            &target("A", Some("text"), Some("text"), false),
        )
        .expect_err("an invoke scope writes nothing");
        assert!(r.message.contains("no writes"), "{}", r.message);
    }

    #[test]
    fn a_share_never_sends_another_body_than_its_parent_may() {
        let fixed = Claims {
            body: Some("only this".into()),
            ..claims()
        };
        assert!(fixed.share("A", Some("other"), 150).is_none());
        let same = fixed
            .share("A", Some("only this"), 150)
            .expect("the same body");
        assert_eq!(same.body.as_deref(), Some("only this"));
        let none = fixed.share("A", None, 150).expect("no body named");
        assert_eq!(none.body.as_deref(), Some("only this"));
        assert_eq!(
            (none.exp, none.risk, none.keys.as_slice()),
            (200, Risk::Low, &["A".to_string()][..])
        );
        assert_eq!(none.accountable_id(), fixed.id);
    }

    #[test]
    fn fixed_body_fills_in_for_a_missing_one_and_counts_against_the_ceiling() {
        let c = Claims {
            body: Some("abcdef".into()),
            max_payload: Some(4),
            ..claims()
        };
        let t = Target {
            key: "A",
            category: "",
            sensitive: false,
            fingerprint: "f",
        };
        let r = check_call(&c, t, None).expect_err("over the ceiling");
        assert_eq!(r.reason, Reason::PayloadCeiling);
        let r = check_call(&c, t, Some("x")).expect_err("not the fixed body");
        assert_eq!(r.reason, Reason::FixedBody);
    }
}
