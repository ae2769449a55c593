//! schemathesis (PyPI; `.ci/deps` installs it) against `/openapi.json` on a live `capdir serve`
//! of the bundled catalogue: every check it has (`--checks all`: no 5xx, statuses, content
//! types, headers and bodies as documented, schema-invalid requests rejected, schema-valid
//! ones accepted, auth not ignored, links followed statefully), once with the owner key and
//! once with a capability token. `tests/schemathesis.toml` holds its one allowance, explained.
//!
//! The seed is fixed so CI is repeatable; `CAPDIR_SCHEMATHESIS_SEED` picks another and
//! `CAPDIR_SCHEMATHESIS_EXAMPLES` sets how many cases per operation.

use crate::common;

use common::Served;
use std::path::Path;
use std::process::Command;

const OWNER: &str = "schemathesis-owner-key";
const TOKEN_KEY: &str = "schemathesis-token-key-0123456789abcdef";

/// How to run schemathesis here: `$SCHEMATHESIS`, the `schemathesis` command, or the module.
fn schemathesis() -> Command {
    if let Ok(bin) = std::env::var("SCHEMATHESIS") {
        return Command::new(bin);
    }
    let on_path = Command::new("schemathesis")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    if on_path {
        return Command::new("schemathesis");
    }
    let as_module = Command::new("python3")
        .args(["-m", "schemathesis.cli", "--version"])
        .output()
        .is_ok_and(|o| o.status.success());
    assert!(
        as_module,
        "schemathesis is not installed: run `.ci/deps` (it runs `python3 -m pip install schemathesis==4.32.5`)"
    );
    let mut c = Command::new("python3");
    c.args(["-m", "schemathesis.cli"]);
    c
}

fn run(
    served: &Served,
    cwd: &Path,
    header: &str,
    exclude: &[&str],
    examples: &str,
    seed: &str,
) -> (bool, String) {
    let config = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/schemathesis.toml");
    let out = schemathesis()
        // It keeps replay files in `.schemathesis/` of its working directory.
        .current_dir(cwd)
        .arg("--config-file")
        .arg(&config)
        .arg("--no-color")
        .args(["run", &served.url("/openapi.json")])
        .args(["--checks", "all"])
        .args(["-H", header])
        .args(["--max-examples", examples])
        .args(["--seed", seed])
        .args(["--generation-database", "none"])
        .args(exclude.iter().flat_map(|path| ["--exclude-path", path]))
        .output()
        .expect("schemathesis runs");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), text)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn schemathesis_finds_nothing_against_the_live_dispatcher() {
    let dir = tempfile::tempdir().expect("tempdir");
    let catalogue = Path::new(env!("CARGO_MANIFEST_DIR")).join("catalogue");
    let port_site = dir.path().join("site");
    capdir::build::run(&capdir::build::Options::new(catalogue, &port_site)).expect("build");
    let env = [("CAPDIR_OWNER_KEY", OWNER), ("CAPDIR_TOKEN_KEY", TOKEN_KEY)];
    let mut served = Served::start(dir.path(), &[], &env).await;

    let mint = Command::new(env!("CARGO_BIN_EXE_capdir"))
        .args([
            "token",
            "mint",
            "--categories",
            "crypto,text",
            "--keys",
            "UUID",
        ])
        .args(["--audience", &served.url("")])
        .args(["--max-payload", "4096", "--site"])
        .arg(&port_site)
        .arg("--ledger")
        .arg(format!(
            "sqlite:{}",
            dir.path().join("ledger.sqlite").display()
        ))
        .env("CAPDIR_TOKEN_KEY", TOKEN_KEY)
        .output()
        .expect("mint");
    assert!(mint.status.success(), "{mint:?}");
    let token = String::from_utf8_lossy(&mint.stdout)
        .lines()
        .last()
        .expect("token line")
        .to_string();

    let seed = std::env::var("CAPDIR_SCHEMATHESIS_SEED").unwrap_or_else(|_| "20261130".into());
    let examples = std::env::var("CAPDIR_SCHEMATHESIS_EXAMPLES").unwrap_or_else(|_| "100".into());
    // `/metrics` is the owner's to read: a token only ever gets its 403 there.
    for (who, header, exclude) in [
        ("owner key", format!("x-owner-key: {OWNER}"), &[][..]),
        (
            "capability token",
            format!("Authorization: Bearer {token}"),
            &["/metrics"][..],
        ),
    ] {
        let (ok, text) = run(&served, dir.path(), &header, exclude, &examples, &seed);
        assert!(ok, "schemathesis found problems ({who}):\n{text}");
        assert!(
            text.contains("No issues found"),
            "schemathesis did not report a clean run ({who}):\n{text}"
        );
        let generated = text
            .lines()
            .find_map(|l| l.trim().split_once(" generated"))
            .and_then(|(n, _)| n.trim().parse::<u32>().ok())
            .unwrap_or(0);
        assert!(generated >= 100, "too few cases ({who}): {text}");
        assert!(served.alive(), "the dispatcher died during the run ({who})");
    }
    let log = std::fs::read_to_string(&served.log).unwrap_or_default();
    assert!(
        !log.contains("ERROR"),
        "the dispatcher logged errors:\n{log}"
    );
}
