//! Row history from Git: for every row file, the commits that added, changed or deleted it,
//! read in ONE walk over the history (not one walk per file).
//!
//! Each commit's catalogue subtree id is compared with its parent's; only when they differ are
//! the two subtrees decoded and merge-joined by file name. Times come from commits, never the
//! clock, so a build of the same commit is the same.

use crate::git;
use anyhow::Result;
use gix::ObjectId;
use serde::Serialize;
use std::collections::{BTreeMap, HashMap};
use std::path::Path;
use std::sync::Arc;

/// One commit, as history shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct CommitInfo {
    pub sha: String,
    pub author: String,
    /// Committer time, RFC 3339 UTC.
    pub date: String,
    pub subject: String,
    /// `Replaced-by: KEY` from the message, if any.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub replaced_by: Option<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum ChangeKind {
    Added,
    Modified,
    Deleted,
}

impl ChangeKind {
    pub fn as_str(self) -> &'static str {
        match self {
            ChangeKind::Added => "added",
            ChangeKind::Modified => "modified",
            ChangeKind::Deleted => "deleted",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Change {
    pub kind: ChangeKind,
    #[serde(flatten)]
    pub commit: Arc<CommitInfo>,
}

/// The history of a catalogue directory.
#[derive(Debug, Clone, Default)]
pub struct History {
    /// Row file name (`NOW.yaml`) → its changes, newest first.
    pub files: BTreeMap<String, Vec<Change>>,
    /// The commit the work tree is at.
    pub head: Option<Arc<CommitInfo>>,
    /// A shallow clone: the oldest commits are missing, so `created_at` may be too late.
    pub partial: bool,
    /// Why there is no history, when there is none (not a Git repository, no commits).
    pub missing: Option<String>,
    pub commits_walked: usize,
}

impl History {
    pub fn of(&self, file_name: &str) -> &[Change] {
        self.files.get(file_name).map(Vec::as_slice).unwrap_or(&[])
    }

    /// The first commit that added the file (the oldest change).
    pub fn created_at(&self, file_name: &str) -> Option<&str> {
        self.of(file_name).last().map(|c| c.commit.date.as_str())
    }

    /// The last commit that changed it.
    pub fn updated_at(&self, file_name: &str) -> Option<&str> {
        self.of(file_name).first().map(|c| c.commit.date.as_str())
    }
}

fn rfc3339(seconds: i64) -> String {
    chrono::DateTime::from_timestamp(seconds, 0)
        .map(|d| d.to_rfc3339_opts(chrono::SecondsFormat::Secs, true))
        .unwrap_or_default()
}

fn replaced_by(message: &str) -> Option<String> {
    message.lines().find_map(|l| {
        let rest = l.trim().strip_prefix("Replaced-by:")?;
        let key = rest.trim();
        crate::row::is_valid_key(key).then(|| key.to_string())
    })
}

/// Read the history of catalogue directory `dir`. Outside Git, an empty history saying why.
pub fn read(dir: &Path) -> History {
    match walk(dir) {
        Ok(h) => h,
        Err(e) => History {
            missing: Some(format!("{e:#}")),
            ..Default::default()
        },
    }
}

type Entries = Vec<(String, ObjectId)>;

struct Walker<'r> {
    repo: &'r gix::Repository,
    rel: std::path::PathBuf,
    subtree_of: HashMap<ObjectId, Option<ObjectId>>,
    entries_of: HashMap<ObjectId, Arc<Entries>>,
}

impl Walker<'_> {
    /// The catalogue subtree id at commit `id`; `Err` when the commit is not in the repository
    /// (the boundary of a shallow clone).
    fn subtree(&mut self, id: ObjectId) -> Result<Option<ObjectId>> {
        if let Some(s) = self.subtree_of.get(&id) {
            return Ok(*s);
        }
        let commit = self.repo.find_object(id)?.try_into_commit()?;
        let tree = commit.tree()?;
        let sub = if self.rel.as_os_str().is_empty() {
            Some(tree.id)
        } else {
            tree.lookup_entry_by_path(&self.rel)?
                .filter(|e| e.mode().is_tree())
                .map(|e| e.object_id())
        };
        self.subtree_of.insert(id, sub);
        Ok(sub)
    }

    fn entries(&mut self, tree: Option<ObjectId>) -> Result<Arc<Entries>> {
        let Some(tree) = tree else {
            return Ok(Arc::new(Vec::new()));
        };
        if let Some(e) = self.entries_of.get(&tree) {
            return Ok(e.clone());
        }
        let t = self.repo.find_tree(tree)?;
        let mut entries: Entries = t
            .decode()?
            .entries
            .iter()
            .filter(|e| e.mode.is_blob())
            .map(|e| (e.filename.to_string(), e.oid.to_owned()))
            .filter(|(n, _)| crate::catalogue::is_row_file(n))
            .collect();
        entries.sort();
        let entries = Arc::new(entries);
        // Children are walked just before their parents: a few recent trees are all that
        // is ever looked up again.
        if self.entries_of.len() > 8 {
            self.entries_of.clear();
        }
        self.entries_of.insert(tree, entries.clone());
        Ok(entries)
    }
}

/// Files whose blob differs between `now` and `before` (merge-join by name).
fn diff(now: &Entries, before: &Entries, out: &mut Vec<(String, ChangeKind)>) {
    let (mut i, mut j) = (0, 0);
    while i < now.len() || j < before.len() {
        match (now.get(i), before.get(j)) {
            (Some(a), Some(b)) if a.0 == b.0 => {
                if a.1 != b.1 {
                    out.push((a.0.clone(), ChangeKind::Modified));
                }
                i += 1;
                j += 1;
            }
            (Some(a), Some(b)) if a.0 < b.0 => {
                out.push((a.0.clone(), ChangeKind::Added));
                i += 1;
            }
            (Some(_), Some(b)) => {
                out.push((b.0.clone(), ChangeKind::Deleted));
                j += 1;
            }
            (Some(a), None) => {
                out.push((a.0.clone(), ChangeKind::Added));
                i += 1;
            }
            (None, Some(b)) => {
                out.push((b.0.clone(), ChangeKind::Deleted));
                j += 1;
            }
            (None, None) => break,
        }
    }
}

fn walk(dir: &Path) -> Result<History> {
    let (repo, rel) = git::locate(dir)?;
    let head = repo
        .head_id()
        .map_err(|e| anyhow::anyhow!("no commits yet: {e}"))?;
    let mut history = History {
        partial: repo.is_shallow().unwrap_or(false),
        ..Default::default()
    };
    let mut w = Walker {
        repo: &repo,
        rel,
        subtree_of: HashMap::new(),
        entries_of: HashMap::new(),
    };
    let mut changed = Vec::new();
    for info in repo.rev_walk([head.detach()]).all()? {
        let info = info?;
        history.commits_walked += 1;
        let sub = w.subtree(info.id)?;
        let mut parents = Vec::new();
        for p in info.parent_ids() {
            match w.subtree(p.detach()) {
                Ok(s) => parents.push(s),
                Err(_) => history.partial = true,
            }
        }
        if parents.contains(&sub) {
            continue;
        }
        changed.clear();
        let now = w.entries(sub)?;
        let first = w.entries(parents.first().copied().flatten())?;
        diff(&now, &first, &mut changed);
        // A merge reports only what differs from every parent: what the merge itself did.
        for p in parents.iter().skip(1) {
            let other = w.entries(*p)?;
            let mut against_other = Vec::new();
            diff(&now, &other, &mut against_other);
            changed.retain(|c| against_other.contains(c));
        }
        if changed.is_empty() {
            continue;
        }
        let commit = info.object()?;
        let message = commit.message_raw_sloppy().to_string();
        let info = Arc::new(CommitInfo {
            sha: info.id.to_string(),
            author: commit
                .author()
                .map(|a| a.name.to_string())
                .unwrap_or_default(),
            date: rfc3339(commit.time().map(|t| t.seconds).unwrap_or(0)),
            subject: message.lines().next().unwrap_or("").trim().to_string(),
            replaced_by: replaced_by(&message),
        });
        for (name, kind) in changed.drain(..) {
            history.files.entry(name).or_default().push(Change {
                kind,
                commit: info.clone(),
            });
        }
    }
    // The walk is newest first by commit time; keep each file's list in that order even
    // where clocks disagree with topology.
    for changes in history.files.values_mut() {
        changes.sort_by(|a, b| b.commit.date.cmp(&a.commit.date));
    }
    let head_commit = repo.find_object(head.detach())?.try_into_commit()?;
    let message = head_commit.message_raw_sloppy().to_string();
    history.head = Some(Arc::new(CommitInfo {
        sha: head.to_string(),
        author: head_commit
            .author()
            .map(|a| a.name.to_string())
            .unwrap_or_default(),
        date: rfc3339(head_commit.time().map(|t| t.seconds).unwrap_or(0)),
        subject: message.lines().next().unwrap_or("").trim().to_string(),
        replaced_by: None,
    }));
    Ok(history)
}
