//! Git access with gix: the repository holding a catalogue, the catalogue as it was at a
//! revision (for `check --base`), and the web address of its origin (for commit links). The
//! history of the row files is `history/`'s own pack walk.

use crate::row::catalogue::{SourceFile, is_row_file};
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
/// display paths as [`crate::row::catalogue::read_dir`] gives for the working tree.
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

/// The web address of the repository holding `dir`, from its `origin` remote, when that is a
/// hosted repository (`https://…`, `git@host:owner/name.git`, `ssh://…`). Credentials in the
/// remote URL are dropped: the address ends up on public pages.
pub fn origin_web_url(dir: &Path) -> Option<String> {
    let (repo, _) = locate(dir).ok()?;
    let url = repo
        .config_snapshot()
        .string("remote.origin.url")?
        .to_string();
    web_url(&url)
}

/// A remote URL as the address a browser opens: `git@github.com:o/r.git` and
/// `ssh://git@github.com/o/r.git` become `https://github.com/o/r`; user info, a trailing
/// `.git` and `/` go. Local paths and `file://` give `None`.
pub fn web_url(remote: &str) -> Option<String> {
    let remote = remote.trim();
    // (scheme of the web address, the rest, whether the port is an ssh port to drop)
    let (scheme, rest, ssh) = if let Some(rest) = remote.strip_prefix("https://") {
        ("https", rest, false)
    } else if let Some(rest) = remote.strip_prefix("http://") {
        ("http", rest, false)
    } else if let Some(rest) = remote
        .strip_prefix("ssh://")
        .or_else(|| remote.strip_prefix("git+ssh://"))
        .or_else(|| remote.strip_prefix("git://"))
    {
        ("https", rest, true)
    } else if let Some((host, path)) = remote.split_once(':')
        && !host.contains('/')
        && !path.starts_with("//")
        && host.contains('@')
    {
        // scp-like `user@host:owner/name.git`
        return join("https", host, path, true);
    } else {
        return None;
    };
    let (authority, path) = rest.split_once('/').unwrap_or((rest, ""));
    join(scheme, authority, path, ssh)
}

fn join(scheme: &str, authority: &str, path: &str, ssh: bool) -> Option<String> {
    // Drop user info (`user:token@`) and, for ssh remotes, the ssh port.
    let host = authority.rsplit_once('@').map_or(authority, |(_, h)| h);
    let host = if ssh {
        host.split(':').next().unwrap_or(host)
    } else {
        host
    };
    let path = path.trim_matches('/');
    let path = path
        .strip_suffix(".git")
        .unwrap_or(path)
        .trim_end_matches('/');
    let path_ok = !path.is_empty()
        && path
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "-._~/".contains(c));
    let host_ok = !host.is_empty()
        && host
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "-.:".contains(c));
    (path_ok && host_ok).then(|| format!("{scheme}://{host}/{path}"))
}

#[cfg(test)]
mod tests {
    use super::web_url;

    #[test]
    fn remote_urls_become_web_addresses() {
        let cases = [
            ("https://github.com/o/r.git", Some("https://github.com/o/r")),
            ("https://github.com/o/r/", Some("https://github.com/o/r")),
            (
                "https://x-access-token:ghs_secret@github.com/o/r.git",
                Some("https://github.com/o/r"),
            ),
            ("git@github.com:o/r.git", Some("https://github.com/o/r")),
            (
                "ssh://git@gitlab.example.com:2222/group/sub/r.git",
                Some("https://gitlab.example.com/group/sub/r"),
            ),
            (
                "http://127.0.0.1:3000/o/r",
                Some("http://127.0.0.1:3000/o/r"),
            ),
            (
                "https://git.example.com:8443/o/r",
                Some("https://git.example.com:8443/o/r"),
            ),
            ("/srv/git/r.git", None),
            ("file:///srv/git/r.git", None),
            ("../r", None),
            ("https://github.com", None),
            ("https://github.com/o/r\"><script>", None),
        ];
        for (remote, want) in cases {
            assert_eq!(web_url(remote).as_deref(), want, "{remote}");
        }
    }
}
