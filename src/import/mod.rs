//! Rows from what already exists: importers that write `catalogue/KEY.yaml` files a reviewer
//! can read and `capdir check` passes, so a team's existing tools become rows by pull request.

pub mod mcp;
