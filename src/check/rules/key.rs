//! A row's key: valid, and the name of its file.

use crate::row::diag::Diagnostic;
use crate::row::{Row, is_valid_key};

pub(super) fn check(row: &Row, d: &mut Vec<Diagnostic>) {
    let (p, s) = (&row.path, &row.spans);
    let stem = p.file_stem().and_then(|x| x.to_str()).unwrap_or("");
    if !is_valid_key(&row.key) {
        d.push(Diagnostic::error(
            p,
            s.value("key"),
            "bad_key",
            format!("`{}` is not a valid key", row.key),
            "keys are 2–64 characters of A–Z, 0–9 and _, starting with a letter: `GITHUB_LIST_ISSUES`",
        ));
    } else if row.key != stem {
        d.push(Diagnostic::error(
            p,
            s.value("key"),
            "key_mismatch",
            format!("key `{}` does not match the file name `{stem}`", row.key),
            format!(
                "rename the file to `{}.yaml`, or set `key: {stem}`",
                row.key
            ),
        ));
    }
}
