//! `capdir check --base REV` on a real temporary Git repository with several commits: the
//! asymmetric rule a pull-request check applies.

use std::path::Path;
use std::process::Command;

fn git(dir: &Path, args: &[&str]) {
    let ok = Command::new("git")
        .args([
            "-c",
            "user.name=T",
            "-c",
            "user.email=t@example.com",
            "-c",
            "commit.gpgsign=false",
        ])
        .args(args)
        .current_dir(dir)
        .status()
        .expect("git")
        .success();
    assert!(ok, "git {args:?}");
}

fn row(key: &str, category: &str) -> String {
    format!(
        "key: {key}\ntype: fn\ntarget: echo\ncategory: {category}\ncontent: |\n  # WHAT: Echoes.\n  # WHEN_TO_USE: Tests.\n  # ARGS: $1=text\n  # EX: hi\n  # OUTPUT: text\n  [\"$1\"]\nasks:\n  - echo my words\n"
    )
}

fn capdir(dir: &Path, base: &str) -> (bool, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_capdir"))
        .args(["check", "catalogue", "--base", base, "--format", "text"])
        .current_dir(dir)
        .env_remove("GITHUB_ACTIONS")
        .output()
        .unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
    )
}

#[test]
fn base_rule_legacy_clean_and_new_rows() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let cat = dir.join("catalogue");
    std::fs::create_dir(&cat).unwrap();
    git(dir, &["init", "-q", "-b", "main"]);
    std::fs::write(cat.join("GOOD_ROW.yaml"), row("GOOD_ROW", "text")).unwrap();
    // A legacy row, committed before the gate existed: bad category.
    std::fs::write(
        cat.join("LEGACY_ROW.yaml"),
        row("LEGACY_ROW", "Legacy Stuff"),
    )
    .unwrap();
    git(dir, &["add", "."]);
    git(dir, &["commit", "-q", "-m", "first rows"]);
    std::fs::write(cat.join("OTHER_ROW.yaml"), row("OTHER_ROW", "text")).unwrap();
    git(dir, &["add", "."]);
    git(dir, &["commit", "-q", "-m", "second"]);

    // Legacy row edited without getting worse: passes with a warning naming its old problem.
    std::fs::write(
        cat.join("LEGACY_ROW.yaml"),
        row("LEGACY_ROW", "Legacy Stuff").replace("Echoes.", "Echoes its input."),
    )
    .unwrap();
    let (ok, out) = capdir(dir, "HEAD");
    assert!(ok, "{out}");
    assert!(
        out.contains("warning[bad_category]") && out.contains("legacy problem"),
        "{out}"
    );

    // Legacy row made worse: refused.
    std::fs::write(
        cat.join("LEGACY_ROW.yaml"),
        row("LEGACY_ROW", "Legacy Stuff").replace("target: echo", "target: ech0"),
    )
    .unwrap();
    let (ok, out) = capdir(dir, "HEAD");
    assert!(!ok, "{out}");
    assert!(out.contains("error[unknown_builtin]"), "{out}");
    git(dir, &["checkout", "-q", "--", "catalogue/LEGACY_ROW.yaml"]);

    // A clean row broken: refused.
    std::fs::write(cat.join("GOOD_ROW.yaml"), row("GOOD_ROW", "Bad Cat")).unwrap();
    let (ok, out) = capdir(dir, "HEAD");
    assert!(!ok, "{out}");
    assert!(
        out.contains("GOOD_ROW.yaml") && out.contains("error[bad_category]"),
        "{out}"
    );
    git(dir, &["checkout", "-q", "--", "catalogue/GOOD_ROW.yaml"]);

    // A new row must be clean.
    std::fs::write(cat.join("NEW_ROW.yaml"), row("NEW_ROW", "Not Ok")).unwrap();
    let (ok, out) = capdir(dir, "HEAD");
    assert!(!ok && out.contains("NEW_ROW.yaml"), "{out}");
    std::fs::write(cat.join("NEW_ROW.yaml"), row("NEW_ROW", "text")).unwrap();
    let (ok, out) = capdir(dir, "HEAD~1");
    assert!(ok, "{out}");

    // An unknown revision is a clear error, not a panic.
    let (ok, _) = capdir(dir, "no-such-branch");
    assert!(!ok);
}
