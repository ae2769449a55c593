//! Row history from Git: for every row file, the commits that added, changed or deleted it,
//! read in ONE walk over the history (not one walk per file).
//!
//! Each commit's catalogue subtree id is compared with its parent's; only when they differ are
//! the two subtrees read (mostly by applying their pack delta onto a tree already held, see
//! `history/pack.rs`) and merge-joined by file name, from the first byte where they differ.
//! Times come from commits, never the clock, so a build of the same commit is the same.

mod pack;
mod trees;

use crate::build::git;
use anyhow::Result;
use gix::ObjectId;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, HashMap};
use std::path::Path;
use std::sync::Arc;
use trees::{Marks, diff};
#[cfg(test)]
use trees::{common_prefix, common_suffix, diff_whole, entries_between};

/// One commit, as history shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
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

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
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

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
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
    /// Of those, how many a [`SpareWalker`] walked.
    pub commits_helped: usize,
    /// Trees read by applying their pack delta onto a tree the walk held (the fast path).
    pub trees_from_deltas: usize,
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

/// What a build keeps of the history it read, so the next build walks only newer commits:
/// each commit once, and each row file's changes as (how, which commit). Version 1 kept every
/// change with its commit written out in full (through `serde(flatten)`, which buffers each
/// one): at 10,000 rows, reading it back was a third of the history's share of a rebuild.
#[derive(Debug, Deserialize)]
struct Cache {
    version: u32,
    /// The catalogue directory, relative to the work tree.
    rel: String,
    head: String,
    partial: bool,
    commits: Vec<Arc<CommitInfo>>,
    /// Row file name → its changes, newest first: how, and the place of its commit in `commits`.
    files: BTreeMap<String, Vec<(ChangeKind, u32)>>,
}

/// [`Cache`] as it is written, borrowing the history.
#[derive(Serialize)]
struct CacheOut<'a> {
    version: u32,
    rel: String,
    head: &'a str,
    partial: bool,
    commits: Vec<&'a CommitInfo>,
    files: BTreeMap<&'a str, Vec<(ChangeKind, u32)>>,
}

impl<'a> CacheOut<'a> {
    fn of(history: &'a History, head: &'a str, rel: String) -> CacheOut<'a> {
        let mut place: HashMap<*const CommitInfo, u32> = HashMap::new();
        let mut commits: Vec<&CommitInfo> = Vec::new();
        let files = history
            .files
            .iter()
            .map(|(name, changes)| {
                let changes = changes
                    .iter()
                    .map(|c| {
                        let at = *place.entry(Arc::as_ptr(&c.commit)).or_insert_with(|| {
                            commits.push(&c.commit);
                            u32::try_from(commits.len() - 1).unwrap_or(u32::MAX)
                        });
                        (c.kind, at)
                    })
                    .collect();
                (name.as_str(), changes)
            })
            .collect();
        CacheOut {
            version: CACHE_VERSION,
            rel,
            head,
            partial: history.partial,
            commits,
            files,
        }
    }
}

/// A saved history a walk can start from.
struct Known {
    rel: String,
    head: String,
    partial: bool,
    files: BTreeMap<String, Vec<Change>>,
}

impl Cache {
    /// The saved history, or none when a change names a commit the cache does not hold.
    fn known(self) -> Option<Known> {
        if self.version != CACHE_VERSION {
            return None;
        }
        let commits = self.commits;
        let files = self
            .files
            .into_iter()
            .map(|(name, changes)| {
                let changes = changes
                    .into_iter()
                    .map(|(kind, at)| {
                        let commit = commits.get(usize::try_from(at).ok()?)?.clone();
                        Some(Change { kind, commit })
                    })
                    .collect::<Option<Vec<Change>>>()?;
                Some((name, changes))
            })
            .collect::<Option<_>>()?;
        Some(Known {
            rel: self.rel,
            head: self.head,
            partial: self.partial,
            files,
        })
    }
}

const CACHE_VERSION: u32 = 2;

/// Read the history of catalogue directory `dir`. Outside Git, an empty history saying why.
pub fn read(dir: &Path) -> History {
    read_cached(dir, None, crate::cores(), None)
}

/// What history shows of the commit the work tree of `dir` is at; none outside Git or
/// before the first commit.
pub fn head(dir: &Path) -> Option<CommitInfo> {
    let (repo, _) = git::locate(dir).ok()?;
    info_at(&repo, repo.head_id().ok()?.detach()).ok()
}

/// Like [`read`], starting from the history a previous build saved at `cache` when its head
/// is an ancestor of the current one: only the commits since are walked. `walkers` threads
/// walk at once: a build, which checks and indexes the rows meanwhile, gives the walk half
/// the cores, and through `helper` lends it more when it has nothing else to do.
pub fn read_cached(
    dir: &Path,
    cache: Option<&Path>,
    walkers: usize,
    helper: Option<&SpareWalker>,
) -> History {
    let _retire = helper.map(Retire);
    let known = cache
        .and_then(|p| std::fs::read(p).ok())
        .and_then(|b| serde_json::from_slice::<Cache>(&b).ok())
        .and_then(Cache::known);
    match walk(dir, known, walkers, helper) {
        Ok(h) => h,
        Err(e) => History {
            missing: Some(format!("{e:#}")),
            ..Default::default()
        },
    }
}

/// A raw tree object: `<mode> <name>\0<20-byte id>` entries, sorted by name.
type RawTree = Arc<Vec<u8>>;

struct Walker<'r> {
    repo: &'r gix::Repository,
    rel: std::path::PathBuf,
    subtree_of: HashMap<ObjectId, Option<ObjectId>>,
    /// What history shows of the commits read for their subtree, so none is read twice.
    info_of: HashMap<ObjectId, Arc<CommitInfo>>,
    packs: pack::Packs,
    /// The trees held: the last two read (a commit's and its parent's), and those a tree
    /// still to be read is a delta on.
    trees: HashMap<ObjectId, RawTree>,
    held_bytes: usize,
    recent: std::collections::VecDeque<ObjectId>,
    /// Trees still to be read that are stored as a delta on another tree of the walk: the
    /// delta and its base, planned before the walk.
    deltas: HashMap<ObjectId, (pack::Delta, ObjectId)>,
    /// How many trees still to be read are deltas on this one.
    uses: HashMap<ObjectId, usize>,
    /// Entry marks of held trees, from their last diff.
    marks: HashMap<ObjectId, Marks>,
    /// Held trees read from a delta: the base, and the bytes the delta's copies say the two
    /// share at either end.
    shared: HashMap<ObjectId, (ObjectId, pack::Shared)>,
    /// Buffers of evicted trees, reused: a fresh 400 KB buffer per lookup costs page faults.
    spare: Vec<Vec<u8>>,
    from_deltas: usize,
}

impl<'r> Walker<'r> {
    fn new(repo: &'r gix::Repository, rel: std::path::PathBuf) -> Walker<'r> {
        Walker {
            repo,
            rel,
            subtree_of: HashMap::new(),
            info_of: HashMap::new(),
            packs: pack::Packs::open(repo),
            trees: HashMap::new(),
            held_bytes: 0,
            recent: Default::default(),
            deltas: HashMap::new(),
            uses: HashMap::new(),
            marks: HashMap::new(),
            shared: HashMap::new(),
            spare: Vec::new(),
            from_deltas: 0,
        }
    }

    /// The catalogue subtree id at commit `id`; `Err` when the commit is not in the repository
    /// (the boundary of a shallow clone).
    fn subtree(&mut self, id: ObjectId) -> Result<Option<ObjectId>> {
        if let Some(s) = self.subtree_of.get(&id) {
            return Ok(*s);
        }
        let commit = self.repo.find_object(id)?.try_into_commit()?;
        self.info_of.insert(id, Arc::new(commit_info(&commit)));
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

    /// Plan the reads of `trees` (in the order the walk will read them): which are stored
    /// as a delta on another of them, and so which must be held until their last use as a
    /// base. Git gives one base many deltas (a star, not a chain), so few are held at once.
    fn plan(&mut self, trees: &[ObjectId]) -> Result<()> {
        // Trees met so far, by where they are in the packs: a base must be read before the
        // tree that is a delta on it.
        let mut read = std::collections::HashSet::new();
        let mut at: HashMap<pack::Place, ObjectId> = HashMap::new();
        for t in trees {
            if !read.insert(*t) {
                continue;
            }
            let Some(place) = self.packs.locate(t) else {
                continue;
            };
            at.insert(place, *t);
            let Some((delta, base)) = self.packs.delta_at(t, place)? else {
                continue;
            };
            let base = match base {
                pack::Base::Id(b) if read.contains(&b) => b,
                pack::Base::At(place) if at.contains_key(&place) => at[&place],
                _ => continue,
            };
            *self.uses.entry(base).or_default() += 1;
            self.deltas.insert(*t, (delta, base));
        }
        Ok(())
    }

    /// The raw tree `id`: applied straight from its pack delta when the walker holds the
    /// delta's base, else looked up through gix.
    fn tree(&mut self, id: Option<ObjectId>) -> Result<RawTree> {
        let Some(id) = id else {
            return Ok(Arc::new(Vec::new()));
        };
        if let Some(t) = self.trees.get(&id) {
            return Ok(t.clone());
        }
        let mut buf = self.spare.pop().unwrap_or_default();
        let planned = self.deltas.remove(&id);
        let base = planned
            .as_ref()
            .and_then(|(_, b)| Some(self.trees.get(b)?.clone()));
        match (&planned, base) {
            (Some((delta, base_id)), Some(base)) => {
                let shared = self.packs.apply(delta, &base, &mut buf)?;
                self.shared.insert(id, (*base_id, shared));
                self.from_deltas += 1;
            }
            _ => match gix::objs::Find::try_find(&self.repo.objects, &id, &mut buf)? {
                Some(d) if d.kind == gix::object::Kind::Tree => {}
                _ => anyhow::bail!("tree {id} is missing from the repository"),
            },
        }
        if let Some((_, b)) = planned {
            self.release(b);
        }
        let data = Arc::new(buf);
        self.held_bytes += data.len();
        self.trees.insert(id, data.clone());
        self.recent.push_back(id);
        if self.recent.len() > 2 {
            let old = self.recent.pop_front().expect("three recent trees");
            self.release_if_unused(old);
        }
        Ok(data)
    }

    /// Diff the trees `now` and `before` (both read), keeping the marks it finds.
    fn diff(
        &mut self,
        (now_id, now): (Option<ObjectId>, &[u8]),
        (before_id, before): (Option<ObjectId>, &[u8]),
        out: &mut Vec<(String, ChangeKind)>,
    ) {
        let known = |id: Option<ObjectId>| id.and_then(|i| self.marks.get(&i)).map(Vec::as_slice);
        // When one tree is a delta on the other, its copies name bytes the two share.
        let delta_on = |t: Option<ObjectId>, base: Option<ObjectId>| {
            let (on, shared) = self.shared.get(&t?)?;
            (Some(*on) == base).then_some(*shared)
        };
        let shared = delta_on(now_id, before_id)
            .or_else(|| delta_on(before_id, now_id))
            .unwrap_or_default();
        let (a, b) = diff(now, before, (known(now_id), known(before_id)), shared, out);
        for (id, m) in [(now_id, a), (before_id, b)] {
            if let Some(id) = id.filter(|i| self.trees.contains_key(i)) {
                self.marks.insert(id, m);
            }
        }
    }

    /// One planned use of `base` is done.
    fn release(&mut self, base: ObjectId) {
        if let Some(n) = self.uses.get_mut(&base) {
            *n -= 1;
            if *n == 0 {
                self.uses.remove(&base);
                self.release_if_unused(base);
            }
        }
    }

    /// Let tree `id` go unless it is recent, or a base still to be used (and the held trees
    /// are within their budget).
    fn release_if_unused(&mut self, id: ObjectId) {
        let wanted = self.uses.contains_key(&id) && self.held_bytes <= HELD_TREE_BYTES;
        if wanted || self.recent.contains(&id) {
            return;
        }
        self.marks.remove(&id);
        self.shared.remove(&id);
        if let Some(t) = self.trees.remove(&id) {
            self.held_bytes -= t.len();
            if self.spare.len() < 4 {
                self.spare.extend(Arc::try_unwrap(t).ok());
            }
        }
    }
}

/// Save what [`read_cached`] can start from next time.
pub fn save_cache(history: &History, dir: &Path, path: &Path) -> Result<()> {
    let Some(head) = &history.head else {
        return Ok(());
    };
    let (_, rel) = git::locate(dir)?;
    let cache = CacheOut::of(history, &head.sha, rel.to_string_lossy().into_owned());
    std::fs::write(path, serde_json::to_vec(&cache)?)?;
    Ok(())
}

/// The delta-base cache of each history walker.
const PACK_CACHE_BYTES: usize = 192 * 1024 * 1024;
/// The bytes of trees a walker holds for later deltas, at most; past it, those trees are
/// let go and their deltas resolved by gix.
const HELD_TREE_BYTES: usize = 512 * 1024 * 1024;
/// Fewer commits than this per walker are walked by one thread.
const MIN_SPAN: usize = 256;
/// Walkers at once, at most (each holds its own caches).
const MAX_SPANS: usize = 4;

/// A commit and its parents.
type Link = (ObjectId, Vec<ObjectId>);

/// The row files one commit changed, and how.
type Changed = Vec<(String, ChangeKind)>;

/// What one walker found: per commit that changed rows, its place in the walk's commits
/// (oldest first), the commit and the changes.
struct Span {
    partial: bool,
    trees_from_deltas: usize,
    changes: Vec<(usize, Arc<CommitInfo>, Changed)>,
}

/// Lets a thread with nothing else to do take part of a history walk under way: a build,
/// once it has checked and indexed the rows, lends its thread to the walk rather than wait
/// for it (see [`SpareWalker::help`]).
#[derive(Clone, Default)]
pub struct SpareWalker(Arc<SpareState>);

#[derive(Default)]
struct SpareState {
    /// The walk under way, once its commits are listed; `done` when it no longer takes help.
    job: std::sync::Mutex<(Option<Arc<Job>>, bool)>,
    changed: std::sync::Condvar,
}

/// A walk's commits, and which of them each walker still has to walk.
struct Job {
    dir: std::path::PathBuf,
    rel: std::path::PathBuf,
    commits: Arc<Vec<Link>>,
    newest_first: bool,
    state: std::sync::Mutex<JobState>,
    finished: std::sync::Condvar,
}

#[derive(Default)]
struct JobState {
    /// What each span's walker still has to walk.
    claims: Vec<Claim>,
    /// Helpers walking a part they took, and what they found; `closed` once the walk has
    /// collected what they found, when nothing more may be taken.
    helping: usize,
    found: Vec<Result<Span>>,
    closed: bool,
    /// Commits taken by helpers, in all.
    taken: usize,
}

/// A span (`len` commits from `start` of the walk's commits) and, of its steps in walk
/// order, the next its walker takes and the end of what is still its own.
#[derive(Clone, Copy)]
struct Claim {
    start: usize,
    len: usize,
    next: usize,
    end: usize,
}

/// Fewer commits than this left to a walker are not split with a helper.
const MIN_TAKEN: usize = 128;

impl SpareWalker {
    /// Take about half of what the busiest walker of the walk has left and walk it here;
    /// return when that is done, or at once when the walk has finished or has too little
    /// left. Waits for the walk to list its commits if it has not yet.
    pub fn help(&self) {
        let job = {
            let mut state = self.0.job.lock().unwrap_or_else(|e| e.into_inner());
            loop {
                match &*state {
                    (Some(job), false) => break job.clone(),
                    (_, true) => return,
                    (None, false) => {
                        state = self
                            .0
                            .changed
                            .wait(state)
                            .unwrap_or_else(|e| e.into_inner())
                    }
                }
            }
        };
        let Some(part) = job.take() else {
            return;
        };
        // Caught, so that a panic here is the walk's error and the walk never waits on a
        // helper that is gone.
        let span = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            let chunk = &job.commits[part.clone()];
            let (rel, newest_first) = (job.rel.clone(), job.newest_first);
            open_for_walk(&job.dir)
                .and_then(|repo| walk_span(&repo, rel, chunk, part.start, newest_first, None))
        }))
        .unwrap_or_else(|_| Err(anyhow::anyhow!("a history helper panicked")));
        let mut state = job.state.lock().unwrap_or_else(|e| e.into_inner());
        state.found.push(span);
        state.helping -= 1;
        job.finished.notify_all();
    }

    fn post(&self, job: Option<Arc<Job>>, done: bool) {
        *self.0.job.lock().unwrap_or_else(|e| e.into_inner()) = (job, done);
        self.0.changed.notify_all();
    }
}

/// Says the walk takes no more help when dropped, even by a panic: a helper never waits for
/// a walk that has ended.
struct Retire<'h>(&'h SpareWalker);

impl Drop for Retire<'_> {
    fn drop(&mut self) {
        self.0.post(None, true);
    }
}

impl Job {
    /// Take the later half (by the work it is likely to be) of the steps the busiest walker
    /// has left: the commits of that part, in `commits`.
    fn take(&self) -> Option<std::ops::Range<usize>> {
        let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        if state.closed {
            return None;
        }
        let claim = state
            .claims
            .iter_mut()
            .max_by_key(|c| c.end.saturating_sub(c.next))?;
        let c = *claim;
        if c.end.saturating_sub(c.next) < MIN_TAKEN {
            return None;
        }
        // A catalogue grows, so a commit's tree, and the work of diffing it, grows with its
        // place in history: split the steps left where that weight halves.
        let place = |step: usize| -> usize {
            if self.newest_first {
                c.start + c.len - 1 - step
            } else {
                c.start + step
            }
        };
        let weight = |step: usize| (place(step) + self.commits.len() / 8 + 1) as u128;
        let total: u128 = (c.next..c.end).map(weight).sum();
        let (mut cut, mut sum) = (c.next, 0);
        while cut < c.end && sum * 2 < total {
            sum += weight(cut);
            cut += 1;
        }
        if c.end - cut < MIN_TAKEN / 2 {
            return None;
        }
        let (from, to) = (cut, c.end);
        claim.end = cut;
        let range = if self.newest_first {
            place(to - 1)..place(from) + 1
        } else {
            place(from)..place(to - 1) + 1
        };
        state.helping += 1;
        state.taken += range.len();
        Some(range)
    }

    /// Whether the walker of span `k` still owns step `step`; if so it is taken.
    fn claim(&self, k: usize, step: usize) -> bool {
        let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        let c = &mut state.claims[k];
        if step >= c.end {
            return false;
        }
        c.next = step + 1;
        true
    }
}

/// A repository handle for one walker thread, with its own delta-base cache.
fn open_for_walk(dir: &Path) -> Result<gix::Repository> {
    let (mut repo, _) = git::locate(dir)?;
    // No object cache: the walker keeps the few trees it looks at again, and copying every
    // half-megabyte tree into a cache it never hits cost a seventh of the walk.
    repo.object_cache_size(0);
    // Trees whose delta base the walker does not hold are resolved by gix through its cache
    // of decoded delta bases: a lookup is then mostly one delta applied to a cached base.
    repo.objects.set_pack_cache(|| {
        Box::new(gix::odb::pack::cache::lru::MemoryCappedHashmap::new(
            PACK_CACHE_BYTES,
        ))
    });
    Ok(repo)
}

/// Walk consecutive commits, oldest first (or newest first), and name the row files each one
/// changed.
///
/// `commits` start at `start` of the walk's commits. With `claim` (the job and this span's
/// place in it), each step is claimed before it is walked: a helper may have taken the rest.
fn walk_span(
    repo: &gix::Repository,
    rel: std::path::PathBuf,
    commits: &[Link],
    start: usize,
    newest_first: bool,
    claim: Option<(&Job, usize)>,
) -> Result<Span> {
    let mut w = Walker::new(repo, rel);
    let mut span = Span {
        partial: false,
        trees_from_deltas: 0,
        changes: Vec::new(),
    };
    // Each commit with its step in the walk and its place in the walk's commits.
    let order: Vec<(usize, usize, &Link)> = if newest_first {
        let places = (start..start + commits.len()).rev();
        places
            .zip(commits.iter().rev())
            .enumerate()
            .map(|(i, (at, l))| (i, at, l))
            .collect()
    } else {
        let places = start..start + commits.len();
        places
            .zip(commits)
            .enumerate()
            .map(|(i, (at, l))| (i, at, l))
            .collect()
    };
    // First the commits' catalogue trees, in the order they will be read, and a plan of
    // which deltas go onto which of them.
    let mut steps = Vec::with_capacity(order.len());
    let mut reads = Vec::new();
    for (step, at, (id, parent_ids)) in order {
        let sub = w.subtree(*id)?;
        let mut parents = Vec::new();
        for p in parent_ids {
            match w.subtree(*p) {
                Ok(s) => parents.push(s),
                Err(_) => span.partial = true,
            }
        }
        if parents.contains(&sub) {
            continue;
        }
        let first = parents.first().copied().flatten();
        reads.extend(
            first
                .into_iter()
                .chain(sub)
                .chain(parents.iter().skip(1).flatten().copied()),
        );
        steps.push((step, at, *id, sub, parents));
    }
    w.plan(&reads)?;
    let mut changed = Vec::new();
    for (step, at, id, sub, parents) in steps {
        if let Some((job, k)) = claim
            && !job.claim(k, step)
        {
            break;
        }
        changed.clear();
        let first_id = parents.first().copied().flatten();
        let first = w.tree(first_id)?;
        let now = w.tree(sub)?;
        w.diff((sub, &now), (first_id, &first), &mut changed);
        // A merge reports only what differs from every parent: what the merge itself did.
        for p in parents.iter().skip(1) {
            let other = w.tree(*p)?;
            let mut against_other = Vec::new();
            w.diff((sub, &now), (*p, &other), &mut against_other);
            changed.retain(|c| against_other.contains(c));
        }
        if changed.is_empty() {
            continue;
        }
        let info = match w.info_of.get(&id) {
            Some(info) => info.clone(),
            None => Arc::new(info_at(repo, id)?),
        };
        span.changes.push((at, info, std::mem::take(&mut changed)));
    }
    span.trees_from_deltas = w.from_deltas;
    Ok(span)
}

fn walk(
    dir: &Path,
    known: Option<Known>,
    walkers: usize,
    helper: Option<&SpareWalker>,
) -> Result<History> {
    let (repo, rel) = git::locate(dir)?;
    let head = repo
        .head_id()
        .map_err(|e| anyhow::anyhow!("no commits yet: {e}"))?;
    let mut history = History {
        partial: repo.is_shallow().unwrap_or(false),
        ..Default::default()
    };
    let known = usable(&repo, head.detach(), &rel, known);
    let hidden: Vec<ObjectId> = known.iter().map(|(id, _)| *id).collect();
    // In commit order, oldest first; walked in the direction the pack was written (see
    // `packed_newest_first`), so that each tree's delta base has been read before it.
    let mut commits = repo
        .rev_walk([head.detach()])
        .with_hidden(hidden)
        .all()?
        .map(|info| info.map(|i| (i.id, i.parent_ids().map(|p| p.detach()).collect())))
        .collect::<Result<Vec<Link>, _>>()?;
    commits.reverse();
    history.commits_walked = commits.len();
    // The commits are split into consecutive spans walked at once, one per walker; each span
    // pays one delta chain at its start (and, where the pack made deltas across the cut, a
    // few more), then runs like the whole walk would.
    let cuts = span_cuts(commits.len(), walkers);
    let newest_first = packed_newest_first(&repo, &rel, &commits);
    let job = Arc::new(Job {
        dir: dir.to_path_buf(),
        rel: rel.clone(),
        commits: Arc::new(commits),
        newest_first,
        state: std::sync::Mutex::new(JobState {
            claims: cuts
                .windows(2)
                .map(|w| Claim {
                    start: w[0],
                    len: w[1] - w[0],
                    next: 0,
                    end: w[1] - w[0],
                })
                .collect(),
            ..Default::default()
        }),
        finished: Default::default(),
    });
    if let Some(h) = helper {
        h.post(Some(job.clone()), false);
    }
    // Each walker opens the repository itself: gix's handles are not shared across threads
    // in this build (no `parallel` feature).
    let mut walked: Vec<Result<Span>> = std::thread::scope(|s| {
        let handles: Vec<_> = cuts
            .windows(2)
            .enumerate()
            .map(|(k, w)| {
                let (rel, job) = (rel.clone(), &*job);
                let chunk = &job.commits[w[0]..w[1]];
                let claim = Some((job, k));
                s.spawn(move || {
                    walk_span(&open_for_walk(dir)?, rel, chunk, w[0], newest_first, claim)
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| {
                h.join()
                    .unwrap_or_else(|_| Err(anyhow::anyhow!("a history walker panicked")))
            })
            .collect()
    });
    // No more help; wait for the parts helpers took.
    if let Some(h) = helper {
        h.post(None, true);
    }
    {
        let mut state = job.state.lock().unwrap_or_else(|e| e.into_inner());
        while state.helping > 0 {
            state = job.finished.wait(state).unwrap_or_else(|e| e.into_inner());
        }
        state.closed = true;
        history.commits_helped = state.taken;
        walked.append(&mut state.found);
    }
    gather(&mut history, walked, known.map(|(_, cache)| cache))?;
    history.head = Some(Arc::new(info_at(&repo, head.detach())?));
    Ok(history)
}

/// A saved history, when it is usable: of the same directory, and its head an ancestor of
/// ours (no rewritten history); then only newer commits are walked.
fn usable(
    repo: &gix::Repository,
    head: ObjectId,
    rel: &Path,
    known: Option<Known>,
) -> Option<(ObjectId, Known)> {
    let c = known.filter(|c| c.rel == rel.to_string_lossy())?;
    let id = ObjectId::from_hex(c.head.as_bytes()).ok()?;
    let reachable = repo
        .rev_walk([head])
        .all()
        .map(|walk| walk.filter_map(|i| i.ok()).any(|i| i.id == id))
        .unwrap_or(false);
    reachable.then_some((id, c))
}

/// Where the commits are cut into spans, one per walker (one for a short history). A
/// catalogue grows, so later trees are larger: cut where the running sum of tree sizes, taken
/// as growing with the commit's position, splits evenly (at n·√(k/spans)).
fn span_cuts(n: usize, walkers: usize) -> Vec<usize> {
    let spans = if n < MIN_SPAN * 2 {
        1
    } else {
        walkers.clamp(1, MAX_SPANS)
    };
    (0..=spans)
        .map(|k| ((n as f64) * (k as f64 / spans as f64).sqrt()).round() as usize)
        .map(|c| c.min(n))
        .collect()
}

/// The spans walked into the history's lists of changes, the saved history's after them.
fn gather(history: &mut History, walked: Vec<Result<Span>>, known: Option<Known>) -> Result<()> {
    // Newest commit first, whichever walker found it, so that commits of the same second
    // keep one order however the walk was split.
    let mut found = Vec::new();
    for span in walked {
        let span = span?;
        history.partial |= span.partial;
        history.trees_from_deltas += span.trees_from_deltas;
        found.extend(span.changes);
    }
    found.sort_unstable_by_key(|(at, _, _)| std::cmp::Reverse(*at));
    for (_, info, changed) in found {
        for (name, kind) in changed {
            history.files.entry(name).or_default().push(Change {
                kind,
                commit: info.clone(),
            });
        }
    }
    if let Some(cache) = known {
        history.partial |= cache.partial;
        for (name, older) in cache.files {
            history.files.entry(name).or_default().extend(older);
        }
    }
    // The walk is newest first by commit time; keep each file's list in that order even
    // where clocks disagree with topology.
    for changes in history.files.values_mut() {
        changes.sort_by(|a, b| b.commit.date.cmp(&a.commit.date));
    }
    Ok(())
}

/// Whether the pack was written newest first, as `git repack` and clones write them: then
/// trees are stored as deltas on newer trees, and a walk from new to old has each base in
/// hand when it needs it (the other way, every lookup replays a chain of up to 50 deltas).
/// Judged on where a sample of commits' catalogue trees and their parents' sit in the pack.
fn packed_newest_first(repo: &gix::Repository, rel: &Path, commits: &[Link]) -> bool {
    let mut w = Walker::new(repo, rel.to_path_buf());
    let (mut newer_first, mut older_first) = (0, 0);
    for (id, parents) in commits.iter().step_by((commits.len() / 64).max(1)) {
        let [parent] = parents.as_slice() else {
            continue;
        };
        let (Ok(Some(now)), Ok(Some(before))) = (w.subtree(*id), w.subtree(*parent)) else {
            continue;
        };
        match (w.packs.locate(&now), w.packs.locate(&before)) {
            (Some((a, x)), Some((b, y))) if a == b && x < y => newer_first += 1,
            (Some((a, x)), Some((b, y))) if a == b && x > y => older_first += 1,
            _ => {}
        }
    }
    newer_first > older_first
}

/// What history shows of commit `id`, read from the repository.
pub fn info_at(repo: &gix::Repository, id: ObjectId) -> Result<CommitInfo> {
    Ok(commit_info(&repo.find_object(id)?.try_into_commit()?))
}

/// What history shows of a commit: id, author, committer time, subject, `Replaced-by:`.
fn commit_info(commit: &gix::Commit<'_>) -> CommitInfo {
    let message = commit.message_raw_sloppy().to_string();
    CommitInfo {
        sha: commit.id.to_string(),
        author: commit
            .author()
            .map(|a| a.name.to_string())
            .unwrap_or_default(),
        date: rfc3339(commit.time().map(|t| t.seconds).unwrap_or(0)),
        subject: message.lines().next().unwrap_or("").trim().to_string(),
        replaced_by: replaced_by(&message),
    }
}

#[cfg(test)]
mod tests;
