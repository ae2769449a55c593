//! Which runner a row names: one that exists, and `route_reply` only for an agent.

use crate::row::diag::{Diagnostic, did_you_mean};
use crate::row::{Row, RowType};

pub(super) fn check(row: &Row, d: &mut Vec<Diagnostic>) {
    let (p, s) = (&row.path, &row.spans);
    if row.route_reply && row.kind != RowType::Agent {
        d.push(Diagnostic::error(
            p,
            s.value("route_reply"),
            "bad_route_reply",
            format!(
                "`route_reply` routes an agent's reply; this is a `{}` row",
                row.kind.as_str()
            ),
            "remove `route_reply`, or make the row an agent",
        ));
    }
    if !row.runner.is_empty() && !crate::row::RUNNERS.contains(&row.runner.as_str()) {
        let help = match did_you_mean(&row.runner, crate::row::RUNNERS.iter().copied()) {
            Some(s) => format!(
                "did you mean `runner: {s}`? Or leave `runner` out: the type names the runner"
            ),
            None => format!(
                "runners are {}; leave `runner` out to use the one the type names",
                crate::row::RUNNERS.join(", ")
            ),
        };
        d.push(Diagnostic::error(
            p,
            s.value("runner"),
            "unknown_runner",
            format!(
                "no runner is called `{}`: every call of this row would fail",
                row.runner
            ),
            help,
        ));
    }
}
