//! One build of the site as the dispatcher serves it: the rows ready to run, the search index,
//! the build's commit and counts, and the tombstones of removed keys. Loaded whole and
//! replaced whole, so a request that holds one sees one catalogue from start to end.

use crate::build::incremental::Applied;
use crate::build::snapshot::{self, BuildInfo};
use crate::invoke::rowset::RowSet;
use crate::invoke::{Invoker, InvokerConfig};
use crate::search::Searcher;
use std::collections::HashMap;
use std::path::Path;
use std::time::SystemTime;

/// What one build of the site gives the dispatcher; replaced whole on reload.
pub struct Live {
    pub invoker: Invoker,
    /// Shared with the invoker, for agents' `ask` meta tool.
    pub searcher: std::sync::Arc<Searcher>,
    pub info: BuildInfo,
    /// Removed keys and what replaced them.
    pub tombstones: HashMap<String, Option<String>>,
    pub(super) stamp: Option<Stamp>,
}

/// How the poller tells one `catalogue.sqlite` from another.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Stamp {
    inode: u64,
    modified: Option<SystemTime>,
    len: u64,
}

pub(super) fn stamp(path: &Path) -> Option<Stamp> {
    let meta = std::fs::metadata(path).ok()?;
    #[cfg(unix)]
    let inode = std::os::unix::fs::MetadataExt::ino(&meta);
    #[cfg(not(unix))]
    let inode = 0;
    Some(Stamp {
        inode,
        modified: meta.modified().ok(),
        len: meta.len(),
    })
}

impl Live {
    /// The next build after a change made in place (`build::incremental`): the rows changed
    /// prepared again, every other row shared with this build, the new index, facts and
    /// tombstones; stamped with the snapshot the change wrote, so the reloader does not load
    /// it again.
    pub fn changed(&self, applied: Applied, site: &Path) -> Live {
        let rows = self
            .invoker
            .rows()
            .with_changes(applied.rows, &applied.gone, &applied.prints);
        let searcher = std::sync::Arc::new(applied.searcher);
        Live {
            invoker: self.invoker.with_rows(rows, Some(searcher.clone())),
            searcher,
            info: applied.info,
            tombstones: applied.tombstones,
            stamp: stamp(&site.join("catalogue.sqlite")),
        }
    }

    /// Load the snapshot and index of a built site.
    pub fn load(site: &Path, config: &InvokerConfig) -> anyhow::Result<Live> {
        let before = stamp(&site.join("catalogue.sqlite"));
        let snap = snapshot::open(&site.join("catalogue.sqlite"))?;
        let searcher = std::sync::Arc::new(Searcher::open(&site.join("index"))?);
        let rows = RowSet::from_rows(snap.rows.into_iter().filter(|r| r.enabled).collect());
        let config = InvokerConfig {
            search: Some(searcher.clone()),
            bindings: std::sync::Arc::new(crate::build::site_bindings(site)),
            ..config.clone()
        };
        let invoker = Invoker::new(rows, config).map_err(anyhow::Error::msg)?;
        Ok(Live {
            invoker,
            searcher,
            info: snap.info,
            tombstones: snap.tombstones.into_iter().collect(),
            stamp: before,
        })
    }
}
