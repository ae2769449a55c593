//! Times one history walk of a catalogue directory: `cargo run --release --example
//! history_walk -- DIR [TIMES]`. For profiling the history step of `capdir build` alone.

#[global_allocator]
static ALLOC: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() {
    let mut args = std::env::args().skip(1);
    let dir = std::path::PathBuf::from(args.next().unwrap_or_else(|| "catalogue".into()));
    let times: usize = args.next().and_then(|n| n.parse().ok()).unwrap_or(1);
    for _ in 0..times {
        let started = std::time::Instant::now();
        let h = capdir::build::history::read(&dir);
        println!(
            "{:>8.1} ms  {} commits, {} files, {} trees from deltas{}",
            started.elapsed().as_secs_f64() * 1e3,
            h.commits_walked,
            h.files.len(),
            h.trees_from_deltas,
            h.missing.map(|m| format!(" ({m})")).unwrap_or_default()
        );
    }
}
