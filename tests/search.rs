//! Ask: the tantivy index over the bundled catalogue and small fixtures — key words, stemming,
//! disabled rows, tie-breaks, the asks gate, the on-disk index, and `ask --batch`.

use capdir::check::{asks_gate, check_files};
use capdir::row::Row;
use capdir::row::catalogue::{SourceFile, read_dir};
use capdir::search::semantic::Spread;
use capdir::search::{Fusion, Lists, Ranking, Searcher};
use std::path::Path;

fn bundled() -> Vec<Row> {
    let files = read_dir(&Path::new(env!("CARGO_MANIFEST_DIR")).join("catalogue")).unwrap();
    check_files(&files).rows
}

fn top(s: &Searcher, q: &str) -> Vec<String> {
    s.ask(q, 12).unwrap().into_iter().map(|h| h.key).collect()
}

#[test]
fn finds_rows_by_key_words_and_stems() {
    let s = Searcher::in_memory(&bundled()).unwrap();
    assert!(top(&s, "github issues")[..3].contains(&"GITHUB_LIST_ISSUES".to_string()));
    assert!(
        top(&s, "list the issues of a github repository")[..2]
            .contains(&"GITHUB_LIST_ISSUES".to_string())
    );
    assert_eq!(top(&s, "what time is it now")[0], "NOW");
    assert_eq!(top(&s, "hashing a text with sha256")[0], "SHA256");
    assert!(
        top(&s, "translating sentences into French")[..3].contains(&"TRANSLATE_TEXT".to_string())
    );
    assert!(top(&s, "").is_empty());
    assert!(
        top(&s, "the of and").is_empty(),
        "stop words alone match nothing"
    );
}

#[test]
fn disabled_rows_never_appear() {
    let rows = bundled();
    let disabled: Vec<&Row> = rows.iter().filter(|r| !r.enabled).collect();
    assert!(!disabled.is_empty());
    let s = Searcher::in_memory(&rows).unwrap();
    for r in disabled {
        for q in r.asks.iter().chain(std::iter::once(&r.key)) {
            assert!(!top(&s, q).contains(&r.key), "{} found by {q:?}", r.key);
        }
    }
}

fn row(key: &str, what: &str, rank: i64) -> SourceFile {
    SourceFile {
        path: format!("{key}.yaml").into(),
        bytes: format!(
            "key: {key}\ntype: fn\ntarget: echo\nplanner_rank: {rank}\ncontent: |\n  # WHAT: {what}\n  [\"$1\"]\n"
        )
        .into_bytes(),
    }
}

#[test]
fn equal_scores_go_to_the_lower_planner_rank() {
    let rows = check_files(&[
        row("TIE_A", "Convert a recipe.", 100),
        row("TIE_B", "Convert a recipe.", 10),
    ])
    .rows;
    let s = Searcher::in_memory(&rows).unwrap();
    assert_eq!(top(&s, "convert recipe"), vec!["TIE_B", "TIE_A"]);
}

/// `planner_visible: false` keeps a row out of asks (it stays callable by key); the bundled
/// prompt blocks are such rows.
#[test]
fn rows_hidden_from_planners_never_answer_an_ask() {
    let rows = bundled();
    let hidden: Vec<&Row> = rows
        .iter()
        .filter(|r| r.enabled && !r.planner_visible)
        .collect();
    assert!(!hidden.is_empty());
    let s = Searcher::in_memory(&rows).unwrap();
    for r in hidden {
        for q in r.asks.iter().chain(std::iter::once(&r.key)) {
            assert!(!top(&s, q).contains(&r.key), "{} found by {q:?}", r.key);
        }
    }
}

/// `planner_rank` weighs the score, not only ties: of two rows that match a request almost
/// equally well, the lower rank wins; a row that matches much better still wins over rank.
/// (Rows that share `fast` keep that word from dominating CLOSE_B's vector.)
#[test]
fn planner_rank_weighs_close_candidates() {
    let rows = check_files(&[
        row("CLOSE_A", "Convert a recipe to metric units.", 100),
        row("CLOSE_B", "Convert a recipe to metric units fast.", 10),
        row("FAR_C", "Translate a poem fast.", 0),
        row("FAR_D", "Look up the weather fast.", 100),
    ])
    .rows;
    let s = Searcher::in_memory(&rows).unwrap();
    let got = top(&s, "convert recipe metric units");
    assert_eq!(got[..2], ["CLOSE_B", "CLOSE_A"], "{got:?}");
    assert!(capdir::search::rank_weight(0) > capdir::search::rank_weight(100));
    assert!(capdir::search::rank_weight(100) > capdir::search::rank_weight(500));
    assert_eq!(capdir::search::rank_weight(100), 1.0);
}

#[test]
fn run_together_key_parts_are_split_with_the_catalogue_words() {
    let rows = check_files(&[
        row("WEATHERWHIZ", "Forecasts for any city.", 100),
        row(
            "OTHER_ROW",
            "Whiz through weather reports and more weather.",
            100,
        ),
    ])
    .rows;
    assert_eq!(
        capdir::search::key_words(
            "WEATHERWHIZ",
            &["weather".to_string(), "whiz".to_string()]
                .into_iter()
                .collect()
        ),
        "weather whiz weatherwhiz"
    );
    let s = Searcher::in_memory(&rows).unwrap();
    assert!(top(&s, "weather").contains(&"WEATHERWHIZ".to_string()));
}

#[test]
fn asks_gate_names_the_row_and_the_ask() {
    // Four rows about converting recipe units outrank a row that only has the words in an ask.
    let mut files: Vec<SourceFile> = ["A", "B", "C", "D"]
        .iter()
        .map(|x| {
            row(
                &format!("CONVERT_RECIPE_UNITS_{x}"),
                "Convert recipe units, recipe by recipe.",
                100,
            )
        })
        .collect();
    files.push(SourceFile {
        path: "LOST_ROW.yaml".into(),
        bytes: b"key: LOST_ROW\ntype: fn\ntarget: echo\ncontent: |\n  # WHAT: Does something.\n  [\"$1\"]\nasks:\n  - convert my recipe units\n".to_vec(),
    });
    let checked = check_files(&files);
    assert!(!checked.has_errors());
    let d = asks_gate(&checked.rows);
    assert_eq!(d.len(), 1, "{d:?}");
    assert_eq!(d[0].code, "ask_not_found");
    assert_eq!(d[0].path, Path::new("LOST_ROW.yaml"));
    assert_eq!((d[0].line, d[0].col), (8, 5));
    assert!(
        d[0].message.contains("convert my recipe units")
            && d[0].message.contains("CONVERT_RECIPE_UNITS_A")
    );
    assert!(
        asks_gate(&bundled()).is_empty(),
        "every bundled ask finds its row"
    );
}

#[test]
fn on_disk_index_and_batch_answers_in_input_order() {
    let tmp = tempfile::tempdir().unwrap();
    let site = tmp.path().join("site");
    let cat = Path::new(env!("CARGO_MANIFEST_DIR")).join("catalogue");
    capdir::build::run(&capdir::build::Options::new(&cat, &site)).unwrap();
    let s = Searcher::open(&site.join("index")).unwrap();
    assert_eq!(top(&s, "what time is it")[0], "NOW");
    let queries = tmp.path().join("q.txt");
    std::fs::write(
        &queries,
        "what time is it\nsha256 of a text\ncurrent temperature at coordinates\n",
    )
    .unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_capdir"))
        .args(["ask", "--batch"])
        .arg(&queries)
        .arg("--site")
        .arg(&site)
        .output()
        .unwrap();
    assert!(out.status.success());
    let lines: Vec<serde_json::Value> = String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 3);
    assert_eq!(lines[0]["query"], "what time is it");
    assert_eq!(lines[0]["keys"][0], "NOW");
    assert_eq!(lines[1]["keys"][0], "SHA256");
    assert_eq!(lines[2]["keys"][0], "WEATHER_CURRENT_TEMPERATURE");
    let ask = std::process::Command::new(env!("CARGO_BIN_EXE_capdir"))
        .args([
            "ask",
            "current temperature at coordinates",
            "--json",
            "--site",
        ])
        .arg(&site)
        .output()
        .unwrap();
    let v: serde_json::Value = serde_json::from_slice(&ask.stdout).unwrap();
    assert_eq!(v["best"]["key"], "WEATHER_CURRENT_TEMPERATURE");
    assert!(
        v["best"]["run_now_url"]
            .as_str()
            .unwrap()
            .ends_with("invoke=WEATHER_CURRENT_TEMPERATURE&body=37.77%7C-122.42")
    );
}

fn fixture(rows: &[(&str, &str)]) -> Vec<Row> {
    let files: Vec<SourceFile> = rows.iter().map(|(k, w)| row(k, w, 100)).collect();
    check_files(&files).rows
}

/// A request that shares no word with any row (a paraphrase) is answered through the vectors
/// alone, and then only by a row at least `Fusion::alone` close: the lexical ranking has
/// nothing; the fused one's first row, when it has one, is the row the request means, never
/// another; and most of the paraphrases are answered. Those that are not came closest to
/// their own row too, under the floor (with WordLlama's vectors "what does apple trade at on
/// nasdaq" comes to 0.175 with STOCK_PRICE, and a floor that low let wrong rows answer in
/// `search::update`'s catalogue: eval/README.md).
#[test]
fn a_paraphrase_finds_its_row_by_meaning() {
    let rows = fixture(&[
        ("WEATHER_FORECAST", "Get the weather forecast for a city."),
        ("SHA256", "Compute the SHA-256 hash of a text."),
        ("TRANSLATE_TEXT", "Translate text into another language."),
        ("SEND_EMAIL", "Send an email message to a recipient."),
        ("LIST_FILES", "List the files in a folder."),
        ("STOCK_PRICE", "Look up the share price of a company."),
    ]);
    let s = Searcher::in_memory(&rows).unwrap();
    let paraphrases = [
        ("will it rain tomorrow", "WEATHER_FORECAST"),
        ("mail my boss", "SEND_EMAIL"),
        ("what is in my documents directory", "LIST_FILES"),
        ("say this in spanish", "TRANSLATE_TEXT"),
        ("what is microsoft worth on the market", "STOCK_PRICE"),
        ("what does apple trade at on nasdaq", "STOCK_PRICE"),
        ("how is tesla doing on wall street", "STOCK_PRICE"),
        ("checksum of my password", "SHA256"),
    ];
    let mut answered = Vec::new();
    for (request, key) in paraphrases {
        let lexical = s.ask_by(request, 12, Ranking::Lexical).unwrap();
        assert!(lexical.is_empty(), "{request:?} shares a word: {lexical:?}");
        let fused = top(&s, request);
        if let Some(first) = fused.first() {
            assert_eq!(first, key, "{request:?}: {fused:?}");
            answered.push(request);
        }
    }
    assert!(answered.contains(&"will it rain tomorrow"), "{answered:?}");
    assert!(answered.len() * 2 > paraphrases.len(), "{answered:?}");
}

/// Asks that give the vectors nothing to work with answer, without error: one row, rows
/// without a docstring, requests of stop words or of words no row and no vocabulary knows.
#[test]
fn degenerate_catalogues_and_requests_answer_without_error() {
    let one = fixture(&[("ONLY_ROW", "Count the words of a text.")]);
    let s = Searcher::in_memory(&one).unwrap();
    assert_eq!(top(&s, "how many words are in this"), ["ONLY_ROW"]);
    let bare = check_files(&[SourceFile {
        path: "BARE.yaml".into(),
        bytes: b"key: BARE\ntype: fn\ntarget: echo\ncontent: |\n  [\"$1\"]\n".to_vec(),
    }])
    .rows;
    let s = Searcher::in_memory(&bare).unwrap();
    for ranking in Ranking::ALL {
        s.ask_by("bare", 12, ranking).unwrap();
    }
    let s = Searcher::in_memory(&bundled()).unwrap();
    for request in [
        "the of and",
        "",
        "   ",
        "zxqv qqqzz",
        "ﷺ 🦀 ∮",
        &"a".repeat(100_000),
    ] {
        for ranking in Ranking::ALL {
            let hits = s.ask_by(request, 12, ranking).unwrap();
            if request.trim().is_empty() || request == "the of and" {
                assert!(hits.is_empty(), "{request:?} {ranking:?}: {hits:?}");
            }
        }
    }
}

/// The row vectors are part of the site: two builds of one catalogue write the same bytes,
/// and the dispatcher's searcher reads them back to the same answers.
#[test]
fn row_vectors_build_deterministically_and_load() {
    let dir = tempfile::tempdir().unwrap();
    let rows = bundled();
    for out in ["a", "b"] {
        capdir::search::build_index(&dir.path().join(out), &rows).unwrap();
    }
    let file = capdir::search::SEMANTIC_FILE;
    let a = std::fs::read(dir.path().join("a").join(file)).unwrap();
    assert_eq!(a, std::fs::read(dir.path().join("b").join(file)).unwrap());
    let opened = Searcher::open(&dir.path().join("a")).unwrap();
    assert!(opened.has_vectors());
    let memory = Searcher::in_memory(&rows).unwrap();
    for q in [
        "is it going to pour tomorrow",
        "fingerprint a file",
        "hash a text",
    ] {
        assert_eq!(top(&opened, q), top(&memory, q), "{q:?}");
    }
    // A damaged file is an error that names it, not a panic or a silent lexical fallback.
    std::fs::write(dir.path().join("a").join(file), &a[..a.len() / 2]).unwrap();
    let err = Searcher::open(&dir.path().join("a")).err().unwrap();
    assert!(format!("{err:#}").contains(file), "{err:#}");
}

/// Fusion by standard scores: a row the words put far ahead stays first when the cosines are
/// a near-tie (rank fusion let a semantic first place of a few hundredths overturn it, and
/// lost to BM25 alone on the Gorilla sets), and a row whose cosine stands far out of the
/// catalogue's passes rows the words barely tell apart.
#[test]
fn each_signal_decides_where_it_tells_rows_apart() {
    // Ten rows, of which the lists below name three: the others score 0 and count in the
    // spread of the lexical scores, as the rows a request's words miss do.
    let keys = ["A", "B", "C", "D", "E", "F", "G", "H", "I", "J"].map(|k| format!("{k}_ROW"));
    let rows = fixture(
        &keys
            .iter()
            .map(|k| (k.as_str(), "A row."))
            .collect::<Vec<_>>(),
    );
    let s = Searcher::in_memory(&rows).unwrap();
    let first = |lists: &Lists| {
        s.rank(lists, Ranking::Fused, Fusion::default())[0]
            .1
            .key
            .clone()
    };
    let words_decide = Lists {
        lexical: vec![(0, 12.0), (1, 2.0), (2, 1.0)],
        semantic: vec![(1, 0.52), (0, 0.50), (2, 0.48)],
        lexical_cosines: vec![0.50, 0.52, 0.48],
        spread: Spread {
            mean: 0.5,
            sd: 0.02,
        },
    };
    assert_eq!(first(&words_decide), "A_ROW");
    let meaning_decides = Lists {
        lexical: vec![(0, 10.0), (1, 9.9), (2, 9.8)],
        semantic: vec![(2, 0.9), (0, 0.3), (1, 0.29)],
        lexical_cosines: vec![0.3, 0.29, 0.9],
        spread: Spread { mean: 0.4, sd: 0.2 },
    };
    assert_eq!(first(&meaning_decides), "C_ROW");
}

/// `capdir eval --ablation` scores several sets side by side, each against its own site, and
/// refuses a query file without its site.
#[test]
fn eval_ablation_scores_several_sets_side_by_side() {
    let dir = tempfile::tempdir().unwrap();
    let sets = [
        (
            "a",
            vec![
                ("WEATHER_FORECAST", "Get the weather forecast for a city."),
                ("SHA256", "Compute the SHA-256 hash of a text."),
            ],
            "weather forecast for paris",
            "WEATHER_FORECAST",
        ),
        (
            "b",
            vec![
                ("SEND_EMAIL", "Send an email message to a recipient."),
                ("LIST_FILES", "List the files in a folder."),
            ],
            "list the files",
            "LIST_FILES",
        ),
    ];
    let mut args: Vec<String> = vec!["eval".into(), "--ablation".into()];
    for (name, rows, query, key) in sets {
        let site = dir.path().join(format!("site-{name}"));
        capdir::search::build_index(&site.join("index"), &fixture(&rows)).unwrap();
        let queries = dir.path().join(format!("{name}.jsonl"));
        let line = serde_json::json!({"query": query, "keys": [key]});
        std::fs::write(&queries, format!("{line}\n")).unwrap();
        args.extend([
            "--queries".into(),
            queries.display().to_string(),
            "--site".into(),
            site.display().to_string(),
        ]);
    }
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_capdir"))
        .args(&args)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}");
    for name in ["a", "b"] {
        let file = dir.path().join(format!("{name}.jsonl"));
        let row = format!("| {} | fused | 1 | 1.000 | 1.000 | 1.000 |", file.display());
        assert!(stdout.contains(&row), "no {row:?} in\n{stdout}");
    }
    // Without the second site: refused, naming the fix.
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_capdir"))
        .args(&args[..args.len() - 2])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("give one --site per --queries"), "{stderr}");
}
