//! `build.json`: what a build holds, file by file (path, size, SHA-256), with the commit it
//! was built from and the capdir that built it. A dispatcher that follows a site published
//! on a static host (`capdir serve --follow URL`) reads it to fetch only what changed and to
//! refuse any file whose bytes are not the ones the build wrote.
//!
//! Hashing every file of a large site costs time, so a rebuild reuses the digest of every
//! file it hard-linked from the previous site (same inode as the file the previous manifest
//! describes).

use anyhow::{Context as _, Result, bail};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use std::collections::HashMap;
use std::path::{Path, PathBuf};

/// The manifest's file name at the root of the site.
pub const FILE: &str = "build.json";

/// The signature of a signed build's manifest, beside it (`capdir build --sign`): a signed
/// note over the manifest's SHA-256. Like the manifest, in no manifest.
pub const SIG_FILE: &str = "build.json.sig";

/// The manifest format this capdir writes and reads.
pub const FORMAT: u32 = 1;

/// The most bytes a manifest may have (a 100,000-row site's is about 15 MB).
pub const MAX_BYTES: usize = 64 * 1024 * 1024;

/// The largest file a manifest may name: a follower holds one file in memory while it checks
/// it, so a manifest that promises more is refused before anything is fetched.
pub const MAX_FILE_BYTES: u64 = 512 * 1024 * 1024;

/// What one build holds.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Manifest {
    pub format: u32,
    /// The catalogue commit the site was built from (empty outside Git).
    pub commit: String,
    /// The capdir version that built it.
    pub capdir: String,
    /// Every file of the site but the manifest and the build's own caches, by path.
    pub files: Vec<Entry>,
    /// Set when the build is signed: a number that only grows from one published build to
    /// the next (the catalogue's commit count), so a follower refuses an older build
    /// (rollback).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub number: Option<u64>,
    /// Set when the build is signed (RFC 3339): past it a follower that checks signatures
    /// refuses the build, so a host that keeps serving a stale one (freeze) is noticed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expires: Option<String>,
    /// The keys a follower trusts from this build on (a rotation: a build signed by the old
    /// key names the new one). Empty: the keys it trusts stay.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub keys: Vec<String>,
}

/// One file of a build.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Entry {
    /// Relative to the site's root, `/`-separated.
    pub path: String,
    pub size: u64,
    pub sha256: String,
}

/// A path a manifest may name: relative, `/`-separated, no `.` or `..` parts, no hidden
/// files, only characters a site's files use. Anything else is refused before it reaches the
/// file system.
pub fn is_safe_path(path: &str) -> bool {
    !path.is_empty()
        && path.len() <= 512
        && path.split('/').all(|part| {
            !part.is_empty()
                && !part.starts_with('.')
                && part
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(&b))
        })
}

impl Manifest {
    /// Read and check a manifest: the format, and every path safe and named once.
    pub fn parse(bytes: &[u8]) -> Result<Manifest> {
        if bytes.len() > MAX_BYTES {
            bail!("the manifest is over {MAX_BYTES} bytes");
        }
        let manifest: Manifest =
            serde_json::from_slice(bytes).context("the manifest is not a build manifest")?;
        if manifest.format != FORMAT {
            bail!(
                "manifest format {} is not the one this capdir reads ({FORMAT}); upgrade capdir",
                manifest.format
            );
        }
        // A manifest capdir wrote lists its files sorted, and paths in strictly rising order
        // are named once each; only another writer's order needs a set to tell.
        let sorted = manifest.files.windows(2).all(|w| w[0].path < w[1].path);
        let mut seen = std::collections::HashSet::new();
        for e in &manifest.files {
            if !is_safe_path(&e.path) {
                bail!("the manifest names an unsafe path: {:?}", e.path);
            }
            if !sorted && !seen.insert(e.path.as_str()) {
                bail!("the manifest names {} twice", e.path);
            }
            if e.size > MAX_FILE_BYTES {
                bail!(
                    "the manifest says {} has {} bytes, more than a follower takes ({MAX_FILE_BYTES})",
                    e.path,
                    e.size
                );
            }
            if e.sha256.len() != 64 || !e.sha256.bytes().all(|b| b.is_ascii_hexdigit()) {
                bail!("the manifest's digest of {} is not a SHA-256", e.path);
            }
        }
        Ok(manifest)
    }

    /// Read the manifest of a site on disk, if it has one that reads.
    pub fn read(site: &Path) -> Option<Manifest> {
        Manifest::parse(&std::fs::read(site.join(FILE)).ok()?).ok()
    }

    /// The files by path.
    pub fn by_path(&self) -> HashMap<&str, &Entry> {
        self.files.iter().map(|e| (e.path.as_str(), e)).collect()
    }
}

/// The hex SHA-256 of a file's bytes.
pub fn sha256_file(path: &Path) -> Result<(u64, String)> {
    use std::io::Read as _;
    let mut file =
        std::fs::File::open(path).with_context(|| format!("reading {}", path.display()))?;
    let mut hasher = Sha256::new();
    let mut buf = vec![0u8; 64 * 1024];
    let mut size = 0u64;
    loop {
        let n = file.read(&mut buf)?;
        if n == 0 {
            break;
        }
        size += n as u64;
        hasher.update(&buf[..n]);
    }
    Ok((size, hex::encode(hasher.finalize())))
}

/// Every file under `root` as (relative path, full path), hidden ones and the manifest
/// left out, sorted by path.
fn site_files(root: &Path) -> Result<Vec<(String, PathBuf)>> {
    let mut out = Vec::new();
    let mut dirs = vec![root.to_path_buf()];
    while let Some(dir) = dirs.pop() {
        for entry in
            std::fs::read_dir(&dir).with_context(|| format!("listing {}", dir.display()))?
        {
            let entry = entry?;
            let name = entry.file_name();
            let Some(name) = name.to_str() else { continue };
            if name.starts_with('.') {
                continue;
            }
            let path = entry.path();
            if entry.file_type()?.is_dir() {
                dirs.push(path);
                continue;
            }
            let rel = path
                .strip_prefix(root)
                .map(|p| p.to_string_lossy().replace('\\', "/"))
                .unwrap_or_default();
            if rel != FILE && rel != SIG_FILE {
                out.push((rel, path));
            }
        }
    }
    out.sort();
    Ok(out)
}

#[cfg(unix)]
fn inode(path: &Path) -> Option<(u64, u64)> {
    use std::os::unix::fs::MetadataExt;
    let m = std::fs::metadata(path).ok()?;
    Some((m.dev(), m.ino()))
}

#[cfg(not(unix))]
fn inode(_: &Path) -> Option<(u64, u64)> {
    None
}

/// Describe the site being built in `dir` and write its manifest there. Files the build
/// hard-linked from `previous` (the site it replaces) keep the digest that site's manifest
/// gave them, files in `hashed` the entry the build made from the bytes it wrote; the rest are
/// hashed on all cores.
pub fn write(
    dir: &Path,
    commit: &str,
    previous: Option<&Path>,
    hashed: &[Entry],
) -> Result<Manifest> {
    let files = site_files(dir)?;
    let hashed: HashMap<&str, &Entry> = hashed.iter().map(|e| (e.path.as_str(), e)).collect();
    let before = previous.and_then(Manifest::read);
    let known = before.as_ref().map(Manifest::by_path).unwrap_or_default();
    let reuse = |rel: &str, path: &Path| -> Option<Entry> {
        let e = known.get(rel)?;
        let old = previous?.join(rel);
        (inode(path).is_some() && inode(path) == inode(&old)).then(|| (*e).clone())
    };
    let entries = on_all_cores(&files, |(rel, path)| match reuse(rel, path) {
        Some(e) => Ok(e),
        None if hashed.contains_key(rel.as_str()) => Ok(hashed[rel.as_str()].clone()),
        None => sha256_file(path).map(|(size, sha256)| Entry {
            path: rel.clone(),
            size,
            sha256,
        }),
    })?;
    let manifest = Manifest {
        format: FORMAT,
        commit: commit.to_string(),
        capdir: env!("CARGO_PKG_VERSION").to_string(),
        files: entries,
        number: None,
        expires: None,
        keys: Vec::new(),
    };
    std::fs::write(dir.join(FILE), bytes(&manifest)?)
        .with_context(|| format!("writing {}", dir.join(FILE).display()))?;
    unsigned(dir)?;
    Ok(manifest)
}

/// The manifest as written: its JSON and a newline, into a buffer with room for the whole at
/// once (an entry is about 130 bytes; grown by doubling, the 4 MB manifest of a 10,000-row
/// site was copied a dozen times).
fn bytes(manifest: &Manifest) -> Result<Vec<u8>> {
    let mut text = Vec::with_capacity(manifest.files.len() * 160 + 256);
    serde_json::to_writer(&mut text, manifest)?;
    text.push(b'\n');
    Ok(text)
}

/// `f` of every item, in order, the items split across one thread per core.
fn on_all_cores<T: Sync, R: Send>(
    items: &[T],
    f: impl Fn(&T) -> Result<R> + Sync,
) -> Result<Vec<R>> {
    use std::sync::atomic::{AtomicUsize, Ordering};
    // Each thread takes the next item when it is done with its last, rather than a fixed
    // share of the list: a rebuild hashes a few files of megabytes among many small ones,
    // and equal counts left one core with most of the bytes.
    let next = AtomicUsize::new(0);
    let threads = crate::cores().clamp(1, items.len().max(1));
    let (f, next) = (&f, &next);
    std::thread::scope(|s| {
        let handles: Vec<_> = (0..threads)
            .map(|_| {
                s.spawn(move || {
                    let mut done = Vec::new();
                    loop {
                        let i = next.fetch_add(1, Ordering::Relaxed);
                        let Some(item) = items.get(i) else { break };
                        done.push((i, f(item)?));
                    }
                    Ok::<_, anyhow::Error>(done)
                })
            })
            .collect();
        let mut out = Vec::with_capacity(items.len());
        for h in handles {
            out.extend(
                h.join()
                    .unwrap_or_else(|_| Err(anyhow::anyhow!("a hashing thread panicked")))?,
            );
        }
        // Back in the items' order: each result was taken with its item's place.
        out.sort_unstable_by_key(|(i, _)| *i);
        Ok(out.into_iter().map(|(_, r)| r).collect())
    })
}

/// The manifest of a site changed in place (an incremental rebuild): the previous one with
/// the files at `touched` (paths relative to the site) hashed again, or dropped when gone,
/// for `commit`; replaced whole. Without a previous manifest, every file is hashed.
pub fn update(
    site: &Path,
    commit: &str,
    touched: &std::collections::BTreeSet<String>,
) -> Result<Manifest> {
    update_from(site, commit, touched, Manifest::read(site))
}

/// [`update`] from the manifest `before` (read already by the caller: at 30,000 files it
/// takes tens of milliseconds to parse).
pub fn update_from(
    site: &Path,
    commit: &str,
    touched: &std::collections::BTreeSet<String>,
    before: Option<Manifest>,
) -> Result<Manifest> {
    let hashed = hash(site, touched)?;
    update_with(site, commit, hashed, before)
}

/// The entry of each of `touched` (files of `site`), or `None` for one that is not there.
pub fn hash(
    site: &Path,
    touched: &std::collections::BTreeSet<String>,
) -> Result<Vec<(String, Option<Entry>)>> {
    let touched: Vec<&String> = touched
        .iter()
        .filter(|r| is_safe_path(r) && *r != FILE && *r != SIG_FILE)
        .collect();
    // Hashed on all cores: the files that list every row are megabytes each.
    on_all_cores(&touched, |rel| {
        let path = site.join(rel);
        if !path.is_file() {
            return Ok(((*rel).clone(), None));
        }
        let (size, sha256) = sha256_file(&path)?;
        let entry = Entry {
            path: (*rel).clone(),
            size,
            sha256,
        };
        Ok(((*rel).clone(), Some(entry)))
    })
}

/// The manifest `before` with the entries of `hashed` ([`hash`]) in place of its own, or
/// without the files they say are gone, written into `site` (a manifest of every file of
/// `site` when there was none before).
pub fn update_with(
    site: &Path,
    commit: &str,
    hashed: Vec<(String, Option<Entry>)>,
    before: Option<Manifest>,
) -> Result<Manifest> {
    let Some(before) = before else {
        return write(site, commit, None, &[]);
    };
    let mut files: std::collections::BTreeMap<String, Entry> = before
        .files
        .into_iter()
        .map(|e| (e.path.clone(), e))
        .collect();
    for (rel, entry) in hashed {
        match entry {
            Some(e) => files.insert(rel, e),
            None => files.remove(&rel),
        };
    }
    let manifest = Manifest {
        format: FORMAT,
        commit: commit.to_string(),
        capdir: env!("CARGO_PKG_VERSION").to_string(),
        files: files.into_values().collect(),
        number: None,
        expires: None,
        keys: Vec::new(),
    };
    crate::atomic::write(&site.join(FILE), &bytes(&manifest)?)?;
    unsigned(site)?;
    Ok(manifest)
}

/// A manifest written anew is not the one any signature beside it signed: the signature goes
/// (`capdir build --sign` signs the new one).
fn unsigned(site: &Path) -> Result<()> {
    match std::fs::remove_file(site.join(SIG_FILE)) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
            Err(e).with_context(|| format!("removing {}", site.join(SIG_FILE).display()))
        }
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        /// Whatever a host serves as `build.json`, reading it answers without panicking, and
        /// what it accepts names only safe paths.
        #[test]
        fn any_bytes_parse_or_are_refused(bytes in proptest::collection::vec(any::<u8>(), 0..512)) {
            if let Ok(m) = Manifest::parse(&bytes) {
                prop_assert!(m.files.iter().all(|e| is_safe_path(&e.path)));
            }
        }

        /// A path judged safe stays below the site's root whatever it holds.
        #[test]
        fn a_safe_path_stays_below_the_root(path in "[a-z./\\\\%-]{0,40}") {
            if is_safe_path(&path) {
                let joined = Path::new("/site").join(&path);
                prop_assert!(joined.starts_with("/site") && joined != Path::new("/site"));
                prop_assert!(joined.components().all(|c| matches!(
                    c,
                    std::path::Component::RootDir | std::path::Component::Normal(_)
                )));
                prop_assert!(!path.contains('\\') && !path.split('/').any(|p| p.starts_with('.')));
            }
        }
    }

    /// Results come back in the items' order however unevenly the work falls on the threads,
    /// and an item's error is the call's.
    #[test]
    fn on_all_cores_keeps_the_items_order_and_their_errors() {
        let items: Vec<u64> = (0..200).collect();
        let slow_first = |x: &u64| {
            if *x < 3 {
                std::thread::sleep(std::time::Duration::from_millis(20));
            }
            Ok(x * 2)
        };
        let got = on_all_cores(&items, slow_first).expect("no item fails");
        assert_eq!(got, items.iter().map(|x| x * 2).collect::<Vec<_>>());
        let failing = on_all_cores(&items, |x| {
            if *x == 150 {
                anyhow::bail!("item 150")
            }
            Ok(*x)
        });
        assert_eq!(failing.unwrap_err().to_string(), "item 150");
        assert!(
            on_all_cores(&[] as &[u64], slow_first)
                .expect("none")
                .is_empty()
        );
    }

    /// A follower acts on each entry: a path named twice, in whatever order the entries come,
    /// is refused, and the same paths named once each read in either order.
    #[test]
    fn a_path_named_twice_is_refused_in_any_order() {
        let sha = "0".repeat(64);
        let manifest = |paths: &[&str]| {
            let files: Vec<String> = paths
                .iter()
                .map(|p| format!(r#"{{"path":"{p}","size":1,"sha256":"{sha}"}}"#))
                .collect();
            format!(
                r#"{{"format":{FORMAT},"commit":"c","capdir":"0","files":[{}]}}"#,
                files.join(",")
            )
        };
        for twice in [&["a.html", "a.html"][..], &["a.html", "b.html", "a.html"]] {
            let err = Manifest::parse(manifest(twice).as_bytes()).unwrap_err();
            assert!(err.to_string().contains("names a.html twice"), "{err}");
        }
        for once in [&["a.html", "b.html"][..], &["b.html", "a.html"]] {
            let m = Manifest::parse(manifest(once).as_bytes()).expect("read");
            assert_eq!(m.files.len(), 2);
        }
    }

    #[test]
    fn unsafe_paths_are_refused() {
        for good in [
            "index.html",
            "k/SHA256.md",
            "index/abc-1.idx",
            "c/text-tools.html",
        ] {
            assert!(is_safe_path(good), "{good}");
        }
        for bad in [
            "",
            "/etc/passwd",
            "../x",
            "k/../../x",
            "k//x",
            ".history.json",
            "k/.hidden",
            "a\\b",
            "a b",
            "k/%2e%2e",
        ] {
            assert!(!is_safe_path(bad), "{bad}");
        }
    }

    #[test]
    fn a_manifest_with_a_bad_entry_is_refused() {
        let ok = r#"{"format":1,"commit":"c","capdir":"0","files":[{"path":"a.html","size":1,"sha256":"0000000000000000000000000000000000000000000000000000000000000000"}]}"#;
        assert!(Manifest::parse(ok.as_bytes()).is_ok());
        for bad in [
            ok.replace("a.html", "../a.html"),
            ok.replace("\"format\":1", "\"format\":2"),
            ok.replace("\"sha256\":\"0000", "\"sha256\":\"zz00"),
            ok.replace("]}", r#",{"path":"a.html","size":1,"sha256":"0000000000000000000000000000000000000000000000000000000000000000"}]}"#),
            ok.replace("\"commit\"", "\"extra\":1,\"commit\""),
            ok.replace("\"size\":1", "\"size\":99999999999"),
            "not json".to_string(),
        ] {
            assert!(Manifest::parse(bad.as_bytes()).is_err(), "{bad}");
        }
    }
}
