//! The rules that need only the row itself, a file per family, run in the order a row is
//! read: its key, its target, its runner, its type's own rules, its docstring, its
//! credential, its categories, its input schema and examples.

mod category;
mod credential;
mod docstring;
mod key;
mod runner;
mod schema;
mod target;

use crate::row::Row;
use crate::row::diag::Diagnostic;

/// Every problem of `row` on its own.
pub fn check_row(row: &Row) -> Vec<Diagnostic> {
    let mut d = Vec::new();
    key::check(row, &mut d);
    target::present(row, &mut d);
    runner::check(row, &mut d);
    target::by_type(row, &mut d);
    docstring::check(row, &mut d);
    credential::check(row, &mut d);
    category::check(row, &mut d);
    schema::check(row, &mut d);
    d
}
