//! A row's input schema and its examples, which must satisfy it.

use crate::row::Row;
use crate::row::args::{self, ArgSchema};
use crate::row::diag::Diagnostic;

/// The input schema (required where the row is sensitive) and each example against it.
pub(super) fn check(row: &Row, d: &mut Vec<Diagnostic>) {
    let (p, s) = (&row.path, &row.spans);
    let Some(schema) = &row.input_schema else {
        if row.sensitive {
            d.push(Diagnostic::error(
                p,
                s.key("sensitive"),
                "high_risk_missing_schema",
                "a sensitive row must declare its arguments in `input_schema`",
                "add `input_schema:` with `type: object`, the arguments as `properties` in positional order, and `required`",
            ));
        }
        return;
    };
    let compiled = match ArgSchema::compile(schema) {
        Ok(c) => c,
        Err(e) => {
            let at = args::schema_fault(schema)
                .map(|pointer| s.at_pointer("input_schema", &pointer))
                .unwrap_or_else(|| s.value("input_schema"));
            d.push(Diagnostic::error(
                p,
                at,
                "bad_input_schema",
                format!("`input_schema` {e}"),
                "write a JSON Schema object: `type: object`, `properties: {name: {type: string}}`, `required: [name]`",
            ));
            return;
        }
    };
    for (i, ex) in row.examples.iter().enumerate() {
        let obj = args::positional_to_object(schema, &args::split_body(ex));
        let problems = compiled.problems(&serde_json::Value::Object(obj));
        if !problems.is_empty() {
            d.push(Diagnostic::error(
                p,
                s.item("examples", i),
                "example_fails_schema",
                format!(
                    "example {ex:?} does not satisfy input_schema: {}",
                    problems.join("; ")
                ),
                "fix the example, or the schema if the example is right",
            ));
        }
    }
}
