//! Every integration test but one, as modules of one test binary: each binary links the whole
//! crate, so forty of them cost forty links (issue: a newcomer's first answer in minutes). Run
//! one file's tests with `cargo test --release --test suite FILE::` (for example `browser::`).
//! `tests/invoke_process_env.rs` stays a binary of its own: it sets a process environment
//! variable, which is unsound while other tests' threads read the environment.

mod common;

mod agent_tools;
mod bindings;
mod browser;
mod build_incremental;
mod build_site;
mod check_base;
mod check_cli;
mod check_fixtures;
mod check_fuzz;
mod cli_invoke;
mod composition;
mod connections;
mod deployment;
mod fingerprint;
mod hardening;
mod import_mcp;
mod import_openapi;
mod import_real_apis;
mod invoke_agent;
mod invoke_flow;
mod invoke_fn;
mod invoke_http;
mod invoke_named;
mod invoke_props;
mod layout;
mod ledger;
mod mcp;
mod mcp_sdk;
mod oauth;
mod openapi;
mod otel;
mod readme;
mod receipt_log;
mod receipt_page;
mod row_schema;
mod scale_out;
mod schemathesis;
mod search;
mod secret_scan;
mod server;
mod server_crash;
mod server_json;
mod signed_builds;
mod static_files;
mod templates;
mod tokens;
mod url_agent;
mod watcher;
mod watcher_page;
mod write_api;
