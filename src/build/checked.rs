//! `.checked`, beside a built site: the row files the site's gate found clean (no diagnostic
//! at all), each with the SHA-256 of its bytes and of the row the snapshot holds for it
//! ([`snapshot::column_digest`]).
//!
//! A rebuild in place ([`super::incremental`]) takes a file whose bytes have the recorded
//! digest, while the snapshot's row of that file still has the recorded digest, as the row the
//! gate made of those bytes then, and runs the rules of one file over the other files only. The
//! rules across rows and the bindings' rules run over every row, as in a full build. Both sides
//! are content-addressed: an entry that matches the file or the snapshot no more is not used,
//! so a stale or damaged list costs time, never a check. At 10,000 rows the rules of one file
//! are most of a rebuild's opening (two YAML parses a file). Hidden, so in no manifest.

use crate::build::snapshot;
use crate::check::Checked;
use crate::row::Row;
use crate::row::catalogue::SourceFile;
use anyhow::Result;
use sha2::{Digest as _, Sha256};
use std::collections::{HashMap, HashSet};
use std::fmt::Write as _;
use std::path::Path;

/// The list's file name in the site.
pub const FILE: &str = ".checked";

/// A SHA-256.
pub type Digest = [u8; 32];

/// The clean files of a site's catalogue, by file name: the digest of the file's bytes and of
/// its row's columns.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Clean {
    /// Sorted by name, each name once: found by halving, compared and written as it is (a map
    /// hashed every name of 10,000 three times a rebuild, and was sorted to be written).
    files: Vec<(String, (Digest, Digest))>,
}

/// `files` sorted by name, each name once (the last entry of a name kept).
fn sorted(mut files: Vec<(String, (Digest, Digest))>) -> Vec<(String, (Digest, Digest))> {
    if !files.is_sorted_by(|a, b| a.0 < b.0) {
        files.reverse();
        files.sort_by(|a, b| a.0.cmp(&b.0));
        files.dedup_by(|a, b| a.0 == b.0);
    }
    files
}

/// The digest of a file's bytes.
pub fn bytes_digest(file: &SourceFile) -> Digest {
    Sha256::digest(&file.bytes).into()
}

impl Clean {
    /// The list a site holds: empty when it has none or it does not read (each line that does
    /// not read is left out).
    pub fn read(site: &Path) -> Clean {
        let Ok(text) = std::fs::read_to_string(site.join(FILE)) else {
            return Clean::default();
        };
        let hex32 = |s: &str| hex::decode_to_array::<_, 32>(s).ok();
        let files = text
            .lines()
            .filter_map(|line| {
                let mut parts = line.splitn(3, ' ');
                let (bytes, row, name) = (parts.next()?, parts.next()?, parts.next()?);
                Some((name.to_string(), (hex32(bytes)?, hex32(row)?)))
            })
            .collect();
        Clean {
            files: sorted(files),
        }
    }

    /// The entry of the file `name`.
    fn get(&self, name: &str) -> Option<&(Digest, Digest)> {
        let at = self
            .files
            .binary_search_by(|(n, _)| n.as_str().cmp(name))
            .ok()?;
        Some(&self.files[at].1)
    }

    /// Write the list into `site`, replacing the one there whole.
    pub fn write(&self, site: &Path) -> Result<()> {
        let mut text = String::with_capacity(self.files.len() * 160);
        for (name, (bytes, row)) in &self.files {
            let _ = writeln!(text, "{} {} {name}", hex::encode(bytes), hex::encode(row));
        }
        super::incremental::replace(&site.join(FILE), text.as_bytes())
    }

    /// The clean files of `checked`, the gate's verdict on `files` (`digests[i]` is the digest
    /// of `files[i]`): a file is clean when it made a row and no diagnostic names it. The
    /// entries of `kept` (files the gate took as checked) carry over as they are.
    pub fn of(files: &[SourceFile], digests: &[Digest], checked: &Checked, kept: &Clean) -> Clean {
        let named: HashSet<&Path> = checked.diags.iter().map(|d| d.path.as_path()).collect();
        let rows: HashMap<&Path, &Row> =
            checked.rows.iter().map(|r| (r.path.as_path(), r)).collect();
        let files = files
            .iter()
            .zip(digests)
            .filter(|(f, _)| !named.contains(f.path.as_path()))
            .filter_map(|(f, digest)| {
                let name = f.file_name();
                if let Some(entry) = kept.get(name).filter(|(b, _)| b == digest) {
                    return Some((name.to_string(), *entry));
                }
                let row = rows.get(f.path.as_path())?;
                Some((name.to_string(), (*digest, snapshot::column_digest(row))))
            })
            .collect();
        Clean {
            files: sorted(files),
        }
    }

    /// The row the gate made of `file` before, when this list has the file with these bytes
    /// (`digest`) and `row` (the snapshot's row of the file) is the row it recorded: a copy of
    /// `row` that knows where its fields sit in the file.
    pub fn reuse(&self, file: &SourceFile, digest: &Digest, row: Option<&Row>) -> Option<Row> {
        let (bytes, columns) = self.get(file.file_name())?;
        let row = row?;
        if bytes != digest || row.path != file.path || snapshot::column_digest(row) != *columns {
            return None;
        }
        let text = std::str::from_utf8(&file.bytes).ok()?;
        Some(Row {
            spans: crate::row::Spans::of(text),
            ..row.clone()
        })
    }

    /// The entries of the files `names`.
    pub fn only(&self, names: &[String]) -> Clean {
        let files = names
            .iter()
            .filter_map(|n| Some((n.clone(), *self.get(n)?)))
            .collect();
        Clean {
            files: sorted(files),
        }
    }

    pub fn len(&self) -> usize {
        self.files.len()
    }

    pub fn is_empty(&self) -> bool {
        self.files.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file(name: &str, text: &str) -> SourceFile {
        SourceFile {
            path: Path::new("catalogue").join(name),
            bytes: text.as_bytes().to_vec(),
        }
    }

    const ROW: &str = "key: ECHO_ME\ntype: fn\ntarget: echo\ncategory: text\ncontent: |\n  # WHAT: Echo.\n  # WHEN_TO_USE: Tests.\n  # ARGS: $1=text\n  # EX: hi\n  # OUTPUT: text\n  [\"$1\"]\n";

    /// A clean file's row comes back only for the same bytes and the same row; a file with a
    /// diagnostic is never listed; the list survives its file.
    #[test]
    fn a_file_is_taken_as_checked_only_with_its_bytes_and_its_row() {
        let files = vec![
            file("ECHO_ME.yaml", ROW),
            file("BAD.yaml", "key: BAD\ntype: nonsense\n"),
        ];
        let checked = crate::check::check_files(&files);
        assert!(checked.diags.iter().any(|d| d.path.ends_with("BAD.yaml")));
        let digests: Vec<Digest> = files.iter().map(bytes_digest).collect();
        let clean = Clean::of(&files, &digests, &checked, &Clean::default());
        assert_eq!(clean.len(), 1, "only the clean file: {clean:?}");

        let row = checked.rows.iter().find(|r| r.key == "ECHO_ME").unwrap();
        let again = clean
            .reuse(&files[0], &digests[0], Some(row))
            .expect("reused");
        assert!(snapshot::same_columns(&again, row));
        assert_eq!(again.spans, row.spans, "it knows where its fields are");

        // Other bytes under the same name: checked again.
        let edited = file("ECHO_ME.yaml", &ROW.replace("Echo.", "Echo it."));
        assert!(
            clean
                .reuse(&edited, &bytes_digest(&edited), Some(row))
                .is_none()
        );
        // The same bytes, but the snapshot holds another row for the file.
        let mut other = row.clone();
        other.category = "elsewhere".into();
        assert!(clean.reuse(&files[0], &digests[0], Some(&other)).is_none());
        assert!(clean.reuse(&files[0], &digests[0], None).is_none());
        // Never listed: the file with a problem.
        assert!(clean.reuse(&files[1], &digests[1], Some(row)).is_none());

        let dir = tempfile::tempdir().unwrap();
        clean.write(dir.path()).unwrap();
        assert_eq!(Clean::read(dir.path()), clean);
        std::fs::write(dir.path().join(FILE), "not hex at all\n").unwrap();
        assert!(Clean::read(dir.path()).is_empty());
    }

    /// A list read in any order, with a name twice, finds every name and keeps the last entry
    /// of a name (as the map it replaced did); the entries of names asked for in any order
    /// are one list, equal to the same entries asked for in order.
    #[test]
    fn a_list_in_any_order_finds_every_name() {
        let hex = |b: u8| hex::encode([b; 32]);
        let names: Vec<String> = (0..50)
            .map(|i| format!("R{:03}.yaml", (i * 37) % 50))
            .collect();
        let mut text = String::new();
        for (i, name) in names.iter().enumerate() {
            text.push_str(&format!("{} {} {name}\n", hex(i as u8), hex(1)));
        }
        text.push_str(&format!("{} {} R007.yaml\n", hex(200), hex(2)));
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join(FILE), &text).unwrap();
        let clean = Clean::read(dir.path());
        assert_eq!(clean.len(), 50);
        for (i, name) in names.iter().enumerate() {
            let want = if name == "R007.yaml" {
                ([200; 32], [2; 32])
            } else {
                ([i as u8; 32], [1; 32])
            };
            assert_eq!(clean.get(name), Some(&want), "{name}");
        }
        assert_eq!(clean.get("R050.yaml"), None);
        let mut sorted_names = names.clone();
        sorted_names.sort();
        assert_eq!(clean.only(&names), clean.only(&sorted_names));
        assert_eq!(clean.only(&names), clean);
        clean.write(dir.path()).unwrap();
        assert_eq!(Clean::read(dir.path()), clean);
    }
}
