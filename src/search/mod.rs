//! Ask: plain words in, ranked rows out. A tantivy BM25 index over each row's key words,
//! docstring fields, category and asks, with English stemming, stop words and field boosts.
//!
//! The index is built once per build into `site/index/` as a single segment whose documents
//! are in key order, so a hit's document id is its position in the sidecar `rows.json`; no
//! stored fields are read at query time. Segment files get a name derived from their content,
//! so the same catalogue builds the same bytes.
//!
//! Beside it, `site/index/semantic.bin` holds a vector per row (see `semantic`). An ask ranks
//! the rows both ways and fuses the two rankings by reciprocal rank (`Fusion`): a row the
//! words miss but the meaning finds still comes up, and a row both agree on comes first.

pub mod ask;
pub mod eval;
pub mod semantic;
pub mod update;

use crate::row::Row;
use anyhow::{Context as _, Result};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use std::path::Path;
use std::sync::Arc;
use tantivy::query::{BooleanQuery, BoostQuery, Occur, Query, TermQuery};
use tantivy::schema::{Field, IndexRecordOption, Schema, TextFieldIndexing, TextOptions};
use tantivy::tokenizer::{
    Language, LowerCaser, RemoveLongFilter, SimpleTokenizer, Stemmer, StopWordFilter, TextAnalyzer,
    TokenStream,
};
use tantivy::{Index, IndexReader, Term, collector::TopDocs, doc};

const ANALYZER: &str = "capdir_en";
/// The catalogue's words (lowercase, three letters or more), looked up for every word of every
/// row when an index is built or changed.
pub type Vocabulary = crate::FastSet<String>;

/// The row vectors' file in the index folder.
pub const SEMANTIC_FILE: &str = "semantic.bin";

/// At most this many distinct terms of a request are scored: the rarest ones.
pub const MAX_QUERY_TERMS: usize = 24;

/// Per-field weights, chosen by measurement on the labelled set (see `capdir eval`).
/// Three fields keep long requests cheap: each term costs one clause per field.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Boosts {
    /// The key's words.
    pub key: f32,
    /// The `# WHAT:` line.
    pub what: f32,
    /// WHEN_TO_USE, ARGS, OUTPUT, category and asks, as one field.
    pub more: f32,
}

impl Default for Boosts {
    fn default() -> Self {
        Boosts {
            key: 1.0,
            what: 1.0,
            more: 0.6,
        }
    }
}

impl std::str::FromStr for Boosts {
    type Err = String;

    /// `key=2,what=1`: the named fields changed, the rest at their defaults.
    fn from_str(s: &str) -> Result<Boosts, String> {
        let mut b = Boosts::default();
        for part in s.split(',').filter(|p| !p.trim().is_empty()) {
            let (name, value) = part
                .split_once('=')
                .ok_or_else(|| format!("`{part}` is not field=weight"))?;
            let v: f32 = value
                .trim()
                .parse()
                .map_err(|_| format!("`{value}` is not a number"))?;
            let slot = match name.trim() {
                "key" => &mut b.key,
                "what" => &mut b.what,
                "more" => &mut b.more,
                other => return Err(format!("unknown field `{other}` (key, what, more)")),
            };
            *slot = v;
        }
        Ok(b)
    }
}

/// Which signal orders the rows: the lexical index, the vectors, or both fused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Ranking {
    Lexical,
    Semantic,
    #[default]
    Fused,
}

impl Ranking {
    pub const ALL: [Ranking; 3] = [Ranking::Lexical, Ranking::Semantic, Ranking::Fused];

    pub fn name(self) -> &'static str {
        match self {
            Ranking::Lexical => "lexical (BM25)",
            Ranking::Semantic => "semantic",
            Ranking::Fused => "fused",
        }
    }
}

/// Score fusion by standard scores: a row scores z_lexical + weight · z_semantic, each z how
/// many standard deviations the row's score stands above the mean over all the catalogue's
/// rows (BM25 0 for a row the words miss). Where one signal tells rows apart and the other
/// barely does, the first decides; rank fusion gave both the same say and lost to BM25
/// alone on the Gorilla sets. The rows are those of the two lists, each cut at `depth`.
/// The weight was chosen by cross-validation across the three development sets (chosen on
/// two, measured on the third; eval/README.md); `capdir eval --tune` cross-validates it
/// across one set's queries.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Fusion {
    pub weight: f32,
    pub depth: usize,
    /// A row the vectors find must be at least this close to the request to count.
    pub floor: f32,
    /// When no row shares a word with the request, a row must be at least this close to be
    /// an answer at all: a request of unknown words has vectors too, close to nothing. 0.25:
    /// with WordLlama's vectors 0.15 would answer a paraphrase in `tests/search.rs` that comes
    /// to 0.175 and gain TF Hub's 17 requests that share no word with a row two in recall@5,
    /// but let wrong rows answer at 0.16 and 0.23 (`search::update`'s tests; eval/README.md).
    pub alone: f32,
}

impl Default for Fusion {
    fn default() -> Self {
        Fusion {
            weight: 1.0,
            depth: 100,
            floor: 0.1,
            alone: 0.25,
        }
    }
}

/// The two rankings of one request before fusion: (position in the index, score), best first.
#[derive(Debug, Clone, Default)]
pub struct Lists {
    pub lexical: Vec<(usize, f32)>,
    pub semantic: Vec<(usize, f32)>,
    /// The cosine of each row of `lexical` (same order); empty without vectors.
    pub lexical_cosines: Vec<f32>,
    /// How the cosines of all rows spread.
    pub spread: semantic::Spread,
}

/// What a hit says about its row, without opening the snapshot.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RowMeta {
    pub key: String,
    pub what: String,
    pub category: String,
    #[serde(rename = "type")]
    pub kind: String,
    pub planner_rank: i64,
    /// An example argument string, for run-now URLs.
    pub ex: String,
}

/// One ranked candidate.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Hit {
    pub key: String,
    pub score: f32,
    pub what: String,
    pub category: String,
    #[serde(rename = "type")]
    pub kind: String,
}

struct Fields {
    /// The row's position in `rows.json`: fast field, read per hit.
    ord: Field,
    /// The key as it is, untokenised: how an incremental rebuild finds the document of a row
    /// it replaces or removes (`update`). Indexes built before it existed lack it.
    id: Option<Field>,
    key: Field,
    what: Field,
    more: Field,
}

fn schema() -> (Schema, Fields) {
    let mut b = Schema::builder();
    let text = TextOptions::default().set_indexing_options(
        TextFieldIndexing::default()
            .set_tokenizer(ANALYZER)
            .set_index_option(IndexRecordOption::WithFreqs),
    );
    let fields = Fields {
        ord: b.add_u64_field("ord", tantivy::schema::FAST),
        id: Some(b.add_text_field("id", tantivy::schema::STRING)),
        key: b.add_text_field("key", text.clone()),
        what: b.add_text_field("what", text.clone()),
        more: b.add_text_field("more", text),
    };
    (b.build(), fields)
}

fn fields_of(schema: &Schema) -> Result<Fields> {
    let f = |n: &str| {
        schema
            .get_field(n)
            .with_context(|| format!("index has no field `{n}`"))
    };
    Ok(Fields {
        ord: f("ord")?,
        id: schema.get_field("id").ok(),
        key: f("key")?,
        what: f("what")?,
        more: f("more")?,
    })
}

/// Lower-case, English stop words out, Porter-style stems.
pub fn analyzer() -> TextAnalyzer {
    let stop = StopWordFilter::new(Language::English).expect("tantivy ships English stop words");
    TextAnalyzer::builder(SimpleTokenizer::default())
        .filter(RemoveLongFilter::limit(40))
        .filter(LowerCaser)
        .filter(stop)
        .filter(Stemmer::new(Language::English))
        .build()
}

/// `GITHUB_LIST_ISSUES` → `github list issues`; a part that is several words run together
/// (`WEATHERWHIZ`) is also split into words the catalogue itself uses, when it can be wholly.
pub fn key_words(key: &str, vocabulary: &Vocabulary) -> String {
    let mut out: Vec<String> = Vec::new();
    for part in key.split('_').filter(|w| !w.is_empty()) {
        let part = part.to_lowercase();
        if part.len() >= 6
            && !vocabulary.contains(&part)
            && let Some(pieces) = segment(&part, vocabulary)
        {
            out.extend(pieces);
        }
        out.push(part);
    }
    out.join(" ")
}

/// Split `word` into the fewest vocabulary words of three letters or more, if possible.
fn segment(word: &str, vocabulary: &Vocabulary) -> Option<Vec<String>> {
    let b = word.as_bytes();
    if !word.is_ascii() {
        return None;
    }
    // best[i]: fewest pieces covering word[..i], and where the last piece starts.
    let mut best: Vec<Option<(usize, usize)>> = vec![None; b.len() + 1];
    best[0] = Some((0, 0));
    for end in 3..=b.len() {
        for start in 0..=end - 3 {
            let Some((n, _)) = best[start] else { continue };
            if vocabulary.contains(&word[start..end]) && best[end].is_none_or(|(m, _)| n + 1 < m) {
                best[end] = Some((n + 1, start));
            }
        }
    }
    let (n, _) = best[b.len()]?;
    if n < 2 {
        return None;
    }
    let mut pieces = Vec::new();
    let mut end = b.len();
    while end > 0 {
        let (_, start) = best[end]?;
        pieces.push(word[start..end].to_string());
        end = start;
    }
    pieces.reverse();
    Some(pieces)
}

/// The words the catalogue's own text uses, for splitting run-together key parts.
fn vocabulary(rows: &[&Row]) -> Vocabulary {
    let mut v = Vocabulary::default();
    let mut word = String::new();
    for r in rows {
        let d = r.doc();
        let texts = [
            d.what.as_deref(),
            d.when_to_use.as_deref(),
            d.output.as_deref(),
        ];
        for t in texts
            .into_iter()
            .flatten()
            .chain(r.asks.iter().map(String::as_str))
        {
            // Words are ASCII letters, so lowercasing is ASCII's; a word seen before (most
            // of them) costs no allocation.
            for w in t.split(|c: char| !c.is_ascii_alphabetic()) {
                if w.len() >= 3 {
                    word.clear();
                    word.push_str(w);
                    word.make_ascii_lowercase();
                    if !v.contains(&word) {
                        v.insert(word.clone());
                    }
                }
            }
        }
    }
    v
}

fn meta(row: &Row) -> RowMeta {
    RowMeta {
        key: row.key.clone(),
        what: row.what().to_string(),
        category: row.category.clone(),
        kind: row.kind.as_str().to_string(),
        planner_rank: row.planner_rank,
        ex: crate::row::call::example_of(row),
    }
}

/// An open index, ready to answer.
pub struct Searcher {
    /// The index as it was when this searcher was made (never reloaded: `rows` are that
    /// build's), with each segment's `ord` column opened once, by segment: opening a fast
    /// field is most of a hit's cost when done per hit.
    index: Lexical,
    fields: Fields,
    /// Every indexed term, with a bit per field that holds it: query terms the index lacks
    /// never become clauses, which keeps long questions cheap.
    vocabulary: Arc<Terms>,
    /// The rows by their `ord`. A row an incremental rebuild replaced or removed keeps its
    /// place, with an empty key (its document is deleted, so no hit names it).
    rows: Arc<Vec<RowMeta>>,
    /// Key → position in `rows`, for `meta` on the ask path.
    by_key: Arc<std::collections::HashMap<String, usize>>,
    boosts: Boosts,
    analyzer: TextAnalyzer,
    /// The row vectors, when the index has them (a site built before them has not).
    semantic: Option<Arc<semantic::RowVectors>>,
    ranking: Ranking,
    fusion: Fusion,
}

impl std::fmt::Debug for Searcher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Searcher")
            .field("rows", &self.rows.len())
            .field("vectors", &self.semantic.is_some())
            .finish_non_exhaustive()
    }
}

fn add_rows(index: &Index, fields: &Fields, rows: &[&Row], vocabulary: &Vocabulary) -> Result<()> {
    let mut writer: tantivy::IndexWriter = index.writer_with_num_threads(1, 50_000_000)?;
    for (i, r) in rows.iter().enumerate() {
        writer.add_document(document(fields, r, i as u64, vocabulary))?;
    }
    writer.commit()?;
    writer.wait_merging_threads()?;
    Ok(())
}

/// What a row's vector is made of: its key's words, what it does, when to use it and the
/// requests its author says it answers (its asks, which BM25 reads too): a row found by its
/// asks alone must not lose them to rows that only sound closer.
pub(crate) fn semantic_text(row: &Row, vocabulary: &Vocabulary) -> String {
    let d = row.doc();
    let mut text = format!(
        "{}. {} {}",
        key_words(&row.key, vocabulary),
        d.what.as_deref().unwrap_or(""),
        d.when_to_use.as_deref().unwrap_or("")
    );
    for ask in &row.asks {
        text.push_str(". ");
        text.push_str(ask);
    }
    text
}

fn row_vectors(rows: &[&Row], vocabulary: &Vocabulary) -> Result<semantic::RowVectors> {
    let texts: Vec<String> = rows.iter().map(|r| semantic_text(r, vocabulary)).collect();
    Ok(semantic::RowVectors::build(semantic::model()?, &texts))
}

/// The document of `row` at position `ord` of `rows.json`.
fn document(
    fields: &Fields,
    r: &Row,
    ord: u64,
    vocabulary: &Vocabulary,
) -> tantivy::TantivyDocument {
    let [key, what, more] = document_text(r, vocabulary);
    let mut doc = doc!(
        fields.ord => ord,
        fields.key => key,
        fields.what => what,
        fields.more => more,
    );
    if let Some(id) = fields.id {
        doc.add_text(id, &r.key);
    }
    doc
}

/// The text a row's document indexes: its key's words, its WHAT, and the rest (when to use,
/// arguments, output, category and asks).
fn document_text(r: &Row, vocabulary: &Vocabulary) -> [String; 3] {
    let d = r.doc();
    [
        key_words(&r.key, vocabulary),
        d.what.clone().unwrap_or_default(),
        [
            d.when_to_use.as_deref().unwrap_or(""),
            d.args.as_deref().unwrap_or(""),
            d.output.as_deref().unwrap_or(""),
            &r.category.replace('-', " "),
            &r.asks.join("\n"),
        ]
        .join("\n"),
    ]
}

/// The rows an index holds: enabled ones, in key order.
/// The rows an ask may answer with: enabled and visible to planners (`planner_visible: false`
/// keeps a row callable by key but out of asks).
fn indexable(rows: &[Row]) -> Vec<&Row> {
    let mut v: Vec<&Row> = rows
        .iter()
        .filter(|r| r.enabled && r.planner_visible)
        .collect();
    v.sort_by(|a, b| a.key.cmp(&b.key));
    v
}

/// How a row's `planner_rank` weighs its search score: 1 at the default 100, up to 1.2 at 0
/// and down to 0.8 at 200 and beyond.
pub fn rank_weight(planner_rank: i64) -> f32 {
    1.0 + (100 - planner_rank).clamp(-100, 100) as f32 / 500.0
}

/// Write the index of `rows` into `dir` (created), deterministically.
pub fn build_index(dir: &Path, rows: &[Row]) -> Result<usize> {
    let rows = indexable(rows);
    std::fs::create_dir_all(dir)?;
    let (schema, fields) = schema();
    let index = Index::create_in_dir(dir, schema)?;
    index.tokenizers().register(ANALYZER, analyzer());
    let vocabulary = vocabulary(&rows);
    add_rows(&index, &fields, &rows, &vocabulary)?;
    drop(index);
    let metas: Vec<RowMeta> = rows.iter().map(|r| meta(r)).collect();
    std::fs::write(dir.join("rows.json"), serde_json::to_vec(&metas)?)?;
    make_deterministic(dir)?;
    let vectors = row_vectors(&rows, &vocabulary)?;
    std::fs::write(dir.join(SEMANTIC_FILE), vectors.to_bytes())?;
    Ok(rows.len())
}

/// Rename the segment's files from their random id to one derived from the rows, and drop
/// lock files, so two builds of the same catalogue are byte-identical.
fn make_deterministic(dir: &Path) -> Result<()> {
    for lock in [".tantivy-writer.lock", ".tantivy-meta.lock"] {
        let _ = std::fs::remove_file(dir.join(lock));
    }
    let meta_path = dir.join("meta.json");
    let meta = std::fs::read_to_string(&meta_path)?;
    let v: serde_json::Value = serde_json::from_str(&meta)?;
    let Some(segments) = v["segments"].as_array() else {
        return Ok(());
    };
    let rows = std::fs::read(dir.join("rows.json"))?;
    let mut meta = meta.clone();
    let mut managed = std::fs::read_to_string(dir.join(".managed.json")).unwrap_or_default();
    for (i, seg) in segments.iter().enumerate() {
        let Some(old) = seg["segment_id"].as_str() else {
            continue;
        };
        let mut h = Sha256::new();
        h.update(&rows);
        h.update(i.to_le_bytes());
        let new = hex::encode(&h.finalize()[..16]);
        let old_simple = old.replace('-', "");
        for entry in std::fs::read_dir(dir)? {
            let name = entry?.file_name().to_string_lossy().into_owned();
            if let Some(rest) = name.strip_prefix(&old_simple) {
                std::fs::rename(dir.join(&name), dir.join(format!("{new}{rest}")))?;
            }
        }
        let new_dashed = format!(
            "{}-{}-{}-{}-{}",
            &new[..8],
            &new[8..12],
            &new[12..16],
            &new[16..20],
            &new[20..]
        );
        meta = meta.replace(old, &new_dashed).replace(&old_simple, &new);
        managed = managed.replace(&old_simple, &new);
    }
    std::fs::write(&meta_path, meta)?;
    // The managed-file list is written from a hash set: sort it.
    if let Ok(mut files) = serde_json::from_str::<Vec<String>>(&managed) {
        files.sort();
        std::fs::write(dir.join(".managed.json"), serde_json::to_vec(&files)?)?;
    }
    Ok(())
}

/// Key → the row's place in `rows.json`, its last place when an incremental rebuild moved
/// it; the empty places of removed rows left out.
fn positions(rows: &[RowMeta]) -> std::collections::HashMap<String, usize> {
    rows.iter()
        .enumerate()
        .filter(|(_, m)| !m.key.is_empty())
        .map(|(i, m)| (m.key.clone(), i))
        .collect()
}

/// Every indexed term: a bit per field that holds it, and its largest document frequency.
type Terms = std::collections::HashMap<String, (u8, u32)>;

impl Fields {
    /// The searchable text fields, in the order of their bits in the vocabulary.
    fn text(&self) -> [Field; 3] {
        [self.key, self.what, self.more]
    }
}

/// Term → (a bit per field holding it, its largest document frequency in any field).
fn term_fields(reader: &IndexReader, fields: &Fields) -> Result<Terms> {
    let mut vocabulary = Terms::new();
    add_term_fields(&mut vocabulary, reader, fields, &|_| true)?;
    Ok(vocabulary)
}

/// Add the terms of the segments `wanted` says to read to `vocabulary`.
fn add_term_fields(
    vocabulary: &mut Terms,
    reader: &IndexReader,
    fields: &Fields,
    wanted: &dyn Fn(&tantivy::index::SegmentId) -> bool,
) -> Result<()> {
    let searcher = reader.searcher();
    for segment in searcher.segment_readers() {
        if !wanted(&segment.segment_id()) {
            continue;
        }
        for (bit, field) in fields.text().into_iter().enumerate() {
            let inverted = segment.inverted_index(field)?;
            let mut terms = inverted.terms().stream()?;
            while terms.advance() {
                if let Ok(t) = std::str::from_utf8(terms.key()) {
                    let df = terms.value().doc_freq;
                    match vocabulary.get_mut(t) {
                        Some(e) => {
                            e.0 |= 1 << bit;
                            e.1 = e.1.max(df);
                        }
                        None => {
                            vocabulary.insert(t.to_string(), (1 << bit, df));
                        }
                    }
                }
            }
        }
    }
    Ok(())
}

/// A reader's searcher and each of its segments' `ord` column.
pub(crate) struct Lexical {
    searcher: tantivy::Searcher,
    ords: Vec<tantivy::columnar::Column<u64>>,
}

impl Lexical {
    pub(crate) fn of(reader: &IndexReader) -> Result<Lexical> {
        let searcher = reader.searcher();
        let ords = searcher
            .segment_readers()
            .iter()
            .map(|segment| segment.fast_fields().u64("ord"))
            .collect::<tantivy::Result<_>>()?;
        Ok(Lexical { searcher, ords })
    }
}

impl Searcher {
    /// Open `site/index`.
    pub fn open(dir: &Path) -> Result<Searcher> {
        let index = Index::open_in_dir(dir)
            .with_context(|| format!("opening the search index in {}", dir.display()))?;
        index.tokenizers().register(ANALYZER, analyzer());
        let fields = fields_of(&index.schema())?;
        let rows: Vec<RowMeta> = serde_json::from_slice(&std::fs::read(dir.join("rows.json"))?)?;
        // Reloaded never by itself: its `rows` are those of the build it was opened on, and an
        // incremental rebuild changes the index in place (a new `Searcher` serves the change).
        let reader = index
            .reader_builder()
            .reload_policy(tantivy::ReloadPolicy::Manual)
            .try_into()?;
        let path = dir.join(SEMANTIC_FILE);
        let semantic = if semantic::RowVectors::other_version(&path) {
            // A site built by an older capdir (a followed host not yet republished): its
            // words still rank; its vectors are of another weighting and are not read.
            tracing::warn!(
                index = %dir.display(),
                "row vectors of another capdir's format: asks rank by words alone; rebuild the site"
            );
            None
        } else if path.exists() {
            let v = semantic::RowVectors::read(&path)?;
            if v.len() != rows.len() || v.dims() != semantic::model()?.dims() {
                anyhow::bail!(
                    "{}: {} vectors of {} for {} rows: rebuild the site",
                    path.display(),
                    v.len(),
                    v.dims(),
                    rows.len()
                );
            }
            Some(Arc::new(v))
        } else {
            tracing::warn!(index = %dir.display(), "no row vectors: asks rank by words alone; rebuild the site");
            None
        };
        Ok(Searcher {
            vocabulary: Arc::new(term_fields(&reader, &fields)?),
            index: Lexical::of(&reader)?,
            fields,
            by_key: Arc::new(positions(&rows)),
            rows: Arc::new(rows),
            boosts: Boosts::default(),
            analyzer: analyzer(),
            semantic,
            ranking: Ranking::default(),
            fusion: Fusion::default(),
        })
    }

    /// An index in memory, for `check`'s asks gate and for tests.
    pub fn in_memory(rows: &[Row]) -> Result<Searcher> {
        let rows = indexable(rows);
        let (schema, fields) = schema();
        let index = Index::create_in_ram(schema);
        index.tokenizers().register(ANALYZER, analyzer());
        let vocabulary = vocabulary(&rows);
        add_rows(&index, &fields, &rows, &vocabulary)?;
        let reader = index.reader()?;
        Ok(Searcher {
            semantic: Some(Arc::new(row_vectors(&rows, &vocabulary)?)),
            ranking: Ranking::default(),
            fusion: Fusion::default(),
            vocabulary: Arc::new(term_fields(&reader, &fields)?),
            index: Lexical::of(&reader)?,
            fields,
            by_key: Arc::new(
                rows.iter()
                    .enumerate()
                    .map(|(i, r)| (r.key.clone(), i))
                    .collect(),
            ),
            rows: Arc::new(rows.iter().map(|r| meta(r)).collect()),
            boosts: Boosts::default(),
            analyzer: analyzer(),
        })
    }

    pub fn with_boosts(mut self, boosts: Boosts) -> Searcher {
        self.boosts = boosts;
        self
    }

    pub fn with_ranking(mut self, ranking: Ranking) -> Searcher {
        self.ranking = ranking;
        self
    }

    pub fn with_fusion(mut self, fusion: Fusion) -> Searcher {
        self.fusion = fusion;
        self
    }

    pub fn ranking(&self) -> Ranking {
        self.ranking
    }

    /// Whether the index has row vectors (a site built before them has not).
    pub fn has_vectors(&self) -> bool {
        self.semantic.is_some()
    }

    /// What the index knows of a row.
    pub fn meta(&self, key: &str) -> Option<&RowMeta> {
        self.by_key.get(key).and_then(|&i| self.rows.get(i))
    }

    /// The rows an ask may answer with.
    pub fn len(&self) -> usize {
        self.by_key.len()
    }

    pub fn is_empty(&self) -> bool {
        self.by_key.is_empty()
    }

    /// The analysed terms of a query, each once.
    fn terms(&self, text: &str) -> Vec<String> {
        let mut analyzer = self.analyzer.clone();
        let mut stream = analyzer.token_stream(text);
        let mut terms: Vec<String> = Vec::new();
        while stream.advance() {
            let t = &stream.token().text;
            if !terms.contains(t) {
                terms.push(t.clone());
            }
        }
        terms
    }

    /// The best `limit` rows for `text`, best first, by the searcher's ranking (fused unless
    /// told otherwise). A row's score is weighed by its `planner_rank` (lower wins):
    /// `rank_weight` scales it by ±20% at most, so the rank decides between close candidates
    /// and never lifts a row that does not match. Ties go to the lower planner_rank, then the
    /// key.
    pub fn ask(&self, text: &str, limit: usize) -> Result<Vec<Hit>> {
        self.ask_by(text, limit, self.ranking)
    }

    /// `ask` with the ranking named: for `capdir eval --ablation`.
    pub fn ask_by(&self, text: &str, limit: usize, ranking: Ranking) -> Result<Vec<Hit>> {
        if limit == 0 {
            return Ok(Vec::new());
        }
        // A few extra so equal scores can be re-ordered by planner_rank.
        let depth = match ranking {
            Ranking::Fused => self.fusion.depth.max(limit + 8),
            _ => limit + 8,
        };
        let lists = self.lists(text, ranking, depth, self.fusion.floor)?;
        Ok(self
            .rank(&lists, ranking, self.fusion)
            .into_iter()
            .take(limit)
            .map(|(score, m)| Hit {
                key: m.key.clone(),
                score,
                what: m.what.clone(),
                category: m.category.clone(),
                kind: m.kind.clone(),
            })
            .collect())
    }

    /// Both rankings of `text`, each `depth` deep, the semantic one cut at cosine `floor`;
    /// a list the ranking does not need stays empty. Without vectors, only the lexical one.
    pub fn lists(&self, text: &str, ranking: Ranking, depth: usize, floor: f32) -> Result<Lists> {
        let mut lists = Lists::default();
        if text.trim().is_empty() {
            return Ok(lists);
        }
        // Semantic ranking reads the lexical list too: whether any row shares a word with the
        // request decides its floor (`Fusion::alone`).
        lists.lexical = self.lexical(text, depth)?;
        if let (Some(v), Ranking::Semantic | Ranking::Fused) = (&self.semantic, ranking)
            && let Some(query) = v.query(semantic::model()?, text)
        {
            let near = v.nearest(&query, depth, floor);
            lists.semantic = near.rows;
            lists.spread = near.spread;
            if ranking == Ranking::Fused {
                lists.lexical_cosines = lists
                    .lexical
                    .iter()
                    .map(|&(ord, _)| v.cosine(&query, ord))
                    .collect();
            }
        }
        Ok(lists)
    }

    /// The rows of `lists` ordered by `ranking`. Each list's scores are first weighed by the
    /// row's planner_rank (`rank_weight`) and re-sorted, so the rank moves a row past close
    /// competitors within a signal; the fused score is then z_lexical + weight · z_semantic
    /// (`Fusion`). Semantic hits below `fusion.floor` are left out.
    pub fn rank(&self, lists: &Lists, ranking: Ranking, fusion: Fusion) -> Vec<(f32, &RowMeta)> {
        let floor = if lists.lexical.is_empty() {
            fusion.floor.max(fusion.alone)
        } else {
            fusion.floor
        };
        let weighed = |list: &mut dyn Iterator<Item = &(usize, f32)>| {
            let mut v: Vec<(usize, f32)> = list
                .filter_map(|&(ord, score)| {
                    let m = self.rows.get(ord)?;
                    Some((ord, score * rank_weight(m.planner_rank)))
                })
                .collect();
            v.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
            v
        };
        let lexical = weighed(&mut lists.lexical.iter());
        let semantic = match &self.semantic {
            Some(_) => weighed(&mut lists.semantic.iter().filter(|(_, cos)| *cos >= floor)),
            None => Vec::new(),
        };
        let scored: Vec<(usize, f32)> = match ranking {
            _ if self.semantic.is_none() => lexical,
            Ranking::Lexical => lexical,
            Ranking::Semantic => semantic,
            Ranking::Fused => self.fuse(lists, &lexical, &semantic, fusion),
        };
        // A row removed by an incremental change keeps its place with an empty key.
        let mut hits: Vec<(f32, &RowMeta)> = scored
            .into_iter()
            .filter_map(|(ord, score)| Some((score, self.rows.get(ord)?)))
            .filter(|(_, m)| !m.key.is_empty())
            .collect();
        hits.sort_by(|a, b| {
            b.0.total_cmp(&a.0)
                .then(a.1.planner_rank.cmp(&b.1.planner_rank))
                .then(a.1.key.cmp(&b.1.key))
        });
        hits
    }

    /// The rows of both weighed lists, each scored z_lexical + weight · z_semantic. The
    /// lexical scores spread over all rows, a row outside the list scoring 0; the cosines'
    /// spread is the scan's, over all rows. A row of the lexical list has its cosine even when
    /// the semantic list is cut before it.
    fn fuse(
        &self,
        lists: &Lists,
        lexical: &[(usize, f32)],
        semantic: &[(usize, f32)],
        fusion: Fusion,
    ) -> Vec<(usize, f32)> {
        let lexical = &lexical[..lexical.len().min(fusion.depth)];
        let semantic = &semantic[..semantic.len().min(fusion.depth)];
        let (sum, squares) = lexical.iter().fold((0f64, 0f64), |(s, q), &(_, x)| {
            (s + f64::from(x), q + f64::from(x) * f64::from(x))
        });
        // Over the live rows: one removed in place keeps its place in `rows`, not its count.
        let words = semantic::Spread::of(self.len(), sum, squares);
        let mut cosine: std::collections::HashMap<usize, f32> = semantic.iter().copied().collect();
        for (&(ord, _), &cos) in lists.lexical.iter().zip(&lists.lexical_cosines) {
            let weight = self
                .rows
                .get(ord)
                .map_or(1.0, |m| rank_weight(m.planner_rank));
            cosine.entry(ord).or_insert(cos * weight);
        }
        let meaning = lists.spread;
        let mut fused: std::collections::HashMap<usize, f32> =
            std::collections::HashMap::with_capacity(lexical.len() + semantic.len());
        for &(ord, _) in semantic {
            fused.insert(ord, words.z(0.0));
        }
        for &(ord, score) in lexical {
            fused.insert(ord, words.z(score));
        }
        for (&ord, z) in fused.iter_mut() {
            if let Some(&cos) = cosine.get(&ord) {
                *z += fusion.weight * meaning.z(cos);
            }
        }
        fused.into_iter().collect()
    }

    /// The best `depth` rows by BM25: (position in `rows`, score), best first.
    fn lexical(&self, text: &str, depth: usize) -> Result<Vec<(usize, f32)>> {
        let terms = self.terms(text);
        if terms.is_empty() {
            return Ok(Vec::new());
        }
        let b = self.boosts;
        let boosts = [b.key, b.what, b.more];
        // Long requests keep their rarest terms: common words add little to BM25 and a lot
        // to the work of scoring.
        let mut known: Vec<(&String, u8, u32)> = terms
            .iter()
            .filter_map(|t| self.vocabulary.get(t).map(|&(mask, df)| (t, mask, df)))
            .collect();
        known.sort_by_key(|&(_, _, df)| df);
        known.truncate(MAX_QUERY_TERMS);
        let mut clauses: Vec<(Occur, Box<dyn Query>)> = Vec::new();
        for (t, mask, _) in known {
            for (bit, (field, boost)) in self.fields.text().into_iter().zip(boosts).enumerate() {
                if boost > 0.0 && mask & (1 << bit) != 0 {
                    let q = TermQuery::new(
                        Term::from_field_text(field, t),
                        IndexRecordOption::WithFreqs,
                    );
                    clauses.push((Occur::Should, Box::new(BoostQuery::new(Box::new(q), boost))));
                }
            }
        }
        if clauses.is_empty() {
            return Ok(Vec::new());
        }
        let query = BooleanQuery::new(clauses);
        let top = self
            .index
            .searcher
            .search(&query, &TopDocs::with_limit(depth).order_by_score())?;
        let mut out = Vec::with_capacity(top.len());
        for (bm25, addr) in top {
            let ords = self.index.ords.get(addr.segment_ord as usize);
            if let Some(o) = ords.and_then(|c| c.first(addr.doc_id)) {
                out.push((o as usize, bm25));
            }
        }
        // The fused ranking reads ranks: make equal scores deterministic.
        out.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
        Ok(out)
    }
}
