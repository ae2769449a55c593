//! What changed between two raw trees of the catalogue's directory: the entries between
//! their common prefix and suffix, merge-joined by name.

use super::{ChangeKind, pack};

/// One entry of a raw tree: name, id, and whether it is a blob (or link) rather than a tree.
type RawEntry<'t> = (&'t [u8], &'t [u8], bool);

/// The entry at `at`, and where the next entry starts.
fn entry_at(t: &[u8], at: usize) -> Option<(RawEntry<'_>, usize)> {
    let sp = at + memchr::memchr(b' ', t.get(at..)?)?;
    let nul = sp + 1 + memchr::memchr(0, t.get(sp + 1..)?)?;
    let id = t.get(nul + 1..nul + 21)?;
    let blob = t[at] == b'1'; // 100644, 100755, 120000 are blobs and links; 40000 is a tree
    Some(((&t[sp + 1..nul], id, blob), nul + 21))
}

/// Entries from `from` while they start before `until`, each with its start, plus where the
/// first at or after `until` starts.
pub(super) fn entries_between(
    t: &[u8],
    from: usize,
    until: usize,
) -> (Vec<(usize, RawEntry<'_>)>, usize) {
    let mut out = Vec::new();
    let mut at = from;
    while at < until {
        let Some((e, next)) = entry_at(t, at) else {
            break;
        };
        out.push((at, e));
        at = next;
    }
    (out, at)
}

/// Length of the common prefix, compared a block at a time (memcmp) before byte by byte.
pub(super) fn common_prefix(a: &[u8], b: &[u8]) -> usize {
    const BLOCK: usize = 4096;
    let n = a.len().min(b.len());
    let mut i = 0;
    while i + BLOCK <= n && a[i..i + BLOCK] == b[i..i + BLOCK] {
        i += BLOCK;
    }
    i + a[i..n]
        .iter()
        .zip(&b[i..n])
        .take_while(|(x, y)| x == y)
        .count()
}

pub(super) fn common_suffix(a: &[u8], b: &[u8]) -> usize {
    const BLOCK: usize = 4096;
    let n = a.len().min(b.len());
    let (a, b) = (&a[a.len() - n..], &b[b.len() - n..]);
    let mut i = 0;
    while i + BLOCK <= n && a[n - i - BLOCK..n - i] == b[n - i - BLOCK..n - i] {
        i += BLOCK;
    }
    i + a[..n - i]
        .iter()
        .rev()
        .zip(b[..n - i].iter().rev())
        .take_while(|(x, y)| x == y)
        .count()
}

/// Known entry starts of a raw tree, ascending: a sample, so that finding the entry at a
/// position hops over a few entries instead of every one before it.
pub(super) type Marks = Vec<usize>;

/// A whole parse keeps every this many entry starts as marks.
const MARK_EVERY: usize = 32;
/// Marks kept at most; past it, every other one goes.
const MAX_MARKS: usize = 1024;

/// Files whose blob differs between two raw trees, and the marks of both trees (`now`'s,
/// `before`'s). The trees share most bytes (a commit changes a few rows), so only the entries
/// between the common prefix and the common suffix are parsed: memcmp-speed for a
/// ten-thousand-row directory, and less when `shared` (from a delta between the two) says
/// how much of each end is known to be the same. The entry where the difference starts is
/// found by hopping from the last mark before it, from either tree's marks: where the bytes
/// are the same, so are the entries.
pub(super) fn diff(
    now: &[u8],
    before: &[u8],
    marks: (Option<&[usize]>, Option<&[usize]>),
    shared: pack::Shared,
    out: &mut Vec<(String, ChangeKind)>,
) -> (Marks, Marks) {
    let shortest = now.len().min(before.len());
    let known = shared.prefix.min(shortest);
    let prefix = known + common_prefix(&now[known..], &before[known..]);
    let max_suffix = shortest - prefix;
    let known = shared.suffix.min(max_suffix);
    let (rest_now, rest_before) = (
        &now[prefix..now.len() - known],
        &before[prefix..before.len() - known],
    );
    let suffix = (known + common_suffix(rest_now, rest_before)).min(max_suffix);
    let Some(known) = marks.0.or(marks.1) else {
        return diff_whole(now, before, out);
    };
    let lead = &known[..known.partition_point(|&m| m <= prefix)];
    // An entry ends 20 bytes after the NUL that ends its name: hop from NUL to NUL.
    let mut start = lead.last().copied().unwrap_or(0);
    while let Some(nul) = memchr::memchr(0, now.get(start..prefix.min(now.len())).unwrap_or(&[])) {
        let next = start + nul + 21;
        if next > prefix {
            break;
        }
        start = next;
    }
    let (a, end_a) = entries_between(now, start, now.len() - suffix);
    let (b, end_b) = entries_between(before, start, before.len() - suffix);
    if now.get(end_a..) != before.get(end_b..) {
        // The boundaries did not line up after the difference: compare every entry.
        return diff_whole(now, before, out);
    }
    compare(&a, &b, out);
    // Past the difference, the same bytes: the same entries, shifted by the length change.
    let tail = |m: &[usize], from: usize, to: usize| -> Vec<usize> {
        m[m.partition_point(|&x| x < from)..]
            .iter()
            .map(|x| x - from + to)
            .collect()
    };
    let marks_of = |middle: &[(usize, RawEntry<'_>)], tail: Vec<usize>| {
        let mut m: Marks = lead.to_vec();
        let middle = middle.iter().map(|(at, _)| *at).step_by(8);
        for x in middle.chain(tail) {
            if m.last().is_none_or(|&l| x > l) {
                m.push(x);
            }
        }
        if m.len() > MAX_MARKS {
            m = m.into_iter().step_by(2).collect();
        }
        m
    };
    let tail_now = match marks {
        (Some(n), _) => tail(n, end_a, end_a),
        (None, Some(b)) => tail(b, end_b, end_a),
        (None, None) => Vec::new(),
    };
    let tail_before = match marks {
        (_, Some(b)) => tail(b, end_b, end_b),
        (Some(n), None) => tail(n, end_a, end_b),
        (None, None) => Vec::new(),
    };
    (marks_of(&a, tail_now), marks_of(&b, tail_before))
}

/// [`diff`] by a parse of both whole trees, marking every [`MARK_EVERY`]th entry.
pub(super) fn diff_whole(
    now: &[u8],
    before: &[u8],
    out: &mut Vec<(String, ChangeKind)>,
) -> (Marks, Marks) {
    let a = entries_between(now, 0, now.len()).0;
    let b = entries_between(before, 0, before.len()).0;
    compare(&a, &b, out);
    let marks =
        |e: &[(usize, RawEntry<'_>)]| e.iter().map(|(at, _)| *at).step_by(MARK_EVERY).collect();
    (marks(&a), marks(&b))
}

/// Merge-join two runs of entries by name: what was added, modified, deleted.
fn compare(
    a: &[(usize, RawEntry<'_>)],
    b: &[(usize, RawEntry<'_>)],
    out: &mut Vec<(String, ChangeKind)>,
) {
    let name = |n: &[u8]| String::from_utf8_lossy(n).into_owned();
    let (mut i, mut j) = (0, 0);
    while i < a.len() || j < b.len() {
        match (a.get(i).map(|e| e.1), b.get(j).map(|e| e.1)) {
            (Some(x), Some(y)) if x.0 == y.0 => {
                if x.1 != y.1 && x.2 {
                    out.push((name(x.0), ChangeKind::Modified));
                }
                i += 1;
                j += 1;
            }
            (Some(x), y) if y.is_none_or(|y| x.0 < y.0) => {
                if x.2 {
                    out.push((name(x.0), ChangeKind::Added));
                }
                i += 1;
            }
            (_, Some(y)) => {
                if y.2 {
                    out.push((name(y.0), ChangeKind::Deleted));
                }
                j += 1;
            }
            _ => break,
        }
    }
    out.retain(|(n, _)| crate::row::catalogue::is_row_file(n));
}
