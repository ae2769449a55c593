//! `capdir check --base REV` on a real temporary Git repository with several commits: the
//! asymmetric rule a pull-request check applies.

use crate::common;

use common::{Repo, fn_row};
use std::path::Path;
use std::process::Command;

fn row(key: &str, category: &str) -> String {
    fn_row(key, category, "Echoes.")
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
    let repo = Repo::new();
    let dir = repo.path();
    let cat = repo.catalogue();
    let git = |_: &Path, args: &[&str]| repo.git(args, None);
    std::fs::write(cat.join("GOOD_ROW.yaml"), row("GOOD_ROW", "text")).unwrap();
    // A legacy row, committed before the gate existed: bad category.
    std::fs::write(
        cat.join("LEGACY_ROW.yaml"),
        row("LEGACY_ROW", "Legacy Stuff"),
    )
    .unwrap();
    repo.commit("first rows", "2024-01-01T00:00:00Z");
    std::fs::write(cat.join("OTHER_ROW.yaml"), row("OTHER_ROW", "text")).unwrap();
    repo.commit("second", "2024-01-02T00:00:00Z");

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

/// A change to the bindings is a review item of its own: each credential whose destination
/// changed is named with where it went before and where it may go now, as a warning the
/// pull request shows; a change elsewhere in the file's comments shows nothing.
#[test]
fn a_change_to_the_bindings_is_shown_for_review() {
    let repo = Repo::new();
    let dir = repo.path();
    let cat = repo.catalogue();
    std::fs::write(cat.join("GOOD_ROW.yaml"), row("GOOD_ROW", "text")).unwrap();
    std::fs::write(
        cat.join("bindings.yaml"),
        "credentials:\n  API_TOKEN:\n    origins: [\"https://api.example.com\"]\n",
    )
    .unwrap();
    repo.commit("rows and bindings", "2024-01-01T00:00:00Z");
    std::fs::write(
        cat.join("bindings.yaml"),
        "# reviewed by the owner\ncredentials:\n  API_TOKEN:\n    origins: [\"https://api.example.com\"]\n",
    )
    .unwrap();
    let (ok, out) = capdir(dir, "HEAD");
    assert!(ok && !out.contains("bindings_changed"), "{out}");
    std::fs::write(
        cat.join("bindings.yaml"),
        "credentials:\n  API_TOKEN:\n    origins: [\"https://api.example.com\", \"https://collector.example\"]\n  NEW_TOKEN:\n    origins: [\"https://new.example\"]\n",
    )
    .unwrap();
    let (ok, out) = capdir(dir, "HEAD");
    assert!(ok, "{out}");
    assert!(
        out.contains("warning[bindings_changed]")
            && out.contains("`API_TOKEN` goes to: https://api.example.com → https://api.example.com, https://collector.example"),
        "{out}"
    );
    assert!(
        out.contains("`NEW_TOKEN` goes to: unbound → https://new.example"),
        "{out}"
    );
}
