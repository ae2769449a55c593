//! A row's docstring: it says what the row does.

use crate::row::Row;
use crate::row::diag::Diagnostic;

pub(super) fn check(row: &Row, d: &mut Vec<Diagnostic>) {
    if row
        .doc()
        .what
        .as_deref()
        .is_none_or(|w| w.trim().is_empty())
    {
        d.push(Diagnostic::error(
            &row.path,
            row.spans.content_at(0),
            "missing_description",
            "the docstring has no `# WHAT:` line",
            "start `content` with `# WHAT: <one line saying what this does>`",
        ));
    }
}
