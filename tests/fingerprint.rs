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
