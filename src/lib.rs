//! capdir: a catalogue of capabilities for AI agents, kept as data in Git.
//!
//! The pipeline reads top to bottom: rows are read ([`catalogue`], [`row`]) and checked
//! ([`check`]); `build` compiles them into a site; `serve` dispatches calls against it.
//! [`invoke`] runs one row by key through its [`runner`] into an [`outcome`].

pub mod affordance;
pub mod args;
pub mod ask;
pub mod auth;
pub mod breaker;
pub mod build;
pub mod builtins;
pub mod catalogue;
pub mod check;
pub mod contract;
pub mod credential;
pub mod diag;
pub mod dispatch;
pub mod eval;
pub mod flow;
pub mod git;
pub mod history;
pub mod invoke;
pub mod ledger;
pub mod mcp;
pub mod mint;
pub mod openapi;
pub mod outcome;
pub mod projection;
pub mod row;
pub mod rowset;
pub mod runner;
pub mod scaffold;
pub mod search;
pub mod secrets;
pub mod server;
pub mod site;
pub mod snapshot;
pub mod target;
pub mod template;
pub mod token;

/// Threads worth running at once for CPU-bound work: the machine's cores, 1 when unknown.
pub fn cores() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}
