//! The circuit breaker: stop sending a credential that the far side keeps rejecting.
//!
//! Services lock or revoke keys that keep failing authentication, and an agent retrying a dead
//! credential in a loop burns requests for nothing. So after 8 consecutive 401/403 answers for
//! one credential (named by `Credential::name()`, never by value) the breaker opens for an hour:
//! calls answer `ERR:breaker_open:<name>:until <RFC3339>` without sending anything, until the
//! hour passes or `capdir breaker reset NAME`. Any other answer closes the count again.
//!
//! State must survive a restart and be shared by every process on the machine (the CLI and a
//! server), so the default store is a small SQLite file in WAL mode. With a PostgreSQL ledger
//! the state lives in the ledger database (`ledger::postgres::PgBreakerStore`), shared by every
//! dispatcher. The store is async because that one answers over the network.

use crate::invoke::outcome::Failure;
use chrono::{DateTime, SecondsFormat, TimeZone, Utc};
use futures_util::future::BoxFuture;
use rusqlite::{Connection, OptionalExtension, params};
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

/// One credential's record.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct BreakerState {
    /// Consecutive 401/403 answers.
    pub failures: u32,
    /// While this is in the future, calls are refused.
    pub open_until: Option<DateTime<Utc>>,
}

impl BreakerState {
    pub fn is_open(&self, now: DateTime<Utc>) -> bool {
        self.open_until.is_some_and(|t| t > now)
    }
}

/// Where breaker state lives. Errors are messages naming what failed.
pub trait BreakerStore: Send + Sync {
    fn get<'a>(&'a self, name: &'a str) -> BoxFuture<'a, Result<BreakerState, String>>;
    /// Count one more rejection, atomically; open until `until` once `threshold` is reached.
    fn record_rejection<'a>(
        &'a self,
        name: &'a str,
        threshold: u32,
        until: DateTime<Utc>,
    ) -> BoxFuture<'a, Result<BreakerState, String>>;
    /// Close the breaker and clear the count (`reset`, or an accepted request).
    fn clear<'a>(&'a self, name: &'a str) -> BoxFuture<'a, Result<(), String>>;
    /// Every credential with a record, by name.
    fn list(&self) -> BoxFuture<'_, Result<Vec<(String, BreakerState)>, String>>;
}

/// How many rejections open the breaker, and for how long.
#[derive(Debug, Clone, Copy)]
pub struct BreakerPolicy {
    pub threshold: u32,
    pub open_for: chrono::Duration,
}

impl Default for BreakerPolicy {
    fn default() -> Self {
        BreakerPolicy {
            threshold: 8,
            open_for: chrono::Duration::hours(1),
        }
    }
}

/// The breaker the runners consult before and after sending a credential.
#[derive(Clone)]
pub struct Breaker {
    store: Arc<dyn BreakerStore>,
    policy: BreakerPolicy,
}

impl std::fmt::Debug for Breaker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Breaker")
            .field("policy", &self.policy)
            .finish_non_exhaustive()
    }
}

impl Breaker {
    pub fn new(store: Arc<dyn BreakerStore>, policy: BreakerPolicy) -> Breaker {
        Breaker { store, policy }
    }

    /// A breaker whose state lives only in this process.
    pub fn in_memory() -> Breaker {
        Breaker::new(Arc::new(MemoryStore::default()), BreakerPolicy::default())
    }

    /// A breaker whose state lives in `<data_dir>/state.sqlite`, opened on first use.
    pub fn in_data_dir(data_dir: &Path) -> Breaker {
        Breaker::new(
            Arc::new(SqliteStore::new(data_dir.join("state.sqlite"))),
            BreakerPolicy::default(),
        )
    }

    pub fn store(&self) -> &dyn BreakerStore {
        self.store.as_ref()
    }

    /// Before sending: refuse while open. When the state cannot be read, the call fails rather
    /// than risk hammering a service with a credential it may already be rejecting.
    pub async fn admit(&self, name: &str) -> Result<BreakerState, Failure> {
        let state = self
            .store
            .get(name)
            .await
            .map_err(|e| Failure::new("breaker:unavailable", e))?;
        if let Some(until) = state.open_until.filter(|t| *t > Utc::now()) {
            return Err(Failure::new(
                "breaker_open",
                format!(
                    "{name}:until {}",
                    until.to_rfc3339_opts(SecondsFormat::Secs, true)
                ),
            ));
        }
        Ok(state)
    }

    /// After an answer: a 401 or 403 counts against the credential, any other answer clears
    /// the count. `before` is what `admit` returned, to skip a write when nothing changes.
    pub async fn record(&self, name: &str, status: u16, before: BreakerState) {
        let result = if status == 401 || status == 403 {
            self.store
                .record_rejection(
                    name,
                    self.policy.threshold,
                    Utc::now() + self.policy.open_for,
                )
                .await
                .map(|s| {
                    if s.failures == self.policy.threshold {
                        tracing::warn!(
                            credential = name,
                            "breaker opened after {} consecutive 401/403 answers",
                            s.failures
                        );
                    }
                })
        } else if before.failures > 0 || before.open_until.is_some() {
            self.store.clear(name).await
        } else {
            Ok(())
        };
        if let Err(e) = result {
            tracing::warn!(credential = name, "breaker state not recorded: {e}");
        }
    }

    /// Close a breaker by hand. False when there was no record.
    pub async fn reset(&self, name: &str) -> Result<bool, String> {
        let existed = self.store.list().await?.iter().any(|(n, _)| n == name);
        self.store.clear(name).await?;
        Ok(existed)
    }
}

/// State in a `HashMap`, for tests and one-shot use.
#[derive(Default)]
pub struct MemoryStore {
    states: Mutex<HashMap<String, BreakerState>>,
}

impl MemoryStore {
    fn lock(&self) -> Result<std::sync::MutexGuard<'_, HashMap<String, BreakerState>>, String> {
        self.states
            .lock()
            .map_err(|_| "breaker state lock poisoned".to_string())
    }
}

impl LocalStore for MemoryStore {
    fn get_now(&self, name: &str) -> Result<BreakerState, String> {
        Ok(self.lock()?.get(name).copied().unwrap_or_default())
    }

    fn record_now(
        &self,
        name: &str,
        threshold: u32,
        until: DateTime<Utc>,
    ) -> Result<BreakerState, String> {
        let mut states = self.lock()?;
        let s = states.entry(name.to_string()).or_default();
        s.failures = s.failures.saturating_add(1);
        if s.failures >= threshold {
            s.open_until = Some(until);
        }
        Ok(*s)
    }

    fn clear_now(&self, name: &str) -> Result<(), String> {
        self.lock()?.remove(name);
        Ok(())
    }

    fn list_now(&self) -> Result<Vec<(String, BreakerState)>, String> {
        let mut all: Vec<_> = self.lock()?.iter().map(|(k, v)| (k.clone(), *v)).collect();
        all.sort_by(|a, b| a.0.cmp(&b.0));
        Ok(all)
    }
}

/// A store whose operations finish in place (memory, a local SQLite file): each is the
/// `BreakerStore` operation as a future that is already ready.
trait LocalStore: Send + Sync {
    fn get_now(&self, name: &str) -> Result<BreakerState, String>;
    fn record_now(
        &self,
        name: &str,
        threshold: u32,
        until: DateTime<Utc>,
    ) -> Result<BreakerState, String>;
    fn clear_now(&self, name: &str) -> Result<(), String>;
    fn list_now(&self) -> Result<Vec<(String, BreakerState)>, String>;
}

// The statements are short and local, so they run in place, as they did before the store
// was async; busy waits are bounded by the 5 s busy timeout.
impl<T: LocalStore> BreakerStore for T {
    fn get<'a>(&'a self, name: &'a str) -> BoxFuture<'a, Result<BreakerState, String>> {
        Box::pin(std::future::ready(self.get_now(name)))
    }

    fn record_rejection<'a>(
        &'a self,
        name: &'a str,
        threshold: u32,
        until: DateTime<Utc>,
    ) -> BoxFuture<'a, Result<BreakerState, String>> {
        Box::pin(std::future::ready(self.record_now(name, threshold, until)))
    }

    fn clear<'a>(&'a self, name: &'a str) -> BoxFuture<'a, Result<(), String>> {
        Box::pin(std::future::ready(self.clear_now(name)))
    }

    fn list(&self) -> BoxFuture<'_, Result<Vec<(String, BreakerState)>, String>> {
        Box::pin(std::future::ready(self.list_now()))
    }
}

/// State in a SQLite file (WAL), shared by every process that opens the same path.
pub struct SqliteStore {
    path: PathBuf,
    conn: Mutex<Option<Connection>>,
}

impl SqliteStore {
    /// The file is created, with its directory, on first use, so commands that never send a
    /// credential leave no trace.
    pub fn new(path: PathBuf) -> SqliteStore {
        SqliteStore {
            path,
            conn: Mutex::new(None),
        }
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Run `f` on the connection, opening (and creating) the file first if needed.
    fn with<T>(&self, f: impl FnOnce(&Connection) -> rusqlite::Result<T>) -> Result<T, String> {
        self.with_mode(true, f)
            .and_then(|r| r.ok_or_else(|| "breaker state not open".to_string()))
    }

    /// Like `with`, but `None` without creating anything when the file does not exist yet:
    /// reads of a store nobody wrote to leave no file behind.
    fn with_existing<T>(
        &self,
        f: impl FnOnce(&Connection) -> rusqlite::Result<T>,
    ) -> Result<Option<T>, String> {
        self.with_mode(false, f)
    }

    fn with_mode<T>(
        &self,
        create: bool,
        f: impl FnOnce(&Connection) -> rusqlite::Result<T>,
    ) -> Result<Option<T>, String> {
        let mut guard = self
            .conn
            .lock()
            .map_err(|_| "breaker state lock poisoned".to_string())?;
        if guard.is_none() {
            if !create && !self.path.exists() {
                return Ok(None);
            }
            *guard =
                Some(self.open().map_err(|e| {
                    format!("cannot open breaker state {}: {e}", self.path.display())
                })?);
        }
        let conn = guard.as_ref().ok_or("breaker state not open")?;
        f(conn)
            .map(Some)
            .map_err(|e| format!("breaker state {}: {e}", self.path.display()))
    }

    fn open(&self) -> Result<Connection, String> {
        if let Some(dir) = self.path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir).map_err(|e| e.to_string())?;
        }
        let conn = Connection::open(&self.path).map_err(|e| e.to_string())?;
        conn.busy_timeout(std::time::Duration::from_secs(5))
            .map_err(|e| e.to_string())?;
        // Two stores opening a new state file at once race to switch it to WAL, and SQLite
        // answers the loser SQLITE_BUSY at once, without its busy handler: try again.
        let mut tries = 0;
        loop {
            let set_up = conn
                .query_row("PRAGMA journal_mode=WAL", [], |r| r.get::<_, String>(0))
                .and_then(|_| {
                    conn.execute_batch(
                        "CREATE TABLE IF NOT EXISTS breaker (
                            name TEXT PRIMARY KEY,
                            failures INTEGER NOT NULL,
                            open_until INTEGER
                        )",
                    )
                });
            match set_up {
                Ok(()) => return Ok(conn),
                Err(rusqlite::Error::SqliteFailure(e, _))
                    if e.code == rusqlite::ErrorCode::DatabaseBusy && tries < 100 =>
                {
                    tries += 1;
                    std::thread::sleep(std::time::Duration::from_millis(20));
                }
                Err(e) => return Err(e.to_string()),
            }
        }
    }
}

fn from_unix(secs: Option<i64>) -> Option<DateTime<Utc>> {
    secs.and_then(|s| Utc.timestamp_opt(s, 0).single())
}

impl LocalStore for SqliteStore {
    fn get_now(&self, name: &str) -> Result<BreakerState, String> {
        self.with_existing(|c| {
            c.query_row(
                "SELECT failures, open_until FROM breaker WHERE name = ?1",
                [name],
                |r| {
                    Ok(BreakerState {
                        failures: r.get(0)?,
                        open_until: from_unix(r.get(1)?),
                    })
                },
            )
            .optional()
            .map(Option::unwrap_or_default)
        })
        .map(Option::unwrap_or_default)
    }

    fn record_now(
        &self,
        name: &str,
        threshold: u32,
        until: DateTime<Utc>,
    ) -> Result<BreakerState, String> {
        // One statement, so concurrent processes cannot lose a count.
        self.with(|c| {
            c.query_row(
                "INSERT INTO breaker (name, failures, open_until)
                 VALUES (?1, 1, CASE WHEN ?2 <= 1 THEN ?3 END)
                 ON CONFLICT (name) DO UPDATE SET
                   failures = failures + 1,
                   open_until = CASE WHEN failures + 1 >= ?2 THEN ?3 ELSE open_until END
                 RETURNING failures, open_until",
                params![name, threshold, until.timestamp()],
                |r| {
                    Ok(BreakerState {
                        failures: r.get(0)?,
                        open_until: from_unix(r.get(1)?),
                    })
                },
            )
        })
    }

    fn clear_now(&self, name: &str) -> Result<(), String> {
        self.with_existing(|c| c.execute("DELETE FROM breaker WHERE name = ?1", [name]))
            .map(|_| ())
    }

    fn list_now(&self) -> Result<Vec<(String, BreakerState)>, String> {
        self.with_existing(|c| {
            let mut stmt =
                c.prepare("SELECT name, failures, open_until FROM breaker ORDER BY name")?;
            let rows = stmt.query_map([], |r| {
                Ok((
                    r.get::<_, String>(0)?,
                    BreakerState {
                        failures: r.get(1)?,
                        open_until: from_unix(r.get(2)?),
                    },
                ))
            })?;
            rows.collect()
        })
        .map(Option::unwrap_or_default)
    }
}

/// The data directory: `--data`, else `CAPDIR_DATA`, else `data`.
pub fn data_dir(flag: Option<PathBuf>) -> PathBuf {
    flag.or_else(|| std::env::var_os("CAPDIR_DATA").map(PathBuf::from))
        .unwrap_or_else(|| PathBuf::from("data"))
}

/// `capdir breaker list`: one line per credential.
pub fn render_list(states: &[(String, BreakerState)], now: DateTime<Utc>) -> String {
    if states.is_empty() {
        return "no breaker records: every credential is closed\n".to_string();
    }
    let mut out = String::new();
    for (name, s) in states {
        let state = match s.open_until {
            Some(t) if t > now => format!(
                "OPEN until {}",
                t.to_rfc3339_opts(SecondsFormat::Secs, true)
            ),
            Some(t) => format!(
                "half-open (expired {}; the next 401/403 reopens it)",
                t.to_rfc3339_opts(SecondsFormat::Secs, true)
            ),
            None => "closed".to_string(),
        };
        out.push_str(&format!(
            "{name}\t{state}\t{} consecutive 401/403\n",
            s.failures
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn trip(b: &Breaker, name: &str) {
        for _ in 0..8 {
            let before = b.admit(name).await.expect("closed");
            b.record(name, 401, before).await;
        }
    }

    #[tokio::test]
    async fn opens_after_eight_and_resets() {
        let b = Breaker::in_memory();
        for _ in 0..7 {
            let before = b.admit("K").await.unwrap();
            b.record("K", 403, before).await;
        }
        let before = b.admit("K").await.unwrap();
        b.record("K", 200, before).await;
        assert_eq!(b.store().get("K").await.unwrap().failures, 0);
        trip(&b, "K").await;
        let e = b.admit("K").await.unwrap_err();
        assert_eq!(e.code, "breaker_open");
        assert!(e.detail.starts_with("K:until 20"), "{}", e.detail);
        assert!(b.admit("OTHER").await.is_ok());
        assert!(b.reset("K").await.unwrap());
        assert!(b.admit("K").await.is_ok());
        assert!(!b.reset("K").await.unwrap());
    }

    #[tokio::test]
    async fn sqlite_state_survives_reopen() {
        let dir = tempfile::tempdir().unwrap();
        let data = dir.path().join("data");
        let fresh = Breaker::in_data_dir(&data);
        assert!(fresh.admit("T").await.is_ok() && fresh.store().list().await.unwrap().is_empty());
        assert!(!data.exists(), "reads must not create the state file");
        trip(&Breaker::in_data_dir(&data), "T").await;
        let again = Breaker::in_data_dir(&data);
        assert_eq!(again.admit("T").await.unwrap_err().code, "breaker_open");
        let list = again.store().list().await.unwrap();
        assert_eq!(list.len(), 1);
        assert!(render_list(&list, Utc::now()).contains("T\tOPEN until"));
        again.reset("T").await.unwrap();
        assert!(Breaker::in_data_dir(&data).admit("T").await.is_ok());
    }

    #[tokio::test]
    async fn unreadable_state_fails_named() {
        let dir = tempfile::tempdir().unwrap();
        // A directory where the state file should be: it exists but cannot be opened.
        std::fs::create_dir_all(dir.path().join("state.sqlite")).unwrap();
        let b = Breaker::in_data_dir(dir.path());
        let e = b.admit("K").await.unwrap_err();
        assert_eq!(e.code, "breaker:unavailable");
        assert!(e.detail.contains("state.sqlite"), "{}", e.detail);
    }
}
