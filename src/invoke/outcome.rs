//! What one invocation came to: the shape every later layer (dispatcher, receipts, MCP) reads.
//!
//! A runner's text output keeps the `ERR:<code>:<detail>` convention agents already parse; this
//! module adds the typed view beside it — a status, a stable error code, the time taken and
//! what the call cost — so nothing downstream has to re-parse strings to know what happened.

use serde::Serialize;
use std::fmt;
use std::time::Duration;

/// How an invocation ended (DESIGN.md §7).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum Status {
    /// The runner ran and produced a non-empty result.
    ProvenMaterialResult,
    /// The runner ran and succeeded, but produced nothing.
    RanNoMaterial,
    /// The runner ran (or tried to) and the result is an `ERR:`.
    Failed,
    /// Refused before any runner started: bad or missing arguments, unknown key, open breaker.
    Refused,
}

impl Status {
    /// Every status a runner ends with.
    pub const ALL: [Status; 4] = [
        Status::ProvenMaterialResult,
        Status::RanNoMaterial,
        Status::Failed,
        Status::Refused,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Status::ProvenMaterialResult => "PROVEN_MATERIAL_RESULT",
            Status::RanNoMaterial => "RAN_NO_MATERIAL",
            Status::Failed => "FAILED",
            Status::Refused => "REFUSED",
        }
    }

    /// The status a receipt names (`as_str`'s text); None for one no runner ends with (a
    /// call waiting for, or decided by, a person).
    pub fn parse(text: &str) -> Option<Status> {
        Status::ALL.into_iter().find(|s| s.as_str() == text)
    }

    pub fn is_success(self) -> bool {
        matches!(self, Status::ProvenMaterialResult | Status::RanNoMaterial)
    }
}

impl fmt::Display for Status {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A named failure: `code` is stable (`fn:unknown_target`, `http:404`, `missing_args`), `detail`
/// says what exactly went wrong. Rendered as `ERR:<code>:<detail>`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Failure {
    pub code: String,
    pub detail: String,
    /// Keys the caller may have meant (only for `unknown_key`).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub did_you_mean: Vec<String>,
}

impl Failure {
    pub fn new(code: impl Into<String>, detail: impl Into<String>) -> Failure {
        Failure {
            code: code.into(),
            detail: detail.into(),
            did_you_mean: Vec::new(),
        }
    }

    /// A failure whose code says everything (`fn:content_not_array`, `flow:too_deep`).
    pub fn bare(code: impl Into<String>) -> Failure {
        Failure::new(code, "")
    }

    /// Is this a refusal (nothing ran) rather than a failure of the run?
    pub fn is_refusal(&self) -> bool {
        is_refusal_code(&self.code)
    }

    /// The `ERR:` text agents see. A failure with no detail has no trailing colon, except
    /// `http:<status>`, whose body part is always present (`ERR:http:404:`).
    pub fn render(&self) -> String {
        let always_colon = self.code.starts_with("http:")
            && self.code[5..].bytes().all(|b| b.is_ascii_digit())
            || self.code.starts_with("agent:")
                && self.code[6..].bytes().all(|b| b.is_ascii_digit());
        if self.detail.is_empty() && !always_colon {
            format!("ERR:{}", self.code)
        } else {
            format!("ERR:{}:{}", self.code, self.detail)
        }
    }
}

/// Codes that mean "refused before running" (status `REFUSED`).
pub fn is_refusal_code(code: &str) -> bool {
    matches!(
        code,
        "missing_args" | "bad_args" | "unknown_key" | "breaker_open" | "disabled"
    )
}

/// Tokens an agent call used, and what they cost when a price is configured. Summed over the
/// steps of a flow.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct Usage {
    pub prompt_tokens: u64,
    pub completion_tokens: u64,
    /// US dollars; `None` when no price is configured for a model that was called.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cost_usd: Option<f64>,
}

impl Usage {
    pub fn is_empty(&self) -> bool {
        self.prompt_tokens == 0 && self.completion_tokens == 0 && self.cost_usd.is_none()
    }

    /// Add another call's usage; cost stays known only while every priced part is known.
    pub fn add(&mut self, other: &Usage) {
        self.prompt_tokens += other.prompt_tokens;
        self.completion_tokens += other.completion_tokens;
        self.cost_usd = match (self.cost_usd, other.cost_usd) {
            (Some(a), Some(b)) => Some(a + b),
            (a, b) => a.or(b),
        };
    }
}

/// One finished invocation.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Outcome {
    pub key: String,
    /// Which runner ran it (`fn`, `http`, `agent`, `flow`), or `none` when refused before one
    /// was chosen (unknown key).
    pub runner: String,
    pub status: Status,
    /// The result text; for a failure or refusal, the `ERR:` text.
    pub output: String,
    /// Set when the status is `FAILED` or `REFUSED`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<Failure>,
    #[serde(rename = "duration_ms", serialize_with = "as_millis")]
    pub duration: Duration,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub usage: Option<Usage>,
    /// The response was longer than the size cap and was cut.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub truncated: bool,
}

fn as_millis<S: serde::Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_f64(d.as_secs_f64() * 1000.0)
}

impl Outcome {
    /// Build an outcome from a runner's result.
    pub fn new(
        key: &str,
        runner: &str,
        result: Result<String, Failure>,
        duration: Duration,
        usage: Usage,
        truncated: bool,
    ) -> Outcome {
        let usage = (!usage.is_empty()).then_some(usage);
        // A runner that answers `ERR:` text (an echo of one, a builtin's own convention) has
        // failed all the same: flows stop on it, so its status must say so too.
        let result = match result {
            Ok(text) if text.starts_with("ERR:") => {
                let failure = Failure::new("err_output", &text[4..]);
                return Outcome {
                    key: key.to_string(),
                    runner: runner.to_string(),
                    status: Status::Failed,
                    output: text,
                    error: Some(failure),
                    duration,
                    usage,
                    truncated,
                };
            }
            other => other,
        };
        match result {
            Ok(output) => Outcome {
                key: key.to_string(),
                runner: runner.to_string(),
                status: if output.is_empty() {
                    Status::RanNoMaterial
                } else {
                    Status::ProvenMaterialResult
                },
                output,
                error: None,
                duration,
                usage,
                truncated,
            },
            Err(failure) => Outcome {
                key: key.to_string(),
                runner: runner.to_string(),
                status: if failure.is_refusal() {
                    Status::Refused
                } else {
                    Status::Failed
                },
                output: failure.render(),
                error: Some(failure),
                duration,
                usage,
                truncated,
            },
        }
    }

    /// The stable error code, when it failed or was refused.
    pub fn error_code(&self) -> Option<&str> {
        self.error.as_ref().map(|e| e.code.as_str())
    }

    pub fn is_success(&self) -> bool {
        self.status.is_success()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A receipt's status text reads back as the status that wrote it; a person's decision
    /// (`APPROVED`, `DENIED`) or a waiting call is no runner's status.
    #[test]
    fn a_status_reads_back_from_its_text() {
        for s in Status::ALL {
            assert_eq!(Status::parse(s.as_str()), Some(s));
        }
        for other in ["APPROVED", "DENIED", "PENDING_APPROVAL", "refused", ""] {
            assert_eq!(Status::parse(other), None, "{other}");
        }
    }

    #[test]
    fn renders_err_text() {
        assert_eq!(
            Failure::bare("fn:content_not_array").render(),
            "ERR:fn:content_not_array"
        );
        assert_eq!(Failure::bare("http:404").render(), "ERR:http:404:");
        assert_eq!(
            Failure::new("http:fetch", "connection refused").render(),
            "ERR:http:fetch:connection refused"
        );
    }

    #[test]
    fn statuses() {
        let o = |r| Outcome::new("K", "fn", r, Duration::ZERO, Usage::default(), false);
        assert_eq!(o(Ok("x".into())).status, Status::ProvenMaterialResult);
        assert_eq!(o(Ok(String::new())).status, Status::RanNoMaterial);
        assert_eq!(o(Err(Failure::bare("http:500"))).status, Status::Failed);
        assert_eq!(o(Err(Failure::bare("bad_args"))).status, Status::Refused);
        assert_eq!(o(Ok("x".into())).usage, None);
        let echoed = o(Ok("ERR:http:500:x".into()));
        assert_eq!(echoed.status, Status::Failed);
        assert_eq!(echoed.output, "ERR:http:500:x");
        assert_eq!(echoed.error_code(), Some("err_output"));
    }

    #[test]
    fn usage_sums() {
        let mut u = Usage::default();
        u.add(&Usage {
            prompt_tokens: 10,
            completion_tokens: 5,
            cost_usd: Some(0.5),
        });
        u.add(&Usage {
            prompt_tokens: 1,
            completion_tokens: 1,
            cost_usd: Some(0.25),
        });
        assert_eq!((u.prompt_tokens, u.completion_tokens), (11, 6));
        assert_eq!(u.cost_usd, Some(0.75));
    }
}
