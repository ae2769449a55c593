//! The contract fingerprint changes when the call changes, and only then.

use capdir::row::call::fingerprint;
use capdir::row::{Row, parse_row};
use std::path::Path;

const BASE: &str = r#"key: FP_ROW
type: http
target: GET https://api.example.com/items/$1
auth: bearer:ITEM_TOKEN
category: items
sensitive: false
input_schema:
  type: object
  properties:
    id: {type: string}
examples: ["a1"]
content: |
  # WHAT: Reads an item.
  # WHEN_TO_USE: To read one.
  # ARGS: $1=id
  # EX: a1
  # OUTPUT: JSON
  {"q": "$1"}
asks:
  - read an item
"#;

fn row(text: &str) -> Row {
    parse_row(Path::new("FP_ROW.yaml"), text.as_bytes())
        .row
        .expect("row parses")
}

#[test]
fn changes_with_the_call() {
    let base = fingerprint(&row(BASE));
    for (what, from, to) in [
        ("target", "items/$1", "things/$1"),
        ("auth", "bearer:ITEM_TOKEN", "bearer:OTHER_TOKEN"),
        (
            "type",
            "type: http\ntarget: GET https://api.example.com/items/$1",
            "type: agent\ntarget: GET https://api.example.com/items/$1",
        ),
        ("input_schema", "id: {type: string}", "id: {type: integer}"),
        ("sensitive", "sensitive: false", "sensitive: true"),
        ("payload", r#"{"q": "$1"}"#, r#"{"query": "$1"}"#),
        ("category", "category: items", "category: things"),
    ] {
        let changed = BASE.replacen(from, to, 1);
        assert_ne!(changed, BASE, "{what}: replacement did not apply");
        assert_ne!(
            fingerprint(&row(&changed)),
            base,
            "{what} should change the fingerprint"
        );
    }
}

#[test]
fn ignores_docs_examples_and_asks() {
    let base = fingerprint(&row(BASE));
    for (what, from, to) in [
        (
            "examples",
            r#"examples: ["a1"]"#,
            r#"examples: ["b2", "c3"]"#,
        ),
        (
            "docstring",
            "# WHAT: Reads an item.",
            "# WHAT: Reads one item by id.",
        ),
        (
            "when",
            "# WHEN_TO_USE: To read one.",
            "# WHEN_TO_USE: Whenever.",
        ),
        (
            "asks",
            "  - read an item",
            "  - fetch an item\n  - get item",
        ),
    ] {
        let changed = BASE.replacen(from, to, 1);
        assert_ne!(changed, BASE, "{what}: replacement did not apply");
        assert_eq!(
            fingerprint(&row(&changed)),
            base,
            "{what} must not change the fingerprint"
        );
    }
}

#[test]
fn schema_key_order_does_not_matter() {
    let a = BASE.replacen(
        "id: {type: string}",
        "id: {type: string, description: x}",
        1,
    );
    let b = BASE.replacen(
        "id: {type: string}",
        "id: {description: x, type: string}",
        1,
    );
    assert_eq!(fingerprint(&row(&a)), fingerprint(&row(&b)));
    assert_ne!(fingerprint(&row(&a)), fingerprint(&row(BASE)));
}

/// An incremental rebuild recomputes only the fingerprints a change can reach: the rows
/// changed and those composing them (directly or through others), and agents with tools.
/// What it recomputes equals what the whole computation gives, a cycle included.
#[test]
fn dependents_and_partial_fingerprints_agree_with_the_whole() {
    use capdir::row::call::{dependents, fingerprints, fingerprints_of};
    let parse = |key: &str, text: String| {
        parse_row(Path::new(&format!("{key}.yaml")), text.as_bytes())
            .row
            .expect("row parses")
    };
    let leaf = |key: &str, target: &str| {
        parse(
            key,
            format!(
                "key: {key}\ntype: fn\ntarget: {target}\ncategory: text\ncontent: |\n  # WHAT: x\n  [\"$1\"]\n"
            ),
        )
    };
    let flow = |key: &str, steps: &str| {
        parse(
            key,
            format!(
                "key: {key}\ntype: flow\ncategory: flows\ncontent: |\n  # WHAT: x\n  {steps}\n"
            ),
        )
    };
    let rows = vec![
        leaf("LEAF_A", "echo"),
        leaf("LEAF_B", "upper"),
        flow("FLOW_ONE", "LEAF_A: $1"),
        flow("FLOW_TWO", "FLOW_ONE: $1 > LEAF_B: $PREV"),
        flow("LOOP_X", "LOOP_Y: $1"),
        flow("LOOP_Y", "LOOP_X: $1"),
        flow("UNRELATED", "LEAF_B: $1"),
    ];
    let deps = dependents(&rows, &["LEAF_A"]);
    let deps: Vec<&str> = deps.iter().map(String::as_str).collect();
    assert_eq!(deps, ["FLOW_ONE", "FLOW_TWO", "LEAF_A"]);
    let deps = dependents(&rows, &["LOOP_Y"]);
    assert!(
        deps.contains("LOOP_X") && !deps.contains("UNRELATED"),
        "{deps:?}"
    );
    let whole = fingerprints(&rows);
    for wanted in [
        vec!["FLOW_TWO"],
        vec!["LOOP_Y"],
        vec!["LOOP_X", "LEAF_A"],
        vec!["UNRELATED"],
    ] {
        let part = fingerprints_of(&rows, Some(&wanted));
        assert_eq!(part.len(), wanted.len(), "{wanted:?}");
        for k in &wanted {
            assert_eq!(part[*k], whole[*k], "{k}");
        }
    }
}

/// Every row bundled with capdir (the catalogue, the examples and the gate's fixtures) keeps
/// the fingerprint it had before templates took named arguments (issue 31): the values in
/// `tests/snapshots/fingerprints_before_named_args.tsv` were computed on `main` before that
/// change. A template language that grows must not move a contract no one edited.
#[test]
fn bundled_rows_keep_their_fingerprints() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut files = Vec::new();
    let mut dirs = vec![
        root.join("catalogue"),
        root.join("examples"),
        root.join("tests/fixtures"),
    ];
    while let Some(dir) = dirs.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for e in entries.flatten() {
            let p = e.path();
            if p.is_dir() {
                dirs.push(p);
            } else if p.extension().is_some_and(|x| x == "yaml") {
                files.push(p);
            }
        }
    }
    let mut now: Vec<String> = files
        .iter()
        .filter_map(|p| {
            let text = std::fs::read(p).ok()?;
            let row = parse_row(p, &text).row?;
            let rel = p.strip_prefix(root).ok()?.to_string_lossy().to_string();
            Some(format!("{rel}\t{}", fingerprint(&row)))
        })
        .collect();
    now.sort();
    let stored = root.join("tests/snapshots/fingerprints_before_named_args.tsv");
    if std::env::var_os("CAPDIR_BLESS_FINGERPRINTS").is_some() {
        std::fs::write(&stored, now.join("\n") + "\n").expect("write the fingerprints");
    }
    let before = std::fs::read_to_string(&stored).expect("the stored fingerprints");
    let before: Vec<&str> = before.lines().collect();
    assert!(before.len() >= 40, "only {} rows stored", before.len());
    for line in &before {
        assert!(
            now.iter().any(|n| n == line),
            "{line}: this row's fingerprint changed (or the row is gone)"
        );
    }
}
