//! The `fn` runner: a builtin from `builtins.rs`, called in-process.
//!
//! The row's payload is a JSON array template; its rendered elements are the builtin's
//! arguments (strings as they are, other JSON values as their JSON text). Rendering with
//! JSON-string escaping means a caller's argument can only ever become one element.

use super::{Call, Ran, RunFuture, Runner};
use crate::invoke::outcome::Failure;
use crate::row::builtins;
use crate::row::template::{self, Context, Vars};
use serde_json::Value as Json;

pub struct FnRunner;

impl Runner for FnRunner {
    fn name(&self) -> &'static str {
        "fn"
    }

    fn run<'a>(&'a self, call: Call<'a>) -> RunFuture<'a> {
        let ran: Ran = run_fn(call).into();
        Box::pin(std::future::ready(ran))
    }
}

/// The synchronous body of the runner, public for benchmarks and tests.
pub fn run_fn(call: Call<'_>) -> Result<String, Failure> {
    let row = &call.callable.row;
    let name = row.target.trim();
    let builtin = builtins::find(name).ok_or_else(|| Failure::new("fn:unknown_target", name))?;
    let args = builtin_args(row.payload(), call.args)?;
    (builtin.run)(&args).map_err(|msg| Failure::new(format!("fn:{}", builtin.name), msg))
}

/// Render the payload template and read it as the builtin's argument list.
pub fn builtin_args(payload: &str, args: &[String]) -> Result<Vec<String>, Failure> {
    if payload.trim().is_empty() {
        return Ok(Vec::new());
    }
    let rendered = template::render(
        payload,
        Context::Json,
        Vars {
            args,
            ..Default::default()
        },
    )
    .map_err(|m| {
        Failure::new(
            "missing_args",
            format!("the template needs {} arguments, got {}", m.needed, m.got),
        )
    })?;
    let value: Json = serde_json::from_str(&rendered)
        .map_err(|e| Failure::new("fn:bad_content_json", e.to_string()))?;
    let Json::Array(items) = value else {
        return Err(Failure::bare("fn:content_not_array"));
    };
    Ok(items
        .into_iter()
        .map(|v| match v {
            Json::String(s) => s,
            other => other.to_string(),
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn a(s: &[&str]) -> Vec<String> {
        s.iter().map(|x| x.to_string()).collect()
    }

    #[test]
    fn elements_become_arguments() {
        assert_eq!(
            builtin_args(r#"["$1", $2, {"k": "$3"}]"#, &a(&["x\"y", "7", "z"])).unwrap(),
            vec!["x\"y", "7", r#"{"k":"z"}"#]
        );
        assert!(builtin_args("", &[]).unwrap().is_empty());
        assert_eq!(
            builtin_args(r#"{"a": 1}"#, &[]).unwrap_err().render(),
            "ERR:fn:content_not_array"
        );
        assert!(
            builtin_args("[1,", &[])
                .unwrap_err()
                .render()
                .starts_with("ERR:fn:bad_content_json:")
        );
    }
}
