//! Files of one part per row between a head and a tail (`mcp/tools.json`, `registry.json`,
//! `search.json`): written whole by a build, and after a change written again from the file as
//! it is. The parts of rows that did not change are copied from the old file to the new one by
//! the kernel (runs of them at once), and only the changed rows' parts are rendered. At 10,000
//! rows these files are 15 MB, and rendering them whole was a sixth of a one-row rebuild's CPU.
//!
//! Where each part lies is kept in the site's `.parts`, with the stamp ([`Stamp`]) each file
//! had once in its place. A file whose stamp moved since (anything wrote it), or one the list
//! does not name, is rendered whole; so is every file when the list does not read.

use crate::build::checked::Stamp;
use anyhow::{Context as _, Result};
use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::io::{BufWriter, Read as _, Seek as _, SeekFrom, Write as _};
use std::path::Path;

/// The site's list of where the parts of its files lie.
pub const PARTS: &str = ".parts";
const HEADER: &str = "capdir parts 1";

/// Where the parts of one file lie: its head's length, its separator's, and each part's
/// key and length, in the file's order.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Layout {
    head: u64,
    sep: u64,
    parts: Vec<(String, u64)>,
}

/// The layouts of a site's files (by path in the site), each with the stamp its file had when
/// the list was saved.
#[derive(Debug, Default)]
pub struct Layouts(BTreeMap<String, (Stamp, Layout)>);

impl Layouts {
    /// The list `site` keeps; empty when it has none or it does not read.
    pub fn read(site: &Path) -> Layouts {
        std::fs::read_to_string(site.join(PARTS))
            .ok()
            .and_then(|text| Layouts::parse(&text))
            .unwrap_or_default()
    }

    /// The list `site` keeps, taken out of it: from now until a new list is saved, the files
    /// it names may be written (or left stale by a write that failed), so no later run reads
    /// it. Empty when it cannot be removed.
    pub fn take(site: &Path) -> Layouts {
        let layouts = Layouts::read(site);
        match std::fs::remove_file(site.join(PARTS)) {
            Ok(()) => layouts,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => layouts,
            Err(_) => Layouts::default(),
        }
    }

    fn parse(text: &str) -> Option<Layouts> {
        let mut lines = text.lines();
        (lines.next()? == HEADER).then_some(())?;
        let mut files = BTreeMap::new();
        while let Some(line) = lines.next() {
            let mut words = line.split(' ');
            (words.next()? == "file").then_some(())?;
            let name = words.next()?.to_string();
            let stamp = Stamp::parse(words.next()?)?;
            let head = words.next()?.parse().ok()?;
            let sep = words.next()?.parse().ok()?;
            let count: usize = words.next()?.parse().ok()?;
            words.next().is_none().then_some(())?;
            let mut parts = Vec::with_capacity(count.min(1 << 20));
            for _ in 0..count {
                let (len, key) = lines.next()?.split_once(' ')?;
                parts.push((key.to_string(), len.parse().ok()?));
            }
            files.insert(name, (stamp, Layout { head, sep, parts }));
        }
        Some(Layouts(files))
    }

    /// Save `written` (files of `site`, in their place now) as the site's list, each with the
    /// stamp its file has now. Replaced whole, so a list that was not saved still names the
    /// old stamps: the files written since are then rendered whole.
    pub fn save(site: &Path, written: &[(&str, Layout)]) -> Result<()> {
        let mut text = String::from(HEADER);
        text.push('\n');
        for (name, layout) in written {
            let meta = std::fs::metadata(site.join(name))
                .with_context(|| format!("reading the stamp of {name}"))?;
            let Some(stamp) = Stamp::of(&meta) else {
                continue;
            };
            let _ = writeln!(
                text,
                "file {name} {} {} {} {}",
                stamp.render(),
                layout.head,
                layout.sep,
                layout.parts.len()
            );
            for (key, len) in &layout.parts {
                let _ = writeln!(text, "{len} {key}");
            }
        }
        Ok(crate::atomic::write(&site.join(PARTS), text.as_bytes())?)
    }
}

/// Where the parts of unchanged rows may be copied from: the site as it is, its list, and
/// the rows whose parts changed since it was written (rendered again).
pub struct Reuse<'a> {
    pub site: &'a Path,
    pub layouts: &'a Layouts,
    pub changed: &'a BTreeSet<String>,
}

/// The parts of a file as it is in the site, by key: (place in the file's order, offset,
/// length); and where its last part ends.
struct Old {
    file: std::fs::File,
    at: crate::FastMap<String, (usize, u64, u64)>,
    head: u64,
    end: u64,
    len: u64,
}

impl Old {
    /// The file `name` of the site, when its layout holds: the list names it with the stamp
    /// it has, with the separator `sep`, and it is long enough for its parts.
    fn open(reuse: &Reuse, name: &str, sep: &[u8]) -> Option<Old> {
        let (stamp, layout) = reuse.layouts.0.get(name)?;
        let file = std::fs::File::open(reuse.site.join(name)).ok()?;
        let meta = file.metadata().ok()?;
        if Stamp::of(&meta)? != *stamp || layout.sep != sep.len() as u64 {
            return None;
        }
        let mut at = crate::FastMap::default();
        at.reserve(layout.parts.len());
        let mut offset = layout.head;
        for (i, (key, len)) in layout.parts.iter().enumerate() {
            if i > 0 {
                offset = offset.checked_add(layout.sep)?;
            }
            at.insert(key.clone(), (i, offset, *len));
            offset = offset.checked_add(*len)?;
        }
        (offset <= meta.len()).then_some(Old {
            file,
            at,
            head: layout.head,
            end: offset,
            len: meta.len(),
        })
    }

    /// The bytes from `start` to `end`.
    fn read(&self, start: u64, end: u64) -> std::io::Result<Vec<u8>> {
        let mut from = &self.file;
        from.seek(SeekFrom::Start(start))?;
        let mut bytes = vec![0; usize::try_from(end - start).unwrap_or(usize::MAX)];
        from.read_exact(&mut bytes)?;
        Ok(bytes)
    }

    /// Whether its part `(offset, len)` is `part`, byte for byte.
    fn holds(&self, (offset, len): (u64, u64), part: &[u8]) -> bool {
        len == part.len() as u64 && self.read(offset, offset + len).is_ok_and(|b| b == part)
    }
}

/// A piece of the file to write: a run of the old file's bytes (its parts from one place to
/// another, with the separators between them), or a part rendered.
enum Piece<'a> {
    Old {
        from: &'a std::fs::File,
        start: u64,
        end: u64,
        last: usize,
    },
    New(Vec<u8>),
}

/// What [`write`] did: the file's layout, and whether the file was written at all (not when
/// it would be the site's file, byte for byte).
pub struct Written {
    pub layout: Layout,
    pub changed: bool,
}

/// Write the file `name` into `out`: `head`, the part of each of `keys` (`sep` between
/// two), then `tail`. A part is copied from the site's file when `reuse` holds its layout and
/// its row is not among the changed ones, or when the part rendered again is the old one
/// byte for byte; else `render(i)` makes the part of `keys[i]`. What is written is the same
/// either way, and nothing is written when it would be the site's file as it is. Its layout
/// is returned, to be saved once the file is in its place ([`Layouts::save`]).
pub fn write(
    out: &Path,
    name: &str,
    (head, sep, tail): (&[u8], &[u8], &[u8]),
    keys: &[&str],
    render: impl Fn(usize) -> Result<Vec<u8>>,
    reuse: Option<&Reuse>,
) -> Result<Written> {
    let path = out.join(name);
    let old = reuse.and_then(|r| Old::open(r, name, sep).map(|old| (old, r.changed)));
    let mut parts = Vec::with_capacity(keys.len());
    let mut pieces: Vec<Piece> = Vec::new();
    for (i, key) in keys.iter().enumerate() {
        let held = old.as_ref().and_then(|(old, _)| old.at.get(*key));
        let fresh = match (held, &old) {
            (Some(_), Some((_, changed))) if !changed.contains(*key) => None,
            _ => Some(render(i)?),
        };
        let reused = match (held, &fresh, &old) {
            (Some(&(place, offset, len)), None, Some((old, _))) => {
                Some((&old.file, place, offset, len))
            }
            (Some(&(place, offset, len)), Some(part), Some((old, _)))
                if old.holds((offset, len), part) =>
            {
                Some((&old.file, place, offset, len))
            }
            _ => None,
        };
        match (reused, pieces.last_mut()) {
            // Next to the run: the run grows over the separator and this part.
            (Some((_, place, offset, len)), Some(Piece::Old { end, last, .. }))
                if place == *last + 1 =>
            {
                (*end, *last) = (offset + len, place);
                parts.push((key.to_string(), len));
            }
            (Some((from, place, offset, len)), _) => {
                pieces.push(Piece::Old {
                    from,
                    start: offset,
                    end: offset + len,
                    last: place,
                });
                parts.push((key.to_string(), len));
            }
            (None, _) => {
                let part = fresh.unwrap_or_default();
                parts.push((key.to_string(), part.len() as u64));
                pieces.push(Piece::New(part));
            }
        }
    }
    let layout = Layout {
        head: head.len() as u64,
        sep: sep.len() as u64,
        parts,
    };
    // The old file whole, in one run, between the same head and tail: nothing to write.
    if let Some((old, _)) = &old
        && old.is_all_of(&pieces, head, tail)
    {
        return Ok(Written {
            layout,
            changed: false,
        });
    }
    write_pieces(&path, (head, sep, tail), &pieces)
        .with_context(|| format!("writing {}", path.display()))?;
    Ok(Written {
        layout,
        changed: true,
    })
}

impl Old {
    /// Whether `pieces` between `head` and `tail` are this file as it is: one run of it
    /// whole (or no parts of either), between the same head and tail.
    fn is_all_of(&self, pieces: &[Piece<'_>], head: &[u8], tail: &[u8]) -> bool {
        let whole_run = match pieces {
            [] => self.at.is_empty(),
            [
                Piece::Old {
                    start, end, last, ..
                },
            ] => *start == self.head && *end == self.end && *last + 1 == self.at.len(),
            _ => false,
        };
        whole_run
            && self.read(0, self.head).is_ok_and(|h| h == head)
            && self.read(self.end, self.len).is_ok_and(|t| t == tail)
    }
}

/// The file at `path`: `head`, the pieces with `sep` between two (an old one copied from the
/// site's file), then `tail`.
fn write_pieces(
    path: &Path,
    (head, sep, tail): (&[u8], &[u8], &[u8]),
    pieces: &[Piece<'_>],
) -> Result<()> {
    let mut file = BufWriter::with_capacity(1 << 16, std::fs::File::create(path)?);
    file.write_all(head)?;
    for (i, piece) in pieces.iter().enumerate() {
        if i > 0 {
            file.write_all(sep)?;
        }
        match piece {
            Piece::New(part) => file.write_all(part)?,
            Piece::Old {
                from, start, end, ..
            } => {
                let mut from = *from;
                from.seek(SeekFrom::Start(*start))?;
                let copied = std::io::copy(&mut from.take(end - start), &mut file)?;
                anyhow::ensure!(copied == end - start, "the old file ended early");
            }
        }
    }
    file.write_all(tail)?;
    file.into_inner().map_err(|e| e.into_error())?;
    Ok(())
}

/// `value` pretty-printed as JSON at `indent` within its document: each of its lines after
/// the first indented by that much more (JSON strings hold no raw line breaks).
pub fn pretty_at(value: &impl serde::Serialize, indent: &str) -> Result<Vec<u8>> {
    let alone = serde_json::to_vec_pretty(value)?;
    let lines = alone.iter().filter(|&&b| b == b'\n').count();
    let mut out = Vec::with_capacity(alone.len() + lines * indent.len());
    for (i, line) in alone.split(|&b| b == b'\n').enumerate() {
        if i > 0 {
            out.push(b'\n');
            out.extend_from_slice(indent.as_bytes());
        }
        out.extend_from_slice(line);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{Value, json};

    /// The array `rows` as one document `{"rows": [...]}`, pretty, written by `write`.
    fn written(out: &Path, rows: &[(&str, Value)], reuse: Option<&Reuse>) -> (Vec<u8>, Layout) {
        let keys: Vec<&str> = rows.iter().map(|(k, _)| *k).collect();
        let written = write(
            out,
            "rows.json",
            (b"{\n  \"rows\": [\n    ", b",\n    ", b"\n  ]\n}\n"),
            &keys,
            |i| pretty_at(&rows[i].1, "    "),
            reuse,
        )
        .expect("write");
        assert!(written.changed);
        (
            std::fs::read(out.join("rows.json")).unwrap(),
            written.layout,
        )
    }

    fn whole(rows: &[(&str, Value)]) -> Vec<u8> {
        let doc = json!({"rows": rows.iter().map(|(_, v)| v.clone()).collect::<Vec<_>>()});
        let mut bytes = serde_json::to_vec_pretty(&doc).unwrap();
        bytes.push(b'\n');
        bytes
    }

    #[test]
    fn a_file_written_from_its_old_parts_is_the_file_written_whole() {
        let site = tempfile::tempdir().unwrap();
        let scratch = tempfile::tempdir().unwrap();
        let row = |k: &str, n: i64| json!({"name": k, "n": n, "schema": {"a": [1, {"b": "x\ny"}]}});
        let before: Vec<(&str, Value)> = ["A", "B", "C", "D", "E"]
            .iter()
            .map(|k| (*k, row(k, 1)))
            .collect();
        let (bytes, layout) = written(site.path(), &before, None);
        assert_eq!(bytes, whole(&before));
        Layouts::save(site.path(), &[("rows.json", layout)]).unwrap();
        let layouts = Layouts::read(site.path());
        assert_eq!(layouts.0.len(), 1, "the list reads back");

        // B changed, D gone, F new, E moved before C: every unchanged part is copied, and
        // the changed one is not (its old part is marked so a copy would show).
        let after: Vec<(&str, Value)> = vec![
            ("A", row("A", 1)),
            ("B", row("B", 2)),
            ("E", row("E", 1)),
            ("C", row("C", 1)),
            ("F", row("F", 1)),
        ];
        let changed: BTreeSet<String> = ["B", "D", "F"].iter().map(|s| s.to_string()).collect();
        let reuse = Reuse {
            site: site.path(),
            layouts: &layouts,
            changed: &changed,
        };
        let rendered = std::cell::Cell::new(0);
        let keys: Vec<&str> = after.iter().map(|(k, _)| *k).collect();
        write(
            scratch.path(),
            "rows.json",
            (b"{\n  \"rows\": [\n    ", b",\n    ", b"\n  ]\n}\n"),
            &keys,
            |i| {
                rendered.set(rendered.get() + 1);
                pretty_at(&after[i].1, "    ")
            },
            Some(&reuse),
        )
        .unwrap();
        assert_eq!(
            std::fs::read(scratch.path().join("rows.json")).unwrap(),
            whole(&after)
        );
        assert_eq!(rendered.get(), 2, "only B and F are rendered");

        // A changed row whose part is the same, nothing else changed: nothing is written.
        let empty = tempfile::tempdir().unwrap();
        let same: BTreeSet<String> = ["C".to_string()].into();
        let reuse = Reuse {
            site: site.path(),
            layouts: &layouts,
            changed: &same,
        };
        let keys: Vec<&str> = before.iter().map(|(k, _)| *k).collect();
        let frame: (&[u8], &[u8], &[u8]) = (b"{\n  \"rows\": [\n    ", b",\n    ", b"\n  ]\n}\n");
        let render = |i: usize| pretty_at(&before[i].1, "    ");
        let written_with = |frame| {
            let done = write(
                empty.path(),
                "rows.json",
                frame,
                &keys,
                render,
                Some(&reuse),
            );
            (
                done.unwrap().changed,
                empty.path().join("rows.json").exists(),
            )
        };
        assert_eq!(written_with(frame), (false, false));
        // The same parts under another head: written.
        let frame = (&b"{\n  \"rowz\": [\n    "[..], frame.1, frame.2);
        assert_eq!(written_with(frame), (true, true));

        // The site's file written by anything else (same length): rendered whole.
        let edited = std::fs::read(site.path().join("rows.json"))
            .unwrap()
            .iter()
            .map(|&b| if b == b'1' { b'7' } else { b })
            .collect::<Vec<u8>>();
        std::fs::write(site.path().join("rows.json"), &edited).unwrap();
        let none = BTreeSet::new();
        let reuse = Reuse {
            site: site.path(),
            layouts: &layouts,
            changed: &none,
        };
        let (bytes, _) = written(scratch.path(), &before, Some(&reuse));
        assert_eq!(bytes, whole(&before), "a moved stamp: nothing copied");
    }

    #[test]
    fn a_list_that_does_not_read_is_no_list() {
        for text in [
            "",
            "capdir parts 2\n",
            "capdir parts 1\nfile a.json 1:2.3:4.5:6 0 1 2\n3 A\n",
            "capdir parts 1\nfile a.json 1:2.3 0 1 0\n",
            "capdir parts 1\nfile a.json 1:2.3:4.5:6 0 1 1\nx A\n",
            "capdir parts 1\nnope\n",
        ] {
            assert!(Layouts::parse(text).is_none(), "{text:?}");
        }
        let good = Layouts::parse("capdir parts 1\nfile a.json 1:2.3:4.5:6 4 1 2\n3 A\n5 B\n")
            .expect("reads");
        let (_, layout) = &good.0["a.json"];
        assert_eq!(layout.parts, vec![("A".into(), 3), ("B".into(), 5)]);
    }
}
