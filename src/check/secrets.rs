//! Finding credential-shaped literals, so secrets never enter the catalogue (or the site, a
//! receipt or a log). The same scanner serves `check` and the redaction of stored output.

use memchr::memmem;
use regex::Regex;
use std::borrow::Cow;
use std::sync::LazyLock;

/// One credential-looking literal: what it looks like and where it is in the text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Finding {
    pub kind: &'static str,
    /// Byte offsets in the scanned text.
    pub start: usize,
    pub end: usize,
}

/// The credential shapes: what each looks like, and its pattern.
const SHAPES: [(&str, &str); 7] = [
    (
        "an OpenAI-style `sk-` key",
        r"\bsk-(?:proj-|ant-)?[A-Za-z0-9_-]{20,}",
    ),
    (
        "a GitHub token",
        r"\b(?:ghp|gho|ghu|ghs|ghr)_[A-Za-z0-9]{30,}|\bgithub_pat_[A-Za-z0-9_]{30,}",
    ),
    ("an AWS access key id", r"\b(?:AKIA|ASIA)[0-9A-Z]{16}\b"),
    ("a Slack token", r"\bxox[abposr]-[A-Za-z0-9-]{10,}"),
    (
        "a JSON Web Token",
        r"\beyJ[A-Za-z0-9_-]{8,}\.eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}",
    ),
    ("a private key block", r"-----BEGIN [A-Z ]*PRIVATE KEY-----"),
    (
        "a capdir capability token",
        r"\bcdt1\.[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{20,}",
    ),
];

/// Each shape on its own, for `scan`, which names what it found.
static PATTERNS: LazyLock<Vec<(&'static str, Regex)>> = LazyLock::new(|| {
    SHAPES
        .iter()
        .map(|&(k, p)| (k, Regex::new(p).expect("static secret pattern")))
        .collect()
});

/// Every shape in one pattern, for `redact`, which needs only where: one pass over the text
/// instead of one per shape.
static ANY_SHAPE: LazyLock<Regex> = LazyLock::new(|| {
    let alternatives: Vec<String> = SHAPES.iter().map(|(_, p)| format!("(?:{p})")).collect();
    Regex::new(&alternatives.join("|")).expect("static secret pattern")
});

/// The bytes a token-like run is made of: `[A-Za-z0-9+/_=-]`.
const fn token_bytes() -> [bool; 256] {
    let mut table = [false; 256];
    let mut b = 0;
    while b < 256 {
        let c = b as u8;
        table[b] = c.is_ascii_alphanumeric() || matches!(c, b'+' | b'/' | b'_' | b'=' | b'-');
        b += 1;
    }
    table
}
static TOKEN_BYTE: [bool; 256] = token_bytes();

/// The shortest run of token bytes that may be a credential.
const TOKEN_MIN: usize = 32;

/// The maximal runs of token bytes at least `TOKEN_MIN` long, as byte ranges (what the pattern
/// `[A-Za-z0-9+/_=-]{32,}` finds, in one pass over the bytes). Token bytes are ASCII, so every
/// range falls on character boundaries.
fn token_runs(text: &str) -> impl Iterator<Item = (usize, usize)> + '_ {
    let bytes = text.as_bytes();
    let mut at = 0;
    std::iter::from_fn(move || {
        while at < bytes.len() {
            while at < bytes.len() && !TOKEN_BYTE[bytes[at] as usize] {
                at += 1;
            }
            let start = at;
            while at < bytes.len() && TOKEN_BYTE[bytes[at] as usize] {
                at += 1;
            }
            if at - start >= TOKEN_MIN {
                return Some((start, at));
            }
        }
        None
    })
}

/// Bits of Shannon entropy per character.
fn entropy(s: &str) -> f64 {
    let mut counts = [0usize; 256];
    for b in s.bytes() {
        counts[b as usize] += 1;
    }
    let n = s.len() as f64;
    counts
        .iter()
        .filter(|c| **c > 0)
        .map(|&c| {
            let p = c as f64 / n;
            -p * p.log2()
        })
        .sum()
}

/// A long run that looks random: mixed case and digits, high entropy, not a hex digest
/// (hashes and commit ids are common, legitimate content).
fn looks_random(s: &str) -> bool {
    let b = s.as_bytes();
    if b.iter().all(u8::is_ascii_hexdigit)
        || !b.iter().any(u8::is_ascii_uppercase)
        || !b.iter().any(u8::is_ascii_lowercase)
        || !b.iter().any(u8::is_ascii_digit)
    {
        return false;
    }
    let words = s.split(['_', '-']).filter(|w| w.len() >= 4).count();
    words <= 1 && entropy(s) >= 4.2
}

/// Every credential-looking literal in `text`.
pub fn scan(text: &str) -> Vec<Finding> {
    let mut found: Vec<Finding> = Vec::new();
    for (kind, re) in PATTERNS.iter() {
        for m in re.find_iter(text) {
            found.push(Finding {
                kind,
                start: m.start(),
                end: m.end(),
            });
        }
    }
    let shaped: Vec<(usize, usize)> = found.iter().map(|f| (f.start, f.end)).collect();
    found.extend(random_runs(text, &shaped).map(|(start, end)| Finding {
        kind: "a long high-entropy string",
        start,
        end,
    }));
    found.sort_by_key(|f| f.start);
    found
}

/// Long runs that look random and overlap none of `shaped` (the credential shapes found).
fn random_runs<'t>(
    text: &'t str,
    shaped: &'t [(usize, usize)],
) -> impl Iterator<Item = (usize, usize)> + 't {
    token_runs(text)
        .filter(|&(start, end)| !shaped.iter().any(|&(s, e)| s < end && start < e))
        .filter(|&(start, end)| looks_random(&text[start..end]))
}

/// Secret values this process knows (its own keys), each with its searcher built once, so
/// redacting a text costs one scan per value.
#[derive(Default)]
pub struct Known {
    finders: Vec<memmem::Finder<'static>>,
}

impl Known {
    /// Values shorter than 4 bytes are left out: they would redact ordinary text.
    pub fn new(values: impl IntoIterator<Item = String>) -> Known {
        Known {
            finders: values
                .into_iter()
                .filter(|v| v.len() >= 4)
                .map(|v| memmem::Finder::new(v.as_bytes()).into_owned())
                .collect(),
        }
    }

    /// `text` with every known value replaced; borrowed when none occurs.
    fn replace_in<'t>(&self, text: &'t str) -> Cow<'t, str> {
        let mut out = Cow::Borrowed(text);
        for finder in &self.finders {
            let mut hits = finder.find_iter(out.as_bytes()).peekable();
            if hits.peek().is_none() {
                continue;
            }
            let mut replaced = String::with_capacity(out.len());
            let mut last = 0;
            for at in hits {
                replaced.push_str(&out[last..at]);
                replaced.push_str(REDACTED);
                last = at + finder.needle().len();
            }
            replaced.push_str(&out[last..]);
            out = Cow::Owned(replaced);
        }
        out
    }
}

const REDACTED: &str = "[REDACTED]";

/// `text` with every known secret value and every credential-looking literal replaced.
pub fn redact(text: &str, known: &Known) -> String {
    let text = known.replace_in(text);
    let mut spans: Vec<(usize, usize)> = ANY_SHAPE
        .find_iter(&text)
        .map(|m| (m.start(), m.end()))
        .collect();
    let random: Vec<(usize, usize)> = random_runs(&text, &spans).collect();
    spans.extend(random);
    if spans.is_empty() {
        return text.into_owned();
    }
    spans.sort_unstable();
    let mut out = String::with_capacity(text.len());
    let mut last = 0;
    for (start, end) in spans {
        if start >= last {
            out.push_str(&text[last..start]);
            out.push_str(REDACTED);
            last = end;
        } else {
            last = last.max(end);
        }
    }
    out.push_str(&text[last..]);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_shapes() {
        let kinds = |t: &str| scan(t).into_iter().map(|f| f.kind).collect::<Vec<_>>();
        assert_eq!(kinds("x sk-abcdefghijklmnopqrstuvwx1234 y").len(), 1);
        assert_eq!(kinds("ghp_abcdefghijklmnopqrstuvwxyz0123456789").len(), 1);
        assert_eq!(kinds("AKIAIOSFODNN7EXAMPLE").len(), 1);
        assert_eq!(
            kinds("share=cdt1.eyJpZCI6InRva18xIn0.q8Zx3Kp2Lm9Qw4Rt7Yu1Io3Pa6Sd5Fg0Hj2Kl8Zx4Cv&x=1"),
            vec!["a capdir capability token"]
        );
        assert_eq!(kinds("xoxb-1234567890-abcdefghij").len(), 1);
        assert_eq!(
            kinds("q=Zx8Kp2Lm9Qw4Rt7Yu1Io3Pa6Sd5Fg0Hj2Kl8Zx4Cv").len(),
            1
        );
    }

    #[test]
    fn leaves_ordinary_text() {
        assert!(scan("https://api.github.com/repos/$1/$2/issues?state=open").is_empty());
        assert!(
            scan("e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855").is_empty()
        );
        assert!(scan("GITHUB_LIST_REPOSITORY_ISSUES_FOR_THE_CURRENT_USER").is_empty());
        assert!(scan("Returns the current temperature_2m for a latitude and longitude").is_empty());
    }

    #[test]
    fn redacts() {
        assert_eq!(
            redact("token hunter2 here", &Known::new(["hunter2".into()])),
            "token [REDACTED] here"
        );
        let known = Known::new(["hunter2".into(), "abc".into()]);
        assert_eq!(
            redact("hunter2hunter2 abc hunter2", &known),
            "[REDACTED][REDACTED] abc [REDACTED]"
        );
        let text =
            "a sk-abcdefghijklmnopqrstuvwx1234 and q=Zx8Kp2Lm9Qw4Rt7Yu1Io3Pa6Sd5Fg0Hj2Kl8Zx4Cv .";
        assert_eq!(
            redact(text, &Known::default()),
            "a [REDACTED] and [REDACTED] ."
        );
        assert_eq!(redact("hello", &known), "hello");
    }

    proptest::proptest! {
        /// The byte scan finds exactly the runs the pattern it stands for finds, in text mixing
        /// token bytes, other ASCII and multi-byte characters.
        #[test]
        fn token_runs_agree_with_the_pattern(
            text in "([a-zA-Z0-9+/_=-]{0,40}[.: é€]{1,3}){0,6}[a-zA-Z0-9+/_=-]{0,40}"
        ) {
            let pattern = Regex::new(r"[A-Za-z0-9+/_=-]{32,}").unwrap();
            let expected: Vec<(usize, usize)> =
                pattern.find_iter(&text).map(|m| (m.start(), m.end())).collect();
            proptest::prop_assert_eq!(token_runs(&text).collect::<Vec<_>>(), expected);
        }
    }

    #[test]
    fn redact_agrees_with_scan() {
        // The one-pass redaction hides exactly what the per-shape scan finds.
        let texts = [
            "x sk-abcdefghijklmnopqrstuvwx1234 y ghp_abcdefghijklmnopqrstuvwxyz0123456789",
            "AKIAIOSFODNN7EXAMPLE, xoxb-1234567890-abcdefghij and -----BEGIN RSA PRIVATE KEY-----",
            "share=cdt1.eyJpZCI6InRva18xIn0.q8Zx3Kp2Lm9Qw4Rt7Yu1Io3Pa6Sd5Fg0Hj2Kl8Zx4Cv&x=1",
            "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855 stays",
        ];
        for text in texts {
            let mut expected = text.to_string();
            for f in scan(text).iter().rev() {
                expected.replace_range(f.start..f.end, REDACTED);
            }
            assert_eq!(redact(text, &Known::default()), expected, "{text}");
        }
    }
}
