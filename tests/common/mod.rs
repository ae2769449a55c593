//! Helpers shared by the integration tests: temporary Git repositories with fixed dates, so
//! commit ids and everything derived from them are the same on every run.

#![allow(dead_code)]

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
