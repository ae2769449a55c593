//! The site in a real browser: Debian's chromium, headless, driven by playwright-core from
//! npm (tests/browser/). This test builds a fixture catalogue with the real `capdir build`
//! (history with an edit and a removal, so a tombstone; an `origin` remote, so commit links),
//! starts the real `capdir serve` on a loopback port, and runs `node --test` over
//! tests/browser/site.test.mjs, which also serves the built site from a plain static file
//! server to prove that browsing and search need no dispatcher. Screenshots land in
//! target/screenshots/.

use crate::common;

use common::{Repo, fixture, fn_row};
use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_capdir");
const OWNER: &str = "browser-test-owner-key";
const CHROMIUM: &str = "/usr/bin/chromium";

pub(crate) fn manifest() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// Fail early, saying what to install, when the browser or the driver is missing.
pub(crate) fn require_browser_tools() -> PathBuf {
    let chromium = std::env::var("CAPDIR_CHROMIUM").unwrap_or_else(|_| CHROMIUM.to_string());
    assert!(
        Path::new(&chromium).exists(),
        "chromium is missing at {chromium}: run `.ci/deps` (apt-get install chromium), \
         or set CAPDIR_CHROMIUM to a Chromium binary"
    );
    let node = Command::new("node").arg("--version").output();
    assert!(
        node.as_ref().is_ok_and(|o| o.status.success()),
        "node is missing: run `.ci/deps` (apt-get install nodejs npm)"
    );
    let driver = manifest().join("tests/browser/node_modules/playwright-core/package.json");
    assert!(
        driver.exists(),
        "playwright-core is missing at {}: run `.ci/deps` (npm ci --prefix tests/browser)",
        driver.display()
    );
    PathBuf::from(chromium)
}

/// A catalogue with history: rows added, one improved, one removed with a replacement, one
/// disabled; the remote is an scp-style address so commit links come from `origin`.
fn catalogue() -> Repo {
    let r = Repo::new();
    for f in [
        "GOOD_ECHO.yaml",
        "GOOD_NOW.yaml",
        "GOOD_HTTP_ITEM.yaml",
        "bindings.yaml",
    ] {
        r.write(f, &fixture(&format!("good/{f}")));
    }
    let bundled = manifest().join("catalogue");
    for f in [
        "SHA256.yaml",
        "UPPER.yaml",
        "WORD_COUNT.yaml",
        "BASE64_ENCODE.yaml",
    ] {
        let text = std::fs::read_to_string(bundled.join(f)).expect("bundled row");
        r.write(f, &text);
    }
    r.commit("Add the first rows", "2024-01-01T10:00:00Z");
    r.write("GOOD_FLOW.yaml", &fixture("good/GOOD_FLOW.yaml"));
    r.write("OLD_ROW.yaml", &fn_row("OLD_ROW", "text", "An old echo."));
    r.commit("Add a flow and an old row", "2024-02-01T10:00:00Z");
    r.write(
        "GOOD_ECHO.yaml",
        &fixture("good/GOOD_ECHO.yaml").replace(
            "# WHEN_TO_USE:",
            "# WHEN_TO_USE: Whenever you need your words back.",
        ),
    );
    r.commit("Improve the echo docstring", "2024-03-01T10:00:00Z");
    r.remove("OLD_ROW.yaml");
    r.write(
        "RETIRED_ROW.yaml",
        &fn_row("RETIRED_ROW", "text", "Disabled.")
            .replace("category: text\n", "category: text\nenabled: false\n"),
    );
    r.commit(
        "Remove OLD_ROW\n\nReplaced-by: GOOD_ECHO",
        "2024-04-01T10:00:00Z",
    );
    r.git(
        &[
            "remote",
            "add",
            "origin",
            "git@example.test:team/catalogue.git",
        ],
        None,
    );
    r
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free loopback port")
}

/// `capdir serve`, stopped when dropped.
struct Server(Child);

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn http_get_status(port: u16, path: &str) -> Option<u16> {
    let mut s = TcpStream::connect(("127.0.0.1", port)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(2))).ok()?;
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n"
    )
    .ok()?;
    let mut head = [0u8; 12];
    s.read_exact(&mut head).ok()?;
    std::str::from_utf8(&head[9..12]).ok()?.parse().ok()
}

fn serve(site: &Path, data: &Path, port: u16) -> Server {
    let child = Command::new(BIN)
        .args(["serve", "--site"])
        .arg(site)
        .args(["--addr", &format!("127.0.0.1:{port}"), "--ledger"])
        .arg(format!("sqlite:{}", data.join("ledger.sqlite").display()))
        .arg("--data")
        .arg(data)
        .env("CAPDIR_OWNER_KEY", OWNER)
        .env("RUST_LOG", "warn")
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("spawn capdir serve");
    let server = Server(child);
    let started = Instant::now();
    while http_get_status(port, "/api/dispatch?map=1") != Some(200) {
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "capdir serve did not answer on 127.0.0.1:{port}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    server
}

#[test]
fn the_site_in_chromium() {
    let chromium = require_browser_tools();
    let repo = catalogue();
    let work = tempfile::tempdir().expect("tempdir");
    let site = work.path().join("site");
    let port = free_port();
    let built = Command::new(BIN)
        .arg("build")
        .arg(repo.catalogue())
        .arg("--out")
        .arg(&site)
        .args(["--base-url", &format!("http://127.0.0.1:{port}")])
        .output()
        .expect("run capdir build");
    assert!(
        built.status.success(),
        "capdir build failed:\n{}",
        String::from_utf8_lossy(&built.stderr)
    );
    let _server = serve(&site, &work.path().join("data"), port);

    let shots = manifest().join("target/screenshots");
    std::fs::create_dir_all(&shots).expect("screenshot dir");
    // Screenshots of an earlier run must not pass for this one's.
    for e in std::fs::read_dir(&shots)
        .expect("read screenshot dir")
        .flatten()
    {
        if e.path().extension().is_some_and(|x| x == "png") {
            let _ = std::fs::remove_file(e.path());
        }
    }
    let out = Command::new("node")
        .args(["--test", "--test-reporter=spec", "site.test.mjs"])
        .current_dir(manifest().join("tests/browser"))
        .env("CAPDIR_SITE_DIR", &site)
        .env("CAPDIR_SERVED_URL", format!("http://127.0.0.1:{port}"))
        .env("CAPDIR_OWNER_KEY", OWNER)
        .env("CAPDIR_CHROMIUM", &chromium)
        .env("CAPDIR_SCREENSHOTS", &shots)
        .env("CAPDIR_REPO_WEB", "https://example.test/team/catalogue")
        .output()
        .expect("run node");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    println!("{text}");
    assert!(out.status.success(), "browser tests failed:\n{text}");
    // The runner ran the tests it should: a file that loads but registers nothing passes too.
    let tally = |name: &str| {
        text.lines()
            .find_map(|l| l.strip_prefix(&format!("ℹ {name} ")))
            .and_then(|n| n.trim().parse::<u32>().ok())
    };
    assert_eq!(
        (tally("tests"), tally("pass")),
        (Some(8), Some(8)),
        "the browser tests did not all run and pass:\n{text}"
    );
    for name in [
        "index.png",
        "search.png",
        "row.png",
        "category.png",
        "tombstone.png",
        "run.png",
        "receipt.png",
    ] {
        assert!(
            shots.join(name).exists(),
            "no screenshot {name} in {}",
            shots.display()
        );
    }
}
