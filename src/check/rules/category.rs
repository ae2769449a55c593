//! A row's category and the categories it may call: lowercase names.

use crate::check::slug;
use crate::row::diag::Diagnostic;
use crate::row::{Row, is_category};

pub(super) fn check(row: &Row, d: &mut Vec<Diagnostic>) {
    let (p, s) = (&row.path, &row.spans);
    if !row.category.is_empty() && !is_category(&row.category) {
        d.push(Diagnostic::error(
            p,
            s.value("category"),
            "bad_category",
            format!(
                "category `{}` is not lowercase letters, digits and dashes",
                row.category
            ),
            format!("write it as `{}`", slug(&row.category)),
        ));
    }
    for (i, c) in row.allowed_categories.iter().enumerate() {
        if c != "*" && !is_category(c) {
            d.push(Diagnostic::error(
                p,
                s.item("allowed_categories", i),
                "bad_category",
                format!("allowed category `{c}` is not lowercase letters, digits and dashes"),
                "list category names like `text`, or `*` for all",
            ));
        }
    }
}
