//! `capdir new`: a scaffold row whose prompts the author fills in. Until they are filled,
//! `check` refuses it with `scaffold_placeholder`, so a half-written row cannot merge.

use crate::row::{RowType, is_valid_key};
use anyhow::{Result, bail};
use std::path::{Path, PathBuf};

/// The marker left in every line the author must fill.
pub const PLACEHOLDER: &str = "TODO(capdir)";

/// The scaffold text for a new row.
pub fn scaffold(key: &str, kind: RowType) -> String {
    let (target, auth, payload, extra) = match kind {
        RowType::Fn => ("target: echo\n", "", "[\"$1\"]", ""),
        RowType::Http => (
            "target: GET https://api.example.com/TODO(capdir)/$1\n",
            "# auth: bearer:MY_SERVICE_TOKEN   (the environment variable's name, never the value)\n",
            "",
            "",
        ),
        RowType::Agent => (
            "target: gw:openai/gpt-4o-mini\n",
            "",
            "You are TODO(capdir): the system prompt.",
            "allowed_categories: [\"*\"]\n",
        ),
        RowType::Flow => ("", "", "ECHO: $1 > UPPER: $PREV", ""),
    };
    format!(
        "# yaml-language-server: $schema=../schema/row.schema.json\n\
key: {key}\n\
type: {ty}\n\
{target}{auth}category: {PLACEHOLDER}\n\
{extra}content: |\n  \
# WHAT: {PLACEHOLDER} one line: what this does\n  \
# WHEN_TO_USE: {PLACEHOLDER} when an agent should pick this row\n  \
# ARGS: {PLACEHOLDER} $1=…\n  \
# EX: {PLACEHOLDER} an example argument string\n  \
# OUTPUT: {PLACEHOLDER} what comes back\n{payload_block}\
asks:\n  - {PLACEHOLDER} a request in plain words that must find this row\n",
        ty = kind.as_str(),
        payload_block = if payload.is_empty() {
            String::new()
        } else {
            format!("  {payload}\n")
        },
    )
}

/// Write `dir/KEY.yaml`, refusing an invalid key or an existing file.
pub fn write_new(dir: &Path, key: &str, kind: RowType) -> Result<PathBuf> {
    if !is_valid_key(key) {
        bail!(
            "`{key}` is not a valid key: 2–64 characters of A–Z, 0–9 and _, starting with a letter"
        );
    }
    let path = dir.join(format!("{key}.yaml"));
    if path.exists() {
        bail!("{} already exists", path.display());
    }
    std::fs::create_dir_all(dir)?;
    std::fs::write(&path, scaffold(key, kind))?;
    Ok(path)
}
