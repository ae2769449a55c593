//! The static site over a real `capdir serve`: only regular files under the site root come
//! back. Requests are written by hand on a TcpStream (an HTTP client would normalise the
//! path): encoded separators, absolute paths, `..` in every spelling, NUL, dotfiles and the
//! build's caches, ledger files, symlinks out of the site, a fifo, `/proc` by every route.
//! Every one answers the same 404, and no answer carries the owner key, the token key or the
//! marker written outside the site. The pages still answer 200. And `capdir serve` refuses a
//! ledger inside the site.

use crate::common;

use common::{Repo, Served, fn_row};
use serde_json::Value as Json;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const OWNER: &str = "static-files-owner-key-7f3a9c1e";
const TOKEN_KEY: &str = "static-files-token-key-0123456789abcdef-5b2d";
const MARKER: &str = "MARKER-outside-the-site-d41c8e";

/// One raw request: the status, the headers (lower-cased names) and the body.
struct Answer {
    status: u16,
    head: String,
    body: String,
}

fn raw_get(port: u16, target: &str) -> Answer {
    let mut s = TcpStream::connect(("127.0.0.1", port)).expect("connect");
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    write!(
        s,
        "GET {target} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut bytes = Vec::new();
    s.read_to_end(&mut bytes).expect("read the answer");
    let text = String::from_utf8_lossy(&bytes).into_owned();
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    let status = head
        .get(9..12)
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("no status line for {target}: {text:?}"));
    let head = head.to_ascii_lowercase();
    let body = if head.contains("transfer-encoding: chunked") {
        dechunk(body)
    } else {
        body.to_string()
    };
    Answer { status, head, body }
}

fn dechunk(mut rest: &str) -> String {
    let mut out = String::new();
    while let Some((size, after)) = rest.split_once("\r\n") {
        let n = usize::from_str_radix(size.trim(), 16).unwrap_or(0);
        if n == 0 || after.len() < n {
            break;
        }
        out.push_str(&after[..n]);
        rest = after[n..].trim_start_matches("\r\n");
    }
    out
}

/// A path, every byte outside the unreserved set percent-encoded (so `/` becomes `%2F`).
fn encode_all(path: &str) -> String {
    path.bytes()
        .map(|b| {
            if b.is_ascii_alphanumeric() || b"-_~".contains(&b) {
                (b as char).to_string()
            } else {
                format!("%{b:02X}")
            }
        })
        .collect()
}

fn build_site(work: &Path) {
    let repo = Repo::new();
    repo.write(
        "ECHO_WORDS.yaml",
        &fn_row("ECHO_WORDS", "text", "Echo the words."),
    );
    repo.commit("a row", "2024-01-01T00:00:00Z");
    let out = Command::new(env!("CARGO_BIN_EXE_capdir"))
        .arg("build")
        .arg(repo.catalogue())
        .arg("--out")
        .arg(work.join("site"))
        .current_dir(work)
        .output()
        .expect("capdir build runs");
    assert!(out.status.success(), "{out:?}");
}

#[tokio::test]
async fn only_regular_files_under_the_site_are_served() {
    let root = tempfile::tempdir().unwrap();
    let work = root.path();
    build_site(work);
    let site = work.join("site");

    // What a build leaves in the site under a dot name: every one of them must 404.
    let mut dot_paths: Vec<String> = Vec::new();
    for entry in std::fs::read_dir(&site).unwrap() {
        let entry = entry.unwrap();
        let name = entry.file_name().to_string_lossy().into_owned();
        if name.starts_with('.') {
            dot_paths.push(format!("/{name}"));
            if entry.path().is_dir() {
                dot_paths.push(format!("/{name}/"));
                for inner in std::fs::read_dir(entry.path()).unwrap() {
                    let inner = inner.unwrap().file_name().to_string_lossy().into_owned();
                    dot_paths.push(format!("/{name}/{inner}"));
                }
            }
        }
    }
    for expected in [
        "/.history.json",
        "/.build-options.json",
        "/.page-inputs",
        "/.parts",
        "/.checked",
    ] {
        assert!(
            dot_paths.iter().any(|p| p == expected),
            "the build no longer leaves {expected}; found {dot_paths:?}"
        );
    }

    // Things that must never come back, planted in and beside the site.
    let secret = work.join("outside-secret.txt");
    std::fs::write(&secret, MARKER).unwrap();
    std::fs::write(site.join("ledger.sqlite"), MARKER).unwrap();
    std::fs::write(site.join("ledger.sqlite-wal"), MARKER).unwrap();
    std::fs::write(site.join("ledger.sqlite-shm"), MARKER).unwrap();
    std::fs::write(site.join("ledger-journal"), MARKER).unwrap();
    std::fs::create_dir(site.join("empty-dir")).unwrap();
    std::os::unix::fs::symlink(&secret, site.join("leak.txt")).unwrap();
    std::os::unix::fs::symlink(work, site.join("leak-dir")).unwrap();
    std::os::unix::fs::symlink("/etc", site.join("etc")).unwrap();
    std::os::unix::fs::symlink("/proc/self", site.join("me")).unwrap();
    let fifo = Command::new("mkfifo")
        .arg(site.join("pipe.txt"))
        .status()
        .is_ok_and(|s| s.success());

    let served = Served::start(
        work,
        &[],
        &[
            ("CAPDIR_OWNER_KEY", OWNER),
            ("CAPDIR_TOKEN_KEY", TOKEN_KEY),
            ("RUST_LOG", "warn"),
        ],
    )
    .await;
    let port = served.port;
    let ledger = work.join("ledger.sqlite");
    assert!(ledger.exists(), "the ledger is where Served puts it");

    let mut refused: Vec<String> = [
        "/%2Fproc%2Fself%2Fenviron",
        "/%2fproc%2fself%2fenviron",
        "/%2Fproc/self/environ",
        "/%2Fetc%2Fpasswd",
        "/%2e%2e/%2e%2e/etc/passwd",
        "/%2E%2E/%2E%2E/%2E%2E/%2E%2E/%2E%2E/%2E%2E/etc/passwd",
        "/..%2F..%2Fetc%2Fpasswd",
        "/..%2F..%2F..%2F..%2F..%2F..%2Fproc%2Fself%2Fenviron",
        "/a%5C..%5C..%5Cetc%5Cpasswd",
        "/a\\..\\..\\etc\\passwd",
        "//etc/passwd",
        "/%00",
        "/index.html%00",
        "/.git/config",
        "/catalogue.sqlite",
        "/catalogue.SQLITE",
        "/ledger.sqlite",
        "/ledger.sqlite-wal",
        "/ledger.sqlite-shm",
        "/ledger-journal",
        "/leak.txt",
        "/leak-dir/outside-secret.txt",
        "/leak-dir/ledger.sqlite",
        "/leak-dir/data/token.key",
        "/etc/passwd",
        "/me/environ",
        "/proc/self/environ",
        "/empty-dir",
        "/empty-dir/",
        "/pipe.txt",
        "/nothing-here.html",
    ]
    .map(String::from)
    .into();
    // The real ledger, its WAL and the token key, by absolute path, encoded.
    for file in [
        ledger.clone(),
        work.join("ledger.sqlite-wal"),
        work.join("data/token.key"),
        secret.clone(),
    ] {
        refused.push(format!("/{}", encode_all(&file.display().to_string())));
    }
    for fd in 0..32 {
        refused.push(format!("/%2Fproc%2Fself%2Ffd%2F{fd}"));
    }
    refused.extend(dot_paths);

    for target in &refused {
        let a = raw_get(port, target);
        assert_eq!(a.status, 404, "{target} answered {}: {}", a.status, a.body);
        let v: Json = serde_json::from_str(&a.body)
            .unwrap_or_else(|e| panic!("{target}: not JSON ({e}): {:?}", a.body));
        assert_eq!(v["error"]["code"], "not_found", "{target}: {v}");
        for secret in [OWNER, TOKEN_KEY, MARKER] {
            assert!(!a.body.contains(secret), "{target} leaked {secret}");
        }
    }
    assert!(fifo, "mkfifo made the fifo the test asks for");

    // The site still serves its pages.
    for (target, kind) in [
        ("/", "text/html"),
        ("/index.html", "text/html"),
        ("/k/ECHO_WORDS.html", "text/html"),
        ("/k/ECHO_WORDS.json", "application/json"),
        ("/llms.txt", "text/plain"),
        ("/build.json", "application/json"),
    ] {
        let a = raw_get(port, target);
        assert_eq!(a.status, 200, "{target}: {}", a.body);
        assert!(
            a.head.contains(&format!("content-type: {kind}")),
            "{target}: {}",
            a.head
        );
        if kind == "text/html" {
            assert!(
                a.head.contains("content-security-policy:"),
                "{target}: {}",
                a.head
            );
        }
        for secret in [OWNER, TOKEN_KEY, MARKER] {
            assert!(!a.body.contains(secret), "{target} leaked {secret}");
        }
    }
    // A directory serves its index.html, with and without the trailing slash.
    std::fs::create_dir(site.join("docs")).unwrap();
    std::fs::write(site.join("docs/index.html"), "<!doctype html>docs page").unwrap();
    for target in ["/docs", "/docs/"] {
        let a = raw_get(port, target);
        assert_eq!(a.status, 200, "{target}: {}", a.body);
        assert!(a.body.contains("docs page"), "{target}: {}", a.body);
    }
    drop(served);
}

#[test]
fn serve_refuses_a_ledger_inside_the_site() {
    let root = tempfile::tempdir().unwrap();
    let work = root.path();
    build_site(work);
    let site = work.join("site");
    let ledger = site.join("ledger.sqlite");
    let log = work.join("serve.log");
    let out = std::fs::File::create(&log).unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_capdir"))
        .args(["serve", "--site"])
        .arg(&site)
        .args(["--addr", &format!("127.0.0.1:{}", common::free_port())])
        .arg("--ledger")
        .arg(format!("sqlite:{}", ledger.display()))
        .arg("--data")
        .arg(work.join("data"))
        .env_remove("CAPDIR_OWNER_KEY")
        .env_remove("CAPDIR_TOKEN_KEY")
        .stdout(Stdio::null())
        .stderr(out)
        .spawn()
        .expect("spawn capdir serve");
    let started = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if started.elapsed() > Duration::from_secs(30) {
            let _ = child.kill();
            let _ = child.wait();
            panic!(
                "capdir serve ran with its ledger inside the site: {}",
                std::fs::read_to_string(&log).unwrap_or_default()
            );
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let text = std::fs::read_to_string(&log).unwrap();
    assert!(!status.success(), "{text}");
    assert!(text.contains("inside the site directory"), "{text}");
    assert!(!ledger.exists(), "no ledger was made in the site");
}
