//! The editor schema `schema/row.schema.json` agrees with the bundled rows and the fixtures.

use std::path::Path;

fn schema() -> jsonschema::Validator {
    let text = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("schema/row.schema.json"),
    )
    .unwrap();
    let schema: serde_json::Value = serde_json::from_str(&text).unwrap();
    jsonschema::validator_for(&schema).expect("row schema compiles")
}

fn as_json(path: &Path) -> serde_json::Value {
    let yaml: serde_yaml::Value =
        serde_yaml::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    serde_json::to_value(yaml).unwrap()
}

#[test]
fn every_bundled_row_satisfies_the_schema_and_points_at_it() {
    let v = schema();
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("catalogue");
    let mut n = 0;
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        // The credential bindings are the catalogue's, not a row.
        if path
            .file_name()
            .is_some_and(|n| n == capdir::row::binding::FILE)
        {
            continue;
        }
        let text = std::fs::read_to_string(&path).unwrap();
        assert!(
            text.starts_with("# yaml-language-server: $schema=../schema/row.schema.json\n"),
            "{} does not point editors at the schema",
            path.display()
        );
        let errors: Vec<String> = v
            .iter_errors(&as_json(&path))
            .map(|e| e.to_string())
            .collect();
        assert!(errors.is_empty(), "{}: {errors:?}", path.display());
        n += 1;
    }
    assert!(n >= 24);
}

#[test]
fn schema_rejects_what_check_rejects() {
    let v = schema();
    let fixtures = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/broken");
    for (case, file) in [
        ("unknown_field_typo", "TYPO_FIELD.yaml"),
        ("unknown_field_created_at", "CREATED_AT_ROW.yaml"),
        ("bad_type", "PY_ROW.yaml"),
        ("wrong_field_types", "WRONG_TYPES.yaml"),
        ("bad_category", "CAT_SPACES.yaml"),
    ] {
        assert!(
            !v.is_valid(&as_json(&fixtures.join(case).join(file))),
            "{case}"
        );
    }
}
