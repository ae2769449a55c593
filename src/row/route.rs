//! Router tags: a model calls a row by writing `[KEY]args[/KEY]` in its prose. This module
//! only finds the tags in a text; running them (each through the gate, with its receipt) is
//! the dispatcher's. Tags do not nest: a tag's arguments are the literal text up to its own
//! closing tag, and a tag that is never closed is left as text.

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
pub fn tags(text: &str) -> Vec<Tag<'_>> {
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
    }
}
