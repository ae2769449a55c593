//! The connection bounds of a real `capdir serve` (`serve/listen.rs`), over raw sockets: a
//! client that sends nothing, sends headers a line a second, idles after a request, or stops
//! half-way through a body is let go; past `--max-connections` (or what the open-file limit
//! leaves room for) a new connection is answered 503 and the server goes on serving.
//!
//! Deadlines here are generous (10 s for something the server should do in about 1 s): what
//! is asserted is that the connection is closed, not how fast.

use crate::common;

use common::{Built, Repo, fn_row};
use serde_json::{Value as Json, json};
use std::io::{ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// Long enough for anything the server should do within a second or two.
const PATIENCE: Duration = Duration::from_secs(10);

/// One site for every server here: an echo row, built once.
fn site() -> &'static Path {
    static SITE: OnceLock<(Built, PathBuf)> = OnceLock::new();
    &SITE
        .get_or_init(|| {
            let repo = Repo::new();
            repo.write("ECHO.yaml", &fn_row("ECHO", "text", "Echo the words."));
            repo.commit("Add echo", "2024-01-01T10:00:00Z");
            let built = Built::new(repo);
            let site = built.site();
            (built, site)
        })
        .1
}

/// A `capdir serve --open` of its own (ledger and data in a scratch directory), killed when
/// dropped; its stderr goes to a file.
struct Server {
    child: Child,
    addr: SocketAddr,
    log: PathBuf,
    _dir: tempfile::TempDir,
}

impl Server {
    /// Start with `args`; `nofile` sets the soft and hard RLIMIT_NOFILE of the process.
    fn start(args: &[&str], nofile: Option<u64>) -> Server {
        let site = site().to_path_buf();
        let dir = tempfile::tempdir().expect("tempdir");
        let port = common::free_port();
        let log = dir.path().join("serve.log");
        let out = std::fs::File::create(&log).expect("log file");
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_capdir"));
        cmd.args(["serve", "--open", "--site"])
            .arg(&site)
            .args(["--addr", &format!("127.0.0.1:{port}"), "--ledger"])
            .arg(format!(
                "sqlite:{}",
                dir.path().join("ledger.sqlite").display()
            ))
            .arg("--data")
            .arg(dir.path().join("data"))
            .args(args)
            .env_remove("CAPDIR_OWNER_KEY")
            .env_remove("CAPDIR_TOKEN_KEY")
            .env("RUST_LOG", "info")
            .stdout(out.try_clone().expect("log file"))
            .stderr(out);
        if let Some(n) = nofile {
            // SAFETY: setrlimit is async-signal-safe and touches only the child.
            unsafe {
                cmd.pre_exec(move || {
                    let limit = libc::rlimit {
                        rlim_cur: n,
                        rlim_max: n,
                    };
                    if libc::setrlimit(libc::RLIMIT_NOFILE, &limit) == 0 {
                        Ok(())
                    } else {
                        Err(std::io::Error::last_os_error())
                    }
                });
            }
        }
        let child = cmd.spawn().expect("spawn capdir serve");
        let mut server = Server {
            child,
            addr: SocketAddr::from(([127, 0, 0, 1], port)),
            log,
            _dir: dir,
        };
        server.wait_serving();
        server
    }

    /// Wait for the `serving` line, without opening a connection (which would take a slot).
    fn wait_serving(&mut self) {
        let started = Instant::now();
        while !self.log().contains(" serving addr=") {
            if let Ok(Some(status)) = self.child.try_wait() {
                panic!("capdir serve exited ({status}):\n{}", self.log());
            }
            assert!(
                started.elapsed() < Duration::from_secs(30),
                "capdir serve did not start:\n{}",
                self.log()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    fn alive(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }

    fn connect(&self) -> TcpStream {
        let s = TcpStream::connect(self.addr).expect("connect");
        s.set_nodelay(true).expect("nodelay");
        s
    }

    /// One whole request on a connection of its own (`Connection: close`): the status and
    /// everything the server sent.
    fn get(&self, path: &str) -> (u16, String) {
        let mut s = self.connect();
        s.set_read_timeout(Some(PATIENCE)).expect("timeout");
        write!(
            s,
            "GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
        )
        .expect("send");
        let mut text = Vec::new();
        let _ = s.read_to_end(&mut text);
        let text = String::from_utf8_lossy(&text).into_owned();
        (status_of(&text), text)
    }

    /// A normal request answers 200, within `PATIENCE` (retrying while the server frees a
    /// slot the test just gave back).
    fn answers(&self) {
        let started = Instant::now();
        loop {
            let (status, text) = self.get("/api/dispatch?map=1");
            if status == 200 {
                return;
            }
            assert!(
                started.elapsed() < PATIENCE,
                "a normal request is not answered: {text}\n{}",
                self.log()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The status of a response's text, 0 when there is none.
fn status_of(text: &str) -> u16 {
    text.strip_prefix("HTTP/1.1 ")
        .and_then(|t| t.get(..3))
        .and_then(|c| c.parse().ok())
        .unwrap_or(0)
}

/// Read until the server closes `s` (end of file or reset) or `limit` passes: whether it
/// closed, and what it sent before.
fn until_closed(s: &mut TcpStream, limit: Duration) -> (bool, String) {
    let started = Instant::now();
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    s.set_read_timeout(Some(Duration::from_millis(100)))
        .expect("timeout");
    let closed = loop {
        match s.read(&mut buf) {
            Ok(0) => break true,
            Ok(n) => got.extend_from_slice(&buf[..n]),
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {}
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(_) => break true,
        }
        if started.elapsed() > limit {
            break false;
        }
    };
    (closed, String::from_utf8_lossy(&got).into_owned())
}

/// Nothing to read yet and not closed.
fn still_open(s: &TcpStream) -> bool {
    s.set_nonblocking(true).expect("nonblocking");
    let mut one = [0u8; 1];
    let open = matches!(s.peek(&mut one), Err(e) if e.kind() == ErrorKind::WouldBlock);
    s.set_nonblocking(false).expect("blocking");
    open
}

/// Send one whole keep-alive GET on `s` and read exactly its response.
fn keep_alive_get(s: &mut TcpStream, path: &str) -> String {
    write!(s, "GET {path} HTTP/1.1\r\nHost: x\r\n\r\n").expect("send");
    s.set_read_timeout(Some(PATIENCE)).expect("timeout");
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        let n = s.read(&mut buf).expect("the response");
        assert!(n > 0, "closed before the response");
        got.extend_from_slice(&buf[..n]);
        let text = String::from_utf8_lossy(&got);
        if let Some((head, body)) = text.split_once("\r\n\r\n") {
            let length: usize = head
                .lines()
                .find_map(|l| {
                    l.to_ascii_lowercase()
                        .strip_prefix("content-length:")
                        .map(|v| v.trim().parse().expect("a length"))
                })
                .expect("content-length");
            if body.len() >= length {
                return text.into_owned();
            }
        }
    }
}

/// Send header lines one a second and never the blank line that ends them: whether the
/// server closed the connection before `lines` were sent.
fn slowloris(s: &mut TcpStream, lines: usize) -> bool {
    for i in 0..lines {
        std::thread::sleep(Duration::from_secs(1));
        if write!(s, "X-Slow-{i}: still coming\r\n").is_err() {
            return true;
        }
        let (closed, _) = until_closed(s, Duration::from_millis(10));
        if closed {
            return true;
        }
    }
    false
}

#[test]
fn a_connection_that_sends_nothing_is_closed() {
    let server = Server::start(&["--header-timeout", "1s", "--idle-timeout", "60s"], None);
    let mut s = server.connect();
    let (closed, text) = until_closed(&mut s, PATIENCE);
    assert!(closed, "a silent connection stayed open:\n{}", server.log());
    assert!(text.is_empty(), "a silent connection got {text}");
    server.answers();
}

#[test]
fn headers_sent_a_line_a_second_are_cut_off() {
    let server = Server::start(&["--header-timeout", "1s", "--idle-timeout", "60s"], None);
    let mut s = server.connect();
    write!(s, "GET /api/dispatch?map=1 HTTP/1.1\r\nHost: x\r\n").expect("send");
    assert!(
        slowloris(&mut s, 10),
        "a slowloris finished its headers:\n{}",
        server.log()
    );
    server.answers();
}

#[test]
fn headers_sent_a_line_a_second_on_a_kept_alive_connection_are_cut_off() {
    // After a first request, only hyper's header timer bounds the next one's head (the
    // idle timeout is long).
    let server = Server::start(&["--header-timeout", "1s", "--idle-timeout", "60s"], None);
    let mut s = server.connect();
    let first = keep_alive_get(&mut s, "/api/dispatch?map=1");
    assert_eq!(status_of(&first), 200, "{first}");
    write!(s, "GET /api/dispatch?map=1 HTTP/1.1\r\nHost: x\r\n").expect("send");
    assert!(
        slowloris(&mut s, 10),
        "a slowloris finished its second request's headers:\n{}",
        server.log()
    );
}

#[test]
fn a_kept_alive_connection_that_idles_is_closed_and_others_are_served() {
    // The header timeout is long: what closes the connection is the idle timeout.
    let server = Server::start(&["--header-timeout", "30s", "--idle-timeout", "1s"], None);
    let mut s = server.connect();
    let first = keep_alive_get(&mut s, "/api/dispatch?map=1");
    assert_eq!(status_of(&first), 200, "{first}");
    let (closed, text) = until_closed(&mut s, PATIENCE);
    assert!(closed, "an idle keep-alive connection stayed open");
    assert!(text.is_empty(), "an idle connection got {text}");
    server.answers();
}

#[test]
fn a_body_that_stops_arriving_gets_408_or_a_close_and_others_are_served() {
    let server = Server::start(&["--body-timeout", "1s"], None);
    let mut s = server.connect();
    write!(
        s,
        "POST /api/dispatch HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n\
         Content-Length: 100\r\n\r\n{{\"key\": \"E"
    )
    .expect("send");
    let (closed, text) = until_closed(&mut s, PATIENCE);
    assert!(
        closed || !text.is_empty(),
        "a half-sent body was waited for:\n{}",
        server.log()
    );
    if !text.is_empty() {
        assert_eq!(status_of(&text), 408, "{text}");
        assert!(
            text.to_ascii_lowercase().contains("connection: close"),
            "{text}"
        );
        assert!(text.contains("\"body_timeout\""), "{text}");
    }
    server.answers();
}

#[test]
fn past_the_connection_limit_a_connection_gets_503_until_the_held_ones_close() {
    let server = Server::start(&["--header-timeout", "30s", "--max-connections", "8"], None);
    let held: Vec<TcpStream> = (0..8)
        .map(|_| {
            let mut s = server.connect();
            write!(s, "GET /api/dispatch?map=1 HTTP/1.1\r\nHo").expect("send");
            s
        })
        .collect();
    std::thread::sleep(Duration::from_millis(300));
    let (status, text) = server.get("/api/dispatch?map=1");
    assert_eq!(status, 503, "the 9th connection: {text}\n{}", server.log());
    let (head, body) = text.split_once("\r\n\r\n").expect("a whole response");
    let head = head.to_ascii_lowercase();
    assert!(head.contains("\r\nretry-after: 1\r\n"), "{head}");
    assert!(head.contains("\r\nconnection: close"), "{head}");
    let body: Json = serde_json::from_str(body).expect("a JSON body");
    assert_eq!(body["error"]["code"], "saturated", "{body}");
    assert!(body["error"]["how_to_fix"].is_string(), "{body}");
    for s in &held {
        assert!(still_open(s), "a held connection was closed or answered");
    }
    drop(held);
    server.answers();
}

#[test]
fn under_a_low_file_limit_extra_connections_get_503_and_the_server_lives_on() {
    // 64 open files: the default limit leaves room for the ledger, the site and refusals.
    let mut server = Server::start(&["--header-timeout", "30s"], Some(64));
    assert!(
        server.log().contains("max_connections=32"),
        "the limit is derived from the file limit:\n{}",
        server.log()
    );
    let mut held = Vec::new();
    let mut refused = 0;
    for i in 0..100 {
        let mut s = server.connect();
        write!(s, "GET /api/dispatch?map=1 HTTP/1.1\r\nHost: x\r\n\r\n").expect("send");
        // A connection within the limit is answered 200 and kept alive; one past it is
        // answered 503 and closed. Never silence, never a close without an answer.
        s.set_read_timeout(Some(PATIENCE)).expect("timeout");
        let mut buf = [0u8; 4096];
        let n = s.read(&mut buf).unwrap_or(0);
        let text = String::from_utf8_lossy(&buf[..n]).into_owned();
        match status_of(&text) {
            200 => held.push(s),
            503 => {
                refused += 1;
                assert!(text.contains("\"saturated\""), "{text}");
            }
            _ => panic!("connection {i} got {text:?}\n{}", server.log()),
        }
    }
    // 64 less a reserve of 32; every other connection was answered 503.
    assert_eq!(held.len(), 32, "connections served under the limit");
    assert_eq!(refused, 100 - 32);
    assert!(server.alive(), "the server died:\n{}", server.log());
    drop(held);
    server.answers();
    let log = server.log();
    let emfile = log.matches("Too many open files").count();
    assert!(emfile <= 3, "accept errors in a loop ({emfile}):\n{log}");
    assert!(server.alive());
}

#[tokio::test]
async fn an_mcp_event_stream_outlives_every_timeout() {
    let server = Server::start(
        &[
            "--header-timeout",
            "1s",
            "--idle-timeout",
            "1s",
            "--body-timeout",
            "1s",
        ],
        None,
    );
    let url = format!("http://{}/mcp", server.addr);
    let client = crate::common::client();
    let init = client
        .post(&url)
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .body(
            json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
                "protocolVersion": capdir::serve::mcp::PROTOCOL_VERSIONS[0],
                "capabilities": {}, "clientInfo": {"name": "test", "version": "1"}}})
            .to_string(),
        )
        .send()
        .await
        .expect("initialize");
    assert_eq!(init.status(), 200);
    let sid = init.headers()["mcp-session-id"]
        .to_str()
        .expect("ascii")
        .to_string();
    let mut stream = client
        .get(&url)
        .header("accept", "text/event-stream")
        .header("mcp-session-id", &sid)
        .header(
            "mcp-protocol-version",
            capdir::serve::mcp::PROTOCOL_VERSIONS[0],
        )
        .send()
        .await
        .expect("the stream");
    assert_eq!(stream.status(), 200);
    // Four times every timeout, with nothing to send: the stream stays open.
    let until = tokio::time::Instant::now() + Duration::from_secs(4);
    loop {
        match tokio::time::timeout_at(until, stream.chunk()).await {
            Err(_) => break,
            Ok(Ok(Some(_))) => {}
            Ok(end) => panic!("the event stream ended: {end:?}\n{}", server.log()),
        }
    }
    let (status, _) = tokio::task::spawn_blocking(move || server.get("/api/dispatch?map=1"))
        .await
        .expect("join");
    assert_eq!(status, 200);
}
