//! The `capdir` command line: everything is in `capdir::cli`; this file picks the allocator.

use std::process::ExitCode;

/// mimalloc rather than glibc's allocator: the dispatcher allocates many small, short-lived
/// buffers across threads (request bodies, JSON, receipts), where glibc's arenas showed up
/// as a tenth of the profile (`_int_malloc`, `_int_free`, `malloc_consolidate`).
#[global_allocator]
static ALLOC: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> ExitCode {
    capdir::cli::run()
}
