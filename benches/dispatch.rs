//! The CPU a call costs the dispatcher in-process, with its receipts, and no HTTP: an fn row
//! (ECHO, one receipt) beside a three-step flow (HASH_AND_TIMESTAMP, four receipts), 32 calls
//! at once so the ledger commits them in groups as it does under load. The ledger is a SQLite
//! file on /dev/shm when there is one (an fsync there costs no disk wait, so what is timed is
//! the work, not the device), else in a scratch directory. bench/flow.sh measures the same two
//! over HTTP. Run with `cargo bench --bench dispatch`.

use capdir::access::auth::{Caller, Keys};
use capdir::dispatch::{Dispatcher, InvokeRequest, Settings};
use capdir::invoke::InvokerConfig;
use capdir::ledger::SqliteLedger;
use criterion::{Criterion, criterion_group, criterion_main};
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Calls in flight at once.
const AT_ONCE: usize = 32;

fn dispatcher(scratch: &Path, ledger_dir: &Path) -> Dispatcher {
    let site = scratch.join("site");
    capdir::build::run(&capdir::build::Options::new("catalogue", &site)).expect("build");
    let ledger = SqliteLedger::open(&ledger_dir.join("ledger.sqlite")).expect("ledger");
    Dispatcher::new(Settings {
        site,
        ledger: Arc::new(ledger),
        keys: Keys {
            owner: Some("bench-owner".into()),
            token: None,
        },
        open: false,
        audience: "http://127.0.0.1:8080".into(),
        config: InvokerConfig::default(),
        max_inflight: 1024,
        tree_budget: Default::default(),
        approval_ttl: capdir::dispatch::DEFAULT_APPROVAL_TTL,
    })
    .expect("dispatcher")
}

/// `iters` calls of `key`, `AT_ONCE` at a time; the time they took.
async fn run(d: &Dispatcher, key: &str, iters: u64) -> Duration {
    let started = Instant::now();
    let mut left = iters as usize;
    while left > 0 {
        let n = left.min(AT_ONCE);
        left -= n;
        let calls = (0..n).map(|_| {
            d.dispatch(
                &Caller::Owner,
                InvokeRequest {
                    key: key.into(),
                    body: Some("hello from the bench".into()),
                    args: None,
                    repairs: None,
                },
            )
        });
        for done in futures_util::future::join_all(calls).await {
            done.expect("dispatch");
        }
    }
    started.elapsed()
}

fn bench(c: &mut Criterion) {
    let scratch = tempfile::tempdir().expect("tempdir");
    let shm = Path::new("/dev/shm");
    let ledger_dir = if shm.is_dir() {
        tempfile::tempdir_in(shm).expect("tempdir in /dev/shm")
    } else {
        tempfile::tempdir().expect("tempdir")
    };
    eprintln!("ledger in {}", ledger_dir.path().display());
    let d = dispatcher(scratch.path(), ledger_dir.path());
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let mut group = c.benchmark_group("dispatch, 32 at once, receipts in SQLite");
    for key in ["ECHO", "HASH_AND_TIMESTAMP"] {
        group.bench_function(key, |b| {
            b.iter_custom(|iters| rt.block_on(run(&d, key, iters)))
        });
    }
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
