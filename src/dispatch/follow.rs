//! `capdir serve --follow URL`: a dispatcher whose catalogue is a site published on any static
//! host. It polls the site's manifest (`build.json`, with `If-None-Match` where the host gives
//! an ETag), fetches every file whose digest it does not already hold, verifies each against
//! the manifest, and swaps the new build into its site directory in one step; the reloader
//! then serves it. A failed, partial or tampered download never replaces the live build: the
//! staging directory is dropped and the reason goes to the log and to `/metrics`.
//!
//! This is how N dispatchers behind a load balancer stay on one build with no shared disk.
//!
//! With `--trust KEY` the follower also checks who published the build (`build::sign`): the
//! manifest's signature by a trusted key, a build number no lower than the one served
//! (rollback), an expiry not past (freeze, also noticed when the host keeps answering the
//! build already held, or an error). A build that names new keys, signed by a trusted one,
//! hands trust over to them (a rotation); the keys trusted are kept in the data directory
//! (`follow-trust.json`) so a restart keeps them. A build already in the site directory is
//! served at the start only when its kept signature holds and it has not expired. Without
//! `--trust`, digests prove the files match the manifest, not who made it, and the log says so.

use crate::build::manifest::{self, Manifest};
use crate::build::sign::{self, BuildRefusal};
use crate::trust::note::Verifier;
use anyhow::{Context as _, Result, anyhow, bail};
use futures_util::TryStreamExt as _;
use sha2::{Digest, Sha256};
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::Duration;

/// Files fetched at once during one update.
const PARALLEL_FETCHES: usize = 8;

/// What the follower has done, for `/metrics` and the log.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FollowStatus {
    /// The published site followed.
    pub url: String,
    /// The commit of the build now in the site directory.
    pub commit: String,
    /// Unix seconds of the last poll, if any.
    pub last_poll: Option<i64>,
    /// `unchanged`, `updated` or `failed` for the last poll.
    pub last_outcome: &'static str,
    /// Why the last failed poll failed.
    pub last_error: Option<String>,
    pub updates: u64,
    pub failures: u64,
    pub polls: u64,
    /// `signed` when builds are checked against trusted keys, else `integrity-only`.
    pub verification: &'static str,
    /// The build number of the build in place, when it was signed.
    pub number: Option<u64>,
    /// Builds refused for who published them, by reason (`unsigned`, `bad_signature`,
    /// `rollback`, `expired`, `unnumbered`).
    pub refusals: std::collections::BTreeMap<&'static str, u64>,
}

/// How a follower that checks signatures is set up: the key given with `--trust`, and the
/// file (in the data directory, not the site, so it outlives the site and a run without
/// `--trust`) where the keys trusted after a rotation are kept.
pub struct TrustConfig {
    pub root: Verifier,
    pub file: PathBuf,
}

/// What a follower that checks signatures trusts.
#[derive(Debug, serde::Serialize, serde::Deserialize)]
struct Trusted {
    /// The key given with `--trust`: what the operator trusts at the start.
    root: String,
    /// The keys trusted now (the root, or those a rotation handed trust to).
    keys: Vec<String>,
}

impl Trusted {
    /// The keys trusted by a follower started with `--trust root`: those kept in `file` from
    /// a rotation, when they grew from the same root; else the root alone.
    fn load(root: &Verifier, file: &Path) -> Vec<Verifier> {
        let kept = std::fs::read(file)
            .ok()
            .and_then(|b| serde_json::from_slice::<Trusted>(&b).ok())
            .filter(|t| t.root == root.to_string())
            .map(|t| {
                t.keys
                    .iter()
                    .filter_map(|k| Verifier::parse(k).ok())
                    .collect::<Vec<_>>()
            })
            .filter(|keys| !keys.is_empty());
        let keys = kept.unwrap_or_else(|| vec![root.clone()]);
        if !keys.contains(root) {
            tracing::warn!(
                root = %root,
                now = %keys.iter().map(Verifier::to_string).collect::<Vec<_>>().join(" "),
                "follow: the --trust key was rotated out; start with --trust set to a key trusted now, since this record of the rotation is all that keeps the old key out"
            );
        }
        keys
    }
}

/// What one poll did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Polled {
    /// The host had nothing newer.
    Unchanged,
    /// A new build is in place: its commit, and how many files were fetched for it.
    Updated { commit: String, fetched: usize },
}

/// `url` without its user and password: what logs, metrics and answers show of it.
pub fn without_credentials(url: &reqwest::Url) -> reqwest::Url {
    let mut shown = url.clone();
    // Only URLs that cannot have credentials refuse these, and those have none to remove.
    let _ = shown.set_username("");
    let _ = shown.set_password(None);
    shown
}

/// The `user:password@` part of `url` as its text spells it (every URL joined onto it spells it
/// the same), to cut from any text that may quote such a URL (an HTTP client's error does).
fn userinfo(url: &reqwest::Url) -> Option<String> {
    let start = url.as_str().find("://")? + 3;
    let end = start + url.as_str()[start..].find('@')?;
    (url.username() != "" || url.password().is_some())
        .then(|| url.as_str()[start..=end].to_string())
}

/// Follows one published site into one local site directory.
pub struct Follower {
    /// The URL without credentials, for logs and the status.
    shown: reqwest::Url,
    /// The URL's `user:password@`, cut from every error the follower records or logs.
    userinfo: Option<String>,
    base: reqwest::Url,
    site: PathBuf,
    client: reqwest::Client,
    /// The manifest's ETag when it was last fetched whole.
    etag: Mutex<Option<String>>,
    status: Mutex<FollowStatus>,
    /// With `--trust`: the key given, the keys trusted now, and where they are kept.
    trust: Option<(Verifier, Mutex<Vec<Verifier>>, PathBuf)>,
}

/// Why an update failed: who published it (refused), or anything else (the fetch, a digest).
enum Failed {
    Refused(BuildRefusal),
    Other(anyhow::Error),
}

impl From<anyhow::Error> for Failed {
    fn from(e: anyhow::Error) -> Failed {
        Failed::Other(e)
    }
}

impl From<BuildRefusal> for Failed {
    fn from(r: BuildRefusal) -> Failed {
        Failed::Refused(r)
    }
}

impl Follower {
    /// Follow the site published at `url` into `site`; with `trust`, only builds signed by
    /// that key (or keys it handed trust to).
    pub fn new(url: &str, site: &Path, trust: Option<TrustConfig>) -> Result<Follower> {
        let mut text = url.trim().to_string();
        if !text.ends_with('/') {
            text.push('/');
        }
        // Errors name the URL without what it may carry after `//` and before `@`.
        let base = reqwest::Url::parse(&text).context("--follow is not a URL")?;
        if !matches!(base.scheme(), "http" | "https") {
            bail!(
                "--follow takes an http:// or https:// address, not {}:",
                base.scheme()
            );
        }
        let client = crate::invoke::runner::http::client_builder()
            .user_agent(crate::invoke::runner::USER_AGENT)
            .connect_timeout(Duration::from_secs(10))
            .timeout(Duration::from_secs(120))
            .build()
            .context("building the follower's HTTP client")?;
        let held = Manifest::read(site);
        let shown = without_credentials(&base);
        match &trust {
            Some(key) => {
                tracing::info!(url = %shown, key = %key.root, "follow: builds must be signed by a trusted key")
            }
            None => {
                tracing::warn!(url = %shown, "follow: no --trust key, so integrity only: every file is checked against the manifest, but not who published it")
            }
        }
        let trust = trust.map(|t| {
            let keys = Trusted::load(&t.root, &t.file);
            (t.root, Mutex::new(keys), t.file)
        });
        Ok(Follower {
            status: Mutex::new(FollowStatus {
                url: shown.to_string(),
                commit: held.as_ref().map(|m| m.commit.clone()).unwrap_or_default(),
                number: held.as_ref().and_then(|m| m.number),
                last_outcome: "none",
                verification: if trust.is_some() {
                    "signed"
                } else {
                    "integrity-only"
                },
                ..FollowStatus::default()
            }),
            trust,
            userinfo: userinfo(&base),
            shown,
            base,
            site: site.to_path_buf(),
            client,
            etag: Mutex::new(None),
        })
    }

    /// The followed URL as logs and answers may show it (without credentials).
    pub fn shown_url(&self) -> &str {
        self.shown.as_str()
    }

    /// What the follower has done so far.
    pub fn status(&self) -> FollowStatus {
        self.status
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// Poll once: fetch the manifest and, when it describes another build, that build. The
    /// outcome is recorded in the status and logged.
    pub async fn poll(&self) -> Result<Polled> {
        let (result, refused) = match self.update().await {
            Ok(p) => (Ok(p), None),
            Err(Failed::Refused(r)) => (Err(anyhow!("refused: {r}")), Some(r.code())),
            Err(Failed::Other(e)) => (Err(e), None),
        };
        // A build held past its expiry is a freeze whatever the host answered (the same
        // build, an error, nothing at all), unless this poll replaced it.
        let (result, refused) = match (&result, refused) {
            (Ok(Polled::Updated { .. }), _) | (_, Some(_)) => (result, refused),
            _ => match self.held_expired(Manifest::read(&self.site).as_ref()) {
                Err(r) => (Err(anyhow!("refused: {r}")), Some(r.code())),
                Ok(()) => (result, None),
            },
        };
        // An error may quote the URL it fetched, credentials and all: cut them before the
        // error is recorded, logged or returned.
        let result = result.map_err(|e| {
            let mut error = format!("{e:#}");
            if let Some(userinfo) = &self.userinfo {
                error = error.replace(userinfo.as_str(), "");
            }
            anyhow::anyhow!(error)
        });
        let mut status = self.status.lock().unwrap_or_else(|p| p.into_inner());
        status.polls += 1;
        status.last_poll = Some(chrono::Utc::now().timestamp());
        if let Some(code) = refused {
            *status.refusals.entry(code).or_default() += 1;
        }
        match &result {
            Ok(Polled::Unchanged) => status.last_outcome = "unchanged",
            Ok(Polled::Updated { commit, fetched }) => {
                status.last_outcome = "updated";
                status.updates += 1;
                status.commit = commit.clone();
                status.number = Manifest::read(&self.site).and_then(|m| m.number);
                status.last_error = None;
                tracing::info!(commit = %commit, fetched, url = %self.shown, "followed a new build");
            }
            Err(e) => {
                status.last_outcome = "failed";
                status.failures += 1;
                let error = format!("{e:#}");
                tracing::warn!(error = %error, url = %self.shown, "follow: the live build stays");
                status.last_error = Some(error);
            }
        }
        result
    }

    /// The published signature, when the follower checks them: `None` when the host has
    /// none (404).
    async fn signature(&self) -> Result<Option<String>> {
        let url = self.base.join(manifest::SIG_FILE)?;
        let Some(response) = self.get(&url, true).await? else {
            return Ok(None);
        };
        let bytes = read_at_most(response, crate::trust::note::MAX_NOTE_BYTES as u64)
            .await
            .with_context(|| format!("reading {url}"))?;
        Ok(Some(String::from_utf8_lossy(&bytes).into_owned()))
    }

    /// A successful answer to a GET of `url`; `None` for a 404 when `missing_ok`.
    async fn get(&self, url: &reqwest::Url, missing_ok: bool) -> Result<Option<reqwest::Response>> {
        let response = self
            .client
            .get(url.clone())
            .send()
            .await
            .with_context(|| format!("fetching {url}"))?;
        if missing_ok && response.status() == reqwest::StatusCode::NOT_FOUND {
            return Ok(None);
        }
        if !response.status().is_success() {
            bail!("{url} answered {}", response.status());
        }
        Ok(Some(response))
    }

    /// The build held is past its expiry: whatever the host answers, say so (a freeze).
    fn held_expired(&self, held: Option<&Manifest>) -> Result<(), BuildRefusal> {
        if self.trust.is_none() {
            return Ok(());
        }
        match held {
            Some(h) => sign::admit(h, None, chrono::Utc::now().timestamp()),
            None => Ok(()),
        }
    }

    /// The build held in the site directory, when the follower may count on it: any build
    /// without `--trust`; with it, only one whose kept signature a trusted key made and
    /// that has not expired (a site left by a run without `--trust`, or by another key, is
    /// not one this follower vouches for).
    pub fn held(&self) -> Option<Manifest> {
        let bytes = std::fs::read(self.site.join(manifest::FILE)).ok()?;
        let held = Manifest::parse(&bytes).ok()?;
        let Some((_, keys, _)) = &self.trust else {
            return Some(held);
        };
        let signature = std::fs::read_to_string(self.site.join(manifest::SIG_FILE)).ok();
        let keys = keys.lock().unwrap_or_else(|p| p.into_inner()).clone();
        let checked = sign::verify(&bytes, signature.as_deref(), &keys)
            .and_then(|_| sign::admit(&held, None, chrono::Utc::now().timestamp()));
        match checked {
            Ok(()) => Some(held),
            Err(why) => {
                tracing::warn!(site = %self.site.display(), why = %why, "follow: the build held is not one a trusted key vouches for; it is not served");
                None
            }
        }
    }

    async fn update(&self) -> Result<Polled, Failed> {
        let url = self
            .base
            .join(manifest::FILE)
            .map_err(anyhow::Error::from)?;
        let mut request = self.client.get(url.clone());
        let known_etag = self.etag.lock().unwrap_or_else(|p| p.into_inner()).clone();
        if let Some(etag) = &known_etag {
            request = request.header(reqwest::header::IF_NONE_MATCH, etag);
        }
        let response = request
            .send()
            .await
            .with_context(|| format!("fetching {url}"))?;
        let held = self.held();
        if response.status() == reqwest::StatusCode::NOT_MODIFIED {
            self.held_expired(held.as_ref())?;
            return Ok(Polled::Unchanged);
        }
        if !response.status().is_success() {
            return Err(anyhow!("{url} answered {}", response.status()).into());
        }
        let etag = response
            .headers()
            .get(reqwest::header::ETAG)
            .and_then(|v| v.to_str().ok())
            .map(str::to_string);
        let bytes = read_at_most(response, manifest::MAX_BYTES as u64)
            .await
            .with_context(|| format!("reading {url}"))?;
        // Who published it is checked before anything the manifest names is fetched.
        let signature = match &self.trust {
            Some((_, keys, _)) => {
                let signature = self.signature().await?;
                let keys = keys.lock().unwrap_or_else(|p| p.into_inner()).clone();
                sign::verify(&bytes, signature.as_deref(), &keys)?;
                signature
            }
            None => None,
        };
        let wanted = Manifest::parse(&bytes).with_context(|| format!("reading {url}"))?;
        if self.trust.is_some() {
            sign::admit(&wanted, held.as_ref(), chrono::Utc::now().timestamp())?;
        }
        if held.as_ref() == Some(&wanted) {
            *self.etag.lock().unwrap_or_else(|p| p.into_inner()) = etag;
            return Ok(Polled::Unchanged);
        }
        let fetched = self
            .install(&wanted, held.as_ref(), &bytes, signature.as_deref())
            .await?;
        self.adopt_keys(&wanted);
        // Only a manifest whose build is in place is remembered as seen.
        *self.etag.lock().unwrap_or_else(|p| p.into_inner()) = etag;
        Ok(Polled::Updated {
            commit: wanted.commit,
            fetched,
        })
    }

    /// The keys trusted once `wanted` is in place: those it names (a rotation signed by a key
    /// trusted now), else the same; and how they are kept beside the site.
    fn trusted_after(&self, wanted: &Manifest) -> Option<(Trusted, Vec<Verifier>)> {
        let (root, keys, _) = self.trust.as_ref()?;
        let named: Vec<Verifier> = wanted
            .keys
            .iter()
            .filter_map(|k| Verifier::parse(k).ok())
            .collect();
        let keys = match named.is_empty() {
            true => keys.lock().unwrap_or_else(|p| p.into_inner()).clone(),
            false => named,
        };
        let kept = Trusted {
            root: root.to_string(),
            keys: keys.iter().map(Verifier::to_string).collect(),
        };
        Some((kept, keys))
    }

    /// Trust what the build now in place names, and keep it where a restart finds it.
    fn adopt_keys(&self, wanted: &Manifest) {
        if let (Some((kept, now)), Some((_, keys, file))) =
            (self.trusted_after(wanted), &self.trust)
        {
            let written = serde_json::to_vec(&kept)
                .map_err(anyhow::Error::from)
                .and_then(|bytes| {
                    if let Some(dir) = file.parent() {
                        std::fs::create_dir_all(dir)?;
                    }
                    Ok(crate::atomic::write(file, &bytes)?)
                });
            if let Err(e) = written {
                tracing::error!(error = %format!("{e:#}"), file = %file.display(), "follow: the keys trusted could not be kept; a restart would trust the --trust key alone");
            }
            let mut held = keys.lock().unwrap_or_else(|p| p.into_inner());
            if *held != now {
                tracing::info!(
                    keys = %now.iter().map(Verifier::to_string).collect::<Vec<_>>().join(" "),
                    "follow: the build hands trust over to new keys"
                );
                *held = now;
            }
        }
    }

    /// Stage the build `wanted` beside the site (files already held are linked, the rest
    /// fetched and verified), then swap it in. Returns how many files were fetched.
    async fn install(
        &self,
        wanted: &Manifest,
        held: Option<&Manifest>,
        raw: &[u8],
        signature: Option<&str>,
    ) -> Result<usize> {
        let stage = crate::atomic::dir_beside(&self.site)?;
        let result = self.stage(&stage, wanted, held).await.and_then(|fetched| {
            std::fs::write(stage.join(manifest::FILE), raw)?;
            if let Some(signature) = signature {
                std::fs::write(stage.join(manifest::SIG_FILE), signature)?;
            }
            crate::atomic::swap_dir(&stage, &self.site)?;
            Ok(fetched)
        });
        if result.is_err() {
            let _ = std::fs::remove_dir_all(&stage);
        }
        result
    }

    async fn stage(
        &self,
        stage: &Path,
        wanted: &Manifest,
        held: Option<&Manifest>,
    ) -> Result<usize> {
        let held = held.map(Manifest::by_path).unwrap_or_default();
        let mut missing = Vec::new();
        for entry in &wanted.files {
            let target = stage.join(&entry.path);
            if let Some(dir) = target.parent() {
                std::fs::create_dir_all(dir)?;
            }
            // A file the live build holds with the same digest was verified when it came.
            let same = held
                .get(entry.path.as_str())
                .is_some_and(|h| h.sha256 == entry.sha256 && h.size == entry.size);
            if same && std::fs::hard_link(self.site.join(&entry.path), &target).is_ok() {
                continue;
            }
            missing.push(entry);
        }
        let fetched = missing.len();
        futures_util::stream::iter(missing.into_iter().map(Ok::<_, anyhow::Error>))
            .try_for_each_concurrent(PARALLEL_FETCHES, |entry| async move {
                self.fetch(entry, &stage.join(&entry.path)).await
            })
            .await?;
        Ok(fetched)
    }

    /// Fetch one file, refusing it unless its size and SHA-256 are the manifest's.
    async fn fetch(&self, entry: &manifest::Entry, target: &Path) -> Result<()> {
        let url = self.base.join(&entry.path)?;
        let response = self
            .get(&url, false)
            .await?
            .ok_or_else(|| anyhow!("{url} answered nothing"))?;
        let bytes = read_at_most(response, entry.size).await.with_context(|| {
            format!(
                "{}: larger than the {} bytes the manifest says",
                entry.path, entry.size
            )
        })?;
        if bytes.len() as u64 != entry.size {
            bail!(
                "{}: refused: {} bytes where the manifest says {}",
                entry.path,
                bytes.len(),
                entry.size
            );
        }
        let digest = hex::encode(Sha256::digest(&bytes));
        if digest != entry.sha256 {
            bail!(
                "{}: refused: its SHA-256 is {digest}, the manifest says {}",
                entry.path,
                entry.sha256
            );
        }
        tokio::fs::write(target, &bytes)
            .await
            .with_context(|| format!("writing {}", target.display()))
    }
}

/// A response body, refused when it runs past `limit` bytes.
async fn read_at_most(mut response: reqwest::Response, limit: u64) -> Result<Vec<u8>> {
    let mut body = Vec::new();
    while let Some(chunk) = response.chunk().await? {
        if body.len() as u64 + chunk.len() as u64 > limit {
            return Err(anyhow!("the answer runs past {limit} bytes"));
        }
        body.extend_from_slice(&chunk);
    }
    Ok(body)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A followed URL's credentials never reach the status (so `/metrics`), the log or the
    /// error a failed poll returns; the fetch itself still sends them.
    #[tokio::test]
    async fn credentials_in_the_followed_url_are_never_shown() {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("a port")
            .port();
        let site = std::env::temp_dir().join(format!("capdir-follow-{port}"));
        let url = format!("http://reader:s3cr3t-pass@127.0.0.1:{port}/site/");
        let follower = Follower::new(&url, &site, None).expect("follower");
        assert_eq!(
            follower.shown_url(),
            format!("http://127.0.0.1:{port}/site/")
        );
        let e = follower.poll().await.expect_err("nothing listens");
        let status = follower.status();
        for text in [
            format!("{e:#}"),
            status.url.clone(),
            status.last_error.unwrap_or_default(),
        ] {
            assert!(
                !text.contains("s3cr3t-pass") && !text.contains("reader"),
                "{text}"
            );
        }
        assert_eq!(
            userinfo(&follower.base).as_deref(),
            Some("reader:s3cr3t-pass@")
        );
    }
}
