//! The static site, served from the live site directory.
//!
//! Only regular files under the site root are served. A request path becomes a relative path
//! component by component ([`site_path`], pure): each `/`-separated piece is percent-decoded
//! on its own and must be a plain name (no `.`, `..`, dotfile, separator, NUL, drive, nor a
//! ledger's file). The file it names is then canonicalized and must lie inside the
//! canonicalized site root (a symlink in the site cannot lead out) and be a regular file.
//! Both roots are canonicalized on every request, because a build swaps the site directory.
//! Whatever is refused answers the same 404 as a file that does not exist.

use super::receipt::PAGE_POLICY;
use super::{ApiError, AppState};
use anyhow::bail;
use axum::body::Body;
use axum::extract::State;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use std::io::Read;
use std::path::{Component, Path, PathBuf};

/// File names the site never serves, whatever the directory: a SQLite database and the files
/// beside it (write-ahead log, shared memory, rollback journal). Compared ASCII-case-blind.
const REFUSED_SUFFIXES: &[&str] = &[
    ".sqlite",
    ".sqlite-wal",
    ".sqlite-shm",
    "-wal",
    "-shm",
    "-journal",
];

/// The file a directory request serves.
const INDEX: &str = "index.html";

/// The relative path under the site root a request path (`Uri::path()`, still
/// percent-encoded) names, or `None` when it is refused. `/` and a trailing slash name the
/// directory's `index.html`. Each `/`-separated piece is decoded alone, so an encoded
/// separator (`%2F`, `%5C`) stays inside its piece and is refused there.
pub(crate) fn site_path(request: &str) -> Option<PathBuf> {
    let rel = request.strip_prefix('/').unwrap_or(request);
    let mut path = PathBuf::new();
    if rel.is_empty() {
        path.push(INDEX);
        return Some(path);
    }
    let pieces: Vec<&str> = rel.split('/').collect();
    let last = pieces.len() - 1;
    for (i, raw) in pieces.into_iter().enumerate() {
        if raw.is_empty() {
            // Only a trailing slash may leave a piece empty: `a//b` and `//etc` are refused.
            if i == last {
                path.push(INDEX);
                break;
            }
            return None;
        }
        let decoded = percent_encoding::percent_decode_str(raw)
            .decode_utf8()
            .ok()?;
        if !plain_name(&decoded) {
            return None;
        }
        path.push(decoded.as_ref());
    }
    Some(path)
}

/// A name the site may serve as one component of a path.
fn plain_name(name: &str) -> bool {
    let lower = name.to_ascii_lowercase();
    let drive = {
        let b = name.as_bytes();
        b.len() >= 2 && b[0].is_ascii_alphabetic() && b[1] == b':'
    };
    !name.is_empty()
        && !name.starts_with('.')
        && !name.contains(['/', '\\', '\0'])
        && !drive
        && !REFUSED_SUFFIXES.iter().any(|s| lower.ends_with(s))
        && matches!(
            Path::new(name).components().collect::<Vec<_>>().as_slice(),
            [Component::Normal(n)] if *n == std::ffi::OsStr::new(name)
        )
}

/// The file `rel` names under `root`, read, when it is a regular file inside the
/// canonicalized root (following a directory to its `index.html`); with the name its content
/// type goes by.
fn read_inside(root: &Path, rel: &Path) -> Option<(PathBuf, Vec<u8>)> {
    let root = std::fs::canonicalize(root).ok()?;
    let inside = |p: &Path| -> Option<(PathBuf, std::fs::Metadata)> {
        let canonical = std::fs::canonicalize(p).ok()?;
        // Inside the root, and every name on the way a plain one as the request's must be:
        // a link named `page.html` that resolves to a ledger or a dotfile is not served.
        let rest = canonical.strip_prefix(&root).ok()?;
        if !rest
            .components()
            .all(|c| c.as_os_str().to_str().is_some_and(plain_name))
        {
            return None;
        }
        let meta = std::fs::metadata(&canonical).ok()?;
        Some((canonical, meta))
    };
    let mut name = rel.to_path_buf();
    let (mut canonical, mut meta) = inside(&root.join(rel))?;
    if meta.is_dir() {
        name.push(INDEX);
        (canonical, meta) = inside(&canonical.join(INDEX))?;
    }
    if !meta.is_file() {
        return None;
    }
    let mut options = std::fs::OpenOptions::new();
    options.read(true);
    #[cfg(unix)]
    {
        // The canonical path has no symlink left; should one appear since, or the file be
        // swapped for a fifo, do not follow it and do not wait on it.
        use std::os::unix::fs::OpenOptionsExt;
        options.custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK);
    }
    let mut file = options.open(&canonical).ok()?;
    if !file.metadata().ok()?.is_file() {
        return None;
    }
    let mut bytes = Vec::with_capacity(meta.len().try_into().unwrap_or(0));
    file.read_to_end(&mut bytes).ok()?;
    Some((name, bytes))
}

/// The static site. Hand-written rather than tower-http's `ServeDir`, whose `fs` feature
/// needs crates this build cannot fetch offline; it serves files by path, fresh per request.
pub(super) async fn static_file(State(state): State<AppState>, uri: axum::http::Uri) -> Response {
    let not_found = || {
        ApiError::new(
            StatusCode::NOT_FOUND,
            "not_found",
            format!("nothing at {}", uri.path()),
            "start at / or ask with /api/dispatch?ask=…",
        )
        .into_response()
    };
    let Some(rel) = site_path(uri.path()) else {
        return not_found();
    };
    let root = state.site().to_path_buf();
    let found = tokio::task::spawn_blocking(move || read_inside(&root, &rel))
        .await
        .ok()
        .flatten();
    let Some((path, bytes)) = found else {
        return not_found();
    };
    let content_type = match path.extension().and_then(|e| e.to_str()) {
        Some("html") => "text/html; charset=utf-8",
        Some("json") => "application/json",
        Some("md") => "text/markdown; charset=utf-8",
        Some("css") => "text/css",
        Some("js") => "text/javascript",
        Some("txt") => "text/plain; charset=utf-8",
        Some("xml") => "application/xml",
        Some("svg") => "image/svg+xml",
        _ => "application/octet-stream",
    };
    let mut response = ([(header::CONTENT_TYPE, content_type)], Body::from(bytes)).into_response();
    if content_type.starts_with("text/html") {
        response.headers_mut().insert(
            header::CONTENT_SECURITY_POLICY,
            HeaderValue::from_static(PAGE_POLICY),
        );
    }
    response
}

/// `path` made absolute with every symlink resolved, as far as it exists: the deepest
/// existing ancestor canonicalized, the rest (not there yet) appended with `.` and `..`
/// applied by hand (what does not exist cannot be a symlink).
fn resolved(path: &Path) -> anyhow::Result<PathBuf> {
    let absolute = std::path::absolute(path)?;
    let mut base = absolute.as_path();
    let mut rest = Vec::new();
    let canonical = loop {
        if let Ok(c) = std::fs::canonicalize(base) {
            break c;
        }
        match (base.parent(), base.components().next_back()) {
            (Some(parent), Some(last)) => {
                rest.push(last.as_os_str().to_os_string());
                base = parent;
            }
            _ => break base.to_path_buf(),
        }
    };
    let mut out = PathBuf::new();
    for c in canonical.components() {
        out.push(c);
    }
    for name in rest.iter().rev() {
        match Path::new(name).components().next() {
            Some(Component::ParentDir) => {
                out.pop();
            }
            Some(Component::CurDir) | None => {}
            Some(other) => out.push(other),
        }
    }
    Ok(out)
}

/// Refuse a `sqlite:PATH` ledger inside the site directory: everything in the site is meant
/// to be published (and a build replaces the directory whole), so receipts and token records
/// kept there would be one step from being served or lost. Other ledgers pass; a ledger
/// that does not parse is left for opening to report.
pub fn ledger_outside_site(site: &Path, ledger: &str) -> anyhow::Result<()> {
    let Ok(crate::ledger::Location::Sqlite(path)) = crate::ledger::Location::parse(ledger) else {
        return Ok(());
    };
    let site_dir = resolved(site)?;
    let file = resolved(&path)?;
    if file.starts_with(&site_dir) {
        bail!(
            "the ledger {} is inside the site directory {}: the site is published and replaced \
             whole by a build, so receipts and token records must live elsewhere; put the \
             ledger outside it, e.g. --ledger sqlite:data/ledger.sqlite",
            path.display(),
            site.display()
        );
    }
    Ok(())
}

/// Refuse a data directory (the token key, breaker state) inside the site directory, for the
/// reasons the ledger may not live there: the site is published.
pub fn data_outside_site(site: &Path, data: &Path) -> anyhow::Result<()> {
    let site_dir = resolved(site)?;
    if resolved(data)?.starts_with(&site_dir) {
        bail!(
            "the data directory {} (the token key, breaker state) is inside the site directory {}: \
             the site is published; put it outside, e.g. --data data",
            data.display(),
            site.display()
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn ok(request: &str) -> String {
        site_path(request)
            .unwrap_or_else(|| panic!("{request} refused"))
            .display()
            .to_string()
    }

    #[test]
    fn pages_map_to_their_files() {
        assert_eq!(ok("/"), "index.html");
        assert_eq!(ok(""), "index.html");
        assert_eq!(ok("/index.html"), "index.html");
        assert_eq!(ok("/rows/"), "rows/index.html");
        assert_eq!(ok("/rows"), "rows");
        assert_eq!(ok("/llms.txt"), "llms.txt");
        assert_eq!(ok("/rows/GOOD_ECHO.html"), "rows/GOOD_ECHO.html");
        assert_eq!(ok("/a%20b/caf%C3%A9.md"), "a b/café.md");
        assert_eq!(ok("/100%"), "100%");
    }

    #[test]
    fn known_attacks_are_refused() {
        for request in [
            "/%2Fproc%2Fself%2Fenviron",
            "/%2fproc%2fself%2fenviron",
            "/%2Fetc%2Fpasswd",
            "/%2Fproc%2Fself%2Ffd%2F3",
            "//etc/passwd",
            "/a//b",
            "/../../etc/passwd",
            "/%2e%2e/%2e%2e/etc/passwd",
            "/%2E%2E/%2E%2E/etc/passwd",
            "/..%2F..%2Fetc%2Fpasswd",
            "/a%5C..%5C..%5Cetc%5Cpasswd",
            "/a\\..\\etc",
            "/.",
            "/./index.html",
            "/%2e/index.html",
            "/%00",
            "/index.html%00.txt",
            "/.history.json",
            "/.build-options.json",
            "/.page-inputs",
            "/.git/config",
            "/rows/.hidden",
            "/%2Egit/config",
            "/catalogue.sqlite",
            "/catalogue.SQLite",
            "/ledger.sqlite-wal",
            "/ledger.sqlite-shm",
            "/ledger-wal",
            "/ledger-shm",
            "/ledger-journal",
            "/data/ledger.sqlite",
            "/C:/Windows/win.ini",
            "/c%3A%5Cwindows",
            "/%ff",
        ] {
            assert_eq!(site_path(request), None, "{request}");
        }
    }

    fn piece() -> impl Strategy<Value = &'static str> {
        prop::sample::select(vec![
            "/",
            "%2F",
            "%2f",
            "%5C",
            "%5c",
            "\\",
            "..",
            ".",
            "%2E%2E",
            "%2e",
            "%00",
            "\0",
            "etc",
            "proc",
            ".git",
            "index.html",
            "a",
            "%",
            "é",
            "C:",
            ":",
            ".sqlite",
            "-wal",
            "-shm",
            "-journal",
            "%2Esqlite",
        ])
    }

    proptest! {
        #[test]
        fn any_path_served_is_a_plain_relative_one(
            pieces in prop::collection::vec(piece(), 0..12)
        ) {
            let request = pieces.concat();
            if let Some(path) = site_path(&request) {
                prop_assert!(path.is_relative(), "{request} → {}", path.display());
                prop_assert!(path.components().count() > 0, "{request}");
                for c in path.components() {
                    let Component::Normal(name) = c else {
                        return Err(TestCaseError::fail(format!("{request} → {c:?}")));
                    };
                    let name = name.to_str().expect("utf-8");
                    prop_assert!(!name.starts_with('.'), "{request} → {name}");
                    prop_assert!(!name.contains(['/', '\\', '\0']), "{request} → {name}");
                }
                let text = path.to_string_lossy().to_ascii_lowercase();
                prop_assert!(
                    !REFUSED_SUFFIXES.iter().any(|s| text.ends_with(s)),
                    "{request} → {text}"
                );
            }
        }
    }

    #[test]
    fn a_ledger_inside_the_site_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let site = dir.path().join("site");
        std::fs::create_dir(&site).unwrap();
        std::fs::create_dir(dir.path().join("data")).unwrap();
        let inside = |l: String| ledger_outside_site(&site, &l);
        let err =
            inside(format!("sqlite:{}", site.join("ledger.sqlite").display())).expect_err("inside");
        assert!(
            err.to_string().contains("inside the site directory"),
            "{err}"
        );
        // Not there yet, reached through `..`, or through a directory not made yet.
        assert!(inside(format!("sqlite:{}/x/../l.sqlite", site.display())).is_err());
        assert!(inside(format!("sqlite:{}/new/dir/l.sqlite", site.display())).is_err());
        assert!(inside(format!("{}", site.join("bare.sqlite").display())).is_err());
        // Outside it.
        inside(format!(
            "sqlite:{}",
            dir.path().join("data/ledger.sqlite").display()
        ))
        .unwrap();
        inside(format!("sqlite:{}/../data/l.sqlite", site.display())).unwrap();
        inside(format!("sqlite:{}-old/l.sqlite", site.display())).unwrap();
        inside("postgres://u@127.0.0.1/db".into()).unwrap();
        // A site not built yet is still a site.
        let later = dir.path().join("later");
        let err = ledger_outside_site(
            &later,
            &format!("sqlite:{}", later.join("l.sqlite").display()),
        );
        assert!(err.is_err());
        // A symlink into the site is the site.
        #[cfg(unix)]
        {
            let link = dir.path().join("link");
            std::os::unix::fs::symlink(&site, &link).unwrap();
            assert!(inside(format!("sqlite:{}/l.sqlite", link.display())).is_err());
        }
    }

    #[test]
    fn the_data_directory_stays_outside_the_site() {
        let dir = tempfile::tempdir().expect("tempdir");
        let site = dir.path().join("site");
        std::fs::create_dir_all(&site).expect("site");
        let inside = data_outside_site(&site, &site.join("data")).expect_err("inside");
        assert!(inside.to_string().contains("token key"), "{inside}");
        assert!(data_outside_site(&site, &site.join("..").join("site").join("d")).is_err());
        assert!(data_outside_site(&site, &dir.path().join("data")).is_ok());
    }

    #[test]
    fn a_link_inside_the_site_is_served_only_as_what_it_resolves_to() {
        let dir = tempfile::tempdir().expect("tempdir");
        let site = dir.path();
        std::fs::write(site.join("real.html"), "page").unwrap();
        std::fs::write(site.join("catalogue.sqlite"), "ledger-like").unwrap();
        std::fs::write(site.join(".hidden"), "dot").unwrap();
        std::os::unix::fs::symlink(site.join("real.html"), site.join("alias.html")).unwrap();
        std::os::unix::fs::symlink(site.join("catalogue.sqlite"), site.join("x.html")).unwrap();
        std::os::unix::fs::symlink(site.join(".hidden"), site.join("y.html")).unwrap();
        let read = |rel: &str| read_inside(site, Path::new(rel)).map(|(_, b)| b);
        assert_eq!(read("alias.html"), Some(b"page".to_vec()));
        assert_eq!(read("x.html"), None, "a link to a SQLite file");
        assert_eq!(read("y.html"), None, "a link to a dotfile");
    }
}
