//! The flow language: steps chained with `>`, `=> NAME` bindings and `{ A: x | B: y }` fan-outs.
//!
//! Parsed once into a small tree so `check` can find unknown steps and cycles at build time and
//! the flow runner never re-parses text. A `>` or `|` separates only where a step can start
//! (`KEY:` or `{` follows), so bodies keep ordinary `>` and `|` characters.

use serde::Serialize;

/// Most steps one flow may have, fan-out branches counted.
pub const MAX_STEPS: usize = 32;
/// Most branches in one fan-out.
pub const MAX_BRANCHES: usize = 16;

/// One call of another row: `KEY: body => NAME`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Call {
    pub key: String,
    pub body: String,
    pub bind: Option<String>,
}

/// A step runs one call, or several at once.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "step", rename_all = "lowercase")]
pub enum Step {
    Call(Call),
    FanOut {
        branches: Vec<Call>,
        bind: Option<String>,
    },
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Flow {
    pub steps: Vec<Step>,
}

/// A malformed flow, with the byte offset in the payload where it went wrong.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FlowError {
    pub message: String,
    pub offset: usize,
}

impl Flow {
    /// Every row key the flow calls, in order, repeats included.
    pub fn keys(&self) -> impl Iterator<Item = &str> {
        self.steps
            .iter()
            .flat_map(|s| match s {
                Step::Call(c) => std::slice::from_ref(c).iter(),
                Step::FanOut { branches, .. } => branches.iter(),
            })
            .map(|c| c.key.as_str())
    }
}

fn fail<T>(message: impl Into<String>, offset: usize) -> Result<T, FlowError> {
    Err(FlowError {
        message: message.into(),
        offset,
    })
}

/// Length of a `KEY:` step head at the start of `s` (after white space), if there is one.
fn step_head(s: &str) -> Option<usize> {
    let t = s.trim_start();
    let ws = s.len() - t.len();
    let b = t.as_bytes();
    if b.first().is_none_or(|c| !c.is_ascii_uppercase()) {
        return None;
    }
    let n = b
        .iter()
        .take_while(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || **c == b'_')
        .count();
    let after = t[n..].trim_start();
    after
        .starts_with(':')
        .then(|| ws + (t.len() - after.len()) + 1)
}

/// Where the next top-level `>` separator is, at or after `from`.
fn next_separator(text: &str, from: usize) -> Option<usize> {
    let b = text.as_bytes();
    (from..b.len()).find(|&i| {
        if b[i] != b'>' || (i > 0 && b[i - 1] == b'=') {
            return false;
        }
        let rest = &text[i + 1..];
        let t = rest.trim_start();
        t.is_empty() || t.starts_with('{') || t.starts_with('>') || step_head(rest).is_some()
    })
}

/// Split a trailing `=> NAME` off a step.
fn split_bind(seg: &str) -> Result<(&str, Option<String>), String> {
    let Some(i) = seg.rfind("=>") else {
        return Ok((seg, None));
    };
    let name = seg[i + 2..].trim();
    if name.is_empty() {
        return Err("`=>` must be followed by a binding name".into());
    }
    let ok = name
        .chars()
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
    if !ok {
        // Not a binding: `=>` is part of the body text.
        return Ok((seg, None));
    }
    if name == "PREV" || name.chars().all(|c| c.is_ascii_digit()) {
        return Err(format!("`{name}` is reserved and cannot be a binding name"));
    }
    Ok((&seg[..i], Some(name.to_string())))
}

fn parse_call(seg: &str, offset: usize) -> Result<Call, FlowError> {
    let (head, bind) = split_bind(seg).map_err(|m| FlowError { message: m, offset })?;
    let lead = head.len() - head.trim_start().len();
    let Some(n) = step_head(head) else {
        let shown: String = head.trim().chars().take(40).collect();
        return fail(
            format!("expected a step `KEY: body`, found `{shown}`"),
            offset + lead,
        );
    };
    let key = head[..n - 1].trim().to_string();
    let body = head[n..].trim().to_string();
    Ok(Call { key, body, bind })
}

/// Parse a flow payload.
pub fn parse(payload: &str) -> Result<Flow, FlowError> {
    let mut steps = Vec::new();
    let mut pos = 0;
    let mut count = 0;
    if payload.trim().is_empty() {
        return fail("the flow has no steps", 0);
    }
    loop {
        let rest = &payload[pos..];
        let t = rest.trim_start();
        let start = pos + (rest.len() - t.len());
        if t.is_empty() || t.starts_with('>') {
            return fail(
                "empty step: two `>` with nothing between, or a `>` at an end",
                start,
            );
        }
        let end;
        if t.starts_with('{') {
            let close = matching_brace(payload, start).ok_or(FlowError {
                message: "`{` fan-out is never closed with `}`".into(),
                offset: start,
            })?;
            let inner = &payload[start + 1..close];
            let branches = split_branches(inner, start + 1)?;
            if branches.len() > MAX_BRANCHES {
                return fail(
                    format!("a fan-out may have at most {MAX_BRANCHES} branches"),
                    start,
                );
            }
            count += branches.len();
            end = next_separator(payload, close + 1).unwrap_or(payload.len());
            let tail = &payload[close + 1..end];
            let (before, bind) = split_bind(tail).map_err(|m| FlowError {
                message: m,
                offset: close + 1,
            })?;
            if !before.trim().is_empty() {
                return fail("unexpected text after a fan-out's `}`", close + 1);
            }
            steps.push(Step::FanOut { branches, bind });
        } else {
            end = next_separator(payload, start).unwrap_or(payload.len());
            steps.push(Step::Call(parse_call(&payload[start..end], start)?));
            count += 1;
        }
        if count > MAX_STEPS {
            return fail(format!("a flow may have at most {MAX_STEPS} steps"), start);
        }
        if end >= payload.len() {
            break;
        }
        pos = end + 1;
    }
    Ok(Flow { steps })
}

/// The `}` closing the `{` at `open`.
fn matching_brace(text: &str, open: usize) -> Option<usize> {
    let mut depth = 0usize;
    for (i, c) in text[open..].char_indices() {
        match c {
            '{' => depth += 1,
            '}' => {
                depth -= 1;
                if depth == 0 {
                    return Some(open + i);
                }
            }
            _ => {}
        }
    }
    None
}

fn split_branches(inner: &str, offset: usize) -> Result<Vec<Call>, FlowError> {
    let b = inner.as_bytes();
    let mut cuts = vec![0];
    for i in 0..b.len() {
        if b[i] == b'|' && step_head(&inner[i + 1..]).is_some() {
            cuts.push(i + 1);
        }
    }
    cuts.push(inner.len() + 1);
    let mut calls = Vec::new();
    for w in cuts.windows(2) {
        let seg = &inner[w[0]..w[1] - 1];
        if seg.trim_start().starts_with('{') {
            return fail("fan-outs cannot be nested", offset + w[0]);
        }
        calls.push(parse_call(seg, offset + w[0])?);
    }
    Ok(calls)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn call(key: &str, body: &str, bind: Option<&str>) -> Call {
        Call {
            key: key.into(),
            body: body.into(),
            bind: bind.map(Into::into),
        }
    }

    #[test]
    fn chain_with_binding() {
        let f = parse("SHA256: $1 => H\n> ECHO: sha of $1 is $H").unwrap();
        assert_eq!(
            f.steps,
            vec![
                Step::Call(call("SHA256", "$1", Some("H"))),
                Step::Call(call("ECHO", "sha of $1 is $H", None)),
            ]
        );
    }

    #[test]
    fn fan_out_keeps_pipes_and_gt_in_bodies() {
        let f = parse("{ UPPER: a|b | LOWER: x > y } => BOTH > ECHO: $BOTH").unwrap();
        assert_eq!(
            f.steps[0],
            Step::FanOut {
                branches: vec![call("UPPER", "a|b", None), call("LOWER", "x > y", None)],
                bind: Some("BOTH".into())
            }
        );
        assert_eq!(f.keys().collect::<Vec<_>>(), vec!["UPPER", "LOWER", "ECHO"]);
    }

    #[test]
    fn errors() {
        assert!(parse("this is not a step").is_err());
        assert!(parse("ECHO: x > > ECHO: y").is_err());
        assert!(parse("ECHO: x >").is_err());
        assert!(parse("{ ECHO: x").is_err());
        assert!(parse("").is_err());
        assert!(parse("ECHO: x => PREV").is_err());
        assert!(parse("{ { B: x } }").is_err());
        // Braces inside a body are text (JSON bodies), not a nested fan-out.
        assert!(parse("{ A: {\"b\": 1} | C: x }").is_ok());
    }
}
