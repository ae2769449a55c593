//! A row's credential: a form capdir knows, and `env:` only for a server started as a command.

use crate::row::Row;
use crate::row::credential::Credential;
use crate::row::diag::Diagnostic;

pub(super) fn check(row: &Row, d: &mut Vec<Diagnostic>) {
    let (p, s) = (&row.path, &row.spans);
    match Credential::parse(&row.auth) {
        Err(e) => d.push(Diagnostic::error(
            p,
            s.value("auth"),
            e.code,
            e.message,
            e.help,
        )),
        Ok(Some(Credential::Env { .. })) if !row.is_mcp() => d.push(Diagnostic::error(
            p,
            s.value("auth"),
            "bad_auth_for_runner",
            "`env:` hands variables to an MCP server started as a command; this row starts none",
            "use bearer:ENV, basic:ENV, headers:{\"Header\":\"$ENV\"} or query:param=ENV",
        )),
        Ok(_) => {}
    }
}
