//! Helpers shared by the integration tests: temporary Git repositories with fixed dates,
//! rows written at test time, an invoker over them, and loopback servers.

#![allow(dead_code)]

use capdir::invoke::outcome::Outcome;
use capdir::invoke::rowset::RowSet;
use capdir::invoke::runner::Environment;
use capdir::invoke::{Input, Invoker, InvokerConfig};
use capdir::row::{Row, parse_row};
use serde_json::{Value as Json, json};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Command;

/// A temporary Git repository with a `catalogue/` directory.
pub struct Repo {
    pub dir: tempfile::TempDir,
}

impl Repo {
    pub fn new() -> Repo {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("catalogue")).unwrap();
        let repo = Repo { dir };
        repo.git(&["init", "-q", "-b", "main"], None);
        repo
    }

    pub fn path(&self) -> &Path {
        self.dir.path()
    }

    pub fn catalogue(&self) -> PathBuf {
        self.path().join("catalogue")
    }

    /// Run git; `date` fixes author and committer time (`2024-01-01T00:00:00Z`).
    pub fn git(&self, args: &[&str], date: Option<&str>) {
        let mut cmd = Command::new("git");
        cmd.args([
            "-c",
            "user.name=Ada",
            "-c",
            "user.email=ada@example.com",
            "-c",
            "commit.gpgsign=false",
        ])
        .args(args)
        .current_dir(self.path());
        if let Some(d) = date {
            cmd.env("GIT_AUTHOR_DATE", d).env("GIT_COMMITTER_DATE", d);
        }
        let ok = cmd.status().expect("git runs").success();
        assert!(ok, "git {args:?}");
    }

    pub fn write(&self, name: &str, text: &str) {
        std::fs::write(self.catalogue().join(name), text).unwrap();
    }

    pub fn remove(&self, name: &str) {
        std::fs::remove_file(self.catalogue().join(name)).unwrap();
    }

    /// Stage everything and commit with a fixed date.
    pub fn commit(&self, message: &str, date: &str) {
        self.git(&["add", "-A"], None);
        self.git(&["commit", "-q", "-m", message], Some(date));
    }

    /// Import a `git fast-import` stream (which packs each tree as a delta on its parent's)
    /// and check out `main`.
    pub fn fast_import(&self, stream: &[u8]) {
        use std::io::Write;
        let mut import = Command::new("git")
            .args(["fast-import", "--quiet"])
            .current_dir(self.path())
            .stdin(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        import.stdin.take().unwrap().write_all(stream).unwrap();
        assert!(import.wait().unwrap().success(), "git fast-import failed");
        self.git(&["reset", "-q", "--hard", "main"], None);
    }
}

/// A small valid fn row.
pub fn fn_row(key: &str, category: &str, what: &str) -> String {
    format!(
        "key: {key}\ntype: fn\ntarget: echo\ncategory: {category}\ncontent: |\n  # WHAT: {what}\n  # WHEN_TO_USE: Tests.\n  # ARGS: $1=text\n  # EX: hi\n  # OUTPUT: text\n  [\"$1\"]\nasks:\n  - echo my words\n"
    )
}

pub fn fixture(rel: &str) -> String {
    std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/fixtures")
            .join(rel),
    )
    .unwrap()
}

/// A row from its fields; `content` is built from `what`, `args` and `payload`.
pub fn row(key: &str, kind: &str, target: &str, payload: &str) -> Row {
    row_with(key, kind, target, payload, json!({}))
}

/// Like `row`, with more fields (`auth`, `input_schema`, `includes`, …) merged in.
pub fn row_with(key: &str, kind: &str, target: &str, payload: &str, extra: Json) -> Row {
    let mut fields = json!({
        "key": key,
        "type": kind,
        "target": target,
        "content": format!("# WHAT: test row {key}\n# ARGS: $1=first, $2=second\n{payload}\n"),
    });
    if let (Some(f), Some(e)) = (fields.as_object_mut(), extra.as_object()) {
        for (k, v) in e {
            f.insert(k.clone(), v.clone());
        }
    }
    let text = serde_yaml::to_string(&fields).expect("yaml");
    let parsed = parse_row(Path::new(&format!("{key}.yaml")), text.as_bytes());
    match parsed.row {
        Some(r) if parsed.diags.is_empty() => r,
        _ => panic!("fixture row {key} does not parse: {:?}", parsed.diags),
    }
}

pub fn invoker(rows: Vec<Row>, env: Environment) -> Invoker {
    invoker_with(
        rows,
        InvokerConfig {
            env,
            ..Default::default()
        },
    )
}

/// An invoker over `rows`. Unless `config` says otherwise, each row's credential is bound to
/// the row's own origin (what an owner would write for rows under test: the runner tests
/// test the runners; `tests/bindings.rs` tests the bindings) and rows may reach loopback,
/// where the tests' upstreams listen.
pub fn invoker_with(rows: Vec<Row>, config: InvokerConfig) -> Invoker {
    let mut config = config;
    if config.bindings.credentials.is_empty() {
        config.bindings = std::sync::Arc::new(own_bindings(&rows));
    }
    if config.egress == capdir::invoke::egress::Egress::default() {
        config.egress = capdir::invoke::egress::Egress::loopback();
    }
    Invoker::new(RowSet::from_rows(rows), config).expect("invoker")
}

/// Bindings that bind every credential `rows` use to the origins those rows call.
pub fn own_bindings(rows: &[Row]) -> capdir::row::binding::Bindings {
    use capdir::row::binding::{Binding, Destination, STDIO, destination_of};
    let mut b = capdir::row::binding::Bindings::default();
    for row in rows {
        let Ok(Some(c)) = capdir::row::credential::Credential::parse(&row.auth) else {
            continue;
        };
        let origin = match destination_of(row) {
            Some(Destination::Http { origin, .. }) => origin.origin().ascii_serialization(),
            Some(Destination::Stdio) => STDIO.to_string(),
            _ => continue,
        };
        for env in c.envs() {
            let entry: &mut Binding = b.credentials.entry(env).or_default();
            if !entry.origins.contains(&origin) {
                entry.origins.push(origin.clone());
            }
        }
    }
    b
}

/// `bindings.yaml` text binding each (variable, origin) pair.
pub fn bindings_yaml(pairs: &[(&str, &str)]) -> String {
    let mut out = String::from("credentials:\n");
    for (env, origin) in pairs {
        out.push_str(&format!("  {env}:\n    origins: [\"{origin}\"]\n"));
    }
    out
}

pub fn bundled() -> Invoker {
    let bindings = std::fs::read("catalogue/bindings.yaml")
        .ok()
        .and_then(|b| capdir::row::binding::Bindings::parse(&b).ok())
        .expect("the bundled bindings");
    Invoker::new(
        RowSet::from_dir(Path::new("catalogue")).expect("bundled catalogue"),
        InvokerConfig {
            env: Environment::fixed::<&str, &str>([]),
            bindings: std::sync::Arc::new(bindings),
            ..Default::default()
        },
    )
    .expect("invoker")
}

pub async fn call(inv: &Invoker, key: &str, body: &str) -> Outcome {
    inv.invoke(key, Input::body(body)).await
}

/// Serve `router` on 127.0.0.1 at a free port, for the rest of the test.
pub async fn serve(router: axum::Router) -> SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind loopback");
    let addr = listener.local_addr().expect("local addr");
    tokio::spawn(async move {
        let _ = axum::serve(listener, router).await;
    });
    addr
}

/// A loopback port with nothing listening (bound, then released).
pub fn closed_port() -> u16 {
    let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = l.local_addr().expect("addr").port();
    drop(l);
    port
}

/// A free loopback port.
pub fn free_port() -> u16 {
    closed_port()
}

/// A real `capdir serve`, killed when dropped; its stdout and stderr go to files.
pub struct Served {
    pub child: std::process::Child,
    pub port: u16,
    pub log: PathBuf,
}

impl Served {
    /// Start `capdir serve` on the site in `dir/site`, with the ledger and data under `dir`
    /// and the given environment, and wait until it answers.
    pub async fn start(dir: &Path, extra_args: &[&str], env: &[(&str, &str)]) -> Served {
        let ledger = format!("sqlite:{}", dir.join("ledger.sqlite").display());
        Served::start_on(dir, &ledger, extra_args, env).await
    }

    /// [`Served::start`] on the ledger `ledger` (a PostgreSQL URL, say).
    pub async fn start_on(
        dir: &Path,
        ledger: &str,
        extra_args: &[&str],
        env: &[(&str, &str)],
    ) -> Served {
        let port = free_port();
        let log = dir.join(format!("serve-{port}.log"));
        let out = std::fs::File::create(&log).expect("log file");
        let err = out.try_clone().expect("log file");
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_capdir"));
        cmd.args(["serve", "--site"])
            .arg(dir.join("site"))
            .args(["--addr", &format!("127.0.0.1:{port}"), "--ledger", ledger])
            .arg("--data")
            .arg(dir.join("data"))
            .args(extra_args)
            .env_remove("CAPDIR_OWNER_KEY")
            .env_remove("CAPDIR_TOKEN_KEY")
            // The tests' upstreams listen on loopback; a test may say otherwise in `env`.
            .env("CAPDIR_ALLOW_EGRESS", "loopback")
            .stdout(out)
            .stderr(err);
        for (k, v) in env {
            cmd.env(k, v);
        }
        let child = cmd.spawn().expect("spawn capdir serve");
        let served = Served { child, port, log };
        served.wait_ready().await;
        served
    }

    pub fn url(&self, path: &str) -> String {
        format!("http://127.0.0.1:{}{path}", self.port)
    }

    async fn wait_ready(&self) {
        let client = client();
        let started = std::time::Instant::now();
        loop {
            if let Ok(r) = client.get(self.url("/api/dispatch?map=1")).send().await
                && r.status() == 200
            {
                return;
            }
            assert!(
                started.elapsed() < std::time::Duration::from_secs(30),
                "capdir serve did not start: {}",
                std::fs::read_to_string(&self.log).unwrap_or_default()
            );
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        }
    }

    /// Is the process still running?
    pub fn alive(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }
}

impl Drop for Served {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The PostgreSQL the tests use when `CAPDIR_TEST_POSTGRES` is not set: the role and database
/// `.ci/deps` creates on loopback (a fixed test password for a loopback-only role).
pub const DEFAULT_TEST_POSTGRES: &str = "postgres://capdir:capdir@127.0.0.1:5432/capdir_test";

/// A database made for one test and dropped (with its connections) when this goes.
pub struct PgDatabase {
    /// `postgres://…/capdir_t_…`, for `--ledger`.
    pub url: String,
    admin_url: String,
    name: String,
}

/// `url` with its database replaced by `name`.
pub fn with_database(url: &str, name: &str) -> String {
    let start = url.find("://").map_or(0, |i| i + 3);
    let path = url[start..].find('/').map(|i| start + i);
    let query = url.find('?');
    match (path, query) {
        (Some(p), Some(q)) if p < q => format!("{}/{name}{}", &url[..p], &url[q..]),
        (Some(p), _) => format!("{}/{name}", &url[..p]),
        (None, Some(q)) => format!("{}/{name}{}", &url[..q], &url[q..]),
        (None, None) => format!("{url}/{name}"),
    }
}

/// A fresh, empty database on the test PostgreSQL (`CAPDIR_TEST_POSTGRES`, default
/// `DEFAULT_TEST_POSTGRES`; its role needs CREATEDB). `None` only when
/// `CAPDIR_SKIP_POSTGRES_TESTS=1` opts out; an unreachable server fails the test, saying how
/// to start one.
pub async fn pg_database() -> Option<PgDatabase> {
    if std::env::var("CAPDIR_SKIP_POSTGRES_TESTS").as_deref() == Ok("1") {
        eprintln!("CAPDIR_SKIP_POSTGRES_TESTS=1: this PostgreSQL test is skipped");
        return None;
    }
    let admin_url =
        std::env::var("CAPDIR_TEST_POSTGRES").unwrap_or_else(|_| DEFAULT_TEST_POSTGRES.into());
    let client = pg_connect(&admin_url).await;
    let name = format!("capdir_t_{}", uuid::Uuid::new_v4().simple());
    client
        .batch_execute(&format!("CREATE DATABASE {name}"))
        .await
        .unwrap_or_else(|e| panic!("creating the test database {name}: {e:#}"));
    Some(PgDatabase {
        url: with_database(&admin_url, &name),
        admin_url,
        name,
    })
}

/// A connection for the test itself, or a panic that says what to do.
pub async fn pg_connect(url: &str) -> tokio_postgres::Client {
    let (client, connection) = match tokio_postgres::connect(url, tokio_postgres::NoTls).await {
        Ok(c) => c,
        Err(e) => panic!(
            "PostgreSQL at {} is not reachable for the tests ({}). Run `.ci/deps` as root to \
             install and start it, or point CAPDIR_TEST_POSTGRES at a role that may create \
             databases; CAPDIR_SKIP_POSTGRES_TESTS=1 skips these tests.",
            without_password(url),
            error_chain(&e)
        ),
    };
    tokio::spawn(async move {
        let _ = connection.await;
    });
    client
}

/// An error and its causes, `: `-separated.
pub fn error_chain(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut cause = e.source();
    while let Some(c) = cause {
        text.push_str(&format!(": {c}"));
        cause = c.source();
    }
    text
}

/// A URL fit for a message: `user:password@` becomes `user@`.
pub fn without_password(url: &str) -> String {
    let start = url.find("://").map_or(0, |i| i + 3);
    match (url[start..].find(':'), url[start..].find('@')) {
        (Some(colon), Some(at)) if colon < at => {
            format!("{}{}", &url[..start + colon], &url[start + at..])
        }
        _ => url.to_string(),
    }
}

impl PgDatabase {
    /// A connection to this test's database.
    pub async fn client(&self) -> tokio_postgres::Client {
        pg_connect(&self.url).await
    }
}

impl Drop for PgDatabase {
    fn drop(&mut self) {
        // Drop runs outside any runtime the test had; a thread with its own does the work.
        let (admin, name) = (self.admin_url.clone(), self.name.clone());
        let dropped = std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("runtime");
            runtime.block_on(async {
                if let Ok((client, connection)) =
                    tokio_postgres::connect(&admin, tokio_postgres::NoTls).await
                {
                    tokio::spawn(connection);
                    let _ = client
                        .batch_execute(&format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)"))
                        .await;
                }
            });
        });
        let _ = dropped.join();
    }
}

/// Wait until the `capdir serve` on `port` answers `?map=1`; fail if it exits first or does
/// not answer within 30 s.
pub async fn wait_ready(client: &reqwest::Client, port: u16, server: &mut std::process::Child) {
    wait_ready_or_show(client, port, server, None).await;
}

/// `wait_ready`, showing the server's `log` file when it exits first (the test's directory,
/// and the log in it, are gone once the test fails).
pub async fn wait_ready_or_show(
    client: &reqwest::Client,
    port: u16,
    server: &mut std::process::Child,
    log: Option<&std::path::Path>,
) {
    let started = std::time::Instant::now();
    loop {
        let url = format!("http://127.0.0.1:{port}/api/dispatch?map=1");
        if let Ok(r) = client.get(url).send().await
            && r.status() == 200
        {
            return;
        }
        if let Ok(Some(status)) = server.try_wait() {
            let said = log
                .and_then(|l| std::fs::read_to_string(l).ok())
                .unwrap_or_default();
            panic!("capdir serve on port {port} exited before it was ready: {status}\n{said}");
        }
        assert!(
            started.elapsed() < std::time::Duration::from_secs(30),
            "capdir serve on port {port} did not start"
        );
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
}

/// One invocation of ECHO with the owner key; the receipt id when the dispatcher
/// acknowledged it (200), `None` for anything else.
pub async fn invoke_echo(
    client: &reqwest::Client,
    port: u16,
    owner: &str,
    body: &str,
) -> Option<String> {
    let res = client
        .post(format!("http://127.0.0.1:{port}/api/dispatch"))
        .header("x-owner-key", owner)
        .json(&json!({"key": "ECHO", "body": body}))
        .send()
        .await
        .ok()?;
    if res.status() != 200 {
        return None;
    }
    let v: Json = res.json().await.ok()?;
    v["receipt"].as_str().map(str::to_string)
}

/// A catalogue repository and a scratch directory its site is built into.
pub struct Built {
    pub repo: Repo,
    pub dir: tempfile::TempDir,
}

impl Built {
    /// Build `repo` into a new scratch directory.
    pub fn new(repo: Repo) -> Built {
        let built = Built {
            repo,
            dir: tempfile::tempdir().expect("tempdir"),
        };
        built.build();
        built
    }
    pub fn site(&self) -> PathBuf {
        self.dir.path().join("site")
    }
    pub fn ledger_path(&self) -> PathBuf {
        self.dir.path().join("ledger.sqlite")
    }
    /// Every receipt in the ledger, in chain order.
    pub fn receipts(&self) -> Vec<serde_json::Value> {
        let db = rusqlite::Connection::open(self.ledger_path()).expect("ledger");
        let mut q = db
            .prepare("SELECT body FROM receipts ORDER BY seq")
            .expect("query");
        q.query_map([], |r| r.get::<_, String>(0))
            .expect("rows")
            .map(|b| serde_json::from_str(&b.expect("body")).expect("json"))
            .collect()
    }
    /// Build (again) from the repository's catalogue.
    pub fn build(&self) {
        capdir::build::run(&capdir::build::Options::new(
            self.repo.catalogue(),
            self.site(),
        ))
        .expect("build");
    }
}

/// An HTTP client for the tests, with TLS set up as capdir sets it up (rustls on ring,
/// installed as the process's provider; a `reqwest::Client::new()` before that would panic).
pub fn client() -> reqwest::Client {
    capdir::invoke::runner::http::client_builder()
        .build()
        .expect("the test HTTP client")
}

/// The claims of a token for `keys` at the dispatcher `aud`: minted now, valid ten minutes,
/// risk low, nothing else allowed or watched.
pub fn claims_for(aud: &str, keys: &[&str]) -> capdir::access::token::Claims {
    let now = chrono::Utc::now().timestamp();
    capdir::access::token::Claims {
        id: capdir::access::token::new_id(),
        iat: now,
        exp: now + 600,
        aud: aud.into(),
        keys: keys.iter().map(|k| k.to_string()).collect(),
        categories: vec![],
        write: vec![],
        risk: capdir::access::token::Risk::Low,
        pin: None,
        body: None,
        max_payload: None,
        credentials: vec![],
        watch: Default::default(),
        parent: None,
    }
}

/// A stand-in for an OpenAI-compatible model on loopback (`/v1/chat/completions`): it always
/// answers `reply` with 3 prompt and 2 completion tokens, and counts the requests it got.
pub async fn model_stand_in(
    reply: &str,
) -> (SocketAddr, std::sync::Arc<std::sync::atomic::AtomicUsize>) {
    use std::sync::atomic::{AtomicUsize, Ordering};
    let asked = std::sync::Arc::new(AtomicUsize::new(0));
    let counter = asked.clone();
    let reply = reply.to_string();
    let addr = serve(axum::Router::new().route(
        "/v1/chat/completions",
        axum::routing::post(move || {
            let counter = counter.clone();
            let reply = reply.clone();
            async move {
                counter.fetch_add(1, Ordering::SeqCst);
                axum::Json(json!({
                    "id": "chatcmpl-t",
                    "object": "chat.completion",
                    "choices": [{"index": 0, "finish_reason": "stop",
                        "message": {"role": "assistant", "content": reply}}],
                    "usage": {"prompt_tokens": 3, "completion_tokens": 2},
                }))
            }
        }),
    ))
    .await;
    (addr, asked)
}

/// Run the capdir binary in `dir` with `env`, and none of the caller's keys or MCP
/// environment (`CAPDIR_OWNER_KEY`, `CAPDIR_TOKEN_KEY`, `CAPDIR_MCP_ENV`).
pub fn capdir_in(dir: &Path, args: &[&str], env: &[(&str, &str)]) -> std::process::Output {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_capdir"));
    cmd.args(args)
        .current_dir(dir)
        .env_remove("CAPDIR_OWNER_KEY")
        .env_remove("CAPDIR_TOKEN_KEY")
        .env_remove("CAPDIR_MCP_ENV");
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd.output().expect("capdir runs")
}
