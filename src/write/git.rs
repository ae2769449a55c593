//! A row written into Git with gix: one commit that changes one row file, either on the
//! current branch with the work tree and the index following (`direct`), or on a branch of
//! its own that is pushed for review (`propose`).
//!
//! A commit on the current branch lands in two phases, so a failure at any point leaves the
//! work tree, the index and `HEAD` as they were. First everything that can fail is done
//! aside: the objects are written (unreferenced until the end, as `git commit` leaves them),
//! the new file is written next to the row's, and the locks of `HEAD`'s branch and of the
//! index are taken, the branch's checked to still point at the parent. Then the branch
//! moves, the file is renamed into place and the index (which gix writes whole, with the one
//! entry changed) replaces the old. A step after the branch moved that fails moves it back.
//!
//! gix has no push (0.90 fetches and clones only), so `propose` runs `git push`.

use crate::build::history::CommitInfo;
use anyhow::{Context as _, Result, anyhow, bail};
use gix::ObjectId;
use gix::bstr::{BStr, ByteSlice};
use gix::refs::Target;
use gix::refs::transaction::{Change, LogChange, PreviousValue, RefEdit, RefLog};
use std::path::{Path, PathBuf};
use std::time::Duration;

/// How long a write waits for a lock another git holds.
const LOCK_WAIT: Duration = Duration::from_millis(500);

/// How long `git push` may take.
const PUSH_TIMEOUT: Duration = Duration::from_secs(60);

/// Who a commit is by: the credential's identity.
#[derive(Debug, Clone)]
pub struct Author {
    pub name: String,
    pub email: String,
}

/// A catalogue in a Git work tree.
#[derive(Debug, Clone)]
pub struct Catalogue {
    /// The work tree's root.
    workdir: PathBuf,
    /// The catalogue directory, relative to the work tree (`catalogue`).
    rel: PathBuf,
}

/// The commit `HEAD` is at.
#[derive(Debug, Clone, Copy)]
pub struct Head {
    pub commit: ObjectId,
    pub tree: ObjectId,
}

/// A commit written to the object store, not yet on any branch.
#[derive(Debug, Clone)]
pub struct Prepared {
    pub id: ObjectId,
    pub parent: ObjectId,
    /// The file's path in the repository (`catalogue/KEY.yaml`).
    pub path: String,
    /// The file's bytes, none for a removal.
    pub bytes: Option<Vec<u8>>,
    pub blob: Option<ObjectId>,
    /// What history will show of it.
    pub info: CommitInfo,
}

impl Catalogue {
    /// The catalogue directory `dir`, which must be in a Git work tree.
    pub fn open(dir: &Path) -> Result<Catalogue> {
        let (repo, rel) = crate::build::git::locate(dir)?;
        let workdir = repo
            .workdir()
            .context("the catalogue's repository has no work tree")?
            .canonicalize()?;
        Ok(Catalogue { workdir, rel })
    }

    fn repo(&self) -> Result<gix::Repository> {
        Ok(gix::open(&self.workdir)?)
    }

    /// The path of row file `name` in the repository (`catalogue/KEY.yaml`).
    pub fn path_of(&self, name: &str) -> String {
        let rel = self.rel.to_string_lossy().replace('\\', "/");
        if rel.is_empty() {
            name.to_string()
        } else {
            format!("{rel}/{name}")
        }
    }

    /// The work tree's root.
    pub fn workdir(&self) -> &Path {
        &self.workdir
    }

    /// The commit `HEAD` is at.
    pub fn head(&self) -> Result<Head> {
        let repo = self.repo()?;
        let commit = repo
            .head_commit()
            .context("the catalogue's repository has no commit yet")?;
        Ok(Head {
            commit: commit.id,
            tree: commit.tree_id()?.detach(),
        })
    }

    /// The bytes of `path` in the tree of commit `head`, if it has that file.
    pub fn file_at(&self, head: &Head, path: &str) -> Result<Option<(ObjectId, Vec<u8>)>> {
        let repo = self.repo()?;
        let tree = repo.find_tree(head.tree)?;
        let Some(entry) = tree.lookup_entry_by_path(path)? else {
            return Ok(None);
        };
        if !entry.mode().is_blob() {
            return Ok(None);
        }
        let blob = entry.object()?;
        Ok(Some((entry.object_id(), blob.data.clone())))
    }

    /// Whether `path` has changes not committed at `head`: the work tree's file or the
    /// index's entry differs from the commit's (a file that is not in the commit: one that
    /// exists in either).
    pub fn is_dirty(&self, path: &str, at_head: Option<ObjectId>) -> Result<bool> {
        let repo = self.repo()?;
        let on_disk = match std::fs::read(self.workdir.join(path)) {
            Ok(bytes) => Some(gix::objs::compute_hash(
                repo.object_hash(),
                gix::objs::Kind::Blob,
                &bytes,
            )?),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
            Err(e) => return Err(e).with_context(|| format!("reading {path}")),
        };
        let index = repo.open_index()?;
        let staged = index.entry_by_path(path.as_bytes().as_bstr()).map(|e| e.id);
        Ok(on_disk != at_head || staged != at_head)
    }

    /// Write the commit that sets `path` to `bytes` (or removes it) on top of `head`, by
    /// `author`, with `message`: the objects only, on no branch.
    pub fn prepare(
        &self,
        head: &Head,
        path: &str,
        bytes: Option<Vec<u8>>,
        author: &Author,
        message: &str,
    ) -> Result<Prepared> {
        let repo = self.repo()?;
        let mut editor = repo.edit_tree(head.tree)?;
        let blob = match &bytes {
            Some(b) => {
                let id = repo.write_blob(b)?.detach();
                editor.upsert(path, gix::objs::tree::EntryKind::Blob, id)?;
                Some(id)
            }
            None => {
                editor.remove(path)?;
                None
            }
        };
        let tree = editor.write()?.detach();
        let signature = signature(author);
        let commit = gix::objs::Commit {
            message: message.into(),
            tree,
            author: signature.clone(),
            committer: signature,
            encoding: None,
            parents: [head.commit].into_iter().collect(),
            extra_headers: Vec::new(),
        };
        let id = repo.write_object(&commit)?.detach();
        let info = crate::build::history::info_at(&repo, id)?;
        Ok(Prepared {
            id,
            parent: head.commit,
            path: path.to_string(),
            bytes,
            blob,
            info,
        })
    }

    /// Put `commit` on the current branch, the work tree and the index following (see the
    /// module's comment); refused, with nothing changed, when the branch moved since the
    /// commit's parent or a lock is held.
    pub fn land(&self, commit: &Prepared, author: &Author) -> Result<()> {
        let repo = self.repo()?;
        let file = self.workdir.join(&commit.path);
        let beside = file.with_file_name(format!(
            ".{}.capdir-write",
            file.file_name().and_then(|n| n.to_str()).unwrap_or("row")
        ));
        // Aside: the new file, and the locks of the branch and of the index.
        if let Some(bytes) = &commit.bytes {
            std::fs::write(&beside, bytes)
                .with_context(|| format!("writing {}", beside.display()))?;
        }
        let discard = || {
            let _ = std::fs::remove_file(&beside);
        };
        let head_edit = RefEdit {
            change: Change::Update {
                log: LogChange {
                    mode: RefLog::AndReference,
                    force_create_reflog: false,
                    message: format!("commit: {}", commit.info.subject).into(),
                },
                expected: PreviousValue::MustExistAndMatch(Target::Object(commit.parent)),
                new: Target::Object(commit.id),
            },
            name: "HEAD".try_into()?,
            deref: true,
        };
        // Another git (a `git status` refreshing the index) holds a lock for moments: wait a
        // little for it, then give up with nothing changed.
        let fail = gix::lock::acquire::Fail::AfterDurationWithBackoff(LOCK_WAIT);
        let branch = match repo.refs.transaction().prepare([head_edit], fail, fail) {
            Ok(t) => t,
            Err(e) => {
                discard();
                return Err(anyhow!("{e}")).context("HEAD's branch cannot be moved");
            }
        };
        let mut index = match repo.open_index() {
            Ok(i) => i,
            Err(e) => {
                discard();
                return Err(anyhow!("{e}")).context("reading the index");
            }
        };
        let index_lock =
            match gix::lock::File::acquire_to_update_resource(index.path(), fail, None, 0) {
                Ok(l) => l,
                Err(e) => {
                    discard();
                    return Err(anyhow!("{e}")).context("the index is locked");
                }
            };
        // The commit point: the branch moves.
        let signature = signature(author);
        if let Err(e) = branch.commit(Some(signature.to_ref(&mut Default::default()))) {
            discard();
            return Err(anyhow!("{e}")).context("moving HEAD's branch");
        }
        let rest = (|| -> Result<()> {
            match &commit.bytes {
                Some(_) => std::fs::rename(&beside, &file)
                    .with_context(|| format!("putting {} in place", file.display()))?,
                None => match std::fs::remove_file(&file) {
                    Ok(()) => {}
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                    Err(e) => return Err(e).context("removing the row's file"),
                },
            }
            #[cfg(test)]
            if tests::FAIL_AFTER_COMMIT.get() {
                bail!("a failure injected past the commit point");
            }
            set_entry(&mut index, &commit.path, commit.blob, &file)?;
            // Buffered: the index is written an entry field at a time.
            let mut lock = std::io::BufWriter::with_capacity(256 * 1024, index_lock);
            index
                .write_to(&mut lock, gix::index::write::Options::default())
                .map_err(|e| anyhow!("{e}"))
                .context("writing the index")?;
            let lock = lock
                .into_inner()
                .map_err(|e| anyhow!("{}", e.error()))
                .context("writing the index")?;
            lock.commit()
                .map_err(|e| anyhow!("{}", e.error))
                .context("putting the index in place")?;
            Ok(())
        })();
        if let Err(e) = rest {
            // Undo: the branch back to the parent, the file as it was.
            self.undo(commit, author);
            discard();
            return Err(e);
        }
        Ok(())
    }

    /// Move the branch back from `commit` to its parent and put the file back as it was at
    /// the parent, after a failure past the commit point.
    fn undo(&self, commit: &Prepared, author: &Author) {
        let Ok(repo) = self.repo() else { return };
        let back = RefEdit {
            change: Change::Update {
                log: LogChange {
                    mode: RefLog::AndReference,
                    force_create_reflog: false,
                    message: "capdir: undo a write that failed".into(),
                },
                expected: PreviousValue::MustExistAndMatch(Target::Object(commit.id)),
                new: Target::Object(commit.parent),
            },
            name: match "HEAD".try_into() {
                Ok(n) => n,
                Err(_) => return,
            },
            deref: true,
        };
        let signature = signature(author);
        if let Err(e) =
            repo.edit_references_as([back], Some(signature.to_ref(&mut Default::default())))
        {
            tracing::error!(error = %e, commit = %commit.id, "could not move the branch back");
        }
        let file = self.workdir.join(&commit.path);
        let before = repo
            .find_commit(commit.parent)
            .ok()
            .and_then(|c| c.tree().ok())
            .and_then(|t| t.lookup_entry_by_path(&commit.path).ok().flatten())
            .and_then(|e| e.object().ok().map(|o| o.data.clone()));
        let _ = match before {
            Some(bytes) => std::fs::write(&file, bytes),
            None => std::fs::remove_file(&file),
        };
    }

    /// Put `commit` on a new branch `name`, leaving the current branch, the work tree and
    /// the index alone.
    pub fn branch(&self, commit: &Prepared, name: &str, author: &Author) -> Result<()> {
        let repo = self.repo()?;
        let edit = RefEdit {
            change: Change::Update {
                log: LogChange {
                    mode: RefLog::AndReference,
                    force_create_reflog: false,
                    message: format!("capdir: propose {}", commit.info.subject).into(),
                },
                expected: PreviousValue::MustNotExist,
                new: Target::Object(commit.id),
            },
            name: format!("refs/heads/{name}").try_into()?,
            deref: false,
        };
        let signature = signature(author);
        repo.edit_references_as([edit], Some(signature.to_ref(&mut Default::default())))
            .map_err(|e| anyhow!("{e}"))
            .with_context(|| format!("creating branch {name}"))?;
        Ok(())
    }

    /// Remove branch `name` if it still points at `commit`.
    pub fn drop_branch(&self, name: &str, commit: ObjectId) -> Result<()> {
        let repo = self.repo()?;
        let edit = RefEdit {
            change: Change::Delete {
                expected: PreviousValue::MustExistAndMatch(Target::Object(commit)),
                log: RefLog::AndReference,
            },
            name: format!("refs/heads/{name}").try_into()?,
            deref: false,
        };
        repo.edit_references_as([edit], None)
            .map_err(|e| anyhow!("{e}"))?;
        Ok(())
    }

    /// Whether the repository has an `origin` remote.
    pub fn has_origin(&self) -> Result<bool> {
        let repo = self.repo()?;
        Ok(repo.config_snapshot().string("remote.origin.url").is_some())
    }

    /// Push branch `name` to `origin` with `git push` (gix cannot push). Never prompts for
    /// credentials; gives up after a minute.
    pub fn push(&self, name: &str) -> Result<()> {
        let refspec = format!("refs/heads/{name}:refs/heads/{name}");
        let mut child = std::process::Command::new("git")
            .arg("-C")
            .arg(&self.workdir)
            .args(["push", "--quiet", "origin", &refspec])
            .env("GIT_TERMINAL_PROMPT", "0")
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .context("running git push")?;
        let deadline = std::time::Instant::now() + PUSH_TIMEOUT;
        let status = loop {
            if let Some(status) = child.try_wait()? {
                break status;
            }
            if std::time::Instant::now() > deadline {
                let _ = child.kill();
                let _ = child.wait();
                bail!("git push did not finish within {PUSH_TIMEOUT:?}");
            }
            std::thread::sleep(Duration::from_millis(10));
        };
        if !status.success() {
            let mut err = String::new();
            if let Some(mut e) = child.stderr.take() {
                use std::io::Read as _;
                let _ = e.read_to_string(&mut err);
            }
            bail!("git push failed ({status}): {}", err.trim());
        }
        Ok(())
    }
}

/// The index's entry for `path`: its blob and the file's stat now, or none.
fn set_entry(
    index: &mut gix::index::File,
    path: &str,
    blob: Option<ObjectId>,
    file: &Path,
) -> Result<()> {
    use gix::index::entry::{Flags, Mode, Stage, Stat};
    let rela: &BStr = path.as_bytes().as_bstr();
    index.remove_entries(|_, p, e| p == rela && e.stage() != Stage::Unconflicted);
    match blob {
        Some(id) => {
            let meta = gix::index::fs::Metadata::from_path_no_follow(file)
                .with_context(|| format!("reading the metadata of {}", file.display()))?;
            let stat = Stat::from_fs(&meta).map_err(|e| anyhow!("{e}"))?;
            match index.entry_mut_by_path_and_stage(rela, Stage::Unconflicted) {
                Some(e) => {
                    e.id = id;
                    e.stat = stat;
                    e.mode = Mode::FILE;
                }
                None => {
                    index.dangerously_push_entry(stat, id, Flags::empty(), Mode::FILE, rela);
                    index.sort_entries();
                }
            }
        }
        None => index.remove_entries(|_, p, _| p == rela),
    }
    // The cached trees no longer match the entries: git computes them again when needed.
    index.remove_tree();
    Ok(())
}

fn signature(author: &Author) -> gix::actor::Signature {
    gix::actor::Signature {
        name: author.name.as_str().into(),
        email: author.email.as_str().into(),
        time: gix::date::Time::now_utc(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::Cell;
    use std::process::Command;

    thread_local! {
        /// Makes `land` fail after the branch moved and the file was put in place, before
        /// the index is written: the one failure no real file system here produces on demand.
        pub(super) static FAIL_AFTER_COMMIT: Cell<bool> = const { Cell::new(false) };
    }

    fn git(dir: &Path, args: &[&str]) -> String {
        let out = Command::new("git")
            .arg("-C")
            .arg(dir)
            .args(["-c", "user.name=t", "-c", "user.email=t@example.com"])
            .args(args)
            .output()
            .expect("git");
        assert!(
            out.status.success(),
            "git {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout)
            .expect("utf8")
            .trim()
            .to_string()
    }

    /// HEAD, the index's entries and every file of the work tree (`.git` aside).
    fn state(dir: &Path) -> (String, String, Vec<(String, Vec<u8>)>) {
        let mut files = Vec::new();
        for entry in std::fs::read_dir(dir.join("catalogue")).expect("read_dir") {
            let path = entry.expect("entry").path();
            files.push((
                path.file_name().unwrap().to_string_lossy().into_owned(),
                std::fs::read(&path).expect("read"),
            ));
        }
        files.sort();
        (
            git(dir, &["rev-parse", "HEAD"]),
            git(dir, &["ls-files", "--stage"]),
            files,
        )
    }

    #[test]
    fn a_failure_past_the_commit_point_moves_everything_back() {
        let dir = tempfile::tempdir().expect("tempdir");
        let root = dir.path();
        git(root, &["init", "-q", "-b", "main"]);
        std::fs::create_dir(root.join("catalogue")).unwrap();
        std::fs::write(root.join("catalogue/OLD_ROW.yaml"), "key: OLD_ROW\n").unwrap();
        git(root, &["add", "."]);
        git(root, &["commit", "-q", "-m", "first"]);
        let catalogue = Catalogue::open(&root.join("catalogue")).expect("open");
        let author = Author {
            name: "writer".into(),
            email: "writer@example.com".into(),
        };
        let before = state(root);
        // An edit, a new row and a removal: each undone after the branch had moved.
        let writes = [
            (
                "catalogue/OLD_ROW.yaml",
                Some(b"key: OLD_ROW\nseq: 2\n".to_vec()),
            ),
            ("catalogue/NEW_ROW.yaml", Some(b"key: NEW_ROW\n".to_vec())),
            ("catalogue/OLD_ROW.yaml", None),
        ];
        for (path, bytes) in writes {
            let head = catalogue.head().expect("head");
            let commit = catalogue
                .prepare(&head, path, bytes, &author, "a write")
                .expect("prepare");
            FAIL_AFTER_COMMIT.set(true);
            let landed = catalogue.land(&commit, &author);
            FAIL_AFTER_COMMIT.set(false);
            let err = landed.expect_err("the injected failure");
            assert!(err.to_string().contains("injected"), "{err:#}");
            assert_eq!(
                state(root),
                before,
                "{path}: HEAD, the index or a file changed"
            );
            let reflog = git(root, &["reflog", "-1", "--format=%gs", "main"]);
            assert_eq!(reflog, "capdir: undo a write that failed", "{path}");
            assert_eq!(git(root, &["status", "--porcelain"]), "", "{path}");
        }
        // Without the failure the same write lands.
        let head = catalogue.head().expect("head");
        let commit = catalogue
            .prepare(
                &head,
                "catalogue/NEW_ROW.yaml",
                Some(b"key: NEW_ROW\n".to_vec()),
                &author,
                "a write",
            )
            .expect("prepare");
        catalogue.land(&commit, &author).expect("land");
        assert_eq!(git(root, &["rev-parse", "HEAD"]), commit.id.to_string());
        assert_eq!(git(root, &["status", "--porcelain"]), "");
    }
}
