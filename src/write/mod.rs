//! The write API's core (`capdir serve --catalogue DIR --write direct|propose`): a row
//! created, changed or removed by one authenticated request becomes one Git commit, so
//! history, review and tombstones keep working as they do for a pull request.
//!
//! One write at a time, in this order; the first step that says no answers, and nothing has
//! changed on disk, in the index or in Git until the commit lands:
//!
//! 1. the body makes the new file (`body`: a `PUT` as sent, a `PATCH` merged into the file at
//!    `HEAD`);
//! 2. who may: the owner key, or a token whose write scope covers the key or the row's
//!    category before and after (`access::token::check_write`);
//! 3. the row's file must have no uncommitted changes (`direct`), and the new file must differ
//!    from the one at `HEAD` (else nothing is committed, and the answer says `unchanged`); the
//!    gate judges it as `capdir check --base HEAD` would (`check::check_change`, the new row's
//!    asks searched in the index as it would be);
//! 4. the commit: on the current branch with the work tree and the index following
//!    (`direct`), or on a branch `capdir/KEY-…` pushed to `origin` (`propose`);
//! 5. `direct`: the site changed in place (`build::incremental`) and put live by the
//!    dispatcher before the answer, so the next request sees the row; the pages that list
//!    every row follow on a thread of their own, once for however many writes came.
//!
//! Every write that reaches the gate is receipted in the ledger like an invocation (runner
//! `write`): the commit and what it did, or the refusal.

pub mod body;
pub mod git;

pub use body::{BodyError, Format};

use crate::access::auth::{self, Caller, Denied};
use crate::access::token::{self, Reason, WriteTarget};
use crate::build::history::{Change, ChangeKind};
use crate::build::incremental::{Built, Delta};
use crate::build::{self, BuildError};
use crate::check::secrets;
use crate::check::{FileChange, check_change, check_file};
use crate::dispatch::Dispatcher;
use crate::invoke::outcome::Status;
use crate::ledger::{self, Draft, Receipt};
use crate::row::Row;
use crate::row::catalogue::SourceFile;
use crate::row::diag::Diagnostic;
use crate::search::update::IndexState;
use git::Head;
use serde_json::json;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// The asks of other rows a token's write would take out of their place, each as an error on
/// the written file, when the token may not write the row that asks (`check::displaced_by`).
fn taken_asks(
    claims: &token::Claims,
    key: &str,
    base: &[&Row],
    searchers: &(crate::search::Searcher, crate::search::Searcher),
    file: &std::path::Path,
) -> Vec<Diagnostic> {
    let place =
        |rank: Option<usize>| rank.map_or("out of the top 12".to_string(), |r| format!("#{r}"));
    crate::check::displaced_by(key, base, &searchers.0, &searchers.1)
        .into_iter()
        .filter(|d| {
            let theirs = WriteTarget {
                key: &d.row.key,
                categories: [Some(d.row.category.as_str()), Some(d.row.category.as_str())],
                sensitive: d.row.sensitive,
                runs_command: false,
                sends: [None, None],
            };
            token::check_write(claims, &theirs).is_err()
        })
        .map(|d| {
            Diagnostic::error(
                file,
                (0, 0),
                "takes_asks",
                format!(
                    "`{key}` would rank above `{}` for its ask {:?} ({} → {}); token {} may not write `{}`",
                    d.row.key,
                    d.ask,
                    place(d.before),
                    place(d.after),
                    claims.id,
                    d.row.key
                ),
                "describe what this row does in words of its own, or have the owner (or a token that may write the other row) make the change",
            )
        })
        .collect()
}

/// What a row's credential is and where the row sends it, for the token gate of a write.
fn sends_of(row: &Row) -> Option<token::Sends> {
    use crate::row::binding::Destination;
    let credential = crate::row::credential::Credential::parse(&row.auth).ok()??;
    let to = match crate::row::binding::destination_of(row) {
        Some(Destination::Http { origin, method }) => {
            format!("{method} {}", origin.origin().ascii_serialization())
        }
        Some(Destination::Stdio) => format!("stdio:{}", row.target.trim()),
        Some(Destination::Model) | None => format!("model:{}", row.target.trim()),
    };
    // An `oauth:` credential's variables go to its token endpoint too, for its scope.
    let to = match &credential {
        crate::row::credential::Credential::OAuth(o) => format!(
            "{to} + POST {} scope {}",
            o.token_url,
            o.scope.as_deref().unwrap_or("-")
        ),
        _ => to,
    };
    Some(token::Sends {
        envs: credential.envs(),
        to,
    })
}

/// The bindings in the catalogue's working tree (`bindings.yaml`), read at each write: the
/// file may change between writes, by a pull request merged meanwhile. Unreadable bindings
/// bind nothing.
fn catalogue_bindings(catalogue: &std::path::Path) -> crate::row::binding::Bindings {
    std::fs::read(catalogue.join(crate::row::binding::FILE))
        .ok()
        .and_then(|b| crate::row::binding::Bindings::parse(&b).ok())
        .unwrap_or_default()
}

/// The longest commit message a request may give.
pub const MAX_MESSAGE_BYTES: usize = 4096;

/// Where a write goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// A commit on the current branch, live on the next request.
    Direct,
    /// A commit on a branch of its own, pushed to `origin` for review; nothing goes live.
    Propose,
}

impl Mode {
    pub fn as_str(self) -> &'static str {
        match self {
            Mode::Direct => "direct",
            Mode::Propose => "propose",
        }
    }
}

impl std::str::FromStr for Mode {
    type Err = String;
    fn from_str(s: &str) -> Result<Mode, String> {
        match s {
            "direct" => Ok(Mode::Direct),
            "propose" => Ok(Mode::Propose),
            other => Err(format!("`{other}`: writes are `direct` or `propose`")),
        }
    }
}

/// What a request asks to do with one row.
#[derive(Debug, Clone)]
pub enum Op {
    /// Create or replace the row with this body.
    Put { body: Vec<u8>, format: Format },
    /// Change the fields this body names.
    Patch { body: Vec<u8>, format: Format },
    /// Remove the row; its tombstone names the replacement, if any.
    Delete { replaced_by: Option<String> },
}

impl Op {
    fn name(&self) -> &'static str {
        match self {
            Op::Put { .. } => "put",
            Op::Patch { .. } => "patch",
            Op::Delete { .. } => "delete",
        }
    }
}

/// One write request.
#[derive(Debug, Clone)]
pub struct Request {
    pub key: String,
    pub op: Op,
    /// The commit message; generated when none.
    pub message: Option<String>,
    /// `If-Match`: the ETag of the version the change was made to (`*`: any version that
    /// exists); none writes whatever is there.
    pub if_match: Option<String>,
}

/// A row as stored: its file at the catalogue's HEAD.
#[derive(Debug, Clone)]
pub struct Stored {
    pub key: String,
    /// The file's path in the repository.
    pub path: String,
    pub commit: String,
    /// `"sha256:…"` of the file's bytes, quoted as an HTTP entity tag.
    pub etag: String,
    pub text: Vec<u8>,
}

/// The ETag of a row file's bytes.
pub fn etag_of(bytes: &[u8]) -> String {
    format!(
        "\"{}\"",
        &ledger::sha256_hex(&String::from_utf8_lossy(bytes))[..32]
    )
}

/// Whether `if_match` (an `If-Match` value: `*`, or entity tags separated by commas) holds for
/// a row whose current ETag is `current` (none: no file).
pub fn if_match_holds(if_match: &str, current: Option<&str>) -> bool {
    let Some(current) = current else {
        return false;
    };
    if_match
        .split(',')
        .map(str::trim)
        .any(|tag| tag == "*" || tag.trim_start_matches("W/") == current)
}

/// A write done.
#[derive(Debug)]
pub struct Written {
    pub key: String,
    pub mode: Mode,
    pub commit: String,
    /// `propose`: the branch the commit is on.
    pub branch: Option<String>,
    /// `propose`: whether the branch was pushed to `origin` (false without one).
    pub pushed: bool,
    /// What the commit did to the row's file; none when the row was sent as it already was
    /// and no commit was made (`commit` is then `HEAD`).
    pub change: Option<ChangeKind>,
    /// The gate's warnings (legacy problems the row keeps).
    pub warnings: Vec<Diagnostic>,
    pub receipt: Receipt,
    /// How long the write took until the row was live (`direct`) or pushed.
    pub took: Duration,
}

/// Why a write did not happen. Each says what to do; `serve/` maps them to statuses.
#[derive(Debug)]
pub enum WriteError {
    /// Writes are off on this dispatcher.
    Off,
    Denied(Denied),
    /// A token refused: its reason is the code, with its `REFUSED` receipt when one could
    /// be written.
    Token {
        reason: Reason,
        message: String,
        receipt: Option<Box<Receipt>>,
    },
    /// The key in the path is not a key.
    BadKey {
        key: String,
    },
    Body(BodyError),
    /// The message given is too long or empty.
    BadMessage(String),
    /// `PATCH` or `DELETE` of a key no row has.
    UnknownKey {
        key: String,
        did_you_mean: Vec<String>,
    },
    /// The gate refused the row: every diagnostic, with the refusal's receipt.
    Refused {
        diagnostics: Vec<Diagnostic>,
        receipt: Option<Box<Receipt>>,
    },
    /// The row's file has changes not committed (`direct`).
    Dirty {
        path: String,
    },
    /// Git would not take the commit (a lock held, the branch moved); nothing changed.
    Conflict {
        message: String,
    },
    /// The commit was made but the site could not be changed to show it; a rebuild runs.
    NotLive {
        commit: String,
    },
    /// `propose`: the branch could not be pushed; it was removed again.
    PushFailed {
        branch: String,
    },
    /// The writer could not do its part (the ledger, the site); see the log.
    Unavailable {
        what: &'static str,
    },
    /// `If-Match` named another version of the row than the one at HEAD: someone changed it
    /// since it was read; nothing was written.
    Precondition {
        key: String,
        /// The row's ETag now; none when it has no file.
        current: Option<String>,
    },
}

impl WriteError {
    fn unavailable(what: &'static str, e: impl std::fmt::Display) -> WriteError {
        tracing::error!(error = %e, "{what}");
        WriteError::Unavailable { what }
    }

    /// The stable code.
    pub fn code(&self) -> &'static str {
        match self {
            WriteError::Off => "writes_off",
            WriteError::Precondition { .. } => "precondition_failed",
            WriteError::Denied(d) => d.code(),
            WriteError::Token { reason, .. } => reason.as_str(),
            WriteError::BadKey { .. } => "bad_key",
            WriteError::Body(BodyError::NoRecognizedFields { .. }) => "no_recognized_fields",
            WriteError::Body(BodyError::KeyChange { .. }) => "key_change",
            WriteError::Body(BodyError::Malformed { .. }) | WriteError::BadMessage(_) => "bad_body",
            WriteError::UnknownKey { .. } => "unknown_key",
            WriteError::Refused { .. } => "refused",
            WriteError::Dirty { .. } => "dirty_row",
            WriteError::Conflict { .. } => "write_conflict",
            WriteError::NotLive { .. } => "not_live",
            WriteError::PushFailed { .. } => "push_failed",
            WriteError::Unavailable { .. } => "unavailable",
        }
    }

    /// What went wrong, in a sentence.
    pub fn message(&self) -> String {
        match self {
            WriteError::Off => "this dispatcher takes no writes".into(),
            WriteError::Precondition { key, current } => format!(
                "{key} changed since it was read: If-Match names another version than {}",
                current
                    .as_deref()
                    .map_or("none (the row has no file)".to_string(), |c| format!(
                        "the current {c}"
                    ))
            ),
            WriteError::Denied(d) => d.message().to_string(),
            WriteError::Token { message, .. } => message.clone(),
            WriteError::BadKey { key } => format!("`{key}` is not a valid key"),
            WriteError::Body(BodyError::Malformed {
                message,
                line,
                column,
            }) => match (line, column) {
                (Some(l), Some(c)) => format!("{message} (line {l}, column {c})"),
                _ => message.clone(),
            },
            WriteError::Body(BodyError::NoRecognizedFields { unknown, .. }) => format!(
                "no recognized fields: {} {} not a row field",
                unknown
                    .iter()
                    .map(|u| format!("`{u}`"))
                    .collect::<Vec<_>>()
                    .join(", "),
                if unknown.len() == 1 { "is" } else { "are" }
            ),
            WriteError::Body(BodyError::KeyChange { sent }) => {
                format!("a PATCH cannot change the key (to {sent})")
            }
            WriteError::BadMessage(m) => m.clone(),
            WriteError::UnknownKey { key, .. } => format!("no row has the key `{key}`"),
            WriteError::Refused { diagnostics, .. } => {
                let errors = diagnostics.iter().filter(|d| d.is_error()).count();
                format!(
                    "the gate refused the row: {errors} error{}",
                    if errors == 1 { "" } else { "s" }
                )
            }
            WriteError::Dirty { path } => {
                format!("{path} has changes that are not committed")
            }
            WriteError::Conflict { message } => {
                format!("Git did not take the commit; nothing changed: {message}")
            }
            WriteError::NotLive { commit } => {
                format!("commit {commit} was made, but the site could not be changed to serve it")
            }
            WriteError::PushFailed { branch } => {
                format!("branch {branch} could not be pushed to origin; it was removed")
            }
            WriteError::Unavailable { what } => format!("{what}; see the dispatcher's log"),
        }
    }

    /// What the caller can do about it.
    pub fn how_to_fix(&self) -> String {
        match self {
            WriteError::Precondition { .. } => {
                "read the row again (GET /api/directory/KEY), apply your change to it, and send it with its new ETag".into()
            }
            WriteError::Off => "start the dispatcher with --catalogue DIR --write direct|propose".into(),
            WriteError::Denied(d) => d.how_to_fix().to_string(),
            WriteError::Token { reason, .. } => match reason {
                Reason::Scope => "mint a token whose --write names this key, or the row's category before and after the write".into(),
                other => other.how_to_fix().into(),
            },
            WriteError::BadKey { .. } => "keys are 2–64 characters of A–Z, 0–9 and _, starting with a letter".into(),
            WriteError::Body(BodyError::Malformed { .. }) => {
                "send the row as YAML (Content-Type: application/yaml) or JSON (application/json): a mapping of its fields".into()
            }
            WriteError::Body(BodyError::NoRecognizedFields { suggestions, .. }) => {
                if suggestions.is_empty() {
                    format!("the row fields are: {}", crate::row::FIELDS.join(", "))
                } else {
                    format!("did you mean {}?", suggestions.join(", "))
                }
            }
            WriteError::Body(BodyError::KeyChange { .. }) => {
                "PUT the row under its new key and DELETE the old one with replaced_by".into()
            }
            WriteError::BadMessage(_) => format!("send a message of 1 to {MAX_MESSAGE_BYTES} bytes, or none"),
            WriteError::UnknownKey { did_you_mean, .. } => {
                if did_you_mean.is_empty() {
                    "PUT creates a row; PATCH and DELETE change one that exists".into()
                } else {
                    format!("did you mean {}?", did_you_mean.join(", "))
                }
            }
            WriteError::Refused { .. } => "fix every error the diagnostics name (line, column, code, help), then send the row again".into(),
            WriteError::Dirty { .. } => "commit or discard the changes in the work tree first".into(),
            WriteError::Conflict { .. } => "retry; if it persists, look for a stale lock file in the repository".into(),
            WriteError::NotLive { .. } => "the commit stands and a rebuild follows; the dispatcher's log says why the change in place failed".into(),
            WriteError::PushFailed { .. } => "check that origin takes pushes from this machine, then send the write again".into(),
            WriteError::Unavailable { .. } => "retry shortly; if it persists, tell the dispatcher's operator".into(),
        }
    }

    /// The receipt the refusal left, if it left one.
    pub fn receipt(&self) -> Option<&Receipt> {
        match self {
            WriteError::Token { receipt, .. } | WriteError::Refused { receipt, .. } => {
                receipt.as_deref()
            }
            _ => None,
        }
    }
}

/// How a write was received, for the receipt and the commit.
struct Stamp {
    id: String,
    trace_id: String,
    started_at: String,
}

/// What the blocking part of a write ends with.
enum Outcome {
    Done(Box<Done>),
    /// A token's scope or risk ceiling said no.
    Token(token::TokenRefusal),
    /// The gate said no.
    Refused(Vec<Diagnostic>),
}

struct Done {
    commit: String,
    branch: Option<String>,
    pushed: bool,
    /// None when the row was sent as it is: no commit was made.
    change: Option<ChangeKind>,
    fingerprint: String,
    warnings: Vec<Diagnostic>,
}

/// The write path of one dispatcher: the site held open for changing in place, behind a
/// lock that serialises writes.
pub struct Writer {
    mode: Mode,
    catalogue: git::Catalogue,
    /// How the site is built (to open it again after a change from outside).
    options: build::Options,
    dispatcher: Arc<Dispatcher>,
    /// The site as built; `None` until opened again after a failure.
    built: Arc<Mutex<Option<Built>>>,
    pages: std::sync::mpsc::Sender<()>,
    /// Bumped each time the listing pages are written after a write.
    pages_done: tokio::sync::watch::Sender<u64>,
}

impl Writer {
    /// A writer over `built` (the site of the catalogue the dispatcher serves, opened with
    /// `build::incremental::open_current`).
    pub fn new(
        mode: Mode,
        built: Built,
        options: build::Options,
        dispatcher: Arc<Dispatcher>,
    ) -> anyhow::Result<Writer> {
        let catalogue = git::Catalogue::open(built.catalogue())?;
        let built = Arc::new(Mutex::new(Some(built)));
        let (pages, jobs) = std::sync::mpsc::channel::<()>();
        let pages_done = tokio::sync::watch::Sender::new(0);
        {
            let built = built.clone();
            let done = pages_done.clone();
            std::thread::Builder::new()
                .name("capdir-pages".into())
                .spawn(move || write_pages(&built, &jobs, &done))?;
        }
        Ok(Writer {
            mode,
            catalogue,
            options,
            dispatcher,
            built,
            pages,
            pages_done,
        })
    }

    pub fn mode(&self) -> Mode {
        self.mode
    }

    /// A receiver that changes each time the listing pages have been written after writes.
    pub fn subscribe_pages(&self) -> tokio::sync::watch::Receiver<u64> {
        self.pages_done.subscribe()
    }

    /// The row `key` as stored at the catalogue's HEAD, with its ETag (what `If-Match` takes).
    pub async fn read(self: &Arc<Self>, key: &str) -> Result<Stored, WriteError> {
        if !crate::row::is_valid_key(key) {
            return Err(WriteError::BadKey {
                key: key.to_string(),
            });
        }
        let this = self.clone();
        let key = key.to_string();
        tokio::task::spawn_blocking(move || this.read_blocking(&key))
            .await
            .map_err(|e| WriteError::unavailable("the read panicked", e))?
    }

    fn read_blocking(&self, key: &str) -> Result<Stored, WriteError> {
        let head = self
            .catalogue
            .head()
            .map_err(|e| WriteError::unavailable("the catalogue's HEAD cannot be read", e))?;
        let live = self.dispatcher.live();
        let name = live
            .invoker
            .rows()
            .get(key)
            .and_then(|c| {
                c.row
                    .path
                    .file_name()
                    .and_then(|n| n.to_str())
                    .map(str::to_string)
            })
            .unwrap_or_else(|| format!("{key}.yaml"));
        let path = self.catalogue.path_of(&name);
        let found = self
            .catalogue
            .file_at(&head, &path)
            .map_err(|e| WriteError::unavailable("the row cannot be read from Git", e))?;
        let Some((_, text)) = found else {
            return Err(WriteError::UnknownKey {
                key: key.to_string(),
                did_you_mean: live.invoker.rows().did_you_mean(key),
            });
        };
        Ok(Stored {
            key: key.to_string(),
            path,
            commit: head.commit.to_string(),
            etag: etag_of(&text),
            text,
        })
    }

    /// Do one write for `caller`: see the module's comment for the order of its steps.
    pub async fn write(
        self: &Arc<Self>,
        caller: &Caller,
        request: Request,
    ) -> Result<Written, WriteError> {
        let started = Instant::now();
        auth::require_credential(caller).map_err(WriteError::Denied)?;
        if !crate::row::is_valid_key(&request.key) {
            return Err(WriteError::BadKey { key: request.key });
        }
        if let Some(m) = &request.message
            && (m.trim().is_empty() || m.len() > MAX_MESSAGE_BYTES)
        {
            return Err(WriteError::BadMessage(format!(
                "the message is {} bytes",
                m.len()
            )));
        }
        let stamp = Stamp {
            id: ledger::new_id(),
            trace_id: uuid::Uuid::new_v4().simple().to_string(),
            started_at: crate::invoke::authority::now_rfc3339(),
        };
        if let Caller::Token(claims) = caller {
            let revoked = self
                .dispatcher
                .ledger()
                .is_revoked(&claims.id)
                .await
                .map_err(|e| WriteError::unavailable("the revocation list could not be read", e))?;
            let refusal = if revoked {
                Some(token::TokenRefusal {
                    reason: Reason::Revoked,
                    message: format!("token {} was revoked", claims.id),
                })
            } else {
                token::check_holder(
                    claims,
                    chrono::Utc::now().timestamp(),
                    self.dispatcher.audience(),
                )
                .err()
            };
            if let Some(r) = refusal {
                return Err(self.refuse_token(caller, &request, &stamp, r).await);
            }
        }
        let outcome = {
            let this = self.clone();
            let (caller, request) = (caller.clone(), request.clone());
            tokio::task::spawn_blocking(move || this.write_blocking(&caller, &request))
                .await
                .map_err(|e| WriteError::unavailable("the write panicked", e))??
        };
        match outcome {
            Outcome::Token(r) => Err(self.refuse_token(caller, &request, &stamp, r).await),
            Outcome::Refused(diagnostics) => {
                let receipt = self
                    .receipt(caller, &request, &stamp, Ending::GateRefused(&diagnostics))
                    .await
                    .ok()
                    .map(Box::new);
                Err(WriteError::Refused {
                    diagnostics,
                    receipt,
                })
            }
            Outcome::Done(done) => {
                let receipt = self
                    .receipt(caller, &request, &stamp, Ending::Done(&done))
                    .await
                    .map_err(|e| WriteError::unavailable("the receipt could not be written", e))?;
                Ok(Written {
                    key: request.key,
                    mode: self.mode,
                    commit: done.commit,
                    branch: done.branch,
                    pushed: done.pushed,
                    change: done.change,
                    warnings: done.warnings,
                    receipt,
                    took: started.elapsed(),
                })
            }
        }
    }

    async fn refuse_token(
        &self,
        caller: &Caller,
        request: &Request,
        stamp: &Stamp,
        r: token::TokenRefusal,
    ) -> WriteError {
        let receipt = self
            .receipt(caller, request, stamp, Ending::TokenRefused(&r))
            .await
            .ok()
            .map(Box::new);
        WriteError::Token {
            reason: r.reason,
            message: r.message,
            receipt,
        }
    }

    /// Make the write's receipt durable.
    async fn receipt(
        &self,
        caller: &Caller,
        request: &Request,
        stamp: &Stamp,
        outcome: Ending<'_>,
    ) -> anyhow::Result<Receipt> {
        let known = self.dispatcher.secrets();
        let input = match &request.op {
            Op::Put { body, .. } | Op::Patch { body, .. } => {
                String::from_utf8_lossy(body).into_owned()
            }
            Op::Delete { replaced_by } => json!({"replaced_by": replaced_by}).to_string(),
        };
        let (status, error_code, output, contract, commit) = match outcome {
            Ending::Done(done) => (
                Status::ProvenMaterialResult,
                None,
                json!({
                    "op": request.op.name(),
                    "mode": self.mode.as_str(),
                    "commit": done.commit,
                    "branch": done.branch,
                    "change": done.change.map_or("unchanged", ChangeKind::as_str),
                })
                .to_string(),
                done.fingerprint.clone(),
                done.commit.clone(),
            ),
            Ending::TokenRefused(r) => (
                Status::Refused,
                Some(r.reason.as_str().to_string()),
                format!("ERR:{}:{}", r.reason.as_str(), r.message),
                String::new(),
                self.dispatcher.live().info.commit.clone(),
            ),
            Ending::GateRefused(diags) => (
                Status::Refused,
                Some("refused".to_string()),
                format!(
                    "ERR:refused:{}",
                    diags
                        .iter()
                        .filter(|d| d.is_error())
                        .map(|d| format!("{}:{}:{} {}", d.line, d.col, d.code, d.message))
                        .collect::<Vec<_>>()
                        .join("; ")
                ),
                String::new(),
                self.dispatcher.live().info.commit.clone(),
            ),
        };
        let draft = Draft {
            id: stamp.id.clone(),
            key: request.key.clone(),
            actor: caller.actor(),
            runner: "write".into(),
            trace_id: stamp.trace_id.clone(),
            started_at: stamp.started_at.clone(),
            finished_at: crate::invoke::authority::now_rfc3339(),
            status: status.as_str().into(),
            error_code,
            cost_usd: None,
            input_sha256: ledger::sha256_hex(&input),
            output_sha256: ledger::sha256_hex(&output),
            contract_sha256: contract,
            catalogue_commit: commit,
            repairs: None,
            parent: None,
            root: None,
            input: secrets::redact(&input, known),
            output: secrets::redact(&output, known),
        };
        self.dispatcher.ledger().append(draft).await
    }

    /// The part of a write that touches files and Git, under the writer's lock.
    fn write_blocking(&self, caller: &Caller, request: &Request) -> Result<Outcome, WriteError> {
        let mut guard = self.built.lock().unwrap_or_else(|p| p.into_inner());
        let mut laps = crate::laps::Laps::default();
        let head = self
            .catalogue
            .head()
            .map_err(|e| WriteError::unavailable("the catalogue's HEAD cannot be read", e))?;
        let reopened = self.up_to_date(&mut guard, &head)?;
        let built = guard.as_mut().expect("opened above");
        let key = request.key.as_str();
        let current = self.current(built, &head, request)?;
        laps.lap("read");
        let new = NewFile::of(request, &current)?;
        if let Caller::Token(claims) = caller {
            let (category, sensitive) = new
                .fields
                .as_ref()
                .map(body::category_and_risk)
                .unwrap_or_default();
            let target = new.target(key, &current, &category, sensitive);
            if let Err(r) = token::check_write(claims, &target) {
                return Ok(Outcome::Token(r));
            }
        }
        self.not_dirty(&current)?;
        // A row sent as it is makes no commit: nothing changed.
        if let (Some(after), Some((_, now))) = (&new.after, &current.at_head)
            && after == now
        {
            return Ok(unchanged(built, key, &head));
        }
        let display = built.catalogue().join(&current.name);
        let new_row = new.after.as_ref().and_then(|bytes| {
            check_file(&SourceFile {
                path: display.clone(),
                bytes: bytes.clone(),
            })
            .0
        });
        laps.lap("body");
        let judged =
            match self.judge(built, request, &current, &new, new_row.as_ref(), &mut laps)? {
                Ok(judged) => judged,
                Err(refused) => return Ok(Outcome::Refused(refused)),
            };
        if let Caller::Token(claims) = caller
            && new_row.is_some()
        {
            let taken = self.asks_of_others(built, claims, key, &current, &judged);
            if !taken.is_empty() {
                return Ok(Outcome::Refused(taken));
            }
            laps.lap("asks of others");
        }
        let (prepared, author, done) = self.commit(
            &head,
            caller,
            request,
            &current,
            &new,
            new_row.as_ref(),
            judged.warnings,
        )?;
        laps.lap("objects");
        if self.mode == Mode::Propose {
            return self.propose(&prepared, key, &author, done);
        }
        self.catalogue
            .land(&prepared, &author)
            .map_err(|e| WriteError::Conflict {
                message: format!("{e:#}"),
            })?;
        laps.lap("landed");
        let landed = Landed {
            prepared: &prepared,
            change: done.change.expect("a write that commits changes the row"),
            name: &current.name,
            new_row,
            removed: new.after.is_none().then(|| key.to_string()),
            reopened,
        };
        if let Err(e) = self.go_live(built, landed, judged.staged, judged.across) {
            let commit = done.commit;
            tracing::error!(error = %format!("{e:#}"), %commit, "the site could not follow a write; building it anew");
            *guard = None;
            drop(guard);
            self.rebuild();
            return Err(WriteError::NotLive { commit });
        }
        laps.lap("live");
        tracing::info!(commit = %done.commit, key, steps = %laps, "written");
        let _ = self.pages.send(());
        Ok(Outcome::Done(Box::new(done)))
    }

    /// The asks of other rows the write would take out of their place, where the token may
    /// not write the row that asks (each an error on the written file).
    fn asks_of_others(
        &self,
        built: &Built,
        claims: &token::Claims,
        key: &str,
        current: &Current,
        judged: &Judged,
    ) -> Vec<Diagnostic> {
        let file = std::path::PathBuf::from(self.catalogue.path_of(&current.name));
        let base: Vec<&Row> = built.rows().collect();
        taken_asks(claims, key, &base, &judged.searchers, &file)
    }

    /// The write's commit, prepared (its objects written, no branch moved yet), its author,
    /// and the answer it will give.
    #[allow(clippy::too_many_arguments)]
    fn commit(
        &self,
        head: &Head,
        caller: &Caller,
        request: &Request,
        current: &Current,
        new: &NewFile,
        new_row: Option<&Row>,
        warnings: Vec<Diagnostic>,
    ) -> Result<(git::Prepared, git::Author, Done), WriteError> {
        let author = author_of(caller);
        let change = match (&current.old, &new.after) {
            (None, _) => ChangeKind::Added,
            (Some(_), Some(_)) => ChangeKind::Modified,
            (Some(_), None) => ChangeKind::Deleted,
        };
        let message = commit_message(request, change, &new.patched);
        let prepared = self
            .catalogue
            .prepare(head, &current.path, new.after.clone(), &author, &message)
            .map_err(|e| WriteError::unavailable("the commit could not be written", e))?;
        let done = Done {
            commit: prepared.id.to_string(),
            branch: None,
            pushed: false,
            change: Some(change),
            fingerprint: new_row
                .map(crate::row::call::fingerprint)
                .unwrap_or_default(),
            warnings,
        };
        Ok((prepared, author, done))
    }

    /// The model must be of this HEAD and of the site on disk: a commit or a build from
    /// outside (a `git pull`, `capdir build`) brings it up to date first. Whether it was
    /// opened anew.
    fn up_to_date(&self, guard: &mut Option<Built>, head: &Head) -> Result<bool, WriteError> {
        let stale = guard
            .as_ref()
            .is_none_or(|b| head.commit != b.commit() || !b.holds_site());
        if !stale {
            return Ok(false);
        }
        *guard = None;
        let built = build::incremental::open_current(&self.options).map_err(|e| match e {
            BuildError::Check(d) => {
                WriteError::unavailable("the catalogue does not pass the gate", d)
            }
            BuildError::Other(e) => {
                WriteError::unavailable("the site could not be brought up to date", e)
            }
        })?;
        *guard = Some(built);
        Ok(true)
    }

    /// The row as the model and HEAD hold it, once the request's precondition holds and the
    /// row exists (or is being created).
    fn current(
        &self,
        built: &Built,
        head: &Head,
        request: &Request,
    ) -> Result<Current, WriteError> {
        let key = request.key.as_str();
        let old = built.row(key).cloned();
        let name = old
            .as_ref()
            .and_then(|r| r.path.file_name())
            .and_then(|n| n.to_str())
            .map_or_else(|| format!("{key}.yaml"), str::to_string);
        let path = self.catalogue.path_of(&name);
        let at_head = self
            .catalogue
            .file_at(head, &path)
            .map_err(|e| WriteError::unavailable("the row cannot be read from Git", e))?;
        if let Some(want) = &request.if_match {
            let current = at_head.as_ref().map(|(_, b)| etag_of(b));
            if !if_match_holds(want, current.as_deref()) {
                return Err(WriteError::Precondition {
                    key: key.to_string(),
                    current,
                });
            }
        }
        if old.is_none() && !matches!(request.op, Op::Put { .. }) {
            return Err(WriteError::UnknownKey {
                key: key.to_string(),
                did_you_mean: self.dispatcher.live().invoker.rows().did_you_mean(key),
            });
        }
        Ok(Current {
            old,
            name,
            path,
            at_head,
        })
    }

    /// In direct mode, the row's file in the work tree is as HEAD has it: a write never
    /// commits over an edit nobody committed.
    fn not_dirty(&self, current: &Current) -> Result<(), WriteError> {
        if self.mode != Mode::Direct {
            return Ok(());
        }
        let dirty = self
            .catalogue
            .is_dirty(&current.path, current.at_head.as_ref().map(|(id, _)| *id))
            .map_err(|e| WriteError::unavailable("the work tree cannot be read", e))?;
        if dirty {
            return Err(WriteError::Dirty {
                path: current.path.clone(),
            });
        }
        Ok(())
    }

    /// The gate, as `capdir check --base HEAD` would judge the catalogue after the write,
    /// with the search index staged with the change: its errors (`Err`), or what passed.
    fn judge(
        &self,
        built: &Built,
        request: &Request,
        current: &Current,
        new: &NewFile,
        new_row: Option<&Row>,
        laps: &mut crate::laps::Laps,
    ) -> Result<Result<Judged, Vec<Diagnostic>>, WriteError> {
        let key = request.key.as_str();
        let display = built.catalogue().join(&current.name);
        let upserts: Vec<&Row> = new_row.into_iter().collect();
        let removed: Vec<&str> = if new.after.is_none() {
            vec![key]
        } else {
            vec![]
        };
        let staged = built
            .stage_index(&upserts, &removed)
            .map_err(|e| WriteError::unavailable("the search index cannot be changed", e))?;
        let unreadable = |e| WriteError::unavailable("the search index cannot be read", e);
        let searchers = (
            built.searcher().map_err(unreadable)?,
            staged.searcher().map_err(unreadable)?,
        );
        laps.lap("index staged");
        let base: Vec<&Row> = built.rows().collect();
        let checked = check_change(
            &base,
            FileChange {
                path: &display,
                before: current.at_head.as_ref().map(|(_, b)| b.as_slice()),
                after: new.after.as_deref(),
            },
            (&searchers.0, &searchers.1),
            built.across.as_deref(),
            &catalogue_bindings(built.catalogue()),
        );
        let mut diagnostics = checked.diagnostics;
        if let Op::Delete {
            replaced_by: Some(r),
        } = &request.op
            && (r == key || built.row(r).is_none_or(|row| !row.enabled))
        {
            diagnostics.push(Diagnostic::error(
                &display,
                (0, 0),
                "unknown_replacement",
                format!("replaced_by names `{r}`, which is not an enabled row of the catalogue"),
                "name the enabled row that does this row's work now, or leave replaced_by out",
            ));
        }
        laps.lap("gate");
        // Named as in the repository (`catalogue/KEY.yaml`), wherever the dispatcher runs.
        for d in &mut diagnostics {
            if let Some(file) = d.path.file_name().and_then(|n| n.to_str()) {
                d.path = self.catalogue.path_of(file).into();
            }
        }
        if diagnostics.iter().any(Diagnostic::is_error) {
            return Ok(Err(diagnostics));
        }
        Ok(Ok(Judged {
            staged,
            searchers,
            across: checked.across,
            warnings: diagnostics,
        }))
    }

    /// Propose mode: the commit on a branch of its own, pushed when the repository has an
    /// origin; nothing lands and the site does not change.
    fn propose(
        &self,
        prepared: &git::Prepared,
        key: &str,
        author: &git::Author,
        done: Done,
    ) -> Result<Outcome, WriteError> {
        let commit = &done.commit;
        let branch = format!("capdir/{key}-{}", &commit[..8.min(commit.len())]);
        self.catalogue
            .branch(prepared, &branch, author)
            .map_err(|e| WriteError::Conflict {
                message: format!("{e:#}"),
            })?;
        let has_origin = self
            .catalogue
            .has_origin()
            .map_err(|e| WriteError::unavailable("the repository's remotes cannot be read", e))?;
        if has_origin && let Err(e) = self.catalogue.push(&branch) {
            tracing::error!(error = %format!("{e:#}"), %branch, "push failed");
            let _ = self.catalogue.drop_branch(&branch, prepared.id);
            return Err(WriteError::PushFailed { branch });
        }
        Ok(Outcome::Done(Box::new(Done {
            branch: Some(branch),
            pushed: has_origin,
            ..done
        })))
    }

    /// Live: the landed commit into the model's history, the site changed in place and
    /// swapped into the dispatcher.
    fn go_live(
        &self,
        built: &mut Built,
        landed: Landed<'_>,
        staged: IndexState,
        across: Vec<Diagnostic>,
    ) -> anyhow::Result<()> {
        let info = &landed.prepared.info;
        built
            .history
            .files
            .entry(landed.name.to_string())
            .or_default()
            .insert(
                0,
                Change {
                    kind: landed.change,
                    commit: Arc::new(info.clone()),
                },
            );
        built.history.head = Some(Arc::new(info.clone()));
        let delta = Delta {
            upserts: landed.new_row.into_iter().collect(),
            removed: landed.removed.into_iter().collect(),
        };
        let site = built.out().to_path_buf();
        self.dispatcher.update(|live| -> anyhow::Result<_> {
            let applied = built.apply(delta, Some(staged), Some(info))?;
            // What the gate found across the rows is what they are now.
            built.across = Some(across);
            tracing::debug!(steps = ?applied.steps, "applied");
            let next = if landed.reopened {
                self.dispatcher.load_live()?
            } else {
                live.changed(applied, &site)
            };
            Ok((next, ()))
        })
    }

    /// After a change in place failed: build the site anew and load it, so the dispatcher
    /// serves what Git holds.
    fn rebuild(&self) {
        match build::incremental::open_current(&self.options) {
            Ok(built) => {
                *self.built.lock().unwrap_or_else(|p| p.into_inner()) = Some(built);
                self.dispatcher.reload_if_changed();
            }
            Err(e) => tracing::error!(error = %e, "the site could not be built"),
        }
    }
}

/// The answer to a write that changes nothing: HEAD, and no commit.
fn unchanged(built: &Built, key: &str, head: &Head) -> Outcome {
    let fingerprint = built.row(key).map(crate::row::call::fingerprint);
    Outcome::Done(Box::new(Done {
        commit: head.commit.to_string(),
        branch: None,
        pushed: false,
        change: None,
        fingerprint: fingerprint.unwrap_or_default(),
        warnings: Vec::new(),
    }))
}

/// The row a write changes, as the model and HEAD hold it.
struct Current {
    old: Option<Row>,
    /// Its file's name in the catalogue (`KEY.yaml`), and its path in the repository.
    name: String,
    path: String,
    at_head: Option<(gix::ObjectId, Vec<u8>)>,
}

/// The file a write makes (none: the row removed), its fields as the token gate reads them,
/// and the fields a patch changed.
struct NewFile {
    after: Option<Vec<u8>>,
    fields: Option<serde_yaml::Mapping>,
    patched: Vec<String>,
}

impl NewFile {
    fn of(request: &Request, current: &Current) -> Result<NewFile, WriteError> {
        let key = request.key.as_str();
        Ok(match &request.op {
            Op::Put { body, format } => {
                let (text, fields) = body::put(key, body, *format).map_err(WriteError::Body)?;
                NewFile {
                    after: Some(text),
                    fields: Some(fields),
                    patched: Vec::new(),
                }
            }
            Op::Patch { body, format } => {
                let now = current.at_head.as_ref().map(|(_, b)| b.as_slice());
                let (text, fields, names) = body::patch(key, now.unwrap_or(b""), body, *format)
                    .map_err(WriteError::Body)?;
                NewFile {
                    after: Some(text),
                    fields: Some(fields),
                    patched: names,
                }
            }
            Op::Delete { .. } => NewFile {
                after: None,
                fields: None,
                patched: Vec::new(),
            },
        })
    }

    /// What the token gate judges of the write: the row before and after it (`category` and
    /// `sensitive` as the new file's fields give them).
    fn target<'a>(
        &'a self,
        key: &'a str,
        current: &'a Current,
        category: &'a str,
        sensitive: bool,
    ) -> WriteTarget<'a> {
        let old = current.old.as_ref();
        let fields = self.fields.as_ref();
        let after = self.after.as_ref().and_then(|bytes| {
            crate::row::parse_row(std::path::Path::new(&current.name), bytes).row
        });
        WriteTarget {
            key,
            categories: [old.map(|r| r.category.as_str()), fields.map(|_| category)],
            sensitive: sensitive || old.is_some_and(|r| r.sensitive),
            runs_command: fields.is_some_and(body::runs_command),
            sends: [old.and_then(sends_of), after.as_ref().and_then(sends_of)],
        }
    }
}

/// What passed the write's gate: the index staged with the change (and its searchers before
/// and after), what the gate found across the rows, and its warnings.
struct Judged {
    staged: IndexState,
    searchers: (crate::search::Searcher, crate::search::Searcher),
    across: Vec<Diagnostic>,
    warnings: Vec<Diagnostic>,
}

/// A commit landed, as the site takes it in.
struct Landed<'a> {
    prepared: &'a git::Prepared,
    change: ChangeKind,
    name: &'a str,
    new_row: Option<Row>,
    removed: Option<String>,
    reopened: bool,
}

/// What a receipt records of how a write ended.
enum Ending<'a> {
    Done(&'a Done),
    TokenRefused(&'a token::TokenRefusal),
    GateRefused(&'a [Diagnostic]),
}

/// The commit's author: the owner, or the token by its id (never the token).
fn author_of(caller: &Caller) -> git::Author {
    match caller {
        Caller::Token(c) => git::Author {
            name: c.id.clone(),
            email: format!("{}@capdir.invalid", c.id),
        },
        _ => git::Author {
            name: "capdir owner".into(),
            email: "owner@capdir.invalid".into(),
        },
    }
}

/// The request's message, or one made from what the write does; a removal's replacement as
/// its `Replaced-by:` trailer (any the request's message has is dropped: the trailer says
/// what the tombstone shows, checked).
fn commit_message(request: &Request, change: ChangeKind, patched: &[String]) -> String {
    let key = &request.key;
    let mut message = match &request.message {
        Some(m) => m
            .replace('\r', "")
            .lines()
            .filter(|l| !l.trim_start().starts_with("Replaced-by:"))
            .collect::<Vec<_>>()
            .join("\n")
            .trim()
            .to_string(),
        None => match (change, &request.op) {
            (ChangeKind::Added, _) => format!("Add {key}"),
            (_, Op::Patch { .. }) => format!("Change {} of {key}", patched.join(", ")),
            (ChangeKind::Deleted, _) => format!("Remove {key}"),
            _ => format!("Replace {key}"),
        },
    };
    if let Op::Delete {
        replaced_by: Some(r),
    } = &request.op
    {
        message.push_str(&format!("\n\nReplaced-by: {r}"));
    }
    message.push('\n');
    message
}

/// How long the pages thread waits after a write before it starts, so a burst of writes
/// gets one run.
const PAGES_DELAY: Duration = Duration::from_millis(50);

/// Give the calling thread a lower scheduling priority (Linux `setpriority` on the thread),
/// best effort: on a machine with few cores the listing pages, which can wait, then leave the
/// cores to writes and invocations, which a caller waits for.
fn lower_priority() {
    #[cfg(target_os = "linux")]
    // SAFETY: gettid and setpriority take no pointers; a failure only leaves the priority.
    unsafe {
        let tid = libc::gettid();
        libc::setpriority(libc::PRIO_PROCESS, tid as libc::id_t, 10);
    }
}

/// The thread that writes the listing pages after writes: each wake-up takes every write
/// that came meanwhile.
fn write_pages(
    built: &Mutex<Option<Built>>,
    jobs: &std::sync::mpsc::Receiver<()>,
    done: &tokio::sync::watch::Sender<u64>,
) {
    lower_priority();
    while jobs.recv().is_ok() {
        // Writes that come together get one run.
        std::thread::sleep(PAGES_DELAY);
        while jobs.try_recv().is_ok() {}
        let pages = match built.lock().unwrap_or_else(|p| p.into_inner()).as_mut() {
            Some(b) => b.pages(),
            None => continue,
        };
        match pages.write() {
            Ok(took) => tracing::info!(ms = took.as_millis() as u64, "listing pages written"),
            Err(e) => {
                tracing::error!(error = %format!("{e:#}"), "listing pages failed");
                if let Some(b) = built.lock().unwrap_or_else(|p| p.into_inner()).as_mut() {
                    b.pages_failed();
                }
            }
        }
        done.send_modify(|n| *n += 1);
    }
}

/// A dispatcher's writes before the dispatcher exists: the site brought up to the
/// catalogue and held open ([`Ready::open`], before the dispatcher loads the site), then a
/// [`Writer`] over the dispatcher.
pub struct Ready {
    mode: Mode,
    built: Built,
    options: build::Options,
}

impl Ready {
    /// Bring the site of `options` up to its catalogue (in place, or built anew) and hold it
    /// open for writes in `mode`.
    pub fn open(mode: Mode, options: build::Options) -> Result<Ready, BuildError> {
        let built = build::incremental::open_current(&options)?;
        git::Catalogue::open(built.catalogue()).map_err(BuildError::Other)?;
        Ok(Ready {
            mode,
            built,
            options,
        })
    }

    /// The writer of `dispatcher`, which serves this site.
    pub fn writer(self, dispatcher: Arc<Dispatcher>) -> anyhow::Result<Writer> {
        Writer::new(self.mode, self.built, self.options, dispatcher)
    }
}
