//! `.checked`, beside a built site: the row files the site's gate found clean (no diagnostic
//! at all), each with the SHA-256 of its bytes and of the row the snapshot holds for it
//! ([`snapshot::column_digest`]), and the file's stamp as it was read ([`Stamp`]).
//!
//! A rebuild in place ([`super::incremental`]) takes a file whose bytes have the recorded
//! digest, while the snapshot's row of that file still has the recorded digest, as the row the
//! gate made of those bytes then, and runs the rules of one file over the other files only. The
//! rules across rows and the bindings' rules run over every row, as in a full build. Both sides
//! are content-addressed: an entry that matches the file or the snapshot no more is not used,
//! so a stale or damaged list costs time, never a check. At 10,000 rows the rules of one file
//! are most of a rebuild's opening (two YAML parses a file). Hidden, so in no manifest.
//!
//! A file whose stamp is the recorded one is not even read: its bytes are taken to be those
//! the digest was made of, as Git's index takes a file whose stat data it recorded as
//! unchanged. Reading a row file takes four system calls, a stamp one, and reading every file
//! would be most of a rebuild's opening. Like Git, a stamp is recorded
//! only for a file last changed well before it was read (a file changed again within the
//! clock's tick could keep its stamp), so a file just written is read again next time.
//!
//! The list also records the stamp the snapshot had when the list was written (after it).
//! While the snapshot keeps that stamp, its rows are those the entries' row digests were made
//! of, and an unread file's row is taken without its digest made again (a twentieth of a
//! rebuild's CPU at 10,000 rows); once the snapshot changed, each row's digest is checked.

use crate::build::snapshot;
use crate::check::Checked;
use crate::row::Row;
use crate::row::catalogue::SourceFile;
use anyhow::Result;
use sha2::{Digest as _, Sha256};
use std::collections::{HashMap, HashSet};
use std::fmt::Write as _;
use std::path::Path;
use std::time::{Duration, SystemTime};

/// The list's file name in the site.
pub const FILE: &str = ".checked";

/// The list's first line: a list without it (of an older capdir) is not read.
const HEADER: &str = "capdir checked 3";

/// A SHA-256.
pub type Digest = [u8; 32];

/// What a file's metadata says of its bytes without reading them: its size, the times its
/// bytes and its inode last changed (to the nanosecond) and its inode number. A write changes
/// the change time whatever it does to the others, and no program can set that one back.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Stamp {
    size: u64,
    modified: (i64, i64),
    changed: (i64, i64),
    inode: u64,
}

/// How long before it was read a file must have last changed for its stamp to be recorded:
/// well over the tick of the clock file times are taken from (a few milliseconds).
const SETTLED: Duration = Duration::from_secs(2);

impl Stamp {
    /// The stamp `meta` gives a file.
    #[cfg(unix)]
    pub fn of(meta: &std::fs::Metadata) -> Option<Stamp> {
        use std::os::unix::fs::MetadataExt as _;
        Some(Stamp {
            size: meta.size(),
            modified: (meta.mtime(), meta.mtime_nsec()),
            changed: (meta.ctime(), meta.ctime_nsec()),
            inode: meta.ino(),
        })
    }

    #[cfg(not(unix))]
    pub fn of(_: &std::fs::Metadata) -> Option<Stamp> {
        None
    }

    /// The stamp of the file at `path` now, if it is there.
    pub fn at(path: &Path) -> Option<Stamp> {
        Stamp::of(&std::fs::metadata(path).ok()?)
    }

    /// The stamp as the lists write it, or `-` for none.
    fn render_or_none(stamp: Option<Stamp>) -> String {
        stamp.map_or_else(|| "-".to_string(), |s| s.render())
    }

    /// The stamp to record of a file of metadata `meta` read from `read_at` on: none when it
    /// changed less than [`SETTLED`] before (or after: a clock set back).
    pub fn settled(meta: &std::fs::Metadata, read_at: SystemTime) -> Option<Stamp> {
        let stamp = Stamp::of(meta)?;
        let changed = SystemTime::UNIX_EPOCH.checked_add(Duration::new(
            u64::try_from(stamp.changed.0).ok()?,
            u32::try_from(stamp.changed.1).ok()?,
        ))?;
        let modified = meta.modified().ok()?;
        let last = changed.max(modified);
        (last + SETTLED <= read_at).then_some(stamp)
    }

    pub(crate) fn render(&self) -> String {
        let Stamp {
            size,
            modified: (ms, mn),
            changed: (cs, cn),
            inode,
        } = self;
        format!("{size}:{ms}.{mn}:{cs}.{cn}:{inode}")
    }

    pub(crate) fn parse(text: &str) -> Option<Stamp> {
        let pair = |t: &str| -> Option<(i64, i64)> {
            let (s, n) = t.split_once('.')?;
            Some((s.parse().ok()?, n.parse().ok()?))
        };
        let mut parts = text.split(':');
        let stamp = Stamp {
            size: parts.next()?.parse().ok()?,
            modified: pair(parts.next()?)?,
            changed: pair(parts.next()?)?,
            inode: parts.next()?.parse().ok()?,
        };
        parts.next().is_none().then_some(stamp)
    }
}

/// A clean file's entry: the digests of its bytes and of its row's columns, and its stamp
/// when it was read, if settled.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Entry {
    bytes: Digest,
    row: Digest,
    stamp: Option<Stamp>,
}

/// The clean files of a site's catalogue, by file name.
#[derive(Debug, Default, Clone)]
pub struct Clean {
    /// Sorted by name, each name once: found by halving, compared and written as it is (a map
    /// hashed every name of 10,000 three times a rebuild, and was sorted to be written).
    files: Vec<(String, Entry)>,
    /// Whether the site's snapshot has the stamp it had when the list was written: then its
    /// rows are those the entries' row digests were made of, and they need not be made again.
    snapshot_same: bool,
}

/// Two lists are the same when they name the same files alike.
impl PartialEq for Clean {
    fn eq(&self, other: &Clean) -> bool {
        self.files == other.files
    }
}

impl Eq for Clean {}

/// `files` sorted by name, each name once (the last entry of a name kept).
fn sorted(mut files: Vec<(String, Entry)>) -> Vec<(String, Entry)> {
    if !files.is_sorted_by(|a, b| a.0 < b.0) {
        files.reverse();
        files.sort_by(|a, b| a.0.cmp(&b.0));
        files.dedup_by(|a, b| a.0 == b.0);
    }
    files
}

/// The digest of a file's bytes.
pub fn bytes_digest(file: &SourceFile) -> Digest {
    Sha256::digest(&file.bytes).into()
}

impl Clean {
    /// The list a site holds: empty when it has none or it does not read (each line that does
    /// not read is left out).
    pub fn read(site: &Path) -> Clean {
        let Ok(text) = std::fs::read_to_string(site.join(FILE)) else {
            return Clean::default();
        };
        let mut lines = text.lines();
        if lines.next() != Some(HEADER) {
            return Clean::default();
        }
        let Some(snapshot) = lines.next().and_then(|l| l.strip_prefix("snapshot ")) else {
            return Clean::default();
        };
        let now = Stamp::at(&site.join(snapshot::FILE));
        let snapshot_same = now.is_some() && Stamp::parse(snapshot) == now;
        let hex32 = |s: &str| hex::decode_to_array::<_, 32>(s).ok();
        let files = lines
            .filter_map(|line| {
                let mut parts = line.splitn(4, ' ');
                let (bytes, row, stamp, name) =
                    (parts.next()?, parts.next()?, parts.next()?, parts.next()?);
                let stamp = match stamp {
                    "-" => None,
                    s => Some(Stamp::parse(s)?),
                };
                let entry = Entry {
                    bytes: hex32(bytes)?,
                    row: hex32(row)?,
                    stamp,
                };
                Some((name.to_string(), entry))
            })
            .collect();
        Clean {
            files: sorted(files),
            snapshot_same,
        }
    }

    /// The entry of the file `name`.
    fn get(&self, name: &str) -> Option<&Entry> {
        let at = self
            .files
            .binary_search_by(|(n, _)| n.as_str().cmp(name))
            .ok()?;
        Some(&self.files[at].1)
    }

    /// Write the list into `site`, replacing the one there whole.
    pub fn write(&self, site: &Path) -> Result<()> {
        let mut text = String::with_capacity(self.files.len() * 200);
        text.push_str(HEADER);
        text.push('\n');
        // The snapshot as it is now, written before the list (a snapshot written after it has
        // another stamp, and then every unread row's digest is made again).
        let snapshot = Stamp::at(&site.join(snapshot::FILE));
        let _ = writeln!(text, "snapshot {}", Stamp::render_or_none(snapshot));
        for (name, e) in &self.files {
            let stamp = Stamp::render_or_none(e.stamp);
            let _ = writeln!(
                text,
                "{} {} {stamp} {name}",
                hex::encode(e.bytes),
                hex::encode(e.row)
            );
        }
        Ok(crate::atomic::write(&site.join(FILE), text.as_bytes())?)
    }

    /// Whether the file `name` can be left unread: the list has it with a stamp, and `meta`
    /// (its metadata now) gives the same.
    pub fn unchanged(&self, name: &str, meta: &std::fs::Metadata) -> bool {
        self.get(name)
            .and_then(|e| e.stamp)
            .is_some_and(|stamp| Stamp::of(meta) == Some(stamp))
    }

    /// The clean files of `checked`, the gate's verdict on `files` (`digests[i]` is the digest
    /// of `files[i]`, `stamps[i]` its settled stamp) and on the files it left unread: a file is
    /// clean when it made a row and no diagnostic names it. The entries of `kept` (files the
    /// gate took as checked, read or not) carry over, with the stamp a file has now if read.
    pub fn of(
        files: &[SourceFile],
        digests: &[Digest],
        stamps: &[Option<Stamp>],
        checked: &Checked,
        kept: Clean,
    ) -> Clean {
        let named: HashSet<&Path> = checked.diags.iter().map(|d| d.path.as_path()).collect();
        let rows: HashMap<&Path, &Row> =
            checked.rows.iter().map(|r| (r.path.as_path(), r)).collect();
        let read: HashSet<&str> = files.iter().map(SourceFile::file_name).collect();
        let mut list: Vec<(String, Entry)> = files
            .iter()
            .zip(digests)
            .zip(stamps)
            .filter(|((f, _), _)| !named.contains(f.path.as_path()))
            .filter_map(|((f, digest), stamp)| {
                let name = f.file_name();
                if let Some(entry) = kept.get(name).filter(|e| e.bytes == *digest) {
                    let stamp = *stamp;
                    return Some((name.to_string(), Entry { stamp, ..*entry }));
                }
                let row = rows.get(f.path.as_path())?;
                let entry = Entry {
                    bytes: *digest,
                    row: snapshot::column_digest(row),
                    stamp: *stamp,
                };
                Some((name.to_string(), entry))
            })
            .collect();
        // The files left unread keep their entries, unless a rule across rows named one.
        let named_names: HashSet<&str> = named
            .iter()
            .filter_map(|p| p.file_name()?.to_str())
            .collect();
        list.extend(kept.files.into_iter().filter(|(name, _)| {
            !read.contains(name.as_str()) && !named_names.contains(name.as_str())
        }));
        Clean {
            files: sorted(list),
            snapshot_same: false,
        }
    }

    /// The row the gate made of `file` before, when this list has the file with these bytes
    /// (`digest`) and `row` (the snapshot's row of the file) is the row it recorded: a copy of
    /// `row` that knows where its fields sit in the file.
    pub fn reuse(&self, file: &SourceFile, digest: &Digest, row: Option<&Row>) -> Option<Row> {
        let entry = self.get(file.file_name())?;
        let row = row?;
        if entry.bytes != *digest || row.path != file.path || !self.holds(entry, row) {
            return None;
        }
        let text = std::str::from_utf8(&file.bytes).ok()?;
        Some(Row {
            spans: crate::row::Spans::of(text),
            ..row.clone()
        })
    }

    /// Whether the snapshot's `row` is the row `entry` recorded: taken as it is while the
    /// snapshot has the stamp the list recorded, else by its digest.
    fn holds(&self, entry: &Entry, row: &Row) -> bool {
        self.snapshot_same || snapshot::column_digest(row) == entry.row
    }

    /// Whether the snapshot's `row` can stand for the file at `path`, left unread for its
    /// stamp ([`Clean::reuse`] without the file): the list has the file with a stamp, and
    /// `row` is the row it recorded for it. Its spans should read the file when asked
    /// ([`crate::row::Spans::in_file`]).
    pub fn takes_unread(&self, path: &Path, row: &Row) -> bool {
        path.file_name()
            .and_then(|n| n.to_str())
            .and_then(|n| self.get(n))
            .is_some_and(|entry| {
                entry.stamp.is_some() && row.path == path && self.holds(entry, row)
            })
    }

    /// The entries of the files `names`.
    pub fn only(&self, names: &[String]) -> Clean {
        let files = names
            .iter()
            .filter_map(|n| Some((n.clone(), *self.get(n)?)))
            .collect();
        Clean {
            files: sorted(files),
            snapshot_same: self.snapshot_same,
        }
    }

    pub fn len(&self) -> usize {
        self.files.len()
    }

    pub fn is_empty(&self) -> bool {
        self.files.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file(name: &str, text: &str) -> SourceFile {
        SourceFile {
            path: Path::new("catalogue").join(name),
            bytes: text.as_bytes().to_vec(),
        }
    }

    const ROW: &str = "key: ECHO_ME\ntype: fn\ntarget: echo\ncategory: text\ncontent: |\n  # WHAT: Echo.\n  # WHEN_TO_USE: Tests.\n  # ARGS: $1=text\n  # EX: hi\n  # OUTPUT: text\n  [\"$1\"]\n";

    /// A clean file's row comes back only for the same bytes and the same row; a file with a
    /// diagnostic is never listed; the list survives its file.
    #[test]
    fn a_file_is_taken_as_checked_only_with_its_bytes_and_its_row() {
        let files = vec![
            file("ECHO_ME.yaml", ROW),
            file("BAD.yaml", "key: BAD\ntype: nonsense\n"),
        ];
        let checked = crate::check::check_files(&files);
        assert!(checked.diags.iter().any(|d| d.path.ends_with("BAD.yaml")));
        let digests: Vec<Digest> = files.iter().map(bytes_digest).collect();
        let clean = Clean::of(&files, &digests, &[None, None], &checked, Clean::default());
        assert_eq!(clean.len(), 1, "only the clean file: {clean:?}");

        let row = checked.rows.iter().find(|r| r.key == "ECHO_ME").unwrap();
        let again = clean
            .reuse(&files[0], &digests[0], Some(row))
            .expect("reused");
        assert!(snapshot::same_columns(&again, row));
        assert_eq!(again.spans, row.spans, "it knows where its fields are");

        // Other bytes under the same name: checked again.
        let edited = file("ECHO_ME.yaml", &ROW.replace("Echo.", "Echo it."));
        assert!(
            clean
                .reuse(&edited, &bytes_digest(&edited), Some(row))
                .is_none()
        );
        // The same bytes, but the snapshot holds another row for the file.
        let mut other = row.clone();
        other.category = "elsewhere".into();
        assert!(clean.reuse(&files[0], &digests[0], Some(&other)).is_none());
        assert!(clean.reuse(&files[0], &digests[0], None).is_none());
        // Never listed: the file with a problem.
        assert!(clean.reuse(&files[1], &digests[1], Some(row)).is_none());

        let dir = tempfile::tempdir().unwrap();
        clean.write(dir.path()).unwrap();
        assert_eq!(Clean::read(dir.path()), clean);
        std::fs::write(dir.path().join(FILE), "not hex at all\n").unwrap();
        assert!(Clean::read(dir.path()).is_empty());
    }

    /// A list read in any order, with a name twice, finds every name and keeps the last entry
    /// of a name (as the map it replaced did); the entries of names asked for in any order
    /// are one list, equal to the same entries asked for in order.
    #[test]
    fn a_list_in_any_order_finds_every_name() {
        let hex = |b: u8| hex::encode([b; 32]);
        let names: Vec<String> = (0..50)
            .map(|i| format!("R{:03}.yaml", (i * 37) % 50))
            .collect();
        let mut text = format!("{HEADER}\nsnapshot -\n");
        for (i, name) in names.iter().enumerate() {
            text.push_str(&format!("{} {} - {name}\n", hex(i as u8), hex(1)));
        }
        text.push_str(&format!("{} {} - R007.yaml\n", hex(200), hex(2)));
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join(FILE), &text).unwrap();
        let clean = Clean::read(dir.path());
        assert_eq!(clean.len(), 50);
        for (i, name) in names.iter().enumerate() {
            let (bytes, row) = if name == "R007.yaml" {
                ([200; 32], [2; 32])
            } else {
                ([i as u8; 32], [1; 32])
            };
            let want = Entry {
                bytes,
                row,
                stamp: None,
            };
            assert_eq!(clean.get(name), Some(&want), "{name}");
        }
        assert_eq!(clean.get("R050.yaml"), None);
        let mut sorted_names = names.clone();
        sorted_names.sort();
        assert_eq!(clean.only(&names), clean.only(&sorted_names));
        assert_eq!(clean.only(&names), clean);
        clean.write(dir.path()).unwrap();
        assert_eq!(Clean::read(dir.path()), clean);
    }

    /// A stamp is recorded only for a file that settled before it was read; it reads back as
    /// written; a file is left unread only while its metadata gives the recorded stamp, and
    /// only the list's own format is read.
    #[test]
    fn a_file_is_left_unread_only_with_its_settled_stamp() {
        let dir = tempfile::tempdir().unwrap();
        let (path, meta) = row_file(dir.path());
        let now = SystemTime::now();
        assert_eq!(
            Stamp::settled(&meta, now),
            None,
            "just written: not settled"
        );
        let later = now + SETTLED + Duration::from_secs(1);
        let stamp = Stamp::settled(&meta, later).expect("settled by then");
        assert_eq!(Stamp::parse(&stamp.render()), Some(stamp));
        assert_eq!(Stamp::parse("1:2.3:4.5"), None);
        assert_eq!(Stamp::parse("1:2.3:4.5:6:7"), None);

        let (files, digests, checked, clean) = checked_one(&path, Some(stamp));
        let site = tempfile::tempdir().unwrap();
        clean.write(site.path()).unwrap();
        let clean = Clean::read(site.path());
        assert!(clean.unchanged("ECHO_ME.yaml", &meta));
        assert!(!clean.unchanged("OTHER.yaml", &meta));
        let row = &checked.rows[0];
        assert!(clean.takes_unread(&path, row), "taken unread");
        let spans = crate::row::Spans::in_file(&path);
        assert_eq!(spans.key("type"), (2, 1), "read when asked");

        // Rewritten with the same bytes, the file has another stamp.
        std::thread::sleep(Duration::from_millis(20));
        std::fs::write(&path, ROW).unwrap();
        assert!(!clean.unchanged("ECHO_ME.yaml", &std::fs::metadata(&path).unwrap()));
        // Another row in the snapshot: not taken.
        let mut other = row.clone();
        other.category = "elsewhere".into();
        assert!(!clean.takes_unread(&path, &other));
        // Without a stamp, never left unread.
        let unstamped = Clean::of(&files, &digests, &[None], &checked, Clean::default());
        assert!(!unstamped.unchanged("ECHO_ME.yaml", &meta));
        assert!(!unstamped.takes_unread(&path, row));
        // A list of the older format (no header line) is not read.
        let text = std::fs::read_to_string(site.path().join(FILE)).unwrap();
        let body = text.split_once('\n').unwrap().1;
        std::fs::write(site.path().join(FILE), body).unwrap();
        assert!(Clean::read(site.path()).is_empty());
    }

    /// `ROW` written as a file of `dir`: its path and metadata.
    fn row_file(dir: &Path) -> (std::path::PathBuf, std::fs::Metadata) {
        let path = dir.join("ECHO_ME.yaml");
        std::fs::write(&path, ROW).unwrap();
        let meta = std::fs::metadata(&path).unwrap();
        (path, meta)
    }

    /// The file at `path` (holding `ROW`) read, checked, and listed clean with `stamp`.
    fn checked_one(
        path: &Path,
        stamp: Option<Stamp>,
    ) -> (Vec<SourceFile>, Vec<Digest>, Checked, Clean) {
        let files = vec![SourceFile {
            path: path.to_path_buf(),
            bytes: ROW.as_bytes().to_vec(),
        }];
        let checked = crate::check::check_files(&files);
        let digests: Vec<Digest> = files.iter().map(bytes_digest).collect();
        let clean = Clean::of(&files, &digests, &[stamp], &checked, Clean::default());
        (files, digests, checked, clean)
    }

    #[test]
    fn an_unread_row_skips_its_digest_only_while_the_snapshot_keeps_its_stamp() {
        let dir = tempfile::tempdir().unwrap();
        let (path, meta) = row_file(dir.path());
        let stamp = Stamp::of(&meta);
        let (_, _, checked, clean) = checked_one(&path, stamp);
        let row = &checked.rows[0];
        let mut other = row.clone();
        other.category = "elsewhere".into();

        // No snapshot beside the list: every row's digest is made.
        let site = tempfile::tempdir().unwrap();
        clean.write(site.path()).unwrap();
        assert!(!Clean::read(site.path()).takes_unread(&path, &other));
        // The snapshot as the list saw it: its rows are taken as the list recorded them.
        std::fs::write(site.path().join(snapshot::FILE), "rows").unwrap();
        clean.write(site.path()).unwrap();
        let read = Clean::read(site.path());
        assert!(read.takes_unread(&path, row));
        assert!(read.takes_unread(&path, &other), "its digest is not made");
        assert_eq!(read, clean, "the same list");
        // The snapshot written since (same length): each row's digest is made again.
        std::thread::sleep(Duration::from_millis(20));
        std::fs::write(site.path().join(snapshot::FILE), "ROWS").unwrap();
        let read = Clean::read(site.path());
        assert!(read.takes_unread(&path, row));
        assert!(!read.takes_unread(&path, &other));
    }
}
