//! Snapshot tests of `capdir check` on the broken fixtures: each folder under
//! `tests/fixtures/broken/` is a small catalogue whose exact diagnostics (file, line, column,
//! code, message, help) are pinned in its `expected.txt`. `CAPDIR_BLESS=1 cargo test --release` rewrites
//! them after an intended change; review the diff.

use capdir::check::check_files;
use capdir::row::catalogue::{SourceFile, read_dir};
use capdir::row::diag::{Format, render};
use std::path::{Path, PathBuf};

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures")
}

/// Check a fixture folder, with paths shown relative to `tests/fixtures`.
fn check_dir(rel: &Path) -> capdir::check::Checked {
    let root = fixtures();
    let files: Vec<SourceFile> = read_dir(&root.join(rel))
        .expect("fixture folder")
        .into_iter()
        .map(|f| SourceFile {
            path: f.path.strip_prefix(&root).unwrap().to_path_buf(),
            bytes: f.bytes,
        })
        .collect();
    check_files(&files)
}

#[test]
fn broken_fixtures_match_their_snapshots() {
    let bless = std::env::var("CAPDIR_BLESS").is_ok();
    let mut cases: Vec<PathBuf> = std::fs::read_dir(fixtures().join("broken"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.is_dir())
        .collect();
    cases.sort();
    assert!(cases.len() >= 25, "only {} broken fixtures", cases.len());
    let mut failures = Vec::new();
    for case in &cases {
        let rel = case.strip_prefix(fixtures()).unwrap();
        let checked = check_dir(rel);
        assert!(checked.has_errors(), "{} has no error", rel.display());
        let got = render(&checked.diags, checked.files, Format::Text);
        let expected_path = case.join("expected.txt");
        if bless {
            std::fs::write(&expected_path, &got).unwrap();
            continue;
        }
        let expected = std::fs::read_to_string(&expected_path).unwrap_or_default();
        if expected != got {
            failures.push(format!(
                "--- {}\nexpected:\n{expected}\ngot:\n{got}",
                rel.display()
            ));
        }
    }
    assert!(
        failures.is_empty(),
        "{} snapshot(s) differ (CAPDIR_BLESS=1 to accept):\n{}",
        failures.len(),
        failures.join("\n")
    );
}

/// Every case's intended code (from `expected_codes.tsv`) is among what check reports there.
#[test]
fn each_rule_fires_where_intended() {
    let table = std::fs::read_to_string(fixtures().join("expected_codes.tsv")).unwrap();
    let mut missed = Vec::new();
    for line in table.lines().skip(1).filter(|l| !l.trim().is_empty()) {
        let cols: Vec<&str> = line.split('\t').collect();
        let (folder, file, line, code) = (cols[0], cols[1], cols[2], cols[3]);
        let line: Option<usize> = (!line.is_empty()).then(|| line.parse().expect("a line number"));
        let checked = check_dir(&Path::new("broken").join(folder));
        let hit = checked.diags.iter().any(|d| {
            d.code == code
                && (file.is_empty() || d.path.file_name().unwrap().to_str() == Some(file))
                && line.is_none_or(|l| d.line == l)
        });
        if !hit {
            missed.push(format!(
                "{folder}/{file}: expected {code} at line {line:?}, got {:?}",
                checked
                    .diags
                    .iter()
                    .map(|d| format!("{}:{}", d.code, d.line))
                    .collect::<Vec<_>>()
            ));
        }
    }
    assert!(missed.is_empty(), "{}", missed.join("\n"));
}

#[test]
fn good_fixture_and_bundled_catalogue_pass() {
    let good = check_dir(Path::new("good"));
    assert!(
        good.diags.is_empty(),
        "{}",
        render(&good.diags, good.files, Format::Text)
    );
    let bundled = read_dir(&Path::new(env!("CARGO_MANIFEST_DIR")).join("catalogue")).unwrap();
    let checked = check_files(&bundled);
    assert!(
        !checked.has_errors(),
        "{}",
        render(&checked.diags, checked.files, Format::Text)
    );
    assert!(checked.rows.len() >= 24);
}

#[test]
fn huge_and_binary_files_are_refused_not_parsed() {
    let big = SourceFile {
        path: "BIG.yaml".into(),
        bytes: format!(
            "key: BIG\ntype: fn\ncontent: |\n  # WHAT: x\n{}",
            "  a\n".repeat(5 * 1024 * 1024 / 4)
        )
        .into_bytes(),
    };
    assert!(big.bytes.len() >= 5 * 1024 * 1024);
    let junk = SourceFile {
        path: "JUNK.yaml".into(),
        bytes: (0..=255u8).cycle().take(4096).collect(),
    };
    let checked = check_files(&[big, junk]);
    let codes: Vec<&str> = checked.diags.iter().map(|d| d.code).collect();
    assert_eq!(codes, vec!["file_too_large", "not_utf8"]);
}
