//! Signed builds followed from outside (issue: verifiable from outside): a publisher signs
//! each build with its key, a static host that knows nothing of capdir serves it, and a
//! dispatcher started with `--follow URL --trust KEY` takes only what that key signed. Each
//! attack The Update Framework names is played on the host while the dispatcher runs: an
//! unsigned build, one signed by another key, a manifest changed after signing, last week's
//! build served again (rollback), a build kept past its expiry (freeze). Each is refused with
//! the build in place still serving, and counted by reason in `/metrics`. A rotation hands
//! trust to a new key only through a build the old key signed, and survives a restart.

use super::deployment::{
    OWNER, Process, capdir, eventually, metric, owner_metrics, static_host, text,
};
use crate::common::{self, Repo};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

const BIN: &str = env!("CARGO_BIN_EXE_capdir");

/// The publisher's side: a catalogue repository and the directory the host serves.
struct Publisher {
    repo: Repo,
    host_dir: PathBuf,
    site_url: String,
    dispatcher: String,
}

impl Publisher {
    /// A new catalogue repository, its builds served from `dir/host` on `host_port` and
    /// followed by a dispatcher on `port`.
    fn new(dir: &Path, host_port: u16, port: u16) -> Publisher {
        let host_dir = dir.join("host");
        std::fs::create_dir_all(&host_dir).expect("host dir");
        Publisher {
            repo: Repo::new(),
            site_url: format!("http://127.0.0.1:{host_port}/site/"),
            dispatcher: format!("http://127.0.0.1:{port}"),
            host_dir,
        }
    }

    /// Commit a new row so the next build has a new commit (and a higher build number).
    fn change(&self, n: u32) {
        self.repo.write(
            &format!("ROW_{n}.yaml"),
            &format!(
                "key: ROW_{n}\ntype: fn\ntarget: echo\ncategory: text\ncontent: |\n  # WHAT: Row number {n} of the signed catalogue.\n  # WHEN_TO_USE: Tests.\n  # ARGS: $1=text\n  # EX: hi\n  # OUTPUT: text\n  [\"$1\"]\n"
            ),
        );
        self.repo
            .commit(&format!("row {n}"), "2026-01-01T00:00:00Z");
    }

    /// Build into a fresh directory with `extra` arguments, then `edit` it, then put it where
    /// the host serves it (whole, by renames).
    fn publish(&self, extra: &[&str], edit: impl FnOnce(&Path)) {
        let next = self.host_dir.join("next");
        let _ = std::fs::remove_dir_all(&next);
        let mut args = vec![
            "build",
            "catalogue",
            "--out",
            next.to_str().expect("utf-8"),
            "--site-url",
            &self.site_url,
            "--dispatcher-url",
            &self.dispatcher,
        ];
        args.extend_from_slice(extra);
        let built = capdir(&args, self.repo.path(), &[]);
        assert!(built.status.success(), "build: {}", text(&built));
        edit(&next);
        self.put_live(&next);
    }

    fn put_live(&self, dir: &Path) {
        let live = self.host_dir.join("site");
        let old = self.host_dir.join("old");
        let _ = std::fs::remove_dir_all(&old);
        if live.exists() {
            std::fs::rename(&live, &old).expect("move the old build aside");
        }
        std::fs::rename(dir, &live).expect("publish");
    }

    /// A copy of what the host serves now.
    fn save(&self, name: &str) -> PathBuf {
        let to = self.host_dir.join(name);
        let ok = Command::new("cp")
            .arg("-a")
            .arg(self.host_dir.join("site"))
            .arg(&to)
            .status()
            .expect("cp");
        assert!(ok.success());
        to
    }
}

/// `capdir key new FILE --name NAME`: the public key it prints.
fn new_key(dir: &Path, file: &str) -> String {
    let o = capdir(
        &["key", "new", file, "--name", "site.test/catalogue"],
        dir,
        &[],
    );
    assert!(o.status.success(), "key new: {}", text(&o));
    String::from_utf8_lossy(&o.stdout).trim().to_string()
}

fn follower(dir: &Path, port: u16, site_url: &str, trust: Option<&str>) -> Process {
    let log = std::fs::File::create(dir.join(format!("serve-{port}.log"))).expect("log");
    let mut cmd = Command::new(BIN);
    cmd.args(["serve", "--site"])
        .arg(dir.join("follower-site"))
        .args(["--addr", &format!("127.0.0.1:{port}")])
        .args(["--follow", site_url, "--follow-interval", "1s"])
        .arg("--ledger")
        .arg(format!("sqlite:{}", dir.join("ledger.sqlite").display()))
        .arg("--data")
        .arg(dir.join("data"))
        .env("CAPDIR_OWNER_KEY", OWNER)
        .env("RUST_LOG", "info")
        .stdout(log.try_clone().expect("log"))
        .stderr(log);
    if let Some(key) = trust {
        cmd.args(["--trust", key]);
    }
    Process(cmd.spawn().expect("spawn capdir serve --follow"))
}

async fn refusals(client: &reqwest::Client, port: u16, reason: &str) -> f64 {
    metric(
        client,
        port,
        &format!("capdir_follow_refusals_total{{reason=\"{reason}\"}}"),
    )
    .await
}

async fn build_number(client: &reqwest::Client, port: u16) -> f64 {
    metric(client, port, "capdir_follow_build_number").await
}

/// Wait until one more build was refused for `reason`, then check the build in place is
/// still build `held`.
async fn refused(client: &reqwest::Client, port: u16, reason: &str, before: f64, held: f64) {
    eventually(
        Duration::from_secs(20),
        &format!("a {reason} refusal"),
        || async { refusals(client, port, reason).await > before },
    )
    .await;
    assert_eq!(
        build_number(client, port).await,
        held,
        "the build in place changed"
    );
    up(client, port).await;
}

/// Wait until the dispatcher on `port` answers.
async fn up(client: &reqwest::Client, port: u16) {
    eventually(Duration::from_secs(30), "the follower up", || async {
        client
            .get(format!("http://127.0.0.1:{port}/api/dispatch?map=1"))
            .send()
            .await
            .is_ok_and(|r| r.status() == 200)
    })
    .await;
}

async fn follows(client: &reqwest::Client, port: u16, number: f64) {
    eventually(
        Duration::from_secs(20),
        &format!("build {number} followed"),
        || async { build_number(client, port).await == number },
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_follower_takes_only_what_its_key_signed() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (host_port, port) = (common::free_port(), common::free_port());
    let publisher = Publisher::new(dir.path(), host_port, port);
    let host_dir = publisher.host_dir.clone();
    let (key1, key2) = (dir.path().join("k1.key"), dir.path().join("k2.key"));
    let (k1, k2) = (key1.to_str().unwrap(), key2.to_str().unwrap());
    let pub1 = new_key(dir.path(), k1);
    let pub2 = new_key(dir.path(), k2);
    // A key file is never overwritten.
    let again = capdir(&["key", "new", k1], dir.path(), &[]);
    assert!(!again.status.success());

    publisher.change(1);
    publisher.publish(&["--sign", k1], |_| {});
    let build1 = publisher.save("build-1");
    let _host = static_host(&host_dir, host_port, &dir.path().join("host.log"));
    let _follower = follower(dir.path(), port, &publisher.site_url, Some(&pub1));
    let client = common::client();
    up(&client, port).await;
    follows(&client, port, 1.0).await;
    assert!(
        owner_metrics(&client, port)
            .await
            .contains("capdir_follow_verification_info{mode=\"signed\"} 1")
    );

    // Build 2, signed: followed.
    publisher.change(2);
    publisher.publish(&["--sign", k1], |_| {});
    follows(&client, port, 2.0).await;

    // An arbitrary build: unsigned, then signed by a key nobody trusts.
    publisher.change(3);
    publisher.publish(&[], |_| {});
    refused(&client, port, "unsigned", 0.0, 2.0).await;
    publisher.publish(&["--sign", k2], |_| {});
    refused(&client, port, "bad_signature", 0.0, 2.0).await;
    // The manifest changed after signing (a file's digest swapped for another's).
    publisher.publish(&["--sign", k1], |site| {
        let path = site.join("build.json");
        let manifest = std::fs::read_to_string(&path).unwrap();
        let changed = manifest.replacen("\"capdir\":\"", "\"capdir\":\"9", 1);
        assert_ne!(manifest, changed);
        std::fs::write(path, changed).unwrap();
    });
    let before = refusals(&client, port, "bad_signature").await;
    refused(&client, port, "bad_signature", before, 2.0).await;
    // Rollback: build 1, signed and intact, served again.
    let rolled = host_dir.join("rolled");
    let ok = Command::new("cp")
        .arg("-a")
        .arg(&build1)
        .arg(&rolled)
        .status()
        .unwrap();
    assert!(ok.success());
    publisher.put_live(&rolled);
    refused(&client, port, "rollback", 0.0, 2.0).await;
    // The same number as the build served, from another commit (history rewritten to the
    // same count): refused too.
    publisher.publish(&["--sign", k1, "--build-number", "2"], |_| {});
    refused(&client, port, "rollback", 1.0, 2.0).await;

    // Freeze: build 3 signed for three seconds is taken, then refused once it expires, both
    // while the host answers nothing (404) and while it keeps serving it.
    publisher.publish(&["--sign", k1, "--expires-in", "3s"], |_| {});
    follows(&client, port, 3.0).await;
    let frozen = host_dir.join("frozen");
    std::fs::rename(host_dir.join("site"), &frozen).unwrap();
    refused(&client, port, "expired", 0.0, 3.0).await;
    std::fs::rename(&frozen, host_dir.join("site")).unwrap();
    let before = refusals(&client, port, "expired").await;
    refused(&client, port, "expired", before, 3.0).await;

    // Rotation: build 4 signed by key 1 hands trust to key 2; build 5 signed by key 2 alone
    // is taken; build 6 signed by key 1 alone no longer is.
    publisher.change(4);
    publisher.publish(&["--sign", k1, "--next-key", &pub2], |_| {});
    follows(&client, port, 4.0).await;
    publisher.change(5);
    publisher.publish(&["--sign", k2], |_| {});
    follows(&client, port, 5.0).await;
    publisher.change(6);
    publisher.publish(&["--sign", k1], |_| {});
    let before = refusals(&client, port, "bad_signature").await;
    refused(&client, port, "bad_signature", before, 5.0).await;

    // Each refusal was logged with its reason; no private key ever was.
    let log = std::fs::read_to_string(dir.path().join(format!("serve-{port}.log"))).unwrap();
    for reason in ["not signed", "does not hold", "rollback", "freeze"] {
        assert!(log.contains(reason), "{reason}: {log}");
    }
    assert!(
        !log.contains("PRIVATE+KEY"),
        "a private key reached the log"
    );

    // A restart with the same --trust keeps the rotation: key 2's build 7 is taken.
    drop(_follower);
    let _follower = follower(dir.path(), port, &publisher.site_url, Some(&pub1));
    up(&client, port).await;
    publisher.change(7);
    publisher.publish(&["--sign", k2], |_| {});
    follows(&client, port, 7.0).await;
}

/// Without `--trust` a follower says it checks integrity only, and an unsigned build is
/// followed as before.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_a_key_the_follower_says_it_checks_integrity_only() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (host_port, port) = (common::free_port(), common::free_port());
    let publisher = Publisher::new(dir.path(), host_port, port);
    let host_dir = publisher.host_dir.clone();
    publisher.change(1);
    publisher.publish(&[], |_| {});
    let _host = static_host(&host_dir, host_port, &dir.path().join("host.log"));
    let _follower = follower(dir.path(), port, &publisher.site_url, None);
    let client = common::client();
    up(&client, port).await;
    eventually(Duration::from_secs(30), "the follower up", || async {
        owner_metrics(&client, port)
            .await
            .contains("capdir_follow_verification_info{mode=\"integrity-only\"} 1")
    })
    .await;
    let log = std::fs::read_to_string(dir.path().join(format!("serve-{port}.log"))).unwrap();
    assert!(log.contains("integrity only"), "{log}");

    // The operator turns --trust on while the host still serves the unsigned build: the
    // build held from before is not served, and with no signed build to fetch the
    // dispatcher does not start.
    drop(_follower);
    let key = dir.path().join("k.key");
    let public = new_key(dir.path(), key.to_str().unwrap());
    let mut trusting = follower(dir.path(), port, &publisher.site_url, Some(&public));
    // It tries the host a few times a second apart, then gives up; 30 s bounds the wait.
    let started = std::time::Instant::now();
    let status = loop {
        if let Some(status) = trusting.0.try_wait().expect("wait") {
            break Some(status);
        }
        if started.elapsed() > Duration::from_secs(30) {
            break None;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert!(
        status.is_some_and(|s| !s.success()),
        "a follower started serving a build nobody it trusts signed"
    );
    drop(trusting);
    let log = std::fs::read_to_string(dir.path().join(format!("serve-{port}.log"))).unwrap();
    assert!(log.contains("not one a trusted key vouches for"), "{log}");
    // Once the publisher signs, it starts on the signed build.
    publisher.publish(&["--sign", key.to_str().unwrap()], |_| {});
    let _trusting = follower(dir.path(), port, &publisher.site_url, Some(&public));
    up(&client, port).await;
    follows(&client, port, 1.0).await;
}
