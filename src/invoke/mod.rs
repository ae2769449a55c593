//! Invoking a row by key: the one path every caller takes (CLI, dispatcher, MCP, flow steps).
//!
//! In order: find the row (`unknown_key` with did-you-mean), turn the input into positional
//! pieces (`a|b` body, or an `args` object put in the schema's order), refuse too few pieces
//! (`missing_args`, quoting `# ARGS:`), validate against `input_schema` (`bad_args` naming the
//! argument) — all before any runner starts — then run the row's runner and classify what came
//! back into an `Outcome`.

pub mod authority;
pub mod breaker;
pub mod egress;
pub mod outcome;
pub mod rowset;
pub mod runner;
pub mod upstream;

use crate::invoke::authority::CallContext;
use crate::invoke::breaker::Breaker;
use crate::invoke::outcome::{Failure, Outcome, Usage};
use crate::invoke::rowset::{Callable, RowSet};
use crate::invoke::runner::agent::{AgentConfig, AgentRunner};
use crate::invoke::runner::flow::FlowRunner;
use crate::invoke::runner::fn_runner::FnRunner;
use crate::invoke::runner::http::{HttpConfig, HttpRunner};
use crate::invoke::runner::mcp::{McpConfig, McpRunner};
use crate::invoke::runner::{Call, Environment, Runner};
use crate::row::args::{self, object_to_positional, positional_to_object, split_body};
use serde_json::{Map, Value as Json};
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Instant;

/// What a caller sends: the `a|b|c` body, or the arguments by name.
#[derive(Debug, Clone, PartialEq)]
pub enum Input {
    Body(String),
    Args(Map<String, Json>),
}

impl Input {
    pub fn body(s: impl Into<String>) -> Input {
        Input::Body(s.into())
    }
}

/// Everything an invoker is configured with. `Default` is offline-safe: an in-memory breaker,
/// credentials from the process environment, the default timeouts and caps.
#[derive(Debug, Clone, Default)]
pub struct InvokerConfig {
    pub http: HttpConfig,
    pub agent: AgentConfig,
    pub mcp: McpConfig,
    pub breaker: Option<Breaker>,
    pub env: Environment,
    /// The build's search index, for an agent's `ask` meta tool; without it an agent that
    /// needs one indexes its own tools in memory.
    pub search: Option<Arc<crate::search::Searcher>>,
    /// Where each credential may go (the catalogue's bindings, narrowed by the operator's):
    /// none bound, none read.
    pub bindings: Arc<crate::row::binding::Bindings>,
    /// The operator's narrowing of every site's bindings (`serve --bindings FILE`).
    pub narrowing: Option<Arc<crate::row::binding::Bindings>>,
    /// Which addresses beyond the public internet rows may reach (`serve --allow-egress`).
    pub egress: egress::Egress,
    /// The origins that keep not answering; shared by every build a dispatcher loads.
    pub upstreams: upstream::Upstreams,
}

impl InvokerConfig {
    /// The command line's configuration: agent endpoints from `CAPDIR_*` variables, breaker
    /// state where `breaker` keeps it (`ledger::Location::breaker`).
    pub fn from_env(breaker: Breaker) -> Result<InvokerConfig, String> {
        Ok(InvokerConfig {
            http: HttpConfig::default(),
            agent: AgentConfig::from_env()?,
            mcp: McpConfig::default(),
            breaker: Some(breaker),
            env: Environment::Process,
            search: None,
            bindings: Arc::default(),
            narrowing: None,
            egress: egress::Egress::default(),
            upstreams: upstream::Upstreams::default(),
        })
    }
}

struct Inner {
    rows: RowSet,
    runners: Vec<Arc<dyn Runner>>,
    breaker: Breaker,
    env: Environment,
    search: Option<Arc<crate::search::Searcher>>,
    bindings: Arc<crate::row::binding::Layered>,
}

/// Runs rows of one `RowSet`. Cheap to clone; share one per process.
#[derive(Clone)]
pub struct Invoker {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for Invoker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Invoker")
            .field("rows", &self.inner.rows)
            .finish_non_exhaustive()
    }
}

impl Invoker {
    /// Fails only when an HTTP client cannot be built (no TLS backend).
    pub fn new(rows: RowSet, config: InvokerConfig) -> Result<Invoker, String> {
        let runners: Vec<Arc<dyn Runner>> = vec![
            Arc::new(FnRunner),
            Arc::new(HttpRunner::new(
                config.http,
                config.egress.clone(),
                config.upstreams,
            )?),
            Arc::new(AgentRunner::new(config.agent)?),
            Arc::new(FlowRunner),
            Arc::new(McpRunner::new(config.mcp, config.egress.clone())),
        ];
        let bindings = Arc::new(crate::row::binding::Layered {
            catalogue: (*config.bindings).clone(),
            narrowing: config.narrowing.as_deref().cloned(),
        });
        Ok(Invoker {
            inner: Arc::new(Inner {
                rows,
                runners,
                breaker: config.breaker.unwrap_or_else(Breaker::in_memory),
                env: config.env,
                search: config.search,
                bindings,
            }),
        })
    }

    /// Where each credential may go, as this invoker enforces it.
    pub fn bindings(&self) -> &crate::row::binding::Layered {
        &self.inner.bindings
    }

    pub fn rows(&self) -> &RowSet {
        &self.inner.rows
    }

    /// The same runners, breaker and environment over another set of rows and search index:
    /// how a dispatcher serves a row written a moment ago without building its HTTP clients
    /// again.
    pub fn with_rows(&self, rows: RowSet, search: Option<Arc<crate::search::Searcher>>) -> Invoker {
        Invoker {
            inner: Arc::new(Inner {
                rows,
                runners: self.inner.runners.clone(),
                breaker: self.inner.breaker.clone(),
                env: self.inner.env.clone(),
                search,
                bindings: self.inner.bindings.clone(),
            }),
        }
    }

    pub fn breaker(&self) -> &Breaker {
        &self.inner.breaker
    }

    pub fn env(&self) -> &Environment {
        &self.inner.env
    }

    /// The build's search index, when the invoker was given one.
    pub fn search(&self) -> Option<&crate::search::Searcher> {
        self.inner.search.as_deref()
    }

    /// Invoke `key` at the top level, with no authority over its steps (the local owner).
    pub async fn invoke(&self, key: &str, input: Input) -> Outcome {
        self.invoke_in(key, input, &CallContext::default()).await
    }

    /// Invoke `key` in `context`: inside the flows it names, its steps gated and receipted by
    /// its authority.
    pub fn invoke_in<'a>(
        &'a self,
        key: &'a str,
        input: Input,
        context: &'a CallContext,
    ) -> Pin<Box<dyn Future<Output = Outcome> + Send + 'a>> {
        Box::pin(async move {
            let started = Instant::now();
            let Some(callable) = self.inner.rows.get(key) else {
                let mut f = Failure::new("unknown_key", key);
                f.did_you_mean = self.inner.rows.did_you_mean(key);
                if !f.did_you_mean.is_empty() {
                    f.detail = format!("{key}; did you mean {}?", f.did_you_mean.join(", "));
                }
                return Outcome::new(
                    key,
                    "none",
                    Err(f),
                    started.elapsed(),
                    Usage::default(),
                    false,
                );
            };
            let runner_name = callable.row.runner_name();
            // Refused before any runner: no usage, nothing truncated.
            let refused = |f| {
                Outcome::new(
                    key,
                    runner_name,
                    Err(f),
                    started.elapsed(),
                    Usage::default(),
                    false,
                )
            };
            let pieces = match prepare(callable, input) {
                Ok(p) => p,
                Err(f) => return refused(f),
            };
            let Some(runner) = self.inner.runners.iter().find(|r| r.name() == runner_name) else {
                let f = Failure::new(
                    "unknown_runner",
                    format!(
                        "{runner_name} (row {key}; runners are {})",
                        crate::row::RUNNERS.join(", ")
                    ),
                );
                return refused(f);
            };
            let ran = runner
                .run(Call {
                    callable,
                    args: &pieces,
                    invoker: self,
                    context,
                })
                .await;
            let outcome = Outcome::new(
                key,
                runner_name,
                ran.result,
                started.elapsed(),
                ran.usage,
                ran.truncated,
            );
            tracing::debug!(
                key,
                runner = runner_name,
                status = outcome.status.as_str(),
                error = outcome.error_code(),
                micros = outcome.duration.as_micros() as u64,
                "invoked"
            );
            outcome
        })
    }
}

fn bad_args(detail: impl Into<String>) -> Failure {
    Failure::new("bad_args", detail)
}

/// Turn the input into validated positional pieces, or refuse.
pub fn prepare(callable: &Callable, input: Input) -> Result<Vec<String>, Failure> {
    let row = &callable.row;
    if !row.enabled {
        return Err(Failure::new(
            "disabled",
            format!("{} is disabled (enabled: false)", row.key),
        ));
    }
    let pieces = match input {
        Input::Body(body) => split_body(&body),
        Input::Args(obj) => {
            let Some(schema) = &row.input_schema else {
                return Err(bad_args(format!(
                    "{} declares no input_schema, so named `args` cannot be put in order; send a body `a|b|…` ({})",
                    row.key,
                    args_line(callable)
                )));
            };
            let props = args::properties(schema);
            for name in obj.keys() {
                if !props.iter().any(|(p, _)| p == name) {
                    let known: Vec<&str> = props.iter().map(|(p, _)| *p).collect();
                    let hint = match crate::row::diag::did_you_mean(name, known.iter().copied()) {
                        Some(s) => format!("; did you mean `{s}`?"),
                        None => String::new(),
                    };
                    return Err(bad_args(format!(
                        "{name}: unknown argument{hint} ({} takes {})",
                        row.key,
                        if known.is_empty() {
                            "no arguments".to_string()
                        } else {
                            known.join(", ")
                        }
                    )));
                }
            }
            object_to_positional(schema, &obj)
        }
    };
    if pieces.len() < callable.needed_args {
        return Err(Failure::new(
            "missing_args",
            format!(
                "{} needs {} argument{}, got {}; {}",
                row.key,
                callable.needed_args,
                if callable.needed_args == 1 { "" } else { "s" },
                pieces.len(),
                args_line(callable)
            ),
        ));
    }
    match &callable.schema {
        None => {}
        Some(Ok(schema)) => {
            let obj = positional_to_object(schema.schema(), &pieces);
            let problems = schema.problems(&Json::Object(obj));
            if !problems.is_empty() {
                return Err(bad_args(problems.join("; ")));
            }
        }
        Some(Err(e)) => {
            return Err(Failure::new(
                "bad_input_schema",
                format!("{}: input_schema {e}", row.key),
            ));
        }
    }
    Ok(pieces)
}

/// The row's `# ARGS:` line, quoted in refusals.
fn args_line(callable: &Callable) -> String {
    match callable.row.doc().args.as_deref() {
        Some(a) if !a.is_empty() => format!("# ARGS: {a}"),
        _ => "the row has no # ARGS: line".to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The gate refuses a `runner:` outside `row::RUNNERS`; every name there must run.
    #[test]
    fn the_invoker_has_a_runner_for_every_name_the_gate_allows() {
        let invoker =
            Invoker::new(RowSet::from_rows(Vec::new()), InvokerConfig::default()).expect("invoker");
        let mut names: Vec<&str> = invoker.inner.runners.iter().map(|r| r.name()).collect();
        names.sort_unstable();
        let mut allowed = crate::row::RUNNERS.to_vec();
        allowed.sort_unstable();
        assert_eq!(names, allowed);
    }
}
