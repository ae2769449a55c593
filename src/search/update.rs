//! The index changed a few rows at a time, for a rebuild that must not take the time of
//! indexing the whole catalogue again (a row written through the dispatcher's write API,
//! `capdir build` after a `git pull` that brought a few commits).
//!
//! The index is held in memory ([`IndexState`]): a change is made on a copy of its files, so
//! the staged index can be searched (the write gate asks the new row's `asks` of it) and
//! thrown away without anything on disk having changed. Written out, only the files the
//! change added go to disk, `meta.json` last, as tantivy itself commits.
//!
//! A changed row's old document is deleted through the `id` field and its new one appended
//! with the next free `ord`: `rows.json` keeps the place of a removed or moved row, with an
//! empty key. Two things make an incrementally changed index answer a little differently from
//! one built from nothing, until the next full build: BM25 counts deleted documents in its
//! document frequencies until their segment is merged, and the words that split run-together
//! key parts (`vocabulary`) keep those of rows since removed. Segments are merged as they
//! accumulate, so the index does not slow down.

use super::{
    ANALYZER, Fields, RowMeta, Searcher, Terms, Vocabulary, add_term_fields, analyzer, document,
    document_text, fields_of, indexable, meta, positions, term_fields, vocabulary,
};
use crate::row::Row;
use anyhow::{Context as _, Result, bail};
use std::collections::{BTreeSet, HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use tantivy::directory::RamDirectory;
use tantivy::{Directory, Index, Term};

/// Merged together once there are this many segments besides the largest.
const SMALL_SEGMENTS: usize = 8;
/// The largest segment is merged with the rest once this share of its documents is deleted.
const DELETED_SHARE: f64 = 0.2;

/// tantivy's own files that are not index data.
const META: &str = "meta.json";
const MANAGED: &str = ".managed.json";

/// A site's index, held in memory, that a few rows can be changed in.
#[derive(Clone)]
pub struct IndexState {
    index: Index,
    dir: RamDirectory,
    fields: Arc<Fields>,
    /// `rows.json`: the rows by `ord`.
    rows: Arc<Vec<RowMeta>>,
    /// Key → its place in `rows`.
    by_key: Arc<HashMap<String, usize>>,
    /// The words run-together key parts are split by.
    words: Arc<Vocabulary>,
    terms: Arc<Terms>,
    /// The row vectors, in `rows.json`'s order (none for an index built without them).
    vectors: Option<Arc<super::semantic::RowVectors>>,
}

impl std::fmt::Debug for IndexState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("IndexState")
            .field("rows", &self.by_key.len())
            .finish_non_exhaustive()
    }
}

/// The files of an index in `dir` that tantivy manages, and its list of them.
fn managed_files(dir: &dyn Directory) -> Result<BTreeSet<PathBuf>> {
    let bytes = dir
        .atomic_read(Path::new(MANAGED))
        .context("the index has no list of its files")?;
    let mut files: BTreeSet<PathBuf> = serde_json::from_slice(&bytes)?;
    files.insert(PathBuf::from(MANAGED));
    Ok(files)
}

impl IndexState {
    /// Read the index of a site (`site/index`) built from `rows` into memory. `None` when it
    /// cannot be changed row by row (built by a capdir without the `id` field, or row vectors
    /// this capdir does not read): then only a full build makes a new one.
    pub fn read(dir: &Path, rows: &[Row]) -> Result<Option<IndexState>> {
        let ram = RamDirectory::create();
        let list = std::fs::read(dir.join(MANAGED))
            .with_context(|| format!("reading {}", dir.join(MANAGED).display()))?;
        let mut files: BTreeSet<PathBuf> = serde_json::from_slice(&list)?;
        files.insert(PathBuf::from(META));
        for name in &files {
            let bytes =
                std::fs::read(dir.join(name)).with_context(|| format!("reading {name:?}"))?;
            ram.atomic_write(name, &bytes)?;
        }
        ram.atomic_write(Path::new(MANAGED), &list)?;
        let metas: Vec<RowMeta> = serde_json::from_slice(&std::fs::read(dir.join("rows.json"))?)?;
        let index = Index::open(ram.clone())?;
        index.tokenizers().register(ANALYZER, analyzer());
        let fields = fields_of(&index.schema())?;
        if fields.id.is_none() {
            return Ok(None);
        }
        let reader = index.reader()?;
        let indexed = indexable(rows);
        let words = vocabulary(&indexed);
        // Row vectors of another format version (weighed by an older capdir) or of another
        // length cannot be changed row by row either: a full build writes them again.
        let path = dir.join(super::SEMANTIC_FILE);
        let vectors = if path.exists() {
            match super::semantic::RowVectors::read(&path) {
                Ok(v) if v.len() == metas.len() => Some(Arc::new(v)),
                _ => return Ok(None),
            }
        } else {
            None
        };
        Ok(Some(IndexState {
            vectors,
            terms: Arc::new(term_fields(&reader, &fields)?),
            index,
            dir: ram,
            fields: Arc::new(fields),
            by_key: Arc::new(positions(&metas)),
            rows: Arc::new(metas),
            words: Arc::new(words),
        }))
    }

    /// The rows an ask may answer with.
    pub fn len(&self) -> usize {
        self.by_key.len()
    }

    /// Whether the index in `dir` is this one (no other build replaced it since).
    pub fn is_in(&self, dir: &Path) -> bool {
        let on_disk = std::fs::read(dir.join(META)).ok();
        on_disk.is_some() && on_disk == self.dir.atomic_read(Path::new(META)).ok()
    }

    pub fn is_empty(&self) -> bool {
        self.by_key.is_empty()
    }

    /// This index with the rows `upserts` in place of those of their keys (a row that is
    /// disabled or kept from planners only leaves) and the rows of `removed` gone. `held`
    /// gives the row of a key as the index holds it: a row changed in nothing the index
    /// holds (its examples, its flags) keeps its document, and the index its statistics.
    /// Made on a copy in memory: `self` is unchanged, and nothing is written anywhere.
    pub fn change<'h>(
        &self,
        upserts: &[&Row],
        removed: &[&str],
        held: impl Fn(&str) -> Option<&'h Row>,
    ) -> Result<IndexState> {
        let id = self.fields.id.context("the index has no id field")?;
        let (kept, upserts) = self.split_unchanged(upserts, held);
        if upserts.is_empty() && !removed.iter().any(|k| self.by_key.contains_key(*k)) {
            return Ok(self.with_metas(&kept));
        }
        let (ram, index, mut writer) = self.copy_in_memory()?;
        let mut rows = (*self.rows).clone();
        let mut by_key = (*self.by_key).clone();
        let mut words = self.words.clone();
        let gone = removed
            .iter()
            .copied()
            .chain(upserts.iter().map(|r| r.key.as_str()));
        let mut cleared = Vec::new();
        for key in gone {
            writer.delete_term(Term::from_field_text(id, key));
            if let Some(at) = by_key.remove(key) {
                cleared.push(at);
                rows[at] = RowMeta {
                    key: String::new(),
                    what: String::new(),
                    category: String::new(),
                    kind: String::new(),
                    planner_rank: 0,
                    ex: String::new(),
                };
            }
        }
        let added: Vec<&Row> = upserts
            .iter()
            .copied()
            .filter(|r| r.enabled && r.planner_visible)
            .collect();
        let new_words = vocabulary(&added);
        if !new_words.is_subset(&words) {
            Arc::make_mut(&mut words).extend(new_words);
        }
        let mut added_texts = Vec::new();
        for row in added {
            let ord = rows.len();
            writer.add_document(document(&self.fields, row, ord as u64, &words))?;
            rows.push(meta(row));
            by_key.insert(row.key.clone(), ord);
            added_texts.push(super::semantic_text(row, &words));
        }
        let vectors = match &self.vectors {
            Some(v) => Some(Arc::new(v.changed(
                super::semantic::model()?,
                &cleared,
                &added_texts,
            ))),
            None => None,
        };
        writer.commit()?;
        merge_if_worth_it(&index, &mut writer)?;
        writer.garbage_collect_files().wait()?;
        writer.wait_merging_threads()?;
        let terms = self.terms_with(&index)?;
        let changed = IndexState {
            terms: Arc::new(terms),
            index,
            dir: ram,
            fields: self.fields.clone(),
            rows: Arc::new(rows),
            by_key: Arc::new(by_key),
            words,
            vectors,
        };
        Ok(changed.with_metas(&kept))
    }

    /// `upserts` parted into the rows whose indexed text is the same (they keep their
    /// documents; only what `rows.json` says of them, their rank and example, is brought up
    /// to date) and the others.
    fn split_unchanged<'r, 'h>(
        &self,
        upserts: &[&'r Row],
        held: impl Fn(&str) -> Option<&'h Row>,
    ) -> (Vec<&'r Row>, Vec<&'r Row>) {
        upserts.iter().copied().partition(|r| {
            let indexed = r.enabled && r.planner_visible;
            indexed
                && self.by_key.contains_key(&r.key)
                && held(&r.key).is_some_and(|old| {
                    document_text(old, &self.words) == document_text(r, &self.words)
                })
        })
    }

    /// This index with what `rows.json` says of `kept` brought up to date.
    fn with_metas(&self, kept: &[&Row]) -> IndexState {
        let mut rows = (*self.rows).clone();
        for r in kept {
            if let Some(&at) = self.by_key.get(&r.key) {
                rows[at] = meta(r);
            }
        }
        IndexState {
            rows: Arc::new(rows),
            ..self.clone()
        }
    }

    /// A copy of the index's files in memory, opened, with a writer of one thread that
    /// merges nothing by itself.
    fn copy_in_memory(&self) -> Result<(RamDirectory, Index, tantivy::IndexWriter)> {
        let ram = RamDirectory::create();
        for name in managed_files(&self.dir)? {
            let bytes = self.dir.atomic_read(&name)?;
            ram.atomic_write(&name, &bytes)?;
        }
        let index = Index::open(ram.clone())?;
        index.tokenizers().register(ANALYZER, analyzer());
        let options = tantivy::indexer::IndexWriterOptions::builder()
            .num_worker_threads(1)
            .num_merge_threads(1)
            .build();
        let writer: tantivy::IndexWriter = index.writer_with_options(options)?;
        writer.set_merge_policy(Box::new(tantivy::merge_policy::NoMergePolicy));
        Ok((ram, index, writer))
    }

    /// The terms known, and those of the segments of `index` this index does not have (a
    /// deleted document's terms stay: so they do in the index's term dictionary until a
    /// merge).
    fn terms_with(&self, index: &Index) -> Result<Terms> {
        let known: HashSet<tantivy::index::SegmentId> =
            self.index.searchable_segment_ids()?.into_iter().collect();
        let reader = index.reader()?;
        let mut terms = (*self.terms).clone();
        add_term_fields(&mut terms, &reader, &self.fields, &|id| !known.contains(id))?;
        Ok(terms)
    }

    /// A searcher over this index.
    pub fn searcher(&self) -> Result<Searcher> {
        let reader = self
            .index
            .reader_builder()
            .reload_policy(tantivy::ReloadPolicy::Manual)
            .try_into()?;
        Ok(Searcher {
            index: super::Lexical::of(&reader)?,
            fields: fields_of(&self.index.schema())?,
            vocabulary: self.terms.clone(),
            rows: self.rows.clone(),
            by_key: self.by_key.clone(),
            boosts: super::Boosts::default(),
            analyzer: analyzer(),
            semantic: self.vectors.clone(),
            ranking: super::Ranking::default(),
            fusion: super::Fusion::default(),
        })
    }

    /// Write this index into `dir`, which holds `before` (the state it was changed from):
    /// the files the change added, `rows.json`, the list of files, then `meta.json`, each
    /// replaced whole; last, the files no longer used are removed. Refused when `dir` does
    /// not hold `before` (another build replaced it meanwhile).
    pub fn write(&self, dir: &Path, before: &IndexState) -> Result<()> {
        let on_disk = std::fs::read(dir.join(META)).unwrap_or_default();
        if on_disk != before.dir.atomic_read(Path::new(META))? {
            bail!(
                "the index in {} is not the one this change was made from",
                dir.display()
            );
        }
        let now = managed_files(&self.dir)?;
        let then = managed_files(&before.dir)?;
        for name in now.difference(&then) {
            let name = name.as_path();
            if name == Path::new(META) || name == Path::new(MANAGED) {
                continue;
            }
            let bytes = self.dir.atomic_read(name)?;
            std::fs::write(dir.join(name), bytes)
                .with_context(|| format!("writing {}", dir.join(name).display()))?;
        }
        crate::atomic::write(&dir.join("rows.json"), &serde_json::to_vec(&*self.rows)?)?;
        if let Some(v) = &self.vectors {
            crate::atomic::write(&dir.join(super::SEMANTIC_FILE), &v.to_bytes())?;
        }
        crate::atomic::write(
            &dir.join(MANAGED),
            &self.dir.atomic_read(Path::new(MANAGED))?,
        )?;
        crate::atomic::write(&dir.join(META), &self.dir.atomic_read(Path::new(META))?)?;
        for name in then.difference(&now) {
            let _ = std::fs::remove_file(dir.join(name));
        }
        Ok(())
    }
}

/// Merge the small segments once there are many, and everything once the largest holds
/// many deleted documents; `ord` values are kept, so `rows.json` stays valid.
fn merge_if_worth_it(index: &Index, writer: &mut tantivy::IndexWriter) -> Result<()> {
    let mut metas = index.searchable_segment_metas()?;
    metas.sort_by_key(|m| std::cmp::Reverse(m.max_doc()));
    let Some(largest) = metas.first() else {
        return Ok(());
    };
    let deleted = f64::from(largest.num_deleted_docs()) / f64::from(largest.max_doc().max(1));
    let ids: Vec<tantivy::index::SegmentId> = if deleted > DELETED_SHARE {
        metas.iter().map(|m| m.id()).collect()
    } else if metas.len() > SMALL_SEGMENTS {
        metas.iter().skip(1).map(|m| m.id()).collect()
    } else {
        return Ok(());
    };
    if ids.len() > 1 {
        writer.merge(&ids).wait()?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::row::parse_row;

    fn row(key: &str, what: &str) -> Row {
        let text = format!(
            "key: {key}\ntype: fn\ntarget: echo\ncategory: text\ncontent: |\n  # WHAT: {what}\n  [\"$1\"]\n"
        );
        parse_row(Path::new(&format!("{key}.yaml")), text.as_bytes())
            .row
            .expect("row")
    }

    fn best(s: &Searcher, ask: &str) -> Option<String> {
        s.ask(ask, 3).expect("ask").first().map(|h| h.key.clone())
    }

    /// A site whose row vectors this capdir does not read (an older format version) is not
    /// changed row by row, which would keep the old file: the build starts again in full.
    #[test]
    fn row_vectors_of_another_version_need_a_full_build() {
        let dir = tempfile::tempdir().expect("tempdir");
        let rows = vec![row("ALPHA_ONE", "Translate a sentence into French.")];
        let at = dir.path().join("index");
        crate::search::build_index(&at, &rows).expect("build");
        assert!(IndexState::read(&at, &rows).expect("read").is_some());
        let file = at.join(crate::search::SEMANTIC_FILE);
        let mut bytes = std::fs::read(&file).expect("vectors");
        bytes[8..12].copy_from_slice(&3u32.to_le_bytes());
        std::fs::write(&file, bytes).expect("write");
        assert!(IndexState::read(&at, &rows).expect("read").is_none());
        // A dispatcher serving such a site (a followed host not yet republished) still
        // answers asks, by words alone, rather than refusing the build.
        let s = crate::search::Searcher::open(&at).expect("a site of the old format opens");
        assert_eq!(
            best(&s, "translate a sentence").as_deref(),
            Some("ALPHA_ONE")
        );
        // Damage is still refused: a file that is not row vectors.
        std::fs::write(&file, b"CAPDIRSV").expect("write");
        assert!(crate::search::Searcher::open(&at).is_err());
    }

    /// Two rows built into `dir/index`: the rows, the index's folder and its state.
    fn two_rows(dir: &Path) -> (Vec<Row>, PathBuf, IndexState) {
        let rows = vec![
            row("ALPHA_ONE", "Translate a sentence into French."),
            row("GAMMA_THREE", "Convert a temperature to kelvin."),
        ];
        let at = dir.join("index");
        crate::search::build_index(&at, &rows).expect("build");
        let state = IndexState::read(&at, &rows).expect("read").expect("has id");
        (rows, at, state)
    }

    /// A change adds a segment; each hit's row is read from its own segment's `ord` column,
    /// so words find their rows in the old segment and the new one alike.
    #[test]
    fn words_find_their_rows_in_every_segment() {
        let dir = tempfile::tempdir().expect("tempdir");
        let (rows, _, state) = two_rows(dir.path());
        let added = [
            row("WEATHER_FORECAST", "Get the weather forecast for a city."),
            row("ZEBRA_COUNT", "Count the zebras in a photograph."),
        ];
        let held = |k: &str| rows.iter().find(|r| r.key == k);
        let next = state
            .change(&added.iter().collect::<Vec<_>>(), &[], held)
            .expect("change");
        let s = next.searcher().expect("searcher");
        assert!(
            s.index.ords.len() >= 2,
            "one segment: nothing to tell apart"
        );
        for (ask, key) in [
            ("weather forecast", "WEATHER_FORECAST"),
            ("zebras photograph", "ZEBRA_COUNT"),
            ("kelvin temperature", "GAMMA_THREE"),
            ("french sentence", "ALPHA_ONE"),
        ] {
            let hits = s
                .ask_by(ask, 1, crate::search::Ranking::Lexical)
                .expect("ask");
            assert_eq!(hits.first().map(|h| h.key.as_str()), Some(key), "{ask}");
        }
    }

    /// The row vectors follow a change: an added row is found by meaning alone, a removed
    /// one never answers, and the file written is the one the searcher on disk reads.
    #[test]
    fn row_vectors_follow_a_change() {
        let dir = tempfile::tempdir().expect("tempdir");
        let (rows, at, state) = two_rows(dir.path());
        let added = row("WEATHER_FORECAST", "Get the weather forecast for a city.");
        let held = |k: &str| rows.iter().find(|r| r.key == k);
        let next = state
            .change(&[&added], &["GAMMA_THREE"], held)
            .expect("change");
        let s = next.searcher().expect("searcher");
        assert!(s.has_vectors());
        let by_meaning: Vec<String> = s
            .ask_by("will it rain tomorrow", 3, crate::search::Ranking::Semantic)
            .expect("ask")
            .into_iter()
            .map(|h| h.key)
            .collect();
        assert_eq!(
            by_meaning.first().map(String::as_str),
            Some("WEATHER_FORECAST")
        );
        for ranking in crate::search::Ranking::ALL {
            let hits = s
                .ask_by("convert a temperature to kelvin", 5, ranking)
                .expect("ask");
            assert!(
                hits.iter()
                    .all(|h| h.key != "GAMMA_THREE" && !h.key.is_empty()),
                "{hits:?}"
            );
        }
        next.write(&at, &state).expect("write");
        let disk = Searcher::open(&at).expect("open");
        assert!(disk.has_vectors());
        assert_eq!(
            best(&disk, "will it rain tomorrow").as_deref(),
            Some("WEATHER_FORECAST")
        );
    }

    /// A change is searchable before it is written, leaves the state it came from as it
    /// was, and once written the index on disk answers as the one in memory does.
    #[test]
    fn change_in_memory_then_write() {
        let dir = tempfile::tempdir().expect("tempdir");
        let rows = vec![
            row("ALPHA_ONE", "Translate a sentence into French."),
            row("BETA_TWO", "Resize an image to a thumbnail."),
            row("GAMMA_THREE", "Convert a temperature to kelvin."),
        ];
        let at = dir.path().join("index");
        crate::search::build_index(&at, &rows).expect("build");
        let state = IndexState::read(&at, &rows).expect("read").expect("has id");
        let edited = row("BETA_TWO", "Compress an audio file to mp3.");
        let added = row("DELTA_FOUR", "Summarize a paper abstract.");
        let held = |k: &str| rows.iter().find(|r| r.key == k);
        let next = state
            .change(&[&edited, &added], &["GAMMA_THREE"], held)
            .expect("change");
        let s = next.searcher().expect("searcher");
        assert_eq!(best(&s, "compress audio mp3").as_deref(), Some("BETA_TWO"));
        assert_eq!(best(&s, "resize image thumbnail"), None);
        assert_eq!(best(&s, "temperature kelvin"), None);
        assert_eq!(
            best(&s, "summarize abstract").as_deref(),
            Some("DELTA_FOUR")
        );
        assert_eq!(s.len(), 3);
        // The state it came from is untouched, and so is the disk.
        let old = state.searcher().expect("searcher");
        assert_eq!(
            best(&old, "temperature kelvin").as_deref(),
            Some("GAMMA_THREE")
        );
        let disk = Searcher::open(&at).expect("open");
        assert_eq!(best(&disk, "compress audio mp3"), None);

        next.write(&at, &state).expect("write");
        let disk = Searcher::open(&at).expect("open");
        for ask in [
            "compress audio mp3",
            "summarize abstract",
            "translate french",
        ] {
            assert_eq!(best(&disk, ask), best(&s, ask), "{ask}");
        }
        assert_eq!(best(&disk, "temperature kelvin"), None);
        // A change the index does not hold (examples, a rank) keeps every document: the
        // statistics BM25 scores with stay what they were.
        let mut ranked = row("ALPHA_ONE", "Translate a sentence into French.");
        ranked.examples = vec!["bonjour".into()];
        ranked.planner_rank = 5;
        let same = next.change(&[&ranked], &[], held).expect("change");
        assert_eq!(
            same.index.searchable_segment_ids().expect("ids"),
            next.index.searchable_segment_ids().expect("ids")
        );
        assert_eq!(same.rows[same.by_key["ALPHA_ONE"]].planner_rank, 5);
        // Writing over an index that is not the one changed from is refused.
        assert!(next.write(&at, &state).is_err());
        // Many changes in a row merge their segments and still answer.
        let mut state = IndexState::read(&at, &rows).expect("read").expect("has id");
        let mut before = rows[0].clone();
        for i in 0..20 {
            let r = row("ALPHA_ONE", &format!("Translate a sentence, take {i}."));
            let n = state
                .change(&[&r], &[], |k| (k == before.key).then_some(&before))
                .expect("change");
            n.write(&at, &state).expect("write");
            state = n;
            before = r;
        }
        let segments = state.index.searchable_segment_ids().expect("ids").len();
        assert!(segments <= SMALL_SEGMENTS + 1, "{segments} segments");
        let disk = Searcher::open(&at).expect("open");
        assert_eq!(
            best(&disk, "translate sentence").as_deref(),
            Some("ALPHA_ONE")
        );
        assert_eq!(disk.len(), 3);
    }
}
