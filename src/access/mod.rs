//! Who may do what (DESIGN.md §8): who a credential makes the caller, what a capability
//! token's claims allow, and what a caller may do with one row. Pure functions of
//! credentials, claims and rows: nothing here reads a request, a ledger or a clock it is not
//! handed, so the HTTP API, MCP and the CLI decide alike.

pub mod affordance;
pub mod auth;
pub mod duration;
pub mod token;
pub mod watch;
