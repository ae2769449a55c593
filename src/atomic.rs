//! Replacing a file or a directory whole, so a reader (or a crash) sees the old one or the new
//! one, never part of either. The one place capdir writes a file in place; it imports nothing
//! of capdir.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

/// Put `bytes` at `path`: written to a temporary file beside it and synced, renamed over
/// `path`, then the directory synced so the rename itself outlives a crash. On an error the
/// temporary file is removed and `path` is as it was; the error names the file and keeps its
/// kind (a full disk stays `StorageFull`).
pub fn write(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let tmp = beside(path, "tmp")?;
    let written = write_synced(&tmp, bytes).and_then(|()| std::fs::rename(&tmp, path));
    if let Err(e) = written {
        let _ = std::fs::remove_file(&tmp);
        return Err(naming(path, e));
    }
    sync_dir(parent_of(path)).map_err(|e| naming(path, e))
}

/// A fresh, empty directory beside `out`, on the same file system so that
/// [`swap_dir`] can put it in `out`'s place in one rename.
pub fn dir_beside(out: &Path) -> std::io::Result<PathBuf> {
    let parent = parent_of(out);
    std::fs::create_dir_all(parent).map_err(|e| naming(parent, e))?;
    let name = out.file_name().and_then(|n| n.to_str()).unwrap_or("site");
    let tmp = parent.join(format!(".{name}.build-{}", std::process::id()));
    if tmp.exists() {
        std::fs::remove_dir_all(&tmp).map_err(|e| naming(&tmp, e))?;
    }
    std::fs::create_dir(&tmp).map_err(|e| naming(&tmp, e))?;
    Ok(tmp)
}

/// Put the directory `new` at `out` in one step: an atomic exchange of the two where the
/// kernel offers it (Linux `renameat2`), else two renames; the previous `out` is removed.
pub fn swap_dir(new: &Path, out: &Path) -> std::io::Result<()> {
    if !out.exists() {
        return std::fs::rename(new, out).map_err(|e| naming(out, e));
    }
    if exchange(new, out).is_err() {
        let old = new.with_extension("old");
        std::fs::rename(out, &old).map_err(|e| naming(out, e))?;
        std::fs::rename(new, out).map_err(|e| naming(out, e))?;
        return std::fs::remove_dir_all(&old).map_err(|e| naming(&old, e));
    }
    // `new` now holds the previous directory.
    std::fs::remove_dir_all(new).map_err(|e| naming(new, e))
}

/// A name beside `path` that no other writer of this process or another uses at once: the
/// process id and a counter, hidden by a leading dot.
fn beside(path: &Path, ext: &str) -> std::io::Result<PathBuf> {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let name = path.file_name().and_then(|n| n.to_str()).ok_or_else(|| {
        std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            format!("{}: not a file name", path.display()),
        )
    })?;
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    Ok(path.with_file_name(format!(".{name}.{}.{n}.{ext}", std::process::id())))
}

fn write_synced(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(path)?;
    file.write_all(bytes)?;
    file.sync_all()
}

/// Sync a directory, so the names renamed into it are kept.
fn sync_dir(dir: &Path) -> std::io::Result<()> {
    std::fs::File::open(dir)?.sync_all()
}

/// The directory `path` is in (`.` for a bare name).
fn parent_of(path: &Path) -> &Path {
    match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    }
}

/// `e`, with the file it was about in its message and its kind kept.
fn naming(path: &Path, e: std::io::Error) -> std::io::Error {
    std::io::Error::new(e.kind(), format!("{}: {e}", path.display()))
}

#[cfg(target_os = "linux")]
fn exchange(a: &Path, b: &Path) -> std::io::Result<()> {
    use std::ffi::CString;
    use std::os::unix::ffi::OsStrExt;
    let a = CString::new(a.as_os_str().as_bytes())?;
    let b = CString::new(b.as_os_str().as_bytes())?;
    // SAFETY: both are valid NUL-terminated paths that outlive the call.
    let rc = unsafe {
        libc::renameat2(
            libc::AT_FDCWD,
            a.as_ptr(),
            libc::AT_FDCWD,
            b.as_ptr(),
            libc::RENAME_EXCHANGE,
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

#[cfg(not(target_os = "linux"))]
fn exchange(_: &Path, _: &Path) -> std::io::Result<()> {
    Err(std::io::Error::other("no atomic exchange on this platform"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_write_replaces_the_file_and_leaves_nothing_beside_it() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("a.json");
        write(&file, b"one").unwrap();
        write(&file, b"two").unwrap();
        assert_eq!(std::fs::read(&file).unwrap(), b"two");
        let names: Vec<_> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names, ["a.json"]);
    }

    #[test]
    fn a_failed_write_names_the_file_and_keeps_the_old_bytes() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("a.json");
        write(&file, b"old").unwrap();
        // A directory where the file should go cannot be renamed over.
        let blocked = dir.path().join("sub");
        std::fs::create_dir_all(blocked.join("x")).unwrap();
        let e = write(&blocked, b"new").unwrap_err();
        assert!(e.to_string().contains("sub"), "{e}");
        assert_eq!(std::fs::read(&file).unwrap(), b"old");
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 2);
    }

    #[test]
    fn a_directory_swapped_in_replaces_the_old_one_whole() {
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("site");
        for text in ["first", "second"] {
            let new = dir_beside(&out).unwrap();
            std::fs::write(new.join("index.html"), text).unwrap();
            swap_dir(&new, &out).unwrap();
            assert!(!new.exists());
        }
        assert_eq!(
            std::fs::read_to_string(out.join("index.html")).unwrap(),
            "second"
        );
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 1);
    }
}
