//! The two addresses a catalogue is reached at, for the links contracts, pages and answers
//! carry: the static site (pages, contracts as files, `llms.txt`, the sitemap, the registry),
//! which any static host can serve, and the dispatcher (run-now, invoke, receipts, confirm),
//! which only `capdir serve` answers. A site published without a dispatcher says so instead
//! of linking an API nobody answers. And where the catalogue's repository is browsed, for
//! links to commits.

use serde::Serialize;

/// Where a catalogue is read, run and browsed.
#[derive(Debug, Clone, Serialize)]
pub struct Urls {
    /// The dispatcher's public address, when the catalogue has one.
    pub dispatcher: Option<String>,
    /// The static site's public address, when known; else the dispatcher's (which serves the
    /// site too), else links to site files stay relative.
    pub site: Option<String>,
    /// The repository's web address (`https://host/owner/name`), when known.
    pub repo: Option<String>,
}

/// An address as given, without its trailing slash; an empty one is none.
fn address(url: &str) -> Option<String> {
    let url = url.trim().trim_end_matches('/');
    (!url.is_empty()).then(|| url.to_string())
}

impl Urls {
    /// The addresses of a catalogue whose dispatcher is at `dispatcher` (none when empty) and
    /// whose site it serves.
    pub fn new(dispatcher: &str) -> Urls {
        Urls {
            dispatcher: address(dispatcher),
            site: None,
            repo: None,
        }
    }

    /// The same, with the site published at `site` (none, or empty: where the dispatcher is).
    pub fn with_site(mut self, site: Option<&str>) -> Urls {
        self.site = site.and_then(address);
        self
    }

    /// The same, with commits linked into the repository at `repo`.
    pub fn with_repo(mut self, repo: Option<String>) -> Urls {
        self.repo = repo.and_then(|r| address(&r));
        self
    }

    /// Where the site's files are: the site's address, else the dispatcher's.
    pub fn site_base(&self) -> Option<&str> {
        self.site.as_deref().or(self.dispatcher.as_deref())
    }

    /// A file of the site (`k/KEY.md`) as a link: absolute when the site's address is known.
    pub fn site_file(&self, path: &str) -> String {
        let mut link = String::new();
        self.push_site_file(&mut link, &[path]);
        link
    }

    /// [`Urls::site_file`] of the path made of `pieces`, written onto the end of `out` (for a
    /// file that holds a link per row: no string is made for each).
    pub fn push_site_file(&self, out: &mut String, pieces: &[&str]) {
        if let Some(base) = self.site_base() {
            out.push_str(base);
            out.push('/');
        }
        for piece in pieces {
            out.push_str(piece);
        }
    }

    /// A commit's page in the repository (`/commit/SHA` is the form GitHub, GitLab, Gitea
    /// and Forgejo all answer).
    pub fn commit(&self, sha: &str) -> Option<String> {
        self.repo.as_ref().map(|r| format!("{r}/commit/{sha}"))
    }

    /// Run `key` now with the argument string `ex` (a run-now link), when there is a
    /// dispatcher.
    pub fn run_now(&self, key: &str, ex: &str) -> Option<String> {
        self.dispatcher.as_deref().map(|d| run_now_url(d, key, ex))
    }

    /// The markdown contract of `key` from the dispatcher, when there is one.
    pub fn contract(&self, key: &str) -> Option<String> {
        self.dispatcher.as_deref().map(|d| contract_url(d, key))
    }
}

/// The run-now link of `key` with the argument string `ex` on the dispatcher at `dispatcher`.
pub fn run_now_url(dispatcher: &str, key: &str, ex: &str) -> String {
    format!("{dispatcher}/api/dispatch?invoke={key}&body={}", enc(ex))
}

/// The markdown contract of `key` on the dispatcher at `dispatcher`.
pub fn contract_url(dispatcher: &str, key: &str) -> String {
    format!("{dispatcher}/api/dispatch?key={key}&format=markdown")
}

/// A value percent-encoded for one URL query component.
pub(crate) fn enc(s: &str) -> String {
    percent_encoding::utf8_percent_encode(s, crate::row::template::COMPONENT).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_site_falls_back_to_the_dispatcher_then_to_relative_links() {
        let both = Urls::new("https://d.example/").with_site(Some("https://s.example/cat/"));
        assert_eq!(both.site_file("k/A.md"), "https://s.example/cat/k/A.md");
        assert_eq!(
            both.run_now("A", "x y").as_deref(),
            Some("https://d.example/api/dispatch?invoke=A&body=x%20y")
        );
        let served = Urls::new("http://127.0.0.1:8080").with_site(Some(""));
        assert_eq!(
            served.site_file("llms.txt"),
            "http://127.0.0.1:8080/llms.txt"
        );
        let static_only = Urls::new("").with_site(None);
        assert_eq!(static_only.dispatcher, None);
        assert_eq!(static_only.site_file("k/A.md"), "k/A.md");
        assert_eq!(static_only.run_now("A", ""), None);
        assert_eq!(static_only.contract("A"), None);
    }
}
