//! Diagnostics: every problem capdir finds in a catalogue, with where it is, a stable code
//! and how to fix it. Collected, never thrown: `check` reports them all in one pass.

use serde::Serialize;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

/// How bad a diagnostic is. Errors fail `check`; warnings are printed and pass; notices
/// ask a reviewer to look (a row that calls differently, `check --base`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Severity {
    Error,
    Warning,
    Notice,
}

/// One problem at one place in one file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Diagnostic {
    pub path: PathBuf,
    /// 1-based; 0 when the problem is about the file as a whole and has no better place.
    pub line: usize,
    pub col: usize,
    pub severity: Severity,
    /// Stable, machine-readable: `unknown_field`, `bad_http_target`, …
    pub code: &'static str,
    pub message: String,
    /// How to fix it, in one sentence.
    pub help: String,
}

impl Diagnostic {
    pub fn error(
        path: &Path,
        (line, col): (usize, usize),
        code: &'static str,
        message: impl Into<String>,
        help: impl Into<String>,
    ) -> Self {
        Diagnostic {
            path: path.to_path_buf(),
            line,
            col,
            severity: Severity::Error,
            code,
            message: message.into(),
            help: help.into(),
        }
    }

    /// A notice at `path:line:col`: nothing wrong, something to review.
    pub fn notice(
        path: &Path,
        at: (usize, usize),
        code: &'static str,
        message: impl Into<String>,
        help: impl Into<String>,
    ) -> Self {
        Diagnostic {
            severity: Severity::Notice,
            ..Diagnostic::error(path, at, code, message, help)
        }
    }

    pub fn is_notice(&self) -> bool {
        self.severity == Severity::Notice
    }

    pub fn warning(self) -> Self {
        Diagnostic {
            severity: Severity::Warning,
            ..self
        }
    }

    pub fn is_error(&self) -> bool {
        self.severity == Severity::Error
    }

    fn severity_word(&self) -> &'static str {
        match self.severity {
            Severity::Error => "error",
            Severity::Warning => "warning",
            Severity::Notice => "notice",
        }
    }

    /// `path:line:col: error[code]: message` and an indented `help:` line.
    pub fn render_text(&self) -> String {
        format!(
            "{}:{}:{}: {}[{}]: {}\n  help: {}\n",
            self.path.display(),
            self.line.max(1),
            self.col.max(1),
            self.severity_word(),
            self.code,
            self.message,
            self.help
        )
    }

    /// A GitHub Actions workflow command, so the problem shows on the pull request's diff.
    pub fn render_github(&self) -> String {
        format!(
            "::{} file={},line={},col={},title={}::{}\n",
            self.severity_word(),
            escape_property(&self.path.display().to_string()),
            self.line.max(1),
            self.col.max(1),
            escape_property(&format!("capdir check [{}]", self.code)),
            escape_data(&format!("{} — help: {}", self.message, self.help))
        )
    }
}

/// Workflow-command data escaping, as the Actions runner expects it.
fn escape_data(s: &str) -> String {
    s.replace('%', "%25")
        .replace('\r', "%0D")
        .replace('\n', "%0A")
}

fn escape_property(s: &str) -> String {
    escape_data(s).replace(':', "%3A").replace(',', "%2C")
}

/// How `check` prints its findings.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    Text,
    Json,
    Github,
}

/// Sort for stable output: by file, then position, then code.
pub fn sort(diags: &mut [Diagnostic]) {
    diags.sort_by(|a, b| {
        (&a.path, a.line, a.col, a.code, &a.message)
            .cmp(&(&b.path, b.line, b.col, b.code, &b.message))
    });
}

/// Render a full report in the chosen format; `rows` is how many rows were read. Notices
/// (callable changes to review) come last, under a heading of their own in text.
pub fn render(diags: &[Diagnostic], rows: usize, format: Format) -> String {
    let errors = diags.iter().filter(|d| d.is_error()).count();
    let notices = diags.iter().filter(|d| d.is_notice()).count();
    let warnings = diags.len() - errors - notices;
    let (problems, review): (Vec<&Diagnostic>, Vec<&Diagnostic>) =
        diags.iter().partition(|d| !d.is_notice());
    let review_line = match notices {
        0 => String::new(),
        n => format!(", {n} callable change{} to review", plural(n)),
    };
    match format {
        Format::Text => {
            let mut out = String::new();
            for d in &problems {
                out.push_str(&d.render_text());
            }
            if !review.is_empty() {
                let _ = writeln!(
                    out,
                    "\ncallable changes to review (what these rows do changed; their contract fingerprints differ from the base):"
                );
                for d in &review {
                    out.push_str(&d.render_text());
                }
            }
            let _ = writeln!(
                out,
                "checked {rows} row file{}: {errors} error{}, {warnings} warning{}{review_line}",
                plural(rows),
                plural(errors),
                plural(warnings)
            );
            out
        }
        Format::Github => {
            let mut out = String::new();
            for d in problems.iter().chain(&review) {
                out.push_str(&d.render_github());
            }
            let unshown = errors.saturating_sub(ANNOTATIONS_SHOWN)
                + warnings.saturating_sub(ANNOTATIONS_SHOWN)
                + notices.saturating_sub(ANNOTATIONS_SHOWN);
            if unshown > 0 {
                let _ = writeln!(
                    out,
                    "::notice title=capdir check::{unshown} more finding{} than GitHub shows as annotations (10 of each level a step): every one is in the step summary and in this log",
                    plural(unshown)
                );
            }
            let _ = writeln!(
                out,
                "checked {rows} row files: {errors} errors, {warnings} warnings{review_line}"
            );
            out
        }
        Format::Json => {
            let v = serde_json::json!({
                "ok": errors == 0,
                "rows": rows,
                "errors": errors,
                "warnings": warnings,
                "notices": notices,
                "diagnostics": diags,
            });
            let mut s = serde_json::to_string_pretty(&v).unwrap_or_default();
            s.push('\n');
            s
        }
    }
}

/// How many annotations of each level GitHub shows for one step; the rest are dropped.
const ANNOTATIONS_SHOWN: usize = 10;

/// Every finding as a Markdown table, for GitHub's step summary (`$GITHUB_STEP_SUMMARY`),
/// which has no limit of ten.
pub fn step_summary(diags: &[Diagnostic], rows: usize) -> String {
    let errors = diags.iter().filter(|d| d.is_error()).count();
    let notices = diags.iter().filter(|d| d.is_notice()).count();
    let warnings = diags.len() - errors - notices;
    let mut out = format!(
        "### capdir check: {errors} error{}, {warnings} warning{}, {notices} callable change{} to review in {rows} row file{}\n\n",
        plural(errors),
        plural(warnings),
        plural(notices),
        plural(rows)
    );
    if diags.is_empty() {
        return out;
    }
    out.push_str("| where | level | code | problem | how to fix |\n|---|---|---|---|---|\n");
    // Text from a pull request (a row's target, a step) must not become markdown here.
    let cell = |s: &str| {
        s.replace('\\', "\\\\")
            .replace('|', "\\|")
            .replace('`', "\\`")
            .replace('<', "&lt;")
            .replace('\n', " ")
    };
    for d in diags {
        let _ = writeln!(
            out,
            "| `{}:{}:{}` | {} | `{}` | {} | {} |",
            cell(&d.path.display().to_string()),
            d.line.max(1),
            d.col.max(1),
            d.severity_word(),
            d.code,
            cell(&d.message),
            cell(&d.help)
        );
    }
    out
}

fn plural(n: usize) -> &'static str {
    if n == 1 { "" } else { "s" }
}

/// The nearest candidate to `word` among `candidates`, if it is close enough to suggest.
pub fn did_you_mean<'a>(
    word: &str,
    candidates: impl IntoIterator<Item = &'a str>,
) -> Option<&'a str> {
    let lower = word.to_ascii_lowercase();
    candidates
        .into_iter()
        .map(|c| (strsim::jaro_winkler(&lower, &c.to_ascii_lowercase()), c))
        .filter(|(score, _)| *score >= 0.8)
        .max_by(|a, b| a.0.total_cmp(&b.0))
        .map(|(_, c)| c)
}
