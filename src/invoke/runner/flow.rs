//! The `flow` runner: a row's steps run in order, each a full invocation of another row.
//!
//! A step's body is rendered as raw text from the flow's own arguments, `$PREV` (the previous
//! step's output) and `$NAME` bindings, then sent to the callee as its body — so the callee
//! splits it on `|` and validates it exactly as if a caller had sent it. A fan-out runs its
//! branches concurrently and yields a JSON array of their outputs in branch order. The first
//! output that is not a success stops the flow, naming the step. Flows may call flows, at most
//! `MAX_DEPTH` deep, which also stops a cycle in an unchecked row set.
//!
//! Under an authority (a call through the dispatcher), every step passes the caller's gate
//! before it runs (`ERR:flow:step_refused:KEY:REASON` stops the flow there) and gets its own
//! receipt, a child of the flow's, durable before the next step starts.

use super::{Call, Ran, RunFuture, Runner};
use crate::invoke::authority::{CallContext, Via};
use crate::invoke::outcome::{Failure, Outcome, Usage};
use crate::invoke::{Input, Invoker};
use crate::row::flow::{Call as StepCall, Step};
use crate::row::template::{self, Context, Vars};
use std::collections::HashMap;
use tracing::Instrument as _;

/// How many flows may be nested, the outermost counted.
pub const MAX_DEPTH: usize = 8;

pub struct FlowRunner;

impl Runner for FlowRunner {
    fn name(&self) -> &'static str {
        "flow"
    }

    fn run<'a>(&'a self, call: Call<'a>) -> RunFuture<'a> {
        Box::pin(run_flow(call))
    }
}

/// State carried from step to step.
struct Progress {
    bindings: HashMap<String, String>,
    prev: Option<String>,
    usage: Usage,
    truncated: bool,
}

impl Progress {
    fn done(&self, result: Result<String, Failure>) -> Ran {
        Ran {
            result,
            usage: self.usage,
            truncated: self.truncated,
        }
    }

    fn absorb(&mut self, outcome: &Outcome) {
        if let Some(u) = &outcome.usage {
            self.usage.add(u);
        }
        self.truncated |= outcome.truncated;
    }

    fn render(&self, body: &str, args: &[String]) -> Result<String, Failure> {
        template::render(
            body,
            Context::Raw,
            Vars {
                args,
                prev: self.prev.as_deref(),
                bindings: Some(&self.bindings),
            },
        )
        .map_err(|m| {
            Failure::new(
                "missing_args",
                format!("a step needs {} arguments, got {}", m.needed, m.got),
            )
        })
    }
}

/// Why step `key` stopped the flow. A depth overrun is passed up unchanged: it is about the
/// whole nest, not one step.
fn step_failed(key: &str, outcome: &Outcome) -> Failure {
    if let Some(e) = outcome
        .error
        .as_ref()
        .filter(|e| e.code == "flow:too_deep" || e.code == "flow:step_refused")
    {
        return e.clone();
    }
    Failure::new("flow:step_failed", format!("{key}:{}", outcome.output))
}

async fn run_flow(call: Call<'_>) -> Ran {
    let key = &call.callable.row.key;
    let flow = match &call.callable.flow {
        Some(Ok(f)) => f,
        Some(Err(e)) => {
            return Ran::fail(Failure::new(
                "flow:bad_step",
                format!("{} (at byte {})", e.message, e.offset),
            ));
        }
        None => {
            return Ran::fail(Failure::new(
                "flow:bad_step",
                format!("{key} is not a flow row"),
            ));
        }
    };
    if call.context.stack.len() >= MAX_DEPTH {
        let mut path: Vec<&str> = call.context.stack.iter().map(String::as_str).collect();
        path.push(key);
        return Ran::fail(Failure::new(
            "flow:too_deep",
            format!(
                "flows nest more than {MAX_DEPTH} deep: {}",
                path.join(" > ")
            ),
        ));
    }
    let mut context = call.context.clone();
    context.stack.push(key.clone());
    let mut p = Progress {
        bindings: HashMap::new(),
        prev: None,
        usage: Usage::default(),
        truncated: false,
    };
    for step in &flow.steps {
        match step {
            Step::Call(c) => {
                let body = match p.render(&c.body, call.args) {
                    Ok(b) => b,
                    Err(f) => return p.done(Err(f)),
                };
                let outcome = super::run_nested(
                    call.invoker,
                    &context,
                    Via::Composed,
                    &c.key,
                    Input::Body(body.clone()),
                    &body,
                )
                .await;
                p.absorb(&outcome);
                if !outcome.is_success() {
                    return p.done(Err(step_failed(&c.key, &outcome)));
                }
                if let Some(name) = &c.bind {
                    p.bindings.insert(name.clone(), outcome.output.clone());
                }
                p.prev = Some(outcome.output);
            }
            Step::FanOut { branches, bind } => {
                let outcomes = match fan_out(call.invoker, branches, &p, call.args, &context).await
                {
                    Ok(o) => o,
                    Err(f) => return p.done(Err(f)),
                };
                for o in &outcomes {
                    p.absorb(o);
                }
                if let Some((b, o)) = branches
                    .iter()
                    .zip(&outcomes)
                    .find(|(_, o)| !o.is_success())
                {
                    return p.done(Err(step_failed(&b.key, o)));
                }
                for (b, o) in branches.iter().zip(&outcomes) {
                    if let Some(name) = &b.bind {
                        p.bindings.insert(name.clone(), o.output.clone());
                    }
                }
                let array = serde_json::Value::Array(
                    outcomes
                        .into_iter()
                        .map(|o| serde_json::Value::String(o.output))
                        .collect(),
                )
                .to_string();
                if let Some(name) = bind {
                    p.bindings.insert(name.clone(), array.clone());
                }
                p.prev = Some(array);
            }
        }
    }
    let out = p.prev.take().unwrap_or_default();
    p.done(Ok(out))
}

/// Run every branch at once; outcomes come back in branch order. The tasks are aborted if the
/// flow is dropped (a caller gave up).
async fn fan_out(
    invoker: &Invoker,
    branches: &[StepCall],
    p: &Progress,
    args: &[String],
    context: &CallContext,
) -> Result<Vec<Outcome>, Failure> {
    let mut tasks = tokio::task::JoinSet::new();
    for (i, b) in branches.iter().enumerate() {
        let body = p.render(&b.body, args)?;
        let invoker = invoker.clone();
        let key = b.key.clone();
        let context = context.clone();
        tasks.spawn(
            async move {
                let outcome = super::run_nested(
                    &invoker,
                    &context,
                    Via::Composed,
                    &key,
                    Input::Body(body.clone()),
                    &body,
                )
                .await;
                (i, outcome)
            }
            // The branch's span under its flow's, though it runs as a task of its own.
            .in_current_span(),
        );
    }
    let mut slots: Vec<Option<Outcome>> = vec![None; branches.len()];
    while let Some(joined) = tasks.join_next().await {
        match joined {
            Ok((i, outcome)) => slots[i] = Some(outcome),
            Err(e) => {
                return Err(Failure::new(
                    "flow:branch_panicked",
                    format!("a fan-out branch did not finish: {e}"),
                ));
            }
        }
    }
    slots
        .into_iter()
        .zip(branches)
        .map(|(o, b)| {
            o.ok_or_else(|| {
                Failure::new(
                    "flow:branch_panicked",
                    format!("branch {} gave no result", b.key),
                )
            })
        })
        .collect()
}
