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

    /// Load the snapshot and index of a built site. A build swapped in while they were read
    /// could give the snapshot of one and the index of the other: the snapshot's stamp is
    /// taken again at the end, and a load that saw it change fails (the reloader tries again
    /// on its next poll, the current build serving meanwhile).
    pub fn load(site: &Path, config: &InvokerConfig) -> anyhow::Result<Live> {
        let before = stamp(&site.join("catalogue.sqlite"));
        let live = Live::read(site, config, before)?;
        if stamp(&site.join("catalogue.sqlite")) != live.stamp {
            anyhow::bail!(
                "{}: a new build was swapped in while the site was read",
                site.display()
            );
        }
        Ok(live)
    }

    fn read(site: &Path, config: &InvokerConfig, before: Option<Stamp>) -> anyhow::Result<Live> {
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::build::{self, Options};

    const MARKER: &str = "SWAP_MARKER";

    /// A copy of the bundled catalogue, with one more row when `marked`, built into `out`.
    fn site(dir: &Path, name: &str, marked: bool) -> std::path::PathBuf {
        let catalogue = dir.join(format!("{name}-catalogue"));
        copy(
            &Path::new(env!("CARGO_MANIFEST_DIR")).join("catalogue"),
            &catalogue,
        );
        if marked {
            let echo = std::fs::read_to_string(catalogue.join("ECHO.yaml")).unwrap();
            let row = echo.replace("key: ECHO", &format!("key: {MARKER}"));
            std::fs::write(catalogue.join(format!("{MARKER}.yaml")), row).unwrap();
        }
        let out = dir.join(name);
        build::run(&Options::new(catalogue, out.clone())).unwrap();
        out
    }

    fn copy(from: &Path, to: &Path) {
        std::fs::create_dir_all(to).unwrap();
        for entry in std::fs::read_dir(from).unwrap() {
            let entry = entry.unwrap();
            let target = to.join(entry.file_name());
            if entry.file_type().unwrap().is_dir() {
                copy(&entry.path(), &target);
            } else {
                std::fs::copy(entry.path(), target).unwrap();
            }
        }
    }

    /// Builds swapped whole into the site while it is loaded over and over: every load that
    /// succeeds holds one build, its rows and its index from the same one (the marker row in
    /// both or in neither).
    #[test]
    fn a_load_never_mixes_two_builds_swapped_in_meanwhile() {
        let dir = tempfile::tempdir().unwrap();
        let builds = [site(dir.path(), "a", false), site(dir.path(), "b", true)];
        let live = dir.path().join("site");
        copy(&builds[0], &live);
        let stop = std::sync::atomic::AtomicBool::new(false);
        let (mut loads, mut mixed) = (0, 0);
        std::thread::scope(|s| {
            s.spawn(|| {
                for i in 0.. {
                    if stop.load(std::sync::atomic::Ordering::Relaxed) {
                        break;
                    }
                    let next = crate::atomic::dir_beside(&live).unwrap();
                    copy(&builds[(i + 1) % 2], &next);
                    crate::atomic::swap_dir(&next, &live).unwrap();
                }
            });
            let config = InvokerConfig::default();
            let started = std::time::Instant::now();
            while loads < 300 && started.elapsed() < std::time::Duration::from_secs(60) {
                let Ok(l) = Live::load(&live, &config) else {
                    continue;
                };
                loads += 1;
                let in_rows = l.invoker.rows().get(MARKER).is_some();
                if in_rows != l.searcher.meta(MARKER).is_some() {
                    mixed += 1;
                }
            }
            stop.store(true, std::sync::atomic::Ordering::Relaxed);
        });
        assert!(loads >= 100, "only {loads} loads succeeded");
        assert_eq!(mixed, 0, "{mixed} of {loads} loads mixed two builds");
    }
}
