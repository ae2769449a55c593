//! A row's target: present, and well formed for its type (a builtin, an HTTP request, an MCP
//! server's tool, a flow's steps).

use crate::row::builtins;
use crate::row::credential::Credential;
use crate::row::diag::{Diagnostic, did_you_mean};
use crate::row::flow;
use crate::row::mcp::{McpServer, McpTarget};
use crate::row::target::HttpTarget;
use crate::row::{Row, RowType, line_col};

/// Every row but a flow names a target.
pub(super) fn present(row: &Row, d: &mut Vec<Diagnostic>) {
    if row.kind != RowType::Flow && row.target.trim().is_empty() {
        let what = match row.kind {
            RowType::Fn => "the builtin's name, e.g. `target: sha256`",
            RowType::Http if row.is_mcp() => {
                "the MCP server and tool, e.g. `target: mcp+stdio:npx -y @scope/server@1.0.0#TOOL`"
            }
            RowType::Http => "`METHOD url`, e.g. `target: GET https://api.example.com/items/$1`",
            _ => "the model id, e.g. `target: gw:openai/gpt-4o-mini`",
        };
        d.push(Diagnostic::error(
            &row.path,
            row.spans.key("type"),
            "missing_target",
            format!("a `{}` row needs a target", row.kind.as_str()),
            format!("add {what}"),
        ));
    }
}

/// The rules of the row's type (and of an MCP row, whatever its type says).
pub(super) fn by_type(row: &Row, d: &mut Vec<Diagnostic>) {
    match row.kind {
        _ if row.is_mcp() => check_mcp(row, d),
        RowType::Fn if !row.target.trim().is_empty() => check_fn(row, d),
        RowType::Http if !row.target.trim().is_empty() => check_http(row, d),
        RowType::Flow => {
            if let Err(e) = flow::parse(row.payload()) {
                d.push(flow_error(row, &e));
            }
        }
        _ => {}
    }
}

/// An HTTP target that parses, and named arguments (`{?limit}`, `{form:name}`) well formed
/// and declared.
fn check_http(row: &Row, d: &mut Vec<Diagnostic>) {
    let (p, s) = (&row.path, &row.spans);
    if let Err(e) = HttpTarget::parse(&row.target) {
        let help = if McpTarget::looks_like(&row.target) {
            "this is an MCP target: add `runner: mcp` so the MCP runner calls it".into()
        } else {
            e.help
        };
        d.push(Diagnostic::error(
            p,
            s.value("target"),
            "bad_http_target",
            e.message,
            help,
        ));
    }
    let schema = row.input_schema.as_ref();
    let problems = crate::row::expand::problems(&row.target, row.payload(), schema);
    if !problems.is_empty() {
        let at = s.content_at(row.parsed.payload_line);
        for (message, help) in problems {
            d.push(Diagnostic::error(p, at, "bad_named_args", message, help));
        }
    }
}

fn check_fn(row: &Row, d: &mut Vec<Diagnostic>) {
    let (p, s) = (&row.path, &row.spans);
    if builtins::find(row.target.trim()).is_none() {
        let help = match did_you_mean(row.target.trim(), builtins::names()) {
            Some(n) => format!("did you mean `{n}`?"),
            None => format!(
                "use one of: {}",
                builtins::names().collect::<Vec<_>>().join(", ")
            ),
        };
        d.push(Diagnostic::error(
            p,
            s.value("target"),
            "unknown_builtin",
            format!("`{}` is not a builtin function", row.target.trim()),
            help,
        ));
    }
    let payload = row.payload().trim();
    if payload.is_empty() {
        return;
    }
    // Where the payload starts is looked up only for a diagnostic: finding it parses the file
    // a second time (marked-yaml), a quarter of checking a row that has no problem.
    let at = || s.content_at(row.parsed.payload_line);
    // Slots outside strings (`[$1]`) are legal in the template; check the shape with them filled.
    match probe_json(payload) {
        Ok(serde_json::Value::Array(_)) => {}
        Ok(_) => d.push(Diagnostic::error(
            p,
            at(),
            "bad_fn_template",
            "an fn row's payload must be a JSON array of the builtin's arguments",
            r#"write the payload as an array, e.g. `["$1", "$2"]`"#,
        )),
        Err(e) => {
            let (line, column) = at();
            d.push(Diagnostic::error(
                p,
                (
                    line + e.line().saturating_sub(1),
                    if e.line() <= 1 {
                        column + e.column().saturating_sub(1)
                    } else {
                        e.column()
                    },
                ),
                "bad_fn_template",
                format!("an fn row's payload is not valid JSON: {e}"),
                r#"write the payload as a JSON array, e.g. `["$1", "$2"]`"#,
            ))
        }
    }
}

/// A `runner: mcp` row: a `type: http` row (a call to a server), an MCP target, a payload that
/// is the arguments' JSON object template if there is one, and a credential its server can take.
fn check_mcp(row: &Row, d: &mut Vec<Diagnostic>) {
    let (p, s) = (&row.path, &row.spans);
    if row.kind != RowType::Http {
        d.push(Diagnostic::error(
            p,
            s.value("type"),
            "runner_type_mismatch",
            format!(
                "`runner: mcp` forwards a call to an MCP server; this is a `{}` row",
                row.kind.as_str()
            ),
            "set `type: http`: a call to a server, as the contract, the gate and MCP hints treat it",
        ));
    }
    if row.target.trim().is_empty() {
        return;
    }
    let target = match McpTarget::parse(&row.target) {
        Ok(t) => t,
        Err(e) => {
            d.push(Diagnostic::error(
                p,
                s.value("target"),
                "bad_mcp_target",
                e.message,
                e.help,
            ));
            return;
        }
    };
    let payload = row.payload().trim();
    if !payload.is_empty() && !matches!(probe_json(payload), Ok(serde_json::Value::Object(_))) {
        d.push(Diagnostic::error(
            p,
            s.content_at(row.parsed.payload_line),
            "bad_mcp_payload",
            "an mcp row's payload is the tool's arguments: a JSON object template",
            r#"write `{"message": "$1"}`, or leave the payload out to send the arguments input_schema names"#,
        ));
    }
    let credential = Credential::parse(&row.auth).ok().flatten();
    let wrong = match (&target.server, &credential) {
        (McpServer::Stdio { .. }, Some(c)) if !matches!(c, Credential::Env { .. }) => Some((
            format!(
                "`{}:` applies to HTTP requests; this server is started as a command",
                c.form()
            ),
            "hand the server its secret in its environment: `auth: env:MY_SERVICE_TOKEN`",
        )),
        (McpServer::Http { .. }, Some(Credential::Env { .. })) => Some((
            "`env:` hands variables to a server started as a command; this one is reached over HTTP".to_string(),
            "use bearer:ENV, basic:ENV, headers:{\"Header\":\"$ENV\"} or query:param=ENV",
        )),
        _ => None,
    };
    if let Some((message, help)) = wrong {
        d.push(Diagnostic::error(
            p,
            s.value("auth"),
            "bad_auth_for_runner",
            message,
            help,
        ));
    }
}

/// A JSON template as it reads with every `$N` filled (slots outside strings are legal).
fn probe_json(payload: &str) -> Result<serde_json::Value, serde_json::Error> {
    let probe = vec!["0".to_string(); crate::row::template::highest_slot(payload)];
    let filled = crate::row::template::render(
        payload,
        crate::row::template::Context::Json,
        crate::row::template::Vars {
            args: &probe,
            ..Default::default()
        },
    )
    .unwrap_or_default();
    serde_json::from_str(&filled)
}

fn flow_error(row: &Row, e: &flow::FlowError) -> Diagnostic {
    let payload = row.payload();
    let (line, col) = line_col(payload.as_bytes(), e.offset);
    let base = row.spans.content_at(row.parsed.payload_line + line - 1);
    Diagnostic::error(
        &row.path,
        (
            base.0,
            if row.spans.content_line() == 0 {
                base.1
            } else {
                base.1 + col - 1
            },
        ),
        "bad_flow_step",
        format!("malformed flow: {}", e.message),
        "write steps as `KEY: body`, joined by `>`; `=> NAME` binds a step's output; `{ A: x | B: y }` runs branches at once",
    )
}
