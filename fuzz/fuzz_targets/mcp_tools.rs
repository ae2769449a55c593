//! Fuzz `capdir import mcp` on what an untrusted MCP server answers (its name, version and
//! `tools/list`): no answer makes the importer panic, every key it makes is a valid key (a
//! file name inside the catalogue, whatever the tool's name), no tool is left out for the key
//! the importer made for it, and every row it proposes passes the gate.
#![no_main]

use capdir::check::check_files;
use capdir::import::mcp::{Options, ToolSpec, rows_for};
use capdir::invoke::runner::mcp::client::ServerInfo;
use capdir::row::catalogue::SourceFile;
use capdir::row::is_valid_key;
use capdir::row::mcp::McpServer;
use libfuzzer_sys::fuzz_target;
use serde_json::Value;
use std::time::Duration;

fn text(v: &Value, field: &str) -> String {
    v.get(field)
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_string()
}

fuzz_target!(|data: &[u8]| {
    let Ok(answer) = serde_json::from_slice::<Value>(data) else {
        return;
    };
    let server = ServerInfo {
        name: text(&answer["server"], "name"),
        version: text(&answer["server"], "version"),
    };
    let Some(listed) = answer.get("tools").and_then(Value::as_array) else {
        return;
    };
    let tools: Vec<ToolSpec> = listed
        .iter()
        .map(|t| ToolSpec {
            name: text(t, "name"),
            title: text(t, "title"),
            description: text(t, "description"),
            input_schema: t.get("inputSchema").cloned().unwrap_or(Value::Null),
        })
        .collect();
    let options = Options {
        server: McpServer::Http {
            url: "http://127.0.0.1:9/mcp".into(),
        },
        auth: String::new(),
        prefix: "FZ".into(),
        category: "fuzz".into(),
        out: "out".into(),
        timeout: Duration::from_secs(1),
    };
    let (rows, skipped) = rows_for(&tools, &options, &server, None);
    for r in &rows {
        assert!(is_valid_key(&r.key), "{:?} from {:?}", r.key, r.tool);
    }
    for s in &skipped {
        assert!(
            !["bad_key", "key_mismatch", "duplicate_key"]
                .iter()
                .any(|code| s.reason.contains(code)),
            "{:?} left out for its key: {}",
            s.tool,
            s.reason
        );
    }
    let files: Vec<SourceFile> = rows
        .iter()
        .map(|r| SourceFile {
            path: format!("out/{}.yaml", r.key).into(),
            bytes: r.text.clone().into_bytes(),
        })
        .collect();
    let checked = check_files(&files);
    assert!(!checked.has_errors(), "{:#?}\n{rows:#?}", checked.diags);
    assert_eq!(checked.rows.len(), rows.len());
});
