//! The receipt log seen from outside: signed checkpoints of the ledger's Merkle tree, issued
//! on a schedule and on demand, and the proofs that a receipt is in the log (inclusion) and
//! that the log only grew (consistency). The checkpoint key is the log's own: not the token
//! key, not the build key, so a leaked one vouches only for what it signs.
//!
//! Every checkpoint issued is kept in the ledger (so every dispatcher of a shared PostgreSQL
//! ledger answers the same one for a size) and, when a directory is given, written there as
//! `SIZE` and `latest`, so `capdir build --checkpoints DIR` can publish copies that outlive the
//! dispatcher.

use super::{DispatchError, Dispatcher};
use crate::ledger::tlog;
use crate::trust::checkpoint::Checkpoint;
use crate::trust::note::{Signer, Verifier};
use crate::trust::proof::{ConsistencyProof, InclusionProof, encode};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The least time between two checkpoints issued on demand.
const MIN_INTERVAL: Duration = Duration::from_secs(1);

/// The key checkpoints are signed with, and where copies go.
pub struct Log {
    key: Signer,
    /// Each issued checkpoint is also written here, when set.
    dir: Option<PathBuf>,
    /// When this dispatcher last signed one.
    last_issued: std::sync::Mutex<Option<Instant>>,
}

impl Log {
    pub fn new(key: Signer, dir: Option<PathBuf>) -> Log {
        Log {
            key,
            dir,
            last_issued: std::sync::Mutex::new(None),
        }
    }

    /// The public key a verifier needs.
    pub fn verifier(&self) -> Verifier {
        self.key.verifier()
    }
}

fn unavailable(e: anyhow::Error) -> DispatchError {
    DispatchError::unavailable("the receipt log could not be read", e)
}

impl Dispatcher {
    /// Sign checkpoints with `log`'s key from now on (once; later calls change nothing).
    pub fn keep_log(&self, log: Log) {
        let _ = self.log.set(Arc::new(log));
    }

    fn log(&self) -> Result<&Arc<Log>, DispatchError> {
        self.log.get().ok_or(DispatchError::NoLog)
    }

    /// The log's public key.
    pub fn log_key(&self) -> Result<Verifier, DispatchError> {
        Ok(self.log()?.verifier())
    }

    /// The latest checkpoint, issued now when the log has grown past the last one kept (and
    /// the last was issued over a second ago, so callers cannot make it sign on every
    /// request). Returns its size and the signed note.
    pub async fn checkpoint(&self) -> Result<(u64, String), DispatchError> {
        self.checkpoint_covering(0).await
    }

    /// A checkpoint of at least `at_least` receipts signed with this dispatcher's key: the
    /// latest kept when it covers them and is this key's, else one issued now.
    async fn checkpoint_covering(&self, at_least: u64) -> Result<(u64, String), DispatchError> {
        let log = self.log()?;
        let own = |note: &str| log.key.verifier().open(note).is_ok();
        let size = self.ledger.tree_size().await.map_err(unavailable)?;
        if size < at_least {
            // The tree is behind the receipt (a ledger whose tree is still being made): no
            // checkpoint signed now could prove it.
            return Err(unavailable(anyhow::anyhow!(
                "the receipt log's tree covers {size} receipts, not yet {at_least}"
            )));
        }
        let recent = log
            .last_issued
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .is_some_and(|t| t.elapsed() < MIN_INTERVAL);
        if let Some(kept) = self.ledger.checkpoint(None).await.map_err(unavailable)?
            && own(&kept.1)
            && kept.0 >= at_least
            && (kept.0 >= size || recent)
        {
            return Ok(kept);
        }
        let root = tlog::root(self.ledger.as_ref(), size)
            .await
            .map_err(unavailable)?;
        let note = Checkpoint {
            origin: log.key.name().to_string(),
            size,
            root,
        }
        .sign(&log.key)
        .map_err(|e| unavailable(e.into()))?;
        *log.last_issued.lock().unwrap_or_else(|p| p.into_inner()) = Some(Instant::now());
        self.ledger
            .record_checkpoint(size, &note)
            .await
            .map_err(unavailable)?;
        // Another dispatcher of the ledger may have kept its own note of this size first:
        // answer that one when it is this key's too (one checkpoint per size), else this one,
        // so what this dispatcher answers always opens with the key it publishes.
        let kept = self
            .ledger
            .checkpoint(Some(size))
            .await
            .map_err(unavailable)?
            .filter(|(_, n)| own(n))
            .unwrap_or((size, note));
        if let Some(dir) = &log.dir {
            write_copy(dir, &kept);
        }
        Ok(kept)
    }

    /// A checkpoint kept earlier, of the tree at `size`.
    pub async fn checkpoint_at(&self, size: u64) -> Result<String, DispatchError> {
        self.log()?;
        self.ledger
            .checkpoint(Some(size))
            .await
            .map_err(unavailable)?
            .map(|(_, note)| note)
            .ok_or(DispatchError::NoCheckpoint(size))
    }

    /// The proof that receipt `seq` is in the log, against the latest checkpoint (issued now
    /// when the receipt is newer than the last one kept).
    pub async fn inclusion_proof(&self, seq: i64) -> Result<InclusionProof, DispatchError> {
        let leaf_index = seq
            .checked_sub(1)
            .and_then(|i| u64::try_from(i).ok())
            .ok_or(DispatchError::UnknownReceipt)?;
        let (tree_size, checkpoint) = self.checkpoint_covering(leaf_index + 1).await?;
        let hashes = tlog::inclusion(self.ledger.as_ref(), leaf_index, tree_size)
            .await
            .map_err(unavailable)?;
        Ok(InclusionProof {
            leaf_index,
            tree_size,
            hashes: encode(&hashes),
            checkpoint,
        })
    }

    /// The proof that the tree of `new` receipts extends the tree of `old`.
    pub async fn consistency_proof(
        &self,
        old: u64,
        new: u64,
    ) -> Result<ConsistencyProof, DispatchError> {
        self.log()?;
        let size = self.ledger.tree_size().await.map_err(unavailable)?;
        if old > new || new > size {
            return Err(DispatchError::BadTreeSizes { old, new, size });
        }
        let hashes = tlog::consistency(self.ledger.as_ref(), old, new)
            .await
            .map_err(unavailable)?;
        Ok(ConsistencyProof {
            old_size: old,
            new_size: new,
            hashes: encode(&hashes),
        })
    }

    /// Issue a checkpoint every `every` while the log grows, for as long as the dispatcher
    /// lives.
    pub fn spawn_checkpoints(self: &Arc<Self>, every: Duration) {
        let weak = Arc::downgrade(self);
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(every);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tick.tick().await;
                let Some(d) = weak.upgrade() else { return };
                if let Err(e) = d.checkpoint().await {
                    tracing::warn!(error = %e.message(), "issuing a checkpoint failed");
                }
            }
        });
    }
}

/// Write a checkpoint's copy as `DIR/SIZE` and `DIR/latest` (each by a rename, so a reader
/// never sees half a file). A failure is logged: the ledger keeps the checkpoint anyway.
fn write_copy(dir: &std::path::Path, (size, note): &(u64, String)) {
    let write = || -> std::io::Result<()> {
        std::fs::create_dir_all(dir)?;
        for name in [size.to_string(), "latest".to_string()] {
            crate::atomic::write(&dir.join(name), note.as_bytes())?;
        }
        Ok(())
    };
    if let Err(e) = write() {
        tracing::warn!(error = %e, dir = %dir.display(), "writing a checkpoint's copy failed");
    }
}
