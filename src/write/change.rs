//! One write, step by step, under the writer's lock: the model brought up to date, the row
//! as it is, the new file, the token's gate, the gate as `capdir check --base HEAD` judges
//! it, the commit, then a proposal's branch or the commit landed and the site changed in
//! place.

use super::git::{self, Head};
use super::{Done, Mode, Op, Outcome, Request, WriteError, Writer, body, etag_of, if_match_holds};
use crate::access::auth::Caller;
use crate::access::token::{self, WriteTarget};
use crate::build::history::{Change, ChangeKind};
use crate::build::incremental::{Built, Delta};
use crate::build::{self, BuildError};
use crate::check::{FileChange, check_change, check_file};
use crate::row::Row;
use crate::row::catalogue::SourceFile;
use crate::row::diag::Diagnostic;
use crate::search::update::IndexState;
use std::sync::Arc;

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

impl Writer {
    /// The part of a write that touches files and Git, under the writer's lock.
    pub(super) fn write_blocking(
        &self,
        caller: &Caller,
        request: &Request,
    ) -> Result<Outcome, WriteError> {
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
        if let Some(r) = new.token_refusal(caller, key, &current) {
            return Ok(Outcome::Token(r));
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
        // The rows as they are, for the gate and for the asks of other rows.
        let base: Vec<&Row> = built.rows().collect();
        let judged = match self.judge(
            built,
            &base,
            request,
            &current,
            &new,
            new_row.as_ref(),
            &mut laps,
        )? {
            Ok(judged) => judged,
            Err(refused) => return Ok(Outcome::Refused(refused)),
        };
        if let Caller::Token(claims) = caller
            && new_row.is_some()
        {
            let taken = self.asks_of_others(&base, claims, key, &current, &judged);
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
            change: new.change(&current),
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
        base: &[&Row],
        claims: &token::Claims,
        key: &str,
        current: &Current,
        judged: &Judged,
    ) -> Vec<Diagnostic> {
        let file = std::path::PathBuf::from(self.catalogue.path_of(&current.name));
        taken_asks(claims, key, base, &judged.searchers, &file)
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
        let change = new.change(current);
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
    #[allow(clippy::too_many_arguments)]
    fn judge(
        &self,
        built: &Built,
        base: &[&Row],
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
        let checked = check_change(
            base,
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

    /// Why the caller's token may not make this write, if it may not (the owner may).
    fn token_refusal(
        &self,
        caller: &Caller,
        key: &str,
        current: &Current,
    ) -> Option<token::TokenRefusal> {
        let Caller::Token(claims) = caller else {
            return None;
        };
        let (category, sensitive) = self
            .fields
            .as_ref()
            .map(body::category_and_risk)
            .unwrap_or_default();
        let target = self.target(key, current, &category, sensitive);
        token::check_write(claims, &target).err()
    }

    /// What the write does to the row's file: adds it, changes it or deletes it.
    fn change(&self, current: &Current) -> ChangeKind {
        match (&current.old, &self.after) {
            (None, _) => ChangeKind::Added,
            (Some(_), Some(_)) => ChangeKind::Modified,
            (Some(_), None) => ChangeKind::Deleted,
        }
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
