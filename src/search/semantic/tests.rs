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
    assert_eq!((m.scale.len(), m.dims), (32000, 256));
}

/// A change keeps the vectors of rows whose tokens weigh as before, and they are the
/// vectors a full build of the same rows makes, bit for bit; the rows that share a token
/// the change added or dropped are weighed again.
#[test]
fn a_change_gives_the_vectors_a_full_build_gives() {
    let m = model().unwrap();
    let texts: Vec<String> = [
        "weather forecast for a city",
        "current weather in a city",
        "translate text between languages",
        "city population census figures",
        "convert currency amounts",
        "hash a string with sha256",
        "stock price quote",
        "weather radar near an airport",
        "list the holidays of a country",
        "define an english word",
        "search news headlines",
        "shorten a long link",
    ]
    .map(String::from)
    .to_vec();
    let before = RowVectors::build(m, &texts);
    let edit = "satellite radar images of storms".to_string();
    let after = before.changed(m, &[0], std::slice::from_ref(&edit));
    let mut full_texts = texts.clone();
    full_texts[0] = String::new();
    full_texts.push(edit);
    let full = RowVectors::build(m, &full_texts);
    assert_eq!(after.ends, full.ends);
    assert_eq!(after.ids, full.ids);
    assert_eq!(after.idf, full.idf);
    assert_eq!(full.len(), full_texts.len());
    for (i, text) in full_texts.iter().enumerate() {
        assert_eq!(
            (
                &after.data[i * m.dims..(i + 1) * m.dims],
                after.scale[i].to_bits()
            ),
            (
                &full.data[i * m.dims..(i + 1) * m.dims],
                full.scale[i].to_bits()
            ),
            "row {i}: {text:?}"
        );
    }
    // The edit moved "city", "weather" and "radar": rows 1, 3 and 7 weigh otherwise than
    // before, so keeping every old vector would be wrong.
    for i in [1, 3, 7] {
        assert_ne!(
            &before.data[i * m.dims..(i + 1) * m.dims],
            &full.data[i * m.dims..(i + 1) * m.dims],
            "row {i} was not weighed again"
        );
    }
}

/// The tokenizer as `tokenizers` reads the whole file (padding and truncation off, as the
/// model used it before `bpe_tokenizer`).
/// Read once: the proptest asks for it in every case.
fn whole_file_tokenizer() -> &'static tokenizers::Tokenizer {
    static WHOLE: OnceLock<tokenizers::Tokenizer> = OnceLock::new();
    WHOLE.get_or_init(|| {
        let mut t = tokenizers::Tokenizer::from_bytes(TOKENIZER).unwrap();
        t.with_padding(None);
        t.with_truncation(None).unwrap();
        t
    })
}

fn ids(t: &tokenizers::Tokenizer, text: &str) -> Vec<u32> {
    t.encode_fast(text, false).unwrap().get_ids().to_vec()
}

/// The tokenizer made from the file's parts gives the ids the whole file's tokenizer
/// gives, for every text of the bundled catalogue and of the evaluation requests.
#[test]
fn the_tokenizer_from_its_parts_is_the_whole_files() {
    let (ours, whole) = (&model().unwrap().tokenizer, whole_file_tokenizer());
    let mut texts: Vec<String> = vec![
        "<s> a </s> b <unk><s> <0x0A>".into(),
        "Café naïve ÉCOLE 東京 ｆｕｌｌ\u{200b}width\ttab\u{0}nul".into(),
        "x".repeat(150),
    ];
    for dir in ["catalogue", "eval/metatool/catalogue"] {
        for f in crate::row::catalogue::read_dir(Path::new(dir)).unwrap() {
            texts.push(String::from_utf8_lossy(&f.bytes).into_owned());
        }
    }
    let queries = std::fs::read_to_string("eval/metatool/queries-dev.jsonl").unwrap();
    texts.extend(queries.lines().map(String::from));
    assert!(texts.len() > 2000, "{} texts", texts.len());
    for text in &texts {
        assert_eq!(ids(ours, text), ids(whole, text), "{text:?}");
    }
}

proptest::proptest! {
    #[test]
    fn any_text_tokenizes_as_the_whole_files_tokenizer_does(text in "\\PC{0,120}", special in proptest::option::of(0usize..5)) {
        let (ours, whole) = (&model().unwrap().tokenizer, whole_file_tokenizer());
        let text = match special {
            Some(i) => format!("{text}{} {text}", ["<s>", "</s>", "<unk>", "<0x0A>", "▁"][i]),
            None => text,
        };
        proptest::prop_assert_eq!(ids(ours, &text), ids(whole, &text));
    }
}

/// What lets `tokens` encode a text's words at once: no token holds a `▁` (a space)
/// after anything but `▁`, so no token spans two words joined by one space.
#[test]
fn no_token_spans_two_words() {
    let t = &model().unwrap().tokenizer;
    let vocab = t.get_vocab(true);
    assert_eq!(vocab.len(), 32000);
    for token in vocab.keys() {
        let rest = token.trim_start_matches('\u{2581}');
        assert!(!rest.contains('\u{2581}'), "{token:?}");
    }
}

/// A request of more new words than are encoded one by one, and words too long to be
/// remembered: the same tokens as all at once, asked once or twice.
#[test]
fn many_new_words_and_long_ones_are_the_tokens_at_once() {
    let m = model().unwrap();
    let many: Vec<String> = (0..FRESH_WORDS_AT_ONCE * 2)
        .map(|i| format!("zq{i}unheard"))
        .collect();
    let long = format!("weather {} forecast", "x".repeat(CACHED_WORD_BYTES + 1));
    for text in [many.join(" "), long] {
        let at_once = m.encode(&text.split_whitespace().collect::<Vec<_>>());
        assert!(!at_once.is_empty());
        assert_eq!(m.tokens(&text), at_once);
        assert_eq!(m.tokens(&text), at_once);
    }
}

/// A word remembered when a request came and forgotten while its new words were
/// remembered (the cache full) is not left out of the request's tokens.
#[test]
fn a_word_forgotten_meanwhile_is_encoded_again() {
    let m = model().unwrap();
    let encode = |w: &[&str]| m.encode(w);
    let cache = WordTokens::new(3);
    cache.tokens(&["weather", "forecast"], encode);
    let words = ["weather", "rain", "city"];
    assert_eq!(cache.tokens(&words, encode), m.encode(&words));
    assert!(cache.len() <= 3);
}

/// Callers choose the words remembered: a flood of new ones never holds more than
/// `CACHED_WORDS`, and what is asked afterwards is tokenized as before.
#[test]
fn a_flood_of_new_words_stays_within_the_bound() {
    let m = model().unwrap();
    let words: Vec<String> = (0..CACHED_WORDS + 2 * FRESH_WORDS_AT_ONCE)
        .map(|i| format!("fl{i}d"))
        .collect();
    for batch in words.chunks(FRESH_WORDS_AT_ONCE) {
        m.tokens(&batch.join(" "));
        let held = m.words.len();
        assert!(held <= CACHED_WORDS, "{held} words remembered");
    }
    let after = "weather forecast for fl7d";
    let at_once = m.encode(&after.split_whitespace().collect::<Vec<_>>());
    assert_eq!(m.tokens(after), at_once);
}

#[test]
fn stop_words_and_specials_weigh_nothing() {
    let m = model().unwrap();
    assert!(m.tokens("the of and").is_empty());
    assert!(m.tokens("<s> </s> <unk>").is_empty());
    assert!(m.tokens("The OF And").is_empty());
    assert_eq!(m.tokens("weather").len(), 1);
    // A stop word's spelling inside a word is part of the word.
    assert_eq!(m.tokens("sha256").len(), 5);
}

proptest::proptest! {
    /// The AVX2 dot product is the portable one, for any values capdir writes (±127)
    /// and any lengths (tails included).
    #[test]
    fn avx2_dot_is_the_portable_dot(pairs in proptest::collection::vec((-127i8..=127, -127i8..=127), 0..400), extreme in proptest::bool::ANY) {
        // All ±127 too: the largest pairs of products the 16-bit sums hold.
        let pairs: Vec<(i8, i8)> = match extreme {
            true => pairs.iter().map(|p| (p.0.signum() * 127, p.1.signum() * 127)).collect(),
            false => pairs,
        };
        let vector: Vec<i8> = pairs.iter().map(|p| p.0).collect();
        let q = Query::new(vector, 1.0);
        let row: Vec<i8> = pairs.iter().map(|p| p.1).collect();
        #[cfg(target_arch = "x86_64")]
        if std::arch::is_x86_feature_detected!("avx2") {
            proptest::prop_assert_eq!(unsafe { dot_avx2(&q, &row) }, dot(&q.vector, &row));
        }
    }

    /// The AVX2 scan, four rows at a time, finds what the portable one finds, with the
    /// same cosines and the same spread to the bit, for any number of rows and any floor.
    #[test]
    fn avx2_scan_is_the_portable_scan(values in proptest::collection::vec(-127i8..=127, 0..(64 * 23)), scales in proptest::collection::vec(proptest::option::of(0.001f32..0.05), 23), limit in 0usize..12, floor in -1.0f32..0.5, q in proptest::collection::vec(-127i8..=127, 64)) {
        let dims = 64;
        let n = values.len() / dims;
        let v = RowVectors {
            dims,
            df: Vec::new(),
            idf: Vec::new(),
            query_idf: Vec::new(),
            // A row without a vector (None) has scale 0, as a removed row has.
            scale: scales[..n].iter().map(|s| s.unwrap_or(0.0)).collect(),
            with_vectors: scales[..n].iter().filter(|s| s.is_some()).count(),
            ends: Vec::new(),
            ids: Vec::new(),
            data: values[..n * dims].iter().map(|&x| x as u8).collect(),
        };
        let query = Query::new(q, 0.02);
        let mut portable = Best::new(limit);
        let spread = v.scan(&query, floor, &mut portable);
        #[cfg(target_arch = "x86_64")]
        if std::arch::is_x86_feature_detected!("avx2") {
            let mut wide = Best::new(limit);
            // SAFETY: the CPU has just said it has AVX2.
            let wide_spread = unsafe { v.scan_avx2(&query, floor, &mut wide) };
            proptest::prop_assert_eq!(wide_spread, spread);
            proptest::prop_assert_eq!(wide.into_sorted(), portable.into_sorted());
        }
    }

    /// Word by word, remembered or not, is the same as all at once, whatever the text.
    #[test]
    fn cached_tokens_are_the_tokens(text in "\\PC{0,80}", words in proptest::collection::vec("[a-zA-Z0-9,.;:!?'()/_-]{0,12}", 0..12), special in proptest::option::of(0usize..5)) {
        let m = model().unwrap();
        let joined = format!("{text} {}", words.join(" "));
        // The added tokens and `▁` anywhere, at a word's start or inside it.
        let joined = match special {
            Some(i) => joined.replacen(' ', ["<s>", " </s>", "<unk> ", "\u{2581}", " \u{2581}\u{2581}"][i], 2),
            None => joined,
        };
        let at_once = m.encode(&bounded(&joined).split_whitespace().collect::<Vec<_>>());
        let mut cache = std::collections::HashMap::new();
        proptest::prop_assert_eq!(&m.tokens_cached(&joined, &mut cache), &at_once);
        // Encoded (word by word or at once), then remembered.
        proptest::prop_assert_eq!(&m.tokens(&joined), &at_once);
        proptest::prop_assert_eq!(&m.tokens(&joined), &at_once);
    }

    /// Any bytes: a row-vectors file or an error, never a panic.
    #[test]
    fn any_bytes_load_or_fail(mut bytes in proptest::collection::vec(proptest::num::u8::ANY, 0..200), header in proptest::option::of(proptest::collection::vec(proptest::num::u32::ANY, 5))) {
        if let Some(h) = header {
            let mut b = b"CAPDIRSV".to_vec();
            b.extend_from_slice(&ROWS_VERSION.to_le_bytes());
            for n in &h[3..] {
                b.extend_from_slice(&n.to_le_bytes());
            }
            b.extend_from_slice(&bytes);
            bytes = b;
        }
        let _ = RowVectors::from_bytes(&bytes);
    }

    /// The bounded heap keeps what a full sort would keep, in the same order.
    #[test]
    fn best_keeps_the_top(scores in proptest::collection::vec(-1.0f32..1.0, 0..300), limit in 0usize..50) {
        let mut best = Best::new(limit);
        for (i, &s) in scores.iter().enumerate() {
            best.offer(i, s);
        }
        let mut all: Vec<(usize, f32)> = scores.iter().copied().enumerate().collect();
        all.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
        all.truncate(limit);
        proptest::prop_assert_eq!(best.into_sorted(), all);
    }
}

/// The rare-word problem: a word only one row's docstring says weighs no more than a
/// word `RARE_ROWS` rows say, so it cannot outweigh the rest of that row's text; a small
/// catalogue keeps plain IDF.
#[test]
fn a_word_one_row_says_weighs_no_more_than_a_word_a_few_rows_say() {
    let w = idf(100, &[1, RARE_ROWS, RARE_ROWS + 5]);
    assert_eq!(w[0], w[1]);
    assert!(w[2] < w[1], "{w:?}");
    let w = idf(9, &[1, 2]);
    assert!(w[0] > w[1], "{w:?}");
}

/// A request's token that no row uses weighs `UNKNOWN_SHARE` of the heaviest row token;
/// a token rows use weighs what it weighs in a row.
#[test]
fn a_request_word_no_row_uses_weighs_a_share_of_the_heaviest() {
    let m = model().unwrap();
    let texts = ["hash a text with sha256", "weather forecast for a city"].map(String::from);
    let v = RowVectors::build(m, &texts);
    let heaviest = (0..v.df.len())
        .filter(|&t| v.df[t] > 0)
        .map(|t| v.idf[t])
        .fold(0f32, f32::max);
    assert!(heaviest > 0.0);
    let (known, unknown) = (m.tokens("weather")[0], m.tokens("zebra")[0]);
    assert_eq!(v.df[unknown as usize], 0);
    assert_eq!(v.query_idf[unknown as usize], UNKNOWN_SHARE * heaviest);
    assert_eq!(v.query_idf[known as usize], v.idf[known as usize]);
}

/// A word every row says weighs the same after one row stops saying it, so a change of
/// one row does not weigh every other row again (`idf`'s rounding); the rows are still
/// what a full build makes.
#[test]
fn one_row_less_with_a_common_word_weighs_nobody_again() {
    let m = model().unwrap();
    let texts: Vec<String> = (0..200)
        .map(|i| format!("common catalogue word, row number {i}"))
        .collect();
    let before = RowVectors::build(m, &texts);
    let edit = "row number 0 without it".to_string();
    let after = before.changed(m, &[0], std::slice::from_ref(&edit));
    let common = m.tokens("common")[0] as usize;
    assert_eq!(before.df[common], 200);
    assert_eq!(after.df[common], 199);
    assert_eq!(after.idf[common].to_bits(), before.idf[common].to_bits());
    let mut full_texts = texts.clone();
    full_texts[0] = String::new();
    full_texts.push(edit);
    assert_eq!(
        after.to_bytes(),
        RowVectors::build(m, &full_texts).to_bytes()
    );
}

/// A change of rows is the build of the rows it leaves: a removed row's place empty.
#[test]
fn a_change_is_the_build_of_what_it_leaves() {
    let m = model().unwrap();
    let before = ["hash a text with sha256", "weather forecast for a city"].map(String::from);
    let after = ["hash a text with sha256", "", "send an email"].map(String::from);
    let changed = RowVectors::build(m, &before).changed(m, &[1], &after[2..]);
    assert_eq!(changed.to_bytes(), RowVectors::build(m, &after).to_bytes());
}

#[test]
fn the_file_round_trips_and_refuses_damage() {
    let m = model().unwrap();
    let texts = ["hash a text with sha256", "", "weather forecast for a city"].map(String::from);
    let v = RowVectors::build(m, &texts);
    let bytes = v.to_bytes();
    let back = RowVectors::from_bytes(&bytes).unwrap();
    assert_eq!(back.to_bytes(), bytes);
    assert!(RowVectors::from_bytes(&bytes[..bytes.len() - 1]).is_err());
    assert!(RowVectors::from_bytes(b"CAPDIRSV").is_err());
    // A value of -128 (never written; the scan's sign trick would read it as +128).
    let mut low = bytes.clone();
    *low.last_mut().unwrap() = 0x80;
    let err = RowVectors::from_bytes(&low).err().expect("refused");
    assert!(err.to_string().contains("-128"), "{err}");
    let q = back.query(m, "will it rain tomorrow").unwrap();
    let near = back.nearest(&q, 3, -1.0).rows;
    assert_eq!(near[0].0, 2, "{near:?}");
    assert_eq!(back.cosine(&q, 2), near[0].1);
}
