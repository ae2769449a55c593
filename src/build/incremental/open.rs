//! Opening a built site for changing in place: what it holds read beside the catalogue, the
//! gate, and the change from the one to the other (or why a full build is needed instead).

use super::*;

impl Built {
    /// Open the site `opts.out` for changing in place, with the change that brings it to the
    /// work tree and the history of `opts.catalogue` (checked whole first, as a build does).
    pub fn open(opts: &Options) -> Result<Opened, BuildError> {
        let out = &opts.out;
        let templates = crate::build::read_templates(opts)?;
        let made = Made::of(opts, &templates);
        match Made::read(out) {
            Some(m) if m == made => {}
            Some(_) => {
                return Ok(Opened::Full(
                    "the site was built by another capdir or with other options".into(),
                ));
            }
            None => return Ok(Opened::Full("no site built by this capdir yet".into())),
        }
        let Some(read) = Reads::of(opts)? else {
            return Ok(Opened::Full("the site's snapshot does not read".into()));
        };
        let Reads {
            files,
            clean,
            mut snap,
            mut extras,
            history,
        } = read;
        spans_in_files(&mut snap.rows, &files.unread);
        // The gate, which takes the files the site's last gate found clean, byte for byte, as
        // it found them (`checked`), beside the search index; both need the snapshot's rows.
        let (gated, index) = std::thread::scope(|s| {
            let index = s.spawn(|| IndexState::read(&out.join("index"), &snap.rows));
            let gated = crate::build::gate(files, Some((&clean, &snap.rows)));
            (gated, index.join())
        });
        let crate::build::Gated {
            checked,
            clean: clean_now,
            reused,
            unread,
        } = gated?;
        let clean_changed = clean_now != clean;
        let index = index.map_err(|_| panicked("the index"))?;
        if crate::build::site_bindings(out) != checked.bindings {
            return Ok(Opened::Full("the credential bindings changed".into()));
        }
        if let Some(why) = &history.missing {
            return Ok(Opened::Full(format!("no Git history ({why})")));
        }
        let Some(index) = index? else {
            return Ok(Opened::Full(
                "the site's index cannot be changed row by row".into(),
            ));
        };
        let urls = made.urls();
        // The rows of the files the gate left unread are among the snapshot's only.
        let live_rows = checked.rows.len() + unread;
        let (rows, mut delta, fresh_keys) =
            merged_rows(checked.rows, snap.rows, &reused, &history, &mut extras);
        let tombs = match tombstones_now(&history, &rows, &fresh_keys, &extras, &urls, &mut delta) {
            Some(tombs) => tombs,
            None => {
                return Ok(Opened::Full(
                    "a tombstone of the site is in the history no more".into(),
                ));
            }
        };
        if delta.len() > MAX_ROWS_CHANGED.max(live_rows / 10) {
            return Ok(Opened::Full(format!(
                "{} rows changed: a full build is quicker",
                delta.len()
            )));
        }
        let built = Built {
            catalogue: opts.catalogue.clone(),
            out: out.clone(),
            urls,
            repo_url: made.repo_url,
            templates: Arc::new(templates),
            rows,
            history,
            prints: extras.prints,
            index,
            info: snap.info,
            tombstones: tombs,
            clean: clean_now,
            clean_changed,
            reused: reused.len(),
            unread,
            touched: BTreeSet::new(),
            stale: Stale::default(),
            across: None,
        };
        Ok(Opened::Ready(Box::new(built), delta))
    }
}

/// The rows of files left unread are the snapshot's (when the gate takes them): where their
/// fields sit is read from their files when a diagnostic asks.
fn spans_in_files(rows: &mut [Row], unread: &[PathBuf]) {
    let unread: crate::FastSet<&Path> = unread.iter().map(PathBuf::as_path).collect();
    for row in rows
        .iter_mut()
        .filter(|r| unread.contains(r.path.as_path()))
    {
        row.spans = crate::row::Spans::in_file(&row.path);
    }
}

/// An error for a reading thread that panicked.
fn panicked(what: &str) -> BuildError {
    BuildError::Other(anyhow::anyhow!("reading {what} panicked"))
}

/// What opening a site reads before its gate: the catalogue's files (and their digests) with
/// the site's list of clean files, the snapshot, and the history.
struct Reads {
    files: crate::build::Read,
    clean: Clean,
    snap: snapshot::Snapshot,
    extras: snapshot::Built,
    history: History,
}

impl Reads {
    /// Three reads side by side, since none needs another's answer until the gate: the
    /// files, the snapshot, and the history with the word vectors. `None`: the snapshot does
    /// not read. What each finds is looked at in the order it was found in before: the
    /// files' errors first.
    fn of(opts: &Options) -> Result<Option<Reads>, BuildError> {
        let out = &opts.out;
        let snapshot_path = out.join(snapshot::FILE);
        let (files, snap, extras, rest) = std::thread::scope(|s| {
            let snap = s.spawn(|| snapshot::open(&snapshot_path).ok());
            let rest = s.spawn(|| {
                let history = history::read_cached(
                    &opts.catalogue,
                    Some(&opts.out.join(HISTORY_CACHE)),
                    crate::cores(),
                    None,
                );
                // The word vectors: the index's row vectors are read against them, and a
                // changed row is weighed with them; loading them is the longest of these reads.
                let _ = crate::search::semantic::model();
                history
            });
            // The files the list has with the stamps they have now are not read (most of
            // them, mostly): the rest of the snapshot is read after them, on this thread.
            let clean = Clean::read(out);
            let files = crate::build::read_files(&opts.catalogue, Some(&clean));
            let extras = snapshot::built(&snapshot_path).ok();
            (files.map(|f| (f, clean)), snap.join(), extras, rest.join())
        });
        let history = rest.map_err(|_| panicked("the history"))?;
        let (Some(snap), Some(extras)) = (snap.map_err(|_| panicked("the snapshot"))?, extras)
        else {
            return Ok(None);
        };
        let (files, clean) = files?;
        Ok(Some(Reads {
            files,
            clean,
            snap,
            extras,
            history,
        }))
    }
}

/// The gate's rows (`now`) and the snapshot's (`before`), both in key order, walked side by
/// side (no map of either, and each row moved once, into its Arc): the rows of the model, the
/// change from the site to the catalogue, and the keys of the rows the site lacks. Both
/// mostly come sorted (the gate reads files in name order, the snapshot is read ORDER BY
/// key), and sorting a sorted list is one pass. `reused`: the files the gate took as
/// checked, whose row is the snapshot's and only whose history can have moved.
fn merged_rows(
    mut now: Vec<Row>,
    mut before: Vec<Row>,
    reused: &[String],
    history: &History,
    extras: &mut snapshot::Built,
) -> (
    BTreeMap<String, Arc<Row>>,
    Delta,
    std::collections::HashSet<String>,
) {
    let same_row: crate::FastSet<&str> = reused.iter().map(String::as_str).collect();
    now.sort_unstable_by(|a, b| a.key.cmp(&b.key));
    before.sort_unstable_by(|a, b| a.key.cmp(&b.key));
    let mut rows: BTreeMap<String, Arc<Row>> = BTreeMap::new();
    let mut delta = Delta::default();
    let mut fresh: Vec<Row> = Vec::new();
    // The snapshot's copies of rows of files read and unchanged.
    let mut discarded: Vec<Row> = Vec::with_capacity(now.len());
    let mut now = now.into_iter().peekable();
    let mut before = before.into_iter().peekable();
    // Whether the commits of the file `file` (of the row `key`) are others than the site's.
    let history_moved = |file: &str, key: &str| {
        let shas = history.of(file).iter().map(|c| c.commit.sha.as_str());
        let built_shas = extras.histories.get(key).into_iter().flatten();
        !shas.eq(built_shas.map(String::as_str))
    };
    loop {
        let order = match (before.peek(), now.peek()) {
            (None, None) => break,
            (Some(old), Some(new)) => old.key.cmp(&new.key),
            (Some(_), None) => std::cmp::Ordering::Less,
            (None, Some(_)) => std::cmp::Ordering::Greater,
        };
        match order {
            // A row of a file the gate left unread (it is the row), or one the catalogue has
            // no more.
            std::cmp::Ordering::Less => {
                if let Some(old) = before.next() {
                    let file = file_name(&old);
                    if same_row.contains(file) {
                        if history_moved(file, &old.key) {
                            delta.upserts.push(old.clone());
                        }
                    } else {
                        delta.removed.push(old.key.clone());
                    }
                    rows.insert(old.key.clone(), Arc::new(old));
                }
                continue;
            }
            // A row the site does not have yet.
            std::cmp::Ordering::Greater => {
                fresh.extend(now.next());
                continue;
            }
            std::cmp::Ordering::Equal => {}
        }
        let (Some(mut old), Some(new)) = (before.next(), now.next()) else {
            break;
        };
        let file = file_name(&new);
        let changed = history_moved(file, &old.key)
            || !(same_row.contains(file) || snapshot::same_columns(&new, &old));
        if changed {
            delta.upserts.push(new);
            rows.insert(old.key.clone(), Arc::new(old));
        } else {
            // Unchanged: the parsed row, which knows where its fields are.
            rows.insert(std::mem::take(&mut old.key), Arc::new(new));
            discarded.push(old);
        }
    }
    // Freed on a thread of their own, with the snapshot's histories: freeing them is a large
    // part of this last part of the opening, which runs on one core.
    let histories = std::mem::take(&mut extras.histories);
    std::thread::spawn(move || drop((discarded, histories)));
    let fresh_keys: std::collections::HashSet<String> =
        fresh.iter().map(|r| r.key.clone()).collect();
    delta.upserts.extend(fresh);
    (rows, delta, fresh_keys)
}

/// Tombstones the history gives now, each one the site holds otherwise added to `delta`'s
/// removals; `None` when a tombstone of the site is in the history no more (a full build).
fn tombstones_now(
    history: &History,
    rows: &BTreeMap<String, Arc<Row>>,
    fresh_keys: &std::collections::HashSet<String>,
    extras: &snapshot::Built,
    urls: &Urls,
    delta: &mut Delta,
) -> Option<BTreeMap<String, Tombstone>> {
    // The catalogue's keys now: the site's rows but those removed, and the fresh ones.
    let gone: std::collections::HashSet<String> = delta.removed.iter().cloned().collect();
    let live = |k: &str| (rows.contains_key(k) && !gone.contains(k)) || fresh_keys.contains(k);
    let tombs: BTreeMap<String, Tombstone> = tombstones(history, live, urls)
        .into_iter()
        .map(|t| (t.key.clone(), t))
        .collect();
    for (key, t) in &tombs {
        let same = extras.removals.get(key) == Some(&t.removed_by);
        if !same && !delta.removed.contains(key) {
            delta.removed.push(key.clone());
        }
    }
    let lost = extras
        .removals
        .keys()
        .any(|k| !tombs.contains_key(k) && !live(k));
    (!lost).then_some(tombs)
}
