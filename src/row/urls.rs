//! Where a row is read and run (the dispatcher's address) and where its history is browsed
//! (the repository's), for the links contracts, pages and answers carry.

use serde::Serialize;

/// Where the dispatcher is, for the URLs a contract names, and where the catalogue's
/// repository is browsed, for links to commits.
#[derive(Debug, Clone, Serialize)]
pub struct Urls {
    pub base: String,
    /// The repository's web address (`https://host/owner/name`), when known.
    pub repo: Option<String>,
}

impl Urls {
    pub fn new(base: &str) -> Urls {
        Urls {
            base: base.trim_end_matches('/').to_string(),
            repo: None,
        }
    }

    /// The same, with commits linked into the repository at `repo`.
    pub fn with_repo(mut self, repo: Option<String>) -> Urls {
        self.repo = repo.map(|r| r.trim_end_matches('/').to_string());
        self
    }

    /// A commit's page in the repository (`/commit/SHA` is the form GitHub, GitLab, Gitea
    /// and Forgejo all answer).
    pub fn commit(&self, sha: &str) -> Option<String> {
        self.repo.as_ref().map(|r| format!("{r}/commit/{sha}"))
    }

    /// Run `key` now with the argument string `ex` (a run-now link).
    pub fn run_now(&self, key: &str, ex: &str) -> String {
        format!("{}/api/dispatch?invoke={key}&body={}", self.base, enc(ex))
    }

    /// The markdown contract of `key`.
    pub fn contract(&self, key: &str) -> String {
        format!("{}/api/dispatch?key={key}&format=markdown", self.base)
    }
}

/// A value percent-encoded for one URL query component.
pub(crate) fn enc(s: &str) -> String {
    percent_encoding::utf8_percent_encode(s, crate::row::template::COMPONENT).to_string()
}
