//! Trees read straight from the pack when Git stored them as a delta on the tree the walk
//! holds already. Git packs the successive versions of a directory as deltas on each other,
//! so in a walk in the direction the pack was written, a commit's catalogue tree is mostly a
//! small delta on a tree read a few commits before: one inflate of a few dozen bytes and one
//! copy of the tree. gix's general lookup resolves the same object through its delta-base
//! cache, copying the whole tree in and out of the cache; with ten thousand rows that tree is
//! half a megabyte, per commit.
//!
//! gix-pack keeps its delta decoder to itself, so the few lines that apply Git's delta format
//! (copy-from-base and insert instructions, <https://git-scm.com/docs/pack-format>) are here.
//! Anything else (a loose object, a delta on a tree the walker no longer holds) is left to
//! gix, which looks the tree up the general way.

use anyhow::{Result, anyhow, bail};
use gix::ObjectId;
use gix::odb::pack::Bundle;
use gix::odb::pack::data::entry::Header;

/// A delta bigger than this is not worth the shortcut (and is not a directory's small edit).
const MAX_DELTA_BYTES: u64 = 16 * 1024 * 1024;

/// The pack files of one repository, and the buffers their deltas are inflated into.
pub struct Packs {
    bundles: Vec<Bundle>,
    inflate: gix::zlib::Inflate,
    buf: Vec<u8>,
}

impl Packs {
    /// The packs under the repository's `objects/pack`. A pack that cannot be opened is
    /// skipped: its objects are still found through gix.
    pub fn open(repo: &gix::Repository) -> Packs {
        let dir = repo.common_dir().join("objects").join("pack");
        let mut idx: Vec<_> = std::fs::read_dir(&dir)
            .into_iter()
            .flatten()
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.extension().is_some_and(|x| x == "idx"))
            .collect();
        idx.sort();
        Packs {
            bundles: idx
                .iter()
                .filter_map(|p| Bundle::at(p, repo.object_hash()).ok())
                .collect(),
            inflate: Default::default(),
            buf: Vec::new(),
        }
    }

    /// Which pack holds `id`, and at what offset.
    pub fn locate(&self, id: &ObjectId) -> Option<Place> {
        self.bundles.iter().enumerate().find_map(|(i, b)| {
            let at = b.index.lookup(id)?;
            Some((i, b.index.pack_offset_at_index(at)))
        })
    }

    /// When the object `id` at `place` is stored as a delta: the delta, and where its base is.
    pub fn delta_at(&self, id: &ObjectId, (at, offset): Place) -> Result<Option<(Delta, Base)>> {
        let entry = self.bundles[at]
            .pack
            .entry(offset)
            .map_err(|e| anyhow!("pack entry of {id}: {e}"))?;
        let base = match &entry.header {
            Header::RefDelta { base_id } => Base::Id(*base_id),
            Header::OfsDelta { base_distance } => {
                match entry.pack_offset().checked_sub(*base_distance) {
                    Some(o) => Base::At((at, o)),
                    None => return Ok(None),
                }
            }
            _ => return Ok(None),
        };
        if entry.decompressed_size > MAX_DELTA_BYTES {
            return Ok(None);
        }
        Ok(Some((Delta { at, entry }, base)))
    }

    /// Apply `delta` to the bytes of its base, writing the object into `out`; returns how
    /// many leading and trailing bytes the result certainly shares with the base.
    pub fn apply(&mut self, delta: &Delta, base: &[u8], out: &mut Vec<u8>) -> Result<Shared> {
        self.buf.resize(delta.entry.decompressed_size as usize, 0);
        self.bundles[delta.at]
            .pack
            .decompress_entry(&delta.entry, &mut self.inflate, &mut self.buf)
            .map_err(|e| anyhow!("inflating a delta: {e}"))?;
        apply(base, &self.buf, out).map_err(|e| anyhow!("a tree's delta: {e}"))
    }
}

/// A pack (its position in [`Packs`]) and an offset in it.
pub type Place = (usize, u64);

/// Where a delta's base is: at an offset of the same pack, or named by id.
pub enum Base {
    At(Place),
    Id(ObjectId),
}

/// A delta entry of a pack, not yet inflated.
pub struct Delta {
    at: usize,
    entry: gix::odb::pack::data::Entry,
}

/// A size in Git's delta header: seven bits a byte, low bits first.
fn varint(d: &[u8], at: &mut usize) -> Result<usize> {
    let mut size = 0usize;
    for shift in (0..64).step_by(7) {
        let byte = *d.get(*at).ok_or_else(|| anyhow!("truncated size"))?;
        *at += 1;
        size |= usize::from(byte & 0x7f) << shift;
        if byte & 0x80 == 0 {
            return Ok(size);
        }
    }
    bail!("size does not fit in 64 bits")
}

/// Bytes a delta's result shares with its base at the start and at the end, as its copies
/// say: the leading copies that take each byte from the same offset, and the trailing copies
/// that take each from the same distance before the end. A lower bound of the common prefix
/// and suffix, read from a few instructions instead of comparing the two objects.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Shared {
    pub prefix: usize,
    pub suffix: usize,
}

/// Apply Git delta `d` to `base`, writing the result into `out`.
fn apply(base: &[u8], d: &[u8], out: &mut Vec<u8>) -> Result<Shared> {
    let mut at = 0;
    if varint(d, &mut at)? != base.len() {
        bail!("made for a base of another size");
    }
    let size = varint(d, &mut at)?;
    out.clear();
    // The header is only a claim: reserve no more than the base and the delta could make
    // without repeating bytes; a longer result grows as it is written and is cut off at `size`.
    out.reserve(size.min(base.len() + d.len()));
    let mut shared = Shared::default();
    let mut leading = true;
    while let Some(&cmd) = d.get(at) {
        at += 1;
        if cmd & 0x80 != 0 {
            // Copy from the base: bits 0–3 say which offset bytes follow, 4–6 which size bytes.
            let mut field = |bits: u8, shift: usize| -> Result<usize> {
                let mut v = 0;
                for i in 0..bits as usize {
                    if cmd & (1 << (shift + i)) != 0 {
                        let b = *d.get(at).ok_or_else(|| anyhow!("truncated copy"))?;
                        at += 1;
                        v |= usize::from(b) << (8 * i);
                    }
                }
                Ok(v)
            };
            let offset = field(4, 0)?;
            let len = match field(3, 4)? {
                0 => 0x10000,
                n => n,
            };
            let from = base
                .get(offset..offset.saturating_add(len))
                .ok_or_else(|| anyhow!("copy beyond the base"))?;
            let to = out.len();
            leading &= offset == to;
            if leading {
                shared.prefix = to + len;
            }
            // As far from the base's end as from the result's: part of a common suffix, with
            // the run of such copies just before it (each ends where the next starts).
            let from_end = base.len() - offset - len;
            let tail = to + len <= size && from_end == size - to - len;
            shared.suffix = if tail { shared.suffix + len } else { 0 };
            out.extend_from_slice(from);
        } else if cmd != 0 {
            let bytes = d
                .get(at..at + usize::from(cmd))
                .ok_or_else(|| anyhow!("truncated insert"))?;
            out.extend_from_slice(bytes);
            at += usize::from(cmd);
            leading = false;
            shared.suffix = 0;
        } else {
            bail!("reserved instruction 0");
        }
        if out.len() > size {
            bail!("result longer than its header says");
        }
    }
    if out.len() != size {
        bail!("result of {} bytes, its header says {size}", out.len());
    }
    Ok(shared)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn applies_copies_and_inserts_and_checks_sizes() {
        let base = b"0123456789";
        // base 10, result 7: copy 3 bytes from offset 2, insert "ab", copy 2 from offset 8.
        let d = [10, 7, 0x91, 2, 3, 2, b'a', b'b', 0x91, 8, 2];
        let mut out = Vec::new();
        apply(base, &d, &mut out).unwrap();
        assert_eq!(out, b"234ab89");
        // Copies in place at the start and at the end say what is shared there: the copy
        // of offset 7 ends 1 byte before the result's end (not the base's) in the first.
        for (d, result, prefix, suffix) in [
            (
                &[10, 9, 0x90, 4, 1, b'x', 0x91, 7, 3, 0x91, 9, 1][..],
                &b"0123x7899"[..],
                4,
                1,
            ),
            (
                &[10, 8, 0x90, 4, 1, b'x', 0x91, 7, 3][..],
                &b"0123x789"[..],
                4,
                3,
            ),
        ] {
            let shared = apply(base, d, &mut out).unwrap();
            assert_eq!(out, result);
            assert_eq!(shared, Shared { prefix, suffix });
        }
        // A copy of size 0 means 0x10000 bytes: beyond this base.
        assert!(apply(base, &[10, 7, 0x81, 0], &mut out).is_err());
        // Wrong base size, short result, truncated insert, reserved 0.
        assert!(apply(base, &[9, 1, 1, b'x'], &mut out).is_err());
        assert!(apply(base, &[10, 2, 1, b'x'], &mut out).is_err());
        assert!(apply(base, &[10, 2, 2, b'x'], &mut out).is_err());
        assert!(apply(base, &[10, 1, 0], &mut out).is_err());
    }

    /// Random deltas built from valid copies and inserts apply to exactly what they describe;
    /// the same deltas with a byte flipped or cut short fail or apply, and never panic.
    #[test]
    fn random_deltas_apply_and_corrupt_ones_never_panic() {
        let base: Vec<u8> = (0..=255).collect();
        let mut seed = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed
        };
        let mut out = Vec::new();
        for _ in 0..5_000 {
            let (mut body, mut expected) = (Vec::new(), Vec::new());
            for _ in 0..next() % 6 {
                if next() % 2 == 0 {
                    let (offset, len) = ((next() % 200) as u8, (next() % 50 + 1) as u8);
                    body.extend([0x91, offset, len]);
                    expected.extend_from_slice(&base[offset as usize..][..len as usize]);
                } else {
                    let len = (next() % 20 + 1) as u8;
                    let bytes: Vec<u8> = (0..len).map(|_| next() as u8).collect();
                    body.push(len);
                    body.extend_from_slice(&bytes);
                    expected.extend_from_slice(&bytes);
                }
            }
            let mut d = vec![0x80, 0x02];
            let mut size = expected.len();
            loop {
                let low = (size & 0x7f) as u8;
                size >>= 7;
                d.push(if size == 0 { low } else { low | 0x80 });
                if size == 0 {
                    break;
                }
            }
            d.extend_from_slice(&body);
            let shared = apply(&base, &d, &mut out).unwrap();
            assert_eq!(out, expected);
            // What the copies claim is shared, is.
            let (p, s) = (shared.prefix, shared.suffix);
            assert_eq!(out[..p], base[..p]);
            assert_eq!(out[out.len() - s..], base[base.len() - s..]);
            let mut corrupt = d.clone();
            let at = (next() as usize) % corrupt.len();
            corrupt[at] ^= 1 << (next() % 8);
            let _ = apply(&base, &corrupt, &mut out);
            let _ = apply(&base, &d[..at], &mut out);
        }
    }
}
