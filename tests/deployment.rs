//! The deployment capdir ships, played end to end on loopback with real processes: a pull
//! request checked as GitHub Actions checks it, a merge, a build published on a plain static
//! file server (Python's `http.server`, not capdir), two dispatchers that follow the published
//! site and share one PostgreSQL ledger, an agent that only GETs and POSTs, a second publish
//! that reaches both dispatchers without a restart or a failed request, and a tampered file
//! that is refused while the old build keeps serving.

use crate::common;

use common::Repo;
use serde_json::{Value as Json, json};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_capdir");
pub(crate) const OWNER: &str = "deployment-owner-key";
/// The signing key every dispatcher behind the load balancer shares (a test value).
const TOKEN_KEY: &str = "deployment-test-token-key-0123456789abcdef";
const KEY: &str = "DEPLOY_SHOUT";

/// The new row, with `category` on line 4.
fn shout(category: &str, what: &str) -> String {
    format!(
        "key: {KEY}
type: fn
target: upper
category: {category}
examples:
  - hello crowd
content: |
  # WHAT: {what}
  # WHEN_TO_USE: When a message must be shouted at a crowd through the megaphone demo.
  # ARGS: $1+=message
  # EX: hello crowd
  # OUTPUT: The message, shouted.
  [\"$1+\"]
asks:
  - shout this message at the crowd through the megaphone
"
    )
}

pub(crate) fn capdir(args: &[&str], dir: &Path, env: &[(&str, &str)]) -> Output {
    let mut cmd = Command::new(BIN);
    cmd.args(args)
        .current_dir(dir)
        .env_remove("GITHUB_ACTIONS")
        .env_remove("CAPDIR_LEDGER");
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd.output().expect("run capdir")
}

pub(crate) fn text(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// Kills its process when dropped.
pub(crate) struct Process(pub(crate) Child);

impl Drop for Process {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// `python3 -m http.server` serving `dir` on `port`: a static host that knows nothing of
/// capdir.
pub(crate) fn static_host(dir: &Path, port: u16, log: &Path) -> Process {
    let log = std::fs::File::create(log).expect("log");
    Process(
        Command::new("python3")
            .args([
                "-m",
                "http.server",
                &port.to_string(),
                "--bind",
                "127.0.0.1",
            ])
            .arg("--directory")
            .arg(dir)
            .stdout(log.try_clone().expect("log"))
            .stderr(log)
            .spawn()
            .expect("python3 -m http.server"),
    )
}

/// A dispatcher on `port` following the site at `site_url`, answering as `public`.
fn follower(dir: &Path, port: u16, site_url: &str, public: &str, ledger: &str) -> Process {
    let log = std::fs::File::create(dir.join(format!("serve-{port}.log"))).expect("log");
    Process(
        Command::new(BIN)
            .args(["serve", "--site"])
            .arg(dir.join(format!("site-{port}")))
            .args(["--addr", &format!("127.0.0.1:{port}")])
            .args(["--follow", site_url, "--follow-interval", "1s"])
            .args(["--base-url", public])
            .arg("--data")
            .arg(dir.join(format!("data-{port}")))
            .env("CAPDIR_LEDGER", ledger)
            .env("CAPDIR_OWNER_KEY", OWNER)
            .env("CAPDIR_TOKEN_KEY", TOKEN_KEY)
            .env("RUST_LOG", "info")
            .stdout(log.try_clone().expect("log"))
            .stderr(log)
            .spawn()
            .expect("spawn capdir serve --follow"),
    )
}

async fn get(client: &reqwest::Client, url: &str) -> (u16, String) {
    let r = client.get(url).send().await.expect(url);
    let status = r.status().as_u16();
    (status, r.text().await.expect("body"))
}

/// Wait until `check` returns true, at most `limit`.
pub(crate) async fn eventually<F, Fut>(limit: Duration, what: &str, check: F)
where
    F: Fn() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let started = Instant::now();
    while !check().await {
        assert!(started.elapsed() < limit, "timed out: {what}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The commit a dispatcher follows, from its `/metrics`.
async fn followed_commit(client: &reqwest::Client, port: u16) -> String {
    let metrics = owner_metrics(client, port).await;
    metrics
        .lines()
        .find_map(|l| l.strip_prefix("capdir_follow_info{"))
        .and_then(|l| l.split("commit=\"").nth(1))
        .and_then(|l| l.split('"').next())
        .unwrap_or_default()
        .to_string()
}

/// `/metrics` as the owner reads it.
pub(crate) async fn owner_metrics(client: &reqwest::Client, port: u16) -> String {
    let r = client
        .get(format!("http://127.0.0.1:{port}/metrics"))
        .header("x-owner-key", OWNER)
        .send()
        .await
        .expect("metrics");
    r.text().await.expect("body")
}

pub(crate) async fn metric(client: &reqwest::Client, port: u16, name: &str) -> f64 {
    let metrics = owner_metrics(client, port).await;
    metrics
        .lines()
        .find_map(|l| l.strip_prefix(name))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(-1.0)
}

fn head(repo: &Repo) -> String {
    let o = Command::new("git")
        .args(["rev-parse", "HEAD"])
        .current_dir(repo.path())
        .output()
        .expect("git");
    String::from_utf8_lossy(&o.stdout).trim().to_string()
}

fn build(repo: &Repo, site: &Path, site_url: &str, dispatcher: &str) {
    let site = site.to_str().expect("utf-8 path");
    let built = capdir(
        &[
            "build",
            "catalogue",
            "--out",
            site,
            "--site-url",
            site_url,
            "--dispatcher-url",
            dispatcher,
        ],
        repo.path(),
        &[],
    );
    assert!(built.status.success(), "build: {}", text(&built));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pull_request_to_pages_to_two_following_dispatchers_to_an_agent() {
    let Some(db) = common::pg_database().await else {
        return;
    };
    let work = tempfile::tempdir().expect("tempdir");
    let dir = work.path();

    // 1. A catalogue repository holding the bundled rows; a pull request adds a row with a
    // mistake, and the gate, run as Actions runs it, points at the line.
    let repo = Repo::new();
    let bundled = Path::new(env!("CARGO_MANIFEST_DIR")).join("catalogue");
    for f in std::fs::read_dir(&bundled).expect("bundled catalogue") {
        let f = f.expect("entry").path();
        std::fs::copy(&f, repo.catalogue().join(f.file_name().expect("name"))).expect("copy");
    }
    repo.commit("the bundled catalogue", "2026-01-01T00:00:00Z");
    repo.git(&["checkout", "-q", "-b", "add-shout"], None);
    repo.write(
        &format!("{KEY}.yaml"),
        &shout("Not Ok", "Shout a message back, loudly."),
    );
    repo.commit("Add DEPLOY_SHOUT", "2026-01-02T00:00:00Z");
    let gate =
        |env: &[(&str, &str)]| capdir(&["check", "catalogue", "--base", "main"], repo.path(), env);
    let refused = gate(&[("GITHUB_ACTIONS", "true")]);
    assert_eq!(refused.status.code(), Some(1), "{}", text(&refused));
    let annotation = format!("::error file=catalogue/{KEY}.yaml,line=4,");
    assert!(
        text(&refused).contains(&annotation),
        "no annotation at the mistake ({annotation}):\n{}",
        text(&refused)
    );
    repo.write(
        &format!("{KEY}.yaml"),
        &shout("text", "Shout a message back, loudly."),
    );
    repo.commit("DEPLOY_SHOUT: a valid category", "2026-01-02T00:01:00Z");
    let passed = gate(&[("GITHUB_ACTIONS", "true")]);
    assert!(passed.status.success(), "{}", text(&passed));
    assert!(!text(&passed).contains("::error"), "{}", text(&passed));

    // 2. Merge and build with both addresses: the site's and the dispatcher's.
    repo.git(&["checkout", "-q", "main"], None);
    repo.git(&["merge", "-q", "--ff-only", "add-shout"], None);
    let (port_a, port_b, port_c) = (
        common::free_port(),
        common::free_port(),
        common::free_port(),
    );
    let site_url = format!("http://127.0.0.1:{port_a}");
    let public = format!("http://127.0.0.1:{port_b}");
    let published = dir.join("published");
    build(&repo, &published, &site_url, &public);
    // No file of the site links an API path on the site's address.
    for (path, body) in site_files(&published) {
        for api in ["/api/dispatch", "/receipt/"] {
            for hit in body.match_indices(api) {
                let before = &body[..hit.0];
                assert!(
                    before.ends_with(&public),
                    "{} links {api} somewhere other than the dispatcher: …{}",
                    path.display(),
                    &before[before.len().saturating_sub(60)..]
                );
            }
        }
    }

    // 3. A static host that is not capdir; 4. two dispatchers following it, one ledger.
    let _host = static_host(&published, port_a, &dir.join("host.log"));
    let client = &crate::common::client();
    let site_url = site_url.as_str();

    eventually(
        Duration::from_secs(20),
        "the static host answers",
        || async move {
            client
                .get(format!("{site_url}/build.json"))
                .send()
                .await
                .is_ok_and(|r| r.status() == 200)
        },
    )
    .await;
    let b = follower(dir, port_b, &format!("{site_url}/"), &public, &db.url);
    let c = follower(dir, port_c, &format!("{site_url}/"), &public, &db.url);
    let (mut b, mut c) = (b, c);
    for (port, p) in [(port_b, &mut b), (port_c, &mut c)] {
        let log = dir.join(format!("serve-{port}.log"));
        common::wait_ready_or_show(client, port, &mut p.0, Some(&log)).await;
    }
    let first = head(&repo);
    assert_eq!(followed_commit(client, port_b).await, first);
    assert_eq!(followed_commit(client, port_c).await, first);

    // 5. An agent with nothing but GET and POST: llms.txt, the row's contract on the site,
    // the contract's own invoke link (on the dispatcher), a token minted for the dispatcher,
    // a receipt confirmed on the other dispatcher.
    let (status, llms) = get(client, &format!("{site_url}/llms.txt")).await;
    assert_eq!(status, 200);
    let contract_url = llms
        .lines()
        .find_map(|l| l.strip_prefix(&format!("- [{KEY}](")))
        .and_then(|l| l.split(')').next())
        .expect("llms.txt lists the new row")
        .to_string();
    assert!(contract_url.starts_with(site_url), "{contract_url}");
    let (status, contract) = get(client, &contract_url).await;
    assert_eq!(status, 200, "{contract_url}");
    let invoke_url = contract
        .lines()
        .find_map(|l| l.strip_prefix("POST "))
        .expect("the contract names its invoke link")
        .to_string();
    assert_eq!(invoke_url, format!("{public}/api/dispatch"));
    let run_now = contract
        .lines()
        .find_map(|l| l.strip_prefix("Run now: <"))
        .and_then(|l| l.strip_suffix('>'))
        .expect("the contract names its run-now link")
        .to_string();
    assert!(run_now.starts_with(&public), "{run_now}");
    let minted = capdir(
        &[
            "token",
            "mint",
            "--keys",
            KEY,
            "--audience",
            &public,
            "--site",
            dir.join(format!("site-{port_b}")).to_str().expect("path"),
        ],
        dir,
        &[
            ("CAPDIR_LEDGER", db.url.as_str()),
            ("CAPDIR_TOKEN_KEY", TOKEN_KEY),
        ],
    );
    assert!(minted.status.success(), "{}", text(&minted));
    let token = String::from_utf8_lossy(&minted.stdout)
        .lines()
        .last()
        .expect("the token")
        .to_string();
    let answer: Json = client
        .post(&invoke_url)
        .bearer_auth(&token)
        .json(&json!({"key": KEY, "body": "hello crowd"}))
        .send()
        .await
        .expect("invoke")
        .json()
        .await
        .expect("json");
    assert_eq!(answer["output"], "HELLO CROWD", "{answer}");
    let receipt = answer["receipt"].as_str().expect("a receipt").to_string();
    let (status, ran_now) = get(client, &format!("{run_now}&share={token}")).await;
    assert_eq!(status, 200, "{ran_now}");
    let (status, confirmed) = get(
        client,
        &format!("http://127.0.0.1:{port_c}/api/dispatch?confirm={receipt}"),
    )
    .await;
    assert_eq!(status, 200, "{confirmed}");
    let confirmed: Json = serde_json::from_str(&confirmed).expect("json");
    assert_eq!(confirmed["confirmed"], true);
    assert_eq!(confirmed["key"], KEY);

    // 6. A second publish reaches both dispatchers within a few polls, with no restart and
    // no failed request while the builds swap.
    let stop = Arc::new(AtomicBool::new(false));
    let (served, failed) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
    let load: Vec<_> = [port_b, port_c]
        .into_iter()
        .map(|port| {
            let (stop, served, failed, client) = (
                stop.clone(),
                served.clone(),
                failed.clone(),
                (*client).clone(),
            );
            tokio::spawn(async move {
                let mut failures = Vec::new();
                while !stop.load(Ordering::Relaxed) {
                    let invoked = client
                        .post(format!("http://127.0.0.1:{port}/api/dispatch"))
                        .header("x-owner-key", OWNER)
                        .json(&json!({"key": KEY, "body": "again"}))
                        .send()
                        .await;
                    let asked = client
                        .get(format!(
                            "http://127.0.0.1:{port}/api/dispatch?key={KEY}&format=markdown"
                        ))
                        .send()
                        .await;
                    for r in [invoked, asked] {
                        match r {
                            Ok(r) if r.status() == 200 => {
                                served.fetch_add(1, Ordering::Relaxed);
                            }
                            Ok(r) => failures.push(format!("{port}: {}", r.status())),
                            Err(e) => failures.push(format!("{port}: {e}")),
                        }
                    }
                }
                failed.fetch_add(failures.len(), Ordering::Relaxed);
                failures
            })
        })
        .collect();
    repo.write(
        &format!("{KEY}.yaml"),
        &shout("text", "Shout a message back, very loudly."),
    );
    repo.commit("DEPLOY_SHOUT: louder", "2026-01-03T00:00:00Z");
    let second = head(&repo);
    build(&repo, &published, site_url, &public);
    let second = second.as_str();
    for port in [port_b, port_c] {
        eventually(
            Duration::from_secs(20),
            "the second build is followed",
            || async move {
                let (_, md) = get(
                    client,
                    &format!("http://127.0.0.1:{port}/api/dispatch?key={KEY}&format=markdown"),
                )
                .await;
                md.contains("very loudly") && followed_commit(client, port).await == second
            },
        )
        .await;
    }
    stop.store(true, Ordering::Relaxed);
    let mut failures = Vec::new();
    for l in load {
        failures.extend(l.await.expect("load task"));
    }
    assert!(
        failures.is_empty(),
        "requests failed while the build swapped: {failures:?}"
    );
    assert!(served.load(Ordering::Relaxed) > 0);
    assert!(b.0.try_wait().expect("wait").is_none(), "B kept running");
    assert!(c.0.try_wait().expect("wait").is_none(), "C kept running");

    // A tampered file on the host (bytes that are not the manifest's) is refused; the old
    // build keeps serving.
    repo.write(
        &format!("{KEY}.yaml"),
        &shout("text", "Shout it, tampered."),
    );
    repo.commit("DEPLOY_SHOUT: third", "2026-01-04T00:00:00Z");
    build(&repo, &published, site_url, &public);
    let md = published.join(format!("k/{KEY}.md"));
    // Same size, other bytes: only the digest can tell.
    let original = std::fs::read_to_string(&md).expect("contract");
    assert!(original.contains("tampered"));
    std::fs::write(&md, original.replace("tampered", "hijacked")).expect("tamper");
    let failed_before = metric(
        client,
        port_b,
        "capdir_follow_polls_total{result=\"failed\"}",
    )
    .await;
    eventually(
        Duration::from_secs(20),
        "the tampered build is refused",
        || async move {
            metric(
                client,
                port_b,
                "capdir_follow_polls_total{result=\"failed\"}",
            )
            .await
                > failed_before
        },
    )
    .await;
    assert_eq!(followed_commit(client, port_b).await, second);
    let (status, md) = get(
        client,
        &format!("http://127.0.0.1:{port_b}/api/dispatch?key={KEY}&format=markdown"),
    )
    .await;
    assert_eq!(status, 200);
    assert!(
        md.contains("very loudly") && !md.contains("hijacked"),
        "{md}"
    );
    let log = std::fs::read_to_string(dir.join(format!("serve-{port_b}.log"))).expect("log");
    assert!(
        log.contains(&format!("k/{KEY}.md: refused: its SHA-256 is")),
        "the log says why: {log}"
    );
}

/// Every text file of a site, by path.
fn site_files(site: &Path) -> Vec<(PathBuf, String)> {
    let mut out = Vec::new();
    let mut dirs = vec![site.to_path_buf()];
    while let Some(d) = dirs.pop() {
        for e in std::fs::read_dir(&d).expect("read") {
            let p = e.expect("entry").path();
            if p.is_dir() {
                dirs.push(p);
            } else if let Ok(body) = std::fs::read_to_string(&p) {
                out.push((p, body));
            }
        }
    }
    out
}
