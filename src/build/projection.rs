//! Projections: the compact views of a row other tools consume — a registry entry, an MCP
//! tool definition, an llms.txt line. One function each, shared by `build` and the servers.

use crate::build::contract::Contract;
use crate::row::Row;
use crate::row::call::needed_args;
use crate::row::urls::Urls;
use serde_json::{Value as Json, json};

/// A row's registry entry: enough to pick it, with a pointer to its contract on the site.
pub fn registry_entry(row: &Row, urls: &Urls, fingerprint: &str) -> Json {
    json!({
        "key": row.key,
        "type": row.kind.as_str(),
        "category": row.category,
        "what": row.what(),
        "risk": if row.sensitive { "high" } else { "low" },
        "fingerprint": fingerprint,
        "contract": urls.site_file(&format!("k/{}.md", row.key)),
    })
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
    row.input_schema.clone().unwrap_or_else(|| {
        let mut schema = json!({
            "type": "object",
            "properties": {"body": {
                "type": "string",
                "description": format!("Arguments as one string, pieces split on `|`. {}", row.doc().args.as_deref().unwrap_or(""))
                    .trim_end().to_string(),
            }},
        });
        // A row whose template has `$1` cannot run without a body; say so in the schema.
        if needed_args(row) > 0 {
            schema["required"] = json!(["body"]);
        }
        schema
    })
}

/// The MCP tool for a row: name = key, description = WHAT and WHEN_TO_USE, the input schema
/// (or a single `body` string described by the ARGS line), and behaviour hints.
pub fn mcp_tool(row: &Row) -> Json {
    let description = tool_description(row);
    // Any call may repair a failed one; a row's own `repairs` argument, if it has one, wins.
    let mut input_schema = tool_arguments(row);
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
        "description": description,
        "inputSchema": input_schema,
        "annotations": {
            "readOnlyHint": read_only,
            "destructiveHint": !read_only && row.sensitive,
            "openWorldHint": matches!(row.kind, crate::row::RowType::Http | crate::row::RowType::Agent),
        },
    })
}

/// The llms.txt line of a row: its contract on the site.
pub fn llms_line(row: &Row, urls: &Urls) -> String {
    format!(
        "- [{}]({}): {}",
        row.key,
        urls.site_file(&format!("k/{}.md", row.key)),
        row.what()
    )
}
