//! The semantic half of ask: a row and a request become one vector each, and rows are ranked
//! by the cosine between them. Nothing is downloaded and nothing runs a neural network.
//!
//! The vectors of words come with the binary: `models/wordllama/tokens.i8`, WordLlama's
//! `l2_supercat` token vectors (32,000 BPE tokens × 256, trained to be averaged into a
//! sentence vector; int8 per token, made by `models/wordllama/make.py` from the PyPI wheel it
//! pins), and their tokenizer (`tokenizer.json`). A text is split at whitespace and each word
//! into its tokens; its vector is the mean of its tokens' vectors weighted by each token's
//! inverse document frequency in *this* catalogue, so words every row uses weigh nothing. Two
//! limits keep one word from deciding a vector: a token fewer than `RARE_ROWS` rows use weighs
//! as if that many did (a word only one row's docstring says would otherwise outweigh the rest
//! of it), and a request's token no row uses weighs half the heaviest row token
//! (`UNKNOWN_SHARE`): it still says what the request means, but nothing in the catalogue
//! matches it. English stop words (the lexical index's list) weigh nothing.
//!
//! The row side is computed at build time into `index/semantic.bin` beside the lexical index
//! (`RowVectors`): the catalogue's document frequencies and one int8 vector per row, in the
//! order of `rows.json`. The request side is computed at ask time; a scan of int8 dot
//! products ranks every row.

use anyhow::{Context as _, Result, bail};
use std::path::Path;
use std::sync::OnceLock;
use tantivy::tokenizer::{Language, LowerCaser, SimpleTokenizer, StopWordFilter, TextAnalyzer};

use int8::dot;
#[cfg(target_arch = "x86_64")]
use int8::{dot_avx2, madd32};

const TOKENS: &[u8] = include_bytes!("../../models/wordllama/tokens.i8");
const TOKENIZER: &[u8] = include_bytes!("../../models/wordllama/tokenizer.json");
/// What `models/wordllama/make.py` recorded of the two files above.
pub const SHA256SUMS: &str = include_str!("../../models/wordllama/SHA256SUMS");

/// A text is read up to this many bytes (at a character boundary): a request longer than a
/// page says what it wants early, and the bound keeps a hostile one cheap.
const MAX_TEXT_BYTES: usize = 4096;
/// `Model::tokens` remembers the tokens of up to this many words (each at most
/// `CACHED_WORD_BYTES` long), then forgets them all and starts again: requests say the same
/// words again and again, and a BPE encoding of a long request is a fifth of its ask. The
/// words come from callers, so the bound is what holds the memory: at most about 200 bytes
/// a word (key, tokens, table), some 6.5 MB.
const CACHED_WORDS: usize = 1 << 15;
const CACHED_WORD_BYTES: usize = 48;
/// A request with more words than this that are not remembered is encoded at once and
/// remembers none (one encoding of many words costs half as much as one per word).
const FRESH_WORDS_AT_ONCE: usize = 24;
const ROWS_MAGIC: &[u8; 8] = b"CAPDIRSV";
/// A token fewer rows than this use weighs as if this many did (at most a tenth of the rows).
/// Chosen with `UNKNOWN_SHARE` on the three development sets (eval/README.md).
const RARE_ROWS: u32 = 5;
/// A request's token that no row uses weighs this share of the heaviest row token.
/// Chosen with `RARE_ROWS` on the three development sets (eval/README.md).
const UNKNOWN_SHARE: f32 = 0.5;
/// 6: rows made of WordLlama's vectors (`models/wordllama/`) weighed by the rounded IDF; a
/// version 4 file's rows are all-MiniLM-L6-v2 input vectors of another tokenizer, and a
/// version 5 file's were weighed unrounded: neither would match this binary's requests.
const ROWS_VERSION: u32 = 6;

/// `text` up to `MAX_TEXT_BYTES`, cut at a character boundary.
fn bounded(text: &str) -> &str {
    let mut end = text.len().min(MAX_TEXT_BYTES);
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    &text[..end]
}

/// The word vectors and the tokenizer that splits text into their tokens.
pub struct Model {
    tokenizer: tokenizers::Tokenizer,
    /// The tokens of words seen before (`tokens`).
    words: WordTokens,
    dims: usize,
    scale: Vec<f32>,
    vectors: &'static [i8],
    /// Tokens that carry no meaning of their own: stop words and the special tokens.
    ignored: Vec<bool>,
}

/// The parts of `tokenizer.json` that turn a text into token ids, each read by its own type
/// (`Tokenizer::from_bytes` reads the whole file as a tree first, its parts being tagged
/// enums): the normaliser (a `▁` before the text, `▁` for each space), the BPE model and
/// the added tokens. Padding, truncation, the post-processor (its `<s>` is never added:
/// `tokens` encodes without special tokens) and the decoder are left out: texts in, ids out.
#[derive(serde::Deserialize)]
struct TokenizerFile {
    normalizer: tokenizers::normalizers::NormalizerWrapper,
    model: tokenizers::models::bpe::BPE,
    added_tokens: Vec<tokenizers::AddedToken>,
}

/// The BPE tokenizer `tokenizer.json` describes (each part checks its `type`).
fn bpe_tokenizer(bytes: &[u8]) -> Result<tokenizers::Tokenizer> {
    let file: TokenizerFile =
        serde_json::from_slice(bytes).context("tokenizer.json is not a BPE tokenizer")?;
    let mut tokenizer = tokenizers::Tokenizer::new(file.model);
    tokenizer
        .with_normalizer(Some(file.normalizer))
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    tokenizer
        .add_tokens(file.added_tokens)
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    Ok(tokenizer)
}

/// The embedded model, decoded once.
pub fn model() -> Result<&'static Model> {
    static MODEL: OnceLock<std::result::Result<Model, String>> = OnceLock::new();
    MODEL
        .get_or_init(|| Model::decode(TOKENS, TOKENIZER).map_err(|e| format!("{e:#}")))
        .as_ref()
        .map_err(|e| anyhow::anyhow!("the embedded word vectors: {e}"))
}

fn u32_at(bytes: &[u8], at: usize) -> Result<u32> {
    let b = bytes.get(at..at + 4).context("truncated")?;
    Ok(u32::from_le_bytes(b.try_into()?))
}

impl Model {
    fn decode(tokens: &'static [u8], tokenizer: &[u8]) -> Result<Model> {
        if tokens.get(..8) != Some(b"CAPDIRTE".as_slice()) {
            bail!("tokens.i8 does not start with CAPDIRTE");
        }
        let (vocab, dims) = (u32_at(tokens, 8)? as usize, u32_at(tokens, 12)? as usize);
        if vocab > usize::from(u16::MAX) + 1 {
            bail!("tokens.i8 has {vocab} tokens; rows store token ids as u16");
        }
        let scales = 16 + 4 * vocab;
        if tokens.len() != scales + vocab * dims {
            bail!(
                "tokens.i8 holds {} bytes, not {vocab} × {dims}",
                tokens.len()
            );
        }
        let scale = tokens[16..scales]
            .chunks_exact(4)
            .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
            .collect();
        // Safe: i8 and u8 have the same size and alignment.
        let vectors: &'static [i8] = unsafe {
            std::slice::from_raw_parts(tokens[scales..].as_ptr().cast::<i8>(), vocab * dims)
        };
        let tokenizer = bpe_tokenizer(tokenizer)?;
        let mut ignored = vec![false; vocab];
        let mut stop = TextAnalyzer::builder(SimpleTokenizer::default())
            .filter(LowerCaser)
            .filter(StopWordFilter::new(Language::English).context("English stop words")?)
            .build();
        for (token, id) in tokenizer.get_vocab(true) {
            let Some(slot) = ignored.get_mut(id as usize) else {
                continue;
            };
            // `<unk>`, `<s>`, `</s>` and the byte tokens `<0x00>`…`<0xFF>`; `▁` is a space
            // and a run of them spaces. A word's first piece starts with `▁`: only such a
            // piece is a stop word, not the `a` inside `sh|a|256`.
            let special = token.starts_with('<') && token.ends_with('>');
            let space = token.chars().all(|c| c == '\u{2581}');
            let stop_word = token.strip_prefix('\u{2581}').is_some_and(|word| {
                word.chars().all(|c| c.is_ascii_alphabetic()) && {
                    let mut s = stop.token_stream(word);
                    !s.advance()
                }
            });
            *slot = special || space || stop_word;
        }
        Ok(Model {
            tokenizer,
            words: WordTokens::new(CACHED_WORDS),
            dims,
            scale,
            vectors,
            ignored,
        })
    }

    pub fn dims(&self) -> usize {
        self.dims
    }

    /// acc += weight(t) · vector(t) for every token.
    #[inline(always)]
    fn accumulate(&self, tokens: &[u16], weight: &[f32], acc: &mut [f32]) {
        for &t in tokens {
            let w = weight.get(t as usize).copied().unwrap_or(0.0) * self.scale[t as usize];
            if w == 0.0 {
                continue;
            }
            let v = &self.vectors[t as usize * self.dims..][..self.dims];
            for (a, &x) in acc.iter_mut().zip(v) {
                *a += w * f32::from(x);
            }
        }
    }

    /// `accumulate` compiled for AVX2 and FMA: a build embeds every row with it.
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx2,fma")]
    unsafe fn accumulate_avx2(&self, tokens: &[u16], weight: &[f32], acc: &mut [f32]) {
        self.accumulate(tokens, weight, acc);
    }

    /// The meaningful tokens of `text`, in order: its whitespace-separated words, each the
    /// tokens it is wherever it stands. The normaliser makes a space `▁` but leaves a tab or
    /// a newline, and puts a `▁` before the whole text only; so the words are joined by one
    /// space and encoded at once, which gives each word's own tokens because no token of the
    /// vocabulary holds a `▁` after a letter (`no_token_spans_two_words`). One call, not one
    /// a word: one call over the joined words is the faster (a long request, measured).
    /// A word's tokens are therefore the same wherever it stands, and the tokens of words
    /// seen before are remembered (`CACHED_WORDS`).
    pub fn tokens(&self, text: &str) -> Vec<u16> {
        let words: Vec<&str> = bounded(text).split_whitespace().collect();
        self.words.tokens(&words, |w| self.encode(w))
    }

    /// The meaningful tokens of `words` joined by one space, encoded at once.
    fn encode(&self, words: &[&str]) -> Vec<u16> {
        let mut joined = String::with_capacity(words.iter().map(|w| w.len() + 1).sum());
        for word in words {
            if !joined.is_empty() {
                joined.push(' ');
            }
            joined.push_str(word);
        }
        let mut out = Vec::new();
        self.push_tokens(&joined, &mut out);
        out
    }

    fn push_tokens(&self, text: &str, out: &mut Vec<u16>) {
        if text.is_empty() {
            return;
        }
        if let Ok(enc) = self.tokenizer.encode_fast(text, false) {
            // `decode` made sure every id of the vocabulary fits in a u16.
            out.extend(
                enc.get_ids()
                    .iter()
                    .filter(|&&t| self.ignored.get(t as usize) == Some(&false))
                    .map(|&t| t as u16),
            );
        }
    }

    /// `tokens`, remembering each word's tokens in `cache`: a catalogue says the same words
    /// again and again.
    fn tokens_cached<'t>(
        &self,
        text: &'t str,
        cache: &mut std::collections::HashMap<&'t str, Vec<u16>>,
    ) -> Vec<u16> {
        let mut out = Vec::new();
        for word in bounded(text).split_whitespace() {
            let tokens = cache.entry(word).or_insert_with(|| self.encode(&[word]));
            out.extend_from_slice(tokens);
        }
        out
    }

    /// Σ weight(t) · vector(t) over `tokens`, as int8 with its scale, normalised so the dot
    /// product of two such vectors times their scales is their cosine. None when nothing
    /// weighs anything.
    fn embed(&self, tokens: &[u16], weight: &[f32]) -> Option<(Vec<i8>, f32)> {
        let mut acc = vec![0f32; self.dims];
        #[cfg(target_arch = "x86_64")]
        if std::arch::is_x86_feature_detected!("avx2") && std::arch::is_x86_feature_detected!("fma")
        {
            // SAFETY: the CPU has just said it has AVX2 and FMA.
            unsafe { self.accumulate_avx2(tokens, weight, &mut acc) };
        } else {
            self.accumulate(tokens, weight, &mut acc);
        }
        #[cfg(not(target_arch = "x86_64"))]
        self.accumulate(tokens, weight, &mut acc);
        let norm = acc.iter().map(|a| a * a).sum::<f32>().sqrt();
        if norm.is_nan() || norm <= 1e-9 {
            return None;
        }
        let max = acc.iter().fold(0f32, |m, a| m.max(a.abs()));
        let scale = max / 127.0;
        let q = acc.iter().map(|a| (a / scale).round() as i8).collect();
        Some((q, scale / norm))
    }
}

/// The row side: each row's vector, the catalogue's token frequencies, and each row's
/// tokens, so a change of a few rows (`changed`) tokenises only those rows.
pub struct RowVectors {
    dims: usize,
    /// Per token: how many rows use it.
    df: Vec<u32>,
    /// Per token: its weight in a row, from `df` (see `idf`).
    idf: Vec<f32>,
    /// Per token: its weight in a request: `idf`, but `UNKNOWN_SHARE` of the heaviest row
    /// token for a token no row uses.
    query_idf: Vec<f32>,
    /// Per row: the factor that turns its int8 dot product into a cosine.
    scale: Vec<f32>,
    /// How many rows have a vector (a scale that is not 0).
    with_vectors: usize,
    /// Per row: where its tokens end in `ids`.
    ends: Vec<u32>,
    ids: Vec<u16>,
    /// Per row, `dims` int8 values, stored as their bytes (see `rows`).
    data: Vec<u8>,
}

impl RowVectors {
    /// The vectors of `texts` (one per row, in index order).
    pub fn build(model: &Model, texts: &[String]) -> RowVectors {
        let mut cache = std::collections::HashMap::new();
        let mut v = RowVectors::empty(model, texts.len());
        for text in texts {
            v.ids.extend(model.tokens_cached(text, &mut cache));
            v.ends.push(v.ids.len() as u32);
        }
        v.finish(model);
        v
    }

    /// These vectors with the rows at `cleared` emptied (a removed row keeps its place, as in
    /// `rows.json`) and rows of `added` texts appended; every vector weighed again, since the
    /// catalogue's frequencies changed.
    pub fn changed(&self, model: &Model, cleared: &[usize], added: &[String]) -> RowVectors {
        let mut v = RowVectors::empty(model, self.len() + added.len());
        for i in 0..self.len() {
            if !cleared.contains(&i) {
                v.ids.extend_from_slice(self.tokens(i));
            }
            v.ends.push(v.ids.len() as u32);
        }
        for text in added {
            v.ids.extend(model.tokens(text));
            v.ends.push(v.ids.len() as u32);
        }
        v.finish_from(model, Some((self, cleared)));
        v
    }

    /// No rows yet, room for `rows`.
    fn empty(model: &Model, rows: usize) -> RowVectors {
        RowVectors {
            dims: model.dims,
            df: vec![0u32; model.scale.len()],
            idf: Vec::new(),
            query_idf: Vec::new(),
            scale: Vec::with_capacity(rows),
            with_vectors: 0,
            ends: Vec::with_capacity(rows),
            ids: Vec::new(),
            data: Vec::with_capacity(rows * model.dims),
        }
    }

    /// Frequencies, then every row's vector, from the rows' tokens.
    fn finish(&mut self, model: &Model) {
        self.finish_from(model, None);
    }

    /// [`finish`](Self::finish), after a change of the vectors `before` (row `i` here is row
    /// `i` there, but for the rows `cleared` and those appended): a row none of whose tokens
    /// weighs other than it did keeps its vector, which is the one weighing it again would
    /// give bit for bit. An edit changes the weight of the tokens it adds or drops, so a
    /// one-row change weighs again the rows that share one of those, not all of them.
    fn finish_from(&mut self, model: &Model, before: Option<(&RowVectors, &[usize])>) {
        self.count();
        // Per token: does it weigh other than before? (Every token, when the number of rows
        // with words changed: each weight depends on it.)
        let before = before
            .filter(|(b, _)| b.idf.len() == self.idf.len() && b.dims == self.dims)
            .map(|(b, cleared)| {
                let reweighed: Vec<bool> = b
                    .idf
                    .iter()
                    .zip(&self.idf)
                    .map(|(x, y)| x.to_bits() != y.to_bits())
                    .collect();
                (b, cleared, reweighed)
            });
        for i in 0..self.len() {
            let kept = before.as_ref().and_then(|(b, cleared, reweighed)| {
                let same = !cleared.contains(&i)
                    && !self
                        .tokens(i)
                        .iter()
                        .any(|&t| reweighed.get(t as usize).is_none_or(|&r| r));
                same.then(|| b.vector(i)).flatten()
            });
            if let Some((held, scale)) = kept {
                self.data.extend_from_slice(held);
                self.scale.push(scale);
                continue;
            }
            match model.embed(self.tokens(i), &self.idf) {
                Some((q, s)) => {
                    self.data.extend(q.iter().map(|&x| x as u8));
                    self.scale.push(s);
                }
                None => {
                    self.data.extend(std::iter::repeat_n(0, model.dims));
                    self.scale.push(0.0);
                }
            }
        }
        self.with_vectors = with_vectors(&self.scale);
    }

    /// Row `i`'s int8 vector (as bytes) and scale, if it has a place.
    fn vector(&self, i: usize) -> Option<(&[u8], f32)> {
        let held = self.data.get(i * self.dims..(i + 1) * self.dims)?;
        Some((held, *self.scale.get(i)?))
    }

    /// Row `i`'s tokens.
    fn tokens(&self, i: usize) -> &[u16] {
        let start = if i == 0 { 0 } else { self.ends[i - 1] as usize };
        &self.ids[start..self.ends[i] as usize]
    }

    /// `df` and `idf` from the rows' tokens.
    fn count(&mut self) {
        let mut seen = Vec::new();
        for i in 0..self.ends.len() {
            seen.clear();
            seen.extend_from_slice(self.tokens(i));
            seen.sort_unstable();
            seen.dedup();
            for &t in &seen {
                if let Some(n) = self.df.get_mut(t as usize) {
                    *n += 1;
                }
            }
        }
        // The rows with words: a row removed in place is not counted, as in a full build.
        let rows = (0..self.ends.len())
            .filter(|&i| !self.tokens(i).is_empty())
            .count();
        self.idf = idf(rows as u32, &self.df);
        let heaviest = self
            .idf
            .iter()
            .zip(&self.df)
            .filter(|&(_, &d)| d > 0)
            .fold(0f32, |m, (&w, _)| m.max(w));
        self.query_idf = self
            .idf
            .iter()
            .zip(&self.df)
            .map(|(&w, &d)| if d == 0 { UNKNOWN_SHARE * heaviest } else { w })
            .collect();
    }

    pub fn len(&self) -> usize {
        self.ends.len()
    }

    pub fn dims(&self) -> usize {
        self.dims
    }

    pub fn is_empty(&self) -> bool {
        self.ends.is_empty()
    }

    /// `text` as a request's vector, weighed by this catalogue's frequencies. None when
    /// none of its tokens weighs anything.
    pub fn query(&self, model: &Model, text: &str) -> Option<Query> {
        let tokens = model.tokens(text);
        let (vector, scale) = model.embed(&tokens, &self.query_idf)?;
        Some(Query::new(vector, scale))
    }

    /// Every row with a cosine to `query` of at least `floor`, best first, at most `limit`:
    /// (position in the index, cosine); and how the cosines of all rows spread.
    pub fn nearest(&self, query: &Query, limit: usize, floor: f32) -> Nearest {
        let mut best = Best::new(limit);
        #[cfg(target_arch = "x86_64")]
        if std::arch::is_x86_feature_detected!("avx2") {
            // SAFETY: the CPU has just said it has AVX2.
            let spread = unsafe { self.scan_avx2(query, floor, &mut best) };
            return Nearest {
                rows: best.into_sorted(),
                spread,
            };
        }
        let spread = self.scan(query, floor, &mut best);
        Nearest {
            rows: best.into_sorted(),
            spread,
        }
    }

    /// The cosine of row `i` to `query` (0 for a row that is not there).
    pub fn cosine(&self, query: &Query, i: usize) -> f32 {
        let (Some(row), Some(&rs)) = (self.rows().nth(i), self.scale.get(i)) else {
            return 0.0;
        };
        #[cfg(target_arch = "x86_64")]
        if std::arch::is_x86_feature_detected!("avx2") {
            // SAFETY: the CPU has just said it has AVX2.
            return unsafe { dot_avx2(query, row) } as f32 * query.scale * rs;
        }
        dot(&query.vector, row) as f32 * query.scale * rs
    }

    /// Offer every row at least `floor` close to `query` to `best`, and say how all rows'
    /// cosines spread. The sums are kept in four lanes, row i in lane i mod 4 up to the last
    /// whole four and the rest after them, as `scan_avx2` keeps them: both give the same
    /// figures to the bit.
    fn scan(&self, query: &Query, floor: f32, best: &mut Best) -> Spread {
        let mut sums = Sums::default();
        let whole = self.scale.len().min(self.rows().len()) / 4 * 4;
        for (i, (row, &rs)) in self.rows().zip(&self.scale).enumerate() {
            let cos = dot(&query.vector, row) as f32 * query.scale * rs;
            sums.add(if i < whole { i % 4 } else { 4 }, cos);
            if cos >= floor {
                best.offer(i, cos);
            }
        }
        sums.spread(self.with_vectors)
    }

    /// `scan` with AVX2, four rows at a time: each 32 values of the request are loaded once
    /// for the four, their dot products summed across lanes together, their cosines made and
    /// compared with what `best` keeps at once. Most of an ask's time at 100,000 rows.
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx2")]
    unsafe fn scan_avx2(&self, query: &Query, floor: f32, best: &mut Best) -> Spread {
        use std::arch::x86_64::*;
        let dims = self.dims;
        let n = self.scale.len().min(self.rows().len());
        let fits =
            dims.is_multiple_of(32) && query.vector.len() >= dims && query.magnitude.len() >= dims;
        if !fits {
            return self.scan(query, floor, best);
        }
        let data = self.data.as_ptr().cast::<i8>();
        let qscale = _mm_set1_ps(query.scale);
        let (mut sum, mut squares) = (_mm256_setzero_pd(), _mm256_setzero_pd());
        let mut cos = [0f32; 4];
        let whole = n / 4 * 4;
        for at in (0..whole).step_by(4) {
            let mut acc = [_mm256_setzero_si256(); 4];
            for k in (0..dims).step_by(32) {
                // SAFETY: k + 32 <= dims, within the request's two vectors; rows at..at + 4
                // are below n, so each row's k..k + 32 is within `data`. Unaligned loads.
                unsafe {
                    let sign = _mm256_loadu_si256(query.vector.as_ptr().add(k).cast());
                    let size = _mm256_loadu_si256(query.magnitude.as_ptr().add(k).cast());
                    for (r, a) in acc.iter_mut().enumerate() {
                        let row = _mm256_loadu_si256(data.add((at + r) * dims + k).cast());
                        *a = madd32(*a, row, sign, size);
                    }
                }
            }
            // [Σ row at, Σ at + 1, Σ at + 2, Σ at + 3], each of its eight lanes.
            let h = _mm256_hadd_epi32(
                _mm256_hadd_epi32(acc[0], acc[1]),
                _mm256_hadd_epi32(acc[2], acc[3]),
            );
            let dots = _mm_add_epi32(_mm256_castsi256_si128(h), _mm256_extracti128_si256::<1>(h));
            // SAFETY: at + 4 <= n <= scale.len().
            let rs = unsafe { _mm_loadu_ps(self.scale.as_ptr().add(at)) };
            // (dot · request scale) · row scale, in `cosine`'s order: the same f32s.
            let c = _mm_mul_ps(_mm_mul_ps(_mm_cvtepi32_ps(dots), qscale), rs);
            let wide = _mm256_cvtps_pd(c);
            sum = _mm256_add_pd(sum, wide);
            squares = _mm256_add_pd(squares, _mm256_mul_pd(wide, wide));
            let bar = _mm_set1_ps(best.bar.max(floor));
            if _mm_movemask_ps(_mm_cmpge_ps(c, bar)) != 0 {
                // SAFETY: cos holds four f32s.
                unsafe { _mm_storeu_ps(cos.as_mut_ptr(), c) };
                for (r, &c) in cos.iter().enumerate() {
                    if c >= floor {
                        best.offer(at + r, c);
                    }
                }
            }
        }
        let mut sums = Sums::default();
        // SAFETY: each array holds four f64s.
        unsafe {
            _mm256_storeu_pd(sums.sum.as_mut_ptr(), sum);
            _mm256_storeu_pd(sums.squares.as_mut_ptr(), squares);
        }
        for (i, (row, &rs)) in self.rows().zip(&self.scale).enumerate().skip(whole) {
            // SAFETY: AVX2 is on (this function's target feature).
            let c = unsafe { dot_avx2(query, row) } as f32 * query.scale * rs;
            sums.add(4, c);
            if c >= floor {
                best.offer(i, c);
            }
        }
        sums.spread(self.with_vectors)
    }

    /// `b"CAPDIRSV"`, u32 version, dims, stored rows; per row f32 scale, then u32 end of
    /// its tokens; u16 token ids; i8 vector[rows][dims]. Little-endian. The token frequencies
    /// are counted again from the tokens when the file is read.
    pub fn to_bytes(&self) -> Vec<u8> {
        let n = self.len();
        let mut out = Vec::with_capacity(20 + 8 * n + 2 * self.ids.len() + self.data.len());
        out.extend_from_slice(ROWS_MAGIC);
        for x in [ROWS_VERSION, self.dims as u32, n as u32] {
            out.extend_from_slice(&x.to_le_bytes());
        }
        for s in &self.scale {
            out.extend_from_slice(&s.to_le_bytes());
        }
        for e in &self.ends {
            out.extend_from_slice(&e.to_le_bytes());
        }
        for t in &self.ids {
            out.extend_from_slice(&t.to_le_bytes());
        }
        out.extend_from_slice(&self.data);
        out
    }

    /// Each row's vector.
    fn rows(&self) -> impl ExactSizeIterator<Item = &[i8]> {
        // SAFETY: i8 and u8 have the same size and alignment; every bit pattern is valid.
        let data: &[i8] =
            unsafe { std::slice::from_raw_parts(self.data.as_ptr().cast::<i8>(), self.data.len()) };
        data.chunks_exact(self.dims)
    }

    pub fn from_bytes(bytes: &[u8]) -> Result<RowVectors> {
        RowVectors::from_vec(bytes.to_vec())
    }

    /// The file's bytes, read in place: the vectors keep the buffer they came in, so loading
    /// 100,000 rows does not hold two copies at once.
    pub fn from_vec(mut bytes: Vec<u8>) -> Result<RowVectors> {
        if bytes.get(..8) != Some(ROWS_MAGIC.as_slice()) {
            bail!("not a capdir row-vectors file");
        }
        let version = u32_at(&bytes, 8)?;
        if version != ROWS_VERSION {
            bail!("row-vectors version {version}; this capdir reads {ROWS_VERSION}: rebuild");
        }
        let dims = u32_at(&bytes, 12)? as usize;
        let n = u32_at(&bytes, 16)? as usize;
        let vocab = model()?.scale.len();
        // Every size below is at most 8 × a u32: no overflow on a 64-bit usize.
        let (scales, ends) = (20, 20 + 4 * n);
        let ids_at = 20 + 8 * n;
        if dims == 0 || bytes.len() < ids_at {
            bail!("row-vectors header is impossible (dims {dims}, {n} rows)");
        }
        let words = |range: std::ops::Range<usize>| {
            bytes[range]
                .chunks_exact(4)
                .map(|b| [b[0], b[1], b[2], b[3]])
                .collect::<Vec<_>>()
        };
        let scale: Vec<f32> = words(scales..ends)
            .into_iter()
            .map(f32::from_le_bytes)
            .collect();
        let end_list: Vec<u32> = words(ends..ids_at)
            .into_iter()
            .map(u32::from_le_bytes)
            .collect();
        let total = end_list.last().copied().unwrap_or(0) as usize;
        if end_list.windows(2).any(|w| w[0] > w[1]) {
            bail!("row-vectors token offsets go backwards");
        }
        let data_at = ids_at + 2 * total;
        if Some(bytes.len()) != n.checked_mul(dims).and_then(|v| v.checked_add(data_at)) {
            bail!(
                "row-vectors file is {} bytes, not what its header says",
                bytes.len()
            );
        }
        let ids: Vec<u16> = bytes[ids_at..data_at]
            .chunks_exact(2)
            .map(|b| u16::from_le_bytes([b[0], b[1]]))
            .collect();
        if ids.iter().any(|&t| t as usize >= vocab) {
            bail!("row-vectors name a token the model does not have");
        }
        // A vector's values are within ±127 (`Model::embed`); the scan's sign trick
        // (`dot_avx2`) relies on it.
        if memchr::memchr(0x80, &bytes[data_at..]).is_some() {
            bail!("row-vectors hold a value of -128, which capdir never writes");
        }
        bytes.drain(..data_at);
        bytes.shrink_to_fit();
        let mut v = RowVectors {
            dims,
            df: vec![0; vocab],
            idf: Vec::new(),
            query_idf: Vec::new(),
            with_vectors: with_vectors(&scale),
            scale,
            ends: end_list,
            ids,
            data: bytes,
        };
        v.count();
        Ok(v)
    }

    /// Does `path` hold row vectors in a format version other than the one this capdir
    /// writes? False when it holds none, or not row vectors at all (`read` says what is wrong).
    pub fn other_version(path: &Path) -> bool {
        use std::io::Read as _;
        let mut head = [0u8; 12];
        std::fs::File::open(path)
            .and_then(|mut f| f.read_exact(&mut head))
            .is_ok()
            && &head[..8] == ROWS_MAGIC
            && u32::from_le_bytes([head[8], head[9], head[10], head[11]]) != ROWS_VERSION
    }

    pub fn read(path: &Path) -> Result<RowVectors> {
        let bytes = std::fs::read(path).with_context(|| format!("reading {}", path.display()))?;
        RowVectors::from_vec(bytes).with_context(|| path.display().to_string())
    }
}

/// How many rows have a vector: a scale that is not 0 (a row removed in place, or one whose
/// words weigh nothing, has none).
fn with_vectors(scale: &[f32]) -> usize {
    scale.iter().filter(|&&s| s != 0.0).count()
}

/// Words' tokens remembered across requests: at most `capacity` words, each at most
/// `CACHED_WORD_BYTES` long; when full, all are forgotten and it starts again.
struct WordTokens {
    capacity: usize,
    map: std::sync::RwLock<crate::FastMap<Box<str>, Box<[u16]>>>,
}

impl WordTokens {
    fn new(capacity: usize) -> WordTokens {
        WordTokens {
            capacity,
            map: Default::default(),
        }
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.map.read().unwrap_or_else(|e| e.into_inner()).len()
    }

    /// The tokens of `words` in order, each word's those `encode(&[word])` gives, which are
    /// its part of `encode(words)` (`Model::tokens`). Words not remembered are encoded one
    /// by one and remembered, unless there are more than `FRESH_WORDS_AT_ONCE` of them or
    /// one is too long to keep: then `encode(words)`, at once.
    fn tokens(&self, words: &[&str], encode: impl Fn(&[&str]) -> Vec<u16>) -> Vec<u16> {
        let all = |map: &crate::FastMap<Box<str>, Box<[u16]>>| -> Option<Vec<u16>> {
            let mut out = Vec::new();
            for w in words {
                out.extend_from_slice(map.get(*w)?);
            }
            Some(out)
        };
        let mut fresh: Vec<&str> = {
            let map = self.map.read().unwrap_or_else(|e| e.into_inner());
            if let Some(out) = all(&map) {
                return out;
            }
            words
                .iter()
                .copied()
                .filter(|w| !map.contains_key(*w))
                .collect()
        };
        fresh.sort_unstable();
        fresh.dedup();
        if fresh.len() > FRESH_WORDS_AT_ONCE || fresh.iter().any(|w| w.len() > CACHED_WORD_BYTES) {
            return encode(words);
        }
        let encoded: Vec<(&str, Vec<u16>)> = fresh.into_iter().map(|w| (w, encode(&[w]))).collect();
        let mut map = self.map.write().unwrap_or_else(|e| e.into_inner());
        if map.len() + encoded.len() > self.capacity {
            map.clear();
        }
        for (w, t) in encoded {
            map.insert(w.into(), t.into());
        }
        // A word remembered when this request was read may be forgotten by now (the clear
        // above, or another request's): then the request is encoded at once.
        match all(&map) {
            Some(out) => out,
            None => {
                drop(map);
                encode(words)
            }
        }
    }
}

/// The sums a scan keeps of its cosines and their squares: four lanes and the rows after
/// the last whole four (lane 4), added up in one order whatever computed them.
#[derive(Default)]
struct Sums {
    sum: [f64; 5],
    squares: [f64; 5],
}

impl Sums {
    fn add(&mut self, lane: usize, cos: f32) {
        let c = f64::from(cos);
        self.sum[lane] += c;
        self.squares[lane] += c * c;
    }

    /// Over the rows that have a vector: a row removed in place (or one whose words weigh
    /// nothing) adds 0 to both sums and is not counted, as a full build would not have it.
    fn spread(&self, rows: usize) -> Spread {
        let total = |v: &[f64; 5]| (((v[0] + v[1]) + v[2]) + v[3]) + v[4];
        Spread::of(rows, total(&self.sum), total(&self.squares))
    }
}

/// A request's vector (values within ±127) and each value's magnitude, for the scan's
/// unsigned-by-signed multiply-adds, with the factor that turns its dot product with a row
/// into their cosine.
pub struct Query {
    vector: Vec<i8>,
    magnitude: Vec<u8>,
    scale: f32,
}

impl Query {
    fn new(vector: Vec<i8>, scale: f32) -> Query {
        Query {
            magnitude: vector.iter().map(|x| x.unsigned_abs()).collect(),
            vector,
            scale,
        }
    }
}

/// What `RowVectors::nearest` found.
#[derive(Debug, Clone, Default)]
pub struct Nearest {
    /// (position in the index, cosine), best first.
    pub rows: Vec<(usize, f32)>,
    pub spread: Spread,
}

/// The mean and standard deviation of a set of scores: where a score stands among them.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Spread {
    pub mean: f32,
    pub sd: f32,
}

impl Spread {
    /// From the count, sum and sum of squares of the scores.
    pub fn of(n: usize, sum: f64, squares: f64) -> Spread {
        if n == 0 {
            return Spread::default();
        }
        let mean = sum / n as f64;
        let var = (squares / n as f64 - mean * mean).max(0.0);
        Spread {
            mean: mean as f32,
            sd: var.sqrt() as f32,
        }
    }

    /// How many standard deviations `score` is above the mean; 0 when the scores do not spread.
    pub fn z(&self, score: f32) -> f32 {
        if self.sd <= 1e-6 {
            0.0
        } else {
            (score - self.mean) / self.sd
        }
    }
}

/// Per token, ln((N + 1) / (max(df, rare) + ½)), never below zero, where rare is
/// `RARE_ROWS` or a tenth of the rows if fewer: a rare token weighs no more than one that a
/// few rows use. Rounded to 1/64 (`IDF_STEP`): a change of one row moves the weight of a
/// token most rows use by less than that, so `RowVectors::changed` keeps those rows'
/// vectors instead of weighing every row again (a BPE punctuation piece such as `).` can be
/// in every row).
fn idf(rows: u32, df: &[u32]) -> Vec<f32> {
    let rare = RARE_ROWS.min(rows / 10);
    df.iter()
        .map(|&d| {
            let w = ((rows as f32 + 1.0) / (d.max(rare) as f32 + 0.5))
                .ln()
                .max(0.0);
            (w / IDF_STEP).round() * IDF_STEP
        })
        .collect()
}

/// What a token's weight is rounded to (`idf`).
const IDF_STEP: f32 = 1.0 / 64.0;

/// The `limit` best (position, cosine) pairs seen so far: a bounded min-heap, so a scan of
/// 100,000 rows allocates for 100.
struct Best {
    limit: usize,
    heap: std::collections::BinaryHeap<std::cmp::Reverse<Scored>>,
    /// The worst cosine kept once `limit` are kept (−∞ before): a lower one is passed over
    /// with one comparison, as most rows of a scan are.
    bar: f32,
}

/// Ordered by cosine, then by the lower position (better = greater).
#[derive(PartialEq)]
struct Scored(f32, usize);

impl Eq for Scored {}

impl PartialOrd for Scored {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Scored {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.0.total_cmp(&other.0).then(other.1.cmp(&self.1))
    }
}

impl Best {
    fn new(limit: usize) -> Best {
        Best {
            limit,
            heap: std::collections::BinaryHeap::with_capacity(limit + 1),
            bar: f32::NEG_INFINITY,
        }
    }

    #[inline(always)]
    fn offer(&mut self, i: usize, cos: f32) {
        if cos < self.bar {
            return;
        }
        if self.heap.len() < self.limit {
            self.heap.push(std::cmp::Reverse(Scored(cos, i)));
        } else if let Some(mut worst) = self.heap.peek_mut()
            && Scored(cos, i) > worst.0
        {
            *worst = std::cmp::Reverse(Scored(cos, i));
        }
        if self.heap.len() >= self.limit
            && let Some(worst) = self.heap.peek()
        {
            self.bar = worst.0.0;
        }
    }

    /// Best first.
    fn into_sorted(self) -> Vec<(usize, f32)> {
        self.heap
            .into_sorted_vec()
            .into_iter()
            .map(|std::cmp::Reverse(Scored(cos, i))| (i, cos))
            .collect()
    }
}

mod int8;
#[cfg(test)]
mod tests;
