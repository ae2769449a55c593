//! Documentation text as a docstring line takes it: markdown and HTML reduced to plain words
//! on one line, and cut at a sentence or a word to fit a budget.

use regex::Regex;
use std::sync::LazyLock;

static IMAGE: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r"!\[([^\]]*)\]\([^)]*\)").expect("static pattern"));
static LINK: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r"\[([^\]]*)\]\([^)]*\)").expect("static pattern"));
static TAG: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r"</?[A-Za-z][^>]{0,200}>").expect("static pattern"));
static EMPHASIS: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r"\*\*|__").expect("static pattern"));

/// One line of plain text: links keep their words, tags and emphasis go, headings and list
/// markers go, control characters become spaces, white space runs become one space.
pub fn plain(markdown: &str) -> String {
    let mut lines = Vec::new();
    for line in markdown.lines() {
        let t = line.trim();
        let t = t.trim_start_matches('#').trim_start();
        let t = t
            .strip_prefix("- ")
            .or_else(|| t.strip_prefix("* "))
            .or_else(|| t.strip_prefix("> "))
            .unwrap_or(t);
        if !t.is_empty() {
            lines.push(t.to_string());
        }
    }
    let joined = lines.join(" ");
    let s = IMAGE.replace_all(&joined, "$1");
    let s = LINK.replace_all(&s, "$1");
    let s = TAG.replace_all(&s, " ");
    let s = EMPHASIS.replace_all(&s, "");
    let s = s
        .replace("&nbsp;", " ")
        .replace("&lt;", "<")
        .replace("&gt;", ">")
        .replace("&quot;", "\"")
        .replace("&amp;", "&");
    let mut out = String::with_capacity(s.len());
    let mut space = false;
    for c in s.chars() {
        if c.is_whitespace() || c.is_control() || is_invisible(c) {
            space = !out.is_empty();
        } else {
            if space {
                out.push(' ');
                space = false;
            }
            out.push(c);
        }
    }
    out
}

/// Characters that are not text: byte-order marks, line and paragraph separators,
/// non-characters.
pub fn is_invisible(c: char) -> bool {
    matches!(
        c,
        '\u{feff}' | '\u{2028}' | '\u{2029}' | '\u{85}' | '\u{fffe}' | '\u{ffff}'
    )
}

/// `s` in at most `max` characters: whole when it fits; else up to the last sentence end
/// that keeps at least half of it; else up to a word, with `…`.
pub fn cut(s: &str, max: usize) -> String {
    if s.chars().count() <= max {
        return s.to_string();
    }
    let limit: usize = s
        .char_indices()
        .nth(max.saturating_sub(1))
        .map_or(s.len(), |(i, _)| i);
    let head = &s[..limit];
    if let Some(end) = head.rfind(". ")
        && head[..end].chars().count() >= max / 2
    {
        return head[..=end].to_string();
    }
    let at = if s[limit..].starts_with(' ') {
        limit
    } else {
        head.rfind(' ').filter(|&i| i >= limit / 2).unwrap_or(limit)
    };
    format!("{}…", head[..at].trim_end_matches([',', ';', ':', ' ']))
}

/// The first sentence of `s` (to the first `. `), or all of it.
pub fn first_sentence(s: &str) -> &str {
    match s.find(". ") {
        Some(i) => &s[..=i],
        None => s,
    }
}

/// One line: whitespace runs made one space, control characters dropped.
pub fn one_line(text: &str) -> String {
    text.split_whitespace()
        .map(|w| w.chars().filter(|c| !c.is_control()).collect::<String>())
        .filter(|w| !w.is_empty())
        .collect::<Vec<_>>()
        .join(" ")
}

/// At most `max` characters of `text`, cut after a whole word with `…` when it is longer.
/// The rest, after the cut, is returned too.
pub fn fit(text: &str, max: usize) -> (String, String) {
    if text.chars().count() <= max {
        return (text.to_string(), String::new());
    }
    let limit = text
        .char_indices()
        .nth(max.saturating_sub(1))
        .map_or(text.len(), |(i, _)| i);
    let cut = text[..limit].rfind(' ').filter(|i| *i > 0).unwrap_or(limit);
    (
        format!("{}…", text[..cut].trim_end()),
        text[cut..].trim_start().to_string(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_text() {
        assert_eq!(
            plain(
                "## Title\n\nSee [the docs](https://x.example/a) and **bold** <br/>text.\n- item"
            ),
            "Title See the docs and bold text. item"
        );
        assert_eq!(plain("a\u{2028}b\tc\u{0}d"), "a b c d");
    }

    #[test]
    fn cuts() {
        assert_eq!(cut("short", 10), "short");
        assert_eq!(
            cut("One sentence here. Another one that is long.", 30),
            "One sentence here."
        );
        assert_eq!(cut("words words words words", 12), "words words…");
        assert!(cut(&"é".repeat(50), 10).chars().count() <= 10);
        assert_eq!(cut("abcdefghij", 5), "abcd…");
    }
}
