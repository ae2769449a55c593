//! Projections: the compact views of a row other tools consume — a registry entry, an MCP
//! tool definition, an llms.txt line. One function each, shared by `build` and the servers.

use crate::build::contract::Contract;
use crate::row::Row;
use crate::row::call::needed_args;
use crate::row::urls::Urls;
use serde::Serialize;
use serde::ser::{SerializeMap, Serializer};
use serde_json::Value as Json;

/// A row's registry entry: enough to pick it, with a pointer to its contract on the site.
#[derive(Serialize)]
pub struct RegistryEntry<'a> {
    key: &'a str,
    #[serde(rename = "type")]
    kind: &'static str,
    category: &'a str,
    what: &'a str,
    risk: &'static str,
    fingerprint: &'a str,
    contract: String,
}

pub fn registry_entry<'a>(row: &'a Row, urls: &Urls, fingerprint: &'a str) -> RegistryEntry<'a> {
    RegistryEntry {
        key: &row.key,
        kind: row.kind.as_str(),
        category: &row.category,
        what: row.what(),
        risk: if row.sensitive { "high" } else { "low" },
        fingerprint,
        contract: urls.site_file(&format!("k/{}.md", row.key)),
    }
}

/// The namespace of a catalogue's registry names: its public host reversed
/// (`capdir.example.com` → `com.example.capdir`), `local.capdir` when it has none.
pub fn registry_namespace(urls: &Urls) -> String {
    let host = urls
        .site
        .as_deref()
        .or(urls.dispatcher.as_deref())
        .and_then(|u| url::Url::parse(u).ok())
        .and_then(|u| u.host_str().map(str::to_string))
        .filter(|h| {
            !h.is_empty()
                && h.chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '.' || c == '-')
        });
    match host {
        Some(h) => h.split('.').rev().collect::<Vec<_>>().join("."),
        None => "local.capdir".into(),
    }
}

/// A name's part after the namespace: lowercase letters, digits, `-`, `.` and `_`.
fn registry_slug(text: &str) -> String {
    let slug: String = text
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '.' || c == '_' {
                c.to_ascii_lowercase()
            } else {
                '-'
            }
        })
        .collect();
    let slug = slug.trim_matches('-').to_string();
    if slug.is_empty() {
        "catalogue".into()
    } else {
        slug
    }
}

/// A description as the registry takes it: one line of at most 100 characters.
fn registry_description(text: &str) -> String {
    let line = text.split_whitespace().collect::<Vec<_>>().join(" ");
    if line.chars().count() <= 100 {
        return if line.is_empty() {
            "An MCP server.".into()
        } else {
            line
        };
    }
    let cut: String = line.chars().take(99).collect();
    format!("{}…", cut.trim_end())
}

/// A catalogue's version for the registry: its commit's date and the commit
/// (`2024.1.1+0123456789ab`), `0.0.0` outside Git.
pub fn registry_version(commit: &str, date: &str) -> String {
    let day: Vec<u32> = date
        .get(..10)
        .unwrap_or_default()
        .split('-')
        .filter_map(|p| p.parse().ok())
        .collect();
    match (day.as_slice(), commit.get(..12)) {
        ([y, m, d], Some(c)) => format!("{y}.{m}.{d}+{c}"),
        _ => "0.0.0".into(),
    }
}

/// The catalogue itself as an MCP server for the registry: the dispatcher's `/mcp`, over
/// Streamable HTTP with a bearer credential (a capability token or the owner key). No remote
/// when the catalogue has no public dispatcher.
pub fn catalogue_server_json(urls: &Urls, title: &str, summary: &str, version: &str) -> Json {
    use crate::row::server_json::{KeyValue, SCHEMA, ServerJson, Transport};
    let mut entry = ServerJson {
        schema: SCHEMA.into(),
        name: format!("{}/{}", registry_namespace(urls), registry_slug(title)),
        description: registry_description(summary),
        version: version.into(),
        website_url: urls.site_base().map(|s| format!("{s}/")),
        ..ServerJson::default()
    };
    if let Some(base) = urls.dispatcher.as_deref() {
        entry.remotes.push(Transport {
            kind: "streamable-http".into(),
            url: Some(format!("{base}/mcp")),
            headers: vec![KeyValue {
                name: "Authorization".into(),
                description: Some("Bearer and a capability token (`capdir token`)".into()),
                is_required: true,
                is_secret: true,
                ..KeyValue::default()
            }],
            ..Transport::default()
        });
    }
    serde_json::to_value(entry).unwrap_or_default()
}

/// The registry description of the server a `runner: mcp` row calls (`mcp/servers/KEY.json`),
/// or none for another row, or for a server no registry type starts.
pub fn row_server_json(row: &Row, urls: &Urls, version: &str) -> Option<Json> {
    use crate::row::mcp::{McpTarget, RUNNER};
    if row.runner != RUNNER {
        return None;
    }
    let target = McpTarget::parse(&row.target).ok()?;
    let name = format!(
        "{}/{}",
        registry_namespace(urls),
        registry_slug(&row.key.replace('_', "-"))
    );
    let mut entry = crate::row::server_json::describe(
        &target,
        &row.auth,
        &name,
        version,
        &registry_description(row.what()),
    )?;
    if let Some(p) = entry.packages.first() {
        entry.version = p.version.clone();
    }
    entry.meta = Some(serde_json::json!({
        "io.modelcontextprotocol.registry/publisher-provided": {
            "capdir": {"key": row.key, "tool": target.tool, "contract": urls.site_file(&format!("k/{}.md", row.key))}
        }
    }));
    serde_json::to_value(entry).ok()
}

/// The argument of every MCP tool that names the failed call it repairs.
pub const REPAIRS: &str = "repairs";

/// A row described as a tool (for MCP and for an agent's tool listing): WHAT and WHEN_TO_USE.
pub fn tool_description(row: &Row) -> String {
    let mut description = row.what().to_string();
    if let Some(w) = row.doc().when_to_use.as_deref().filter(|w| !w.is_empty()) {
        description.push_str(" When to use: ");
        description.push_str(w);
    }
    description
}

/// A row's arguments as a tool's JSON Schema: its `input_schema`, or a single `body` string
/// described by the ARGS line (required when a template needs `$1`).
pub fn tool_arguments(row: &Row) -> Json {
    // Strings, bools and JSON: no map with other keys than strings, so it always serializes.
    serde_json::to_value(ToolSchema::of(row, false)).unwrap_or_default()
}

/// How the single `body` argument of a row without an input schema is described.
fn body_description(row: &Row) -> String {
    format!(
        "Arguments as one string, pieces split on `|`. {}",
        row.doc().args.as_deref().unwrap_or("")
    )
    .trim_end()
    .to_string()
}

/// The MCP tool for a row: name = key, description = WHAT and WHEN_TO_USE, the input schema
/// (or a single `body` string described by the ARGS line), and behaviour hints.
pub fn mcp_tool(row: &Row) -> Json {
    // A struct of strings, bools and JSON: it has no map with other keys than strings.
    serde_json::to_value(McpTool::of(row)).unwrap_or_default()
}

/// A row's MCP tool, serialized straight from the row: `mcp/tools.json` holds one per row
/// and a full build writes every one, so no JSON tree is made (and dropped) for each.
#[derive(Serialize)]
pub struct McpTool<'a> {
    name: &'a str,
    title: String,
    description: String,
    #[serde(rename = "inputSchema")]
    input_schema: ToolSchema<'a>,
    annotations: Annotations,
}

#[derive(Serialize)]
struct Annotations {
    #[serde(rename = "readOnlyHint")]
    read_only: bool,
    #[serde(rename = "destructiveHint")]
    destructive: bool,
    #[serde(rename = "openWorldHint")]
    open_world: bool,
}

impl<'a> McpTool<'a> {
    pub fn of(row: &'a Row) -> McpTool<'a> {
        let read_only = Contract::read_only(row);
        McpTool {
            name: &row.key,
            title: row.key.replace('_', " ").to_lowercase(),
            description: tool_description(row),
            input_schema: ToolSchema::of(row, true),
            annotations: Annotations {
                read_only,
                destructive: !read_only && row.sensitive,
                open_world: matches!(
                    row.kind,
                    crate::row::RowType::Http | crate::row::RowType::Agent
                ),
            },
        }
    }
}

/// A row's arguments as a tool's input schema ([`tool_arguments`]); with `repairs`, the
/// `repairs` argument added to its properties (any call may repair a failed one; a row's own
/// `repairs` argument wins).
struct ToolSchema<'a> {
    arguments: Arguments<'a>,
    repairs: bool,
}

enum Arguments<'a> {
    /// The row's `input_schema`.
    Row(&'a Json),
    /// A single `body` string, required when a template needs `$1`.
    Body { description: String, required: bool },
}

impl<'a> ToolSchema<'a> {
    fn of(row: &'a Row, repairs: bool) -> ToolSchema<'a> {
        let arguments = match &row.input_schema {
            Some(schema) => Arguments::Row(schema),
            None => Arguments::Body {
                description: body_description(row),
                required: needed_args(row) > 0,
            },
        };
        ToolSchema { arguments, repairs }
    }
}

/// The schema of the `repairs` argument every tool takes.
#[derive(Serialize)]
struct RepairsArgument {
    #[serde(rename = "type")]
    kind: &'static str,
    description: &'static str,
}

const REPAIRS_ARGUMENT: RepairsArgument = RepairsArgument {
    kind: "string",
    description: "Optional: the receipt id (inv_…) of a failed call this one corrects.",
};

impl Serialize for ToolSchema<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match &self.arguments {
            Arguments::Row(Json::Object(schema)) if self.repairs => {
                let mut map = s.serialize_map(Some(schema.len()))?;
                for (k, v) in schema {
                    match v {
                        Json::Object(props)
                            if k == "properties" && !props.contains_key(REPAIRS) =>
                        {
                            map.serialize_entry(k, &WithRepairs(props))?
                        }
                        _ => map.serialize_entry(k, v)?,
                    }
                }
                map.end()
            }
            Arguments::Row(schema) => schema.serialize(s),
            Arguments::Body {
                description,
                required,
            } => {
                #[derive(Serialize)]
                struct Body<'d> {
                    #[serde(rename = "type")]
                    kind: &'static str,
                    description: &'d str,
                }
                #[derive(Serialize)]
                struct Properties<'d> {
                    body: Body<'d>,
                    #[serde(skip_serializing_if = "Option::is_none")]
                    repairs: Option<RepairsArgument>,
                }
                let mut map = s.serialize_map(Some(2 + usize::from(*required)))?;
                map.serialize_entry("type", "object")?;
                map.serialize_entry(
                    "properties",
                    &Properties {
                        body: Body {
                            kind: "string",
                            description,
                        },
                        repairs: self.repairs.then_some(REPAIRS_ARGUMENT),
                    },
                )?;
                if *required {
                    map.serialize_entry("required", &["body"])?;
                }
                map.end()
            }
        }
    }
}

/// A schema's properties and the `repairs` argument after them.
struct WithRepairs<'a>(&'a serde_json::Map<String, Json>);

impl Serialize for WithRepairs<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut map = s.serialize_map(Some(self.0.len() + 1))?;
        for (k, v) in self.0 {
            map.serialize_entry(k, v)?;
        }
        map.serialize_entry(REPAIRS, &REPAIRS_ARGUMENT)?;
        map.end()
    }
}

/// The llms.txt line of a row, its contract on the site, written onto the end of `out`
/// (`llms.txt` has one per row: no string is made for each).
pub fn push_llms_line(out: &mut String, row: &Row, urls: &Urls) {
    out.push_str("- [");
    out.push_str(&row.key);
    out.push_str("](");
    urls.push_site_file(out, &["k/", &row.key, ".md"]);
    out.push_str("): ");
    out.push_str(row.what());
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::row::{catalogue, parse_row};
    use serde_json::json;
    use std::path::Path;

    /// The tool as a JSON tree, built the way `mcp_tool` built it before [`McpTool`]: the
    /// typed serialization must write the same bytes.
    fn as_tree(row: &Row) -> Json {
        let mut input_schema = arguments_as_tree(row);
        if let Some(props) = input_schema
            .get_mut("properties")
            .and_then(Json::as_object_mut)
            .filter(|p| !p.contains_key(REPAIRS))
        {
            props.insert(
                REPAIRS.into(),
                json!({"type": "string", "description": "Optional: the receipt id (inv_…) of a failed call this one corrects."}),
            );
        }
        let read_only = Contract::read_only(row);
        json!({
            "name": row.key,
            "title": row.key.replace('_', " ").to_lowercase(),
            "description": tool_description(row),
            "inputSchema": input_schema,
            "annotations": {
                "readOnlyHint": read_only,
                "destructiveHint": !read_only && row.sensitive,
                "openWorldHint": matches!(row.kind, crate::row::RowType::Http | crate::row::RowType::Agent),
            },
        })
    }

    /// A row's arguments as a JSON tree, built the way `tool_arguments` built them before
    /// [`ToolSchema`].
    fn arguments_as_tree(row: &Row) -> Json {
        row.input_schema.clone().unwrap_or_else(|| {
            let mut schema = json!({
                "type": "object",
                "properties": {"body": {
                    "type": "string",
                    "description": body_description(row),
                }},
            });
            if needed_args(row) > 0 {
                schema["required"] = json!(["body"]);
            }
            schema
        })
    }

    #[test]
    fn an_llms_line_links_the_contract_where_the_site_is() {
        let files = catalogue::read_dir(Path::new("catalogue")).expect("the bundled catalogue");
        let row = parse_row(&files[0].path, &files[0].bytes)
            .row
            .expect("a row");
        for (urls, link) in [
            (Urls::new(""), format!("k/{}.md", row.key)),
            (
                Urls::new("https://d.example.com").with_site(Some("https://s.example.com/c")),
                format!("https://s.example.com/c/k/{}.md", row.key),
            ),
        ] {
            // The link is the one every other page gives the contract.
            assert_eq!(urls.site_file(&format!("k/{}.md", row.key)), link);
            let mut line = String::from("before\n");
            push_llms_line(&mut line, &row, &urls);
            assert_eq!(
                line,
                format!("before\n- [{}]({link}): {}", row.key, row.what())
            );
        }
    }

    #[test]
    fn a_tool_is_written_as_its_json_tree_would_be() {
        let files = catalogue::read_dir(Path::new("catalogue")).expect("the bundled catalogue");
        let rows: Vec<Row> = files
            .iter()
            .filter_map(|f| parse_row(&f.path, &f.bytes).row)
            .collect();
        assert!(rows.len() > 20, "{} rows", rows.len());
        let mut variants = Vec::new();
        for row in &rows {
            variants.push(row.clone());
            // Each shape of schema a row may give: none, one whose properties already name
            // `repairs`, one without properties, one with properties that are not a map, and
            // one that is not a map at all.
            for schema in [
                None,
                Some(
                    json!({"type": "object", "properties": {"repairs": {"type": "integer"}, "a": {}}}),
                ),
                Some(json!({"type": "object", "required": ["a"]})),
                Some(json!({"properties": [1, 2], "type": "object"})),
                Some(json!(true)),
            ] {
                let mut r = row.clone();
                r.input_schema = schema;
                variants.push(r);
            }
        }
        let mut bodies = [0, 0];
        for row in &variants {
            if row.input_schema.is_none() {
                bodies[usize::from(needed_args(row) > 0)] += 1;
            }
            let typed = serde_json::to_string_pretty(&McpTool::of(row)).expect("serializes");
            let tree = serde_json::to_string_pretty(&as_tree(row)).expect("serializes");
            assert_eq!(typed, tree, "{}", row.key);
            assert_eq!(mcp_tool(row), as_tree(row), "{}", row.key);
            assert_eq!(
                serde_json::to_string(&tool_arguments(row)).expect("serializes"),
                serde_json::to_string(&arguments_as_tree(row)).expect("serializes"),
                "{}",
                row.key
            );
        }
        assert!(
            bodies[0] > 0 && bodies[1] > 0,
            "both kinds of body: {bodies:?}"
        );
    }
}
