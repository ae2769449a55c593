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
mod change;
pub mod git;

pub use body::{BodyError, Format};

use crate::access::auth::{self, Caller, Denied};
use crate::access::token::{self, Reason};
use crate::build::history::ChangeKind;
use crate::build::incremental::Built;
use crate::build::{self, BuildError};
use crate::check::secrets;
use crate::dispatch::Dispatcher;
use crate::invoke::outcome::Status;
use crate::ledger::{self, Draft, Receipt};
use crate::row::diag::Diagnostic;
use serde_json::json;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

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

/// What a receipt records of how a write ended.
enum Ending<'a> {
    Done(&'a Done),
    TokenRefused(&'a token::TokenRefusal),
    GateRefused(&'a [Diagnostic]),
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
