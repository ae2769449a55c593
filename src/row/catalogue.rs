//! Reading a catalogue: the row files of a directory, from the working tree or from a Git
//! revision, as bytes with the paths diagnostics will name.

use std::io;
use std::path::{Path, PathBuf};

/// One row file as read, before parsing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SourceFile {
    /// The path diagnostics show: the catalogue directory joined with the file name.
    pub path: PathBuf,
    pub bytes: Vec<u8>,
}

impl SourceFile {
    pub fn file_name(&self) -> &str {
        self.path.file_name().and_then(|n| n.to_str()).unwrap_or("")
    }
}

/// Is this a row file name (`*.yaml` or `*.yml`, not hidden)?
pub fn is_row_file(name: &str) -> bool {
    !name.starts_with('.') && (name.ends_with(".yaml") || name.ends_with(".yml"))
}

/// Files larger than this are not read whole: the row parser refuses them anyway.
const READ_CAP: u64 = 64 * 1024 * 1024;

/// Every row file directly in `dir`, sorted by name.
pub fn read_dir(dir: &Path) -> io::Result<Vec<SourceFile>> {
    let mut files = Vec::new();
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        let name = entry.file_name();
        let Some(name) = name.to_str() else { continue };
        if !is_row_file(name) || !entry.file_type()?.is_file() {
            continue;
        }
        let path = dir.join(name);
        // Opened once, its size from the open file (a rebuild reads every row file: one
        // syscall fewer each than `metadata` and `fs::read`).
        let file = std::fs::File::open(&path)?;
        let size = file.metadata()?.len();
        let bytes = if size > READ_CAP {
            vec![0; (crate::row::MAX_ROW_BYTES + 1).min(READ_CAP as usize)]
        } else {
            let mut bytes = Vec::with_capacity(size as usize + 1);
            io::Read::read_to_end(&mut io::Read::take(&file, READ_CAP), &mut bytes)?;
            bytes
        };
        files.push(SourceFile { path, bytes });
    }
    files.sort_by(|a, b| a.path.cmp(&b.path));
    Ok(files)
}
