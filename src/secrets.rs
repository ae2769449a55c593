//! Finding credential-shaped literals, so secrets never enter the catalogue (or the site, a
//! receipt or a log). The same scanner serves `check` and the redaction of stored output.

use regex::Regex;
use std::sync::LazyLock;

/// One credential-looking literal: what it looks like and where it is in the text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Finding {
    pub kind: &'static str,
    /// Byte offsets in the scanned text.
    pub start: usize,
    pub end: usize,
}

static PATTERNS: LazyLock<Vec<(&'static str, Regex)>> = LazyLock::new(|| {
    [
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
    ]
    .into_iter()
    .map(|(k, p)| (k, Regex::new(p).expect("static secret pattern")))
    .collect()
});

static TOKEN: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r"[A-Za-z0-9+/_=-]{32,}").expect("static token pattern"));

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
    let hex = s.chars().all(|c| c.is_ascii_hexdigit());
    let upper = s.chars().any(|c| c.is_ascii_uppercase());
    let lower = s.chars().any(|c| c.is_ascii_lowercase());
    let digit = s.chars().any(|c| c.is_ascii_digit());
    let words = s.split(['_', '-']).filter(|w| w.len() >= 4).count();
    !hex && upper && lower && digit && words <= 1 && entropy(s) >= 4.2
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
    for m in TOKEN.find_iter(text) {
        let overlaps = found.iter().any(|f| f.start < m.end() && m.start() < f.end);
        if !overlaps && looks_random(m.as_str()) {
            found.push(Finding {
                kind: "a long high-entropy string",
                start: m.start(),
                end: m.end(),
            });
        }
    }
    found.sort_by_key(|f| f.start);
    found
}

/// `text` with every credential-looking literal, and every given secret value, replaced.
pub fn redact(text: &str, known_values: &[String]) -> String {
    let mut out = text.to_string();
    for v in known_values {
        if v.len() >= 4 {
            out = out.replace(v.as_str(), "[REDACTED]");
        }
    }
    let findings = scan(&out);
    for f in findings.iter().rev() {
        out.replace_range(f.start..f.end, "[REDACTED]");
    }
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
            redact("token hunter2 here", &["hunter2".into()]),
            "token [REDACTED] here"
        );
    }
}
