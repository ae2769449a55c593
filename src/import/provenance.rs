//! Provenance: each row file an import writes names its document and operation in a comment,
//! with a digest of the rest of the file. A later import reads it back to know its own rows:
//! which it may rewrite, which were edited by hand since, which it never wrote.

use crate::row::catalogue::SourceFile;
use sha2::{Digest, Sha256};

/// The first line of every row file, as hand-written rows have it.
pub(super) const SCHEMA_LINE: &str = "# yaml-language-server: $schema=../schema/row.schema.json\n";
/// Starts the line naming the document, the operation and the digest of the rest.
pub(super) const MARKER: &str = "# capdir import openapi: ";

/// What a file's provenance line says.
#[derive(Debug, Clone, serde::Deserialize, serde::Serialize)]
pub(super) struct Marker {
    pub document: String,
    pub operation: String,
    pub sha256: String,
}

pub(super) fn digest(text: &str) -> String {
    hex::encode(&Sha256::digest(text.as_bytes())[..8])
}

/// A row file in the catalogue directory, and what its provenance line says: its marker, and
/// whether the rest of the file still has the digest the marker names.
pub(super) struct OnDisk<'a> {
    pub file: &'a SourceFile,
    pub provenance: Option<(Marker, bool)>,
}

/// A file's marker, and whether the rest of the file still has the digest it names.
pub(super) fn read_marker(text: &str) -> Option<(Marker, bool)> {
    let mut offset = 0;
    for line in text.split_inclusive('\n').take(3) {
        if let Some(json) = line.strip_prefix(MARKER) {
            let marker: Marker = serde_json::from_str(json.trim_end()).ok()?;
            let rest = &text[offset + line.len()..];
            let intact = digest(rest) == marker.sha256;
            return Some((marker, intact));
        }
        offset += line.len();
    }
    None
}

/// A row file's whole text: the schema line, the provenance line, then `body`.
pub(super) fn file_text(document: &str, operation: &str, body: &str) -> String {
    let marker = Marker {
        document: document.to_string(),
        operation: operation.to_string(),
        sha256: digest(body),
    };
    let marker = serde_json::to_string(&marker).unwrap_or_default();
    format!("{SCHEMA_LINE}{MARKER}{marker}\n{body}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn markers_detect_edits() {
        let body = "key: A_B\n";
        let m = Marker {
            document: "D".into(),
            operation: "GET /a".into(),
            sha256: digest(body),
        };
        let text = format!(
            "{SCHEMA_LINE}{MARKER}{}\n{body}",
            serde_json::to_string(&m).unwrap()
        );
        assert!(read_marker(&text).expect("marker").1);
        let edited = text.replace("A_B", "A_C");
        assert!(!read_marker(&edited).expect("marker").1);
        assert!(read_marker("key: X\n").is_none());
    }
}
