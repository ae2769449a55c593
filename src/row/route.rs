//! Router tags: a model calls a row by writing `[KEY]args[/KEY]` in its prose. This module
//! only finds the tags in a text; running them (each through the gate, with its receipt) is
//! the dispatcher's. Tags do not nest: a tag's arguments are the literal text up to its own
//! closing tag, and a tag that is never closed is left as text.
//! The scan is linear in the text (see `tags` for why), so a long or hostile reply costs
//! no more than its length.

use std::collections::HashMap;

use crate::row::is_valid_key;

/// The most tags one text may carry; the rest are left as text.
pub const MAX_TAGS: usize = 32;

/// One tag found in a text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Tag<'t> {
    /// Byte range of the whole tag, `[KEY]` to `[/KEY]`.
    pub start: usize,
    pub end: usize,
    pub key: &'t str,
    /// The text between the opening and the closing tag, as written.
    pub args: &'t str,
}

/// The tags of `text`, in the order they appear, at most `MAX_TAGS`.
///
/// Linear in the text. A key never holds `[` or `]`, so each `[` of the text is at most one
/// of: an opening `[KEY]` (its first `]` comes within 65 bytes and the bytes between are a
/// key) or a closing `[/KEY]`; which one, and for what key, is read off the next 66 bytes.
/// One pass over the `[`s sorts them into the openings, in order, and for each key the
/// increasing positions of its closings. The openings are then taken in order, skipping those
/// inside the last tag found; a tag closes at the first closing of its key after its opening.
/// Openings of one key are taken at increasing positions, so each key's closings are walked
/// by a cursor that only moves forward: every closing is passed at most once, every `[` is
/// looked at once through a window of bounded size, and the whole is O(text): a caller's text
/// cannot make the dispatcher scan it twice. `tests::tags_match_the_reference` checks the
/// result against the plain quadratic reading.
pub fn tags(text: &str) -> Vec<Tag<'_>> {
    let b = text.as_bytes();
    // Every `[` classified once. `close` is the byte index of the `]` ending the bracket.
    let mut opens: Vec<(usize, usize)> = Vec::new();
    let mut closings: HashMap<&str, (Vec<usize>, usize)> = HashMap::new();
    for at in memchr::memchr_iter(b'[', b) {
        // A key is at most 64 bytes, so the `]` of `[KEY]` or `[/KEY]` is within 66 bytes.
        let window = &b[at + 1..b.len().min(at + 67)];
        let Some(close) = memchr::memchr(b']', window).map(|i| at + 1 + i) else {
            continue;
        };
        if b.get(at + 1) == Some(&b'/') {
            let key = &text[at + 2..close];
            if is_valid_key(key) {
                closings.entry(key).or_default().0.push(at);
            }
        } else if is_valid_key(&text[at + 1..close]) {
            opens.push((at, close));
        }
    }
    let mut found = Vec::new();
    let mut next = 0;
    for (open, close) in opens {
        if found.len() == MAX_TAGS {
            break;
        }
        if open < next {
            continue;
        }
        let key = &text[open + 1..close];
        let Some((list, cursor)) = closings.get_mut(key) else {
            continue;
        };
        while list.get(*cursor).is_some_and(|&c| c < close) {
            *cursor += 1;
        }
        let Some(&end) = list.get(*cursor) else {
            continue;
        };
        let stop = end + key.len() + 3;
        found.push(Tag {
            start: open,
            end: stop,
            key,
            args: &text[close + 1..end],
        });
        next = stop;
    }
    found
}

/// `text` with each tag replaced by what `with` says for it, in order.
pub fn replace(text: &str, found: &[Tag<'_>], with: &[String]) -> String {
    let mut out = String::with_capacity(text.len());
    let mut last = 0;
    for (tag, value) in found.iter().zip(with) {
        out.push_str(&text[last..tag.start]);
        out.push_str(value);
        last = tag.end;
    }
    out.push_str(&text[last..]);
    out
}

/// A row's example call as a tag.
pub fn example_tag(key: &str, ex: &str) -> String {
    format!("[{key}]{ex}[/{key}]")
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// The first implementation, kept verbatim as the specification: for every opening it
    /// searches the rest of the text for the closing, so it is quadratic.
    fn reference_tags(text: &str) -> Vec<Tag<'_>> {
        let mut found = Vec::new();
        let mut at = 0;
        while found.len() < MAX_TAGS {
            let Some(open) = text[at..].find('[').map(|i| at + i) else {
                break;
            };
            let Some(close) = text[open..].find(']').map(|i| open + i) else {
                break;
            };
            let key = &text[open + 1..close];
            if !is_valid_key(key) {
                at = open + 1;
                continue;
            }
            let closing = format!("[/{key}]");
            let Some(end) = text[close + 1..].find(&closing).map(|i| close + 1 + i) else {
                at = close + 1;
                continue;
            };
            found.push(Tag {
                start: open,
                end: end + closing.len(),
                key,
                args: &text[close + 1..end],
            });
            at = end + closing.len();
        }
        found
    }

    #[test]
    fn tags_are_found_in_order_and_left_alone_when_unclosed_or_not_keys() {
        let text = "Hash [SHA256]hello[/SHA256], then [UPPER]a|b[/UPPER]; [lower]x[/lower] [NOW] [ECHO]open";
        let found = tags(text);
        let keys: Vec<&str> = found.iter().map(|t| t.key).collect();
        assert_eq!(keys, ["SHA256", "UPPER"]);
        assert_eq!(found[1].args, "a|b");
        let out = replace(text, &found, &["H".into(), "A|B".into()]);
        assert_eq!(out, "Hash H, then A|B; [lower]x[/lower] [NOW] [ECHO]open");
        // Not nested: the outer tag's arguments are its literal text.
        let nested = tags("[ECHO]x [UPPER]y[/UPPER] z[/ECHO]");
        assert_eq!(nested.len(), 1);
        assert_eq!(nested[0].args, "x [UPPER]y[/UPPER] z");
        let many = "[NOW][/NOW]".repeat(MAX_TAGS + 5);
        assert_eq!(tags(&many).len(), MAX_TAGS);
        assert_eq!(tags("[NOW][/NOW]")[0].args, "");
    }

    /// Pieces that, joined at random, make texts full of openings, closings, near misses,
    /// tags inside tags and non-ASCII bytes.
    const PIECES: &[&str] = &[
        "[", "]", "/", "A", "B", "AB", "[AB]", "[/AB]", "[A_1]", "[/A_1]", "x", "[NOW]", "[/NOW]",
        "é", "[/", "[B", "AB]",
    ];

    fn tag_soup() -> impl Strategy<Value = String> {
        prop::collection::vec(prop::sample::select(PIECES), 0..60).prop_map(|v| v.concat())
    }

    /// The same with whole tags for half the pieces, so that texts often carry more than
    /// `MAX_TAGS` of them.
    fn tag_crowd() -> impl Strategy<Value = String> {
        const WHOLE: &[&str] = &["[AB]x[/AB]", "[NOW][/NOW]", "[A_1][/A_1]", "[AB][/AB]"];
        let piece = prop_oneof![prop::sample::select(PIECES), prop::sample::select(WHOLE)];
        prop::collection::vec(piece, 0..100).prop_map(|v| v.concat())
    }

    /// Keys at and past the longest, where the `]` falls at the end of the window or just
    /// outside it, and the tag soup does not reach.
    #[test]
    fn keys_at_the_window_edge_match_the_reference() {
        for n in [1, 2, 63, 64, 65, 66, 67] {
            let key = format!("K{}", "_".repeat(n - 1));
            let short = &key[..n - 1];
            for text in [
                format!("[{key}]a[/{key}]"),
                format!("[{key}]a[/{key}][/{key}]x"),
                format!("[{key}]a[/{short}][/{key}]"),
                format!("[{short}][{key}]a[/{short}][/{key}]"),
                format!("[{key}[{key}]é[/{key}]"),
                format!("[{key}]a[/{key}"),
            ] {
                assert_eq!(tags(&text), reference_tags(&text), "{text}");
            }
        }
        let long = format!("[{}]a[/{}]", "K".repeat(64), "K".repeat(64));
        assert_eq!(tags(&long).len(), 1);
        let longer = format!("[{}]a[/{}]", "K".repeat(65), "K".repeat(65));
        assert!(tags(&longer).is_empty());
    }

    /// Results on long texts (no timing: the scan is linear by construction, see `tags`; the
    /// old one took seconds on the first of these).
    #[test]
    fn long_texts_are_parsed_like_short_ones() {
        let n = 256 * 1024 / 4;
        assert!(tags(&"[AB]".repeat(n)).is_empty());
        let one = format!("{}x[/AB]", "[AB]".repeat(n));
        let found = tags(&one);
        assert_eq!(found.len(), 1);
        assert_eq!((found[0].start, found[0].end), (0, one.len()));
        let mut mixed = String::new();
        while mixed.len() < 1024 * 1024 {
            mixed.push_str("[AB] [A_1]é[/AB] [NOW]x[/A_1] [/NOW] [");
        }
        let found = tags(&mixed);
        assert_eq!(found.len(), MAX_TAGS);
        for (i, t) in found.iter().enumerate() {
            let want = if i % 2 == 0 {
                ("AB", " [A_1]é")
            } else {
                ("NOW", "x[/A_1] ")
            };
            assert_eq!((t.key, t.args), want);
        }
    }

    proptest! {
        /// Any text: no panic, ranges inside the text and in order, and replacing every tag
        /// with itself gives the text back.
        #[test]
        fn any_text_parses(text in ".{0,200}") {
            let found = tags(&text);
            let mut last = 0;
            for t in &found {
                prop_assert!(t.start >= last && t.end <= text.len() && t.start < t.end);
                last = t.end;
            }
            let same: Vec<String> = found.iter().map(|t| text[t.start..t.end].to_string()).collect();
            prop_assert_eq!(replace(&text, &found, &same), text);
        }

        /// The linear scan finds exactly what the quadratic one did.
        #[test]
        fn tags_match_the_reference(text in tag_soup()) {
            prop_assert_eq!(tags(&text), reference_tags(&text));
        }

        #[test]
        fn tags_match_the_reference_past_the_cap(text in tag_crowd()) {
            prop_assert_eq!(tags(&text), reference_tags(&text));
        }

        #[test]
        fn tags_match_the_reference_on_any_text(text in ".{0,200}") {
            prop_assert_eq!(tags(&text), reference_tags(&text));
        }
    }
}
