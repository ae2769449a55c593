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
    let (files, _) = read_dir_except(dir, |_, _| false)?;
    Ok(files.into_iter().map(|(f, _)| f).collect())
}

/// [`read_dir`], but for the files `leave` says to leave unread (given each one's name and
/// directory entry): the files read, each with the metadata of the file as opened, and the
/// paths of those left, both sorted by name.
pub fn read_dir_except(
    dir: &Path,
    leave: impl Fn(&str, &std::fs::DirEntry) -> bool,
) -> io::Result<(Vec<Opened>, Vec<PathBuf>)> {
    let (mut files, mut left) = (Vec::new(), Vec::new());
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        let name = entry.file_name();
        let Some(name) = name.to_str() else { continue };
        if !is_row_file(name) || !entry.file_type()?.is_file() {
            continue;
        }
        if leave(name, &entry) {
            left.push(dir.join(name));
            continue;
        }
        files.push(read_file(dir.join(name))?);
    }
    files.sort_by(|a, b| a.0.path.cmp(&b.0.path));
    left.sort();
    Ok((files, left))
}

/// A row file as read, with the metadata of the file as opened.
pub type Opened = (SourceFile, std::fs::Metadata);

/// The row file at `path`, with the metadata of the file as opened.
pub fn read_file(path: PathBuf) -> io::Result<Opened> {
    // Opened once, its size from the open file, and read up to that size, as Git reads a
    // file it has the size of: a rebuild reads every row file, and `metadata` with `fs::read`
    // cost two syscalls more each (one to learn the size again, one to see the end). A file
    // that grows while it is read is read as it was when opened.
    let file = std::fs::File::open(&path)?;
    let meta = file.metadata()?;
    let size = meta.len();
    let bytes = if size > READ_CAP {
        vec![0; (crate::row::MAX_ROW_BYTES + 1).min(READ_CAP as usize)]
    } else {
        let mut bytes = Vec::with_capacity(size as usize);
        io::Read::read_to_end(&mut io::Read::take(&file, size), &mut bytes)?;
        bytes
    };
    Ok((SourceFile { path, bytes }, meta))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Each row file is read whole whatever its size: empty, under and over the sizes a read
    /// probes with, and over one page. Hidden and other files are left out, and the list is
    /// sorted by name.
    #[test]
    fn every_row_file_is_read_whole() {
        let dir = tempfile::tempdir().expect("temp dir");
        let sizes = [0usize, 1, 31, 32, 33, 4095, 4096, 8193, 100_000];
        for (i, size) in sizes.iter().enumerate() {
            let bytes: Vec<u8> = (0..*size).map(|b| b"key: x\n"[b % 7]).collect();
            std::fs::write(dir.path().join(format!("r{i:02}.yaml")), bytes).expect("write");
        }
        std::fs::write(dir.path().join(".hidden.yaml"), "x").expect("write");
        std::fs::write(dir.path().join("notes.md"), "x").expect("write");
        let files = read_dir(dir.path()).expect("read");
        let got: Vec<(String, usize)> = files
            .iter()
            .map(|f| (f.file_name().to_string(), f.bytes.len()))
            .collect();
        let want: Vec<(String, usize)> = sizes
            .iter()
            .enumerate()
            .map(|(i, s)| (format!("r{i:02}.yaml"), *s))
            .collect();
        assert_eq!(got, want);
        for f in &files {
            assert_eq!(f.bytes, std::fs::read(&f.path).expect("read back"));
        }
    }
}
