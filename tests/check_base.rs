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

/// `capdir check --base` on a copy of the bundled catalogue, `edit` applied to it: the
/// success, the text output and the GitHub annotations.
fn review(edit: impl FnOnce(&Path)) -> (bool, String, String) {
    let repo = Repo::new();
    let bundled = Path::new(env!("CARGO_MANIFEST_DIR")).join("catalogue");
    for entry in std::fs::read_dir(&bundled).unwrap() {
        let entry = entry.unwrap();
        std::fs::copy(entry.path(), repo.catalogue().join(entry.file_name())).unwrap();
    }
    repo.commit("the bundled catalogue", "2024-01-01T00:00:00Z");
    edit(&repo.catalogue());
    let (ok, text) = capdir(repo.path(), "HEAD");
    let github = Command::new(env!("CARGO_BIN_EXE_capdir"))
        .args(["check", "catalogue", "--base", "HEAD", "--format", "github"])
        .current_dir(repo.path())
        .env_remove("GITHUB_STEP_SUMMARY")
        .output()
        .unwrap();
    (
        ok,
        text,
        String::from_utf8_lossy(&github.stdout).into_owned(),
    )
}

fn rewrite(cat: &Path, file: &str, from: &str, to: &str) {
    let path = cat.join(file);
    let text = std::fs::read_to_string(&path).unwrap();
    assert!(text.contains(from), "{file} has no {from:?}");
    std::fs::write(path, text.replacen(from, to, 1)).unwrap();
}

/// The notices of a check's text output, one line each.
fn notices(out: &str) -> Vec<&str> {
    out.lines()
        .filter(|l| l.contains(": notice[callable_change]"))
        .collect()
}

#[test]
fn a_changed_target_is_shown_on_the_row_and_on_the_flow_that_calls_it() {
    let (ok, out, github) = review(|cat| {
        rewrite(
            cat,
            "GITHUB_REPO_INFO.yaml",
            "GET https://api.github.com/repos/$1/$2",
            "GET https://collector.example/repos/$1/$2",
        )
    });
    assert!(ok, "a notice fails nothing: {out}");
    let found = notices(&out);
    assert_eq!(found.len(), 2, "{out}");
    assert!(
        out.contains("GITHUB_REPO_INFO.yaml:4:")
            && out.contains("target `GET https://api.github.com/repos/$1/$2` → `GET https://collector.example/repos/$1/$2`"),
        "{out}"
    );
    assert!(
        out.contains(
            "GITHUB_REPO_STARS calls differently: the rows it calls changed: GITHUB_REPO_INFO"
        ),
        "{out}"
    );
    assert!(out.contains("callable changes to review"), "{out}");
    assert!(
        github.contains("::notice file=catalogue/GITHUB_REPO_INFO.yaml,line=4"),
        "{github}"
    );
}

#[test]
fn a_new_credential_is_shown_with_where_its_secret_may_go() {
    let (ok, out, _) = review(|cat| {
        rewrite(
            cat,
            "GITHUB_REPO_INFO.yaml",
            "category: github",
            "auth: bearer:GITHUB_TOKEN\ncategory: github",
        );
        rewrite(
            cat,
            "bindings.yaml",
            "keys: [GITHUB_CREATE_ISSUE]",
            "keys: [GITHUB_CREATE_ISSUE, GITHUB_REPO_INFO]",
        );
    });
    assert!(ok, "{out}");
    assert!(
        out.contains("credential `` → `bearer:GITHUB_TOKEN`")
            && out.contains(
                "its secret may go to no credential → GITHUB_TOKEN → https://api.github.com"
            ),
        "{out}"
    );
}

#[test]
fn a_changed_step_and_schema_are_named_and_a_docstring_edit_shows_nothing() {
    let (_, out, _) = review(|cat| {
        rewrite(
            cat,
            "HASH_AND_TIMESTAMP.yaml",
            "ECHO: sha256=$DIGEST at=$STAMP text=$1",
            "ECHO: sha256=$DIGEST at=$STAMP",
        );
        rewrite(
            cat,
            "GITHUB_REPO_INFO.yaml",
            "required: [owner, repo]",
            "required: [owner]",
        );
    });
    assert!(
        out.contains("the flow's steps changed:\n") || out.contains("the flow's steps changed:"),
        "{out}"
    );
    assert!(
        out.contains("+ SHA256: $1 => DIGEST > NOW: now => STAMP > ECHO: sha256=$DIGEST at=$STAMP"),
        "{out}"
    );
    assert!(out.contains("input schema constraints changed"), "{out}");
    // Only the docstring, the examples and the asks: no callable change.
    let (ok, out, github) = review(|cat| {
        rewrite(cat, "ECHO.yaml", "# WHAT: ", "# WHAT: (Reworded.) ");
        rewrite(cat, "GITHUB_REPO_INFO.yaml", "  - tokio-rs|axum\n", "");
    });
    assert!(ok, "{out}");
    assert!(notices(&out).is_empty(), "{out}");
    assert!(!github.contains("callable_change"), "{github}");
}
