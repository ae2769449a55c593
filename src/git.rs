//! Git access with gix: the catalogue as it was at a revision (for `check --base`) and, for
//! `build`, the history of every row file read in one walk.

use crate::catalogue::{SourceFile, is_row_file};
use anyhow::{Context as _, Result, anyhow};
use std::path::{Path, PathBuf};

/// The repository holding `dir`, and `dir`'s path relative to its work tree.
pub fn locate(dir: &Path) -> Result<(gix::Repository, PathBuf)> {
    let repo = gix::discover(dir)
        .with_context(|| format!("{} is not inside a Git repository", dir.display()))?;
    let workdir = repo
        .workdir()
        .ok_or_else(|| anyhow!("the repository holding {} has no work tree", dir.display()))?
        .canonicalize()?;
    let abs = dir.canonicalize()?;
    let rel = abs
        .strip_prefix(&workdir)
        .with_context(|| {
            format!(
                "{} is outside the work tree {}",
                abs.display(),
                workdir.display()
            )
        })?
        .to_path_buf();
    Ok((repo, rel))
}

/// The row files of catalogue directory `dir` as they were at revision `rev`, with the same
/// display paths as [`crate::catalogue::read_dir`] gives for the working tree.
pub fn read_dir_at(dir: &Path, rev: &str) -> Result<Vec<SourceFile>> {
    let (repo, rel) = locate(dir)?;
    let id = repo
        .rev_parse_single(rev)
        .map_err(|e| anyhow!("cannot resolve revision `{rev}`: {e}"))?;
    let tree = id.object()?.peel_to_tree()?;
    let sub = if rel.as_os_str().is_empty() {
        tree
    } else {
        match tree.lookup_entry_by_path(&rel)? {
            Some(entry) => entry.object()?.peel_to_tree()?,
            // The catalogue did not exist at the base: every row is new.
            None => return Ok(Vec::new()),
        }
    };
    let mut files = Vec::new();
    for entry in sub.decode()?.entries {
        let name = entry.filename.to_string();
        if !entry.mode.is_blob() || !is_row_file(&name) {
            continue;
        }
        let blob = repo.find_object(entry.oid)?;
        files.push(SourceFile {
            path: dir.join(&name),
            bytes: blob.data.clone(),
        });
    }
    files.sort_by(|a, b| a.path.cmp(&b.path));
    Ok(files)
}
