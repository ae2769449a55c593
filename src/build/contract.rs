//! The contract: what an agent reads before it calls a row, built once per row at build time
//! and rendered as markdown, JSON and HTML from the same model.

use crate::build::history::{Change, ChangeKind};
use crate::row::binding::{Bindings, STDIO};
use crate::row::call::example_of;
use crate::row::credential::Credential;
use crate::row::target::HttpTarget;
use crate::row::urls::Urls;
use crate::row::{Row, RowType};
use serde::Serialize;
use serde_json::Value as Json;

/// One commit in a contract's history.
#[derive(Debug, Clone, Serialize)]
pub struct HistoryLine {
    pub sha: String,
    pub short: String,
    pub date: String,
    pub author: String,
    pub subject: String,
    pub kind: &'static str,
    /// The commit's page in the repository, when its address is configured.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,
}

/// The first ten characters of `s`: the day of an RFC 3339 time, or an abbreviated commit.
pub fn first_ten(s: &str) -> &str {
    let end = s.char_indices().nth(10).map_or(s.len(), |(i, _)| i);
    &s[..end]
}

impl HistoryLine {
    pub fn new(c: &Change, urls: &Urls) -> Self {
        HistoryLine {
            sha: c.commit.sha.clone(),
            short: first_ten(&c.commit.sha).to_string(),
            date: c.commit.date.clone(),
            author: c.commit.author.clone(),
            subject: c.commit.subject.clone(),
            kind: c.kind.as_str(),
            url: urls.commit(&c.commit.sha),
        }
    }
}

/// One argument of a typed row.
#[derive(Debug, Clone, Serialize)]
pub struct Argument {
    pub position: usize,
    pub name: String,
    #[serde(rename = "type")]
    pub kind: String,
    pub required: bool,
    pub description: String,
}

/// An argument's description as a list shows it: its first 160 graphemes, and `…` where it is cut.
pub fn brief(text: &str) -> std::borrow::Cow<'_, str> {
    use unicode_segmentation::UnicodeSegmentation as _;
    match text.grapheme_indices(true).nth(160) {
        Some((at, _)) => format!("{}…", &text[..at]).into(),
        None => text.into(),
    }
}

/// The contract of one row.
#[derive(Debug, Clone, Serialize)]
pub struct Contract {
    pub key: String,
    pub category: String,
    /// `category › KEY`.
    pub path: String,
    #[serde(rename = "type")]
    pub kind: &'static str,
    pub runner: String,
    pub target: String,
    pub auth: String,
    pub auth_form: String,
    pub credential_envs: Vec<String>,
    /// Where the catalogue's bindings let each of `credential_envs` go: the only hosts the
    /// dispatcher sends the secret to. None for a row without a credential.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub credential_bindings: Vec<BoundTo>,
    pub risk: &'static str,
    pub enabled: bool,
    pub planner_visible: bool,
    pub planner_rank: i64,
    pub what: String,
    pub when_to_use: String,
    pub args: String,
    pub ex: String,
    pub output: String,
    pub notes: Vec<String>,
    pub arguments: Vec<Argument>,
    pub input_schema: Option<Json>,
    pub examples: Vec<String>,
    pub includes: Vec<String>,
    /// Flow rows: the keys the steps call, in order.
    pub steps: Vec<String>,
    pub fingerprint: String,
    /// The dispatcher's links, none when the catalogue has no public dispatcher.
    pub run_now_url: Option<String>,
    pub contract_url: Option<String>,
    pub invoke_url: Option<String>,
    pub example_request: String,
    /// The example call as a router tag, for a model to write in its text.
    pub example_tag: String,
    pub receipt_url: Option<String>,
    pub confirm_url: Option<String>,
    /// This contract as a file of the static site (`…/k/KEY.md`).
    pub markdown_url: String,
    pub may_invoke: Vec<String>,
    /// The kinds of credential this row accepts, and on what condition.
    pub accepts: Vec<Accepts>,
    pub troubleshooting: Vec<String>,
    pub created_at: Option<String>,
    pub updated_at: Option<String>,
    pub history: Vec<HistoryLine>,
}

/// Where one credential a row names may go, as the catalogue binds it (`bindings.json`).
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct BoundTo {
    /// The environment variable the dispatcher reads the secret from.
    pub env: String,
    /// Whether a binding lets this row use it. False only in a site built by hand or by an
    /// older capdir (the gate refuses such a row): every call is refused before the secret is
    /// read.
    pub bound: bool,
    /// The origins (`scheme://host[:port]/path-prefix`) it may be sent to, as the dispatcher
    /// parses them (so an encoded, IDN or numeric host reads as the host it connects to), or
    /// `stdio:` for an MCP server's process the row starts.
    pub origins: Vec<String>,
    /// The HTTP methods it may be sent with; none: any.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub methods: Vec<String>,
    /// Why calls are refused, when it is not bound: the refusal's stable code
    /// (`unbound_credential`, `reserved_credential`, `row_not_bound`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub refused: Option<&'static str>,
}

/// An origin of a binding as the dispatcher compares it: the URL parser's serialisation
/// (lowercase host, punycode, dotted IPv4, default port dropped); `stdio:` and text that is
/// no URL (which admits nothing) as written.
pub fn shown_origin(origin: &str) -> String {
    let text = origin.trim();
    if text == STDIO {
        return text.to_string();
    }
    match url::Url::parse(text) {
        Ok(u) if matches!(u.scheme(), "http" | "https") => u.to_string(),
        _ => text.to_string(),
    }
}

/// Where `bindings` let row `row` send each variable of its credential, in the order the
/// credential names them (each once); none for a row without a credential.
pub fn bound_to(row: &Row, bindings: &Bindings) -> Vec<BoundTo> {
    let Some(credential) = Credential::parse(&row.auth).ok().flatten() else {
        return Vec::new();
    };
    let mut envs = credential.envs();
    let mut seen = std::collections::HashSet::new();
    envs.retain(|e| seen.insert(e.clone()));
    envs.into_iter()
        .map(
            |env| match bindings.binding_for(&env, &row.key, &row.category) {
                Ok(b) => BoundTo {
                    env,
                    bound: true,
                    origins: b.origins.iter().map(|o| shown_origin(o)).collect(),
                    methods: b.methods.clone(),
                    refused: None,
                },
                Err(refusal) => BoundTo {
                    env,
                    bound: false,
                    origins: Vec::new(),
                    methods: Vec::new(),
                    refused: Some(refusal.code),
                },
            },
        )
        .collect()
}

/// One kind of credential a row accepts (the static contract's half of "who may do what";
/// the dispatcher adds the presented credential's own affordances).
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct Accepts {
    /// `owner_key`, `capability_token` or `anonymous`.
    pub credential: &'static str,
    /// When it is enough.
    pub condition: String,
}

/// The kinds of credential `row` accepts.
pub fn accepts(row: &Row) -> Vec<Accepts> {
    let mut scope = format!("scoped to `{}`", row.key);
    if !row.category.is_empty() {
        scope.push_str(&format!(" or to category `{}`", row.category));
    }
    if row.sensitive {
        scope.push_str(", with risk ceiling `high` (the row is sensitive)");
    }
    let mut out = vec![
        Accepts {
            credential: "owner_key",
            condition: "always".into(),
        },
        Accepts {
            credential: "capability_token",
            condition: scope,
        },
    ];
    if !row.sensitive && row.auth.trim().is_empty() {
        out.push(Accepts {
            credential: "anonymous",
            condition: "only when the dispatcher runs with --open".into(),
        });
    }
    out
}

fn arguments(schema: Option<&Json>) -> Vec<Argument> {
    let Some(schema) = schema else {
        return Vec::new();
    };
    let required: Vec<&str> = schema
        .get("required")
        .and_then(Json::as_array)
        .map(|r| r.iter().filter_map(Json::as_str).collect())
        .unwrap_or_default();
    crate::row::args::properties(schema)
        .into_iter()
        .enumerate()
        .map(|(i, (name, prop))| Argument {
            position: i + 1,
            name: name.to_string(),
            kind: match prop.get("type") {
                Some(Json::String(t)) => t.clone(),
                Some(other) => other.to_string(),
                None => "any".into(),
            },
            required: required.contains(&name),
            description: prop
                .get("description")
                .and_then(Json::as_str)
                .unwrap_or("")
                .to_string(),
        })
        .collect()
}

/// Where a caller acts on a troubleshooting item: the POST that repairs a call (with a
/// dispatcher); a retry is the contract's own run-now link, not repeated.
struct Acts<'a> {
    repair: Option<&'a str>,
}

impl Acts<'_> {
    fn repair(&self) -> String {
        match self.repair {
            Some(_) => "repair it by the POST above, with `repairs`".into(),
            None => "repair with `repairs`".into(),
        }
    }
}

fn troubleshooting(row: &Row, act: &Acts) -> Vec<String> {
    let mut t: Vec<String> = vec![format!(
        "`missing_args`: send as many `|`-separated pieces as ARGS names; {}.",
        act.repair()
    )];
    match row.kind {
        RowType::Http if row.is_mcp() => {
            t.push(format!("`ERR:mcp:tool_error:`: the tool ran and reported an error; its text says why (often the arguments); {}.", act.repair()));
            t.push("`ERR:mcp:timeout:`, `ERR:mcp:closed:`, `ERR:mcp:spawn:`, `ERR:mcp:connect:`: the MCP server did not answer in time, exited, could not be started or reached; retry later (the run-now link above) or tell the operator.".into());
            t.push("`ERR:mcp:rpc:`: the server refused the request (a JSON-RPC error, e.g. an unknown tool): the row may be out of date; re-import the server.".into());
        }
        RowType::Fn => t.push(format!(
            "`ERR:fn:{}:…`: the builtin refused its input; check it against ARGS; {}.",
            row.target.trim(),
            act.repair()
        )),
        RowType::Http => {
            t.push(format!("`ERR:http:<status>:`: the remote answered an error; 4xx means the arguments or credential, 5xx the service; {}.", act.repair()));
            t.push("`ERR:http:fetch:`: the remote could not be reached or timed out; retry later (the run-now link above).".into());
            t.push(if row.auth.is_empty() {
                "`ERR:breaker_open:`: 5 calls unanswered in a row; retry after its time.".into()
            } else {
                "`ERR:breaker_open:`: 5 calls unanswered in a row, or 8 401/403 (an hour: the operator must fix the credential); retry after its time.".into()
            });
        }
        RowType::Agent => t.push(format!("`ERR:http:` from the model provider: quota, model id or gateway configuration; the body is the user message; {}.", act.repair())),
        RowType::Flow => t.push(format!("A flow stops at the first step whose output starts `ERR:`; the error names that step; {}.", act.repair())),
    }
    t.push(format!(
        "`RAN_NO_MATERIAL`: it ran and produced nothing; check the arguments; {}.",
        act.repair()
    ));
    t
}

impl Contract {
    /// The contract of `row`, whose fingerprint (covering what it composes) is `fingerprint`,
    /// its credential shown where `bindings` (the catalogue's) let it go.
    pub fn new(
        row: &Row,
        history: &[Change],
        urls: &Urls,
        fingerprint: &str,
        bindings: &Bindings,
    ) -> Contract {
        let doc = row.doc();
        let ex = example_of(row);
        let dispatcher = urls.dispatcher.as_deref();
        let credential = Credential::parse(&row.auth).ok().flatten();
        let risk = if row.sensitive { "high" } else { "low" };
        let accepts = accepts(row);
        let invoke_url = dispatcher.map(|d| format!("{d}/api/dispatch"));
        let may_invoke = accepts
            .iter()
            .map(|a| match a.credential {
                "owner_key" => "the owner key".to_string(),
                "capability_token" => format!("a capability token {}", a.condition),
                _ => format!("anyone without a credential, {}", a.condition),
            })
            .collect();
        let body_json = serde_json::to_string(&ex).unwrap_or_default();
        Contract {
            key: row.key.clone(),
            category: row.category.clone(),
            path: if row.category.is_empty() {
                row.key.clone()
            } else {
                format!("{} › {}", row.category, row.key)
            },
            kind: row.kind.as_str(),
            runner: row.runner_name().to_string(),
            target: row.target.trim().to_string(),
            auth: row.auth.trim().to_string(),
            auth_form: credential
                .as_ref()
                .map(|c| c.form().to_string())
                .unwrap_or_else(|| "none".into()),
            credential_envs: credential
                .as_ref()
                .map(Credential::envs)
                .unwrap_or_default(),
            credential_bindings: bound_to(row, bindings),
            risk,
            enabled: row.enabled,
            planner_visible: row.planner_visible,
            planner_rank: row.planner_rank,
            what: doc.what.clone().unwrap_or_default(),
            when_to_use: doc.when_to_use.clone().unwrap_or_default(),
            args: doc.args.clone().unwrap_or_default(),
            ex: ex.clone(),
            output: doc.output.clone().unwrap_or_default(),
            notes: doc.notes.clone(),
            arguments: arguments(row.input_schema.as_ref()),
            input_schema: row.input_schema.clone(),
            examples: row.examples.clone(),
            includes: row.includes.clone(),
            steps: match row.kind {
                RowType::Flow => crate::row::flow::parse(row.payload())
                    .map(|f| f.keys().map(str::to_string).collect())
                    .unwrap_or_default(),
                _ => Vec::new(),
            },
            fingerprint: fingerprint.to_string(),
            run_now_url: urls.run_now(&row.key, &ex),
            contract_url: urls.contract(&row.key),
            invoke_url: invoke_url.clone(),
            example_request: format!(r#"{{"key":"{}","body":{body_json}}}"#, row.key),
            example_tag: crate::row::route::example_tag(&row.key, &ex),
            receipt_url: dispatcher.map(|d| format!("{d}/receipt/inv_…")),
            confirm_url: dispatcher.map(|d| format!("{d}/api/dispatch?confirm=inv_…")),
            markdown_url: urls.site_file(&format!("k/{}.md", row.key)),
            may_invoke,
            accepts,
            troubleshooting: troubleshooting(
                row,
                &Acts {
                    repair: invoke_url.as_deref(),
                },
            ),
            created_at: history.last().map(|c| c.commit.date.clone()),
            updated_at: history.first().map(|c| c.commit.date.clone()),
            history: history.iter().map(|c| HistoryLine::new(c, urls)).collect(),
        }
    }

    /// Is this an http row that changes nothing remotely (GET/HEAD), or a pure builtin?
    pub fn read_only(row: &Row) -> bool {
        match row.kind {
            RowType::Fn => true,
            // An MCP tool's own readOnlyHint is a hint from the server, not a promise.
            RowType::Http if row.is_mcp() => false,
            RowType::Http => HttpTarget::parse(&row.target).is_ok_and(|t| t.is_read_only()),
            _ => false,
        }
    }
}

/// The page a removed key answers with: when, by which commit, and what replaced it.
#[derive(Debug, Clone, Serialize)]
pub struct Tombstone {
    pub key: String,
    pub removed_at: String,
    pub removed_by: String,
    pub removed_subject: String,
    pub replaced_by: Option<String>,
    pub history: Vec<HistoryLine>,
}

impl Tombstone {
    /// A tombstone for a file whose newest change is its deletion.
    pub fn from_history(key: &str, history: &[Change], urls: &Urls) -> Option<Tombstone> {
        let last = history.first()?;
        (last.kind == ChangeKind::Deleted).then(|| Tombstone {
            key: key.to_string(),
            removed_at: last.commit.date.clone(),
            removed_by: last.commit.sha.clone(),
            removed_subject: last.commit.subject.clone(),
            replaced_by: last.commit.replaced_by.clone(),
            history: history.iter().map(|c| HistoryLine::new(c, urls)).collect(),
        })
    }
}
