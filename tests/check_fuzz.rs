//! Property tests: no input makes the row parser or the check gate panic.

use capdir::check::check_files;
use capdir::row::catalogue::SourceFile;
use capdir::row::{line_breaks, parse_row};
use proptest::prelude::*;
use std::path::Path;

const FIELDS: &[&str] = &[
    "key",
    "type",
    "target",
    "auth",
    "content",
    "category",
    "includes",
    "examples",
    "input_schema",
    "sensitive",
    "enabled",
    "asks",
    "x_unknown",
];

/// YAML-ish text assembled from real field names and arbitrary values.
fn yamlish() -> impl Strategy<Value = String> {
    let value = prop_oneof![
        any::<String>(),
        "[A-Z_]{1,10}",
        Just("|\n  # WHAT: x\n  [\"$1\"]".to_string()),
        Just("|\n  # WHAT: x\n  A: $1 > { B: x | C: y } => N".to_string()),
        Just("[a, b, 1, {x: y}]".to_string()),
        Just("{type: object, properties: {a: {type: number}}}".to_string()),
        "(bearer|basic|query|headers|token):[A-Za-z_=${}\":]{0,20}",
        "(GET|POST|FETCH) [a-z$:/.0-9]{0,30}",
    ];
    prop::collection::vec((prop::sample::select(FIELDS), value), 0..10).prop_map(|pairs| {
        pairs
            .into_iter()
            .map(|(k, v)| format!("{k}: {v}\n"))
            .collect::<String>()
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn arbitrary_bytes_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..2048)) {
        let _ = parse_row(Path::new("FUZZ.yaml"), &bytes);
        let _ = check_files(&[SourceFile { path: "FUZZ.yaml".into(), bytes }]);
    }

    #[test]
    fn arbitrary_yaml_never_panics(text in yamlish(), other in yamlish()) {
        let files = vec![
            SourceFile { path: "A_ROW.yaml".into(), bytes: text.into_bytes() },
            SourceFile { path: "B_ROW.yaml".into(), bytes: other.into_bytes() },
        ];
        let checked = check_files(&files);
        for d in &checked.diags {
            prop_assert!(!d.code.is_empty() && !d.help.is_empty());
            // Named at a line of its file (the line after a final line break at most).
            if let Some(f) = files.iter().find(|f| f.path == d.path) {
                let lines = line_breaks(&f.bytes) + 1;
                prop_assert!(d.line <= lines, "{}:{} of {lines} lines: {}", d.path.display(), d.line, d.message);
            }
        }
    }

    #[test]
    fn flow_parser_never_panics(text in "[A-Z_:{}|>=$ a-z0-9\n]{0,80}") {
        let _ = capdir::row::flow::parse(&text);
    }
}

/// The gate's first diagnostic of `code` on the one file `KEY.yaml` holding `text`.
fn first(key: &str, text: impl AsRef<[u8]>, code: &str) -> capdir::row::diag::Diagnostic {
    let bytes = text.as_ref();
    let checked = check_files(&[SourceFile {
        path: format!("{key}.yaml").into(),
        bytes: bytes.to_vec(),
    }]);
    let found = checked.diags.iter().find(|d| d.code == code).cloned();
    let text = String::from_utf8_lossy(bytes);
    found.unwrap_or_else(|| panic!("no {code} for {text:?}: {:?}", checked.diags))
}

/// A flow whose content is only its docstring has no steps. The gate names the file's last
/// line, with or without a final newline, never the line after it (fuzz/row found line 19 of
/// an 18-line file).
#[test]
fn a_flow_without_steps_is_named_inside_the_file() {
    let text = "key: NO_STEPS\ntype: flow\ncategory: text\ncontent: |\n  # WHAT: nothing yet\n  # WHEN_TO_USE: never";
    for text in [text.to_string(), format!("{text}\n")] {
        let d = first("NO_STEPS", &text, "bad_flow_step");
        assert!(d.message.contains("no steps"), "{d:?}");
        assert_eq!(d.line, 6, "{d:?}");
    }
}

/// A schema whose last property has no value is named at the file's last line, not at the
/// line after it where its value would be (fuzz/row found line 16 of a 15-line file).
#[test]
fn a_schema_ending_in_an_empty_property_is_named_inside_the_file() {
    let text = "key: EMPTY_PROP\ntype: fn\ntarget: echo\ncategory: text\ncontent: |\n  # WHAT: echo\ninput_schema:\n  type: object\n  properties:\n    country# :";
    let d = first("EMPTY_PROP", text, "bad_input_schema");
    assert_eq!(d.line, 10, "{d:?}");
}

/// A file whose lines end in a lone CR (as classic Mac editors save them) has as many lines
/// for the gate as for YAML: a credential, a scaffold's placeholder and a byte that is not
/// UTF-8 are each named at their own line, not at line 1 of a file that seems to have one.
#[test]
fn lines_ending_in_a_lone_cr_are_counted_as_yaml_counts_them() {
    let row = |fourth: &str| {
        [
            "key: CR_LINES",
            "type: fn",
            "target: echo",
            fourth,
            "content: |",
            "  # WHAT: echo",
        ]
        .join("\r")
    };
    let secret = row("category: sk-abcdefghijklmnopqrstuvwx1234");
    let d = first("CR_LINES", &secret, "secret_value");
    assert_eq!((d.line, d.col), (4, 11), "{d:?}");
    let placeholder = row("category: TODO(capdir)");
    let d = first("CR_LINES", &placeholder, "scaffold_placeholder");
    assert_eq!((d.line, d.col), (4, 11), "{d:?}");
    let mut bytes = row("category: text").into_bytes();
    let at = bytes.len() - 2;
    bytes[at] = 0xff;
    let d = first("CR_LINES", bytes, "not_utf8");
    assert_eq!((d.line, d.col), (6, 13), "{d:?}");
}
