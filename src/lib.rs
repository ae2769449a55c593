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
pub mod atomic;
pub mod build;
pub mod check;
pub mod cli;
pub mod dispatch;
pub mod import;
pub mod invoke;
pub mod laps;
pub mod ledger;
pub mod row;
pub mod search;
pub mod serve;
pub mod telemetry;
pub mod trust;
pub mod write;

/// A map for lookups on a hot path (every row, every word): foldhash, seeded anew for each
/// map, instead of SipHash, whose hashing is a large part of reading a site's index back.
/// Keys come from rows, so the seed stays random: a row's author cannot aim at collisions.
pub type FastMap<K, V> = std::collections::HashMap<K, V, foldhash::fast::RandomState>;
/// [`FastMap`]'s set.
pub type FastSet<K> = std::collections::HashSet<K, foldhash::fast::RandomState>;

/// Threads worth running at once for CPU-bound work: the machine's cores, 1 when unknown.
pub fn cores() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

#[cfg(test)]
mod tests {
    /// The tests run in the release profile (README), which turns overflow checks off unless
    /// `Cargo.toml` keeps them on for capdir: an overflow must fail here as it does in a debug
    /// build, or the tests stop checking what they checked.
    #[test]
    fn arithmetic_overflow_fails_in_the_build_the_tests_run() {
        let max = std::hint::black_box(u32::MAX);
        let wrapped = std::panic::catch_unwind(|| max + std::hint::black_box(1));
        assert!(wrapped.is_err(), "u32::MAX + 1 gave {:?}", wrapped.ok());
    }
}
