//! How long an invocation takes in-process, with no ledger and no network: an fn row (lookup,
//! argument validation, template, runner, outcome) and a three-step flow of fn rows.
//! Targets: under 20 µs and under 100 µs. Run with `cargo bench --bench invoke`.

use capdir::invoke::rowset::RowSet;
use capdir::invoke::runner::fn_runner::run_fn;
use capdir::invoke::runner::{Call, Environment};
use capdir::invoke::{Input, Invoker, InvokerConfig};
use criterion::{Criterion, criterion_group, criterion_main};
use std::hint::black_box;
use std::path::Path;

fn invoker() -> Invoker {
    let rows = RowSet::from_dir(Path::new("catalogue")).expect("bundled catalogue");
    Invoker::new(
        rows,
        InvokerConfig {
            env: Environment::fixed::<&str, &str>([]),
            ..Default::default()
        },
    )
    .expect("invoker")
}

fn bench(c: &mut Criterion) {
    let inv = invoker();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");

    c.bench_function(
        "fn row SHA256: invoke (validate + template + runner)",
        |b| {
            b.iter(|| {
                let o = rt.block_on(inv.invoke("SHA256", Input::body(black_box("hello world"))));
                assert!(o.is_success());
                o
            })
        },
    );
    c.bench_function("fn row JSON_GET: invoke", |b| {
        b.iter(|| {
            rt.block_on(inv.invoke(
                "JSON_GET",
                Input::body(black_box(r#"user.name|{"user": {"name": "Ada"}}"#)),
            ))
        })
    });
    let callable = inv.rows().get("SHA256").expect("row");
    let args = vec!["hello world".to_string()];
    c.bench_function("fn row SHA256: template + runner only", |b| {
        b.iter(|| {
            run_fn(Call {
                callable,
                args: black_box(&args),
                invoker: &inv,
                context: &Default::default(),
            })
        })
    });
    c.bench_function("flow HASH_AND_TIMESTAMP: 3 fn steps", |b| {
        b.iter(|| {
            let o = rt.block_on(inv.invoke(
                "HASH_AND_TIMESTAMP",
                Input::body(black_box("contract v3 final")),
            ));
            assert!(o.is_success());
            o
        })
    });
    c.bench_function("flow TEXT_STATS: fan-out of 2 fn steps", |b| {
        b.iter(|| {
            rt.block_on(inv.invoke("TEXT_STATS", Input::body(black_box("the quick brown fox"))))
        })
    });
}

criterion_group!(benches, bench);
criterion_main!(benches);
