//! capdir: a catalogue of capabilities for AI agents, kept as data in Git.
//!
//! One folder per stage (ARCHITECTURE.md draws the map): a [`row`] is read and [`check`]ed;
//! [`build`] compiles the rows into a site with a [`search`] index; [`invoke`] runs one row by
//! key; [`access`] says who may; [`import`] makes rows from what already exists (OpenAPI
//! documents, MCP servers); [`dispatch`] is the one path every call takes (the gate, the
//! runner, the receipt in the [`ledger`]); [`write`] makes a row sent over HTTP a Git commit
//! and changes the served site in place; [`serve`] speaks HTTP and MCP; [`cli`] is the
//! command line.

pub mod access;
pub mod build;
pub mod check;
pub mod cli;
pub mod dispatch;
pub mod import;
pub mod invoke;
pub mod ledger;
pub mod row;
pub mod search;
pub mod serve;
pub mod trust;
pub mod write;

/// Threads worth running at once for CPU-bound work: the machine's cores, 1 when unknown.
pub fn cores() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}
