//! The ledger: every invocation's receipt, durable before its caller hears the answer, chained
//! by SHA-256 so that editing or deleting one shows (DESIGN.md §7).
//!
//! Two backends stand behind one `Ledger` trait and pass one test suite (tests/ledger.rs):
//! SQLite, the embedded default for one dispatcher, and PostgreSQL, for several dispatchers
//! sharing one chain. Both append by group commit: one writer per process takes every receipt
//! queued meanwhile and commits them in one transaction. What differs is how the chain stays
//! one chain when several writers append: SQLite takes its write lock at the start of the
//! transaction, PostgreSQL an advisory lock; both read the last link only once they hold it.

pub mod postgres;
pub mod sqlite;
pub mod tlog;
pub mod watch;

use crate::access::token::Claims;
use crate::access::watch::Counter;
use crate::invoke::breaker::{Breaker, BreakerPolicy, BreakerStore};
use anyhow::{Result, bail};
use futures_util::future::BoxFuture;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use tokio::sync::oneshot;

pub use sqlite::{SqliteLedger, get, parse_url, verify};

/// A receipt with the receipts of the calls it made, nested (a flow and its steps).
#[derive(Debug, Clone, Serialize)]
pub struct Node {
    #[serde(flatten)]
    pub receipt: Receipt,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub children: Vec<Node>,
    /// The receipts of the calls that repaired this one (filled for the receipt asked about).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub repaired_by: Vec<String>,
}

/// The tree under `top` from the receipts of its whole tree (`Ledger::tree` of its root).
pub fn nest(top: Receipt, below: &[Receipt]) -> Node {
    let children = below
        .iter()
        .filter(|r| r.draft.parent.as_deref() == Some(top.draft.id.as_str()))
        .map(|r| nest(r.clone(), below))
        .collect();
    Node {
        receipt: top,
        children,
        repaired_by: Vec::new(),
    }
}

/// What an invocation hands the ledger; the ledger adds the id's place in the chain.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Draft {
    pub id: String,
    pub key: String,
    pub actor: String,
    pub runner: String,
    pub trace_id: String,
    pub started_at: String,
    pub finished_at: String,
    pub status: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error_code: Option<String>,
    pub cost_usd: Option<f64>,
    pub input_sha256: String,
    pub output_sha256: String,
    pub contract_sha256: String,
    pub catalogue_commit: String,
    pub repairs: Option<String>,
    /// The receipt of the call that made this one (a flow's step); none at the top.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parent: Option<String>,
    /// The receipt at the top of this call's tree; none at the top.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub root: Option<String>,
    /// The input with credentials redacted.
    pub input: String,
    /// The output with credentials redacted.
    pub output: String,
}

/// A committed receipt: the draft, its place in the chain and the chain's hashes.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Receipt {
    pub seq: i64,
    #[serde(flatten)]
    pub draft: Draft,
    pub prev_hash: String,
    pub hash: String,
}

/// SHA-256 of text, hex.
pub fn sha256_hex(text: &str) -> String {
    hex::encode(Sha256::digest(text.as_bytes()))
}

/// A new receipt id: `inv_`, the time in milliseconds (12 hex digits) and a UUIDv4 without
/// dashes. Starting with the time, ids made one after another sort together and the id index
/// grows at its right edge (one page touched per commit rather than one per receipt); 122
/// random bits keep it unguessable: the keyless confirm answers anyone who knows an id.
pub fn new_id() -> String {
    // A UUIDv7's random part ran on a counter here: consecutive ids differed in 32 bits.
    let millis = chrono::Utc::now().timestamp_millis().max(0);
    format!("inv_{millis:012x}{}", uuid::Uuid::new_v4().simple())
}

/// The hash of a receipt: SHA-256 over the previous hash and the receipt's canonical JSON,
/// `seq` first, then the draft's fields in declaration order (the hashes left out). `body` is
/// the draft's JSON as `serde_json::to_string` writes it (and the ledger stores it): the
/// canonical form is that object with `"seq":N,` put first, so the writer hashes without
/// serialising again.
fn chain_hash_body(prev_hash: &str, seq: i64, body: &str) -> String {
    let fields = body.strip_prefix('{').unwrap_or(body);
    let mut h = Sha256::new();
    h.update(prev_hash.as_bytes());
    h.update(format!("{{\"seq\":{seq},").as_bytes());
    h.update(fields.as_bytes());
    hex::encode(h.finalize())
}

/// Does a receipt's `hash` hold for its contents and `prev_hash`? (What an outside verifier
/// asks of a receipt it was handed, with no ledger to walk.)
pub fn hash_holds(receipt: &Receipt) -> bool {
    serde_json::to_string(&receipt.draft)
        .is_ok_and(|body| chain_hash_body(&receipt.prev_hash, receipt.seq, &body) == receipt.hash)
}

/// The hash the first receipt chains from.
pub const GENESIS: &str = "0000000000000000000000000000000000000000000000000000000000000000";

/// One link of the chain as committed: `seq`, `prev_hash`, `hash`.
type Link = (i64, String, String);

/// Chain a batch onto the last link `(seq, hash)` (`(0, GENESIS)` when empty). Both backends
/// call this while holding their append lock.
fn link(last: (i64, String), jobs: &[Job]) -> Vec<Link> {
    let (mut seq, mut prev) = last;
    let mut out = Vec::with_capacity(entries(jobs).count());
    for entry in entries(jobs) {
        seq += 1;
        let hash = chain_hash_body(&prev, seq, &entry.body);
        let prev_hash = std::mem::replace(&mut prev, hash.clone());
        out.push((seq, prev_hash, hash));
    }
    out
}

/// A stored body back into a receipt.
fn row_to_receipt(seq: i64, body: &str, prev_hash: String, hash: String) -> Result<Receipt> {
    let draft: Draft = serde_json::from_str(body)
        .map_err(|e| anyhow::anyhow!("receipt {seq}: the stored body is not a receipt: {e}"))?;
    Ok(Receipt {
        seq,
        draft,
        prev_hash,
        hash,
    })
}

/// A capability token the ledger knows of: minted here (its claims, never the token
/// itself), revoked, or both. A token minted against another ledger can still be revoked
/// here by id; it then has no claims.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TokenEntry {
    pub id: String,
    pub claims: Option<Claims>,
    /// RFC 3339, when recorded by `capdir token mint`.
    pub minted_at: Option<String>,
    /// RFC 3339, when revoked.
    pub revoked_at: Option<String>,
}

/// Now, as token records store it.
fn now_rfc3339() -> String {
    chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
}

/// A stored token row back into an entry.
fn token_entry(
    id: String,
    claims: Option<String>,
    minted_at: Option<String>,
    revoked_at: Option<String>,
) -> Result<TokenEntry> {
    let claims = claims
        .map(|c| serde_json::from_str(&c))
        .transpose()
        .map_err(|e| anyhow::anyhow!("token {id}: the stored claims cannot be read: {e}"))?;
    Ok(TokenEntry {
        id,
        claims,
        minted_at,
        revoked_at,
    })
}

/// Where receipts live, and the record of capability tokens (revocations must be seen by
/// every dispatcher that shares the ledger, so they live beside the receipts).
pub trait Ledger: Send + Sync {
    /// Queue the receipts at once, one after another in the chain (receipts take their places
    /// in the order they were appended; a call and the calls it made stay together) and
    /// return a future that resolves, with their places in the chain, once all are durable.
    fn append_all(&self, drafts: Vec<Draft>) -> BoxFuture<'static, Result<Vec<Receipt>>>;
    /// Queue one receipt at once; resolves with its place in the chain once it is durable.
    fn append(&self, draft: Draft) -> BoxFuture<'static, Result<Receipt>> {
        let all = self.append_all(vec![draft]);
        Box::pin(async move {
            all.await?
                .pop()
                .ok_or_else(|| anyhow::anyhow!("the ledger answered no receipt"))
        })
    }
    /// One receipt by id.
    fn get<'a>(&'a self, id: &'a str) -> BoxFuture<'a, Result<Option<Receipt>>>;
    /// The receipts below the top-level call `root` (its steps, theirs…), in chain order.
    fn tree<'a>(&'a self, root: &'a str) -> BoxFuture<'a, Result<Vec<Receipt>>>;
    /// The ids of the receipts that repaired `id` (that name it in `repairs`), in chain order.
    fn repaired_by<'a>(&'a self, id: &'a str) -> BoxFuture<'a, Result<Vec<String>>>;
    /// Walk the whole chain from the first receipt; stop at the first broken link.
    fn verify(&self) -> BoxFuture<'_, Result<Verdict>>;
    /// Commits so far and their total time in seconds (for `/metrics`).
    fn commit_stats(&self) -> (u64, f64);
    /// The durability setting of the connection receipts are committed on, as read back from
    /// it (`synchronous=full`, `synchronous_commit=on`); none before the writer has started.
    fn durability(&self) -> Option<String>;
    /// How many receipts the Merkle tree covers (every committed receipt: the tree's nodes
    /// are committed with them).
    fn tree_size(&self) -> BoxFuture<'_, Result<u64>>;
    /// The stored tree nodes at these `(level, index)` coordinates (those it has).
    fn tree_nodes<'a>(&'a self, wanted: &'a [(u32, u64)]) -> BoxFuture<'a, Result<tlog::Nodes>>;
    /// Keep a signed checkpoint of the tree at `size` (a second one of the same size is
    /// ignored: the first stays).
    fn record_checkpoint<'a>(&'a self, size: u64, note: &'a str) -> BoxFuture<'a, Result<()>>;
    /// A kept checkpoint: of the tree at `size`, or the latest when none is named.
    fn checkpoint(&self, size: Option<u64>) -> BoxFuture<'_, Result<Option<(u64, String)>>>;
    /// Remember a minted token's claims under its id (for `capdir token list`). Recording
    /// the same id again changes nothing.
    fn record_token<'a>(&'a self, claims: &'a Claims) -> BoxFuture<'a, Result<()>>;
    /// Revoke a token by id, known here or not. True when this call revoked it; false when
    /// it was revoked already. Revocation is permanent.
    fn revoke<'a>(&'a self, id: &'a str) -> BoxFuture<'a, Result<bool>>;
    /// Has this token id been revoked? Asked on every invocation a token makes, so it must be
    /// a cheap indexed lookup.
    fn is_revoked<'a>(&'a self, id: &'a str) -> BoxFuture<'a, Result<bool>>;
    /// Every token recorded or revoked, in the order they were first seen.
    fn tokens(&self) -> BoxFuture<'_, Result<Vec<TokenEntry>>>;
    /// Keep a call that waits for a person's approval.
    fn queue_approval<'a>(&'a self, pending: &'a watch::Pending) -> BoxFuture<'a, Result<()>>;
    /// One approval by id, as it stands at `now` (a pending one past its expiry reads as
    /// expired).
    fn approval<'a>(
        &'a self,
        id: &'a str,
        now: i64,
    ) -> BoxFuture<'a, Result<Option<watch::Approval>>>;
    /// The approvals still pending at `now`, oldest first.
    fn pending_approvals(&self, now: i64) -> BoxFuture<'_, Result<Vec<watch::Approval>>>;
    /// Decide a pending approval not yet expired at `now`: true when this call decided it,
    /// false when it was decided already or expired (only one decider ever wins).
    fn decide<'a>(
        &'a self,
        id: &'a str,
        decision: &'a watch::Decision,
        now: i64,
    ) -> BoxFuture<'a, Result<bool>>;
    /// The answer of an approved call's run, once its receipt is durable.
    fn record_result<'a>(
        &'a self,
        id: &'a str,
        result: &'a serde_json::Value,
    ) -> BoxFuture<'a, Result<()>>;
    /// Charge a token's counters for one call, all or none: `Some((index, count))` names
    /// the first counter past its limit (and nothing was charged).
    fn charge<'a>(
        &'a self,
        token: &'a str,
        counters: &'a [Counter],
        now: i64,
    ) -> BoxFuture<'a, Result<Option<(usize, u64)>>>;
    /// Add to a token's counters whatever their limits (what a call's nested calls and its
    /// models spent, known once it ended).
    fn add_to_counters<'a>(
        &'a self,
        token: &'a str,
        counters: &'a [Counter],
        now: i64,
    ) -> BoxFuture<'a, Result<()>>;
}

/// What `verify` found.
#[derive(Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Every link holds.
    Intact { receipts: u64 },
    /// The first receipt whose link does not hold, and why.
    Broken { seq: i64, id: String, why: String },
}

/// The chain check both backends run over their rows, fed in `seq` order.
struct Walk {
    prev: String,
    expected_seq: i64,
    count: u64,
    /// The Merkle tree over the receipts walked: each row's kept nodes must be the ones its
    /// leaf completes.
    tree: crate::trust::merkle::Frontier,
}

impl Walk {
    fn new() -> Walk {
        Walk {
            prev: GENESIS.to_string(),
            expected_seq: 1,
            count: 0,
            tree: crate::trust::merkle::Frontier::default(),
        }
    }

    /// Check one stored row; `Some` is the first broken link. `nodes` is the tree nodes the
    /// row keeps.
    fn step(
        &mut self,
        seq: i64,
        id: &str,
        body: &str,
        prev_hash: &str,
        hash: &str,
        nodes: Option<&[u8]>,
    ) -> Result<Option<Verdict>> {
        let broken = |why: String| {
            Some(Verdict::Broken {
                seq,
                id: id.to_string(),
                why,
            })
        };
        if seq != self.expected_seq {
            return Ok(broken(format!(
                "expected receipt {} here: a receipt is missing",
                self.expected_seq
            )));
        }
        if prev_hash != self.prev {
            return Ok(broken(
                "prev_hash does not match the previous receipt's hash".into(),
            ));
        }
        let draft: Draft = match serde_json::from_str(body) {
            Ok(d) => d,
            Err(e) => return Ok(broken(format!("the body is not a receipt: {e}"))),
        };
        if draft.id != id {
            return Ok(broken(format!("the body names another id, {}", draft.id)));
        }
        if chain_hash_body(&self.prev, seq, body) != hash {
            return Ok(broken(
                "the hash does not match the receipt: it was edited".into(),
            ));
        }
        self.prev = hash.to_string();
        self.expected_seq += 1;
        self.count += 1;
        // The leaf is the receipt's hash, checked above; the row keeps the nodes it completes.
        let made = tlog::row_nodes(&self.tree.push(tlog::leaf(hash)?));
        match nodes {
            Some(kept) if kept == made => Ok(None),
            Some(_) => Ok(broken(
                "the Merkle tree nodes this receipt keeps are not the ones the receipts make: they were changed".into(),
            )),
            None => Ok(broken(
                "this receipt keeps no Merkle tree nodes yet: serve the ledger once with this capdir, which makes them, then verify".into(),
            )),
        }
    }

    /// Every link held, and every row kept its tree nodes.
    fn finish(self) -> Verdict {
        Verdict::Intact {
            receipts: self.count,
        }
    }
}

/// One receipt waiting for the writer: the draft and its JSON, made by the caller so the one
/// writer does not.
struct Entry {
    draft: Draft,
    body: String,
}

/// Receipts appended together (a call and every call it made: one message and one answer for
/// the tree), and where to send their answer.
struct Job {
    entries: Vec<Entry>,
    answer: oneshot::Sender<Answer>,
}

/// The writer's answer to a job: its receipts, or why the batch failed.
type Answer = Result<Vec<Receipt>, String>;

impl Job {
    fn new(drafts: Vec<Draft>) -> Result<(Job, oneshot::Receiver<Answer>)> {
        let entries = drafts
            .into_iter()
            .map(|draft| {
                // Sized once: the fixed fields take under 700 bytes, the input and output the
                // rest.
                let mut buf = Vec::with_capacity(768 + draft.input.len() + draft.output.len());
                serde_json::to_writer(&mut buf, &draft)?;
                Ok(Entry {
                    draft,
                    body: String::from_utf8(buf)?,
                })
            })
            .collect::<Result<_>>()?;
        let (answer, rx) = oneshot::channel();
        Ok((Job { entries, answer }, rx))
    }
}

/// Every receipt of a batch, in chain order.
fn entries(jobs: &[Job]) -> impl Iterator<Item = &Entry> {
    jobs.iter().flat_map(|job| &job.entries)
}

/// The most receipts one transaction takes; more wait for the next (a job is never split).
const MAX_BATCH: usize = 4096;

/// The jobs of one batch: `first` and whatever queued meanwhile, up to `MAX_BATCH` receipts.
fn batch(first: Job, rx: &mut tokio::sync::mpsc::UnboundedReceiver<Job>) -> Vec<Job> {
    let mut count = first.entries.len();
    let mut jobs = vec![first];
    while count < MAX_BATCH
        && let Ok(more) = rx.try_recv()
    {
        count += more.entries.len();
        jobs.push(more);
    }
    jobs
}

/// Send `drafts` to a backend's writer now (not when first polled: the order of appends is
/// the order in the chain); the future resolves once they are durable.
fn queue(
    jobs: &tokio::sync::mpsc::UnboundedSender<Job>,
    drafts: Vec<Draft>,
) -> BoxFuture<'static, Result<Vec<Receipt>>> {
    if drafts.is_empty() {
        return Box::pin(async { Ok(Vec::new()) });
    }
    let sent = Job::new(drafts).and_then(|(job, rx)| {
        jobs.send(job)
            .map_err(|_| anyhow::anyhow!("the ledger writer has stopped"))?;
        Ok(rx)
    });
    Box::pin(async move { answered(sent?).await })
}

async fn answered(rx: oneshot::Receiver<Answer>) -> Result<Vec<Receipt>> {
    match rx.await {
        Ok(Ok(receipts)) => Ok(receipts),
        Ok(Err(e)) => bail!("the ledger could not commit: {e}"),
        Err(_) => bail!("the ledger writer has stopped"),
    }
}

/// Commit counts and time, and how durable the writer's own connection commits, for
/// `/metrics`.
#[derive(Default)]
struct Stats {
    commits: AtomicU64,
    micros: AtomicU64,
    /// Set by the writer from its own connection when it starts (`synchronous=full`).
    durability: std::sync::OnceLock<String>,
}

impl Stats {
    fn add(&self, took: std::time::Duration) {
        self.commits.fetch_add(1, Ordering::Relaxed);
        self.micros
            .fetch_add(took.as_micros() as u64, Ordering::Relaxed);
    }

    fn read(&self) -> (u64, f64) {
        (
            self.commits.load(Ordering::Relaxed),
            self.micros.load(Ordering::Relaxed) as f64 / 1e6,
        )
    }
}

/// Answer every job of a batch with its receipt, or all of them with the batch's error.
fn answer_all(jobs: Vec<Job>, result: Result<Vec<Link>>) {
    match result {
        Ok(links) => {
            let mut links = links.into_iter();
            for job in jobs {
                let receipts = job
                    .entries
                    .into_iter()
                    .zip(links.by_ref())
                    .map(|(entry, (seq, prev_hash, hash))| Receipt {
                        seq,
                        draft: entry.draft,
                        prev_hash,
                        hash,
                    })
                    .collect();
                let _ = job.answer.send(Ok(receipts));
            }
        }
        Err(e) => {
            let receipts = entries(&jobs).count();
            tracing::error!(error = %format!("{e:#}"), receipts, "ledger commit failed");
            for job in jobs {
                let _ = job.answer.send(Err(format!("{e:#}")));
            }
        }
    }
}

/// Where the ledger lives, from `--ledger`: `sqlite:PATH` (or a bare path) or
/// `postgres://user:password@host:port/database` (`postgresql://` too).
#[derive(Clone)]
pub enum Location {
    Sqlite(PathBuf),
    Postgres(Box<postgres::Url>),
}

impl Location {
    pub fn parse(text: &str) -> Result<Location> {
        if text.starts_with("postgres://") || text.starts_with("postgresql://") {
            return Ok(Location::Postgres(Box::new(postgres::Url::parse(text)?)));
        }
        let path = parse_url(text);
        if path.as_os_str().is_empty() {
            bail!("--ledger is empty; use sqlite:PATH or postgres://user@host/database");
        }
        Ok(Location::Sqlite(path))
    }

    /// Open for appending: create the schema (or apply new migrations) and start the writer.
    /// PostgreSQL needs a Tokio runtime; its writer is a task on it.
    pub async fn open(&self) -> Result<Arc<dyn Ledger>> {
        Ok(match self {
            Location::Sqlite(path) => Arc::new(SqliteLedger::open(path)?),
            Location::Postgres(url) => Arc::new(postgres::PgLedger::open(url).await?),
        })
    }

    /// Walk the chain without opening a writer (`capdir ledger verify`).
    pub async fn verify(&self) -> Result<Verdict> {
        match self {
            Location::Sqlite(path) => {
                let path = path.clone();
                tokio::task::spawn_blocking(move || verify(&path)).await?
            }
            Location::Postgres(url) => postgres::Reader::connect(url).await?.verify().await,
        }
    }

    /// One receipt without opening a writer (`capdir ledger show`).
    pub async fn get(&self, id: &str) -> Result<Option<Receipt>> {
        match self {
            Location::Sqlite(path) => get(path, id),
            Location::Postgres(url) => postgres::Reader::connect(url).await?.get(id).await,
        }
    }

    /// The receipts below the top-level call `root`, without opening a writer.
    pub async fn tree(&self, root: &str) -> Result<Vec<Receipt>> {
        match self {
            Location::Sqlite(path) => sqlite::tree(path, root),
            Location::Postgres(url) => postgres::Reader::connect(url).await?.tree(root).await,
        }
    }

    /// The circuit breakers' state: with PostgreSQL, in the ledger database, shared by every
    /// dispatcher; with SQLite, in `<data_dir>/state.sqlite` as for the CLI alone.
    pub fn breaker(&self, data_dir: &Path) -> Breaker {
        match self {
            Location::Sqlite(_) => Breaker::in_data_dir(data_dir),
            Location::Postgres(url) => Breaker::new(
                Arc::new(postgres::PgBreakerStore::new(url.as_ref().clone()))
                    as Arc<dyn BreakerStore>,
                BreakerPolicy::default(),
            ),
        }
    }
}

/// Shown in logs and errors: a PostgreSQL password never appears.
impl std::fmt::Display for Location {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Location::Sqlite(path) => write!(f, "sqlite:{}", path.display()),
            Location::Postgres(url) => write!(f, "{url}"),
        }
    }
}

impl std::fmt::Debug for Location {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Location({self})")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Receipt ids carry at least 96 random bits: ids made one after another share no more
    /// than their time prefix, and differ in about half of the rest's bits.
    #[test]
    fn receipt_ids_are_unguessable_from_their_neighbours() {
        let ids: Vec<String> = (0..200).map(|_| new_id()).collect();
        let mut differing = 0u32;
        for pair in ids.windows(2) {
            let (a, b) = (&pair[0]["inv_".len() + 12..], &pair[1]["inv_".len() + 12..]);
            assert_eq!(a.len(), 32, "{}", pair[0]);
            let (a, b) = (
                u128::from_str_radix(a, 16).unwrap(),
                u128::from_str_radix(b, 16).unwrap(),
            );
            differing += (a ^ b).count_ones();
        }
        // 122 random bits: two ids differ in 61 of them on average.
        let mean = differing / (ids.len() as u32 - 1);
        assert!(
            mean >= 48,
            "consecutive ids differ in {mean} bits on average"
        );
        assert!(ids.iter().all(|id| checked_id_shape(id)));
    }

    fn checked_id_shape(id: &str) -> bool {
        id.strip_prefix("inv_")
            .is_some_and(|r| r.len() <= 64 && r.bytes().all(|b| b.is_ascii_alphanumeric()))
    }

    /// The canonical JSON written out by serde, as the chain was first defined.
    fn chain_hash_by_serde(prev_hash: &str, seq: i64, draft: &Draft) -> String {
        #[derive(Serialize)]
        struct Canonical<'a> {
            seq: i64,
            #[serde(flatten)]
            draft: &'a Draft,
        }
        let body = serde_json::to_string(&Canonical { seq, draft }).unwrap();
        sha256_hex(&format!("{prev_hash}{body}"))
    }

    #[test]
    fn hashing_the_stored_body_equals_hashing_the_canonical_receipt() {
        let d = Draft {
            id: new_id(),
            key: "K".into(),
            actor: "owner".into(),
            runner: "fn".into(),
            trace_id: "t".into(),
            started_at: "2026-01-01T00:00:00Z".into(),
            finished_at: "2026-01-01T00:00:00Z".into(),
            status: "PROVEN_MATERIAL_RESULT".into(),
            error_code: Some("x".into()),
            cost_usd: Some(0.125),
            input_sha256: sha256_hex("a"),
            output_sha256: sha256_hex("b"),
            contract_sha256: sha256_hex("c"),
            catalogue_commit: "abc".into(),
            repairs: None,
            parent: None,
            root: None,
            input: "a".into(),
            output: "quote \" and \u{e9} and \n".into(),
        };
        for seq in [1, 42, 1_000_000] {
            let body = serde_json::to_string(&d).unwrap();
            assert_eq!(
                chain_hash_body(GENESIS, seq, &body),
                chain_hash_by_serde(GENESIS, seq, &d)
            );
        }
    }
}
